"""Which site is this? Match the host name against each profile's login host patterns
(the profiles themselves come from :func:`hpcprov.site.catalog.catalog`).

A catch-all pattern (``*``, ``*.*``, ``?*``: no letter or digit outside its wildcards) would
make its profile every user's default site on every machine, so it is never used for
detection: a site meant to be the default everywhere is chosen with ``HPCPROV_SITE``. When
several sites match, the first by name is used and :func:`warn_if_ambiguous` names them all
(docs/security.md, "Profiles and the search path").
"""

from __future__ import annotations

import fnmatch
import re
import socket
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from hpcprov.core.errors import warn

_BRACKETS = re.compile(r"\[[^\]]*\]")


def catch_all(pattern: str) -> bool:
    """True when the fnmatch ``pattern`` names no host: no letter or digit outside its
    wildcards and ``[...]`` sets (``*``, ``*.*``, ``?*``, ``[a-z]*``)."""
    literal = _BRACKETS.sub("", pattern).replace("*", "").replace("?", "")
    return not any(ch.isalnum() for ch in literal)


@dataclass
class Detection:
    """The sites whose patterns match a host, and the catch-all patterns passed over."""

    host: str
    sites: list[str] = field(default_factory=list)
    catch_alls: list[tuple[str, str]] = field(default_factory=list)  # (site, pattern)


class HasLoginHosts(Protocol):
    """What :func:`match` reads of a site (read only: a summary's fields are)."""

    @property
    def name(self) -> str: ...

    @property
    def login_hosts(self) -> Sequence[str]: ...


def match(hostname: str | None, sites: Iterable[HasLoginHosts]) -> Detection:
    """Every site of ``sites`` whose `login_hosts` match ``hostname`` (default: this
    machine's fully qualified name, or its short name); catch-all patterns are passed over
    and listed."""
    host = (hostname or socket.getfqdn()).lower()
    short = host.split(".", 1)[0]
    found = Detection(host)
    for site in sites:
        for pattern in site.login_hosts:
            pat = str(pattern).lower()
            if catch_all(pat):
                found.catch_alls.append((site.name, str(pattern)))
            elif fnmatch.fnmatchcase(host, pat) or fnmatch.fnmatchcase(short, pat):
                found.sites.append(site.name)
                break
    return found


def warn_if_ambiguous(found: Detection) -> None:
    """A warning naming every matching site when there are several (the first is used)."""
    if len(found.sites) > 1:
        warn(f"host {found.host!r} matches the login_hosts of {len(found.sites)} sites "
             f"({', '.join(found.sites)}); using {found.sites[0]}: set HPCPROV_SITE or give "
             "--site to choose")
