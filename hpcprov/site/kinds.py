"""The parts of the site model that planning needs at run time, without pydantic.

The enums of the typed site (:mod:`hpcprov.site.types`), which pydantic validates
(:mod:`hpcprov.site.model`) and the profile cache reads back without it.
"""

from __future__ import annotations

from enum import Enum
from typing import TYPE_CHECKING

from hpcprov.site.launcher_kinds import LauncherKind
from hpcprov.site.sections import SCHEDULERS

__all__ = ["LauncherKind", "ModuleSystem", "SCHEDULER_BACKENDS", "Scheduler"]

# the module of each scheduler's backend, by the name a profile's `scheduler:` key uses
# (the registry and each one's profile section: hpcprov.site.sections)
SCHEDULER_BACKENDS: dict[str, str] = {name: s.module for name, s in SCHEDULERS.items()}

# the profile's `scheduler:` values, one per backend (its name, as value)
if TYPE_CHECKING:
    # made from the registry, so a checker cannot list the members: to it the enum is one
    # of str values (each member a str, its value the backend's name)
    class Scheduler(str, Enum):
        _value_: str
else:
    Scheduler = Enum(
        "Scheduler", {name: name for name in SCHEDULER_BACKENDS}, type=str)


class ModuleSystem(str, Enum):
    lmod = "lmod"
    tcl = "tcl"  # Environment Modules
    none = "none"


