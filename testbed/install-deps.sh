#!/usr/bin/env bash
# Install (idempotently) the Debian 12 packages the hpcprov Slurm testbed needs.
#
#   sudo bash testbed/install-deps.sh
#
# Safe to run again: apt-get skips what is already installed.  No service is
# started by the package scripts: while installing, a policy-rc.d that denies
# service starts is put in place (and removed again if it was not there before),
# because the testbed starts its own munged/slurmctld/slurmd/sshd/mariadbd with
# its own configuration and state directory.
set -euo pipefail

if [ "$(id -u)" -ne 0 ]; then
    echo "install-deps.sh: must run as root" >&2
    exit 1
fi

PACKAGES=(
    # Slurm 22.05 (controller, node daemon, client commands, plugins incl. mpi/pmix,
    # job_submit/lua), the PBS/Torque wrappers (qsub, qstat, ...) and slurmdbd.
    slurm-wlm slurmctld slurmd slurm-client slurm-wlm-basic-plugins
    slurm-wlm-torque slurmdbd
    # accounting database
    mariadb-server mariadb-client
    # authentication
    munge
    # environment modules
    lmod
    # MPI (OpenMPI 4.1 with PMIx) and the toolchain the modulefiles point at
    openmpi-bin libopenmpi-dev g++ gcc make cmake
    # MPICH with its Hydra mpiexec (mpiexec.hydra; Open MPI keeps the plain names): the
    # testbed-mpiexec profile's launcher, through the mpich/4.0 module
    mpich
    # ssh between the node namespaces (horovodrun / mpirun -H)
    openssh-server openssh-client
    # the testbed-container profile: Charliecloud's ch-run starts its ranks in a directory
    # image that testbed/image/build-image.sh builds with mmdebstrap (Debian 12 + pip)
    charliecloud-runtime mmdebstrap
    # namespaces, bridge, veth, processes
    iproute2 util-linux procps psmisc
)

export DEBIAN_FRONTEND=noninteractive

missing=()
for p in "${PACKAGES[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
        missing+=("$p")
    fi
done

if [ "${#missing[@]}" -eq 0 ]; then
    echo "install-deps.sh: all ${#PACKAGES[@]} packages already installed"
    exit 0
fi

echo "install-deps.sh: installing ${missing[*]}"

policy=/usr/sbin/policy-rc.d
added_policy=0
if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\n# added by hpcprov testbed/install-deps.sh\nexit 101\n' >"$policy"
    chmod 755 "$policy"
    added_policy=1
fi
cleanup() {
    if [ "$added_policy" = 1 ]; then
        rm -f "$policy"
    fi
}
trap cleanup EXIT

# Wait for another apt/dpkg run (e.g. a parallel CI step) instead of failing.
APT_OPTS=(-o DPkg::Lock::Timeout=600)
for _ in $(seq 1 120); do
    if ! command -v fuser >/dev/null || ! fuser /var/lib/apt/lists/lock /var/lib/dpkg/lock-frontend >/dev/null 2>&1; then
        break
    fi
    sleep 5
done
apt-get "${APT_OPTS[@]}" update -q
apt-get "${APT_OPTS[@]}" install -y -q --no-install-recommends "${missing[@]}"

echo "install-deps.sh: done"
