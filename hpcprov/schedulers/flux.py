"""Flux (flux-core): ``# flux:`` directives, ``flux batch``, ``flux alloc``, ``flux run``,
and flux jobs/cancel/resource.

Generated from flux-core's manual pages (flux-batch(1), flux-alloc(1), flux-run(1),
flux-jobs(1), flux-cancel(1), flux-resource(1), flux-hostlist(1), RFC 36's submission
directives) and verified against tests/flux_emulator.py, not against a real Flux system
(none can run here).

* Job options use hpcprov's generic (Slurm-style) names; those with a Flux spelling are
  translated (``job-name`` --job-name, ``account``/``bank`` --bank, ``partition``/``queue``
  -q, ``time`` -t as a Flux Standard Duration: ``60m``, ``2h``, ``90s``); any other name is
  passed as ``--NAME=VALUE`` (``-o setattr=system.exec.kill_timeout=60``).
* A batch job asks for ``-N NODES -n SLOTS`` (one slot per task), ``-c`` CPUs and ``-g``
  GPUs per slot, and ``--exclusive`` whole nodes (``flux.exclusive``); the script runs as the
  first task of a new Flux instance on those nodes, in the submission directory, and starts
  its ranks with ``flux run`` (the ``flux`` launcher kind, :mod:`hpcprov.jobs.launchers.flux`).
* ``flux batch`` typed inside a Flux job submits to that job's own instance (nested);
  ``flux --parent batch`` queues in the enclosing one. The executor chooses by the profile's
  ``flux.submit`` (auto: ``--parent`` where ``$FLUX_URI`` says it runs inside an instance).
* Job ids are F58 (``ƒ2X3uhMmq5``; ``f`` where the terminal has no UTF-8): both are read.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import TYPE_CHECKING

import hostlist

from hpcprov.core.errors import HpcprovError, UsageError
from hpcprov.core.findings import Finding
from hpcprov.core.shell import Raw
from hpcprov.core.text import status_number
from hpcprov.core.walltime import walltime_seconds
from hpcprov.request.job import JobRequest
from hpcprov.request.options import Option, short_name_findings
from hpcprov.schedulers.base import (
    Backend,
    Executor,
    Handle,
    PerNode,
    Placement,
    head_options,
    slots_list,
)
from hpcprov.schedulers.spelling import FLUX
from hpcprov.site.sections import FluxOptions

if TYPE_CHECKING:
    from hpcprov.site.types import Site

# flux batch's options that set the job's geometry (what hpcprov's own flags set)
GEOMETRY_OPTIONS = {
    "N": "nodes", "nodes": "nodes", "n": "tasks", "ntasks": "tasks", "nslots": "tasks",
    "tasks-per-node": "tasks", "c": "cpus", "cores-per-slot": "cpus", "cores": "cpus",
    "g": "gpus", "gpus-per-slot": "gpus", "gpus-per-node": "gpus", "t": "time",
    "time": "time", "time-limit": "time", "q": "queue", "queue": "queue",
    "partition": "queue",
}
# what the rank's tasks run on: every line of `flux hostlist -e` (space-separated) alone
HOSTS = "flux hostlist -e local | tr ' ' '\\n'"
# a job id as flux prints it: F58 (with ƒ or f), or decimal
JOB_ID = r"^(?:[ƒf][1-9A-HJ-NP-Za-km-z]{1,12}|[0-9]{1,20})$"
_FINISHED = {"INACTIVE"}
_RUNNING = {"RUN", "CLEANUP"}


def duration(walltime: str) -> str:
    """A [D-]HH:MM:SS limit as a Flux Standard Duration (``60m``, ``2h``, ``1d``, ``90s``)."""
    seconds = walltime_seconds(walltime)
    if seconds is None or seconds <= 0:
        raise UsageError(f"--time {walltime!r}: use HH:MM:SS or D-HH:MM:SS")
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds % size == 0:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def written(name: str, value: str | None) -> str | None:
    """A value in Flux's units: the time limit (``time``: -t) as a Flux Standard Duration."""
    return duration(value) if name in ("time", "time-limit") and value is not None else value


def words(name: str, value: str | None) -> list[str]:
    """One generic option as flux batch/alloc words: ``-N 2``, ``--job-name=x`` (Flux's
    spelling, :data:`FLUX`)."""
    return FLUX.argv(name, written(name, value))


def directive(name: str, value: str | None) -> str:
    """The text after ``# flux: `` for one option, quoted so that flux batch reads the words
    hpcprov means (RFC 36: :func:`hpcprov.schedulers.spelling.rfc36_word`, which refuses a
    line break and what is no UTF-8 text)."""
    return FLUX.text(name, written(name, value))


def job_ids(text: str) -> str | None:
    """The job id ``flux batch`` printed (its last line), or None."""
    last = text.strip().splitlines()[-1].strip() if text.strip() else ""
    return last if re.match(JOB_ID, last) else None


class Flux(Backend[FluxOptions]):
    name = "flux"
    title = "Flux"
    marker = "flux"
    discovery = "hpcprov.schedulers.discovery.flux"
    spelling = FLUX
    section_type = FluxOptions
    variable = re.compile(r"\$\{?FLUX_[A-Z_]+")
    variable_example = "$FLUX_JOB_ID"
    monitor = "flux jobs"

    task_starters = ("flux",)
    task_starter_name = "flux run"
    node_starter_name = "flux run"

    geometry_options = GEOMETRY_OPTIONS

    def _tasks(self, req: JobRequest) -> list[Option]:
        per_node = req.scheduler_tasks_per_node
        opts: list[Option] = [("nodes", str(req.nodes)), ("ntasks", str(per_node * req.nodes))]
        if req.job_cpus_per_task:
            opts.append(("cores-per-slot", str(req.job_cpus_per_task)))
        if req.gpus > 0 and req.gpus // per_node:
            opts.append(("gpus-per-slot", str(req.gpus // per_node)))
        if self.section(req.site).exclusive:
            opts.append(("exclusive", None))
        return opts

    def options(self, req: JobRequest, *, batch: bool) -> list[Option]:
        conf = self.section(req.site)
        opts = head_options(req, batch=batch, queue="queue", key=self.key_of(req.site))
        opts += self._tasks(req)
        if batch:
            opts.append(("output", conf.output))
            if conf.error:
                opts.append(("error", conf.error))
        return self.with_overrides(req, opts)

    def written(self, name: str, value: str | None) -> str | None:
        return written(name, value)

    def allocate_argv(self, req: JobRequest) -> list[str]:
        return ["flux", "alloc", *(w for n, v in self.options(req, batch=False)
                                   for w in words(n, v))]

    def first_node(self, req: JobRequest) -> str:
        return Raw('"$(flux hostlist -n 0 local)"')

    def host_slots(self, req: JobRequest, slots: int, *, horovodrun: bool,
                   template: str | None) -> list[str]:
        return ["-H", slots_list(HOSTS, slots, template)]

    def job_id(self) -> str | None:
        return Raw('"$FLUX_JOB_ID"')

    def tasks(self, req: JobRequest, *, allocation: bool) -> PerNode:
        """``flux run`` with the job's nodes and tasks, CPUs and GPUs per task, and the GPU
        affinity. Inside a Flux job it starts tasks in that job's instance and always
        carries the geometry (without it, one task runs): ``-N NODES -n TASKS``, ``-c``
        CPUs and ``-g`` GPUs per task. Every task sees all of its node's GPUs of the job
        unless ``-o gpu-affinity=per-task`` gives each its own (the launcher's
        ``per_rank: one``, else the partition's ``gpus.per_rank: one``)."""
        argv = ["flux", "run", "-N", str(req.nodes), "-n", str(req.world_size)]
        if req.task_cpus:
            argv += ["-c", str(req.task_cpus)]
        per_task = req.gpus // req.ranks_per_node if req.gpus > 0 else 0
        if per_task:
            argv += ["-g", str(per_task)]
        if req.gpus > 0 and req.site.per_rank(req.launcher_name, req.partition_name) == "one":
            argv += ["-o", "gpu-affinity=per-task"]
        return PerNode(argv)

    def per_node(self, req: JobRequest) -> PerNode:
        """``flux run -N NODES -n NODES``: one task on each node of the job, with the node's
        GPUs of the job (``-g``: a task given none sees none) and its CPUs (``-c``, else
        ``-o cpu-affinity=off``: the job shell would bind the task, and every process it
        spawns, to the one core a task gets by default)."""
        argv = ["flux", "run", "-N", str(req.nodes), "-n", str(req.nodes)]
        argv += ["-c", str(req.task_cpus)] if req.task_cpus else ["-o", "cpu-affinity=off"]
        if req.gpus > 0:
            argv += ["-g", str(req.gpus)]
        return PerNode(argv)

    def pin(self, nodes: str) -> dict[str, str] | None:
        """``--requires=host:LIST`` (a constraint on the hosts, RFC 31)."""
        return {"requires": "host:" + hostlist.collect_hostlist(nodes.split(","))}

    def lint(self, req: JobRequest) -> list[Finding]:
        found = short_name_findings(req, FLUX.short, directive)
        tasks = req.scheduler_tasks_per_node
        if req.gpus > 0 and req.gpus % tasks:
            found.append(Finding("error", "flux-gpus-per-slot",
                                 f"{req.gpus} GPU(s) per node do not divide among {tasks} "
                                 "task(s) per node (Flux asks for GPUs per slot: -g)",
                                 "ask for a multiple of the tasks per node (-G), or one task "
                                 "per GPU (--tasks-per-node)"))
        return found

    def executor(self, env: dict[str, str] | None = None) -> Executor:
        return FluxExecutor(env)

    def site_executor(self, site: Site, env: dict[str, str] | None = None) -> Executor:
        return FluxExecutor(env, self.section(site).submit)


BACKEND = Flux()


def job_fields(line: str) -> dict[str, str]:
    """One ``flux jobs -n -o FORMAT`` line (:attr:`FluxExecutor.FORMAT`)."""
    keys = ("id", "state", "result", "returncode", "nodelist")
    values = line.strip().split("|")
    return dict(zip(keys, values, strict=True)) if len(values) == len(keys) else {}


def nodelist(text: str) -> str:
    """A Flux node list (``node[1-2],gpu3``) as ``node1,node2,gpu3``; as given where it is
    no host list."""
    try:
        return ",".join(hostlist.expand_hostlist(text))
    except hostlist.BadHostlist:
        return text


class FluxExecutor(Executor):
    """flux batch, then ``flux jobs`` (it lists inactive jobs until they are purged); the
    status file answers once the instance has purged the job."""

    name = "flux"
    FORMAT = "{id.f58}|{state}|{result}|{returncode}|{nodelist}"

    def __init__(self, env: dict[str, str] | None = None, submit: str = "auto") -> None:
        super().__init__(env)
        self.submit_to = submit

    def parent(self) -> bool:
        """Submit with ``flux --parent``: told so, or (auto) inside a Flux instance."""
        if self.submit_to != "auto":
            return self.submit_to == "parent"
        return bool((self.env if self.env is not None else os.environ).get("FLUX_URI"))

    def submit(self, script: Path, output: Path, exit_file: Path,
               place: Placement | None = None) -> Handle:
        flux = self._flux()
        proc = self._run(*flux, *FLUX.submit[1:], *FLUX.argv("output", str(output)),
                         *FLUX.argv("error", str(output)), str(script))
        self._submitted(proc, " ".join([*flux, "batch"]), script)
        job = job_ids(proc.stdout)
        if job is None:
            raise HpcprovError(f"flux batch gave no job id for {script.name}: "
                               f"{proc.stdout.strip()[:200]}")
        return self._accepted(job, script, output, exit_file)

    def _flux(self) -> list[str]:
        return ["flux", "--parent"] if self.parent() else ["flux"]

    def refresh(self, handles: list[Handle]) -> None:
        for h in handles:
            proc = self._run(*self._flux(), "jobs", "-n", "-o", self.FORMAT, h.job_id)
            info = job_fields(proc.stdout) if proc.returncode == 0 else {}
            if info.get("nodelist"):
                h.nodes = nodelist(info["nodelist"])
            state = info.get("state", "")
            if not info or state in _FINISHED:
                self._ended(h, info)
            elif state in _RUNNING:
                self._started(h)

    def _ended(self, h: Handle, info: dict[str, str]) -> None:
        """The job's returncode: its highest task status (128 + N for a task killed by
        signal N); negative where the job shell never ran its tasks (-128: cancelled
        before it started), which is no status of the script."""
        code = status_number(info.get("returncode"))
        why = ""
        if code is not None and code < 0:
            why = (f"Flux ended the job before its tasks ran ({info.get('result') or '?'}, "
                   f"returncode {code})")
            code = None
        self._finished(h, code, why, "Flux no longer knows the job and it left no "
                       "status file")

    def cancel(self, handle: Handle) -> None:
        self._run(*self._flux(), "cancel", handle.job_id)

    def usable_nodes(self, partition: str, picks: dict[str, str | None] | None = None
                     ) -> list[str] | None:
        """The queue's nodes that are up (``flux resource list -s up -q QUEUE``); None where
        it does not answer (an instance without that queue, an old Flux)."""
        if picks is not None:
            return None
        proc = self._run(*self._flux(), "resource", "list", "-s", "up", "-q", partition,
                         "-n", "-o", "{nodelist}")
        if proc.returncode != 0:
            return None
        found: list[str] = []
        for line in proc.stdout.split():
            found += nodelist(line).split(",") if line else []
        return sorted(dict.fromkeys(n for n in found if n))
