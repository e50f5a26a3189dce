"""The checks of the site's fields (:mod:`hpcprov.site.types` names them in its
declarations): each takes a field's value and raises ValueError, with the reason, for a
value it refuses. Pure functions: no pydantic, nothing run."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Protocol

from hpcprov.core.errors import UsageError
from hpcprov.core.text import has_control
from hpcprov.core.walltime import walltime_seconds
from hpcprov.site.sections import DEFAULT_SCHEDULER, SCHEDULER_SECTIONS

NAME_RE = r"^[A-Za-z0-9][A-Za-z0-9_.+-]*$"
OPTION_RE = r"^[A-Za-z][A-Za-z0-9_-]*$"  # a flag as the scheduler spells it: alloc_flags
# (patterns as text: re compiles one when a check first uses it, never on a warm start)
ENV_RE = r"^[A-Za-z_][A-Za-z0-9_]*$"
HOST_TEMPLATE = r"^[A-Za-z0-9.-]*\{host\}[A-Za-z0-9.-]*$"
INDEX_URL = r"^https?://[A-Za-z0-9.-]+(:[0-9]+)?(/[A-Za-z0-9._~%/+-]*)?$"
_SHELL_VAR = r"\$\{[A-Za-z_][A-Za-z0-9_]*\}|\$[A-Za-z_][A-Za-z0-9_]*"
_CHANNEL = rf"(?:[A-Za-z0-9]|{_SHELL_VAR})(?:[A-Za-z0-9_.:/+-]|{_SHELL_VAR})*"


# what a check reads of a site's part (a protocol: this module imports no site class, which
# would be an import cycle with hpcprov.site.types)


class Defaulted(Protocol):
    """A partition, as :func:`one_default` reads it."""

    @property
    def default(self) -> bool: ...


class Images(Protocol):
    """The containers' section, as :func:`known_image` reads it."""

    @property
    def images(self) -> Mapping[str, str]: ...

    @property
    def default_image(self) -> str | None: ...


class Bin(Protocol):
    """An entry of a list by job size (``max_walltime_by_nodes``, ``env_by_nodes``)."""

    @property
    def max_nodes(self) -> int | None: ...


def env_names(env: Mapping[str, object]) -> None:
    for key in env:
        if not re.match(ENV_RE, key):
            raise ValueError(f"{key!r} is not a valid environment variable name")


def env_name_list(names: Iterable[str]) -> None:
    env_names(dict.fromkeys(names, ""))


def bins(entries: Sequence[Bin]) -> None:
    """Node-count bins: max_nodes increasing, and one without max_nodes (any larger job)
    only last."""
    last = 0
    for i, b in enumerate(entries):
        if b.max_nodes is None:
            if i != len(entries) - 1:
                raise ValueError(f"entry {i + 1} has no max_nodes (it takes every larger "
                                 "job), so it must be the last")
        elif b.max_nodes <= last:
            raise ValueError(f"entry {i + 1}: max_nodes {b.max_nodes} is not above the "
                             f"previous entry's {last}: list the bins smallest first")
        else:
            last = b.max_nodes


def walltime(value: str | None) -> None:
    if value is not None and not walltime_seconds(value):
        raise ValueError(f"{value!r} is not a wall-clock limit: write [D-]HH:MM:SS, "
                         "e.g. '24:00:00' or '2-00:00:00' (quoted), more than zero")


def walltime_within(value: str | None, cap: str | None) -> None:
    """A wall-clock limit, at most ``cap`` (where that is one)."""
    walltime(value)
    if value is None or not cap:
        return
    # no number for a cap that is no limit (0 or unreadable: its own field's error)
    seconds, most = walltime_seconds(value), walltime_seconds(cap)
    if seconds is not None and most and seconds > most:
        raise ValueError(f"{value!r} is longer than max_walltime {cap!r}")


def host_name(value: str | None) -> None:
    """A host name template: ``{host}`` once, letters, digits, '.' and '-' around it."""
    if value is not None and not re.match(HOST_TEMPLATE, value):
        raise ValueError(f"{value!r} is not a host name template: write {{host}} (the name "
                         "the scheduler lists) once, with letters, digits, '.' or '-' around "
                         "it, e.g. '{host}-ib', '{host}i' or 'ib-{host}'")


def flags_have_no_value(value: object) -> object:
    """(Before its type is validated: the value as written.)"""
    if isinstance(value, dict):
        for name, item in value.items():
            if isinstance(item, bool):
                raise ValueError(f"{name}: {str(item).lower()}: a flag option is written "
                                 f"with no value ('{name}:' or '{name}: null'), an option "
                                 f"with a value as text ('{name}: \"yes\"')")
    return value


def no_shell_text(value: str | None) -> None:
    """Refuse a default the job's directives would carry literally ($(id -gn), $USER)."""
    if value is not None and ("$" in value or "`" in value):
        raise ValueError(f"{value!r} would be written literally: job options go into the "
                         "job's directive lines (#SBATCH, #PBS, #BSUB, # flux:), which the "
                         "scheduler reads and no shell expands; write the value itself "
                         "(e.g. default: mygroup), or leave default out so that each user "
                         "passes it with -o NAME=VALUE")


def channel(value: str) -> str:
    if not re.fullmatch(_CHANNEL, value):
        raise ValueError(f"{value!r} is not a conda channel: a name or URL of letters, digits "
                         "and _.:/+-, which may use the node's variables as $NAME or ${NAME} "
                         "(nothing else expands: no $(...), quotes, spaces or globs)")
    return value


def no_option(spec: str) -> str:
    """A package spec, not an option: pip would take ``--index-url=URL`` as one, yet in a
    list of packages it is neither checked nor seen by uv or site check."""
    if spec.startswith("-"):
        raise ValueError(f"{spec!r} is a pip option, not a package: name an index with "
                         "python.frameworks.NAME.index_url (or extra_index_urls), e.g. "
                         "index_url: https://download.pytorch.org/whl/rocm6.2")
    return spec


def one_version(value: str) -> None:
    """A framework's version: one release to install and check (``torch==VERSION``), never
    empty, a wildcard or a range, which no installed version can match."""
    if not re.fullmatch(r"[0-9][0-9A-Za-z.+!_-]*", value):
        raise ValueError(f"{value!r} is not a version: write the one version to install, "
                         "e.g. '2.5.1' (quoted); setup installs and checks exactly it, which "
                         "no wildcard, range or empty value can match")


def annotation_keys(value: Mapping[str, str]) -> None:
    for key in value:
        if not re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_.-]*", key):
            raise ValueError(f"{key!r} is not an annotation key (letters, digits, _ . -)")


def toml_literal(value: Mapping[str, str] | list[str] | str | None) -> None:
    items = value.values() if isinstance(value, Mapping) else \
        value if isinstance(value, list) else [value]
    for item in items:
        if item is not None and ("'" in item or has_control(item, False)):
            raise ValueError(f"{item!r}: a value written into the engine's TOML file "
                             "holds no single quote or control character")


def one_default(partitions: Mapping[str, Defaulted]) -> None:
    defaults = [n for n, p in partitions.items() if p.default]
    if len(defaults) > 1:
        raise ValueError(f"more than one default partition: {', '.join(defaults)}")


def known_image(containers: Images) -> None:
    img = containers.default_image
    if img and img not in containers.images:
        raise ValueError(f"default_image {img!r} is not in images")


def scheduler_name(value: object) -> str | None:
    """A scheduler's name, given as itself or as its enum member."""
    name = getattr(value, "value", value)
    return name if isinstance(name, str) else None


def not_own_section(name: str, chosen: str | None) -> str:
    return (f"this profile's scheduler is {chosen}, so a {name}: section configures "
            f"nothing: remove it (or set scheduler: {name})")


class OwnSection:
    """The check of the section ``name:``, before it is validated itself: refused in a
    profile of another scheduler (read from the fields validated before it)."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __call__(self, value: object, earlier: Mapping[str, object]) -> object:
        chosen = scheduler_name(earlier.get("scheduler"))
        if value is not None and chosen is not None and chosen != self.name:
            raise ValueError(not_own_section(self.name, chosen))
        return value


def own_section_filled(data: object) -> object:
    """Profile data as written, with the chosen scheduler's section empty (all defaults)
    where the profile has none."""
    if isinstance(data, dict):
        name = scheduler_name(data.get("scheduler", DEFAULT_SCHEDULER))
        if name in SCHEDULER_SECTIONS and data.get(name) is None:
            data = {**data, name: {}}
    return data


def key_path_problem(site: object, path: str) -> str | None:
    """Why a dotted key path (``partitions.gpu.nodes``) names nothing in the validated
    profile (``site``); None when it names a key (written or defaulted)."""
    parts = path.split(".")
    node = site
    for depth, part in enumerate(parts):
        keys = ([f.name for f in dataclasses.fields(node)] if dataclasses.is_dataclass(node)
                else [str(k) for k in node] if isinstance(node, dict) else [])
        if part not in keys:
            where = ".".join(parts[:depth]) or "the top level"
            known = ", ".join(keys[:12]) or "no keys"
            return f"{path!r} names no key of this profile: {where} has {known}"
        node = node[part] if isinstance(node, dict) else getattr(node, part)
    return None


def no_partition(site: str, name: str, partitions: Iterable[str]) -> UsageError:
    """The error for a partition name a site does not have (one message, wherever a
    partition is named: the command line, a job request, a recorded profile)."""
    return UsageError(f"--partition {name!r}: site {site} has no such partition (it has "
                      f"{', '.join(partitions) or 'none'})")
