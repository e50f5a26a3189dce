#!/usr/bin/env python3
"""flux's batch, jobs, cancel, run, hostlist, resource and queue commands as flux-core answers
them, for the tests of hpcprov's Flux backend: no Flux instance can run on this machine, so
this is the boundary its tests reach.

Symlink this file as `flux` into a folder on PATH; state lives in $FLUX_EMULATOR_DIR. What it
reproduces of Flux (flux-core's manual pages), because hpcprov depends on it:
- `flux [--parent] batch [--output=F] [--error=F] SCRIPT` prints the job id in F58 (ASCII
  `f`, as flux prints it without a UTF-8 locale) and runs the script at once as a local
  `bash` process with FLUX_JOB_ID, FLUX_URI (the job's own instance), FLUX_JOB_NNODES set,
  in the submission directory, unless $FLUX_EMULATOR_HOLD is set (SCHED until cancelled).
  A missing script is refused as flux-batch refuses it, and so is one whose `# flux:`
  directives flux's parser refuses (RFC 36, :func:`parse_directives` below: flux-core's own
  parser where flux-python is installed, else this file's reimplementation of its rules);
  the node count is the directives' -N/--nodes (-N: the flag hpcprov's spelling record of
  Flux, hpcprov.schedulers.spelling.FLUX, writes `nodes` with). Each submission records
  whether it came with --parent, and the FLUX_URI it was made under (`submitted.log`);
- `flux jobs -n -o FORMAT ID...` fills {id}, {id.f58}, {state} (SCHED, RUN, INACTIVE),
  {result} (COMPLETED, FAILED, CANCELED), {returncode} (empty while active; -128 for a job
  cancelled before it started) and {nodelist}; with $FLUX_EMULATOR_PURGE=1 an inactive job
  has been purged: `flux-jobs: ERROR: unknown jobid`, exit 1;
- `flux cancel ID` ends a running job with SIGTERM (returncode 143) and a pending one as
  CANCELED (-128);
- `flux run -N N -n TOTAL [-c C] [-g G] [-o OPT] CMD...` starts TOTAL tasks here with
  FLUX_TASK_RANK, FLUX_TASK_LOCAL_ID, FLUX_JOB_SIZE set (one node: the local id is the
  rank); no PMI: an MPI program's ranks would not find each other;
- `flux hostlist -n 0 local` / `flux hostlist -e local`: this host;
- `flux resource list -s up -q QUEUE -n -o {nodelist}`: this host, up, in every queue; with
  `-o '{state}|{queue}|{nnodes}|{ncores}|{ngpus}|{nodelist}'` one line for the draft
  ($FLUX_EMULATOR_NGPUS GPUs, default 0, $FLUX_EMULATOR_CORES cores, default the CPUs);
- `flux queue list -n -o '{queuem}|{defaults.timelimit}|{limits.timelimit}|
  {limits.range.nnodes}'`: one queue, `batch*` (the default).
"""

from __future__ import annotations

import functools
import importlib.util
import io
import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
from pathlib import Path
from types import ModuleType

sys.path.insert(0, str(Path(__file__).resolve().parent))
import emulator_kit as kit

from hpcprov.schedulers.spelling import FLUX as SPELLING

F58 = "123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz"
SPOOL = kit.Spool("FLUX_EMULATOR_DIR")
VALUELESS = {"--exclusive", "--wait", "--unbuffered", "-v", "--verbose"}


def f58(n: int) -> str:
    out = ""
    while n:
        n, r = divmod(n, 58)
        out = F58[r] + out
    return "f" + (out or "1")


def _load(jid: str) -> dict | None:
    return SPOOL.load(jid.replace("ƒ", "f"))


# --- RFC 36 submission directives, as flux batch reads them ---------------------------------
# Reimplemented from RFC 36 (flux-framework/rfc spec_36.rst) and from what flux-core's parser
# (flux/job/directives.py of flux-python) is observed to do where the RFC leaves it open; the
# tests compare the two wherever flux-python is installed (tests/test_flux_directives.py):
# 1. flux batch reads the script as UTF-8 text with universal newlines: "\r" and "\r\n" end a
#    line as "\n" does.
# 2. A directive line starts with a sentinel: non-word characters, then `flux:` or `FLUX:`;
#    every directive of the script must use the first one's sentinel. The first non-blank
#    line that does not start with the sentinel's prefix (trailing blanks dropped) ends the
#    directives; a directive after that is an error (an "orphan").
# 3. Triple quotes, before any word splitting: a "triple quote" is ANY run of three quote
#    characters, `'` and `"` mixed (`'"'` is one). Where the line holds a positive even
#    number of `"""` or of `'''`, each triple quote up to the last copy of that same three
#    characters (greedy) is replaced by its contents quoted as one POSIX shell word; else a
#    triple quote followed by anything is an error ("unclosed triple quote"). So a POSIX
#    `'it'"'"'s'` is refused, and `'x""" --nodes=64 """'` becomes three words.
# 4. A line that then ends with `"""` or `'''` opens (or, the same three characters, closes)
#    a multi-line string: the lines in between are kept verbatim, less the opening line's
#    indentation, and joined with newlines as one quoted word appended to the opening line's
#    text. A line without the sentinel inside it is an error; a string still open at the end
#    of the script is dropped without a word.
# 5. The rest is split into words as a shell would, with these differences: blanks are
#    space, tab, CR and LF; `#` outside quotes comments out the rest of the line even inside
#    a word (`a#b` is `a`); a run of `();<>|&` outside quotes is a word of its own; outside
#    quotes a backslash takes the next character literally; inside single AND double quotes a
#    backslash followed by a backslash or by that quote stands for that character (`'a\'b'`
#    is `a'b`), and before anything else stays a backslash.
# 6. A directive whose first word starts with `-` gives options (SETARGS); none is a no-op
#    (NOOP); anything else is an error.

_SENTINEL = re.compile(r"^([^\w]*)((?:flux|FLUX):)(.*)$")
_TRIPLE = re.compile(r"""(['"]{3})(.*)\1""")
_OPEN_TRIPLE = re.compile(r"""['"]{3}.""")
_BLANKS = " \t\r\n"
_PUNCTUATION = "();<>|&"

Directive = tuple[int, str, list[str]]  # (line number, SETARGS or NOOP, its words)


def split_words(text: str) -> list[str]:
    """One directive's words (rule 5); ValueError where a quote or escape is left open."""
    words: list[str] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c in _BLANKS:
            i += 1
        elif c == "#":
            end = text.find("\n", i)
            i = n if end < 0 else end + 1
        elif c in _PUNCTUATION:
            start = i
            while i < n and text[i] in _PUNCTUATION:
                i += 1
            words.append(text[start:i])
        else:
            word, i = _word(text, i)
            words.append(word)
            if i < n and text[i] == "#":  # a comment ends the word and the line
                end = text.find("\n", i)
                i = n if end < 0 else end + 1
    return words


def _word(text: str, i: int) -> tuple[str, int]:
    """The word that starts at ``i`` (not a blank, `#` or punctuation) and where it ends."""
    out: list[str] = []
    n = len(text)
    while i < n and text[i] not in _BLANKS and text[i] not in _PUNCTUATION and text[i] != "#":
        c = text[i]
        if c == "\\":
            if i + 1 >= n:
                raise ValueError("No escaped character")
            out.append(text[i + 1])
            i += 2
        elif c in "'\"":
            i += 1
            while True:
                if i >= n:
                    raise ValueError("No closing quotation")
                q = text[i]
                if q == c:
                    i += 1
                    break
                if q == "\\":
                    if i + 1 >= n:
                        raise ValueError("No escaped character")
                    after = text[i + 1]
                    out.append(after if after in (c, "\\") else "\\" + after)
                    i += 2
                else:
                    out.append(q)
                    i += 1
        else:
            out.append(c)
            i += 1
    return "".join(out), i


def _triple_quotes(text: str) -> str:
    """Rule 3."""
    if any(k > 0 and k % 2 == 0 for k in (text.count('"""'), text.count("'''"))):
        return _TRIPLE.sub(lambda m: shlex.quote(m.group(2)), text)
    if _OPEN_TRIPLE.search(text):
        raise ValueError(f"unclosed triple quote: {text.strip()}")
    return text


def _directive(text: str, lineno: int) -> Directive:
    """Rule 6."""
    try:
        words = split_words(text)
    except ValueError as exc:
        raise ValueError(f"line {lineno}: {text}: {exc}") from None
    if words and not words[0].startswith("-"):
        raise ValueError(f"line {lineno}: Unknown directive: {text}")
    return (lineno, "SETARGS" if words else "NOOP", words)


def parse_directives(script: str) -> list[Directive]:
    """The directives of a script as flux batch reads them (RFC 36, rules 1-6 above); a
    ValueError (``line N: ...``) where flux batch refuses the script."""
    found: list[Directive] = []
    sentinel = prefix = None
    ended_after = None  # the line after which directives ended (rule 2)
    multi: dict | None = None  # an open multi-line string (rule 4)
    for lineno, line in enumerate(io.StringIO(script, newline=None), 1):
        m = _SENTINEL.match(line)
        if not m:
            if multi is not None:
                raise ValueError(f"line {lineno}: unterminated multi-line quote at line "
                                 f"{multi['line']}")
            if (prefix is not None and ended_after is None and line.strip()
                    and not line.startswith(prefix.rstrip())):
                ended_after = lineno - 1
            continue
        if ended_after is not None:
            raise ValueError(f"line {lineno}: orphan '{m.group(2)}' detected: directives "
                             f"disabled after line {ended_after}")
        try:
            text = _triple_quotes(m.group(3))
        except ValueError as exc:
            raise ValueError(f"line {lineno}: {exc}") from None
        if sentinel is None:
            sentinel, prefix = m.group(1) + m.group(2), m.group(1)
        elif m.group(1) + m.group(2) != sentinel:
            raise ValueError(f"line {lineno}: sentinel changed from '{sentinel}' to "
                             f"'{m.group(1) + m.group(2)}'")
        closing = text[-3:] if text.endswith(('"""', "'''")) else None
        if multi is None and closing:
            indent = text[:len(text) - len(text.lstrip())]
            multi = {"line": lineno, "quote": closing, "indent": indent, "lines": []}
            multi["lines"].append(_unindent(text[:-3], indent))
        elif multi is not None and closing == multi["quote"]:
            multi["lines"].append(_unindent(text[:-3], multi["indent"]))
            first, *rest = multi["lines"]
            joined = first + shlex.quote("\n".join(rest))
            if multi["quote"] in joined:
                raise ValueError(f"line {lineno}: improperly terminated triple quoted string")
            found.append(_directive(joined, multi["line"]))
            multi = None
        elif multi is not None:
            multi["lines"].append(_unindent(text, multi["indent"]))
        elif text:
            found.append(_directive(text, lineno))
    return found


def _unindent(text: str, indent: str) -> str:
    return text[len(indent):] if text.startswith(indent) else text


@functools.cache
def flux_core_parser() -> ModuleType | None:
    """flux-core's own directive parser (flux/job/directives.py of flux-python), loaded on
    its own: it needs only the standard library, where importing the ``flux`` package needs
    libflux-core. None where flux-python is not installed."""
    try:
        spec = importlib.util.find_spec("flux")  # finds the package without importing it
    except (ImportError, ValueError):
        return None
    for folder in (spec.submodule_search_locations or []) if spec else []:
        path = Path(folder) / "job" / "directives.py"
        if path.is_file():
            loaded = importlib.util.spec_from_file_location("_flux_core_directives", path)
            if loaded is None or loaded.loader is None:
                return None
            module = importlib.util.module_from_spec(loaded)
            loaded.loader.exec_module(module)
            return module
    return None


def flux_core_directives(script: str) -> list[Directive] | None:
    """:func:`parse_directives` by flux-core's own parser; None where it is not installed."""
    real = flux_core_parser()
    if real is None:
        return None
    parsed = real.DirectiveParser(io.StringIO(script, newline=None))
    return [(d.lineno, d.action, list(d.args)) for d in parsed.directives]


def directive_args(script: str) -> list[str]:
    """The options a script's directives give flux batch, in order: read by flux-core's
    parser where flux-python is installed, else by :func:`parse_directives`."""
    found = flux_core_directives(script)
    if found is None:
        found = parse_directives(script)
    return [word for _, action, words in found if action == "SETARGS" for word in words]


def options(script: str) -> list[kit.Option]:
    """The options a script's directives give flux batch, each as (flag, value)."""
    return kit.options(directive_args(script), SPELLING, VALUELESS)[0]


def batch(argv: list[str], parent: bool) -> int:
    cli, rest = kit.options(argv, SPELLING, VALUELESS)
    given = dict(cli)
    path = Path(rest[-1]) if rest else None
    if path is None or not path.is_file():
        print(f"flux-batch: ERROR: [Errno 2] No such file or directory: '{path}'",
              file=sys.stderr)
        return 1
    try:  # as flux batch reads the script: UTF-8, universal newlines
        read = options(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeError) as exc:
        print(f"flux-batch: ERROR: {rest[-1]}: {exc}", file=sys.stderr)
        return 1
    nodes = [v for flag, v in read if flag == SPELLING.flag("nodes") and v and v.isdigit()]
    n = SPOOL.number()
    job = SPOOL.new(f58(1000000 + n), n, num=1000000 + n, script=str(path.resolve()),
                    nodes=int(nodes[-1]) if nodes else 1)
    with open(SPOOL.root / "submitted.log", "a") as log:
        log.write(json.dumps({"id": job["id"], "parent": parent,
                              "uri": os.environ.get("FLUX_URI", "")}) + "\n")
    SPOOL.save(job)
    if not os.environ.get("FLUX_EMULATOR_HOLD"):
        env = {**os.environ, "FLUX_JOB_ID": job["id"], "FLUX_JOB_NNODES": str(job["nodes"]),
               "FLUX_URI": f"local://{SPOOL.root}/{job['id']}"}
        SPOOL.start(job, ["bash", job["script"]], env=env, cwd=os.getcwd(),
                    out=given.get("--output"), err=given.get("--error"), append=True)
    print(job["id"])
    return 0


def _result(job: dict) -> tuple[str, str, str]:
    """state, result and returncode: SCHED, RUN or INACTIVE; COMPLETED, FAILED or CANCELED;
    the script's status (143 after flux cancel's SIGTERM, -128 cancelled before it ran)."""
    if job["phase"] == "cancelled":
        return "INACTIVE", "CANCELED", "143" if job["start"] else "-128"
    if job["phase"] == "ended":
        return "INACTIVE", "COMPLETED" if kit.succeeded(job) else "FAILED", \
            str(kit.status(job))
    return ("SCHED" if job["phase"] == "pending" else "RUN"), "", ""


def jobs(argv: list[str]) -> int:
    fmt = argv[argv.index("-o") + 1] if "-o" in argv else "{id.f58} {state}"
    ids = [a for a in argv if re.fullmatch(r"[ƒf][1-9A-Za-z]+", a)]
    for jid in ids:
        job = _load(jid)
        state, result, code = _result(job) if job is not None else ("", "", "")
        purged = state == "INACTIVE" and os.environ.get("FLUX_EMULATOR_PURGE") == "1"
        if job is None or purged:
            print(f"flux-jobs: ERROR: unknown jobid {jid}", file=sys.stderr)
            return 1
        values = {"id": str(job["num"]), "id.f58": job["id"], "state": state,
                  "result": result, "returncode": code,
                  "nodelist": socket.gethostname() if job["start"] else ""}
        print(re.sub(r"\{([a-z0-9.]+)\}", lambda m, v=values: v[m.group(1)], fmt))
    return 0


def cancel(argv: list[str]) -> int:
    for jid in (a for a in argv if not a.startswith("-")):
        job = _load(jid)
        if job is None:
            print(f"flux-cancel: ERROR: {jid}: unknown job id", file=sys.stderr)
            return 1
        SPOOL.cancel(job, (signal.SIGTERM, signal.SIGKILL))
    return 0


def run(argv: list[str]) -> int:
    total, i = 1, 0
    while i < len(argv) and argv[i].startswith("-"):
        if argv[i] in ("-n", "--ntasks"):
            total = int(argv[i + 1])
        i += 1 if "=" in argv[i] else 2
    cmd = argv[i:]
    procs = [subprocess.Popen(cmd, env={**os.environ, "FLUX_TASK_RANK": str(r),
                                        "FLUX_TASK_LOCAL_ID": str(r),
                                        "FLUX_JOB_SIZE": str(total)})
             for r in range(total)]
    return max(p.wait() for p in procs)


def hostlist(argv: list[str]) -> int:
    print(socket.gethostname())
    return 0


def resource(argv: list[str]) -> int:
    fmt = argv[argv.index("-o") + 1] if "-o" in argv else "{nodelist}"
    cores = int(os.environ.get("FLUX_EMULATOR_CORES") or os.cpu_count() or 1)
    values = {"state": "free", "queue": "batch", "nnodes": "1", "ncores": str(cores),
              "ngpus": os.environ.get("FLUX_EMULATOR_NGPUS", "0"),
              "nodelist": socket.gethostname()}
    print(re.sub(r"\{([a-z]+)\}", lambda m: values[m.group(1)], fmt))
    return 0


def queue(argv: list[str]) -> int:
    print("batch*|3600.0|86400.0|1-inf")
    return 0


def main(argv: list[str]) -> int:
    parent = False
    if argv[:1] == ["--parent"]:
        parent, argv = True, argv[1:]
    command, rest = argv[0], argv[1:]
    if command == "batch":
        return batch(rest, parent)
    if command == "resource" and rest[:1] == ["list"]:
        return resource(rest[1:])
    if command == "queue" and rest[:1] == ["list"]:
        return queue(rest[1:])
    tools = {"jobs": jobs, "cancel": cancel, "run": run, "hostlist": hostlist}
    if command not in tools:
        print(f"flux: '{command}' is not a flux command (emulated)", file=sys.stderr)
        return 1
    return tools[command](rest)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
