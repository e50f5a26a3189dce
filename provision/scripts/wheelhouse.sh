# shellcheck shell=bash
# hpcprov's shell library: the Horovod wheelhouse, a folder per key (the hash of the key's
# inputs, see hpcprov_horovod_key) holding the wheel built for it, shared by every prefix
# (and user) with the same key.
#
# The wheelhouse is $HPCPROV_WHEELHOUSE, else $WHEELHOUSE (paths.wheelhouse). See
# common.sh for the conventions.
# shellcheck disable=SC2154

# hpcprov_wheelhouse_get: look up the wheel for the key of $STATE/horovod-key.txt. Sets
# HPCPROV_KEY; on a hit sets HPCPROV_WHEEL and HPCPROV_HOW=wheelhouse and returns 0, else
# returns 1 (build it).
hpcprov_wheelhouse_get() {
  local wh="${HPCPROV_WHEELHOUSE:-$WHEELHOUSE}" hit
  HPCPROV_KEY=$(sha256sum < "$STATE/horovod-key.txt" | cut -c1-16)
  hit=("$wh/$HPCPROV_KEY"/horovod-*.whl)
  if [ -f "${hit[0]}" ]; then
    HPCPROV_WHEEL="${hit[0]}"
    # shellcheck disable=SC2034  # read by hpcprov_horovod_record
    HPCPROV_HOW=wheelhouse
    echo "hpcprov: wheelhouse hit: $HPCPROV_WHEEL (key $HPCPROV_KEY); no build needed"
    return 0
  fi
  echo "hpcprov: no wheel for key $HPCPROV_KEY in $wh: building Horovod (several minutes)"
  return 1
}

# hpcprov_wheelhouse_put: take the wheel just built in $PREFIX/build/horovod/dist as
# HPCPROV_WHEEL (HPCPROV_HOW=built) and publish it, with the key's inputs, as
# WHEELHOUSE/KEY: a folder renamed into place, so that readers see all of it or nothing. A
# wheelhouse that cannot be written only loses the cache.
hpcprov_wheelhouse_put() {
  local wh="${HPCPROV_WHEELHOUSE:-$WHEELHOUSE}"
  local built=("$PREFIX"/build/horovod/dist/horovod-*.whl)
  local tmp="$wh/.tmp-$HPCPROV_KEY-$$"
  HPCPROV_WHEEL="${built[0]}"
  # shellcheck disable=SC2034  # read by hpcprov_horovod_record
  HPCPROV_HOW=built
  if mkdir -p "$tmp" 2>/dev/null && cp "$HPCPROV_WHEEL" "$STATE/horovod-key.txt" "$tmp/"; then
    if mv -T "$tmp" "$wh/$HPCPROV_KEY" 2>/dev/null; then
      echo "hpcprov: cached in the wheelhouse: $wh/$HPCPROV_KEY"
    else
      rm -rf "$tmp"
    fi
  else
    rm -rf "$tmp"
    echo "hpcprov: warning: cannot write the wheelhouse $wh; not cached" >&2
  fi
}
