"""The lrun launcher (LLNL's jsrun wrapper on IBM LSF sites): ``lrun -N<nodes>
-T<tasks per node>``, its options written without a space (lrun refuses ``-N 2``)."""

from __future__ import annotations

from hpcprov.jobs.launchers.common import Context, Launch, exported_rendezvous
from hpcprov.request.job import JobRequest


def build(req: JobRequest, context: Context) -> Launch:
    """``lrun -N<nodes> -T<ranks per node> CMD``: lrun lays out the resource sets itself
    and binds one GPU to each rank unless the launcher's args say ``--gpubind=off``; jsrun
    options and ``-M`` (Spectrum MPI's) go in the launcher's args. The same line in a job
    script and in an allocation: lrun would otherwise take every node of the allocation."""
    setup = exported_rendezvous(req) if req.launch.rendezvous_env else []
    argv = ["lrun", f"-N{req.nodes}", f"-T{req.ranks_per_node}"]
    return Launch([*argv, *req.launch.args, *req.command], setup)
