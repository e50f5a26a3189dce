"""The shared Horovod wheelhouse's trust model, run for real on the library's bash functions
(hpcprov_wheelhouse_get/_put, and the checker they run) with fake wheels: what a reader
refuses (another user's entry, writable by others, tampered, a symlink, the wrong key
text), how a publisher writes (mkdtemp, explicit modes, SHA256SUMS, a rename that cannot
be redirected), and doctor catching a wheel changed after install. See docs/security.md."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import subprocess
import sys
import threading
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest

from hpcprov.core.shell import assign
from hpcprov.provision import library
from hpcprov.provision.doctor import judge, probe
from hpcprov.provision.manifest import parse_manifest

WHEEL = "horovod-0.28.1-cp311-cp311-linux_x86_64.whl"
KEY_TEXT = b"horovod=0.28.1\npatches=none\nbuild-env=HOROVOD_WITH_PYTORCH=1\nmpi=\n"
KEY = hashlib.sha256(KEY_TEXT).hexdigest()[:16]
NOBODY = 65534
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="chown to another user needs root "
                                "(tests run as root here and in CI)")

GET = 'if hpcprov_wheelhouse_get; then echo "HIT $HPCPROV_WHEEL"; else echo MISS; fi'
PUT = "hpcprov_wheelhouse_get >/dev/null || true; hpcprov_wheelhouse_put"


@dataclass
class House:
    """A prefix's state folder, a wheelhouse, and a built wheel, under tmp_path."""

    root: Path

    @property
    def wh(self) -> Path:
        return self.root / "wheelhouse"

    @property
    def state(self) -> Path:
        return self.root / "prefix" / ".hpcprov"

    @property
    def entry(self) -> Path:
        return self.wh / KEY

    @property
    def built(self) -> Path:
        return self.root / "prefix" / "build" / "horovod" / "dist" / WHEEL

    def script(self, *calls: str) -> str:
        return "\n".join(["set -eo pipefail", assign("PREFIX", str(self.root / "prefix")),
                          assign("STATE", str(self.state)), assign("WHEELHOUSE", str(self.wh)),
                          *library.definitions(calls), "", *calls, ""])

    def run(self, *calls: str, umask: int = 0o022, **env: str
            ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["bash", "-c", f"umask {umask:03o}\n" + self.script(*calls)],
                              capture_output=True, text=True, timeout=60, env=self.env(env))

    def env(self, extra: dict[str, str]) -> dict[str, str]:
        bin_dir = self.root / "bin"
        if not bin_dir.exists():
            bin_dir.mkdir()
            (bin_dir / "python").symlink_to(sys.executable)
        return {"PATH": f"{bin_dir}:/usr/bin:/bin", "HOME": str(self.root), **extra}

    def plant(self, data: bytes = b"wheel bytes\n", owner: int | None = None,
              sums: bool = True, key_text: bytes = KEY_TEXT) -> Path:
        """An entry written by hand, as another publisher (or an older hpcprov) would."""
        self.entry.mkdir(parents=True)
        (self.entry / WHEEL).write_bytes(data)
        (self.entry / "horovod-key.txt").write_bytes(key_text)
        if sums:
            digest = hashlib.sha256(data).hexdigest()
            (self.entry / "SHA256SUMS").write_text(f"{digest}  {WHEEL}\n")
        for path in (self.entry, *self.entry.iterdir()):
            path.chmod(0o755 if path.is_dir() else 0o644)
            if owner is not None:
                os.chown(path, owner, -1)
        return self.entry


@pytest.fixture
def house(tmp_path: Path) -> House:
    h = House(tmp_path)
    h.state.mkdir(parents=True)
    (h.state / "horovod-key.txt").write_bytes(KEY_TEXT)
    h.built.parent.mkdir(parents=True)
    h.built.write_bytes(b"the wheel built here\n")
    return h


def hit(proc: subprocess.CompletedProcess[str]) -> Path | None:
    assert proc.returncode == 0, proc.stderr
    last = proc.stdout.strip().splitlines()[-1]
    return Path(last.split(" ", 1)[1]) if last.startswith("HIT ") else None


def refused(proc: subprocess.CompletedProcess[str], *needles: str) -> str:
    assert hit(proc) is None, proc.stdout
    (line,) = [ln for ln in proc.stderr.splitlines() if "not used" in ln]
    for needle in needles:
        assert needle in line, line
    return line


def test_a_verified_entry_is_installed_from_a_private_copy(house: House) -> None:
    house.plant(b"a good wheel\n")
    wheel = hit(house.run(GET))
    assert wheel == house.state / "horovod-wheel" / WHEEL
    assert wheel.read_bytes() == b"a good wheel\n"
    assert (wheel.parent.stat().st_mode & 0o777) == 0o700


@needs_root
def test_a_wheel_planted_by_another_user_is_not_installed(house: House) -> None:
    house.plant(b"import os; os.system('touch PWNED')\n", owner=NOBODY)
    refused(house.run(GET), "owned by", "HPCPROV_WHEELHOUSE_TRUST")
    assert not (house.state / "horovod-wheel" / WHEEL).exists()
    # a publisher the user trusts, by name or number
    assert hit(house.run(GET, HPCPROV_WHEELHOUSE_TRUST=str(NOBODY))) is not None
    assert hit(house.run(GET.replace("_get;", f"_get {NOBODY};"))) is not None


@pytest.mark.parametrize("name", ["", WHEEL, "horovod-key.txt", "SHA256SUMS"])
@pytest.mark.parametrize("bit", [0o020, 0o002], ids=["group", "world"])
def test_an_entry_writable_by_others_is_refused(house: House, name: str, bit: int) -> None:
    path = house.plant() / name
    path.chmod(path.stat().st_mode | bit)
    refused(house.run(GET), "writable by")
    if bit == 0o020:  # a group whose every member the user trusts may write
        trusted = house.run(GET, HPCPROV_WHEELHOUSE_TRUST=f"@{path.stat().st_gid}")
        assert hit(trusted) is not None


def test_a_tampered_wheel_is_refused(house: House) -> None:
    entry = house.plant(b"the wheel as published\n")
    with (entry / WHEEL).open("ab") as f:
        f.write(b"appended later\n")
    refused(house.run(GET), "SHA-256", "SHA256SUMS recorded")
    assert list((house.state / "horovod-wheel").iterdir()) == []


@pytest.mark.parametrize(("how", "needle"), [
    ({"sums": False}, "no SHA256SUMS"),                      # an older hpcprov's entry
    ({"key_text": b"horovod=0.28.1\nother=1\n"}, "key text"),
])
def test_an_entry_without_sums_or_with_another_key_text_is_refused(house: House, how: dict,
                                                                 needle: str) -> None:
    house.plant(**how)
    refused(house.run(GET), needle)


def test_symlinks_in_the_wheelhouse_are_not_followed(house: House) -> None:
    good = house.plant(b"good\n")
    elsewhere = house.root / "elsewhere"
    good.rename(elsewhere)
    house.entry.symlink_to(elsewhere)
    refused(house.run(GET), "symlink")
    house.entry.unlink()
    elsewhere.rename(house.entry)
    (house.entry / WHEEL).rename(house.root / WHEEL)
    (house.entry / WHEEL).symlink_to(house.root / WHEEL)
    refused(house.run(GET), "symlink")


def test_publishing_sets_explicit_modes_under_a_group_umask(house: House) -> None:
    proc = house.run(PUT, umask=0o002)
    assert proc.returncode == 0, proc.stderr
    assert f"cached in the wheelhouse: {house.entry}" in proc.stdout
    assert sorted(p.name for p in house.entry.iterdir()) == ["SHA256SUMS", WHEEL,
                                                           "horovod-key.txt"]
    assert house.entry.stat().st_mode & 0o7777 == 0o755
    for path in house.entry.iterdir():
        assert path.stat().st_mode & 0o7777 == 0o644, path
    assert (house.entry / "horovod-key.txt").read_bytes() == KEY_TEXT
    check = subprocess.run(["sha256sum", "-c", "SHA256SUMS"], cwd=house.entry,
                           capture_output=True, text=True, timeout=30)
    assert check.returncode == 0 and check.stdout.count(": OK") == 2, check.stdout
    assert not [p for p in house.wh.iterdir() if p.name != KEY]  # no temporary left
    # what is installed is the private copy, and the next prefix's reader verifies it
    assert (house.state / "horovod-wheel" / WHEEL).read_bytes() == house.built.read_bytes()
    assert hit(house.run(GET)) == house.state / "horovod-wheel" / WHEEL


def test_publishing_works_in_a_setgid_sticky_group_wheelhouse(house: House) -> None:
    """The wheelhouse as docs/security.md tells sites to make it (install -d -m 3775): the
    publish folder inherits the setgid bit (mode 02700) and is still the folder made (it
    once was refused, and nothing was ever cached there)."""
    house.wh.mkdir()
    house.wh.chmod(0o3775)
    proc = house.run(PUT, umask=0o002)
    assert f"cached in the wheelhouse: {house.entry}" in proc.stdout, proc.stderr
    assert house.entry.stat().st_mode & 0o777 == 0o755
    assert hit(house.run(GET)) == house.state / "horovod-wheel" / WHEEL


def attacker_dir(root: Path) -> Path:
    """A folder another user made writable by everyone, to catch what is published."""
    trap = root / "attacker"
    trap.mkdir()
    trap.chmod(0o777)
    return trap


def test_a_symlink_planted_at_a_publish_path_does_not_redirect_publishing(house: House
                                                                          ) -> None:
    """The old publish folder was WHEELHOUSE/.tmp-KEY-$$: a symlink planted there (the pid
    is known once the setup runs) made `mv -T` publish the attacker's folder while hpcprov
    printed 'cached'. Here the step's pid is known before it publishes, and a bounded loop
    plants the symlink at every name it could use."""
    trap = attacker_dir(house.root)
    house.wh.mkdir()
    proc = subprocess.Popen(["bash", "-c", "read -r _\n" + house.script(PUT)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=house.env({}))
    for pid in range(proc.pid, proc.pid + 64):  # bounded: the shell and its children
        (house.wh / f".tmp-{KEY}-{pid}").symlink_to(trap)
    out, err = proc.communicate("go\n", timeout=60)
    assert proc.returncode == 0, err
    assert not house.entry.is_symlink()
    assert list(trap.iterdir()) == []  # nothing was written through the planted links
    assert f"cached in the wheelhouse: {house.entry}" in out
    assert (house.entry / WHEEL).read_bytes() == house.built.read_bytes()


def test_a_racing_swap_of_the_publish_folder_is_never_published_as_cached(house: House
                                                                          ) -> None:
    """Someone who may rename entries of the wheelhouse (no sticky bit) swaps every new
    folder for a symlink to their own, in a loop bounded in time: whatever the interleaving,
    'cached' is printed only for the folder written, and a reader never takes theirs."""
    trap = attacker_dir(house.root)
    (trap / WHEEL).write_bytes(b"the attacker's wheel\n")
    (trap / "horovod-key.txt").write_bytes(KEY_TEXT)
    (trap / "SHA256SUMS").write_text(f"{hashlib.sha256(b'x').hexdigest()}  {WHEEL}\n")
    house.wh.mkdir()
    stop = time.monotonic() + 20
    done = threading.Event()

    def swap() -> None:
        while not done.is_set() and time.monotonic() < stop:
            for path in house.wh.glob(".tmp-*"):
                if not path.is_symlink():
                    try:
                        path.rename(house.wh / f".stolen-{path.name}")
                        path.symlink_to(trap)
                    except OSError:
                        pass

    for _ in range(5):
        shutil.rmtree(house.wh)
        house.wh.mkdir()
        thread = threading.Thread(target=swap)
        thread.start()
        try:
            proc = house.run(PUT)
        finally:
            done.set()
            thread.join()
        done.clear()
        assert proc.returncode == 0, proc.stderr
        if "cached in the wheelhouse" in proc.stdout:
            assert house.entry.is_dir() and not house.entry.is_symlink()
            assert (house.entry / WHEEL).read_bytes() == house.built.read_bytes()
        wheel = hit(house.run(GET))
        assert wheel is None or wheel.read_bytes() == house.built.read_bytes()


def test_your_own_unusable_entry_is_replaced_and_anothers_is_left_alone(house: House) -> None:
    house.plant(b"published by an older hpcprov\n", sums=False)
    proc = house.run(PUT)
    assert f"cached in the wheelhouse: {house.entry}" in proc.stdout, proc.stderr
    assert hit(house.run(GET)) is not None
    if os.geteuid() != 0:
        return
    shutil.rmtree(house.entry)
    house.plant(b"planted\n", owner=NOBODY)
    proc = house.run(PUT)
    assert proc.returncode == 0 and "cached" not in proc.stdout
    assert "not cached" in proc.stderr and "owned by" in proc.stderr
    assert (house.entry / WHEEL).read_bytes() == b"planted\n"  # left to its owner
    assert hit(house.run(GET)) is None


# ----------------------------------------------------------------- doctor


def make_wheel(path: Path, files: dict[str, bytes]) -> None:
    """A wheel holding FILES, with the RECORD an installer checks against."""
    rows = []
    for name, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
        rows.append(f"{name},sha256={digest.decode()},{len(data)}")
    rows.append("horovod-0.28.1.dist-info/RECORD,,")
    with zipfile.ZipFile(path, "w") as zf:
        for name, data in files.items():
            zf.writestr(name, data)
        zf.writestr("horovod-0.28.1.dist-info/RECORD", "\n".join(rows) + "\n")


def installed_prefix(root: Path) -> tuple[Path, dict]:
    """A prefix whose activate puts a Horovod 'installed' from a fake wheel on the path,
    the wheel kept in .hpcprov/horovod-wheel, and its manifest."""
    files = {"horovod/__init__.py": b"__version__ = '0.28.1'\n",
             "horovod/lib.so": b"\x7fELF pretend\n",
             "horovod-0.28.1.dist-info/METADATA": b"Name: horovod\nVersion: 0.28.1\n"}
    prefix = root / "prefix"
    site = prefix / "site"
    for name, data in files.items():
        (site / name).parent.mkdir(parents=True, exist_ok=True)
        (site / name).write_bytes(data)
    kept = prefix / ".hpcprov" / "horovod-wheel" / WHEEL
    kept.parent.mkdir(parents=True)
    make_wheel(kept, files)
    (prefix / "activate").write_text(f"export PYTHONPATH={site}\n")
    manifest = {"site": "local", "backend": "venv", "modules": {"runtime": []},
                "pip_freeze": ["horovod==0.28.1"], "site_profile": {},
                "horovod_wheel": {"wheel": WHEEL, "how": "wheelhouse", "key": KEY,
                                  "sha256": hashlib.sha256(kept.read_bytes()).hexdigest()}}
    return prefix, manifest


def wheel_check(root: Path, prefix: Path, manifest: dict,
                monkeypatch: pytest.MonkeyPatch) -> dict:
    """doctor's horovod-wheel check of the prefix, with this Python as the env's python."""
    bin_dir = root / "bin"
    bin_dir.mkdir(exist_ok=True)
    if not (bin_dir / "python").exists():
        (bin_dir / "python").symlink_to(sys.executable)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    typed = parse_manifest(manifest)
    facts = probe(typed, prefix, timeout=60)
    checks = {c.name: c for c in judge(typed, facts, None, "hpcprov setup")}
    return checks["horovod-wheel"].to_json()


def test_doctor_flags_a_wheel_whose_hash_changed_after_install(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    prefix, manifest = installed_prefix(tmp_path)
    ok = wheel_check(tmp_path, prefix, manifest, monkeypatch)
    assert ok["status"] == "ok" and "3 installed files" in ok["detail"], ok
    kept = prefix / ".hpcprov" / "horovod-wheel" / WHEEL
    original = kept.read_bytes()
    kept.write_bytes(original + b"\0")
    changed = wheel_check(tmp_path, prefix, manifest, monkeypatch)
    assert changed["status"] == "fail" and manifest["horovod_wheel"]["sha256"] in \
        changed["detail"], changed
    kept.write_bytes(original)
    (prefix / "site" / "horovod" / "lib.so").write_bytes(b"\x7fELF replaced\n")
    files = wheel_check(tmp_path, prefix, manifest, monkeypatch)
    assert files["status"] == "fail" and "horovod/lib.so" in files["detail"], files


def test_doctor_says_when_the_wheel_cannot_be_checked(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    prefix, manifest = installed_prefix(tmp_path)
    (prefix / ".hpcprov" / "horovod-wheel" / WHEEL).unlink()  # set up by an older hpcprov
    check = wheel_check(tmp_path, prefix, manifest, monkeypatch)
    assert check["status"] == "warn" and "--redo" in check["fix"], check
    assert json.dumps(check)
