"""A job request (what the user asked for) and its geometry, resolved against a site."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING

from hpcprov.core.errors import UsageError
from hpcprov.core.text import shown
from hpcprov.site.launcher_kinds import kind_of

if TYPE_CHECKING:
    from hpcprov.site.types import Launcher, Partition, Site


def pick_partition(site: Site, asked: str | None, nodes: int) -> str:
    """The partition (queue) a job of ``nodes`` nodes goes to: the one asked for, else the
    site's queue chosen by the job's size where the default's limits do not fit it, else the
    default. The one rule for every command (jobscript, launch, lint, guide, validate)."""
    if asked is None:
        picked = site.partition_for_nodes(nodes)
        if picked is not None:
            return picked
    return str(site.partition(asked)[0])


@dataclass(frozen=True)
class JobRequest:
    """Everything needed to generate a launch line or a job script. Pure data."""

    site: Site
    nodes: int = 1
    gpus_per_node: int | None = None
    command: tuple[str, ...] = ()
    partition: str | None = None
    launcher: str | None = None
    tasks_per_node: int | None = None
    cpus_per_task: int | None = None
    time: str | None = None
    job_name: str | None = None
    options: dict[str, str | None] = field(default_factory=dict)  # None: a flag
    hosts: tuple[str, ...] = ()
    image: str | None = None
    prefix: str | None = None
    activate: bool = True
    port: int | None = None  # the rendezvous port, instead of the launcher's (side-by-side jobs)

    # resolved once per request (cached on first use: the request is frozen, so every reader
    # of a job sees the same partition and launcher)
    @cached_property
    def partition_name(self) -> str:
        return pick_partition(self.site, self.partition, self.nodes)

    @cached_property
    def part(self) -> Partition:
        return self.site.partitions[self.partition_name]

    @cached_property
    def launcher_name(self) -> str:
        name = self.launcher or self.site.default_launcher
        if name not in self.site.launchers:
            raise UsageError(
                f"site {self.site.name} has no launcher {shown(name)} "
                f"(launchers: {', '.join(self.site.launchers)}); pick one with --launcher"
            )
        return name

    @cached_property
    def launch(self) -> Launcher:
        return self.site.launchers[self.launcher_name]

    @property
    def rendezvous_port(self) -> int:
        """The TCP port the ranks meet on: the request's own, else the launcher's."""
        return self.launch.port if self.port is None else self.port

    @property
    def gpus(self) -> int:
        """GPUs requested per node (default: all of the partition's)."""
        return self.part.gpus.count if self.gpus_per_node is None else self.gpus_per_node

    @property
    def ranks_per_node(self) -> int:
        """Training processes per node (one per GPU unless told otherwise)."""
        if self.tasks_per_node is not None:
            return self.tasks_per_node
        return self.gpus if self.gpus > 0 else 1

    @property
    def world_size(self) -> int:
        return self.nodes * self.ranks_per_node

    @property
    def in_image(self) -> bool:
        """Its ranks run in the site's image: a container launcher, or one with a runtime
        (the host's Python environment is then not activated)."""
        return kind_of(self.launch.kind).container or self.launch.runtime is not None

    @property
    def per_node_launch(self) -> bool:
        """True when the launcher starts one process per node that spawns the ranks."""
        return kind_of(self.launch.kind).per_node

    @property
    def scheduler_tasks_per_node(self) -> int:
        """Tasks the scheduler is asked for per node."""
        return 1 if self.per_node_launch else self.ranks_per_node

    @property
    def job_cpus_per_task(self) -> int | None:
        if self.cpus_per_task is not None:
            return self.cpus_per_task
        if self.per_node_launch and self.part.cpus_per_task:
            return self.part.cpus_per_task * self.ranks_per_node
        return self.part.cpus_per_task

    @property
    def task_cpus(self) -> int | None:
        """CPUs per scheduler task as the job asks for them (a cpus-per-task option wins)."""
        given = self.options.get("cpus-per-task")
        if given is not None and given.isdigit():
            return int(given)
        return self.job_cpus_per_task

    @property
    def host_name(self) -> str | None:
        """The template naming a node on the high-speed network (``{host}-ib``): the
        launcher's, else the partition's; None where the scheduler's names are used."""
        template = self.launch.host_name or self.part.network.host_name
        return None if template in (None, "{host}") else template

    @property
    def walltime(self) -> str | None:
        return self.time or self.part.limits.default_walltime

    def walltime_for(self, *, batch: bool) -> str | None:
        """The time limit a batch job (``batch``) or an interactive allocation asks for:
        --time, else the partition's default for it."""
        limits = self.part.limits
        if not batch and not self.time and limits.interactive_walltime:
            return limits.interactive_walltime
        return self.walltime
