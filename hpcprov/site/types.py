"""The site, declared once: plain typed classes (stdlib dataclasses).

What a cluster is, as checked YAML: every seed site is expressed with these fields alone;
generators read the data and never ask which site they are working for. Unknown keys are
rejected everywhere.

This module imports no pydantic: a command answered from the profile cache
(:mod:`hpcprov.site.cache`) builds these classes from plain JSON without it. Pydantic
validates a profile into them (:mod:`hpcprov.site.model`: ``TypeAdapter(Site)``) and
writes their JSON Schema, reading what each field declares: its type (``Annotated`` with
:class:`Meta` or :class:`After` for a type inside a list or a mapping) and the keyword
arguments of ``pydantic.Field`` in the dataclass field's ``metadata`` (description, strict,
bounds, pattern), which :func:`F` writes. The checks that span fields run in
``__post_init__`` (pydantic calls it after validating the fields), a field's own check
raising at that field's location (:func:`invalid`). :func:`dump` is a site's JSON,
:func:`load` reads it back (the profile cache), directed by the same type hints.

Annotations are evaluated when the classes are made (no ``from __future__ import
annotations``): the dataclass fields then carry real types, which :func:`load` reads
without evaluating strings on a warm start.
"""

import dataclasses
import functools
import math
import re
from collections.abc import Callable, Iterable
from dataclasses import MISSING, dataclass, fields
from enum import Enum
from types import UnionType
from typing import (
    TYPE_CHECKING,
    Annotated,
    Any,
    ClassVar,
    Literal,
    Optional,
    Union,
    get_args,
    get_origin,
)

from hpcprov.core.errors import UsageError
from hpcprov.core.text import FREE_TEXT, SINGLE_LINE_RULE, TEXT_RULE, has_control
from hpcprov.core.walltime import walltime_seconds
from hpcprov.site.gpu_vendors import DEFAULT_VENDOR, VENDORS
from hpcprov.site.kinds import LauncherKind, ModuleSystem, Scheduler
from hpcprov.site.launcher_kinds import LAUNCHER_KEYS, readers
from hpcprov.site.sections import DEFAULT_SCHEDULER, SCHEDULERS, Setting

if TYPE_CHECKING:
    from pydantic import GetCoreSchemaHandler
    from pydantic_core import CoreSchema

_NAME_RE = r"^[A-Za-z0-9][A-Za-z0-9_.+-]*$"
_OPTION_RE = r"^[A-Za-z][A-Za-z0-9_-]*$"  # a flag as the scheduler spells it: alloc_flags
# (patterns as text: re compiles one when a check first uses it, never on a warm start)
_ENV_RE = r"^[A-Za-z_][A-Za-z0-9_]*$"

# a value refused: (its location, relative to the object checked; why; the value)
Problem = tuple[tuple[str | int, ...], str, Any]


# ------------------------------------------------------------------ declaring a field


def F(default: Any = MISSING, *, factory: Callable[[], Any] | Any = MISSING,
      **meta: Any) -> Any:
    """A dataclass field: its default (or default factory) and, in its metadata, what
    ``pydantic.Field`` would be told (description, strict, ge, le, pattern...)."""
    return dataclasses.field(default=default, default_factory=factory, metadata=meta)


class Meta:
    """Constraints on a type inside a container (a mapping's key, a list's item), as
    pydantic-core schema keys: ``Annotated[str, Meta(pattern=..., max_length=64)]``."""

    def __init__(self, **keys: Any) -> None:
        self.keys = keys

    def __get_pydantic_core_schema__(self, source: Any, handler: "GetCoreSchemaHandler"
                                     ) -> "CoreSchema":
        return {**handler(source), **self.keys}


class After:
    """A check of one value (raising ValueError), run after its type is validated."""

    def __init__(self, check: Callable[[Any], Any]) -> None:
        self.check = check

    def __get_pydantic_core_schema__(self, source: Any, handler: "GetCoreSchemaHandler"
                                     ) -> "CoreSchema":
        from pydantic_core import core_schema

        return core_schema.no_info_after_validator_function(self.check, handler(source))


class Before(After):
    """A check of the value as written (raising ValueError), before its type is validated."""

    def __get_pydantic_core_schema__(self, source: Any, handler: "GetCoreSchemaHandler"
                                     ) -> "CoreSchema":
        from pydantic_core import core_schema

        return core_schema.no_info_before_validator_function(self.check, handler(source))


def invalid(problems: list[Problem]) -> ValueError:
    """The error for values refused at their own locations (relative to the object being
    checked): a pydantic ValidationError, which pydantic nests under the object's location
    (and the loader turns into file:line)."""
    from pydantic import ValidationError
    from pydantic_core import InitErrorDetails, PydanticCustomError

    return ValidationError.from_exception_data("Site", [
        InitErrorDetails(type=PydanticCustomError("value_error", "Value error, {reason}",
                                                  {"reason": why}), loc=loc, input=value)
        for loc, why, value in problems])


Name = Annotated[str, Meta(pattern=_NAME_RE, max_length=64)]
OptionName = Annotated[str, Meta(pattern=_OPTION_RE, max_length=64)]


# the single-line and free-text rules: hpcprov.core.text

# upper bounds on counts: larger than any machine has, small enough that a plan that lists
# every node, core or job stays a plan (a typo of 10**12 nodes is refused, not planned)
MAX_NODES = 1_000_000  # Fugaku, the largest, has 158,976
MAX_CORES = 16_384  # per node; the largest single-image machines have a few thousand
MAX_MEMORY_GB = 1 << 20  # 1 PiB per node
MAX_COUNT = 10_000_000  # jobs or GPUs of one user


def _control(value: object, free: bool = False) -> bool:
    """Whether a string, or one in a mapping (keys too) or a list, holds a control
    character the rule refuses there."""
    if isinstance(value, str):
        return has_control(value, free)
    if isinstance(value, dict):
        return any(_control(k, free) or _control(v, free) for k, v in value.items())
    if isinstance(value, list | tuple):
        return any(_control(item, free) for item in value)
    return False


def _count(default: Any = MISSING, *, ge: int = 1, le: int, description: str) -> Any:
    """A strict integer field (``true`` is not 1, ``2.0`` is not 2) between ``ge`` and
    ``le``; the description says why the bound is what it is."""
    return F(default, strict=True, ge=ge, le=le, description=description)


@dataclass(kw_only=True, init=False, repr=False, eq=False)
class Strict:
    """Base: unknown keys are errors (pydantic: extra forbid); strings that may reach a
    shell hold no control characters; numbers are finite (.inf and .nan are refused; JSON
    has neither)."""

    __pydantic_config__ = {"extra": "forbid", "allow_inf_nan": False}

    # one __init__, __eq__ and __repr__ for every class: dataclasses would write and compile
    # each class its own, which costs every command that reads a site from the profile
    # cache about ten milliseconds (pydantic builds the objects without __init__, then
    # calls __post_init__)
    def __init__(self, **values: Any) -> None:
        cls: type = type(self)  # (a plain type: see _field_specs)
        for name, default, factory in _field_specs(cls):
            if name in values:
                value = values.pop(name)
            elif default is not MISSING:
                value = default
            elif factory is not MISSING:
                value = factory()
            else:
                raise TypeError(f"{type(self).__name__}: {name} is required")
            setattr(self, name, value)
        if values:
            raise TypeError(f"{type(self).__name__} has no {', '.join(sorted(values))}")
        self.__post_init__()

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and all(
            getattr(self, f.name) == getattr(other, f.name) for f in fields(self))

    # mutable, so not hashable: defining __eq__ and no __hash__ sets __hash__ to None

    def __repr__(self) -> str:
        inner = ", ".join(f"{f.name}={getattr(self, f.name)!r}" for f in fields(self))
        return f"{type(self).__name__}({inner})"

    # (field, its checks): each raises ValueError for a value it refuses; pydantic runs them
    # on the field as it validates it (the first refusal is the field's error), and so does
    # __post_init__ for an object built directly
    _own_checks: ClassVar[tuple[tuple[str, tuple[Callable[[Any], Any], ...]], ...]] = ()

    @classmethod
    def __get_pydantic_core_schema__(cls, source: Any, handler: "GetCoreSchemaHandler"
                                     ) -> "CoreSchema":
        """Pydantic's schema of the class, each field's value checked as it is validated:
        the text rule, then the field's own checks (so a field's problem is reported even
        where another field fails, as a field validator's would be)."""
        from pydantic_core import core_schema

        schema = handler(source)
        args = schema.get("schema") if schema.get("type") == "dataclass" else None
        if not args or args.get("type") != "dataclass-args":
            return schema
        own = dict(cls._own_checks)
        for spec in args["fields"]:
            name = spec["name"]
            holder = spec["schema"] if spec["schema"]["type"] == "default" else spec
            holder["schema"] = core_schema.no_info_after_validator_function(
                _field_checker(name, own.get(name, ())), holder["schema"])
        return schema

    def __post_init__(self) -> None:
        problems = [*self._text_problems(), *self._own_problems(), *self._field_problems()]
        if problems:
            raise invalid(problems)
        self._check()

    def _own_problems(self) -> list[Problem]:
        out = []
        for name, checks in self._own_checks:
            value = getattr(self, name)
            for check in checks:
                refused = _refused(name, value, check)
                if refused:
                    out += refused
                    break
        return out

    def _text_problems(self) -> list[Problem]:
        """Each field holding a control character its rule refuses (the fields named in
        FREE_TEXT may hold newlines and tabs)."""
        cls: type = type(self)  # (a plain type: see _field_specs)
        return [((name,), TEXT_RULE if name in FREE_TEXT else SINGLE_LINE_RULE, value)
                for name, _, _ in _field_specs(cls)
                if _control(value := getattr(self, name), name in FREE_TEXT)]

    def _field_problems(self) -> list[Problem]:
        """Each field refused by a check of its own: (location, why, value)."""
        return []

    def _check(self) -> None:
        """The checks across fields (ValueError: at this object's location)."""


def _field_checker(name: str, checks: tuple[Callable[[Any], Any], ...]
                   ) -> Callable[[Any], Any]:
    free = name in FREE_TEXT

    def check(value: Any) -> Any:
        if _control(value, free):
            raise ValueError(TEXT_RULE if free else SINGLE_LINE_RULE)
        for one in checks:
            one(value)
        return value

    return check


@functools.cache
def _field_specs(cls: type) -> tuple[tuple[str, Any, Any], ...]:
    """(name, default, default factory) of each field of a site class (given as a plain
    ``type``: mypy takes a ``type[X]`` for unhashable where a cached function's argument
    must be hashable, python/mypy#11470)."""
    return tuple((f.name, f.default, f.default_factory) for f in fields(cls))


def _refused(name: str, value: Any, check: Callable[[Any], Any]
             ) -> list[Problem]:
    """[(the field, why, its value)] where ``check`` raises ValueError, else []."""
    try:
        check(value)
    except ValueError as exc:
        return [((name,), str(exc), value)]
    return []


def _check_env_names(env: dict[str, str]) -> dict[str, str]:
    for key in env:
        if not re.match(_ENV_RE, key):
            raise ValueError(f"{key!r} is not a valid environment variable name")
    return env


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

    count: int = _count(0, ge=0, le=64, description="GPUs per node (at most 64)")
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


def _check_bins(bins: list[Any]) -> list[Any]:
    """Node-count bins: max_nodes increasing, and one without max_nodes (any larger job)
    only last."""
    last = 0
    for i, b in enumerate(bins):
        if b.max_nodes is None:
            if i != len(bins) - 1:
                raise ValueError(f"entry {i + 1} has no max_nodes (it takes every larger "
                                 "job), so it must be the last")
        elif b.max_nodes <= last:
            raise ValueError(f"entry {i + 1}: max_nodes {b.max_nodes} is not above the "
                             f"previous entry's {last}: list the bins smallest first")
        else:
            last = b.max_nodes
    return bins


@dataclass(kw_only=True, init=False, repr=False, eq=False)
class WalltimeByNodes(Strict):
    """A wall-clock cap for the jobs of up to ``max_nodes`` nodes."""

    max_nodes: int | None = _count(None, le=MAX_NODES, description="jobs of up to this "
                                   "many nodes (and more than the previous entry's); left "
                                   "out: every larger job")
    max_walltime: str = F(description="[D-]HH:MM:SS")

    _own_checks = (("max_walltime", (lambda v: _walltime(v),)),)


def _walltime(value: str | None) -> None:
    if value is not None and not walltime_seconds(value):
        raise ValueError(f"{value!r} is not a wall-clock limit: write [D-]HH:MM:SS, "
                         "e.g. '24:00:00' or '2-00:00:00' (quoted), more than zero")


@dataclass(kw_only=True, init=False, repr=False, eq=False)
class Limits(Strict):
    """What the scheduler allows: jobs and GPUs per user, nodes per job, walltimes."""

    max_jobs_per_user: int | None = _count(
        None, le=MAX_COUNT, description=f"at most {MAX_COUNT:,} (more than a scheduler queues)")
    max_gpus_per_user: int | None = _count(
        None, le=MAX_COUNT, description=f"at most {MAX_COUNT:,}")
    max_nodes_per_job: int | None = _count(
        None, le=MAX_NODES, description=f"at most {MAX_NODES:,}, as a partition's nodes")
    min_nodes_per_job: int | None = _count(
        None, le=MAX_NODES, description="the fewest nodes a job of this queue may ask for "
        "(queues by job size)")
    max_walltime: str | None = F(None, description="[D-]HH:MM:SS")
    default_walltime: str | None = F(
        None, description="[D-]HH:MM:SS, used when --time is not given; at most max_walltime "
        "(without either, a job asks for no time limit, and jobscript warns)")
    interactive_walltime: str | None = F(
        None, description="[D-]HH:MM:SS, the time an interactive allocation (salloc, qsub "
        "-I, bsub -Is: hpcprov launch --allocate, the guide) asks for when --time is not "
        "given, where the site caps interactive jobs below batch ones (e.g. 8 h against "
        "48 h); none: default_walltime")
    _own_checks = (("max_walltime", (lambda v: _walltime(v),)),
                   ("default_walltime", (lambda v: _walltime(v),)),
                   ("interactive_walltime", (lambda v: _walltime(v),)),
                   ("max_walltime_by_nodes", (_check_bins,)))
    max_walltime_by_nodes: list[WalltimeByNodes] = F(
        factory=list, description="wall-clock caps by job size, smallest first, "
        "e.g. [{max_nodes: 64, max_walltime: '24:00:00'}, {max_walltime: '12:00:00'}]: the "
        "first entry whose max_nodes the job's node count does not exceed (or the one "
        "without max_nodes) caps --time; a job no entry takes gets max_walltime")

    def _field_problems(self) -> list[Problem]:
        cap = self.max_walltime

        def within_cap(value: str | None) -> None:
            _walltime(value)
            if value is None or not cap:
                return
            # no number for a cap that is no limit (0 or unreadable: its own field's error)
            seconds, most = walltime_seconds(value), walltime_seconds(cap)
            if seconds is not None and most and seconds > most:
                raise ValueError(f"{value!r} is longer than max_walltime {cap!r}")

        return [problem for key in ("default_walltime", "interactive_walltime")
                for problem in (_refused(key, getattr(self, key), within_cap)
                                if not _refused("", getattr(self, key), _walltime) else [])]


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


_HOST_TEMPLATE = r"^[A-Za-z0-9.-]*\{host\}[A-Za-z0-9.-]*$"


def _check_host_name(value: str | None) -> str | None:
    """A host name template: ``{host}`` once, letters, digits, '.' and '-' around it."""
    if value is not None and not re.match(_HOST_TEMPLATE, value):
        raise ValueError(f"{value!r} is not a host name template: write {{host}} (the name "
                         "the scheduler lists) once, with letters, digits, '.' or '-' around "
                         "it, e.g. '{host}-ib', '{host}i' or 'ib-{host}'")
    return value


@dataclass(kw_only=True, init=False, repr=False, eq=False)
class Network(Strict):
    """A partition's high-speed network: the nodes' names on it, and what NCCL, Gloo and
    libfabric are told (exported before every launch line, passed on by mpirun -x)."""

    host_name: str | None = F(
        None, description="the node's name on the high-speed network, a template over the "
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
        factory=dict, description="more network variables (e.g. FI_CXI_* or "
        "NCCL_CROSS_NIC), with the meaning of the site's env")

    _own_checks = (("host_name", (_check_host_name,)), ("env", (_check_env_names,)))


@dataclass(kw_only=True, init=False, repr=False, eq=False)
class EnvByNodes(Strict):
    """Variables for the jobs of up to ``max_nodes`` nodes."""

    max_nodes: int | None = _count(None, le=MAX_NODES, description="jobs of up to this "
                                   "many nodes (and more than the previous entry's); left "
                                   "out: every larger job")
    env: dict[str, str] = F(factory=dict, description="exported for those "
                                "jobs after the network's, with the meaning of the site's env")

    _own_checks = (("env", (_check_env_names,)),)


def _flags_have_no_value(value: Any) -> Any:
    if isinstance(value, dict):
        for name, item in value.items():
            if isinstance(item, bool):
                raise ValueError(f"{name}: {str(item).lower()}: a flag option is written "
                                 f"with no value ('{name}:' or '{name}: null'), an option "
                                 f"with a value as text ('{name}: \"yes\"')")
    return value


@dataclass(kw_only=True, init=False, repr=False, eq=False)
class Partition(Strict):
    """One partition (queue) of the cluster: its nodes, GPUs, limits and network."""

    description: str | None = None
    nodes: int | None = _count(None, le=MAX_NODES, description=f"number of nodes in the "
                               f"partition (at most {MAX_NODES:,}: more than any machine "
                               "has; plans list every node); null or left out: the site "
                               "publishes no count")
    cores_per_node: int = _count(le=MAX_CORES, description=f"CPU cores per node (at most "
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
    cpus_per_task: int | None = _count(None, le=MAX_CORES,
                                      description="default --cpus-per-task")
    options: Annotated[dict[OptionName, str | None], Before(_flags_have_no_value)] = F(
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
        factory=list, description="variables by job size, smallest first, e.g. "
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

    _own_checks = (("env_by_nodes", (_check_bins,)),)

    def _check(self) -> None:
        if self.routing == "options" and not self.options:
            raise ValueError("routing: options needs the options that pick the nodes, e.g. "
                             "options: {constraint: gpu, qos: regular}")


@dataclass(kw_only=True, init=False, repr=False, eq=False)
class RequiredOption(Strict):
    """A job option the site insists on (Neuron --comment, CC --account)."""

    default: str | None = F(None, description="used when the user gives none; written "
                            "into the job's directive lines as it is, which the scheduler "
                            "reads and no shell expands: a $ or ` ($(id -gn), $USER) is "
                            "refused")
    choices: list[str] | None = None
    example: str | None = F(None, description="shown in the error when missing")
    reason: str | None = None

    _own_checks = (("default", (lambda v: _no_shell_text(v),)),)


def _no_shell_text(value: str | None) -> None:
    """Refuse a default the job's directives would carry literally ($(id -gn), $USER)."""
    if value is not None and ("$" in value or "`" in value):
        raise ValueError(f"{value!r} would be written literally: job options go into the "
                         "job's directive lines (#SBATCH, #PBS, #BSUB, # flux:), which the "
                         "scheduler reads and no shell expands; write the value itself "
                         "(e.g. default: mygroup), or leave default out so that each user "
                         "passes it with -o NAME=VALUE")


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
    purge_days: int | None = _count(None, le=36_500, description="scratch files unused this "
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
    wheelhouse_trust: list[Annotated[str, Meta(pattern=r"^@?[A-Za-z_][A-Za-z0-9_.-]*$")]] = \
        F(factory=list, max_length=64,
              description="who else may publish wheels you install from the wheelhouse: "
              "user names, or @group for every member (you and root always may; "
              "$HPCPROV_WHEELHOUSE_TRUST adds more); see docs/security.md")


_SHELL_VAR = r"\$\{[A-Za-z_][A-Za-z0-9_]*\}|\$[A-Za-z_][A-Za-z0-9_]*"
_CHANNEL = rf"(?:[A-Za-z0-9]|{_SHELL_VAR})(?:[A-Za-z0-9_.:/+-]|{_SHELL_VAR})*"


def _channel(value: str) -> str:
    if not re.fullmatch(_CHANNEL, value):
        raise ValueError(f"{value!r} is not a conda channel: a name or URL of letters, digits "
                         "and _.:/+-, which may use the node's variables as $NAME or ${NAME} "
                         "(nothing else expands: no $(...), quotes, spaces or globs)")
    return value


# a conda channel: a name or URL, which may use $NAME or ${NAME} (expanded by setup's shell)
Channel = Annotated[str, Meta(max_length=512), After(_channel)]


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


_INDEX_URL = r"^https?://[A-Za-z0-9.-]+(:[0-9]+)?(/[A-Za-z0-9._~%/+-]*)?$"
IndexUrl = Annotated[str, Meta(pattern=_INDEX_URL, max_length=512)]


def _no_option(spec: str) -> str:
    """A package spec, not an option: pip would take ``--index-url=URL`` as one, yet in a
    list of packages it is neither checked nor seen by uv or site check."""
    if spec.startswith("-"):
        raise ValueError(f"{spec!r} is a pip option, not a package: name an index with "
                         "python.frameworks.NAME.index_url (or extra_index_urls), e.g. "
                         "index_url: https://download.pytorch.org/whl/rocm6.2")
    return spec


PackageSpec = Annotated[str, After(_no_option)]


def _one_version(value: str) -> str:
    """A framework's version: one release to install and check (``torch==VERSION``), never
    empty, a wildcard or a range, which no installed version can match."""
    if not re.fullmatch(r"[0-9][0-9A-Za-z.+!_-]*", value):
        raise ValueError(f"{value!r} is not a version: write the one version to install, "
                         "e.g. '2.5.1' (quoted); setup installs and checks exactly it, which "
                         "no wildcard, range or empty value can match")
    return value


@dataclass(kw_only=True, init=False, repr=False, eq=False)
class Framework(Strict):
    """One deep-learning framework: its version, what installs it and from where."""

    version: str = F(description="the one version to install and check, e.g. '2.5.1' "
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

    _own_checks = (("version", (_one_version,)),)


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
        factory=dict, description="variables set only while setup installs the frameworks "
        "and packages (e.g. MPICC: mpicc, PIP_NO_BINARY: mpi4py), with the meaning of the "
        "site's env; never exported in jobs or PREFIX/activate")

    _own_checks = (("install_env", (_check_env_names,)),)

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
    env: dict[str, str] = F(factory=dict, description="more build variables")
    pip_args: list[str] = F(factory=lambda: ["--no-cache-dir"])
    debug_info: bool = F(
        False, description="keep debug information in Horovod's native libraries (CMake's "
        "RelWithDebInfo, Horovod's own default): compiles about a quarter slower and the "
        "wheel tens of MB larger; false: Release (-O3 without -g), set through "
        "HOROVOD_CMAKE_BUILD_TYPE, which hpcprov's build-type patch adds to 0.28.1")

    _own_checks = (("env", (_check_env_names,)),)


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
    export_env: list[str] = F(factory=list, description="mpirun -x NAME")
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
    port: int = _count(29500, ge=1024, le=65535, description="an unprivileged TCP port")
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
        None, description="replaces the partition's network.host_name for this launcher "
        "('{host}': the names the scheduler lists); set here, it also renames mpirun's and "
        "horovodrun's host lists, which otherwise keep the scheduler's names where an MPI "
        "starts the ranks (an MPI in an allocation refuses other names)")

    def _field_problems(self) -> list[Problem]:
        kind = self.kind.value
        problems: list[Problem] = []
        for key in sorted(LAUNCHER_KEYS):  # one order, whatever the hash seed
            reading = readers(key)
            value = getattr(self, key)
            if kind in reading or value == _default(type(self), key):
                continue
            names = ", ".join(sorted(reading))
            problems.append(((key,), f"a {kind} launcher does not read {key} (only {names} "
                             "launchers do): remove it, or change the launcher's kind", value))
        return problems

    _own_checks = (("host_name", (_check_host_name,)),
                   ("export_env", (lambda names: _check_env_names(dict.fromkeys(names, "")),)))

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


def _default(cls: type[Strict], name: str) -> Any:
    """A dataclass field's default value (its factory's, called)."""
    f = cls.__dataclass_fields__[name]
    return f.default_factory() if f.default_factory is not MISSING else f.default


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
    mounts: list[str] = F(factory=list, description="SRC[:DST[:OPTS]], mounted in every "
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
    workdir: str | None = F(None, description="edf: the working directory in the "
                                "container ($VARS are expanded by the job's shell)")
    env: dict[str, str] = F(factory=dict, description="edf: the [env] table, "
                                "variables set inside the container")
    annotations: dict[str, str] = F(
        factory=dict, description="edf: the [annotations] table, e.g. "
        "com.hooks.aws_ofi_nccl.enabled: 'true' (the engine's hooks: NCCL's network plugin, "
        "CXI); KEY: null drops an inherited annotation")

    _own_checks = (("mounts", (lambda v: _toml_literal(v),)),
                   ("workdir", (lambda v: _toml_literal(v),)),
                   ("env", (_check_env_names, lambda v: _toml_literal(v))),
                   ("annotations", (lambda v: _annotation_keys(v), lambda v: _toml_literal(v))))


def _annotation_keys(value: dict[str, str]) -> None:
    for key in value:
        if not re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_.-]*", key):
            raise ValueError(f"{key!r} is not an annotation key (letters, digits, _ . -)")


def _toml_literal(value: Any) -> None:
    items = value.values() if isinstance(value, dict) else \
        value if isinstance(value, list) else [value]
    for item in items:
        if item is not None and ("'" in item or has_control(item, False)):
            raise ValueError(f"{item!r}: a value written into the engine's TOML file "
                             "holds no single quote or control character")


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


class Section(Strict):
    """A scheduler's profile section (``slurm:``, ``pbs:``...): its keys are those
    :mod:`hpcprov.site.sections` declares for it; a backend reads its own
    (:meth:`hpcprov.schedulers.base.Backend.section`)."""



def _scheduler_section(name: str, settings: dict[str, Setting]) -> type[Section]:
    """The profile section of one scheduler, from the keys it declares."""
    return dataclasses.make_dataclass(
        f"{name.capitalize()}Options",
        [(key, s.annotation,
          F(factory=s.default.copy, description=s.description)
          if isinstance(s.default, dict) else F(s.default, description=s.description))
         for key, s in settings.items()],
        bases=(Section,), kw_only=True, init=False, repr=False, eq=False,
        namespace={"__module__": __name__,
                   "__doc__": f"Settings of {name} jobs (only in a profile whose scheduler "
                              f"is {name}).",
                   "_own_checks": tuple((key, (s.check,)) for key, s in settings.items()
                                        if s.check)})


SCHEDULER_SECTIONS: dict[str, type[Section]] = {
    name: _scheduler_section(name, reg.settings) for name, reg in SCHEDULERS.items()
    if reg.settings}


def _scheduler_name(value: Any) -> str | None:
    name = getattr(value, "value", value)
    return name if isinstance(name, str) else None


def _own_section_filled(data: Any) -> Any:
    """The chosen scheduler's section, empty (all defaults) where the profile has none."""
    if isinstance(data, dict):
        name = _scheduler_name(data.get("scheduler", DEFAULT_SCHEDULER))
        if name in SCHEDULER_SECTIONS and data.get(name) is None:
            data = {**data, name: {}}
    return data


def _not_own_section(name: str, chosen: str | None) -> str:
    return (f"this profile's scheduler is {chosen}, so a {name}: section configures "
            f"nothing: remove it (or set scheduler: {name})")


class OwnSection:
    """A scheduler's section refused, before it is validated itself, in a profile of
    another scheduler (pydantic: a check of the value as written, with the fields before)."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __get_pydantic_core_schema__(self, source: Any, handler: "GetCoreSchemaHandler"
                                     ) -> "CoreSchema":
        from pydantic_core import core_schema

        def check(value: Any, info: Any) -> Any:
            chosen = _scheduler_name(info.data.get("scheduler"))
            if value is not None and chosen is not None and chosen != self.name:
                raise ValueError(_not_own_section(self.name, chosen))
            return value

        return core_schema.with_info_before_validator_function(check, handler(source))


def _one_default(partitions: dict[str, Partition]) -> None:
    defaults = [n for n, p in partitions.items() if p.default]
    if len(defaults) > 1:
        raise ValueError(f"more than one default partition: {', '.join(defaults)}")


def _known_image(containers: Containers) -> None:
    img = containers.default_image
    if img and img not in containers.images:
        raise ValueError(f"default_image {img!r} is not in images")


def no_partition(site: str, name: str, partitions: Iterable[str]) -> UsageError:
    """The error for a partition name a site does not have (one message, wherever a
    partition is named: the command line, a job request, a recorded profile)."""
    return UsageError(f"--partition {name!r}: site {site} has no such partition (it has "
                      f"{', '.join(partitions) or 'none'})")


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
    partitions: dict[Name, Partition] = F(min_length=1)
    policies: Policies = F(factory=Policies)
    python: PythonStack = F(factory=PythonStack)
    horovod: HorovodBuild = F(factory=HorovodBuild)
    launchers: dict[Name, Launcher] = F(
        min_length=1, description="name -> launcher; in a profile that extends another, "
        "NAME: null drops an inherited launcher (not the default_launcher unless this "
        "profile names another)")
    default_launcher: Name
    containers: Containers = F(factory=Containers)
    uenv: Uenv | None = F(None, description="a uenv-style software stack the "
                          "environment is built in and jobs mount")
    env: dict[str, str] = F(factory=dict, description="exported in every job")
    guide: dict[str, str] = F(
        factory=dict, description="extra site notes for `hpcprov guide` by section"
    )
    # one section per scheduler (hpcprov.site.sections), reached through its backend
    if not TYPE_CHECKING:
        for _name, _cls in SCHEDULER_SECTIONS.items():
            __annotations__[_name] = Annotated[Optional[_cls], OwnSection(_name)]  # noqa: UP045
            locals()[_name] = F(None, description=f"settings of {_name} jobs: only where "
                                f"scheduler is {_name}")
        del _name, _cls
    unverified: list[str] = F(
        factory=list, description="dotted keys whose values are not confirmed "
        "(e.g. partitions.gpu.nodes); each must name a key of the profile")

    @classmethod
    def __get_pydantic_core_schema__(cls, source: Any, handler: "GetCoreSchemaHandler"
                                     ) -> "CoreSchema":
        """Pydantic's schema, with the chosen scheduler's section filled in first (all
        defaults where the profile has none)."""
        from pydantic_core import core_schema

        return core_schema.no_info_before_validator_function(
            _own_section_filled, super().__get_pydantic_core_schema__(source, handler))

    _own_checks = (("partitions", (lambda v: _one_default(v),)),
                   ("containers", (lambda v: _known_image(v),)),
                   ("env", (_check_env_names,)))

    def _field_problems(self) -> list[Problem]:
        problems: list[Problem] = []
        if self.default_launcher not in self.launchers:
            problems.append((("default_launcher",), f"{self.default_launcher!r} is not one of "
                             f"the launchers ({', '.join(self.launchers)})",
                             self.default_launcher))
        chosen = _scheduler_name(self.scheduler)
        for name in SCHEDULER_SECTIONS:
            if getattr(self, name) is not None and chosen != name:
                problems.append(((name,), _not_own_section(name, chosen), None))
        for i, key in enumerate(self.unverified):
            problem = _key_path_problem(self, key)
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
                raise no_partition(self.name, name, self.partitions)
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

    def profile_data(self) -> dict[str, Any]:
        """The site as profile data (JSON types; ``extends`` resolved, defaults filled),
        as `hpcprov site show` prints it: only its own scheduler's section."""
        data: dict[str, Any] = dump(self)
        for name in SCHEDULERS:
            if data.get(name, ...) is None:
                del data[name]
        return data


def _key_path_problem(site: Site, path: str) -> str | None:
    """Why a dotted key path (``partitions.gpu.nodes``) names nothing in the validated
    profile; None when it names a key (written or defaulted)."""
    parts = path.split(".")
    node: Any = site
    for depth, part in enumerate(parts):
        keys = ([f.name for f in fields(node)] if dataclasses.is_dataclass(node)
                else [str(k) for k in node] if isinstance(node, dict) else [])
        if part not in keys:
            where = ".".join(parts[:depth]) or "the top level"
            known = ", ".join(keys[:12]) or "no keys"
            return f"{path!r} names no key of this profile: {where} has {known}"
        node = getattr(node, part) if dataclasses.is_dataclass(node) else node[part]
    return None


# ------------------------------------------------------------------ the JSON form


def dump(value: Any) -> Any:
    """A site, or a part of one, as JSON types (dicts, lists, strings, numbers, booleans,
    null): enum members as their values. :func:`load` reads it back."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: dump(getattr(value, f.name)) for f in fields(value)}
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, dict):
        return {k: dump(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [dump(v) for v in value]
    return value


def load(kind: Any, data: Any, *, plain: bool = False) -> Any:
    """What :func:`dump` wrote, read back as ``kind`` (the :class:`Site`, or a part of
    one), directed by the classes' type hints: every field present and of its type, enum
    members by value, no control character in a single-line value (free text: no other
    than newline and tab) and no number that is not finite. The checks across fields are
    not run again: what :func:`dump` wrote was validated, and the profile cache uses an
    entry only for the same files and code. ValueError/TypeError for anything
    :func:`dump` does not write for that type. No pydantic: this is how a site comes back
    from the profile cache.

    ``plain``: the caller has seen that no string in ``data`` can hold a control character
    (the JSON it was parsed from is printable ASCII with no escape, as :func:`json.dumps`
    writes a site whose text holds none), so the text rule is not checked value by value."""
    return _decoder(kind, not plain)(data)


def _refuse(what: str) -> Any:
    raise ValueError(what)


@functools.cache
def _decoder(kind: Any, text: bool = True) -> Callable[[Any], Any]:
    """The reader of one type's JSON (built once per type), checking each object's text
    against the text rule where ``text``."""
    origin, args = get_origin(kind), get_args(kind)
    if origin is Annotated:
        return _decoder(args[0], text)
    if kind is Any:
        return lambda data: data
    if isinstance(kind, type) and issubclass(kind, Strict):  # the site's classes
        return _object_decoder(kind, text)
    if origin is Union or origin is UnionType:
        arms = [_decoder(a, text) for a in args if a is not type(None)]
        nullable = type(None) in args
        if len(arms) == 1:
            (arm,) = arms
            return lambda data: None if data is None and nullable else arm(data)

        def union(data: Any) -> Any:
            if data is None and nullable:
                return None
            for arm in arms:
                try:
                    return arm(data)
                except (ValueError, TypeError):
                    continue
            raise ValueError(f"{data!r} is none of {kind}")

        return union
    if origin is Literal:
        allowed = {(type(a), a) for a in args}
        return lambda data: data if (type(data), data) in allowed else _refuse(
            f"{data!r} is not one of {args}")
    if origin is list:
        item = _decoder(args[0], text)
        return lambda data: [item(v) for v in data] if type(data) is list else _refuse(
            "not a list")
    if origin is dict:
        key, value = _decoder(args[0], text), _decoder(args[1], text)
        return lambda data: {key(k): value(v) for k, v in data.items()} \
            if type(data) is dict else _refuse("not an object")
    if isinstance(kind, type) and issubclass(kind, Enum):
        return kind
    if kind is float:
        return lambda data: float(data) if type(data) in (int, float) and math.isfinite(data) \
            else _refuse(f"not a finite number: {data!r}")
    if kind in (str, int, bool):
        return lambda data: data if type(data) is kind else _refuse(f"not a {kind.__name__}")
    raise TypeError(f"no reader for {kind}")


def _object_decoder(kind: type[Strict], text: bool) -> Callable[[Any], Any]:
    readers: dict[str, Callable[[Any], Any]] = {}

    def read(data: Any) -> Any:
        if not readers:  # built on first use: a class may name itself (through a field)
            # each field's type as evaluated (a class, a Union, an Annotated...: a type form,
            # no string), held as an object: mypy refuses type[Any] as a cache key
            # (python/mypy#11470)
            hints: dict[str, object] = {f.name: f.type for f in fields(kind)}
            readers.update({name: _decoder(hint, text) for name, hint in hints.items()})
        if type(data) is not dict or data.keys() != readers.keys():
            raise ValueError(f"{kind.__name__}: not its fields")
        obj = object.__new__(kind)
        obj.__dict__.update({name: reader(data[name]) for name, reader in readers.items()})
        problems = obj._text_problems() if text else None
        if problems:
            raise ValueError(f"{kind.__name__}.{problems[0][0][0]}: {problems[0][1]}")
        return obj

    return read
