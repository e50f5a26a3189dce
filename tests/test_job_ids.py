"""The job id a submit command printed (issue 41, defect 8): Slurm's and PBS's executors
took the whole of sbatch's and qsub's output as the id, so a site's notice line before
``4242`` made an id of both lines: "the controller forgot the job", and job 4242 was never
cancelled. Now the id is the last non-empty line, where it has the form of one (``JOBID``
or ``JOBID;CLUSTER`` from ``sbatch --parsable``; ``SEQ.SERVER``, ``SEQ[].SERVER`` from
qsub); any other output is an error naming the command and what it printed."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest
from hpcprov_tests import provisioned_prefix, stub_commands, validation_until

from hpcprov.core.errors import HpcprovError
from hpcprov.schedulers.base import Executor, Handle
from hpcprov.schedulers.pbs import PbsExecutor
from hpcprov.schedulers.slurm import SlurmExecutor

NOTICE = "NOTICE: scheduled maintenance on Friday 08:00-12:00, jobs will be held"

SCONTROL = """#!/bin/bash
touch "$STUB_DIR/scontrol.asked"
echo "JobId=$4 JobState=PENDING Reason=Priority"
"""
QSTAT = """#!/bin/bash
touch "$STUB_DIR/qstat.asked"
printf 'Job Id: %s\\n    job_state = Q\\n    comment = waiting\\n' "${@: -1}"
"""
# the cancel commands note the argv they were given, one line per call
LOG = """#!/bin/bash
printf '%s\\n' "$*" >> "$STUB_DIR/{name}.log"
"""


def stubs(tmp_path: Path, submit: str, printed: str) -> tuple[Path, dict[str, str]]:
    """A folder of stub scheduler commands whose submit command (sbatch, qsub) prints
    ``printed``, and the environment that finds them first."""
    bin_ = tmp_path / "stubs"
    return bin_, stub_commands(bin_, {
        submit: f"#!/bin/bash\nprintf '%s' {_sq(printed)}\n", "scontrol": SCONTROL,
        "qstat": QSTAT, "scancel": LOG.format(name="scancel"), "qdel": LOG.format(name="qdel"),
        "sinfo": "#!/bin/bash\necho 'node1 idle'\n", "sacct": "#!/bin/bash\n"})


def _sq(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'"


def submit(executor: Executor, tmp_path: Path) -> Handle:
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/bash\ntrue\n")
    return executor.submit(script, tmp_path / "job.out", tmp_path / "job.status")


CASES = [  # (executor, submit command, what it printed, the job's id, the cancel command)
    ("slurm", "sbatch", f"{NOTICE}\n4242\n", "4242", "scancel"),
    ("slurm", "sbatch", f"{NOTICE}\n\n4242;cluster-b\n\n", "4242", "scancel"),
    ("pbs", "qsub", f"{NOTICE}\n1234.pbs01.example.org\n", "1234.pbs01.example.org", "qdel"),
    ("pbs", "qsub", f"Welcome to PBS\n{NOTICE}\n1234[].pbs01\n", "1234[].pbs01", "qdel"),
]
EXECUTORS = {"slurm": SlurmExecutor, "pbs": PbsExecutor}


@pytest.mark.parametrize(("kind", "command", "printed", "job_id", "cancel"), CASES,
                         ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_the_id_after_a_notice_is_the_jobs_and_an_aborted_run_cancels_it(
        tmp_path: Path, kind: str, command: str, printed: str, job_id: str,
        cancel: str) -> None:
    bin_, env = stubs(tmp_path, command, printed)
    executor = EXECUTORS[kind](env)
    h = submit(executor, tmp_path)
    assert h.job_id == job_id
    executor.refresh([h])  # asked after by its id: still queued, not forgotten
    assert not h.done and h.state in ("PENDING", "Q"), (h.state, h.reason)
    assert executor.abort([h]) == [f"job {job_id}"]
    assert (bin_ / f"{cancel}.log").read_text() == f"{job_id}\n"


@pytest.mark.parametrize(("kind", "command", "printed", "job_id", "cancel"),
                         [CASES[0], CASES[2]], ids=["slurm", "pbs"])
def test_a_job_late_at_its_timeout_is_cancelled_by_its_id(
        tmp_path: Path, kind: str, command: str, printed: str, job_id: str,
        cancel: str) -> None:
    bin_, env = stubs(tmp_path, command, printed)
    executor = EXECUTORS[kind](env)
    h = submit(executor, tmp_path)
    executor.wait([h], timeout_s=60, pending_timeout_s=0)
    assert h.state == "PENDING_TIMEOUT"
    assert (bin_ / f"{cancel}.log").read_text() == f"{job_id}\n"


@pytest.mark.parametrize(("kind", "command", "printed", "shown"), [
    ("slurm", "sbatch", f"{NOTICE}\n", repr(NOTICE)),
    ("slurm", "sbatch", "4242\nSubmitted to the maintenance queue\n",
     "Submitted to the maintenance queue"),
    ("slurm", "sbatch", "Submitted batch job 4242\n", "'Submitted batch job 4242'"),
    ("slurm", "sbatch", "4242 extra\n", "'4242 extra'"),
    ("slurm", "sbatch", "", "it printed nothing"),
    ("slurm", "sbatch", "\x1b]0;owned\x07\n", "\\x1b]0;owned\\x07"),
    ("pbs", "qsub", f"1234.pbs01\n{NOTICE}\n", NOTICE),
    ("pbs", "qsub", "qsub: job 1234.pbs01 ready\n", "'qsub: job 1234.pbs01 ready'"),
    ("pbs", "qsub", "1234.pbs01;rm -rf ~\n", "1234.pbs01;rm -rf ~"),
], ids=["slurm-notice-only", "slurm-id-then-notice", "slurm-not-parsable", "slurm-extra",
        "slurm-nothing", "slurm-escape", "pbs-id-then-notice", "pbs-sentence", "pbs-extra"])
def test_output_with_no_id_last_is_an_error_naming_the_command_and_what_it_printed(
        tmp_path: Path, kind: str, command: str, printed: str, shown: str) -> None:
    bin_, env = stubs(tmp_path, command, printed)
    with pytest.raises(HpcprovError) as e:
        submit(EXECUTORS[kind](env), tmp_path)
    message = str(e.value)
    assert message.startswith(f"{command}") and "gave no job id for job.sh" in message
    assert shown in message and "\x1b" not in message and "\n" not in message


def test_what_it_printed_is_bounded_in_the_error(tmp_path: Path) -> None:
    _, env = stubs(tmp_path, "sbatch", "x" * 100_000 + "\nnot an id\n")
    with pytest.raises(HpcprovError) as e:
        submit(SlurmExecutor(env), tmp_path)
    assert len(str(e.value)) < 400 and str(e.value).endswith("not an id'")


def test_ctrl_c_of_a_validation_cancels_the_job_sbatch_named_after_a_notice(
        tmp_path: Path) -> None:
    """The defect end to end: sbatch prints a notice, then 4242; the run, interrupted
    while the job waits, cancels 4242 and says so in its one line."""
    bin_, env = stubs(tmp_path, "sbatch", f"{NOTICE}\n4242\n")
    # the job is being followed by its id
    proc = validation_until(provisioned_prefix(tmp_path), tmp_path, env,
                            bin_ / "scontrol.asked", "the job was never asked after")
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)  # a hang guard, not a timing
    assert proc.returncode == 128 + signal.SIGINT, (out, err)
    assert "cancelled job 4242;" in err.strip().splitlines()[-1], err
    assert (bin_ / "scancel.log").read_text() == "4242\n"
