"""hpcprov's shell library and the files that scripts carry verbatim.

* ``provision/scripts/*.sh`` hold bash functions, each after a comment saying how it is
  called; every profile value reaches them as an argument, quoted by :mod:`hpcprov.core.shell`.
  A script (the setup script, doctor's probe) carries, verbatim, the library functions it
  calls, directly or through one another, and nothing else of the library: what
  ``--dry-run`` prints is exactly what runs, and a step's fingerprint covers the functions
  it uses and no others (a change to one function re-runs only the steps that call it).
* ``provision/programs/*.py`` (the proofs, the key's ABI facts, doctor's probe) and
  ``provision/patches/*.patch`` reach a script through a function ``hpcprov_file_NAME``
  that prints the file verbatim from a quoted heredoc; the script writes or pipes that.

Shellcheck checks the library as files (tests/test_provision_library.py) and the scripts
that carry it (tests/test_golden_sites.py); ruff lints the programs as files.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from hpcprov.core.shell import Raw, join

HERE = Path(__file__).parent
SCRIPTS = HERE / "scripts"
PROGRAMS = HERE / "programs"
PATCHES = HERE / "patches"

_DEF = re.compile(r"^(hpcprov_[a-z0-9_]+)\(\) \{$")
_CALL = re.compile(r"(?<![\w$])hpcprov_[a-z0-9_]+")
DELIMITER = "HPCPROV_FILE"


@dataclass(frozen=True)
class Embedded:
    """A file a script carries verbatim: where it comes from, and its text."""

    source: str
    text: str


def parse(text: str, source: str) -> dict[str, str]:
    """The functions of one library file, name -> text (its comment, then its definition).

    The file is a header (up to the first blank line), then functions: comment lines, then
    ``name() {`` at the start of a line, its body, and ``}`` alone on a line. Anything else
    (a command outside a function, a function without a comment) is an error, so that a
    function's text is all a script needs of the file."""
    lines = text.splitlines()
    i = lines.index("") if "" in lines else len(lines)
    out: dict[str, str] = {}
    comment: list[str] = []
    while i < len(lines):
        line = lines[i]
        if line.startswith("#"):
            comment.append(line)
        elif line.strip():
            found = _DEF.match(line)
            if not found or not comment or "}" not in lines[i:]:
                raise ValueError(f"{source}:{i + 1}: only functions, each after its "
                                 f"comment, belong in a library file: {line!r}")
            end = lines.index("}", i)
            out[found.group(1)] = "\n".join([*comment, *lines[i : end + 1]])
            comment, i = [], end
        elif comment:
            raise ValueError(f"{source}:{i + 1}: a comment that belongs to no function")
        i += 1
    return out


@functools.cache
def functions() -> dict[str, str]:
    """Every function of the shell library, name -> text, in file-name then file order."""
    out: dict[str, str] = {}
    for path in sorted(SCRIPTS.glob("*.sh")):
        for name, text in parse(path.read_text(encoding="utf-8"), path.name).items():
            if name in out:
                raise ValueError(f"{path.name}: {name} is defined twice in the library")
            out[name] = text
    return out


def file_function(name: str) -> str:
    """The name of the function that prints the program or patch file ``name``."""
    return "hpcprov_file_" + re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_")


def program_file(name: str) -> tuple[str, Raw]:
    """(the line that writes the program ``name`` into $STATE/programs, its path there as a
    shell word): a step writes a program it runs, then names it by that path."""
    path = Raw(f'"$STATE/programs/{name}"')
    return join([file_function(name)]) + " > " + path, path


@functools.cache
def files() -> dict[str, Embedded]:
    """Every program and patch a script may carry, by the name of its function."""
    out: dict[str, Embedded] = {}
    for folder in (PROGRAMS, PATCHES):
        for path in sorted(folder.iterdir()):
            if path.suffix in (".py", ".patch"):
                text = path.read_text(encoding="utf-8")
                source = f"provision/{folder.name}/{path.name}"
                out[file_function(path.name)] = Embedded(source, text)
    return out


def program(name: str) -> str:
    """The text of provision/programs/NAME."""
    return files()[file_function(name)].text


def render_file(function: str, embedded: Embedded) -> list[str]:
    """``function() { cat <<'HPCPROV_FILE' ... }``: prints the file verbatim."""
    text = embedded.text if embedded.text.endswith("\n") else embedded.text + "\n"
    if DELIMITER in text.splitlines():
        raise ValueError(f"{embedded.source} has a line {DELIMITER}: it cannot be carried")
    return [f"# {embedded.source}, verbatim", f"{function}() {{",
            f"  cat <<'{DELIMITER}'", *text[:-1].split("\n"), DELIMITER, "}"]


def used(texts: Iterable[str], defined: Mapping[str, object]) -> list[str]:
    """The names in ``defined`` that the texts call, directly or through the definitions
    they call (``defined`` maps a name to its text, or to anything whose str() is it), in
    the order of ``defined``."""
    found: set[str] = set()
    todo = [name for text in texts for name in _CALL.findall(text)]
    while todo:
        name = todo.pop()
        if name in defined and name not in found:
            found.add(name)
            todo += _CALL.findall(str(defined[name]))
    return [name for name in defined if name in found]


def definitions(texts: Iterable[str], generated: Mapping[str, tuple[str, ...]] | None = None
                ) -> list[str]:
    """The lines that define everything the texts call: library functions, files, and the
    caller's own ``generated`` functions (name -> body lines), in that order."""
    generated = generated or {}
    rendered = {name: "\n".join(body) for name, body in generated.items()}
    known = {**functions(), **files(), **rendered}
    names = used(texts, known)
    out: list[str] = []
    for name in names:
        if name in functions():
            out += ["", functions()[name]]
        elif name not in generated:
            out += ["", *render_file(name, files()[name])]
    for name in names:
        if name in generated:
            out += ["", f"{name}() {{", *(f"  {ln}" for ln in generated[name] or (":",)), "}"]
    return out
