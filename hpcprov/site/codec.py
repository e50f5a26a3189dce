"""A site's JSON form: :func:`dump` writes it, :func:`load` reads it back (the profile
cache, :mod:`hpcprov.site.cache`), directed by the classes' type hints, without pydantic.

A hand decoder: measured faster for the profile cache than msgspec, cattrs and dacite. One
reader per type is built on first use (:func:`_decoder`) from the dataclass fields' types,
which are evaluated objects (the site's modules use no ``from __future__ import
annotations``): a warm start evaluates no string.
"""

import dataclasses
import functools
import math
from collections.abc import Callable
from dataclasses import fields
from enum import Enum
from types import UnionType
from typing import Annotated, Any, Literal, NoReturn, TypeVar, Union, get_args, get_origin

from hpcprov.site.declare import Strict

T = TypeVar("T")
Reader = Callable[[Any], object]  # (JSON: any of its types)


def dump(value: object) -> Any:
    """A site, or a part of one, as JSON types (dicts, lists, strings, numbers, booleans,
    null): enum members as their values. :func:`load` reads it back."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: dump(getattr(value, f.name)) for f in fields(value)}
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, dict):
        return {k: dump(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [dump(v) for v in value]
    return value


def load(kind: type[T], data: object, *, plain: bool = False) -> T:
    """What :func:`dump` wrote, read back as ``kind`` (the :class:`Site`, or a part of
    one), directed by the classes' type hints: every field present and of its type, enum
    members by value, no control character in a single-line value (free text: no other
    than newline and tab) and no number that is not finite. The checks across fields are
    not run again: what :func:`dump` wrote was validated, and the profile cache uses an
    entry only for the same files and code. ValueError/TypeError for anything
    :func:`dump` does not write for that type. No pydantic: this is how a site comes back
    from the profile cache.

    ``plain``: the caller has seen that no string in ``data`` can hold a control character
    (the JSON it was parsed from is printable ASCII with no escape, as :func:`json.dumps`
    writes a site whose text holds none), so the text rule is not checked value by value."""
    hint: object = kind  # (see _decoder)
    value = _decoder(hint, not plain)(data)
    if not isinstance(value, kind):
        raise TypeError(f"not a {kind.__name__}")
    return value


def _refuse(what: str) -> NoReturn:
    raise ValueError(what)


# (a type form, held as an object: mypy takes no type form as a cache key,
# python/mypy#11470)
@functools.cache
def _decoder(kind: object, text: bool = True) -> Reader:
    """The reader of one type's JSON (built once per type), checking each object's text
    against the text rule where ``text``."""
    origin, args = get_origin(kind), get_args(kind)
    if origin is Annotated:
        return _decoder(args[0], text)
    if kind is Any:
        return lambda data: data
    if isinstance(kind, type) and issubclass(kind, Strict):  # the site's classes
        return _object_decoder(kind, text)
    if origin is Union or origin is UnionType:
        arms = [_decoder(a, text) for a in args if a is not type(None)]
        nullable = type(None) in args
        if len(arms) == 1:
            (arm,) = arms
            return lambda data: None if data is None and nullable else arm(data)

        def union(data: object) -> object:
            if data is None and nullable:
                return None
            for arm in arms:
                try:
                    return arm(data)
                except (ValueError, TypeError):
                    continue
            raise ValueError(f"{data!r} is none of {kind}")

        return union
    if origin is Literal:
        allowed = {(type(a), a) for a in args}
        return lambda data: data if (type(data), data) in allowed else _refuse(
            f"{data!r} is not one of {args}")
    if origin is list:
        item = _decoder(args[0], text)
        return lambda data: [item(v) for v in data] if type(data) is list else _refuse(
            "not a list")
    if origin is dict:
        key, value = _decoder(args[0], text), _decoder(args[1], text)
        return lambda data: {key(k): value(v) for k, v in data.items()} \
            if type(data) is dict else _refuse("not an object")
    if isinstance(kind, type) and issubclass(kind, Enum):
        return kind
    if kind is float:
        return lambda data: float(data) if type(data) in (int, float) and math.isfinite(data) \
            else _refuse(f"not a finite number: {data!r}")
    if kind in (str, int, bool):
        return lambda data: data if type(data) is kind else _refuse(f"not a {kind.__name__}")
    raise TypeError(f"no reader for {kind}")


def _object_decoder(kind: type[Strict], text: bool) -> Reader:
    readers: dict[str, Reader] = {}

    def read(data: object) -> object:
        if not readers:  # built on first use: a class may name itself (through a field)
            # each field's type as evaluated (an Annotated of a class, a Union...: a type
            # form, no string)
            # (the declared type: the annotation pydantic reads wraps it, declare.Strict)
            hints: dict[str, object] = {f.name: getattr(f.type, "__origin__", f.type)
                                        if hasattr(f.type, "__metadata__") else f.type
                                        for f in fields(kind)}
            readers.update({name: _decoder(hint, text) for name, hint in hints.items()})
        if type(data) is not dict or data.keys() != readers.keys():
            raise ValueError(f"{kind.__name__}: not its fields")
        obj = object.__new__(kind)
        obj.__dict__.update({name: reader(data[name]) for name, reader in readers.items()})
        problems = obj._text_problems() if text else None
        if problems:
            raise ValueError(f"{kind.__name__}.{problems[0][0][0]}: {problems[0][1]}")
        return obj

    return read
