"""The trust model against a real second user (issue 14): the hostile act is done by the
unprivileged user `nobody` through `runuser`, as a member of a shared group, and the victim
is an ordinary unprivileged user too, so what is shown is that a user without any privilege
is protected, not that root is.

* The wheelhouse is a group folder as docs/security.md tells sites to make it (setgid, and
  sticky where it says so; umask 002). nobody plants an entry, swaps a published one for a
  symlink or a folder of their own, or races the publisher in a bounded loop; the victim
  runs the library's real lookup-then-publish code (hpcprov_wheelhouse_get/_put, the step's
  `if ! get; then build; put; fi`) and installs its own build, never nobody's wheel, with the
  one-line warning the docs quote.
* The caches (profiles, "ready"): nobody pre-creates the victim's cache folders in a cache
  home they can write (XDG_CACHE_HOME on shared scratch) and plants entries or symlinks
  there; the victim's hpcprov neither believes nor writes through them. Where nobody owns
  the hpcprov/ folder above the victim's cache folder, swapping that folder for a symlink
  between the check and the write, in a loop, must not redirect the write or the pruning
  into another folder of the victim's: hpcprov uses no folder that a folder of another
  user's lies above.
* The prefix (issue 27): the victim sets up in a folder of the shared group's project space
  (setgid, umask 002) while nobody, in a loop, renames a script of theirs over
  PREFIX/.hpcprov/setup.sh, plants symlinks at its lock and logs and swaps the whole prefix
  for one of theirs: nobody's script never runs, nothing is written through their links;
  setup refuses the group-writable folder in one line, and completes in a sticky one.

The victim of the wheelhouse runs under `setpriv` (a user id with no account: its files are
its own, nobody else's); the victim of the caches is a Python process that imports hpcprov as
root and then drops to that user id (os.setresuid, what runuser does before exec): the
interpreter the tests run with is often under /root, which other users cannot read. Each
test needs root to switch users (as in CI) and skips, saying why, without it."""

from __future__ import annotations

import grp
import hashlib
import json
import os
import pwd
import shutil
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest
from hpcprov_tests import free_id, provisioned_prefix

import hpcprov
from hpcprov.core.shell import assign
from hpcprov.provision import library

RUNUSER = shutil.which("runuser")
SETPRIV = shutil.which("setpriv")
ATTACKER = "nobody"
GROUP = "users"  # the project group the site shares the wheelhouse with


def _uid(name: str) -> int | None:
    try:
        return pwd.getpwnam(name).pw_uid
    except KeyError:
        return None


def _gid(name: str) -> int | None:
    try:
        return grp.getgrnam(name).gr_gid
    except KeyError:
        return None


def _why_not() -> str | None:
    if os.geteuid() != 0:
        return "switching to other users (runuser, setpriv) needs root (tests run as root in CI)"
    if not RUNUSER or not SETPRIV:
        return "runuser or setpriv (util-linux) is not installed"
    if _uid(ATTACKER) is None or _gid(GROUP) is None:
        return f"no user {ATTACKER!r} or no group {GROUP!r} on this machine"
    return None


pytestmark = pytest.mark.skipif(_why_not() is not None, reason=str(_why_not()))


VICTIM = free_id() if _why_not() is None else -1
SHARED_GID = _gid(GROUP) or 0
NOBODY_UID = _uid(ATTACKER) or 0
NOBODY_GID = pwd.getpwuid(NOBODY_UID).pw_gid if NOBODY_UID else 0
BASE_ENV = {"PATH": "/usr/bin:/bin", "LC_ALL": "C"}


def as_nobody(script: str, *args: str, umask: int = 0o002, check: bool = True
              ) -> subprocess.CompletedProcess[str]:
    """Run sh SCRIPT ARGS... as nobody, with the shared group (runuser -G)."""
    proc = subprocess.run([str(RUNUSER), "-u", ATTACKER, "-G", GROUP, "--", "sh", "-c",
                           f"umask {umask:03o}\n{script}", "sh", *args],
                          capture_output=True, text=True, timeout=60, env=BASE_ENV)
    if check:
        assert proc.returncode == 0, proc.stderr
    return proc


def as_victim(argv: list[str], env: dict[str, str], umask: int = 0o002,
              **kw: object) -> subprocess.CompletedProcess[str]:
    """Run ARGV as the victim: its own user and group ids, and the shared group."""
    return subprocess.run([str(SETPRIV), f"--reuid={VICTIM}", f"--regid={VICTIM}",
                           f"--groups={SHARED_GID}", "--", "sh", "-c",
                           f'umask {umask:03o}; exec "$@"', "sh", *argv],
                          capture_output=True, text=True, timeout=60, env=env, **kw)


def chown_tree(path: Path, uid: int, gid: int) -> None:
    os.chown(path, uid, gid)
    for sub in path.rglob("*"):
        os.chown(sub, uid, gid, follow_symlinks=False)


def owners(path: Path) -> set[int]:
    """The owners of everything under path (not following links)."""
    return {os.lstat(p).st_uid for p in path.rglob("*")}


@pytest.fixture(scope="module")
def python_for_others() -> str:
    """A Python 3 that users other than root can run (the wheelhouse checker needs one)."""
    for candidate in (sys.executable, "/usr/bin/python3", shutil.which("python3")):
        if candidate and subprocess.run(
                [str(RUNUSER), "-u", ATTACKER, "--", candidate, "-c",
                 "import sys; assert sys.version_info >= (3, 6)"],
                capture_output=True, timeout=60, env=BASE_ENV).returncode == 0:
            return candidate
    pytest.skip("no Python that an unprivileged user can run")


# ------------------------------------------------------------------ the wheelhouse

WHEEL = "horovod-0.28.1-cp311-cp311-linux_x86_64.whl"
KEY_TEXT = b"horovod=0.28.1\npatches=none\nbuild-env=HOROVOD_WITH_PYTORCH=1\nmpi=\n"
KEY = hashlib.sha256(KEY_TEXT).hexdigest()[:16]
BUILT = b"the wheel the victim built\n"
PLANTED = b"import os; os.system('touch /tmp/PWNED-by-nobody')\n"
# the setup step's shape (provision/horovod_steps.py build_lines): look up, else build and
# publish; then install whatever HPCPROV_WHEEL names (here: say it)
STEP = """if ! hpcprov_wheelhouse_get; then
  hpcprov_wheelhouse_put
fi
echo "INSTALL $HPCPROV_WHEEL"
"""
GET = 'if hpcprov_wheelhouse_get; then echo "HIT $HPCPROV_WHEEL"; else echo MISS; fi'


@dataclass
class Shared:
    """A group wheelhouse (root:users, setgid, sticky or not), the victim's prefix with a
    wheel it built, and files nobody brings along (readable by everyone)."""

    root: Path
    python: str

    @property
    def wh(self) -> Path:
        return self.root / "wheelhouse"

    @property
    def entry(self) -> Path:
        return self.wh / KEY

    @property
    def home(self) -> Path:
        return self.root / "victim"

    @property
    def theirs(self) -> Path:
        """nobody's own folder."""
        return self.root / "nobody"

    @property
    def state(self) -> Path:
        return self.home / "prefix" / ".hpcprov"

    @property
    def installed(self) -> Path:
        return self.state / "horovod-wheel" / WHEEL

    def run(self, body: str, **env: str) -> subprocess.CompletedProcess[str]:
        """The body, with the library functions it calls, run by the victim with umask 002."""
        script = "\n".join(["set -eo pipefail", assign("PREFIX", str(self.home / "prefix")),
                            assign("STATE", str(self.state)),
                            assign("WHEELHOUSE", str(self.wh)),
                            *library.definitions([body]), "", body])
        return as_victim(["bash", "-c", script],
                         {**BASE_ENV, "PATH": f"{self.home / 'bin'}:/usr/bin:/bin",
                          "HOME": str(self.home), **env})

    def installs(self, proc: subprocess.CompletedProcess[str]) -> bytes:
        """What the step would install (the file HPCPROV_WHEEL names)."""
        assert proc.returncode == 0, proc.stderr
        (line,) = [ln for ln in proc.stdout.splitlines() if ln.startswith("INSTALL ")]
        return Path(line.split(" ", 1)[1]).read_bytes()

    def plant(self, where: Path, careful: bool = True) -> None:
        """nobody publishes an entry of their own at WHERE, as a group member (umask 002),
        with a correct key text and SHA256SUMS; careful: no group write either."""
        src = self.theirs / "files"
        as_nobody('set -e; mkdir "$1"; cp "$2"/* "$1"/\n'
                  'cd "$1" && sha256sum horovod-*.whl horovod-key.txt > SHA256SUMS\n'
                  'if [ "$3" = careful ]; then chmod 755 .; chmod 644 ./*; fi',
                  str(where), str(src), "careful" if careful else "umask")


@pytest.fixture
def shared(area: Path, python_for_others: str) -> Shared:
    s = Shared(area, python_for_others)
    s.wh.mkdir()
    os.chown(s.wh, 0, SHARED_GID)
    s.wh.chmod(0o3775)  # as docs/security.md says: install -d -g GROUP -m 3775
    s.state.mkdir(parents=True)
    (s.state / "horovod-key.txt").write_bytes(KEY_TEXT)
    dist = s.home / "prefix" / "build" / "horovod" / "dist"
    dist.mkdir(parents=True)
    (dist / WHEEL).write_bytes(BUILT)
    (s.home / "bin").mkdir()
    (s.home / "bin" / "python").symlink_to(python_for_others)
    chown_tree(s.home, VICTIM, VICTIM)
    s.home.chmod(0o700)
    src = s.theirs / "files"
    src.mkdir(parents=True)
    (src / WHEEL).write_bytes(PLANTED)
    (src / "horovod-key.txt").write_bytes(KEY_TEXT)  # the key text is public knowledge
    for path in (s.theirs, src, *src.iterdir()):
        path.chmod(0o755 if path.is_dir() else 0o644)
    chown_tree(s.theirs, NOBODY_UID, NOBODY_GID)
    return s


def no_sticky(s: Shared) -> None:
    s.wh.chmod(0o2775)  # a group folder made without the sticky bit


def warning(proc: subprocess.CompletedProcess[str], *needles: str) -> str:
    """The one line of stderr about the entry not used, holding each needle."""
    (line,) = [ln for ln in proc.stderr.splitlines()
               if ln.startswith("hpcprov: warning: wheelhouse entry ")]
    for needle in needles:
        assert needle in line, line
    return line


@pytest.mark.parametrize("careful", [True, False], ids=["modes-0644", "umask-002"])
def test_a_wheel_nobody_plants_in_the_group_wheelhouse_is_not_installed(shared: Shared,
                                                                       careful: bool) -> None:
    shared.plant(shared.entry, careful=careful)
    assert shared.entry.stat().st_uid == NOBODY_UID
    assert shared.entry.stat().st_gid == SHARED_GID  # setgid: the group's, as the site's
    proc = shared.run(STEP)
    assert shared.installs(proc) == BUILT  # its own build, not nobody's wheel
    line = warning(proc)
    assert line == (f"hpcprov: warning: wheelhouse entry {shared.entry} not used: it is owned "
                    "by nobody, not by you or a trusted publisher (see "
                    "HPCPROV_WHEELHOUSE_TRUST)")  # as docs/security.md quotes it
    assert f"not cached: {shared.entry} holds an entry that is not yours" in proc.stderr
    assert (shared.entry / WHEEL).read_bytes() == PLANTED  # left to its owner
    assert shared.installed.read_bytes() == BUILT
    # the same entry is used once the victim trusts nobody as a publisher: only the owner
    # check stood between the victim and nobody's wheel
    if careful:
        trusting = shared.run(GET, HPCPROV_WHEELHOUSE_TRUST=ATTACKER)
        assert trusting.stdout.strip().endswith(f"HIT {shared.installed}"), trusting.stderr
        assert shared.installed.read_bytes() == PLANTED


def test_an_entry_published_in_a_sticky_wheelhouse_cannot_be_changed_or_moved_by_nobody(
        shared: Shared) -> None:
    proc = shared.run(STEP)
    assert f"cached in the wheelhouse: {shared.entry}" in proc.stdout, proc.stderr
    st = shared.entry.stat()
    assert (st.st_uid, st.st_gid, st.st_mode & 0o7777) == (VICTIM, SHARED_GID, 0o755)
    for path in shared.entry.iterdir():
        assert path.stat().st_mode & 0o7777 == 0o644, path  # under umask 002
    trap = shared.theirs / "files"
    attempts = {
        "rename the entry": 'mv "$1" "$1.stolen"',
        "remove the entry": 'rm -rf "$1"',
        "append to the wheel": f'echo evil >> "$1/{WHEEL}"',
        "replace the wheel": f'cp "{trap}/{WHEEL}" "$1/{WHEEL}"',
        "add a file": 'echo x > "$1/extra"',
        "change the sums": 'echo x > "$1/SHA256SUMS"',
        "chmod the entry": 'chmod 777 "$1"',
    }
    for what, script in attempts.items():
        tried = as_nobody(script, str(shared.entry), check=False)
        assert tried.returncode != 0, f"nobody could {what}"
    again = shared.run(GET)
    assert again.stdout.strip().endswith(f"HIT {shared.installed}"), again.stderr
    assert shared.installed.read_bytes() == BUILT


@pytest.mark.parametrize("swap", ["symlink", "folder"])
def test_an_entry_nobody_swaps_without_the_sticky_bit_is_refused(shared: Shared,
                                                                 swap: str) -> None:
    """Without the sticky bit a group member may rename anyone's entry: nobody moves the
    victim's away and puts a symlink to a copy of theirs, or a folder of theirs, at KEY."""
    no_sticky(shared)
    assert f"cached in the wheelhouse: {shared.entry}" in shared.run(STEP).stdout
    theirs = shared.theirs / "entry"
    shared.plant(theirs)
    as_nobody('mv "$1" "$1.moved"', str(shared.entry))
    if swap == "symlink":
        as_nobody('ln -s "$2" "$1"', str(shared.entry), str(theirs))
    else:
        as_nobody('mv "$2" "$1"', str(shared.entry), str(theirs))
    proc = shared.run(GET)
    assert proc.stdout.strip().endswith("MISS"), proc.stdout
    if swap == "symlink":
        warning(proc, str(shared.entry), "it is a symlink or not a folder")
    else:
        warning(proc, str(shared.entry), "owned by nobody", "HPCPROV_WHEELHOUSE_TRUST")
    assert shared.installed.read_bytes() == BUILT  # nobody's wheel was not copied over it
    # the step then builds and installs its own; it cannot replace nobody's entry
    proc = shared.run(STEP)
    assert shared.installs(proc) == BUILT
    assert "not cached" in proc.stderr


RACER = r"""
import os, sys, time
wh, trap, stop, seconds = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
end, swapped = time.monotonic() + seconds, 0
while not os.path.exists(stop) and time.monotonic() < end:
    for e in os.scandir(wh):
        if e.name.startswith(".tmp-") and not e.is_symlink():
            try:
                os.rename(e.path, os.path.join(wh, ".stolen" + e.name))
                os.symlink(trap, e.path)
                swapped += 1
            except OSError:
                pass
print(swapped)
"""


def test_nobody_racing_the_publisher_in_a_loop_never_gets_an_entry_cached(shared: Shared
                                                                          ) -> None:
    """A group member who may rename entries (no sticky bit) swaps every new publish folder
    for a symlink to a folder of theirs, in a loop bounded in time, while the victim
    publishes: 'cached' is printed only for the folder written, and the victim never reads
    nobody's wheel. Rounds are repeated (at most 8) until nobody has won the race once."""
    no_sticky(shared)
    trap = shared.theirs / "entry"
    shared.plant(trap)
    racer = shared.root / "racer.py"
    racer.write_text(RACER)
    racer.chmod(0o644)
    won = 0
    for round_ in range(8):
        stop = shared.root / f"stop-{round_}"
        nobody = subprocess.Popen(
            [str(RUNUSER), "-u", ATTACKER, "-G", GROUP, "--", shared.python, str(racer),
             str(shared.wh), str(trap), str(stop), "20"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=BASE_ENV)
        try:
            proc = shared.run(STEP)
        finally:
            stop.touch()
            out, err = nobody.communicate(timeout=60)
        swapped = int(out.strip() or 0)
        assert nobody.returncode == 0, err
        installed = shared.installs(proc)
        assert installed == BUILT
        if "cached in the wheelhouse" in proc.stdout:
            assert not shared.entry.is_symlink()
            assert shared.entry.stat().st_uid == VICTIM
            assert (shared.entry / WHEEL).read_bytes() == BUILT
        get = shared.run(GET)
        assert get.returncode == 0, get.stderr
        if get.stdout.strip().endswith("MISS"):
            assert not shared.installed.exists() or shared.installed.read_bytes() == BUILT
        else:
            assert shared.installed.read_bytes() == BUILT
        if swapped:
            print(f"nobody swapped {swapped} publish folder(s) in round {round_ + 1}")
            won += 1
            assert "cached in the wheelhouse" not in proc.stdout
            break
        shutil.rmtree(shared.entry)  # published: publish again in the next round
    if not won:
        pytest.skip("nobody never won the race in 8 rounds: nothing was shown")


# ------------------------------------------------------------------ the caches

VICTIM_PRELUDE = """
import json, os, sys, tempfile
from pathlib import Path
from hpcprov.core import fsutil
from hpcprov.site import loader
from hpcprov.site import cache as profile_cache
from hpcprov.site.profiles import load_site
from hpcprov.provision import quick

profile_cache.fingerprint()  # reads files only root can (the interpreter's), so: now
os.environ["HPCPROV_NO_CACHE"] = "1"
load_site("neuron")  # imports what validating needs, caching nothing
del os.environ["HPCPROV_NO_CACHE"]
READY_ASK = {"prefix": None, "env": None, "on": "login", "container": None}
request = quick.request_key("local", READY_ASK)
uid, gid, group = (int(a) for a in sys.argv[1:4])
if uid:
    os.setgroups([group])
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)
    assert os.geteuid() == uid and not os.access("/root", os.W_OK)
neuron = loader.available_sites()["neuron"]
"""


def victim_python(code: str, cache_home: Path, as_root: bool = False) -> dict:
    """Run CODE in hpcprov's Python as the victim (after the prelude); it sets `out`, which
    comes back as JSON."""
    home = cache_home.parent / "victim-home"
    program = VICTIM_PRELUDE + textwrap.dedent(code) + "\nprint(json.dumps(out))\n"
    env = {**BASE_ENV, "HOME": str(home), "USER": "victim", "XDG_CACHE_HOME": str(cache_home),
           "XDG_CONFIG_HOME": str(home / ".config"),
           "PYTHONPATH": str(Path(hpcprov.__file__).parent.parent)}  # the hpcprov tested here
    ids = ["0", "0", "0"] if as_root else [str(VICTIM), str(VICTIM), str(SHARED_GID)]
    proc = subprocess.run([sys.executable, "-c", program, *ids], capture_output=True,
                          text=True, timeout=120, env=env, cwd="/")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.fixture
def scratch(area: Path) -> Path:
    """A cache home on shared scratch that every user may write (mode 1777, as /tmp)."""
    home = area / "victim-home"
    home.mkdir()
    os.chown(home, VICTIM, VICTIM)
    cache_home = area / "scratch"
    cache_home.mkdir()
    cache_home.chmod(0o1777)
    return cache_home


def forged_entry(area: Path) -> tuple[str, str]:
    """(the entry's file name, its text) for neuron, valid in every way but who wrote it,
    with the description nobody wants the victim to see: made by a real run, then edited."""
    genuine = area / "genuine-cache"
    made = victim_python("""
        load_site("neuron")
        entry = profile_cache._entry(neuron)
        out = {"name": entry.name, "text": entry.read_text()}
        """, genuine, as_root=True)
    head, body = made["text"].splitlines()
    site = json.loads(body)
    site["description"] = "FORGED by nobody"
    return made["name"], head + "\n" + json.dumps(site, separators=(",", ":")) + "\n"


def test_a_profile_cache_folder_nobody_made_is_not_used(area: Path, scratch: Path) -> None:
    """nobody creates the victim's cache folder (hpcprov/profiles under a cache home on
    shared scratch) and plants there an entry that would be current but for its owner."""
    name, text = forged_entry(area)
    src = area / "forged.json"
    src.write_text(text)
    src.chmod(0o644)
    folder = scratch / "hpcprov" / "profiles"
    as_nobody('mkdir -p -m 755 "$1" "$2" && cp "$3" "$2/$4" && chmod 644 "$2/$4"',
              str(folder.parent), str(folder), str(src), name, umask=0o022)
    seen = victim_python("""
        site = load_site("neuron")
        out = {"description": site.description, "hit": profile_cache.load(neuron) is not None}
        """, scratch)
    assert "FORGED" not in seen["description"] and seen["description"]
    assert seen == {**seen, "hit": False}
    assert owners(folder.parent) == {NOBODY_UID}  # the victim wrote nothing into it
    assert (folder / name).read_text() == text


def test_a_profile_cache_folder_nobody_swaps_for_a_symlink_is_not_written_through(
        area: Path, scratch: Path) -> None:
    """nobody owns hpcprov/ in the victim's cache home; the victim's own profiles/ folder in
    it is swapped for a symlink to another folder of the victim's, holding files the cache's
    pruning would delete (*.entry): the victim neither writes there nor deletes anything."""
    as_nobody('mkdir -m 777 "$1"', str(scratch / "hpcprov"), umask=0o000)
    first = victim_python("""
        load_site("neuron")
        out = {"hit": profile_cache.load(neuron) is not None}
        """, scratch)
    folder = scratch / "hpcprov" / "profiles"
    # no cache below a folder of nobody's: nothing stored, no folder made
    assert not first["hit"] and not os.path.lexists(folder)
    folder.mkdir(mode=0o700)  # as an older hpcprov made it: the victim's, in nobody's folder
    os.chown(folder, VICTIM, VICTIM)
    precious = area / "victim-home" / "notes"
    precious.mkdir()
    (precious / "thesis.entry").write_text("years of work\n")
    chown_tree(precious, VICTIM, VICTIM)
    precious.chmod(0o700)
    as_nobody('mv "$1" "$1.moved" && ln -s "$2" "$1"', str(folder), str(precious))
    seen = victim_python("""
        site = load_site("neuron")
        out = {"name": site.name, "hit": profile_cache.load(neuron) is not None,
               "trusted": fsutil.trusted_dir(fsutil.cache_dir("profiles"), create=True)}
        """, scratch)
    assert seen == {"name": "neuron", "hit": False, "trusted": False}
    assert sorted(p.name for p in precious.iterdir()) == ["thesis.entry"]
    assert (precious / "thesis.entry").read_text() == "years of work\n"


def test_a_ready_entry_nobody_plants_does_not_answer_setup(area: Path, scratch: Path) -> None:
    """nobody pre-creates the victim's "ready" cache folder and plants an entry naming a
    complete-looking prefix of theirs (whose activate would run their code): the victim's
    `setup` must not take it for the victim's own finished environment."""
    key = victim_python("""
        out = {"key": request.key, "ready": str(quick.ready_prefix(request))}
        """, scratch)
    assert key["ready"] == "None"
    mine = area / "nobody"  # nobody's own folder
    mine.mkdir()
    os.chown(mine, NOBODY_UID, NOBODY_GID)
    theirs = mine / "prefix"
    entry = {"format": 1, "key": key["key"], "asked": None, "prefix": str(theirs)}
    fingerprint = victim_python('out = {"fp": profile_cache.fingerprint()}', scratch,
                                as_root=True)["fp"]
    entry["fingerprint"] = fingerprint
    src = area / "ready.json"
    src.write_text(json.dumps(entry) + "\n")
    src.chmod(0o644)
    folder = scratch / "hpcprov" / "ready"
    as_nobody('set -e; mkdir -p -m 755 "$1" "$2/.hpcprov"; cp "$3" "$1/$4.json"\n'
              'echo "{}" > "$2/.hpcprov/manifest.json"\n'
              'echo \'{"steps": {"env": {"status": "done"}}}\' > "$2/.hpcprov/journal.json"\n'
              'echo "touch /tmp/PWNED-by-nobody" > "$2/activate"',
              str(folder), str(theirs), str(src), key["key"], umask=0o022)
    seen = victim_python("""
        out = {"ready": str(quick.ready_prefix(request))}
        """, scratch)
    assert seen["ready"] == "None"
    assert owners(folder) == {NOBODY_UID}


EXCHANGER = r"""
import ctypes, os, sys, time
libc = ctypes.CDLL(None, use_errno=True)
if not hasattr(libc, "renameat2"):
    sys.exit(3)
folder, target, stop, seconds = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
os.symlink(target, folder + ".link")
a, b, n, end = folder.encode(), (folder + ".link").encode(), 0, time.monotonic() + seconds
while not os.path.exists(stop) and time.monotonic() < end:
    n += libc.renameat2(-100, a, -100, b, 2) == 0  # AT_FDCWD, RENAME_EXCHANGE
print(n)
"""


def test_nobody_swapping_the_cache_folder_in_a_loop_cannot_redirect_its_writes(
        area: Path, scratch: Path, python_for_others: str) -> None:
    """nobody owns hpcprov/ in the victim's cache home and swaps the victim's profiles/
    folder with a symlink to another folder of the victim's, atomically, in a loop bounded
    in time, while the victim's hpcprov stores its cache entry (at most 5 s): nothing may be
    written into, or pruned from, that other folder."""
    as_nobody('mkdir -m 777 "$1"', str(scratch / "hpcprov"), umask=0o000)
    assert victim_python('load_site("neuron"); out = {}', scratch) == {}
    folder = scratch / "hpcprov" / "profiles"
    assert not os.path.lexists(folder)  # hpcprov makes no folder below one of nobody's
    folder.mkdir(mode=0o700)  # as an older hpcprov did: the victim's, in nobody's folder
    os.chown(folder, VICTIM, VICTIM)
    precious = area / "victim-home" / "notes"
    precious.mkdir()
    (precious / "thesis.entry").write_text("years of work\n")
    chown_tree(precious, VICTIM, VICTIM)
    racer = area / "exchanger.py"
    racer.write_text(EXCHANGER)
    racer.chmod(0o644)
    stop = area / "stop"
    nobody = subprocess.Popen(
        [str(RUNUSER), "-u", ATTACKER, "--", python_for_others, str(racer), str(folder),
         str(precious), str(stop), "20"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=BASE_ENV)
    try:
        seen = victim_python("""
            import time
            from hpcprov.site.profiles import validate_layer
            layer = loader.resolve(neuron)
            view = validate_layer(layer)
            notes = Path(os.environ["HOME"]) / "notes"
            end, stores = time.monotonic() + 5, 0
            while time.monotonic() < end and os.listdir(notes) == ["thesis.entry"]:
                profile_cache.store(neuron, layer, view)
                stores += 1
            out = {"stores": stores}
            """, scratch)
    finally:
        stop.touch()
        out, err = nobody.communicate(timeout=60)
    if nobody.returncode == 3:
        pytest.skip("no renameat2 in this C library")
    assert nobody.returncode == 0 and int(out) > 0, err
    assert sorted(p.name for p in precious.iterdir()) == ["thesis.entry"], seen


# ------------------------------------------------------------------ the prefix

SETUP_AS_VICTIM = r"""
import contextlib, io, os, sys
from hpcprov.app.cli import main
uid, gid, group, warm, *argv = sys.argv[1:]
# as root: a setup of a prefix of root's imports what setup needs (the interpreter's files
# are root's alone), then the victim's own setup runs under the victim's ids
with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
    assert main(["setup", "--site", "local", "--prefix", warm, "--until", "preflight"]) == 0
os.setgroups([int(group)])
os.setresgid(int(gid), int(gid), int(gid))
os.setresuid(int(uid), int(uid), int(uid))
os.umask(0o002)
sys.exit(main(argv))
"""

PREFIX_RACER = r"""
import json, os, sys, time
env, theirs, precious, stop, seconds = sys.argv[1:6]
state = os.path.join(env, ".hpcprov")
evil, their_env = os.path.join(theirs, "evil.sh"), os.path.join(theirs, "env")
links = [os.path.join(state, "lock"), os.path.join(state, "logs"),
         os.path.join(state, "logs", "01-prepare.log"),
         os.path.join(state, "logs", "02-preflight.log")]
tries, won, end = 0, [], time.monotonic() + float(seconds)
while not os.path.exists(stop) and time.monotonic() < end:
    tries += 1
    mine = os.path.join(theirs, "evil-%d.sh" % tries)
    os.link(evil, mine)
    try:  # a script of theirs renamed over the victim's, as a group member would
        os.rename(mine, os.path.join(state, "setup.sh"))
        won.append("setup.sh")
    except OSError:
        os.unlink(mine)
    for link in links:
        try:
            os.symlink(precious, link)
            won.append(link)
        except OSError:
            pass
    try:  # the whole prefix: the victim's moved away, theirs in its place
        if os.path.isdir(their_env) and os.lstat(env).st_uid != os.getuid():
            os.rename(env, "%s.moved-%d" % (env, tries))
            os.rename(their_env, env)
            won.append("prefix")
    except OSError:
        pass
print(json.dumps({"tries": tries, "won": won}))
"""


@pytest.mark.parametrize("mode", [0o2775, 0o3775], ids=["setgid-2775", "sticky-3775"])
def test_nobody_swapping_setup_sh_in_a_loop_during_setup_runs_nothing(
        area: Path, python_for_others: str, mode: int) -> None:
    """The issue's "a member of the prefix's group swapping setup.sh in a loop during setup
    runs nothing". A project folder of the shared group (setgid, umask 002), the victim's
    prefix in it; nobody, a member of the group, renames a script of theirs over
    PREFIX/.hpcprov/setup.sh, plants symlinks at the lock and the logs and swaps the whole
    prefix for one of theirs, in a loop bounded in time, while the victim runs
    `hpcprov setup`. Without the sticky bit setup refuses up front, in one line naming the
    folder and the fix; with it nobody can do any of that and setup completes. Either way
    the planted script never runs and nothing is written through a planted link."""
    project = area / "project"
    project.mkdir()
    os.chown(project, 0, SHARED_GID)
    project.chmod(mode)  # install -d -g GROUP -m 2775 (or 3775)
    home = area / "victim-home"
    home.mkdir()
    precious = home / "precious"
    precious.write_text("years of work\n")
    chown_tree(home, VICTIM, VICTIM)
    markers = area / "markers"
    markers.mkdir()
    markers.chmod(0o1777)
    prefix = project / "env"
    prefix.mkdir()  # the victim's own folder in the project space
    os.chown(prefix, VICTIM, SHARED_GID)
    prefix.chmod(0o755)
    theirs = area / "nobody"
    (theirs / "env" / ".hpcprov" / "logs").mkdir(parents=True)
    evil = f"touch {markers}/PWNED-by-nobody\n"
    (theirs / "evil.sh").write_text(evil)
    (theirs / "env" / ".hpcprov" / "setup.sh").write_text(evil)
    (theirs / "env" / ".hpcprov" / "lock").symlink_to(precious)
    (theirs / "env" / ".hpcprov" / "logs" / "01-prepare.log").symlink_to(precious)
    chown_tree(theirs, NOBODY_UID, NOBODY_GID)
    for path in (theirs, *theirs.rglob("*")):
        if not path.is_symlink():
            path.chmod(0o755)
    racer, program = area / "racer.py", area / "setup-as-victim.py"
    racer.write_text(PREFIX_RACER)
    program.write_text(SETUP_AS_VICTIM)
    for path in (racer, program):
        path.chmod(0o644)
    stop = area / "stop"
    nobody = subprocess.Popen(
        [str(RUNUSER), "-u", ATTACKER, "-G", GROUP, "--", python_for_others, str(racer),
         str(prefix), str(theirs), str(precious), str(stop), "60"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=BASE_ENV)
    code = str(Path(hpcprov.__file__).parent.parent)  # the hpcprov tested here
    env = {**BASE_ENV, "HOME": str(home), "USER": "victim", "HPCPROV_NO_CACHE": "1",
           "XDG_CACHE_HOME": str(home / ".cache"), "XDG_CONFIG_HOME": str(home / ".config"),
           "PYTHONPATH": os.pathsep.join(filter(None, [os.environ.get("PYTHONPATH"), code]))}
    try:
        proc = subprocess.run(
            [sys.executable, str(program), str(VICTIM), str(VICTIM), str(SHARED_GID),
             str(area / "warm"), "setup", "--site", "local", "--prefix", str(prefix),
             "--until", "preflight"],
            capture_output=True, text=True, timeout=300, env=env, cwd="/")
    finally:
        stop.touch()
        out, err = nobody.communicate(timeout=60)
    assert nobody.returncode == 0, err
    raced = json.loads(out)
    assert raced["tries"] > 0
    assert list(markers.iterdir()) == [], "nobody's script ran"
    assert precious.read_text() == "years of work\n"
    if mode & 0o1000:  # sticky: nobody can rename or plant anything there; setup completes
        assert raced["won"] == [], raced
        assert proc.returncode == 0, proc.stderr
        state = prefix / ".hpcprov"
        assert (state / "setup.sh").stat().st_uid == VICTIM
        assert "hpcprov: preflight ok" in (state / "logs" / "02-preflight.log").read_text()
        assert owners(prefix) == {VICTIM}
    else:  # refused before any step ran, in one line naming the folder and the fix
        assert proc.returncode == 2, proc.stdout + proc.stderr
        (line,) = proc.stderr.strip().splitlines()
        assert str(project) in line and "chmod +t" in line, line
        assert "Traceback" not in proc.stderr


# ------------------------------------------------------------------ validate's run folder

def program_runner(area: Path, python: str) -> Path:
    """AREA/env: a prefix that reads as provisioned, readable by every user, whose python runs
    the program it is given (the env check's) with ``python``."""
    prefix = provisioned_prefix(area)
    (prefix / "venvs" / "horovod" / "bin" / "python").write_text(
        "#!/bin/bash\nfor a; do case $a in *.py) exec "
        f'{python} "$a" --imports os ;; esac; done\nexit 3\n')
    for path in (prefix, *prefix.rglob("*")):
        path.chmod(0o755 if path.is_dir() or path.name == "python" else 0o644)
    return prefix


VALIDATE_AS_VICTIM = r"""
import contextlib, io, os, sys
from hpcprov.app.cli import main
uid, gid, group, warm, *argv = sys.argv[1:]
# as root: a dry run imports what validate needs (the interpreter's files are root's alone)
with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
    main([*argv, "--dry-run"])
    import hpcprov.validate.run, hpcprov.validate.report, hpcprov.schedulers.local  # noqa
os.setgroups([int(group)])
os.setresgid(int(gid), int(gid), int(gid))
os.setresuid(int(uid), int(uid), int(uid))
os.umask(0o002)
sys.exit(main(argv))
"""

RUNDIR_RACER = r"""
import json, os, sys, time
run, theirs, stop, seconds = sys.argv[1:5]
evil = os.path.join(theirs, "evil.py")
names = ["envcheck.py", "runtime.py", "env.sh"]
tries, won, end = 0, [], time.monotonic() + float(seconds)
while not os.path.exists(stop) and time.monotonic() < end:
    tries += 1
    for name in names:
        target = os.path.join(run, name)
        try:  # rewritten in place, as a group member with write access would
            with open(target, "r+b") as f:
                f.write(b"import os; os.system('touch %s/PWNED')\n" % theirs.encode())
            won.append("wrote " + name)
        except OSError:
            pass
        mine = os.path.join(theirs, "evil-%d-%s" % (tries, name))
        os.link(evil, mine)
        try:  # a file of theirs renamed over the victim's
            os.rename(mine, target)
            won.append("renamed over " + name)
        except OSError:
            pass
        if os.path.lexists(mine):  # refused, or the target was that file already
            os.unlink(mine)
    try:  # the whole run folder: the victim's moved away, theirs in its place
        if os.path.isdir(run) and os.lstat(run).st_uid != os.getuid():
            os.rename(run, run + ".moved-%d" % tries)
            os.mkdir(run)
            won.append("run folder")
    except OSError:
        pass
print(json.dumps({"tries": tries, "won": won}))
"""


@pytest.mark.parametrize("mode", [0o2775, 0o3775], ids=["setgid-2775", "sticky-3775"])
def test_nobody_cannot_change_what_a_validation_job_runs(
        area: Path, python_for_others: str, mode: int) -> None:
    """Issue 33: the victim validates with its run folder in a group scratch folder
    (setgid, umask 002) while nobody, a member of the group, in a loop rewrites the run's
    envcheck.py, runtime.py and env.sh in place, renames files of theirs over them and
    swaps the run folder. Without the sticky bit validate refuses the folder up front, in
    one line naming it and the fix, having written nothing; with it nobody changes no byte,
    and the job runs hpcprov's programs. Either way nobody's code never runs."""
    scratch = area / "scratch"
    scratch.mkdir()
    os.chown(scratch, 0, SHARED_GID)
    scratch.chmod(mode)  # install -d -g GROUP -m 2775 (or 3775)
    prefix = program_runner(area, python_for_others)
    home = area / "victim-home"
    home.mkdir()
    chown_tree(home, VICTIM, VICTIM)
    theirs = area / "nobody"
    theirs.mkdir()
    (theirs / "evil.py").write_text(f"import os; os.system('touch {theirs}/PWNED')\n")
    chown_tree(theirs, NOBODY_UID, NOBODY_GID)
    theirs.chmod(0o755)
    racer, program = area / "racer.py", area / "validate-as-victim.py"
    racer.write_text(RUNDIR_RACER)
    program.write_text(VALIDATE_AS_VICTIM)
    for path in (racer, program):
        path.chmod(0o644)
    run, stop = scratch / "run", area / "stop"
    nobody = subprocess.Popen(
        [str(RUNUSER), "-u", ATTACKER, "-G", GROUP, "--", python_for_others, str(racer),
         str(run), str(theirs), str(stop), "60"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=BASE_ENV)
    code = str(Path(hpcprov.__file__).parent.parent)
    env = {**BASE_ENV, "HOME": str(home), "USER": "victim", "HPCPROV_NO_CACHE": "1",
           "HPCPROV_HISTORY": str(home / "history"),
           "XDG_CACHE_HOME": str(home / ".cache"), "XDG_CONFIG_HOME": str(home / ".config"),
           "PYTHONPATH": os.pathsep.join(filter(None, [os.environ.get("PYTHONPATH"), code]))}
    try:
        proc = subprocess.run(
            [sys.executable, str(program), str(VICTIM), str(VICTIM), str(SHARED_GID),
             str(area / "warm"), "validate", "--site", "local", "--env", str(prefix),
             "--checks", "env", "--nodes", "1", "--workdir", str(run), "--json",
             "--timeout", "120"],
            capture_output=True, text=True, timeout=300, env=env, cwd="/")
    finally:
        stop.touch()
        out, err = nobody.communicate(timeout=60)
    assert nobody.returncode == 0, err
    raced = json.loads(out)
    assert raced["tries"] > 0
    assert not (theirs / "PWNED").exists(), "nobody's code ran"
    assert "Traceback" not in proc.stderr
    if mode & 0o1000:  # sticky: nobody can write, rename or swap anything there
        assert raced["won"] == [], raced
        data = json.loads(proc.stdout)
        (job,) = data["jobs"]
        assert job["state"] == "COMPLETED" and job["exit_code"] == 0, (job, proc.stderr)
        assert owners(run) == {VICTIM}
        from hpcprov.validate.plan import programs
        for name, text in programs().items():
            assert (run / name).read_text() == text
    else:  # refused before anything was written, in one line naming the folder and the fix
        assert proc.returncode == 2, proc.stdout + proc.stderr
        line = json.loads(proc.stdout)["error"]
        assert f"{scratch} may be written by its group" in line and "chmod +t" in line, line
        assert not any(p.name in ("envcheck.py", "env.sh") for p in scratch.rglob("*")), \
            list(scratch.rglob("*"))


# ------------------------------------------------------ umask 002, bytecode on (issue 41)

GROUP_RACER = r"""
import json, os, sys, time
roots, stop, seconds = sys.argv[1].split(":"), sys.argv[2], float(sys.argv[3])
evil = b"import os; os.system('touch %s')\n" % sys.argv[4].encode()
tries, won, end = 0, [], time.monotonic() + seconds
def attempt(what, fn):
    try:
        fn()
        won.append(what)
    except OSError:
        pass
def append(path):
    with open(path, "ab") as f:
        f.write(b"\n" + evil)
def plant(folder, name):
    with open(os.path.join(folder, name), "xb") as f:
        f.write(evil)
while True:
    tries += 1
    for root in roots:
        for here, dirs, files in os.walk(root):
            for name in files:
                path = os.path.join(here, name)
                if not os.path.islink(path) and not name.startswith((".", "nobody-")):
                    attempt("appended to " + path, lambda p=path: append(p))
            attempt("planted in " + here, lambda h=here: plant(h, "nobody-%d.pth" % tries))
            if os.path.basename(here) in ("bin", "site-packages") or "hpcprov-validate" in here:
                attempt("made __pycache__ in " + here,
                        lambda h=here: os.mkdir(os.path.join(h, "__pycache__")))
    if os.path.exists(stop) or time.monotonic() > end:
        break
    time.sleep(0.01)
print(json.dumps({"tries": tries, "won": won}))
"""


def _as(uid: int, gid: int, program: str, argv: list[str], env: dict[str, str],
        python: str = sys.executable) -> subprocess.CompletedProcess[str]:
    """hpcprov's main(ARGV) as the user ``uid`` (primary group ``gid``, and the shared
    group), with umask 002, after importing as root (SETUP_AS_VICTIM, VALIDATE_AS_VICTIM)."""
    return subprocess.run([python, program, str(uid), str(gid), str(SHARED_GID), *argv],
                          capture_output=True, text=True, timeout=600, env=env, cwd="/")


def test_under_umask_002_a_group_member_changes_nothing_setup_doctor_or_validate_run(
        area: Path, python_for_others: str) -> None:
    """Issue 41, as the attack ran: umask 002, bytecode on (no PYTHONDONTWRITEBYTECODE), a
    victim whose primary group is the attacker's (users), a sticky group scratch (3775).

    * setup (a real venv): nobody, in a loop while it runs and after, appends to every file
      of the prefix, plants a .pth in every folder (site-packages, bin/) and a __pycache__:
      nothing is writable, nothing is planted;
    * validate with two checks, nobody first, then the victim, each in its default run
      folder in the same scratch: neither is refused; meanwhile nobody tries the same on
      the victim's run folders, outputs and status files: nothing; no bytecode is written
      beside the programs;
    * doctor of a prefix left group-writable (as setup made it before): nobody appends a
      line to activate, the victim's doctor refuses the prefix in one line, the line never
      runs."""
    scratch = area / "scratch"
    scratch.mkdir()
    os.chown(scratch, 0, SHARED_GID)
    scratch.chmod(0o3775)
    home = area / "victim-home"
    sites = home / ".config" / "hpcprov" / "sites"
    sites.mkdir(parents=True)
    (sites / "local.yaml").write_text(  # python3 -m venv: no tool the victim cannot run
        f"extends: local\npaths:\n  scratch: {scratch}\npython:\n  venv:\n    creator: venv\n")
    chown_tree(home, VICTIM, SHARED_GID)
    marker = area / "markers" / "PWNED"
    marker.parent.mkdir()
    marker.parent.chmod(0o1777)
    programs = {}
    for name, text in (("racer.py", GROUP_RACER), ("setup.py", SETUP_AS_VICTIM),
                       ("validate.py", VALIDATE_AS_VICTIM)):
        programs[name] = area / name
        programs[name].write_text(text)
        programs[name].chmod(0o644)
    code = str(Path(hpcprov.__file__).parent.parent)
    env = {**BASE_ENV, "HOME": str(home), "USER": "victim", "HPCPROV_NO_CACHE": "1",
           "HPCPROV_HISTORY": str(home / "history"),
           "XDG_CACHE_HOME": str(home / ".cache"), "XDG_CONFIG_HOME": str(home / ".config"),
           "PYTHONPATH": os.pathsep.join(filter(None, [os.environ.get("PYTHONPATH"), code]))}
    assert "PYTHONDONTWRITEBYTECODE" not in env  # bytecode on, as the attack ran

    def race(roots: list[Path], seconds: int = 120) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [str(RUNUSER), "-u", ATTACKER, "-G", GROUP, "--", "sh", "-c", 'umask 002; exec "$@"',
             "sh", python_for_others, str(programs["racer.py"]),
             ":".join(map(str, roots)), str(area / "stop"), str(seconds), str(marker)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=BASE_ENV)

    def raced(proc: subprocess.Popen[str]) -> dict:
        """What nobody managed, but in what is theirs or everyone's (the scratch itself, a
        group folder where anyone may add a file, and nobody's own run folder)."""
        (area / "stop").touch()
        out, err = proc.communicate(timeout=120)
        (area / "stop").unlink()
        assert proc.returncode == 0, err
        got = json.loads(out)
        got["won"] = [w for w in got["won"] if not w.endswith(f" in {scratch}")
                      and "hpcprov-validate-nobody" not in w]
        return got

    # ---- setup: a real venv, made at umask 002 by a user of the attacker's group
    prefix = scratch / "env"
    nobody = race([scratch])
    setup = _as(VICTIM, SHARED_GID, str(programs["setup.py"]),
                [str(area / "warm"), "setup", "--site", "local", "--prefix", str(prefix),
                 "--until", "create-env"], env)
    got = raced(nobody)
    assert setup.returncode == 0, setup.stdout + setup.stderr
    assert list(prefix.glob("venvs/*/lib/python3*/site-packages")), "no venv was made"
    after = race([prefix], seconds=0)  # once more over the finished prefix
    got_after = raced(after)
    assert got["tries"] > 0 and got_after["tries"] > 0
    assert got["won"] == [] and got_after["won"] == [], (got["won"] + got_after["won"])[:5]
    assert not [p for p in prefix.rglob("*") if not p.is_symlink() and p.lstat().st_mode & 0o022]

    # ---- validate: nobody first, then the victim, both in the same sticky scratch
    env_prefix = program_runner(area, python_for_others)
    argv = ["validate", "--site", "local", "--env", str(env_prefix), "--checks",
            "env,allreduce", "--nodes", "1", "--json", "--timeout", "120", "--no-history"]
    nobody_home = area / "nobody-home"
    (nobody_home / ".config" / "hpcprov" / "sites").mkdir(parents=True)
    shutil.copy(sites / "local.yaml", nobody_home / ".config" / "hpcprov" / "sites")
    chown_tree(nobody_home, NOBODY_UID, NOBODY_GID)
    theirs = _as(NOBODY_UID, NOBODY_GID, str(programs["validate.py"]), [str(area / "w1"), *argv],
                 {**env, "HOME": str(nobody_home), "USER": "nobody",
                  "XDG_CONFIG_HOME": str(nobody_home / ".config"),
                  "XDG_CACHE_HOME": str(nobody_home / ".cache")})
    assert "Traceback" not in theirs.stderr
    assert json.loads(theirs.stdout)["jobs"], theirs.stdout + theirs.stderr  # not refused
    nobody = race([scratch])
    mine = _as(VICTIM, SHARED_GID, str(programs["validate.py"]), [str(area / "w2"), *argv],
               env)
    got = raced(nobody)
    assert "Traceback" not in mine.stderr
    data = json.loads(mine.stdout)
    assert {j["check"] for j in data["jobs"]} >= {"env", "allreduce"}, mine.stderr
    run = Path(data["rundir"])
    assert run.parent.name == f"hpcprov-validate-{VICTIM}"  # the victim's own, beside nobody's
    assert (scratch / "hpcprov-validate-nobody").is_dir()
    assert got["tries"] > 0 and got["won"] == [], got["won"][:5]
    assert not list(run.rglob("__pycache__")), "bytecode was written beside the programs"
    assert owners(run) == {VICTIM}
    assert not [p for p in run.rglob("*") if not p.is_symlink() and p.lstat().st_mode & 0o022]

    # ---- doctor: a prefix left group-writable refuses, and what nobody appended never runs
    old = scratch / "old-env"
    made = _as(VICTIM, SHARED_GID, str(programs["setup.py"]), [
        str(area / "w3"), "setup", "--site", "local", "--prefix", str(old), "--until",
        "preflight"], env)
    assert made.returncode == 0, made.stderr
    victim_python_as = textwrap.dedent(f"""
        import os, sys
        from hpcprov.provision.journal import Journal
        from hpcprov.provision.manifest import build_manifest, write_manifest
        from hpcprov.site.profiles import load_site
        prefix = {str(old)!r}
        write_manifest(build_manifest(load_site("local"), "local", __import__("pathlib")
                       .Path(prefix), Journal(prefix + "/.hpcprov/journal.json")),
                       __import__("pathlib").Path(prefix))
        os.setgroups([{SHARED_GID}]); os.setresgid({SHARED_GID}, {SHARED_GID}, {SHARED_GID})
        os.setresuid({VICTIM}, {VICTIM}, {VICTIM}); os.umask(0o002)
        with open(prefix + "/activate", "w") as f:  # as setup wrote it before issue 41
            f.write("export HPCPROV_OLD=1\\n")
        """)
    assert subprocess.run([sys.executable, "-c", victim_python_as], env=env, timeout=120,
                          capture_output=True).returncode == 0
    chown_tree(old, VICTIM, SHARED_GID)
    as_nobody(f'printf "\\ntouch {marker}\\n" >> "$1"', str(old / "activate"))
    doctor = _as(VICTIM, SHARED_GID, str(programs["setup.py"]),
                 [str(area / "w4"), "doctor", "--site", "local", "--prefix", str(old)], env)
    assert doctor.returncode != 0, doctor.stdout
    (line,) = doctor.stderr.strip().splitlines()
    assert f"{old / 'activate'} may be written by its group" in line, line
    assert not marker.exists(), "a line nobody appended to activate ran as the victim"
