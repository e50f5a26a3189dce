"""IBM Spectrum LSF: ``#BSUB`` directives, ``bsub -Is``, ``$LSB_DJOB_HOSTFILE``, and
bsub/bjobs/bkill.

Generated from IBM's LSF 10.1 command reference (bsub, bjobs -o, bkill, blaunch) and
verified against tests/lsf_emulator.py, not against a real LSF cluster (none can run here).

* Job options use hpcprov's generic (Slurm-style) names; those with an LSF spelling are
  translated (``job-name`` -J, ``account`` -P, ``partition``/``queue`` -q, ``time`` -W in
  minutes, ``ntasks`` -n, ``nodes`` -nnodes, ``resource`` -R, ``exclusive`` -x ...); any
  other name is passed as ``-NAME VALUE``: bsub's own flags as LSF spells them
  (``-o G=bank``, ``-o alloc_flags=smt4``, ``-o core_isolation=2``). Names of one flag are
  one option (``account``, ``project`` and ``P``: forbidding one forbids them all).
* ``task_request: slots`` asks for ``-n TOTAL -R "span[ptile=PER_NODE]"``; ``nnodes``
  asks for whole nodes (``-nnodes N``) as IBM CSM/jsrun systems want.
* ``$LSB_DJOB_HOSTFILE`` lists one line per slot. On CSM systems its first line is the
  launch (batch) node, which runs no ranks: ``launch_node_in_hostfile: true`` skips it.
* A job script is submitted as ``bsub < SCRIPT``: bsub reads ``#BSUB`` lines from stdin.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

from hpcprov.core.errors import HpcprovError, UsageError
from hpcprov.core.findings import Finding
from hpcprov.core.shell import Raw, Template
from hpcprov.core.text import status_number
from hpcprov.core.walltime import walltime_seconds
from hpcprov.request.job import JobRequest
from hpcprov.request.options import Option
from hpcprov.schedulers.base import (
    Backend,
    Executor,
    Handle,
    PerNode,
    Placement,
    head_options,
    slots_list,
)
from hpcprov.schedulers.spelling import LSF
from hpcprov.site.launcher_kinds import horovod_controller, kind_of
from hpcprov.site.sections import LsfOptions

# bsub's options that set the job's geometry (what hpcprov's own flags set), and the
# generic names hpcprov writes them from
GEOMETRY_OPTIONS = {
    "n": "tasks", "ntasks": "tasks", "nnodes": "nodes", "nodes": "nodes",
    "W": "time", "time": "time", "gpu": "gpus",
    "q": "queue", "queue": "queue", "partition": "queue",
}
# a resource requirement (-R) that places tasks on nodes or asks for GPUs
_TASKS_RESOURCE = r"span\[|ptile"
_GPU_RESOURCE = r"(?i)ngpus|rusage\[[^]]*gpu"
_FINISHED = {"DONE", "EXIT"}
_RUNNING = {"RUN", "USUSP", "SSUSP"}


def minutes(walltime: str) -> str:
    """A [D-]HH:MM:SS limit as LSF's ``-W [HOURS:]MINUTES`` (rounded up to a minute)."""
    seconds = walltime_seconds(walltime)
    if seconds is None:
        raise UsageError(f"--time {walltime!r}: use HH:MM:SS or D-HH:MM:SS")
    total = math.ceil(seconds / 60)
    return f"{total // 60}:{total % 60:02d}"


def written(name: str, value: str | None) -> str | None:
    """A value in LSF's units: the time limit (``time``: -W) in minutes."""
    return minutes(value) if name == "time" and value is not None else value


def directive(name: str, value: str | None) -> str:
    """The text after ``#BSUB `` for one generic option (values with brackets or spaces,
    such as ``span[ptile=4]``, in double quotes as LSF's documentation writes them: LSF's
    spelling, :data:`LSF`)."""
    return LSF.text(name, written(name, value))


def argv_words(name: str, value: str | None) -> list[str]:
    """One option as bsub command-line words (for ``bsub -Is``)."""
    return LSF.argv(name, written(name, value))


class Lsf(Backend[LsfOptions]):
    name = "lsf"
    title = "LSF"
    marker = "bqueues"
    discovery = "hpcprov.schedulers.discovery.lsf"
    spelling = LSF
    section_type = LsfOptions
    # Horovod (0.28.1, runner/driver/driver_service.py) skips finding the hosts' network
    # interfaces when it sees LSF (LSB_JOBID) and its Gloo launcher then fails; under LSF
    # horovodrun starts ranks with jsrun (CSM systems) or mpirun instead
    horovodrun_gloo = False
    variable = re.compile(r"\$\{?LSB_[A-Z_]+")
    variable_example = "$LSB_DJOB_HOSTFILE"
    monitor = "bjobs"

    geometry_options = GEOMETRY_OPTIONS

    def geometry_of(self, req: JobRequest, name: str, value: str | None) -> str | None:
        """As the base, and a resource requirement (-R) that places the tasks on nodes or
        asks for GPUs (``-o R=span[ptile=1]``), or would replace the ``resource`` the job's
        tasks are placed with (``task_request: slots``; ``-o R=...`` is written beside it)."""
        kind = super().geometry_of(req, name, value)
        if kind is not None or name not in ("R", "resource"):
            return kind
        if re.search(_TASKS_RESOURCE, value or ""):
            return "tasks"
        if re.search(_GPU_RESOURCE, value or ""):
            return "gpus"
        return "tasks" if any(n == name for n, _ in self._tasks(req)) else None

    def _tasks(self, req: JobRequest) -> list[Option]:
        if self.section(req.site).task_request == "nnodes":
            return [("nodes", str(req.nodes))]
        per_node = req.scheduler_tasks_per_node
        return [("ntasks", str(per_node * req.nodes)), ("resource", f"span[ptile={per_node}]")]

    def options(self, req: JobRequest, *, batch: bool) -> list[Option]:
        conf = self.section(req.site)
        opts = head_options(req, batch=batch, queue="queue", key=self.key_of(req.site))
        opts += self._tasks(req)
        if req.gpus > 0 and conf.gpu_request == "gpu":
            opts.append(("gpu", f"num={req.gpus}"))
        if batch:
            opts.append(("output", conf.output))
            if conf.error:
                opts.append(("error", conf.error))
        return self.with_overrides(req, opts)

    def written(self, name: str, value: str | None) -> str | None:
        return written(name, value)

    def prolog(self, req: JobRequest) -> list[str]:
        return ['cd "$LS_SUBCWD"']

    def allocate_argv(self, req: JobRequest) -> list[str]:
        words = [w for n, v in self.options(req, batch=False) for w in argv_words(n, v)]
        return ["bsub", "-Is", *words, self.shell(req)]

    def _hosts(self, req: JobRequest) -> str:
        """Shell text printing the job's hosts once each, in order."""
        skip = "NR > 1 && " if self.section(req.site).launch_node_in_hostfile else ""
        return f"awk '{skip}!seen[$0]++' \"$LSB_DJOB_HOSTFILE\""

    def first_node(self, req: JobRequest) -> str:
        """awk stops at the node itself (no pipe that a long host file could break)."""
        skip = "NR > 1 " if self.section(req.site).launch_node_in_hostfile else ""
        return Raw(f"\"$(awk '{skip}{{print; exit}}' \"$LSB_DJOB_HOSTFILE\")\"")

    def host_slots(self, req: JobRequest, slots: int, *, horovodrun: bool,
                   template: str | None) -> list[str]:
        if horovodrun or template or self.section(req.site).launch_node_in_hostfile:
            return ["-H", slots_list(self._hosts(req), slots, template)]
        return ["--hostfile", Template("$LSB_DJOB_HOSTFILE")]

    def job_id(self) -> str | None:
        return Raw('"$LSB_JOBID"')

    node_starter_name = "blaunch"

    def per_node(self, req: JobRequest) -> PerNode:
        """``blaunch -u FILE`` runs the command once per line of FILE: the job's hosts."""
        setup = ['hpcprov_hosts="$(mktemp)"', f'{self._hosts(req)} > "$hpcprov_hosts"']
        return PerNode(["blaunch", "-u", Raw('"$hpcprov_hosts"')], setup)

    def pin(self, nodes: str) -> dict[str, str] | None:
        return {"m": " ".join(nodes.split(","))}

    def lint(self, req: JobRequest) -> list[Finding]:
        launcher = req.launch
        if (kind_of(launcher.kind).horovod == "controller" and horovod_controller(
                launcher.controller, req.site.horovod.controllers) == "gloo"):
            how = ("its controller is gloo" if launcher.controller else "the site's Horovod "
                   "has no MPI controller, so horovodrun runs Gloo")
            return [Finding("error", "lsf-horovod-gloo",
                            f"horovodrun over Gloo fails under LSF ({how}): Horovod skips "
                            "finding the hosts' network interfaces there",
                            f"set 'controller: mpi' on launcher {req.launcher_name} (horovodrun "
                            "then uses jsrun or mpirun), or use an mpirun launcher")]
        return []

    def executor(self, env: dict[str, str] | None = None) -> Executor:
        return LsfExecutor(env)


BACKEND = Lsf()


def job_fields(line: str) -> dict[str, str]:
    """One ``bjobs -noheader -o "jobid stat exit_code exec_host delimiter='|'"`` line."""
    keys = ("jobid", "stat", "exit_code", "exec_host")
    values = line.strip().split("|")
    return dict(zip(keys, values, strict=True)) if len(values) == len(keys) else {}


def exec_hosts(text: str) -> str:
    """``4*hostA:4*hostB`` (bjobs EXEC_HOST) as ``hostA,hostB``."""
    hosts = [part.split("*", 1)[-1] for part in text.split(":") if part and part != "-"]
    return ",".join(dict.fromkeys(hosts))


class LsfExecutor(Executor):
    """bsub < SCRIPT, then ``bjobs -o``; the status file answers once LSF has cleaned the
    job from its memory (CLEAN_PERIOD, one hour by default)."""

    name = "lsf"
    FORMAT = "jobid stat exit_code exec_host delimiter='|'"

    def submit(self, script: Path, output: Path, exit_file: Path,
               place: Placement | None = None) -> Handle:
        proc = self._run(*LSF.submit, *LSF.argv("output", str(output)),
                         *LSF.argv("error", str(output)), stdin=script)
        self._submitted(proc, "bsub", script)
        m = re.search(r"Job <(\d+)>", proc.stdout)
        if not m:
            raise HpcprovError(f"bsub gave no job id for {script.name}: {proc.stdout.strip()}")
        return self._accepted(m.group(1), script, output, exit_file)

    def refresh(self, handles: list[Handle]) -> None:
        for h in handles:
            proc = self._run("bjobs", "-noheader", "-o", self.FORMAT, h.job_id)
            info = job_fields(proc.stdout) if proc.returncode == 0 else {}
            state = info.get("stat", "")
            if info.get("exec_host", "-") not in ("", "-"):
                h.nodes = exec_hosts(info["exec_host"])
            if not info or state in _FINISHED:
                self._ended(h, info)
            elif state in _RUNNING:
                self._started(h)

    def _ended(self, h: Handle, info: dict[str, str]) -> None:
        code: int | None = None
        if info.get("stat") == "DONE":
            code = 0
        elif (status := status_number(info.get("exit_code"))) is not None and status >= 0:
            code = status
        self._finished(h, code, "", "LSF no longer knows the job and it left no status file")

    def cancel(self, handle: Handle) -> None:
        self._run("bkill", handle.job_id)
