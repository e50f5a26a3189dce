"""Plan steps around Horovod: preflight, build (through the wheelhouse), proof, record.

Every line here is shell text for the one setup script; values from the profile go
through hpcprov.shell. The build runs in the activated environment with the site's build
modules loaded, exactly as the seed tutorials do it by hand.
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING

from hpcprov.provision.compat import patches_for
from hpcprov.checkbuild import CB_SECTIONS, expected_check_build
from hpcprov.provision.horovod import build_env, pip_spec
from hpcprov.provision.proof import ABI_FACTS, PROGRAMS

from hpcprov.kinds import ModuleSystem
from hpcprov.shell import Raw, env_prefix, join, quote

if TYPE_CHECKING:
    from hpcprov.model import Site

# Installed before the build, which runs with --no-build-isolation so that it works offline
# and sees the environment's torch/TensorFlow (Horovod's setup needs these to run).
BUILD_REQUIREMENTS = ("setuptools", "wheel", "packaging", "cffi", "cloudpickle", "psutil",
                      "pyyaml")
CMAKE_MAX_MAJOR = 3  # PyPI's cmake 4.x fails in gloo's configure; 3.x (Debian's 3.25) works


def _pip_idx(site: Site) -> list[str]:
    from hpcprov.provision.plan import pip_index_args

    return pip_index_args(site)


def _pip_settings(site: Site) -> str:
    from hpcprov.provision.plan import pip_settings_line

    return pip_settings_line(site)


def builds_horovod(site: Site) -> bool:
    return site.horovod.source == "pip" and site.python.backend != "container"


def estimate_mb(site: Site) -> int:
    """Free space the setup needs under the prefix, in MiB (generous, not exact)."""
    gpu = any(p.gpus.count for p in site.partitions.values())
    need = 100
    if site.python.backend == "conda":
        need += 800
    if site.python.backend == "container":
        return need + 20000
    frameworks = site.python.frameworks
    if "pytorch" in frameworks:
        need += 4500 if gpu else 1200
    if "tensorflow" in frameworks:
        need += 2500 if gpu else 1500
    if builds_horovod(site):
        need += 600
    return need


def disk_lines(need_mb: int) -> list[str]:
    return [
        f'need_mb="${{HPCPROV_NEED_MB:-{need_mb}}}"',
        "free_mb=$(df -Pm \"$PREFIX\" | awk 'NR==2 {print $4}')",
        'if [ "${free_mb:-0}" -lt "$need_mb" ]; then',
        '  echo "hpcprov: error: only ${free_mb} MiB free under $PREFIX; this setup needs about'
        ' ${need_mb} MiB: free space or choose another --prefix'
        ' (HPCPROV_NEED_MB overrides the estimate)" >&2',
        "  return 4",
        "fi",
    ]


def _tool_check(tool: str, why: str, hint: str) -> list[str]:
    return [
        f"if ! command -v {quote(tool)} >/dev/null 2>&1; then",
        f"  echo {quote(f'hpcprov: error: {tool} not found ({why}): {hint}')} >&2",
        "  return 3",
        "fi",
    ]


def module_check_lines(site: Site) -> list[str]:
    """Check that every module of the build and runtime sets exists, naming the missing."""
    mods = site.modules
    if mods.system == ModuleSystem.none:
        return []
    names = list(dict.fromkeys([*mods.build.load, *mods.runtime.load]))
    if not names:
        return []
    return [
        "missing=()",
        "for m in " + join(names) + "; do",
        '  module is-avail "$m" >/dev/null 2>&1 || missing+=("$m")',
        "done",
        'if [ "${#missing[@]}" -gt 0 ]; then',
        '  echo "hpcprov: error: module(s) not available here: ${missing[*]}'
        ' (modules.build/modules.runtime in the profile of site '
        + site.name.replace('"', "") + '): check \'module avail\' or \'module spider NAME\'"'
        " >&2",
        "  return 3",
        "fi",
    ]


def preflight_lines(site: Site, need_mb: int) -> list[str]:
    """Fail early and clearly: modules, tools, CMake version, disk space."""
    lines = ["hpcprov_modules_init", *module_check_lines(site)]
    if site.modules.system != ModuleSystem.none:
        lines.append("hpcprov_modules_build")
    apt = "install it (Debian/Ubuntu: apt-get install {pkg}) or load the site's module"
    if site.python.backend == "conda" and not site.python.conda.installer_file:
        lines += _tool_check("curl", "downloads the Miniconda installer", apt.format(pkg="curl"))
    if builds_horovod(site):
        lines += _tool_check("tar", "unpacks the Horovod sdist", apt.format(pkg="tar"))
        lines += _tool_check("patch", "applies hpcprov's Horovod patches",
                             apt.format(pkg="patch"))
        lines += _tool_check("make", "builds Horovod", apt.format(pkg="make"))
        lines += _tool_check("cmake", "configures the Horovod build", apt.format(pkg="cmake"))
        lines += [
            'cxx="${CXX:-c++}"',
            'if ! command -v "$cxx" >/dev/null 2>&1; then',
            '  echo "hpcprov: error: C++ compiler $cxx not found (builds Horovod): install'
            ' g++ or load the site\'s compiler module (modules.build)" >&2',
            "  return 3",
            "fi",
            "cmake_major=$(cmake --version | awk 'NR==1 {split($3, v, \".\"); print v[1]}')",
            f'if [ "${{cmake_major:-0}}" -gt {CMAKE_MAX_MAJOR} ]; then',
            '  echo "hpcprov: error: $(command -v cmake) is CMake ${cmake_major}.x; gloo in'
            ' Horovod needs CMake 3.x (4.x fails in its configure): load a cmake/3.x module'
            ' or pip uninstall cmake" >&2',
            "  return 3",
            "fi",
        ]
        if "mpi" in site.horovod.controllers:
            lines += _tool_check("mpicc", "Horovod's MPI controller is built with it",
                                 "load the site's MPI module (modules.build) or install "
                                 "libopenmpi-dev")
    lines += disk_lines(need_mb)
    lines.append('echo "hpcprov: preflight ok (${free_mb} MiB free under $PREFIX)"')
    return lines


def patch_digest(site: Site) -> str:
    """One hash of the patches applied (their names and texts), part of the wheel key."""
    h = hashlib.sha256()
    for name, text in patches_for(site):
        h.update(name.encode() + b"\0" + text.encode() + b"\0")
    return h.hexdigest()[:16] if patches_for(site) else "none"


def key_function(site: Site) -> tuple[str, ...]:
    """`hpcprov_horovod_key`: prints everything the Horovod binary depends on."""
    hvd = site.horovod
    env = build_env(hvd)
    return (
        f"echo {quote('horovod=' + (hvd.version or 'latest'))}",
        f"echo {quote('patches=' + patch_digest(site))}",
        f"echo {quote('build-env=' + env_prefix(env).strip())}",
        join(["python", "-c", ABI_FACTS]),
        'mpicc_path=$(command -v mpicc 2>/dev/null || true)',
        'echo "mpi=${mpicc_path:+$(readlink -f "$mpicc_path")} '
        '$(mpirun --version 2>/dev/null | head -n 1 || true)"',
        'echo "cxx=$("${CXX:-c++}" --version 2>/dev/null | head -n 1 || true)"',
        'echo "cuda=$(nvcc --version 2>/dev/null | tail -n 1 || true)"',
        'nccl_h=""',
        'for d in "${HOROVOD_NCCL_HOME:-}" "${NCCL_HOME:-}" "${CUDA_HOME:-}"; do',
        '  if [ -n "$d" ] && [ -f "$d/include/nccl.h" ]; then nccl_h="$d/include/nccl.h"; '
        "break; fi",
        "done",
        'echo "nccl=${nccl_h:+$(awk \'/^#define NCCL_(MAJOR|MINOR|PATCH) / {printf "%s.", $3}\''
        ' "$nccl_h")}"',
    )


def build_lines(site: Site) -> list[str]:
    """Build Horovod (or install it from the wheelhouse when this ABI was built before)."""
    hvd = site.horovod
    idx = _pip_idx(site)
    env = build_env(hvd)
    build = '"$PREFIX/build/horovod"'
    lines = [
        _pip_settings(site),
        join(["python", "-m", "pip", "install", "--no-compile", *idx, *BUILD_REQUIREMENTS]),
        'WHEELHOUSE="${HPCPROV_WHEELHOUSE:-$WHEELHOUSE}"',
        'hpcprov_horovod_key > "$STATE/horovod-key.txt"',
        'key=$(sha256sum < "$STATE/horovod-key.txt" | cut -c1-16)',
        'hit=("$WHEELHOUSE/$key"/horovod-*.whl)',
        'if [ -f "${hit[0]}" ]; then',
        '  wheel="${hit[0]}"; how=wheelhouse',
        '  echo "hpcprov: wheelhouse hit: $wheel (key $key); no build needed"',
        "else",
        '  how=built',
        '  echo "hpcprov: no wheel for key $key in $WHEELHOUSE: building Horovod'
        ' (several minutes)"',
        f"  rm -rf {build} && mkdir -p {build}/dist",
        "  " + join(["python", "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
                     "--no-build-isolation", *idx, pip_spec(hvd), "-d", Raw(build)]),
        f"  sdist=({build}/horovod-*.tar.gz)",
        f'  tar xzf "${{sdist[0]}}" -C {build}',
        f"  src=$(find {build} -mindepth 1 -maxdepth 1 -type d -name 'horovod-*' | head -n 1)",
    ]
    for name, text in patches_for(site):
        target = f'"$PREFIX/build/horovod/{name}"'
        lines += [
            f"  printf '%s\\n' {' '.join(quote(t) for t in text.splitlines())} > {target}",
            f'  echo "hpcprov: applying {name}"',
            f'  patch -d "$src" -p1 --forward < {target}',
        ]
    lines += [
        '  MAKEFLAGS="${MAKEFLAGS:--j$(( $(nproc) < 8 ? $(nproc) : 8 ))}" \\',
        "    " + env_prefix(env)
        + join(["python", "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                *hvd.pip_args, *idx, "-w", Raw(f"{build}/dist"), Raw('"$src"')]),
        f"  built=({build}/dist/horovod-*.whl)",
        '  wheel="${built[0]}"',
        '  tmp="$WHEELHOUSE/.tmp-$key-$$"',
        '  if mkdir -p "$tmp" 2>/dev/null && cp "$wheel" "$STATE/horovod-key.txt" "$tmp/"; then',
        '    if mv -T "$tmp" "$WHEELHOUSE/$key" 2>/dev/null; then',
        '      echo "hpcprov: cached in the wheelhouse: $WHEELHOUSE/$key"',
        '    else rm -rf "$tmp"; fi',
        "  else",
        '    rm -rf "$tmp"',
        '    echo "hpcprov: warning: cannot write the wheelhouse $WHEELHOUSE; not cached" >&2',
        "  fi",
        "fi",
        'python -m pip install --no-compile --no-deps --force-reinstall "$wheel"',
        'printf \'wheel=%s\\nsha256=%s\\nkey=%s\\nhow=%s\\n\' "$(basename "$wheel")"'
        ' "$(sha256sum < "$wheel" | cut -d" " -f1)" "$key" "$how" > "$STATE/horovod-wheel.txt"',
    ]
    return lines


def expect_cb_function() -> tuple[str, ...]:
    """`hpcprov_expect_cb SECTION NAME`: NAME must be [X] in that section of -cb output."""
    return (
        "awk -v sec=\"$1:\" -v name=\"$2\" '$0 == sec {inside = 1; next} "
        "/^[^ ]/ {inside = 0} inside && $0 ~ (\"\\\\[X\\\\] \" name \" *$\") {found = 1} "
        "END {exit !found}' \"$STATE/check-build.txt\" && return 0",
        'echo "hpcprov: error: horovodrun -cb does not show [X] $2 under \'$1\', but the'
        ' profile builds it (horovod.frameworks/controllers/gpu_operations)" >&2',
        "return 1",
    )


def check_build_lines(site: Site) -> list[str]:
    # the frameworks were installed --no-compile: let these imports write the bytecode
    lines = ["unset PYTHONDONTWRITEBYTECODE", 'horovodrun -cb | tee "$STATE/check-build.txt"']
    want = expected_check_build(site.horovod)
    for key, names in want.items():
        title = CB_SECTIONS[key][0]
        lines += [join(["hpcprov_expect_cb", title, name]) for name in names]
    lines.append('echo "hpcprov: horovodrun -cb shows everything the profile builds"')
    return lines


def prove_lines(site: Site) -> list[str]:
    """A 2-process allreduce per built framework, through Gloo when built, else MPI."""
    hvd = site.horovod
    lines = ['mkdir -p "$STATE/proof"']
    for fw in hvd.frameworks:
        program = PROGRAMS.get(fw)
        if program is None:
            continue
        path = f'"$STATE/proof/allreduce_{fw}.py"'
        lines.append(f"printf '%s\\n' {' '.join(quote(t) for t in program.splitlines())}"
                     f" > {path}")
        if "gloo" in hvd.controllers:
            run = f"horovodrun --gloo -np 2 -H localhost:2 python {path}"
        else:
            run = f"mpirun -np 2 python {path}"
        lines.append(run)
    lines.append('echo "hpcprov: 2-process allreduce ok"')
    return lines


def record_lines(site: Site) -> list[str]:
    """Facts for the manifest, gathered in the environment itself."""
    lines = [
        'mkdir -p "$STATE/facts"',
        'python -m pip freeze > "$STATE/facts/pip-freeze.txt"',
        "python -c 'import platform; print(platform.python_version())'"
        ' > "$STATE/facts/python.txt"',
        'hostname > "$STATE/facts/host.txt"',
    ]
    if site.modules.system != ModuleSystem.none:
        lines.append('{ module -t list 2>&1 || true; } > "$STATE/facts/modules.txt"')
    else:
        lines.append(': > "$STATE/facts/modules.txt"')
    return lines
