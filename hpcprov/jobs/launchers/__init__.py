"""Launch lines: one module per launcher kind, its facts read from the kind's data.

Each kind's facts (the keys it reads, its starters' rank variables, whether its ranks are
tasks of the scheduler's starter, how env reaches them, its roles in validation) are data in
:mod:`hpcprov.site.launcher_kinds`; its builder is ``build(req, context)`` in the module of
this package named after it, imported when a line of that kind is built. What the builders
share is in :mod:`hpcprov.jobs.launchers.common`.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import replace

from hpcprov.core.errors import UsageError
from hpcprov.jobs.launchers.common import (
    RANK_SHIM,
    RANK_SHIM_VAR,
    Context,
    Launch,
    env_lines,
    expand_hosts,
    first_node,
    network_env,
    rank_command,
    rank_shim_line,
)
from hpcprov.jobs.launchers.images import HOST_PYTHON_OUT, runtime_words
from hpcprov.jobs.roles import unstartable
from hpcprov.request.job import JobRequest
from hpcprov.site.launcher_kinds import builder_module, kind_of

__all__ = ["RANK_SHIM", "RANK_SHIM_VAR", "Context", "Launch", "build_launch", "builder",
           "env_lines", "expand_hosts", "first_node", "network_env", "rank_command",
           "rank_shim_line"]


def builder(kind: object) -> Callable[[JobRequest, Context], Launch]:
    """The ``build`` of a launcher kind's module."""
    name = str(getattr(kind, "value", kind))
    build: Callable[[JobRequest, Context], Launch] = importlib.import_module(
        builder_module(name)).build
    return build


def build_launch(req: JobRequest, context: Context = "allocation") -> Launch:
    """The launch line for a request, by the launcher's kind; where the kind's starter
    gives its ranks no torch environment, each rank starts through the rank contract
    (:func:`rank_command`; a container kind puts it inside the image itself)."""
    if not req.command:
        raise UsageError("no command given: add it after --, e.g. -- python train.py")
    name = req.launch.kind.value
    kind = kind_of(name)
    if (why := unstartable(req.site, req.launcher_name)) is not None:
        raise UsageError(why)
    build = builder(name)
    # the kind gives its ranks torch's environment itself, or (a container kind) runs the
    # rank contract inside the image, reading the variables of what starts the job's tasks
    if kind.container or not kind.starters:
        return build(req, context)
    command = rank_command(req, req.command)
    runtime = req.launch.runtime
    resolve: list[str] = []
    if runtime is not None:  # each rank started in the site's image through the runtime
        resolve, words = runtime_words(req, runtime, [])
        command = (*words, *command)
    launch = build(replace(req, command=command), context)
    out = [rank_shim_line(kind), *launch.setup, *resolve,
           *([HOST_PYTHON_OUT] if runtime else [])]
    return Launch(launch.argv, out, launch.notes)
