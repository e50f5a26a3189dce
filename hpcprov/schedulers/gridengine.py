"""Grid Engine (Son of Grid Engine 8, Univa and Altair Grid Engine): ``#$`` directives,
``qsub -terse``, ``qstat``, ``qacct -j``, ``qdel``, interactive ``qrsh``, ``$PE_HOSTFILE``.

Verified against a real Son of Grid Engine 8.1.9 cell on the testbed (qmaster and one execd
per node: tests/testbed/test_testbed_gridengine*.py), and for Univa/Altair from their
manuals' qsub, qstat and qacct pages (not run here).

* **Geometry.** A job of N nodes x R ranks asks for N*R slots of the site's parallel
  environment (``-pe PE SLOTS``; the PE per partition: ``gridengine.pe`` and
  ``pe_by_partition``), with the GPU consumable per slot (``-l gpu=G/R``: a PE whose
  allocation rule is ``$fill_up`` then puts R slots on each host with G GPUs); or, at a
  site that sizes jobs in its own node units (``-l f_node=2``, ``-l node_f=2``), N units of
  ``gridengine.node_resource`` and no PE. The time limit is ``-l h_rt``; queues ``-q``.
* **Options.** hpcprov's names with a qsub flag (``job-name`` -N, ``account`` -A,
  ``project`` -P, ``queue``/``partition`` -q, ``output`` -o, ``error`` -e, ``join`` -j), a
  name of one or two letters or one of qsub's own multi-letter flags (``pe``, ``cwd``,
  ``hold_jid``...) as that flag, any other name a ``-l`` resource (``-o h_vmem=4G`` is
  ``-l h_vmem=4G``). ``gridengine.flags`` spells a site's own (``{group: -g}``). ``-V``
  (the submitting shell's whole environment) is never written: the job sets its own.
* **The job's hosts.** ``$PE_HOSTFILE`` lists ``host slots queue processors`` per host:
  its first host is the rendezvous; mpirun gets ``-H host:R,...`` built from it (an MPI
  with Grid Engine support reads the file itself and starts its remote daemons with
  ``qrsh -inherit``); the job id is ``$JOB_ID``.
* **Exit status.** ``qacct -j`` once the job left ``qstat`` (``failed`` non-zero: Grid
  Engine could not run it), else the status file the job script's EXIT trap wrote.
"""

from __future__ import annotations

import math
import re
import time
from pathlib import Path

from hpcprov.core.findings import Finding
from hpcprov.core.shell import Raw
from hpcprov.core.text import status_number
from hpcprov.core.walltime import walltime_seconds
from hpcprov.request.job import JobRequest
from hpcprov.request.options import Option, required_options
from hpcprov.schedulers.base import (
    Backend,
    Executor,
    Handle,
    PerNode,
    Placement,
    slots_list,
    submitted_job_id,
)
from hpcprov.schedulers.spelling import GRIDENGINE
from hpcprov.site.sections import GridengineOptions

# qsub's options that set the job's geometry (what hpcprov's own flags set), and -l
# resources that do
GEOMETRY_OPTIONS = {"pe": "tasks", "q": "queue", "queue": "queue", "partition": "queue",
                    "masterq": "queue"}
GEOMETRY_RESOURCES = {"h_rt": "time", "s_rt": "time", "slots": "tasks"}
HOSTS = "cut -d ' ' -f 1 \"$PE_HOSTFILE\""  # the job's hosts, one per line, in order
# one process on each of the job's hosts through Grid Engine's tight integration: qrsh
# -inherit (the PE's control_slaves TRUE) starts it as a task of the job, with this shell's
# environment (-V: the modules and variables the job set) in this folder; qrsh joins its
# words into one line for the remote shell, so each word is quoted for it (printf %q). All
# at once; the function fails where one of them fails.
QRSH_EACH = r"""hpcprov_qrsh_each() {
  local host pid rc=0 cmd pids=()
  cmd="cd $(printf '%q' "$PWD") && $(printf '%q ' "$@")"
  while read -r host _; do
    "$SGE_ROOT/bin/$ARC/qrsh" -inherit -nostdin -V "$host" "$cmd" &
    pids+=("$!")
  done < "$PE_HOSTFILE"
  for pid in "${pids[@]}"; do wait "$pid" || rc=$?; done
  return "$rc"
}"""
# what qsub -terse prints: the job id (an array job's: ID.FIRST-LAST:STEP)
JOB_ID = r"([0-9]{1,20})(?:\.[0-9]+-[0-9]+:[0-9]+)?"
_RUNNING = re.compile(r"^[a-zA-Z]*[rt][a-zA-Z]*$")  # r, t, Rr, Rt (not qw, hqw, Eqw)


def hh_mm_ss(walltime: str) -> str:
    """[D-]HH:MM:SS as h_rt's HH:MM:SS (hours past 24: Grid Engine takes no days)."""
    seconds = walltime_seconds(walltime) or 0
    return f"{seconds // 3600}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"


def resources(name: str, value: str | None) -> list[str]:
    """The -l resources an option asks for: ``h_vmem`` for ``h_vmem=4G``, each of
    ``h_rt=1:00:00,gpu=1`` for ``l``; none for a qsub flag."""
    if name == "l":
        return [item.partition("=")[0].strip() for item in (value or "").split(",")]
    return [name] if GRIDENGINE.flag(name).startswith(GRIDENGINE.long) else []


def once(opts: list[Option]) -> list[Option]:
    """Each option once, as qsub reads it (``queue`` and ``q`` are -q; each -l resource its
    own): the later value (a partition's option over hpcprov's own, the user's over both)
    in the first one's place."""
    last = {GRIDENGINE.key(name): (name, value) for name, value in opts}
    out: list[Option] = []
    for name, _value in opts:
        if (option := last.pop(GRIDENGINE.key(name), None)) is not None:
            out.append(option)
    return out


class GridEngine(Backend[GridengineOptions]):
    name = "gridengine"
    title = "Grid Engine"
    marker = "qconf"
    discovery = "hpcprov.schedulers.discovery.gridengine"
    spelling = GRIDENGINE
    section_type = GridengineOptions
    variable = re.compile(r"\$\{?(?:PE_HOSTFILE|JOB_ID|NSLOTS|NHOSTS|SGE_[A-Z_]+)\b")
    variable_example = "$PE_HOSTFILE"
    monitor = "qstat -u $USER"
    horovodrun_gloo = True
    node_starter_name = "qrsh -inherit"

    geometry_options = GEOMETRY_OPTIONS

    def geometry_of(self, req: JobRequest, name: str, value: str | None) -> str | None:
        """As the base, and a -l resource that sets the geometry however given (``h_rt``,
        the site's node unit or GPU consumable, in a -l list)."""
        kind = super().geometry_of(req, name, value)
        if kind is not None:
            return kind
        conf = self.section(req.site)
        own = dict(GEOMETRY_RESOURCES)
        if (unit := self.node_unit(req)) is not None:
            own[unit] = "nodes"
        if conf.gpu_resource:
            own[conf.gpu_resource] = "gpus"
        return next((own[r] for r in resources(name, value) if r in own), None)

    def pe(self, req: JobRequest) -> str | None:
        """The parallel environment of the request's partition (None: none, sized in the
        site's node units)."""
        conf = self.section(req.site)
        pe = conf.pe_by_partition.get(req.partition_name, conf.pe)
        return pe.replace("{per_node}", str(req.scheduler_tasks_per_node)) if pe else None

    def node_unit(self, req: JobRequest) -> str | None:
        """The resource a job asks for one of per node (``node_resource``, ``{partition}``
        in it: the partition's name, at sites whose partitions are resource types), or
        None: its slots come through a parallel environment."""
        unit = self.section(req.site).node_resource
        return unit.replace("{partition}", req.partition_name) if unit else None

    def options(self, req: JobRequest, *, batch: bool) -> list[Option]:
        conf = self.section(req.site)
        opts: list[Option] = [("job-name", req.job_name or ("hpcprov" if batch else
                                                             "interactive"))]
        if batch:
            opts.append(("S", self.shell(req).split()[0]))
            if conf.cwd:
                opts.append(("cwd", None))
        unit = self.node_unit(req)
        if req.part.routing == "partition" and "{partition}" not in (conf.node_resource or ""):
            opts.append(("queue", req.partition_name))  # (a resource type is no queue)
        slots = req.nodes * req.scheduler_tasks_per_node
        if unit:
            opts.append((unit, str(req.nodes)))
        elif (pe := self.pe(req)) is not None:
            opts.append(("pe", f"{pe} {slots}"))
        if conf.gpu_resource and req.gpus and not conf.node_resource:
            per_slot = math.ceil(req.gpus / max(req.scheduler_tasks_per_node, 1))
            opts.append((conf.gpu_resource, str(per_slot)))
        if walltime := req.walltime_for(batch=batch):
            opts.append(("h_rt", hh_mm_ss(walltime)))
        if batch:
            if conf.output:
                opts.append(("output", conf.output))
            if conf.join_output:
                opts.append(("join", "y"))
        written = {name for name, _ in opts}
        opts += [(n, v) for n, v in required_options(req, self.key_of(req.site))
                 if n not in written]
        return once(self.with_overrides(req, opts))

    def allocate_argv(self, req: JobRequest) -> list[str]:
        """``qrsh`` with the job's options: an interactive shell on the first host, with
        $PE_HOSTFILE naming them all."""
        return ["qrsh", *(w for n, v in self.options(req, batch=False)
                          for w in GRIDENGINE.argv(n, v))]

    def first_node(self, req: JobRequest) -> str:
        return Raw(f'"$({HOSTS} | sed -n 1p)"')

    def host_slots(self, req: JobRequest, slots: int, *, horovodrun: bool,
                   template: str | None) -> list[str]:
        return ["-H", slots_list(HOSTS, slots, template)]

    def job_id(self) -> str | None:
        return Raw('"$JOB_ID"')

    def per_node(self, req: JobRequest) -> PerNode:
        """One process on each host of the job, started by Grid Engine itself (``qrsh
        -inherit``, tight integration): torchrun's agents without an MPI launcher."""
        return PerNode(["hpcprov_qrsh_each"], [QRSH_EACH])

    def pin(self, nodes: str) -> dict[str, str] | None:
        """``-l hostname=a|b``: the job's slots on these hosts only."""
        return {"hostname": "|".join(n for n in nodes.split(",") if n)}

    def lint(self, req: JobRequest) -> list[Finding]:
        conf = self.section(req.site)
        found: list[Finding] = []
        if conf.require_h_rt and not req.walltime:
            found.append(Finding(
                "error", "no-h-rt", f"{req.site.name} refuses a job without -l h_rt (a "
                "time limit), and this one has none",
                f"pass -t/--time, or set partitions.{req.partition_name}.limits."
                "default_walltime in the profile"))
        if not conf.node_resource and self.pe(req) is None and req.nodes > 1:
            found.append(Finding(
                "error", "no-pe", f"a {req.nodes}-node job asks for its slots through a "
                "parallel environment, and the profile names none",
                "set gridengine.pe (qconf -spl lists them), or gridengine.node_resource "
                "where the site sizes jobs in node units"))
        if conf.pe_rule == "pe_slots" and req.nodes > 1 and not conf.node_resource:
            found.append(Finding(
                "error", "pe-one-host", f"the parallel environment ({self.pe(req)}) puts all "
                f"of a job's slots on one host: a {req.nodes}-node job cannot run in it",
                "use --nodes 1, or set gridengine.pe to a PE that spans hosts"))
        if (req.nodes > 1 and not conf.node_resource and not (conf.gpu_resource and req.gpus)
                and conf.pe_rule in ("fill_up", "round_robin")):
            found.append(Finding(
                "warning", "pe-placement", f"the parallel environment places the job's "
                f"{req.nodes * req.scheduler_tasks_per_node} slots by its allocation rule "
                f"(${conf.pe_rule}), not {req.scheduler_tasks_per_node} on each of "
                f"{req.nodes} hosts", "use a PE whose allocation_rule is the ranks per node "
                "(set gridengine.pe_rule: fixed), or ask for GPUs, which fix it"))
        own = {conf.gpu_resource} if conf.gpu_resource else set()
        for name, value in req.options.items():
            asked = [r for r in resources(name, value)
                     if re.fullmatch(r"(?i)n?gpus?|cuda|gpu_.*", r) and r not in own]
            if asked:
                found.append(Finding(
                    "warning", "gpu-resource", f"-l {asked[0]} is not the site's GPU "
                    f"resource ({conf.gpu_resource or 'none declared'}): Grid Engine refuses "
                    "a resource it does not define", "let hpcprov ask for GPUs "
                    "(-G/--gpus-per-node), or set gridengine.gpu_resource"))
        return found

    def executor(self, env: dict[str, str] | None = None) -> Executor:
        return GridEngineExecutor(env)


BACKEND = GridEngine()


def qstat_jobs(text: str) -> dict[str, tuple[str, list[str]]]:
    """``qstat -g t -u '*'``: each job's state and hosts (``queue@host`` of each of its
    lines; a pending job's lines name no queue)."""
    out: dict[str, tuple[str, list[str]]] = {}
    last: str | None = None
    for line in text.splitlines():
        words = line.split()
        if not words or words[0].startswith(("job-ID", "-")):
            continue
        if words[0].isdigit() and len(words) >= 5:
            last = words[0]
            state = words[4]
            hosts = out.get(last, (state, []))[1]
            out[last] = (state, hosts)
            rest = words[5:]
        elif last is not None:  # a continuation line: MASTER/SLAVE of the job above
            rest = words
        else:
            continue
        queue = next((w for w in rest if "@" in w), None)
        if queue and last is not None:
            host = queue.split("@", 1)[1].split(".")[0]
            if host not in out[last][1]:
                out[last][1].append(host)
    return out


def qacct_fields(text: str) -> dict[str, str]:
    """``qacct -j ID``: ``name value`` lines (the last record where a job id was reused)."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        if line.startswith("="):
            out = {}
            continue
        key, _, value = line.partition(" ")
        if key:
            out[key] = value.strip()
    return out


# queue instance states (qstat -f): u, the host's execd unheard for max_unheard (its node
# stopped answering); the others stop new jobs there (a alarm, d/D disabled, E error, s/S/C
# suspended, c configuration ambiguous, o orphaned); A (suspend alarm) lets jobs start
DEAD = "u"
CLOSED = set("uadDEsSCco")


def qstat_queues(text: str) -> dict[str, tuple[str, str]]:
    """``qstat -f``: each queue instance (``queue@host``) as (its host's short name, its
    states, e.g. ``au``; "" when it has none); job lines and the pending jobs left out."""
    out: dict[str, tuple[str, str]] = {}
    for line in text.splitlines():
        if line.startswith("#"):  # "###... PENDING JOBS": only jobs below
            break
        words = line.split()
        if len(words) < 5 or "@" not in words[0] or words[0].startswith("-"):
            continue
        # queuename qtype resv/used/tot. load_avg arch [states]: 8.1.9 and Univa;
        # SGE 6.x has no resv, the same column count
        host = words[0].split("@", 1)[1].split(".")[0]
        out[words[0]] = (host, words[5] if len(words) > 5 else "")
    return out


def shown_reason(text: str) -> str:
    """An error reason of ``qstat -j`` (``11/28/2026 14:02:11 [0:31373]: error: can't
    chdir to /x: No such file or directory``) without its date and ids, at most 300
    characters."""
    return re.sub(r"^.*?\]:\s*", "", text)[:300]


def qacct_hosts(text: str) -> list[str]:
    """The hosts of every record of ``qacct -j ID`` (a parallel job's tasks, where the PE
    writes a record per task), short names, in name order."""
    hosts = {line.split()[1].split(".")[0] for line in text.splitlines()
             if line.startswith("hostname") and len(line.split()) > 1}
    return sorted(hosts)


def exit_status(info: dict[str, str]) -> tuple[int | None, str]:
    """A finished job's status and why Grid Engine failed it (``failed`` non-zero: it
    never ran the script, or stopped it, e.g. ``100 : assumedly after job`` for a kill)."""
    failed = info.get("failed", "0")
    code = status_number(info.get("exit_status"))
    number = status_number(failed.split(":", 1)[0].strip())
    why = f"Grid Engine failed the job ({failed})" if number not in (None, 0) else ""
    return code, why


class GridEngineExecutor(Executor):
    """qsub -terse, then ``qstat -g t``; ``qacct -j`` (or the status file) once the job has
    left qstat. Every few seconds while jobs run, ``qstat -f``: a job on a host whose execd
    went unheard (state ``u``) is deleted and its node named (its other ranks would wait
    for it until h_rt)."""

    name = "gridengine"
    HEALTH_EVERY_S = 2.0  # how often the hosts of running jobs are asked after

    def __init__(self, env: dict[str, str] | None = None) -> None:
        super().__init__(env)
        self._health_at = 0.0

    def submit(self, script: Path, output: Path, exit_file: Path,
               place: Placement | None = None) -> Handle:
        # -wd: the job starts in the script's folder (the run's, on the shared scratch),
        # never in the submitter's, which may not exist on the nodes (a node-local /tmp):
        # Grid Engine would hold the job in error state Eqw ("can't chdir")
        proc = self._run(*GRIDENGINE.submit, *GRIDENGINE.argv("output", str(output)),
                         *GRIDENGINE.argv("join", "y"),
                         *GRIDENGINE.argv("wd", str(script.parent)), str(script))
        self._submitted(proc, "qsub", script)
        job = submitted_job_id(proc.stdout, JOB_ID, "qsub", script)
        return self._accepted(job, script, output, exit_file)

    def refresh(self, handles: list[Handle]) -> None:
        proc = self._run("qstat", "-g", "t", "-u", "*")
        if proc.returncode != 0:
            return  # the qmaster did not answer: asked again next turn
        jobs = qstat_jobs(proc.stdout)
        for h in handles:
            if h.job_id not in jobs:
                self._ended(h)
                continue
            state, hosts = jobs[h.job_id]
            if hosts:  # in name order (qstat lists the MASTER's host first)
                h.nodes = ",".join(sorted(hosts))
            if "E" in state:  # it never runs from there: deleted, failed with the reason
                why = self._error_reason(h.job_id)
                self.cancel(h)
                self._finished(h, None, f"Grid Engine held the job in error state {state}"
                               + (f": {why}" if why else ""), "")
            elif _RUNNING.match(state):
                self._started(h)
        running = [h for h in handles if not h.done and h.started is not None and h.nodes]
        now = time.monotonic()
        if running and now - self._health_at >= self.HEALTH_EVERY_S:
            self._health_at = now
            self._check_hosts(running)

    def _error_reason(self, job_id: str) -> str:
        """Why Grid Engine holds a job in error state (``qstat -j``'s error reason), bounded."""
        proc = self._run("qstat", "-j", job_id)
        found = [line.split(":", 1)[1].strip() for line in proc.stdout.splitlines()
                 if line.startswith("error reason") and ":" in line]
        return shown_reason(found[0]) if found else ""

    def _queues(self) -> dict[str, tuple[str, str]] | None:
        """``qstat -f``'s queue instances (None: the qmaster did not answer)."""
        proc = self._run("qstat", "-f")
        return qstat_queues(proc.stdout) if proc.returncode == 0 else None

    def _check_hosts(self, handles: list[Handle]) -> None:
        """A job on a host whose execd stopped reporting would hang until its h_rt (its
        other ranks wait for ever): delete it and name the host."""
        queues = self._queues() or {}
        dead = {host: states for host, states in queues.values() if DEAD in states}
        for h in handles:
            mine = {n: dead[n] for n in h.nodes.split(",") if n in dead}
            if mine:
                self._nodes_failed(h, mine, "Grid Engine queue state")

    def usable_nodes(self, partition: str, picks: dict[str, str | None] | None = None
                     ) -> list[str] | None:
        """The hosts of the cluster queue ``partition`` whose instance takes jobs (no state
        that closes it: unknown, alarm, disabled, error, suspended); None where the qmaster
        does not answer, the queue has no instance, or the partition is no queue."""
        if picks is not None:
            return None
        queues = self._queues()
        mine = {q: v for q, v in (queues or {}).items() if q.split("@", 1)[0] == partition}
        if not mine:
            return None
        return sorted({host for host, states in mine.values() if not CLOSED & set(states)})

    def _ended(self, h: Handle) -> None:
        proc = self._run("qacct", "-j", h.job_id)
        info = qacct_fields(proc.stdout) if proc.returncode == 0 else {}
        if not h.nodes:  # it ended between two polls: its hosts from its records
            h.nodes = ",".join(qacct_hosts(proc.stdout) if proc.returncode == 0 else [])
        code, why = exit_status(info)
        self._finished(h, code, why, "Grid Engine no longer knows the job, qacct has no "
                       "record of it, and it left no status file")

    def cancel(self, handle: Handle) -> None:
        self._run("qdel", handle.job_id)
