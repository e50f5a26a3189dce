# shellcheck shell=bash
# hpcprov's shell library: the Horovod wheelhouse, a folder per key (the hash of the key's
# inputs, see hpcprov_horovod_key) holding the wheel built for it, shared by every prefix
# (and every user who trusts its publisher) with the same key.
#
# The checks and the publishing are provision/programs/wheelhouse.py (see its docstring and
# docs/security.md), run with the environment's Python: it opens an entry's files without
# following links and copies the wheel it verified into $STATE/horovod-wheel, which is what
# gets installed. The wheelhouse is $HPCPROV_WHEELHOUSE, else $WHEELHOUSE
# (paths.wheelhouse). See common.sh for the conventions.
# shellcheck disable=SC2154

# hpcprov_wheelhouse_program: write provision/programs/wheelhouse.py to $STATE/programs/ and
# print its path.
hpcprov_wheelhouse_program() {
  mkdir -p "$STATE/programs"
  hpcprov_file_wheelhouse_py > "$STATE/programs/wheelhouse.py"
  echo "$STATE/programs/wheelhouse.py"
}

# hpcprov_wheelhouse_get [TRUSTED...]: look up the wheel for the key of
# $STATE/horovod-key.txt. Sets HPCPROV_KEY. An entry is used only when it verifies (a
# trusted publisher: you, root, the users and @groups of $HPCPROV_WHEELHOUSE_TRUST and
# TRUSTED; nobody else may write it; the same key text; the SHA-256 recorded when it was
# published): then the wheel is copied to $STATE/horovod-wheel, HPCPROV_WHEEL names the copy,
# HPCPROV_HOW=wheelhouse, and it returns 0. Else it returns 1 (build it), after one line
# saying why an entry there was not used.
# shellcheck disable=SC2120  # TRUSTED is optional
hpcprov_wheelhouse_get() {
  local wh="${HPCPROV_WHEELHOUSE:-$WHEELHOUSE}" program status=0
  HPCPROV_KEY=$(sha256sum < "$STATE/horovod-key.txt" | cut -c1-16)
  program=$(hpcprov_wheelhouse_program)
  HPCPROV_WHEEL=$(python "$program" get "$wh" "$HPCPROV_KEY" "$STATE/horovod-key.txt" \
    "$STATE/horovod-wheel" "$@") || status=$?
  if [ "$status" -eq 0 ] && [ -f "$HPCPROV_WHEEL" ]; then
    # shellcheck disable=SC2034  # read by hpcprov_horovod_record
    HPCPROV_HOW=wheelhouse
    echo "hpcprov: wheelhouse hit: $wh/$HPCPROV_KEY/${HPCPROV_WHEEL##*/} (verified);" \
      "no build needed"
    return 0
  fi
  echo "hpcprov: no usable wheel for key $HPCPROV_KEY in $wh: building Horovod (several" \
    "minutes)"
  return 1
}

# hpcprov_wheelhouse_put [TRUSTED...]: take the wheel just built in
# $PREFIX/build/horovod/dist, keep a copy in $STATE/horovod-wheel (HPCPROV_WHEEL, the file
# installed; HPCPROV_HOW=built), and publish it as WHEELHOUSE/KEY: a new folder from mkdtemp,
# files written without following links with explicit modes, SHA256SUMS, one rename, and a
# check that the folder at KEY is the one written before "cached" is printed. A wheelhouse
# that cannot be written, or that holds an entry for KEY that is not yours, only loses the
# cache.
# shellcheck disable=SC2120  # TRUSTED is optional
hpcprov_wheelhouse_put() {
  local wh="${HPCPROV_WHEELHOUSE:-$WHEELHOUSE}" program
  local built=("$PREFIX"/build/horovod/dist/horovod-*.whl)
  HPCPROV_WHEEL="${built[0]}"
  # shellcheck disable=SC2034  # read by hpcprov_horovod_record
  HPCPROV_HOW=built
  if [ -f "$HPCPROV_WHEEL" ]; then
    rm -rf "$STATE/horovod-wheel"
    mkdir -m 700 "$STATE/horovod-wheel"
    cp "$HPCPROV_WHEEL" "$STATE/horovod-wheel/"
    HPCPROV_WHEEL="$STATE/horovod-wheel/${HPCPROV_WHEEL##*/}"
  fi
  program=$(hpcprov_wheelhouse_program)
  python "$program" put "$wh" "$HPCPROV_KEY" "$STATE/horovod-key.txt" "$HPCPROV_WHEEL" "$@" \
    || echo "hpcprov: warning: publishing to the wheelhouse $wh failed; not cached" >&2
}
