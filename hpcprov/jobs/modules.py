"""Shell lines for the site's runtime environment: its module system and its variables.

A profile's ``env`` values (the site's, and a partition's ``network.env``) have one meaning
wherever hpcprov writes them (job scripts, ``hpcprov launch``, the guide, the setup script
and ``PREFIX/activate``): ``$NAME`` and ``${NAME}`` are expanded when the line runs (at job
start, at activation); everything else is literal text. Command substitution (``$(...)``,
backticks) and other shell expansions (``${NAME:-x}``, ``$1``) are never run: written as
text, and refused by ``hpcprov site check`` (:func:`env_problems`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import TYPE_CHECKING

from hpcprov.core.shell import Template, export_lines, join, quote
from hpcprov.site.kinds import ModuleSystem

if TYPE_CHECKING:
    from hpcprov.site.types import Modules, ModuleSet

# what a shell would run or expand beyond $NAME / ${NAME}
_SHELL_ONLY = r"`|\$\(|\$\{(?![A-Za-z_][A-Za-z0-9_]*\})|\$[0-9@*#?$!-]"


def init_lines(modules: Modules) -> list[str]:
    """Make `module` available in a non-login shell, when the profile says how, and add the
    site's module folders (``modules.use``) before anything is loaded."""
    if modules.system == ModuleSystem.none:
        return []
    lines = [f"type module >/dev/null 2>&1 || source {quote(Template(modules.init))}"] \
        if modules.init else []
    return lines + [join(["module", "use", Template(path)]) for path in modules.use]


def load_lines(modules: Modules, which: ModuleSet, extra: list[str] | None = None) -> list[str]:
    """`module purge` / `module load ...` lines for a module set (plus extra modules)."""
    return purge_and_load(modules, which.purge, [*which.load, *(extra or [])])


def purge_and_load(modules: Modules, purge: bool, names: list[str]) -> list[str]:
    """`module purge` (when ``purge``) and `module load NAMES...` lines."""
    if modules.system == ModuleSystem.none:
        return []
    lines = ["module purge"] if purge else []
    if names:
        lines.append(join(["module", "load", *names]))
    return lines


def env_lines(env: Mapping[str, str]) -> list[str]:
    """``export NAME="value"`` lines for profile variables, with the meaning the module
    docstring gives ($NAME expanded when the line runs, nothing else)."""
    return export_lines({name: Template(value) for name, value in env.items()})


def env_problems(env: Mapping[str, str]) -> dict[str, str]:
    """name -> why its value would not mean what it seems to (a command substitution or
    another shell expansion that hpcprov writes as text)."""
    out = {}
    for name, value in env.items():
        m = re.search(_SHELL_ONLY, value)
        if m:
            out[name] = (f"{m.group(0)!r} would be written as text, not run: env values "
                         "expand $NAME and ${NAME} only (hpcprov runs no command from a "
                         "profile): compute it in the job's command, or write its result "
                         "into the profile")
    return out
