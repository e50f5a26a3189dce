"""LSF's drafting part for `hpcprov site draft`: the commands it asks, pure parsers of
their text, :func:`discover`, which runs them through the draft's recorder, and
``DRAFTING``, which also says what a drafted profile writes for LSF (the backend,
:mod:`hpcprov.schedulers.lsf`, loads it for a draft)."""

from __future__ import annotations

import re

from hpcprov.core.text import ascii_decimal, ascii_int
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
    text_blocks,
    walltime_text,
)

# Pure parsers of `bqueues -l` and `bhosts -l` (and `bhosts -l -gpu`, LSF 10.1), and
# discover(), which runs them through the draft's recording runner. Every command only reads.


QUEUES_CMD = ["bqueues", "-l"]
HOSTS_CMD = ["bhosts", "-l"]
GPUS_CMD = ["bhosts", "-l", "-gpu"]
_BLOCK_QUEUE = re.compile(r"^QUEUE:\s*(\S+)")
_BLOCK_HOST = re.compile(r"^HOST:?\s+(\S+)\s*$")


_MINUTES = re.compile(r"\s*(\S+?)\s*min.*", re.DOTALL)


class _Unreadable(ValueError):
    """A RUNLIMIT value that is not ``N min`` (``1.2.3 min``)."""


def _minutes(text: str) -> str | None:
    """``720.0 min`` (``of HOST_MODEL`` after it or not) as [D-]HH:MM:SS; None where there
    is no limit; :class:`_Unreadable` where the number is not one (``1.2.3 min``)."""
    m = _MINUTES.fullmatch(text)
    if not m:
        if text.strip():
            raise _Unreadable(text.strip())
        return None
    minutes = ascii_decimal(m.group(1))
    if minutes is None:
        raise _Unreadable(text.strip())
    return walltime_text(str(round(minutes)))


def _limit_below(lines: list[str], i: int, name: str) -> str | None:
    """The value under the column ``name`` of header line ``i`` (next non-empty line)."""
    col = lines[i].index(name)
    for value in lines[i + 1:]:
        if value.strip():
            return value[max(col - 2, 0):] if len(value) > col - 2 else None
    return None


def _run_limits(lines: list[str],
                notes: list[str] | None = None) -> tuple[str | None, str | None]:
    """(maximum, default) RUNLIMIT of one queue: the default under ``DEFAULT LIMITS:``,
    the maximum under ``MAXIMUM LIMITS:`` or on its own (older LSF); one that cannot be
    read is a note (in ``notes``), no limit."""
    limits: dict[str, str | None] = {"max": None, "default": None}
    section = "max"
    for i, line in enumerate(lines):
        if line.strip().startswith("DEFAULT LIMITS"):
            section = "default"
        elif line.strip().startswith("MAXIMUM LIMITS"):
            section = "max"
        elif re.search(r"\bRUNLIMIT\b", line) and not re.search(r"[0-9]", line):
            value = _limit_below(lines, i, "RUNLIMIT")
            try:
                limits[section] = _minutes(value or "") or limits[section]
            except _Unreadable as exc:
                shown = str(exc) if len(str(exc)) <= 40 else str(exc)[:37] + "..."
                word = "maximum" if section == "max" else "default"
                (notes if notes is not None else []).append(
                    f"its {word} RUNLIMIT {shown!r} is not a time in minutes: no {word} "
                    f"time limit drafted ({' '.join(QUEUES_CMD)})")
    return limits["max"], limits["default"]


def _hosts_line(lines: list[str]) -> list[str]:
    """The words of a queue's ``HOSTS:`` line (``all``, hosts, ``group/``, ``~host``)."""
    for line in lines:
        if line.startswith("HOSTS:"):
            return line.removeprefix("HOSTS:").split()
    return ["all"]


def parse_queues(text: str) -> list[Queue]:
    """``bqueues -l``: each queue's run limits, its hosts as written, and whether its
    description calls it the default queue (bqueues has no field for that)."""
    cmd = " ".join(QUEUES_CMD)
    out = []
    for name, lines in text_blocks(text, _BLOCK_QUEUE):
        desc = " ".join(ln.strip().removeprefix("--").strip() for ln in lines
                        if ln.strip().startswith("--"))
        status = next((lines[i + 1].split()[2] for i, ln in enumerate(lines[:-1])
                       if ln.startswith("PRIO") and len(lines[i + 1].split()) > 2), "")
        problems: list[str] = []
        max_time, default_time = _run_limits(lines, problems)
        q = Queue(name=name, state=status, max_time=max_time, default_time=default_time,
                  default="default queue" in desc.lower(),
                  sources={"max_time": cmd, "default_time": cmd,
                           "default": f"{cmd} (its description)"})
        q.notes.append("HOSTS: " + " ".join(_hosts_line(lines)))
        q.notes += problems
        out.append(q)
    return out


def _row(lines: list[str], head: str) -> dict[str, str]:
    """The values under a header line that starts with ``head`` (column by column)."""
    for i, line in enumerate(lines[:-1]):
        if line.split()[:1] == [head]:
            return dict(zip(line.split(), lines[i + 1].split(), strict=False))
    return {}


def parse_hosts(text: str) -> dict[str, Node]:
    """``bhosts -l``: each host's status and job slots (MAX), taken as its cores."""
    out = {}
    for name, lines in text_blocks(text, _BLOCK_HOST):
        row = _row(lines, "STATUS")
        slots = as_int(row.get("MAX"))
        out[name] = Node(name=name, cpus=slots, cores=slots, state=row.get("STATUS", ""))
    return out


def parse_gpus(text: str) -> dict[str, tuple[int, str | None]]:
    """``bhosts -l -gpu``: host -> (GPUs, model) from NGPUS and the STATIC ATTRIBUTES
    table (model None where the GPUs differ)."""
    out = {}
    for name, lines in text_blocks(text, _BLOCK_HOST):
        count = as_int(_row(lines, "NGPUS").get("NGPUS")) or 0
        models = set()
        for i, line in enumerate(lines):
            if line.split()[:2] == ["GPU_ID", "MODEL"]:
                for row in lines[i + 1:]:
                    words = row.split()
                    if len(words) < 2 or ascii_int(words[0]) is None:
                        break
                    models.add(words[1])
        out[name] = (count, models.pop() if len(models) == 1 else None)
    return out


def assign_hosts(queues: list[Queue], nodes: dict[str, Node]) -> None:
    """A queue's hosts from its HOSTS line: ``all`` or host groups (members unknown
    without bmgroup: every host, noted), named hosts, less ``~excluded`` ones."""
    for q in queues:
        words = next((n.removeprefix("HOSTS: ").split() for n in q.notes
                      if n.startswith("HOSTS: ")), ["all"])
        named = [re.sub(r"\+\d+$", "", w) for w in words if not w.startswith("~")]
        excluded = {w[1:] for w in words if w.startswith("~")}
        groups = [w for w in named if w.endswith("/") or w in ("all", "others")]
        hosts = [w for w in named if w in nodes]
        if groups and not hosts:
            hosts = list(nodes)
            if groups != ["all"]:
                q.notes.append(f"host groups {' '.join(groups)}: members unknown "
                               "(bmgroup), every host counted")
        q.nodes = [h for h in dict.fromkeys(hosts) if h not in excluded]
        q.total_nodes = len(q.nodes)
        q.sources["nodes"] = f"{' '.join(QUEUES_CMD)} (HOSTS) and {' '.join(HOSTS_CMD)}"


def discover(run: Run) -> Cluster:
    """Queues and hosts of the LSF cluster ``run`` reaches; GPUs where bhosts -gpu works."""
    notes: list[str] = []
    queues = parse_queues(required(run, QUEUES_CMD))
    nodes = parse_hosts(required(run, HOSTS_CMD))
    gpu_text = optional(run, GPUS_CMD, notes)
    for name, (count, model) in parse_gpus(gpu_text or "").items():
        if name in nodes:
            nodes[name].gpus, nodes[name].gpu_model = count, model
    assign_hosts(queues, nodes)
    if not any(q.default for q in queues):
        notes.append("no queue's description names it the default (lsb.params "
                     "DEFAULT_QUEUE; `bparams` shows it)")
    notes.append("cores are the hosts' job slots (bhosts -l MAX); memory and architecture "
                 "are not in bhosts (lshosts -w shows them)")
    return Cluster(scheduler="lsf", queues=queues, nodes=nodes, notes=notes,
                   sources={"nodes": " ".join(HOSTS_CMD), "queues": " ".join(QUEUES_CMD),
                            "gpus": " ".join(GPUS_CMD)})


class LsfDrafting(Drafting):
    def discover(self, run: Run) -> Cluster:
        return discover(run)

    def launchers(self, cluster: Cluster) -> tuple[Block, str]:
        """mpirun (the default), horovodrun without --gloo, torchrun."""
        b = Block()
        b.add("mpirun", plain(kind="mpirun", rendezvous_env=True))
        b.add("horovodrun", plain(kind="horovodrun"), notes=[
            "no --gloo: under LSF horovodrun starts ranks with jsrun or mpirun"])
        b.add("torchrun", plain(kind="torchrun"))
        return b, "mpirun"


DRAFTING = LsfDrafting()
