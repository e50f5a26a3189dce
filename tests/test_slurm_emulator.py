"""SlurmExecutor against tests/slurm_emulator.py where the conformance suite does not reach:
Slurm's own answers (formats and error texts), accounting answering for a job the controller
forgot, a controller that does not answer, and a node that stops. What every backend must do
is checked in tests/test_backend_conformance.py; the real proof is tests/testbed/."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from hpcprov_tests import emulated_scheduler

from hpcprov.schedulers.base import Handle
from hpcprov.schedulers.slurm import SlurmExecutor

EMULATOR = Path(__file__).with_name("slurm_emulator.py")
TOOLS = ("sbatch", "scontrol", "sacct", "scancel", "sinfo")
HERE = os.uname().nodename


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return emulated_scheduler(tmp_path, EMULATOR, TOOLS, "SLURM_EMULATOR_DIR", "slurm")


def _script(folder: Path, name: str, body: str) -> Path:
    path = folder / f"{name}.sh"
    path.write_text(f"#!/bin/bash\n#SBATCH --job-name={name}\n#SBATCH --nodes=1\n{body}\n")
    return path


def _run(env: dict[str, str], *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, env=env, timeout=30,
                          cwd=Path(env["SLURM_EMULATOR_DIR"]).parent)


def test_the_emulator_answers_as_slurm(env: dict[str, str], tmp_path: Path) -> None:
    _script(tmp_path, "bad", "echo $SLURM_JOB_ID $SLURM_NNODES $SLURM_PROCID; exit 137")
    _script(tmp_path, "killed", "kill -KILL $$")
    assert _run(env, "sbatch", "bad.sh").stdout == "Submitted batch job 1\n"
    assert _run(env, "sbatch", "--parsable", "--output=k.out", "killed.sh").stdout == "2\n"
    assert _run(env, "sbatch", "--parsable", "-H", "killed.sh").stdout == "3\n"
    ex = SlurmExecutor(env)
    handles = [Handle(str(n), tmp_path / "x", tmp_path / "o", tmp_path / "e", 0.0)
               for n in (1, 2)]
    ex.wait(handles, timeout_s=30)
    assert (tmp_path / "slurm-1.out").read_text() == "1 1 0\n"   # slurm-%j.out, where it ran
    one = _run(env, "scontrol", "show", "job", "-o", "1").stdout
    assert one.count("\n") == 1 and f" NodeList={HERE} " in one
    assert "JobState=FAILED Reason=NonZeroExitCode " in one and " ExitCode=137:0 " in one
    assert "JobState=FAILED Reason=RaisedSignal:9_Killed " in \
        _run(env, "scontrol", "show", "job", "2").stdout           # exit 137 is no signal:
    assert [h.exit_code for h in handles] == [137, 137]           # the same status to hpcprov
    assert " NodeList=(null) " in _run(env, "scontrol", "show", "job", "-o", "3").stdout
    assert _run(env, "sacct", "-n", "-X", "-P", "-j", "1,2,3", "-o", "JobID,State,ExitCode,"
                "NodeList").stdout.splitlines() == [f"1|FAILED|137:0|{HERE}",
                                                     f"2|FAILED|0:9|{HERE}",
                                                     "3|PENDING|0:0|None assigned"]
    assert _run(env, "scancel", "3").returncode == 0
    assert _run(env, "sacct", "-n", "-P", "-j", "3", "-o", "State").stdout == "CANCELLED by " \
        f"{os.getuid()}\n"
    for argv, words in [(("scontrol", "show", "job", "9"),
                         "slurm_load_jobs error: Invalid job id specified"),
                        (("sbatch", "none.sh"), "sbatch: error: Unable to open file none.sh"),
                        (("scancel", "1"), "scancel: error: Kill job error on job id 1: "
                                           "Job/step already completing or completed")]:
        res = _run(env, *argv)
        assert (res.returncode, res.stderr.strip()) == (1, words)
    assert _run(env, "sinfo", "-h", "-N", "-p", "gpu", "-o", "%N %t").stdout == f"{HERE} idle\n"
    assert _run(env, "scontrol", "show", "hostnames", "n[08-10],m").stdout.split() == \
        ["n08", "n09", "n10", "m"]


def test_a_job_the_controller_forgot_is_answered_by_accounting(
        env: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """MinJobAge passed: sacct gives the state and exit code, a status file or none. sacct
    is looked for where the executor runs its commands, not on hpcprov's own PATH."""
    monkeypatch.setenv("PATH", str(tmp_path / "nothing-here"))
    ex = SlurmExecutor({**env, "SLURM_EMULATOR_FORGET": "1"})
    handles = [ex.submit(_script(tmp_path, n, body), tmp_path / f"{n}.out",
                         tmp_path / f"{n}.never-written")
               for n, body in (("ok", "true"), ("bad", "exit 3"), ("killed", "kill -9 $$"))]
    ex.wait(handles, timeout_s=30)
    assert _run(env, "scontrol", "show", "job", handles[0].job_id).returncode == 1
    assert [(h.state, h.exit_code, h.nodes, h.reason) for h in handles] == [
        ("COMPLETED", 0, HERE, ""), ("FAILED", 3, HERE, ""), ("FAILED", 137, HERE, "")]


def test_a_controller_that_does_not_answer_ends_no_job(env: dict[str, str],
                                                       tmp_path: Path) -> None:
    """scontrol cannot reach the controller (busy, restarting) or the controller lost the
    job while accounting says it runs: the job is asked after again, not ended with an exit
    code accounting has not seen."""
    ex = SlurmExecutor(env)
    (gate := tmp_path / "go").touch()
    h = ex.submit(_script(tmp_path, "slow", f"while [ -e {gate} ]; do sleep 0.1; done; exit 4"),
                  tmp_path / "slow.out", tmp_path / "slow.exit")
    down = SlurmExecutor({**env, "SLURM_EMULATOR_CTLD_DOWN": "1"})
    down.refresh([h])
    assert (h.done, h.exit_code) == (False, None)
    # a controller restarted without its state knows no job: accounting says it runs
    lost = SlurmExecutor({**env, "SLURM_EMULATOR_CTLD_LOST": "1"})
    lost.refresh([h])
    assert (h.done, h.state, h.exit_code, h.nodes) == (False, "RUNNING", None, HERE)
    gate.unlink()
    ex.wait([h], timeout_s=30)
    assert (h.state, h.exit_code) == ("FAILED", 4)


def test_a_job_on_a_node_that_stopped_is_cancelled_and_names_it(env: dict[str, str],
                                                               tmp_path: Path) -> None:
    h = SlurmExecutor(env).submit(_script(tmp_path, "long", "sleep 600"),
                                  tmp_path / "long.out", tmp_path / "long.exit")
    dead = SlurmExecutor({**env, "SLURM_EMULATOR_NODE_STATE": "down*"})
    dead.wait([h], timeout_s=30)
    assert (h.state, h.exit_code, h.bad_nodes) == ("NODE_FAIL", None, HERE)
    assert h.reason == f"node {HERE} stopped answering (Slurm state down*)"
    assert "JobState=CANCELLED" in _run(env, "scontrol", "show", "job", h.job_id).stdout
    assert dead.usable_nodes("gpu") == []
    drained = {**env, "SLURM_EMULATOR_NODE_STATE": "drain"}
    assert SlurmExecutor(drained).usable_nodes("gpu") == []
    assert SlurmExecutor(env).usable_nodes("gpu") == [HERE]
