"""Which site is this? Match the host name against each profile's login host patterns."""

from __future__ import annotations

import fnmatch
import socket

from hpcprov import profile_cache
from hpcprov.errors import HpcprovError
from hpcprov.loader import available_sites, resolve


def detect(hostname: str | None = None) -> list[str]:
    """Names of the sites whose `login_hosts` patterns match (broken profiles are skipped)."""
    host = (hostname or socket.getfqdn()).lower()
    short = host.split(".", 1)[0]
    found = []
    for name, path in sorted(available_sites().items()):
        # a validated profile, unchanged since (the profile cache)
        head = profile_cache.header(path)
        try:
            patterns = head["login_hosts"] if head else resolve(path).data.get("login_hosts")
        except HpcprovError:
            continue
        patterns = patterns or []
        if not isinstance(patterns, list):
            continue
        for pattern in patterns:
            pat = str(pattern).lower()
            if fnmatch.fnmatchcase(host, pat) or fnmatch.fnmatchcase(short, pat):
                found.append(name)
                break
    return found
