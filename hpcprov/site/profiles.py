"""Site lookup: turn a name or path into a validated site.

``load_site`` gives every command the same thing whether the profile cache
(:mod:`hpcprov.site.cache`) answered or not: the typed site (:mod:`hpcprov.site.types`),
so pydantic is imported only when a profile is actually validated.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from hpcprov.core import fsutil
from hpcprov.core.errors import ProfileError
from hpcprov.site import cache as profile_cache
from hpcprov.site.loader import Layer, available_sites, find_profile, resolve

if TYPE_CHECKING:
    from _typeshed import DataclassInstance
    from pydantic import ValidationError
    from pydantic_core import ErrorDetails

    from hpcprov.site.types import Site


# pydantic's error types for an unknown key and a missing one (a dataclass's own names)
EXTRA = ("extra_forbidden", "unexpected_keyword_argument")
MISSING = ("missing", "missing_argument", "missing_keyword_only_argument")


def _hint(err: ErrorDetails, model_fields: list[str], written: str | None = None) -> str:
    kind, value = err["type"], err.get("input")
    if kind in EXTRA:
        import difflib  # (only for an error: not on every start)

        close = difflib.get_close_matches(str(err["loc"][-1]), model_fields, n=1)
        return f" (did you mean {close[0]!r}?)" if close else ""
    if kind == "string_type" and isinstance(value, int | float) and not isinstance(value, bool):
        return f" (quote it: '{written if written is not None else value}')"
    if kind in ("int_type", "float_type") and isinstance(value, bool):
        return f" (write a number; {written or value} is a yes/no value)"
    if kind == "int_type" and isinstance(value, float):
        return " (write a whole number)"
    if kind == "finite_number":
        return " (.inf and .nan are not allowed)"
    return ""


def _allowed_fields(loc: tuple[str | int, ...]) -> list[str]:
    """Field names allowed at the parent of ``loc`` (for suggestions)."""
    import dataclasses
    import typing

    from hpcprov.site.types import Site

    def classes(ann: object) -> list[type[DataclassInstance]]:
        """The site classes a field's type holds (itself, in an Optional, a list, a dict)."""
        if isinstance(ann, type) and dataclasses.is_dataclass(ann):
            return [ann]
        return [c for arg in typing.get_args(ann) for c in classes(arg)]

    model: type[DataclassInstance] = Site
    for part in loc[:-1]:
        hints = typing.get_type_hints(model, include_extras=True)
        if isinstance(part, str) and part in hints:
            found = classes(hints[part])
            if found:
                model = found[-1]
    return [f.name for f in dataclasses.fields(model)]


def _control_at(value: object, free: bool) -> tuple[str | int, ...]:
    """The key or index path, inside a mapping or list, of the first value (or key) that
    holds a control character: where the control-character rule was broken."""
    from hpcprov.core.text import has_control

    items = value.items() if isinstance(value, dict) else \
        enumerate(value) if isinstance(value, list | tuple) else ()
    for key, item in items:
        if isinstance(key, str) and has_control(key, free):
            return (key,)
        if isinstance(item, str) and has_control(item, free):
            return (key,)
        deeper = _control_at(item, free)
        if deeper:
            return (key, *deeper)
    return ()


def describe(exc: ValidationError, layer: Layer) -> list[ProfileError]:
    """Turn pydantic errors into located one-line ProfileErrors. A control character in a
    mapping or a list (``env``) is located at its key or item, not at the field's line."""
    from hpcprov.core.text import SINGLE_LINE_RULE, TEXT_RULE

    out = []
    for err in exc.errors():
        loc = tuple(err["loc"])
        rule = err["msg"].removeprefix("Value error, ")
        if rule in (SINGLE_LINE_RULE, TEXT_RULE):
            loc += _control_at(err.get("input"), rule == TEXT_RULE)
        file, line = layer.where(loc)
        dotted = ".".join(str(p) for p in loc) or "(top level)"
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] in EXTRA:
            msg = "unknown key"
        elif err["type"] in MISSING:
            msg = "required key is missing"
        hint = _hint(err, _allowed_fields(loc), layer.sources.get(loc))
        if loc in layer.implied:
            hint += f" ({layer.implied[loc]})"
        out.append(ProfileError(file, line, f"{dotted}: {msg}{hint}"))
    return out


def validated(layer: Layer) -> tuple[Site | None, list[ProfileError]]:
    """The site, or every located problem with the merged profile data."""
    from pydantic import ValidationError

    from hpcprov.site.model import validate

    try:
        return validate(layer.data), []
    except ValidationError as exc:
        return None, describe(exc, layer)


def validate_layer(layer: Layer) -> Site:
    """Validate merged profile data; raise the first located error (with a count of others)."""
    site, errors = validated(layer)
    if site is None:
        first = errors[0]
        more = f" (+{len(errors) - 1} more)" if len(errors) > 1 else ""
        raise ProfileError(first.file, first.line, first.problem + more)
    return site


def check_file(path: Path) -> list[ProfileError]:
    """Every problem in one profile file (empty list when it is valid)."""
    try:
        return validated(resolve(path))[1]
    except ProfileError as exc:
        return [exc]


def validate_file(path: Path, store: bool = True) -> Site:
    """Read, merge and validate a profile file (bypassing the cache), then cache the site
    (unless ``store`` is off)."""
    layer = resolve(path)
    site = validate_layer(layer)
    if store:
        profile_cache.store(path, layer, site)
    return site


def load_site(ref: str, store: bool = True) -> Site:
    """Load a site by name (search path) or by file path: the typed site, from the
    profile cache when its entry is still current, else validated now (and
    cached, unless ``store`` is off: a dry run writes nothing)."""
    path = find_profile(ref)
    problem = fsutil.regular_file(path)  # a stat: never opens a FIFO or a device
    if problem == "no such file":
        raise ProfileError(str(path), 0, "no such profile file")
    if problem is not None:
        raise ProfileError(str(path), 0, f"is {problem}, not a profile file; give a YAML file "
                           "(NAME.yaml) or a site name")
    cached = profile_cache.load(path)
    if cached is not None:
        return cached
    return validate_file(path, store)


def site_names() -> list[str]:
    return sorted(available_sites())
