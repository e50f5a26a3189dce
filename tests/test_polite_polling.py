"""Polite scheduler traffic (issue 45, defect 3): busy sites forbid asking the scheduler often
("no more often than once a minute"); validate asked every 0.02-0.5 s while jobs ran. A
site's `policies.scheduler_poll_seconds` is now the least time between two queries; a job's
end is still noticed at once, through the status file its script writes.

Here Slurm's executor runs validate's own job script against tests/slurm_emulator.py, with a
counting wrapper in front of every scheduler command."""

from __future__ import annotations

import math
import os
import time
from dataclasses import replace
from pathlib import Path

import pytest
from hpcprov_tests import emulated_scheduler

from hpcprov import schedulers
from hpcprov.request.job import JobRequest
from hpcprov.site.profiles import load_site
from hpcprov.validate.plan import Options, job_script, plan_jobs

TESTS = Path(__file__).resolve().parent
TOOLS = ("sbatch", "scontrol", "sacct", "scancel", "sinfo")
QUERIES = ("scontrol", "sacct", "sinfo")  # what asks the scheduler how things stand


def counted_slurm(tmp_path: Path) -> tuple[dict[str, str], Path]:
    """The Slurm emulator's environment, each of its commands counted in a log first."""
    env = emulated_scheduler(tmp_path, TESTS / "slurm_emulator.py", TOOLS,
                             "SLURM_EMULATOR_DIR", "slurm")
    log = tmp_path / "calls.log"
    counting = tmp_path / "counting"
    counting.mkdir()
    real = tmp_path / "slurm-bin"
    for tool in TOOLS:
        (counting / tool).write_text(f'#!/bin/sh\necho {tool} >> "{log}"\n'
                                     f'exec "{real / tool}" "$@"\n')
        (counting / tool).chmod(0o755)
    env["PATH"] = f"{counting}{os.pathsep}{env['PATH']}"
    return env, log


def job(tmp_path: Path, seconds: float) -> Path:
    """validate's env job script for the testbed (its #SBATCH lines and status trap), its
    launch replaced by a sleep."""
    o = Options(JobRequest(load_site("testbed"), partition="amd_a100nv_8", activate=False),
                ("env",))
    env_job = replace(plan_jobs(o)[0], id="sleepy")
    text = job_script(env_job, o, str(tmp_path), ("sleep", str(seconds)))
    head = [ln for ln in text.splitlines()
            if ln.startswith("#") or ln.startswith(("hpcprov_exit_file=", "hpcprov_t0=",
                                                     "trap "))]
    script = tmp_path / "sleepy.sh"
    script.write_text("\n".join([*head, f"sleep {seconds}"]) + "\n")
    return script


@pytest.mark.parametrize("seconds", [1.5])
def test_at_60_s_the_scheduler_is_asked_at_most_once_a_minute_and_the_end_is_at_once(
        tmp_path: Path, seconds: float) -> None:
    env, log = counted_slurm(tmp_path)
    ex = schedulers.of(load_site("testbed")).executor(env)
    ex.poll_s = 60.0
    script = job(tmp_path, seconds)
    h = ex.submit(script, tmp_path / "sleepy.out", tmp_path / "sleepy.exit")
    start = time.monotonic()
    log.write_text("")  # what waiting costs
    ex.wait([h], timeout_s=120, pending_timeout_s=1)  # pending 1 s: asked before giving up
    waited, done_at = time.monotonic() - start, time.time()
    assert (h.state, h.exit_code) == ("COMPLETED", 0), (h.state, h.reason)
    queries = [c for c in log.read_text().split() if c in QUERIES]
    assert len(queries) <= math.ceil(waited / 60) + 2, queries
    _, _, ended = (tmp_path / "sleepy.exit").read_text().split()
    assert done_at - float(ended) < 1.0  # the verdict within a second of the job's end


def test_with_no_rule_the_executor_asks_as_often_as_it_wakes(tmp_path: Path) -> None:
    """The control: poll_s 0 (the testbed's 0.05, the tests' emulated schedulers) asks at
    every wake-up, 20 ms apart at first: many queries for the same job."""
    env, log = counted_slurm(tmp_path)
    ex = schedulers.of(load_site("testbed")).executor(env)
    h = ex.submit(job(tmp_path, 1.0), tmp_path / "sleepy.out", tmp_path / "sleepy.exit")
    log.write_text("")
    ex.wait([h], timeout_s=120)
    assert h.state == "COMPLETED"
    assert len([c for c in log.read_text().split() if c in QUERIES]) > 4


def test_the_profile_key_is_the_sites_and_the_testbed_keeps_its_pace() -> None:
    assert load_site("testbed").policies.scheduler_poll_seconds == 0.05
    assert load_site("neuron").policies.scheduler_poll_seconds == 60.0  # the default
