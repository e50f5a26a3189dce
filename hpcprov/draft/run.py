"""The one layer of `hpcprov site draft` that runs commands: read-only, each with a timeout,
each recorded.

:class:`Recorder` runs a command through :func:`run_bounded` (a missing, failing or hung
command is a result that says so, never an exception) and keeps a
:class:`~hpcprov.schedulers.facts.Ran` for every one; a hung command is named by what the
draft calls it (``module -t avail``, not the shell line behind it). Each command runs in a
session (process group) of its own, so a timeout or a Ctrl-C kills it and whatever it
started at once; its output is read up to :data:`OUTPUT_CAP` bytes, and more is an error
(:class:`OutputTooLarge`), never a draft missing what did not fit. :func:`discover` asks the
scheduler's backend, the module system, the host's GPUs and network interfaces, and returns
the :class:`~hpcprov.draft.plan.Findings` the pure layers plan from.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

from hpcprov import schedulers
from hpcprov.core.commands import Completed
from hpcprov.core.errors import HpcprovError
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

# the most a command's output may hold (bytes); more is an error, never a draft that lacks
# what did not fit (1.5 GB of `scontrol show node` once ended in a MemoryError)
OUTPUT_CAP = 64 * 1024 * 1024
# the most of a command's stderr that is kept (the rest is read and dropped)
ERRORS_KEPT = 64 * 1024
_CHUNK = 1 << 16


class OutputTooLarge(DiscoveryError):
    """A command printed more than :data:`OUTPUT_CAP` bytes: nothing was drafted."""


class Interrupted(HpcprovError):
    """Ctrl-C (SIGINT) during the draft: the command running was killed, nothing drafted."""

    exit_code = 130


class _TooLarge(Exception):
    """Raised inside :func:`run_bounded` when stdout passes the cap."""


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    """Kill the command and everything it started (its session's process group), reap it."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def _read(proc: subprocess.Popen[bytes], deadline: float,
          cap: int) -> tuple[bytes, bytes] | None:
    """stdout and stderr until both close, or None at the deadline; _TooLarge past ``cap``."""
    out, err = bytearray(), bytearray()
    with selectors.DefaultSelector() as sel:
        assert proc.stdout is not None and proc.stderr is not None
        sel.register(proc.stdout, selectors.EVENT_READ, out)
        sel.register(proc.stderr, selectors.EVENT_READ, err)
        while sel.get_map():
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            for key, _ in sel.select(left):
                chunk = os.read(key.fd, _CHUNK)
                buf: bytearray = key.data
                if not chunk:
                    sel.unregister(key.fileobj)
                elif buf is out:
                    if len(out) + len(chunk) > cap:
                        raise _TooLarge
                    out += chunk
                elif len(err) < ERRORS_KEPT:
                    err += chunk[:ERRORS_KEPT - len(err)]
    return bytes(out), bytes(err)


def run_bounded(argv: Sequence[str], env: dict[str, str], timeout: float,
                cap: int | None = None) -> Completed:
    """Run a command found on ``env``'s PATH in a session of its own, stdin /dev/null, its
    output through pipes (no terminal: a tool that sees one may start a pager and wait).
    Its status and output, or why it did not run (127 not found, 126 not runnable, 124
    hung: then it and everything it started are killed). :class:`_TooLarge` when stdout
    passes ``cap`` bytes (default :data:`OUTPUT_CAP`), and any exception (Ctrl-C's
    KeyboardInterrupt) after killing its process group."""
    exe = shutil.which(argv[0], path=env.get("PATH", os.defpath))
    if exe is None:
        return Completed(127, "", f"{argv[0]}: command not found on PATH")
    deadline = time.monotonic() + timeout
    try:
        proc = subprocess.Popen([exe, *argv[1:]], env=env, stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                start_new_session=True)
    except OSError as exc:
        return Completed(126, "", f"{argv[0]}: cannot run it: {exc.strerror or exc}")
    with proc:
        try:
            got = _read(proc, deadline, OUTPUT_CAP if cap is None else cap)
            if got is not None:
                proc.wait(max(deadline - time.monotonic(), 0.01))
        except subprocess.TimeoutExpired:
            got = None
        except BaseException:
            _kill_group(proc)
            raise
        if got is None:
            _kill_group(proc)
            return Completed(124, "", f"{argv[0]} did not answer within {timeout:g} s "
                                      f"(command: {' '.join(argv)})")
    out, err = got
    status = proc.returncode if proc.returncode >= 0 else 128 - proc.returncode
    return Completed(status, out.decode(errors="replace"), err.decode(errors="replace"))


def _size(count: int) -> str:
    """A byte count in words (``64 MiB``, ``1000 bytes``)."""
    return f"{count / 2**20:g} MiB" if count >= 2**20 else f"{count} bytes"


class Recorder:
    """Runs read-only commands with one environment and timeout, recording each."""

    def __init__(self, env: dict[str, str] | None = None, timeout: float = 60) -> None:
        self.env = dict(os.environ) if env is None else env
        self.timeout = timeout
        self.ran: list[Ran] = []

    def __call__(self, argv: Sequence[str], label: str | None = None,
                 extra_env: dict[str, str] | None = None) -> Completed:
        name = label or command_text(argv)
        start = time.monotonic()
        try:
            proc = run_bounded(list(argv), {**self.env, **(extra_env or {})}, self.timeout)
        except _TooLarge:
            raise OutputTooLarge(f"{name}: output too large (over {_size(OUTPUT_CAP)}); "
                                 "nothing was drafted") from None
        except KeyboardInterrupt:
            raise Interrupted(f"interrupted: {name} was stopped; nothing was "
                              "drafted") from None
        if proc.returncode == 124:
            proc = Completed(124, "", f"{name} did not answer within {self.timeout:g} s "
                                      "(it hung: a slow file system or a dead daemon?)")
        problem = "" if proc.returncode == 0 else why_not(proc, name)
        self.ran.append(Ran(name, proc.returncode, time.monotonic() - start, problem))
        return proc


def detect_scheduler(env: dict[str, str] | None = None) -> str:
    """The scheduler whose commands are on PATH, or DiscoveryError: the first backend, in
    registry order, whose ``marker`` command is there."""
    path = (env or os.environ).get("PATH", os.defpath)
    drafting = schedulers.drafting()
    for backend in drafting:
        if shutil.which(str(backend.marker), path=path):
            return backend.name
    raise DiscoveryError("no scheduler commands on PATH (looked for "
                         f"{', '.join(str(b.marker) for b in drafting)}); run this on a "
                         "login node or pass --scheduler")


def scheduler_facts(scheduler: str, run: Recorder) -> Cluster:
    """The cluster as the scheduler's backend discovers it."""
    return schedulers.backend(scheduler).discover(run)


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
    """Everything the draft learns on this host, with every command it ran; Ctrl-C is
    :class:`Interrupted` (exit status 130), the running command killed."""
    try:
        return _discover(scheduler, env, timeout, host)
    except KeyboardInterrupt:
        raise Interrupted("interrupted: nothing was drafted") from None


def _discover(scheduler: str | None, env: dict[str, str] | None, timeout: float,
              host: str | None) -> Findings:
    run = Recorder(env, timeout)
    sched = scheduler or detect_scheduler(run.env)
    cluster = scheduler_facts(sched, run)
    gpus = local_gpus(run)
    notes: list[str] = []
    any_gpus = bool(gpus.models) or any(n.gpus for n in cluster.nodes.values())
    plan, listing = module_facts(run, any_gpus, notes)
    return Findings(cluster=cluster, modules=plan, listing=listing, gpus=gpus,
                    host=host or host_name(), interfaces=interfaces(),
                    scratch=run.env.get("SCRATCH") or None,
                    when=time.strftime("%Y-%m-%d %H:%M"), ran=run.ran, notes=notes)
