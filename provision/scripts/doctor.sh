# shellcheck shell=bash
# hpcprov's shell library: the probe of `hpcprov doctor`, which prints facts as KEY=VALUE
# lines for provision/doctor.py to judge.
#
# The probe runs under `set +e`: a probe never fails, it reports. See common.sh for the
# conventions.

# hpcprov_probe_modules MODULE...: module_missing=NAME for each module not available here.
hpcprov_probe_modules() {
  local m
  for m in "$@"; do
    module is-avail "$m" >/dev/null 2>&1 || echo "module_missing=$m"
  done
}

# hpcprov_probe_conda CONDA: conda_auto_activate_base=VALUE of that conda's configuration.
hpcprov_probe_conda() {
  echo "conda_auto_activate_base=$("$1" config --show auto_activate_base 2>/dev/null \
    | awk '{print $2}')"
}

# hpcprov_probe_host: gpus=N visible (nvidia-smi -L, or AMD's rocm-smi --showid; none
# without either) and mpi=the first line of `mpirun --version`.
hpcprov_probe_host() {
  if command -v nvidia-smi >/dev/null 2>&1; then
    echo "gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')"
  elif command -v rocm-smi >/dev/null 2>&1; then
    echo "gpus=$(rocm-smi --showid 2>/dev/null | grep -o '^GPU\[[0-9]*\]' | sort -u | wc -l)"
  else
    echo "gpus=none"
  fi
  echo "mpi=$(mpirun --version 2>/dev/null | head -n 1)"
}

# hpcprov_probe_activate ACTIVATE: source the prefix's activate file here (quietly) and
# print activate_rc=ITS STATUS; the probe's Python then runs in that environment.
hpcprov_probe_activate() {
  # shellcheck disable=SC1090  # the prefix's own activate file
  source "$1" >/dev/null 2>&1
  echo "activate_rc=$?"
}
