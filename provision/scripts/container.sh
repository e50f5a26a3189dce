# shellcheck shell=bash
# hpcprov's shell library: container images (enroot, Singularity/Apptainer, Charliecloud).
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

# hpcprov_check_ch_image IMAGE PROFILE_KEY: Charliecloud's image, a directory (or a SquashFS
# file), is readable here, else fail naming the profile key that points at it.
hpcprov_check_ch_image() {
  if [ -d "$1" ] && [ -r "$1" ] && [ -x "$1" ]; then
    echo "hpcprov: image $1 found (a directory)"
  elif [ -f "$1" ] && [ -r "$1" ]; then
    echo "hpcprov: image $1 found (a file: ch-run mounts it as SquashFS)"
  else
    hpcprov_error "image $1 is no readable directory here: check $2 in the profile (build" \
      "the image with ch-image, or unpack one with ch-convert, into that directory)"
    return 3
  fi
}

# hpcprov_enroot_remove NAME: remove enroot's container NAME, if there is one.
hpcprov_enroot_remove() {
  enroot remove -f "$1" 2>/dev/null || true
}
