"""What a draft knows, summarized per partition: pure planning, no commands run.

:class:`Findings` is everything one run of `hpcprov site draft` learned (made by
:mod:`hpcprov.draft.run`); :func:`summarize` turns the scheduler's queues and nodes into one
:class:`PartSummary` per partition: the values a profile holds, each with the command it
came from. :mod:`hpcprov.draft.profile` writes the profile from them, :mod:`hpcprov.draft.diff`
compares them with an existing profile.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TypeVar

from hpcprov.core import text as text_rules
from hpcprov.draft.modules import Module, ModulePlan
from hpcprov.schedulers.facts import Cluster, LocalGpus, Node, Queue, Ran

NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+-]*$")  # hpcprov.site.model's Name
_ARCH = {"x86_64": "x86_64", "amd64": "x86_64", "aarch64": "aarch64", "arm64": "aarch64",
         "ppc64le": "ppc64le"}


@dataclass
class Findings:
    """Everything one draft run learned, and every command it ran."""

    cluster: Cluster
    modules: ModulePlan | None = None
    listing: list[Module] = field(default_factory=list)  # avail + spider, for --diff
    gpus: LocalGpus = field(default_factory=LocalGpus)
    host: str = "localhost"
    interfaces: list[str] = field(default_factory=list)
    scratch: str | None = None   # $SCRATCH in the login environment
    when: str = ""
    ran: list[Ran] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    # other schedulers' commands on PATH beside the one the draft chose itself (one line, or "")
    also_on_path: str = ""


@dataclass
class PartSummary:
    """One partition as a profile describes it; ``sources`` names each value's command."""

    name: str
    nodes: int
    hosts: str = ""
    cores: int | None = None
    cpus: int | None = None
    threads_per_core: int = 1
    memory_gb: float | None = None
    gpus: int = 0
    gpu_type: str | None = None
    gpu_model: str | None = None
    gpu_vendor: str | None = None
    arch: str | None = None
    max_walltime: str | None = None
    default_walltime: str | None = None
    max_nodes: int | None = None
    max_jobs_per_user: int | None = None
    max_gpus_per_user: int | None = None
    default: bool = False
    features: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    sources: dict[str, str] = field(default_factory=dict)


def hostlist_text(names: list[str]) -> str:
    """Node names as a Slurm host list (gpu[01-02])."""
    import hostlist

    try:
        return str(hostlist.collect_hostlist(names))
    except Exception:  # odd names: list them as they are
        return ",".join(names)


def printable(text: str) -> str:
    """Text from the cluster with control characters shown as ``?`` (a profile refuses
    them outside free text, and its cache refuses them everywhere)."""
    return text_rules.printable(text)


def _label(text: str | None) -> str | None:
    """A GPU type or model from the cluster, or None when it holds control characters or
    spaces (no valid request could name it)."""
    return text if text and not text_rules.has_control(text) and " " not in text.strip() else None


T = TypeVar("T")


def _common(values: list[T]) -> T | None:
    """The value every node shares, else None."""
    return values[0] if values and all(v == values[0] for v in values) else None


def _least(values: list[int | None]) -> int | None:
    """The smallest known value (what a job can count on on every node)."""
    known = [v for v in values if v is not None]
    return min(known) if known else None


def _differ(name: str, values: list[str]) -> str | None:
    """A note when the nodes differ in one value (the draft takes the least)."""
    shown = sorted({str(v) for v in values})
    if len(shown) < 2:
        return None
    return f"nodes differ in {name} ({', '.join(shown)}): the least is written"


def _hardware(s: PartSummary, members: list[Node], source: str) -> None:
    """Cores, CPUs, memory, GPUs and arch: the least over the partition's nodes."""
    s.cores = _least([m.cores if m.cores is not None else m.cpus for m in members])
    s.cpus = _least([m.cpus for m in members])
    s.threads_per_core = _least([m.threads_per_core for m in members]) or 1
    mem = _least([m.memory_mb for m in members])
    s.memory_gb = round(mem / 1024, 1) if mem else None
    s.gpus = _least([m.gpus for m in members]) or 0
    s.gpu_type = _label(_common([m.gpu_type for m in members]))
    model = _common([m.gpu_model for m in members])
    s.gpu_model = printable(str(model)) if model else None
    arch = _common([m.arch for m in members])
    s.arch = _ARCH.get(str(arch).lower()) if arch else None
    s.features = sorted(printable(f) for f in set.intersection(*(set(m.features)
                                                                 for m in members)))
    for what, vals in (("cores", [str(m.cores) for m in members]),
                       ("memory", [f"{m.memory_mb} MB" for m in members]),
                       ("GPUs", [f"{m.gpus}x {m.gpu_type or 'gpu'}" for m in members])):
        note = _differ(what, vals)
        if note:
            s.notes.append(note)
    for key in ("cores", "threads_per_core", "memory_gb", "gpus", "gpu_type", "gpu_model",
                "arch"):
        s.sources[key] = source


def _limits(s: PartSummary, q: Queue) -> None:
    """The queue's limits onto the summary, with their commands."""
    s.max_walltime, s.default_walltime = q.max_time, q.default_time
    s.max_nodes, s.default = q.max_nodes, q.default
    s.max_jobs_per_user, s.max_gpus_per_user = q.max_jobs_per_user, q.max_gpus_per_user
    for ours, theirs in (("max_walltime", "max_time"), ("default_walltime", "default_time"),
                         ("max_nodes", "max_nodes"), ("default", "default"),
                         ("max_jobs_per_user", "max_jobs_per_user"),
                         ("max_gpus_per_user", "max_gpus_per_user"), ("nodes", "nodes")):
        if theirs in q.sources:
            s.sources[ours] = q.sources[theirs]


def _local_model(s: PartSummary, members: list[Node], gpus: LocalGpus, host: str) -> None:
    """The GPU model from nvidia-smi/rocm-smi on this host, where the host is one of the
    partition's nodes or the partition's GPU type label is part of the model's name."""
    if s.gpu_model or not s.gpus or len(set(gpus.models)) != 1:
        return
    model = printable(gpus.models[0])
    short = host.split(".", 1)[0]
    squash = re.sub(r"[^a-z0-9]", "", model.lower())
    label = re.sub(r"[^a-z0-9]", "", (s.gpu_type or "").lower())
    if any(m.name == short for m in members):
        s.gpu_model, s.sources["gpu_model"] = model, f"{gpus.command} on this node"
    elif label and label in squash:
        s.gpu_model = model
        s.sources["gpu_model"] = f"{gpus.command} on this host (its GPUs' name holds the " \
                                 f"partition's GPU type {s.gpu_type})"
    else:
        return
    if gpus.vendor:
        s.gpu_vendor, s.sources["gpu_vendor"] = gpus.vendor, s.sources["gpu_model"]


def summarize(cluster: Cluster, gpus: LocalGpus | None = None,
              host: str = "localhost") -> tuple[dict[str, PartSummary], list[str]]:
    """Each usable partition's summary, and notes on the partitions left out (no nodes,
    or a name a profile cannot hold)."""
    out: dict[str, PartSummary] = {}
    skipped: list[str] = []
    source = cluster.sources.get("nodes", "")
    for q in cluster.queues:
        members = [cluster.nodes[n] for n in q.nodes if n in cluster.nodes]
        count = q.total_nodes or len(members)
        if not NAME_RE.match(q.name) or len(q.name) > 64:
            skipped.append(f'partition "{q.name}" left out: a profile\'s partition names are '
                           "letters, digits and _.+- (rename it or ask the admins)")
            continue
        if not count:
            skipped.append(f"partition {q.name} left out: it has no nodes now "
                           f"({cluster.sources.get('queues', '')})")
            continue
        s = PartSummary(q.name, count, printable(hostlist_text(q.nodes)),
                        notes=[printable(n) for n in q.notes])
        s.sources["nodes"] = cluster.sources.get("queues", "")
        if members:
            _hardware(s, members, source)
        _limits(s, q)
        _local_model(s, members, gpus or LocalGpus(), host)
        out[q.name] = s
    return out, skipped


def login_patterns(fqdn: str) -> list[str]:
    """fnmatch patterns for the login hosts, from this host's name: the digits at the end
    of the short name become ``*`` (login3.cluster.org -> login*.cluster.org)."""
    clean = re.sub(r"[^A-Za-z0-9.-]", "?", fqdn.strip().lower().rstrip("."))
    short, _, domain = clean.partition(".")
    stem = re.sub(r"\d+$", "", short)
    name = f"{stem}*" if stem and stem != short else short
    return [f"{name}.{domain}" if domain else name] if name else []


def site_name(findings: Findings, given: str | None = None) -> str:
    """The profile's name: given, else the cluster's, else from the host's domain or name;
    made to fit a profile name (letters, digits, _.+-)."""
    host = findings.host.lower()
    guess = given or findings.cluster.name or (host.split(".")[1] if host.count(".") >= 2
                                               else re.sub(r"\d+$", "", host.split(".")[0]))
    name = re.sub(r"[^A-Za-z0-9_.+-]", "-", guess).strip("-_.+")[:64]
    return name if name and NAME_RE.match(name) else "site"
