"""Loading site profiles: safe YAML with line numbers, `extends`, search paths.

Errors are :class:`ProfileError`, whose ``str()`` is one line naming the file, the line and
the problem (and a fix where one is known). YAML aliases, python tags, duplicate keys,
oversized files and runaway nesting are refused before anything is built from the text.
"""

from __future__ import annotations

import difflib
import functools
import hashlib
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hpcprov import fsutil
from hpcprov.errors import ProfileError

# PyYAML is imported where a file is parsed (not at import time): a cached profile
# (hpcprov/profile_cache.py) is used without it.

MAX_BYTES = 1 << 20
MAX_DEPTH = 40
STD_TAGS = {
    "tag:yaml.org,2002:map",
    "tag:yaml.org,2002:seq",
    "tag:yaml.org,2002:str",
    "tag:yaml.org,2002:int",
    "tag:yaml.org,2002:float",
    "tag:yaml.org,2002:bool",
    "tag:yaml.org,2002:null",
}

PathKey = tuple[str | int, ...]
Origin = tuple[str, int]  # (file, line)
Link = tuple[str, str, str]  # (child file, its `extends` value, the parent file it found)


@dataclass
class Layer:
    """Plain data from one or more YAML files, with where each key came from."""

    data: dict[str, Any]
    origins: dict[PathKey, Origin] = field(default_factory=dict)
    files: list[str] = field(default_factory=list)
    sources: dict[PathKey, str] = field(default_factory=dict)  # scalars as written
    digests: dict[str, str] = field(default_factory=dict)  # file -> sha256 of the bytes read
    links: list[Link] = field(default_factory=list)  # how each `extends` was resolved

    def where(self, loc: PathKey) -> Origin:
        """The file and line of the deepest known key on ``loc``."""
        loc = tuple(loc)
        while loc:
            if loc in self.origins:
                return self.origins[loc]
            loc = loc[:-1]
        return self.origins.get((), (self.files[-1] if self.files else "<profile>", 1))


@functools.cache
def _loaders() -> tuple[type, type | None]:
    """(pure-Python loader, libyaml-backed loader or None), both with the same checks.

    Both refuse aliases (YAML bombs) and runaway nesting while composing nodes. The libyaml
    one only replaces the scanner and parser (about ten times faster); composing, tag
    checks and scalar construction stay the Python code below, so the data are the same.
    """
    import yaml
    from yaml.composer import Composer
    from yaml.constructor import SafeConstructor
    from yaml.resolver import Resolver

    class Guard:
        def compose_node(self: Any, parent: Any, index: Any) -> Any:
            if self.check_event(yaml.AliasEvent):
                event = self.peek_event()
                raise ProfileError(
                    self.name,
                    event.start_mark.line + 1,
                    "YAML aliases (*name) are not allowed in profiles; use 'extends:' to share "
                    "values",
                )
            self._depth = getattr(self, "_depth", 0) + 1
            try:
                if self._depth > MAX_DEPTH:
                    mark = self.peek_event().start_mark
                    raise ProfileError(self.name, mark.line + 1, f"nesting deeper than {MAX_DEPTH}")
                return super().compose_node(parent, index)  # type: ignore[misc]
            finally:
                self._depth -= 1

    class PyLoader(Guard, yaml.SafeLoader):
        """SafeLoader that refuses aliases and tracks nesting depth."""

    try:
        from yaml._yaml import CParser
    except ImportError:  # PyYAML built without libyaml
        return PyLoader, None

    class CLoader(Guard, Composer, CParser, SafeConstructor, Resolver):  # type: ignore[misc]
        """libyaml events, Python composition: the same nodes as PyLoader, faster."""

        def __init__(self, stream: str) -> None:
            CParser.__init__(self, stream)
            SafeConstructor.__init__(self)
            Resolver.__init__(self)
            Composer.__init__(self)

    return PyLoader, CLoader


def _build(loader: Any, node: Any, path: PathKey, layer: Layer, fname: str) -> Any:
    import yaml

    line = node.start_mark.line + 1
    if node.tag == "tag:yaml.org,2002:timestamp" and isinstance(node, yaml.ScalarNode):
        layer.sources[path] = node.value
        return node.value  # a date is text to a profile, never a datetime
    if node.tag not in STD_TAGS:
        raise ProfileError(fname, line, f"tag {node.tag!r} is not allowed in a profile")
    if isinstance(node, yaml.MappingNode):
        out: dict[str, Any] = {}
        for key_node, value_node in node.value:
            kline = key_node.start_mark.line + 1
            if not isinstance(key_node, yaml.ScalarNode) or key_node.tag not in STD_TAGS:
                raise ProfileError(fname, kline, "mapping keys must be plain scalars")
            if key_node.value == "<<":
                raise ProfileError(fname, kline, "merge keys (<<) are not allowed; use 'extends:'")
            key = loader.construct_object(key_node)
            if isinstance(key, bool) or key is None:
                key = key_node.value
            key = str(key)
            if key in out:
                raise ProfileError(fname, kline, f"duplicate key {key!r}")
            layer.origins[path + (key,)] = (fname, kline)
            out[key] = _build(loader, value_node, path + (key,), layer, fname)
        return out
    if isinstance(node, yaml.SequenceNode):
        items = []
        for i, item in enumerate(node.value):
            layer.origins[path + (i,)] = (fname, item.start_mark.line + 1)
            items.append(_build(loader, item, path + (i,), layer, fname))
        return items
    layer.sources[path] = node.value
    return loader.construct_object(node)


def _read(path: Path) -> tuple[str, str]:
    """(text, sha256 of the bytes): the text as open() in text mode would give it."""
    fname = str(path)
    try:
        size = path.stat().st_size
        if size > MAX_BYTES:
            raise ProfileError(fname, 1, f"file is {size} bytes; profiles are limited to 1 MiB")
        raw = path.read_bytes()
        text = raw.decode("utf-8").replace("\r\n", "\n").replace("\r", "\n")
    except FileNotFoundError:
        raise ProfileError(fname, 0, "no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ProfileError(fname, 0, f"cannot read: {exc}") from None
    return text, hashlib.sha256(raw).hexdigest()


def _parse(loader_class: type, text: str, fname: str) -> Layer:
    import yaml

    try:
        loader = loader_class(text)  # PyYAML's reader checks the characters here
    except yaml.reader.ReaderError as exc:
        line = text.count("\n", 0, exc.position) + 1
        raise ProfileError(fname, line, f"YAML error: unacceptable character "
                           f"#x{exc.character:04x}: {exc.reason}") from None
    loader.name = fname
    layer = Layer(data={}, files=[fname])
    try:
        root = loader.get_single_node()
        if root is None:
            raise ProfileError(fname, 1, "empty profile")
        if not isinstance(root, yaml.MappingNode):
            raise ProfileError(fname, root.start_mark.line + 1, "a profile must be a mapping")
        layer.data = _build(loader, root, (), layer, fname)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        if exc.context_mark is not None and mark is not None and mark.index >= len(text):
            mark = exc.context_mark  # an unterminated quote/bracket: where it opens
        line = mark.line + 1 if mark else 0
        problem = (exc.problem or exc.context or "invalid YAML").strip()
        raise ProfileError(fname, line, f"YAML error: {problem}") from None
    except yaml.YAMLError as exc:
        raise ProfileError(fname, 0, f"YAML error: {exc}") from None
    except RecursionError:
        raise ProfileError(fname, 0, "nesting too deep") from None
    finally:
        loader.dispose()
    layer.origins[()] = (fname, 1)
    return layer


def read_yaml(path: Path) -> Layer:
    """Parse one profile file into a :class:`Layer`; any problem is a ProfileError.

    libyaml parses when PyYAML has it; any problem at all (or a character PyYAML's own
    reader refuses) is parsed again by the pure-Python loader, so errors and their lines
    are PyYAML's, the same with or without libyaml.
    """
    fname = str(path)
    text, digest = _read(path)
    py_loader, c_loader = _loaders()
    layer = None
    if c_loader is not None:
        from yaml.reader import Reader

        if not Reader.NON_PRINTABLE.search(text):
            try:
                layer = _parse(c_loader, text, fname)
            except Exception:  # noqa: BLE001 - reported by the Python parser below
                layer = None
    if layer is None:
        layer = _parse(py_loader, text, fname)
    layer.digests[fname] = digest
    return layer


def merge(parent: Layer, child: Layer) -> Layer:
    """Deep-merge child over parent: mappings merge key by key, everything else replaces."""
    origins = dict(parent.origins)

    def go(p: Any, c: Any, path: PathKey) -> Any:
        if isinstance(p, dict) and isinstance(c, dict):
            out = dict(p)
            for key, value in c.items():
                out[key] = go(p.get(key), value, path + (key,))
            return out
        for key in [k for k in origins if k[: len(path)] == path and len(k) > len(path)]:
            del origins[key]
        return c

    data = go(parent.data, child.data, ())
    origins.update(child.origins)
    sources = {**parent.sources, **child.sources}
    return Layer(data=data, origins=origins, files=parent.files + child.files, sources=sources,
                 digests={**parent.digests, **child.digests}, links=parent.links + child.links)


def user_site_dirs() -> list[Path]:
    """Directories searched for profiles before the bundled ones."""
    dirs = [Path(p) for p in os.environ.get("HPCPROV_SITES_PATH", "").split(os.pathsep) if p]
    dirs.append(fsutil.config_dir() / "sites")
    return dirs


def bundled_site_dir() -> Path:
    """The profiles shipped with hpcprov (the repository's sites/ folder): the folder of
    the package hpcprov.sites (installed as files; importlib.resources would cost ~20 ms of
    every command's start-up)."""
    import hpcprov.sites

    return Path(hpcprov.sites.__file__).parent


def search_dirs() -> list[Path]:
    return [*user_site_dirs(), bundled_site_dir()]


def available_sites() -> dict[str, Path]:
    """Every profile name on the search path, first directory winning."""
    found: dict[str, Path] = {}
    for directory in search_dirs():
        if directory.is_dir():
            for path in sorted(directory.glob("*.yaml")):
                found.setdefault(path.stem, path)
    return found


def is_path_ref(ref: str) -> bool:
    return "/" in ref or ref.endswith((".yaml", ".yml"))


def find_profile(ref: str, relative_to: Path | None = None, skip: Path | None = None) -> Path:
    """Resolve a site name or file path to a profile file."""
    if is_path_ref(ref):
        path = Path(ref).expanduser()
        if relative_to is not None and not path.is_absolute():
            path = relative_to.parent / path
        return path
    for directory in search_dirs():
        path = directory / f"{ref}.yaml"
        if path.is_file() and (skip is None or path.resolve() != skip.resolve()):
            return path
    names = sorted(available_sites())
    close = difflib.get_close_matches(ref, names, n=1)
    hint = f"; did you mean {close[0]!r}?" if close else f"; known sites: {', '.join(names)}"
    raise ProfileError(ref, 0, f"unknown site {ref!r}{hint}")


def resolve(path: Path, chain: tuple[Path, ...] = ()) -> Layer:
    """Read a profile and everything it extends, merged parent-first."""
    resolved = path.resolve()
    if resolved in chain:
        cycle = " -> ".join(str(p) for p in (*chain, resolved))
        raise ProfileError(str(path), 1, f"'extends' cycle: {cycle}")
    layer = read_yaml(path)
    layer.data.setdefault("name", path.stem)
    parent_ref = layer.data.get("extends")
    if parent_ref is None:
        return layer
    fname, line = layer.origins.get(("extends",), (str(path), 1))
    if not isinstance(parent_ref, str) or not parent_ref:
        raise ProfileError(fname, line, "'extends' must be a site name or a file path")
    try:
        parent_path = find_profile(parent_ref, relative_to=path, skip=path)
        if not parent_path.is_file():
            raise ProfileError(fname, line, f"parent profile {parent_ref!r} not found")
    except ProfileError as exc:
        if exc.file == fname:
            raise
        raise ProfileError(fname, line, f"extends: {exc.problem}") from None
    parent = resolve(parent_path, (*chain, resolved))
    layer.links.append((str(path), parent_ref, str(parent_path)))
    return merge(parent, layer)
