"""One validation run: write the programs and job scripts, submit them round by round,
collect and judge. Measurement jobs run one at a time (they would disturb each other);
the pernode jobs run together, one round for the whole partition."""

from __future__ import annotations

import time
from collections.abc import Callable
from importlib import resources
from pathlib import Path

from hpcprov.provision.horovod import expected_check_build
from hpcprov.validate.execute import Executor, Handle
from hpcprov.validate.judge import JobResult, judge, parse_records
from hpcprov.validate.plan import Job, Options, has_horovod, job_script, plan_jobs

from hpcprov.errors import HpcprovError
from hpcprov.shell import join


def copy_programs(rundir: Path, names: set[str]) -> None:
    """Put the programs the jobs run into the run directory (the nodes read them there)."""
    folder = resources.files("hpcprov.validate") / "programs"
    for name in sorted(names):
        (rundir / name).write_text((folder / name).read_text())


def command_for(job: Job, o: Options, rundir: Path) -> tuple[str, ...]:
    program = str(rundir / job.program)
    if job.check == "env":
        run = join(["python", program, *job.args])
        if has_horovod(o.site) and o.site.horovod.source != "container":
            run = f"horovodrun -cb 2>&1 | sed 's/^/HPCPROV_CB /'; {run}"
        return ("bash", "-c", run)
    return ("python", program, *job.args)


def _result(job: Job, h: Handle) -> JobResult:
    try:
        text = h.output.read_text(errors="replace")
    except OSError:
        text = ""
    seconds = (h.ended or time.monotonic()) - h.submitted
    return JobResult(job.id, job.check, job.impl, job.nodes, h.state, h.exit_code,
                     h.nodes, parse_records(text), text.splitlines()[-40:], seconds,
                     job.baseline, job.node, h.reason)


def _not_run(job: Job, why: str) -> JobResult:
    return JobResult(job.id, job.check, job.impl, job.nodes, "NOT_RUN", None, "", [], [], 0.0,
                     job.baseline, job.node, why)


def run_validation(o: Options, prefix: str | None, rundir: Path, executor: Executor,
                   timeout_s: float, pending_timeout_s: float | None = None,
                   progress: Callable[[str], None] = lambda s: None) -> dict:  # type: ignore[type-arg]
    """Run every job of the plan; return the run's data (judged, not yet reported)."""
    t0 = time.monotonic()
    started = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    rundir.mkdir(parents=True, exist_ok=True)
    jobs = plan_jobs(o)
    copy_programs(rundir, {j.program for j in jobs})
    rounds = [[j] for j in jobs if j.check != "pernode"]
    if any(j.check == "pernode" for j in jobs):
        rounds.append([j for j in jobs if j.check == "pernode"])
    results: list[JobResult] = []
    busy = 0.0
    for rnd in rounds:
        left = timeout_s - (time.monotonic() - t0)
        if left <= 0:
            results += [_not_run(j, f"not run: the {timeout_s:.0f} s timeout was spent")
                        for j in rnd]
            continue
        handles, submitted = [], []
        for job in rnd:
            script = rundir / f"{job.id}.sh"
            script.write_text(job_script(job, o, prefix, str(rundir),
                                         command_for(job, o, rundir)))
            (rundir / f"{job.id}.exit").unlink(missing_ok=True)
            try:
                handles.append(executor.submit(script, rundir / f"{job.id}.out",
                                               rundir / f"{job.id}.exit"))
                submitted.append(job)
            except HpcprovError as exc:  # the scheduler refused it: an error, not the end
                results.append(_not_run(job, f"refused by the scheduler: {exc}"))
        if not handles:
            continue
        progress(f"running {', '.join(j.id for j in submitted)}")
        executor.wait(handles, min(left, max(j.timeout_s for j in submitted)),
                      pending_timeout_s)
        for job, h in zip(submitted, handles, strict=True):
            res = _result(job, h)
            results.append(res)
            progress(f"{job.id}: {h.state} (exit {h.exit_code}) in {res.seconds:.1f} s")
        busy += max((h.ended or time.monotonic()) - h.submitted for h in handles)
    refs = o.site.partitions[o.partition].references
    cb = expected_check_build(o.site.horovod) if has_horovod(o.site) and \
        o.site.horovod.source != "container" else None
    outcomes = judge(results, refs, cb, gpus_expected=(
        o.site.partitions[o.partition].gpus.count if o.device == "cuda" else 0))
    seconds = time.monotonic() - t0
    return {
        "site": o.site.name, "partition": o.partition, "nodes": o.nodes, "started": started,
        "seconds": seconds, "jobs_seconds": busy, "overhead_s": max(0.0, seconds - busy),
        "rundir": str(rundir), "scheduler": executor.name,
        "ok": not any(x.status in ("fail", "error") for x in outcomes),
        "outcomes": [x.to_json() for x in outcomes],
        "jobs": [{"id": r.id, "check": r.check, "impl": r.impl, "state": r.state,
                  "exit_code": r.exit_code, "node_list": r.pinned or r.node_list,
                  "seconds": r.seconds, "records": r.records, "reason": r.reason}
                 for r in results],
        "events": executor.events,
    }


def default_rundir(o: Options) -> str:
    base = o.site.paths.workdir or o.site.paths.scratch
    return f"{base}/hpcprov-validate/{o.site.name}-{time.strftime('%Y%m%d-%H%M%S')}"

