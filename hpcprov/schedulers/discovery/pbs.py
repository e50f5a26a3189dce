"""PBS's drafting part for `hpcprov site draft`: the commands it asks, pure parsers of
their text, :func:`discover`, which runs them through the draft's recorder, and
``DRAFTING``, which also says what a drafted profile writes for PBS (the backend,
:mod:`hpcprov.schedulers.pbs`, loads it for a draft)."""

from __future__ import annotations

import re

from hpcprov.core.walltime import walltime_seconds
from hpcprov.core.yaml_writer import Block, plain
from hpcprov.schedulers.facts import (
    Cluster,
    Drafting,
    Node,
    Queue,
    Run,
    as_int,
    memory_mb,
    optional,
    required,
    text_blocks,
    walltime_text,
)
from hpcprov.schedulers.pbs import fields

# Pure parsers of `pbsnodes -av`, `qstat -Qf` and `qstat -Bf` (PBS Pro / OpenPBS), and
# discover(), which runs them through the draft's recording runner. Every command only reads.


NODES_CMD = ["pbsnodes", "-av"]
QUEUES_CMD = ["qstat", "-Qf"]
SERVER_CMD = ["qstat", "-Bf"]


def blocks(text: str, header: re.Pattern[str]) -> list[tuple[str, dict[str, str]]]:
    """(name, attributes) for each block of ``pbsnodes -av`` / ``qstat -Qf`` / ``-Bf``
    output: a line ``header`` matches names it, indented ``name = value`` lines follow
    (a value continues on lines that start with a tab)."""
    return [(name, fields("\n".join(lines))) for name, lines in text_blocks(text, header)]


_NODE = re.compile(r"^(\S.*?)\s*$")
_QUEUE = re.compile(r"^Queue: (.+?)\s*$")
_SERVER = re.compile(r"^Server: (.+?)\s*$")


def parse_nodes(text: str | list[tuple[str, dict[str, str]]]) -> dict[str, Node]:
    """``pbsnodes -av`` (its text, or its :func:`blocks`): each vnode's CPUs, memory, GPUs,
    state and queue (the node's ``queue`` attribute, else a site's
    ``resources_available.Qlist``)."""
    out = {}
    for name, attrs in blocks(text, _NODE) if isinstance(text, str) else text:
        ra = {k.removeprefix("resources_available."): v for k, v in attrs.items()
              if k.startswith("resources_available.")}
        queues = attrs.get("queue") or ra.get("Qlist", "")
        ncpus = as_int(ra.get("ncpus"))
        out[name] = Node(
            name=name, cpus=ncpus, cores=ncpus, memory_mb=memory_mb(ra.get("mem")),
            gpus=as_int(ra.get("ngpus")) or 0,
            gpu_model=ra.get("gpu_model") or ra.get("gpu_type") or None,
            state=attrs.get("state", ""),
            queues=tuple(q.strip() for q in queues.split(",") if q.strip()))
    return out


def _per_user(value: str | None) -> int | None:
    """``[u:PBS_GENERIC=4]`` (max_run, max_run_res.ngpus): the limit for any one user."""
    m = re.search(r"u:PBS_GENERIC=([^],]*)", value or "")
    return as_int(m.group(1)) if m else None


def parse_queues(text: str) -> list[Queue]:
    """``qstat -Qf``: the execution and routing queues with their limits (a routing
    queue's destinations in ``routes_to``; an execution queue that takes jobs from routing
    queues only is noted ``from_route_only``), and ``default_chunk.*`` in notes for
    matching nodes."""
    cmd = " ".join(QUEUES_CMD)
    out = []
    for name, attrs in blocks(text, _QUEUE):
        kind = attrs.get("queue_type", "").lower()
        if kind not in ("execution", "route"):
            continue
        q = Queue(name=name, state="enabled" if attrs.get("enabled") == "True" else "disabled",
                  max_time=walltime_text(attrs.get("resources_max.walltime")),
                  default_time=walltime_text(attrs.get("resources_default.walltime")),
                  max_nodes=as_int(attrs.get("resources_max.nodect")),
                  max_jobs_per_user=_per_user(attrs.get("max_run")),
                  max_gpus_per_user=_per_user(attrs.get("max_run_res.ngpus")))
        q.sources = {k: cmd for k in ("max_time", "default_time", "max_nodes",
                                      "max_jobs_per_user", "max_gpus_per_user")}
        q.notes += [f"{k}={v}" for k, v in attrs.items() if k.startswith("default_chunk.")]
        if kind == "route":
            q.routes_to = [d.strip() for d in attrs.get("route_destinations", "").split(",")
                           if d.strip()]
        if attrs.get("from_route_only", "").lower() == "true":
            q.notes.append("from_route_only")
        out.append(q)
    return out


def parse_server(text: str) -> dict[str, str]:
    """``qstat -Bf``: the server's name, default queue and version."""
    for name, attrs in blocks(text, _SERVER):
        return {"server": name, **{k: attrs[k] for k in ("default_queue", "pbs_version")
                                   if k in attrs}}
    return {}


def _chunk_nodes(q: Queue, resources: dict[str, dict[str, str]]) -> list[str]:
    """The nodes a queue's ``default_chunk.RES=VALUE`` selects (RES a node resource)."""
    picked: list[str] = []
    for note in q.notes:
        res, _, value = note.removeprefix("default_chunk.").partition("=")
        picked += _nodes_with(resources, res, value)
    return list(dict.fromkeys(picked))


def _nodes_with(resources: dict[str, dict[str, str]], res: str, value: str) -> list[str]:
    """Nodes whose ``resources_available.RES`` lists VALUE (comma-separated)."""
    key = f"resources_available.{res}"
    return [name for name, attrs in resources.items()
            if value in attrs.get(key, "").split(",")]


def assign_nodes(queues: list[Queue], nodes: dict[str, Node],
                 text: str | list[tuple[str, dict[str, str]]]) -> None:
    """Which nodes serve each queue: the nodes' own queue (or Qlist), else the queue's
    default_chunk, else (PBS ties no nodes to queues) every node without a queue, noted.
    ``text`` is ``pbsnodes -av`` or its :func:`blocks` (parsed once, not once a queue)."""
    resources = dict(blocks(text, _NODE) if isinstance(text, str) else text)
    by_queue: dict[str, list[str]] = {}
    for n, node in nodes.items():
        for name in dict.fromkeys(node.queues):
            by_queue.setdefault(name, []).append(n)
    untied = [n for n, node in nodes.items() if not node.queues]
    for q in queues:
        if q.routes_to:  # a routing queue's nodes are its destinations' (route_queues)
            continue
        mine = list(by_queue.get(q.name, []))
        how = "the nodes' queue/Qlist (pbsnodes -av)"
        if not mine:
            mine, how = _chunk_nodes(q, resources), "the queue's default_chunk (qstat -Qf)"
        if not mine:
            mine = list(untied)
            how = ("every node not tied to a queue: PBS does not say which nodes this "
                   "queue's jobs get")
        q.nodes, q.total_nodes = mine, len(mine)
        q.sources["nodes"] = how


def route_queues(queues: list[Queue], notes: list[str]) -> list[Queue]:
    """Routing queues (``qstat -Qf`` queue_type Route, e.g. a ``prod`` that sends each job
    to a small, medium or large execution queue by its size) are where users submit: each
    gets its destinations' nodes, and their largest limits where it sets none itself. An
    execution queue that takes jobs only from routing queues (``from_route_only``) cannot
    be named by a job: it is left out, its nodes reached through its routing queue."""
    by_name = {q.name: q for q in queues}
    cmd = " ".join(QUEUES_CMD)
    for q in queues:
        dests = [by_name[d] for d in q.routes_to if d in by_name and not by_name[d].routes_to]
        if not q.routes_to:
            continue
        q.nodes = list(dict.fromkeys(n for d in dests for n in d.nodes))
        q.total_nodes = len(q.nodes)
        q.sources["nodes"] = f"its destinations' nodes ({', '.join(q.routes_to)}; {cmd})"
        times = [d.max_time for d in dests if d.max_time]
        if q.max_time is None and times:
            q.max_time = max(times, key=lambda t: walltime_seconds(t) or 0)
            q.sources["max_time"] = f"the longest of its destinations ({cmd})"
        sizes = [d.max_nodes for d in dests if d.max_nodes]
        if q.max_nodes is None and sizes:
            q.max_nodes = max(sizes)
            q.sources["max_nodes"] = f"the largest of its destinations ({cmd})"
        q.notes.append(f"a routing queue: PBS sends each job to one of {', '.join(q.routes_to)} "
                       "by its size")
    hidden = {q.name: None for q in queues if "from_route_only" in q.notes}
    if hidden:
        notes.append(f"queue(s) {', '.join(hidden)} take jobs from routing queues only "
                     "(from_route_only): left out, their nodes reached through the routing "
                     "queue")
    return [q for q in queues if q.name not in hidden]


def discover(run: Run) -> Cluster:
    """Queues, nodes, default queue and version of the PBS server ``run`` reaches."""
    notes: list[str] = []
    node_blocks = blocks(required(run, NODES_CMD), _NODE)  # parsed once
    nodes = parse_nodes(node_blocks)
    queues = parse_queues(required(run, QUEUES_CMD))
    server = parse_server(optional(run, SERVER_CMD, notes) or "")
    assign_nodes(queues, nodes, node_blocks)
    queues = route_queues(queues, notes)
    for q in queues:
        q.default = q.name == server.get("default_queue")
        q.sources["default"] = " ".join(SERVER_CMD)
    if server.get("default_queue") and not any(q.default for q in queues):
        notes.append(f"the server's default queue {server['default_queue']!r} is not among "
                     "the queues qstat -Qf listed: no partition is the default")
    return Cluster(scheduler="pbs", version=server.get("pbs_version"), queues=queues,
                   nodes=nodes, notes=notes,
                   sources={"version": " ".join(SERVER_CMD), "nodes": " ".join(NODES_CMD),
                            "queues": " ".join(QUEUES_CMD)})


class PbsDrafting(Drafting):
    def discover(self, run: Run) -> Cluster:
        return discover(run)

    def launchers(self, cluster: Cluster) -> tuple[Block, str]:
        """mpirun on $PBS_NODEFILE (the default), torchrun with one agent per node started
        by that mpirun (PBS has no starter of its own), horovodrun."""
        b = Block()
        b.add("mpirun", plain(kind="mpirun", hosts="hostfile", hostfile="$PBS_NODEFILE",
                              oversubscribe=True, rendezvous_env=True),
              "$PBS_NODEFILE lists one line per slot")
        b.add("torchrun", plain(kind="torchrun"),
              "one agent per node, started by the site's mpirun (PBS has no task starter)")
        b.add("horovodrun", plain(kind="horovodrun"))
        return b, "mpirun"


DRAFTING = PbsDrafting()
