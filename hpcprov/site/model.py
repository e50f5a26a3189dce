"""The site's classes validated: pydantic over :mod:`hpcprov.site.types`.

The classes are declared once, as plain dataclasses, in :mod:`hpcprov.site.types` (no
pydantic there, so a site read from the profile cache never imports it; how their fields
reach pydantic: :mod:`hpcprov.site.declare`); this module is where pydantic reads them:
:func:`validate` turns profile data into a :class:`Site` (a ``pydantic.ValidationError``
locating each problem), :func:`json_schema` is the profile's JSON Schema (`hpcprov site
schema`).
"""

from __future__ import annotations

import functools
from typing import Any

from pydantic import TypeAdapter

from hpcprov.site.declare import Strict, validated_as
from hpcprov.site.sections import SCHEDULER_SECTIONS
from hpcprov.site.types import (
    MAX_CORES,
    MAX_COUNT,
    MAX_MEMORY_GB,
    MAX_NODES,
    CondaSpec,
    Containers,
    ContainerSpec,
    EnvByNodes,
    Framework,
    Gpus,
    HorovodBuild,
    Launcher,
    Limits,
    Modules,
    ModuleSet,
    Network,
    Partition,
    Paths,
    Policies,
    Proxy,
    PythonStack,
    Reference,
    RequiredOption,
    Site,
    Uenv,
    VenvSpec,
    WalltimeByNodes,
)

__all__ = [
    "MAX_CORES", "MAX_COUNT", "MAX_MEMORY_GB", "MAX_NODES", "SCHEDULER_SECTIONS",
    "CondaSpec", "ContainerSpec", "Containers", "EnvByNodes", "Framework", "Gpus",
    "HorovodBuild", "Launcher", "Limits", "ModuleSet", "Modules", "Network", "Partition",
    "Paths", "Policies", "Proxy", "PythonStack", "Reference", "RequiredOption", "Site",
    "Strict", "Uenv", "VenvSpec", "WalltimeByNodes", "adapter", "json_schema", "validate",
]


# (the classes typed as a plain ``type``: mypy takes no ``type[...]`` where a cached
# function's argument must be hashable, python/mypy#11470)
@functools.cache
def adapter(cls: type = Site) -> TypeAdapter[Any]:
    """Pydantic's validator of one of the site's classes (built on first use)."""
    return TypeAdapter(validated_as(cls))


def validate(data: Any, cls: type = Site) -> Any:
    """Profile data (a merged layer's) as the typed site (or one of its parts):
    ``pydantic.ValidationError`` with every problem's location."""
    return adapter(cls).validate_python(data)


def json_schema(cls: type = Site) -> dict[str, Any]:
    """The JSON Schema of a profile (or of one of its parts)."""
    return adapter(cls).json_schema()
