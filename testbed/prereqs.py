"""What this machine needs before the testbed can come up: root, the packages, and a
state directory outside the paths that are private to each node."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from .system import sbin_path

# (command, Debian package) the testbed cannot work without.
REQUIRED_COMMANDS = [
    ("slurmctld", "slurmctld"),
    ("slurmd", "slurmd"),
    ("slurmstepd", "slurmd"),
    ("sbatch", "slurm-client"),
    ("srun", "slurm-client"),
    ("sinfo", "slurm-client"),
    ("scontrol", "slurm-client"),
    ("qsub", "slurm-wlm-torque"),
    ("munged", "munge"),
    ("sshd", "openssh-server"),
    ("ssh", "openssh-client"),
    ("ssh-keygen", "openssh-client"),
    ("ip", "iproute2"),
    ("tc", "iproute2"),
    ("nsenter", "util-linux"),
    ("unshare", "util-linux"),
    ("mpirun", "openmpi-bin"),
    ("mpiexec.hydra", "mpich"),
]
ACCOUNTING_COMMANDS = [
    ("slurmdbd", "slurmdbd"),
    ("sacct", "slurm-client"),
    ("mariadbd", "mariadb-server"),
    ("mariadb-install-db", "mariadb-server"),
]
LMOD_INIT = "/usr/share/lmod/lmod/init/bash"
NODE_PRIVATE = ("/tmp", "/dev/shm", "/run")  # each node mounts its own


def problems(state_dir: Path, accounting: bool) -> list[str]:
    """Why the testbed cannot be brought up here ([] if it can), one line each."""
    probs = []
    if os.geteuid() != 0:
        probs.append("must run as root (it creates network namespaces and starts "
                     "Slurm daemons)")
    missing = missing_packages(accounting)
    if missing:
        probs.append("missing packages: " + " ".join(missing)
                     + " (install with: bash testbed/install-deps.sh)")
    sd = str(state_dir)
    for private in NODE_PRIVATE:
        if sd == private or sd.startswith(private + "/"):
            probs.append(f"state dir {sd} must not be under {private} "
                         "(node-local on the compute nodes)")
    return probs


def missing_packages(accounting: bool) -> list[str]:
    """Debian packages whose commands are missing (and ``lmod`` without Lmod)."""
    cmds = REQUIRED_COMMANDS + (ACCOUNTING_COMMANDS if accounting else [])
    path = sbin_path()
    missing = sorted({pkg for cmd, pkg in cmds if not shutil.which(cmd, path=path)})
    if not os.path.exists(LMOD_INIT):
        missing.append("lmod")
    return missing
