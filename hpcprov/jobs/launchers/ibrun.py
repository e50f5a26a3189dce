"""The ibrun launcher (TACC's MPI wrapper, over Intel MPI's Hydra or MVAPICH2): it reads
the job's geometry from Slurm and passes the environment on to its ranks."""

from __future__ import annotations

from hpcprov import schedulers
from hpcprov.jobs.launchers.common import Context, Launch, exported_rendezvous
from hpcprov.request.job import JobRequest


def build(req: JobRequest, context: Context) -> Launch:
    """``ibrun CMD`` in a job script (the job's tasks are its geometry); typed in an
    allocation, it is told the ranks (``-n N -o 0``: N tasks from the first). Its MPI
    starts proxies with srun: they must not be confined (the scheduler's daemon setup)."""
    setup = schedulers.of(req.site).daemon_setup(req)
    if req.launch.rendezvous_env:
        setup += exported_rendezvous(req)
    geometry = ["-n", str(req.world_size), "-o", "0"] if context == "allocation" else []
    return Launch(["ibrun", *geometry, *req.launch.args, *req.command], setup)
