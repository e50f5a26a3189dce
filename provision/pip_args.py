"""pip's arguments for a site's wheelhouse policy, the call that logs what pip was given, and
the install lines of the profile's installer (pip, uv or whichever is there).

Used by the plan and by the Horovod steps (which the plan imports): it imports neither.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hpcprov.core.shell import Template, join
from hpcprov.provision.library import program_file

if TYPE_CHECKING:
    from hpcprov.site.types import Site


def pip_index_args(site: Site) -> list[str]:
    """pip arguments for the site's wheelhouse policy (--no-index, --find-links)."""
    venv = site.python.venv
    args = ["--no-index"] if venv.no_index else []
    for location in venv.wheelhouse:
        args += ["--find-links", Template(location)]
    return args


def pip_settings_line(site: Site) -> str:
    """The call of the library's hpcprov_pip_settings (provision/scripts/pip.sh) with the
    profile's pip index arguments: one log line naming what pip was given."""
    venv = site.python.venv
    given = ["no-index=true"] if venv.no_index else []
    given += [Template("find-links=" + location) for location in venv.wheelhouse]
    return join(["hpcprov_pip_settings", *given])


def pip_install(site: Site, *specs: str, extra: tuple[str, ...] = ()) -> str:
    """``python -m pip install EXTRA... INDEX-ARGS... SPECS...``."""
    return join(["python", "-m", "pip", "install", *extra, *pip_index_args(site), *specs])


def framework_index_args(site: Site) -> list[str]:
    """``--index-url URL --extra-index-url URL...`` of the pip frameworks (a vendor's wheel
    index), each a separate quoted word; the model allows one index_url among them."""
    args: list[str] = []
    extra: list[str] = []
    for fw in site.python.frameworks.values():
        if fw.installer != "pip":
            continue
        if fw.index_url and "--index-url" not in args:
            args += ["--index-url", fw.index_url]
        extra += fw.extra_index_urls
    for url in dict.fromkeys(extra):
        args += ["--extra-index-url", url]
    return args


def install_lines(site: Site, *specs: str, frameworks: bool = True,
                  pip_extra: tuple[str, ...] = (), uv_extra: tuple[str, ...] = ()
                  ) -> list[str]:
    """Install ``specs`` into the environment with the profile's installer, without
    byte-compiling (check-build's imports compile what jobs use): pip; uv, given pip's own
    configuration as well (hpcprov_uv_install); or auto, uv where it is on the PATH. With
    ``frameworks``, the frameworks' index URLs come first, as separate words; ``pip_extra``
    and ``uv_extra`` are each installer's own further options (pip's --force-reinstall is
    uv's --reinstall)."""
    installer = site.python.venv.installer if site.python.backend == "venv" else "pip"
    index = framework_index_args(site) if frameworks else []
    pip = pip_install(site, *specs, extra=("--no-compile", *pip_extra, *index))
    if installer == "pip":
        return [pip]
    write, program = program_file("pip_to_uv.py")
    uv = join(["hpcprov_uv_install", program, *uv_extra, *index, *pip_index_args(site),
               *specs])
    lines = ['mkdir -p "$STATE/programs"', write]
    if installer == "uv":
        return [*lines, uv]
    return [*lines, "if command -v uv >/dev/null 2>&1; then", f"  {uv}", "else",
            f"  {pip}", "fi"]


def framework_install_lines(site: Site, frameworks: list[str], packages: list[str]
                            ) -> list[str]:
    """Install the pip frameworks' specs and the profile's other packages
    (``python.packages``): each from where it lives. Where the frameworks name an index
    (``index_url``, ``extra_index_urls``: a vendor's, which holds torch and its own
    dependencies, not mpi4py), they are installed from it first, then the packages from
    pip's own index (the site's configuration, else PyPI), which sees the frameworks
    installed; else one resolver run installs them all."""
    if not (frameworks and packages and framework_index_args(site)):
        return install_lines(site, *frameworks, *packages)
    installer = site.python.venv.installer if site.python.backend == "venv" else "pip"
    rest = install_lines(site, *packages, frameworks=False)
    # uv's program is written once (the first install's two lines)
    return [*install_lines(site, *frameworks), *rest[0 if installer == "pip" else 2:]]
