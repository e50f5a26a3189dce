"""Slurm: ``#SBATCH`` directives, ``salloc``, ``srun``, and sbatch/scontrol/sacct/sinfo.

A job's exit status comes from ``scontrol show job -o`` while the controller knows the job,
then from ``sacct``, else from the status file the job script's EXIT trap wrote.
"""

from __future__ import annotations

import re
import shlex
import shutil
import time
from pathlib import Path
from typing import Literal

import hostlist

from hpcprov.findings import Finding
from hpcprov.job import JobRequest
from hpcprov.options import Option, override, required_options, short_name_findings
from hpcprov.schedulers.base import (
    Backend,
    Executor,
    Handle,
    PerNode,
    Setting,
    final_state,
    read_exit,
    slots_list,
)
from hpcprov.shell import Raw

NODES = '"$SLURM_JOB_NODELIST"'
HOSTNAMES = f"scontrol show hostnames {NODES}"
TERMINAL = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "PREEMPTED",
            "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE"}


def flag(name: str, value: str | None) -> str:
    """``--name=value`` (or ``--name``) as one argv item."""
    return f"--{name}" if value is None else f"--{name}={value}"


# sbatch's one-letter options and their long names (job options are written --NAME=VALUE)
SHORT_NAMES = {
    "A": "account", "b": "begin", "C": "constraint", "c": "cpus-per-task", "D": "chdir",
    "d": "dependency", "e": "error", "G": "gpus", "H": "hold", "i": "input", "J": "job-name",
    "k": "no-kill", "L": "licenses", "M": "clusters", "m": "distribution", "N": "nodes",
    "n": "ntasks", "O": "overcommit", "o": "output", "p": "partition", "q": "qos",
    "Q": "quiet", "S": "core-spec", "s": "oversubscribe", "t": "time", "W": "wait",
    "w": "nodelist", "x": "exclude",
}
# job options that srun steps must be given again to bind their tasks as the job does
STEP_OPTIONS = ("cpu-bind", "gpu-bind")
SRUN_FORGETS_CPUS = (22, 5)  # from Slurm 22.05 srun no longer inherits --cpus-per-task
_VERSION = re.compile(r"^(\d+)\.(\d+)(\.\d+)?$")


def check_version(text: str | None) -> None:
    """Refuse a Slurm version that is not MAJOR.MINOR[.PATCH] (as sinfo --version says)."""
    if text is not None and not _VERSION.match(text):
        raise ValueError(f"{text!r} is not a Slurm version: write it as sinfo --version "
                         "prints it, e.g. '23.02' or '23.02.7' (quoted)")


def srun_forgets_cpus(version: str | None) -> bool:
    """True when srun steps do not inherit the job's --cpus-per-task (Slurm 22.05 and
    later, and an unknown version, taken as a recent one)."""
    m = _VERSION.match(version or "")
    return m is None or (int(m.group(1)), int(m.group(2))) >= SRUN_FORGETS_CPUS


def _directive_value(text: str) -> str:
    """Directive lines are read by sbatch, not bash: quote only when needed."""
    return text if shlex.quote(text) == text else shlex.quote(text)


class Slurm(Backend):
    name = "slurm"
    title = "Slurm"
    settings = {
        "gpu_request": Setting(Literal["gres", "gpus_per_node", "gpus"], "gres",
                               "--gres=gpu:N per node, --gpus-per-node=N, or --gpus=total"),
        "task_request": Setting(Literal["per_node", "total"], "per_node",
                                "--ntasks-per-node or --ntasks"),
        "output": Setting(str, "%x_%j.out", "--output pattern of batch jobs"),
        "error": Setting(str | None, "%x_%j.err", "--error pattern (null: with the output)"),
        "shell": Setting(str, "/bin/bash -l", "interpreter line of job scripts"),
        "version": Setting(str | None, None,
                           "the cluster's Slurm version, e.g. '23.02' (sinfo --version): from "
                           "22.05 srun steps do not inherit --cpus-per-task, so hpcprov "
                           "exports SRUN_CPUS_PER_TASK before them (null: taken as 22.05 or "
                           "later)", check=check_version),
    }
    variable = re.compile(r"\$\{?SLURM_[A-Z_]+")
    variable_example = "$SLURM_JOB_NODELIST"
    monitor = "squeue -u $USER"
    starts_tasks = True

    def gpu_request(self, req: JobRequest) -> list[Option]:
        """The GPU request in the site's preferred form."""
        gpus = req.gpus
        if gpus <= 0:
            return []
        label = req.part.gpus.type
        typed = f"{label}:{gpus}" if label else str(gpus)
        style = self.section(req.site).gpu_request
        if style == "gres":
            return [("gres", f"gpu:{typed}")]
        if style == "gpus_per_node":
            return [("gpus-per-node", typed)]
        total = gpus * req.nodes
        return [("gpus", f"{label}:{total}" if label else str(total))]

    def _tasks(self, req: JobRequest) -> list[Option]:
        """The task geometry, the same for a batch job and an interactive allocation."""
        if self.section(req.site).task_request == "per_node":
            return [("nodes", str(req.nodes)),
                    ("ntasks-per-node", str(req.scheduler_tasks_per_node))]
        opts = [("nodes", str(req.nodes))] if req.nodes > 1 or "nodes" in req.options else []
        return [*opts, ("ntasks", str(req.scheduler_tasks_per_node * req.nodes))]

    def options(self, req: JobRequest, *, batch: bool) -> list[Option]:
        conf = self.section(req.site)
        opts: list[Option] = [("job-name", req.job_name or ("hpcprov" if batch else
                                                             "interactive"))]
        if req.walltime:
            opts.append(("time", req.walltime))
        opts += required_options(req)
        if req.part.routing == "partition":
            opts.append(("partition", req.partition_name))
        opts += self._tasks(req)
        cpt = req.job_cpus_per_task
        if cpt:
            opts.append(("cpus-per-task", str(cpt)))
        if batch:
            opts.append(("output", conf.output))
            if conf.error:
                opts.append(("error", conf.error))
        opts += self.gpu_request(req)
        opts += list(req.part.options.items())
        return override(opts, req.options)

    def directives(self, req: JobRequest) -> list[str]:
        return ["#SBATCH " + _directive_value(flag(n, v))
                for n, v in self.options(req, batch=True)]

    def shell(self, req: JobRequest) -> str:
        return str(self.section(req.site).shell)

    def submit_argv(self, script: str) -> list[str]:
        return ["sbatch", script]

    def allocate_argv(self, req: JobRequest) -> list[str]:
        return ["salloc", *(flag(n, v) for n, v in self.options(req, batch=False))]

    def first_node(self, req: JobRequest) -> str:
        # sed reads the whole list: `| head -n 1` would end scontrol with SIGPIPE on a long
        # list, and `set -o pipefail` would then fail the job script
        return Raw(f'"$({HOSTNAMES} | sed -n 1p)"')

    def host_slots(self, req: JobRequest, slots: int, *, horovodrun: bool) -> list[str]:
        return ["-H", slots_list(HOSTNAMES, slots, req.host_name)]

    def job_id(self) -> str | None:
        return Raw('"$SLURM_JOB_ID"')

    def per_node(self, req: JobRequest) -> PerNode | None:
        return PerNode(["srun", "--ntasks-per-node=1", f"--ntasks={req.nodes}"])

    def task_step(self, req: JobRequest, cpus: int | None) -> PerNode:
        """The job's --cpu-bind/--gpu-bind on every srun, and SRUN_CPUS_PER_TASK where
        srun no longer inherits --cpus-per-task (Slurm 22.05 and later)."""
        words = [flag(n, v) for n, v in self.options(req, batch=True) if n in STEP_OPTIONS]
        setup = []
        if cpus and srun_forgets_cpus(self.section(req.site).version):
            setup.append(f"export SRUN_CPUS_PER_TASK={int(cpus)}")
        return PerNode(words, setup)

    def daemon_setup(self, req: JobRequest) -> list[str]:
        """mpirun starts one daemon per node with srun: SRUN_CPUS_PER_TASK (exported for an
        srun line typed before, or by the user) would hold each to that many CPUs."""
        if srun_forgets_cpus(self.section(req.site).version):
            return ["unset SRUN_CPUS_PER_TASK"]
        return []

    def pin(self, nodes: str) -> dict[str, str] | None:
        return {"nodelist": nodes}

    def lint(self, req: JobRequest) -> list[Finding]:
        return short_name_findings(req, SHORT_NAMES, flag)

    def executor(self, env: dict[str, str] | None = None) -> Executor:
        return SlurmExecutor(env)


BACKEND = Slurm()


class SlurmExecutor(Executor):
    """sbatch, then scontrol; sacct or the status file once the controller forgot a job."""

    name = "slurm"
    HEALTH_EVERY_S = 2.0  # how often the nodes of running jobs are asked after

    def __init__(self, env: dict[str, str] | None = None) -> None:
        super().__init__(env)
        self._health_at = 0.0

    def submit(self, script: Path, output: Path, exit_file: Path) -> Handle:
        proc = self._run("sbatch", "--parsable", f"--output={output}", f"--error={output}",
                         str(script))
        self._submitted(proc, "sbatch", script)
        h = Handle(proc.stdout.strip().split(";")[0], script, output, exit_file,
                   time.monotonic())
        self._event(h, "submitted")
        return h

    def refresh(self, handles: list[Handle]) -> None:
        for h in handles:
            self._refresh_job(h)
        running = [h for h in handles if not h.done and h.state == "RUNNING" and h.nodes]
        now = time.monotonic()
        if running and now - self._health_at >= self.HEALTH_EVERY_S:
            self._health_at = now
            self._check_nodes(running)

    def _check_nodes(self, handles: list[Handle]) -> None:
        """A job on a node that stopped answering would hang until its time limit (its
        other ranks wait for ever): cancel it and name the node."""
        nodes = ",".join(sorted({h.nodes for h in handles}))
        dead = {n: st for n, st in node_states(nodes, self.env).items() if _dead(st)}
        if not dead:
            return
        for h in handles:
            mine = [n for n in hostlist.expand_hostlist(h.nodes) if n in dead]
            if mine:
                self.cancel(h)
                h.state, h.exit_code, h.ended = "NODE_FAIL", None, time.monotonic()
                h.bad_nodes = ",".join(mine)
                h.reason = "node " + ", ".join(f"{n} stopped answering (Slurm state "
                                               f"{dead[n]})" for n in mine)
                self._event(h, "cancelled: " + h.reason)

    def usable_nodes(self, partition: str) -> list[str] | None:
        return partition_nodes(partition, self.env)

    def _refresh_job(self, h: Handle) -> None:
        proc = self._run("scontrol", "show", "job", "-o", h.job_id)
        info = dict(re.findall(r"(\w+)=(\S*)", proc.stdout)) if proc.returncode == 0 else {}
        if not info:
            self._forgotten(h)
            return
        state = info.get("JobState", "UNKNOWN")
        if state != h.state:
            h.state = state
            self._event(h, "state")
        if state == "RUNNING" and h.started is None:
            h.started = time.monotonic()
        if info.get("NodeList") not in (None, "(null)"):
            h.nodes = info["NodeList"]
        h.reason = info.get("Reason", "") if info.get("Reason") != "None" else ""
        if state in TERMINAL:
            h.exit_code = exit_code(info.get("ExitCode", ""))
            if h.exit_code is None:
                h.exit_code = read_exit(h.exit_file)
            h.ended = time.monotonic()

    def _forgotten(self, h: Handle) -> None:
        """The controller purged the job: ask accounting, else read the status file."""
        if shutil.which("sacct"):
            proc = self._run("sacct", "-n", "-X", "-P", "-j", h.job_id, "-o",
                             "State,ExitCode,NodeList")
            fields = proc.stdout.strip().split("|") if proc.returncode == 0 else []
            if len(fields) >= 2 and fields[0]:
                h.state = fields[0].split()[0]
                h.exit_code = exit_code(fields[1])
                h.nodes = fields[2] if len(fields) > 2 else h.nodes
                h.ended = time.monotonic()
                return
        h.exit_code = read_exit(h.exit_file)
        h.state = final_state(h.exit_code)
        h.reason = "the controller forgot the job and accounting is unavailable" \
            if h.exit_code is None else ""
        h.ended = time.monotonic()

    def cancel(self, handle: Handle) -> None:
        self._run("scancel", handle.job_id)


def exit_code(text: str) -> int | None:
    """Slurm's ``RC:SIGNAL`` as a shell-style status (128 + signal when killed)."""
    m = re.match(r"(\d+):(\d+)", text or "")
    if not m:
        return None
    rc, sig = int(m.group(1)), int(m.group(2))
    return rc if sig == 0 else 128 + sig


def _dead(state: str) -> bool:
    """A short node state (sinfo %t) of a node that stopped: down, or not responding (*)."""
    return state.endswith("*") or state.startswith("down")


def _unusable(state: str) -> bool:
    """A state in which a node takes no new jobs (dead, drained, failing, booting...)."""
    return _dead(state) or state.startswith(("drain", "drng", "fail", "boot", "unk", "npc",
                                             "futr", "maint", "resv", "inval"))


def _sinfo_states(select: list[str], env: dict[str, str] | None) -> dict[str, str]:
    """node -> short state (sinfo %t) of the nodes ``select`` picks (-n LIST or -p PART)."""
    proc = Executor(env)._run("sinfo", "-h", "-N", *select, "-o", "%N %t")
    return {name: state.strip() for line in proc.stdout.splitlines()
            for name, _, state in [line.partition(" ")] if name and state}


def node_states(nodes: str, env: dict[str, str] | None = None) -> dict[str, str]:
    """node -> short state (sinfo %t) for a node list such as gpu[01-02]."""
    return _sinfo_states(["-n", nodes], env)


def partition_nodes(partition: str, env: dict[str, str] | None = None) -> list[str]:
    """The nodes of a Slurm partition that can take jobs now (sinfo)."""
    return sorted(n for n, st in _sinfo_states(["-p", partition], env).items()
                  if not _unusable(st))
