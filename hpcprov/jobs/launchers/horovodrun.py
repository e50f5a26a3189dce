"""The horovodrun launcher: Horovod's own, over its controller (Gloo or MPI)."""

from __future__ import annotations

from hpcprov import schedulers
from hpcprov.jobs.launchers.common import Context, Launch, host_slots
from hpcprov.request.job import JobRequest


def build(req: JobRequest, context: Context) -> Launch:
    """horovodrun over the job's hosts; on more than one node, where the partition names its
    Gloo interfaces, horovodrun is given them (--network-interfaces) instead of finding the
    interfaces every host shares itself, which starts a task service on each host through
    ssh first. Not on one node: there horovodrun looks for the loopback among the given
    interfaces and fails ("No interface is found for address 127.0.0.1"). The launcher's
    controller, where its profile names one, is said (--gloo, --mpi)."""
    hosts, setup = host_slots(req, horovodrun=True)
    setup = [*schedulers.of(req.site).daemon_setup(req), *setup]
    argv = ["horovodrun", "-np", str(req.world_size), *hosts]
    nics = req.part.network.gloo_socket_ifname
    if nics and req.nodes > 1:
        argv += ["--network-interfaces", nics]
    if req.launch.controller:
        argv.append(f"--{req.launch.controller}")
    return Launch([*argv, *req.launch.args, *req.command], setup)
