"""A validated site as plain objects: what the profile cache stores and loads.

:func:`snapshot` turns a validated :class:`~hpcprov.model.Site` into :class:`View` objects
with the same fields (the enums stay :mod:`hpcprov.kinds` members), so a command answered
from the cache reads ``site.partitions["gpu"].gpus.count`` exactly as it would from the
model, without importing pydantic (a quarter of a second at every start otherwise). The
snapshot is read-only in spirit: it is only ever built from data pydantic validated, and
``model_copy``/``model_dump`` behave as the model's do for the uses hpcprov has.
"""

from __future__ import annotations

import copy
from enum import Enum
from typing import Any

from hpcprov.kinds import SiteMethods


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

    __hash__ = None  # type: ignore[assignment]  # mutable, like the model

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
