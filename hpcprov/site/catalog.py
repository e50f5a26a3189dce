"""The sites this user can name, and which one a command works on.

:func:`catalog` is what ``hpcprov sites`` lists and what detection matches against: one
:class:`SiteSummary` per profile on the search path, read from the one validated form of the
site (the profile cache's entry when current, else the profile validated now and cached): a
broken profile is a summary with its error, never a reason to hide the others.
:func:`default_site` and :func:`load` pick the site of a command without ``--site``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from hpcprov.site.loader import available_sites
from hpcprov.site.profiles import load_site

if TYPE_CHECKING:
    from hpcprov.site.detect import Detection
    from hpcprov.site.types import Site


class SiteSummary(NamedTuple):
    """One profile on the search path: what ``hpcprov sites`` prints of it."""

    name: str
    path: str
    scheduler: str = "?"
    partitions: int = 0
    description: str = ""
    login_hosts: tuple[str, ...] = ()
    error: str | None = None  # the profile's first problem; None: it is valid

    def to_json(self) -> dict[str, object]:
        data: dict[str, object] = self._asdict()
        del data["login_hosts"]
        return data


def summary(name: str, path: Path) -> SiteSummary:
    """The summary of the profile at ``path`` (its error, where it has one)."""
    try:
        site: Site = load_site(str(path))
    except Exception as exc:  # a broken user profile must not hide the rest
        return SiteSummary(name, str(path), error=str(exc))
    return SiteSummary(name, str(path), site.scheduler.value, len(site.partitions),
                       site.description, tuple(site.login_hosts))


def catalog() -> list[SiteSummary]:
    """Every profile on the search path, by name."""
    return [summary(name, path) for name, path in sorted(available_sites().items())]


def matches(hostname: str | None = None) -> Detection:
    """The sites whose `login_hosts` match ``hostname`` (default: this machine's name);
    broken profiles and catch-all patterns are passed over (:mod:`hpcprov.site.detect`)."""
    from hpcprov.site.detect import match

    return match(hostname, [s for s in catalog() if s.error is None])


def detect(hostname: str | None = None) -> list[str]:
    """Names of the sites whose `login_hosts` patterns match."""
    return matches(hostname).sites


def default_site() -> str:
    """HPCPROV_SITE, else the site whose login hosts match this machine, else local.

    When several sites match, the first by name is used and a warning names them all."""
    if os.environ.get("HPCPROV_SITE"):
        return os.environ["HPCPROV_SITE"]
    from hpcprov.site.detect import warn_if_ambiguous

    found = matches()
    warn_if_ambiguous(found)
    return found.sites[0] if found.sites else "local"


def load(ref: str | None, store: bool = True) -> Site:
    """The site a command works on: ``ref`` (a name or a path), else the default site
    (``store`` off: the profile cache is read, never written)."""
    return load_site(ref or default_site(), store)
