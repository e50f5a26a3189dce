"""The mpiexec launcher of MPICH/Intel MPI (Hydra) or HPE Cray (PALS)."""

from __future__ import annotations

from hpcprov import schedulers
from hpcprov.jobs.launchers.common import Context, Launch, exported_rendezvous
from hpcprov.request.job import JobRequest


def build(req: JobRequest, context: Context) -> Launch:
    """mpiexec of MPICH/Intel MPI (Hydra) or HPE Cray (PALS): it reads the job's nodes from
    the scheduler and passes the whole environment to the ranks, so the rendezvous is
    exported, not given as options."""
    ppn = "-ppn" if req.launch.flavor == "hydra" else "--ppn"
    # Hydra starts its proxies with srun under Slurm: they must not be confined either
    setup = schedulers.of(req.site).daemon_setup(req)
    if req.launch.rendezvous_env:
        setup += exported_rendezvous(req)
    argv = ["mpiexec", "-n", str(req.world_size), ppn, str(req.ranks_per_node)]
    return Launch([*argv, *req.launch.args, *req.command], setup)
