"""The nodes' architecture and where packages come from (issue 45, defects 14-17 and a
framework's version in 18): the conda installer and torch's wheels chosen or checked per
``partitions.*.arch``, Horovod's build inputs against what the profile installs, packages
from pip's own index (not the framework's), build-only variables scoped to the install, the
site's env in every setup step, the proxy where it works, and the site's env reaching the
ranks that mpirun starts."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from hpcprov_tests import Result, assert_one_line_error, cli, write_profile

from hpcprov.provision.plan import Where, build_plan, render_script
from hpcprov.provision.plan_lint import lint_plan
from hpcprov.site.profiles import load_site

CONDA = "python:\n  backend: conda\n  conda:\n    channels: [conda-forge]\n"


def _site(tmp_path: Path, text: str, name: str = "a") -> Path:
    """A profile of its own (nothing inherited: no framework, no partition), ``text`` after
    its first five lines; one x86_64 partition where ``text`` names none."""
    head = (f"name: {name}\nscheduler: none\nlaunchers: {{mpirun: {{kind: mpirun}}}}\n"
            "default_launcher: mpirun\n")
    if "modules:" not in text:
        head += "modules: {system: none}\n"
    if "partitions:" not in text:
        head += _partitions("x86_64")
    return write_profile(tmp_path / "sites", name, head + text)


NO_HOROVOD = "horovod: {source: none}\n"


def _partitions(*arches: str, gpus: int = 0) -> str:
    """One partition per arch (the first the default), each with ``gpus`` NVIDIA GPUs."""
    text = "partitions:\n"
    for i, arch in enumerate(arches):
        text += (f"  p{i}:\n    cores_per_node: 8\n    arch: {arch}\n"
                 f"    gpus: {{count: {gpus}}}\n" + ("    default: true\n" if i == 0 else ""))
    return text


def _warnings(res: Result) -> list[str]:
    return [ln for ln in res.err_lines if ln.startswith("hpcprov: warning:")]


def _run_step(tmp_path: Path, profile: Path, step: str, stubs: dict[str, str],
              runs_on: Where = "login") -> subprocess.CompletedProcess[str]:
    """Run one step's function of the rendered setup.sh, with stub commands first on the
    PATH (each records its arguments and environment under $RECORD)."""
    prefix = tmp_path / "p"
    folder = tmp_path / "stubs"
    folder.mkdir(exist_ok=True)
    for name, body in stubs.items():
        (folder / name).write_text("#!/bin/bash\n" + body)
        (folder / name).chmod(0o755)
    activate = prefix / "venvs" / "horovod" / "bin" / "activate"
    activate.parent.mkdir(parents=True, exist_ok=True)
    activate.write_text(f'PATH="{folder}:$PATH"\n')
    (tmp_path / "record").mkdir(exist_ok=True)
    plan = build_plan(load_site(str(profile)), str(prefix), runs_on=runs_on)
    head = render_script(plan).split("\nHPCPROV_STEPS=(")[0]
    (tmp_path / "run.sh").write_text(f"{head}\nstep_{step.replace('-', '_')}\n")
    return subprocess.run(["bash", str(tmp_path / "run.sh")], capture_output=True, text=True,
                          env={"PATH": f"{folder}:/usr/bin:/bin", "HOME": str(tmp_path),
                               "RECORD": str(tmp_path / "record")}, cwd=tmp_path, timeout=60)


# a stub's body: its arguments, one a line, each call's ended by ==, and its environment
RECORDS = ('printf "%s\\n" "$@" == >> "$RECORD/$(basename "$0").argv"\n'
           'env > "$RECORD/$(basename "$0").env"\n')


# ------------------------------------------------ 14. the architecture is a fact the tool uses


@pytest.mark.parametrize("arch", ["aarch64", "ppc64le"])
def test_a_conda_profile_downloads_the_installer_of_its_nodes_architecture(
        tmp_path: Path, arch: str) -> None:
    profile = _site(tmp_path, _partitions(arch, arch) + NO_HOROVOD + CONDA)
    proc = _run_step(tmp_path, profile, "download-installer",
                     {"curl": RECORDS + 'touch "${@: -2:1}"\n'})
    assert proc.returncode == 0, proc.stderr
    (url,) = [w for w in (tmp_path / "record" / "curl.argv").read_text().splitlines()
              if w.startswith("https://")]
    assert url == f"https://repo.anaconda.com/miniconda/Miniconda3-latest-Linux-{arch}.sh"
    assert (tmp_path / "p" / "downloads" / f"Miniconda3-latest-Linux-{arch}.sh").is_file()


def test_a_mixed_site_builds_for_its_default_partition_and_warns_of_the_others(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    profile = _site(tmp_path, _partitions("aarch64", "x86_64") + NO_HOROVOD + CONDA)
    plan = build_plan(load_site(str(profile)), "/p")
    assert "Miniconda3-latest-Linux-aarch64.sh" in plan.variables["INSTALLER"]
    res = cli(capsys, "site", "check", str(profile))
    assert res.rc == 0, res.err
    (warned,) = _warnings(res)
    line = profile.read_text().splitlines().index("    arch: x86_64") + 1
    assert f"{profile}:{line}:" in warned and "partitions.p1.arch" in warned
    assert "aarch64" in warned and "profile of their own" in warned


@pytest.mark.parametrize(("key", "value", "needle"), [
    ("installer_url", "https://repo.anaconda.com/miniconda/Miniconda3-latest-Linux-x86_64.sh",
     "is for x86_64"),
    ("mirror_url", "https://mirror.example/Miniforge3-24.9.2-0-Linux-ppc64le.sh",
     "is for ppc64le"),
    ("installer_url", "https://repo.anaconda.com/miniconda/Miniconda3-latest-MacOSX-arm64.sh",
     "not a Linux installer"),
])
def test_an_installer_of_another_architecture_is_refused_at_its_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], key: str, value: str,
        needle: str) -> None:
    profile = _site(tmp_path, _partitions("aarch64") + NO_HOROVOD + CONDA
                    + f"    {key}: {value}\n")
    res = cli(capsys, "site", "check", str(profile))
    line = len(profile.read_text().splitlines())
    assert_one_line_error(res, 2, f"{profile}:{line}:", f"python.conda.{key}", needle,
                          "Linux-aarch64")
    fixed = _site(tmp_path, _partitions("aarch64") + NO_HOROVOD + CONDA + f"    {key}: "
                  "https://x.example/Miniforge3-24.9.2-0-Linux-aarch64.sh\n", "b")
    assert cli(capsys, "site", "check", str(fixed)).rc == 0


PYTORCH = "  frameworks:\n    pytorch:\n      version: '2.5.1'\n"


@pytest.mark.parametrize(("arch", "more", "key", "needle"), [
    ("aarch64", "", "pytorch", "PyPI's torch for aarch64 is a CPU-only build"),
    ("x86_64", "      index_url: https://download.pytorch.org/whl/cpu\n", "index_url",
     "CPU-only builds"),
    ("x86_64", "      packages: [torch==2.5.1+cpu]\n", "packages", "torch==2.5.1+cpu"),
    ("ppc64le", "", "pytorch", "torch wheel for ppc64le"),
])
def test_a_cpu_only_torch_on_a_gpu_partition_is_warned_at_its_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], arch: str, more: str, key: str,
        needle: str) -> None:
    profile = _site(tmp_path, _partitions(arch, gpus=4) + "python:\n" + PYTORCH + more
                    + "horovod: {gpu_operations: nccl}\n")
    res = cli(capsys, "site", "check", str(profile))
    assert res.rc == 0, res.err
    (warned,) = _warnings(res)
    lines = profile.read_text().splitlines()
    line = next(i for i, ln in enumerate(lines, 1) if ln.strip().startswith(f"{key}:"))
    assert f"{profile}:{line}:" in warned and needle in warned and "p0" in warned


def test_torch_from_a_gpu_index_on_aarch64_is_not_warned(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    profile = _site(tmp_path, _partitions("aarch64", gpus=4) + "python:\n" + PYTORCH
                    + "      index_url: https://download.pytorch.org/whl/cu128\n"
                    + "horovod: {gpu_operations: nccl}\n")
    res = cli(capsys, "site", "check", str(profile))
    assert res.rc == 0 and not _warnings(res), res.err


def test_horovod_built_with_a_framework_the_profile_does_not_install_is_warned(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A warning, not an error: a draft leaves the frameworks a question, and passes."""
    profile = _site(tmp_path, "python:\n  packages: [numpy]\n"
                    "horovod:\n  frameworks: [tensorflow, pytorch]\n")
    res = cli(capsys, "site", "check", str(profile))
    assert res.rc == 0, res.err
    missing = _warnings(res)
    line = len(profile.read_text().splitlines())
    assert len(missing) == 2 and all(f"{profile}:{line}:" in w for w in missing)
    assert "horovod.frameworks" in missing[1] and "installs no torch" in missing[1]
    assert "python.frameworks.pytorch" in missing[1] and "tensorflow" in missing[0]
    # torch from the site's module (a venv that sees it) and tensorflow from pip
    module = _site(tmp_path, "modules:\n  build: {load: [pytorch/2.5]}\n"
                   "  runtime: {load: [pytorch/2.5]}\n"
                   "python:\n  venv: {system_site_packages: true}\n  frameworks:\n"
                   "    pytorch: {version: '2.5.1', installer: module, module: pytorch/2.5}\n"
                   "  packages: [tensorflow-cpu==2.16.1]\n"
                   "horovod:\n  frameworks: [tensorflow, pytorch]\n", "m")
    res = cli(capsys, "site", "check", str(module))
    assert res.rc == 0 and not _warnings(res), res.err


def test_a_cpu_only_horovod_on_gpu_partitions_is_warned(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    torch = "python:\n" + PYTORCH + "      index_url: https://download.pytorch.org/whl/cu128\n"
    profile = _site(tmp_path, _partitions("x86_64", gpus=4) + torch)
    res = cli(capsys, "site", "check", str(profile))
    assert res.rc == 0, res.err
    (warned,) = _warnings(res)
    assert "horovod" in warned and "CPU-only" in warned and "gpu_operations: nccl" in warned
    fixed = _site(tmp_path, _partitions("x86_64", gpus=4) + torch
                  + "horovod: {gpu_operations: nccl}\n", "b")
    assert not _warnings(cli(capsys, "site", "check", str(fixed)))


# ------------------------------------------------ 15. packages from where they live


def test_packages_come_from_pips_own_index_and_the_framework_from_its_own(
        tmp_path: Path) -> None:
    rocm = "https://download.pytorch.org/whl/rocm6.2"
    profile = _site(tmp_path, "python:\n  venv: {installer: pip}\n" + PYTORCH
                    + f"      index_url: {rocm}\n  packages: [mpi4py, numpy]\n")
    proc = _run_step(tmp_path, profile, "install-frameworks", {"python": RECORDS})
    assert proc.returncode == 0, proc.stderr
    text = (tmp_path / "record" / "python.argv").read_text()
    first, second = [run.splitlines() for run in text.split("==\n") if "install" in run]
    assert first[first.index("--index-url") + 1] == rocm and "torch==2.5.1" in first
    assert "mpi4py" not in first
    assert {"mpi4py", "numpy"} <= set(second) and "--index-url" not in second


def test_build_only_variables_are_set_for_the_install_alone(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    profile = _site(tmp_path, "python:\n  venv: {installer: pip}\n  packages: [mpi4py]\n"
                    "  install_env: {MPICC: '$HOME/bin/mpicc -shared', PIP_NO_BINARY: mpi4py}\n")
    proc = _run_step(tmp_path, profile, "install-frameworks",
                     {"python": RECORDS, "after": 'env > "$RECORD/after.env"\n'})
    assert proc.returncode == 0, proc.stderr
    env = (tmp_path / "record" / "python.env").read_text().splitlines()
    assert f"MPICC={tmp_path}/bin/mpicc -shared" in env and "PIP_NO_BINARY=mpi4py" in env
    # gone once the step returns, and never in the jobs or PREFIX/activate
    (tmp_path / "run.sh").write_text((tmp_path / "run.sh").read_text() + "after\n")
    subprocess.run(["bash", str(tmp_path / "run.sh")], env={
        "PATH": f"{tmp_path / 'stubs'}:/usr/bin:/bin", "HOME": str(tmp_path),
        "RECORD": str(tmp_path / "record")}, cwd=tmp_path, timeout=60, check=True,
        capture_output=True)
    assert "MPICC" not in (tmp_path / "record" / "after.env").read_text()
    plan = build_plan(load_site(str(profile)), "/p")
    assert "MPICC" not in "\n".join(plan.step("write-activate").lines)
    job = cli(capsys, "jobscript", "--site", str(profile), "--", "python", "x.py")
    assert job.rc == 0 and "MPICC" not in job.out and "PIP_NO_BINARY" not in job.out


def test_the_sites_env_reaches_the_conda_steps(tmp_path: Path) -> None:
    profile = _site(tmp_path, NO_HOROVOD + CONDA + "env: {HPCPROV_TEST_SITE: '$HOME/site'}\n")
    conda_root = tmp_path / "p" / "miniconda3"
    (conda_root / "etc" / "profile.d").mkdir(parents=True)
    (conda_root / "etc" / "profile.d" / "conda.sh").write_text(
        'conda() { env > "$RECORD/conda.env"; }\n')
    proc = _run_step(tmp_path, profile, "create-env", {})
    assert proc.returncode == 0, proc.stderr
    env = (tmp_path / "record" / "conda.env").read_text().splitlines()
    assert f"HPCPROV_TEST_SITE={tmp_path}/site" in env
    plan = build_plan(load_site(str(profile)), "/p")
    assert all("hpcprov_site_env" in s.lines or s.modules for s in plan.steps)


# ------------------------------------------------ 16. the proxy where it works


PROXY = ("policies:\n  compute_internet: false\n  proxy:\n"
         "    http: http://proxy.example:3128\n    scope: {scope}\n")


@pytest.mark.parametrize(("scope", "login", "compute"), [
    ("compute", False, True), ("login", True, False), ("both", True, True)])
def test_setup_exports_the_proxy_only_where_its_scope_says_it_works(
        tmp_path: Path, scope: str, login: bool, compute: bool) -> None:
    site = load_site(str(write_profile(tmp_path, "a", "extends: local\nname: a\n"
                                       + PROXY.format(scope=scope))))
    places: tuple[tuple[Where, bool], ...] = (("login", login), ("compute", compute))
    for where, exported in places:
        plan = build_plan(site, "/p", runs_on=where)
        assert ("https_proxy" in plan.variables) is exported, (where, plan.variables)
        assert ("http://proxy.example:3128" in render_script(plan)) is exported
        # no internet on compute nodes, and no proxy that works there: setup says so
        refused = [f for f in lint_plan(plan, site) if f.code == "no-internet"]
        assert bool(refused) is (where == "compute" and not exported)


# ------------------------------------------------ 17. the site's env reaches mpirun's ranks


MPIRUN = r'''#!{python}
"""A stub of Open MPI's mpirun starting its processes as it does through ssh: with a bare
environment (PATH=/usr/bin:/bin) and only the variables named with -x."""
import json, os, subprocess, sys

argv, named, i = sys.argv[1:], {{}}, 0
valued = ("-np", "-H", "--hostfile", "-x", "--map-by")
while argv[i].startswith("-"):
    if argv[i] == "-x":
        name, eq, value = argv[i + 1].partition("=")
        if eq or name in os.environ:
            named[name] = value if eq else os.environ[name]
    i += 2 if argv[i] in valued else 1
size, command = int(argv[argv.index("-np") + 1]), argv[i:]
for r in range(size):
    env = {{"PATH": "/usr/bin:/bin", "HOME": os.environ["HOME"], **named,
            "OMPI_COMM_WORLD_RANK": str(r), "OMPI_COMM_WORLD_SIZE": str(size),
            "OMPI_COMM_WORLD_LOCAL_RANK": "0", "OMPI_COMM_WORLD_LOCAL_SIZE": "1",
            "OMPI_COMM_WORLD_NODE_RANK": str(r)}}
    try:
        subprocess.run(command, env=env, check=True)
    except FileNotFoundError:
        print("STARTED " + json.dumps({{"missing": command[0]}}))
'''
SHOW = ("import json, os; print('STARTED ' + json.dumps({k: os.environ.get(k) for k in "
        "('HPCPROV_TEST_SITE', 'RANK')}))")
AGENT = "#!/bin/bash\necho \"STARTED {\\\"HPCPROV_TEST_SITE\\\": \\\"$HPCPROV_TEST_SITE\\\"}\"\n"
MPI_SITE = """\
modules: {system: none}
name: mx
extends: testbed
env: {HPCPROV_TEST_SITE: from the site}
launchers:
  mpirun: {kind: mpirun}
  tr: {kind: torchrun, per_node_wrapper: mpirun}
"""


def _started(tmp_path: Path, script: str) -> list[dict[str, str | None]]:
    folder = tmp_path / "bin"
    folder.mkdir()
    for name, text in (("mpirun", MPIRUN.format(python=sys.executable)), ("python", AGENT),
                       ("scontrol", '#!/bin/sh\nprintf "n1\\nn2\\n"\n')):
        (folder / name).write_text(text)
        (folder / name).chmod(0o755)
    (tmp_path / "job.sh").write_text(script)
    proc = subprocess.run(["bash", str(tmp_path / "job.sh")], cwd=tmp_path, text=True,
                          capture_output=True, timeout=60, env={
                              "PATH": f"{folder}:/usr/bin:/bin", "HOME": str(tmp_path),
                              "SLURM_JOB_NODELIST": "n[1-2]", "SLURM_JOB_ID": "7"})
    assert proc.returncode == 0, proc.stderr
    return [json.loads(ln.removeprefix("STARTED ")) for ln in proc.stdout.splitlines()
            if ln.startswith("STARTED ")]


def test_mpirun_passes_the_sites_env_to_its_ranks(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    ref = str(write_profile(tmp_path, "mx", MPI_SITE))
    res = cli(capsys, "jobscript", "--site", ref, "-N", "2", "-G", "1", "-l", "mpirun",
              "--no-activate", "-o", "comment=pytorch", "--", sys.executable, "-c", SHOW)
    assert res.rc == 0, res.err
    ranks = _started(tmp_path, res.out)
    assert sorted(str(r["RANK"]) for r in ranks) == ["0", "1"]
    assert all(r["HPCPROV_TEST_SITE"] == "from the site" for r in ranks), ranks


def test_torchruns_agents_started_by_mpirun_find_the_environments_python(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    ref = str(write_profile(tmp_path, "mx", MPI_SITE))
    res = cli(capsys, "jobscript", "--site", ref, "-N", "2", "-G", "1", "-l", "tr",
              "--no-activate", "-o", "comment=pytorch", "--", "python", "train.py")
    assert res.rc == 0, res.err
    agents = _started(tmp_path, res.out)  # the job's PATH finds python (the stub agent)
    assert agents == [{"HPCPROV_TEST_SITE": "from the site"}] * 2, agents


# ------------------------------------------------ 18. a framework's version


@pytest.mark.parametrize("version", ["'*'", "''", "'>=2.1'", "' '"])
def test_a_framework_version_that_can_never_match_is_refused_at_its_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], version: str) -> None:
    profile = _site(tmp_path, f"python:\n  frameworks:\n    pytorch:\n      version: {version}\n")
    res = cli(capsys, "site", "check", str(profile))
    line = len(profile.read_text().splitlines())
    assert_one_line_error(res, 2, f"{profile}:{line}:", "python.frameworks.pytorch.version",
                          "not a version", "2.5.1")
