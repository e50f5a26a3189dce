"""Lint a job request before anything is generated: errors stop, warnings print.

:func:`site_check_errors` is ``hpcprov site check``: a profile that validates must also
give a job that can run from its defaults alone, on every partition, and its env values
must mean what they seem to (:func:`profile_findings`).
"""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hpcprov import schedulers
from hpcprov.core.errors import HpcprovError, ProfileError, warn
from hpcprov.core.findings import Finding, LintFailed
from hpcprov.core.text import shown
from hpcprov.core.walltime import walltime_seconds
from hpcprov.request.job import JobRequest
from hpcprov.request.options import GEOMETRY
from hpcprov.site.bins import walltime_cap

if TYPE_CHECKING:
    from collections.abc import Iterable

    from hpcprov.site.gpu_vendors import Vendor
    from hpcprov.site.types import Partition, Site

# Commands that need the internet when run (pip without --no-index, conda, downloads).
_NETWORK = [
    (re.compile(r"\bpip3?\s+install\b(?!.*--no-index)"), "pip install without --no-index"),
    (re.compile(r"\bconda\s+(install|create|update)\b"), "conda install/create"),
    (re.compile(r"\b(wget|curl)\b"), "a download (wget/curl)"),
    (re.compile(r"\bgit\s+(clone|fetch|pull)\b"), "git clone/fetch"),
    (re.compile(r"\benroot\s+import\b"), "enroot import"),
]


_MEM = r"(?i)^(\d+(?:\.\d+)?)([KMGT]?)B?$"
_MEM_GB = {"K": 1 / 1024**2, "M": 1 / 1024, "": 1 / 1024, "G": 1.0, "T": 1024.0}


def memory_gb(text: str) -> float | None:
    """GB in a Slurm memory size (``4000`` is MB, as sbatch reads it; ``100G``, ``1T``)."""
    m = re.match(_MEM, text.strip())
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


def lint(req: JobRequest) -> list[Finding]:
    """Every problem with a request; errors first. A job option (-o) that would set the
    job's geometry (nodes, tasks, GPUs, time, queue, in any spelling its scheduler takes) is
    refused alone: only hpcprov's flags set it, so lint judges the job the script describes."""
    refused = schedulers.of(req.site).geometry_findings(req)
    if refused:
        return refused
    found: list[Finding] = []
    found += _geometry(req)
    found += _memory(req)
    found += _policies(req)
    found += _variables(req)
    found += _internet(req)
    found += _stack(req)
    found += _gpu_binding(req)
    found += _literal_variables(req)
    return sorted(found, key=lambda f: f.level != "error")


def check(req: JobRequest, allocation: bool = True) -> list[Finding]:
    """Lint and raise :class:`LintFailed` on errors; return the warnings. Without
    ``allocation`` (a launch line typed inside one) a mandatory job option is not missing:
    the allocation it runs in was asked for with it."""
    findings = [f for f in lint(req) if allocation or f.code != "missing-option"]
    if any(f.level == "error" for f in findings):
        raise LintFailed(findings)
    return findings


def cpus_per_node(part: Partition) -> int:
    """The CPUs a scheduler counts on a node: cores x hardware threads per core."""
    return int(part.cores_per_node) * int(part.threads_per_core)


def _nodes(req: JobRequest) -> list[Finding]:
    """The node count against the partition's (which a profile may not know)."""
    part, pname = req.part, req.partition_name
    if req.nodes < 1:
        return [Finding("error", "nodes", "at least one node is needed",
                        "use --nodes 1 or more")]
    most = schedulers.of(req.site).max_nodes
    if most is not None and req.nodes > most:
        return []  # the scheduler's own lint refuses it, in one line
    if part.nodes is None:
        if req.nodes == 1:
            return []
        return [Finding("warning", "nodes-unknown",
                        f"the profile does not say how many nodes {pname} has: {req.nodes} "
                        "node(s) are not checked against it",
                        f"set partitions.{pname}.nodes in the profile once it is known")]
    if req.nodes > part.nodes:
        return [Finding("error", "nodes-exceed",
                        f"partition {pname} has {part.nodes} node(s); {req.nodes} requested",
                        f"use --nodes {part.nodes} or fewer")]
    return []


def cpus_exceeded(req: JobRequest) -> list[Finding]:
    """Tasks x CPUs per task against the node's CPUs (hardware threads, as Slurm counts)."""
    part, tasks, cpt = req.part, req.scheduler_tasks_per_node, req.task_cpus or 1
    have = cpus_per_node(part)
    if tasks * cpt <= have:
        return []
    threads = int(part.threads_per_core)
    what = (f"{have} CPUs ({part.cores_per_node} cores x {threads} threads)" if threads > 1
            else f"{have} cores")
    fix = "lower --cpus-per-task or --tasks-per-node"
    if threads == 1:
        fix += (f" (if {req.partition_name}'s nodes run 2 hardware threads per core, which "
                "the scheduler counts as CPUs, set threads_per_core: 2 in the profile)")
    return [Finding("error", "cores-exceed",
                    f"{tasks} task(s) x {cpt} CPUs exceed the {what} of a "
                    f"{req.partition_name} node", fix)]


def _geometry(req: JobRequest) -> list[Finding]:
    out: list[Finding] = []
    part, pname, site = req.part, req.partition_name, req.site
    out += _nodes(req)
    least = part.limits.min_nodes_per_job
    if least and req.nodes < least:
        out.append(Finding("error", "nodes-limit",
                           f"{pname} takes jobs of {least} nodes or more",
                           f"use --nodes {least} or more, or another partition"))
    if part.limits.max_nodes_per_job and req.nodes > part.limits.max_nodes_per_job:
        out.append(Finding("error", "nodes-limit",
                           f"{pname} allows {part.limits.max_nodes_per_job} nodes per job",
                           f"use --nodes {part.limits.max_nodes_per_job} or fewer"))
    if req.hosts:
        from hpcprov.jobs.launchers import expand_hosts

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
    gpu_cap = part.limits.max_gpus_per_user
    if gpu_cap and gpus * req.nodes > gpu_cap:
        out.append(Finding("error", "gpus-limit",
                           f"{gpus * req.nodes} GPUs requested; {pname} allows {gpu_cap} per user",
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
    out += cpus_exceeded(req)
    out += schedulers.of(site).lint(req)
    if not req.walltime and schedulers.of(site).name != "none":
        out.append(Finding("warning", "no-time",
                           f"the job asks for no time limit ({pname} has no default_walltime): "
                           f"{schedulers.of(site).title} gives it the queue's default, which "
                           "may be short, or refuses it",
                           f"set partitions.{pname}.limits.default_walltime in the profile, or "
                           "pass -t/--time"))
    cap = walltime_cap(part.limits, req.nodes)
    if req.walltime and cap:
        asked, cap_s = walltime_seconds(req.walltime), walltime_seconds(cap)
        size = f" for {req.nodes} node(s)" if cap != part.limits.max_walltime else ""
        if asked is None:
            out.append(Finding("error", "time", f"cannot read --time {shown(req.walltime)}",
                               "use HH:MM:SS or D-HH:MM:SS"))
        elif cap_s is not None and asked > cap_s:
            out.append(Finding("error", "time-limit",
                               f"--time {req.walltime} exceeds {pname}'s limit{size} {cap}",
                               f"use --time {cap} or less"))
    return out


def _own_option_fix(req: JobRequest, name: str) -> str:
    """How a profile stops hpcprov writing the job option ``name``."""
    if name in ("gres", "gpus", "gpus-per-node", "gpus-per-task", "gpu"):
        section = schedulers.of(req.site).name
        return (f"set {section}.gpu_request to another form (none: no GPU option) in the "
                "profile, or ask for no GPUs (-G 0)")
    return f"the profile's {name} comes from the job's geometry: ask the site how to say it"


def _policies(req: JobRequest) -> list[Finding]:
    out: list[Finding] = []
    pol, site = req.site.policies, req.site
    backend = schedulers.of(site)
    def spell(name: str) -> str:  # -A on PBS, --account on Slurm, -G (account) if declared
        return backend.spell(site, name)

    written = backend.options(req, batch=True)

    def spelled(options: Iterable[tuple[str, str | None]], name: str) -> str | None:
        """The name under which ``options`` hold the option ``name``: itself, or another
        name the scheduler writes as the same flag (LSF's ``account`` for ``P``); None."""
        found = [n for n, v in options if backend.is_option(site, n, v, name)]
        return name if name in found else next(iter(found), None)

    for name, reason in pol.forbidden_options.items():
        mine = spelled(req.options.items(), name)
        part = spelled(req.part.options.items(), name)
        given = mine or part
        alias = (f" (the option {given} is written as it)" if given not in (None, name)
                 else "")
        if mine is not None:
            out.append(Finding("error", "forbidden-option",
                               f"{spell(name)} is not allowed on {site.name}: {reason}{alias}",
                               f"remove --option {mine}"))
        elif part is not None:
            out.append(Finding("error", "forbidden-option",
                               f"{spell(name)} is not allowed on {site.name}: {reason}{alias}",
                               f"remove {part} from partitions.{req.partition_name}.options "
                               "in the profile"))
        elif own := spelled(written, name):  # an option hpcprov writes: the profile says how
            out.append(Finding("error", "forbidden-option",
                               f"{spell(name)} is not allowed on {site.name} ({reason}), but the "
                               f"job would ask for it", _own_option_fix(req, own)))
    for name, rule in pol.required_options.items():
        mine = spelled(req.options.items(), name)
        value = req.options[mine] if mine is not None else rule.default
        if value is None and spelled(written, name):  # hpcprov writes it (the time: -t)
            continue
        if value is None:
            example = rule.example or (rule.choices[0] if rule.choices else "VALUE")
            # a part of the job's geometry (the time limit...) is no -o option: its own flag
            kind = backend.geometry_of(req, name, None)
            fix = (f"set partitions.{req.partition_name}.limits.default_walltime in the "
                   "profile, or pass -t/--time" if kind == "time"
                   else f"pass {GEOMETRY[kind][1]}" if kind else
                   f"pass --option {name}={example}")
            out.append(Finding("error", "missing-option",
                               f"{spell(name)} is mandatory on {site.name}"
                               + (f" ({rule.reason})" if rule.reason else ""), fix))
        elif rule.choices and value not in rule.choices:
            out.append(Finding("error", "option-choice",
                               f"{spell(name)} {value} is not accepted on {site.name}",
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


def _stack(req: JobRequest) -> list[Finding]:
    backend = schedulers.of(req.site)
    if req.site.uenv is None or backend.stack_options(req) is not None:
        return []
    return [Finding("error", "uenv", f"the environment lives in uenv {req.site.uenv.image}, "
                    f"which {backend.title} jobs cannot mount (Slurm's uenv plugin does)",
                    "describe the site without uenv (modules or a container image)")]


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


# ------------------------------------------------------- what a rank sees of its GPUs

PathKey = tuple[str | int, ...]


def _no_binding(value: object) -> bool:
    """A --gpu-bind value that binds nothing (none, verbose,none)."""
    return "none" in str(value or "").split(",")


def _launcher_binding(site: Site, name: str) -> list[tuple[PathKey, str]]:
    """Where a launcher binds each rank to its own GPUs: (its key in the profile, what it
    does). mpirun's set_cuda_visible_devices gives every rank all the job's GPUs: no
    binding."""
    from hpcprov.site.gpu_vendors import VENDORS

    launcher, where = site.launchers[name], ("launchers", name)
    kind = str(getattr(launcher.kind, "value", launcher.kind))
    found: list[tuple[PathKey, str]] = []
    if kind == "jsrun":
        found.append(((*where, "kind"), f"launchers.{name}: jsrun gives each rank a "
                      "resource set of its own GPUs (the node's GPUs / ranks per node)"))
    if kind == "lrun" and "--gpubind=off" not in [str(w) for w in launcher.args]:
        found.append(((*where, "kind"), f"launchers.{name}: lrun binds each rank to its own "
                      "GPU (unless its args say --gpubind=off)"))
    if kind in ("srun", "container"):
        for key in ("args", "srun_args") if kind == "container" else ("args",):
            for word in getattr(launcher, key):
                flag, _, value = str(word).partition("=")
                if flag in ("--gpus-per-task", "--ntasks-per-gpu") or (
                        flag == "--gpu-bind" and not _no_binding(value)):
                    found.append(((*where, key), f"launchers.{name}.{key}: {word} binds "
                                  "each task to its own GPUs"))
    if kind == "flux":
        said = _flux_gpu_affinity([str(w) for w in launcher.args])
        if said:
            found.append(((*where, "args"), f"launchers.{name}.args: {said} gives each "
                          "task its own GPUs (flux run's default, gpu-affinity=on, gives "
                          "every task all of its node's GPUs of the job)"))
    variables = _visible_variables(VENDORS.values())
    for word in launcher.wrapper:
        var, eq, value = str(word).partition("=")
        if eq and var in variables and "$" in value:
            found.append(((*where, "wrapper"), f"launchers.{name}.wrapper: {word} gives "
                          "each rank its own GPU"))
    return found


def _visible_variables(vendors: Iterable[Vendor]) -> set[str]:
    """Each vendor's visible-devices variable, and those a starter's binding sets (ROCm's
    lower one: AMD sites bind with it too)."""
    return {v.visible_devices for v in vendors} | {
        var for v in vendors for var in (v.bound_visible_devices or {}).values()}


def visible_variable(site: Site, launcher: str, pname: str) -> str:
    """The variable that limits the GPUs each rank of ``launcher`` sees on partition
    ``pname``: the one its wrapper sets per rank; where its ranks are bound per task (its
    per_rank, else the partition's, says one, or it or the partition binds), the one its
    starter's binding sets (:attr:`Vendor.bound_visible_devices`: AMD GPUs under Slurm's
    binding, ROCR_VISIBLE_DEVICES); else the vendor's."""
    from hpcprov.site.gpu_vendors import VENDORS
    from hpcprov.site.launcher_kinds import kind_of

    vendor, launch = VENDORS[site.partitions[pname].gpus.vendor], site.launchers[launcher]
    for word in launch.wrapper:
        var, eq, value = str(word).partition("=")
        if eq and var in _visible_variables(VENDORS.values()) and "$" in value:
            return var
    bound = site.per_rank(launcher, pname) == "one" or bool(_launcher_binding(
        site, launcher)) or (launch.per_rank is None and bool(_partition_binding(site, pname)))
    if not bound:
        return vendor.visible_devices
    kind = kind_of(launch.kind)
    starter = kind.scheduler or (schedulers.of(site).name
                                 if kind.task_starter or kind.per_node else None)
    return vendor.visible_for(starter)


def _flux_gpu_affinity(words: list[str]) -> str | None:
    """The words of flux run options (-o NAME=VALUE, -oNAME=VALUE, --setopt[=]NAME=VALUE)
    that bind each task to its own GPUs: gpu-affinity=per-task or =map:LIST (None:
    none)."""
    for i, word in enumerate(words):
        before = words[i - 1] if i else ""
        if before in ("-o", "--setopt"):
            option, said = word, f"{before} {word}"
        elif word.startswith("--setopt="):
            option, said = word.removeprefix("--setopt="), word
        elif word.startswith("-o") and not word.startswith("--"):
            option, said = word[2:], word
        else:
            continue
        name, _, value = option.partition("=")
        if name == "gpu-affinity" and (value == "per-task" or value.startswith("map:")):
            return said
    return None


def _partition_binding(site: Site, pname: str) -> list[tuple[PathKey, str]]:
    """Where the profile binds each task of a Slurm partition to its own GPUs: its
    gpus-per-task or gpu-bind option, or the site's gpu_request: gpus_per_task (Slurm
    implies --gpu-bind=per_task with --gpus-per-task)."""
    if schedulers.of(site).name != "slurm":
        return []
    found: list[tuple[PathKey, str]] = []
    for key, value in site.partitions[pname].options.items():
        if key == "gpus-per-task" or (key == "gpu-bind" and not _no_binding(value)):
            found.append((("partitions", pname, "options", key),
                          f"partitions.{pname}.options: {key}={value} binds each task to "
                          "its own GPUs"))
    if getattr(schedulers.of(site).section(site), "gpu_request", None) == "gpus_per_task":
        found.append((("slurm", "gpu_request"), "slurm.gpu_request: gpus_per_task binds "
                      "each task to its own GPUs (--gpus-per-task implies --gpu-bind)"))
    return found


def _device_call(part: Partition) -> str:
    from hpcprov.site.gpu_vendors import VENDORS

    return f"torch.{VENDORS[part.gpus.vendor].torch_device}.set_device"


def _one_per_rank(pname: str) -> str:
    return (f"partitions.{pname}.gpus.per_rank: one: each rank sees only its own GPU, as "
            "device 0")


def _use_device_0(part: Partition) -> str:
    return (f"scripts must use device 0 ({_device_call(part)}(0), or LOCAL_RANK % "
            "device_count()), not LOCAL_RANK")


def _binds(what: str, call: str) -> str:
    return (f"{what}: LOCAL_RANK is no valid device index there ({call}(LOCAL_RANK) fails "
            "with invalid device ordinal where LOCAL_RANK >= the GPUs a rank sees)")


def _declare(pnames: list[str], launcher: str | None = None) -> str:
    """The fix of a binding where the profile says ``all``: the partitions' declaration,
    or, for a launcher's own binding, the launcher's (only its ranks are bound)."""
    said = (f"declare gpus.per_rank: one on partition{'s' if len(pnames) > 1 else ''} "
            f"{', '.join(pnames)} (scripts then use device 0)")
    return said if launcher is None else (
        f"{said}, or per_rank: one on launcher {launcher} where only its ranks are bound")


def _one_per_rank_of(site: Site, launcher: str, pname: str) -> str:
    """Where the profile says a launcher's ranks see one GPU each: the launcher's own
    per_rank, else the partition's."""
    if site.launchers[launcher].per_rank == "one":
        return (f"launchers.{launcher}.per_rank: one: each rank it starts sees only its own "
                "GPU, as device 0")
    return _one_per_rank(pname)


def device_rules(site: Site, pname: str) -> list[str]:
    """The device rule of a GPU partition's jobs, for the lines a user reads (the guide):
    where the ranks of some launcher each see one GPU (its per_rank, else the
    partition's), one line naming them and what scripts must use; none otherwise."""
    part = site.partitions[pname]
    if not part.gpus.count:
        return []
    one = [n for n in site.launchers if site.per_rank(n, pname) == "one"]
    if not one:
        return []
    rest = [n for n in site.launchers if n not in one]
    who = ("every launcher" if not rest else
           f"launcher{'s' if len(one) > 1 else ''} {', '.join(f'`{n}`' for n in one)}")
    others = (f"; the ranks of {', '.join(f'`{n}`' for n in rest)} see all of the node's "
              "GPUs (device LOCAL_RANK)") if rest else ""
    return [f"GPUs on {pname}: each rank that {who} starts sees only its own GPU, as device "
            f"0: {_use_device_0(part)}{others}."]


def gpu_binding_findings(site: Site) -> list[Located]:
    """What ``hpcprov site check`` warns about the GPUs each rank sees, located at the
    profile's key: a partition or launcher that declares one GPU per rank (scripts must use
    device 0), and a binding per rank (Slurm's gpus-per-task or gpu-bind, a jsrun launcher,
    an lrun launcher without --gpubind=off, flux run's gpu-affinity=per-task, a wrapper
    setting the visible-devices variable per rank) where the profile says ``all`` (the
    launcher's per_rank, else the GPU partitions')."""
    gpu = {p: part for p, part in site.partitions.items() if part.gpus.count}
    out: list[Located] = [(("partitions", p, "gpus", "per_rank"),
                           f"{_one_per_rank(p)}: {_use_device_0(part)}")
                          for p, part in gpu.items() if part.gpus.per_rank == "one"]
    if gpu:
        first = next(iter(gpu.values()))
        out += [(("launchers", n, "per_rank"),
                 f"{_one_per_rank_of(site, n, '')}: {_use_device_0(first)}")
                for n, launcher in site.launchers.items() if launcher.per_rank == "one"]
    for name, launcher in site.launchers.items():
        # the partitions where this launcher's ranks are said to see all their node's GPUs
        seen_all = [] if launcher.per_rank == "one" else list(gpu) \
            if launcher.per_rank == "all" else \
            [p for p, part in gpu.items() if part.gpus.per_rank == "all"]
        if not seen_all:
            continue
        fix = (f"set launchers.{name}.per_rank: one (scripts then use device 0)"
               if launcher.per_rank == "all" else _declare(seen_all, name))
        call = _device_call(gpu[seen_all[0]])
        out += [(loc, f"{_binds(what, call)}; {fix}")
                for loc, what in _launcher_binding(site, name)]
    said_all = [p for p, part in gpu.items() if part.gpus.per_rank == "all"]
    if not said_all:
        return out
    call = _device_call(gpu[said_all[0]])
    seen: set[PathKey] = set()
    for p in said_all:
        for loc, what in _partition_binding(site, p):
            if loc not in seen:  # the site's gpu_request: once, naming every partition
                seen.add(loc)
                pnames = [p] if loc[0] == "partitions" else said_all
                out.append((loc, f"{_binds(what, call)}; {_declare(pnames)}"))
    return out


def _gpu_binding(req: JobRequest) -> list[Finding]:
    """A GPU job's warning about the device its script must take: device 0 where its
    launcher (its per_rank, else the partition's gpus.per_rank) gives each rank one GPU;
    where its launcher or partition binds each rank to its own GPU but the profile says
    ``all``, that LOCAL_RANK is no device there. A launcher that says ``per_rank: all``
    itself is taken at its word on the partition's binding (torchrun's one agent per
    node), not on its own."""
    part, pname = req.part, req.partition_name
    try:
        gpus, name = req.gpus, req.launcher_name
    except HpcprovError:
        return []
    if gpus <= 0:
        return []
    call = _device_call(part)
    if req.site.per_rank(name, pname) == "one":
        return [Finding("warning", "gpu-per-rank", _one_per_rank_of(req.site, name, pname),
                        _use_device_0(part))]
    own = f"set launchers.{name}.per_rank: one in the profile, and use {call}(0) in scripts"
    found = [Finding("warning", "gpu-binding", _binds(what, call), own)
             for _, what in _launcher_binding(req.site, name)]
    if req.launch.per_rank == "all":
        return found
    return found + [Finding("warning", "gpu-binding", _binds(what, call),
                            f"set partitions.{pname}.gpus.per_rank: one in the profile, and "
                            f"use {call}(0) in scripts")
                    for _, what in _partition_binding(req.site, pname)]


# ---------------------------------------------------------------- hpcprov site check

Located = tuple[tuple[str | int, ...], str]  # (key path in the profile, problem)


def default_request(site: Site, partition: str) -> JobRequest:
    """The partition's smallest job: ``hpcprov jobscript -p PARTITION -N MIN -- CMD`` with
    MIN its ``limits.min_nodes_per_job`` (1 where it has none), the default launcher, the
    site's mandatory options at their defaults (or their examples: the user must give
    those)."""
    nodes = site.partitions[partition].limits.min_nodes_per_job or 1
    req = JobRequest(site=site, partition=partition, command=("python", "train.py"),
                     nodes=nodes)
    # a mandatory part of the geometry (the time limit) is no -o option: hpcprov's flags
    # and the profile's defaults give it, and lint says where they do not
    geometry = schedulers.of(site).geometry_of
    options: dict[str, str | None] = {
        name: rule.default or rule.example or (rule.choices[0] if rule.choices else "x")
        for name, rule in site.policies.required_options.items()
        if geometry(req, name, None) is None}
    return replace(req, options=options)


def default_request_findings(site: Site) -> list[Located]:
    """Every partition whose default request can never produce a valid job: its lint
    errors, or why no job script can be generated for it."""
    from hpcprov.jobs.jobscript import build_jobscript

    out: list[Located] = []
    for pname in site.partitions:
        req = default_request(site, pname)
        try:
            problems = [f"{f.message} (fix: {f.fix})" for f in lint(req) if f.level == "error"]
            if not problems:
                build_jobscript(req)
        except HpcprovError as exc:
            problems = [str(exc)]
        out += [(("partitions", pname), f"partitions.{pname}: its smallest job "
                 f"({req.nodes} node(s), launcher {req.launcher_name}) cannot run: {p}")
                for p in problems]
    return out


def env_findings(site: Site) -> list[Located]:
    """env values (the site's, each partition's network.env) hpcprov would write as text
    although they look like commands or shell expansions."""
    from hpcprov.jobs.modules import env_problems

    out: list[Located] = [(("env", name), f"env.{name}: {why}")
                          for name, why in env_problems(site.env).items()]
    for pname, part in site.partitions.items():
        where = ("partitions", pname, "network", "env")
        out += [((*where, name), f"{'.'.join(where)}.{name}: {why}")
                for name, why in env_problems(part.network.env).items()]
    return out


def cuda_target_findings(site: Site, nvcc: Any = None) -> list[Located]:
    """GPU partitions the CUDA they are built with cannot target (every partition, its own
    build modules included), with the fix."""
    from hpcprov.site.cuda_arch import cuda_findings

    return [(where, f"{problem}; fix: {fix}") for where, problem, fix in
            cuda_findings(site, nvcc)]


def profile_findings(site: Site, nvcc: Any = None) -> list[Located]:
    """What ``hpcprov site check`` adds to validation, for a profile that validates
    (``nvcc``: what the nvcc at hand targets, for builds whose modules name no CUDA)."""
    from hpcprov.jobs.arch_lint import arch_errors

    return env_findings(site) + default_request_findings(site) + \
        cuda_target_findings(site, nvcc) + literal_variable_findings(site) + arch_errors(site)


# $NAME or ${NAME}: what each rank replaces in a launcher's wrapper words (rank_env.sh)
_VARIABLE = re.compile(r"\$(\{[A-Za-z_][A-Za-z0-9_]*\}|[A-Za-z_][A-Za-z0-9_]*)")
_PER_RANK = ("a value each rank computes goes in the launcher's wrapper, whose $NAME and "
             "${NAME} each rank replaces with its own value (nothing else is evaluated)")


def literal_variable_findings(site: Site) -> list[Located]:
    """``site check``'s errors for launcher arguments that name a variable: the launcher
    gets them as written (hpcprov quotes every word), so ``--master_addr=$MASTER_ADDR``
    would reach it literally; only wrapper words are expanded, on each rank."""
    found: list[Located] = []
    for name, launcher in site.launchers.items():
        for key in ("args", "srun_args"):
            for i, word in enumerate(getattr(launcher, key, None) or []):
                if m := _VARIABLE.search(str(word)):
                    found.append((("launchers", name, key, i),
                                  f"launchers.{name}.{key}: {str(word)!r} reaches the "
                                  f"launcher as written ({m.group(0)} is not expanded in "
                                  f"launcher arguments); {_PER_RANK}"))
    return found


def _literal_variables(req: JobRequest) -> list[Finding]:
    """The job's command words that name a variable each rank does not replace: they reach
    the program as written (the shell that ran hpcprov already expanded what it could).
    Where the ranks start through the rank contract, its names ($NODE_RANK, ${MASTER_ADDR},
    ... :data:`hpcprov.jobs.ranks.CONTRACT`) are replaced on each rank, and nothing else; a
    command run by a shell (``bash -c '...'``) is that shell's to expand, on each rank."""
    from hpcprov.jobs.ranks import CONTRACT
    from hpcprov.site.launcher_kinds import kind_of

    words = [str(w) for w in req.command]
    if len(words) > 2 and Path(words[0]).name in _SHELLS and words[1] == "-c":
        return []
    kind = kind_of(req.launch.kind)
    shim = bool(kind.container or kind.starters)
    for word in words:
        for m in _VARIABLE.finditer(word):
            name = m.group(1).strip("{}")
            if name in CONTRACT and shim:
                continue
            if name in CONTRACT:  # torchrun: its ranks get the variables, the command none
                why = (f"{req.launcher_name} gives each rank {name} in its environment but "
                       "replaces nothing in the command")
                fix = f"read it in the program (os.environ['{name}'])"
            else:
                why = (f"each rank replaces only the rank contract's names "
                       f"({', '.join(CONTRACT)}) in the command, not {m.group(0)}")
                fix = (f"read it in the program (os.environ), or run the command through a "
                       f"shell (bash -c '...'); {_PER_RANK}")
            return [Finding("warning", "literal-variable",
                            f"the command's {word!r} reaches the program as written: {why}",
                            fix)]
    return []


_SHELLS = ("bash", "sh", "zsh", "dash", "ksh")


ROCM_INDEX_EXAMPLE = "https://download.pytorch.org/whl/rocm6.2"


def framework_index_findings(site: Site) -> list[Located]:
    """``site check``'s warning where pip installs pytorch for AMD GPUs from no vendor
    index: PyPI's torch is a CUDA build, which sees no AMD GPU."""
    fw = site.python.frameworks.get("pytorch")
    if (fw is None or fw.installer != "pip" or fw.index_url or fw.extra_index_urls
            or site.python.backend == "container"):
        return []
    amd = [p for p, part in site.partitions.items() if part.gpus.count
           and part.gpus.vendor == "amd"]
    if not amd:
        return []
    return [(("python", "frameworks", "pytorch"),
             f"pip installs pytorch from PyPI, a CUDA build, for the AMD GPUs of "
             f"{', '.join(amd)}: name ROCm's wheel index in python.frameworks.pytorch."
             f"index_url, e.g. index_url: {ROCM_INDEX_EXAMPLE}")]


def site_check_errors(path: Path, probe_nvcc: bool = False) -> list[ProfileError]:
    """``hpcprov site check`` of one file: its validation errors, else the problems
    :func:`profile_findings` finds, each located at its key in the profile. With
    ``probe_nvcc`` (the command's, an effect) the nvcc on PATH answers for a CUDA build
    whose modules name no CUDA."""
    from hpcprov.site.loader import resolve
    from hpcprov.site.profiles import validated

    try:
        layer = resolve(path)
    except ProfileError as exc:
        return [exc]
    site, errors = validated(layer)
    if site is None:
        return errors
    nvcc = None
    if probe_nvcc:
        from hpcprov.site.cuda_arch import needs_nvcc_probe
        from hpcprov.site.cuda_arch import probe_nvcc as probe

        nvcc = probe() if needs_nvcc_probe(site) else None
    errors = [ProfileError(*layer.where(loc), problem)
              for loc, problem in profile_findings(site, nvcc)]
    from hpcprov.jobs.arch_lint import arch_warnings
    from hpcprov.site.mounts import host_python_launchers

    for loc, problem in [*gpu_binding_findings(site), *framework_index_findings(site),
                         *host_python_launchers(site), *arch_warnings(site)]:
        # warnings: the profile stays ok
        warn(str(ProfileError(*layer.where(loc), problem)))
    from hpcprov.jobs.roles import unstartable, validation_gaps

    for name in site.launchers:  # a launcher nothing on this site can start
        if (why := unstartable(site, name)) is not None:
            warn(str(ProfileError(*layer.where(("launchers", name)), why)))
    for problem in validation_gaps(site):  # validate would check the environment alone
        warn(str(ProfileError(*layer.where(("launchers",)), problem)))
    return errors
