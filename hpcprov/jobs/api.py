"""`hpcprov launch`, `hpcprov jobscript` and `hpcprov site check` as Python functions, with
typed requests and typed results.

    from hpcprov.jobs.api import plan_jobscript, request
    job = plan_jobscript(request("neuron", nodes=2, command=("python", "train.py")))
    print(job.script)             # what `hpcprov jobscript` prints
    print(job.warnings)           # lint warnings (errors raise LintFailed)

Planning only: nothing here submits or runs anything (the file a script is written to is
the one effect, and only where asked). The CLI parses flags into a :class:`JobRequest`
(through :func:`request`) and prints what comes back.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from hpcprov.core.findings import Finding
from hpcprov.core.fsutil import write_output
from hpcprov.request.job import JobRequest

if TYPE_CHECKING:
    from hpcprov.core.errors import ProfileError


def request(site: str | None = None, options: Iterable[str] = (), store: bool = True,
            **fields: Any) -> JobRequest:
    """The job a command line describes, as the request every generator reads. Two of its
    fields are typed in another form than :class:`JobRequest` holds them, and become its
    own here: ``site``, a profile's name or path (None: the default site; ``store`` off:
    the profile cache is read, never written), and ``options``, the scheduler options as
    typed (``NAME=VALUE``: a typo is a one-line error). Every other field is passed as it
    is, by its own name (``nodes=2``, ``time="1:00:00"``, ``command=(...)``)."""
    from hpcprov.request.options import parse_option
    from hpcprov.site.catalog import load

    return JobRequest(site=load(site, store), options=dict(parse_option(opt) for opt in options),
                      **fields)


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


# setup lines that only assign (a launch's variables, the rank contract's text)
_CANNOT_STOP = ("hpcprov_rank='", "export ", "unset ")


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
    software: list[str]  # the modules and the Python environment, as the batch job's

    @property
    def typed(self) -> list[str]:
        """The launch with what it needs first, as lines a person types into the shell of an
        allocation: the setup and the launch in a subshell, so that a setup line that stops
        (``exit 1``: no image matches) ends the subshell, not the person's shell. Setup of
        assignments only (the rank contract, ``export``, ``unset``), which cannot stop a
        shell, is typed as it is."""
        if all(line.startswith(_CANNOT_STOP) for line in self.setup):
            return [*self.setup, self.line]
        return ["(", *self.setup, self.line, ")"]

    @property
    def allocate_line(self) -> str | None:
        from hpcprov.core.shell import join

        return join(self.allocate) if self.allocate else None

    def lines(self, allocate: bool = False) -> list[str]:
        """What `hpcprov launch` prints: (the allocation,) the variables, setup, launch."""
        first = [self.allocate_line] if allocate and self.allocate_line else []
        return [*first, *self.software, *self.env, *self.typed]

    def to_json(self) -> dict[str, object]:
        return {**self.geometry.to_json(), "argv": self.argv, "line": self.line,
                "software": self.software, "env": self.env, "setup": self.setup,
                "allocate": self.allocate,
                "allocate_line": self.allocate_line,
                "warnings": [w.to_json() for w in self.warnings]}


def plan_launch(req: JobRequest, allocate: bool = False) -> LaunchPlan:
    """Lint and plan a launch (lint errors raise LintFailed). With ``allocate`` the job
    options are linted as the allocation's; without, as a line typed inside one, which
    passes none of the mandatory options."""
    from hpcprov.jobs.jobscript import allocate_argv, software_lines
    from hpcprov.jobs.launchers import build_launch, env_lines
    from hpcprov.jobs.lint import check

    warnings = check(req, allocation=allocate)
    launch = build_launch(req, "allocation")
    return LaunchPlan(Geometry.of(req), [str(a) for a in launch.argv], launch.line,
                      env_lines(req), list(launch.setup), [str(a) for a in allocate_argv(req)],
                      warnings, software_lines(req))


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


def plan_jobscript(req: JobRequest, path: str | None = None) -> JobScript:
    """Lint and write out a job's batch script (errors raise LintFailed); with ``path``,
    the script is also written there (an unwritable path is a one-line UsageError)."""
    from hpcprov.jobs.jobscript import build_jobscript, submit_argv
    from hpcprov.jobs.lint import check

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
    """Validate each profile and lint each partition's default job: each of ``files`` a
    file, or a site's name on the search path where no file of that name is here (the
    report then names the file it found). ``probe_nvcc``: the nvcc on PATH answers for a
    CUDA build whose modules name no CUDA (runs it)."""
    from hpcprov.core.errors import ProfileError
    from hpcprov.jobs.lint import site_check_errors
    from hpcprov.site.loader import find_profile, is_path_ref

    found: dict[str, list[ProfileError]] = {}
    for ref in files:
        path = Path(ref)
        if not is_path_ref(ref) and not path.exists():
            try:
                path = find_profile(ref)
            except ProfileError as exc:
                found[ref] = [exc]
                continue
        found[str(path)] = site_check_errors(path, probe_nvcc=probe_nvcc)
    return SiteCheck(found)
