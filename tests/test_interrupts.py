"""An interrupted validation cancels what it started (issue 27, class 2): real signals sent
to a real `hpcprov validate`, whose job (a stand-in for a hung training run) must be gone
when hpcprov exits. The Slurm allocation's case runs on the testbed
(tests/testbed/test_testbed_validate.py)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from hpcprov_tests import (
    hpcprov_argv,
    process_gone,
    provisioned_prefix,
    stub_commands,
    validation_until,
)

from hpcprov.core.interrupts import Interrupted, cancelling


@pytest.fixture
def hung_prefix(tmp_path: Path) -> Path:
    """A prefix that reads as provisioned, whose python writes its pid and hangs."""
    prefix = provisioned_prefix(tmp_path)
    stub = prefix / "venvs" / "horovod" / "bin" / "python"
    stub.write_text(f'#!/bin/bash\necho $$ > "{tmp_path}/job.pid"\nexec sleep 600\n')
    stub.chmod(0o755)
    return prefix


def _start_validation(prefix: Path, tmp_path: Path) -> tuple[subprocess.Popen[str], int]:
    env = {**os.environ, "HPCPROV_HISTORY": str(tmp_path / "history")}
    proc = subprocess.Popen(
        [*hpcprov_argv(), "validate", "--site", "local", "--env", str(prefix), "--checks",
         "env", "--nodes", "1", "--workdir", str(tmp_path / "run"), "--json"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    pidfile = tmp_path / "job.pid"
    deadline = time.monotonic() + 60
    while not pidfile.is_file() or not pidfile.read_text().strip():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            out, err = proc.communicate()
            pytest.fail(f"the job never started: {out} {err}")
        time.sleep(0.05)
    return proc, int(pidfile.read_text())


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP],
                         ids=lambda s: s.name)
def test_a_signal_cancels_the_running_job_and_says_so_in_one_line(
        hung_prefix: Path, tmp_path: Path, sig: signal.Signals) -> None:
    proc, job = _start_validation(hung_prefix, tmp_path)
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=60)  # a hang guard, not a timing
    assert proc.returncode == 128 + sig, (out, err)
    lines = err.strip().splitlines()
    last = lines[-1]
    assert last.startswith(f"hpcprov: error: interrupted by {sig.name}: cancelled job "), err
    assert "Traceback" not in err
    # --json: the error is JSON too, with the same words and status
    data = json.loads(out)
    assert data["ok"] is False and data["exit_code"] == 128 + sig
    assert data["error"] == last.removeprefix("hpcprov: error: ")
    assert process_gone(job), f"the job's process {job} still runs after hpcprov exited"


def test_the_second_signal_does_not_cut_the_cancelling_short() -> None:
    """Inside the block the first signal raises; one that comes while the run cancels its
    jobs (the except clause) is ignored, so the cancelling runs to its end."""
    finished = False
    with pytest.raises(Interrupted) as caught, cancelling():
        try:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(5)  # the signal interrupts this at once
        except Interrupted:
            os.kill(os.getpid(), signal.SIGINT)  # a second Ctrl-C while cancelling
            os.kill(os.getpid(), signal.SIGTERM)
            finished = True
            raise
    assert finished and caught.value.exit_code == 130


def test_a_signal_inside_a_held_block_comes_after_it() -> None:
    """A submission and the record of its job id are not cut in two: the signal waits."""
    done = []
    with pytest.raises(Interrupted) as caught, cancelling() as guard:
        with guard.held():
            os.kill(os.getpid(), signal.SIGTERM)
            done.append("submitted")
            done.append("recorded")
        done.append("after")  # not reached: raised as the held block ended
    assert done == ["submitted", "recorded"] and caught.value.exit_code == 143


def test_the_handlers_before_come_back_after() -> None:
    before = signal.getsignal(signal.SIGTERM)
    with cancelling():
        assert signal.getsignal(signal.SIGTERM) is not before
    assert signal.getsignal(signal.SIGTERM) is before


def test_ctrl_c_in_any_command_is_json_with_json(monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    """A Ctrl-C in a command without jobs to cancel: one line, 130, and JSON with --json."""
    import hpcprov.site.catalog as catalog
    from hpcprov.app.cli import main

    def interrupted() -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(catalog, "catalog", interrupted)
    assert main(["sites", "--json"]) == 130
    out, err = capsys.readouterr()
    assert json.loads(out) == {"ok": False, "error": "aborted", "exit_code": 130}
    assert err.strip().splitlines()[-1] == "hpcprov: error: aborted"


# a slow sbatch (issue 33): it says it started, sleeps, then accepts the job as 4242;
# scontrol says the job waits; scancel notes the job it cancels
SLOW_SBATCH = """#!/bin/bash
echo "$$" > "$STUB_DIR/sbatch.started"
sleep 2
echo 4242
"""
SCONTROL = """#!/bin/bash
echo "JobId=4242 JobState=PENDING Reason=Priority"
"""
SCANCEL = """#!/bin/bash
echo "$*" >> "$STUB_DIR/scancel.log"
"""


def _while_sbatch_runs(prefix: Path, tmp_path: Path, sbatch: str
                       ) -> tuple[Path, subprocess.Popen[str]]:
    """A validation of testbed through stub Slurm commands (sbatch: ``sbatch``), once its
    sbatch runs: the stubs' folder, and the run."""
    stubs = tmp_path / "stubs"
    env = stub_commands(stubs, {"sbatch": sbatch, "scontrol": SCONTROL, "scancel": SCANCEL,
                                "sinfo": "#!/bin/bash\necho 'node1 idle'\n",
                                "sacct": "#!/bin/bash\n"})
    return stubs, validation_until(prefix, tmp_path, env, stubs / "sbatch.started",
                                   "sbatch never ran")


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=lambda s: s.name)
def test_a_signal_while_sbatch_runs_cancels_the_job_it_submitted_in_one_line(
        hung_prefix: Path, tmp_path: Path, sig: signal.Signals) -> None:
    """Ctrl-C or SIGTERM while the scheduler's submit command runs: the submission is not
    cut from its job id (the signal waits for it), then the job is cancelled and the run
    exits 128 + N with one line, not "refused by the scheduler" and a traceback."""
    stubs, proc = _while_sbatch_runs(hung_prefix, tmp_path, SLOW_SBATCH)
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + sig, (out, err)
    assert "Traceback" not in err and "refused by the scheduler" not in err + out
    assert err.strip().splitlines()[-1] == (f"hpcprov: error: interrupted by {sig.name}: "
                                            f"cancelled job 4242; the run's files are in "
                                            f"{tmp_path / 'run'}"), err
    assert (stubs / "scancel.log").read_text().split() == ["4242"]


def test_a_signal_inside_a_held_block_that_fails_is_not_lost() -> None:
    """Issue 41, defect 2: a submission the scheduler refuses (the held block raises) while a
    signal waited: the signal is raised, not dropped with the block's error, so the run ends
    and cancels instead of going on with every later signal ignored."""
    from hpcprov.core.errors import HpcprovError
    with pytest.raises(Interrupted) as caught, cancelling() as guard:
        try:
            with guard.held():
                os.kill(os.getpid(), signal.SIGINT)
                raise HpcprovError("sbatch: error: Batch job submission failed")
        except Interrupted:
            raise
        except HpcprovError:  # what validate's rounds do with a refusal
            pytest.fail("the refusal swallowed the signal that came during it")
    assert caught.value.exit_code == 130
    assert isinstance(caught.value.__context__, HpcprovError)  # the refusal stays chained


# a slow sbatch that the scheduler refuses in the end (issue 41, defect 2)
SLOW_REFUSED_SBATCH = """#!/bin/bash
echo "$$" > "$STUB_DIR/sbatch.started"
sleep 2
echo "sbatch: error: Batch job submission failed: Invalid account or account/partition" >&2
exit 1
"""


def test_a_signal_during_a_refused_sbatch_ends_the_run(hung_prefix: Path,
                                                       tmp_path: Path) -> None:
    """SIGINT while a submission runs that the scheduler then refuses: the run exits 130 at
    once, with one line, instead of judging the refusal and waiting out its jobs with every
    later signal ignored."""
    stubs, proc = _while_sbatch_runs(hung_prefix, tmp_path, SLOW_REFUSED_SBATCH)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=30)  # a hang guard: without the fix it goes on
    assert proc.returncode == 130, (out, err)
    assert "Traceback" not in err
    assert err.strip().splitlines()[-1].startswith("hpcprov: error: interrupted by SIGINT"), err
    assert not (stubs / "scancel.log").exists()  # nothing was submitted: nothing to cancel
