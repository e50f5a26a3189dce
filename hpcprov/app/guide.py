"""The site walkthrough a seed tutorial gives a new user, generated from the profile."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from hpcprov import schedulers
from hpcprov.core.errors import HpcprovError
from hpcprov.core.shell import join, quote
from hpcprov.jobs.jobscript import allocate_argv, build_jobscript, submit_argv
from hpcprov.jobs.launchers import build_launch, env_lines
from hpcprov.jobs.layout import Layout
from hpcprov.jobs.modules import load_lines
from hpcprov.request.job import JobRequest
from hpcprov.site.conda_channels import tos_channels
from hpcprov.site.kinds import LauncherKind

if TYPE_CHECKING:
    from hpcprov.site.model import Site


def _block(lines: list[str], lang: str = "bash") -> list[str]:
    return [f"```{lang}", *lines, "```", ""]


def _example_request(site: Site, partition: str | None, launcher: str | None = None,
                     command: tuple[str, ...] = ("python", "train_hvd.py")) -> JobRequest:
    pname, part = site.partition(partition)
    gpus = part.gpus.count
    nodes = min(2, part.nodes or 2)  # an unknown count: the two nodes of the example
    options = {n: (r.default or r.example or "VALUE")
               for n, r in site.policies.required_options.items()}
    return JobRequest(site=site, nodes=nodes, gpus_per_node=gpus, partition=pname,
                      launcher=launcher, command=command, options=options,
                      job_name="train_hvd")


def render_guide(site: Site, partition: str | None = None, ref: str | None = None) -> str:
    """Markdown walkthrough for a new user of the site. ``ref``: how the user named the site
    (a profile's path where it has no name on the search path); every hpcprov command the
    guide prints uses it, so each runs as printed."""
    ref = ref or site.name
    from hpcprov.jobs.checkbuild import render_check_build
    from hpcprov.provision.plan import build_plan

    pname, part = site.partition(partition)
    lay = Layout.of(site)
    out = [f"# Distributed training on {site.name}", "", site.description or "", ""]
    out += ["## The cluster", "",
            f"Scheduler: **{schedulers.of(site).name}**. Partitions:", "",
            "| partition | nodes | cores/node | memory/node | GPUs/node | GPU | arch | limits |",
            "|---|---|---|---|---|---|---|---|"]
    for name, p in site.partitions.items():
        lim = p.limits
        limits = ", ".join(x for x in [
            f"{lim.max_jobs_per_user} jobs/user" if lim.max_jobs_per_user else "",
            f"{lim.max_gpus_per_user} GPUs/user" if lim.max_gpus_per_user else "",
            f"walltime {lim.max_walltime}" if lim.max_walltime else ""] if x)
        gpu = " ".join(x for x in (p.gpus.model, p.gpus.interconnect and
                                   f"({p.gpus.interconnect})") if x) or "-"
        memory = f"{p.memory_gb:g} GB" if p.memory_gb else "-"
        cores = str(p.cores_per_node) + (f" ({p.cores_per_node * p.threads_per_core} CPUs)"
                                         if p.threads_per_core > 1 else "")
        out.append(f"| {name}{' (default)' if p.default else ''} | "
                   f"{p.nodes if p.nodes is not None else 'unknown'} | {cores} | {memory} | "
                   f"{p.gpus.count} | {gpu} | {p.arch} | {limits or '-'} |")
    out.append("")
    pol = site.policies
    rules = [f"`--{n}` is mandatory" + (f" ({r.reason})" if r.reason else "")
             + (f"; accepted: {', '.join(r.choices)}" if r.choices else "")
             for n, r in pol.required_options.items()]
    rules += [f"`--{n}` is not allowed: {why}" for n, why in pol.forbidden_options.items()]
    if not pol.compute_internet:
        rules.append("Compute nodes have no internet: install everything from a login node.")
    if not pol.conda_allowed:
        rules.append("Conda is not allowed: hpcprov uses a virtualenv.")
    if site.python.backend == "conda":
        rules.append(_conda_rule(site.python))
    if pol.home_readonly_on_compute:
        rules.append("Home is read-only on compute nodes: write to scratch.")
    if pol.purge_days:
        rules.append(f"Scratch files unused for {pol.purge_days} days are deleted: keep "
                     "results elsewhere.")
    if pol.submit_from:
        rules.append(f"Submit jobs from `{pol.submit_from}`.")
    rules += pol.notes
    if rules:
        out += ["## Site rules", "", *[f"- {r}" for r in rules], ""]

    plan = build_plan(site)
    out += ["## 1. Install the environment", "",
            "One command does all of it, resumably:", "",
            *_block([join(["hpcprov", "setup", "--site", ref])]),
            "It runs these steps (print the whole script with `--dry-run`):", ""]
    out += [f"{i}. **{s.id}**: {s.title}" for i, s in enumerate(plan.steps, 1)] + [""]
    if site.horovod.source == "pip":
        step = next((s for s in plan.steps if s.id == "build-horovod"), None)
        if step:
            mods = load_lines(site.modules, site.modules.build)
            key = [ln.strip().rstrip(" \\") for ln in step.lines
                   if "pip" in ln and "printf" not in ln]
            out += ["Horovod is built against the site's modules (the essential lines; the "
                    "step also caches the wheel in the site's wheelhouse and applies the "
                    "patches listed in docs/compatibility.md):", "",
                    *_block([*mods, *key])]
    if site.python.backend != "container" and site.horovod.source != "none":
        out += ["Check the build; every entry hpcprov expects is marked:", "",
                *_block(["horovodrun -cb"]), *_block(render_check_build(site.horovod), "text")]
    from hpcprov.provision.compat import for_site

    for match in for_site(site):
        if match.rule.verdict in ("caveat", "patch"):
            label = "Note" if match.rule.verdict == "caveat" else "Patched by hpcprov"
            out += [f"> **{label}** ({match.rule.id}): {match.message()}", ""]

    out += ["## 2. Run interactively", ""]
    req = _example_request(site, pname)
    native = site.python.backend != "container"
    activation = [f"source {quote(lay.activate_file)}"] if native else []
    if allocate_argv(req):
        out += ["Ask for nodes, then start the ranks from inside the allocation:", "",
                *_block([join(allocate_argv(req))])]
    runtime_mods = load_lines(site.modules_for(pname), site.modules_for(pname).runtime)
    runtime_mods += [*activation, *env_lines(req)]
    launches = []
    for name, launcher in site.launchers.items():
        r = _example_request(site, pname, name)
        try:
            launch = build_launch(r, "allocation")
        except HpcprovError as exc:
            launches.append(f"# {name}: {exc}")
            continue
        note = " (one torchrun per node)" if launcher.kind == LauncherKind.torchrun else ""
        launches += [f"# {name}{note}", *launch.setup, launch.line]
    out += _block([*runtime_mods, *launches])

    command = join(["hpcprov", "jobscript", "--site", ref, "--nodes", str(req.nodes),
                    "--gpus-per-node", str(req.gpus),
                    *(f"--option={n}={v}" for n, v in req.options.items()),
                    "--", "python", "train_hvd.py"])
    out += ["## 3. Submit a batch job", "", f"`{command}` writes:", ""]
    try:
        out += _block(build_jobscript(req).rstrip("\n").splitlines())
    except HpcprovError as exc:
        out += [f"(cannot generate the example: {exc})", ""]
    out += _block([join(submit_argv(req, "train_hvd.sh")), schedulers.of(site).monitor])
    if site.containers.images:
        out += ["## 4. Containers", "",
                f"Runtime: {site.containers.runtime}. Images:", "",
                *[f"- `{n}`: `{p}`" for n, p in site.containers.images.items()], ""]
    for section, text in site.guide.items():
        out += [f"## {section}", "", text, ""]
    return "\n".join(out).rstrip() + "\n"


def _conda_rule(python: Any) -> str:
    """The guide's line on conda's channels and Anaconda's Terms of Service."""
    channels = ", ".join(f"`{c}`" for c in python.conda.channels) or "the installer's own"
    tos = tos_channels(python)
    terms = (f"the profile accepts Anaconda's Terms of Service for {', '.join(tos)} "
             "(`python.conda.accept_tos`)" if tos else "none needs Anaconda's Terms of "
             "Service (conda's defaults would: a non-interactive `conda create` stops with "
             "CondaToSNonInteractiveError until they are accepted)")
    return f"Conda installs from {channels} only; {terms}."

