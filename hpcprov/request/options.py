"""Scheduler options of a job, whatever the scheduler: parsing the user's, the site's
mandatory ones, and the rule that the user's replace generated ones of the same name.

Options are (name, value) pairs with Slurm-style long names, or the scheduler's own flag
without its dash (``P`` for PBS's and LSF's ``-P``, ``alloc_flags`` for LSF's
``-alloc_flags``); each scheduler backend (:mod:`hpcprov.schedulers`) generates its own and
renders them in its own syntax. Two names are the same option where the backend writes them
as the same flag (its ``flag_key``: ``account`` and ``P`` on LSF are both ``-P``): the
user's replaces the generated one, a mandatory one given under either name is given, and a
forbidden one is refused under either.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping

from hpcprov.core.errors import UsageError
from hpcprov.core.findings import Finding
from hpcprov.core.text import has_control, shown
from hpcprov.request.job import JobRequest

Option = tuple[str, str | None]  # (long option name, value or None for a flag)
# the flag a backend writes an option as (its ``flag_key``): names of one option share it
FlagKey = Callable[[str, str | None], str]


def same_name(name: str, value: str | None) -> str:
    """The key of a backend that knows no aliases: the name itself."""
    return name


# ``name=value``, ``--name=value``, ``name``, and a value as a word of its own as schedulers
# take it too (``--name value``, ``-N 4``, ``-l select=2``); else a one-letter option with its
# value attached (``-t10:00``)
_OPTION = r"(?s)-*([A-Za-z][A-Za-z0-9_-]*)(?:(=)(.*)|\s+(\S.*))?"
_ATTACHED = r"(?s)-([A-Za-z])(\S.*)"


def parse_option(text: str) -> tuple[str, str | None]:
    """Parse ``name=value`` / ``--name=value`` / ``--name value`` / ``name`` from the
    command line (``-t10:00``: the one-letter name ``t``, value ``10:00``)."""
    if m := re.fullmatch(_OPTION, text):
        name, value = m.group(1), m.group(3) if m.group(2) else m.group(4)
    elif m := re.fullmatch(_ATTACHED, text):
        name, value = m.group(1), m.group(2)
    else:
        raise UsageError(f"--option {shown(text)}: expected NAME=VALUE, e.g. --option "
                         "comment=pytorch")
    check_value(name, value)
    return name, value


def check_value(name: str, value: str | None) -> None:
    """Refuse control characters (a newline would end a #SBATCH comment line)."""
    if value is not None and has_control(value):
        raise UsageError(f"option {shown(name)}: control characters (newlines, tabs) are not "
                         "allowed")


def given_as(req: JobRequest, name: str, key: FlagKey = same_name) -> str | None:
    """The name under which the user (``-o``) gave the option ``name``: itself, or another
    name the backend writes as the same flag (``-o P=x`` for ``account`` on LSF); None."""
    if name in req.options:
        return name
    flag = key(name, None)
    return next((n for n, v in req.options.items() if key(n, v) == flag), None)


def required_options(req: JobRequest, key: FlagKey = same_name) -> list[Option]:
    """Mandatory options: the user's value, else the site's default; none for one the user
    or the partition gives under another name of the same flag (``key``: the backend's),
    which is written as they give it."""
    out: list[Option] = []
    for name, rule in req.site.policies.required_options.items():
        alias = given_as(req, name, key)
        if alias is not None and alias != name:
            continue
        flag = key(name, None)
        if alias is None and any(key(n, v) == flag for n, v in req.part.options.items()):
            continue
        value = req.options.get(name, rule.default)
        if value is not None:
            out.append((name, value))
    return out


def short_name_findings(req: JobRequest, long_names: Mapping[str, str],
                        render: Callable[[str, str | None], str]) -> list[Finding]:
    """One-letter option names (``-o C=gpu``, a partition's ``C: gpu``): job options are
    written with long names, so ``C`` would become ``render("C", "gpu")`` (``--C=gpu``)."""
    out: list[Finding] = []
    given = {**req.part.options, **req.options}
    for name, value in given.items():
        if len(name) != 1:
            continue
        where = "-o" if name in req.options else f"partition {req.partition_name}'s option"
        long = long_names.get(name)
        if long:
            fix = f"use the long name: {long}" + ("" if value is None else f"={value}")
        else:
            fix = "use the option's long name"
        out.append(Finding("error", "short-option",
                           f"{where} {shown(name)} is a one-letter name, but job options are "
                           f"written with long names: it would become {render(name, value)}",
                           fix))
    return out


# What of a job its own flags set, and those flags: lint judges the job they describe, so no
# job option (-o) may set it. Each backend names the options of its scheduler that would
# (``Backend.geometry_options``), as keys of this table.
GEOMETRY: dict[str, tuple[str, str]] = {
    "nodes": ("node count", "-N/--nodes"),
    "tasks": ("tasks", "--tasks-per-node (ranks per node) with -N/--nodes"),
    "gpus": ("GPUs", "-G/--gpus-per-node"),
    "cpus": ("CPUs", "--cpus-per-task with --tasks-per-node"),
    "time": ("time limit", "-t/--time"),
    "queue": ("queue (partition)", "-p/--partition"),
    "chunks": ("chunks (nodes, CPUs, GPUs, tasks)",
               "-N/--nodes, -G/--gpus-per-node, --tasks-per-node, --cpus-per-task"),
    "placement": ("placement of its chunks on nodes", "-N/--nodes with --tasks-per-node"),
}


def geometry_set(req: JobRequest, geometry: Callable[[str, str | None], str | None]
                 ) -> list[tuple[str, str]]:
    """The user's options that would set the job's geometry, each as given (``name=value``)
    with what of it it sets: ``geometry(name, value)`` (the backend's) says which part (a
    key of :data:`GEOMETRY`), None for any other."""
    out = []
    for name, value in req.options.items():
        kind = geometry(name, value)
        if kind is not None:
            out.append((name if value is None else f"{name}={value}", kind))
    return out


def geometry_findings(req: JobRequest,
                      geometry: Callable[[str, str | None], str | None]) -> list[Finding]:
    """The errors of :func:`geometry_set`, each naming the flag that sets that part."""
    return [Finding("error", "geometry-option",
                    f"-o {given} would set the job's {GEOMETRY[kind][0]}, which only "
                    "hpcprov's own flags may set (lint checks the job they describe)",
                    f"use {GEOMETRY[kind][1]} instead of -o")
            for given, kind in geometry_set(req, geometry)]


def override(opts: list[Option], user: dict[str, str | None],
             key: FlagKey = same_name) -> list[Option]:
    """User options replace generated ones of the same flag (``key``: the backend's; by
    default the same name), in place, under the user's name; new ones go last."""
    users = {key(n, v): n for n, v in user.items()}
    out, seen = [], set()
    for name, value in opts:
        mine = users.get(key(name, value))
        if mine is not None:
            if mine in seen:
                continue
            name, value = mine, user[mine]
        seen.add(name)
        out.append((name, value))
    out += [(n, v) for n, v in user.items() if n not in seen]
    for name, value in out:
        check_value(name, value)
    return out
