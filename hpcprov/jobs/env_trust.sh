# shellcheck shell=bash
# hpcprov's environment check: lines of every job script that activates a provisioned
# prefix (hpcprov/jobs/layout.py, environment_check), carried verbatim from the first blank
# line on, after the line
#   hpcprov_env=PREFIX   (quoted by hpcprov/core/shell.py; $VARS expand in the job)
# Before the job sources anything from the prefix it refuses, in one line and exit status 2,
# a prefix that someone other than the job's user, root or the prefix's owner could change:
# an entry in it (but symlinks, conda's package cache, the download and build folders and
# what a directory image holds: an image's own /tmp is 1777) that its group or others may
# write or that another user owns, or a folder above it that another user owns or may
# write without the sticky bit (core.fsutil.others_can_change says the
# same in Python, for doctor and validate).
# shellcheck disable=SC2154  # hpcprov_env: set by the line before it

hpcprov_env_why=""
if hpcprov_env_real=$(cd -P -- "$hpcprov_env" 2>/dev/null && pwd -P); then
  hpcprov_env_me=$(id -u)
  hpcprov_env_owner=$(stat -c %u -- "$hpcprov_env_real") || hpcprov_env_owner=$hpcprov_env_me
  hpcprov_env_dir=$hpcprov_env_real
  while [ -z "$hpcprov_env_why" ] && [ "$hpcprov_env_dir" != / ]; do
    hpcprov_env_dir=$(dirname -- "$hpcprov_env_dir")
    hpcprov_env_why=$(find "$hpcprov_env_dir" -maxdepth 0 \( ! -uid "$hpcprov_env_me" \
      ! -uid 0 ! -uid "$hpcprov_env_owner" -printf '%p belongs to user %U' \) -o \
      \( -perm /022 ! -perm -1000 -printf '%p may be written by others' \) 2>/dev/null) || true
  done
  if [ -z "$hpcprov_env_why" ]; then
    hpcprov_env_why=$(find "$hpcprov_env_real" \( -path "$hpcprov_env_real/miniconda3/pkgs" \
      -o -path "$hpcprov_env_real/downloads" -o -path "$hpcprov_env_real/build" \
      -o -path "$hpcprov_env_real/images/*/*" \) \
      -prune -o ! -type l -perm /022 \
      -printf '%p may be written by others' -quit -o ! -type l ! -uid "$hpcprov_env_me" \
      ! -uid 0 ! -uid "$hpcprov_env_owner" -printf '%p belongs to user %U' -quit \
      2>/dev/null) || true
  fi
fi
if [ -n "$hpcprov_env_why" ]; then
  echo "hpcprov: $hpcprov_env_why: someone else could change what this job runs from $hpcprov_env and have it run as you; refusing to run it; make it writable by its owner alone (chmod -R go-w $hpcprov_env, or set it up again: hpcprov setup never leaves a file others may write) and a shared folder above it sticky (chmod +t)" >&2
  exit 2
fi
