"""The site, declared once: plain typed classes (stdlib dataclasses).

What a cluster is, as checked YAML: every seed site is expressed with these fields alone;
generators read the data and never ask which site they are working for. Unknown keys are
rejected everywhere.

Declarations only. Each field is declared with :func:`hpcprov.site.declare.F` (its default,
description, constraints and checks; :mod:`hpcprov.site.declare` is how they reach
pydantic), each check is a function of :mod:`hpcprov.site.checks`, a scheduler's section is
its class in :mod:`hpcprov.site.sections`; the checks that span fields are methods
(``_check``, ``_field_problems``: run by ``__post_init__``). Pydantic validates a profile
into these classes (:mod:`hpcprov.site.model`); :mod:`hpcprov.site.codec` is their JSON
(the profile cache), read back without pydantic: this module imports none.

Annotations are evaluated when the classes are made (no ``from __future__ import
annotations``): the dataclass fields then carry real types, which the codec reads without
evaluating strings on a warm start.
"""

from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Literal

from hpcprov.site import checks
from hpcprov.site.declare import (
    After,
    Before,
    BeforeSeeing,
    Constraints,
    F,
    Problem,
    Strict,
    count,
    default_of,
    invalid,
    refused_by,
)
from hpcprov.site.gpu_vendors import DEFAULT_VENDOR, VENDORS
from hpcprov.site.kinds import LauncherKind, ModuleSystem, Scheduler
from hpcprov.site.launcher_kinds import LAUNCHER_KEYS, readers
from hpcprov.site.sections import (
    DEFAULT_SCHEDULER,
    SCHEDULER_SECTIONS,
    SCHEDULERS,
    FluxOptions,
    GridengineOptions,
    LsfOptions,
    PbsOptions,
    SlurmOptions,
)

Name = Annotated[str, Constraints(pattern=checks.NAME_RE, max_length=64)]
OptionName = Annotated[str, Constraints(pattern=checks.OPTION_RE, max_length=64)]


# the single-line and free-text rules: hpcprov.core.text

# upper bounds on counts: larger than any machine has, small enough that a plan that lists
# every node, core or job stays a plan (a typo of 10**12 nodes is refused, not planned)
MAX_NODES = 1_000_000  # Fugaku, the largest, has 158,976
MAX_CORES = 16_384  # per node; the largest single-image machines have a few thousand
MAX_MEMORY_GB = 1 << 20  # 1 PiB per node
MAX_COUNT = 10_000_000  # jobs or GPUs of one user


@dataclass(kw_only=True, init=False, repr=False, eq=False)
class ModuleSet(Strict):
    """Modules to load for one purpose, optionally after `module purge`."""

    purge: bool = F(False, description="run `module purge` before loading")
    load: list[str] = F(factory=list, description="modules, in load order")


@dataclass(kw_only=True, init=False, repr=False, eq=False)
class Modules(Strict):
    """The module system: how it is started, and the modules builds and jobs load."""

    system: ModuleSystem = ModuleSystem.lmod
    init: str | None = F(
        None,
        description="file to source when `module` is not defined (e.g. /etc/profile.d/lmod.sh)",
    )
    use: list[str] = F(
        factory=list, description="folders `module use` adds to the module path "
        "before any module is loaded (a site's software trees, e.g. /apps/modules/all); "
        "$VARS are expanded")
    build: ModuleSet = F(factory=ModuleSet, description="modules to build Horovod")
    runtime: ModuleSet = F(factory=ModuleSet, description="modules to run jobs")


if TYPE_CHECKING:
    VendorName = str  # one of VENDORS' names: data, which a checker cannot list
else:
    VendorName = Literal[tuple(VENDORS)]


@dataclass(kw_only=True, init=False, repr=False, eq=False)
class Gpus(Strict):
    """The GPUs of each node of a partition: how many, and whose."""

    count: int = count(0, ge=0, le=64, description="GPUs per node (at most 64)")
    vendor: VendorName = F(  # the vendors: hpcprov.site.gpu_vendors
        DEFAULT_VENDOR, description="; ".join(
            f"{name} ({v.summary}; devices limited by {v.visible_devices}, which mpirun's "
            f"set_cuda_visible_devices sets)" for name, v in VENDORS.items()))
    model: str | None = F(None, description="e.g. A100-SXM4-80GB")
    type: str | None = F(
        None, description="GPU type label in requests, e.g. a100 or v100l (--gres=gpu:v100l:4)"
    )
    interconnect: str | None = F(None, description="NVLink, PCIe, NVSwitch, ...")
    per_rank: Literal["all", "one"] = F(
        "all", description="what each rank of a job sees of its node's GPUs: all (a script "
        "takes device LOCAL_RANK, as torch.cuda.set_device(LOCAL_RANK) does) or one (the "
        "launcher binds each rank to its own GPU, e.g. srun --gpus-per-task=1 or "
        "--gpu-bind, jsrun resource sets, lrun without --gpubind=off, an affinity wrapper "
        "setting the visible-devices variable per rank: each rank sees it as device 0, and "
        "scripts must use device 0, or LOCAL_RANK % device_count()); validate checks the "
        "device a script takes, and site check warns where the profile binds per rank but "
        "says all")


@dataclass(kw_only=True, init=False, repr=False, eq=False)
class WalltimeByNodes(Strict):
    """A wall-clock cap for the jobs of up to ``max_nodes`` nodes."""

    max_nodes: int | None = count(None, le=MAX_NODES, description="jobs of up to this "
                                   "many nodes (and more than the previous entry's); left "
                                   "out: every larger job")
    max_walltime: str = F(check=checks.walltime, description="[D-]HH:MM:SS")


@dataclass(kw_only=True, init=False, repr=False, eq=False)
class Limits(Strict):
    """What the scheduler allows: jobs and GPUs per user, nodes per job, walltimes."""

    max_jobs_per_user: int | None = count(
        None, le=MAX_COUNT, description=f"at most {MAX_COUNT:,} (more than a scheduler queues)")
    max_gpus_per_user: int | None = count(
        None, le=MAX_COUNT, description=f"at most {MAX_COUNT:,}")
    max_nodes_per_job: int | None = count(
        None, le=MAX_NODES, description=f"at most {MAX_NODES:,}, as a partition's nodes")
    min_nodes_per_job: int | None = count(
        None, le=MAX_NODES, description="the fewest nodes a job of this queue may ask for "
        "(queues by job size)")
    max_walltime: str | None = F(None, check=checks.walltime, description="[D-]HH:MM:SS")
    default_walltime: str | None = F(
        None, check=checks.walltime,
        description="[D-]HH:MM:SS, used when --time is not given; at most max_walltime "
        "(without either, a job asks for no time limit, and jobscript warns)")
    interactive_walltime: str | None = F(
        None, check=checks.walltime,
        description="[D-]HH:MM:SS, the time an interactive allocation (salloc, qsub "
        "-I, bsub -Is: hpcprov launch --allocate, the guide) asks for when --time is not "
        "given, where the site caps interactive jobs below batch ones (e.g. 8 h against "
        "48 h); none: default_walltime")
    max_walltime_by_nodes: list[WalltimeByNodes] = F(
        factory=list, check=checks.bins, description="wall-clock caps by job size, smallest first, "
        "e.g. [{max_nodes: 64, max_walltime: '24:00:00'}, {max_walltime: '12:00:00'}]: the "
        "first entry whose max_nodes the job's node count does not exceed (or the one "
        "without max_nodes) caps --time; a job no entry takes gets max_walltime")

    def _field_problems(self) -> list[Problem]:
        cap = self.max_walltime

        return [problem for key in ("default_walltime", "interactive_walltime")
                for problem in (refused_by(key, getattr(self, key),
                                           lambda value: checks.walltime_within(value, cap))
                                if not refused_by("", getattr(self, key), checks.walltime)
                                else [])]


@dataclass(kw_only=True, init=False, repr=False, eq=False)
class Reference(Strict):
    """A performance reference: pass when value*(1+lower) <= measured <= value*(1+upper)."""

    value: float = F(strict=True, description="the expected value (a finite number)")
    lower: float = F(-0.1, strict=True, ge=-1, le=0,
                         description="fraction, e.g. -0.05 for 5% below (-1: down to zero)")
    upper: float | None = F(None, strict=True, ge=0,
                                description="fraction above; null = unbounded")
    unit: str
    note: str | None = None


@dataclass(kw_only=True, init=False, repr=False, eq=False)
class Network(Strict):
    """A partition's high-speed network: the nodes' names on it, and what NCCL, Gloo and
    libfabric are told (exported before every launch line, passed on by mpirun -x)."""

    host_name: str | None = F(
        None, check=checks.host_name,
        description="the node's name on the high-speed network, a template over the "
        "short name the scheduler lists ({host}: the part before the first dot, so a node "
        "file of full names gives node1-ib, not node1.cluster.example-ib), e.g. '{host}-ib', "
        "'{host}i' or '{host}.ib.cluster.example'; every launcher "
        "uses it for MASTER_ADDR and torchrun's --rdzv_endpoint, horovodrun for its hosts "
        "when it runs Gloo; mpirun keeps the scheduler's names, which its allocation knows")
    nccl_socket_ifname: str | None = F(
        None, description="NCCL_SOCKET_IFNAME: NCCL's bootstrap interfaces, e.g. ib0 or hsn")
    gloo_socket_ifname: str | None = F(
        None, description="GLOO_SOCKET_IFNAME: Gloo's interface, e.g. ib0")
    nccl_ib_hca: str | None = F(
        None, description="NCCL_IB_HCA: the InfiniBand adapters NCCL uses, e.g. mlx5_0,mlx5_1")
    nccl_net: str | None = F(
        None, description="NCCL_NET: IB, Socket, or a plugin's name (e.g. 'AWS Libfabric')")
    nccl_net_plugin: str | None = F(
        None, description="NCCL_NET_PLUGIN: the network plugin library's suffix, e.g. ofi")
    fi_provider: str | None = F(
        None, description="FI_PROVIDER: the libfabric provider, e.g. cxi, efa or verbs")
    env: dict[str, str] = F(
        factory=dict, check=checks.env_names,
        description="more network variables (e.g. FI_CXI_* or "
        "NCCL_CROSS_NIC), with the meaning of the site's env")


@dataclass(kw_only=True, init=False, repr=False, eq=False)
class EnvByNodes(Strict):
    """Variables for the jobs of up to ``max_nodes`` nodes."""

    max_nodes: int | None = count(None, le=MAX_NODES, description="jobs of up to this "
                                   "many nodes (and more than the previous entry's); left "
                                   "out: every larger job")
    env: dict[str, str] = F(factory=dict, check=checks.env_names, description="exported "
                            "for those jobs after the network's, with the meaning of the "
                            "site's env")


@dataclass(kw_only=True, init=False, repr=False, eq=False)
class Partition(Strict):
    """One partition (queue) of the cluster: its nodes, GPUs, limits and network."""

    description: str | None = None
    nodes: int | None = count(None, le=MAX_NODES, description=f"number of nodes in the "
                               f"partition (at most {MAX_NODES:,}: more than any machine "
                               "has; plans list every node); null or left out: the site "
                               "publishes no count")
    cores_per_node: int = count(le=MAX_CORES, description=f"CPU cores per node (at most "
                                f"{MAX_CORES:,}: more than any node has)")
    memory_gb: float | None = F(None, strict=True, gt=0, le=MAX_MEMORY_GB,
                                    description="memory per node, GB (at most 1 PiB)")
    threads_per_core: int = F(
        1, strict=True, ge=1, le=8, description="hardware threads per core; the scheduler "
        "counts cores_per_node x threads_per_core CPUs per node (Slurm's CPUs, which "
        "--cpus-per-task counts, are hardware threads where SMT is on)")
    arch: Literal["x86_64", "aarch64", "ppc64le"] = F(
        "x86_64", description="the nodes' CPU architecture: setup builds the environment for "
        "the partitions' one (where they differ, the default partition's: site check warns "
        "of the others), downloads the conda installer for it, and site check checks the "
        "installer and torch's wheels against it")
    gpus: Gpus = F(factory=Gpus)
    limits: Limits = F(factory=Limits)
    cpus_per_task: int | None = count(None, le=MAX_CORES,
                                      description="default --cpus-per-task")
    options: Annotated[dict[OptionName, str | None], Before(checks.flags_have_no_value)] = F(
        factory=dict, description="job options always added for this partition, "
        "long names on Slurm and Flux (constraint, not C); on PBS and LSF a one-letter name "
        "is the scheduler's own flag (P: -P), as is on LSF any other name (alloc_flags: "
        "-alloc_flags); null or no value: a flag (exclusive: null)"
    )
    unset_options: list[OptionName] = F(
        factory=list, description="in a profile that extends another: names of "
        "inherited options this partition drops (null cannot say it in options, where it "
        "is a flag without a value); naming one it does not inherit is an error. An "
        "inherited launcher, image or annotation is dropped with NAME: null (launchers: "
        "{mpirun: null})")
    routing: Literal["partition", "options"] = F(
        "partition", description="partition: jobs ask for the partition (queue) of this "
        "name; options: the name stands for a kind of node that its options pick (e.g. "
        "constraint: gpu, qos: regular), and no partition is asked for")
    network: Network = F(factory=Network)
    env_by_nodes: list[EnvByNodes] = F(
        factory=list, check=checks.bins, description="variables by job size, smallest first, e.g. "
        "[{max_nodes: 1, env: {NCCL_NET: Socket}}, {env: {NCCL_NET: OFI}}]: the first entry "
        "whose max_nodes the job's node count does not exceed (or the one without "
        "max_nodes) is exported with the network's variables (and passed on by mpirun -x)")

    by_job_size: bool = F(
        False, description="a queue chosen by the job's node count: where no partition is "
        "named and the default one's node limits do not fit the job, the first partition "
        "with by_job_size whose limits (min_nodes_per_job, max_nodes_per_job) fit is used")
    modules: Modules | None = F(None, description="replaces the site's modules here")
    references: dict[Name, Reference] = F(
        factory=dict, description="performance references by metric name"
    )
    default: bool = False

    def _check(self) -> None:
        if self.routing == "options" and not self.options:
            raise ValueError("routing: options needs the options that pick the nodes, e.g. "
                             "options: {constraint: gpu, qos: regular}")


@dataclass(kw_only=True, init=False, repr=False, eq=False)
class RequiredOption(Strict):
    """A job option the site insists on (Neuron --comment, CC --account)."""

    default: str | None = F(None, check=checks.no_shell_text,
                            description="used when the user gives none; written "
                            "into the job's directive lines as it is, which the scheduler "
                            "reads and no shell expands: a $ or ` ($(id -gn), $USER) is "
                            "refused")
    choices: list[str] | None = None
    example: str | None = F(None, description="shown in the error when missing")
    reason: str | None = None


@dataclass(kw_only=True, init=False, repr=False, eq=False)
class Proxy(Strict):
    """The proxy through which setup's downloads reach the internet (pip, conda, curl)."""

    http: str | None = F(None, pattern=r"^https?://\S+$",
                             description="http_proxy, e.g. http://proxy.example.org:3128")
    https: str | None = F(None, pattern=r"^https?://\S+$",
                              description="https_proxy (default: the http one)")
    no_proxy: list[str] = F(factory=list,
                                description="hosts and domains reached directly")
    scope: Literal["login", "compute", "both"] = F(
        "both", description="where the proxy works: setup exports it only when it runs "
        "there (setup --on login, the default, or --on compute)")


@dataclass(kw_only=True, init=False, repr=False, eq=False)
class Policies(Strict):
    """The site's rules: options a job must or may not give, internet, conda, purges."""

    required_options: dict[OptionName, RequiredOption] = F(
        factory=dict, description="option -> its rule: every job gives it (-o NAME=VALUE) "
        "or gets its default. NAME is the option's long name (account) or the scheduler's "
        "own flag without its dash, as the site's guide spells it (PBS qsub -P: P, -W: W; "
        "LSF bsub -G: G, -alloc_flags: alloc_flags); names the scheduler writes as one flag "
        "are one option (on LSF account, project and P are all -P)")
    forbidden_options: dict[OptionName, str] = F(
        factory=dict, description="option -> why it is refused; names as in "
        "required_options, and every name written as the same flag is refused with it (on "
        "LSF, forbidding P refuses account and project, forbidding account refuses P)"
    )
    compute_internet: bool = F(True, description="compute nodes reach the internet")
    proxy: Proxy | None = F(None, description="the proxy setup's downloads go through "
                                "(exported as http_proxy/https_proxy/no_proxy and their "
                                "upper-case forms)")
    conda_allowed: bool = True
    home_readonly_on_compute: bool = False
    submit_from: str | None = F(None, description="directory jobs must be submitted from")
    purge_days: int | None = count(None, le=36_500, description="scratch files unused this "
                                   "long vanish (at most 36,500: a century)")
    scheduler_poll_seconds: float = F(
        60.0, strict=True, ge=0.05, le=3600,
        description="the least time between two of hpcprov's queries of the scheduler while "
        "its jobs run (job states, node states); busy sites forbid frequent polling (\"no "
        "more often than once a minute\"). A job's end is noticed at once all the same, "
        "through the status file its script writes")
    notes: list[str] = F(factory=list)


@dataclass(kw_only=True, init=False, repr=False, eq=False)
class Paths(Strict):
    """Where things go: scratch, the install prefix, the work folder, the wheelhouse."""

    scratch: str = F("$HOME", description="user scratch (may use $VARS)")
    prefix: str = F(
        "{scratch}/hpcprov", description="install prefix; {scratch} is replaced by scratch"
    )
    workdir: str | None = F(None, description="where jobs run and write: job scripts cd "
                                "there first (may use $VARS; none: the directory the job was "
                                "submitted from); validate's run folders go under it (else "
                                "under scratch)")
    wheelhouse: str = F(
        "$HOME/.cache/hpcprov/wheelhouse",
        description="cache of built Horovod wheels, keyed by ABI; make it a group-shared "
        "directory so the next user at the site installs instead of rebuilding "
        "($HPCPROV_WHEELHOUSE overrides it)",
    )
    wheelhouse_trust: list[Annotated[str, Constraints(pattern=r"^@?[A-Za-z_][A-Za-z0-9_.-]*$")]] = \
        F(factory=list, max_length=64,
              description="who else may publish wheels you install from the wheelhouse: "
              "user names, or @group for every member (you and root always may; "
              "$HPCPROV_WHEELHOUSE_TRUST adds more); see docs/security.md")


# a conda channel: a name or URL, which may use $NAME or ${NAME} (expanded by setup's shell)
Channel = Annotated[str, Constraints(max_length=512), After(checks.channel)]


@dataclass(kw_only=True, init=False, repr=False, eq=False)
class CondaSpec(Strict):
    """Where Miniconda comes from and how it is set up (python.backend: conda)."""

    installer_url: str | None = F(
        None, description="the installer setup downloads; none: Miniconda3-latest-Linux-ARCH.sh "
        "of repo.anaconda.com/miniconda for the partitions' arch; one naming another "
        "architecture (or system) is refused by site check at its line")
    installer_sha256: str | None = F(None, pattern=r"^[0-9a-f]{64}$")
    mirror_url: str | None = None
    installer_file: str | None = F(None, description="local installer for offline sites")
    channels: list[Channel] = F(
        factory=list, description="the channels conda creates the environment and "
        "installs from, exactly these (--override-channels), in this order; empty: conda's "
        "defaults (Anaconda's repo.anaconda.com/pkgs/main and /r, which need accept_tos). "
        "A channel may use the node's variables as $NAME or ${NAME} (e.g. "
        "file:///apps/${SYS_TYPE}/conda-channel), expanded when setup runs; nothing else "
        "in it is")
    accept_tos: bool = F(
        False, description="you (or your site) accept Anaconda's Terms of Service for its "
        "channels (defaults, main, r, repo.anaconda.com/...), which conda otherwise refuses "
        "non-interactively since July 2025 (CondaToSNonInteractiveError); setup then runs "
        "`conda tos accept` for them. Or use channels that need none, e.g. [conda-forge]")
    python: str | None = F(None, description="python version for `conda create`")
    module: str | None = F(
        None, description="the site's conda module (e.g. anaconda3/2024.06 or miniforge3): "
        "with backend conda, its conda creates the environment (in PREFIX/conda-envs/ENV) "
        "instead of a downloaded installer; with backend venv, its base environment "
        "(`conda activate`) is the Python the venv is created with (venv.python). List it "
        "in modules.build.load and modules.runtime.load too")


@dataclass(kw_only=True, init=False, repr=False, eq=False)
class VenvSpec(Strict):
    """How the virtual environment is made and filled (python.backend: venv)."""

    creator: Literal["venv", "virtualenv", "uv"] = "venv"
    installer: Literal["pip", "uv", "auto"] = F(
        "pip", description="what installs the frameworks and packages: pip, uv (`uv pip "
        "install`: from its cache a package is linked, not unpacked again; pip's own "
        "configuration is passed on to it), or auto (uv where it is on the PATH, else pip)")
    python: str = F("python3", description="interpreter that creates the venv")
    system_site_packages: bool = False
    wheelhouse: list[str] = F(factory=list, description="--find-links locations")
    no_index: bool = F(False, description="pip --no-index (only the wheelhouse)")


@dataclass(kw_only=True, init=False, repr=False, eq=False)
class ContainerSpec(Strict):
    """Provisioning through a container image instead of a Python environment."""

    image: Name = F(description="name in containers.images: where the image is kept "
                        "and the jobs read it (a path); where that entry is a registry "
                        "reference, or missing, setup pulls source into "
                        "$PREFIX/images/NAME.sif (NAME.sqsh with enroot), the file the jobs "
                        "read")
    source: str = F(description="what setup pulls or imports: a registry reference "
                        "(docker://nvcr.io/nvidia/pytorch:24.01-py3, enroot's "
                        "nvcr.io#nvidia/pytorch:24.01-py3, oras://, library://, a name with "
                        "a tag), written for the runtime by setup (enroot: "
                        "docker://REGISTRY#IMAGE:TAG; apptainer/singularity: "
                        "docker://REGISTRY/IMAGE:TAG), one it cannot pull refused at this "
                        "line; or the path of the site's own image, used where it lies")
    add_horovod: bool = F(False, description="the image lacks Horovod: install it inside")


IndexUrl = Annotated[str, Constraints(pattern=checks.INDEX_URL, max_length=512)]
PackageSpec = Annotated[str, After(checks.no_option)]


@dataclass(kw_only=True, init=False, repr=False, eq=False)
class Framework(Strict):
    """One deep-learning framework: its version, what installs it and from where."""

    version: str = F(check=checks.one_version,
                     description="the one version to install and check, e.g. '2.5.1' "
                     "(no wildcard or range)")
    installer: Literal["pip", "conda", "module"] = F(
        "pip", description="pip or conda install it into the environment; module: the "
        "site's module (module:) provides it, and the environment (a venv with "
        "system_site_packages: true) sees it; setup checks it imports from the module at "
        "this version")
    packages: list[PackageSpec] = F(
        factory=list, description="exact specs; default <pkg>==<version>"
    )
    channel: Channel | None = F(
        None, description="installer: conda: the channel it comes from, before "
        "python.conda.channels (may use $NAME or ${NAME}, as they may)")
    module: str | None = F(
        None, description="the module that provides the framework (installer: module); "
        "list it in modules.build.load and modules.runtime.load too")
    index_url: IndexUrl | None = F(
        None, description="pip's --index-url for the install of the frameworks (installer: "
        "pip; with uv too): a vendor's wheel index, e.g. PyTorch's ROCm build "
        "https://download.pytorch.org/whl/rocm6.2 or a CUDA one "
        "https://download.pytorch.org/whl/cu121; none: pip's configured index (PyPI's torch "
        "is a CUDA build)")
    extra_index_urls: list[IndexUrl] = F(
        factory=list, max_length=16, description="pip's --extra-index-url, each "
        "(installer: pip; with uv too): indexes searched besides index_url")

    def _check(self) -> None:
        if (self.index_url or self.extra_index_urls) and self.installer != "pip":
            raise ValueError("index_url and extra_index_urls are read only with installer: "
                             "pip")
        if self.installer == "module" and not self.module:
            raise ValueError("installer: module needs module: (the module that provides it, "
                             "e.g. pytorch/2.1.0)")
        if self.module and self.installer != "module":
            raise ValueError("module: is read only with installer: module")


@dataclass(kw_only=True, init=False, repr=False, eq=False)
class PythonStack(Strict):
    """The Python environment: conda, a venv or a container, and its frameworks."""

    backend: Literal["conda", "venv", "container"] = "venv"
    env_name: Name = "horovod"
    conda: CondaSpec = F(factory=CondaSpec)
    venv: VenvSpec = F(factory=VenvSpec)
    container: ContainerSpec | None = None
    frameworks: dict[Literal["pytorch", "tensorflow"], Framework] = F(factory=dict)
    packages: list[PackageSpec] = F(factory=list, description="more pip packages, "
                                    "installed from pip's own index (the site's, else PyPI), "
                                    "never a framework's index_url")
    install_env: dict[str, str] = F(
        factory=dict, check=checks.env_names,
        description="variables set only while setup installs the frameworks "
        "and packages (e.g. MPICC: mpicc, PIP_NO_BINARY: mpi4py), with the meaning of the "
        "site's env; never exported in jobs or PREFIX/activate")

    def _check(self) -> None:
        urls = {f.index_url for f in self.frameworks.values() if f.index_url}
        if len(urls) > 1:  # one pip run installs every pip framework: one --index-url
            raise ValueError("frameworks name different index_url ("
                             f"{', '.join(sorted(urls))}); one pip run installs them all: "
                             "name one, the others as extra_index_urls")
        if self.backend == "container" and self.container is None:
            raise ValueError("backend 'container' needs a 'container:' section")
        self._module_frameworks_visible()
        self._conda_terms()

    def _module_frameworks_visible(self) -> None:
        from_modules = [n for n, f in self.frameworks.items() if f.installer == "module"]
        if not from_modules or self.backend == "container":
            return
        names = ", ".join(from_modules)
        if self.backend == "conda":
            raise ValueError(f"frameworks {names}: a conda environment does not see a "
                             "module's packages; use backend: venv with "
                             "venv.system_site_packages: true")
        if not self.venv.system_site_packages:
            raise ValueError(f"frameworks {names} come from modules: the venv sees a "
                             "module's packages only with venv.system_site_packages: true")

    def _conda_terms(self) -> None:
        conda_fw = [n for n, f in self.frameworks.items() if f.installer == "conda"]
        if conda_fw and self.backend == "venv":
            raise ValueError(f"frameworks {', '.join(conda_fw)}: installer conda needs "
                             "backend: conda (a venv has no conda); use installer: pip")
        if self.backend != "conda" or self.conda.accept_tos:
            return
        from hpcprov.site.conda_channels import tos_channels

        tos = tos_channels(self)
        if tos:
            raise ValueError(
                f"conda.channels: {', '.join(tos)} fall under Anaconda's Terms of Service, "
                "which conda refuses non-interactively until they are accepted "
                "(CondaToSNonInteractiveError): set conda.accept_tos: true if you accept "
                "them, or name channels that need none (channels: [conda-forge])")


@dataclass(kw_only=True, init=False, repr=False, eq=False)
class HorovodBuild(Strict):
    """How Horovod is obtained and built: its source, version and operations."""

    source: Literal["pip", "wheelhouse", "module", "container", "none"] = "pip"
    version: str | None = F("0.28.1", description="null: whatever pip picks")
    module: str | None = F(None, description="module providing Horovod (source: module)")
    frameworks: list[Literal["pytorch", "tensorflow", "mxnet", "keras"]] = F(
        factory=lambda: ["pytorch"]
    )
    controllers: list[Literal["mpi", "gloo"]] = F(factory=lambda: ["mpi", "gloo"])
    gpu_operations: Literal["nccl", "mpi", "ddl", "ccl"] | None = None
    gpu_allreduce: Literal["nccl", "mpi", "ddl"] | None = None
    gpu_broadcast: Literal["nccl", "mpi"] | None = None
    env: dict[str, str] = F(factory=dict, check=checks.env_names,
                            description="more build variables")
    pip_args: list[str] = F(factory=lambda: ["--no-cache-dir"])
    debug_info: bool = F(
        False, description="keep debug information in Horovod's native libraries (CMake's "
        "RelWithDebInfo, Horovod's own default): compiles about a quarter slower and the "
        "wheel tens of MB larger; false: Release (-O3 without -g), set through "
        "HOROVOD_CMAKE_BUILD_TYPE, which hpcprov's build-type patch adds to 0.28.1")


@dataclass(kw_only=True, init=False, repr=False, eq=False)
class Launcher(Strict):
    """How a site starts ranks: one builder per kind reads its keys (a key the kind does
    not read is refused; each kind's keys: :mod:`hpcprov.site.launcher_kinds`)."""

    kind: LauncherKind
    description: str | None = None
    args: list[str] = F(factory=list, description="extra launcher arguments, "
                            "passed as written: one naming a variable ($NAME, ${NAME}) is "
                            "refused by site check; a value each rank computes (e.g. "
                            "--master_addr=$MASTER_ADDR) goes in wrapper")
    wrapper: list[str] = F(
        factory=list, description="a command every rank runs its program through "
        "(the GPU/NIC affinity scripts sites publish, e.g. [./select_gpu_device], or [env, "
        "ROCR_VISIBLE_DEVICES=$SLURM_LOCALID]); each rank replaces $NAME and ${NAME} in these "
        "words with its own values (nothing else in them is evaluated), inside the container "
        "for a container launcher: the rank contract, below")
    srun_args: list[str] = F(
        factory=list, description="options for the srun that starts the "
        "container's tasks or torchrun's one agent per node (args are the runtime's or "
        "torchrun's own)")
    modules: ModuleSet | None = F(
        None, description="the modules jobs of this launcher load instead of the site's "
        "runtime set; a container launcher loads none of it by default (only "
        "containers.module): the host's Python and libraries stay out of the container")
    per_rank: Literal["all", "one"] | None = F(
        None, description="what each rank this launcher starts sees of its node's GPUs, "
        "where it differs from the partition's gpus.per_rank (default: the partition's): "
        "one where it binds each rank to its own GPU (srun --gpus-per-task=1, flux run -o "
        "gpu-affinity=per-task, lrun), all where its ranks see every GPU of the node "
        "(torchrun, lrun --gpubind=off); validate, site check, jobscript and the guide "
        "read it for this launcher's jobs")
    # mpirun / horovodrun
    hosts: Literal["list", "hostfile"] = F(
        "list", description="list: -H node:slots,...; hostfile: --hostfile <hostfile>"
    )
    hostfile: str | None = F(None, description="e.g. $PBS_NODEFILE")
    oversubscribe: bool = False
    export_env: list[str] = F(factory=list, check=checks.env_name_list,
                              description="mpirun -x NAME")
    set_cuda_visible_devices: bool = F(False, description="-x CUDA_VISIBLE_DEVICES=0,..,G-1")
    rendezvous_env: bool = F(
        False, description="export MASTER_ADDR (first node) and MASTER_PORT to the ranks"
    )
    # mpiexec
    flavor: Literal["hydra", "pals"] = F(
        "hydra", description="mpiexec's family: hydra (MPICH's and Intel MPI's: -n N -ppn P) "
        "or pals (HPE Cray's PALS: -n N --ppn P); both find the job's nodes themselves and "
        "pass the environment on; binding options (--cpu-bind depth --depth 8, -bind-to "
        "core) go in args")
    # horovodrun
    controller: Literal["gloo", "mpi"] | None = F(
        None, description="horovodrun's controller: gloo (horovodrun starts the ranks "
        "itself over ssh: --gloo) or mpi (through mpirun: --mpi); unset: horovodrun's own "
        "choice, MPI where the site's Horovod has an MPI controller, else Gloo")
    # torchrun
    rdzv_backend: str = "c10d"
    rdzv_host: Literal["hostname", "first_node"] = F(
        "first_node", description="rendezvous host: $(hostname) or the first node of the job"
    )
    port: int = count(29500, ge=1024, le=65535, description="an unprivileged TCP port")
    per_node_wrapper: Literal["scheduler", "srun", "mpirun", "mpiexec", "none"] = F(
        "scheduler", description="torchrun: start one agent per node with the scheduler's "
        "own per-node starter (scheduler; Slurm: srun, Flux: flux run, LSF: blaunch; PBS "
        "and others: the site's MPI launcher, one per node; srun is the older spelling of "
        "the same), with mpirun (--map-by ppr:1:node) or mpiexec (one per node), or run "
        "directly (one node)"
    )
    # srun
    mpi: str | None = F(None, description="srun --mpi=<plugin>, e.g. pmix")
    # container
    runtime: Literal["singularity", "apptainer", "pyxis", "edf", "shifter", "podman-hpc",
                     "charliecloud"] | None = F(
            None, description="the container runtime its ranks start in, in the site's image "
            "(a container launcher: default containers.runtime; srun, mpirun, mpiexec, ibrun, "
            "jsrun or lrun: set, each rank starts through it, on any scheduler): "
            "singularity/apptainer (exec IMAGE), shifter (shifter --image=IMAGE), podman-hpc "
            "(podman-hpc run --rm IMAGE), charliecloud (ch-run --bind=MOUNT --cd=DIR IMAGE "
            "--, a directory image); srun's own options, container launchers only: "
            "pyxis (srun --container-image), edf (an EDF-based engine: srun "
            "--environment=FILE, the file written by the job from containers' image, mounts, "
            "workdir, env and annotations)")
    # args for a container launcher are the runtime's verb and flags (default: exec)
    wrap_in_bash: bool = F(False, description='run the command as /bin/bash -c "..."')
    unbuffered: bool = F(False, description="python -u")
    per_task_output: str | None = F(None, description="srun --output pattern per task")
    host_name: str | None = F(
        None, check=checks.host_name,
        description="replaces the partition's network.host_name for this launcher "
        "('{host}': the names the scheduler lists); set here, it also renames mpirun's and "
        "horovodrun's host lists, which otherwise keep the scheduler's names where an MPI "
        "starts the ranks (an MPI in an allocation refuses other names)")

    def _field_problems(self) -> list[Problem]:
        kind = self.kind.value
        problems: list[Problem] = []
        for key in sorted(LAUNCHER_KEYS):  # one order, whatever the hash seed
            reading = readers(key)
            value = getattr(self, key)
            if kind in reading or value == default_of(type(self), key):
                continue
            names = ", ".join(sorted(reading))
            problems.append(((key,), f"a {kind} launcher does not read {key} (only {names} "
                             "launchers do): remove it, or change the launcher's kind", value))
        return problems

    def _check(self) -> None:
        if self.runtime in ("pyxis", "edf") and self.kind.value != "container":
            raise ValueError(f"runtime: {self.runtime} is an option of srun itself: say it on "
                             "a launcher of kind container")
        said = [a for a in self.args if a in ("--gloo", "--mpi")]
        if self.kind.value == "horovodrun" and said:
            raise ValueError(f"args: {said[0]} is horovodrun's controller: say it as "
                             f"'controller: {said[0][2:]}' and drop it from args")
        if self.hosts == "hostfile" and not self.hostfile:
            raise ValueError("hosts: hostfile needs 'hostfile:' (e.g. $PBS_NODEFILE)")


@dataclass(kw_only=True, init=False, repr=False, eq=False)
class Containers(Strict):
    """The container runtime, the images jobs may run in, and what they mount."""

    runtime: Literal["singularity", "apptainer", "enroot", "shifter", "podman-hpc",
                     "charliecloud"] | None = \
        F(None, description="the runtime setup --container prepares images with "
              "(none: singularity; singularity/apptainer: pull into a .sif for "
              "singularity/apptainer launchers; enroot: import into a .sqsh for pyxis and "
              "edf launchers; shifter: shifterimg pull; podman-hpc: podman-hpc pull; "
              "charliecloud: no pull, the image a directory built with ch-image or "
              "ch-convert, checked and run with ch-run)")
    module: str | None = F(None, description="module that provides the runtime")
    images: dict[Name, str] = F(
        factory=dict, description="name -> image: an absolute path (or one under a "
        "$VAR; a glob: its newest match, when the job runs), or a registry reference "
        "(docker://REGISTRY/IMAGE:TAG, REGISTRY#IMAGE:TAG, oras://, library://, a name with "
        "a tag): singularity/apptainer, pyxis and edf jobs then read the file setup pulls "
        "once into $PREFIX/images/NAME.sif (.sqsh: enroot's), not the reference (every rank "
        "would pull it), Shifter and podman-hpc jobs the name setup pulled into their store "
        "(docker:REGISTRY/IMAGE:TAG; REGISTRY/IMAGE:TAG); a reference that setup could not "
        "pull to where the jobs read it (containers.runtime's tool), a Charliecloud one, and "
        "a relative path setup would write are refused at their line; NAME: null drops an "
        "inherited image")
    default_image: Name | None = F(None, description="the name in images the jobs run "
                                       "in (--image NAME|PATH picks another)")
    mounts: list[str] = F(factory=list, check=checks.toml_literal,
                          description="SRC[:DST[:OPTS]], mounted in every "
                              "container line of every runtime: singularity/apptainer -B, "
                              "podman-hpc -v and shifter --volume (SRC alone: SRC:SRC), "
                              "charliecloud's --bind=SRC[:DST] (onto a directory the image "
                              "has), pyxis --container-mounts, edf's mounts ($VARS are "
                              "expanded by the job's shell)")
    runtime_mounts: list[str] | None = F(
        None, description="the host folders the runtime mounts in every container by itself "
        "at this site, at their own paths (its configuration: singularity.conf's bind path, "
        "Shifter's siteFs, enroot's mounts); validate's run folder must be under one of "
        "these or of mounts; unset: the runtime's documented defaults (singularity/"
        "apptainer: $HOME, /tmp, /var/tmp; the others: none)")
    gpu_flag: str | None = F(None, description="e.g. --nv for Singularity")
    # an EDF-based engine's environment file (a launcher with runtime: edf)
    workdir: str | None = F(None, check=checks.toml_literal,
                            description="edf: the working directory in the "
                                "container ($VARS are expanded by the job's shell)")
    env: dict[str, str] = F(factory=dict, check=(checks.env_names, checks.toml_literal),
                            description="edf: the [env] table, "
                                "variables set inside the container")
    annotations: dict[str, str] = F(
        factory=dict, check=(checks.annotation_keys, checks.toml_literal),
        description="edf: the [annotations] table, e.g. "
        "com.hooks.aws_ofi_nccl.enabled: 'true' (the engine's hooks: NCCL's network plugin, "
        "CXI); KEY: null drops an inherited annotation")


@dataclass(kw_only=True, init=False, repr=False, eq=False)
class Uenv(Strict):
    """A uenv-style software stack (a SquashFS image of compilers, MPI, Python... mounted
    at ``mount``): setup pulls it and builds the environment inside it; jobs mount it
    through the scheduler (Slurm's uenv plugin: --uenv, --view)."""

    image: str = F(pattern=r"^[A-Za-z0-9_][A-Za-z0-9_.+/:@-]*$", max_length=200,
                       description="the uenv, as `uenv image pull` names it, e.g. "
                       "prgenv-gnu/24.11:v1")
    view: str | None = F(None, pattern=r"^[A-Za-z0-9_][A-Za-z0-9_.:,-]*$", max_length=100,
                             description="the view(s) it is started with, e.g. default")
    mount: str = F("/user-environment", pattern=r"^/[A-Za-z0-9_./-]*$",
                       description="where it is mounted (the check that it is: MOUNT/meta)")


@dataclass(kw_only=True, init=False, repr=False, eq=False)
class Site(Strict):
    __doc__ = ("A cluster: scheduler, partitions, modules, policies, Python stack, Horovod, "
               "launchers; one settings section per scheduler.")

    name: Name
    description: str = ""
    extends: str | None = F(None, description="parent profile name or file path")
    scheduler: Scheduler = Scheduler(DEFAULT_SCHEDULER)
    login_hosts: list[str] = F(factory=list, description="fnmatch host patterns")
    paths: Paths = F(factory=Paths)
    modules: Modules = F(factory=lambda: Modules(system=ModuleSystem.none))
    partitions: dict[Name, Partition] = F(min_length=1, check=checks.one_default)
    policies: Policies = F(factory=Policies)
    python: PythonStack = F(factory=PythonStack)
    horovod: HorovodBuild = F(factory=HorovodBuild)
    launchers: dict[Name, Launcher] = F(
        min_length=1, description="name -> launcher; in a profile that extends another, "
        "NAME: null drops an inherited launcher (not the default_launcher unless this "
        "profile names another)")
    default_launcher: Name
    containers: Containers = F(factory=Containers, check=checks.known_image)
    uenv: Uenv | None = F(None, description="a uenv-style software stack the "
                          "environment is built in and jobs mount")
    env: dict[str, str] = F(factory=dict, check=checks.env_names,
                            description="exported in every job")
    guide: dict[str, str] = F(
        factory=dict, description="extra site notes for `hpcprov guide` by section"
    )
    # one section per scheduler (hpcprov.site.sections: SCHEDULER_SECTIONS), reached
    # through its backend; refused, before it is validated, in another scheduler's profile
    slurm: Annotated[SlurmOptions | None, BeforeSeeing(checks.OwnSection("slurm"))] = F(
        None, description="settings of slurm jobs: only where scheduler is slurm")
    pbs: Annotated[PbsOptions | None, BeforeSeeing(checks.OwnSection("pbs"))] = F(
        None, description="settings of pbs jobs: only where scheduler is pbs")
    lsf: Annotated[LsfOptions | None, BeforeSeeing(checks.OwnSection("lsf"))] = F(
        None, description="settings of lsf jobs: only where scheduler is lsf")
    flux: Annotated[FluxOptions | None, BeforeSeeing(checks.OwnSection("flux"))] = F(
        None, description="settings of flux jobs: only where scheduler is flux")
    gridengine: Annotated[GridengineOptions | None,
                          BeforeSeeing(checks.OwnSection("gridengine"))] = F(
        None, description="settings of gridengine jobs: only where scheduler is gridengine")
    unverified: list[str] = F(
        factory=list, description="dotted keys whose values are not confirmed "
        "(e.g. partitions.gpu.nodes); each must name a key of the profile")

    # before its fields are validated: the chosen scheduler's section filled in (all
    # defaults where the profile has none)
    _prepare = staticmethod(checks.own_section_filled)

    def _field_problems(self) -> list[Problem]:
        problems: list[Problem] = []
        if self.default_launcher not in self.launchers:
            problems.append((("default_launcher",), f"{self.default_launcher!r} is not one of "
                             f"the launchers ({', '.join(self.launchers)})",
                             self.default_launcher))
        chosen = checks.scheduler_name(self.scheduler)
        for name in SCHEDULER_SECTIONS:
            if getattr(self, name) is not None and chosen != name:
                problems.append(((name,), checks.not_own_section(name, chosen), None))
        for i, key in enumerate(self.unverified):
            problem = checks.key_path_problem(self, key)
            if problem:
                problems.append((("unverified", i), problem, key))
        return problems

    def _check(self) -> None:
        self._framework_modules_loaded()
        vendors = {p.gpus.vendor for p in self.partitions.values() if p.gpus.count}
        if len(vendors) > 1 and self.horovod.source == "pip":
            raise ValueError(f"partitions have GPUs of {' and '.join(sorted(vendors))}, but one "
                             "Horovod build serves them all: describe each kind of GPU node "
                             "in a profile of its own (extends: this one)")
        hvd = self.horovod
        if hvd.source != "none" and (hvd.gpu_operations or hvd.gpu_allreduce):
            for vendor in vendors:
                if VENDORS[vendor].horovod_env is None:
                    raise ValueError("horovod.gpu_operations: "
                                     f"{VENDORS[vendor].horovod_refusal}")
        if not self.policies.conda_allowed and self.python.backend == "conda":
            raise ValueError("python.backend is conda, but policies.conda_allowed is false at "
                             "this site: use python.backend: venv (frameworks with installer: "
                             "pip), or a container")
        # a registry reference setup could not pull, or not where the jobs read it, and a
        # relative image path setup would write, each refused at its own key's line
        from hpcprov.site.image_refs import image_problems
        from hpcprov.site.mounts import container_problems

        problems = [*image_problems(self), *container_problems(self)]
        if problems:
            raise invalid([(loc, why, None) for loc, why in problems])

    def _framework_modules_loaded(self) -> None:
        py = self.python
        needed = [] if py.backend == "container" else [
            (f"python.frameworks.{name} comes from module {fw.module}", fw.module)
            for name, fw in py.frameworks.items() if fw.installer == "module"]
        if py.backend in ("conda", "venv") and py.conda.module:
            needed.append((f"python.conda.module is {py.conda.module}", py.conda.module))
        for what, module in needed:
            missing = [f"modules.{which}.load" for which in ("build", "runtime")
                       if module not in getattr(self.modules, which).load]
            if missing:
                raise ValueError(f"{what}: add it to {' and '.join(missing)} (the build "
                                 "and the jobs use it)")

    # ------------------------------------------------------------ what a site answers

    def partition(self, name: str | None = None) -> tuple[str, Partition]:
        """The named partition, else the default one, else the first. The one place a
        partition name is resolved: an unknown one is the one-line :func:`no_partition`."""
        if name is not None:
            if name not in self.partitions:
                raise checks.no_partition(self.name, name, self.partitions)
            return name, self.partitions[name]
        for pname, part in self.partitions.items():
            if part.default:
                return pname, part
        first = next(iter(self.partitions))
        return first, self.partitions[first]

    def per_rank(self, launcher: str, partition: str) -> Literal["all", "one"]:
        """What each rank a launcher starts on a partition sees of its node's GPUs: the
        launcher's ``per_rank``, else the partition's ``gpus.per_rank``."""
        own = self.launchers[launcher].per_rank if launcher in self.launchers else None
        return own or self.partitions[partition].gpus.per_rank

    def partition_for_nodes(self, nodes: int) -> str | None:
        """Where no partition is named: the default one when its node limits fit a job of
        ``nodes`` nodes, else the first queue chosen by job size that fits; None: the
        default (nothing fits better)."""
        def fits(part: Partition) -> bool:
            lim = part.limits
            return ((lim.min_nodes_per_job or 1) <= nodes
                    and nodes <= (lim.max_nodes_per_job or nodes)
                    and nodes <= (part.nodes or nodes))

        _, default = self.partition(None)
        if fits(default):
            return None
        return next((n for n, p in self.partitions.items() if p.by_job_size and fits(p)), None)

    def modules_for(self, partition: str | None = None) -> Modules:
        """The module configuration that applies on a partition."""
        _, part = self.partition(partition)
        return part.modules or self.modules

    def prefix(self) -> str:
        """The install prefix template with {scratch} filled in."""
        return str(self.paths.prefix).replace("{scratch}", self.paths.scratch)

    def profile_data(self) -> dict[str, object]:
        """The site as profile data (JSON types; ``extends`` resolved, defaults filled),
        as `hpcprov site show` prints it: only its own scheduler's section."""
        from hpcprov.site.codec import dump

        data: dict[str, object] = dump(self)
        for name in SCHEDULERS:
            if data.get(name, ...) is None:
                del data[name]
        return data
