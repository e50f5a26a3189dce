"""Trust, round three (issue 27): a probe that hangs. `hpcprov doctor` sources the prefix's
activate script in a probe shell; an activate that never returns (or leaves `sleep 600 &`
behind) once gave a traceback after 300 s and a probe that outlived hpcprov. The probe runs
in a session of its own: on its timeout (HPCPROV_PROBE_TIMEOUT, short here) the whole
process group is killed and the user gets one line naming the activate script and the fix;
a probe that ends leaves nothing running either."""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from hpcprov.core.commands import run_in_session


def _ended(pid: int, within: float = 10.0) -> bool:
    """True once ``pid`` has ended (a zombie no reaper collected has): waits for that, at
    most ``within`` seconds (SIGKILL is delivered asynchronously; a probe left running
    never ends), on a pidfd, which becomes readable when the process exits."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    try:
        return bool(select.select([fd], [], [], within)[0])
    finally:
        os.close(fd)


def _pids(path: Path) -> list[int]:
    return [int(p) for p in path.read_text().split()] if path.exists() else []


def _cleanup(pids: list[int]) -> None:
    """Kill what the test started (by its ids) should hpcprov have left it running."""
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)


def _prefix(root: Path, activate: str) -> Path:
    """A prefix that looks set up (a manifest of the local profile) with this activate."""
    from hpcprov.provision.journal import Journal
    from hpcprov.provision.manifest import build_manifest, write_manifest
    from hpcprov.site.profiles import load_site

    prefix = root / "prefix"
    (prefix / ".hpcprov").mkdir(parents=True)
    write_manifest(build_manifest(load_site("local"), "local", prefix,
                                  Journal(prefix / ".hpcprov" / "journal.json")), prefix)
    (prefix / "activate").write_text(activate)
    return prefix


def _doctor(prefix: Path, timeout: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HPCPROV_PROBE_TIMEOUT": timeout}
    return subprocess.run([sys.executable, "-m", "hpcprov", "doctor", "--site", "local",
                           "--prefix", str(prefix)], capture_output=True, text=True,
                          env=env, timeout=120)  # before: 300 s, then a traceback


def test_an_activate_that_hangs_is_one_line_and_leaves_nothing_running(
        tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    # the probe shell becomes a sleep itself (exec), after starting one in the background
    prefix = _prefix(tmp_path, f'sleep 600 &\necho "$$ $!" > {pids}\nexec sleep 600\n')
    try:
        proc = _doctor(prefix, "2")
        started = _pids(pids)
        assert len(started) == 2, proc.stderr
        assert proc.returncode == 2, proc.stdout + proc.stderr
        assert "Traceback" not in proc.stderr
        (line,) = proc.stderr.strip().splitlines()
        assert line.startswith("hpcprov: error: doctor's probe did not finish within 2 s")
        assert f"the activate script {prefix / 'activate'} did not return" in line
        assert f"bash -x {prefix / 'activate'}" in line and "--redo" in line
        assert "HPCPROV_PROBE_TIMEOUT" in line
        assert all(_ended(pid) for pid in started), "the probe outlived hpcprov"
    finally:
        _cleanup(_pids(pids))


def test_a_python_that_hangs_after_activate_is_named(tmp_path: Path) -> None:
    """activate returns, the environment's python (here a function activate defines) does
    not answer: the line says that, not that activate hung."""
    pids = tmp_path / "pids"
    prefix = _prefix(tmp_path, f'python() {{ echo "$BASHPID" > {pids}; exec sleep 600; }}\n')
    try:
        proc = _doctor(prefix, "2")
        (line,) = proc.stderr.strip().splitlines()
        assert proc.returncode == 2 and "the environment's python did not answer" in line
        assert f"source {prefix / 'activate'}" in line
        assert all(_ended(pid) for pid in _pids(pids))
    finally:
        _cleanup(_pids(pids))


def test_what_an_activate_leaves_running_ends_with_the_probe(tmp_path: Path) -> None:
    """An activate that returns at once but starts `sleep 600 &` (its output elsewhere, so
    nothing waits for it): doctor reports as usual and the sleep is gone when it exits."""
    pids = tmp_path / "pids"
    prefix = _prefix(tmp_path, f'sleep 600 >/dev/null 2>&1 &\necho "$!" > {pids}\n')
    try:
        proc = _doctor(prefix, "60")
        assert "Traceback" not in proc.stderr and proc.returncode in (0, 1), proc.stderr
        assert "activate" in proc.stdout
        (sleeper,) = _pids(pids)
        assert _ended(sleeper), "the activate's background sleep outlived hpcprov"
    finally:
        _cleanup(_pids(pids))


@pytest.mark.parametrize("value", ["soon", "0", "-5", "nan"])
def test_a_bad_probe_timeout_is_one_line(tmp_path: Path, value: str) -> None:
    proc = _doctor(_prefix(tmp_path, "true\n"), value)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert f"HPCPROV_PROBE_TIMEOUT={value!r} is not a number of seconds" in line


def test_run_in_session_kills_the_group_on_timeout_and_keeps_what_it_printed() -> None:
    script = 'echo started; sleep 600 & echo "$!"; sleep 600'
    ran = run_in_session(["bash", "-c", script], 1)
    assert ran.returncode is None
    first, child = ran.stdout.split()
    assert first == "started" and _ended(int(child))


def test_run_in_session_does_not_wait_for_a_child_holding_its_output() -> None:
    """The command ends at once; the `sleep 600 &` it left holds its stdout open: the
    result comes when the command ends, not at the timeout, and the sleep is killed."""
    ran = run_in_session(["bash", "-c", 'sleep 600 & echo "$!"; exit 3'], 120)
    assert ran.returncode == 3 and _ended(int(ran.stdout))
