"""The rank contract's data: which variables each starter gives its ranks.

A rank started by srun, flux run, mpirun, mpiexec, jsrun or horovodrun knows who it is only by its
starter's variables; torch.distributed's ``env://`` rendezvous wants RANK, WORLD_SIZE,
LOCAL_RANK (and MASTER_ADDR, MASTER_PORT). hpcprov starts each such rank through a small
shim (``rank_env.sh``) that reads the first of its launcher's starters whose rank and size
are both set and exports torch's variables. This module says what the shim reads; the shim
says how; which starters each launcher kind's ranks may carry is that kind's data
(:mod:`hpcprov.site.launcher_kinds`).
"""

from __future__ import annotations

import re
from typing import NamedTuple


class Starter(NamedTuple):
    """The variables one starter sets in each rank (None: it sets no such variable; the
    shim then derives it from the geometry hpcprov planned)."""

    rank: str
    size: str | None
    local_rank: str | None
    local_size: str | None
    node_rank: str | None


STARTERS: dict[str, Starter] = {
    "horovod": Starter("HOROVOD_RANK", "HOROVOD_SIZE", "HOROVOD_LOCAL_RANK",
                       "HOROVOD_LOCAL_SIZE", "HOROVOD_CROSS_RANK"),
    # (OMPI_COMM_WORLD_NODE_RANK is not the node's index: a rank among the node's processes
    # of all jobs)
    "openmpi": Starter("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
                       "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE", None),
    # HPE Cray's PALS (mpiexec): its own ids, the size from Cray PMI
    "pals": Starter("PALS_RANKID", "PMI_SIZE", "PALS_LOCAL_RANKID", "PALS_LOCAL_SIZE",
                    "PALS_NODEID"),
    "cray-pmi": Starter("PMI_RANK", "PMI_SIZE", "PMI_LOCAL_RANK", "PMI_LOCAL_SIZE", None),
    # MPICH's and Intel MPI's Hydra
    "hydra": Starter("PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS", None),
    "mvapich": Starter("MV2_COMM_WORLD_RANK", "MV2_COMM_WORLD_SIZE",
                       "MV2_COMM_WORLD_LOCAL_RANK", "MV2_COMM_WORLD_LOCAL_SIZE", None),
    "jsrun": Starter("JSM_NAMESPACE_RANK", "JSM_NAMESPACE_SIZE", "JSM_NAMESPACE_LOCAL_RANK",
                     "JSM_NAMESPACE_LOCAL_SIZE", None),
    "pmix": Starter("PMIX_RANK", None, None, None, None),
    "slurm": Starter("SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", None, "SLURM_NODEID"),
    # flux run (flux-core's job shell): no local size or node index of its own
    "flux": Starter("FLUX_TASK_RANK", "FLUX_JOB_SIZE", "FLUX_TASK_LOCAL_ID", None, None),
}

# torch.distributed's variables, which the shim gives every rank: the names a command may
# use as $NAME or ${NAME} (`python train.py --node_rank=$NODE_RANK`, as sites' guides write
# it), replaced on each rank with its own values; no other name in a command is
CONTRACT = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "NODE_RANK", "MASTER_ADDR",
            "MASTER_PORT")


def table_line(starters: tuple[str, ...], kind: str = "") -> str:
    """The shim's table of a launcher kind's ``starters`` (its :data:`Kind.starters
    <hpcprov.site.launcher_kinds.Kind>`): the kind's name (``hpcprov_kind``, which the shim
    names where no starter started a rank of a planned world of more than one), then a bash
    array, one entry per starter (``source rank size local_rank local_size node_rank``, ``-``
    for none), in double quotes (names and dashes only: nothing in them expands), so the
    table reads plainly inside the single quotes of ``hpcprov_rank=``."""
    entries = [" ".join([name, *(v or "-" for v in STARTERS[name])])
               for name in starters]
    assert all(re.fullmatch(r"[A-Za-z0-9_ -]+", e) for e in entries), entries
    assert re.fullmatch(r"[A-Za-z0-9_-]*", kind), kind
    return (f"hpcprov_kind={kind or '-'} hpcprov_sets=("
            + " ".join(f'"{e}"' for e in entries) + ")"
            + f' hpcprov_contract=" {" ".join(CONTRACT)} "')
