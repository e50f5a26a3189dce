"""What every scheduler backend's Executor must do, checked once for all of them.

The suite runs over the registered backends (``hpcprov.schedulers.all_backends()``, i.e.
``hpcprov.site.sections.SCHEDULERS``), each against what answers as its scheduler here:
Slurm against tests/slurm_emulator.py (sbatch, scontrol, sacct, scancel, sinfo; the real
proof stays the root-only testbed, tests/testbed/), PBS against tests/pbs_emulator.py
(qsub, qstat, qdel), LSF against tests/lsf_emulator.py (bsub, bjobs, bkill), Flux against
tests/flux_emulator.py (flux batch, jobs, cancel, resource), Grid Engine against
tests/gridengine_emulator.py (qsub, qstat, qacct, qdel), the local backend (``none``) as it
is; the emulators share one kit (tests/emulator_kit.py: the job store, a job's process and
its end, cancel, directives read through the scheduler's spelling record). A backend
joins by a line in :data:`EMULATED` (how its emulator is put on PATH
and what its scheduler answers), or is left out by a line in :data:`EXCLUDED` that says
why; a registered backend with neither fails every test here, so a new scheduler cannot
skip the suite silently. Where one emulated backend cannot show a behaviour, its ``gaps``
skip that test with the reason, and its ``xfail`` marks a known defect (strict: the test
fails again once the defect is fixed, so the mark is then removed).

Covered: submit and poll to completion, exit codes (0, non-zero, killed by a signal) from
the scheduler's answer, the nodes a job ran on, the event record, a job the scheduler forgot
answered by its status file (none: an error), a pending job removed at the pending timeout,
a running one cancelled at the run timeout, cancel reporting the signal, a refused
submission naming the scheduler's words, node states (``usable_nodes``) and validate's one
allocation (jobs as steps: Slurm's, its pilot started as a batch job) where the backend
offers it, and the planned words of the first node and the job id, run in a job.

The planning half runs over the registered backends too, each from a minimal profile on it
(:data:`MINIMAL`): a 2-node job script's directives read back through the scheduler's
emulator (its reading rule, :func:`emulator_kit.options`) as the options planned, its
submit line the spelling record's, the rank environment (the first node and the job id as
the scheduler's words, MASTER_ADDR for mpirun's ranks), and lint refusing each option that
would set the job's geometry (``geometry_options``) and more nodes than the scheduler runs.
Each scheduler's own planning and parsing stays in its own test module
(tests/test_slurm_emulator.py, tests/test_validate_pbs.py, tests/test_schedulers_lsf.py,
tests/test_gridengine_emulator.py).
"""

from __future__ import annotations

import importlib
import os
import re
import signal
import subprocess
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import ModuleType

import emulator_kit as kit
import pytest
from hpcprov_tests import emulated_scheduler

from hpcprov import schedulers
from hpcprov.core.errors import HpcprovError, UsageError
from hpcprov.core.shell import Raw
from hpcprov.request.job import JobRequest
from hpcprov.schedulers.base import Backend, Executor, Handle, Placement
from hpcprov.site.profiles import load_site
from hpcprov.site.sections import SCHEDULERS
from hpcprov.validate.judge import JobResult, judge
from hpcprov.validate.plan import Options, job_script, plan_jobs, status_trap

TESTS = Path(__file__).parent
HERE = os.uname().nodename  # every emulator runs its jobs on this machine


@dataclass(frozen=True)
class Emulated:
    """How a backend is exercised here, and what its scheduler answers."""

    site: str                     # a bundled profile on this scheduler
    partition: str                # ... and the partition its jobs go to
    # tests/<emulator> symlinked as ``tools`` into a folder first on PATH, its state in
    # $<state_var>; None: the backend needs no scheduler commands
    emulator: str | None = None
    tools: tuple[str, ...] = ()
    state_var: str = ""
    header: str | None = None     # a directive validate's one-node job scripts carry
    first_ids: tuple[str, str] | None = None  # the ids of the first two jobs (None: any)
    cancelled_status: int = 128 + signal.SIGKILL  # a running job's status after cancel()
    cancelled_state: str = "FAILED"  # ... and its state, as the scheduler then answers
    hold: dict[str, str] = field(default_factory=dict)     # environment: jobs stay pending
    forget: dict[str, str] = field(default_factory=dict)   # environment: ended jobs forgotten
    forgotten: str = ""           # the reason of a job forgotten without a status file
    gone: tuple[tuple[str, ...], int] = ((), 0)  # a query of a job id, its status once gone
    refuse: Callable[[Path], Path] | None = None  # a script the scheduler refuses
    refused: str = ""             # the error (a regex) that refusal raises
    usable_nodes: list[str] | None = None  # usable_nodes(partition); None: not reported
    gaps: dict[str, str] = field(default_factory=dict)     # test name -> why it is skipped
    xfail: dict[str, str] = field(default_factory=dict)    # test name -> the known defect

    def environment(self, tmp_path: Path, name: str) -> dict[str, str]:
        if self.emulator is None:
            return dict(os.environ)
        return emulated_scheduler(tmp_path, TESTS / self.emulator, self.tools, self.state_var,
                                  name)


def _missing(folder: Path) -> Path:
    return folder / "missing.sh"          # never written


def _empty(folder: Path) -> Path:
    path = folder / "empty.sh"
    path.write_text("")
    return path


EMULATED: dict[str, Emulated] = {
    "slurm": Emulated(
        "testbed", "amd_a100nv_8", "slurm_emulator.py",
        ("sbatch", "scontrol", "sacct", "scancel", "sinfo"), "SLURM_EMULATOR_DIR",
        header="#SBATCH --nodes=1", first_ids=("1", "2"),
        cancelled_status=128 + signal.SIGTERM,  # scancel: CANCELLED, ExitCode=0:15
        cancelled_state="CANCELLED",
        # Slurm keeps a job cancelled while pending (CANCELLED) until MinJobAge passed, and
        # accounting knows it after: the test asks after both, so neither answers here
        hold={"SLURM_EMULATOR_HOLD": "1", "SLURM_EMULATOR_FORGET": "1",
              "SLURM_EMULATOR_ACCOUNTING": "0"},
        # MinJobAge passed and no accounting (sacct answering is tests/test_slurm_emulator.py's)
        forget={"SLURM_EMULATOR_FORGET": "1", "SLURM_EMULATOR_ACCOUNTING": "0"},
        forgotten="the controller forgot the job and accounting is unavailable",
        gone=(("scontrol", "show", "job"), 1),  # "Invalid job id specified"
        refuse=_missing,
        refused=r"sbatch refused missing\.sh: sbatch: error: Unable to open file \S*missing\.sh",
        usable_nodes=[HERE],                   # sinfo -h -N -p PARTITION -o '%N %t'
    ),
    "pbs": Emulated(
        "sockeye", "gpu", "pbs_emulator.py", ("qsub", "qstat", "qdel"), "PBS_EMULATOR_DIR",
        header="#PBS -l select=1:ncpus=", first_ids=("1.pbs-emu", "2.pbs-emu"),
        cancelled_status=143,             # PBS's Exit_status 271 after qdel: 256 + SIGTERM
        hold={"PBS_EMULATOR_HOLD": "1"},
        forget={"PBS_EMULATOR_HISTORY": "0"},  # PBS Pro's default: finished jobs vanish
        forgotten="the server no longer knows the job and it left no status file",
        gone=(("qstat", "-x", "-f"), 153),     # "Unknown Job Id"
        refuse=_missing,
        refused=r"qsub refused missing\.sh: qsub: script file:: No such file or directory",
        # usable_nodes is None: PbsExecutor does not ask pbsnodes for node states (only the
        # draft reads pbsnodes -av), so validate cannot leave out down or offline vnodes
    ),
    "lsf": Emulated(
        "lsf-example", "gpuv100", "lsf_emulator.py", ("bsub", "bjobs", "bkill"),
        "LSF_EMULATOR_DIR", header="#BSUB -n 1", first_ids=("1", "2"),
        cancelled_status=130,             # LSF reports the SIGINT bkill sends first
        hold={"LSF_EMULATOR_HOLD": "1"},
        forget={"LSF_EMULATOR_CLEAN": "1"},    # CLEAN_PERIOD over
        forgotten="LSF no longer knows the job and it left no status file",
        gone=(("bjobs",), 255),                # "Job <N> is not found"
        refuse=_empty,
        refused=r"bsub refused empty\.sh: No command is specified",
        # usable_nodes is None: LsfExecutor does not ask bhosts for host states (only the
        # draft reads bhosts -l)
    ),
    "flux": Emulated(
        "flux-example", "pbatch", "flux_emulator.py", ("flux",), "FLUX_EMULATOR_DIR",
        header="# flux: -N 1", first_ids=("f68GQ", "f68GR"),  # F58 of 1000001, 1000002
        cancelled_status=128 + signal.SIGTERM,  # flux cancel: the job's tasks get SIGTERM
        hold={"FLUX_EMULATOR_HOLD": "1"},
        forget={"FLUX_EMULATOR_PURGE": "1"},   # inactive jobs purged (job-list's purge)
        forgotten="Flux no longer knows the job and it left no status file",
        refuse=_missing,
        refused=r"flux batch refused missing\.sh: flux-batch: ERROR: \[Errno 2\] No such file",
        usable_nodes=[HERE],                   # flux resource list -s up -q QUEUE
        gaps={
            "test_a_job_that_never_starts_is_removed_at_the_pending_timeout":
                "Flux keeps a job cancelled before it ran listed (INACTIVE, CANCELED, "
                "returncode -128) until purged, so it is not gone from `flux jobs`: the "
                "pending timeout is checked in tests/test_schedulers_flux.py",
        },
    ),
    "gridengine": Emulated(
        "testbed-gridengine", "amd_a100nv_8", "gridengine_emulator.py",
        ("qsub", "qstat", "qacct", "qdel"), "GRIDENGINE_EMULATOR_DIR",
        header="#$ -pe mpi", first_ids=("1", "2"),
        # cancelled_status: qdel's SIGKILL, qacct's exit_status 137 (failed 100)
        hold={"GRIDENGINE_EMULATOR_HOLD": "1"},
        forget={"GRIDENGINE_EMULATOR_ACCOUNTING": "0"},  # no accounting record
        forgotten="Grid Engine no longer knows the job, qacct has no record of it, and it "
                  "left no status file",
        gone=(("qstat", "-j"), 1),             # "Following jobs do not exist"
        refuse=_missing,
        refused=r"qsub refused missing\.sh: Unable to read script file because of error: "
                r"error opening \S*missing\.sh: No such file or directory",
    ),
    "none": Emulated(
        "local", "local",
        gaps={
            "test_a_forgotten_job_is_answered_by_its_status_file_and_none_is_an_error":
                "the local 'scheduler' is the job's own process, which cannot forget it",
            "test_a_job_that_never_starts_is_removed_at_the_pending_timeout":
                "a local job starts when it is submitted: it is never pending",
            "test_a_refused_submission_is_an_error_in_the_schedulers_words":
                "no scheduler stands between submission and run: any script is started "
                "(bash's complaints are the job's output and status)",
        },
    ),
}

# Registered backends no emulator here can stand in for, and why.
EXCLUDED: dict[str, str] = {}

REGISTERED = [b.name for b in schedulers.all_backends()]


def unconformed(registered: Iterable[str]) -> list[str]:
    """The registered backends this suite neither runs nor excludes with a reason."""
    return [n for n in registered if n not in EMULATED and not EXCLUDED.get(n, "").strip()]


def validation_scripts(site: str, partition: str, work: Path,
                       bodies: dict[str, str]) -> dict[str, Path]:
    """validate's own job scripts for a site, each running one body: the scheduler header
    and the status trap (the lines validate's status_trap writes, as they are) are kept, the
    site's module and launcher lines (which cannot run here) are replaced by the body."""
    o = Options(JobRequest(load_site(site), partition=partition, activate=False), ("env",))
    env_job = plan_jobs(o)[0]
    out = {}
    for name, body in bodies.items():
        text = job_script(replace(env_job, id=name), o, str(work), ("bash", "-c", body))
        trap = status_trap(f"{work}/{name}.exit")
        lines = text.splitlines()
        assert all(line in lines for line in trap), (trap, text)
        head = [ln for ln in lines if ln.startswith("#") or ln in trap]
        out[name] = work / f"{name}.sh"
        out[name].write_text("\n".join([*head, body]) + "\n")
    return out


@dataclass
class Sched:
    """One backend under test: its Backend, its emulator's environment, a work folder."""

    name: str
    backend: Backend
    spec: Emulated
    env: dict[str, str]
    work: Path

    def executor(self, extra: dict[str, str] | None = None) -> Executor:
        """The backend's executor (through the registry), seeing the emulator."""
        return self.backend.executor({**self.env, **(extra or {})})

    def scripts(self, bodies: dict[str, str]) -> dict[str, Path]:
        """validate's own job scripts for the site, each running one body."""
        return validation_scripts(self.spec.site, self.spec.partition, self.work, bodies)

    def submit(self, ex: Executor, scripts: dict[str, Path]) -> list[Handle]:
        return [ex.submit(p, self.work / f"{n}.out", self.work / f"{n}.exit")
                for n, p in scripts.items()]


@pytest.fixture(params=REGISTERED)
def sched(request: pytest.FixtureRequest, tmp_path: Path) -> Sched:
    name: str = request.param
    if name in EXCLUDED:
        pytest.skip(f"{name}: {EXCLUDED[name]}")
    spec = EMULATED.get(name)
    if spec is None:
        pytest.fail(f"backend {name!r} is registered but {Path(__file__).name} neither "
                    "emulates it (EMULATED) nor excludes it with a reason (EXCLUDED)")
    test = request.function.__name__
    if test in spec.gaps:
        pytest.skip(f"{name}: {spec.gaps[test]}")
    if test in spec.xfail:
        request.applymarker(pytest.mark.xfail(strict=True, reason=f"{name}: {spec.xfail[test]}"))
    work = tmp_path / "run"
    work.mkdir()
    return Sched(name, schedulers.backend(name), spec, spec.environment(tmp_path, name), work)


# ---- the registry ----------------------------------------------------------------------

def test_every_registered_backend_is_emulated_or_excluded_with_a_reason() -> None:
    assert list(SCHEDULERS) == REGISTERED
    assert unconformed(REGISTERED) == []
    assert not set(EMULATED) & set(EXCLUDED)
    assert set(EMULATED) | set(EXCLUDED) <= set(REGISTERED)  # no entry for a removed one
    tests = {n for n in globals() if n.startswith("test_")}
    for spec in EMULATED.values():
        assert set(spec.gaps) | set(spec.xfail) <= tests     # no entry for a renamed test
        assert all(reason.strip() for reason in [*spec.gaps.values(), *spec.xfail.values()])


def test_a_newly_registered_backend_without_an_emulator_is_caught() -> None:
    assert unconformed([*REGISTERED, "toy"]) == ["toy"]


# ---- submit, poll, exit codes, nodes ---------------------------------------------------

def test_jobs_run_to_completion_with_the_schedulers_exit_codes_and_nodes(sched: Sched) -> None:
    scripts = sched.scripts({"ok": "echo fine", "bad": "exit 3"})
    if sched.spec.header is not None:
        assert sched.spec.header in scripts["ok"].read_text()
    ex = sched.executor()
    handles = sched.submit(ex, scripts)
    if sched.spec.first_ids is not None:
        assert tuple(h.job_id for h in handles) == sched.spec.first_ids
    assert len({h.job_id for h in handles}) == 2 and all(h.job_id for h in handles)
    for h in handles:  # the status files the traps write are not where the handles look:
        h.exit_file = sched.work / f"{h.script.stem}.unread.exit"  # the scheduler answers
    ex.wait(handles, timeout_s=60, pending_timeout_s=60)
    got = {h.script.stem: (h.state, h.exit_code) for h in handles}
    assert got == {"ok": ("COMPLETED", 0), "bad": ("FAILED", 3)}
    # every scheduler names the nodes of a job, one that ended before a poll saw it run too
    assert all(h.nodes == HERE and h.reason == "" for h in handles)
    assert (sched.work / "ok.out").read_text().strip() == "fine"
    assert {e["job"] for e in ex.events} == {h.job_id for h in handles}
    for h in handles:
        assert {"job": h.job_id, "event": f"ended rc={h.exit_code}", "state": h.state} in \
            [{k: e[k] for k in ("job", "event", "state")} for e in ex.events]


def test_a_job_killed_by_a_signal_ends_with_128_plus_the_signal(sched: Sched) -> None:
    ex = sched.executor()
    (h,) = sched.submit(ex, sched.scripts({"killed": "kill -KILL $$"}))
    ex.wait([h], timeout_s=60, pending_timeout_s=60)
    assert (h.state, h.exit_code) == ("FAILED", 128 + signal.SIGKILL)
    assert h.nodes == HERE


# ---- a job the scheduler forgot --------------------------------------------------------

def test_a_forgotten_job_is_answered_by_its_status_file_and_none_is_an_error(
        sched: Sched) -> None:
    ex = sched.executor(sched.spec.forget)
    handles = sched.submit(ex, sched.scripts({"ok": "true", "bad": "exit 5", "lost": "true"}))
    lost = next(h for h in handles if h.script.stem == "lost")
    # "lost" died before its trap could write (as on a node crash): no status file
    lost.exit_file = sched.work / "never-written.exit"
    ex.wait(handles, timeout_s=60, pending_timeout_s=60)
    got = {h.script.stem: (h.state, h.exit_code) for h in handles}
    assert got == {"ok": ("COMPLETED", 0), "bad": ("FAILED", 5), "lost": ("UNKNOWN", None)}
    assert lost.reason == sched.spec.forgotten
    result = JobResult("lost", "env", "", 1, lost.state, lost.exit_code, "", [], [], 1.0,
                       reason=lost.reason)
    (outcome,) = judge([result], {})
    assert outcome.status == "error"  # never a pass


# ---- timeouts and cancel ---------------------------------------------------------------

def test_a_job_that_never_starts_is_removed_at_the_pending_timeout(sched: Sched) -> None:
    ex = sched.executor(sched.spec.hold)
    (h,) = sched.submit(ex, sched.scripts({"held": "true"}))
    ex.wait([h], timeout_s=60, pending_timeout_s=1)
    assert (h.state, h.exit_code, h.started) == ("PENDING_TIMEOUT", None, None)
    assert h.reason == "still pending after 1 s"
    argv, unknown = sched.spec.gone
    asked = subprocess.run([*argv, h.job_id], capture_output=True, text=True, env=sched.env,
                           timeout=30)
    assert asked.returncode == unknown      # the scheduler removed it from its queue
    again = replace(h, state="PENDING", ended=None, reason="")  # what the scheduler says now
    ex.refresh([again])
    assert (again.state, again.exit_code, again.reason) == ("UNKNOWN", None,
                                                            sched.spec.forgotten)


def test_a_running_job_is_cancelled_at_the_run_timeout(sched: Sched) -> None:
    ex = sched.executor()
    (h,) = sched.submit(ex, sched.scripts({"long": "sleep 600"}))
    ex.wait([h], timeout_s=1)
    assert (h.state, h.exit_code, h.reason) == ("TIMEOUT", None, "not finished after 1 s")
    assert [e["event"] for e in ex.events if e["job"] == h.job_id][-1] == \
        "cancelled: not finished after 1 s"
    again = replace(h, state="RUNNING", ended=None, reason="")  # what the scheduler says now
    ex.refresh([again])
    assert again.done and again.state == sched.spec.cancelled_state  # cancel() stopped it


def test_cancelling_a_running_job_reports_the_signal(sched: Sched) -> None:
    ex = sched.executor()
    (h,) = sched.submit(ex, sched.scripts({"long": "sleep 600"}))
    ex.refresh([h])
    assert (h.state, h.done, h.nodes) == ("RUNNING", False, HERE)
    assert h.started is not None
    ex.cancel(h)
    ex.refresh([h])
    assert (h.state, h.exit_code) == (sched.spec.cancelled_state, sched.spec.cancelled_status)


# ---- refusal ---------------------------------------------------------------------------

def test_a_refused_submission_is_an_error_in_the_schedulers_words(sched: Sched) -> None:
    assert sched.spec.refuse is not None
    script = sched.spec.refuse(sched.work)
    ex = sched.executor()
    with pytest.raises(HpcprovError, match=sched.spec.refused):
        ex.submit(script, sched.work / "o", sched.work / "e")
    assert ex.events == []  # nothing recorded as submitted


# ---- node states -----------------------------------------------------------------------

def test_usable_nodes_are_the_schedulers_or_unknown(sched: Sched) -> None:
    """A backend that does not ask its scheduler says None (unknown), never [] (which would
    mean that no node can run jobs)."""
    assert sched.executor().usable_nodes(sched.spec.partition) == sched.spec.usable_nodes


# ---- one allocation (hpcprov/schedulers/allocation.py) ---------------------------------

def test_validate_runs_one_allocation_only_where_jobs_can_run_as_steps(
        sched: Sched, tmp_path: Path) -> None:
    from hpcprov.jobs.layout import manifest_file
    from hpcprov.validate.api import ValidateOptions, prepare

    manifest_file(tmp_path / "env").parent.mkdir(parents=True)
    manifest_file(tmp_path / "env").write_text("{}")        # a provisioned prefix

    def prepared(allocation: str | None) -> str:
        # the site's mandatory account given, as every job there needs it (issue 45)
        required = load_site(sched.spec.site).policies.required_options
        options = tuple(f"{name}={o.example or o.default or 'x'}"
                        for name, o in required.items() if o.default is None)
        return prepare(ValidateOptions(
            site=sched.spec.site, partition=sched.spec.partition, nodes=1,
            prefix=str(tmp_path / "env"), workdir=str(tmp_path / "v"),
            allocation=allocation, options=options)).allocation

    steps = sched.executor().steps is not None
    assert prepared(None) == ("one" if steps else "per-job")
    assert prepared("per-job") == "per-job"
    if steps:
        assert prepared("one") == "one"
    else:
        with pytest.raises(UsageError,
                           match="--allocation one: " + re.escape(sched.backend.title)):
            prepared("one")


def test_jobs_run_as_steps_of_one_allocation(sched: Sched, tmp_path: Path) -> None:
    from hpcprov.schedulers.allocation import OneAllocation
    from hpcprov.validate.plan import allocation_script

    if sched.executor().steps is None:
        pytest.skip(f"{sched.name}: its executor has no steps, so its jobs cannot run "
                    "other jobs as steps of one allocation: validate runs a job per check")
    o = Options(JobRequest(load_site(sched.spec.site), partition=sched.spec.partition,
                           activate=False), ("env",))
    ex = OneAllocation(sched.executor(), tmp_path / "alloc",
                       lambda queue: allocation_script(o, queue))
    scripts = sched.scripts({"ok": "echo fine", "bad": "exit 3"})
    handles = [ex.submit(p, sched.work / f"{n}.out", sched.work / f"{n}.exit",
                         Placement(1, 1)) for n, p in scripts.items()]
    ex.wait(handles, timeout_s=60, pending_timeout_s=60)
    got = {h.script.stem: (h.state, h.exit_code, h.nodes) for h in handles}
    assert got == {"ok": ("COMPLETED", 0, HERE), "bad": ("FAILED", 3, HERE)}
    assert (sched.work / "ok.out").read_text().strip() == "fine"
    ex.close()
    (alloc,) = ex.allocations  # one allocation for both jobs, ended when told
    assert alloc.done and alloc.exit_code == 0


# ---- an interrupted run (validate/run.py: Executor.abort) ------------------------------

def test_abort_cancels_every_live_job_at_once_and_names_them(sched: Sched) -> None:
    ex = sched.executor()
    handles = sched.submit(ex, sched.scripts({"long": "sleep 600", "short": "true"}))
    ex.wait([handles[1]], timeout_s=60)
    gone = ex.abort(handles)
    assert gone == [f"job {handles[0].job_id}"]  # the ended one is left as it ended
    assert handles[0].state == "CANCELLED" and handles[1].state == "COMPLETED"
    fresh = Handle(handles[0].job_id, handles[0].script, handles[0].output,
                   handles[0].exit_file, handles[0].submitted, proc=handles[0].proc)
    ex.wait([fresh], timeout_s=60)  # the scheduler says it ended: cancelled, not running
    assert fresh.done and fresh.exit_code != 0


def test_abort_cancels_the_allocation_with_its_steps_at_once(sched: Sched,
                                                             tmp_path: Path) -> None:
    from hpcprov.schedulers.allocation import OneAllocation
    from hpcprov.validate.plan import allocation_script

    if sched.executor().steps is None:
        pytest.skip(f"{sched.name}: no allocation of steps")
    o = Options(JobRequest(load_site(sched.spec.site), partition=sched.spec.partition,
                           activate=False), ("env",))
    ex = OneAllocation(sched.executor(), tmp_path / "alloc",
                       lambda queue: allocation_script(o, queue))
    (path,) = sched.scripts({"long": "sleep 600"}).values()
    h = ex.submit(path, sched.work / "long.out", sched.work / "long.exit", Placement(1, 1))
    deadline = time.monotonic() + 60
    while h.started is None:  # the step starts (wait() would give it up at its timeout)
        ex.refresh([h])
        assert not h.done and time.monotonic() < deadline, h.reason
        time.sleep(0.05)
    (alloc,) = ex.allocations
    gone = ex.abort([h])
    assert gone == [f"allocation {alloc.job_id} (steps {h.job_id})"]
    assert h.state == "CANCELLED" and alloc.state == "CANCELLED"
    fresh = Handle(alloc.job_id, alloc.script, alloc.output, alloc.exit_file, alloc.submitted,
                   proc=alloc.proc)
    ex.inner.wait([fresh], timeout_s=60)
    assert fresh.done and fresh.exit_code != 0


# ---- the planning half: every registered scheduler, from a minimal profile --------------
#
# Nothing below names a scheduler: each registered backend (its spelling record, its
# emulator's directive reader, its geometry options) is asked, so a scheduler is checked
# here the day it is registered.

MINIMAL = """\
name: min-{name}
scheduler: {name}
partitions:
  batch:
    nodes: 4
    cores_per_node: 32
    gpus: {{count: 4}}
    limits: {{default_walltime: "01:00:00"}}
    default: true
launchers:
  mpirun: {{kind: mpirun, rendezvous_env: true, oversubscribe: true}}
  torchrun: {{kind: torchrun, per_node_wrapper: mpirun, rdzv_host: first_node}}
default_launcher: torchrun
"""


@dataclass
class Planned:
    """One registered backend and a minimal profile on it."""

    backend: Backend
    profile: Path

    def request(self, nodes: int, *options: str, launcher: str | None = None) -> JobRequest:
        from hpcprov.jobs.api import request

        return request(str(self.profile), options, store=False, partition="batch",
                       nodes=nodes, command=("python", "train.py"),
                       **({"launcher": launcher} if launcher else {}))

    def emulator(self) -> ModuleType:
        """The module of the emulator the backend's EMULATED entry names."""
        spec = EMULATED.get(self.backend.name)
        assert spec is not None and spec.emulator, \
            f"{self.backend.name} has a spelling record but no emulator in EMULATED"
        return importlib.import_module(Path(spec.emulator).stem)


@pytest.fixture(params=REGISTERED)
def planned(request: pytest.FixtureRequest, tmp_path: Path) -> Planned:
    name: str = request.param
    profile = tmp_path / f"min-{name}.yaml"
    profile.write_text(MINIMAL.format(name=name))
    return Planned(schedulers.backend(name), profile)


def test_a_two_node_script_reads_back_through_the_emulator_as_planned(
        planned: Planned) -> None:
    from hpcprov.jobs.api import plan_jobscript

    backend, record = planned.backend, planned.backend.spelling
    if backend.max_nodes == 1:
        pytest.skip(f"{backend.name}: one node at most (its refusal of two is checked below)")
    req = planned.request(2)
    job = plan_jobscript(req)
    assert record is not None, f"{backend.name} plans multi-node jobs but spells no directives"
    options = backend.options(req, batch=True)
    assert options, f"{backend.name} asks its scheduler for nothing"
    read = planned.emulator().options(job.script)
    assert read == kit.planned(record, options, backend.written)
    # the directive lines are the record's, one per option, before the first command
    lines = [ln for ln in job.script.splitlines() if ln.startswith(record.prefix)]
    assert lines == backend.directives(req) and len(lines) == len(options)
    # the submit line is the record's
    stdin = [Raw("<")] if record.stdin else []
    assert job.submit == [*record.submit, *stdin, "job.sh"] == backend.submit_argv("job.sh")


def test_the_rank_environment_is_written_from_the_schedulers_words(planned: Planned) -> None:
    from hpcprov.jobs.api import plan_jobscript

    backend = planned.backend
    if backend.max_nodes == 1:  # one host: torchrun's own rendezvous, no host or id asked
        script = plan_jobscript(planned.request(1)).script
        assert "--standalone" in script and backend.job_id() is None
        return
    req = planned.request(2)
    script = plan_jobscript(req).script
    first = backend.first_node(req)
    assert str(first).startswith('"$'), \
        f"{backend.name}'s first node is no word the job expands: {first}"
    assert f"--rdzv_endpoint={first}:" in script        # the rendezvous host
    job_id = backend.job_id()
    assert job_id is not None and f"--rdzv_id={job_id}" in script  # the job id
    mpirun = plan_jobscript(planned.request(2, launcher="mpirun")).script
    assert f"MASTER_ADDR={first}" in mpirun             # mpirun's ranks: torch's variables


def test_lint_refuses_what_the_scheduler_must_refuse(planned: Planned) -> None:
    from hpcprov.core.findings import LintFailed
    from hpcprov.jobs.api import plan_jobscript
    from hpcprov.jobs.lint import lint

    backend = planned.backend
    if backend.max_nodes is not None:
        req = planned.request(backend.max_nodes + 1)
        assert [f for f in lint(req) if f.level == "error"], \
            f"{backend.name} runs {backend.max_nodes} node(s) at most, yet lint allows more"
        with pytest.raises(LintFailed):
            plan_jobscript(req)
    geometry = dict(backend.geometry_options)
    assert geometry or backend.max_nodes == 1, \
        f"{backend.name} declares no option that sets a job's geometry (geometry_options)"
    for name, kind in geometry.items():
        req = planned.request(1, f"{name}=2")
        errors = [f for f in lint(req) if f.level == "error"]
        assert errors, f"{backend.name}: -o {name}=2 would set the job's {kind} unrefused"
        assert len(errors) == 1 and name in errors[0].message, errors
        with pytest.raises(LintFailed):
            plan_jobscript(req)


def test_the_planned_rank_words_name_the_jobs_first_node_and_id(
        sched: Sched, tmp_path: Path) -> None:
    """The planning half's shell words for the first node and the job id, run inside a job
    of the scheduler's emulator: this host, and the id the scheduler gave."""
    backend = sched.backend
    req = JobRequest(load_site(sched.spec.site), partition=sched.spec.partition,
                     activate=False)
    words = f"echo first={backend.first_node(req)} id={backend.job_id() or 'none'}"
    ex = sched.executor()
    (h,) = sched.submit(ex, sched.scripts({"words": words}))
    ex.wait([h], timeout_s=60, pending_timeout_s=60)
    assert h.exit_code == 0, (sched.work / "words.out").read_text()
    said = (sched.work / "words.out").read_text().split()
    first = HERE if backend.max_nodes != 1 else "localhost"
    assert said == [f"first={first}", f"id={h.job_id if backend.job_id() else 'none'}"]
