"""The tests test this checkout's code, or do not start.

``conftest.py`` imports this module before anything of hpcprov (it sorts before the
first-party imports), so the check runs before any hpcprov module is loaded, by the root
conftest or by any other (``testbed/conftest.py`` imports ``hpcprov.testbed``).

Why a check, not a mapping of our own: ``sites/``, ``provision/``, ``validate/`` and
``testbed/`` are parts of ``hpcprov`` only through ``package-dir`` in pyproject.toml, which
the installed distribution carries out (the editable install's finder, or the folders laid
out in a wheel). In a checkout that is not the installed one, ``python3 -m pytest`` finds
``hpcprov`` in the checkout (the current folder is first on ``sys.path``) and
``hpcprov.provision`` through the install: another checkout's code. Mapping the folders
into this process (extending ``hpcprov.__path__``, a finder in conftest) would fix only
this process: the tests also start ``hpcprov`` and ``python -m hpcprov`` as commands, and
those import whatever is installed. So the tests ask, here and in a fresh interpreter
started as those commands are, where every package of hpcprov comes from, and stop at
once, in one line (exit status 4, pytest's for a usage error), when one is not this
checkout's.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import tomllib

REPO = Path(__file__).resolve().parent.parent


def packages(root: Path = REPO) -> dict[str, Path]:
    """Every package of hpcprov and its folder in ``root``: the ones pyproject.toml's
    package-dir maps (``hpcprov.provision``: provision/) and hpcprov/'s own."""
    config = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))
    mapped = config["tool"]["setuptools"]["package-dir"]
    found = {name: (root / folder).resolve() for name, folder in mapped.items()}
    for folder in sorted((root / "hpcprov").iterdir()):
        if (folder / "__init__.py").is_file():
            found.setdefault(f"hpcprov.{folder.name}", folder.resolve())
    return found


def _interpreters() -> list[str]:
    """This Python, and the one the ``hpcprov`` command on PATH runs where it is another."""
    found = [sys.executable]
    command = shutil.which("hpcprov")
    if command:
        try:
            with open(command, "rb") as script:
                first = script.readline(512).decode("utf-8", "replace")
        except OSError:
            first = ""
        python = first[2:].strip().split(" ")[0] if first.startswith("#!") else ""
        if "python" in Path(python).name and os.path.realpath(python) != os.path.realpath(
                sys.executable) and os.access(python, os.X_OK):
            found.append(python)
    return found


def locate(names: list[str]) -> dict[str, str | None]:
    """{package: the folder it loads from (its folders, joined with os.pathsep, where it
    has several), or None where it cannot be imported}, in this interpreter."""
    found: dict[str, str | None] = {}
    for name in names:
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            spec = None
        places = list(spec.submodule_search_locations or []) if spec else []
        found[name] = os.pathsep.join(places) or None
    return found


def _started(python: str, names: list[str]) -> dict[str, str | None]:
    """:func:`locate` in a fresh interpreter started from another folder, as the tests
    start ``hpcprov`` and ``python -m hpcprov``."""
    proc = subprocess.run([python, __file__, *names], capture_output=True, text=True,
                          cwd="/", timeout=60)
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return dict.fromkeys(names, f"(the probe failed: {last})")
    found: dict[str, str | None] = json.loads(proc.stdout)
    return found


def why_not_this_checkout(root: Path = REPO) -> str | None:
    """Why the tests of ``root`` would run code from outside it, in one line; None when
    every package of hpcprov loads from ``root``, in this process and in the commands the
    tests start."""
    expected = packages(root)
    names = list(expected)
    places = [("here", locate(names))]
    places += [(f"in a command run by {python}", _started(python, names))
               for python in _interpreters()]
    for where, found in places:
        for name, folder in expected.items():
            place = found.get(name)
            if place is None:
                why = f"{name} cannot be imported {where}"
            elif Path(place).resolve() != folder:
                why = f"{name} loads from {place} {where}, not from {folder}"
            else:
                continue
            return (f"hpcprov: the tests of {root} would not test its code: {why}; install "
                    f"this checkout (pip install -e {root}, in a virtualenv to keep another "
                    "checkout's install) or run the tests in the installed checkout")
    return None


if __name__ == "__main__":  # the probe of _started
    print(json.dumps(locate(sys.argv[1:])))
elif why := why_not_this_checkout():
    sys.stderr.write(why + "\n")
    raise SystemExit(4)
