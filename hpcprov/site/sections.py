"""The schedulers hpcprov knows, and each one's profile section, as data.

A profile names its scheduler (``scheduler: slurm``) and may carry that scheduler's section
(``slurm:``, ``pbs:``, ``lsf:``, ``flux:``). This module says, for each scheduler, where its backend
lives (:mod:`hpcprov.schedulers`, imported on first use) and which keys its section has
(type, default, meaning, an optional check). :mod:`hpcprov.site.types` makes the sections'
dataclasses from these tables, so the site never imports a backend; the backends read their
own table from here. Adding a scheduler is its backend module and one :data:`SCHEDULERS`
entry.

Plain data and pure checks only: no pydantic, no backend, nothing run.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, Literal, NamedTuple


class Setting(NamedTuple):
    """One key of a scheduler's profile section: its type, default and meaning, and an
    optional check that raises ValueError (with the reason) for a value it refuses."""

    annotation: Any
    default: Any
    description: str
    check: Callable[[Any], None] | None = None


class Registered(NamedTuple):
    """A scheduler: the module holding its backend (``BACKEND``) and its section's keys."""

    module: str
    settings: dict[str, Setting]


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


# ---------------------------------------------------------------- the registry

# The order is the one `hpcprov site draft` looks for the schedulers' marker commands on PATH
# in: Slurm first, since Debian's slurm-wlm-torque puts PBS commands (qstat, pbsnodes)
# beside it.
SCHEDULERS: dict[str, Registered] = {
    "slurm": Registered("hpcprov.schedulers.slurm", {
        "gpu_request": Setting(Literal["gres", "gpus_per_node", "gpus", "gpus_per_task",
                                       "none"],
                               "gres", "--gres=gpu:N per node, --gpus-per-node=N, "
                               "--gpus=total, --gpus-per-task=N/tasks per node (each "
                               "task bound to its own GPUs, as sites that bind GPUs ask), or "
                               "none: no GPU option at all (sites that give a job its nodes' "
                               "GPUs and refuse a GPU request)"),
        "task_request": Setting(Literal["per_node", "total"], "per_node",
                                "--ntasks-per-node or --ntasks"),
        "output": Setting(str, "%x_%j.out", "--output pattern of batch jobs"),
        "error": Setting(str | None, "%x_%j.err", "--error pattern (null: with the output)"),
        "shell": Setting(str, "/bin/bash -l", "interpreter line of job scripts"),
        "version": Setting(str | None, None,
                           "the cluster's Slurm version, e.g. '23.02' (sinfo --version): from "
                           "22.05 srun steps do not inherit --cpus-per-task, so hpcprov "
                           "exports SRUN_CPUS_PER_TASK before them (null: taken as 22.05 or "
                           "later)", check=check_slurm_version),
    }),
    "pbs": Registered("hpcprov.schedulers.pbs", {
        "shell": Setting(str, "/bin/bash", "interpreter line of job scripts"),
        "select_format": Setting(str, "{nodes}:ncpus={ncpus}:ngpus={gpus}",
                                 "value of -l select=; fields {nodes} {ncpus} {gpus} "
                                 "{mpiprocs} (nothing else in braces)", check=check_select),
        "output": Setting(str | None, None, "-o path of batch jobs"),
        "error": Setting(str | None, None, "-e path of batch jobs"),
        "join_output": Setting(bool, False, "-j oe: the error stream into the output"),
        "queue_always": Setting(bool, False, "the server has no usable default queue: every "
                                "job names its queue (-q), the default partition's too "
                                "(otherwise -q is written for another queue, or one "
                                "chosen with -p)"),
        "flags": Setting(dict[str, str], {}, FLAGS_DESCRIPTION.format(
            cmd="qsub", example="{project: -P} for a site that charges projects with "
            "qsub -P (-o project=grp writes #PBS -P grp, not -l project=grp)", letter="P"),
            check_flags),
    }),
    "lsf": Registered("hpcprov.schedulers.lsf", {
        "task_request": Setting(Literal["slots", "nnodes"], "slots",
                                'slots: -n TOTAL -R "span[ptile=N]"; nnodes: -nnodes N '
                                "(IBM CSM/jsrun systems)"),
        "gpu_request": Setting(Literal["gpu", "none"], "gpu",
                               '-gpu "num=N" per host (LSF 10.1), or no GPU request'),
        "output": Setting(str, "%J.out", "-o path of batch jobs (%J: the job id)"),
        "error": Setting(str | None, "%J.err", "-e path (null: with the output)"),
        "shell": Setting(str, "/bin/bash", "interpreter line of job scripts"),
        "launch_node_in_hostfile": Setting(
            bool, False, "the first line of $LSB_DJOB_HOSTFILE is the launch node (CSM "
            "systems): it runs no ranks"),
        "flags": Setting(dict[str, str], {}, FLAGS_DESCRIPTION.format(
            cmd="bsub", example="{account: -G} for a site that charges banks (user groups) "
            "with bsub -G (-o account=bank writes #BSUB -G bank, not -P bank)", letter="G"),
            check_flags),
    }),
    "flux": Registered("hpcprov.schedulers.flux", {
        "output": Setting(str, "flux-{{id}}.out",
                          "--output template of batch jobs ({{id}}: the job id)"),
        "error": Setting(str | None, None, "--error template (null: with the output)"),
        "shell": Setting(str, "/bin/bash", "interpreter line of job scripts"),
        "exclusive": Setting(bool, True, "--exclusive: the job's nodes are its own (their "
                             "GPUs too); false: only the slots it asks for"),
        "submit": Setting(Literal["auto", "parent", "nested"], "auto",
                          "where validate's jobs go when it runs inside a Flux job: parent "
                          "(flux --parent batch: queued in the enclosing instance), nested "
                          "(flux batch: inside the current allocation), or auto (parent "
                          "where $FLUX_URI says a Flux instance is around, else plain)"),
    }),
    "none": Registered("hpcprov.schedulers.local", {}),
}

# what a profile without a `scheduler:` key has
DEFAULT_SCHEDULER = "slurm"


def settings_of(name: str) -> dict[str, Setting]:
    """The keys of one scheduler's section (empty for a scheduler without one)."""
    return SCHEDULERS[name].settings
