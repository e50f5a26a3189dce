# shellcheck shell=bash
# hpcprov's shell library: the Miniconda installer (download, checksum).
#
# See common.sh for the conventions.

# hpcprov_download OUT URL...: download to OUT from the first URL that answers (curl -fL,
# 3 retries each); fails when none does.
hpcprov_download() {
  local out="$1" url
  shift
  for url in "$@"; do
    if curl -fL --retry 3 -o "$out" "$url"; then
      return 0
    fi
  done
  return 1
}

# hpcprov_check_installer FILE SHA256: FILE's SHA-256 is SHA256
# (python.conda.installer_sha256), checked before anything runs it; on a mismatch FILE is
# deleted and the step fails.
hpcprov_check_installer() {
  local got
  got=$(sha256sum "$1" | cut -d" " -f1)
  if [ "$got" != "$2" ]; then
    rm -f "$1"
    hpcprov_error "the installer's SHA-256 is $got, but the profile expects $2" \
      "(python.conda.installer_sha256); the download was deleted"
    return 3
  fi
  echo "hpcprov: installer SHA-256 ok ($got)"
}

# hpcprov_conda_accept_tos CONDA CHANNEL...: accept Anaconda's Terms of Service for the
# channels (defaults: its main and r channels), as the profile says the user or site does
# (python.conda.accept_tos); a conda without the Terms of Service plugin has nothing to
# accept, and says so.
hpcprov_conda_accept_tos() {
  local conda="$1" channel urls=()
  shift
  if ! "$conda" tos --help >/dev/null 2>&1; then
    echo "hpcprov: this conda has no 'tos' command: no Terms of Service to accept"
    return 0
  fi
  for channel in "$@"; do
    if [ "$channel" = defaults ]; then
      urls+=(https://repo.anaconda.com/pkgs/main https://repo.anaconda.com/pkgs/r)
    else
      urls+=("$channel")
    fi
  done
  for channel in "${urls[@]}"; do
    echo "hpcprov: accepting Anaconda's Terms of Service for $channel (python.conda.accept_tos)"
    "$conda" tos accept --override-channels --channel "$channel"
  done
}
