"""What every scheduler backend provides, and the polling loop they share.

Everything hpcprov knows about one scheduler is in three parts, each loaded for its own work:

* **the backend** (:class:`Backend`; its module, ``hpcprov/schedulers/NAME.py``, exports
  one as ``BACKEND``): its profile section (``section_type``: the class of
  ``site.<name>``, declared in :mod:`hpcprov.site.sections`, which needs no pydantic;
  ``Backend[SlurmOptions]`` reads it typed, :meth:`Backend.section`) and **planning**,
  pure: the job options and directive lines, the job script's interpreter and prolog,
  the submit and interactive-allocation commands, the shell expressions launchers ask
  for (the first node, host:slots lists, a host file, the job id, its own task and
  one-process-per-node starters), lint rules of its own. It is the factory of the other
  two parts (:meth:`Backend.executor`, :meth:`Backend.site_executor`,
  :meth:`Backend.drafting`) and holds none of their code.
* **the executor** (an :class:`Executor` subclass in the same module): the effects. It
  submits, polls, cancels and asks about nodes, recording every submission and state
  change in ``events``; where the scheduler's jobs can run other jobs' launches as steps
  of one allocation (:mod:`hpcprov.schedulers.allocation`), its ``steps`` (:class:`Steps`)
  say how: the shell text that prints the allocation's nodes, the variables of a step.
* **drafting** (``hpcprov site draft``), where it can: the backend declares the command
  whose presence on PATH says this scheduler is here (``marker``) and the module of its
  drafting part (``discovery``, in :mod:`hpcprov.schedulers.discovery`), whose
  ``DRAFTING`` (a :class:`hpcprov.schedulers.facts.Drafting`) asks the scheduler
  for its queues and nodes and says what a drafted profile writes for it (launchers, its
  own section, hints to the questions). Only a draft loads it (:meth:`Backend.drafting`).

Launchers, job scripts, lint, the guide, the draft and the validation suite ask the backend
(``hpcprov.schedulers.of(site)``) and never test which scheduler a site has.
"""

from __future__ import annotations

import os
import re
import subprocess
import time
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Generic, TypeVar

from hpcprov.core.commands import Completed, run_command
from hpcprov.core.errors import HpcprovError
from hpcprov.core.shell import Raw, quote
from hpcprov.schedulers.spelling import Spelling
from hpcprov.site.sections import Section

if TYPE_CHECKING:
    from hpcprov.core.findings import Finding
    from hpcprov.request.job import JobRequest
    from hpcprov.request.options import FlagKey, Option
    from hpcprov.schedulers.facts import Drafting
    from hpcprov.site.types import Site


@dataclass(frozen=True)
class PerNode:
    """How a backend starts one process per node: lines to run first, then the argv prefix."""

    argv: list[str]
    setup: list[str] = field(default_factory=list)


def unique_hosts(file_var: str) -> str:
    """Shell text printing the hosts of a one-line-per-slot host file once each, in order."""
    return f"awk '!seen[$0]++' \"${file_var}\""


def name_parts(template: str) -> tuple[str, str]:
    """(prefix, suffix) around ``{host}`` in a host name template (``{host}-ib``): letters,
    digits, '.' and '-' only (the model checks it), so they are shell-safe as they are."""
    prefix, _, suffix = template.partition("{host}")
    return prefix, suffix


def short_name(host: str) -> str:
    """A host's short name: the part before the first dot (``node1.cluster.example`` is
    ``node1``), the name a host name template applies to."""
    return host.split(".", 1)[0]


# shell text turning a printed full name into its short name (a short name stays as it is)
_SHORTEN = " | sed 's/[.].*//'"


def renamed(word: str, template: str | None) -> str:
    """A host's shell word on the network a host name template names. The template applies
    to the short name (the part before the first dot), as to ``hostname -s``: a node file
    that holds full names (``node1.cluster.example``) gives ``node1-ib``, not
    ``node1.cluster.example-ib``, and a template that adds the domain
    (``{host}.cluster.example``) does not add it twice. ``"$(CMD)"`` becomes
    ``"$(CMD | sed 's/[.].*//')"-ib``; a plain name (``localhost``) becomes ``localhost-ib``."""
    if not template:
        return word
    prefix, suffix = name_parts(template)
    if isinstance(word, Raw):
        head, tail = (quote(prefix) if prefix else ""), (quote(suffix) if suffix else "")
        if word.startswith('"$(') and word.endswith(')"') and word != '"$(hostname -s)"':
            word = Raw(word[:-2] + _SHORTEN + ')"')
        return Raw(head + word + tail)
    return prefix + short_name(word) + suffix


def slots_list(hosts_cmd: str, slots: int, template: str | None = None) -> Raw:
    """``"$(CMD | sed 's/$/:N/' | paste -sd, -)"``: host:slots,... from a host-printing
    command, each host renamed by the host name template when there is one (applied to the
    short name, :func:`renamed`)."""
    script = f"s/$/:{slots}/"
    if template:
        prefix, suffix = name_parts(template)
        script = f"s/^\\([^.]*\\).*/{prefix}\\1{suffix}:{slots}/"
    return Raw(f"\"$({hosts_cmd} | sed {quote(script)} | paste -sd, -)\"")


def renamed_hostfile(file_word: str, template: str) -> tuple[list[str], Raw]:
    """(setup lines, shell word) of a copy of a host file (``host [slots=N]`` or
    ``host:N`` lines) with every host renamed by the template (applied to its short name,
    :func:`renamed`)."""
    prefix, suffix = name_parts(template)
    script = f"s/^\\([A-Za-z0-9][^ :.]*\\)[^ :]*/{prefix}\\1{suffix}/"  # the short name
    setup = ['hpcprov_hostfile="$(mktemp)"',
             f'sed {quote(script)} {quote(file_word)} > "$hpcprov_hostfile"']
    return setup, Raw('"$hpcprov_hostfile"')


def head_options(req: JobRequest, *, batch: bool, queue: str,
                 key: FlagKey | None = None) -> list[Option]:
    """How a Slurm-like job's options start: its name, its time limit, the site's mandatory
    options (less those given under another name of the same flag: ``key``, the backend's
    :meth:`Backend.flag_key`), then the partition (under the option name ``queue``) unless
    the partition is a kind of node chosen by its own options (``routing: options``)."""
    from hpcprov.request.options import required_options, same_name

    opts: list[Option] = [("job-name", req.job_name or ("hpcprov" if batch else
                                                         "interactive"))]
    if walltime := req.walltime_for(batch=batch):
        opts.append(("time", walltime))
    routed = [(queue, req.partition_name)] if req.part.routing == "partition" else []
    written = {name for name, _ in [*opts, *routed]}  # a mandatory option hpcprov writes: once
    opts += [(n, v) for n, v in required_options(req, key or same_name) if n not in written]
    return [*opts, *routed]


# a backend's profile section (hpcprov.site.sections: SlurmOptions, ...)
S = TypeVar("S", bound=Section)


class Backend(Generic[S]):
    """Base of the scheduler backends; each module exports one instance as ``BACKEND``;
    ``Backend[SlurmOptions]``: its profile section's class (:meth:`section`)."""

    name = "base"
    title = "base"                 # the scheduler's name in prose
    section_type: type[S] | None = None  # its profile section's class; None: it has none
    variable = re.compile(r"(?!)")  # the variables its jobs see ($SLURM_..., $PBS_...)
    variable_example = ""           # shown when another scheduler's variable is used
    monitor = "jobs"                # the command line a user watches their jobs with
    max_nodes: int | None = None    # None: as many as the partition has
    # the starters (hpcprov.jobs.ranks) whose rank variables the tasks of its own task
    # starter carry (:meth:`tasks`); none: it has no task starter of its own
    task_starters: tuple[str, ...] = ()
    task_starter_name = ""          # its task starter in prose (``srun``, ``flux run``)
    # its own way of starting one process per node (:meth:`per_node`), in prose; "": none
    node_starter_name = ""
    horovodrun_gloo = True          # `horovodrun --gloo` works in its jobs
    # `hpcprov site draft`: the command whose presence on PATH says this scheduler is here
    # (tried in registry order, kinds.SCHEDULER_BACKENDS); None: the draft cannot ask it
    marker: str | None = None
    # the other schedulers whose marker its own packages may put on PATH beside it (Debian's
    # slurm-wlm-torque: pbsnodes, qsub, qstat over Slurm): a draft of this one does not say
    # they are there too
    wraps: tuple[str, ...] = ()
    # the module of its drafting part, whose ``DRAFTING`` asks the scheduler and says what a
    # draft writes for it (hpcprov.schedulers.discovery.NAME, loaded by :meth:`drafting`)
    discovery: str | None = None
    # how it spells a job: directive prefix, flags, quoting, submit line (one record per
    # scheduler, hpcprov.schedulers.spelling); None: no scheduler (no directives)
    spelling: Spelling | None = None

    # the job options of this scheduler that set the job's geometry, by name as -o gives
    # them (no dashes, the value apart), each with what they set: a key of
    # hpcprov.request.options.GEOMETRY (nodes, tasks, gpus, time, queue...)
    geometry_options: dict[str, str] = {}

    def geometry_of(self, req: JobRequest, name: str, value: str | None) -> str | None:
        """What of the geometry of ``req`` the job option ``name`` (``-o name=value``) would
        set (a key of ``GEOMETRY``), or None: a declared name, or a declared one-letter name
        with its number attached (``-o -N4``)."""
        kind = self.geometry_options.get(name)
        if kind is None and len(name) > 1 and name[1].isdigit():
            kind = self.geometry_options.get(name[0])
        return kind

    def geometry_set(self, req: JobRequest) -> list[tuple[str, str]]:
        """The user's options that would set the job's geometry, each as given with what of
        it it sets (hpcprov.request.options.geometry_set, by :meth:`geometry_of`)."""
        from hpcprov.request.options import geometry_set

        return geometry_set(req, lambda name, value: self.geometry_of(req, name, value))

    def geometry_findings(self, req: JobRequest) -> list[Finding]:
        """The user's options that would set the job's geometry, which only hpcprov's flags
        set: lint and the job's options refuse them."""
        from hpcprov.request.options import geometry_findings

        return geometry_findings(req, lambda name, value: self.geometry_of(req, name, value))

    def with_overrides(self, req: JobRequest, opts: list[Option]) -> list[Option]:
        """How a job's options end: the backend's (``opts``), then the partition's own ones;
        the user's (``req.options``) replace those of the same name, the others go last. A
        user's option that would set the job's geometry is refused (LintFailed)."""
        from hpcprov.core.findings import LintFailed
        from hpcprov.request.options import override

        if refused := self.geometry_findings(req):
            raise LintFailed(refused)
        given = override([*opts, *req.part.options.items()], req.options,
                         self.key_of(req.site))
        return [(self.declared(req.site, n), v) for n, v in given]

    def option_name(self, name: str) -> str:
        """How this scheduler's users write the job option ``name`` (``--account`` for
        Slurm, ``-A (account)`` for PBS, ``-P (account)`` for LSF), for messages: its
        spelling's :meth:`Spelling.named`."""
        return self.spelling.named(name) if self.spelling else f"--{name}"

    def flag_key(self, name: str, value: str | None = None) -> str:
        """The flag the job option ``name`` (with ``value``) is written as: two names with
        the same key are one option of the scheduler (LSF's ``account`` and ``P`` are both
        ``-P``), so the user's replaces the generated one, a mandatory one is given under
        either, and a forbidden one is refused under either: its spelling's
        :meth:`Spelling.key`."""
        return self.spelling.key(name) if self.spelling else self.option_name(name)

    def same_option(self, name: str, value: str | None, other: str) -> bool:
        """Whether the job option ``name`` (``value``) is the option ``other`` of the
        profile's rules (``policies.forbidden_options``, ``required_options``): the same
        flag, however spelled (names as the scheduler writes them: :meth:`declared`)."""
        return self.flag_key(name, value) == self.flag_key(other, None)

    def declared(self, site: Site, name: str) -> str:
        """The name of the flag the site writes the option ``name`` as, where its section
        declares one (``lsf.flags: {account: -G}``: ``G``); else the name itself."""
        flags: dict[str, str] = getattr(self.section(site), "flags", {}) \
            if self.section_type else {}
        flag = flags.get(name)
        return flag.lstrip("-") if flag else name

    def key_of(self, site: Site) -> FlagKey:
        """:meth:`flag_key` at this site: a name its section declares as a flag is that
        flag."""
        return lambda name, value: self.flag_key(self.declared(site, name), value)

    def is_option(self, site: Site, name: str, value: str | None, other: str) -> bool:
        """:meth:`same_option` at this site (its declared flags)."""
        return self.same_option(self.declared(site, name), value, self.declared(site, other))

    def spell(self, site: Site, name: str) -> str:
        """How the site's users write the job option ``name``, for messages: its declared
        flag (``-G (account)``), else :meth:`option_name`."""
        flag = self.declared(site, name)
        return self.option_name(name) if flag == name else f"-{flag} ({name})"

    @property
    def settings(self) -> tuple[str, ...]:
        """The keys of its profile section (none where it has none)."""
        return tuple(f.name for f in fields(self.section_type)) if self.section_type else ()

    def section(self, site: Site) -> S:
        """The site's settings for this scheduler (``site.<name>``, of its
        ``section_type``: validation fills in the chosen scheduler's)."""
        found = getattr(site, self.name, None)
        if self.section_type is None or not isinstance(found, self.section_type):
            raise HpcprovError(f"site {site.name}: no {self.name} settings (scheduler "
                               f"{site.scheduler.value})")
        return found

    # ---- planning (pure) ---------------------------------------------------------------
    def options(self, req: JobRequest, *, batch: bool) -> list[Option]:
        """Ordered options of a batch job (``batch``) or an interactive allocation."""
        return []

    def directives(self, req: JobRequest) -> list[str]:
        """The directive lines of a batch script (``#SBATCH ...``): the batch job's options
        as its spelling writes them (values in the scheduler's units: :meth:`written`)."""
        if self.spelling is None:
            return []
        return [self.spelling.directive(n, self.written(n, v))
                for n, v in self.options(req, batch=True)]

    def written(self, name: str, value: str | None) -> str | None:
        """The value of the job option ``name`` in the scheduler's own units (LSF's -W in
        minutes, Flux's -t as a duration); as it is by default."""
        return value

    def shell(self, req: JobRequest) -> str:
        """The job script's interpreter line, without ``#!``: the site's ``shell`` setting
        where the backend has one."""
        shell = getattr(self.section(req.site), "shell", None) if self.section_type else None
        return shell if isinstance(shell, str) else "/bin/bash"

    def prolog(self, req: JobRequest) -> list[str]:
        """Lines a job script runs first (e.g. cd to the submission directory)."""
        return []

    def submit_argv(self, script: str) -> list[str]:
        """The submit line of a job script: its spelling's (``bsub < SCRIPT`` where the
        command reads it on stdin); ``bash SCRIPT`` without a scheduler."""
        if self.spelling is None:
            return ["bash", script]
        return [*self.spelling.submit, *([Raw("<")] if self.spelling.stdin else []), script]

    def allocate_argv(self, req: JobRequest) -> list[str]:
        """The interactive allocation command; empty where there is none."""
        return []

    def first_node(self, req: JobRequest) -> str:
        """Shell word for the job's first node (the rendezvous host)."""
        return "localhost"

    def host_slots(self, req: JobRequest, slots: int, *, horovodrun: bool,
                   template: str | None) -> list[str]:
        """``-H host:slots,...`` (or ``--hostfile FILE``) words for mpirun/horovodrun, each
        host renamed by ``template`` (``{host}-ib``) where it is not None."""
        return ["-H", f"localhost:{slots}"]

    def job_id(self) -> str | None:
        """Shell word for the job id; None where jobs have none (one node, no scheduler)."""
        return None

    def tasks(self, req: JobRequest, *, allocation: bool) -> PerNode | None:
        """How the scheduler's own task starter starts the request's ranks as its tasks
        (``req.ranks_per_node`` on each of ``req.nodes`` nodes, with the job's CPU and GPU
        binding), the geometry written out where ``allocation`` (a line typed in an
        interactive allocation); None where the scheduler has no task starter of its own
        (PBS, LSF: an MPI launcher of the site starts them, hpcprov.jobs.launchers.tasks)."""
        return None

    def per_node(self, req: JobRequest) -> PerNode | None:
        """How the scheduler starts one process on each node of the job, or None (it cannot
        itself: an MPI launcher of the site does, hpcprov.jobs.launchers.tasks)."""
        return None

    def task_step(self, req: JobRequest, cpus: int | None) -> PerNode:
        """What every task-starting step inside the job (srun, the per-node starter) must
        carry so that its tasks get the job's CPU and GPU binding (``cpus`` CPUs each):
        words after the starter's own, and lines to run before it."""
        return PerNode([])

    def agent_step(self, req: JobRequest, cpus: int | None) -> PerNode:
        """What the step of one process per node that spawns its node's ranks itself
        (torchrun's agent) carries: :meth:`task_step`'s, less what binds tasks one by one
        (the agent and its ranks would share the first task's CPUs)."""
        return self.task_step(req, cpus)

    def daemon_setup(self, req: JobRequest) -> list[str]:
        """Lines before a launcher whose per-node daemons the scheduler starts for it
        (mpirun, horovodrun), so that what :meth:`task_step` sets for rank steps (or the
        user's environment) does not confine those daemons and their ranks."""
        return []

    def pin(self, nodes: str) -> dict[str, str] | None:
        """Job options that pin a job to these nodes; None where the scheduler cannot."""
        return None

    def stack_options(self, req: JobRequest) -> list[Option] | None:
        """The job options that mount the site's uenv (``uenv:``) in its jobs; None where
        this scheduler cannot (only Slurm's uenv plugin does)."""
        return None

    def lint(self, req: JobRequest) -> list[Finding]:
        """Problems of a request that only this scheduler has."""
        return []

    # ---- its executor (effects) --------------------------------------------------------
    def executor(self, env: dict[str, str] | None = None) -> Executor:
        raise NotImplementedError

    def site_executor(self, site: Site, env: dict[str, str] | None = None) -> Executor:
        """The executor of a site's jobs, where the profile says how they are submitted
        (Flux: ``flux.submit``); :meth:`executor` where nothing in it does."""
        return self.executor(env)

    # ---- its drafting part (`hpcprov site draft`, backends with a ``marker``) -----------
    def drafting(self) -> Drafting:
        """What `hpcprov site draft` asks this scheduler and writes for it: the ``DRAFTING``
        of the backend's ``discovery`` module, loaded only now (planning and running jobs
        never load a discovery module)."""
        if self.discovery is None:
            raise NotImplementedError(f"hpcprov site draft cannot ask {self.title}")
        import importlib

        found: Drafting = importlib.import_module(self.discovery).DRAFTING
        return found


@dataclass(frozen=True)
class Placement:
    """Where a job runs inside an allocation: how many nodes (or exactly these, in order),
    tasks per node, and whether its launcher starts the tasks through the scheduler (srun)."""

    count: int
    tasks_per_node: int
    nodes: tuple[str, ...] = ()
    starts_tasks: bool = False
    first: int = 0  # where nodes are not named: the first of the allocation's nodes it takes
    # the job's own GPU request, as its own job would ask it (the scheduler's options that
    # set the job's GPUs, e.g. Slurm's gpus-per-task): a step asks for these, never for
    # the allocation's (whose per-task binding its own launch did not ask for)
    gpus: tuple[tuple[str, str | None], ...] = ()


class Steps:
    """How a scheduler's jobs run other jobs' launches as steps of one allocation
    (:mod:`hpcprov.schedulers.allocation`), held by its executor as ``steps``; an executor
    whose jobs cannot has none."""

    def nodes(self) -> str:
        """Shell text that prints the allocation's nodes, one per line, inside a job."""
        raise NotImplementedError

    def env(self, place: Placement, hostfile: Path
            ) -> tuple[dict[str, str | None], str | None]:
        """The variables that make a job script, run as a step inside a larger allocation,
        see only its own nodes, tasks and GPU request (its launchers read them; None: a
        variable the allocation set that the step must not inherit, unset), and the text
        of a host file to write at ``hostfile`` where they name one (None: no file)."""
        raise NotImplementedError


@dataclass
class Handle:
    """A submitted job and what is known about it."""

    job_id: str
    script: Path
    output: Path
    exit_file: Path
    submitted: float
    state: str = "PENDING"
    exit_code: int | None = None
    nodes: str = ""
    started: float | None = None
    ended: float | None = None
    reason: str = ""
    bad_nodes: str = ""           # nodes the scheduler reported dead while the job ran
    proc: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def done(self) -> bool:
        return self.ended is not None


class Executor:
    """Submits and follows jobs; subclasses submit, refresh and cancel, wait() is shared."""

    name = "base"
    # how its jobs run others as steps of one allocation; None: they cannot (a job per check)
    steps: Steps | None = None

    def __init__(self, env: dict[str, str] | None = None) -> None:
        self.env = env
        self.events: list[dict[str, object]] = []
        # the least time between two queries of the scheduler (the site's
        # policies.scheduler_poll_seconds, set by validate); 0: as often as wait() wakes
        self.poll_s = 0.0
        self._queried_at = float("-inf")

    def pace(self) -> float:
        """The least time between two queries of this executor's scheduler."""
        return self.poll_s

    def query(self, handles: list[Handle], force: bool = False) -> None:
        """:meth:`refresh`, at most once every :attr:`poll_s` seconds (a site's rule on
        scheduler traffic); ``force``: now all the same, but not twice within a second."""
        now = time.monotonic()
        since = now - self._queried_at
        if since < self.poll_s and not (force and since >= min(1.0, self.poll_s)):
            return
        self._queried_at = now
        self.refresh(handles)

    def _event(self, handle: Handle, what: str) -> None:
        self.events.append({"t": time.time(), "job": handle.job_id, "event": what,
                            "state": handle.state})

    def _run(self, *argv: str, timeout: float = 60, stdin: Path | None = None) -> Completed:
        """Run one scheduler command with the executor's environment (through ``sh``): no
        shell, stdin from a file or nothing; a command that is missing, hangs past
        ``timeout`` or dies of a signal is a failed result that says so, never an exception."""
        return run_command(list(argv), self.env, timeout, stdin)

    def _submitted(self, proc: Completed, command: str, script: Path) -> None:
        """Raise the scheduler's own words when it refused a submission."""
        if proc.returncode != 0:
            raise HpcprovError(f"{command} refused {script.name}: "
                               f"{(proc.stderr or proc.stdout).strip()}")

    def _accepted(self, job_id: str, script: Path, output: Path, exit_file: Path) -> Handle:
        """The handle of a job the scheduler took under ``job_id``, recorded as submitted."""
        h = Handle(job_id, script, output, exit_file, time.monotonic())
        self._event(h, "submitted")
        return h

    def _started(self, h: Handle) -> None:
        """Mark a job running the first time the scheduler says it runs."""
        if h.started is None:
            h.started, h.state = time.monotonic(), "RUNNING"
            self._event(h, "state")

    def _finished(self, h: Handle, code: int | None, why: str, unknown: str) -> None:
        """End a job the scheduler says ended (or no longer knows) with status ``code``, else
        the status file's; its reason ``why``, or ``unknown`` when neither gave a status."""
        if code is None:
            code = read_exit(h.exit_file)
        h.exit_code, h.ended = code, time.monotonic()
        h.state = final_state(code)
        h.reason = why or (unknown if code is None else "")
        self._event(h, "state")

    def _nodes_failed(self, h: Handle, dead: dict[str, str], what: str) -> None:
        """Cancel a job some of whose nodes stopped answering and name them: ``dead`` maps
        each such node of the job to its state, which the scheduler calls ``what``."""
        self.cancel(h)
        h.state, h.exit_code, h.ended = "NODE_FAIL", None, time.monotonic()
        h.bad_nodes = ",".join(dead)
        h.reason = "node " + ", ".join(f"{n} stopped answering ({what} {state})"
                                       for n, state in dead.items())
        self._event(h, "cancelled: " + h.reason)

    def submit(self, script: Path, output: Path, exit_file: Path,
               place: Placement | None = None) -> Handle:
        """Submit a job script (``place``: where it runs, for executors that run jobs as
        steps of one allocation; a job of its own is placed by its script)."""
        raise NotImplementedError

    def close(self) -> None:
        """Release what the executor holds beyond its jobs (an allocation): nothing here."""

    def abort(self, handles: list[Handle]) -> list[str]:
        """Cancel at once every job of ``handles`` that has not ended, and whatever the
        executor holds (an allocation): the run was interrupted. What was cancelled, in
        words (``job 12``), for the one line that says so."""
        gone = []
        for h in handles:
            if not h.done:
                self.cancel(h)
                interrupted(h)
                self._event(h, h.reason)
                gone.append(f"job {h.job_id}")
        return gone

    def refresh(self, handles: list[Handle]) -> None:
        raise NotImplementedError

    def cancel(self, handle: Handle) -> None:
        raise NotImplementedError

    def usable_nodes(self, partition: str, picks: dict[str, str | None] | None = None
                     ) -> list[str] | None:
        """The partition's nodes that can run jobs now, or None where unknown. ``picks``:
        where the partition's name is no queue (``routing: options``), the job options that
        pick its nodes (constraint, qos, ...)."""
        return None

    def wait(self, handles: list[Handle], timeout_s: float, pending_timeout_s: float | None
             = None) -> None:
        """Poll until every job ended or the timeout; late jobs are cancelled and marked.

        The delay starts at 20 ms and grows to 0.5 s, so a short job is noticed quickly
        and a long one costs few scheduler queries. Between queries it watches each job's
        status file (:meth:`_nap`): the file appears when the job's script ends, and the
        scheduler is asked within 20 ms of that, the delay starting over, instead of up to
        half a second later. Where the site limits its scheduler traffic (:attr:`poll_s`),
        the scheduler is asked at most that often, but at once (within a second of the
        last) when every job left has ended its script, and before a job is given up."""
        deadline = time.monotonic() + timeout_s
        delay = 0.02
        seen: set[str] = set()  # jobs whose status file has appeared
        while True:
            live = [h for h in handles if not h.done]
            if not live:
                return
            # the scheduler is asked at most every poll_s (query), but at once when every
            # job left has ended its script: the verdict does not wait for the next turn
            self.query(live, force=all(h.job_id in seen for h in live))
            now = time.monotonic()
            for h in live:
                if h.done:
                    self._event(h, f"ended rc={h.exit_code}")
                    continue
                stuck = (pending_timeout_s is not None and h.started is None
                         and now - h.submitted > pending_timeout_s)
                if (now > deadline or stuck) and self.poll_s > 1:
                    self.query([h], force=True)  # what is known may be a turn old: ask first
                    if h.done:
                        self._event(h, f"ended rc={h.exit_code}")
                        continue
                    stuck = stuck and h.started is None
                if now > deadline or stuck:
                    self._give_up(h, stuck, timeout_s, pending_timeout_s, now)
            if all(h.done for h in handles):
                return
            delay = 0.02 if self._nap(delay, [h for h in live if not h.done], seen) \
                else min(delay * 1.5, 0.5)

    @staticmethod
    def _nap(delay: float, handles: list[Handle], seen: set[str]) -> bool:
        """Sleep ``delay`` seconds, or less: until the status file of a job not in ``seen``
        appears (its script ended). True, and the job added to ``seen``, when one did."""
        end = time.monotonic() + delay
        while True:
            for h in handles:
                if h.job_id not in seen and os.path.exists(h.exit_file):
                    seen.add(h.job_id)
                    return True
            left = end - time.monotonic()
            if left <= 0:
                return False
            time.sleep(min(left, 0.02))

    def _give_up(self, h: Handle, stuck: bool, timeout_s: float,
                 pending_timeout_s: float | None, now: float) -> None:
        self.cancel(h)
        h.state = "PENDING_TIMEOUT" if stuck else "TIMEOUT"
        h.reason = (f"still pending after {pending_timeout_s:.0f} s" if stuck
                    else f"not finished after {timeout_s:.0f} s")
        h.exit_code, h.ended = None, now
        self._event(h, "cancelled: " + h.reason)


def submitted_job_id(stdout: str, pattern: str, command: str, script: Path) -> str:
    """The job id a submit command printed: the last non-empty line of its output (a
    site's notice or a wrapper's words may come before it), where the whole line has the
    form ``pattern`` (its first group, where it has one, is the id); else the scheduler's
    error naming the command and the end of what it printed (escaped, bounded)."""
    lines = [line.strip() for line in stdout.splitlines() if line.strip()]
    m = re.fullmatch(pattern, lines[-1]) if lines else None
    if m is None:
        text = stdout.strip()
        printed = (repr(text) if len(text) <= 200 else "..." + repr(text[-200:])) \
            if text else "nothing"
        raise HpcprovError(f"{command} gave no job id for {script.name} (its last line "
                           f"should be one): it printed {printed}")
    return m.group(1) if m.re.groups else m.group(0)


def interrupted(h: Handle) -> None:
    """Mark a job that was running or queued as cancelled because the run was interrupted."""
    h.state, h.ended, h.exit_code = "CANCELLED", time.monotonic(), None
    h.reason = "cancelled: the run was interrupted"


def read_exit(path: Path) -> int | None:
    """The exit status the job script's EXIT trap wrote (first field), or None. Read as a
    regular file of this user's that nobody else may write (else another could forge a
    status), of at most 4 KiB (a status and two times): a FIFO there is never waited on,
    /dev/zero never read, a symlink never followed; each is no status."""
    from hpcprov.core.fsutil import read_regular
    from hpcprov.core.text import status_number

    try:
        return status_number(read_regular(path, 4096, follow=False, owned_only=True)
                             .decode(errors="replace").split()[0])
    except (OSError, ValueError, IndexError):
        return None


def final_state(code: int | None) -> str:
    """The state of an ended job from its exit status; no status learned is UNKNOWN."""
    return "UNKNOWN" if code is None else ("COMPLETED" if code == 0 else "FAILED")


def read_run_seconds(path: Path) -> float | None:
    """The job's own run time, from the start and end the EXIT trap wrote, or None (read
    as :func:`read_exit` reads the file)."""
    from hpcprov.core.fsutil import read_regular

    try:
        _, start, end = read_regular(path, 4096, follow=False, owned_only=True).decode(
            errors="replace").split()[:3]
        return max(0.0, float(end) - float(start))
    except (OSError, ValueError):
        return None
