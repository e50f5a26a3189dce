"""Loading site profiles: safe YAML with line numbers, `extends`, search paths.

Errors are :class:`ProfileError`, whose ``str()`` is one line naming the file, the line and
the problem (and a fix where one is known). YAML aliases, python tags, duplicate keys,
oversized files and runaway nesting are refused before anything is built from the text;
anything but a regular file (a FIFO, a device such as /dev/zero, a directory) is refused
before a byte is read from it, and no more than the size limit is ever read.

The search path (:func:`search_dirs`) is ``$HPCPROV_SITES_PATH`` (absolute entries only: a
relative one is ignored with a warning, since it would make the profiles a command sees
depend on the current directory), then ``$XDG_CONFIG_HOME/hpcprov/sites``, then the
bundled profiles. See docs/security.md, "Profiles and the search path".
"""

from __future__ import annotations

import functools
import hashlib
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hpcprov.core import fsutil
from hpcprov.core.errors import ProfileError, warn
from hpcprov.site.sections import DEFAULT_SCHEDULER, SCHEDULERS

# PyYAML is imported where a file is parsed (not at import time): a cached profile
# (hpcprov/site/cache.py) is used without it.

MAX_BYTES = 1 << 20
MAX_DEPTH = 40
MAX_EXTENDS = 32  # profiles in one `extends` chain, the first included
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
    implied: dict[PathKey, str] = field(default_factory=dict)  # values not written, and why

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

    class Guard(Composer):  # composes the nodes of a Composer (the loaders below)
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
                return super().compose_node(parent, index)
            finally:
                self._depth -= 1

    class PyLoader(Guard, yaml.SafeLoader):
        """SafeLoader that refuses aliases and tracks nesting depth."""

    try:
        from yaml._yaml import CParser
    except ImportError:  # PyYAML built without libyaml
        return PyLoader, None

    class CLoader(Guard, Composer, CParser, SafeConstructor, Resolver):
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


def _not_utf8(fname: str, raw: bytes, exc: UnicodeDecodeError) -> ProfileError:
    """The located error for bytes that are not UTF-8: the line and column of the first."""
    before = raw[: exc.start].decode("utf-8").replace("\r\n", "\n").replace("\r", "\n")
    line = before.count("\n") + 1
    column = len(before) - (before.rfind("\n") + 1) + 1
    return ProfileError(fname, line, f"not UTF-8 text: byte 0x{raw[exc.start]:02x} at column "
                        f"{column}; save the file as UTF-8")


def _read(path: Path) -> tuple[str, str]:
    """(text, sha256 of the bytes): the text as open() in text mode would give it.

    Only a regular file is read (:func:`hpcprov.core.fsutil.read_regular`: a FIFO or a device
    is refused without blocking), and at most :data:`MAX_BYTES` of it."""
    fname = str(path)
    try:
        raw = fsutil.read_regular(path, MAX_BYTES)
    except FileNotFoundError:
        raise ProfileError(fname, 0, "no such file") from None
    except fsutil.NotRegularFile as exc:
        raise ProfileError(fname, 0, f"is {exc.kind}, not a profile file; give a YAML file "
                           "(NAME.yaml) or a site name") from None
    except fsutil.TooLarge as exc:
        raise ProfileError(fname, 1, f"file is {exc.size} bytes; profiles are limited to "
                           "1 MiB") from None
    except OSError as exc:
        raise ProfileError(fname, 0, f"cannot read: {exc.strerror or exc}") from None
    try:
        text = raw.decode("utf-8").replace("\r\n", "\n").replace("\r", "\n")
    except UnicodeDecodeError as exc:
        raise _not_utf8(fname, raw, exc) from None
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
            except Exception:
                layer = None
    if layer is None:
        layer = _parse(py_loader, text, fname)
    layer.digests[fname] = digest
    return layer


def _outside(table: dict[PathKey, Any], replaced: set[PathKey]) -> dict[PathKey, Any]:
    """The entries of ``table`` at no replaced path and under none (a set look-up for each
    prefix of each key: linear in the size of the table, whatever ``replaced`` holds)."""
    if not replaced:
        return dict(table)
    return {key: value for key, value in table.items()
            if not any(key[:n] in replaced for n in range(1, len(key) + 1))}


def _without_other_scheduler(parent: Layer, child: Layer) -> Layer:
    """``parent`` less its own scheduler's section when ``child`` names another scheduler:
    a Slurm profile extending a PBS one inherits its partitions and modules, not its
    ``pbs:`` settings (which a Slurm profile refuses)."""
    own = parent.data.get("scheduler", DEFAULT_SCHEDULER)
    other = child.data.get("scheduler", own)
    if own == other or not isinstance(own, str) or own not in SCHEDULERS or own not in parent.data:
        return parent
    gone: set[PathKey] = {(own,)}
    return Layer(data={k: v for k, v in parent.data.items() if k != own},
                 origins=_outside(parent.origins, gone), files=parent.files,
                 sources=_outside(parent.sources, gone), digests=parent.digests,
                 links=parent.links, implied=_outside(parent.implied, gone))


# Mappings of named entries whose entry a child removes with ``NAME: null`` (an inherited
# launcher, image or annotation). A partition's options cannot: there ``null`` is a flag
# without a value (exclusive: null), so a partition lists the option names it drops in
# ``unset_options`` (a list, beside the options, that no option name can be confused with).
REMOVABLE: tuple[PathKey, ...] = (("launchers",), ("containers", "images"),
                                  ("containers", "annotations"))
UNSET_OPTIONS = "unset_options"


def merge(parent: Layer, child: Layer) -> Layer:
    """Deep-merge child over parent: mappings merge key by key, everything else replaces.

    ``NAME: null`` under a :data:`REMOVABLE` mapping removes the parent's entry, and a
    partition's ``unset_options`` its parent's options of those names (removing what the
    parent lacks is an error at the child's line). What the parent said at or under a
    replaced value (where it came from, how it was written) is dropped. The time taken is
    linear in the size of the two layers: a scalar replacing a scalar needs no search at
    all (the child's entries overwrite the parent's), and only a replaced list or mapping
    has its parent's entries filtered."""
    replaced: set[PathKey] = set()  # every value the child replaces (or adds)
    pruned: set[PathKey] = set()  # those where a list or mapping is replaced, or put

    def remove(p: dict[str, Any], key: str, path: PathKey, what: str) -> None:
        fname, line = child.where(path)
        if key not in p:
            raise ProfileError(fname, line, f"{'.'.join(map(str, path))}: null removes an "
                               f"inherited {what}, and no profile this one extends has "
                               f"one named {key!r}")
        if path[0] == "launchers" and "default_launcher" not in child.data \
                and parent.data.get("default_launcher") == key:
            raise ProfileError(fname, line, f"launchers.{key}: null removes the inherited "
                               "default_launcher; set default_launcher to another launcher")
        replaced.add(path)
        pruned.add(path)

    def unset(p: Any, c: dict[str, Any], path: PathKey) -> dict[str, Any]:
        names = c[UNSET_OPTIONS]
        options = p.get("options") if isinstance(p, dict) else None
        options = dict(options) if isinstance(options, dict) else {}
        if not isinstance(names, list):
            return dict(p) if isinstance(p, dict) else {}  # the model reports the type
        for i, name in enumerate(names):
            if name not in options:
                fname, line = child.where((*path, UNSET_OPTIONS, i))
                raise ProfileError(fname, line, f"{'.'.join(map(str, path))}."
                                   f"{UNSET_OPTIONS}: no profile this one extends gives "
                                   f"this partition an option {name!r} to unset")
            del options[name]
            replaced.add((*path, "options", name))
            pruned.add((*path, "options", name))
        return {**p, "options": options}

    def go(p: Any, c: Any, path: PathKey) -> Any:
        if isinstance(c, dict) and (isinstance(p, dict) or p is None):
            if not isinstance(p, dict):  # a new mapping: still checked for removals
                replaced.add(path)
                pruned.add(path)
                p = {}
            if len(path) == 2 and path[0] == "partitions" and UNSET_OPTIONS in c:
                p = unset(p, c, path)
            out = dict(p)
            for key, value in c.items():
                if value is None and path in REMOVABLE:
                    remove(p, key, (*path, key), str(path[-1])[:-1])
                    out.pop(key, None)
                    continue
                out[key] = go(p.get(key), value, (*path, key))
            if len(path) == 2 and path[0] == "partitions":
                out.pop(UNSET_OPTIONS, None)  # consumed here, not inherited
            return out
        replaced.add(path)
        if isinstance(p, dict | list) or isinstance(c, dict | list):
            pruned.add(path)
        return c

    parent = _without_other_scheduler(parent, child)
    data = go(parent.data, child.data, ())
    return Layer(
        data=data,
        origins={**_outside(parent.origins, pruned), **child.origins},
        files=parent.files + child.files,
        sources={**_outside(parent.sources, pruned), **child.sources},
        digests={**parent.digests, **child.digests}, links=parent.links + child.links,
        implied={**_outside(parent.implied, replaced), **child.implied})


def user_site_dirs() -> list[Path]:
    """Directories searched for profiles before the bundled ones: the absolute entries of
    ``$HPCPROV_SITES_PATH`` (``~`` expanded; a relative entry is ignored with a warning),
    then ``$XDG_CONFIG_HOME/hpcprov/sites``."""
    dirs = []
    for entry in os.environ.get("HPCPROV_SITES_PATH", "").split(os.pathsep):
        path = Path(entry).expanduser() if entry else None
        if path is not None and not path.is_absolute():
            warn(f"HPCPROV_SITES_PATH entry {entry!r} is relative and is ignored (it would "
                 "depend on the current directory); give an absolute path")
        elif path is not None:
            dirs.append(path)
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
    """Every profile name on the search path, first directory winning. Only regular files
    (or symlinks to them) count, as in :func:`find_profile`: a FIFO or a device named
    ``*.yaml`` is passed over with a warning, never opened."""
    found: dict[str, Path] = {}
    for directory in search_dirs():
        if directory.is_dir():
            for path in sorted(directory.glob("*.yaml")):
                problem = fsutil.regular_file(path)
                if problem is not None:
                    warn(f"{path} is {problem}, not a profile file; ignored")
                elif path.stem not in found:
                    found[path.stem] = path
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
    if skip is not None and ref == skip.stem:
        raise ProfileError(ref, 0, f"{ref!r} names this profile itself, and no other profile "
                           f"{ref!r} is on the search path; a profile cannot extend itself")
    names = sorted(available_sites())
    import difflib  # (only for an error: not on every start)

    close = difflib.get_close_matches(ref, names, n=1)
    hint = f"; did you mean {close[0]!r}?" if close else f"; known sites: {', '.join(names)}"
    raise ProfileError(ref, 0, f"unknown site {ref!r}{hint}")


def _read_one(path: Path) -> Layer:
    """One profile file, its name filled in from the file name when it gives none (and
    said so: an invalid file name is then blamed on this file, not on what it extends)."""
    layer = read_yaml(path)
    if "name" not in layer.data:
        layer.data["name"] = path.stem
        layer.origins[("name",)] = (str(path), 1)
        layer.implied[("name",)] = (f"no 'name:' is given, so the name is the file name's "
                                    f"{path.stem!r}; add a valid 'name:' or rename the file")
    return layer


def _parent(path: Path, layer: Layer) -> Path | None:
    """The profile file ``layer`` (read from ``path``) extends, or None."""
    ref = layer.data.get("extends")
    if ref is None:
        return None
    fname, line = layer.origins.get(("extends",), (str(path), 1))
    if not isinstance(ref, str) or not ref:
        raise ProfileError(fname, line, "'extends' must be a site name or a file path")
    try:
        parent = find_profile(ref, relative_to=path, skip=path)
    except ProfileError as exc:
        raise ProfileError(fname, line, f"extends: {exc.problem}") from None
    problem = fsutil.regular_file(parent)
    if problem == "no such file":
        raise ProfileError(fname, line, f"parent profile {ref!r} not found ({parent})")
    if problem is not None:
        raise ProfileError(fname, line, f"parent profile {ref!r} is {problem}, not a "
                           "profile file")
    layer.links.append((str(path), ref, str(parent)))
    return parent


def resolve(path: Path) -> Layer:
    """Read a profile and everything it extends, merged parent-first.

    The chain is followed without recursion; a cycle, or a chain of more than
    :data:`MAX_EXTENDS` profiles, is an error at the first profile's ``extends`` line."""
    layers: list[Layer] = []
    seen: list[Path] = []
    current: Path | None = path
    while current is not None:
        resolved = current.resolve()
        if resolved in seen:
            cycle = " -> ".join(str(p) for p in (*seen, resolved))
            raise ProfileError(str(current), 1, f"'extends' cycle: {cycle}")
        if len(layers) == MAX_EXTENDS:
            fname, line = layers[0].origins.get(("extends",), (str(path), 1))
            raise ProfileError(fname, line, f"'extends' chain is longer than {MAX_EXTENDS} "
                               f"profiles (the next is {current}); extend a profile nearer "
                               "the top or copy what it sets")
        seen.append(resolved)
        layers.append(_read_one(current))
        current = _parent(current, layers[-1])
    merged = merge(Layer(data={}), layers.pop())  # a removal in the first: nothing to remove
    while layers:
        merged = merge(merged, layers.pop())
    return merged
