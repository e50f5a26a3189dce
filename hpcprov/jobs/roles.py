"""Which of a site's launchers can run which validation job, and why a job cannot be run.

Every launcher whose kind starts ranks gives each rank torch's environment contract (the
rank shim, or torchrun itself), so torch.distributed's checks can run through any of them:
the site's default launcher where it can, else the one of the kind validation prefers
(each kind's ``torch_order`` in :mod:`hpcprov.site.launcher_kinds`). Horovod's checks run
through the launchers of its roles: Gloo through a horovodrun whose controller is Gloo, MPI
through an MPI launcher (mpirun, mpiexec, ibrun, jsrun, lrun, flux) or an srun that names
the MPI's plugin (``mpi: pmix``: srun --mpi=pmix, where a site starts MPI programs so).
What cannot be run is said, with the reason and the fix: validate reports it as a SKIPPED
row, or refuses a check named on its command line; ``site check`` flags a site where only
the env check could run.

Pure functions of the site: nothing run.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hpcprov import schedulers
from hpcprov.site.launcher_kinds import KINDS, kind_of

if TYPE_CHECKING:
    from hpcprov.site.types import Site

# the kinds that start Horovod's ranks over MPI, for a fix's wording (and srun, which does
# where it names the MPI's plugin: Kind.horovod "pmi")
MPI_KINDS = tuple(name for name, k in KINDS.items() if k.horovod == "mpi")
# the kinds of the site's launchers that start a job's tasks where the scheduler has no
# starter of its own (an MPI's launchers); ibrun only for ranks (it takes the job's tasks)
MPI_STARTER_KINDS = tuple(name for name, k in KINDS.items()
                          if k.horovod == "mpi" and k.scheduler is None)
PER_NODE_KINDS = tuple(k for k in MPI_STARTER_KINDS if k != "ibrun")


def mpi_launcher(site: Site, *, per_node: bool = False) -> str | None:
    """The site's launcher that starts a job's tasks (one per node where ``per_node``) where
    the scheduler has no starter of its own: the default launcher where it is of an MPI
    kind, else the first such in the profile's order; None where the site has none."""
    kinds = PER_NODE_KINDS if per_node else MPI_STARTER_KINDS
    able = [n for n, launcher in site.launchers.items() if str(launcher.kind.value) in kinds]
    if site.default_launcher in able:
        return site.default_launcher
    return able[0] if able else None


def no_starter(site: Site, name: str, *, per_node: bool = False) -> str | None:
    """Why nothing can start launcher ``name``'s tasks (its ranks, or one process per node
    where ``per_node``): the scheduler has no starter of its own and the site no MPI
    launcher; None where something can."""
    backend = schedulers.of(site)
    own = backend.node_starter_name if per_node else backend.task_starters
    if own or mpi_launcher(site, per_node=per_node) is not None:
        return None
    launcher = site.launchers[name]
    what = "one process per node" if per_node else "its ranks"
    kinds = ", ".join(PER_NODE_KINDS if per_node else MPI_STARTER_KINDS)
    return (f"launcher {name} ({launcher.kind.value}) needs something to start {what}: "
            f"{backend.title} jobs have no task starter of their own and the site has no "
            f"MPI launcher ({kinds}) to start them: add one under launchers")


def unusable(site: Site, name: str) -> str | None:
    """Why launcher ``name`` cannot start ranks on this site (None where it can): nothing
    starts them (:func:`unstartable`), or they start in an image and the site names none."""
    if (why := unstartable(site, name)) is not None:
        return why
    launcher = site.launchers[name]
    if (kind_of(launcher.kind).container or launcher.runtime) \
            and not site.containers.default_image:
        return (f"launcher {name} starts its ranks in the site's image, and the site names "
                "none: set containers.default_image")
    return None


def unstartable(site: Site, name: str) -> str | None:
    """Why nothing on this site can start launcher ``name``'s ranks (None where something
    can): its kind's starter is another scheduler's, or it needs a task or per-node starter
    the site lacks. The one rule for validate, site check and every launch line."""
    launcher = site.launchers[name]
    kind = kind_of(launcher.kind)
    backend = schedulers.of(site)
    if kind.scheduler and kind.scheduler != backend.name:
        return (f"launcher {name} ({launcher.kind.value}) starts its ranks with "
                f"{schedulers.backend(kind.scheduler).title}'s own starter, which "
                f"{backend.title} jobs do not have: it needs a site with scheduler: "
                f"{kind.scheduler}")
    if kind.task_starter and (why := no_starter(site, name)):
        return why
    if kind.per_node and launcher.per_node_wrapper in ("scheduler", "srun") \
            and (why := no_starter(site, name, per_node=True)):
        return why
    return None


def can_run_torch(site: Site, name: str) -> bool:
    """Whether torch.distributed's checks can run through launcher ``name``."""
    return kind_of(site.launchers[name].kind).torch_order is not None \
        and unusable(site, name) is None


def torch_launchers(site: Site) -> list[str]:
    """The launchers torch.distributed's checks can run through, the one validate uses by
    default first: the site's default launcher where it can, then by each kind's
    ``torch_order`` (and profile order)."""
    able = [(kind_of(launcher.kind).torch_order or 0, i, name)
            for i, (name, launcher) in enumerate(site.launchers.items())
            if can_run_torch(site, name)]
    ranked = [name for _o, _i, name in sorted(able)]
    default = site.default_launcher
    if default in ranked:
        ranked.remove(default)
        ranked.insert(0, default)
    return ranked


def torch_launcher(site: Site) -> str | None:
    """The launcher validate runs torch.distributed's checks through, or None."""
    able = torch_launchers(site)
    return able[0] if able else None


def has_horovod(site: Site) -> bool:
    return site.horovod.source not in ("none",)


def horovod_role(site: Site, name: str) -> str | None:
    """The Horovod check (``horovod-gloo``, ``horovod-mpi``) launcher ``name`` runs, or None."""
    if not has_horovod(site) or unusable(site, name) is not None:
        return None
    launcher = site.launchers[name]
    role, controllers = kind_of(launcher.kind).horovod, site.horovod.controllers
    if role == "controller" and launcher.controller == "gloo" and "gloo" in controllers \
            and schedulers.of(site).horovodrun_gloo:
        return "horovod-gloo"
    if "mpi" in controllers and (role == "mpi" or (role == "pmi" and launcher.mpi)):
        return "horovod-mpi"
    return None


def horovod_launchers(site: Site) -> dict[str, str]:
    """impl -> launcher for Horovod's checks: the site's default launcher where it has the
    role, else the first in profile order; an srun naming the MPI's plugin (Kind.horovod
    "pmi") only where no MPI launcher has the role (``--launchers`` names it otherwise)."""
    order = [site.default_launcher, *(n for n in site.launchers if n != site.default_launcher)]
    order.sort(key=lambda n: n in site.launchers
               and kind_of(site.launchers[n].kind).horovod == "pmi")  # stable
    out: dict[str, str] = {}
    for name in order:
        if name in site.launchers and (impl := horovod_role(site, name)):
            out.setdefault(impl, name)
    return out


def no_torch_launcher(site: Site) -> str:
    """Why no launcher of the site runs torch.distributed's checks, with the fix."""
    why = [w for name in site.launchers if (w := unusable(site, name))]
    here = schedulers.of(site).name  # a kind of another scheduler's starter runs not here
    kinds = sorted(n for n, k in KINDS.items()
                   if k.torch_order is not None and k.scheduler in (None, here))
    return ("no launcher of the site starts torch.distributed's ranks"
            + (f" ({'; '.join(why)})" if why else "")
            + f": add a launcher of kind {', '.join(kinds)} to the profile")


def horovod_gap(site: Site, impl: str) -> str:
    """Why Horovod's ``impl`` (horovod-gloo, horovod-mpi) has no launcher, with the fix."""
    if impl == "horovod-gloo":
        if not schedulers.of(site).horovodrun_gloo:
            return (f"Horovod's Gloo controller cannot start ranks in "
                    f"{schedulers.of(site).title} jobs: its MPI check runs instead where the "
                    "build has MPI")
        return ("no horovodrun launcher with controller: gloo: add one (kind: horovodrun, "
                "controller: gloo)")
    backend = schedulers.of(site)
    here = [name for name, k in KINDS.items()
            if k.horovod == "mpi" and k.scheduler in (None, backend.name)]
    pmi = [name for name, k in KINDS.items()
           if k.horovod == "pmi" and k.scheduler in (None, backend.name)]
    unnamed = [n for n, launcher in site.launchers.items()
               if kind_of(launcher.kind).horovod == "pmi" and not launcher.mpi]
    if unnamed:  # the site starts its MPI programs with its scheduler's starter
        return (f"no MPI launcher for Horovod's MPI controller: launcher {unnamed[0]} "
                f"({site.launchers[unnamed[0]].kind.value}) starts MPI ranks once it names "
                f"the MPI's plugin: set launchers.{unnamed[0]}.mpi (e.g. pmix or pmi2: "
                "`srun --mpi=list` lists the site's), or add a launcher of kind "
                + ", ".join(here))
    with_pmi = [f"{k} with mpi: (e.g. pmix)" for k in pmi]
    return (f"no MPI launcher for Horovod's MPI controller: add a launcher of kind "
            f"{', '.join([*with_pmi, *here])}")


def validation_gaps(site: Site) -> list[str]:
    """What validate cannot plan beyond its env check on this site: empty where it plans
    allreduce and training; else why not, with the fix."""
    if torch_launcher(site) is not None or horovod_launchers(site):
        return []
    return [f"validate can plan only its env check here (no allreduce, no training): "
            f"{no_torch_launcher(site)}"]
