"""Grid Engine's drafting part for `hpcprov site draft` (Son of Grid Engine, Univa/Altair
Grid Engine): the commands it asks, pure parsers of their text, :func:`discover`, which runs
them through the draft's recorder, and ``DRAFTING``, which also says what a drafted profile
writes for Grid Engine (the backend, :mod:`hpcprov.schedulers.gridengine`, loads it for a
draft).

Every command only reads: ``qconf -sql`` (the cluster queues), ``qconf -sq QUEUE`` (each
one's hosts, slots, parallel environments and h_rt), ``qconf -shgrp @GROUP`` (a host group
a queue names), ``qconf -spl`` and ``qconf -sp PE`` (the parallel environments and how they
place slots), ``qhost -F`` (each host's CPUs, memory and resources such as ``gpu``).
Univa and Altair print the same key/value layout (their manuals' ``qconf -sq``), with more
keys, which are read past; their ``qhost`` adds columns, found by their header names.
"""

from __future__ import annotations

import re

from hpcprov.core.text import ascii_decimal
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
    walltime_text,
)

QUEUES_CMD = ["qconf", "-sql"]
PES_CMD = ["qconf", "-spl"]
HOSTS_CMD = ["qhost", "-F"]
MAX_QUEUES = 64  # `qconf -sq` once a queue: a draft reads at most this many


def queue_cmd(name: str) -> list[str]:
    return ["qconf", "-sq", name]


def pe_cmd(name: str) -> list[str]:
    return ["qconf", "-sp", name]


def hostgroup_cmd(name: str) -> list[str]:
    return ["qconf", "-shgrp", name]


def names(text: str) -> list[str]:
    """One name per line (``qconf -sql``, ``-spl``), blank lines and comments left out."""
    return [ln.strip() for ln in text.splitlines()
            if ln.strip() and not ln.lstrip().startswith("#")]


def config(text: str) -> dict[str, str]:
    """``qconf -sq`` / ``-sp`` / ``-shgrp`` text: ``key value`` lines, a value continued on
    the next line after a trailing backslash; the value's inner white space kept as one
    space."""
    out: dict[str, str] = {}
    pending = ""
    for raw in text.splitlines():
        line = pending + raw.strip()
        if line.endswith("\\"):
            pending = line[:-1].rstrip() + " "
            continue
        pending = ""
        if not line or line.startswith("#"):
            continue
        key, _, value = line.partition(" ")
        out[key] = " ".join(value.split())
    return out


def listed(value: str | None) -> list[str]:
    """A Grid Engine list value (``make smp mpi``, ``a,b``), NONE for none."""
    items = [v for v in re.split(r"[\s,]+", value or "") if v]
    return [] if [v.upper() for v in items] in ([], ["NONE"]) else items


def slots(value: str | None) -> tuple[int | None, dict[str, int]]:
    """A queue's ``slots``: the default and the per-host ones (``1,[gpu01=4],[gpu02=4]``)."""
    default: int | None = None
    per_host: dict[str, int] = {}
    for item in re.findall(r"\[[^]]*\]|[^,\[\]]+", value or ""):
        item = item.strip()
        if item.startswith("["):
            host, _, count = item[1:-1].partition("=")
            if (n := as_int(count.strip())) is not None:
                per_host[host.strip()] = n
        elif item:
            default = as_int(item)
    return default, per_host


def h_rt(value: str | None) -> str | None:
    """A queue's ``h_rt`` ([[HH:]MM:]SS or seconds) as [D-]HH:MM:SS; None for INFINITY."""
    if value is None or value.upper() == "INFINITY":
        return None
    parts = value.split(":")
    if not all(p.isdigit() for p in parts) or len(parts) > 3:
        return None
    seconds = 0
    for p in parts:
        seconds = seconds * 60 + int(p)
    return walltime_text(f"{seconds // 3600}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}")


def parse_hosts(text: str) -> dict[str, Node]:
    """``qhost -F``: each host's CPUs (NCPU), cores (NCOR where printed), hardware threads
    (NTHR), memory (MEMTOT) and its resources (``hc:gpu=4.000000``, ``hl:arch=...``), by
    the header's column names (SGE 8 prints NSOC NCOR NTHR, older releases do not); the
    ``global`` pseudo-host left out."""
    out: dict[str, Node] = {}
    header: list[str] = []
    node: Node | None = None
    for line in text.splitlines():
        if line.startswith("HOSTNAME"):
            header = line.split()
            continue
        if not line.strip() or line.startswith("-"):
            continue
        if line[0].isspace():  # a resource of the host above
            if node is not None:
                _resource(node, line.strip())
            continue
        cols = dict(zip(header, line.split(), strict=False))
        name = cols.get("HOSTNAME", line.split()[0])
        if name == "global":
            node = None
            continue
        cpus = as_int(cols.get("NCPU"))
        cores = as_int(cols.get("NCOR")) or cpus
        threads = as_int(cols.get("NTHR"))
        node = Node(name=name, cpus=threads or cpus, cores=cores,
                    threads_per_core=(threads // cores if threads and cores
                                      and threads >= cores else None),
                    memory_mb=memory_mb(cols.get("MEMTOT")), arch=_arch(cols.get("ARCH")))
        out[name] = node
    return out


GPU_RESOURCE = re.compile(r"^\s+h[cl]:(gpus?|ngpus|cuda)=", re.M)  # as _resource counts
_ARCH = {"lx-amd64": "x86_64", "lx24-amd64": "x86_64", "lx26-amd64": "x86_64",
         "lx-arm64": "aarch64", "lx-aarch64": "aarch64", "lx-ppc64le": "ppc64le"}


def _arch(value: str | None) -> str | None:
    return _ARCH.get((value or "").lower())


def _resource(node: Node, item: str) -> None:
    """One ``qhost -F`` resource line (``hc:gpu=4.000000``, ``hl:arch=lx-amd64``)."""
    m = re.fullmatch(r"[a-z]{2}:([A-Za-z0-9_.-]+)=(.*)", item)
    if not m:
        return
    name, value = m.group(1), m.group(2).strip()
    if name in ("gpu", "gpus", "ngpus", "cuda"):
        count = ascii_decimal(value)
        node.gpus = int(count) if count is not None else node.gpus
    elif name in ("gpu_model", "gpu_type"):
        node.gpu_model = value or None
    elif name == "arch" and node.arch is None:
        node.arch = _arch(value)


def parse_queue(name: str, conf: dict[str, str], groups: dict[str, list[str]],
                pes: dict[str, dict[str, str]], source: str) -> Queue:
    """One cluster queue from its ``qconf -sq``: its hosts (host groups resolved through
    ``groups``), h_rt, slots per host, and its parallel environments (each with its
    allocation rule, in notes: a job of this queue is sized through one)."""
    hosts: list[str] = []
    for item in listed(conf.get("hostlist")):
        hosts += groups.get(item, []) if item.startswith("@") else [item]
    hosts = list(dict.fromkeys(hosts))
    q = Queue(name=name, nodes=hosts, total_nodes=len(hosts),
              max_time=h_rt(conf.get("h_rt")), state="enabled")
    default, per_host = slots(conf.get("slots"))
    for pe in listed(conf.get("pe_list")):
        rule = pes.get(pe, {}).get("allocation_rule", "?")
        tight = pes.get(pe, {}).get("control_slaves", "FALSE").upper() == "TRUE"
        q.notes.append(f"pe {pe}: allocation_rule {rule}"
                       + (", tight integration (control_slaves TRUE)" if tight else ""))
    if per_host or default is not None:
        q.notes.append("slots " + ", ".join([*([str(default)] if default is not None else []),
                                             *(f"{h}={n}" for h, n in per_host.items())]))
    q.sources = {"nodes": source, "max_time": source}
    return q


def pe_rules(pes: dict[str, dict[str, str]]) -> dict[str, str]:
    """Each parallel environment's allocation rule ($fill_up, $round_robin, $pe_slots, N)."""
    return {name: conf.get("allocation_rule", "") for name, conf in pes.items()}


def discover(run: Run) -> Cluster:
    """Queues, hosts and parallel environments of the Grid Engine cell ``run`` reaches."""
    notes: list[str] = []
    queue_names = names(required(run, QUEUES_CMD))
    if len(queue_names) > MAX_QUEUES:
        notes.append(f"{len(queue_names)} queues: the draft read the first {MAX_QUEUES}")
        queue_names = queue_names[:MAX_QUEUES]
    pes: dict[str, dict[str, str]] = {}
    for pe in names(optional(run, PES_CMD, notes) or "")[:MAX_QUEUES]:
        text = optional(run, pe_cmd(pe), notes)
        if text is not None:
            pes[pe] = config(text)
    queues: list[Queue] = []
    queue_slots: dict[str, tuple[int | None, dict[str, int]]] = {}
    groups: dict[str, list[str]] = {}
    for name in queue_names:
        conf = config(required(run, queue_cmd(name)))
        for group in (g for g in listed(conf.get("hostlist")) if g.startswith("@")):
            if group not in groups:
                text = optional(run, hostgroup_cmd(group), notes)
                groups[group] = _group_hosts(config(text) if text else {}, groups, run, notes)
        queues.append(parse_queue(name, conf, groups, pes, " ".join(queue_cmd(name))))
        queue_slots[name] = slots(conf.get("slots"))
    hosts_text = required(run, HOSTS_CMD)
    nodes = parse_hosts(hosts_text)
    for q in queues:
        default, per_host = queue_slots[q.name]
        for n in q.nodes:
            if n in nodes:
                nodes[n].queues = (*nodes[n].queues, q.name)
                _slots_as_cpus(nodes[n], per_host.get(n, default))
    if queues:  # Grid Engine has no default queue: a job without -q may land in any
        queues[0].default = True
        queues[0].sources["default"] = ("the first of qconf -sql: Grid Engine has no "
                                        "default queue")
    settings = {f"pe.{name}": rule for name, rule in pe_rules(pes).items()}
    if m := GPU_RESOURCE.search(hosts_text):
        settings["gpu_resource"] = m.group(1)
    return Cluster(scheduler="gridengine", queues=queues, nodes=nodes, settings=settings,
                   notes=notes, sources={"queues": " ".join(QUEUES_CMD),
                                         "nodes": " ".join(HOSTS_CMD),
                                         "parallel environments": " ".join(PES_CMD)})


def _slots_as_cpus(node: Node, count: int | None) -> None:
    """Grid Engine places a job's ranks by its queue's slots on each host, not by the
    host's CPUs: where the queue gives a host more slots than qhost's NCPU (a cell that
    oversubscribes, such as the testbed's), a job gets that many ranks there, as if they
    were CPUs. Fewer slots than CPUs (a slot per GPU) leave the CPUs to the ranks'
    threads: qhost's count stands."""
    if count and node.cpus and count > node.cpus:
        node.cpus = node.cores = count
        node.threads_per_core = None


def _group_hosts(conf: dict[str, str], groups: dict[str, list[str]], run: Run,
                 notes: list[str], depth: int = 0) -> list[str]:
    """A host group's hosts, its nested groups (``@gpu`` in ``@allhosts``) resolved, at
    most 8 deep."""
    out: list[str] = []
    for item in listed(conf.get("hostlist")):
        if not item.startswith("@"):
            out.append(item)
        elif depth < 8:
            if item not in groups:
                text = optional(run, hostgroup_cmd(item), notes)
                groups[item] = _group_hosts(config(text) if text else {}, groups, run, notes,
                                            depth + 1)
            out += groups[item]
    return list(dict.fromkeys(out))


PE_RULES = {"$fill_up": "fill_up", "$round_robin": "round_robin", "$pe_slots": "pe_slots"}


def preferred_pe(cluster: Cluster) -> str | None:
    """The parallel environment a drafted profile sizes multi-node jobs with: one whose
    allocation rule spreads slots over hosts ($fill_up, then $round_robin, then a fixed
    number per host), as the draft's settings name them."""
    rules = {k.removeprefix("pe."): v for k, v in cluster.settings.items()
             if k.startswith("pe.")}
    for want in ("$fill_up", "$round_robin"):
        for name, rule in rules.items():
            if rule == want:
                return name
    return next((n for n, r in rules.items() if r.isdigit()), None)


def pe_family(cluster: Cluster) -> tuple[str, list[str]] | None:
    """A family of parallel environments that place a fixed number of slots on each host,
    named by it (mpi1, mpi2, mpi4: allocation_rule 1, 2, 4; at least two): the profile's
    ``pe`` for them (``mpi{per_node}``) and its members, fewest slots first; None where the
    cell has none. Such PEs give a job exactly its ranks per node, GPUs asked or not."""
    families: dict[str, list[tuple[int, str]]] = {}
    for key, rule in cluster.settings.items():
        name = key.removeprefix("pe.")
        if key.startswith("pe.") and rule.isdigit() and name.endswith(rule) and name != rule:
            families.setdefault(name[:-len(rule)], []).append((int(rule), name))
    best = max(families.items(), key=lambda kv: (len(kv[1]), kv[0]), default=None)
    if best is None or len(best[1]) < 2:
        return None
    return best[0] + "{per_node}", [name for _, name in sorted(best[1])]


class GridEngineDrafting(Drafting):
    def discover(self, run: Run) -> Cluster:
        return discover(run)

    def launchers(self, cluster: Cluster) -> tuple[Block, str]:
        """mpirun on the job's hosts (an Open MPI built with Grid Engine support reads
        $PE_HOSTFILE itself and starts its daemons with qrsh -inherit), torchrun with one
        agent per node started by that mpirun, horovodrun."""
        b = Block()
        b.add("mpirun", plain(kind="mpirun", rendezvous_env=True),
              "Open MPI reads $PE_HOSTFILE and starts remote daemons with qrsh -inherit "
              "(the parallel environment's control_slaves TRUE)")
        b.add("torchrun", plain(kind="torchrun", per_node_wrapper="mpirun",
                                rdzv_host="first_node"),
              "one agent per node, started by the site's mpirun (Grid Engine has no task "
              "starter of its own); the rendezvous on the job's first host")
        b.add("horovodrun", plain(kind="horovodrun"))
        return b, "mpirun"

    def section(self, cluster: Cluster, gpus: bool) -> Block | None:
        """The gridengine section: the PE jobs are sized through (``pe``, with ``{per_node}``
        for a family of fixed-rule PEs such as mpi1, mpi2, mpi4), its rule (``pe_rule``),
        the GPU consumable as qhost -F names it."""
        pe = preferred_pe(cluster)
        family = pe_family(cluster)
        b = Block()
        if family:
            template, members = family
            rules = ", ".join(cluster.settings["pe." + m] for m in members)
            b.add("pe", template, f"{', '.join(members)} (qconf -sp: allocation_rule {rules}) "
                  "put that many slots on each host: a job gets exactly its ranks per node "
                  "(a count with no PE of its own is refused by qsub)")
            b.add("pe_rule", "fixed", "a number of slots per host")
        elif pe:
            rule = cluster.settings.get("pe." + pe, "")
            b.add("pe", pe, "the PE that spreads a job's slots over hosts "
                  f"(allocation_rule {rule}; qconf -sp {pe})")
            b.add("pe_rule", PE_RULES.get(rule, "fixed" if rule.isdigit() else "fill_up"),
                  f"qconf -sp {pe}: allocation_rule {rule}")
        if gpus:
            resource = cluster.settings.get("gpu_resource", "gpu")
            b.add("gpu_resource", resource, "the consumable GPUs are asked by, per slot "
                  f"(qhost -F: hc:{resource})")
        return b if b.items else None

    def option_hints(self, cluster: Cluster) -> list[str]:
        rules = ", ".join(f"{k.removeprefix('pe.')} ({v})" for k, v in cluster.settings.items()
                          if k.startswith("pe.")) or "none listed"
        return [f"parallel environments: {rules} (qconf -spl); a site may also require -P "
                "PROJECT or an h_rt on every job (its guide says)"]


DRAFTING = GridEngineDrafting()
