"""Slurm's drafting part for `hpcprov site draft`: the commands it asks, pure parsers of
their text, :func:`discover`, which runs them through the draft's recorder, and
``DRAFTING``, which also says what a drafted profile writes for Slurm (the backend,
:mod:`hpcprov.schedulers.slurm`, loads it for a draft)."""

from __future__ import annotations

import re

import hostlist

from hpcprov.core.text import ascii_int
from hpcprov.core.yaml_writer import Block, plain
from hpcprov.schedulers.facts import (
    Cluster,
    Drafting,
    Node,
    Queue,
    Run,
    as_int,
    optional,
    required,
    walltime_text,
)

# Pure parsers of the commands' text, and discover(), which runs them through the draft's
# recording runner (hpcprov.draft.run). Every command only reads.


SINFO = ["sinfo", "-h", "-o", "%P|%a|%D|%t"]
PARTITIONS = ["scontrol", "show", "partition", "-o"]
NODES = ["scontrol", "show", "node", "-o"]
CONFIG = ["scontrol", "show", "config"]
VERSION = ["scontrol", "--version"]
QOS = ["sacctmgr", "-n", "-P", "show", "qos", "format=Name,MaxWall,MaxJobsPU,MaxTRESPU"]
MPI_LIST = ["srun", "--mpi=list"]
_KEY = re.compile(r"(?:^|\s)([A-Za-z][A-Za-z0-9_:/.]*)=")
# the most node names one partition's host list may expand to (python-hostlist's own bound
# on one range); a larger list is noted on the partition, not expanded
MAX_HOSTS = 100_000
# a host list's pieces: a bracket group, a run of name characters, a comma, a stray bracket
_HOST_TOKEN = re.compile(r"\[[^\[\]]*\]|[^,\[\]]+|[,\[\]]")
_HOST_RANGE = re.compile(r"([0-9]{1,15})(?:-([0-9]{1,15}))?")


def parse_record(line: str) -> dict[str, str]:
    """One ``scontrol show ... -o`` record: ``Key=value`` pairs, where a value runs up to
    the next `` Key=`` (values such as ``OS=Linux 6.1.0 #1 SMP`` hold spaces)."""
    marks = list(_KEY.finditer(line))
    out: dict[str, str] = {}
    for i, m in enumerate(marks):
        end = marks[i + 1].start() if i + 1 < len(marks) else len(line)
        out.setdefault(m.group(1), line[m.end():end].strip())
    return out


def parse_records(text: str, first: str) -> list[dict[str, str]]:
    """The records of ``scontrol show node|partition -o``: one per line that starts with
    ``first=``; a line that does not (a name holding a newline) continues the last one."""
    records: list[list[str]] = []
    for line in text.splitlines():
        if line.startswith(f"{first}=") or not records:
            records.append([line])
        else:
            records[-1].append(line)
    return [rec for rec in map(parse_record, map("\n".join, records)) if rec.get(first)]


def parse_gres(text: str) -> tuple[int, str | None]:
    """GPUs in a node's ``Gres=`` (``gpu:a100:8(S:0-1),mps:100``): the count and the type
    label (None when untyped or when several types are mixed)."""
    count, types = 0, set()
    # the items between commas outside parentheses (gpu:a100:8(S:0-1),mps:100)
    for item in re.findall(r"(?:[^,()]|\([^()]*\))+", text or ""):
        parts = re.sub(r"\(.*\)$", "", item.strip()).split(":")
        number = ascii_int(parts[-1])
        if parts[0] != "gpu" or len(parts) < 2 or number is None:
            continue
        count += number
        types.add(":".join(parts[1:-1]) or None)
    label = types.pop() if len(types) == 1 else None
    return count, label


def parse_nodes(text: str) -> dict[str, Node]:
    """``scontrol show node -o``: each node's CPUs, cores, memory, GPUs, arch, partitions."""
    out: dict[str, Node] = {}
    for rec in parse_records(text, "NodeName"):
        sockets, per = as_int(rec.get("Sockets")), as_int(rec.get("CoresPerSocket"))
        boards = as_int(rec.get("Boards")) or 1
        gpus, label = parse_gres(rec.get("Gres", ""))
        features = rec.get("AvailableFeatures", "")
        out[rec["NodeName"]] = Node(
            name=rec["NodeName"], cpus=as_int(rec.get("CPUTot")),
            cores=sockets * per * boards if sockets and per else None,
            threads_per_core=as_int(rec.get("ThreadsPerCore")),
            memory_mb=as_int(rec.get("RealMemory")), gpus=gpus, gpu_type=label,
            arch=rec.get("Arch") or None,
            features=tuple(f for f in features.split(",") if f and f != "(null)"),
            state=rec.get("State", ""),
            queues=tuple(p for p in rec.get("Partitions", "").split(",") if p))
    return out


def _ranges(text: str, limit: int) -> int | None:
    """How many numbers a bracket's ranges (``01-04,7``) name (more than ``limit``: some
    number past it); None where one is not a range of ASCII numbers."""
    count = 0
    for item in text.split(","):
        m = _HOST_RANGE.fullmatch(item)
        if not m:
            return None
        low, high = int(m.group(1)), int(m.group(2) or m.group(1))
        if high < low:
            return None
        count += high - low + 1
        if count > limit:
            break
    return count


def hostlist_size(text: str, limit: int = MAX_HOSTS) -> int | None:
    """How many names the host list ``text`` (``gpu[01-04,7],cpu1``) names, counted without
    expanding it (more than ``limit``: some number past it); None where it is not a host
    list (an unclosed or nested bracket, a bad range)."""
    total, size, named = 0, 1, False
    for token in [*_HOST_TOKEN.findall(text), ","]:
        if token == ",":
            total, size, named = total + (size if named else 0), 1, False
        elif token in ("[", "]"):
            return None
        elif token.startswith("["):
            count = _ranges(token[1:-1], limit)
            if count is None:
                return None
            size, named = size * count, True
        else:
            named = True
        if total > limit or size > limit:
            return limit + 1
    return total


def expand_nodes(text: str, limit: int = MAX_HOSTS) -> tuple[list[str], str | None]:
    """A partition's ``Nodes=`` as names, or no names and why (a list that is not one, or
    that names more than ``limit`` nodes)."""
    if not text or text == "(null)":
        return [], None
    shown = text if len(text) <= 60 else text[:57] + "..."
    size = hostlist_size(text, limit)
    if size is not None and size > limit:
        return [], (f"its node list {shown} names more than {limit} nodes: not expanded, "
                    f"no node facts ({' '.join(PARTITIONS)})")
    try:
        if size is not None:
            return hostlist.expand_hostlist(text), None
    except (hostlist.BadHostlist, ValueError):
        pass
    return [], (f"its node list {shown} is not a host list (an unclosed bracket or a bad "
                f"range?): no node facts ({' '.join(PARTITIONS)})")


def parse_partitions(text: str) -> list[Queue]:
    """``scontrol show partition -o``: name, nodes, default, limits, QOS, state; a node
    list that cannot be read or is too large is a note on its partition."""
    out = []
    for rec in parse_records(text, "PartitionName"):
        nodes, problem = expand_nodes(rec.get("Nodes", ""))
        qos = rec.get("QoS", "N/A")
        out.append(Queue(
            name=rec["PartitionName"], nodes=nodes, notes=[problem] if problem else [],
            total_nodes=as_int(rec.get("TotalNodes")), default=rec.get("Default") == "YES",
            state=rec.get("State", ""), max_time=walltime_text(rec.get("MaxTime")),
            default_time=walltime_text(rec.get("DefaultTime")),
            max_nodes=as_int(rec.get("MaxNodes")), qos=None if qos == "N/A" else qos,
            sources={k: " ".join(PARTITIONS) for k in ("nodes", "max_time", "default_time",
                                                         "max_nodes", "default")}))
    return out


def parse_sinfo(text: str) -> dict[str, tuple[bool, dict[str, int]]]:
    """``sinfo -h -o '%P|%a|%D|%t'``: partition -> (default, {state: node count})."""
    out: dict[str, tuple[bool, dict[str, int]]] = {}
    for line in text.splitlines():
        parts = line.rsplit("|", 3)
        count = ascii_int(parts[2]) if len(parts) == 4 else None
        if count is None:
            continue
        name, default = parts[0].removesuffix("*"), parts[0].endswith("*")
        was_default, states = out.get(name, (False, {}))
        states[parts[3]] = states.get(parts[3], 0) + count
        out[name] = (was_default or default, states)
    return out


def parse_qos(text: str) -> dict[str, dict[str, int | str | None]]:
    """``sacctmgr -n -P show qos format=Name,MaxWall,MaxJobsPU,MaxTRESPU``: per QOS the
    wall limit, jobs per user and GPUs per user (``gres/gpu=N`` in MaxTRESPU)."""
    out: dict[str, dict[str, int | str | None]] = {}
    for line in text.splitlines():
        parts = line.split("|")
        if len(parts) < 4 or not parts[0]:
            continue
        gpus = re.search(r"gres/gpu(?::[^=,]+)?=([^,]*)", parts[3])
        out[parts[0]] = {"max_time": walltime_text(parts[1]) if parts[1] else None,
                         "max_jobs_per_user": as_int(parts[2]),
                         "max_gpus_per_user": as_int(gpus.group(1)) if gpus else None}
    return out


def parse_config(text: str) -> dict[str, str]:
    """``scontrol show config``: ``Key = value`` lines (ClusterName, MpiDefault, ...)."""
    out = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and key.strip() and " " not in key.strip():
            out[key.strip()] = value.strip()
    return out


def parse_mpi_list(text: str) -> list[str]:
    """``srun --mpi=list``: the MPI plugin types (``pmix``, ``pmi2``, ``none`` ...), in the
    formats of Slurm 20.11-23.x (a list under a heading, or ``srun: pmix`` lines)."""
    names = []
    for line in text.splitlines():
        word = line.strip().removeprefix("srun:").strip()
        if re.fullmatch(r"[a-z][a-z0-9_]*", word) and word not in ("mpi", "types"):
            names.append(word)
    return names


def parse_version(text: str) -> str | None:
    """``scontrol --version`` (``slurm 22.05.8``): the version."""
    m = re.search(r"(\d+\.\d+[\w.-]*)", text)
    return m.group(1) if m else None


def _apply_qos(queues: list[Queue], qos: dict[str, dict[str, int | str | None]]) -> None:
    """A partition's QOS limits (jobs, GPUs per user; wall time where the partition has
    none) onto the partition."""
    for q in queues:
        limits = qos.get(q.qos or "")
        if not limits:
            continue
        where = f"{' '.join(QOS)} (QOS {q.qos})"
        for key in ("max_jobs_per_user", "max_gpus_per_user", "max_time"):
            if limits.get(key) is not None and getattr(q, key) is None:
                setattr(q, key, limits[key])
                q.sources[key] = where


def _apply_sinfo(queues: list[Queue], info: dict[str, tuple[bool, dict[str, int]]]) -> None:
    """sinfo's default mark and node states onto the partitions."""
    for q in queues:
        default, states = info.get(q.name, (False, {}))
        q.default = q.default or default
        if states:
            q.notes.append("nodes now: " + ", ".join(f"{n} {s}" for s, n in sorted(
                states.items())) + f" ({' '.join(SINFO)})")


def discover(run: Run) -> Cluster:
    """Partitions, nodes, QOS limits, version and settings of the Slurm cluster ``run``
    reaches (the partitions and nodes are required; the rest is noted when it fails)."""
    notes: list[str] = []
    queues = parse_partitions(required(run, PARTITIONS))
    nodes = parse_nodes(required(run, NODES))
    sinfo = optional(run, SINFO, notes)
    if sinfo is not None:
        _apply_sinfo(queues, parse_sinfo(sinfo))
    if any(q.qos for q in queues):
        qos = optional(run, QOS, notes)
        if qos is not None:
            _apply_qos(queues, parse_qos(qos))
    version = optional(run, VERSION, notes)
    config = parse_config(optional(run, CONFIG, notes) or "")
    plugins = optional(run, MPI_LIST, notes)
    return Cluster(
        scheduler="slurm", version=parse_version(version or ""),
        name=config.get("ClusterName"), queues=queues, nodes=nodes,
        settings={k: config[k] for k in ("MpiDefault", "JobSubmitPlugins", "ClusterName")
                  if k in config},
        mpi_plugins=parse_mpi_list(plugins or ""), notes=notes,
        sources={"version": " ".join(VERSION), "name": " ".join(CONFIG),
                 "settings": " ".join(CONFIG), "mpi_plugins": " ".join(MPI_LIST),
                 "nodes": " ".join(NODES), "queues": " ".join(PARTITIONS)})


class SlurmDrafting(Drafting):
    def discover(self, run: Run) -> Cluster:
        return discover(run)

    def launchers(self, cluster: Cluster) -> tuple[Block, str]:
        """srun (with PMIx where Slurm has it but does not default to it), torchrun started
        on each node by srun, mpirun and horovodrun; srun the default."""
        b = Block()
        srun = Block()
        srun.add("kind", "srun")
        default_mpi = cluster.settings.get("MpiDefault", "")
        if "pmix" in cluster.mpi_plugins and not default_mpi.startswith("pmix"):
            srun.add("mpi", "pmix", f"srun --mpi=list offers pmix; MpiDefault="
                     f"{default_mpi or '?'} (scontrol show config)")
        srun.add("rendezvous_env", True, "MASTER_ADDR/MASTER_PORT for torch.distributed")
        b.add("srun", srun)
        b.add("torchrun", plain(kind="torchrun", rdzv_host="first_node"))
        b.add("mpirun", plain(kind="mpirun", rendezvous_env=True))
        b.add("horovodrun", plain(kind="horovodrun"))
        return b, "srun"

    def section(self, cluster: Cluster, gpus: bool) -> Block:
        """The slurm section: its version (srun's CPU inheritance depends on it), GPUs as
        gres."""
        b = Block()
        if cluster.version:
            b.add("version", cluster.version, cluster.sources.get("version", ""))
        if gpus:
            b.add("gpu_request", "gres", "GPUs are gres on the nodes (scontrol show node -o)")
        return b

    def option_hints(self, cluster: Cluster) -> list[str]:
        """The job_submit plugins Slurm runs, which can refuse jobs."""
        submit = cluster.settings.get("JobSubmitPlugins", "")
        if not submit or submit == "(null)":
            return []
        return [f"Slurm runs job_submit plugin(s) {submit} here (scontrol show config): they "
                "can refuse jobs that lack an option."]


DRAFTING = SlurmDrafting()
