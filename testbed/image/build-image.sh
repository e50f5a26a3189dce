#!/usr/bin/env bash
# Build (once) the testbed's container image: a minimal Debian 12 root filesystem with
# Python 3.11 (Debian's), torch==2.13.0 (the CPU wheel) and numpy (PyPI's), as a directory,
# the image format Charliecloud's ch-run runs (sites/testbed-container.yaml, docs/testbed.md).
# Nothing comes from a container registry: Debian's packages through mmdebstrap, PyPI's
# through pip.
#
#   sudo bash testbed/image/build-image.sh [IMAGE_DIR [MOUNT_POINT...]]
#
# IMAGE_DIR (default: $HPCPROV_TEST_IMAGE, else the testbed-container profile's image,
# /var/lib/hpcprov-testbed/scratch/images/debian12-torch) must be on a file system every
# node sees: the testbed's /tmp is node-local. MOUNT_POINT: empty directories made in the
# image, where ch-run --bind can mount the host's folders at the same path (ch-run mounts only
# onto directories a read-only image has); default: the testbed's scratch.
#
# Cached: a finished image holds the stamp .hpcprov-image (written last), with the recipe's
# hash (this script and the mount points); the same recipe is reused at once. A build runs in
# a temporary folder beside IMAGE_DIR and is renamed into place complete, under a lock, so a
# half-built image is never used and two builds never race.
# Needs root (mmdebstrap, chroot), mmdebstrap (apt: mmdebstrap), and a python3 with pip that
# can reach PyPI (or its configured index): the host's pip installs the wheels into the image
# for the image's Python version, glibc and architecture.
set -euo pipefail

TORCH_SPEC="torch==2.13.0"   # always pinned: the CPU wheel of the release hpcprov tests
NUMPY_SPEC="numpy"
SUITE=bookworm               # Debian 12
# the machine's own apt sources (mmdebstrap reads them when given no mirror), or a mirror
# named by HPCPROV_DEBIAN_MIRROR
mirror=()
[ -z "${HPCPROV_DEBIAN_MIRROR:-}" ] || mirror=("$HPCPROV_DEBIAN_MIRROR")
PACKAGES="python3,python-is-python3"   # bash, coreutils are essential; torch brings libgomp
STAMP=.hpcprov-image
PYTHON="${PYTHON:-python3}"  # the host's, for pip

say() { printf 'build-image.sh: %s\n' "$*" >&2; }
die() { say "$*"; exit 1; }

image="${1:-${HPCPROV_TEST_IMAGE:-/var/lib/hpcprov-testbed/scratch/images/debian12-torch}}"
[ "$#" -gt 0 ] && shift
mounts=("$@")
[ "${#mounts[@]}" -gt 0 ] || mounts=(/var/lib/hpcprov-testbed/scratch)
case "$image" in
  /*) ;;
  *) die "IMAGE_DIR must be an absolute path: $image" ;;
esac
for m in "${mounts[@]}"; do
  case "$m" in /?*) ;; *) die "a mount point must be an absolute path: $m" ;; esac
done

recipe=$({ cat "${BASH_SOURCE[0]}"; printf '%s\n' "${mounts[@]}"; } | sha256sum | cut -c1-16)
done_already() { [ -f "$image/$STAMP" ] && grep -qx "recipe=$recipe" "$image/$STAMP"; }
if done_already; then
  say "reusing $image (recipe $recipe)"
  exit 0
fi

[ "$(id -u)" -eq 0 ] || die "must run as root (mmdebstrap, chroot)"
command -v mmdebstrap >/dev/null || die "mmdebstrap missing (apt-get install mmdebstrap)"
"$PYTHON" -m pip --version >/dev/null 2>&1 || die "$PYTHON has no pip"

parent=$(dirname "$image")
mkdir -p "$parent"
chmod 755 "$parent"
exec 9>"$image.lock"
flock 9
if done_already; then  # another build finished it while this one waited
  say "reusing $image (recipe $recipe, built meanwhile)"
  exit 0
fi

start=$SECONDS
tmp="$parent/.$(basename "$image").tmp.$$"
wheels="$parent/.$(basename "$image").site.$$"
old="$parent/.$(basename "$image").old.$$"
logs="$parent/.$(basename "$image").log.$$"   # the tools' chatter, shown if they fail
pip_pid=""
cleanup() {
  if [ -n "$pip_pid" ]; then kill "$pip_pid" 2>/dev/null || true; wait "$pip_pid" 2>/dev/null || true; fi
  rm -rf "$tmp" "$wheels" "$old" "$logs"
}
trap cleanup EXIT
rm -rf "$tmp" "$wheels" "$logs"
mkdir -p "$logs"

# pip runs beside mmdebstrap (one waits on the network while the other unpacks): the host's
# pip, told the image's interpreter and platform (Debian 12: CPython 3.11, glibc 2.36,
# checked below), wheels only, compiled to .pyc now (the image is read-only when it runs: a
# rank could not cache them)
py=3.11 glibc_minor=36
arch=$(uname -m)
platforms=()
for ((minor = 17; minor <= glibc_minor; minor++)); do
  platforms+=(--platform "manylinux_2_${minor}_${arch}")
done
platforms+=(--platform "manylinux2014_${arch}")
say "pip: $TORCH_SPEC $NUMPY_SPEC for cp${py/./}, glibc 2.$glibc_minor, $arch"
PIP_ROOT_USER_ACTION=ignore "$PYTHON" -m pip install --quiet --no-warn-script-location \
  --disable-pip-version-check --target "$wheels" --only-binary=:all: \
  --implementation cp --python-version "$py" --abi "cp${py/./}" "${platforms[@]}" \
  "$TORCH_SPEC" "$NUMPY_SPEC" >"$logs/pip" 2>&1 &
pip_pid=$!

source_text="the machine's apt sources"
[ "${#mirror[@]}" -eq 0 ] || source_text="${mirror[0]}"
say "mmdebstrap $SUITE (minbase + $PACKAGES) from $source_text"
# merged /usr by the hook, not the usrmerge package (which pulls in perl: 46 MB); no docs,
# manuals or translations
mmdebstrap --quiet --variant=minbase --hook-dir=/usr/share/mmdebstrap/hooks/merged-usr \
  --include="$PACKAGES" \
  --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-exclude=/usr/share/man/*' \
  --dpkgopt='path-exclude=/usr/share/info/*' --dpkgopt='path-exclude=/usr/share/locale/*' \
  "$SUITE" "$tmp" "${mirror[@]}" >"$logs/mmdebstrap" 2>&1 \
  || { cat "$logs/mmdebstrap" >&2; die "mmdebstrap failed"; }
t_debian=$((SECONDS - start))
wait "$pip_pid" || { pip_pid=""; cat "$logs/pip" >&2; die "pip install failed"; }
pip_pid=""
t_pip=$((SECONDS - start))

in_image() { chroot "$tmp" /usr/bin/env -i PATH=/usr/bin:/bin HOME=/root "$@"; }
have_py=$(in_image python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])')
have_glibc=$(in_image getconf GNU_LIBC_VERSION)   # "glibc 2.36"
if [ "$have_py" != "$py" ] || [ "${have_glibc##*.}" -lt "$glibc_minor" ]; then
  die "the image has Python $have_py, $have_glibc: pip installed for $py, glibc 2.$glibc_minor"
fi
site="$tmp/usr/local/lib/python$py/dist-packages"   # on Debian's python3's sys.path
mkdir -p "$(dirname "$site")"
rm -rf "$site"
mv "$wheels" "$site"

# what no job needs: console scripts (their #! names the host's python), torch's C++
# headers, test suites and test binaries (torch_shm_manager stays: import torch needs it)
rm -rf "${site:?}/bin" "$site/share" "$site/torch/include" "$site/torch/test"
find "$site/torch/bin" -mindepth 1 -maxdepth 1 ! -name torch_shm_manager -exec rm -rf {} +

# ch-run binds the host's /etc/hosts (the node names) only onto a file the image has
touch "$tmp/etc/hosts"
for m in "${mounts[@]}"; do
  mkdir -p "$tmp$m"
done

versions=$(in_image python -c '
import platform, numpy, torch, torch.distributed as dist
assert dist.is_available() and dist.is_gloo_available(), "torch.distributed without Gloo"
print(f"python={platform.python_version()} torch={torch.__version__} numpy={numpy.__version__}")')
size=$(du -sh "$tmp" | cut -f1)

{ echo "recipe=$recipe"; tr ' ' '\n' <<<"$versions"; echo "debian=$SUITE"
  echo "built=$(date -u +%Y-%m-%dT%H:%M:%SZ)"; echo "seconds=$((SECONDS - start))"
  echo "size=$size"; } >"$tmp/$STAMP"
chmod 755 "$tmp"
if [ -e "$image" ]; then mv "$image" "$old"; fi
mv "$tmp" "$image"
say "built $image in $((SECONDS - start)) s (mmdebstrap ${t_debian} s, pip done at ${t_pip} s): $size, $versions"
