# shellcheck shell=bash
# hpcprov's shell library: the preflight checks (modules, build tools, CMake, disk space).
#
# Each check fails with an "hpcprov: error:" line that names the cause and the fix, and a
# status of 3 (missing things) or 4 (disk space). See common.sh for the conventions.
# shellcheck disable=SC2154

# hpcprov_check_modules SITE MODULE...: every module exists (`module is-avail`); else name
# the missing ones and the profile of SITE that asks for them.
hpcprov_check_modules() {
  local site="$1" m
  local missing=()
  shift
  for m in "$@"; do
    module is-avail "$m" >/dev/null 2>&1 || missing+=("$m")
  done
  if [ "${#missing[@]}" -gt 0 ]; then
    hpcprov_error "module(s) not available here: ${missing[*]} (modules.build/modules.runtime" \
      "in the profile of site $site): check 'module avail' or 'module spider NAME'"
    return 3
  fi
}

# hpcprov_check_cxx: the C++ compiler that builds Horovod ($CXX, else c++) exists.
hpcprov_check_cxx() {
  local cxx="${CXX:-c++}"
  if ! command -v "$cxx" >/dev/null 2>&1; then
    hpcprov_error "C++ compiler $cxx not found (builds Horovod): install g++ or load the" \
      "site's compiler module (modules.build)"
    return 3
  fi
}

# hpcprov_check_cmake MAX_MAJOR: say which CMake the Horovod build will use: the one on PATH
# when its major version is at most MAX_MAJOR, else (missing, or CMake 4, which fails in gloo's
# configure) a cmake<MAX_MAJOR+1 that the build step installs for itself from the package index
# or the profile's wheelhouse (hpcprov_cmake_below).
hpcprov_check_cmake() {
  local have
  have=$(hpcprov_cmake_version)
  if [ -n "$have" ] && [ "${have%%.*}" -le "$1" ]; then
    echo "hpcprov: CMake $have ($(command -v cmake)) configures the Horovod build"
  else
    echo "hpcprov: CMake ${have:-not found}${have:+ at $(command -v cmake)} cannot build" \
      "Horovod's gloo (it needs $1.x): the build step installs cmake<$(($1 + 1)) for itself" \
      "(or load a cmake/$1 module)"
  fi
}

# hpcprov_check_disk NEED_MB: at least NEED_MB MiB free under $PREFIX ($HPCPROV_NEED_MB
# overrides the estimate); prints the free space.
hpcprov_check_disk() {
  local need="${HPCPROV_NEED_MB:-$1}" free
  free=$(df -Pm "$PREFIX" | awk 'NR==2 {print $4}')
  if [ "${free:-0}" -lt "$need" ]; then
    hpcprov_error "only ${free} MiB free under $PREFIX; this setup needs about ${need} MiB:" \
      "free space or choose another --prefix (HPCPROV_NEED_MB overrides the estimate)"
    return 4
  fi
  echo "hpcprov: preflight ok (${free} MiB free under $PREFIX)"
}
