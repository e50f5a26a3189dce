"""Scheduler backends: one module per scheduler, looked up by the profile's name for it.

``backend(name)`` returns the backend object of :mod:`hpcprov.schedulers.base`'s interface;
``of(site)`` the one a site uses; ``drafting()`` those `hpcprov site draft` can ask. Modules
are imported on first use.
"""

from __future__ import annotations

import importlib
from functools import cache
from typing import TYPE_CHECKING

from hpcprov.site.kinds import SCHEDULER_BACKENDS

if TYPE_CHECKING:
    from hpcprov.schedulers.base import Backend
    from hpcprov.site.types import Site


@cache
def backend(name: str) -> Backend:
    """The backend registered under ``name`` (a profile's ``scheduler:`` value)."""
    module = importlib.import_module(SCHEDULER_BACKENDS[str(name)])
    found: Backend = module.BACKEND  # each backend module's one object (the registry's rule)
    return found


def of(site: Site) -> Backend:
    """The backend of a site (the model or its cached view)."""
    return backend(site.scheduler.value if hasattr(site.scheduler, "value") else site.scheduler)


def all_backends() -> list[Backend]:
    """Every registered backend, in registry order."""
    return [backend(name) for name in SCHEDULER_BACKENDS]


def drafting() -> list[Backend]:
    """The backends `hpcprov site draft` can ask (those with a ``marker`` command), in
    registry order: the order it looks for their markers on PATH in."""
    return [b for b in all_backends() if b.marker]
