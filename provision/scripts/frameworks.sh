# shellcheck shell=bash
# hpcprov's shell library: frameworks the site's modules provide (installer: module).
#
# See common.sh for the conventions.

# hpcprov_module_framework IMPORT VERSION MODULE: the framework that the site's MODULE
# provides imports in the environment at VERSION (2.1.0 also matches 2.1.0+cu121 and
# 2.1.0.post1) and from outside the environment ($ENV_DIR): a copy that pip put into the
# venv would shadow the module's, built for the site's CUDA and MPI.
hpcprov_module_framework() {
  local found version file
  local probe='import importlib, sys; m = importlib.import_module(sys.argv[1]); '
  probe+='print(m.__version__); print(m.__file__)'
  if ! found=$(python -c "$probe" "$1" 2>&1); then
    hpcprov_error "$1 does not import in the environment, but module $3 should provide it" \
      "(is $3 in modules.build.load, and the venv made with system_site_packages: true?):" \
      "$(printf '%s\n' "$found" | tail -n 1)"
    return 1
  fi
  version=${found%%$'\n'*}
  file=${found#*$'\n'}
  case "$version" in
    "$2" | "$2"+* | "$2".*) ;;
    *)
      hpcprov_error "module $3 gives $1 $version, but the profile says $2" \
        "(python.frameworks: version): load the module that gives $2, or change the version"
      return 1
      ;;
  esac
  case "$file" in
    "$ENV_DIR"/*)
      hpcprov_error "$1 is imported from the environment ($file), not from module $3:" \
        "something installed it into the venv and it shadows the module's; remove it" \
        "(python -m pip uninstall $1) or set the environment up again (--redo)"
      return 1
      ;;
  esac
  echo "hpcprov: $1 $version from module $3 ($file)"
}
