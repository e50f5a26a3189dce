"""Flux's drafting part for `hpcprov site draft`: the commands it asks, pure parsers of
their text, :func:`discover`, which runs them through the draft's recorder, and
``DRAFTING``, which also says what a drafted profile writes for Flux (the backend,
:mod:`hpcprov.schedulers.flux`, loads it for a draft).

Both commands are asked for fields in a fixed order, ``|`` between them (flux-resource(1)
and flux-queue(1) ``-o/--format``), so no column layout is guessed:

* ``flux resource list`` one line per state and queue: its nodes, cores and GPUs (totals of
  the line's nodes) and their host list;
* ``flux queue list`` one line per queue: its name (``*`` after the default one, the
  ``queuem`` field), default and maximum time limits (seconds; ``inf`` or 0: none) and the
  range of nodes a job may ask for. A system without named queues prints no line: one
  queue, ``default``, is drafted.
"""

from __future__ import annotations

import hostlist

from hpcprov.core.text import ascii_decimal
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

RESOURCES_CMD = ["flux", "resource", "list", "-n", "-o",
                 "{state}|{queue}|{nnodes}|{ncores}|{ngpus}|{nodelist}"]
QUEUES_CMD = ["flux", "queue", "list", "-n", "-o",
              "{queuem}|{defaults.timelimit}|{limits.timelimit}|{limits.range.nnodes}"]
UNNAMED = "default"  # the queue drafted for a system without named queues


def _fields(line: str, count: int) -> list[str] | None:
    parts = [p.strip() for p in line.split("|")]
    return parts if len(parts) == count else None


def parse_resources(text: str) -> tuple[dict[str, Node], dict[str, list[str]]]:
    """``flux resource list``: each node (cores and GPUs: the line's totals over its nodes;
    its state) and each queue's nodes (a node in several queues is in each)."""
    nodes: dict[str, Node] = {}
    queues: dict[str, list[str]] = {}
    for line in text.splitlines():
        parts = _fields(line, 6)
        if parts is None or line.lstrip().startswith("#"):
            continue
        state, queue, nnodes, ncores, ngpus, names = parts
        count = as_int(nnodes)
        try:
            hosts = hostlist.expand_hostlist(names) if names else []
        except hostlist.BadHostlist:
            continue
        if not count or not hosts:
            continue
        cores, gpus = as_int(ncores), as_int(ngpus)
        for host in hosts:
            node = nodes.setdefault(host, Node(name=host, state=state))
            if cores is not None:
                node.cores = node.cpus = cores // count
            node.gpus = (gpus or 0) // count
            for q in (queue.split(",") if queue else [UNNAMED]):
                queues.setdefault(q, [])
                if host not in queues[q]:
                    queues[q].append(host)
                node.queues = (*node.queues, q) if q not in node.queues else node.queues
    return nodes, queues


def _seconds(text: str) -> str | None:
    """A queue time limit (seconds as flux prints them, 0 or inf: none) as [D-]HH:MM:SS."""
    value = ascii_decimal(text.strip())
    if value is None or value <= 0:
        return None
    return walltime_text(f"{int(value) // 60}:{int(value) % 60:02d}")


def parse_queues(text: str) -> list[Queue]:
    """``flux queue list``: each queue, the default one marked, its time limits and the most
    nodes a job may ask for."""
    cmd = " ".join(QUEUES_CMD[:3])
    out = []
    for line in text.splitlines():
        parts = _fields(line, 4)
        if parts is None or not parts[0]:
            continue
        name, default_time, max_time, nnodes = parts
        default = name.endswith("*")
        low, _, high = nnodes.partition("-")
        out.append(Queue(name=name.rstrip("*"), default=default,
                         default_time=_seconds(default_time), max_time=_seconds(max_time),
                         max_nodes=as_int(high or low),
                         sources={"default": f"{cmd} (queuem: *)", "max_time": cmd,
                                  "default_time": cmd, "max_nodes": cmd}))
    return out


def discover(run: Run) -> Cluster:
    """Queues and nodes of the Flux instance ``run`` reaches."""
    notes: list[str] = []
    nodes, members = parse_resources(required(run, RESOURCES_CMD))
    queue_text = optional(run, QUEUES_CMD, notes)
    queues = parse_queues(queue_text or "")
    named = {q.name for q in queues}
    queues += [Queue(name=name) for name in members if name not in named]
    if not queues:
        queues = [Queue(name=UNNAMED)]
    if len(queues) == 1:
        queues[0].default = True
    for q in queues:
        q.nodes = list(members.get(q.name, members.get(UNNAMED, [])))
        q.total_nodes = len(q.nodes)
        q.sources["nodes"] = " ".join(RESOURCES_CMD[:3])
    if not any(q.default for q in queues):
        notes.append("no queue is marked the default in flux queue list")
    notes.append("cores and GPUs per node are the totals of flux resource list divided "
                 "by its nodes; memory is not in flux resource list")
    return Cluster(scheduler="flux", queues=queues, nodes=nodes, notes=notes,
                   sources={"nodes": " ".join(RESOURCES_CMD[:3]),
                            "queues": " ".join(QUEUES_CMD[:3]),
                            "gpus": " ".join(RESOURCES_CMD[:3])})


class FluxDrafting(Drafting):
    def discover(self, run: Run) -> Cluster:
        return discover(run)

    def launchers(self, cluster: Cluster) -> tuple[Block, str]:
        """flux run (the default), torchrun started on each node by flux run, mpirun."""
        b = Block()
        b.add("flux", plain(kind="flux", rendezvous_env=True),
              "flux run: Flux's task starter; MASTER_ADDR/MASTER_PORT for torch.distributed")
        b.add("torchrun", plain(kind="torchrun"),
              "one agent per node, started by flux run")
        b.add("mpirun", plain(kind="mpirun", rendezvous_env=True))
        return b, "flux"


DRAFTING = FluxDrafting()
