#!/usr/bin/env bash
# Install (idempotently) the Debian 12 packages the hpcprov testbed needs (Slurm, and
# Grid Engine for `up --scheduler gridengine`).
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
    # the libraries of Debian's Grid Engine binaries, unpacked below
    libjemalloc2 libtirpc3 libdb5.3 libhwloc15 libmunge2 libssl3
)

# Son of Grid Engine 8.1.9 (`up --scheduler gridengine`): Debian's packages, downloaded
# with apt (checked against the archive's signed index) and unpacked into GE_PREFIX, not
# installed: gridengine-client conflicts with slurm-wlm-torque (both ship /usr/bin/qsub, and
# installing it removes the Torque wrappers the Slurm testbed tests). The testbed puts
# GE_PREFIX/usr/lib/gridengine first on PATH for Grid Engine's clients only. Debian's
# sge_qmaster loads its spooling library from /usr/lib/gridengine (compiled in): that path
# becomes a link to the unpacked binaries when nothing else is there.
GE_PACKAGES=(gridengine-common gridengine-client gridengine-exec gridengine-master)
GE_PREFIX=/opt/hpcprov-testbed/gridengine
GE_LINK=/usr/lib/gridengine

export DEBIAN_FRONTEND=noninteractive

missing=()
for p in "${PACKAGES[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
        missing+=("$p")
    fi
done

ge_versions() {  # the candidate versions of GE_PACKAGES, one "name=version" a line
    apt-cache policy "${GE_PACKAGES[@]}" | awk '/^[^ ]/ {p=$1; sub(":$", "", p)} /Candidate:/ {print p "=" $2}'
}

unpack_gridengine() {
    local stamp="$GE_PREFIX/.hpcprov-packages" versions tmp
    versions="$(ge_versions)"
    if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$versions" ] && [ -x "$GE_PREFIX/usr/lib/gridengine/sge_qmaster" ]; then
        echo "install-deps.sh: Grid Engine already unpacked in $GE_PREFIX"
    else
        echo "install-deps.sh: unpacking ${GE_PACKAGES[*]} into $GE_PREFIX"
        tmp="$(mktemp -d)"
        chmod 755 "$tmp"
        chown _apt "$tmp" 2>/dev/null || true  # apt downloads as _apt where it can
        # shellcheck disable=SC2046  # one word per "name=version"
        (cd "$tmp" && apt-get "${APT_OPTS[@]}" download -q $(ge_versions) >/dev/null)
        rm -rf "$GE_PREFIX.new"
        mkdir -p "$GE_PREFIX.new"
        for deb in "$tmp"/*.deb; do
            dpkg-deb -x "$deb" "$GE_PREFIX.new"
        done
        rm -rf "$tmp"
        printf '%s\n' "$versions" >"$GE_PREFIX.new/.hpcprov-packages"
        rm -rf "$GE_PREFIX"
        mv "$GE_PREFIX.new" "$GE_PREFIX"
    fi
    if [ -L "$GE_LINK" ] || [ ! -e "$GE_LINK" ]; then
        ln -sfn "$GE_PREFIX/usr/lib/gridengine" "$GE_LINK"
    elif [ ! -e "$GE_LINK/libspoolc.so" ]; then
        echo "install-deps.sh: $GE_LINK exists and is not Grid Engine's: leaving it" >&2
        exit 1
    fi
}

APT_OPTS=(-o DPkg::Lock::Timeout=600)

if [ "${#missing[@]}" -eq 0 ]; then
    echo "install-deps.sh: all ${#PACKAGES[@]} packages already installed"
    unpack_gridengine
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
for _ in $(seq 1 120); do
    if ! command -v fuser >/dev/null || ! fuser /var/lib/apt/lists/lock /var/lib/dpkg/lock-frontend >/dev/null 2>&1; then
        break
    fi
    sleep 5
done
apt-get "${APT_OPTS[@]}" update -q
apt-get "${APT_OPTS[@]}" install -y -q --no-install-recommends "${missing[@]}"
unpack_gridengine

echo "install-deps.sh: done"
