"""Bring-up/tear-down of the testbed itself: idempotence, hygiene, --no-accounting, CLI."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time

import pytest

from hpcprov.testbed.cluster import BRIDGE, Testbed

pytestmark = pytest.mark.testbed


def _live_testbed_processes(tb: Testbed) -> list[str]:
    """Live (non-zombie) testbed daemons, found independently of Testbed's own bookkeeping."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat") as f:
                comm, rest = f.read().split(" (", 1)[1].rsplit(") ", 1)
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmdline = f.read().replace(b"\0", b" ").decode()
            with open(f"/proc/{pid}/environ", "rb") as f:
                environ = f.read().decode(errors="replace")
        except OSError:
            continue
        if rest.startswith("Z"):
            continue  # reaped by nobody on machines whose PID 1 does not reap; holds nothing
        daemon = comm in {"slurmd", "slurmctld", "slurmdbd", "munged", "sshd", "mariadbd"} \
            or comm.startswith("slurmstepd")
        if daemon and (str(tb.state_dir) in cmdline or str(tb.state_dir) in environ):
            found.append(f"{pid} {comm}")
    return found


def _assert_clean(tb: Testbed) -> None:
    assert _live_testbed_processes(tb) == []
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert "hpctb-" not in netns
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    assert BRIDGE not in links and "hpctb-" not in links
    with open("/proc/self/mountinfo") as f:
        mounts = f.read()
    assert str(tb.state_dir) not in mounts
    assert tb.leftovers() == {"processes": [], "netns": [], "links": [], "mounts": []}


def test_up_is_idempotent(testbed):
    before = testbed.status()
    t0 = time.monotonic()
    testbed.up()
    assert time.monotonic() - t0 < 2
    after = testbed.status()
    assert after["up"]
    assert after["slurmctld"] == before["slurmctld"]
    assert [n["slurmd"] for n in after["nodes"]] == [n["slurmd"] for n in before["nodes"]]


def test_status_and_cli(testbed):
    env = testbed.environ()
    proc = subprocess.run([sys.executable, "-m", "hpcprov.testbed", "status", "--json"],
                          capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 0, proc.stderr
    st = json.loads(proc.stdout)
    assert st["up"] is True
    assert [n["name"] for n in st["nodes"]] == ["gpu01", "gpu02"]
    assert [n["addr"] for n in st["nodes"]] == ["10.251.0.11", "10.251.0.12"]
    assert st["env"]["SLURM_CONF"] == str(testbed.slurm_conf)
    hn = subprocess.run([sys.executable, "-m", "hpcprov.testbed", "exec", "gpu02", "--",
                         "hostname"], capture_output=True, text=True, env=env, timeout=60)
    assert hn.stdout.strip() == "gpu02"
    ssh = subprocess.run(["ssh", "-F", str(testbed.ssh_config), "gpu01", "hostname"],
                         capture_output=True, text=True, timeout=60)
    assert ssh.stdout.strip() == "gpu01", ssh.stderr


def _dead_pid() -> int:
    proc = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    return int(proc.stdout)


def test_down_leaves_nothing_no_accounting_then_back_up(testbed):
    """down() -> clean; up(--no-accounting) -> jobs run, jobcomp logs, sacct fails; restore."""
    testbed.down()
    _assert_clean(testbed)
    testbed.down()  # twice is fine too

    # what a step killed in an earlier run leaves in a node's spool: the next run's
    # job 1 step 0 must still launch with --mpi=pmix (it binds this very path)
    for node in ("gpu01", "gpu02"):
        stale = testbed.state_dir / "nodes" / node / "spool" / "stepd.slurm.pmix.1.0"
        stale.parent.mkdir(parents=True, exist_ok=True)
        stale.unlink(missing_ok=True)
        with socket.socket(socket.AF_UNIX) as sock:
            sock.bind(str(stale))
        # and what a SIGKILLed slurmd leaves: its pid file, naming a process that is gone
        # (read before the new slurmd writes its own, it would look like "slurmd died")
        (stale.parent.parent / "slurmd.pid").write_text(f"{_dead_pid()}\n")

    plain = Testbed(nodes=2, accounting=False, state_dir=testbed.state_dir)
    t0 = time.monotonic()
    plain.up()
    up_seconds = time.monotonic() - t0
    try:
        st = plain.status()
        assert st["up"] and st["slurmdbd"] is None and st["mariadb"] is None
        env = plain.environ()
        run = subprocess.run(["srun", "--comment=t", "--nodes=2", "--mpi=pmix", "hostname"],
                             capture_output=True, text=True, env=env, timeout=60,
                             cwd=plain.scratch)
        assert sorted(run.stdout.split()) == ["gpu01", "gpu02"], run.stderr
        sacct = subprocess.run(["sacct", "-X", "-n"], capture_output=True, text=True, env=env,
                               timeout=60)
        assert sacct.returncode != 0
        assert "accounting storage is disabled" in sacct.stderr + sacct.stdout
        jobcomp = plain.state_dir / "log" / "jobcomp.log"
        deadline = time.monotonic() + 20
        while "JobState=COMPLETED" not in (jobcomp.read_text() if jobcomp.exists() else ""):
            assert time.monotonic() < deadline, "jobcomp/filetxt never logged the job"
            time.sleep(0.05)
    finally:
        plain.down()
    _assert_clean(plain)
    assert up_seconds < 10

    testbed.up()  # the session fixture's cluster again, for the other tests
    assert testbed.status()["up"]
