"""What `hpcprov site draft` learns from a cluster, as plain data, and what a scheduler's
drafting part provides (:class:`Drafting`).

The scheduler's drafting part (its module in :mod:`hpcprov.schedulers.discovery`) fills
these from its commands' text with pure parsers; :mod:`hpcprov.draft.run` runs the commands
(bounded in time and output) and records each one as a :class:`Ran`;
:mod:`hpcprov.draft.plan` turns the facts into a profile. Nothing here runs a process or
imports pydantic; like the discovery modules, only a draft loads this module.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from hpcprov.core.errors import HpcprovError
from hpcprov.core.text import ascii_decimal, ascii_int
from hpcprov.core.walltime import walltime_seconds
from hpcprov.core.yaml_writer import Block, plain

if TYPE_CHECKING:
    import re

    from hpcprov.core.commands import Completed


class DiscoveryError(HpcprovError):
    """A command the draft cannot do without failed, hung or is missing (named in the text)."""


class Run(Protocol):
    """Runs one read-only command and records it; ``label`` is how it is named in the
    draft (``module -t avail`` for the shell line that runs it)."""

    def __call__(self, argv: Sequence[str], label: str | None = None) -> Completed: ...


@dataclass(frozen=True)
class Ran:
    """One command the draft ran: its name, status, time, and why it gave nothing."""

    command: str
    returncode: int
    seconds: float
    problem: str = ""  # empty when it answered


@dataclass
class Node:
    """One compute node as the scheduler describes it."""

    name: str
    cpus: int | None = None          # logical CPUs (hardware threads)
    cores: int | None = None         # physical cores
    threads_per_core: int | None = None
    memory_mb: int | None = None
    gpus: int = 0
    gpu_type: str | None = None      # the label jobs ask for (Slurm gres type)
    gpu_model: str | None = None     # a model name where the scheduler reports one
    arch: str | None = None
    features: tuple[str, ...] = ()
    state: str = ""
    queues: tuple[str, ...] = ()     # partitions/queues the node serves, where it says


@dataclass
class Queue:
    """A partition (Slurm) or queue (PBS, LSF) and its limits, with the commands they came
    from (``sources``: fact -> command)."""

    name: str
    nodes: list[str] = field(default_factory=list)
    total_nodes: int | None = None
    default: bool = False
    state: str = ""
    max_time: str | None = None      # [D-]HH:MM:SS
    default_time: str | None = None
    max_nodes: int | None = None
    max_jobs_per_user: int | None = None
    max_gpus_per_user: int | None = None
    qos: str | None = None
    routes_to: list[str] = field(default_factory=list)  # a routing queue's destinations
    notes: list[str] = field(default_factory=list)
    sources: dict[str, str] = field(default_factory=dict)


@dataclass
class Cluster:
    """Everything a scheduler's discovery found: queues, nodes, settings, and notes on what
    it could not find out (each naming the command)."""

    scheduler: str
    version: str | None = None
    name: str | None = None
    queues: list[Queue] = field(default_factory=list)
    nodes: dict[str, Node] = field(default_factory=dict)
    settings: dict[str, str] = field(default_factory=dict)  # e.g. MpiDefault, JobSubmitPlugins
    mpi_plugins: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    sources: dict[str, str] = field(default_factory=dict)  # fact -> command


class Drafting:
    """A scheduler's drafting part: what `hpcprov site draft` asks it (:meth:`discover`) and
    what a drafted profile writes for it (:meth:`launchers`, :meth:`section`,
    :meth:`option_hints`). Each module of :mod:`hpcprov.schedulers.discovery` exports one
    as ``DRAFTING``; the backend names that module (``discovery``) and loads it only for a
    draft (:meth:`hpcprov.schedulers.base.Backend.drafting`). The defaults here are those
    of a scheduler with no launcher or section of its own."""

    def discover(self, run: Run) -> Cluster:
        """The cluster as this scheduler's read-only commands (run through ``run``, the
        draft's recorder) say."""
        raise NotImplementedError

    def launchers(self, cluster: Cluster) -> tuple[Block, str]:
        """The launchers a drafted profile offers, and its default one: here mpirun,
        horovodrun and torchrun as they are, mpirun the default."""
        b = Block()
        b.add("mpirun", plain(kind="mpirun", rendezvous_env=True))
        b.add("horovodrun", plain(kind="horovodrun"))
        b.add("torchrun", plain(kind="torchrun"))
        return b, "mpirun"

    def section(self, cluster: Cluster, gpus: bool) -> Block | None:
        """This scheduler's own profile section (``site.<name>``) in a draft, or None
        (none written); ``gpus``: some partition has GPUs."""
        return None

    def option_hints(self, cluster: Cluster) -> list[str]:
        """Lines under the draft's question on mandatory job options: what the scheduler
        showed that bears on it."""
        return []


def command_text(argv: Sequence[str]) -> str:
    """A command as the draft names it (argv joined by spaces)."""
    return " ".join(argv)


def answered(proc: Completed) -> bool:
    """The command ran and exited 0."""
    return proc.returncode == 0


def why_not(proc: Completed, name: str) -> str:
    """Why a command gave nothing usable, in one line naming it."""
    if proc.returncode == 124:
        return proc.stderr.strip().splitlines()[0] if proc.stderr.strip() else \
            f"{name} did not answer in time"
    if proc.returncode == 127:
        return f"{name}: command not found"
    first = (proc.stderr or proc.stdout).strip().splitlines()
    return f"{name} exited {proc.returncode}" + (f": {first[0][:200]}" if first else "")


def required(run: Run, argv: Sequence[str]) -> str:
    """The output of a command the discovery cannot do without, or DiscoveryError."""
    proc = run(argv)
    if not answered(proc):
        raise DiscoveryError(why_not(proc, command_text(argv)) +
                             "; nothing was drafted (run it by hand to see why)")
    return proc.stdout


def optional(run: Run, argv: Sequence[str], notes: list[str]) -> str | None:
    """The output of a command the draft can do without; a note naming it when it fails."""
    proc = run(argv)
    if answered(proc):
        return proc.stdout
    notes.append(why_not(proc, command_text(argv)))
    return None


def as_int(text: str | None) -> int | None:
    """An integer field, None for n/a, UNLIMITED and the like, and for anything but a
    bounded run of ASCII digits (:func:`hpcprov.core.text.ascii_int`)."""
    return ascii_int(text)


def walltime_text(text: str | None) -> str | None:
    """A scheduler's time limit as [D-]HH:MM:SS; None for none/unlimited/unreadable."""
    if text is None:
        return None
    seconds = walltime_seconds(text.strip())
    if seconds is None or seconds <= 0:
        return None
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    clock = f"{hours:02d}:{minutes:02d}:{secs:02d}"
    return f"{days}-{clock}" if days else clock


def memory_mb(text: str | None) -> int | None:
    """PBS/LSF memory sizes (``263597568kb``, ``192gb``, ``15.8G``) in MiB."""
    import re

    m = re.fullmatch(r"\s*([0-9.]+)\s*([kmgtp]?)(?:i?b)?\s*", (text or "").lower())
    if m is None:
        return None
    value = ascii_decimal(m.group(1))
    if value is None:
        return None
    scale = {"": 1 / 1024 / 1024, "k": 1 / 1024, "m": 1, "g": 1024, "t": 1024**2,
             "p": 1024**3}[m.group(2)]
    return int(value * scale)


def text_blocks(text: str, header: re.Pattern[str]) -> list[tuple[str, list[str]]]:
    """(name, lines) for each block of a command's text that a line matching ``header``
    starts (its first group names the block); lines before the first block are dropped."""
    out: list[tuple[str, list[str]]] = []
    for line in text.splitlines():
        m = header.match(line)
        if m:
            out.append((m.group(1), []))
        elif out:
            out[-1][1].append(line)
    return out


@dataclass(frozen=True)
class LocalGpus:
    """GPUs of the host the draft runs on, the command that named them and their vendor."""

    models: tuple[str, ...] = ()
    command: str = ""
    vendor: str = ""


