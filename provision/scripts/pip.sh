# shellcheck shell=bash
# hpcprov's shell library: pip (what it was given, a recent enough pip).
#
# See common.sh for the conventions.

# hpcprov_pip_settings [KEY=VALUE...]: one log line "hpcprov: pip settings: ..." with
# hpcprov's pip arguments (KEY=VALUE, as argument.KEY) and, from `pip config list`, the
# settings of pip's own configuration files and PIP_* variables that decide what pip can
# find (constraint, index-url, extra-index-url, find-links, no-index), so that a failed
# install can name them (pip never prints its constraint files). Credentials in URLs are
# masked. A failing `pip config list` only leaves pip's part out.
hpcprov_pip_settings() {
  local a line="hpcprov: pip settings:"
  for a; do line+=" argument.${a%%=*}='${a#*=}'"; done
  line+=" $(python -m pip config list 2>/dev/null \
    | grep -E '^[^=]*[.](constraint|index-url|extra-index-url|find-links|no-index)=' \
    | tr '\n' ' ' || true)"
  printf '%s\n' "$line" | sed -E 's#://[^/@ ]+@#://****@#g'
}

# hpcprov_ensure_pip PYTHON COMMAND...: run COMMAND (the upgrade of pip) only when the pip
# of PYTHON is older than 23, which cannot install today's wheels; a recent pip is kept.
hpcprov_ensure_pip() {
  local python="$1"
  shift
  if "$python" -c "import pip, sys; sys.exit(int(pip.__version__.split('.')[0]) < 23)"; then
    return 0
  fi
  "$@"
}

# hpcprov_uv_install PROGRAM ARGS...: `uv pip install` into the environment's Python with
# ARGS (the profile's index arguments and the packages) and with pip's own configuration
# (PROGRAM, pip_to_uv.py, prints it as uv's options: uv reads none of pip's files or
# variables), so that an install made with uv sees the constraints and indexes pip would.
hpcprov_uv_install() {
  local program="$1" given
  shift
  given="$(python "$program")" || return $?
  local -a from_pip=()
  if [ -n "$given" ]; then mapfile -t from_pip <<< "$given"; fi
  echo "hpcprov: installing with $(uv --version) (from pip's configuration:${from_pip[*]:+ ${from_pip[*]}})"
  uv pip install --python "$(command -v python)" "${from_pip[@]}" "$@"
}
