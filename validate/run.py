"""One validation run: write the programs and job scripts, submit them round by round,
collect and judge. Measurement jobs run one at a time (they would disturb each other),
except in a smoke run on CPUs, where they run side by side and their figures are not
judged; the pernode jobs run together, one round for the whole partition; the links
check's pair jobs run a round at a time, and its confirmations one at a time."""

from __future__ import annotations

import contextlib
import errno
import os
import re
import stat
import time
from collections.abc import Callable
from pathlib import Path

from hpcprov.core import fsutil
from hpcprov.core.errors import HpcprovError
from hpcprov.core.interrupts import Guard, Interrupted, cancelling
from hpcprov.jobs.checkbuild import expected_check_build
from hpcprov.schedulers.base import Executor, Handle, read_run_seconds
from hpcprov.validate.judge import JobResult, Outcome, judge, shaped_records
from hpcprov.validate.links import LinkSearch, Pair, judge_pairs, link_outcomes, pair_busbw
from hpcprov.validate.plan import (
    REGISTRY,
    Job,
    Options,
    has_horovod,
    job_rounds,
    job_script,
    link_job,
    placement,
    plan_jobs,
    programs,
)

RUNS = "a validation job"  # who runs the run folder's files (the one rule's message)


def copy_programs(rundir: Path) -> None:
    """Put every program, and the runtime.py they import, into the run directory (the
    nodes read them there; the links search decides its jobs as it goes), each by the one
    rule for code (:func:`fsutil.write_code`). The job scripts check them against the
    digests written into each script (:func:`hpcprov.validate.plan.programs`)."""
    for name, text in programs().items():
        fsutil.write_code(rundir / name, text, what=f"the validation program {name}",
                          runs=RUNS)


def _checks_horovod_build(o: Options) -> bool:
    """Whether the env check compares ``horovodrun -cb`` with the profile's build."""
    return has_horovod(o.site) and o.site.horovod.source != "container"


def command_for(job: Job, o: Options, rundir: Path) -> tuple[str, ...]:
    """The command a job's launch runs: its program; the env check's also answers
    ``horovodrun -cb`` (with the frameworks it imports already imported), every line of
    that tagged for the judge."""
    cb = ("--check-build",) if job.check == "env" and _checks_horovod_build(o) else ()
    # (the programs write no bytecode of runtime.py beside it: a __pycache__ a group member
    # could replace under umask 002; the program check refuses one that is there)
    return ("python", str(rundir / job.program), *job.args, *cb)


MAX_OUTPUT_BYTES = 64 << 20  # a job's output: its records and some thousand lines, far less


def _result(job: Job, h: Handle) -> JobResult:
    unread = ""
    try:  # a regular file of bounded size (a FIFO is never waited on, GBs never read), of
        # this user's that nobody else may write: else it could be a forged PASS
        text = fsutil.read_regular(h.output, MAX_OUTPUT_BYTES, follow=False,
                                   owned_only=True).decode("utf-8", "replace")
    except (fsutil.NotRegularFile, fsutil.TooLarge, fsutil.NotOwned) as exc:
        text, unread = "", f"output not read: {exc}"  # that job's error, naming why
    except OSError as exc:
        text = ""
        if exc.errno == errno.ELOOP:
            unread = f"output not read: {h.output} is a symbolic link, not the job's file"
    seconds = (h.ended or time.monotonic()) - h.submitted
    records, malformed = shaped_records(text)
    malformed = unread or malformed
    return JobResult(job.id, job.check, job.impl, job.nodes, h.state, h.exit_code,
                     h.nodes, records, text.splitlines()[-40:], seconds,
                     job.baseline, job.node, h.reason, h.bad_nodes,
                     read_run_seconds(h.exit_file), job.shared, malformed)


def _not_run(job: Job, why: str) -> JobResult:
    return JobResult(job.id, job.check, job.impl, job.nodes, "NOT_RUN", None, "", [], [], 0.0,
                     job.baseline, job.node, why)


class _Rounds:
    """Submits rounds of jobs (a round's jobs run at the same time) within the run's time,
    and keeps what every job left."""

    def __init__(self, o: Options, rundir: Path, executor: Executor, timeout_s: float,
                 pending_timeout_s: float | None, progress: Callable[[str], None],
                 guard: Guard | None = None) -> None:
        self.o, self.rundir, self.executor = o, rundir, executor
        self.guard = guard or Guard()
        self.handles: list[Handle] = []  # every job submitted: what an interrupt cancels
        self.timeout_s, self.pending_timeout_s, self.progress = (timeout_s, pending_timeout_s,
                                                                 progress)
        self.t0 = time.monotonic()
        self.busy = 0.0
        self.dead: set[str] = set()  # nodes seen dying during this run
        self._nodes_at: tuple[float, list[str] | None] | None = None  # when, usable nodes

    def _usable(self) -> list[str] | None:
        """The partition's nodes that can take jobs now: the scheduler is asked (sinfo) at
        most once per the site's poll interval (policies.scheduler_poll_seconds), however
        many rounds the run has."""
        now = time.monotonic()
        if self._nodes_at is None or now - self._nodes_at[0] >= self.executor.pace():
            self._nodes_at = (now, self.executor.usable_nodes(self.o.partition,
                                                              self.o.node_picks))
        return self._nodes_at[1]

    def _unrunnable(self, job: Job, usable: list[str] | None) -> str | None:
        """Why a job cannot start now (too few usable nodes), or None."""
        if usable is None:
            return None
        seen = f"; {', '.join(sorted(self.dead))} stopped answering during this run" \
            if self.dead else ""
        if job.node:
            missing = [n for n in job.node.split(",") if n not in usable]
            if missing:
                return f"not run: {', '.join(missing)} cannot take jobs now{seen}"
        elif len(usable) < job.nodes:
            return (f"not run: only {len(usable)} node(s) of {self.o.partition} can take jobs "
                    f"now, the job needs {job.nodes}{seen}")
        return None

    def run(self, rnd: list[Job]) -> list[JobResult]:
        left = self.timeout_s - (time.monotonic() - self.t0)
        if left <= 0:
            return [_not_run(j, f"not run: the {self.timeout_s:.0f} s timeout was spent")
                    for j in rnd]
        results: list[JobResult] = []
        handles: list[Handle] = []
        submitted: list[Job] = []
        usable = self._usable()
        for job in rnd:
            why = self._unrunnable(job, usable)
            if why:
                results.append(_not_run(job, why))
                continue
            script = self.rundir / f"{job.id}.sh"
            fsutil.write_code(script, job_script(job, self.o, str(self.rundir),
                                                 command_for(job, self.o, self.rundir)),
                              what=f"the job script {script.name}", runs=RUNS)
            (self.rundir / f"{job.id}.exit").unlink(missing_ok=True)
            try:
                with self.guard.held():  # a job submitted is a job known, to cancel it
                    h = self.executor.submit(script, self.rundir / f"{job.id}.out",
                                             self.rundir / f"{job.id}.exit",
                                             placement(job, self.o))
                    handles.append(h)
                    self.handles.append(h)
                    submitted.append(job)
            except Interrupted:  # a signal during the submission: the run ends (and cancels)
                raise
            except HpcprovError as exc:  # the scheduler refused it: an error, not the end
                results.append(_not_run(job, f"refused by the scheduler: {exc}"))
        if not handles:
            return results
        self.progress(f"running {', '.join(j.id for j in submitted)}")
        self.executor.wait(handles, min(left, max(j.timeout_s for j in submitted)),
                           self.pending_timeout_s)
        for job, h in zip(submitted, handles, strict=True):
            res = _result(job, h)
            results.append(res)
            self.dead |= set(filter(None, h.bad_nodes.split(",")))
            self.progress(f"{job.id}: {h.state} (exit {h.exit_code}) in {res.seconds:.1f} s"
                          + (f": {h.reason}" if h.reason else ""))
        self.busy += max((h.ended or time.monotonic()) - h.submitted for h in handles)
        return results


def _pair_readings(pairs: list[Pair], jobs: list[Job], got: list[JobResult], alone: bool
                   ) -> dict[Pair, float | None]:
    """Pair -> the busbw its job measured, for the jobs that count: in a round of pairs every
    one (a job that did not run reads as failed); alone only one that ran (not running
    confirms nothing)."""
    by_id = {r.id: r for r in got}
    return {p: pair_busbw(by_id[j.id]) for p, j in zip(pairs, jobs, strict=True)
            if not (alone and by_id[j.id].state == "NOT_RUN")}


def _search_links(o: Options, rounds: _Rounds) -> tuple[list[JobResult], dict]:
    """The links check: rounds of pair jobs (at the same time), then each suspect's slow
    pairs again, one job at a time, until the bad link is named and confirmed."""
    search = LinkSearch(list(o.node_names))
    refs = o.part.references
    results: list[JobResult] = []
    busbw: dict[bool, dict[Pair, float | None]] = {False: {}, True: {}}  # alone? -> readings
    while (step := search.next_step())[0]:
        pairs, alone = step
        jobs = [link_job(o, pair, search.rounds + 1) for pair in pairs]
        got = rounds.run(jobs)  # alone: a round of one job
        results += got
        read = _pair_readings(pairs, jobs, got, alone)
        busbw[alone].update(read)
        if read:
            search.record(judge_pairs(busbw[alone], refs, list(read), also=busbw[not alone]),
                          alone=alone)
        if any(r.state == "NOT_RUN" for r in got):
            break  # out of time or nodes: judge what was measured
    return results, {"search": search, "busbw": busbw[False], "alone": busbw[True]}


def _links_data(links: dict) -> dict:
    """The search in the run's data: rounds, jobs, verdict and every reading."""
    s, busbw, again = links["search"], links["busbw"], links["alone"]
    pairs = [{"pair": list(p), "round": s.round_of[p], "busbw_GBps": busbw.get(p),
              "fast": fast, "alone": False} for p, fast in s.tried.items()]
    pairs += [{"pair": list(p), "round": s.alone_round[p], "busbw_GBps": again.get(p),
               "fast": fast, "alone": True} for p, fast in s.alone.items()]
    return {"rounds": s.rounds, "jobs": len(pairs), "confirmations": len(s.alone),
            **s.verdict(), "pairs": sorted(pairs, key=lambda x: x["round"])}


def _judge(o: Options, results: list[JobResult]) -> list[Outcome]:
    """The outcomes of the checks that have a judge, against the partition."""
    part = o.part
    cb = expected_check_build(o.site.horovod) if _checks_horovod_build(o) else None
    return judge(results, part.references, cb,
                 gpus_expected=part.gpus.count if o.device != "cpu" else 0)


def _no_gpu_seen(o: Options, results: list[JobResult]) -> str | None:
    """Why a GPU validation stops after its env check: a node that sees no GPU (every GPU
    job would fail there, each for the same reason), or None."""
    if o.device == "cpu" or not o.part.gpus.count:
        return None
    blind = sorted({str(rec.get("host", "?")) for r in results if r.check == "env"
                    for rec in r.records if rec.get("gpus_visible", None) in (0, "0")})
    if not blind:
        return None
    return (f"no GPU visible on {', '.join(blind)}: stopped after the env check (the GPU "
            "checks would all fail there); --device cpu checks the CPU paths")


def run_validation(o: Options, rundir: Path, executor: Executor, timeout_s: float,
                   pending_timeout_s: float | None = None,
                   progress: Callable[[str], None] = lambda s: None) -> dict:
    """Run every job of the plan; return the run's data (judged, not yet reported)."""
    started = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    # the folder of the programs and job scripts: the one rule for code (nobody else can
    # write or swap it; refused in one line before anything is written)
    fsutil.code_folder(rundir, "the validation's programs and job scripts", RUNS)
    with _lock_rundir(rundir), cancelling() as guard:
        return _run_validation(o, rundir, executor, timeout_s, pending_timeout_s, progress,
                               started, guard)


RUN_LOCK = ".hpcprov-validate.lock"


def _lock_rundir(rundir: Path) -> contextlib.AbstractContextManager[int]:
    """An exclusive lock on the run folder for the run's life: the files in it are named by
    check, so a second validation writing there would mix its results with this one's."""
    def held(holder: str) -> str:
        pid = re.match(r"(?:pid )?([0-9]{1,9})", holder)
        return (f"another validation is running in {rundir} (pid {pid.group(1) if pid else '?'})"
                ": wait for it, or pass another --workdir")

    return fsutil.exclusive_lock(rundir / RUN_LOCK, held)


def _run_validation(o: Options, rundir: Path, executor: Executor, timeout_s: float,
                    pending_timeout_s: float | None, progress: Callable[[str], None],
                    started: str, guard: Guard) -> dict:
    copy_programs(rundir)
    rounds = _Rounds(o, rundir, executor, timeout_s, pending_timeout_s, progress, guard)
    results: list[JobResult] = []
    links: dict | None = None
    stopped: str | None = None
    try:
        for rnd in job_rounds(plan_jobs(o)):
            results += rounds.run(rnd)
            stopped = _no_gpu_seen(o, results)
            if stopped:
                progress(stopped)
                break
        if "links" in o.checks and not stopped:  # the one search check
            found, links = _search_links(o, rounds)
            results += found
        executor.close()
    except BaseException as exc:  # interrupted, or failed: nothing it started runs on
        gone = executor.abort(rounds.handles)
        if isinstance(exc, Interrupted):
            raise Interrupted(exc.signum, _cancelled(gone, rundir)) from None
        raise
    outcomes = _judge(o, [r for r in results if REGISTRY[r.check].judge is not None])
    if links is not None:
        outcomes += link_outcomes(links["search"], links["busbw"],
                                  [r for r in results if r.check == "links"], links["alone"])
    seconds = time.monotonic() - rounds.t0
    data = {
        "site": o.site.name, "partition": o.partition, "nodes": o.nodes, "started": started,
        "seconds": seconds, "jobs_seconds": rounds.busy,
        "overhead_s": max(0.0, seconds - rounds.busy),
        "rundir": str(rundir), "scheduler": executor.name,
        "ok": not any(x.status in ("fail", "error") for x in outcomes) and not stopped,
        "stopped": stopped,
        "outcomes": [x.to_json() for x in outcomes],
        "jobs": [{"id": r.id, "check": r.check, "impl": r.impl, "state": r.state,
                  "exit_code": r.exit_code, "node_list": r.pinned or r.node_list,
                  "seconds": r.seconds, "run_s": r.run_s, "records": r.records,
                  "reason": r.reason}
                 for r in results],
        "events": executor.events,
        # how many jobs went through the scheduler's queue (one allocation: 1, unless a
        # node failure ended it and a new one was needed)
        "submissions": sum(1 for e in executor.events if e["event"] == "submitted"),
    }
    if links is not None:
        data["links"] = _links_data(links)
    return data


def _cancelled(gone: list[str], rundir: Path) -> str:
    """What an interrupt cancelled, in words (one line)."""
    what = f"cancelled {', '.join(gone)}" if gone else "no job was running"
    return f"{what}; the run's files are in {rundir}"


def default_rundir(o: Options) -> tuple[str, str | None]:
    """A new folder per run: the time, and a random tag (two validations started in the
    same second, of two partitions, got one folder and mixed their results), in a parent
    of the user's own, ``hpcprov-validate-USER``: one name for every user made whoever
    validated first in a group scratch its owner, and the folder rule then refused every
    other member. Where that name is held by something not this user's (a folder of
    somebody else's, a file, a link), the run folder goes beside it, itself of a new random
    name, so nobody can keep a user from validating by taking the name first; the second
    value then says so (a warning), else None."""
    import secrets

    base = o.site.paths.workdir or o.site.paths.scratch
    user = _user_name()
    run = f"{o.site.name}-{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(3)}"
    parent = f"{base}/hpcprov-validate-{user}"
    held = _held_by_another(Path(os.path.expandvars(os.path.expanduser(parent))))
    if held is None:
        return f"{parent}/{run}", None
    return (f"{base}/hpcprov-validate-{user}-{run}",
            f"{parent} {held}: this run's folder is beside it instead")


def _user_name() -> str:
    """This user's name, for a folder name (the uid where the name is not a plain word)."""
    import pwd

    try:
        name = pwd.getpwuid(os.getuid()).pw_name
    except KeyError:
        name = ""
    return name if re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}", name) else str(os.getuid())


def _held_by_another(folder: Path) -> str | None:
    """Why ``folder`` cannot be this user's parent of run folders (None: it is missing or a
    real folder of this user's)."""
    try:
        st = os.lstat(folder)
    except OSError:
        return None  # missing (or its parent unreadable: the folder rule says so later)
    if stat.S_ISLNK(st.st_mode):
        return "is a symbolic link"
    if not stat.S_ISDIR(st.st_mode):
        return "is not a folder"
    if st.st_uid != os.getuid():
        return f"belongs to user {st.st_uid}"
    return None
