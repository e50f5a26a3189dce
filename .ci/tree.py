"""The static tools on the source tree as it is: no installed copy, no folder of links.

The import package ``hpcprov`` is ``hpcprov/`` plus the top-level folders that
``pyproject.toml``'s ``[tool.setuptools] package-dir`` maps into it (``provision/`` is
``hpcprov.provision``, and so on). Neither mypy nor import-linter can read that mapping:
mypy names a file by the folders above it, import-linter (grimp) walks the folder of the
package ``importlib`` finds. So each is told the names here, read from ``package-dir``:

* ``mypy [ARGS...]``: mypy's own option parsing and build (``mypy.main.process_options``,
  ``run_build``), with each source file of a mapped folder given its installed module name;
  settings from ``[tool.mypy]``.
* ``lint-imports [ARGS...]``: import-linter's command, with grimp's package and module
  finders told that ``hpcprov`` is these folders (``hpcprov.provision`` is ``provision/``);
  contracts from ``[tool.importlinter]``.

Usage: python3 .ci/tree.py mypy|lint-imports [ARGS...], run in the folder of
``pyproject.toml`` (the checkout to check). Both use what these tools lay out for their own
callers (mypy's build sources, grimp's finder settings, which grimp's tests use); a release
that changes them makes this script fail, never pass with a folder unread: the layers
contract names every folder, and tests/test_layers.py counts the files import-linter read
and the sources mypy is given (docs/architecture.md, "A checkout checks itself").
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import tomllib

if TYPE_CHECKING:
    from mypy.build import BuildSource
    from mypy.fscache import FileSystemCache
    from mypy.options import Options

ROOT = Path.cwd()
# run as scripts beside this module (`from runtime import ...`): mypy checks it as both
SCRIPT_MODULES = {"runtime": "validate/programs/runtime.py"}
TYPED = ("hpcprov", "hpcprov.provision", "hpcprov.validate", "hpcprov.sites")


def package_dir(root: Path = ROOT) -> dict[str, Path]:
    """``package-dir`` of ``root``'s pyproject.toml: {import package: its folder}."""
    config = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))
    mapping = config["tool"]["setuptools"]["package-dir"]
    return {name: (root / folder).resolve() for name, folder in mapping.items()}


def mapped_name(module: str, folders: dict[str, Path], root: Path = ROOT) -> str:
    """The installed name of ``module`` as mypy named it from the tree (``provision.plan``
    is ``hpcprov.provision.plan``)."""
    top, _, rest = module.partition(".")
    for name, folder in folders.items():
        if folder.parent == root.resolve() and folder.name == top and name != top:
            return f"{name}.{rest}" if rest else name
    return module


def mypy_sources(args: list[str]) -> tuple[list[BuildSource], Options, FileSystemCache]:
    """What mypy checks: its sources as its own command line finds them in the typed
    folders, each named as installed, and the script modules; its options from ``args``."""
    from mypy.build import BuildSource
    from mypy.fscache import FileSystemCache
    from mypy.main import process_options

    folders = package_dir()
    typed = [os.path.relpath(folders[name], ROOT) for name in TYPED]
    fscache = FileSystemCache()
    found, options = process_options([*args, *typed], fscache=fscache)
    sources = [BuildSource(s.path, mapped_name(s.module, folders), s.text, s.base_dir)
               for s in found]
    sources += [BuildSource(path, name) for name, path in SCRIPT_MODULES.items()]
    return sources, options, fscache


def mypy(args: list[str]) -> int:
    from mypy import util
    from mypy.main import run_build

    sources, options, fscache = mypy_sources(args)
    if not any(s.module.startswith("hpcprov.provision.") for s in sources):
        print(".ci/tree.py: no module named hpcprov.provision.* among mypy's sources",
              file=sys.stderr)
        return 2
    start = time.time()
    _, messages, blockers = run_build(sources, options, fscache, start, sys.stdout,
                                      sys.stderr)
    errors, notes, files = util.count_stats(messages)
    formatter = util.FancyFormatter(sys.stdout, sys.stderr, options.hide_error_codes)
    if errors:
        print(formatter.format_error(errors, files, len(sources), blockers=blockers))
    else:
        print(formatter.format_success(len(sources)))
    # as mypy's own command does: exit without freeing what the build made (seconds)
    util.hard_exit(2 if blockers else 1 if errors else 0)
    return 0


def lint_imports(args: list[str]) -> int:
    from grimp.adaptors.modulefinder import ModuleFinder
    from grimp.adaptors.packagefinder import ImportLibPackageFinder
    from grimp.application.config import settings
    from grimp.application.ports.filesystem import AbstractFileSystem
    from grimp.application.ports.modulefinder import FoundPackage

    folders = package_dir()
    roots = {name for name in folders if "." not in name}
    names = {str(folder): name for name, folder in folders.items()}

    class PackageFinder(ImportLibPackageFinder):
        def determine_package_directories(self, package_name: str,
                                          file_system: AbstractFileSystem) -> set[str]:
            if package_name in roots:  # the package and every folder mapped into it
                return {str(folder) for name, folder in folders.items()
                        if name == package_name or name.startswith(package_name + ".")}
            return super().determine_package_directories(package_name, file_system)

    class Finder(ModuleFinder):
        def find_package(self, package_name: str, package_directory: str,
                         file_system: AbstractFileSystem) -> FoundPackage:
            name = names.get(package_directory, package_name)
            return super().find_package(name, package_directory, file_system)

    settings.configure(PACKAGE_FINDER=PackageFinder(), MODULE_FINDER=Finder())
    from importlinter.cli import lint_imports_command

    try:
        lint_imports_command.main(args=args, prog_name="lint-imports")
    except SystemExit as done:
        return int(done.code or 0)
    return 0


def main(argv: list[str]) -> int:
    tools = {"mypy": mypy, "lint-imports": lint_imports}
    if not argv or argv[0] not in tools:
        print(f"usage: python3 .ci/tree.py {'|'.join(tools)} [ARGS...]", file=sys.stderr)
        return 2
    return tools[argv[0]](argv[1:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
