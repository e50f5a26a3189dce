"""What a command changes of a site for one run, in one place: ``--env NAME`` (the
environment's name) and ``--container IMAGE`` (provision and run through one of the site's
container images). The result is the same validated form every generator reads
(:class:`~hpcprov.site.types.Site`), the changed parts validated by the model as a
profile's would be; an unusable value is a one-line :class:`~hpcprov.core.errors.UsageError`.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from hpcprov.core.errors import UsageError

if TYPE_CHECKING:
    from hpcprov.site.types import Site


def with_overrides(site: Site, *, env_name: str | None = None,
                   container: str | None = None) -> Site:
    """``site`` with the environment named ``env_name`` and/or provisioned through its
    container image ``container`` (each only where given)."""
    if not env_name and not container:
        return site
    from pydantic import ValidationError

    from hpcprov.site.codec import dump
    from hpcprov.site.model import PythonStack, validate

    python = dump(site.python)
    horovod = site.horovod
    if env_name:
        python["env_name"] = env_name
    if container:
        images = site.containers.images
        if container not in images:
            raise UsageError(f"--container {container!r}: site {site.name} has "
                             f"{', '.join(images) or 'no container images'} "
                             "(containers.images)")
        python.update(backend="container",
                      container={"image": container, "source": images[container]})
        if horovod.source != "none":  # an image without Horovod stays without it
            horovod = dataclasses.replace(horovod, source="container")
    try:
        stack = validate(python, PythonStack)
    except ValidationError as exc:
        if env_name and any(e["loc"][:1] == ("env_name",) for e in exc.errors()):
            raise UsageError(f"--env {env_name!r}: use letters, digits, '.', '_', '+', '-' "
                             "(starting with a letter or digit)") from None
        raise UsageError(f"--container {container!r}: {exc.errors()[0]['msg']}") from None
    try:  # the site's own checks again, on the changed site
        return dataclasses.replace(site, python=stack, horovod=horovod)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"])
        raise UsageError(f"{where}: {err['msg'].removeprefix('Value error, ')}") from None
    except ValueError as exc:
        raise UsageError(str(exc)) from None
