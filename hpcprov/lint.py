"""Lint a job request before anything is generated: errors stop, warnings print."""

from __future__ import annotations

import re
from dataclasses import replace

from hpcprov import schedulers
from hpcprov.errors import HpcprovError
from hpcprov.findings import Finding, LintFailed
from hpcprov.job import JobRequest
from hpcprov.walltime import walltime_seconds

# Commands that need the internet when run (pip without --no-index, conda, downloads).
_NETWORK = [
    (re.compile(r"\bpip3?\s+install\b(?!.*--no-index)"), "pip install without --no-index"),
    (re.compile(r"\bconda\s+(install|create|update)\b"), "conda install/create"),
    (re.compile(r"\b(wget|curl)\b"), "a download (wget/curl)"),
    (re.compile(r"\bgit\s+(clone|fetch|pull)\b"), "git clone/fetch"),
    (re.compile(r"\benroot\s+import\b"), "enroot import"),
]


_MEM = re.compile(r"^(\d+(?:\.\d+)?)([KMGT]?)B?$", re.I)
_MEM_GB = {"K": 1 / 1024**2, "M": 1 / 1024, "": 1 / 1024, "G": 1.0, "T": 1024.0}


def memory_gb(text: str) -> float | None:
    """GB in a Slurm memory size (``4000`` is MB, as sbatch reads it; ``100G``, ``1T``)."""
    m = _MEM.match(text.strip())
    return float(m.group(1)) * _MEM_GB[m.group(2).upper()] if m else None


def _memory(req: JobRequest) -> list[Finding]:
    """A memory request above what a node of the partition has."""
    have, asked = req.part.memory_gb, req.options.get("mem")
    want = memory_gb(asked) if asked else None
    if have is None or want is None or want <= have:
        return []
    return [Finding("error", "memory-exceed",
                    f"--mem={asked} is more than the {have:g} GB of a {req.partition_name} node",
                    f"ask for {have:g}G or less")]


_GPU_COUNT = re.compile(r"(?:^|,)gpu(?::[^:,]+)?:(\d+)(?:,|$)")


def _int_max(text: str) -> int | None:
    """``8`` or ``2-8`` (Slurm's min-max node count) as its largest number."""
    m = re.fullmatch(r"(\d+)(?:-(\d+))?", text.strip())
    return int(m.group(2) or m.group(1)) if m else None


def effective(req: JobRequest) -> JobRequest:
    """The request as the scheduler will read it: a user option that sets the geometry
    (``-o nodes=``, ``time=``/``walltime=``, ``gres=gpu:N``, ``gpus-per-node=``) counts as
    the flag would, so lint cannot be bypassed by spelling a flag as an option."""
    opts, changes = req.options, {}
    nodes = _int_max(opts.get("nodes") or "")
    if nodes is not None:
        changes["nodes"] = nodes
    for name in ("time", "walltime"):
        if opts.get(name):
            changes["time"] = opts[name]
    gres = _GPU_COUNT.search(opts.get("gres") or "")
    per_node = (opts.get("gpus-per-node") or "").rpartition(":")[2]
    if gres or per_node.isdigit():
        changes["gpus_per_node"] = int(gres.group(1) if gres else per_node)
    return replace(req, **changes) if changes else req


def lint(req: JobRequest) -> list[Finding]:
    """Every problem with a request (as the scheduler will read it); errors first."""
    req = effective(req)
    found: list[Finding] = []
    found += _geometry(req)
    found += _memory(req)
    found += _policies(req)
    found += _variables(req)
    found += _internet(req)
    return sorted(found, key=lambda f: f.level != "error")


def check(req: JobRequest) -> list[Finding]:
    """Lint and raise :class:`LintFailed` on errors; return the warnings."""
    findings = lint(req)
    if any(f.level == "error" for f in findings):
        raise LintFailed(findings)
    return findings


def _geometry(req: JobRequest) -> list[Finding]:
    out: list[Finding] = []
    part, pname, site = req.part, req.partition_name, req.site
    kind = req.launch.kind
    if req.nodes < 1:
        out.append(Finding("error", "nodes", "at least one node is needed",
                           "use --nodes 1 or more"))
    if req.nodes > part.nodes:
        out.append(Finding("error", "nodes-exceed",
                           f"partition {pname} has {part.nodes} node(s); {req.nodes} requested",
                           f"use --nodes {part.nodes} or fewer"))
    if part.limits.max_nodes_per_job and req.nodes > part.limits.max_nodes_per_job:
        out.append(Finding("error", "nodes-limit",
                           f"{pname} allows {part.limits.max_nodes_per_job} nodes per job",
                           f"use --nodes {part.limits.max_nodes_per_job} or fewer"))
    if req.hosts:
        from hpcprov.launchers import expand_hosts

        hosts = expand_hosts(req.hosts)
        if len(hosts) != req.nodes:
            out.append(Finding("error", "hosts-count",
                               f"{len(hosts)} host(s) given with --hosts but --nodes {req.nodes}",
                               f"give {req.nodes} host(s) or use --nodes {len(hosts)}"))
    gpus = req.gpus
    if gpus < 0 or gpus > part.gpus.count:
        out.append(Finding("error", "gpus-exceed",
                           f"partition {pname} has {part.gpus.count} GPU(s) per node; "
                           f"{gpus} requested",
                           f"use --gpus-per-node {part.gpus.count} or fewer"
                           + ("" if part.gpus.count else ", or a GPU partition")))
    cap = part.limits.max_gpus_per_user
    if cap and gpus * req.nodes > cap:
        out.append(Finding("error", "gpus-limit",
                           f"{gpus * req.nodes} GPUs requested; {pname} allows {cap} per user",
                           "request fewer nodes or GPUs"))
    ranks = req.ranks_per_node
    if gpus > 0 and ranks > gpus:
        out.append(Finding("error", "tasks-gpus",
                           f"{ranks} ranks per node share {gpus} GPU(s)",
                           f"use --tasks-per-node {gpus} (one rank per GPU)"))
    elif gpus > 0 and ranks < gpus:
        out.append(Finding("warning", "tasks-gpus",
                           f"{gpus} GPUs per node allocated but only {ranks} rank(s) use them",
                           f"use --tasks-per-node {gpus}"))
    user_tpn = req.options.get("ntasks-per-node")
    if user_tpn is not None and user_tpn != str(req.scheduler_tasks_per_node):
        want = req.scheduler_tasks_per_node
        why = "torchrun starts one task per node" if req.per_node_launch else "one task per rank"
        out.append(Finding("error", "tasks-per-node",
                           f"--ntasks-per-node={user_tpn} but {kind.value} needs {want} ({why})",
                           "drop --option ntasks-per-node; hpcprov sets it"))
    cpt = req.job_cpus_per_task or 1
    if req.scheduler_tasks_per_node * cpt > part.cores_per_node:
        out.append(Finding("error", "cores-exceed",
                           f"{req.scheduler_tasks_per_node} task(s) x {cpt} CPUs exceed the "
                           f"{part.cores_per_node} cores of a {pname} node",
                           "lower --cpus-per-task or --tasks-per-node"))
    out += schedulers.of(site).lint(req)
    if req.walltime and part.limits.max_walltime:
        asked, cap_s = walltime_seconds(req.walltime), walltime_seconds(part.limits.max_walltime)
        if asked is None:
            out.append(Finding("error", "time", f"cannot read --time {req.walltime!r}",
                               "use HH:MM:SS or D-HH:MM:SS"))
        elif cap_s is not None and asked > cap_s:
            out.append(Finding("error", "time-limit",
                               f"--time {req.walltime} exceeds {pname}'s limit "
                               f"{part.limits.max_walltime}",
                               f"use --time {part.limits.max_walltime} or less"))
    return out


def _policies(req: JobRequest) -> list[Finding]:
    out: list[Finding] = []
    pol, site = req.site.policies, req.site
    given = {**req.part.options, **req.options}
    for name, reason in pol.forbidden_options.items():
        if name in given:
            out.append(Finding("error", "forbidden-option",
                               f"--{name} is not allowed on {site.name}: {reason}",
                               f"remove --option {name}"))
    for name, rule in pol.required_options.items():
        value = req.options.get(name, rule.default)
        if value is None:
            example = rule.example or (rule.choices[0] if rule.choices else "VALUE")
            out.append(Finding("error", "missing-option",
                               f"--{name} is mandatory on {site.name}"
                               + (f" ({rule.reason})" if rule.reason else ""),
                               f"pass --option {name}={example}"))
        elif rule.choices and value not in rule.choices:
            out.append(Finding("error", "option-choice",
                               f"--{name}={value} is not accepted on {site.name}",
                               f"use one of: {', '.join(rule.choices)}"))
    return out


def _variables(req: JobRequest) -> list[Finding]:
    """Another scheduler's job variables ($PBS_NODEFILE in a Slurm job, and so on)."""
    own = schedulers.of(req.site)
    text = " ".join([*req.command, *map(str, req.options.values())])
    try:
        opts = own.options(req, batch=True)
    except HpcprovError:
        opts = []
    text += " " + " ".join(str(v) for _, v in opts if v)
    launcher = req.launch
    text += " " + " ".join([*launcher.args, launcher.hostfile or ""])
    out: list[Finding] = []
    for other in schedulers.all_backends():
        if other is own or not other.variable_example:
            continue
        if m := other.variable.search(text):
            fix = (f"use the {own.title} equivalent (e.g. {own.variable_example})"
                   if own.variable_example else "this site has no scheduler: drop it")
            out.append(Finding("error", f"{other.name}-variable",
                               f"{m.group(0)} is a {other.title} variable but "
                               f"{req.site.name} runs {own.title}", fix))
    return out


def _internet(req: JobRequest) -> list[Finding]:
    if req.site.policies.compute_internet:
        return []
    text = " ".join(req.command)
    for pattern, what in _NETWORK:
        if pattern.search(text):
            return [Finding("error", "no-internet",
                            f"the job runs {what}, but compute nodes of {req.site.name} "
                            "have no internet",
                            "do it on a login node before submitting, or use the site "
                            "wheelhouse (pip install --no-index)")]
    return []
