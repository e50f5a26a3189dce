"""The flux launcher: ``flux run``, Flux's own task starter, one task per rank.

``flux run`` inside a Flux job starts tasks in that job's instance and always carries the
geometry (without it, one task runs): ``-N NODES -n TASKS``, ``-c`` CPUs and ``-g`` GPUs per
task. Every task sees all of its node's GPUs of the job unless ``-o gpu-affinity=per-task``
gives each its own (the partition's ``gpus.per_rank: one``).
"""

from __future__ import annotations

from hpcprov.jobs.launchers.common import Context, Launch, exported_rendezvous
from hpcprov.request.job import JobRequest


def run_words(req: JobRequest) -> list[str]:
    """``flux run`` with the job's tasks, CPUs and GPUs per task, and the GPU affinity."""
    argv = ["flux", "run", "-N", str(req.nodes), "-n", str(req.world_size)]
    if req.task_cpus:
        argv += ["-c", str(req.task_cpus)]
    per_task = req.gpus // req.ranks_per_node if req.gpus > 0 else 0
    if per_task:
        argv += ["-g", str(per_task)]
    if req.gpus > 0 and req.part.gpus.per_rank == "one":
        argv += ["-o", "gpu-affinity=per-task"]
    return argv


def build(req: JobRequest, context: Context) -> Launch:
    setup = exported_rendezvous(req) if req.launch.rendezvous_env else []
    return Launch([*run_words(req), *req.launch.args, *req.command], setup)
