"""Who starts a job's tasks: the scheduler's own task starter, else an MPI launcher of the site.

A launcher whose ranks are tasks of the job (the container kind: each rank starts in the
image) and torchrun's one agent per node need something that starts processes on every node
of the job. Slurm has ``srun`` and Flux ``flux run`` (:meth:`Backend.tasks`,
:meth:`Backend.per_node`); LSF starts one process per node with ``blaunch``; where the
scheduler has none (PBS: its jobs start ranks with the site's MPI, LSF: with jsrun, lrun or
an MPI), the site's own MPI launcher does: its default launcher where that is one, else the
first of the site's launchers of an MPI kind (mpiexec, mpirun, jsrun, lrun, ibrun), with its
flavor, host list and args as the profile says them. So a container launcher or a per-node
torchrun runs on any scheduler with no kind of its own, and the rank contract reads the
variables of whichever starter started the ranks (:attr:`Starter.starters`).

Pure functions of the request: nothing run.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field, replace

from hpcprov import schedulers
from hpcprov.core.errors import UsageError
from hpcprov.jobs.launchers.common import Context, mpi_per_node
from hpcprov.jobs.roles import mpi_launcher, no_starter
from hpcprov.request.job import JobRequest
from hpcprov.site.launcher_kinds import builder_module, kind_of


@dataclass(frozen=True)
class Starter:
    """What starts the tasks: its words before the command, lines to run first, the
    starters whose rank variables its tasks carry (hpcprov.jobs.ranks), and its name in
    prose (``srun``, ``launcher mpiexec (mpiexec)``)."""

    argv: list[str]
    setup: list[str] = field(default_factory=list)
    starters: tuple[str, ...] = ()
    name: str = ""
    srun: bool = False  # it is srun (a launcher's srun_args go on its line)


def srun_args(req: JobRequest, start: Starter) -> list[str]:
    """The launcher's ``srun_args`` where srun starts its tasks; elsewhere none may be
    given (refused in one line: they would be dropped)."""
    if start.srun:
        return list(req.launch.srun_args)
    if req.launch.srun_args:
        raise UsageError(f"launcher {req.launcher_name!r}: srun_args "
                         f"{' '.join(req.launch.srun_args)!r} cannot be honoured: {start.name} "
                         "starts this site's tasks, not srun; remove them (options of that "
                         "starter go on its own launcher's args)")
    return []


def task_starter(req: JobRequest, context: Context) -> Starter:
    """How the request's ranks (``req.ranks_per_node`` on each node) start as tasks."""
    backend = schedulers.of(req.site)
    own = backend.tasks(req, allocation=context == "allocation")
    if own is not None:
        return Starter(list(own.argv), list(own.setup), backend.task_starters,
                       backend.task_starter_name, srun=backend.task_starter_name == "srun")
    return _through_mpi(req, context, per_node=False)


def node_starter(req: JobRequest, context: Context) -> Starter:
    """How one process starts on each node of the job (torchrun's agent): the scheduler's
    own way (srun, flux run, blaunch), else the site's MPI launcher with one per node."""
    backend = schedulers.of(req.site)
    own = backend.per_node(req)
    if own is not None:
        step = backend.agent_step(req, req.task_cpus)
        return Starter([*own.argv, *step.argv], [*own.setup, *step.setup],
                       backend.task_starters, backend.task_starter_name or own.argv[0],
                       srun=backend.task_starter_name == "srun")
    return _through_mpi(req, context, per_node=True)


def _through_mpi(req: JobRequest, context: Context, *, per_node: bool) -> Starter:
    """The site's MPI launcher starting the tasks (one per node where ``per_node``)."""
    if (why := no_starter(req.site, req.launcher_name, per_node=per_node)) is not None:
        raise UsageError(why)
    name = mpi_launcher(req.site, per_node=per_node)
    assert name is not None
    kind = str(req.site.launchers[name].kind.value)
    # the starter's launcher, its own keys and args, with the request's geometry and port
    sub = replace(req, launcher=name, command=(), port=req.rendezvous_port)
    if per_node and kind in ("mpirun", "mpiexec"):
        argv, setup = mpi_per_node(sub, kind)
        argv = [*argv, *sub.launch.args]
    else:
        if per_node:
            sub = replace(sub, tasks_per_node=1)
        launch = importlib.import_module(builder_module(kind)).build(sub, context)
        argv, setup = list(launch.argv), list(launch.setup)
    return Starter(argv, setup, kind_of(kind).starters, f"launcher {name} ({kind})")
