"""Shell lines for the site's module system."""

from __future__ import annotations

from typing import TYPE_CHECKING

from hpcprov.kinds import ModuleSystem
from hpcprov.shell import Template, join, quote

if TYPE_CHECKING:
    from hpcprov.model import Modules, ModuleSet


def init_lines(modules: Modules) -> list[str]:
    """Make `module` available in a non-login shell, when the profile says how."""
    if modules.system == ModuleSystem.none or not modules.init:
        return []
    return [f"type module >/dev/null 2>&1 || source {quote(Template(modules.init))}"]


def load_lines(modules: Modules, which: ModuleSet, extra: list[str] | None = None) -> list[str]:
    """`module purge` / `module load ...` lines for a module set (plus extra modules)."""
    if modules.system == ModuleSystem.none:
        return []
    lines = ["module purge"] if which.purge else []
    names = [*which.load, *(extra or [])]
    if names:
        lines.append(join(["module", "load", *names]))
    return lines
