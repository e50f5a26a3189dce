"""Launch lines: one builder per launcher kind, quirks read from the launcher's data.

``context`` says where the line will run: ``"batch"`` inside a job script (the scheduler
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
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal

import hostlist

from hpcprov import schedulers
from hpcprov.core.errors import UsageError
from hpcprov.core.shell import Raw, Template, assign, fragment, join
from hpcprov.jobs.modules import env_lines as profile_env_lines
from hpcprov.jobs.ranks import table_line
from hpcprov.request.job import JobRequest
from hpcprov.schedulers.base import renamed, renamed_hostfile
from hpcprov.site.kinds import LauncherKind

Context = Literal["batch", "allocation"]
_HOST = re.compile(r"^[A-Za-z0-9][A-Za-z0-9.-]*$")
_PY = re.compile(r"^python(\d+(\.\d+)?)?$")


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
    """The variables of the partition's network section (NCCL, Gloo, libfabric)."""
    net = req.part.network
    env = {var: getattr(net, key) for key, var in NETWORK_VARIABLES.items()
           if getattr(net, key) is not None}
    return {**env, **net.env}


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
            if not _HOST.match(host):
                raise UsageError(f"--hosts: {host!r} is not a host name")
            out.append(host)
    return out


def horovodrun_uses_gloo(req: JobRequest) -> bool:
    """Whether horovodrun starts its ranks itself over ssh (Gloo) rather than through
    mpirun: told ``--gloo``, or not told ``--mpi`` where the site builds no MPI controller."""
    args = req.launch.args
    return "--gloo" in args or ("--mpi" not in args
                                and "mpi" not in req.site.horovod.controllers)


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


def _srun_geometry(req: JobRequest, context: Context, tasks_per_node: int) -> list[str]:
    if context == "batch":
        return []
    return [f"--ntasks={tasks_per_node * req.nodes}", f"--ntasks-per-node={tasks_per_node}"]


def _srun_prefix(req: JobRequest, context: Context) -> tuple[list[str], list[str]]:
    """(``srun ...`` words, setup lines): the MPI plugin, the geometry in an allocation,
    and the job's CPU and GPU binding."""
    step = schedulers.of(req.site).task_step(req, req.task_cpus)
    argv = ["srun"]
    if req.launch.mpi:
        argv.append(f"--mpi={req.launch.mpi}")
    return [*argv, *_srun_geometry(req, context, req.ranks_per_node), *step.argv], step.setup


def build_srun(req: JobRequest, context: Context) -> Launch:
    prefix, setup = _srun_prefix(req, context)
    if req.launch.rendezvous_env:
        setup = [*setup, *exported_rendezvous(req)]
    return Launch([*prefix, *req.launch.args, *req.command], setup)


def exported_rendezvous(req: JobRequest) -> list[str]:
    """Lines exporting MASTER_ADDR (the first node) and MASTER_PORT, for launchers that pass
    the environment on to their ranks (srun, mpiexec, jsrun)."""
    return [f"MASTER_ADDR={first_node(req)}", "export MASTER_ADDR",
            f"export MASTER_PORT={req.rendezvous_port}"]


def _rendezvous_env(req: JobRequest) -> tuple[list[str], list[str]]:
    """(mpirun -x words, setup lines) exporting MASTER_ADDR / MASTER_PORT."""
    port = str(req.rendezvous_port)
    setup = [f"export MASTER_PORT={port}"]
    words = ["-x", Raw(f"MASTER_ADDR={first_node(req)}"), "-x", "MASTER_PORT"]
    return words, setup


def build_mpirun(req: JobRequest, context: Context) -> Launch:
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
        name = "HIP_VISIBLE_DEVICES" if req.part.gpus.vendor == "amd" else "CUDA_VISIBLE_DEVICES"
        argv += ["-x", f"{name}=" + ",".join(str(i) for i in range(req.gpus))]
    # mpirun passes no variable to ranks started through ssh unless told
    for name in dict.fromkeys([*launcher.export_env, *network_env(req)]):
        argv += ["-x", name]
    return Launch([*argv, *launcher.args, *req.command], setup)


def build_mpiexec(req: JobRequest, context: Context) -> Launch:
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


def build_jsrun(req: JobRequest, context: Context) -> Launch:
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


def build_horovodrun(req: JobRequest, context: Context) -> Launch:
    """horovodrun over the job's hosts; on more than one node, where the partition names its
    Gloo interfaces, horovodrun is given them (--network-interfaces) instead of finding the
    interfaces every host shares itself, which starts a task service on each host through
    ssh first. Not on one node: there horovodrun looks for the loopback among the given
    interfaces and fails ("No interface is found for address 127.0.0.1")."""
    hosts, setup = host_slots(req, horovodrun=True)
    setup = [*schedulers.of(req.site).daemon_setup(req), *setup]
    argv = ["horovodrun", "-np", str(req.world_size), *hosts]
    nics = req.part.network.gloo_socket_ifname
    if nics and req.nodes > 1:
        argv += ["--network-interfaces", nics]
    return Launch([*argv, *req.launch.args, *req.command], setup)


def _torchrun_target(command: tuple[str, ...]) -> list[str]:
    """torchrun runs a script itself: drop a leading ``python [-u]``."""
    cmd = list(command)
    if cmd and _PY.match(cmd[0].rsplit("/", 1)[-1]):
        cmd = cmd[1:]
        while cmd and cmd[0] in ("-u", "-O"):
            cmd = cmd[1:]
        if cmd and cmd[0] == "-m":
            return ["-m", *cmd[1:]]
        return cmd
    if cmd and not cmd[0].endswith(".py"):
        return ["--no-python", *cmd]
    return cmd


def torchrun_program(command: tuple[str, ...]) -> list[str]:
    """torchrun as the environment's Python runs it: ``python -m torch.distributed.run``,
    with the interpreter the command names (``python3.12``, a path), else ``python``. The
    ``torchrun`` script on PATH may belong to another Python (a site's PyTorch module puts
    torch on PYTHONPATH and no script in the environment): its agents would start the ranks
    outside the environment."""
    first = command[0] if command else ""
    python = first if _PY.match(first.rsplit("/", 1)[-1]) else "python"
    return [python, "-m", "torch.distributed.run"]


def build_torchrun(req: JobRequest, context: Context) -> Launch:
    launcher = req.launch
    target = _torchrun_target(req.command)
    per_node = [f"--nproc_per_node={req.ranks_per_node}"]
    program = torchrun_program(req.command)
    job_id = schedulers.of(req.site).job_id()
    if job_id is None:
        standalone = [*program, "--standalone", "--nnodes=1", *per_node]
        return Launch([*standalone, *launcher.args, *target])
    endpoint = Raw(f"{first_node(req)}:{req.rendezvous_port}")
    torchrun = [
        *program,
        f"--nnodes={req.nodes}",
        *per_node,
        Raw(f"--rdzv_id={job_id}"),
        f"--rdzv_backend={launcher.rdzv_backend}",
        Raw(f"--rdzv_endpoint={endpoint}"),
        *launcher.args,
        *target,
    ]
    backend = schedulers.of(req.site)
    if launcher.per_node_wrapper in ("mpirun", "mpiexec"):
        # one torchrun agent per node, started by MPI; its node's ranks are its children
        argv, setup = mpi_per_node(req, launcher.per_node_wrapper)
        return Launch([*argv, *torchrun], setup)
    starter = None if launcher.per_node_wrapper == "none" else backend.per_node(req)
    if starter is not None:
        # one task per node running every rank: the job's CPUs per task are all of them
        step = backend.task_step(req, req.task_cpus)
        srun_args = launcher.srun_args if backend.starts_tasks else []  # srun starts it
        return Launch([*starter.argv, *step.argv, *srun_args, *torchrun],
                      [*starter.setup, *step.setup])
    return Launch(torchrun)


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
    return ["mpirun", "-np", str(req.nodes), *hosts, "--map-by", "ppr:1:node"], [*setup, *more]


def _image(req: JobRequest) -> str:
    containers = req.site.containers
    name = req.image or containers.default_image
    if not name:
        raise UsageError(
            f"site {req.site.name} has no default container image; pass --image NAME|PATH "
            f"(images: {', '.join(containers.images) or 'none'})"
        )
    return containers.images.get(name, name)


def unbuffered(req: JobRequest, command: tuple[object, ...]) -> tuple[object, ...]:
    """``python -u ...`` where the container launcher asks for unbuffered output."""
    out = list(command)
    if req.launch.unbuffered and out and _PY.match(str(out[0])) and "-u" not in out[1:2]:
        out.insert(1, "-u")
    return tuple(out)


def build_container(req: JobRequest, context: Context) -> Launch:
    launcher, containers = req.launch, req.site.containers
    runtime = launcher.runtime or containers.runtime
    if not schedulers.of(req.site).starts_tasks:
        raise UsageError("the container launcher starts tasks with srun: it needs a Slurm site")
    image = _image(req)
    # each rank in the container starts through the rank contract (its wrapper included)
    command = list(rank_command(req, tuple(req.command)))
    if launcher.wrap_in_bash:
        command = list(rank_command(req, ("/bin/bash", "-c", join(req.command))))
    srun, setup = _srun_prefix(req, context)
    srun = [*srun, *launcher.srun_args]
    # the host's Python must not reach into the container's (its packages, its home)
    setup = [*setup, "unset PYTHONPATH PYTHONHOME PYTHONUSERBASE VIRTUAL_ENV"]
    if runtime == "pyxis":
        argv = [*srun, Template(f"--container-image={image}")]
        if containers.mounts:
            argv.append(Template("--container-mounts=" + ",".join(containers.mounts)))
        argv.append("--no-container-entrypoint")
        if launcher.per_task_output:
            argv.append(f"--output={launcher.per_task_output}")
        argv += launcher.args
        return Launch([*argv, *command], setup)
    if runtime in ("singularity", "apptainer"):
        argv = [*srun, runtime, *(launcher.args or ["exec"])]
        if containers.gpu_flag and req.gpus > 0:
            argv.append(containers.gpu_flag)
        return Launch([*argv, Template(image), *command], setup)
    if runtime == "shifter":  # HPE/Cray sites (NERSC): the image is a shifterimg name
        return Launch([*srun, "shifter", Template(f"--image={image}"), *launcher.args,
                       *command], setup)
    if runtime == "podman-hpc":  # each rank a container: --gpu passes the node's GPUs in
        argv = [*srun, "podman-hpc", *(launcher.args or ["run", "--rm"])]
        if req.gpus > 0:
            argv.append(containers.gpu_flag or "--gpu")
        return Launch([*argv, Template(image), *command], setup)
    raise UsageError(f"launcher {req.launcher_name!r}: container runtime {runtime!r} is unknown")


BUILDERS: dict[LauncherKind, Callable[[JobRequest, Context], Launch]] = {
    LauncherKind.srun: build_srun,
    LauncherKind.mpirun: build_mpirun,
    LauncherKind.mpiexec: build_mpiexec,
    LauncherKind.jsrun: build_jsrun,
    LauncherKind.horovodrun: build_horovodrun,
    LauncherKind.torchrun: build_torchrun,
    LauncherKind.container: build_container,
}


# the shell file every rank runs first (the rank contract), and the variable a job script
# holds its text in
RANK_SHIM = Path(__file__).with_name("rank_env.sh")
RANK_SHIM_VAR = "hpcprov_rank"
# the kinds whose ranks start with the starter's variables only (torchrun sets torch's own)
SHIM_KINDS = frozenset({LauncherKind.srun, LauncherKind.mpirun, LauncherKind.mpiexec,
                        LauncherKind.jsrun, LauncherKind.horovodrun, LauncherKind.container})


def rank_shim_line(kind: LauncherKind) -> str:
    """The line that puts the per-rank shim's text in ``$hpcprov_rank``: the table of the
    starters ``kind``'s ranks may come from (:mod:`hpcprov.jobs.ranks`), then the shim
    (quoted: the text is data to the job's shell; each rank's bash runs it)."""
    code = [ln for ln in fragment(RANK_SHIM) if not ln.lstrip().startswith("#")]
    header = "# the rank contract of hpcprov (docs/reference.md): torch variables on each rank"
    return assign(RANK_SHIM_VAR, "\n".join([header, table_line(kind), *code]))


def rank_command(req: JobRequest, command: tuple[object, ...]) -> tuple[object, ...]:
    """``command`` started through the rank contract: every rank's bash runs the shim,
    which exports torch's variables from the starter's, expands the wrapper's $VARS with
    this rank's values, then runs the wrapper and the command."""
    return ("bash", "-c", Raw(f'"${RANK_SHIM_VAR}"'), "hpcprov-rank", str(req.world_size),
            str(req.ranks_per_node), first_node(req), str(req.rendezvous_port),
            *req.launch.wrapper, "--", *command)


def build_launch(req: JobRequest, context: Context = "allocation") -> Launch:
    """The launch line for a request, by the launcher's kind; where the kind's starter
    gives its ranks no torch environment, each rank starts through the rank contract
    (:func:`rank_command`)."""
    if not req.command:
        raise UsageError("no command given: add it after --, e.g. -- python train.py")
    launcher = req.launch
    kind = launcher.kind
    if kind not in BUILDERS:
        raise UsageError(f"launcher kind {kind.value!r} cannot build a launch line")
    if kind == LauncherKind.srun and not schedulers.of(req.site).starts_tasks:
        raise UsageError(f"launcher {req.launcher_name!r} (srun) needs a Slurm site")
    if kind not in SHIM_KINDS:  # torchrun gives its ranks torch's environment itself
        return BUILDERS[kind](req, context)
    if kind == LauncherKind.container:  # the runtime's command line: inside the container
        launch = build_container(replace(req, command=unbuffered(req, req.command)), context)
    else:
        launch = BUILDERS[kind](replace(req, command=rank_command(req, req.command)), context)
    return Launch(launch.argv, [rank_shim_line(kind), *launch.setup], launch.notes)
