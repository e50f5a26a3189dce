"""Slurm: ``#SBATCH`` directives, ``salloc``, ``srun``, and sbatch/scontrol/sacct/sinfo.

A job's exit status comes from ``scontrol show job -o`` while the controller knows the job,
then from ``sacct``, else from the status file the job script's EXIT trap wrote.
"""

from __future__ import annotations

import re
import shutil
import time
from collections.abc import Callable
from pathlib import Path

import hostlist

from hpcprov.core.findings import Finding
from hpcprov.core.shell import Raw
from hpcprov.request.job import JobRequest
from hpcprov.request.options import Option, short_name_findings
from hpcprov.schedulers.base import (
    Backend,
    Executor,
    Handle,
    PerNode,
    Placement,
    Steps,
    final_state,
    head_options,
    read_exit,
    slots_list,
    submitted_job_id,
)
from hpcprov.schedulers.spelling import SLURM
from hpcprov.site.sections import SLURM_VERSION, SlurmOptions

NODES = '"$SLURM_JOB_NODELIST"'
HOSTNAMES = f"scontrol show hostnames {NODES}"
# what `sbatch --parsable` prints: the job id, and the cluster's name where there are
# several ("JOBID;CLUSTER"); an array or heterogeneous job is named by its first id too
PARSABLE_ID = r"([0-9]{1,20})(?:;[A-Za-z0-9_.-]{1,64})?"
TERMINAL = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "PREEMPTED",
            "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE"}


def flag(name: str, value: str | None) -> str:
    """``--name=value`` (or ``--name``) as one argv item (Slurm's spelling, :data:`SLURM`)."""
    return " ".join(SLURM.argv(name, value))


# sbatch's options that set the job's geometry (what hpcprov's own flags set), long and
# short; sbatch also takes any unambiguous start of a long name (--node=4 is --nodes=4)
GEOMETRY_OPTIONS = {
    "nodes": "nodes", "N": "nodes",
    "ntasks": "tasks", "n": "tasks", "ntasks-per-node": "tasks", "tasks-per-node": "tasks",
    "ntasks-per-gpu": "tasks",
    "gpus": "gpus", "G": "gpus", "gpus-per-node": "gpus", "gpus-per-task": "gpus",
    "gpus-per-socket": "gpus",
    "time": "time", "t": "time",
    "partition": "queue", "p": "queue",
}
# generic resources, which set the job's GPUs where they ask for gpu (--gres=gpu:4,
# --tres-per-task=gres/gpu:1)
GENERIC_RESOURCES = ("gres", "tres-per-task")
# a --cpu-bind listing each task's CPUs or locality domains ([verbose,]mask_cpu:M1,M2...)
_PER_TASK_BIND = r"--cpu-bind=(?:[a-z_]+,)*(?:mask|map)_(?:cpu|ldom)[:=]"
_GPU_RESOURCE = r"(?:^|[,/:])gpu(?:[:,]|$)"
# job options that srun steps must be given again to bind their tasks as the job does
STEP_OPTIONS = ("cpu-bind", "gpu-bind")
# options only srun takes: sbatch and salloc refuse them ("unrecognized option"), so a
# partition's or the user's go to every srun step and never to #SBATCH or salloc
STEP_ONLY = frozenset({"cpu-bind", "mpi", "label", "unbuffered", "kill-on-bad-exit",
                       "multi-prog"})
SRUN_FORGETS_CPUS = (22, 5)  # from Slurm 22.05 srun no longer inherits --cpus-per-task
def srun_forgets_cpus(version: str | None) -> bool:
    """True when srun steps do not inherit the job's --cpus-per-task (Slurm 22.05 and
    later, and an unknown version, taken as a recent one)."""
    m = re.match(SLURM_VERSION, version or "")
    return m is None or (int(m.group(1)), int(m.group(2))) >= SRUN_FORGETS_CPUS


class Slurm(Backend[SlurmOptions]):
    name = "slurm"
    title = "Slurm"
    marker = "scontrol"
    wraps = ("pbs",)  # slurm-wlm-torque's pbsnodes/qsub/qstat
    discovery = "hpcprov.schedulers.discovery.slurm"
    spelling = SLURM
    section_type = SlurmOptions
    variable = re.compile(r"\$\{?SLURM_[A-Z_]+")
    variable_example = "$SLURM_JOB_NODELIST"
    monitor = "squeue -u $USER"
    # (Slurm-like wrappers over Flux set only part of Slurm's variables: the tasks carry
    # Flux's too)
    task_starters = ("slurm", "flux")
    task_starter_name = "srun"
    node_starter_name = "srun"

    geometry_options = GEOMETRY_OPTIONS

    def geometry_of(self, req: JobRequest, name: str, value: str | None) -> str | None:
        """As the base, and an unambiguous start of a long name, as sbatch reads it (a start
        that sbatch finds ambiguous fails there anyway); a generic resource that asks for
        GPUs, or would replace the --gres the job's GPUs are asked for with."""
        kind = super().geometry_of(req, name, value)
        if kind is not None or len(name) < 2:
            return kind
        longs = [n for n in (*GEOMETRY_OPTIONS, *GENERIC_RESOURCES) if len(n) > 1]
        for long in longs:
            if not long.startswith(name):
                continue
            if long not in GENERIC_RESOURCES:
                return GEOMETRY_OPTIONS[long]
            if value is not None and re.search(_GPU_RESOURCE, value):
                return "gpus"
            if any(n == long for n, _ in self.gpu_request(req)):
                return "gpus"
        return None

    def gpu_request(self, req: JobRequest) -> list[Option]:
        """The GPU request in the site's preferred form."""
        gpus = req.gpus
        style = self.section(req.site).gpu_request
        if gpus <= 0 or style == "none":  # none: the site gives a job its nodes' GPUs
            return []
        label = req.part.gpus.type
        typed = f"{label}:{gpus}" if label else str(gpus)
        if style == "gres":
            return [("gres", f"gpu:{typed}")]
        if style == "gpus_per_node":
            return [("gpus-per-node", typed)]
        if style == "gpus_per_task":  # lint refuses GPUs that do not divide among the tasks
            each = max(gpus // req.scheduler_tasks_per_node, 1)
            return [("gpus-per-task", f"{label}:{each}" if label else str(each))]
        total = gpus * req.nodes
        return [("gpus", f"{label}:{total}" if label else str(total))]

    def _tasks(self, req: JobRequest) -> list[Option]:
        """The task geometry, the same for a batch job and an interactive allocation."""
        if self.section(req.site).task_request == "per_node":
            return [("nodes", str(req.nodes)),
                    ("ntasks-per-node", str(req.scheduler_tasks_per_node))]
        # --nodes even for one node: --ntasks alone lets Slurm spread the tasks over nodes
        return [("nodes", str(req.nodes)),
                ("ntasks", str(req.scheduler_tasks_per_node * req.nodes))]

    def options(self, req: JobRequest, *, batch: bool) -> list[Option]:
        """The job's options (#SBATCH, salloc): the step-only ones left for the steps."""
        return [(n, v) for n, v in self._options(req, batch=batch) if n not in STEP_ONLY]

    def _options(self, req: JobRequest, *, batch: bool) -> list[Option]:
        conf = self.section(req.site)
        opts = head_options(req, batch=batch, queue="partition", key=self.key_of(req.site))
        opts += self._tasks(req)
        cpt = req.job_cpus_per_task
        if cpt:
            opts.append(("cpus-per-task", str(cpt)))
        if batch:
            opts.append(("output", conf.output))
            if conf.error:
                opts.append(("error", conf.error))
        opts += self.gpu_request(req)
        opts += self.stack_options(req) or []
        return self.with_overrides(req, opts)

    def stack_options(self, req: JobRequest) -> list[Option] | None:
        """--uenv (and --view) of Slurm's uenv plugin: every step of the job runs in it."""
        stack = req.site.uenv
        if stack is None:
            return []
        return [("uenv", stack.image), *([("view", stack.view)] if stack.view else [])]

    def allocate_argv(self, req: JobRequest) -> list[str]:
        return ["salloc", *(flag(n, v) for n, v in self.options(req, batch=False))]

    def first_node(self, req: JobRequest) -> str:
        # sed reads the whole list: `| head -n 1` would end scontrol with SIGPIPE on a long
        # list, and `set -o pipefail` would then fail the job script
        return Raw(f'"$({HOSTNAMES} | sed -n 1p)"')

    def host_slots(self, req: JobRequest, slots: int, *, horovodrun: bool,
                   template: str | None) -> list[str]:
        return ["-H", slots_list(HOSTNAMES, slots, template)]

    def job_id(self) -> str | None:
        return Raw('"$SLURM_JOB_ID"')

    def tasks(self, req: JobRequest, *, allocation: bool) -> PerNode:
        """``srun``: the launcher's MPI plugin (``--mpi=``), the geometry in an allocation
        (a job script's srun takes the job's), and the job's CPU and GPU binding."""
        step = self.task_step(req, req.task_cpus)
        argv = ["srun"]
        if req.launch.mpi:
            argv.append(f"--mpi={req.launch.mpi}")
        if allocation:
            per = req.ranks_per_node
            argv += [f"--ntasks={per * req.nodes}", f"--ntasks-per-node={per}"]
        return PerNode([*argv, *step.argv], step.setup)

    def per_node(self, req: JobRequest) -> PerNode | None:
        return PerNode(["srun", "--ntasks-per-node=1", f"--ntasks={req.nodes}"])

    def task_step(self, req: JobRequest, cpus: int | None) -> PerNode:
        """The job's --cpu-bind/--gpu-bind and the step-only options on every srun, and
        SRUN_CPUS_PER_TASK where srun no longer inherits --cpus-per-task (Slurm 22.05 and
        later)."""
        words = [flag(n, v) for n, v in self._options(req, batch=True)
                 if n in STEP_OPTIONS or n in STEP_ONLY]
        setup = []
        if cpus and srun_forgets_cpus(self.section(req.site).version):
            setup.append(f"export SRUN_CPUS_PER_TASK={int(cpus)}")
        return PerNode(words, setup)

    def agent_step(self, req: JobRequest, cpus: int | None) -> PerNode:
        """The task step less a --cpu-bind that lists CPUs or domains per task (mask_cpu,
        map_cpu, mask_ldom, map_ldom): its one task per node would take the first task's
        mask, and every rank it spawns with it."""
        step = self.task_step(req, cpus)
        return PerNode([w for w in step.argv if not re.match(_PER_TASK_BIND, str(w))], step.setup)

    def daemon_setup(self, req: JobRequest) -> list[str]:
        """mpirun starts one daemon per node with srun: SRUN_CPUS_PER_TASK (exported for an
        srun line typed before, or by the user) would hold each to that many CPUs."""
        if srun_forgets_cpus(self.section(req.site).version):
            return ["unset SRUN_CPUS_PER_TASK"]
        return []

    def pin(self, nodes: str) -> dict[str, str] | None:
        return {"nodelist": nodes}

    def lint(self, req: JobRequest) -> list[Finding]:
        found = short_name_findings(req, SLURM.short, flag)
        tasks = req.scheduler_tasks_per_node
        if (self.section(req.site).gpu_request == "gpus_per_task" and req.gpus > 0
                and req.gpus % tasks):
            found.append(Finding("error", "gpus-per-task",
                                 f"{req.gpus} GPU(s) per node do not divide among {tasks} "
                                 "task(s) per node (the site asks for --gpus-per-task)",
                                 "ask for a multiple of the tasks per node (-G), or one task "
                                 "per GPU (--tasks-per-node)"))
        return found

    def executor(self, env: dict[str, str] | None = None) -> Executor:
        return SlurmExecutor(env)


BACKEND = Slurm()


# the variables through which srun inherits the job's GPU request and binding (its input
# environment, which sbatch and salloc set from their options), by the option each mirrors
STEP_GPU_VARIABLES = {
    "gpus-per-task": "SLURM_GPUS_PER_TASK", "tres-per-task": "SLURM_TRES_PER_TASK",
    "gpus-per-node": "SLURM_GPUS_PER_NODE", "gpus": "SLURM_GPUS",
    "gpus-per-socket": "SLURM_GPUS_PER_SOCKET", "ntasks-per-gpu": "SLURM_NTASKS_PER_GPU",
    "gpu-bind": "SLURM_GPU_BIND",
}
GPU_OPTION_NAMES = {"G": "gpus"}  # short names of those options


class SlurmSteps(Steps):
    """Steps of one allocation: its nodes from scontrol, srun's and mpirun's variables."""

    def nodes(self) -> str:
        return HOSTNAMES

    def env(self, place: Placement, hostfile: Path
            ) -> tuple[dict[str, str | None], str | None]:
        """What srun, mpirun (Open MPI reads the allocation from these) and the generated
        host lists read. srun takes -N and -n from SLURM_NNODES and SLURM_NTASKS but no node
        list from the environment: a step that starts its tasks with srun gets a host file
        (one line per task, SLURM_DISTRIBUTION=arbitrary), which places them exactly.
        srun also reads the job's GPU request from the environment (SLURM_GPUS_PER_TASK:
        one GPU per task where the allocation bound its tasks so): a step asks for its own
        job's (``place.gpus``), and inherits none of the allocation's."""
        nodes, per = place.nodes, place.tasks_per_node
        names = hostlist.collect_hostlist(list(nodes))
        tasks = str(len(nodes) * per)
        env: dict[str, str | None] = {
            "SLURM_JOB_NODELIST": names, "SLURM_NODELIST": names,
            "SLURM_NNODES": str(len(nodes)), "SLURM_JOB_NUM_NODES": str(len(nodes)),
            "SLURM_NTASKS": tasks, "SLURM_NPROCS": tasks,
            "SLURM_NTASKS_PER_NODE": str(per),
            "SLURM_TASKS_PER_NODE": f"{per}(x{len(nodes)})"}
        env.update(dict.fromkeys(STEP_GPU_VARIABLES.values()))  # never the allocation's
        for name, value in place.gpus:
            var = STEP_GPU_VARIABLES.get(GPU_OPTION_NAMES.get(name, name), "")
            if var and value is not None:
                env[var] = value
        if not place.starts_tasks:
            return env, None
        env.update(SLURM_HOSTFILE=str(hostfile), SLURM_DISTRIBUTION="arbitrary")
        return env, "".join(f"{node}\n" * per for node in nodes)


class SlurmExecutor(Executor):
    """sbatch, then scontrol; sacct or the status file once the controller forgot a job."""

    name = "slurm"
    steps: Steps | None = SlurmSteps()
    HEALTH_EVERY_S = 2.0  # how often the nodes of running jobs are asked after
    UNKNOWN_JOB = "Invalid job id specified"  # scontrol's words for a job it does not know

    def __init__(self, env: dict[str, str] | None = None) -> None:
        super().__init__(env)
        self._health_at = 0.0

    def submit(self, script: Path, output: Path, exit_file: Path,
               place: Placement | None = None) -> Handle:
        proc = self._run(*SLURM.submit, "--parsable", *SLURM.argv("output", str(output)),
                         *SLURM.argv("error", str(output)), str(script))
        self._submitted(proc, "sbatch", script)
        job = submitted_job_id(proc.stdout, PARSABLE_ID, "sbatch --parsable", script)
        return self._accepted(job, script, output, exit_file)

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
            mine = {n: dead[n] for n in hostlist.expand_hostlist(h.nodes) if n in dead}
            if mine:
                self._nodes_failed(h, mine, "Slurm state")

    def usable_nodes(self, partition: str, picks: dict[str, str | None] | None = None
                     ) -> list[str] | None:
        if picks is None:
            return partition_nodes(partition, self.env)
        return picked_nodes(picks, self.env)

    def _refresh_job(self, h: Handle) -> None:
        proc = self._run("scontrol", "show", "job", "-o", h.job_id)
        info = dict(re.findall(r"(\w+)=(\S*)", proc.stdout)) if proc.returncode == 0 else {}
        if not info:
            if proc.returncode == 0 or self.UNKNOWN_JOB in proc.stderr:
                self._forgotten(h)
            # else the controller did not answer (busy, restarting): ask again next time
            return
        state = info.get("JobState", "UNKNOWN")
        if state != h.state:
            h.state = state
            self._event(h, "state")
        if state == "RUNNING" and h.started is None:
            h.started = time.monotonic()
        if info.get("NodeList") not in (None, "(null)"):
            h.nodes = info["NodeList"]
        h.reason = _reason(info.get("Reason", ""))
        if state in TERMINAL:
            h.exit_code = exit_code(info.get("ExitCode", ""))
            if h.exit_code is None:
                h.exit_code = read_exit(h.exit_file)
            h.ended = time.monotonic()

    def _forgotten(self, h: Handle) -> None:
        """The controller purged the job: ask accounting (sacct on the executor's PATH, not
        necessarily on hpcprov's own), else read the status file. A job accounting has not
        seen end (its controller lost it running) is asked after again."""
        if shutil.which("sacct", path=self.env.get("PATH") if self.env is not None else None):
            proc = self._run("sacct", "-n", "-X", "-P", "-j", h.job_id, "-o",
                             "State,ExitCode,NodeList")
            fields = proc.stdout.strip().split("|") if proc.returncode == 0 else []
            if len(fields) >= 2 and fields[0]:
                h.state = fields[0].split()[0]
                if len(fields) > 2 and fields[2] != "None assigned":
                    h.nodes = fields[2]
                if h.state in TERMINAL:
                    h.exit_code = exit_code(fields[1])
                    h.ended = time.monotonic()
                elif h.state == "RUNNING" and h.started is None:
                    h.started = time.monotonic()
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
    m = re.match(r"([0-9]{1,9}):([0-9]{1,9})", text or "")
    if not m:
        return None
    rc, sig = int(m.group(1)), int(m.group(2))
    return rc if sig == 0 else 128 + sig


def _reason(text: str) -> str:
    """Slurm's Reason of a job, less what says nothing or restates its exit status: None,
    NonZeroExitCode (a FAILED job's), RaisedSignal:9_Killed (that of one a signal killed),
    which ExitCode gives exactly; left in, they would stand for the job's state and exit code
    where validate says why a job failed."""
    return "" if re.fullmatch(r"None|NonZeroExitCode|RaisedSignal:.*", text) else text


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


def feature_test(constraint: str) -> Callable[[set[str]], bool] | None:
    """What ``--constraint`` asks of a node's features, where it is features joined by
    ``&`` (all of them) or by ``|`` (any); None for Slurm's richer forms (counts, brackets,
    both operators), which hpcprov does not evaluate."""
    word = r"[A-Za-z0-9_.:+-]+"
    if re.fullmatch(rf"{word}(&{word})*", constraint):
        wanted = set(constraint.split("&"))
        return wanted.issubset
    if re.fullmatch(rf"{word}(\|{word})+", constraint):
        anyof = set(constraint.split("|"))
        return lambda features: bool(anyof & features)
    return None


def picked_nodes(picks: dict[str, str | None], env: dict[str, str] | None = None
                 ) -> list[str] | None:
    """The nodes that can take jobs now among those a partition-less request picks
    (``routing: options``): the partition it names, if any, narrowed by the features its
    constraint asks for. None where that cannot be told: no constraint and no partition
    (Slurm's default partition, or a submit plugin, decides) or a constraint hpcprov does
    not evaluate."""
    constraint, partition = picks.get("constraint"), picks.get("partition")
    test = feature_test(constraint) if constraint else None
    if test is None and not (partition and not constraint):
        return None
    select = ["-p", partition] if partition else []
    proc = Executor(env)._run("sinfo", "-h", "-N", *select, "-o", "%N %t %f")
    usable = set()
    for line in proc.stdout.splitlines():
        parts = line.split()
        if len(parts) == 3 and not _unusable(parts[1]) and (
                test is None or test(set(parts[2].split(",")))):
            usable.add(parts[0])
    return sorted(usable)
