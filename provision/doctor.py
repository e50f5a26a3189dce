"""`hpcprov doctor`: check a provisioned prefix against its manifest.

One probe script (pure text: calls of the shell library's hpcprov_probe_* functions,
provision/scripts/doctor.sh, and of provision/programs/doctor_probe.py, carried verbatim)
runs in the environment and prints facts as `key=value` lines; `judge` turns manifest +
facts into checks, each with a fix. Only `probe` has effects.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from hpcprov.core.commands import run_in_session
from hpcprov.core.errors import HpcprovError
from hpcprov.core.shell import join
from hpcprov.jobs.modules import init_lines
from hpcprov.provision.library import definitions, file_function
from hpcprov.provision.manifest import FRAMEWORK_DISTS, Manifest, parse_freeze
from hpcprov.site.gpu_vendors import Vendor
from hpcprov.site.kinds import ModuleSystem

IMPORTS = {"PyTorch": "horovod.torch", "TensorFlow": "horovod.tensorflow"}

@dataclass
class Check:
    name: str
    status: str  # ok | warn | fail | skip
    detail: str
    fix: str = ""

    def to_json(self) -> dict[str, str]:
        return asdict(self)


def _container_probe(manifest: Manifest) -> str:
    """Bash probing a container site's prefix (its Python lives in the image, not in the
    prefix): the runtime's module, the host's GPUs, the image the jobs read."""
    from hpcprov.jobs.launchers.images import resolved_image

    box = manifest.container
    assert box is not None
    mods = manifest.site_profile.modules
    generated: dict[str, tuple[str, ...]] = {}
    calls: list[str] = []
    if mods is not None and mods.system != ModuleSystem.none and box.module:
        generated["hpcprov_modules_init"] = tuple(init_lines(mods))
        calls += ["hpcprov_modules_init >/dev/null 2>&1",
                  join(["hpcprov_probe_modules", box.module])]
    calls.append(join(["hpcprov_probe_host", manifest.gpu_vendor.counter.pattern,
                       *manifest.gpu_vendor.counter.argv]))
    if box.image:  # a glob: its last match, as a job resolves it (no exit when none)
        resolve, word = resolved_image(box.image)
        calls += [*resolve[:1], f"hpcprov_probe_image {word}"]
    return "\n".join(["set +e", *definitions(calls, generated), "", *calls]) + "\n"


def probe_script(manifest: Manifest, prefix: Path) -> str:
    """Bash that prints the facts doctor judges; never fails itself."""
    if manifest.container is not None:
        return _container_probe(manifest)
    mods = manifest.site_profile.modules
    expected = manifest.check_build.expected.get("frameworks", [])
    imports = [IMPORTS[f] for f in expected if f in IMPORTS]
    generated: dict[str, tuple[str, ...]] = {}
    calls = []
    if mods is not None and mods.system != ModuleSystem.none:
        generated["hpcprov_modules_init"] = tuple(init_lines(mods))
        calls += ["hpcprov_modules_init >/dev/null 2>&1",
                  join(["hpcprov_probe_modules", *manifest.modules.runtime])]
    own_conda = not manifest.site_profile.python.conda.module  # not the site's conda
    if manifest.backend == "conda" and own_conda:
        calls.append(join(["hpcprov_probe_conda", str(prefix / "miniconda3" / "bin" / "conda")]))
    calls += [
        join(["hpcprov_probe_host", manifest.gpu_vendor.counter.pattern,
              *manifest.gpu_vendor.counter.argv]),
        join(["hpcprov_probe_activate", str(prefix / "activate")]),
        join([file_function("doctor_probe.py")]) + " | "
        + join(["python", "-", *_wheel_args(manifest, prefix), *imports]),
    ]
    return "\n".join(["set +e", *definitions(calls, generated), "", *calls]) + "\n"


def kept_wheel(manifest: Manifest, prefix: Path) -> Path | None:
    """The copy of the Horovod wheel setup installed, kept in PREFIX/.hpcprov/horovod-wheel
    (None when setup installed no wheel of its own)."""
    name = manifest.horovod_wheel.get("wheel", "")
    if not name.endswith(".whl") or "/" in name:
        return None
    return prefix / ".hpcprov" / "horovod-wheel" / name


def _wheel_args(manifest: Manifest, prefix: Path) -> list[str]:
    wheel = kept_wheel(manifest, prefix)
    return ["--wheel", str(wheel)] if wheel is not None else []


PROBE_TIMEOUT = 300.0  # seconds; HPCPROV_PROBE_TIMEOUT overrides it


def probe_timeout() -> float:
    """How long the probe may run: ``$HPCPROV_PROBE_TIMEOUT`` seconds, else 300."""
    value = os.environ.get("HPCPROV_PROBE_TIMEOUT", "").strip()
    if not value:
        return PROBE_TIMEOUT
    try:
        seconds = float(value)
    except ValueError:
        seconds = 0.0
    if not 0 < seconds < 1e6:
        raise HpcprovError(f"HPCPROV_PROBE_TIMEOUT={value!r} is not a number of seconds: set "
                           "it to one (e.g. 600), or unset it for the default of "
                           f"{PROBE_TIMEOUT:g} s")
    return seconds


def _facts(stdout: str) -> dict[str, list[str]]:
    facts: dict[str, list[str]] = {}
    for line in stdout.splitlines():
        if "=" in line:
            key, value = line.split("=", 1)
            facts.setdefault(key, []).append(value)
    return facts


def _hung(manifest: Manifest, prefix: Path, facts: dict[str, list[str]], timeout: float,
          ) -> str:
    """The one line for a probe that did not finish: where it waited, from the facts it
    printed until then (its calls print in order: the host, then activate, then python)."""
    activate = prefix / "activate"
    redo = join(["hpcprov", "setup", "--site", manifest.profile or manifest.site, "--prefix",
                 str(prefix), "--redo"])
    fix = (f"fix it, or set up again ({redo}); HPCPROV_PROBE_TIMEOUT=SECONDS gives a slow "
           "one longer")
    if "activate_rc" in facts:
        source = join(["source", str(activate)])
        where = (f"the environment's python did not answer after `{source}`: run `{source}; "
                 "python -c 'import horovod'` by hand to see where it waits")
    elif "mpi" in facts:
        where = (f"the activate script {activate} did not return: run "
                 f"`{join(['bash', '-x', str(activate)])}` by hand to see what it waits for")
    else:
        where = (f"the module system, `{join(manifest.gpu_vendor.counter.argv)}` or `mpirun "
                 f"--version` did not answer (before sourcing {activate}): run them by hand "
                 "to see which waits")
    return (f"doctor's probe did not finish within {timeout:g} s and was stopped with all it "
            f"started: {where}; {fix}")


def probe(manifest: Manifest, prefix: Path, timeout: float | None = None
          ) -> dict[str, list[str]]:
    """Run the probe (in a session of its own: when it ends or hangs, all it started is
    killed); facts as key -> values (a key may repeat). A probe that does not finish within
    ``timeout`` seconds (default :func:`probe_timeout`) is one HpcprovError line naming where
    it waited (the activate script, mostly) and the fix."""
    limit = probe_timeout() if timeout is None else timeout
    ran = run_in_session(["bash", "-c", probe_script(manifest, prefix)], limit)
    facts = _facts(ran.stdout)
    if ran.returncode is None:
        raise HpcprovError(_hung(manifest, prefix, facts, limit))
    return facts


def _one(facts: dict[str, list[str]], key: str) -> str:
    return (facts.get(key) or [""])[-1]


def judge(manifest: Manifest, facts: dict[str, list[str]], gpus_expected: int | None,
          rerun: str) -> list[Check]:
    """The checks, from the manifest and the probe's facts."""
    checks = [Check("ready", "ok", f"set up {manifest.created} on {manifest.host} for site "
                    f"{manifest.site}")]
    if manifest.container is not None:
        return checks + _container_checks(manifest, facts, gpus_expected, rerun)
    missing = facts.get("module_missing", [])
    if missing:
        checks.append(Check("modules", "fail", "runtime module(s) not available: "
                            + " ".join(missing), "the site renamed or removed them: update "
                            "modules.runtime in the profile and run setup again"))
    elif manifest.modules.runtime:
        checks.append(Check("modules", "ok", "all runtime modules are available"))
    if _one(facts, "activate_rc") not in ("0", ""):
        checks.append(Check("activate", "fail", f"source {manifest.activate} failed",
                            f"run it by hand to see why, or {rerun} --redo"))
    else:
        checks.append(Check("activate", "ok", manifest.activate))
    try:
        py = json.loads(_one(facts, "python_json") or "{}")
    except ValueError:
        py = {}
    checks += _framework_checks(manifest, py, rerun)
    wheel = _wheel_check(manifest, py, rerun) if py else None
    if wheel is not None:
        checks.append(wheel)
    auto = _one(facts, "conda_auto_activate_base")
    if manifest.backend == "conda":
        if auto.lower() == "false":
            checks.append(Check("conda-base", "ok", "auto_activate_base is off"))
        else:
            checks.append(Check("conda-base", "fail", f"conda auto_activate_base is {auto or '?'}"
                                ": every shell (and job) starts in base, shadowing the modules",
                                "conda config --set auto_activate_base false"))
    checks.append(_gpu_check(_one(facts, "gpus"), gpus_expected, manifest.gpu_vendor))
    mpi = _one(facts, "mpi")
    if "(Open MPI) 5." in mpi:
        checks.append(Check("horovodrun-mpi", "warn", f"{mpi}: horovodrun --mpi is broken with "
                            "Open MPI 5 (it passes '-bind-to none' with one dash)",
                            "launch with horovodrun --gloo or mpirun directly"))
    return checks


def _container_checks(manifest: Manifest, facts: dict[str, list[str]],
                      gpus_expected: int | None, rerun: str) -> list[Check]:
    """A container site's prefix: no environment to activate (the Python, its frameworks
    and Horovod are the image's, proved in it by setup's check-build), so the runtime's
    module, the image the jobs read and the GPUs."""
    box = manifest.container
    assert box is not None
    out = []
    missing = facts.get("module_missing", [])
    if missing:
        out.append(Check("modules", "fail", f"the runtime's module {missing[0]} is not "
                         "available", "the site renamed or removed it: update "
                         "containers.module in the profile and run setup again"))
    elif box.module:
        out.append(Check("modules", "ok", f"the runtime's module {box.module} is available"))
    state = _one(facts, "image")
    if not box.image:
        out.append(Check("image", "skip", f"the image is kept in {box.runtime}'s own store "
                         "(setup pulled it there and checked it with its check-build step)"))
    elif state == "ok":
        out.append(Check("image", "ok", f"{box.image} is readable ({box.runtime} runs the "
                         "jobs in it)"))
    else:
        out.append(Check("image", "fail", f"no readable image at {box.image}, which the jobs "
                         f"run in with {box.runtime}", f"{rerun} --redo (pulls it again), or "
                         "make the site's image readable there"))
    out.append(_gpu_check(_one(facts, "gpus"), gpus_expected, manifest.gpu_vendor))
    return out


def _modules_of(manifest: Manifest) -> dict[str, str]:
    """Distribution name -> the module that provides it (installer: module), from the
    profile the manifest recorded."""
    out = {}
    for key, fw in manifest.site_profile.python.frameworks.items():
        if fw.installer == "module" and fw.module:
            dists = FRAMEWORK_DISTS.get("torch" if key == "pytorch" else key, ())
            out.update(dict.fromkeys(dists, fw.module))
    return out


def _framework_checks(manifest: Manifest, py: dict[str, Any], rerun: str) -> list[Check]:
    out = []
    built = {k.lower().replace("_", "-"): v
             for k, v in parse_freeze("\n".join(manifest.pip_freeze)).items()}
    now = py.get("versions", {})
    modules = _modules_of(manifest)
    for name in (n for names in FRAMEWORK_DISTS.values() for n in names):
        was, is_ = built.get(name), now.get(name)
        if was is None and is_ is None:
            continue
        if was != is_:
            fix = (f"pip install {name}=={was} in the environment, or {rerun} --redo "
                   "(rebuilds Horovod against the new version)") if was else f"{rerun} --redo"
            if name in modules:  # the site's module changed under the environment
                fix = (f"load the version of module {modules[name]} that gives {name} {was} "
                       f"(modules.runtime), or {rerun} --redo (rebuilds Horovod against "
                       "what the module gives now)")
            out.append(Check(f"version:{name}", "fail",
                             f"{name} is {is_ or 'missing'} now, Horovod was built with "
                             f"{was or 'none'}: importing Horovod raises "
                             "HorovodVersionMismatchError (or fails)", fix))
        else:
            out.append(Check(f"version:{name}", "ok", f"{name} {is_} as built"))
    for mod, result in py.get("imports", {}).items():
        if result == "ok":
            out.append(Check(f"import:{mod}", "ok", "imports"))
        else:
            out.append(Check(f"import:{mod}", "fail", result, f"{rerun} --redo"))
    if not py:
        out.append(Check("python", "fail", "the environment's python did not run",
                         f"{rerun} --redo"))
    return out


def _wheel_check(manifest: Manifest, py: dict, rerun: str) -> Check | None:
    """The wheel setup installed: its kept copy still has the SHA-256 the manifest recorded
    at install, and the installed Horovod files are still the ones that wheel holds."""
    want = manifest.horovod_wheel.get("sha256")
    if not want:
        return None
    wheel = py.get("wheel")
    facts = wheel if isinstance(wheel, dict) else {}
    if not facts.get("sha256"):
        why = facts.get("error", "not probed")
        return Check("horovod-wheel", "warn", f"cannot check the Horovod wheel setup installed "
                     f"({why}): a prefix set up before hpcprov kept a copy of it has none",
                     f"{rerun} --redo (keeps a copy to check)")
    if facts["sha256"] != want:
        return Check("horovod-wheel", "fail", "the Horovod wheel setup installed (kept in "
                     f".hpcprov/horovod-wheel) has SHA-256 {facts['sha256']}, but the manifest "
                     f"recorded {want} when it was installed: it changed since",
                     f"find out who changed it, then {rerun} --redo")
    changed = facts.get("changed") or []
    if changed:
        return Check("horovod-wheel", "fail", f"{len(changed)} installed Horovod file(s) "
                     "differ from the wheel setup installed: " + ", ".join(changed[:5]),
                     f"find out who changed them, then {rerun} --redo")
    return Check("horovod-wheel", "ok", "the wheel's SHA-256 is the manifest's; "
                 f"{facts.get('checked', 0)} installed files match the wheel")


def _gpu_check(gpus: str, expected: int | None, vendor: Vendor) -> Check:
    if expected is None or expected == 0:
        if gpus in ("", "none", "0"):
            return Check("gpus", "skip", "no GPUs expected here and none visible")
        return Check("gpus", "ok", f"{gpus} GPU(s) visible")
    if gpus in ("", "none"):
        return Check("gpus", "fail", f"{expected} GPU(s) expected, {vendor.counter.argv[0]} not "
                     "found",
                     "run doctor inside a GPU job on a compute node (the login node has none)")
    if int(gpus) < expected:
        return Check("gpus", "fail", f"{gpus} of {expected} GPU(s) visible",
                     "check the job's --gres/--gpus request and "
                     f"{vendor.visible_devices}")
    return Check("gpus", "ok", f"{gpus} GPU(s) visible ({expected} expected)")


def not_ready(prefix: Path, journal_steps: dict[str, Any], rerun: str) -> Check:
    """The check for a prefix without a manifest."""
    if not journal_steps:
        return Check("ready", "fail", f"{prefix} was never set up by hpcprov", rerun)
    bad = [(k, v) for k, v in journal_steps.items() if v.get("status") != "done"]
    if bad:
        step, rec = bad[0]
        return Check("ready", "fail", f"not ready: setup stopped at step {step} "
                     f"({rec.get('status')}; log {rec.get('log')})",
                     f"{rerun} (resumes at {step})")
    return Check("ready", "fail", "not ready: setup has not finished", rerun)
