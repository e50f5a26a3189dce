"""The jsrun launcher (IBM's LSF job step launcher)."""

from __future__ import annotations

from hpcprov.jobs.launchers.common import Context, Launch, exported_rendezvous
from hpcprov.request.job import JobRequest


def build(req: JobRequest, context: Context) -> Launch:
    """jsrun (IBM's LSF job step launcher): one resource set per rank, each with its share
    of a node's CPUs and GPUs, as many per host as ranks per node."""
    ranks = req.ranks_per_node
    cpus = req.task_cpus or max(int(req.part.cores_per_node) // ranks, 1)
    gpus = req.gpus // ranks if req.gpus else 0
    setup = []
    if req.launch.rendezvous_env:
        setup = exported_rendezvous(req)
    argv = ["jsrun", f"--nrs={req.world_size}", "--tasks_per_rs=1", f"--cpu_per_rs={cpus}",
            f"--gpu_per_rs={gpus}", f"--rs_per_host={ranks}"]
    return Launch([*argv, *req.launch.args, *req.command], setup)
