"""The site walkthrough a seed tutorial gives a new user, generated from the profile.

Its Markdown is the template guide.md.in (its sections, filled in by :func:`_section`); the
code here computes the values."""

from __future__ import annotations

import functools
import re
import string
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hpcprov import schedulers
from hpcprov.core.errors import HpcprovError
from hpcprov.core.shell import join
from hpcprov.jobs.api import plan_jobscript, plan_launch
from hpcprov.jobs.jobscript import allocate_argv, software_lines, submit_argv
from hpcprov.jobs.launchers import env_lines
from hpcprov.jobs.modules import load_lines
from hpcprov.request.job import JobRequest
from hpcprov.site.conda_channels import tos_channels
from hpcprov.site.launcher_kinds import kind_of

if TYPE_CHECKING:
    from hpcprov.site.types import Site


TEMPLATE = Path(__file__).with_name("guide.md.in")
_SECTION = re.compile(r"^<!-- section ([a-z-]+) -->$")
_WHOLE_LINE = re.compile(r"^\$\{([A-Za-z_][A-Za-z0-9_]*)\}$")


@functools.cache
def _sections() -> dict[str, tuple[str, ...]]:
    """The template's sections, name -> lines, each ending with one blank line."""
    out: dict[str, list[str]] = {}
    name = None
    for line in TEMPLATE.read_text(encoding="utf-8").splitlines():
        found = _SECTION.match(line)
        if found:
            name = found.group(1)
            out[name] = []
        elif name is not None:
            out[name].append(line)
    for lines in out.values():
        while lines and not lines[-1]:
            lines.pop()
        lines.append("")
    return {name: tuple(lines) for name, lines in out.items()}


def _section(name: str, **values: str | list[str]) -> list[str]:
    """The lines of the template's section ``name``: a line that is only ``${key}`` takes
    the lines of ``values[key]`` (a text is one line, a list any number), ``${key}`` within
    a line takes its text (string.Template); values are never read as template text."""
    out: list[str] = []
    for line in _sections()[name]:
        whole = _WHOLE_LINE.match(line)
        if whole:
            value = values[whole.group(1)]
            out += [value] if isinstance(value, str) else value
        else:
            out.append(string.Template(line).substitute(values))
    return out


def _example_request(site: Site, partition: str | None, launcher: str | None = None,
                     command: tuple[str, ...] = ("python", "train_hvd.py")) -> JobRequest:
    pname, part = site.partition(partition)
    gpus = part.gpus.count
    nodes = min(2, part.nodes or 2)  # an unknown count: the two nodes of the example
    options: dict[str, str | None] = {n: (r.default or r.example or "VALUE")
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
    rows = []
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
        rows.append(f"| {name}{' (default)' if p.default else ''} | "
                    f"{p.nodes if p.nodes is not None else 'unknown'} | {cores} | {memory} | "
                    f"{p.gpus.count} | {gpu} | {p.arch} | {limits or '-'} |")
    pol = site.policies
    backend = schedulers.of(site)

    def spell(name: str) -> str:  # -A (account) on PBS, --account on Slurm, its declared flag
        return backend.spell(site, name)

    rules = [f"`{spell(n)}` is mandatory" + (f" ({r.reason})" if r.reason else "")
             + (f"; accepted: {', '.join(r.choices)}" if r.choices else "")
             for n, r in pol.required_options.items()]
    rules += [f"`{spell(n)}` is not allowed: {why}" for n, why in pol.forbidden_options.items()]
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
    from hpcprov.jobs.lint import device_rules

    rules += device_rules(site, pname)  # the device-0 rule site check and jobscript print
    rules += pol.notes

    plan = build_plan(site)
    horovod_build: list[str] = []
    if site.horovod.source == "pip":
        step = next((s for s in plan.steps if s.id == "build-horovod"), None)
        if step:
            mods = load_lines(site.modules, site.modules.build)
            key = [ln.strip().rstrip(" \\") for ln in step.lines
                   if "pip" in ln and "printf" not in ln]
            horovod_build = _section("horovod-build", lines=[*mods, *key])
    check_build: list[str] = []
    if site.python.backend != "container" and site.horovod.source != "none":
        check_build = _section("check-build", expected=render_check_build(site.horovod))
    from hpcprov.provision.compat import for_site

    notes: list[str] = []
    for match in for_site(site):
        if match.rule.verdict in ("caveat", "patch"):
            label = "Note" if match.rule.verdict == "caveat" else "Patched by hpcprov"
            notes += _section("compat-note", label=label, rule=match.rule.id,
                              message=match.message())

    req = _example_request(site, pname)
    refused = _refusal(req)  # the guide shows no command the CLI refuses
    allocate = (_section("allocate", command=join(allocate_argv(req)))
                if allocate_argv(req) and not refused else [])
    # what a batch job loads first, the modules, the environment and the variables, typed
    # once; a launcher that loads otherwise (its own modules, a container's) says its own
    common = [*software_lines(req), *env_lines(req)]
    launches = []
    for name, launcher in site.launchers.items():
        r = _example_request(site, pname, name)
        try:
            launch = plan_launch(r)  # linted as a line typed inside the allocation
        except HpcprovError as exc:
            launches.append(f"# {name}: hpcprov launch refuses it: "
                            + str(exc).replace("\n", "; "))
            continue
        note = f" (one {launcher.kind.value} per node)" if kind_of(launcher.kind).per_node else ""
        own = [*launch.software, *launch.env]
        launches += [f"# {name}{note}", *(own if own != common else []), *launch.typed]

    command = join(["hpcprov", "jobscript", "--site", ref, "--nodes", str(req.nodes),
                    "--gpus-per-node", str(req.gpus),
                    *(f"--option={n}={v}" for n, v in req.options.items()),
                    "--", "python", "train_hvd.py"])
    try:
        jobscript = _section("jobscript", script=plan_jobscript(req).script.rstrip(
            "\n").splitlines())  # linted as `hpcprov jobscript` lints it
    except HpcprovError as exc:
        jobscript = _section("jobscript-error", error=str(exc).replace("\n", "; "))
    # (runtime unset: setup's and the jobs' tool is then singularity, and the guide says so)
    containers = _section("containers", runtime=site.containers.runtime or "singularity",
                          images=[
        f"- `{n}`: `{p}`" for n, p in site.containers.images.items()]) \
        if site.containers.images else []
    out = _section(
        "guide", site=site.name, description=site.description or "",
        scheduler=schedulers.of(site).name, partitions=rows,
        site_rules=_section("site-rules", rules=[f"- {r}" for r in rules]) if rules else [],
        setup=join(["hpcprov", "setup", "--site", ref]),
        steps=[f"{i}. **{s.id}**: {s.title}" for i, s in enumerate(plan.steps, 1)],
        horovod_build=horovod_build, check_build=check_build, compat_notes=notes,
        allocate=allocate, interactive=[*common, *launches] if not refused else [
            f"# hpcprov launch refuses this job: {refused}"],
        jobscript_command=command, jobscript=jobscript,
        submit=[join(submit_argv(req, "train_hvd.sh")), schedulers.of(site).monitor],
        containers=containers,
        site_sections=[ln for section, text in site.guide.items()
                       for ln in _section("site-section", title=section, text=text)])
    return "\n".join(out).rstrip() + "\n"


def _refusal(req: JobRequest) -> str | None:
    """Why the CLI refuses the guide's example job (jobscript's lint), one line; None: it
    does not."""
    from hpcprov.jobs.lint import check

    try:
        check(req)
    except HpcprovError as exc:
        return str(exc).replace("\n", "; ")
    return None


def _conda_rule(python: Any) -> str:
    """The guide's line on conda's channels and Anaconda's Terms of Service."""
    channels = ", ".join(f"`{c}`" for c in python.conda.channels) or "the installer's own"
    tos = tos_channels(python)
    terms = (f"the profile accepts Anaconda's Terms of Service for {', '.join(tos)} "
             "(`python.conda.accept_tos`)" if tos else "none needs Anaconda's Terms of "
             "Service (conda's defaults would: a non-interactive `conda create` stops with "
             "CondaToSNonInteractiveError until they are accepted)")
    return f"Conda installs from {channels} only; {terms}."

