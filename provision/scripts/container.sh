# shellcheck shell=bash
# hpcprov's shell library: container images (enroot, Singularity/Apptainer).
#
# See common.sh for the conventions.

# hpcprov_check_image IMAGE PROFILE_KEY: the site's own image file is readable here, else
# fail naming the profile key that points at it.
hpcprov_check_image() {
  if [ ! -r "$1" ]; then
    hpcprov_error "image $1 not readable here: check $2 in the profile"
    return 3
  fi
  echo "hpcprov: image $1 found"
}

# hpcprov_enroot_remove NAME: remove enroot's container NAME, if there is one.
hpcprov_enroot_remove() {
  enroot remove -f "$1" 2>/dev/null || true
}
