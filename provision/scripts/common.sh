# shellcheck shell=bash
# hpcprov's shell library: helpers the other library files use, and the setup script's
# dispatcher.
#
# A library file holds only function definitions, each after a comment that says how it is
# called. The setup script carries, verbatim, the functions its plan calls (see
# provision/library.py); hpcprov's Python code only writes the calls, with every profile
# value an argument quoted by hpcprov/core/shell.py. PREFIX, STATE, ENV_DIR and WHEELHOUSE are
# the setup script's variables.
# shellcheck disable=SC2154

# hpcprov_error MESSAGE...: print "hpcprov: error: MESSAGE" on stderr (the runner and the
# diagnosis look for that prefix).
hpcprov_error() {
  echo "hpcprov: error: $*" >&2
}

# hpcprov_require_tool TOOL WHY HINT: fail (status 3) unless TOOL is on PATH; the message
# says why the setup needs it and how to get it.
hpcprov_require_tool() {
  if ! command -v "$1" >/dev/null 2>&1; then
    hpcprov_error "$1 not found ($2): $3"
    return 3
  fi
}

# hpcprov_write_lines PATH LINE...: write the lines to PATH, through PATH.part, so that PATH
# is either the old file or the whole new one.
# The file is never writable by group or others, whatever the umask: a line a group member
# appended to PREFIX/activate would run as its owner at the next source or doctor.
hpcprov_write_lines() {
  local path="$1"
  shift
  rm -f "$path.part"
  (umask go-w && printf '%s\n' "$@" > "$path.part")
  chmod go-w "$path.part"
  mv -f "$path.part" "$path"
}

# hpcprov_mkdir_parent PATH: create the folder that PATH is in.
hpcprov_mkdir_parent() {
  mkdir -p "$(dirname "$1")"
}

# hpcprov_run STEP...: run the setup script's steps STEP... (ids of HPCPROV_STEPS, the
# script's every step in order), each its function step_ID after an "==> [hpcprov] ID" line
# on stderr; an unknown id fails with status 2. The setup script's last line calls it with
# the script's arguments, else every step (provision/plan.py, render_script), carrying it
# without this comment.
hpcprov_run() {
  local s
  umask go-w  # nothing a step makes may be written by others, whatever the caller's umask
  for s in "$@"; do
    if ! declare -F "step_${s//-/_}" >/dev/null; then
      echo "hpcprov: unknown step $s (steps: ${HPCPROV_STEPS[*]})" >&2; return 2
    fi
    echo "==> [hpcprov] $s" >&2
    "step_${s//-/_}"
    # group and other write off what a tool made with an explicit mode the umask does not
    # mask (uv's 0666 venv .lock), but symlinks and what a directory image holds (its /tmp)
    if [ -n "${PREFIX:-}" ] && [ -d "$PREFIX" ]; then
      find "$PREFIX" -path "$PREFIX/images/*/*" -prune -o ! -type l -perm /022 \
        -exec chmod go-w {} + 2>/dev/null || true
    fi
  done
}
