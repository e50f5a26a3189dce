"""The one layer of `hpcprov site draft` that runs commands: read-only, each with a timeout,
each recorded.

:class:`Recorder` runs a command through :func:`~hpcprov.core.commands.run_command` (a
missing, failing or hung command is a result that says so, never an exception) and keeps a
:class:`~hpcprov.schedulers.facts.Ran` for every one; a hung command is named by what the
draft calls it (``module -t avail``, not the shell line behind it). Each command runs in a
session (process group) of its own, so a timeout or a Ctrl-C kills it and whatever it
started at once; its output is read up to :data:`OUTPUT_CAP` bytes, and more is an error
(:class:`OutputTooLarge`), never a draft missing what did not fit. :func:`discover` asks the
scheduler (its backend's drafting part), the module system, the host's GPUs and network
interfaces, and returns the :class:`~hpcprov.draft.plan.Findings` the pure layers plan from.
"""

from __future__ import annotations

import os
import shutil
import socket
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from hpcprov import schedulers
from hpcprov.core import commands
from hpcprov.core.commands import OUTPUT_CAP, Completed, run_command
from hpcprov.core.interrupts import Interrupted, cancelling
from hpcprov.draft import modules as dm
from hpcprov.draft.plan import Findings
from hpcprov.schedulers.facts import (
    Cluster,
    DiscoveryError,
    LocalGpus,
    Ran,
    command_text,
    why_not,
)
from hpcprov.site.gpu_vendors import VENDORS, read

if TYPE_CHECKING:
    from hpcprov.schedulers.base import Backend


class OutputTooLarge(DiscoveryError):
    """A command printed more than its cap (:data:`OUTPUT_CAP`): nothing was drafted."""


class Recorder:
    """Runs read-only commands with one environment and timeout, recording each."""

    def __init__(self, env: dict[str, str] | None = None, timeout: float = 60) -> None:
        self.env = dict(os.environ) if env is None else env
        self.timeout = timeout
        self.ran: list[Ran] = []
        self.running: str | None = None

    def __call__(self, argv: Sequence[str], label: str | None = None,
                 extra_env: dict[str, str] | None = None) -> Completed:
        name = label or command_text(argv)
        start = time.monotonic()
        self.running = name  # what an interrupt stops, for its message
        try:
            proc = run_command(list(argv), {**self.env, **(extra_env or {})}, self.timeout,
                               cap=OUTPUT_CAP)
        except commands.OutputTooLarge as exc:
            raise OutputTooLarge(f"{name}: {exc}; nothing was drafted") from None
        self.running = None
        if proc.returncode == 124:
            proc = Completed(124, "", f"{name} did not answer within {self.timeout:g} s "
                                      "(it hung: a slow file system or a dead daemon?)")
        problem = "" if proc.returncode == 0 else why_not(proc, name)
        self.ran.append(Ran(name, proc.returncode, time.monotonic() - start, problem))
        return proc


def on_path(env: dict[str, str] | None = None) -> list[Backend]:
    """The drafting backends whose ``marker`` command is on PATH, in registry order."""
    path = (env or os.environ).get("PATH", os.defpath)
    return [b for b in schedulers.drafting() if shutil.which(str(b.marker), path=path)]


def detect_scheduler(env: dict[str, str] | None = None) -> str:
    """The scheduler whose commands are on PATH, or DiscoveryError: the first backend, in
    registry order, whose ``marker`` command is there."""
    return first_found(on_path(env))


def first_found(found: list[Backend]) -> str:
    """The first of ``found`` (:func:`on_path`), or DiscoveryError naming what was looked
    for."""
    if found:
        return found[0].name
    raise DiscoveryError("no scheduler commands on PATH (looked for "
                         f"{', '.join(str(b.marker) for b in schedulers.drafting())}); run "
                         "this on a login node or pass --scheduler")


def also_on_path(chosen: str, found: list[Backend]) -> str:
    """One line naming the backends of ``found`` (:func:`on_path`) besides ``chosen`` (and
    those ``chosen`` wraps), and how to draft them; "" when there is none."""
    skip = {chosen, *schedulers.backend(chosen).wraps}
    others = [b for b in found if b.name not in skip]
    if not others:
        return ""
    names = ", ".join(f"{b.title} ({b.marker})" for b in others)
    flags = " or ".join(f"--scheduler {b.name}" for b in others)
    return (f"{names} also on PATH: this draft is of {schedulers.backend(chosen).title}, "
            f"the first found in hpcprov's order; {flags} drafts "
            f"{'that one' if len(others) == 1 else 'another'}")


def scheduler_facts(scheduler: str, run: Recorder) -> Cluster:
    """The cluster as the scheduler's drafting part discovers it."""
    return schedulers.backend(scheduler).drafting().discover(run)


def module_facts(run: Recorder, gpus: bool,
                 notes: list[str]) -> tuple[dm.ModulePlan | None, list[dm.Module]]:
    """The module system, the module sets chosen from ``module -t avail`` (and Lmod's
    spider), and everything offered; None where there is no module command."""
    probe = run(["bash", "-c", dm.PROBE], "module (which module system)", dm.ENV)
    if probe.returncode != 0:
        notes.append(why_not(probe, "module"))
        return None, []
    system = dm.parse_probe(probe.stdout)
    avail = run(["bash", "-c", dm.AVAIL], "module -t avail", dm.ENV)
    if avail.returncode != 0:
        notes.append(why_not(avail, "module -t avail") + ": no modules in the draft")
        return dm.ModulePlan(system), []
    spider: list[dm.Module] = []
    if system.kind == "lmod":
        proc = run(["bash", "-c", dm.SPIDER], "module -t spider", dm.ENV)
        if proc.returncode == 0:
            spider = dm.parse_listing(proc.stdout)
        else:
            notes.append(why_not(proc, "module -t spider"))
    listing = dm.parse_listing(avail.stdout)
    return dm.plan_modules(system, listing, spider, gpus), listing + spider


def local_gpus(run: Recorder) -> LocalGpus:
    """The GPUs of this host: the first vendor whose model command lists any (nvidia-smi,
    rocm-smi, ...: :data:`hpcprov.site.gpu_vendors.VENDORS`); none is no error."""
    for name, vendor in VENDORS.items():
        proc = run(list(vendor.models.argv))
        models = read(vendor.models, proc.stdout) if proc.returncode == 0 else []
        if models:
            return LocalGpus(tuple(models), vendor.models.argv[0], name)
    return LocalGpus()


def host_name() -> str:
    """This host's fully qualified name; its plain name where the FQDN is only localhost."""
    fqdn, plain = socket.getfqdn(), socket.gethostname()
    return plain if fqdn.startswith("localhost") or not fqdn else fqdn


def interfaces(root: Path = Path("/sys/class/net")) -> list[str]:
    """This host's network interfaces (names only), sorted."""
    try:
        return sorted(p.name for p in root.iterdir())
    except OSError:
        return []


def discover(scheduler: str | None = None, env: dict[str, str] | None = None,
             timeout: float = 60, host: str | None = None) -> Findings:
    """Everything the draft learns on this host, with every command it ran; Ctrl-C, SIGTERM
    or SIGHUP is :class:`~hpcprov.core.interrupts.Interrupted` (exit status 128 + N), the
    running command killed with all it started."""
    run = Recorder(env, timeout)
    with cancelling():
        try:
            return _discover(run, scheduler, host)
        except Interrupted as exc:
            stopped = f"{run.running} was stopped; " if run.running else ""
            raise Interrupted(exc.signum, f"{stopped}nothing was drafted") from None


def _discover(run: Recorder, scheduler: str | None, host: str | None) -> Findings:
    if scheduler:
        sched, also = scheduler, ""
    else:
        found = on_path(run.env)
        sched = first_found(found)
        also = also_on_path(sched, found)
    cluster = scheduler_facts(sched, run)
    gpus = local_gpus(run)
    notes: list[str] = []
    any_gpus = bool(gpus.models) or any(n.gpus for n in cluster.nodes.values())
    plan, listing = module_facts(run, any_gpus, notes)
    return Findings(cluster=cluster, modules=plan, listing=listing, gpus=gpus,
                    host=host or host_name(), interfaces=interfaces(),
                    scratch=run.env.get("SCRATCH") or None,
                    when=time.strftime("%Y-%m-%d %H:%M"), ran=run.ran, notes=notes,
                    also_on_path=also)
