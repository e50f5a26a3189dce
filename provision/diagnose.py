"""Turn a failed step's log into one sentence that says what went wrong and what to do."""

from __future__ import annotations

import re
from collections.abc import Callable

# `hpcprov: pip settings: KEY='VALUE' ...` (hpcprov_pip_settings, scripts/pip.sh): KEY is a
# `pip config list` name (global.constraint, :env:.find-links) or argument.NAME for an
# argument of hpcprov's pip command line.
_SETTINGS = re.compile(r"^hpcprov: pip settings:(.*)$", re.M)
_SETTING = re.compile(r"""([^\s=]+)\.([a-z-]+)=(?:'([^']*)'|"([^"]*)")""")
_WHAT = {"constraint": "constraints", "index-url": "index URL",
         "extra-index-url": "extra index URLs", "find-links": "find-links",
         "no-index": "no index"}


def _sources(scopes: list[str], key: str) -> str:
    """Where a pip setting came from, named the way a user would change it."""
    config = [f"{scope}.{key}" for scope in scopes if scope not in (":env:", "argument")]
    named = [f"hpcprov's --{key}" for scope in scopes if scope == "argument"]
    named += ["PIP_" + key.upper().replace("-", "_") for scope in scopes if scope == ":env:"]
    if config:
        named.append(", ".join(config) + " in pip's configuration")
    return "; ".join(named)


def _settings(line: str) -> dict[str, dict[str, list[str]]]:
    """{key: {value: [scope...]}} of one settings line, empty values left out."""
    latest: dict[tuple[str, str], list[str]] = {}
    for scope, key, single, double in _SETTING.findall(line):
        # hpcprov's arguments add up; pip may list a key once per file: the last one wins
        kept = latest.get((scope, key), []) if scope == "argument" else []
        latest[(scope, key)] = [*kept, single or double]
    given: dict[str, dict[str, list[str]]] = {}
    for (scope, key), values in latest.items():
        for value in values:
            off = key == "no-index" and value.lower() in ("0", "false", "no", "off")
            if value and key in _WHAT and not off:
                shown = " ".join(value.split()) if key != "no-index" else ""
                given.setdefault(key, {}).setdefault(shown, []).append(scope)
    return given


def pip_given(log: str) -> str:
    """What pip was given to find packages: from the last settings line hpcprov logged, else
    from pip's own 'Looking in' lines; empty when the log has neither."""
    found = _SETTINGS.findall(log)
    if not found:
        looked = re.findall(r"^Looking in (indexes|links): (.+)$", log, flags=re.M)
        return "; ".join(f"pip looked in the {what} {where.strip()}" for what, where in looked)
    given = _settings(found[-1])
    parts = [_WHAT[key] + " " + ", ".join(
                 f"{value} ({_sources(scopes, key)})".lstrip() for value, scopes in
                 given[key].items())
             for key in _WHAT if key in given]
    return ("pip was given: " + "; ".join(parts) if parts
            else "pip was given no constraints, index URLs or find-links")


def _with_given(text: str, log: str) -> str:
    given = pip_given(log)
    return f"{text} [{given}]" if given else text


def _no_distribution(match: re.Match[str], log: str) -> str:
    return _with_given(f"pip found no {match[1]} for this Python and platform: check that "
                       "version in the profile (pip index versions NAME lists what exists)",
                       log)


def _conflict(match: re.Match[str], log: str) -> str:
    """pip's ResolutionImpossible: the requirement, and the constraint it conflicts with."""
    wanted = (match[1] or "the requested packages").strip()
    block = re.search(r"The conflict is caused by:\n((?:[ \t]+\S.*\n?)+)", log)
    causes = [c.strip() for c in block[1].splitlines()] if block else []
    constraints = [c.split("(constraint) ", 1)[1] for c in causes if "(constraint) " in c]
    others = [c for c in causes if "(constraint) " not in c]
    if constraints:
        text = (f"pip cannot install {wanted}: it conflicts with the constraint "
                f"{' and '.join(constraints)}: ask for a version the constraint allows, or "
                "change the constraint file pip was given")
    else:
        clash = "; ".join(others) or "see the log"
        text = (f"pip cannot install {wanted}: the requirements conflict ({clash}): make the "
                "versions in the profile agree")
    return _with_given(text, log)


def _uv_unsolvable(match: re.Match[str], log: str) -> str:
    """uv's "No solution found": its own reason (a missing package, a conflicting pin or
    constraint), with what it was given from pip's configuration."""
    why = match[1].strip().rstrip(".") if match[1] else "see the log"
    return _with_given(f"uv cannot install the packages: {why[0].lower() + why[1:]}: ask "
                       "for versions that exist where it looks and that the constraints "
                       "allow", log)


_Explain = Callable[[re.Match[str], str], str]
_RULES: tuple[tuple[re.Pattern[str], str | _Explain], ...] = (
    (re.compile(r"No space left on device|ENOSPC|Disk quota exceeded"),
     "the disk under the prefix is full (or over quota): free space or choose another "
     "--prefix, then run the same command again to resume"),
    (re.compile(r"Cannot install (.+?) because these package versions have conflicting "
                r"dependencies|ResolutionImpossible"), _conflict),
    (re.compile(r"No matching distribution found for (\S+)"), _no_distribution),
    (re.compile(r"No solution found when resolving dependencies:?\s*(?:\S*\s*)?"
                r"(?:cause: )?(Because [^\n]*)?"), _uv_unsolvable),
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
    # a compiler's own `file:line:col: error:` is named by _first_build_error, before these
    (re.compile(r"error: command .* failed"),
     "Horovod's C++ build failed: the first 'error:' in the log names the cause"),
)

# The first real error of a failed build, wherever it is in the log: a compiler's
# (`file:line:col: error:` / `fatal error:`), nvcc's (`nvcc fatal : ...`), CMake's (`Could NOT
# find X`). The lines that follow it are usually its consequences.
_BUILD_ERROR = re.compile(
    r"(?P<where>[^\s:]+\.(?:c|cc|cpp|cxx|cu|cuh|h|hpp|hh|inl)(?::\d+)+): "
    r"(?P<kind>fatal error|error): (?P<what>.+)"
    r"|(?P<nvcc>nvcc fatal\s*:\s*.+)"
    r"|(?P<cmake>Could NOT find \S+.*)"
    r"|(?P<notfound>\b[A-Za-z_]*FOUND_LIB_\w+[^\n]*NOTFOUND.*)")
# what a build error means, and its fix or the compatibility row it matches
# (docs/compatibility.md), first match wins
_BUILD_HINTS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"strong_ordering|three_way_comparable|requires '?-std=c\+\+20|"
                r"C\+\+20 or (later|newer)"),
     "PyTorch's headers need C++20 (compatibility row cxx-standard): the extension must "
     "compile as the standard they demand; hpcprov reads it from torch/all.h, so check "
     "that the environment's PyTorch is the one the build sees"),
    (re.compile(r"Unsupported gpu architecture '?compute_(\d+)"),
     "the build's CUDA cannot target sm_{0} (CUDA's architecture window, docs/"
     "compatibility.md): build with a CUDA that can (`hpcprov site check` names which), or "
     "set horovod.env.HOROVOD_BUILD_CUDA_CC_LIST"),
    (re.compile(r"Python\.h: No such file"),
     "the build found no Python headers: under Python >= 3.12 Horovod asked distutils for "
     "them (compatibility row no-distutils); otherwise install the Python development "
     "headers (python3-dev) or load the Python module with them"),
    (re.compile(r"Could NOT find CUDAToolkit|FOUND_LIB_cudart\w* *NOTFOUND|"
                r"FOUND_LIB_c10_cuda\w* *NOTFOUND"),
     "CMake did not find the CUDA toolkit: set CUDA_HOME to the toolkit (the folder with "
     "bin/nvcc) or load the site's CUDA module in modules.build"),
    (re.compile(r"Could NOT find NCCL"),
     "no NCCL for the GPU build: set horovod.env.HOROVOD_NCCL_HOME in the profile, load "
     "the site's NCCL module, or use a PyTorch with the nvidia-nccl wheel"),
    (re.compile(r"Could NOT find MPI"),
     "no MPI for the build: load the site's MPI module in modules.build (or install "
     "libopenmpi-dev), or drop mpi from horovod.controllers"),
    (re.compile(r"'string' in namespace 'std' does not name|'logic_error' is not a member"),
     "GCC 13's libstdc++ (compatibility row std-includes)"),
    (re.compile(r"No space left on device"),
     "the disk under the prefix is full: free space or choose another --prefix"),
)


class BuildErrors:
    """Keeps the first few real errors of a build as its lines stream by (bounded: the
    whole log is never held), for :func:`diagnose`."""

    KEEP = 3

    def __init__(self) -> None:
        self.found: list[str] = []

    def feed(self, line: str) -> None:
        if len(self.found) < self.KEEP and _BUILD_ERROR.search(line):
            self.found.append(line.strip()[:400])


def _first_build_error(lines: list[str]) -> str | None:
    """The first real build error among these lines, in one or two lines: the error itself
    (file:line: and message), then the fix or compatibility row it matches."""
    for line in lines:
        m = _BUILD_ERROR.search(line)
        if not m:
            continue
        if m["where"]:
            text = f"{m['where']}: {m['kind']}: {m['what'].strip()}"
        else:
            text = (m["nvcc"] or m["cmake"] or m["notfound"]).strip()
        text = f"the build's first error: {text[:300]}"
        for pattern, hint in _BUILD_HINTS:
            h = pattern.search(line)
            if h:
                groups = [g for g in h.groups() if g] or [""]
                return f"{text}\n  {hint.format(groups[0])}"
        return f"{text}\n  (the lines after it in the log are its consequences)"
    return None


def diagnose(log: str, first_errors: list[str] | None = None) -> str | None:
    """The most specific explanation for a failed step's output, or None. ``first_errors``:
    the first real errors of a build (:class:`BuildErrors`), which may lie before the part
    of the output kept in ``log``."""
    errors = [ln.split("hpcprov: error: ", 1)[1] for ln in log.splitlines()
              if "hpcprov: error: " in ln]
    if errors:
        return errors[-1].strip()
    found = _first_build_error([*(first_errors or []), *log.splitlines()])
    if found:
        return found
    for pattern, text in _RULES:
        match = pattern.search(log)
        if match is None:
            continue
        if isinstance(text, str):
            groups = [g for g in match.groups() if g] or [""]
            return text.format(groups[0].strip().strip('"'))
        return text(match, log)
    return None
