"""PBS Pro / OpenPBS: ``#PBS`` directives, ``qsub -I``, ``$PBS_NODEFILE``, qsub/qstat/qdel.

A job's exit status comes from ``qstat -x -f`` (``-x`` includes finished jobs) while the
server keeps job history, else from the status file the job script's EXIT trap wrote.
"""

from __future__ import annotations

import re
from pathlib import Path

from hpcprov.core.findings import Finding
from hpcprov.core.shell import Raw, Template
from hpcprov.core.text import status_number
from hpcprov.core.walltime import hours_minutes_seconds
from hpcprov.request.job import JobRequest
from hpcprov.request.options import Option, required_options
from hpcprov.schedulers.base import (
    Backend,
    Executor,
    Handle,
    Placement,
    slots_list,
    submitted_job_id,
    unique_hosts,
)
from hpcprov.schedulers.spelling import PBS
from hpcprov.site.sections import SELECT_FIELD, PbsOptions, check_select

# qsub's options that set the job's geometry (what hpcprov's own flags set)
GEOMETRY_OPTIONS = {"q": "queue", "queue": "queue", "partition": "queue"}
# -l resources that do: hpcprov writes select (and walltime) itself, and PBS Pro refuses
# the old-style job-wide ones (nodes, ncpus...) beside select
GEOMETRY_RESOURCES = {
    "select": "chunks", "place": "placement", "nodes": "nodes", "nodect": "nodes",
    "ncpus": "cpus", "mpiprocs": "tasks", "ngpus": "gpus", "walltime": "time",
}
# what qsub prints: SEQUENCE[.SERVER] (1234.pbs01.example.org), an array job's with []
# (1234[].pbs01)
JOB_ID = r"[0-9]{1,20}(?:\[[0-9]*\])?(?:\.[A-Za-z0-9][A-Za-z0-9_.-]{0,254})?"
_DONE = {"F", "X"}          # finished; a finished subjob
_RUNNING = {"R", "E", "B"}  # running; exiting; an array job with subjobs running


def render_select(text: str, values: dict[str, int]) -> str:
    """The select value with its fields filled in (checked first)."""
    check_select(text)
    return re.sub(SELECT_FIELD, lambda m: str(values[m.group(1)]), text)


def flag_of(name: str) -> str | None:
    """The qsub flag an option name is written as (``account``: -A, ``P``: -P), or None:
    a -l resource (PBS's spelling, :data:`PBS`)."""
    flag = PBS.flag(name)
    return None if flag.startswith(PBS.long) else flag


def resources(name: str, value: str | None) -> list[str]:
    """The -l resources an option asks for (lower case: PBS resource names are
    case-insensitive): ``mem`` for ``mem=4gb``, ``mem`` and ``ncpus`` for ``l`` with
    ``mem=4gb,ncpus=2``; none for another flag."""
    if name == "l":
        return [item.partition("=")[0].strip().lower() for item in (value or "").split(",")]
    return [] if flag_of(name) else [name.lower()]


def flag_key(name: str, value: str | None = None) -> str:
    """What qsub reads an option as: its flag, or ``-l`` and its resources' names."""
    if name == "l" and value:
        return "-l " + ",".join(resources(name, value))
    return flag_of(name) or "-l " + name.lower()


def directive(name: str, value: str | None) -> str:
    """The text after ``#PBS `` for one generic option, or one of qsub's own flags."""
    return PBS.text(name, value)


def once(opts: list[Option]) -> list[Option]:
    """Each option once, as qsub reads it (``queue``, ``partition`` and ``q`` are all -q; a
    -l resource's name is case-insensitive): the later, more specific value (a partition's
    option over hpcprov's own, the user's over both) in the first one's place."""
    last = {flag_key(name, value): (name, value) for name, value in opts}
    out: list[Option] = []
    for name, value in opts:
        if (option := last.pop(flag_key(name, value), None)) is not None:
            out.append(option)
    return out


class Pbs(Backend[PbsOptions]):
    name = "pbs"
    title = "PBS"
    marker = "pbsnodes"
    discovery = "hpcprov.schedulers.discovery.pbs"
    spelling = PBS
    section_type = PbsOptions
    variable = re.compile(r"\$\{?PBS_[A-Z_]+")
    variable_example = "$PBS_NODEFILE"
    monitor = "qstat -u $USER"

    geometry_options = GEOMETRY_OPTIONS

    def geometry_of(self, req: JobRequest, name: str, value: str | None) -> str | None:
        """As the base, and a -l resource that sets the geometry, however given: as the
        option's name (``-o select=2:ncpus=8``, written ``-l select=...``), in a -l list
        (``-o "-l nodes=2,walltime=1:00:00"``), attached to -l (``-o -lselect=2``)."""
        kind = super().geometry_of(req, name, value)
        if kind is not None:
            return kind
        low = name.lower()  # PBS resource names are case-insensitive
        if low == "l":
            listed = [item.partition("=")[0].strip().lower() for item in (value or "").split(",")]
            return next((GEOMETRY_RESOURCES[r] for r in listed if r in GEOMETRY_RESOURCES), None)
        return GEOMETRY_RESOURCES.get(low) or (
            GEOMETRY_RESOURCES.get(low[1:]) if low.startswith("l") else None)

    def options(self, req: JobRequest, *, batch: bool) -> list[Option]:
        conf = self.section(req.site)
        opts: list[Option] = []
        # the server's default queue takes jobs without -q; another queue must be named, and
        # so must the one a user chose (-p), or every one where the site says so
        named = (req.partition is not None or conf.queue_always
                 or req.partition_name != req.site.partition()[0])
        if req.part.routing == "partition" and named:
            opts.append(("queue", req.partition_name))
        cpt = req.job_cpus_per_task or 1
        select = render_select(conf.select_format, {
            "nodes": req.nodes, "ncpus": cpt * req.scheduler_tasks_per_node, "gpus": req.gpus,
            "mpiprocs": req.scheduler_tasks_per_node})
        opts.append(("select", select))
        if walltime := req.walltime_for(batch=batch):  # PBS takes no days: [D-]HH:MM:SS as
            opts.append(("walltime", hours_minutes_seconds(walltime)))  # hours (168:00:00)
        if conf.output:
            opts.append(("output", conf.output))
        if conf.error:
            opts.append(("error", conf.error))
        if conf.join_output:
            opts.append(("join", "oe"))
        written = {name for name, _ in opts}  # a mandatory option hpcprov writes: once
        head = [("job-name", req.job_name or "hpcprov"),
                *((n, v) for n, v in required_options(req, self.key_of(req.site))
                  if n not in written)]
        return once(self.with_overrides(req, [*head, *opts]))

    def prolog(self, req: JobRequest) -> list[str]:
        return ['cd "$PBS_O_WORKDIR"']

    def flag_key(self, name: str, value: str | None = None) -> str:
        return flag_key(name, value)

    def same_option(self, name: str, value: str | None, other: str) -> bool:
        """As the base, and a -l list that asks for the resource ``other`` among others."""
        return (super().same_option(name, value, other)
                or (other.lower() in resources(name, value) and not flag_of(other)))

    def allocate_argv(self, req: JobRequest) -> list[str]:
        argv = ["qsub", "-I"]
        for name, value in self.options(req, batch=False):
            argv += directive(name, value).split(" ", 1)
        return argv

    def first_node(self, req: JobRequest) -> str:
        return Raw('"$(head -n 1 "$PBS_NODEFILE")"')

    def host_slots(self, req: JobRequest, slots: int, *, horovodrun: bool,
                   template: str | None) -> list[str]:
        """mpirun reads ``$PBS_NODEFILE`` as it is (one line per slot); horovodrun cannot
        (its host files need ``host slots=N``), nor can hosts renamed to their network
        names, so those get ``-H`` built from the file."""
        if horovodrun or template:
            return ["-H", slots_list(unique_hosts("PBS_NODEFILE"), slots, template)]
        return ["--hostfile", Template("$PBS_NODEFILE")]

    def job_id(self) -> str | None:
        return Raw('"$PBS_JOBID"')

    def lint(self, req: JobRequest) -> list[Finding]:
        found: list[Finding] = []
        renamed = req.launch.host_name is not None and req.host_name  # -H host:slots instead
        if (req.launch.kind.value == "mpirun" and not req.hosts and not renamed
                and not req.launch.oversubscribe):
            found.append(Finding("error", "pbs-slots",
                                 "$PBS_NODEFILE lists one line per slot, so mpirun refuses to "
                                 f"place {req.ranks_per_node} ranks per node",
                                 f"set 'oversubscribe: true' on launcher {req.launcher_name}"))
        return found

    def executor(self, env: dict[str, str] | None = None) -> Executor:
        return PbsExecutor(env)


BACKEND = Pbs()


def fields(text: str) -> dict[str, str]:
    """The attributes of one job in `qstat -f` output (`    name = value`; long values
    continue on lines that start with a tab)."""
    out: dict[str, str] = {}
    last = None
    for line in text.splitlines():
        if line.startswith("\t") and last:
            out[last] += line.strip()
        elif " = " in line and line.startswith("    "):
            last, _, value = line.strip().partition(" = ")
            out[last] = value
    return out


def exit_status(value: str | None) -> tuple[int | None, str]:
    """A PBS `Exit_status` as a shell-style status, and why when PBS itself failed it:
    >= 0 the script's status, > 256 killed by signal (value - 256), < 0 PBS could not run
    the job (JOB_EXEC_* codes)."""
    code = status_number(value)
    if code is None:
        return None, ""
    if code < 0:
        return code, f"PBS could not run the job (Exit_status {code})"
    return (128 + code - 256 if code > 256 else code), ""


class PbsExecutor(Executor):
    """qsub, then `qstat -x -f` (PBS Pro / OpenPBS: -x includes finished jobs); the status
    file gives the exit code once the server has forgotten the job (job history off)."""

    name = "pbs"

    def submit(self, script: Path, output: Path, exit_file: Path,
               place: Placement | None = None) -> Handle:
        proc = self._run(*PBS.submit, *PBS.argv("output", str(output)),
                         *PBS.argv("join", "oe"), str(script))
        self._submitted(proc, "qsub", script)
        job = submitted_job_id(proc.stdout, JOB_ID, "qsub", script)
        return self._accepted(job, script, output, exit_file)

    def refresh(self, handles: list[Handle]) -> None:
        for h in handles:
            proc = self._run("qstat", "-x", "-f", h.job_id)
            info = fields(proc.stdout) if proc.returncode == 0 else {}
            state = info.get("job_state", "")
            if info.get("exec_host"):
                h.nodes = ",".join(dict.fromkeys(
                    part.split("/")[0] for part in info["exec_host"].split("+")))
            if not info or state in _DONE:
                self._ended(h, info)
            elif state in _RUNNING:
                self._started(h)
            else:  # Q, H, W, T, S, U, M: not running (yet)
                h.reason = info.get("comment", "")

    def _ended(self, h: Handle, info: dict[str, str]) -> None:
        code, why = exit_status(info.get("Exit_status"))
        self._finished(h, code, why,
                       "the server no longer knows the job and it left no status file")

    def cancel(self, handle: Handle) -> None:
        self._run("qdel", handle.job_id)
