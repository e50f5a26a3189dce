"""The srun launcher: the scheduler's own task starter (Slurm), one task per rank."""

from __future__ import annotations

from hpcprov.jobs.launchers.common import Context, Launch, exported_rendezvous, srun_prefix
from hpcprov.request.job import JobRequest


def build(req: JobRequest, context: Context) -> Launch:
    prefix, setup = srun_prefix(req, context)
    if req.launch.rendezvous_env:
        setup = [*setup, *exported_rendezvous(req)]
    return Launch([*prefix, *req.launch.args, *req.command], setup)
