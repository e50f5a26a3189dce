"""The torchrun launcher: one agent per node (started by the scheduler's per-node starter,
else the site's MPI launcher, or an MPI the launcher names), which starts that node's ranks
with torch's environment; in the site's image where the launcher names a runtime (torchrun
inside the container: the agent and its ranks run there)."""

from __future__ import annotations

import re

from hpcprov import schedulers
from hpcprov.core.errors import UsageError
from hpcprov.core.shell import Raw
from hpcprov.jobs.launchers.common import PY, Context, Launch, first_node, mpi_per_node
from hpcprov.jobs.launchers.images import HOST_PYTHON_OUT, SRUN_RUNTIMES, runtime_words
from hpcprov.jobs.launchers.tasks import Starter, node_starter, srun_args
from hpcprov.jobs.ranks import STARTERS
from hpcprov.jobs.roles import no_starter
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


def _node_rank(req: JobRequest, starters: tuple[str, ...]) -> str:
    """The shell expression, evaluated by each node's agent, of its node's rank: the rank of
    the one process per node its starter gave it, or the starter's node index (``starters``:
    those whose variables the agents carry, :mod:`hpcprov.jobs.ranks`)."""
    names = list(dict.fromkeys(STARTERS[s].node_rank or STARTERS[s].rank
                               for s in starters if s in STARTERS))
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


def _static(req: JobRequest, torchrun: list[str], starters: tuple[str, ...]
            ) -> list[str]:
    """torchrun words for a static rendezvous (no store hands out node ranks): each node's
    agent adds ``--node_rank`` from its starter's variables, evaluated on that node (the
    batch shell has one value for every node), after torchrun's three program words."""
    script = f'exec "${{@:1:3}}" --node_rank="{_node_rank(req, starters)}" "${{@:4}}"'
    return ["bash", "-c", script, "hpcprov-torchrun", *torchrun]


def _agents(req: JobRequest, context: Context) -> Starter | None:
    """What starts one torchrun agent per node: mpirun or mpiexec where the launcher names
    one, else the scheduler's per-node starter or the site's MPI launcher
    (:func:`node_starter`); None where the agent runs directly (one node)."""
    wrapper = req.launch.per_node_wrapper
    if wrapper in ("mpirun", "mpiexec"):
        # one torchrun agent per node, started by MPI; its node's ranks are its children
        argv, setup = mpi_per_node(req, wrapper)
        return Starter(list(argv), setup, kind_of(wrapper).starters, wrapper)
    if wrapper == "none" or (req.nodes == 1 and no_starter(
            req.site, req.launcher_name, per_node=True) is not None):
        return None
    return node_starter(req, context)


def _in_image(req: JobRequest) -> tuple[list[str], list[str]]:
    """(setup lines, words before torchrun) that start each node's agent in the site's
    image where the launcher names a runtime (the agent and its ranks then all run there),
    through the runtime's command line."""
    runtime = req.launch.runtime
    if runtime is None:
        return [], []
    if runtime in SRUN_RUNTIMES:
        raise UsageError(f"launcher {req.launcher_name!r}: runtime {runtime} is an option of "
                         "srun, which starts ranks (a container launcher): torchrun's agents "
                         "start in the image through a runtime with a command line "
                         "(apptainer, singularity, shifter, podman-hpc, charliecloud)")
    resolve, words = runtime_words(req, runtime, [])
    return [*resolve, HOST_PYTHON_OUT], list(words)


def build(req: JobRequest, context: Context) -> Launch:
    launcher = req.launch
    target = _torchrun_target(req.command)
    per_node = [f"--nproc_per_node={req.ranks_per_node}"]
    program = torchrun_program(req.command)
    image_setup, image = _in_image(req)
    job_id = schedulers.of(req.site).job_id()
    if job_id is None:
        standalone = [*image, *program, "--standalone", "--nnodes=1", *per_node]
        return Launch([*standalone, *launcher.args, *target], image_setup)
    endpoint = Raw(f"{first_node(req)}:{req.rendezvous_port}")
    torchrun: list[str] = [
        *program,
        f"--nnodes={req.nodes}",
        *per_node,
        Raw(f"--rdzv_id={job_id}"),
        f"--rdzv_backend={launcher.rdzv_backend}",
        Raw(f"--rdzv_endpoint={endpoint}"),
        *launcher.args,
        *target,
    ]
    agents = _agents(req, context)
    if agents is None:
        return Launch([*image, *torchrun], image_setup)
    if launcher.rdzv_backend == "static":
        torchrun = _static(req, torchrun, agents.starters)
    # one agent per node running every rank: the job's CPUs per task are all of them, and
    # no per-task CPU mask binds it (its ranks would share the first task's CPUs)
    return Launch([*agents.argv, *srun_args(req, agents), *image, *torchrun],
                  [*agents.setup, *image_setup])
