# shellcheck shell=bash
# hpcprov's shell library: Horovod (the key of its wheel, the build from the sdist, the
# checks of the build, the records for the manifest).
#
# The Horovod steps call these in the activated environment, with the build (or runtime)
# modules loaded. See common.sh for the conventions.
# shellcheck disable=SC2154

# hpcprov_horovod_key VERSION PATCHES BUILD_ENV ABI_PROGRAM: print everything the Horovod
# binary depends on, one KEY=VALUE line each (the wheelhouse key is a hash of this text, so
# the same facts must always print the same text): Horovod's version, the digest of the
# patches, the HOROVOD_* build variables, what the Python program ABI_PROGRAM prints
# (Python, platform and libc, framework versions), mpicc's real path and `mpirun --version`,
# the C++ compiler's real path and version, the C++ standard the PyTorch extension compiles
# as, `nvcc --version` and NCCL's version from nccl.h.
hpcprov_horovod_key() {
  local mpicc cxx nccl_h="" d
  printf '%s\n' "horovod=$1" "patches=$2" "build-env=$3"
  python "$4"
  mpicc=$(command -v mpicc 2>/dev/null || true)
  echo "mpi=${mpicc:+$(readlink -f "$mpicc")} $(mpirun --version 2>/dev/null | head -n 1 || true)"
  # the compiler's real file and its version, not the name it was called by: c++ and g++
  # (a module's CXX=g++) are one compiler and must give one key
  cxx=$(command -v "${CXX:-c++}" 2>/dev/null || true)
  echo "cxx=${cxx:+$(readlink -f "$cxx")} $("${CXX:-c++}" --version 2>/dev/null \
    | head -n 1 | cut -d' ' -f2- || true)"
  echo "stdlib=libstdc++ $(hpcprov_build_fact libstdc++)"
  echo "torch-cxx=$(hpcprov_build_fact torch-cxx)"
  echo "cuda=$(nvcc --version 2>/dev/null | tail -n 1 || true)"
  for d in "${HOROVOD_NCCL_HOME:-}" "${NCCL_HOME:-}" "${CUDA_HOME:-}"; do
    if [ -n "$d" ] && [ -f "$d/include/nccl.h" ]; then
      nccl_h="$d/include/nccl.h"
      break
    fi
  done
  echo "nccl=${nccl_h:+$(awk '/^#define NCCL_(MAJOR|MINOR|PATCH) / {printf "%s.", $3}' \
    "$nccl_h")}"
}

# hpcprov_build_fact NAME: print a fact of the build's toolchain that decides a patch
# (provision/compat.py, BUILD_FACTS): libstdc++ (the major release of the C++ standard library
# $CXX, else c++, compiles against, from _GLIBCXX_RELEASE; empty for another library), python
# (the environment's major.minor) or torch-cxx (the C++ standard, 17 or 20, that the
# environment's PyTorch headers demand).
hpcprov_build_fact() {
  case "$1" in
    libstdc++)
      printf '#include <cstddef>\n_GLIBCXX_RELEASE\n' | "${CXX:-c++}" -E -x c++ - 2>/dev/null \
        | tail -n 1 | grep -E '^[0-9]+$' || true ;;
    python) python -c 'import sys; print("%d.%d" % sys.version_info[:2])' ;;
    torch-cxx)
      # the C++ standard the environment's PyTorch headers demand: torch/all.h stops any
      # compile below it (`#if ... __cplusplus < 202002L` / `#error`: 20 from PyTorch 2.14,
      # 17 from 2.1), read as text (importing torch takes seconds); empty without torch
      python - <<'HPCPROV_PY' 2>/dev/null || true
import importlib.util, os, re
spec = importlib.util.find_spec("torch")
root = os.path.dirname(spec.origin) if spec and spec.origin else ""
path = os.path.join(root, "include", "torch", "csrc", "api", "include", "torch", "all.h")
if root and os.path.isfile(path):
    with open(path, encoding="utf-8", errors="replace") as f:
        m = re.search(r"__cplusplus\s*<\s*(\d{4})(\d\d)L", f.read(1000000))
    if m:
        print(int(m.group(1)) % 100)  # 201703L: C++17, 202002L: C++20
HPCPROV_PY
      ;;
    *) hpcprov_error "unknown build fact $1"; return 2 ;;
  esac
}

# hpcprov_at_least NAME MINIMUM: the build fact NAME is known and at least MINIMUM (in
# version order: 3.12 >= 3.9); says which way it went.
hpcprov_at_least() {
  local have
  have=$(hpcprov_build_fact "$1") || return 2
  if [ -n "$have" ] && [ "$(printf '%s\n%s\n' "$2" "$have" | sort -V | head -n 1)" = "$2" ]; then
    echo "hpcprov: $1 is $have (>= $2)"
    return 0
  fi
  echo "hpcprov: $1 is ${have:-unknown} (not >= $2)"
  return 1
}

# hpcprov_cmake_version: the version of the cmake on PATH (3.25.1), nothing when there is none.
hpcprov_cmake_version() {
  cmake --version 2>/dev/null | awk 'NR==1 {print $3}'
}

# hpcprov_cmake_below MAJOR [PIP_ARG...]: make sure the build's cmake is older than MAJOR
# (Horovod's gloo fails to configure with CMake 4). When cmake is missing or too new, install
# cmake<MAJOR with pip (PIP_ARGs: the profile's index options, so a wheelhouse serves offline
# sites) into $PREFIX/build/cmake and put it first on PATH for the rest of the build.
hpcprov_cmake_below() {
  local major="$1" have dir="$PREFIX/build/cmake"
  shift
  have=$(hpcprov_cmake_version)
  if [ -n "$have" ] && [ "${have%%.*}" -lt "$major" ]; then
    return 0
  fi
  echo "hpcprov: cmake ${have:-not found}${have:+ at $(command -v cmake)}: installing" \
    "cmake<$major for this build into $dir"
  rm -rf "$dir"
  if ! python -m pip install --no-compile --no-deps --target "$dir" "$@" "cmake>=3.13,<$major" \
      || [ ! -x "$dir/cmake/data/bin/cmake" ]; then
    hpcprov_error "no CMake older than $major for the Horovod build: cmake on PATH is" \
      "${have:-missing} and pip could not install cmake<$major: load a cmake/$((major - 1))" \
      "module, or put a cmake<$major wheel in the profile's wheelhouse (python.venv.wheelhouse)"
    return 3
  fi
  export PATH="$dir/cmake/data/bin:$PATH"
  hash -r
  echo "hpcprov: building with $(cmake --version | head -n 1)"
}

# hpcprov_torch_cxx_standard: the C++ standard Horovod's PyTorch extension compiles as: the one
# the environment's PyTorch headers demand (torch-cxx: 20 from PyTorch 2.14, whose headers use
# <compare>; 17 before), else 17. Exported as HOROVOD_TORCH_CXX_STANDARD,
# which the cxx-standard patch reads in horovod/torch/CMakeLists.txt.
hpcprov_torch_cxx_standard() {
  local std
  std=$(hpcprov_build_fact torch-cxx)
  export HOROVOD_TORCH_CXX_STANDARD="${std:-17}"
  if [ -n "$std" ]; then
    echo "hpcprov: the PyTorch extension compiles as C++$std, which this PyTorch's headers need"
  else
    echo "hpcprov: the PyTorch extension compiles as C++17 (PyTorch names no standard)"
  fi
}

# hpcprov_cuda_home: the CUDA toolkit a GPU build compiles with, found as the toolkit is:
# CUDA_HOME, else CUDA_PATH, else the nvcc on PATH followed to its toolkit (`nvcc -v --dryrun`
# names its TOP, so a wrapper script or a symlink outside the toolkit leads there too). Exports
# it as CUDA_HOME and CUDA_PATH (PyTorch's extension machinery, CMake's FindCUDAToolkit) and
# HOROVOD_CUDA_HOME (Horovod's CMake), and puts its bin/ first on PATH, all for the build only.
hpcprov_cuda_home() {
  local home="${CUDA_HOME:-${CUDA_PATH:-}}" how nvcc top
  if [ -n "${CUDA_HOME:-}" ]; then
    how=CUDA_HOME
  elif [ -n "$home" ]; then
    how=CUDA_PATH
  elif nvcc=$(command -v nvcc); then
    top=$(nvcc -v --dryrun -c -x cu /dev/null -o /dev/null 2>&1 | sed -n 's/^#\$ TOP=//p' \
      | head -n 1)
    home=$(cd "${top:-$(dirname "$(readlink -f "$nvcc")")/..}" 2>/dev/null && pwd -P) || home=""
    how="the nvcc on PATH, $nvcc"
  else
    hpcprov_error "no CUDA toolkit for the GPU build: no nvcc on PATH and neither CUDA_HOME" \
      "nor CUDA_PATH set: load the site's CUDA module in modules.build (or set CUDA_HOME)"
    return 3
  fi
  if [ ! -x "$home/bin/nvcc" ]; then
    hpcprov_error "the CUDA toolkit from $how, '$home', has no bin/nvcc: set CUDA_HOME to" \
      "the toolkit's folder (the one with bin/nvcc, include/cuda_runtime.h)"
    return 3
  fi
  export CUDA_HOME="$home" CUDA_PATH="$home" HOROVOD_CUDA_HOME="$home" PATH="$home/bin:$PATH"
  hash -r
  echo "hpcprov: CUDA toolkit $home (from $how): $(nvcc --version | tail -n 1)"
}

# hpcprov_nccl_home PROGRAM: which NCCL a GPU build links. One named by the site
# (HOROVOD_NCCL_HOME, from the profile's horovod.env or a module) is kept; else, when the
# environment's PyTorch uses NCCL from its nvidia-nccl wheel, the build links exactly that one
# (two NCCLs in one process can hang): the Python program PROGRAM makes an NCCL home of links
# under $STATE/nccl (the wheel has no libnccl.so, which Horovod's FindNCCL looks for); else a
# module's NCCL_HOME; else Horovod searches the CUDA toolkit. Exports HOROVOD_NCCL_HOME (and
# HOROVOD_NCCL_LINK=SHARED for a wheel's NCCL, which has no static library).
hpcprov_nccl_home() {
  local home
  if [ -n "${HOROVOD_NCCL_HOME:-}" ]; then
    echo "hpcprov: NCCL from $HOROVOD_NCCL_HOME (HOROVOD_NCCL_HOME, set by the site)"
  elif home=$(python "$1" "$STATE/nccl"); then
    export HOROVOD_NCCL_HOME="$home" HOROVOD_NCCL_LINK="${HOROVOD_NCCL_LINK:-SHARED}"
    echo "hpcprov: NCCL from PyTorch's nvidia-nccl wheel, through $home"
  elif [ -n "${NCCL_HOME:-}" ]; then
    export HOROVOD_NCCL_HOME="$NCCL_HOME"
    echo "hpcprov: NCCL from $NCCL_HOME (NCCL_HOME, set by a module)"
  else
    echo "hpcprov: no NCCL named and none beside PyTorch: Horovod searches the CUDA toolkit"
  fi
}

# hpcprov_horovod_workdir: an empty build folder $PREFIX/build/horovod (with dist/ for the
# wheel); make then runs -jN (N: the cores, at most 8) unless MAKEFLAGS says otherwise. Where
# ccache is installed (and the site sets no compiler launcher), compiles go through it, with
# paths taken relative to $PREFIX: a second build of the same sources (another prefix, another
# framework set) reuses the objects it shares with the first. The wheel does not change.
hpcprov_horovod_workdir() {
  rm -rf "$PREFIX/build/horovod"
  mkdir -p "$PREFIX/build/horovod/dist"
  export MAKEFLAGS="${MAKEFLAGS:--j$(($(nproc) < 8 ? $(nproc) : 8))}"
  if command -v ccache >/dev/null 2>&1 && [ -z "${CMAKE_CXX_COMPILER_LAUNCHER:-}" ]; then
    export CMAKE_CXX_COMPILER_LAUNCHER=ccache CMAKE_CUDA_COMPILER_LAUNCHER=ccache
    export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$PREFIX}" CCACHE_NOHASHDIR="${CCACHE_NOHASHDIR:-1}"
    echo "hpcprov: compiling through ccache ($(command -v ccache))"
  fi
}

# hpcprov_horovod_unpack: unpack the sdist downloaded into $PREFIX/build/horovod; sets
# HPCPROV_SRC to its source folder.
hpcprov_horovod_unpack() {
  local sdist=("$PREFIX"/build/horovod/horovod-*.tar.gz)
  tar xzf "${sdist[0]}" -C "$PREFIX/build/horovod"
  HPCPROV_SRC=$(find "$PREFIX/build/horovod" -mindepth 1 -maxdepth 1 -type d \
    -name 'horovod-*' | head -n 1)
}

# hpcprov_horovod_patch NAME: apply the patch read from stdin (kept as
# $PREFIX/build/horovod/NAME) to the unpacked source $HPCPROV_SRC.
hpcprov_horovod_patch() {
  cat > "$PREFIX/build/horovod/$1"
  echo "hpcprov: applying $1"
  patch -d "$HPCPROV_SRC" -p1 --forward < "$PREFIX/build/horovod/$1"
}

# hpcprov_horovod_record: record the wheel installed ($HPCPROV_WHEEL: its file name and
# SHA-256, the key, built or from the wheelhouse) in $STATE/horovod-wheel.txt for the
# manifest.
hpcprov_horovod_record() {
  printf 'wheel=%s\nsha256=%s\nkey=%s\nhow=%s\n' "$(basename "$HPCPROV_WHEEL")" \
    "$(sha256sum < "$HPCPROV_WHEEL" | cut -d" " -f1)" "$HPCPROV_KEY" "$HPCPROV_HOW" \
    > "$STATE/horovod-wheel.txt"
}

# hpcprov_expect_cb SECTION NAME: NAME is marked [X] under SECTION in the saved output of
# `horovodrun -cb` ($STATE/check-build.txt); else fail, naming it.
hpcprov_expect_cb() {
  awk -v sec="$1:" -v name="$2" '$0 == sec {inside = 1; next} /^[^ ]/ {inside = 0}
    inside && $0 ~ ("\\[X\\] " name " *$") {found = 1} END {exit !found}' \
    "$STATE/check-build.txt" && return 0
  hpcprov_error "horovodrun -cb does not show [X] $2 under '$1', but the profile builds it" \
    "(horovod.frameworks/controllers/gpu_operations)"
  return 1
}

# hpcprov_record_facts: the facts the manifest keeps, gathered inside the environment: pip
# freeze, Python's version, the host (and an empty module list; see hpcprov_record_modules).
# The folder is made anew: nothing left in it (a FIFO, a link) is written through or waited on.
hpcprov_record_facts() {
  rm -rf -- "$STATE/facts"
  mkdir -p "$STATE/facts"
  python -m pip freeze > "$STATE/facts/pip-freeze.txt"
  python -c 'import platform; print(platform.python_version())' > "$STATE/facts/python.txt"
  hostname > "$STATE/facts/host.txt"
  : > "$STATE/facts/modules.txt"
}

# hpcprov_record_modules: the modules loaded (`module -t list`), for the manifest.
hpcprov_record_modules() {
  { module -t list 2>&1 || true; } > "$STATE/facts/modules.txt"
}
