"""The launcher kinds hpcprov knows, each one's facts as data.

A profile's launcher names its kind (``kind: mpiexec``). This module says, for each kind,
everything hpcprov needs to know about it outside its builder: where the builder lives
(``hpcprov.jobs.launchers.<kind>``, a module with ``build(req, context)``, imported on first
use), which profile keys the kind reads (a key its kind does not read is refused at its
line), which starters' rank variables its ranks may carry (:mod:`hpcprov.jobs.ranks` lists
each starter's variables; the rank contract reads the first one set), whether its ranks
are tasks of the scheduler's own starter (srun: step options go on its line, and it needs a
scheduler that starts tasks), whether it starts one process per node that spawns the ranks
(torchrun), how the environment reaches its ranks, and its roles in validation.

Adding a launcher kind is its builder module and one :data:`KINDS` entry (and, where its
starter is new, that starter's variables in :mod:`hpcprov.jobs.ranks`).

Plain data and pure functions only: no pydantic, no builder, nothing run.
"""

from __future__ import annotations

from collections.abc import Collection
from enum import Enum
from typing import TYPE_CHECKING, Literal, NamedTuple

Env = Literal["inherited", "named"]


class Kind(NamedTuple):
    """One launcher kind."""

    keys: frozenset[str]
    """the profile keys it reads, beyond kind, description, args and modules"""
    starters: tuple[str, ...] = ()
    """the starters whose rank variables its ranks may carry, first found first; none: the
    kind gives its ranks torch's environment itself"""
    task_starter: bool = False
    """its ranks are tasks of the job's task starter: the scheduler's own (srun, flux run:
    step options go on its line), else the site's MPI launcher
    (hpcprov.jobs.launchers.tasks)"""
    per_node: bool = False
    """it starts one process per node, which spawns that node's ranks"""
    env: Env = "inherited"
    """how the job's environment reaches its ranks: inherited from the job's shell, or only
    the variables named to it (mpirun -x NAME: ranks it starts through ssh get nothing else)"""
    container: bool = False
    """its ranks run inside an image: the host's Python environment is not activated"""
    torch_order: int | None = None
    """validation runs torch.distributed's checks through the site's default launcher where
    its kind has a number, else through its launcher of the kind with the lowest number
    (None: never; horovodrun starts Horovod's ranks only)"""
    horovod: Literal["mpi", "pmi", "controller"] | None = None
    """validation runs Horovod's checks through it: over MPI (mpirun); over MPI where the
    launcher names the MPI's plugin of the scheduler's starter (pmi: srun with ``mpi:``,
    srun --mpi=pmix, the way sites that forbid mpirun start MPI programs); or over the
    launcher's controller (horovodrun: its Gloo check)"""
    first_node_baseline: bool = False
    """its 1-node baselines run on the allocation's first node (horovodrun started there
    for another single node hands its rank the loopback address)"""
    scheduler: str | None = None
    """its starter is this scheduler's own command (``flux run``): it runs only in that
    scheduler's jobs (None: any scheduler's, as far as this field says)"""


_HOSTS = frozenset({"hosts", "hostfile"})
# the keys of a launcher whose starter gives its ranks no rendezvous: the rank contract's,
# and a container runtime its ranks may start in (the site's image)
_RDZV = frozenset({"rendezvous_env", "rdzv_host", "port", "host_name", "wrapper", "runtime"})

KINDS: dict[str, Kind] = {
    # ("flux": Slurm-like wrappers over Flux set only part of Slurm's variables; the ranks
    # that flux run starts under them carry Flux's)
    "srun": Kind(_RDZV | {"mpi"}, ("slurm", "flux"), task_starter=True, torch_order=1,
                 horovod="pmi", scheduler="slurm"),
    "mpirun": Kind(_RDZV | _HOSTS | {"oversubscribe", "export_env", "set_cuda_visible_devices"},
                   # an MPI starter never reads Slurm's: mpirun started inside a batch
                   # script inherits the batch step's SLURM_PROCID=0 (every rank would be 0)
                   ("openmpi", "hydra", "pmix"), env="named", torch_order=3, horovod="mpi"),
    "mpiexec": Kind(_RDZV | {"flavor"}, ("pals", "cray-pmi", "hydra", "openmpi", "pmix"),
                    torch_order=4, horovod="mpi"),
    "jsrun": Kind(_RDZV, ("jsrun", "openmpi", "pmix"), torch_order=6, horovod="mpi"),
    # LLNL's jsrun wrapper: jsrun starts its ranks (Spectrum MPI's Open MPI variables too)
    "lrun": Kind(_RDZV, ("jsrun", "openmpi", "pmix"), torch_order=7, horovod="mpi"),
    # TACC's MPI wrapper: Intel MPI (Hydra) or MVAPICH2 underneath
    "ibrun": Kind(_RDZV, ("mvapich", "hydra", "openmpi", "pmix"), torch_order=5,
                  horovod="mpi"),
    # Flux's task starter (flux run -N -n -g) in a Flux job; it starts MPI ranks through
    # Flux's PMI
    "flux": Kind(_RDZV, ("flux",), torch_order=1, horovod="mpi", scheduler="flux"),
    "horovodrun": Kind(_HOSTS | {"host_name", "wrapper", "controller"},
                       ("horovod", "openmpi", "hydra"), horovod="controller",
                       first_node_baseline=True),
    # one agent per node (the scheduler's per-node starter, else the site's MPI launcher),
    # in the site's image where it names a runtime
    "torchrun": Kind(frozenset({"rdzv_backend", "rdzv_host", "port", "per_node_wrapper",
                                "host_name", "srun_args", "runtime"}), per_node=True,
                     torch_order=2),
    # each rank a task of the job's task starter, in the image; the rank variables read are
    # that starter's (no starters of its own: hpcprov.jobs.launchers.tasks)
    "container": Kind(frozenset({"mpi", "runtime", "wrapper", "srun_args", "wrap_in_bash",
                                 "unbuffered", "per_task_output"}),
                      task_starter=True, container=True, torch_order=8),
}

# the profile's launcher `kind:` values, one member per KINDS entry (its name, as value)
if TYPE_CHECKING:
    # made from the data below, so a checker cannot list the members: to it the enum is
    # one of str values (each member a str, its value the kind's name)
    class LauncherKind(str, Enum):
        _value_: str
else:
    LauncherKind = Enum("LauncherKind", {name: name for name in KINDS}, type=str)


def builder_module(kind: str) -> str:
    """The module holding a kind's ``build(req, context)``."""
    return f"hpcprov.jobs.launchers.{kind}"


def kind_of(kind: object) -> Kind:
    """The facts of a launcher kind (a :data:`LauncherKind` or its name)."""
    return KINDS[str(getattr(kind, "value", kind))]


def readers(key: str) -> frozenset[str]:
    """The kinds that read a launcher key."""
    return frozenset(name for name, k in KINDS.items() if key in k.keys)


LAUNCHER_KEYS: frozenset[str] = frozenset().union(*(k.keys for k in KINDS.values()))


def horovod_controller(controller: str | None, site_controllers: Collection[str]) -> str:
    """The controller a horovodrun launcher runs: the one its profile names, else MPI where
    the site's Horovod has an MPI controller (horovodrun's own default), else Gloo."""
    if controller:
        return controller
    return "mpi" if "mpi" in site_controllers else "gloo"
