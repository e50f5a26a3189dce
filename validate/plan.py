"""What a validation run submits: jobs as pure data, and their job scripts.

A check becomes one or more jobs. Each job runs one of the programs in
validate/programs/ (copied next to the job scripts, with the runtime.py they share) with one
launcher of the site, and prints HPCPROV_RESULT lines that validate/judge.py reads. The
checks are a registry (:data:`REGISTRY`): each names its planner (the jobs it submits), its
judge (validate/judge.py) and how its jobs are grouped into rounds. Nothing here touches the
system.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from hpcprov import schedulers
from hpcprov.core.shell import assign, fragment, quote
from hpcprov.jobs import roles
from hpcprov.jobs.jobscript import build_jobscript
from hpcprov.jobs.lint import visible_variable
from hpcprov.request.job import JobRequest
from hpcprov.schedulers.allocation import pilot_lines
from hpcprov.schedulers.base import Placement
from hpcprov.site.gpu_vendors import VENDORS, Vendor
from hpcprov.site.launcher_kinds import kind_of
from hpcprov.validate.judge import Judge, judge_allreduce, judge_env, judge_pernode, judge_train

if TYPE_CHECKING:
    from hpcprov.site.types import Partition, Site


@dataclass(frozen=True)
class Job:
    """One job of a validation run."""

    id: str
    check: str
    impl: str
    nodes: int
    ranks_per_node: int
    launcher: str
    program: str
    args: tuple[str, ...]
    node: str | None = None          # pinned to this node (pernode)
    baseline: bool = False           # the 1-node run that scaling efficiency divides by
    timeout_s: float = 900.0
    shared: bool = False             # runs beside other jobs: its figures are not judged
    port: int | None = None          # its own rendezvous port (beside others on its nodes)
    slot: int | None = None          # a 1-node job beside others: its node's index in the run


def torch_launcher(site: Site) -> str | None:
    """The launcher torch.distributed's checks run through: the site's default where its
    kind starts ranks, else the kind validation prefers (:mod:`hpcprov.jobs.roles`)."""
    return roles.torch_launcher(site)


def horovod_launchers(site: Site) -> dict[str, str]:
    """impl -> launcher for Horovod, by each kind's role: Gloo through a launcher whose
    controller is Gloo (horovodrun), MPI through an MPI launcher (mpirun, mpiexec, ibrun,
    jsrun)."""
    return roles.horovod_launchers(site)


has_horovod = roles.has_horovod


@dataclass(frozen=True)
class Skipped:
    """A part of a check that cannot be planned on this site: its row, why, and the fix."""

    check: str
    name: str
    reason: str


def _via(o: Options, launcher: str) -> str:
    """A job's name suffix: its launcher's, where the run goes through several."""
    return f"-{launcher}" if o.launchers else ""


def torch_targets(o: Options) -> list[str]:
    """The launchers torch.distributed's checks run through: each one asked for that can,
    else the one validate uses by default (none: the checks are skipped)."""
    if o.launchers:
        return [n for n in o.launchers if roles.can_run_torch(o.site, n)]
    one = roles.torch_launcher(o.site)
    return [one] if one else []


def horovod_targets(o: Options) -> list[tuple[str, str]]:
    """(impl, launcher) of Horovod's checks: each launcher asked for that has a Horovod
    role, else the site's launcher of each role."""
    if o.launchers:
        return [(impl, n) for n in o.launchers if (impl := roles.horovod_role(o.site, n))]
    return list(roles.horovod_launchers(o.site).items())


def _size_args(o: Options, launcher: str, per_rank: str | None = None) -> tuple[str, ...]:
    return ("--min-bytes", str(o.min_bytes), "--max-bytes", str(o.max_bytes),
            "--iters", str(o.iters), "--device", o.device,
            *_binding_args(o, launcher, per_rank=per_rank))


def _binding_args(o: Options, launcher: str, visible: bool = True,
                  per_rank: str | None = None) -> tuple[str, ...]:
    """The programs' device step on GPUs (none on the CPU): what each rank ``launcher``
    starts sees of its node's GPUs (``per_rank``, else the launcher's, else the partition's
    ``gpus.per_rank``) and, with ``visible``, the variable that limits them there, which a
    failed step names (:func:`visible_devices`)."""
    if o.device == "cpu":
        return ()
    return ("--per-rank", per_rank or o.site.per_rank(launcher, o.partition),
            *(("--visible-devices", visible_devices(o, launcher)) if visible else ()))


def visible_devices(o: Options, launcher: str) -> str:
    """The variable that limits the GPUs each rank of ``launcher`` sees: the vendor's, or
    the one its binding sets (AMD GPUs bound by Slurm: ROCR_VISIBLE_DEVICES)."""
    return visible_variable(o.site, launcher, o.partition)


def ranks_per_node(o: Options) -> int:
    if o.ranks_per_node:
        return o.ranks_per_node
    gpus = o.part.gpus.count
    if o.device != "cpu" and gpus:
        return gpus
    # one rank per node measures the network; a machine alone needs two to measure anything
    return 2 if schedulers.of(o.site).max_nodes == 1 else 1


def _imports(site: Site) -> str:
    names = []
    fws = site.horovod.frameworks if has_horovod(site) else []
    if "pytorch" in site.python.frameworks or "pytorch" in fws:
        names.append("torch")
    if "tensorflow" in site.python.frameworks or "tensorflow" in fws:
        names.append("tensorflow")
    if has_horovod(site):
        names.append("horovod")
        names += [f"horovod.{'torch' if f == 'pytorch' else f}" for f in fws
                  if f in ("pytorch", "tensorflow")]
    return ",".join(names) or "torch"


def vendor(o: Options) -> Vendor:
    """The GPU vendor of the run's partition (:mod:`hpcprov.site.gpu_vendors`)."""
    return VENDORS[o.part.gpus.vendor]


def _backend(o: Options) -> str:
    """torch.distributed's backend: gloo on the CPU, else the GPU vendor's."""
    return "gloo" if o.device == "cpu" else vendor(o).dist_backend


def _backend_args(o: Options) -> tuple[str, ...]:
    """The programs' backend options: the backend, and the vendor's fallback for older
    stacks where it has one."""
    fallback = vendor(o).fallback_backend if o.device != "cpu" else None
    return ("--dist-backend", _backend(o),
            *(("--fallback-backend", fallback) if fallback else ()))


def _any_launcher(site: Site) -> str | None:
    """The launcher the env check runs through: the torch launcher, else the first that
    starts ranks here (horovodrun); None where none does (a SKIPPED row says why)."""
    return torch_launcher(site) or next(
        (n for n in site.launchers if roles.unusable(site, n) is None), None)


def _job_launcher(site: Site) -> str:
    """The launcher of a job any launcher can run (pernode, links, the allocation):
    :func:`_any_launcher`, else the site's default, as a request naming none resolves it
    (:attr:`JobRequest.launcher_name`; where none starts ranks, its launch line says why)."""
    return _any_launcher(site) or site.default_launcher


def plan_env(o: Options) -> list[Job]:
    """env: one task per node (through each launcher asked for, else the site's torch
    launcher)."""
    v = vendor(o)  # how the node's GPUs are counted, without torch too
    gpus = ("--gpu-device", v.torch_device, "--gpu-count-command", " ".join(v.counter.argv),
            "--gpu-count-pattern", v.counter.pattern)
    any_one = _any_launcher(o.site)
    names = [n for n in o.launchers if roles.unusable(o.site, n) is None] if o.launchers \
        else [any_one] if any_one is not None else []
    return [Job(f"env{_via(o, n)}", "env", f"env{_via(o, n)}", o.nodes, 1, n, "envcheck.py",
                ("--imports", _imports(o.site), *gpus, "--visible-devices",
                 visible_devices(o, n), *_binding_args(o, n, visible=False)),
                timeout_s=300)
            for n in names]


def plan_allreduce(o: Options) -> list[Job]:
    """allreduce: torch.distributed, and Horovod through each launcher it has."""
    rpn, backend = ranks_per_node(o), _backend(o)
    jobs = []
    for launcher in torch_targets(o):
        impl = f"torch-{backend}{_via(o, launcher)}"
        jobs.append(Job(f"allreduce-{impl}", "allreduce", impl, o.nodes, rpn, launcher,
                        "allreduce.py",
                        ("--impl", "torch", *_backend_args(o), *_size_args(o, launcher))))
    for impl, launcher in horovod_targets(o):
        impl = data_path(o, impl) + _via(o, launcher)
        jobs.append(Job(f"allreduce-{impl}", "allreduce", impl, o.nodes, rpn, launcher,
                        "allreduce.py", ("--impl", "horovod", *_size_args(o, launcher))))
    return jobs + _shared_gpu(o)


def _shared_gpu(o: Options) -> list[Job]:
    """On a node with one GPU, where NCCL cannot put two ranks (it refuses two ranks on one
    device) and one rank moves nothing: 2 ranks over Gloo with CUDA tensors on that GPU, so
    that a collective between ranks with CUDA tensors is checked there too."""
    if o.device == "cpu" or o.part.gpus.count != 1 or o.ranks_per_node:
        return []
    jobs = []
    for launcher in torch_targets(o):
        impl = f"torch-gloo-shared-gpu{_via(o, launcher)}"
        jobs.append(Job(f"allreduce-{impl}", "allreduce", impl, o.nodes, 2, launcher,
                        "allreduce.py", ("--impl", "torch", "--dist-backend", "gloo",
                                         *_size_args(o, launcher, per_rank=SHARED_GPU))))
    return jobs


SHARED_GPU = "shared"  # the programs' --per-rank of the ranks of one GPU (runtime.py)


def shares_a_gpu(job: Job) -> bool:
    """Whether the job's ranks share their node's GPU on purpose (:func:`_shared_gpu`)."""
    return "--per-rank" in job.args and \
        job.args[job.args.index("--per-rank") + 1] == SHARED_GPU


def data_path(o: Options, impl: str) -> str:
    """A Horovod check named by the path its data takes: on GPUs built with NCCL the
    tensors go through NCCL whichever controller (Gloo, MPI) started the ranks."""
    hvd = o.site.horovod
    if o.device != "cpu" and "nccl" in (hvd.gpu_operations, hvd.gpu_allreduce):
        return f"horovod-nccl-via-{impl.removeprefix('horovod-')}"
    return impl


def _train_runs(o: Options) -> list[tuple[str, str, tuple[str, ...]]]:
    """(impl, launcher, train.py's arguments) of every training API the site has."""
    site = o.site
    runs: list[tuple[str, str, tuple[str, ...]]] = []
    for launcher in torch_targets(o):
        runs.append((f"torch-ddp{_via(o, launcher)}", launcher,
                     ("--framework", "torch", "--api", "ddp", *_backend_args(o))))
    fws = site.horovod.frameworks if has_horovod(site) else []
    hvd = dict(horovod_targets(o))
    # one Horovod launcher each (Gloo where it has one), or each asked for
    targets = [(hvd.get("horovod-gloo") or hvd.get("horovod-mpi"))] if not o.launchers \
        else [n for _impl, n in horovod_targets(o)]
    for launcher in filter(None, targets):
        via = _via(o, launcher)
        if "pytorch" in fws:
            runs.append((f"horovod-torch{via}", launcher,
                         ("--framework", "torch", "--api", "horovod")))
        if "tensorflow" in fws:
            runs.append((f"horovod-tf-tape{via}", launcher,
                         ("--framework", "tensorflow", "--api", "tape")))
            runs.append((f"horovod-tf-keras{via}", launcher,
                         ("--framework", "tensorflow", "--api", "keras")))
    return runs


def plan_train(o: Options) -> list[Job]:
    """train: every API on the nodes, and on more than one node a 1-node baseline each
    (unless left out: no scaling efficiency then)."""
    rpn = ranks_per_node(o)
    jobs = []
    for impl, launcher, args in _train_runs(o):
        common = ("--steps", str(o.train_steps), "--device", o.device,
                  *_binding_args(o, launcher))
        jobs.append(Job(f"train-{impl}", "train", impl, o.nodes, rpn, launcher,
                        "train.py", (*args, *common)))
        if o.nodes > 1 and o.baselines:
            jobs.append(Job(f"train-{impl}-1node", "train", impl, 1, rpn, launcher,
                            "train.py", (*args, *common), baseline=True))
    return jobs


def plan_skipped(o: Options) -> list[Skipped]:
    """What the checks asked for cannot run on this site, each with why and the fix: a
    launcher asked for that starts no ranks here, torch.distributed without a launcher,
    a Horovod controller the build has without its launcher. Never dropped in silence:
    validate reports each as a SKIPPED row (or refuses a check named on its command line
    that nothing of could be planned)."""
    site, out = o.site, []
    wanted = [c for c in ("env", "allreduce", "train") if c in o.checks]
    for name in o.launchers:
        why = roles.unusable(site, name)
        if why is not None:
            out += [Skipped(c, f"{c}-{name}", why) for c in wanted]
        elif not roles.can_run_torch(site, name) and roles.horovod_role(site, name) is None:
            kind = site.launchers[name].kind.value
            out += [Skipped(c, f"{c}-{name}", f"launcher {name} ({kind}) runs Horovod's "
                            "ranks only, and the site's Horovod has no check it could run "
                            "(horovod.controllers, horovod.source)")
                    for c in wanted if c != "env"]
    # what the site as a whole cannot run is said whichever launchers were asked for: with
    # --launchers (all, or a list) these rows were dropped in silence (issue 45, defect 4)
    backend = _backend(o)
    if "env" in wanted and _any_launcher(site) is None:
        out.append(Skipped("env", "env", roles.no_torch_launcher(site)))
    if roles.torch_launcher(site) is None:
        why = roles.no_torch_launcher(site)
        if "allreduce" in wanted:
            out.append(Skipped("allreduce", f"allreduce-torch-{backend}", why))
        if "train" in wanted:
            out.append(Skipped("train", "train-torch-ddp", why))
    if has_horovod(site):
        have = roles.horovod_launchers(site)
        for ctrl in site.horovod.controllers:
            impl = f"horovod-{ctrl}"
            if impl in have or ctrl not in ("gloo", "mpi"):
                continue
            if "allreduce" in wanted:
                out.append(Skipped("allreduce", f"allreduce-{data_path(o, impl)}",
                                   roles.horovod_gap(site, impl)))
        if not have and "train" in wanted and site.horovod.frameworks:
            out.append(Skipped("train", "train-horovod",
                               "no launcher starts Horovod's ranks: "
                               + roles.horovod_gap(site, "horovod-mpi")))
    return out


def plan_pernode(o: Options) -> list[Job]:
    """pernode: the allreduce alone on every node of the partition (at least 2 ranks)."""
    backend, launcher = _backend(o), _job_launcher(o.site)
    return [Job(f"pernode-{node}", "pernode", f"torch-{backend}", 1, max(ranks_per_node(o), 2),
                launcher, "allreduce.py",
                ("--impl", "torch", *_backend_args(o), *_size_args(o, launcher)), node=node,
                timeout_s=600)
            for node in o.node_names]


def plan_links(o: Options) -> list[Job]:
    """links: nothing up front; the search plans its pair jobs round by round
    (:func:`link_job`, validate/links.py)."""
    return []


@dataclass(frozen=True)
class Check:
    """One check of the suite: the jobs it submits up front, its judge, and its rounds:
    ``each`` job alone (measurements would disturb each other), all its jobs ``together``,
    or a ``search`` that plans and judges its own rounds (links, validate/links.py)."""

    plan: Callable[[Options], list[Job]]
    judge: Judge | None
    default: bool = False
    rounds: Literal["each", "together", "search"] = "each"
    side_by_side: bool = False  # its jobs may run beside each other's in a smoke run


REGISTRY: dict[str, Check] = {
    "env": Check(plan_env, judge_env, default=True),
    "allreduce": Check(plan_allreduce, judge_allreduce, default=True, side_by_side=True),
    "train": Check(plan_train, judge_train, default=True, side_by_side=True),
    "pernode": Check(plan_pernode, judge_pernode, rounds="together"),
    "links": Check(plan_links, None, rounds="search"),
}

CHECKS = tuple(REGISTRY)
DEFAULT_CHECKS = tuple(name for name, check in REGISTRY.items() if check.default)


@dataclass(frozen=True)
class Options:
    """What the user asked for, resolved against the site: the job every job of the run
    starts from, and what validate's own flags ask of the checks."""

    # the request every job of the run is derived from (:func:`job_request`): the site, the
    # run's nodes, the queue where -p named one (None: each job goes where jobscript sends a
    # job of its size, so a by-size queue can send the 1-node baselines elsewhere), the
    # scheduler options (-o), and the provisioned prefix the jobs activate (None: a
    # container site's, which activate none)
    job: JobRequest
    checks: tuple[str, ...] = DEFAULT_CHECKS
    ranks_per_node: int | None = None
    device: str = "cpu"
    max_bytes: int = 256 * 1024 * 1024
    min_bytes: int = 8
    iters: int = 20
    train_steps: int = 30
    node_names: tuple[str, ...] = ()  # the partition's nodes (pernode), found at run time
    link_bytes: int = 64 * 1024 * 1024  # the message size of the links check's pair jobs
    baselines: bool = True  # the 1-node training runs scaling efficiency divides by
    # a smoke run (--quick on CPUs): the jobs of the side_by_side checks run at the same
    # time on the same nodes, each with its own rendezvous port (:func:`side_by_side`)
    side_by_side: bool = False
    # one allocation: the 1-node training baselines at the same time, each on a node of its
    # own (:func:`baselines_apart`); they measure, so never two on one node
    apart: bool = False
    # the launchers every check runs through (--launchers); empty: the site's default
    # torch launcher and Horovod's launchers (:mod:`hpcprov.jobs.roles`)
    launchers: tuple[str, ...] = ()

    @property
    def site(self) -> Site:
        return self.job.site

    @property
    def nodes(self) -> int:
        """The run's nodes (a 1-node baseline asks for fewer)."""
        return self.job.nodes

    @property
    def partition(self) -> str:
        """The run's partition: the one named, else the queue jobscript picks for the run's
        size."""
        return self.job.partition_name

    @property
    def part(self) -> Partition:
        return self.job.part

    @property
    def node_picks(self) -> dict[str, str | None] | None:
        """The options that pick the partition's nodes where its name is no queue
        (``routing: options``), for finding them; None for a real partition."""
        return node_picks(self.site, self.partition)


def node_picks(site: Site, partition: str) -> dict[str, str | None] | None:
    """The options that pick a partition's nodes where its name is no queue (``routing:
    options``); None for a real partition."""
    part = site.partitions[partition]
    return dict(part.options) if part.routing == "options" else None


def plan_jobs(o: Options) -> list[Job]:
    """The jobs of a validation run, in submission order (the registry's)."""
    unknown = [name for name in o.checks if name not in REGISTRY]
    if unknown:
        raise ValueError(f"unknown checks {', '.join(unknown)} (known: {', '.join(CHECKS)})")
    jobs = [job for name, check in REGISTRY.items() if name in o.checks
            for job in check.plan(o)]
    if o.apart:
        jobs = baselines_apart(jobs, o)
    return side_by_side(jobs, o) if o.side_by_side else jobs


def baselines_apart(jobs: list[Job], o: Options) -> list[Job]:
    """The 1-node baselines given nodes of their own (:attr:`Job.slot`), as many at a time
    as the run has nodes. horovodrun's go on the first node, where the steps start: started
    there for a single other node, horovodrun finds the loopback common to both and hands
    its rank a rendezvous address the rank cannot reach."""
    out: list[Job] = []
    used: set[int] = set()
    for job in jobs:
        if job.baseline:
            first = kind_of(o.site.launchers[job.launcher].kind).first_node_baseline
            slots = [0] if first else [*range(1, o.nodes), 0]
            free = [i for i in slots if i not in used]
            if not free:  # this round is full: the job starts the next one
                used, free = set(), slots
            used.add(free[0])
            job = replace(job, slot=free[0])
        out.append(job)
    return out


def side_by_side(jobs: list[Job], o: Options) -> list[Job]:
    """The jobs of the ``side_by_side`` checks marked shared, each with a rendezvous port
    of its own (its launcher's, moved up past the ports taken by the jobs before it)."""
    taken: set[int] = set()
    out = []
    for job in jobs:
        if REGISTRY[job.check].side_by_side:
            port = o.site.launchers[job.launcher].port
            while port in taken:
                port += 1
            taken.add(port)
            job = replace(job, shared=True, port=port)
        out.append(job)
    return out


def shared_tasks_per_node(jobs: list[Job]) -> int:
    """The tasks per node of the shared jobs together (they all run on the run's nodes)."""
    return sum(j.ranks_per_node for j in jobs if j.shared)


def job_rounds(jobs: list[Job]) -> list[list[Job]]:
    """The jobs in rounds, a round's jobs running at the same time: each job of an ``each``
    check alone, in order, then the baselines given nodes of their own
    (:func:`baselines_apart`) a round at a time, then the shared jobs (:func:`side_by_side`)
    in one round, then every ``together`` check's jobs in one round."""
    alone = [j for j in jobs if REGISTRY[j.check].rounds == "each" and not j.shared]
    out = [[j] for j in alone if j.slot is None]
    for j in (j for j in alone if j.slot is not None):  # a round until a slot repeats
        if out and out[-1][0].slot is not None and j.slot not in {k.slot for k in out[-1]}:
            out[-1].append(j)
        else:
            out.append([j])
    if any(j.shared for j in jobs):
        out.append([j for j in jobs if j.shared])
    for name, check in REGISTRY.items():
        group = [j for j in jobs if j.check == name]
        if check.rounds == "together" and group:
            out.append(group)
    return out


def link_job(o: Options, pair: tuple[str, str], rnd: int) -> Job:
    """One pair job of the links check: one rank on each of the two nodes, so the time is
    the link's; one message size (``link_bytes``)."""
    backend = _backend(o)
    size = str(o.link_bytes)
    return Job(f"links-r{rnd}-{pair[0]}-{pair[1]}", "links", f"torch-{backend}", 2, 1,
               _job_launcher(o.site), "allreduce.py",
               ("--impl", "torch", *_backend_args(o), "--min-bytes", size,
                "--max-bytes", size, "--iters", str(o.iters), "--device", o.device),
               node=",".join(pair), timeout_s=600)


def job_request(job: Job, o: Options, job_name: str) -> JobRequest:
    """The JobRequest that generates this job's script (via hpcprov's own generators): the
    run's (:attr:`Options.job`) with this job's nodes, ranks, launcher, name and port, and
    the options that pin it to its node where it is pinned."""
    pin = schedulers.of(o.site).pin(job.node) if job.node else None
    return replace(o.job, nodes=job.nodes, launcher=job.launcher,
                   tasks_per_node=job.ranks_per_node,
                   gpus_per_node=None if o.device != "cpu" else 0, job_name=job_name,
                   options={**o.job.options, **(pin or {})}, port=job.port)


STATUS_TRAP = Path(__file__).parent / "scripts" / "status_trap.sh"


def status_trap(path: str) -> list[str]:
    """Job script lines that record, when the script exits, its exit status and its own
    start and end (epoch seconds) in ``path``: the harness reads them where the scheduler's
    accounting is off, and tells its own overhead from the job's run time. The trap is the
    shell file scripts/status_trap.sh (shellchecked as a file), carried verbatim after the
    line that sets its ``hpcprov_exit_file``, quoted."""
    return [assign("hpcprov_exit_file", path), *fragment(STATUS_TRAP)]


PROGRAM_CHECK = Path(__file__).parent / "scripts" / "program_check.sh"
RUNTIME = "runtime.py"  # what every program imports, from the run folder


_PROGRAMS: dict[str, str] = {}


def programs() -> dict[str, str]:
    """Name -> text of every validation program (programs/*.py) and the runtime.py they
    import: what a run writes into its folder, byte for byte."""
    if not _PROGRAMS:
        from importlib import resources

        folder = resources.files("hpcprov.validate") / "programs"
        for item in sorted(folder.iterdir(), key=lambda f: f.name):
            if item.name.endswith(".py") and item.name != "__init__.py":
                _PROGRAMS[item.name] = item.read_text(encoding="utf-8")
    return _PROGRAMS


def program_check(job: Job, rundir: str) -> list[str]:
    """Job script lines that refuse, in one line, to run the job's program or the
    runtime.py it imports when either is not the bytes hpcprov wrote: their SHA-256 are
    written into the script (scripts/program_check.sh, carried verbatim after the line
    that lists them, quoted)."""
    import hashlib

    texts = programs()
    pairs: list[str] = []
    for name in dict.fromkeys((job.program, RUNTIME)):
        digest = hashlib.sha256(texts[name].encode("utf-8")).hexdigest()
        pairs += [digest, quote(f"{rundir}/{name}")]
    return [f"hpcprov_programs=({' '.join(pairs)})", *fragment(PROGRAM_CHECK)]


def placement(job: Job, o: Options) -> Placement:
    """Where a job runs as a step of one allocation: its nodes (pinned ones by name), its
    ranks per node, whether its launcher starts the ranks through the scheduler, and the
    GPUs its own job asks for (the step asks for these, never inheriting the allocation's
    per-task binding: torchrun's agent and the env check see their node's GPUs)."""
    kind = kind_of(o.site.launchers[job.launcher].kind)
    req = job_request(job, o, f"hpcprov-{job.id}")
    backend = schedulers.of(o.site)
    gpus = tuple((n, v) for n, v in backend.options(req, batch=True)
                 if backend.geometry_of(req, n, v) == "gpus") if req.gpus > 0 else ()
    return Placement(job.nodes, job.ranks_per_node,
                     tuple(job.node.split(",")) if job.node else (),
                     starts_tasks=kind.task_starter, first=job.slot or 0, gpus=gpus)


def allocation_request(o: Options) -> JobRequest:
    """The one allocation of a run: the run's nodes (every partition node the pernode and
    links checks use, pinned), as many tasks per node as its biggest job, or as the shared
    jobs together (they run at once on the same nodes). It runs no launch itself, so it
    activates no environment (its steps do)."""
    pinned = list(o.node_names) if {"pernode", "links"} & set(o.checks) else []
    rpn = max(ranks_per_node(o), 2 if "pernode" in o.checks else 1,
              shared_tasks_per_node(plan_jobs(o)))
    whole = Job("allocation", "allocation", "allocation", max(o.nodes, len(pinned)), rpn,
                _job_launcher(o.site), "", (), node=",".join(pinned) or None)
    return replace(job_request(whole, o, "hpcprov-validate"), activate=False)


def allocation_script(o: Options, queue: Path) -> str:
    """The script of the run's one allocation: the scheduler's directives, then the pilot
    that runs the jobs as steps (hpcprov/schedulers/allocation.py)."""
    req = allocation_request(o)
    backend = schedulers.of(o.site)
    steps = backend.site_executor(o.site).steps
    if steps is None:
        raise ValueError(f"{backend.title} jobs cannot run steps of one allocation")
    lines = [f"#!{backend.shell(req)}", *backend.directives(req),
             f"# Generated by hpcprov: one allocation for a validation of site {o.site.name}",
             *backend.prolog(req), *pilot_lines(str(queue), steps.nodes())]
    return "\n".join(lines) + "\n"


def job_script(job: Job, o: Options, rundir: str, command: tuple[str, ...]) -> str:
    """The job script: hpcprov's generated script, its launch running `command`, with the
    status trap (:func:`status_trap`) and the program check (:func:`program_check`) in
    its prolog."""
    req = job_request(job, o, f"hpcprov-{job.id}")
    return build_jobscript(replace(req, command=command),
                           prolog=[*status_trap(f"{rundir}/{job.id}.exit"),
                                   *program_check(job, rundir)])
