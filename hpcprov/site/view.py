"""A validated site as plain objects: the one form every generator reads.

:func:`snapshot` turns a validated :class:`~hpcprov.site.model.Site` into :class:`View` objects
with the same fields (the enums stay :mod:`hpcprov.site.kinds` members), so a command reads
``site.partitions["gpu"].gpus.count`` exactly as it would from the model, and a command
answered from the profile cache (:mod:`hpcprov.site.cache`) does so without importing
pydantic (a quarter of a second at every start otherwise). The snapshot is read-only in
spirit: it is only ever built from data pydantic validated, and ``model_copy``/``model_dump``
behave as the model's do for the uses hpcprov has.

:func:`to_json` and :func:`from_json` are its JSON form in the cache: tagged so views, enum
members and tuples come back as they were, and checked again when read as the model checks
them: a single-line value holding a control character, free text holding one other than
newline and tab, or a number that is not finite is refused here too.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Iterable
from enum import Enum
from typing import TYPE_CHECKING, Any

from hpcprov.core.errors import UsageError
from hpcprov.core.text import FREE_TEXT, has_control
from hpcprov.site import kinds
from hpcprov.site.sections import SCHEDULERS

# the model's rule (hpcprov.core.text): fields named in FREE_TEXT may span lines and hold
# tabs, no other may hold a control character (C0, DEL, C1)


def no_partition(site: str, name: str, partitions: Iterable[str]) -> UsageError:
    """The error for a partition name a site does not have (one message, wherever a
    partition is named: the command line, a job request, a recorded profile)."""
    return UsageError(f"--partition {name!r}: site {site} has no such partition (it has "
                      f"{', '.join(partitions) or 'none'})")


class SiteMethods:
    """What a site answers beyond its fields (the model's and the snapshot's)."""

    if TYPE_CHECKING:  # the fields both have (not class annotations pydantic would see)
        name: str
        partitions: dict[str, Any]
        modules: Any
        paths: Any

    def partition(self, name: str | None = None) -> tuple[str, Any]:
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

    def partition_for_nodes(self, nodes: int) -> str | None:
        """Where no partition is named: the default one when its node limits fit a job of
        ``nodes`` nodes, else the first queue chosen by job size that fits; None: the
        default (nothing fits better)."""
        def fits(part: Any) -> bool:
            lim = part.limits
            return ((lim.min_nodes_per_job or 1) <= nodes
                    and nodes <= (lim.max_nodes_per_job or nodes)
                    and nodes <= (part.nodes or nodes))

        _, default = self.partition(None)
        if fits(default):
            return None
        return next((n for n, p in self.partitions.items() if p.by_job_size and fits(p)), None)

    def modules_for(self, partition: str | None = None) -> Any:
        """The module configuration that applies on a partition."""
        _, part = self.partition(partition)
        return part.modules or self.modules

    def prefix(self) -> str:
        """The install prefix template with {scratch} filled in."""
        return str(self.paths.prefix).replace("{scratch}", self.paths.scratch)

    def profile_data(self) -> dict[str, Any]:
        """The site as profile data (JSON types; ``extends`` resolved, defaults filled),
        as `hpcprov site show` prints it: only its own scheduler's section."""
        data: dict[str, Any] = self.model_dump(mode="json")
        for name in SCHEDULERS:
            if data.get(name, ...) is None:
                del data[name]
        return data


class View:
    """One validated model object, as attributes."""

    def __init__(self, fields: dict[str, Any]) -> None:
        self.__dict__.update(fields)

    def model_dump(self, mode: str = "python") -> dict[str, Any]:
        return {k: _dump(v, mode) for k, v in self.__dict__.items()}

    def model_copy(self, update: dict[str, Any] | None = None, deep: bool = False) -> View:
        new = copy.deepcopy(self) if deep else copy.copy(self)
        new.__dict__.update(update or {})
        return new

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and other.__dict__ == self.__dict__

    __hash__ = None  # mutable, like the model

    def __repr__(self) -> str:
        inner = ", ".join(f"{k}={v!r}" for k, v in self.__dict__.items())
        return f"{type(self).__name__}({inner})"


class SiteView(SiteMethods, View):
    """The snapshot of a whole site: fields plus partition(), modules_for(), prefix()."""


def _dump(value: Any, mode: str) -> Any:
    if isinstance(value, View):
        return value.model_dump(mode)
    if hasattr(type(value), "model_fields"):  # a model object put in with model_copy
        return value.model_dump(mode=mode)
    if isinstance(value, Enum):
        return value.value if mode == "json" else value
    if isinstance(value, dict):
        return {k: _dump(v, mode) for k, v in value.items()}
    if isinstance(value, list | tuple):
        out = [_dump(v, mode) for v in value]
        return out if isinstance(value, list) or mode == "json" else tuple(out)
    return value


def view(value: Any) -> Any:
    """The plain-object copy of a validated model object (a site or a part of one), and of
    the containers holding them."""
    fields = getattr(type(value), "model_fields", None)
    if fields is not None:  # a pydantic model
        cls = SiteView if isinstance(value, SiteMethods) else View
        return cls({name: view(getattr(value, name)) for name in fields})
    if isinstance(value, dict):
        return {k: view(v) for k, v in value.items()}
    if isinstance(value, list):
        return [view(v) for v in value]
    if isinstance(value, tuple):
        return tuple(view(v) for v in value)
    return value


def snapshot(site: Any) -> SiteView:
    """The plain-object copy of a validated site."""
    copied = view(site)
    assert isinstance(copied, SiteView)
    return copied


# ------------------------------------------------------------------ the JSON form


def to_json(value: Any) -> Any:
    """A JSON-native form of a snapshot (or a part of one), tagged so :func:`from_json`
    gives back the same types: views, enum members of :mod:`hpcprov.site.kinds`, tuples."""
    kind = type(value)
    if kind is SiteView or kind is View:
        tag = "__site__" if kind is SiteView else "__view__"
        return {tag: {name: to_json(v) for name, v in value.__dict__.items()}}
    if isinstance(value, Enum):
        if getattr(kinds, kind.__name__, None) is not kind:
            raise TypeError(f"enum {kind.__qualname__} is not one of hpcprov.site.kinds")
        return {"__enum__": kind.__name__, "value": to_json(value.value)}
    if kind is tuple:
        return {"__tuple__": [to_json(v) for v in value]}
    if kind is list:
        return [to_json(v) for v in value]
    if kind is dict:
        if any(type(key) is not str for key in value):
            raise TypeError(f"a dict key of {sorted(map(repr, value))} is not a str")
        out = {key: to_json(v) for key, v in value.items()}
        # a plain dict that could be read as a tag is wrapped
        return {"__dict__": out} if any(k.startswith("__") for k in out) else out
    if value is None or kind in (str, int, float, bool):
        return value
    raise TypeError(f"cannot encode a {kind.__qualname__} in a snapshot")


def _text(value: str, free: bool) -> str:
    """``value``, unless it holds a control character the model would refuse there."""
    if has_control(value, free):
        raise ValueError(f"control character in a {'text' if free else 'single-line'} value: "
                         f"{value!r}")
    return value


def _enum(name: Any, value: Any) -> Enum:
    cls = getattr(kinds, name, None) if isinstance(name, str) else None
    if not (isinstance(cls, type) and issubclass(cls, Enum) and name in kinds.__all__):
        raise ValueError(f"unknown enum class {name!r}")
    return cls(value)


def _fields(obj: Any) -> dict[str, Any]:
    """A view's fields; each is free text or not by its own name (as in the model)."""
    if type(obj) is not dict:
        raise ValueError("a view's fields must be an object")
    return {_text(name, False): _decode(v, name in FREE_TEXT) for name, v in obj.items()}


def _mapping(obj: dict[str, Any], free: bool) -> dict[str, Any]:
    return {_text(k, free): _decode(v, free) for k, v in obj.items()}


def _tagged(obj: dict[str, Any], free: bool) -> Any:
    """What a tagged object stands for (ValueError for a tag to_json never writes)."""
    if set(obj) == {"__enum__", "value"}:
        return _enum(obj["__enum__"], obj["value"])
    if len(obj) == 1:
        ((tag, inner),) = obj.items()
        if tag == "__view__":
            return View(_fields(inner))
        if tag == "__dict__" and type(inner) is dict:
            return _mapping(inner, free)
        if tag == "__tuple__" and type(inner) is list:
            return tuple(_decode(v, free) for v in inner)
    raise ValueError(f"unknown tag in {sorted(obj)!r}")


def _decode(obj: Any, free: bool) -> Any:
    kind = type(obj)
    if kind is str:
        return _text(obj, free)
    if kind is list:
        return [_decode(v, free) for v in obj]
    if kind is dict:
        if any(k.startswith("__") for k in obj):
            return _tagged(obj, free)
        return _mapping(obj, free)
    if kind is float and not math.isfinite(obj):
        raise ValueError(f"a number that is not finite: {obj!r}")
    if obj is None or kind in (int, float, bool):
        return obj
    raise ValueError(f"cannot decode a {kind.__qualname__}")


def from_json(obj: Any) -> SiteView:
    """The snapshot :func:`to_json` was given; ValueError/TypeError for anything else,
    a control character in a single-line value included."""
    if type(obj) is not dict or set(obj) != {"__site__"}:
        raise ValueError("not an encoded site")
    return SiteView(_fields(obj["__site__"]))
