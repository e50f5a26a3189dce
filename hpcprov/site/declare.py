"""How a site's field is declared, and how pydantic reads the declaration: the one module
that knows how fields attach to pydantic.

A site class (:mod:`hpcprov.site.types`) is a stdlib dataclass deriving from
:class:`Strict`, each field declared with :func:`F`: its default (or default factory), its
description, the constraints ``pydantic.Field`` takes (``strict``, ``ge``, ``le``,
``pattern``, ``max_length``...) and its own checks (``check=``: functions raising
ValueError). A type inside a list or a mapping is constrained or checked in its annotation:
``Annotated[str, Constraints(pattern=...)]``, ``Annotated[str, After(check)]``.

What pydantic reads, all through its public API:

* a field's description: the ``description`` key of the dataclass field's ``metadata``,
  which pydantic gives ``pydantic.Field``;
* its constraints and checks: its type, which :func:`validated_as` makes, before pydantic
  first reads the classes, ``Annotated[T, Constraints(...), <T's own markers>,
  FieldChecks(...)]``; the markers of this module are annotated-types' ``GroupedMetadata``
  (an object pydantic iterates for the metadata it holds), each holding
  ``pydantic.Field(...)``, ``AfterValidator`` or ``BeforeValidator``, imported only when
  pydantic iterates them, so this module imports no pydantic, and a site read back from
  the profile cache (:mod:`hpcprov.site.codec`) neither loads it nor pays for the markers;
* the checks across fields: ``__post_init__``, which pydantic calls after it validated the
  fields (and :class:`Strict`'s ``__init__`` calls for a site built in code), each field's
  own problems raised at that field's location (:func:`invalid`).

So a field's value is checked, as pydantic validates it, by its type and constraints, then
by the text rule (no control character in a string that may reach a shell: the fields in
:data:`hpcprov.core.text.FREE_TEXT` may hold newlines and tabs) and its own checks: a
field's problem is reported even where another field fails.
"""

import dataclasses
import functools
from collections.abc import Callable, Iterator, Mapping
from dataclasses import MISSING, dataclass, fields
from typing import Annotated, Any, ClassVar, get_args, get_origin

from hpcprov.core.text import FREE_TEXT, SINGLE_LINE_RULE, TEXT_RULE, has_control

# a value refused: (its location, relative to the object checked; why; the value)
Problem = tuple[tuple[str | int, ...], str, object]
# a check of one value: raises ValueError (the reason) for a value it refuses
Check = Callable[[Any], object]

# the keyword arguments of pydantic.Field that constrain a value (the others, description,
# stay in the dataclass field's metadata)
CONSTRAINTS = ("strict", "gt", "ge", "lt", "le", "pattern", "min_length", "max_length")
_CHECKS = "hpcprov.checks"  # the metadata key of a field's own checks (pydantic skips it)
_CONSTRAINTS = "hpcprov.constraints"


def F(default: object = MISSING, *, factory: Callable[[], object] | None = None,
      check: Check | tuple[Check, ...] = (), **meta: object) -> Any:
    """A field: its default (or default ``factory``), its own checks (``check``: one or a
    tuple, run in order, the first refusal reported), and what ``pydantic.Field`` is told
    (``description``; constraints: :data:`CONSTRAINTS`). Untyped, as ``dataclasses.field``
    is, so that ``name: int = F(1)`` declares an int."""
    checks = check if isinstance(check, tuple) else (check,)
    constraints = {k: meta.pop(k) for k in CONSTRAINTS if k in meta}
    metadata = {**meta, _CHECKS: checks, _CONSTRAINTS: constraints}
    if factory is not None:
        return dataclasses.field(default_factory=factory, metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


def count(default: object = MISSING, *, ge: int = 1, le: int, description: str) -> Any:
    """A strict integer field (``true`` is not 1, ``2.0`` is not 2) between ``ge`` and
    ``le``; the description says why the bound is what it is."""
    return F(default, strict=True, ge=ge, le=le, description=description)


class _Grouped:
    """Metadata pydantic reads as annotated-types' ``GroupedMetadata`` (``Annotated[T, x]``:
    pydantic iterates ``x`` for what it holds); what it holds is made on first iteration."""

    __is_annotated_types_grouped_metadata__ = True

    def __iter__(self) -> Iterator[object]:
        return iter(self.pydantic())

    def pydantic(self) -> list[object]:
        raise NotImplementedError


class Constraints(_Grouped):
    """Constraints on a value, as ``pydantic.Field`` takes them: ``Annotated[str,
    Constraints(pattern=..., max_length=64)]``."""

    def __init__(self, **constraints: Any) -> None:  # (pydantic.Field's keywords)
        self.constraints = constraints

    def pydantic(self) -> list[object]:
        from pydantic import Field

        return [Field(**self.constraints)] if self.constraints else []


class After(_Grouped):
    """A check of one value (raising ValueError), run after its type is validated."""

    def __init__(self, check: Check) -> None:
        self.check = check

    def pydantic(self) -> list[object]:
        from pydantic import AfterValidator

        return [AfterValidator(self.check)]


class Before(After):
    """A check of the value as written (raising ValueError), before its type is validated."""

    def pydantic(self) -> list[object]:
        from pydantic import BeforeValidator

        return [BeforeValidator(self.check)]


class BeforeSeeing(_Grouped):
    """A check of the value as written, before its type is validated, that also reads the
    fields validated before it: ``check(value, {name: value, ...})``."""

    def __init__(self, check: Callable[[object, Mapping[str, object]], object]) -> None:
        self.check = check

    def pydantic(self) -> list[object]:
        from pydantic import BeforeValidator, ValidationInfo

        def with_fields(value: object, info: ValidationInfo) -> object:
            return self.check(value, info.data)

        return [BeforeValidator(with_fields)]


class FieldChecks(After):
    """A field's checks as pydantic validates it: the text rule, then its own checks."""

    def __init__(self, name: str, checks: tuple[Check, ...]) -> None:
        free = name in FREE_TEXT

        def check(value: object) -> object:
            if _control(value, free):
                raise ValueError(TEXT_RULE if free else SINGLE_LINE_RULE)
            for one in checks:
                one(value)
            return value

        super().__init__(check)


def invalid(problems: list[Problem]) -> ValueError:
    """The error for values refused at their own locations (relative to the object being
    checked): a pydantic ValidationError, which pydantic nests under the object's location
    (and the loader turns into file:line)."""
    from pydantic import ValidationError
    from pydantic_core import InitErrorDetails, PydanticCustomError

    return ValidationError.from_exception_data("Site", [
        InitErrorDetails(type=PydanticCustomError("value_error", "Value error, {reason}",
                                                  {"reason": why}), loc=loc, input=value)
        for loc, why, value in problems])


def _control(value: object, free: bool = False) -> bool:
    """Whether a string, or one in a mapping (keys too) or a list, holds a control
    character the rule refuses there."""
    if isinstance(value, str):
        return has_control(value, free)
    if isinstance(value, dict):
        return any(_control(k, free) or _control(v, free) for k, v in value.items())
    if isinstance(value, list | tuple):
        return any(_control(item, free) for item in value)
    return False


@dataclass(kw_only=True, init=False, repr=False, eq=False)
class Strict:
    """Base: unknown keys are errors (pydantic: extra forbid); strings that may reach a
    shell hold no control characters; numbers are finite (.inf and .nan are refused; JSON
    has neither)."""

    __pydantic_config__ = {"extra": "forbid", "allow_inf_nan": False}

    # (field, its own checks), in field order: set when the class is made
    _own_checks: ClassVar[tuple[tuple[str, tuple[Check, ...]], ...]] = ()

    def __init_subclass__(cls, **kwargs: object) -> None:
        """The class's own checks, by field (what :func:`F` declared), for
        ``__post_init__``."""
        super().__init_subclass__(**kwargs)
        own = [(name, declared.metadata[_CHECKS]) for name, declared in vars(cls).items()
               if isinstance(declared, dataclasses.Field) and declared.metadata.get(_CHECKS)]
        cls._own_checks = (*cls._own_checks, *own)

    # one __init__, __eq__ and __repr__ for every class: dataclasses would write and compile
    # each class its own, which costs every command that reads a site from the profile
    # cache about ten milliseconds (pydantic builds the objects without __init__, then
    # calls __post_init__)
    def __init__(self, **values: object) -> None:
        cls: type = type(self)  # (a plain type: see _field_specs)
        for name, default, factory in _field_specs(cls):
            if name in values:
                value = values.pop(name)
            elif default is not MISSING:
                value = default
            elif callable(factory):
                value = factory()
            else:
                raise TypeError(f"{type(self).__name__}: {name} is required")
            setattr(self, name, value)
        if values:
            raise TypeError(f"{type(self).__name__} has no {', '.join(sorted(values))}")
        self.__post_init__()

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and all(
            getattr(self, f.name) == getattr(other, f.name) for f in fields(self))

    # mutable, so not hashable: defining __eq__ and no __hash__ sets __hash__ to None

    def __repr__(self) -> str:
        inner = ", ".join(f"{f.name}={getattr(self, f.name)!r}" for f in fields(self))
        return f"{type(self).__name__}({inner})"

    def __post_init__(self) -> None:
        problems = [*self._text_problems(), *self._own_problems(), *self._field_problems()]
        if problems:
            raise invalid(problems)
        self._check()

    def _own_problems(self) -> list[Problem]:
        out = []
        for name, checks in self._own_checks:
            value = getattr(self, name)
            for check in checks:
                refused = refused_by(name, value, check)
                if refused:
                    out += refused
                    break
        return out

    def _text_problems(self) -> list[Problem]:
        """Each field holding a control character its rule refuses (the fields named in
        FREE_TEXT may hold newlines and tabs)."""
        cls: type = type(self)  # (a plain type: see _field_specs)
        return [((name,), TEXT_RULE if name in FREE_TEXT else SINGLE_LINE_RULE, value)
                for name, _, _ in _field_specs(cls)
                if _control(value := getattr(self, name), name in FREE_TEXT)]

    def _field_problems(self) -> list[Problem]:
        """Each field refused by a check of its own: (location, why, value)."""
        return []

    def _check(self) -> None:
        """The checks across fields (ValueError: at this object's location)."""


@functools.cache
def _field_specs(cls: type) -> tuple[tuple[str, object, object], ...]:
    """(name, default, default factory) of each field of a site class (given as a plain
    ``type``: mypy takes a ``type[X]`` for unhashable where a cached function's argument
    must be hashable, python/mypy#11470)."""
    return tuple((f.name, f.default, f.default_factory) for f in fields(cls))


def default_of(cls: type[Strict], name: str) -> object:
    """A field's default value (its factory's, called)."""
    f = cls.__dataclass_fields__[name]
    return f.default_factory() if callable(f.default_factory) else f.default


def refused_by(name: str, value: object, check: Check) -> list[Problem]:
    """[(the field, why, its value)] where ``check`` raises ValueError, else []."""
    try:
        check(value)
    except ValueError as exc:
        return [((name,), str(exc), value)]
    return []


def validated_as(cls: type) -> object:
    """The type pydantic validates ``cls`` as: the class, with its ``_prepare`` (a function
    of the data as written, e.g. a section filled in) run before its fields are validated.
    Every site class is made ready for pydantic first (:func:`_for_pydantic`)."""
    _for_pydantic()
    prepare = cls.__dict__.get("_prepare")
    return Annotated[cls, Before(prepare.__func__)] if isinstance(prepare, staticmethod) \
        else cls


@functools.cache
def _for_pydantic() -> None:
    """Each field of every site class given the type pydantic reads (the module's
    docstring): ``Annotated[T, Constraints(...), <T's own markers>, FieldChecks(...)]``, its
    constraints first, then its type's markers, then the text rule and its own checks. Done
    once, when pydantic is first asked to validate (a warm start, which reads the profile
    cache, never is, and pays nothing for it); the codec reads the declared type inside."""
    classes: list[type[Strict]] = [Strict]
    while classes:
        cls = classes.pop()
        classes += cls.__subclasses__()
        for f in fields(cls):
            if any(isinstance(m, FieldChecks) for m in getattr(f.type, "__metadata__", ())):
                continue  # (a base's field, made ready with the base)
            base, markers = f.type, ()
            if get_origin(f.type) is Annotated:
                base, *rest = get_args(f.type)
                markers = tuple(rest)
            f.type = Annotated[(base, Constraints(**f.metadata.get(_CONSTRAINTS, {})),
                                *markers, FieldChecks(f.name, f.metadata.get(_CHECKS, ())))]
