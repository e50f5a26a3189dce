"""`hpcprov launch`, `hpcprov jobscript` and `hpcprov site check` as Python functions, with
typed options and typed results.

    from hpcprov.jobs.api import JobOptions, plan_jobscript
    job = plan_jobscript(JobOptions(site="neuron", nodes=2, command=("python", "train.py")))
    print(job.script)             # what `hpcprov jobscript` prints
    print(job.warnings)           # lint warnings (errors raise LintFailed)

Planning only: nothing here submits or runs anything (the file a script is written to is
the one effect, and only where asked). The CLI parses flags into these objects and prints
what comes back.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from hpcprov.core.findings import Finding
from hpcprov.core.fsutil import write_output
from hpcprov.request.job import JobRequest

if TYPE_CHECKING:
    from hpcprov.core.errors import ProfileError


class JobOptions(NamedTuple):
    """What `hpcprov launch` and `hpcprov jobscript` take (the CLI's flags, by name)."""

    command: tuple[str, ...]
    site: str | None = None
    nodes: int = 1
    gpus_per_node: int | None = None
    partition: str | None = None
    launcher: str | None = None
    tasks_per_node: int | None = None
    hosts: tuple[str, ...] = ()
    image: str | None = None
    options: tuple[str, ...] = ()  # NAME=VALUE scheduler options, as typed
    walltime: str | None = None
    job_name: str | None = None
    cpus_per_task: int | None = None
    prefix: str | None = None  # jobscript: the environment to activate (default: the site's)
    activate: bool = True


def request(o: JobOptions) -> JobRequest:
    """The job request of ``o`` against its site (an option typo is a one-line error)."""
    from hpcprov.request.options import parse_option
    from hpcprov.site.catalog import load

    return JobRequest(
        site=load(o.site), nodes=o.nodes, gpus_per_node=o.gpus_per_node,
        command=tuple(o.command), partition=o.partition, launcher=o.launcher,
        tasks_per_node=o.tasks_per_node, cpus_per_task=o.cpus_per_task, time=o.walltime,
        job_name=o.job_name, options=dict(parse_option(opt) for opt in o.options),
        hosts=tuple(o.hosts), image=o.image, prefix=o.prefix, activate=o.activate)


class Geometry(NamedTuple):
    """Where and how wide a job runs, as the request resolved it."""

    site: str
    partition: str
    nodes: int
    gpus_per_node: int
    ranks_per_node: int
    world_size: int
    launcher: str

    @classmethod
    def of(cls, req: JobRequest) -> Geometry:
        return cls(req.site.name, req.partition_name, req.nodes, req.gpus,
                   req.ranks_per_node, req.world_size, req.launcher_name)

    def to_json(self) -> dict[str, object]:
        return dict(self._asdict())


class LaunchPlan(NamedTuple):
    """The launch line of a job inside an allocation, what it needs first, and the line
    that asks for the allocation."""

    geometry: Geometry
    argv: list[str]
    line: str
    env: list[str]  # the site's and the partition's variables
    setup: list[str]  # lines the launch needs first
    allocate: list[str]  # salloc/qsub -I/bsub -Is argv ([] where the site has none)
    warnings: list[Finding]

    @property
    def allocate_line(self) -> str | None:
        from hpcprov.core.shell import join

        return join(self.allocate) if self.allocate else None

    def lines(self, allocate: bool = False) -> list[str]:
        """What `hpcprov launch` prints: (the allocation,) the variables, setup, launch."""
        first = [self.allocate_line] if allocate and self.allocate_line else []
        return [*first, *self.env, *self.setup, self.line]

    def to_json(self) -> dict[str, object]:
        return {**self.geometry.to_json(), "argv": self.argv, "line": self.line,
                "env": self.env, "setup": self.setup, "allocate": self.allocate,
                "allocate_line": self.allocate_line,
                "warnings": [w.to_json() for w in self.warnings]}


def plan_launch(o: JobOptions, allocate: bool = False) -> LaunchPlan:
    """Lint and plan a launch (lint errors raise LintFailed). With ``allocate`` the job
    options are linted as the allocation's; without, as a line typed inside one, which
    passes none of the mandatory options."""
    from hpcprov.jobs.jobscript import allocate_argv
    from hpcprov.jobs.launchers import build_launch, env_lines
    from hpcprov.jobs.lint import check

    req = request(o)
    warnings = check(req, allocation=allocate)
    launch = build_launch(req, "allocation")
    return LaunchPlan(Geometry.of(req), [str(a) for a in launch.argv], launch.line,
                      env_lines(req), list(launch.setup), [str(a) for a in allocate_argv(req)],
                      warnings)


class JobScript(NamedTuple):
    """A batch script, how to submit it, and lint's warnings."""

    geometry: Geometry
    script: str
    submit: list[str]  # the submit argv for the script at ``path`` (job.sh where none)
    path: str | None
    warnings: list[Finding]

    def to_json(self) -> dict[str, object]:
        return {**self.geometry.to_json(), "script": self.script, "path": self.path,
                "submit": self.submit, "warnings": [w.to_json() for w in self.warnings]}


def plan_jobscript(o: JobOptions, path: str | None = None) -> JobScript:
    """Lint and write out a job's batch script (errors raise LintFailed); with ``path``,
    the script is also written there (an unwritable path is a one-line UsageError)."""
    from hpcprov.jobs.jobscript import build_jobscript, submit_argv
    from hpcprov.jobs.lint import check

    req = request(o)
    warnings = check(req)
    text = build_jobscript(req)
    if path:
        write_output(path, text)
    return JobScript(Geometry.of(req), text, [str(a) for a in submit_argv(req, path or "job.sh")],
                     path, warnings)


class SiteCheck(NamedTuple):
    """`hpcprov site check`: each file's problems, one line each (none: the file is ok)."""

    files: dict[str, list[ProfileError]]

    @property
    def ok(self) -> bool:
        return not any(self.files.values())

    def to_json(self) -> dict[str, object]:
        return {"ok": self.ok, "files": {f: [str(e) for e in errors]
                                         for f, errors in self.files.items()}}


def check_sites(files: list[str] | tuple[str, ...], probe_nvcc: bool = True) -> SiteCheck:
    """Validate each profile file and lint each partition's default job. ``probe_nvcc``:
    the nvcc on PATH answers for a CUDA build whose modules name no CUDA (runs it)."""
    from hpcprov.jobs.lint import site_check_errors

    return SiteCheck({f: site_check_errors(Path(f), probe_nvcc=probe_nvcc) for f in files})
