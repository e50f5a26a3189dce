"""`hpcprov validate` as a Python function: what to check, where, and with which knobs, in
one typed object; the run, its comparison with a stored run, its history and reports.

Sites that script their after-maintenance checks call :func:`validate` directly::

    from hpcprov.validate.api import ValidateOptions, validate
    data = validate(ValidateOptions(site="testbed", nodes=2))
    assert data["ok"]
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hpcprov import schedulers
from hpcprov.core import fsutil
from hpcprov.core.errors import UsageError
from hpcprov.core.text import shown
from hpcprov.jobs.api import request
from hpcprov.jobs.layout import expand_prefix, is_provisioned
from hpcprov.jobs.lint import cpus_exceeded
from hpcprov.request.options import GEOMETRY
from hpcprov.schedulers.allocation import OneAllocation
from hpcprov.schedulers.base import Executor
from hpcprov.site.gpu_vendors import VENDORS
from hpcprov.validate import report as rep
from hpcprov.validate.judge import Outcome
from hpcprov.validate.plan import (
    CHECKS,
    DEFAULT_CHECKS,
    Options,
    Skipped,
    allocation_request,
    allocation_script,
    node_picks,
    plan_jobs,
    plan_skipped,
)
from hpcprov.validate.run import default_rundir, run_validation

if TYPE_CHECKING:
    from hpcprov.request.job import JobRequest
    from hpcprov.site.types import Site


@dataclass(frozen=True)
class ValidateOptions:
    """Everything `hpcprov validate` takes (the CLI's flags, by name): the job the checks
    run as, as typed (``prepare`` makes it the request every job of the run starts from:
    :attr:`Options.job`), and validate's own flags."""

    # the job, as typed
    site: str | None = None
    partition: str | None = None       # default: the queue jobscript picks for each job
    nodes: int | None = None           # default: 2, or the partition's 1 node
    options: tuple[str, ...] = ()       # NAME=VALUE scheduler options for every job
    prefix: str | None = None          # --env: the provisioned prefix (default: the site's)
    # validate's own
    checks: tuple[str, ...] | None = None  # None: the default checks (DEFAULT_CHECKS)
    # the launchers every check runs through: ("all",) for every one the profile defines;
    # empty: the site's default torch launcher and Horovod's launchers
    launchers: tuple[str, ...] = ()
    ranks_per_node: int | None = None
    device: str | None = None          # default: cuda where the partition has GPUs
    max_bytes: int = 256 * 1024 * 1024
    iters: int = 20
    link_bytes: int = 64 * 1024 * 1024
    steps: int = 30
    timeout: float = 1800
    pending_timeout: float = 600
    workdir: str | None = None
    junit: str | None = None
    report: str | None = None
    compare: str | None = None           # "latest" or a stored run's file
    history: bool = True
    # "one": every job a step of one allocation (one wait in the queue); "per-job": a job
    # each; None: one allocation where the scheduler can run steps (Slurm), else per job
    allocation: str | None = None
    quick: bool = False                  # a smoke run: QUICK's sizes where left at defaults


# --quick: small messages, few iterations and steps, and no 1-node training baselines (a
# verdict that every path works and agrees; the bandwidth references are not reached and
# scaling is not measured, so neither is judged; the time on the testbed: docs/validation.md)
QUICK = {"max_bytes": 4 * 1024 * 1024, "iters": 5, "link_bytes": 4 * 1024 * 1024, "steps": 8}
ALLOCATIONS = ("one", "per-job")


@dataclass(frozen=True)
class Prepared:
    """A validation resolved against its site: the plan's options (the prefix the jobs run
    in among their job's fields), its run folder, and what of its checks cannot run there
    (each a SKIPPED row of its reports)."""

    options: Options
    rundir: Path
    allocation: str = "per-job"           # "one" or "per-job", resolved for the scheduler
    skipped: tuple[Skipped, ...] = ()
    notes: tuple[str, ...] = ()           # warnings about how it was resolved


def _checked(o: ValidateOptions) -> tuple[str, ...]:
    if o.checks is None:
        return DEFAULT_CHECKS
    bad = [c for c in o.checks if c not in CHECKS]
    if bad or not o.checks:
        raise UsageError(f"--checks {','.join(o.checks)!r}: choose from {', '.join(CHECKS)}")
    return o.checks


def _launchers(o: ValidateOptions, site: Site) -> tuple[str, ...]:
    """The launchers asked for (--launchers): ``all`` is every one the profile defines."""
    if not o.launchers:
        return ()
    if tuple(o.launchers) == ("all",):
        return tuple(site.launchers)
    unknown = [n for n in o.launchers if n not in site.launchers]
    if unknown:
        raise UsageError(f"--launchers {shown(','.join(o.launchers))}: site {site.name} has no "
                         f"launcher {shown(unknown[0])} (launchers: "
                         f"{', '.join(site.launchers)}; or all)")
    return tuple(dict.fromkeys(o.launchers))


def _unplannable(o: ValidateOptions, opts: Options, skipped: list[Skipped]) -> None:
    """A check named on the command line of which nothing can run is refused now, naming
    why (one line, before anything is submitted); the default checks' gaps are SKIPPED
    rows instead."""
    if o.checks is None:
        return
    planned = {job.check for job in plan_jobs(opts)}
    for check in opts.checks:
        if check in ("env", "allreduce", "train") and check not in planned:
            why = next((s.reason for s in skipped if s.check == check),
                       "no launcher of the site can run it")
            raise UsageError(f"--checks {check}: cannot run on site {opts.site.name}: {why}")


def _allocation(o: ValidateOptions, backend: Any, site: Site) -> str:
    if o.allocation is not None and o.allocation not in ALLOCATIONS:
        raise UsageError(f"--allocation {o.allocation!r}: choose from {', '.join(ALLOCATIONS)}")
    steps = backend.site_executor(site).steps is not None
    if o.allocation == "one" and not steps:
        raise UsageError(f"--allocation one: {backend.title} jobs cannot run other jobs as "
                         f"steps of one allocation (site {site.name}); use --allocation "
                         "per-job")
    return o.allocation or ("one" if steps else "per-job")


def _quick(o: ValidateOptions) -> ValidateOptions:
    """The options with QUICK's sizes for every knob left at its default."""
    if not o.quick:
        return o
    defaults = ValidateOptions()

    def size(name: str, typed: int, default: int) -> int:
        return QUICK[name] if typed == default else typed

    # each of QUICK's knobs by name, so that each value is checked against its field
    return replace(o, max_bytes=size("max_bytes", o.max_bytes, defaults.max_bytes),
                   iters=size("iters", o.iters, defaults.iters),
                   link_bytes=size("link_bytes", o.link_bytes, defaults.link_bytes),
                   steps=size("steps", o.steps, defaults.steps))


def _side_by_side(opts: Options) -> Options:
    """A smoke run's measurement jobs side by side (one round, one queue wait, start-ups
    overlapping), where every node has the cores for all of them at once; else as planned.
    CPU runs only: jobs on GPUs would share the node's GPUs."""
    shared = replace(opts, side_by_side=True)
    return opts if cpus_exceeded(allocation_request(shared)) else shared


def _device(asked: str | None, site: Site, partition: str) -> str:
    """Where the tensors live: ``asked``, else the partition's GPU vendor's torch device
    where it has GPUs, else the CPU; a device of another vendor's GPUs is refused."""
    part = site.partitions[partition]
    gpus = VENDORS[part.gpus.vendor]
    if asked is None:
        return gpus.torch_device if part.gpus.count else "cpu"
    if asked != "cpu" and (asked != gpus.torch_device or not part.gpus.count):
        have = f"{part.gpus.vendor} GPUs (torch device {gpus.torch_device})" \
            if part.gpus.count else "no GPUs"
        raise UsageError(f"--device {asked}: partition {partition} of site {site.name} has "
                         f"{have}: use --device cpu" + (
                             f" or --device {gpus.torch_device}" if part.gpus.count else ""))
    return asked


# what validate sets for its jobs instead of a -o that would set part of their geometry
SETS_ITSELF = {"nodes": "-N/--nodes", "tasks": "--ranks-per-node",
               "gpus": "the partition's GPUs, a rank each", "cpus": "the partition's CPUs",
               "time": "--timeout", "queue": "-p/--partition",
               "chunks": "-N/--nodes and --ranks-per-node",
               "placement": "-N/--nodes and --ranks-per-node"}


def _no_geometry(opts: Options, backend: Any) -> None:
    """Refuse a -o that would set the jobs' geometry, naming what validate sets it with
    (the scheduler's spellings: the backend's ``geometry_of``)."""
    found = backend.geometry_set(allocation_request(opts))
    if found:
        given, kind = found[0]
        raise UsageError(f"-o {shown(given)} would set the jobs' {GEOMETRY[kind][0]}, "
                         f"which validate sets itself ({SETS_ITSELF[kind]}): drop it")


def prepare(o: ValidateOptions, dry_run: bool = False) -> Prepared:
    """Resolve the options against the site; every mistake is a one-line UsageError. A
    ``dry_run`` writes nothing (not even the profile cache) and needs no provisioned
    prefix."""
    o = _quick(o)
    job = request(o.site, o.options, store=not dry_run)  # the site and -o, as typed
    s = job.site
    wanted = _checked(o)
    has = s.partitions[s.partition(o.partition)[0]].nodes  # None: no count published
    most = schedulers.of(s).max_nodes  # one host where hpcprov knows no scheduler
    nodes = o.nodes if o.nodes is not None else min(2, has or 2, most or 2)
    job = replace(job, nodes=nodes, partition=o.partition)
    pname = job.partition_name  # the queue jobscript picks for a job of this size
    has = s.partitions[pname].nodes
    backend = schedulers.of(s)
    if has is not None and nodes > has and nodes <= (most or nodes):  # else: lint's line
        raise UsageError(f"--nodes {nodes}: partition {pname} has {has} node(s)")
    per_node = {"pernode", "links"} & set(wanted)
    if "links" in wanted and backend.pin("node") is None:
        raise UsageError(f"--checks links: pairs of nodes must be pinned to their nodes, which "
                         f"hpcprov cannot do with {backend.title} (site {s.name})")
    usable = (backend.site_executor(s).usable_nodes(pname, node_picks(s, pname)) if per_node
              else None)
    here = (os.uname().nodename,) if per_node else ()
    device = _device(o.device, s, pname)
    opts = Options(job, wanted, ranks_per_node=o.ranks_per_node,
                   device=device, max_bytes=o.max_bytes, iters=o.iters,
                   train_steps=o.steps, node_names=tuple(usable) if usable is not None else here,
                   link_bytes=o.link_bytes, baselines=not o.quick, launchers=_launchers(o, s))
    _no_geometry(opts, backend)
    skipped = plan_skipped(opts)
    _unplannable(o, opts, skipped)
    if o.quick and device == "cpu":
        opts = _side_by_side(opts)
    where, moved = default_rundir(opts) if not o.workdir else (o.workdir, None)
    rundir = Path(expand_prefix(where, "--workdir DIR", "the run folder"))
    allocation = _allocation(o, backend, s)
    if allocation == "one":  # steps go where they are told: baselines on nodes of their own
        opts = replace(opts, apart=True)
    _site_rules(opts, allocation)
    unsure = _container_sees(opts, rundir)
    prefix = _ready(s, o.prefix, provisioned=not dry_run)
    job = replace(opts.job, prefix=str(prefix) if prefix else None,
                  activate=prefix is not None and s.python.backend != "container")
    return Prepared(replace(opts, job=job), rundir, allocation, tuple(skipped),
                    tuple(f"warning: {note}" for note in [moved, unsure] if note))


def _site_rules(opts: Options, allocation: str) -> None:
    """Refuse, in one line and before anything is written or submitted, a run with a job
    that `hpcprov jobscript` would refuse (issue 45, defect 1): the same lint for every
    command that writes a job, so a site's mandatory option, a lint error of its scheduler
    or its policies is never found job by job by the scheduler. With one allocation, its
    steps are launch lines inside it: the allocation itself carries the job options."""
    from hpcprov.jobs import lint
    from hpcprov.validate.plan import allocation_request, job_request, plan_jobs, shares_a_gpu

    # (what, its request, lint codes it is exempt from)
    requests: list[tuple[str, JobRequest, set[str]]] = \
        [("the allocation", allocation_request(opts), set())] if allocation == "one" else []
    for job in plan_jobs(opts):
        req = replace(job_request(job, opts, f"hpcprov-{job.id}"),
                      command=("python", job.program, *job.args))
        exempt = {"missing-option"} if allocation == "one" else set()  # the allocation's
        if shares_a_gpu(job):  # 2 ranks on a node's one GPU over Gloo, on purpose
            exempt.add("tasks-gpus")
        requests.append((f"job {job.id}", req, exempt))
    for what, req, exempt in requests:
        errors = [f for f in lint.lint(req) if f.level == "error" and f.code not in exempt]
        if errors:
            more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
            raise UsageError(f"{what} would be refused, as hpcprov jobscript refuses it: "
                             f"{errors[0]}{more}; nothing was submitted")


def _container_sees(opts: Options, rundir: Path) -> str | None:
    """Refuse, in one line and before anything is written or submitted, a run folder that
    the container a job runs in cannot see (issue 45, defect 12): the programs are read
    from it, so every check would fail with "can't open file". The folder is seen where a
    mount (containers.mounts, or the runtime's own: hpcprov.site.mounts) is it or above it.
    Where a mount names a variable not set here (it may hold the folder), a warning."""
    from hpcprov.site.image_refs import job_runtime
    from hpcprov.site.mounts import unseen
    from hpcprov.validate.plan import job_request, plan_jobs

    seen: set[str] = set()
    for job in plan_jobs(opts):
        req = job_request(job, opts, f"hpcprov-{job.id}")
        runtime = job_runtime(opts.site, req.launch)
        if runtime is None or runtime in seen:
            continue
        seen.add(runtime)
        found = unseen(opts.site, runtime, str(rundir), os.environ, os.path.realpath(rundir))
        if found is None:
            continue
        why, sure = found
        if not sure:
            return (f"the run folder: {why}: if that variable does not hold it on the "
                    f"nodes, launcher {req.launcher_name}'s jobs cannot open their programs")
        raise UsageError(f"the run folder: {why}, so launcher {req.launcher_name}'s jobs "
                         "could not open their programs: add it or a folder above it to "
                         "containers.mounts (SRC alone, or SRC:SRC), pass --workdir DIR "
                         "under a mounted folder, or say what the runtime mounts itself "
                         "in containers.runtime_mounts; nothing was submitted")
    return None


def _ready(site: Site, prefix: str | None, provisioned: bool = True) -> Path | None:
    """The provisioned prefix the jobs run in (a container site's: where setup pulled its
    image, with --env only); a dry run names it without asking that setup has run (nothing
    is submitted)."""
    if site.python.backend == "container":
        return _image_prefix(site, prefix, provisioned)
    target = Path(expand_prefix(prefix or site.prefix()))
    if provisioned and not is_provisioned(target):
        raise UsageError(f"{target} is not a provisioned environment (no manifest): run "
                         f"hpcprov setup --site {site.name} --prefix {target} first, or pass "
                         "--env")
    if provisioned:  # what the jobs would run from it: nobody else's to change
        why = fsutil.others_can_change(target)
        if why is not None:
            raise UsageError(fsutil.untrusted_env(target, why, "a validation job"))
    return target


def _image_prefix(site: Site, prefix: str | None, provisioned: bool) -> Path | None:
    """``--env PREFIX`` on a site whose Python lives in its image: the prefix setup pulled
    the image into (PREFIX/images/NAME.sif, .sqsh), which the jobs then read; refused in
    one line where the jobs' image is read from no prefix (a path, a runtime's store).
    Without --env: None (the jobs read the site's own prefix, as jobscript's do)."""
    from hpcprov.site.image_refs import FILE_READERS, registry_reference

    if prefix is None:
        return None
    c = site.containers
    name = c.default_image
    ref = c.images.get(name) if name else None
    reads = "" if ref is not None and registry_reference(ref) else \
        f"image {ref or name}, containers.images.{name} (a path)" if name else "no image"
    runtimes = {c.runtime or "singularity", *(str(lr.runtime) for lr in
                                              site.launchers.values() if lr.runtime)}
    if not reads and not runtimes & set(FILE_READERS):
        reads = f"image {ref} from {' and '.join(sorted(runtimes))}'s own store"
    if reads:
        raise UsageError(f"--env {prefix}: site {site.name} keeps its Python in its image "
                         f"(python.backend: container) and its jobs read {reads}, which "
                         "no prefix holds: drop --env")
    target = Path(expand_prefix(prefix))
    if provisioned and not is_provisioned(target):
        raise UsageError(f"{target} is not a provisioned environment (no manifest): run "
                         f"hpcprov setup --site {site.name} --prefix {target} first (it "
                         "pulls the image there), or drop --env")
    return target


def _baseline(site: str, against: str, quick: bool, say: Callable[[str], None]
              ) -> dict[str, Any]:
    """The stored run a validation is compared with, read before any job runs: a file
    that is not one (or no stored run) is one line now, not a lost run later."""
    try:
        baseline, notes = rep.load_baseline(site, against, quick)
    except rep.BadRun as exc:
        raise UsageError(f"--compare: {exc}") from None
    for note in notes:
        say(f"warning: --compare latest {note}")
    if baseline is None:
        kind = "--quick run" if quick else "full run (not --quick)"
        raise UsageError(f"--compare {against}: no stored {kind} for site {site}")
    return baseline


def _writable(path: str, what: str) -> None:
    """Refuse, before any job runs, a report file that cannot be written (its folder is
    missing or not writable, or it is a folder)."""
    target = Path(path)
    folder = target.parent if str(target.parent) else Path(".")
    if target.is_dir() or not folder.is_dir() or not os.access(folder, os.W_OK):
        raise UsageError(f"{what} {path}: cannot be written (its folder is missing or not "
                         "writable): choose another path")


def _add_skipped(data: dict[str, Any], ready: Prepared) -> None:
    """The parts of the checks that could not run, as SKIPPED rows, and which checks ran
    (the verdict line says how many)."""
    data["outcomes"] += [skipped_row(s).to_json() for s in ready.skipped]
    asked = list(ready.options.checks)
    ran = [c for c in asked if any(j["check"] == c for j in data["jobs"])]
    data["checks"] = {"asked": asked, "ran": ran, "skipped": len(ready.skipped)}


def _compare(data: dict[str, Any], baseline: dict[str, Any]) -> None:
    """Add the comparison with a stored run; a regression fails the run."""
    rows, worse = rep.compare(data, baseline)
    data["compare"] = rows
    data["outcomes"] += [w.to_json() for w in worse]
    data["ok"] = data["ok"] and not worse


def _write_reports(data: dict[str, Any], o: ValidateOptions, say: Callable[[str], None]
                   ) -> None:
    try:
        _reports(data, o, say)
    except OSError as exc:  # the verdict stands and is printed; the report is named
        say(f"error: a report could not be written: {exc}")
        data["report_error"] = str(exc)


def _reports(data: dict[str, Any], o: ValidateOptions, say: Callable[[str], None]) -> None:
    if o.junit:
        Path(o.junit).write_text(rep.junit(data))
    if o.report:
        png = Path(o.report).with_name(Path(o.report).stem + "-busbw.png")
        if not rep.can_plot():
            say("warning: --report without its busbw plot: matplotlib is not installed "
                "(pip install 'hpcprov[report]')")
        made = rep.plot_busbw(data, png)
        Path(o.report).write_text(rep.markdown(data, png.name if made else None))


@dataclass(frozen=True)
class PlannedScript:
    """A script a validation would write and submit: where, and its text."""

    path: Path
    text: str


@dataclass(frozen=True)
class DryRun:
    """`hpcprov validate --dry-run`: the scripts, and what of the checks cannot run."""

    scripts: list[PlannedScript]
    skipped: tuple[Skipped, ...]
    notes: tuple[str, ...] = ()  # warnings about how it was resolved, as a run says them

    def to_json(self) -> dict[str, Any]:
        return {"scripts": [{"path": str(p.path), "text": p.text} for p in self.scripts],
                "skipped": [skipped_row(s).to_json() for s in self.skipped],
                "notes": list(self.notes)}


def skipped_row(s: Skipped) -> Outcome:
    """A part of a check that cannot run, as its report row."""
    return Outcome(s.check, s.name, "skipped", detail=s.reason)


def plan_validation(o: ValidateOptions) -> DryRun:
    """`hpcprov validate --dry-run`: every script the run would write and submit, byte for
    byte, without submitting anything: the one allocation's (where there is one), then each
    job's, in the order the run submits them. The links check's later rounds depend on what
    its first one measures: its first round is shown. Nothing is written."""
    from hpcprov.validate.plan import (
        allocation_script,
        job_rounds,
        job_script,
        link_job,
        plan_jobs,
    )
    from hpcprov.validate.run import command_for

    ready = prepare(o, dry_run=True)
    opts, rundir = ready.options, ready.rundir
    out: list[PlannedScript] = []
    if ready.allocation == "one":
        queue = rundir / "allocation" / "allocation-1"
        out.append(PlannedScript(queue / "allocation.sh", allocation_script(opts, queue)))
    jobs = [j for rnd in job_rounds(plan_jobs(opts)) for j in rnd]
    if "links" in opts.checks:
        from hpcprov.validate.links import LinkSearch

        pairs, _alone = LinkSearch(list(opts.node_names)).next_step()
        jobs += [link_job(opts, pair, 1) for pair in pairs]
    for job in jobs:
        out.append(PlannedScript(rundir / f"{job.id}.sh", job_script(
            job, opts, str(rundir), command_for(job, opts, rundir))))
    return DryRun(out, ready.skipped, ready.notes)


@dataclass(frozen=True)
class ValidationResult:
    """A validation's verdict and what it measured. ``document`` is the JSON document
    `hpcprov validate --json` prints (jobs, events, comparisons, links: everything);
    the fields are the parts a caller reads most."""

    ok: bool
    site: str
    partition: str
    nodes: int
    seconds: float
    overhead_s: float
    rundir: str
    allocation: str
    submissions: int
    outcomes: list[Outcome]
    document: dict[str, Any]

    @classmethod
    def of(cls, data: dict[str, Any]) -> ValidationResult:
        return cls(ok=bool(data["ok"]), site=data["site"], partition=data["partition"],
                   nodes=data["nodes"], seconds=data["seconds"], overhead_s=data["overhead_s"],
                   rundir=data["rundir"], allocation=data["allocation"],
                   submissions=data.get("submissions", 0),
                   outcomes=[Outcome(**x) for x in data["outcomes"]], document=data)

    def to_json(self) -> dict[str, Any]:
        return self.document


def validate(o: ValidateOptions, say: Callable[[str], None] = lambda m: None
             ) -> ValidationResult:
    """Run a validation: submit, poll, judge, compare, store, report; ``.ok`` is the
    verdict."""
    ready = prepare(o)
    site = ready.options.site
    for note in ready.notes:
        say(note)
    # what the run ends with is checked before it starts: the baseline, the report files,
    # the history folder
    baseline = _baseline(site.name, o.compare, o.quick, say) if o.compare else None
    for path, what in ((o.junit, "--junit"), (o.report, "--report")):
        if path:
            _writable(path, what)
    if o.history:
        try:
            rep.history_folder(site.name)
        except rep.BadRun as exc:
            raise UsageError(str(exc)) from None
    backend = schedulers.of(site)
    executor: Executor = backend.site_executor(site)
    executor.poll_s = site.policies.scheduler_poll_seconds  # the site's rule on its traffic
    if ready.allocation == "one":
        executor = OneAllocation(executor, ready.rundir / "allocation",
                                 lambda queue: allocation_script(ready.options, queue))
    with fsutil.no_write_for_others():  # the run folder, the outputs the scheduler makes
        data = run_validation(ready.options, ready.rundir, executor, o.timeout,
                              o.pending_timeout, say)
    data["allocation"] = ready.allocation
    data["quick"] = o.quick
    _add_skipped(data, ready)
    if baseline is not None:
        _compare(data, baseline)
    if o.history:
        try:
            data["history"] = str(rep.save_history(data))
        except (OSError, rep.BadRun) as exc:  # the verdict stands: the run is not stored
            say(f"error: the run could not be stored in the history: {exc}")
            data["history_error"] = str(exc)
    _write_reports(data, o, say)
    return ValidationResult.of(data)
