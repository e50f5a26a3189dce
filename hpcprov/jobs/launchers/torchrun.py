"""The torchrun launcher: one agent per node (started by the scheduler's task starter
or an MPI), which starts that node's ranks with torch's environment."""

from __future__ import annotations

import re

from hpcprov import schedulers
from hpcprov.core.errors import UsageError
from hpcprov.core.shell import Raw
from hpcprov.jobs.launchers.common import PY, Context, Launch, first_node, mpi_per_node
from hpcprov.jobs.ranks import STARTERS
from hpcprov.request.job import JobRequest
from hpcprov.site.launcher_kinds import kind_of


def _torchrun_target(command: tuple[str, ...]) -> list[str]:
    """torchrun runs a script itself: drop a leading ``python [-u]``."""
    cmd = list(command)
    if cmd and PY.match(cmd[0].rsplit("/", 1)[-1]):
        cmd = cmd[1:]
        while cmd and cmd[0] in ("-u", "-O"):
            cmd = cmd[1:]
        if cmd and cmd[0] == "-m":
            return ["-m", *cmd[1:]]
        return cmd
    if cmd and not cmd[0].endswith(".py"):
        return ["--no-python", *cmd]
    return cmd


def torchrun_program(command: tuple[str, ...]) -> list[str]:
    """torchrun as the environment's Python runs it: ``python -m torch.distributed.run``,
    with the interpreter the command names (``python3.12``, a path), else ``python``. The
    ``torchrun`` script on PATH may belong to another Python (a site's PyTorch module puts
    torch on PYTHONPATH and no script in the environment): its agents would start the ranks
    outside the environment."""
    first = command[0] if command else ""
    python = first if PY.match(first.rsplit("/", 1)[-1]) else "python"
    return [python, "-m", "torch.distributed.run"]


def _node_rank(req: JobRequest) -> str:
    """The shell expression, evaluated by each node's agent, of its node's rank: the rank of
    the one process per node its starter gave it, or the starter's node index (MPI's: those
    of the mpirun or mpiexec kind's starters; the scheduler's own starter's, where
    :mod:`hpcprov.jobs.ranks` lists it under the scheduler's name: Slurm's SLURM_NODEID)."""
    wrapper = req.launch.per_node_wrapper
    if wrapper in ("mpirun", "mpiexec"):
        starters = kind_of(wrapper).starters
    else:
        name = schedulers.of(req.site).name
        starters = (name,) if name in STARTERS else ()
    names = list(dict.fromkeys(STARTERS[s].node_rank or STARTERS[s].rank for s in starters))
    if not names:
        raise UsageError(
            f"launcher {req.launcher_name}: rdzv_backend: static needs each node's rank, and "
            f"{schedulers.of(req.site).title}'s per-node starter gives its agents none: set "
            f"launchers.{req.launcher_name}.rdzv_backend: c10d, or per_node_wrapper: mpirun")
    assert all(re.fullmatch(r"[A-Z][A-Z0-9_]*", n) for n in names), names
    expr = f"${names[-1]}"
    for name in reversed(names[:-1]):
        expr = f"${{{name}:-{expr}}}"
    return expr


def _static(req: JobRequest, torchrun: list[str]) -> list[str]:
    """torchrun words for a static rendezvous (no store hands out node ranks): each node's
    agent adds ``--node_rank`` from its starter's variables, evaluated on that node (the
    batch shell has one value for every node), after torchrun's three program words."""
    script = f'exec "${{@:1:3}}" --node_rank="{_node_rank(req)}" "${{@:4}}"'
    return ["bash", "-c", script, "hpcprov-torchrun", *torchrun]


def build(req: JobRequest, context: Context) -> Launch:
    launcher = req.launch
    target = _torchrun_target(req.command)
    per_node = [f"--nproc_per_node={req.ranks_per_node}"]
    program = torchrun_program(req.command)
    job_id = schedulers.of(req.site).job_id()
    if job_id is None:
        standalone = [*program, "--standalone", "--nnodes=1", *per_node]
        return Launch([*standalone, *launcher.args, *target])
    endpoint = Raw(f"{first_node(req)}:{req.rendezvous_port}")
    torchrun = [
        *program,
        f"--nnodes={req.nodes}",
        *per_node,
        Raw(f"--rdzv_id={job_id}"),
        f"--rdzv_backend={launcher.rdzv_backend}",
        Raw(f"--rdzv_endpoint={endpoint}"),
        *launcher.args,
        *target,
    ]
    backend = schedulers.of(req.site)
    if launcher.rdzv_backend == "static" and launcher.per_node_wrapper != "none":
        torchrun = _static(req, torchrun)
    if launcher.per_node_wrapper in ("mpirun", "mpiexec"):
        # one torchrun agent per node, started by MPI; its node's ranks are its children
        argv, setup = mpi_per_node(req, launcher.per_node_wrapper)
        return Launch([*argv, *torchrun], setup)
    starter = None if launcher.per_node_wrapper == "none" else backend.per_node(req)
    if starter is not None:
        # one task per node running every rank: the job's CPUs per task are all of them,
        # and no per-task CPU mask binds it (its ranks would share the first task's CPUs)
        step = backend.agent_step(req, req.task_cpus)
        srun_args = launcher.srun_args if backend.starts_tasks else []  # srun starts it
        return Launch([*starter.argv, *step.argv, *srun_args, *torchrun],
                      [*starter.setup, *step.setup])
    return Launch(torchrun)
