"""The mpirun launcher (Open MPI): ranks started over the job's hosts; the variables
its ranks need are named to it (``-x``)."""

from __future__ import annotations

from hpcprov import schedulers
from hpcprov.core.shell import Raw
from hpcprov.jobs.launchers.common import Context, Launch, first_node, host_slots, named_env
from hpcprov.request.job import JobRequest
from hpcprov.site.gpu_vendors import VENDORS


def _rendezvous_env(req: JobRequest) -> tuple[list[str], list[str]]:
    """(mpirun -x words, setup lines) exporting MASTER_ADDR / MASTER_PORT."""
    port = str(req.rendezvous_port)
    setup = [f"export MASTER_PORT={port}"]
    words = ["-x", Raw(f"MASTER_ADDR={first_node(req)}"), "-x", "MASTER_PORT"]
    return words, setup


def build(req: JobRequest, context: Context) -> Launch:
    launcher = req.launch
    hosts, setup = host_slots(req)
    setup = [*schedulers.of(req.site).daemon_setup(req), *setup]
    argv = ["mpirun", "-np", str(req.world_size), *hosts]
    if launcher.oversubscribe:
        argv.append("--oversubscribe")
    if launcher.rendezvous_env:
        words, lines = _rendezvous_env(req)
        argv += words
        setup += lines
    if launcher.set_cuda_visible_devices and req.gpus > 0:
        name = VENDORS[req.part.gpus.vendor].visible_devices
        argv += ["-x", f"{name}=" + ",".join(str(i) for i in range(req.gpus))]
    # mpirun passes no variable to ranks started through ssh unless told: the launcher's
    # export_env, the site's env and the network variables
    for name in named_env(req):
        argv += ["-x", name]
    return Launch([*argv, *launcher.args, *req.command], setup)
