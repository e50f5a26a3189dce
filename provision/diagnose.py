"""Turn a failed step's log into one sentence that says what went wrong and what to do."""

from __future__ import annotations

import re

_RULES: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"No space left on device|ENOSPC|Disk quota exceeded"),
     "the disk under the prefix is full (or over quota): free space or choose another "
     "--prefix, then run the same command again to resume"),
    (re.compile(r"No matching distribution found for (\S+)"),
     "pip found no {0} for this Python and platform: check that version in the profile "
     "(pip index versions NAME lists what exists)"),
    (re.compile(r"module\(s\) are unknown: (.+)|Unable to locate a modulefile for (.+)"),
     "a module is missing here: {0} (modules in the profile; see 'module avail')"),
    (re.compile(r"Could not resolve host|Temporary failure in name resolution|"
                r"Failed to establish a new connection|Network is unreachable"),
     "no network: this step downloads; run it where the internet is reachable (a login "
     "node) or point the profile at a mirror, a local installer or a wheelhouse"),
    (re.compile(r"curl: \(22\) The requested URL returned error: (\d+)"),
     "the download failed with HTTP {0}: check installer_url / mirror_url in the profile"),
    (re.compile(r"HorovodVersionMismatchError"),
     "Horovod was built against another framework version: rebuild it (hpcprov setup "
     "re-runs the build when the framework changes)"),
    (re.compile(r"CMake Error"),
     "Horovod's CMake configure failed: the log above says which dependency it did not find"),
    (re.compile(r"error: command .* failed|[^ ]+\.(cc|cpp|h):\d+:\d+: error:"),
     "Horovod's C++ build failed: the first 'error:' in the log names the cause"),
)


def diagnose(log: str) -> str | None:
    """The most specific explanation for a failed step's output, or None."""
    errors = [ln.split("hpcprov: error: ", 1)[1] for ln in log.splitlines()
              if "hpcprov: error: " in ln]
    if errors:
        return errors[-1].strip()
    for pattern, text in _RULES:
        match = pattern.search(log)
        if match:
            groups = [g for g in match.groups() if g] or [""]
            return text.format(groups[0].strip().strip('"'))
    return None
