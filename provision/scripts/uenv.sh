# shellcheck shell=bash
# hpcprov's shell library: uenv-style software stacks (a profile's `uenv:` section). The
# setup script's variables HPCPROV_UENV (the image), HPCPROV_UENV_VIEW (its views, or
# empty) and HPCPROV_UENV_MOUNT (where it is mounted) name the stack.
# shellcheck disable=SC2154

# hpcprov_uenv_pull: pull the stack into the user's uenv repository, creating the
# repository first where there is none; nothing when the image is there already.
hpcprov_uenv_pull() {
  hpcprov_require_tool uenv "pulls and starts the site's uenv" \
    "log in to a node of the site that has the uenv command" || return
  if uenv image inspect "$HPCPROV_UENV" >/dev/null 2>&1; then
    echo "hpcprov: uenv $HPCPROV_UENV is pulled already"
    return 0
  fi
  uenv repo status >/dev/null 2>&1 || uenv repo create
  uenv image pull "$HPCPROV_UENV"
}

# hpcprov_in_uenv STEP: status 0 when this shell is inside the stack (its mount holds the
# image's meta folder); else run STEP of this setup script ($0) inside it (`uenv run`, with
# the views) and return 1 with that run's status in HPCPROV_UENV_RC, so that the step's
# function returns it: `hpcprov_in_uenv ID || return "$HPCPROV_UENV_RC"`. Once only: a step
# that uenv run started and that still finds no stack at HPCPROV_UENV_MOUNT (uenv.mount
# names another folder than where the stack is mounted) fails, saying so, instead of
# calling uenv run again without end.
# shellcheck disable=SC2034  # HPCPROV_UENV_RC is read by the step's function
hpcprov_in_uenv() {
  if [ -e "$HPCPROV_UENV_MOUNT/meta" ]; then
    return 0
  fi
  HPCPROV_UENV_RC=1
  if [ -n "${HPCPROV_UENV_STARTED:-}" ]; then
    echo "hpcprov: step $1 runs inside uenv $HPCPROV_UENV (uenv run started it) but finds no stack at $HPCPROV_UENV_MOUNT ($HPCPROV_UENV_MOUNT/meta is missing): set uenv.mount in the site profile to where the stack is mounted (uenv status names it)" >&2
    return 1
  fi
  echo "hpcprov: running step $1 inside uenv $HPCPROV_UENV" >&2
  HPCPROV_UENV_RC=0
  local script=$0 copy=""
  case $script in
    /dev/fd/*)  # hpcprov's sealed copy: a private file of the same bytes for uenv run,
      # which need not pass a descriptor on (mktemp: mode 0600, a name nobody else has),
      # in the state folder, which setup checks only you can write before every step
      if ! copy=$(mktemp "$STATE/.uenv-step.XXXXXX") \
          || ! cat -- "$script" >"$copy"; then
        HPCPROV_UENV_RC=1
        [ -z "$copy" ] || rm -f -- "$copy"
        return 1
      fi
      script=$copy ;;
  esac
  HPCPROV_UENV_STARTED=1 uenv run ${HPCPROV_UENV_VIEW:+--view="$HPCPROV_UENV_VIEW"} \
    "$HPCPROV_UENV" -- bash "$script" "$1" || HPCPROV_UENV_RC=$?
  [ -z "$copy" ] || rm -f -- "$copy"
  return 1
}
