"""What a validation run submits: jobs as pure data, and their job scripts.

A check becomes one or more jobs. Each job runs one of the programs in
validate/programs/ (copied next to the job scripts) with one launcher of the site, and
prints HPCPROV_RESULT lines that validate/judge.py reads. Nothing here touches the system.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from hpcprov import schedulers
from hpcprov.job import JobRequest
from hpcprov.jobscript import build_jobscript
from hpcprov.kinds import LauncherKind
from hpcprov.shell import quote

if TYPE_CHECKING:
    from hpcprov.model import Site

CHECKS = ("env", "allreduce", "train", "pernode", "links")
DEFAULT_CHECKS = ("env", "allreduce", "train")


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


@dataclass(frozen=True)
class Options:
    """What the user asked for, resolved against the site."""

    site: Site
    partition: str
    nodes: int
    checks: tuple[str, ...] = DEFAULT_CHECKS
    ranks_per_node: int | None = None
    device: str = "cpu"
    max_bytes: int = 256 * 1024 * 1024
    min_bytes: int = 8
    iters: int = 20
    train_steps: int = 30
    node_names: tuple[str, ...] = ()  # the partition's nodes (pernode), found at run time
    extra: dict[str, str] = field(default_factory=dict)  # scheduler options (-o)
    link_bytes: int = 64 * 1024 * 1024  # the message size of the links check's pair jobs


def _launchers_by_kind(site: Site) -> dict[LauncherKind, str]:
    out: dict[LauncherKind, str] = {}
    for name, launcher in site.launchers.items():
        out.setdefault(launcher.kind, name)
    return out


def torch_launcher(site: Site) -> str | None:
    """srun where the scheduler starts ranks, else torchrun, else mpirun."""
    kinds = _launchers_by_kind(site)
    for kind in (LauncherKind.srun, LauncherKind.torchrun, LauncherKind.mpirun):
        if kind in kinds:
            return kinds[kind]
    return None


def horovod_launchers(site: Site) -> dict[str, str]:
    """impl -> launcher for Horovod: Gloo through horovodrun --gloo, MPI through mpirun."""
    out = {}
    controllers = site.horovod.controllers
    for name, launcher in site.launchers.items():
        if launcher.kind == LauncherKind.horovodrun and "--gloo" in launcher.args \
                and "gloo" in controllers:
            out.setdefault("horovod-gloo", name)
        if launcher.kind == LauncherKind.mpirun and "mpi" in controllers:
            out.setdefault("horovod-mpi", name)
    return out


def has_horovod(site: Site) -> bool:
    return site.horovod.source not in ("none",)


def _size_args(o: Options) -> tuple[str, ...]:
    return ("--min-bytes", str(o.min_bytes), "--max-bytes", str(o.max_bytes),
            "--iters", str(o.iters), "--device", o.device)


def ranks_per_node(o: Options) -> int:
    if o.ranks_per_node:
        return o.ranks_per_node
    gpus = o.site.partitions[o.partition].gpus.count
    if o.device == "cuda" and gpus:
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


def plan_jobs(o: Options) -> list[Job]:
    """The jobs of a validation run, in submission order."""
    site, rpn = o.site, ranks_per_node(o)
    torch = torch_launcher(site)
    hvd = horovod_launchers(site) if has_horovod(site) else {}
    backend = "nccl" if o.device == "cuda" else "gloo"
    jobs: list[Job] = []
    any_launcher = torch or next(iter(site.launchers))
    if "env" in o.checks:
        jobs.append(Job("env", "env", "env", o.nodes, 1, any_launcher, "envcheck.py",
                        ("--imports", _imports(site)), timeout_s=300))
    if "allreduce" in o.checks:
        if torch:
            jobs.append(Job(f"allreduce-torch-{backend}", "allreduce", f"torch-{backend}",
                            o.nodes, rpn, torch, "allreduce.py",
                            ("--impl", "torch", "--dist-backend", backend, *_size_args(o))))
        for impl, launcher in hvd.items():
            jobs.append(Job(f"allreduce-{impl}", "allreduce", impl, o.nodes, rpn, launcher,
                            "allreduce.py", ("--impl", "horovod", *_size_args(o))))
    if "train" in o.checks:
        runs: list[tuple[str, str, tuple[str, ...]]] = []
        if torch:
            runs.append(("torch-ddp", torch, ("--framework", "torch", "--api", "ddp",
                                              "--dist-backend", backend)))
        hvd_launcher = hvd.get("horovod-gloo") or hvd.get("horovod-mpi")
        fws = site.horovod.frameworks if has_horovod(site) else []
        if hvd_launcher and "pytorch" in fws:
            runs.append(("horovod-torch", hvd_launcher, ("--framework", "torch", "--api",
                                                         "horovod")))
        if hvd_launcher and "tensorflow" in fws:
            runs.append(("horovod-tf-tape", hvd_launcher, ("--framework", "tensorflow",
                                                           "--api", "tape")))
            runs.append(("horovod-tf-keras", hvd_launcher, ("--framework", "tensorflow",
                                                            "--api", "keras")))
        common = ("--steps", str(o.train_steps), "--device", o.device)
        for impl, launcher, args in runs:
            jobs.append(Job(f"train-{impl}", "train", impl, o.nodes, rpn, launcher,
                            "train.py", (*args, *common)))
            if o.nodes > 1:
                jobs.append(Job(f"train-{impl}-1node", "train", impl, 1, rpn, launcher,
                                "train.py", (*args, *common), baseline=True))
    if "pernode" in o.checks:
        for node in o.node_names:
            jobs.append(Job(f"pernode-{node}", "pernode", f"torch-{backend}", 1, max(rpn, 2),
                            torch or any_launcher, "allreduce.py",
                            ("--impl", "torch", "--dist-backend", backend,
                             *_size_args(o)), node=node, timeout_s=600))
    return jobs


def link_job(o: Options, pair: tuple[str, str], rnd: int) -> Job:
    """One pair job of the links check: one rank on each of the two nodes, so the time is
    the link's; one message size (``link_bytes``)."""
    backend = "nccl" if o.device == "cuda" else "gloo"
    size = str(o.link_bytes)
    return Job(f"links-r{rnd}-{pair[0]}-{pair[1]}", "links", f"torch-{backend}", 2, 1,
               torch_launcher(o.site) or next(iter(o.site.launchers)), "allreduce.py",
               ("--impl", "torch", "--dist-backend", backend, "--min-bytes", size,
                "--max-bytes", size, "--iters", str(o.iters), "--device", o.device),
               node=",".join(pair), timeout_s=600)


def job_request(job: Job, o: Options, prefix: str | None, job_name: str) -> JobRequest:
    """The JobRequest that generates this job's script (via hpcprov's own generators)."""
    options = dict(o.extra)
    pin = schedulers.of(o.site).pin(job.node) if job.node else None
    options.update(pin or {})
    return JobRequest(site=o.site, nodes=job.nodes, partition=o.partition,
                      launcher=job.launcher, tasks_per_node=job.ranks_per_node,
                      gpus_per_node=None if o.device == "cuda" else 0,
                      command=(), job_name=job_name, options=options, prefix=prefix,
                      activate=prefix is not None)


def job_script(job: Job, o: Options, prefix: str | None, rundir: str, command: tuple[str, ...]
               ) -> str:
    """The job script: hpcprov's generated script, its launch running `command`, plus a
    trap that records the exit status in the run directory (read when accounting is off)."""
    req = job_request(job, o, prefix, f"hpcprov-{job.id}")
    text = build_jobscript(replace(req, command=command))
    lines = text.splitlines()
    at = next(i for i, ln in enumerate(lines) if i > 0 and ln and not ln.startswith("#"))
    # the status file: exit status, then the job's own start and end (epoch seconds), so the
    # harness can tell its own overhead from the job's run time
    trap = "trap " + quote("printf '%s %s %s\\n' \"$?\" \"$hpcprov_t0\" \"$(date +%s.%N)\" > "
                           + quote(f"{rundir}/{job.id}.exit")) + " EXIT"
    return "\n".join([*lines[:at], "hpcprov_t0=$(date +%s.%N)", trap, *lines[at:]]) + "\n"
