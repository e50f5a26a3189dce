"""The parts of the site model that planning needs at run time, without pydantic.

The enums and :class:`SiteMethods` are shared by the validated model
(:mod:`hpcprov.model`, pydantic) and by the snapshot a cached profile is loaded as
(:mod:`hpcprov.site_view`), so a command answered from the cache never imports pydantic.
"""

from __future__ import annotations

from enum import Enum
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from hpcprov.model import Modules, Partition


# The schedulers hpcprov knows, by the name a profile's `scheduler:` key uses, and the
# module of each (hpcprov.schedulers.base says what a backend holds). Adding a scheduler is
# its module and one line here. The order is the one `hpcprov site draft` looks for their
# marker commands on PATH in: Slurm first, since Debian's slurm-wlm-torque puts PBS
# commands (qstat, pbsnodes) beside it.
SCHEDULER_BACKENDS: dict[str, str] = {
    "slurm": "hpcprov.schedulers.slurm",
    "pbs": "hpcprov.schedulers.pbs",
    "lsf": "hpcprov.schedulers.lsf",
    "none": "hpcprov.schedulers.local",
}

# the profile's `scheduler:` values, one per backend
Scheduler = Enum(
    "Scheduler", {name: name for name in SCHEDULER_BACKENDS}, type=str)


class ModuleSystem(str, Enum):
    lmod = "lmod"
    tcl = "tcl"  # Environment Modules
    none = "none"


class LauncherKind(str, Enum):
    srun = "srun"
    mpirun = "mpirun"
    mpiexec = "mpiexec"
    jsrun = "jsrun"
    horovodrun = "horovodrun"
    torchrun = "torchrun"
    container = "container"


class SiteMethods:
    """What a site answers beyond its fields (the model's and the snapshot's)."""

    if TYPE_CHECKING:  # the fields both have (not class annotations pydantic would see)
        partitions: dict[str, Any]
        modules: Any
        paths: Any

    def partition(self, name: str | None = None) -> tuple[str, Partition]:
        """The named partition, else the default one, else the first."""
        if name is not None:
            if name not in self.partitions:
                raise KeyError(name)
            return name, self.partitions[name]
        for pname, part in self.partitions.items():
            if part.default:
                return pname, part
        first = next(iter(self.partitions))
        return first, self.partitions[first]

    def partition_for_nodes(self, nodes: int) -> str | None:
        """Where no partition is named: the default one when its node limits fit a job of
        ``nodes`` nodes, else the first queue chosen by job size that fits; None: the
        default (nothing fits better)."""
        def fits(part: Any) -> bool:
            lim = part.limits
            return ((lim.min_nodes_per_job or 1) <= nodes
                    and nodes <= (lim.max_nodes_per_job or nodes)
                    and nodes <= (part.nodes or nodes))

        _, default = self.partition(None)
        if fits(default):
            return None
        return next((n for n, p in self.partitions.items() if p.by_job_size and fits(p)), None)

    def modules_for(self, partition: str | None = None) -> Modules:
        """The module configuration that applies on a partition."""
        _, part = self.partition(partition)
        return part.modules or self.modules

    def prefix(self) -> str:
        """The install prefix template with {scratch} filled in."""
        return str(self.paths.prefix).replace("{scratch}", self.paths.scratch)
