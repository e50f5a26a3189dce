"""Shared helpers for the site-profile / CLI / generator tests.

* every test runs with an empty user search path (no ~/.config/hpcprov/sites, no
  HPCPROV_SITES_PATH, no HPCPROV_SITE), so only the bundled profiles and the ones a test
  writes under tmp_path are seen;
* :func:`cli` runs ``hpcprov.app.cli.main`` in-process and returns (rc, stdout, stderr);
  :func:`cli_subprocess` runs the real console script;
* :class:`Stubs` is a bin folder of fake cluster tools (module, srun, conda, curl, ...)
  that record their argv, so generated scripts can really be run with bash.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest
import this_checkout  # noqa: F401 - before hpcprov: stops unless it loads from this checkout

from hpcprov.app.cli import main
from hpcprov.core.commands import Completed

# The test modules import these helpers as ``hpcprov_tests`` (tests/ is not a package, and
# tests/testbed/ has a conftest.py of its own, so the plain name ``conftest`` is ambiguous).
sys.modules.setdefault("hpcprov_tests", sys.modules[__name__])

REPO = Path(__file__).resolve().parent.parent
# the profiles written from the seed tutorials; more bundled profiles may exist (testbed)
SEED_SITES = ["cc", "local", "neuron", "sockeye", "sockeye-slurm", "taurus", "technion"]
# every profile in the repository's sites/ folder (what a wheel ships)
BUNDLED_DIR = REPO / "sites"
BUNDLED = sorted(p.stem for p in BUNDLED_DIR.glob("*.yaml"))


@pytest.fixture(autouse=True)
def _isolated_search_path(request: pytest.FixtureRequest,
                          tmp_path_factory: pytest.TempPathFactory,
                          monkeypatch: pytest.MonkeyPatch) -> None:
    """No profile from the developer's machine leaks into a test (testbed tests excepted)."""
    if "testbed" in Path(str(request.node.path)).parts:
        return
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path_factory.mktemp("xdg")))
    monkeypatch.delenv("HPCPROV_SITES_PATH", raising=False)
    monkeypatch.delenv("HPCPROV_SITE", raising=False)


# --------------------------------------------------------------------------- CLI


@dataclass
class Result:
    rc: int
    out: str
    err: str

    @property
    def err_lines(self) -> list[str]:
        return [line for line in self.err.splitlines() if line.strip()]


def process_gone(pid: int, within_s: float = 10) -> bool:
    """Whether process ``pid`` runs nothing any more (gone, or a zombie its new parent
    reaps), polled for a moment: a killed process closes its files before it is a zombie."""
    deadline = time.monotonic() + within_s
    while True:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1][:1]
        except (OSError, IndexError):
            return True
        if state in ("Z", "X") or time.monotonic() > deadline:
            return state in ("Z", "X")
        time.sleep(0.02)


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> Result:
    """Run ``hpcprov ARGS`` in-process."""
    capsys.readouterr()
    rc = main(list(args))
    out, err = capsys.readouterr()
    return Result(rc, out, err)


def hpcprov_argv() -> list[str]:
    exe = shutil.which("hpcprov")
    return [exe] if exe else [sys.executable, "-m", "hpcprov"]


def cli_subprocess(*args: str, env: dict[str, str] | None = None,
                   cwd: Path | None = None) -> Result:
    """Run the real ``hpcprov`` command."""
    proc = subprocess.run([*hpcprov_argv(), *args], capture_output=True, text=True,
                          env=env, cwd=cwd, timeout=60)
    return Result(proc.returncode, proc.stdout, proc.stderr)


def assert_one_line_error(res: Result, rc: int = 2, *needles: str) -> str:
    """Exit status ``rc``, exactly one non-empty stderr line, no traceback."""
    assert res.rc == rc, (res.rc, res.out, res.err)
    assert "Traceback" not in res.err + res.out
    assert len(res.err_lines) == 1, res.err
    line = res.err_lines[0]
    for needle in needles:
        assert needle in line, (needle, line)
    return line


# ------------------------------------------------------------------ site draft


DRAFT_DATA = Path(__file__).parent / "data" / "draft"


def recorded(name: str) -> str:
    """A recorded scheduler output (tests/data/draft) without its header (the comment
    lines naming its source)."""
    lines = DRAFT_DATA.joinpath(name).read_text(encoding="utf-8").splitlines()
    while lines and lines[0].startswith("#"):
        lines.pop(0)
    return "\n".join(lines) + "\n"


class FakeRunner:
    """A draft's runner answering from text (or a Completed); anything else is not found.
    ``ran``: every command asked, in order."""

    def __init__(self, answers: dict[str, str] | dict[str, str | Completed]) -> None:
        self.answers: dict[str, str | Completed] = dict(answers)
        self.ran: list[str] = []

    def __call__(self, argv: Sequence[str], label: str | None = None,
                 extra_env: dict[str, str] | None = None) -> Completed:
        key = " ".join(argv)
        self.ran.append(key)
        answer = self.answers.get(key)
        if answer is None:
            return Completed(127, "", f"{argv[0]}: command not found on PATH")
        return answer if isinstance(answer, Completed) else Completed(0, answer, "")


# ------------------------------------------------------------------ profiles


def write_profile(directory: Path, name: str, text: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{name}.yaml"
    path.write_text(text, encoding="utf-8")
    return path


# ---------------------------------------------------------- shell text helpers


SHIM_LINE = re.compile(r' bash -c "\$hpcprov_rank" hpcprov-rank '
                       r'(?:(?:\'[^\']*\'|"[^"]*"|\S)+ )*?-- ')


def unshimmed(line: str) -> str:
    """``line`` without the rank contract's words (``bash -c "$hpcprov_rank" hpcprov-rank
    ... --``): the line a seed tutorial has a user type, to compare with."""
    return SHIM_LINE.sub(" ", line, count=1)


def unshimmed_argv(argv: Sequence[str]) -> list[str]:
    """An argv (a launch's JSON ``argv``) without the rank contract's words."""
    out = list(argv)
    for i in range(len(out) - len(SHIM) + 1):
        # as written ("$hpcprov_rank"), or as a starter got it (the shim's text)
        if out[i:i + 2] == ["bash", "-c"] and out[i + 3] == "hpcprov-rank" \
                and "--" in out[i:]:
            return out[:i] + out[out.index("--", i) + 1:]
    return out


def lines_starting(text: str, prefix: str, shim: bool = False) -> list[str]:
    """The lines starting with ``prefix``; launch lines without the rank contract's words
    unless ``shim`` (tests/test_rank_contract.py checks those)."""
    found = [line.strip() for line in text.splitlines() if line.strip().startswith(prefix)]
    return found if shim else [unshimmed(line) for line in found]


def one_line_starting(text: str, prefix: str, shim: bool = False) -> str:
    found = lines_starting(text, prefix, shim)
    assert len(found) == 1, (prefix, found, text)
    return found[0]


SHIM = ["bash", "-c", "$hpcprov_rank", "hpcprov-rank"]


def words(line: str, shim: bool = False) -> list[str]:
    """The shell words of one command line (quotes removed, nothing expanded). Where the
    ranks start through the rank contract (``bash -c "$hpcprov_rank" hpcprov-rank SIZE
    PER_NODE [WRAPPER...] --``), those words are left out (``shim``: kept), so a line
    compares with the line a seed tutorial has a user type."""
    out = shlex.split(line, comments=False, posix=True)
    if shim:
        return out
    for i in range(len(out) - len(SHIM) + 1):
        if out[i:i + len(SHIM)] == SHIM and "--" in out[i:]:
            return out[:i] + out[out.index("--", i) + 1:]
    return out


def contains_run(seq: Sequence[str], run: Sequence[str]) -> bool:
    """True when ``run`` occurs contiguously in ``seq``."""
    n = len(run)
    return any(list(seq[i : i + n]) == list(run) for i in range(len(seq) - n + 1))


def directives(script: str, magic: str = "#SBATCH") -> dict[str, str | None]:
    """``#SBATCH --name=value`` lines as {name: value}, parsed the way sbatch reads them."""
    out: dict[str, str | None] = {}
    for line in script.splitlines():
        if not line.startswith(magic + " "):
            continue
        for word in shlex.split(line[len(magic) + 1 :]):
            name, sep, value = word.lstrip("-").partition("=")
            out[name] = value if sep else None
    return out


def pbs_directives(script: str) -> list[list[str]]:
    return [shlex.split(line[len("#PBS ") :]) for line in script.splitlines()
            if line.startswith("#PBS ")]


def body_lines(script: str) -> list[str]:
    """Non-empty lines that are not comments (the commands bash runs)."""
    return [line for line in script.splitlines()
            if line.strip() and not line.lstrip().startswith("#")]


def bash_syntax_ok(text: str, tmp_path: Path, name: str = "script.sh") -> None:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    proc = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def shellcheck(text: str, tmp_path: Path, name: str = "script.sh",
               exclude: Iterable[str] = ()) -> subprocess.CompletedProcess[str]:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    cmd = ["shellcheck", "-S", "warning", "-s", "bash"]
    excluded = list(exclude)
    if excluded:
        cmd += ["-e", ",".join(excluded)]
    return subprocess.run([*cmd, str(path)], capture_output=True, text=True)


needs_shellcheck = pytest.mark.skipif(shutil.which("shellcheck") is None,
                                      reason="shellcheck not installed (CI installs it)")


# ------------------------------------------------------------------- stubs

_LOG = r"""#!/bin/bash
# hpcprov test stub: records its argv (NUL-separated, record ends with \036), succeeds.
{ printf '%s\0' "${0##*/}" "$@"; printf '\036'; } >> "${STUB_LOG:-/dev/null}"
"""

_VENV = r"""
if [ "${1-}" = "-m" ] && [ "${2-}" = "venv" ] || [ "${0##*/}" = virtualenv ] \
   || { [ "${0##*/}" = uv ] && [ "${1-}" = venv ]; }; then
  d="${!#}"
  mkdir -p "$d/bin"
  echo "# stub venv activate" > "$d/bin/activate"
  cp "$0" "$d/bin/python"
fi
exit 0
"""

STUB_INSTALLER = r"""#!/bin/bash
# stub Miniconda installer: honours -p PREFIX
p=
while [ "$#" -gt 0 ]; do
  if [ "$1" = "-p" ]; then p="$2"; shift; fi
  shift
done
mkdir -p "$p/bin" "$p/etc/profile.d"
printf '#!/bin/bash\nexit 0\n' > "$p/bin/conda"
chmod +x "$p/bin/conda"
echo "# stub conda.sh" > "$p/etc/profile.d/conda.sh"
"""

_CURL = r"""
out=
while [ "$#" -gt 0 ]; do
  if [ "$1" = "-o" ]; then out="$2"; shift; fi
  shift
done
if [ -n "$out" ]; then
  cat > "$out" <<'INSTALLER_EOF'
""" + STUB_INSTALLER + r"""INSTALLER_EOF
fi
exit 0
"""


def trust_stub_installer(sites: Path, name: str) -> bool:
    """Where bundled site NAME pins its conda installer's SHA-256, write a profile of the
    same name into ``sites`` (to put first on HPCPROV_SITES_PATH) that extends it with the
    SHA-256 of the stub installer the stub curl downloads; True when it did."""
    from hpcprov.site.profiles import load_site

    conda = load_site(name).python.conda
    if not conda.installer_sha256:
        return False
    digest = hashlib.sha256(STUB_INSTALLER.encode()).hexdigest()
    write_profile(sites, name, f"extends: {BUNDLED_DIR}/{name}.yaml\nname: {name}\n"
                  f"python:\n  conda:\n    installer_sha256: {digest}\n")
    return True

STUB_NAMES = [
    "module", "ml", "srun", "salloc", "sbatch", "squeue", "scontrol", "qsub", "qstat",
    "mpirun", "mpiexec", "jsrun", "lrun", "flux", "horovodrun", "torchrun", "conda", "pip",
    "pip3", "wget",
    "git",
    "singularity", "apptainer", "enroot", "nvidia-smi", "hpcprov",
    "tar", "patch", "cmake", "make", "mpicc",
]

# Steps whose success depends on what real tools print (horovodrun -cb, a real allreduce):
# the stub runs skip them; tests/test_provision_real.py runs them for real.
REAL_ONLY_STEPS = ("check-build", "prove-allreduce")


def stub_steps(script: str) -> list[str]:
    """The setup script's steps that can run against the stub tools, in order."""
    m = re.search(r"^# Steps: (.*)$", script, flags=re.M)
    assert m, "no '# Steps:' line in the setup script"
    return [s for s in m.group(1).split() if s not in REAL_ONLY_STEPS]


@dataclass
class Stubs:
    """A bin folder of fake tools plus a HOME and a working directory, all under tmp_path."""

    root: Path
    bin: Path
    home: Path
    work: Path
    log: Path

    @classmethod
    def create(cls, root: Path, failing: Iterable[str] = ()) -> Stubs:
        stubs = cls(root, root / "stubbin", root / "home", root / "work", root / "stub.log")
        for d in (stubs.bin, stubs.home, stubs.work):
            d.mkdir(parents=True, exist_ok=True)
        scripts = {name: _LOG + "exit 0\n" for name in STUB_NAMES}
        for name in ("python", "python3", "virtualenv", "uv"):
            scripts[name] = _LOG + _VENV
        scripts["curl"] = _LOG + _CURL
        # the build uses the cmake on PATH only when it is 3.x (else it installs cmake<4)
        scripts["cmake"] = _LOG + 'echo "cmake version 3.25.1"\n'
        # nvcc on PATH leads to a CUDA toolkit elsewhere, as a wrapper does (hpcprov_cuda_home)
        toolkit = root / "cuda"
        scripts["nvcc"] = _LOG + ('case "$*" in *--dryrun*) echo "#\\$ TOP=' + str(toolkit)
                                  + '/bin/.." >&2;; *) echo "Cuda compilation tools, release '
                                  '13.0, V13.0.88";; esac\n')
        for name in failing:
            scripts[name] = _LOG + "exit 1\n"
        (toolkit / "bin").mkdir(parents=True, exist_ok=True)
        for name, text in [*scripts.items(), ("../cuda/bin/nvcc", scripts["nvcc"])]:
            path = stubs.bin / name
            path.write_text(text, encoding="utf-8")
            path.chmod(0o755)
        return stubs

    @property
    def env(self) -> dict[str, str]:
        return {
            "PATH": f"{self.bin}:/usr/bin:/bin",
            "HOME": str(self.home),
            "USER": "tester",
            "LANG": "C.UTF-8",
            "STUB_LOG": str(self.log),
        }

    def run(self, script: str, *args: str, name: str = "script.sh",
            extra_env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        """Write ``script`` to the work folder and run it with bash."""
        path = self.work / name
        path.write_text(script, encoding="utf-8")
        env = {**self.env, **(extra_env or {})}
        return subprocess.run(["bash", str(path), *args], capture_output=True, text=True,
                              env=env, cwd=self.work, timeout=60)

    def reset_log(self) -> None:
        self.log.unlink(missing_ok=True)

    def calls(self, tool: str | None = None) -> list[list[str]]:
        """Recorded invocations, each [tool, arg, ...]."""
        if not self.log.exists():
            return []
        records = self.log.read_bytes().decode("utf-8", "surrogateescape").split("\x1e")
        out = [r.split("\0")[:-1] for r in records if r]
        return [c for c in out if tool is None or c[0] == tool]


@pytest.fixture(scope="session")
def cmake4(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The bin folder of the real CMake 4 from the package index (a GPU node's PATH had one;
    Horovod's gloo cannot configure with it, so the build must use a CMake 3 of its own)."""
    folder = tmp_path_factory.mktemp("cmake4")
    proc = subprocess.run([sys.executable, "-m", "pip", "install", "--no-compile", "--no-deps",
                           "--target", str(folder), "cmake>=4,<5"],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return folder / "cmake" / "data" / "bin"


@pytest.fixture(scope="session")
def wheelhouse(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The Horovod wheelhouse the real setups share (CI: the one .ci/run filled)."""
    given = os.environ.get("HPCPROV_TEST_WHEELHOUSE")
    return Path(given) if given else tmp_path_factory.mktemp("wheelhouse")


def setup_local(target: Path, wheelhouse: Path) -> Path:
    """Run `hpcprov setup --site local --prefix TARGET` for real (a wheelhouse hit)."""
    env = {**os.environ, "HPCPROV_WHEELHOUSE": str(wheelhouse)}
    proc = subprocess.run([*hpcprov_argv(), "setup", "--site", "local", "--prefix",
                           str(target)], capture_output=True, text=True, env=env, timeout=3600)
    assert proc.returncode == 0, proc.stderr
    return target


@pytest.fixture(scope="session")
def local_prefix(tmp_path_factory: pytest.TempPathFactory, wheelhouse: Path) -> Path:
    """A provisioned `local` prefix for tests that run jobs in it without changing it."""
    return setup_local(tmp_path_factory.mktemp("validate") / "prefix", wheelhouse)


@pytest.fixture
def stubs(tmp_path: Path) -> Stubs:
    return Stubs.create(tmp_path / "sandbox")


PWNED = re.compile(r"^PWNED\w*$")


def pwned_files(*roots: Path) -> list[Path]:
    """Files an injected `touch PWNED...` would have created."""
    found: list[Path] = []
    for root in roots:
        if root.is_dir():
            found += [p for p in root.rglob("*") if PWNED.match(p.name)]
    found += [p for p in Path.cwd().glob("PWNED*")]
    return found


@pytest.fixture
def repo_root() -> Path:
    return REPO


HEAVY_FOR_PLANNING = ("yaml", "pydantic", "pydantic_core", "torch")


def planned_in_subprocess(argv: list[str], env: dict[str, str]) -> tuple[list[str], str]:
    """Run ``hpcprov ARGV`` (in-process ``main``) in a fresh interpreter: (the heavy top-level
    modules of HEAVY_FOR_PLANNING it imported, what it printed); it must exit 0."""
    probe = (
        "import sys, json, contextlib, io\n"
        "from hpcprov.app.cli import main\n"
        "out = io.StringIO()\n"
        "with contextlib.redirect_stdout(out):\n"
        f"    rc = main({argv!r})\n"
        "assert rc == 0, rc\n"
        f"heavy = sorted({{m.split('.')[0] for m in sys.modules}} & set({HEAVY_FOR_PLANNING!r}))\n"
        "print(json.dumps({'heavy': heavy, 'out': out.getvalue()}))\n")
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    found = json.loads(proc.stdout)
    return found["heavy"], found["out"]


def env_without_user_profiles(tmp_path: Path) -> dict[str, str]:
    """os.environ for a subprocess, with the user search path pointed into tmp_path."""
    env = dict(os.environ)
    env.pop("HPCPROV_SITES_PATH", None)
    env.pop("HPCPROV_SITE", None)
    env["XDG_CONFIG_HOME"] = str(tmp_path / "xdg-sub")
    return env


@pytest.fixture
def user_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty folder of user profiles, first on the search path (HPCPROV_SITES_PATH)."""
    d = tmp_path / "sites"
    d.mkdir()
    monkeypatch.setenv("HPCPROV_SITES_PATH", str(d))
    return d


def emulated_scheduler(tmp_path: Path, emulator: Path, tools: Sequence[str],
                       state_var: str, name: str) -> dict[str, str]:
    """An environment whose PATH has ``tools`` as symlinks to a scheduler emulator (the
    PBS or LSF one in tests/), its state kept in tmp_path/NAME-state."""
    bindir = tmp_path / f"{name}-bin"
    bindir.mkdir()
    for tool in tools:
        (bindir / tool).symlink_to(emulator)
    return {**os.environ, "PATH": f"{bindir}{os.pathsep}{os.environ['PATH']}",
            state_var: str(tmp_path / f"{name}-state")}


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "last: run after every other test (it waits on a "
                            "build CI runs beside the tests, e.g. .ci/tf-variant)")
    config.addinivalue_line("markers", "ranks: starts real ranks on this host (rendezvous "
                            "ports 29500 and up): one such test at a time (the host group)")
    # pytest-xdist's own mark (registered here too, for a run without xdist installed)
    config.addinivalue_line("markers", "xdist_group(name): run in the worker of that group")


# ---- two workers (CI: `pytest -n 2 --dist loadgroup`, pytest-xdist) -------------------------
#
# What this machine has only once goes to one worker, where its tests run one after the other
# (an xdist group each); the unit tests go to whichever worker is free:
# * "testbed": the testbed's one cluster (tests marked `testbed` or using its fixture); its jobs
#   run in the nodes' own network namespaces;
# * "host": real jobs on this host's network, whose rendezvous ports (29500 and up, the
#   profiles' own) two workers would take at once, and the real setups with their session
#   fixtures (a provisioned prefix, CMake 4 from the index): tests marked `slow` or `ranks`,
#   or using one of HOST_FIXTURES.
# Without xdist the groups do nothing.
TESTBED_FIXTURES = frozenset({"testbed"})
HOST_FIXTURES = frozenset({"local_prefix", "cmake4"})


def worker_group(item: pytest.Item) -> str | None:
    """The xdist group ``item`` runs in, or None (any worker): see above."""
    uses = set(getattr(item, "fixturenames", ()))
    if item.get_closest_marker("testbed") is not None or uses & TESTBED_FIXTURES:
        return "testbed"
    if any(item.get_closest_marker(m) is not None for m in ("slow", "ranks")) \
            or uses & HOST_FIXTURES:
        return "host"
    return None


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the groups
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tests marked ``last`` go after the others, in their order: what they wait for (a
    build .ci/run started beside the tests) is then most likely done. Each test that has a
    worker group is marked with it (read by ``--dist loadgroup``)."""
    items.sort(key=lambda item: item.get_closest_marker("last") is not None)
    for item in items:
        group = worker_group(item)
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))


# ---- a second real user (tests/test_second_user.py, tests/test_edf_file.py) ----------------

def free_id() -> int:
    """A user and group id nobody has (a user with no account and no group: its files are its
    own, nobody else's)."""
    import grp
    import pwd

    for n in range(64900, 65500):
        try:
            pwd.getpwuid(n)
            continue
        except KeyError:
            pass
        try:
            grp.getgrgid(n)
        except KeyError:
            return n
    raise RuntimeError("no free user id in 64900-65499")


@pytest.fixture
def area() -> Iterator[Path]:
    """A folder every user can reach (pytest's own tmp folder is root's alone)."""
    root = Path(tempfile.mkdtemp(prefix="hpcprov-area-"))
    root.chmod(0o755)
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


# ---- a validation with stub scheduler commands (tests/test_interrupts.py, test_job_ids.py) ----

def provisioned_prefix(root: Path) -> Path:
    """ROOT/env, a prefix that reads as provisioned (a manifest) whose venv's activate puts
    its bin/ first on PATH (a test may put a stub python there)."""
    prefix = root / "env"
    (prefix / ".hpcprov").mkdir(parents=True)
    (prefix / ".hpcprov" / "manifest.json").write_text("{}")
    bin_ = prefix / "venvs" / "horovod" / "bin"
    bin_.mkdir(parents=True)
    (bin_ / "activate").write_text(f'export PATH="{bin_}:$PATH"\n')
    return prefix


def stub_commands(folder: Path, scripts: dict[str, str]) -> dict[str, str]:
    """Each script of ``scripts`` made an executable named for the command it stands for, in
    ``folder``; the environment that finds them first (STUB_DIR: the folder)."""
    folder.mkdir()
    for name, text in scripts.items():
        (folder / name).write_text(text)
        (folder / name).chmod(0o755)
    return {**os.environ, "PATH": f"{folder}:{os.environ['PATH']}", "STUB_DIR": str(folder)}


def validation_until(prefix: Path, tmp_path: Path, env: dict[str, str], marker: Path,
                     what: str) -> subprocess.Popen[str]:
    """`hpcprov validate` of testbed's env check, a job of its own, in PREFIX, started with
    ``env`` (its history under tmp_path), once ``marker`` exists (the test fails, naming
    ``what``, when the run ends first or a minute passes)."""
    env = {**env, "HPCPROV_HISTORY": str(tmp_path / "history")}
    proc = subprocess.Popen(
        [*hpcprov_argv(), "validate", "--site", "testbed", "--env", str(prefix),
         "--checks", "env", "--nodes", "1", "--allocation", "per-job",
         "--workdir", str(tmp_path / "run")],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    deadline = time.monotonic() + 60
    while not marker.is_file():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"{what}: {proc.communicate()}")
        time.sleep(0.05)
    return proc
