"""`hpcprov site draft --diff PROFILE`: an existing profile against what the cluster says
now (after maintenance: a partition gone or new, other nodes or GPUs, module versions
changed). Pure: it reads a validated site and a draft's findings.

Only what the cluster reports is compared (a limit the scheduler does not show is never a
difference); memory within 5% is the same (MB and GiB roundings), GPU models match when
one name holds the other (``A100-SXM4-80GB`` in ``NVIDIA A100-SXM4-80GB``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from hpcprov.core.walltime import walltime_seconds
from hpcprov.draft.modules import Module, offered, same_family
from hpcprov.draft.plan import Findings, PartSummary, summarize

if TYPE_CHECKING:
    from hpcprov.site.types import Site

MEMORY_TOLERANCE = 0.05


@dataclass(frozen=True)
class Difference:
    """One thing the profile says otherwise than the cluster, and the command that said it."""

    path: str
    profile: str
    cluster: str
    source: str

    def text(self) -> str:
        return (f"{self.path}: the profile says {_show(self.profile)}, the cluster "
                f"{_show(self.cluster)} ({self.source})")

    def to_json(self) -> dict[str, str]:
        return {"path": self.path, "profile": self.profile, "cluster": self.cluster,
                "source": self.source}


def _show(value: str) -> str:
    """A value in a difference's sentence (an unset one as ``nothing``)."""
    return "nothing" if value == "None" else value


def _squash(text: str | None) -> str:
    return re.sub(r"[^a-z0-9]", "", (text or "").lower())


def _same_model(a: str | None, b: str | None) -> bool:
    """GPU model names that name the same GPU (one holds the other, case and punctuation
    aside)."""
    x, y = _squash(a), _squash(b)
    return x in y or y in x


def _same_time(a: str | None, b: str | None) -> bool:
    return walltime_seconds(a or "") == walltime_seconds(b or "")


def _hardware(part: Any, s: PartSummary) -> list[tuple[str, str, str, str]]:
    """(field, profile, cluster, source) for the partition's nodes, cores, memory, arch."""
    out = []
    if part.nodes != s.nodes:
        out.append(("nodes", str(part.nodes), str(s.nodes), s.sources.get("nodes", "")))
    if s.cores is not None and part.cores_per_node != s.cores:
        out.append(("cores_per_node", str(part.cores_per_node), str(s.cores),
                    s.sources.get("cores", "")))
    threads = getattr(part, "threads_per_core", 1)
    if s.cores is not None and s.sources.get("threads_per_core") and \
            threads != s.threads_per_core:
        out.append(("threads_per_core", str(threads), str(s.threads_per_core),
                    s.sources["threads_per_core"]))
    if s.memory_gb and part.memory_gb and \
            abs(part.memory_gb - s.memory_gb) > MEMORY_TOLERANCE * s.memory_gb:
        out.append(("memory_gb", str(part.memory_gb), str(s.memory_gb),
                    s.sources.get("memory_gb", "")))
    arch = getattr(part.arch, "value", part.arch)
    if s.arch and arch != s.arch:
        out.append(("arch", str(arch), s.arch, s.sources.get("arch", "")))
    return out


def _gpus(part: Any, s: PartSummary) -> list[tuple[str, str, str, str]]:
    """GPU count, type label and model, where the cluster says them."""
    g, src = part.gpus, s.sources.get("gpus", "")
    out = []
    if s.sources.get("gpus") and g.count != s.gpus:
        out.append(("gpus.count", str(g.count), str(s.gpus), src))
    if s.gpu_type and g.type and g.type != s.gpu_type:
        out.append(("gpus.type", g.type, s.gpu_type, src))
    elif s.gpu_type and not g.type and g.model and not _same_model(g.model, s.gpu_type):
        out.append(("gpus.model", g.model, f"GPU type {s.gpu_type}", src))
    if s.gpu_model and g.model and not _same_model(g.model, s.gpu_model):
        out.append(("gpus.model", g.model, s.gpu_model, s.sources.get("gpu_model", "")))
    return out


def _limits(part: Any, s: PartSummary) -> list[tuple[str, str, str, str]]:
    """Limits the scheduler reports, and which partition is the default."""
    lim, out = part.limits, []
    for key in ("max_walltime", "default_walltime"):
        ours, theirs = getattr(lim, key), getattr(s, key)
        if theirs is not None and not _same_time(ours, theirs):
            out.append((f"limits.{key}", str(ours), theirs, s.sources.get(key, "")))
    for key, attr in (("max_nodes_per_job", "max_nodes"),
                      ("max_jobs_per_user", "max_jobs_per_user"),
                      ("max_gpus_per_user", "max_gpus_per_user")):
        ours, theirs = getattr(lim, key), getattr(s, attr)
        if theirs is not None and ours != theirs:
            out.append((f"limits.{key}", str(ours), str(theirs), s.sources.get(attr, "")))
    if "default" in s.sources and bool(part.default) != s.default:
        out.append(("default", str(bool(part.default)).lower(), str(s.default).lower(),
                    s.sources["default"]))
    return out


def partitions(site: Site, summaries: dict[str, PartSummary]) -> list[Difference]:
    """Partitions gone, new, or changed."""
    out = []
    for name, part in site.partitions.items():
        s = summaries.get(name)
        if s is None:
            out.append(Difference(f"partitions.{name}", "it exists", "has no such partition "
                                  "(or it has no nodes)", "the scheduler's partitions"))
            continue
        for key, ours, theirs, src in [*_hardware(part, s), *_gpus(part, s),
                                       *_limits(part, s)]:
            out.append(Difference(f"partitions.{name}.{key}", ours, theirs, src))
    for name, s in summaries.items():
        if name not in site.partitions:
            gpus = f", {s.gpus} GPUs ({s.gpu_type or s.gpu_model or 'type unknown'})" \
                if s.gpus else ""
            out.append(Difference(f"partitions.{name}", "nothing (no such partition)",
                                  f"{s.nodes} nodes of {s.cores} cores{gpus}",
                                  s.sources.get("nodes", "")))
    return out


def _module_sets(site: Site) -> dict[str, list[str]]:
    """Every module a profile loads, by where it is named."""
    out: dict[str, list[str]] = {}
    sets = [("modules", site.modules)]
    sets += [(f"partitions.{n}.modules", p.modules) for n, p in site.partitions.items()
             if p.modules is not None]
    for where, mods in sets:
        if getattr(mods.system, "value", mods.system) == "none":
            continue
        for which in ("build", "runtime"):
            for name in getattr(mods, which).load:
                out.setdefault(name, []).append(f"{where}.{which}.load")
    return out


def modules(site: Site, listing: list[Module]) -> list[Difference]:
    """Modules the profile loads that this host's module system no longer offers."""
    out = []
    for name, where in _module_sets(site).items():
        if offered(name, listing):
            continue
        now = same_family(name, listing)
        out.append(Difference(", ".join(where), name, "offers " + (", ".join(now) if now
                              else f"no {name.split('/')[0]} module"),
                              "module -t avail / module -t spider"))
    return out


def compare(site: Site, findings: Findings) -> list[Difference]:
    """Every difference between a validated site (model or view) and the cluster now."""
    sched = getattr(site.scheduler, "value", site.scheduler)
    if sched != findings.cluster.scheduler:
        return [Difference("scheduler", str(sched), findings.cluster.scheduler,
                           "the commands on PATH")]
    summaries, _ = summarize(findings.cluster, findings.gpus, findings.host)
    out = partitions(site, summaries)
    if findings.listing:
        out += modules(site, findings.listing)
    return out
