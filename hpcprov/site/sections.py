"""The schedulers hpcprov knows, and each one's profile section, declared.

A profile names its scheduler (``scheduler: slurm``) and may carry that scheduler's section
(``slurm:``, ``pbs:``, ``lsf:``, ``flux:``). This module says, for each scheduler, where its backend
lives (:mod:`hpcprov.schedulers`, imported on first use) and declares its section as a class
(:class:`SlurmOptions`...: each key's type, default, meaning and checks), which
:class:`hpcprov.site.types.Site` holds as a field and its backend reads, typed
(``Backend[SlurmOptions]``: :meth:`hpcprov.schedulers.base.Backend.section`), so the site
never imports a backend. Adding a scheduler is its backend module, its section's class
and one :data:`SCHEDULERS` entry.

Declarations and pure checks only: no pydantic, no backend, nothing run. (Annotations are
evaluated: no ``from __future__ import annotations``, as in :mod:`hpcprov.site.types`.)
"""

import re
from dataclasses import dataclass
from typing import Literal, NamedTuple

from hpcprov.site.declare import F, Strict


class Section(Strict):
    """A scheduler's profile section (``slurm:``, ``pbs:``...): the keys its class
    declares; a backend reads its own (:meth:`hpcprov.schedulers.base.Backend.section`)."""


# ---------------------------------------------------------------- the checks (pure)

SLURM_VERSION = r"^(\d+)\.(\d+)(\.\d+)?$"


def check_slurm_version(text: str | None) -> None:
    """Refuse a Slurm version that is not MAJOR.MINOR[.PATCH] (as sinfo --version says)."""
    if text is not None and not re.match(SLURM_VERSION, text):
        raise ValueError(f"{text!r} is not a Slurm version: write it as sinfo --version "
                         "prints it, e.g. '23.02' or '23.02.7' (quoted)")


SELECT_FIELDS = ("nodes", "ncpus", "gpus", "mpiprocs")
SELECT_FIELD = r"\{([^{}]*)\}"


def check_select(text: str) -> None:
    """Refuse a select_format with anything in braces but the four field names (it is
    profile text, never a Python format string: no specs, conversions or attributes)."""
    for name in re.findall(SELECT_FIELD, text):
        if name not in SELECT_FIELDS:
            raise ValueError(f"{{{name}}} is not a field: use {{nodes}}, {{ncpus}}, {{gpus}} "
                             "or {mpiprocs}")
    if "{" in re.sub(SELECT_FIELD, "", text) or "}" in re.sub(SELECT_FIELD, "", text):
        raise ValueError("unbalanced { or }: fields are {nodes}, {ncpus}, {gpus}, {mpiprocs}")


FLAG = r"^-[A-Za-z][A-Za-z0-9_]*$"
FLAGS_DESCRIPTION = (
    "job options this site writes as a flag of {cmd} other than the one hpcprov would: "
    "NAME: FLAG (as the site's guide spells it, one dash), e.g. {example}. The option NAME "
    "(-o NAME=VALUE, a partition's options, policies.required_options and their defaults, "
    "policies.forbidden_options) is written as FLAG, and the flag's own name ({letter}) "
    "is the same option: forbidding either refuses both. Without it, a name spelled as "
    "{cmd}'s own flag without its dash ({letter}) is written as that flag")


def check_flags(flags: dict[str, str]) -> None:
    """Refuse a declared flag that is no single-dash flag (``-G``, ``-alloc_flags``)."""
    for name, flag in flags.items():
        if not re.match(r"^[A-Za-z][A-Za-z0-9_-]*$", name):
            raise ValueError(f"{name!r} is not an option name: a letter, then letters, "
                             "digits, - and _ (account, alloc_flags)")
        if not isinstance(flag, str) or not re.match(FLAG, flag):
            raise ValueError(f"{name}: {flag!r} is not a flag as the scheduler spells it: "
                             "one dash and its name, e.g. -G or -alloc_flags")



# ---------------------------------------------------------------- the sections


@dataclass(kw_only=True, init=False, repr=False, eq=False)
class SlurmOptions(Section):
    """Settings of slurm jobs (only in a profile whose scheduler is slurm)."""

    gpu_request: Literal["gres", "gpus_per_node", "gpus", "gpus_per_task", "none"] = F(
        "gres", description="--gres=gpu:N per node, --gpus-per-node=N, --gpus=total, "
        "--gpus-per-task=N/tasks per node (each task bound to its own GPUs, as sites that "
        "bind GPUs ask), or none: no GPU option at all (sites that give a job its nodes' "
        "GPUs and refuse a GPU request)")
    task_request: Literal["per_node", "total"] = F(
        "per_node", description="--ntasks-per-node or --ntasks")
    output: str = F("%x_%j.out", description="--output pattern of batch jobs")
    error: str | None = F("%x_%j.err", description="--error pattern (null: with the output)")
    shell: str = F("/bin/bash -l", description="interpreter line of job scripts")
    version: str | None = F(
        None, check=check_slurm_version, description="the cluster's Slurm version, e.g. "
        "'23.02' (sinfo --version): from 22.05 srun steps do not inherit --cpus-per-task, "
        "so hpcprov exports SRUN_CPUS_PER_TASK before them (null: taken as 22.05 or later)")


@dataclass(kw_only=True, init=False, repr=False, eq=False)
class PbsOptions(Section):
    """Settings of pbs jobs (only in a profile whose scheduler is pbs)."""

    shell: str = F("/bin/bash", description="interpreter line of job scripts")
    select_format: str = F(
        "{nodes}:ncpus={ncpus}:ngpus={gpus}", check=check_select,
        description="value of -l select=; fields {nodes} {ncpus} {gpus} {mpiprocs} "
        "(nothing else in braces)")
    output: str | None = F(None, description="-o path of batch jobs")
    error: str | None = F(None, description="-e path of batch jobs")
    join_output: bool = F(False, description="-j oe: the error stream into the output")
    queue_always: bool = F(
        False, description="the server has no usable default queue: every job names its "
        "queue (-q), the default partition's too (otherwise -q is written for another "
        "queue, or one chosen with -p)")
    flags: dict[str, str] = F(factory=dict, check=check_flags, description=FLAGS_DESCRIPTION
                              .format(cmd="qsub", example="{project: -P} for a site that "
                                      "charges projects with qsub -P (-o project=grp writes "
                                      "#PBS -P grp, not -l project=grp)", letter="P"))


@dataclass(kw_only=True, init=False, repr=False, eq=False)
class LsfOptions(Section):
    """Settings of lsf jobs (only in a profile whose scheduler is lsf)."""

    task_request: Literal["slots", "nnodes"] = F(
        "slots", description='slots: -n TOTAL -R "span[ptile=N]"; nnodes: -nnodes N (IBM '
        "CSM/jsrun systems)")
    gpu_request: Literal["gpu", "none"] = F(
        "gpu", description='-gpu "num=N" per host (LSF 10.1), or no GPU request')
    output: str = F("%J.out", description="-o path of batch jobs (%J: the job id)")
    error: str | None = F("%J.err", description="-e path (null: with the output)")
    shell: str = F("/bin/bash", description="interpreter line of job scripts")
    launch_node_in_hostfile: bool = F(
        False, description="the first line of $LSB_DJOB_HOSTFILE is the launch node (CSM "
        "systems): it runs no ranks")
    flags: dict[str, str] = F(factory=dict, check=check_flags, description=FLAGS_DESCRIPTION
                              .format(cmd="bsub", example="{account: -G} for a site that "
                                      "charges banks (user groups) with bsub -G (-o "
                                      "account=bank writes #BSUB -G bank, not -P bank)",
                                      letter="G"))


@dataclass(kw_only=True, init=False, repr=False, eq=False)
class FluxOptions(Section):
    """Settings of flux jobs (only in a profile whose scheduler is flux)."""

    output: str = F("flux-{{id}}.out",
                    description="--output template of batch jobs ({{id}}: the job id)")
    error: str | None = F(None, description="--error template (null: with the output)")
    shell: str = F("/bin/bash", description="interpreter line of job scripts")
    exclusive: bool = F(True, description="--exclusive: the job's nodes are its own (their "
                        "GPUs too); false: only the slots it asks for")
    submit: Literal["auto", "parent", "nested"] = F(
        "auto", description="where validate's jobs go when it runs inside a Flux job: "
        "parent (flux --parent batch: queued in the enclosing instance), nested (flux "
        "batch: inside the current allocation), or auto (parent where $FLUX_URI says a "
        "Flux instance is around, else plain)")


def check_resource(name: str | None) -> None:
    """Refuse a Grid Engine resource name that is not one (``qconf -sc`` names)."""
    if name is not None and not re.match(r"^[A-Za-z_][A-Za-z0-9_.-]*$", name):
        raise ValueError(f"{name!r} is not a Grid Engine resource name (qconf -sc lists them: "
                         "letters, digits, _ . -)")


PE_NAME = r"^(?=.)([A-Za-z_][A-Za-z0-9_.-]*)?(\{(per_node|partition)\}[A-Za-z0-9_.-]*)?$"


def check_pe(name: str | None) -> None:
    """Refuse a parallel environment name that is not one (``qconf -spl`` names), which may
    hold ``{per_node}`` once (``mpi{per_node}``: the PE of that many slots per host)."""
    if name is not None and not re.match(PE_NAME, name):
        raise ValueError(f"{name!r} is not a parallel environment's name (qconf -spl lists "
                         "them: letters, digits, _ . -; {per_node} once for the ranks per "
                         "node, e.g. mpi{per_node})")


def check_pes(names: dict[str, str]) -> None:
    """Refuse a partition's parallel environment name that is not one."""
    for partition, pe in names.items():
        check_pe(pe)
        check_resource(partition)


@dataclass(kw_only=True, init=False, repr=False, eq=False)
class GridengineOptions(Section):
    """Settings of gridengine jobs (only in a profile whose scheduler is gridengine)."""

    shell: str = F("/bin/bash", description="interpreter of job scripts (#$ -S, and the "
                   "script's #! line)")
    pe: str | None = F("mpi", check=check_pe, description="the parallel environment "
                       "a job's slots are asked through (-pe PE NODESxRANKS; qconf -spl lists "
                       "them); {per_node} in it: the ranks per node (mpi{per_node}: mpi8 for "
                       "8 ranks per node, at sites whose PEs place a fixed number of slots "
                       "on each host); null: none (node_resource sizes the jobs)")
    pe_by_partition: dict[str, str] = F(
        factory=dict, check=check_pes, description="the parallel environment of a "
        "partition (queue) whose jobs use another than pe, e.g. {gpu.q: mpi-gpu}")
    pe_rule: Literal["fill_up", "round_robin", "fixed", "pe_slots"] = F(
        "fill_up", description="the PE's allocation_rule (qconf -sp PE): fill_up and "
        "round_robin place a job's slots by the hosts' free slots, so a multi-node job "
        "without GPUs may not get its ranks per node (lint warns); fixed: a number, the "
        "ranks per node (pe: mpi{per_node}); pe_slots: one host")
    node_resource: str | None = F(
        None, check=check_pe, description="a site that sizes jobs in its own node units: "
        "the resource a job asks for N of, for N nodes (-l f_node=2, -l node_f=2), instead "
        "of a parallel environment; {partition}: the partition's name, where the site's "
        "partitions are its resource types (node_f, node_h...: no queue is named then)")
    gpu_resource: str | None = F(
        "gpu", check=check_resource, description="the consumable GPUs are asked by, per slot "
        "(-l gpu=1: each rank its GPU; with a $fill_up PE that also puts the ranks of a node "
        "on one host); null: no GPU request (node_resource's units bring their GPUs)")
    require_h_rt: bool = F(False, description="the site refuses a job without -l h_rt: a "
                           "job without a time limit is a lint error, not a warning")
    cwd: bool = F(True, description="-cwd: the job runs in the folder it was submitted from "
                  "(otherwise in $HOME)")
    output: str | None = F(None, description="-o path of batch jobs (default: Grid Engine's, "
                           "NAME.oJOBID)")
    join_output: bool = F(True, description="-j y: the error stream into the output")
    flags: dict[str, str] = F(factory=dict, check=check_flags, description=FLAGS_DESCRIPTION
                              .format(cmd="qsub", example="{group: -g} for a site that "
                                      "charges groups with qsub -g (-o group=grp writes "
                                      "#$ -g grp, not -l group=grp)", letter="g"))


# ---------------------------------------------------------------- the registry


class Registered(NamedTuple):
    """A scheduler: the module holding its backend (``BACKEND``) and its section's class
    (None: it has none)."""

    module: str
    section: type[Section] | None


# The order is the one `hpcprov site draft` looks for the schedulers' marker commands on PATH
# in: Slurm first, since Debian's slurm-wlm-torque puts PBS commands (qstat, pbsnodes)
# beside it.
SCHEDULERS: dict[str, Registered] = {
    "slurm": Registered("hpcprov.schedulers.slurm", SlurmOptions),
    "pbs": Registered("hpcprov.schedulers.pbs", PbsOptions),
    "lsf": Registered("hpcprov.schedulers.lsf", LsfOptions),
    "flux": Registered("hpcprov.schedulers.flux", FluxOptions),
    "gridengine": Registered("hpcprov.schedulers.gridengine", GridengineOptions),
    "none": Registered("hpcprov.schedulers.local", None),
}

# each scheduler's section, by the scheduler's name (the site's fields of the same names)
SCHEDULER_SECTIONS: dict[str, type[Section]] = {
    name: reg.section for name, reg in SCHEDULERS.items() if reg.section}

# what a profile without a `scheduler:` key has
DEFAULT_SCHEDULER = "slurm"
