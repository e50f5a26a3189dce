"""What the launcher kinds' builders share: the launch line, the job's rendezvous host,
host lists and slots, the srun prefix, an MPI starter one per node, and the rank contract's
command (every rank through the shim).

``context`` says where a line will run: ``"batch"`` inside a job script (the scheduler
directives already fix the geometry) or ``"allocation"`` typed by hand inside salloc/qsub -I
(the line must carry the geometry itself).

Whatever the kind, hosts are named on the partition's high-speed network when the profile
says how (``network.host_name``, a launcher's ``host_name``): the rendezvous host
(MASTER_ADDR, torchrun's --rdzv_endpoint) and horovodrun's host list when it runs Gloo.
mpirun (and horovodrun running mpirun) keeps the scheduler's names (:func:`list_host_name`).
Every srun step carries the job's CPU and GPU binding (:meth:`Backend.task_step`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import hostlist

from hpcprov import schedulers
from hpcprov.core.errors import UsageError
from hpcprov.core.shell import Raw, Template, assign, fragment, join
from hpcprov.jobs.modules import env_lines as profile_env_lines
from hpcprov.jobs.ranks import table_line
from hpcprov.request.job import JobRequest
from hpcprov.schedulers.base import renamed, renamed_hostfile
from hpcprov.site.bins import env_for_nodes
from hpcprov.site.launcher_kinds import KINDS, Kind, horovod_controller, kind_of

if TYPE_CHECKING:
    from hpcprov.site.types import Partition, Site

Context = Literal["batch", "allocation"]
_HOST = r"^[A-Za-z0-9][A-Za-z0-9.-]*$"
PY = re.compile(r"^python(\d+(\.\d+)?)?$")


@dataclass
class Launch:
    """A launch line plus the shell lines it needs before it (e.g. exported ports)."""

    argv: list[str]
    setup: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def line(self) -> str:
        return join(self.argv)


# a partition's network settings and the variables they become
NETWORK_VARIABLES = {
    "nccl_socket_ifname": "NCCL_SOCKET_IFNAME",
    "gloo_socket_ifname": "GLOO_SOCKET_IFNAME",
    "nccl_ib_hca": "NCCL_IB_HCA",
    "nccl_net": "NCCL_NET",
    "nccl_net_plugin": "NCCL_NET_PLUGIN",
    "fi_provider": "FI_PROVIDER",
}


def network_env(req: JobRequest) -> dict[str, str]:
    """The variables of the partition's network section (NCCL, Gloo, libfabric), then
    those its ``env_by_nodes`` gives a job of this size."""
    return {**partition_network_env(req.part), **env_for_nodes(req.part, req.nodes)}


def partition_network_env(part: Partition) -> dict[str, str]:
    """The variables of a partition's network section."""
    net = part.network
    env = {var: getattr(net, key) for key, var in NETWORK_VARIABLES.items()
           if getattr(net, key) is not None}
    return {**env, **net.env}


def site_network_env(site: Site) -> dict[str, str]:
    """The network variables every partition of the site sets alike: what an environment
    used on any of them (PREFIX/activate) can carry; a job exports its own partition's."""
    envs = [partition_network_env(p) for p in site.partitions.values()]
    if not envs:
        return {}
    return {k: v for k, v in envs[0].items() if all(e.get(k) == v for e in envs[1:])}


def env_lines(req: JobRequest) -> list[str]:
    """``export`` lines of the site's env, then the partition's network variables: what a
    job script exports, and what must run before a launch line typed in an allocation."""
    return profile_env_lines({**req.site.env, **network_env(req)})


def first_node(req: JobRequest) -> str:
    """Shell word for the first node of the job (the rendezvous host), on the network the
    host name template names."""
    if req.hosts:
        return renamed(expand_hosts(req.hosts)[0], req.host_name)
    if req.launch.rdzv_host == "hostname":
        # the short name: a template applies to the name the scheduler lists
        return renamed(Raw('"$(hostname -s)"' if req.host_name else '"$(hostname)"'),
                       req.host_name)
    return renamed(schedulers.of(req.site).first_node(req), req.host_name)


def expand_hosts(hosts: tuple[str, ...]) -> list[str]:
    """Expand Slurm-style host lists (gpu[32-33]) given on the command line."""
    out: list[str] = []
    for item in hosts:
        try:
            expanded = hostlist.expand_hostlist(item)
        except hostlist.BadHostlist as exc:
            raise UsageError(f"--hosts {item!r}: {exc}") from None
        for host in expanded:
            if not re.match(_HOST, host):
                raise UsageError(f"--hosts: {host!r} is not a host name")
            out.append(host)
    return out


def horovodrun_uses_gloo(req: JobRequest) -> bool:
    """Whether horovodrun starts its ranks itself over ssh (Gloo) rather than through
    mpirun: its controller (:func:`horovod_controller`)."""
    return horovod_controller(req.launch.controller, req.site.horovod.controllers) == "gloo"


def list_host_name(req: JobRequest, horovodrun: bool) -> str | None:
    """The host name template for an mpirun/horovodrun host list: the launcher's own
    ``host_name`` where it has one; else the partition's where horovodrun starts the ranks
    over ssh itself, and none where an MPI does. An MPI started inside the scheduler's
    allocation knows the nodes by the scheduler's names only and refuses any other (Open
    MPI: "All nodes which are allocated for this job are already filled"); MPI's own traffic
    takes the fast network by MPI's settings (``network.env``, e.g.
    ``OMPI_MCA_btl_tcp_if_include`` or ``UCX_NET_DEVICES``)."""
    if req.launch.host_name is not None or (horovodrun and horovodrun_uses_gloo(req)):
        return req.host_name
    return None


def host_slots(req: JobRequest, horovodrun: bool = False) -> tuple[list[str], list[str]]:
    """(``-H`` or ``--hostfile`` words, setup lines) for mpirun/horovodrun: the launcher's
    host file, the hosts given on the command line, else what the scheduler's job knows;
    each host on the network :func:`list_host_name` names."""
    slots, launcher = req.ranks_per_node, req.launch
    template = list_host_name(req, horovodrun)
    if launcher.hosts == "hostfile" and not req.hosts:
        hostfile = Template(launcher.hostfile or "")
        if template:
            setup, word = renamed_hostfile(hostfile, template)
            return ["--hostfile", word], setup
        return ["--hostfile", hostfile], []
    if req.hosts:
        hosts = [renamed(h, template) for h in expand_hosts(req.hosts)]
        return ["-H", ",".join(f"{h}:{slots}" for h in hosts)], []
    return schedulers.of(req.site).host_slots(req, slots, horovodrun=horovodrun,
                                               template=template), []


def exported_rendezvous(req: JobRequest) -> list[str]:
    """Lines exporting MASTER_ADDR (the first node) and MASTER_PORT, for launchers that pass
    the environment on to their ranks (srun, mpiexec, jsrun)."""
    return [f"MASTER_ADDR={first_node(req)}", "export MASTER_ADDR",
            f"export MASTER_PORT={req.rendezvous_port}"]


def mpi_per_node(req: JobRequest, starter: str) -> tuple[list[str], list[str]]:
    """(argv, setup lines) of an MPI starter running one process on each of the job's nodes:
    mpirun over the job's hosts one slot each (``--map-by ppr:1:node``), or mpiexec with one
    process per node (Hydra's -ppn, PALS' --ppn)."""
    setup = list(schedulers.of(req.site).daemon_setup(req))
    if starter == "mpiexec":
        ppn = "-ppn" if req.launch.flavor == "hydra" else "--ppn"
        return ["mpiexec", "-n", str(req.nodes), ppn, "1"], setup
    one = replace(req, tasks_per_node=1)
    hosts, more = host_slots(one)
    # mpirun passes its processes only the variables named to it: the PATH that finds the
    # environment's Python, and the rest as the mpirun launcher names them
    named = [w for name in named_env(req, "PATH") for w in ("-x", name)]
    return (["mpirun", "-np", str(req.nodes), *hosts, "--map-by", "ppr:1:node", *named],
            [*setup, *more])


def named_env(req: JobRequest, *first: str) -> list[str]:
    """The variables an MPI that passes on only those named to it (mpirun -x NAME) is
    told: ``first``, the launcher's ``export_env``, the site's env and the partition's
    network variables, each once."""
    return list(dict.fromkeys([*first, *req.launch.export_env, *req.site.env,
                               *network_env(req)]))



# the shell file every rank runs first (the rank contract), and the variable a job script
# holds its text in
RANK_SHIM = Path(__file__).parent.with_name("rank_env.sh")
RANK_SHIM_VAR = "hpcprov_rank"


def rank_shim_line(kind: Kind | object, starters: tuple[str, ...] | None = None) -> str:
    """The line that puts the per-rank shim's text in ``$hpcprov_rank``: the kind's name
    and the table of the starters ``kind``'s ranks may come from (:mod:`hpcprov.jobs.ranks`;
    ``starters`` where the job's task starter decides them: a container kind's), then the
    shim (quoted: the text is data to the job's shell; each rank's bash runs it)."""
    if isinstance(kind, Kind):  # its name: the kind whose facts these are
        name = next((n for n, k in KINDS.items() if k is kind), "")
    else:  # a LauncherKind, or its name
        name = str(getattr(kind, "value", kind))
        kind = kind_of(kind)
    code = [ln for ln in fragment(RANK_SHIM) if not ln.lstrip().startswith("#")]
    header = "# the rank contract of hpcprov (docs/reference.md): torch variables on each rank"
    table = table_line(kind.starters if starters is None else starters, name)
    return assign(RANK_SHIM_VAR, "\n".join([header, table, *code]))


def rank_command(req: JobRequest, command: tuple[str, ...]) -> tuple[str, ...]:
    """``command`` started through the rank contract: every rank's bash runs the shim,
    which exports torch's variables from the starter's, expands the wrapper's $VARS with
    this rank's values, then runs the wrapper and the command."""
    return ("bash", "-c", Raw(f'"${RANK_SHIM_VAR}"'), "hpcprov-rank", str(req.world_size),
            str(req.ranks_per_node), first_node(req), str(req.rendezvous_port),
            *req.launch.wrapper, "--", *command)
