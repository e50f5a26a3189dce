"""Scheduler options of a job: resources, the site's mandatory options, the user's own."""

from __future__ import annotations

import re

from hpcprov.errors import UsageError
from hpcprov.job import JobRequest
from hpcprov.kinds import Scheduler

Option = tuple[str, str | None]  # (long option name, value or None for a flag)

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")

# PBS spellings of the generic (Slurm-style) option names.
PBS_FLAGS = {
    "job-name": "-N",
    "account": "-A",
    "partition": "-q",
    "queue": "-q",
    "output": "-o",
    "error": "-e",
    "mail-user": "-M",
    "mail-type": "-m",
    "join": "-j",
}


def parse_option(text: str) -> tuple[str, str | None]:
    """Parse ``name=value`` / ``--name=value`` / ``name`` from the command line."""
    name, sep, value = text.lstrip("-").partition("=")
    if not re.fullmatch(r"[A-Za-z][A-Za-z0-9-]*", name):
        raise UsageError(f"--option {text!r}: expected NAME=VALUE, e.g. --option comment=pytorch")
    check_value(name, value if sep else None)
    return name, (value if sep else None)


def check_value(name: str, value: str | None) -> None:
    """Refuse control characters (a newline would end a #SBATCH comment line)."""
    if value is not None and _CONTROL.search(value):
        raise UsageError(f"option {name!r}: control characters (newlines, tabs) are not allowed")


def gpu_request(req: JobRequest) -> list[Option]:
    """The GPU request in the site's preferred form."""
    gpus = req.gpus
    if gpus <= 0 or req.scheduler != Scheduler.slurm:
        return []
    label = req.part.gpus.type
    typed = f"{label}:{gpus}" if label else str(gpus)
    style = req.site.slurm.gpu_request
    if style == "gres":
        return [("gres", f"gpu:{typed}")]
    if style == "gpus_per_node":
        return [("gpus-per-node", typed)]
    total = gpus * req.nodes
    return [("gpus", f"{label}:{total}" if label else str(total))]


def required_options(req: JobRequest) -> list[Option]:
    """Mandatory options: the user's value, else the site's default."""
    out: list[Option] = []
    for name, rule in req.site.policies.required_options.items():
        value = req.options.get(name, rule.default)
        if value is not None:
            out.append((name, value))
    return out


def slurm_options(req: JobRequest, *, batch: bool) -> list[Option]:
    """Ordered Slurm options for sbatch (batch=True) or salloc."""
    opts: list[Option] = []
    name = req.job_name or ("hpcprov" if batch else "interactive")
    opts.append(("job-name", name))
    if req.walltime:
        opts.append(("time", req.walltime))
    opts += required_options(req)
    opts.append(("partition", req.partition_name))
    if req.site.slurm.task_request == "per_node":
        opts.append(("nodes", str(req.nodes)))
        if batch:
            opts.append(("ntasks-per-node", str(req.scheduler_tasks_per_node)))
    else:
        if req.nodes > 1 or "nodes" in req.options:
            opts.append(("nodes", str(req.nodes)))
        opts.append(("ntasks", str(req.scheduler_tasks_per_node * req.nodes)))
    cpt = req.job_cpus_per_task
    if cpt and batch:
        opts.append(("cpus-per-task", str(cpt)))
    if batch:
        opts.append(("output", req.site.slurm.output))
        if req.site.slurm.error:
            opts.append(("error", req.site.slurm.error))
    opts += gpu_request(req)
    opts += list(req.part.options.items())
    return _override(opts, req.options)


def pbs_options(req: JobRequest) -> list[Option]:
    """Ordered generic options for a PBS job (rendered by :func:`pbs_directive`)."""
    opts: list[Option] = [("job-name", req.job_name or "hpcprov")]
    opts += required_options(req)
    cpt = req.job_cpus_per_task or 1
    select = req.site.pbs.select_format.format(
        nodes=req.nodes,
        ncpus=cpt * req.scheduler_tasks_per_node,
        gpus=req.gpus,
        mpiprocs=req.scheduler_tasks_per_node,
    )
    opts.append(("select", select))
    if req.walltime:
        opts.append(("walltime", req.walltime))
    if req.site.pbs.output:
        opts.append(("output", req.site.pbs.output))
    if req.site.pbs.error:
        opts.append(("error", req.site.pbs.error))
    if req.site.pbs.join_output:
        opts.append(("join", "oe"))
    opts += list(req.part.options.items())
    return _override(opts, req.options)


def _override(opts: list[Option], user: dict[str, str]) -> list[Option]:
    """User options replace generated ones of the same name, in place; new ones go last."""
    out, seen = [], set()
    for name, value in opts:
        if name in user:
            if name in seen:
                continue
            value = user[name]
        seen.add(name)
        out.append((name, value))
    out += [(n, v) for n, v in user.items() if n not in seen]
    for name, value in out:
        check_value(name, value)
    return out


def slurm_flag(name: str, value: str | None) -> str:
    """``--name=value`` (or ``--name``) as one argv item."""
    return f"--{name}" if value is None else f"--{name}={value}"


def pbs_directive(name: str, value: str | None) -> str:
    """The text after ``#PBS `` for one generic option."""
    if name in PBS_FLAGS:
        flag = PBS_FLAGS[name]
        return flag if value is None else f"{flag} {value}"
    return f"-l {name}" if value is None else f"-l {name}={value}"
