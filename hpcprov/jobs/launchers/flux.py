"""The flux launcher: ``flux run``, Flux's own task starter, one task per rank (its words:
:meth:`hpcprov.schedulers.flux.Flux.tasks`)."""

from __future__ import annotations

from hpcprov.jobs.launchers.common import Context, Launch, exported_rendezvous
from hpcprov.jobs.launchers.tasks import task_starter
from hpcprov.request.job import JobRequest


def build(req: JobRequest, context: Context) -> Launch:
    start = task_starter(req, context)
    setup = exported_rendezvous(req) if req.launch.rendezvous_env else []
    return Launch([*start.argv, *req.launch.args, *req.command], [*start.setup, *setup])
