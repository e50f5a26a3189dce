"""Lint a job request before anything is generated: errors stop, warnings print."""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from typing import Literal

from hpcprov.errors import HpcprovError
from hpcprov.job import JobRequest
from hpcprov.kinds import LauncherKind, Scheduler
from hpcprov.options import pbs_options, slurm_options

Level = Literal["error", "warning"]

# Commands that need the internet when run (pip without --no-index, conda, downloads).
_NETWORK = [
    (re.compile(r"\bpip3?\s+install\b(?!.*--no-index)"), "pip install without --no-index"),
    (re.compile(r"\bconda\s+(install|create|update)\b"), "conda install/create"),
    (re.compile(r"\b(wget|curl)\b"), "a download (wget/curl)"),
    (re.compile(r"\bgit\s+(clone|fetch|pull)\b"), "git clone/fetch"),
    (re.compile(r"\benroot\s+import\b"), "enroot import"),
]
_PBS_VAR = re.compile(r"\$\{?PBS_[A-Z_]+")
_SLURM_VAR = re.compile(r"\$\{?SLURM_[A-Z_]+")
_TIME = re.compile(r"^(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?$")


@dataclass(frozen=True)
class Finding:
    level: Level
    code: str
    message: str
    fix: str

    def __str__(self) -> str:
        return f"[{self.code}] {self.message} (fix: {self.fix})"

    def to_json(self) -> dict[str, str]:
        return asdict(self)


class LintFailed(HpcprovError):
    """Raised when lint found errors; ``str()`` lists them one per line."""

    def __init__(self, findings: list[Finding]) -> None:
        self.findings = findings
        errors = [f for f in findings if f.level == "error"]
        super().__init__("\n".join(str(f) for f in errors))


def walltime_seconds(text: str) -> int | None:
    """Seconds in a Slurm/PBS time string (MM, MM:SS, HH:MM:SS, D-HH[:MM[:SS]])."""
    m = _TIME.match(text.strip())
    if not m:
        return None
    days, a, b, c = m.groups()
    nums = [int(x) for x in (a, b, c) if x is not None]
    if days is not None:
        hours, minutes, seconds = (nums + [0, 0])[:3]
    elif len(nums) == 3:
        hours, minutes, seconds = nums
    elif len(nums) == 2:
        hours, minutes, seconds = 0, nums[0], nums[1]
    else:
        hours, minutes, seconds = 0, nums[0], 0
    return ((int(days or 0) * 24 + hours) * 60 + minutes) * 60 + seconds


def lint(req: JobRequest) -> list[Finding]:
    """Every problem with a request; errors first."""
    found: list[Finding] = []
    found += _geometry(req)
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
    if site.scheduler == Scheduler.none and req.nodes > 1:
        out.append(Finding("error", "nodes-local", f"site {site.name} has no scheduler: one node",
                           "use --nodes 1"))
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
    # (horovodrun is given -H host:slots built from the file, see launchers.host_slots)
    if (site.scheduler == Scheduler.pbs and kind == LauncherKind.mpirun
            and not req.hosts and not req.launch.oversubscribe):
        out.append(Finding("error", "pbs-slots",
                           "$PBS_NODEFILE lists one line per slot, so mpirun refuses to place "
                           f"{ranks} ranks per node",
                           f"set 'oversubscribe: true' on launcher {req.launcher_name}"))
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
    """PBS variables in a Slurm job and the other way round."""
    text = " ".join([*req.command, *map(str, req.options.values())])
    try:
        opts = slurm_options(req, batch=True) if req.scheduler == Scheduler.slurm else (
            pbs_options(req) if req.scheduler == Scheduler.pbs else [])
    except HpcprovError:
        opts = []
    text += " " + " ".join(str(v) for _, v in opts if v)
    launcher = req.launch
    text += " " + " ".join([*launcher.args, launcher.hostfile or ""])
    out: list[Finding] = []
    if req.scheduler != Scheduler.pbs and (m := _PBS_VAR.search(text)):
        out.append(Finding("error", "pbs-variable",
                           f"{m.group(0)} is a PBS variable but {req.site.name} runs "
                           f"{req.scheduler.value}",
                           "use the Slurm equivalent (e.g. $SLURM_JOB_NODELIST)"))
    if req.scheduler != Scheduler.slurm and (m := _SLURM_VAR.search(text)):
        out.append(Finding("error", "slurm-variable",
                           f"{m.group(0)} is a Slurm variable but {req.site.name} runs "
                           f"{req.scheduler.value}",
                           "use the PBS equivalent (e.g. $PBS_NODEFILE)"))
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


def lint_plan(plan: object, site: object) -> list[Finding]:
    """Problems of a setup plan: steps that need the internet where there is none, and the
    Horovod x framework combinations the compatibility table knows to be bad (errors) or
    to have caveats (warnings)."""
    from hpcprov.kinds import SiteMethods
    from hpcprov.provision.compat import for_site
    from hpcprov.provision.plan import Plan

    assert isinstance(plan, Plan) and isinstance(site, SiteMethods)
    findings = []
    for match in for_site(site):
        if match.rule.verdict == "bad":
            findings.append(Finding("error", f"compat-{match.rule.id}", match.message(),
                                    "change horovod.version or the framework versions in "
                                    "the profile (see docs/compatibility.md)"))
        elif match.rule.verdict == "caveat":
            findings.append(Finding("warning", f"compat-{match.rule.id}", match.message(),
                                    "see docs/compatibility.md"))
    if plan.runs_on != "compute" or site.policies.compute_internet:
        return findings
    return findings + [
        Finding("error", "no-internet",
                f"step {step.id} needs the internet, but compute nodes of {site.name} have none",
                "run setup on a login node (--on login), or point the profile at a local "
                "installer/wheelhouse")
        for step in plan.steps if step.needs_network
    ]
