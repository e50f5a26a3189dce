"""CLI responsiveness: whole-process wall time of hpcprov commands, beside ReFrame's."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

from benchmarks import BenchError, Context, Process, Result, time_processes

NAME = "cli"
TITLE = "CLI responsiveness"
TARGET = 0.2  # `--help`, and a command whose profile is in the cache (warm)
FIRST_RUN_TARGET = 0.8  # a command that validates its profile: first run, changed profile
HEAVY = ("torch", "tensorflow", "horovod", "matplotlib", "numpy", "rich", "pandas")
COMMANDS = {
    "--help": ["--help"],
    "sites": ["sites"],
    "setup --site neuron --dry-run": ["setup", "--site", "neuron", "--dry-run"],
    "jobscript --site neuron -N 2 -- python train.py":
        ["jobscript", "--site", "neuron", "-N", "2", "--", "python", "train.py"],
}
# PYTHONDONTWRITEBYTECODE would recompile hpcprov's modules in every run: installed from a
# wheel they are byte-compiled, and an editable install writes __pycache__ on first use
UNSET = ("HPCPROV_SITE", "HPCPROV_SITES_PATH", "HPCPROV_NO_CACHE", "PYTHONPROFILEIMPORTTIME",
         "PYTHONDONTWRITEBYTECODE")
REFERENCES = {  # what any command pays before hpcprov's own code runs
    "interpreter start-up (`python -c pass`)": ["-c", "pass"],
    "interpreter without site hooks (`python -S -c pass`)": ["-S", "-c", "pass"],
    "`import click`": ["-c", "import click"],
    "`import yaml`": ["-c", "import yaml"],
    "`from pydantic import BaseModel`": ["-c", "from pydantic import BaseModel"],
    "`import hpcprov.site.model` (the site model classes)": ["-c", "import hpcprov.site.model"],
}
METHOD = f"""\
Each row is the wall time of a whole process (`subprocess.run`, `time.perf_counter`: start,
imports, work, exit; output to /dev/null), after one untimed warm-up run. The commands are
interleaved (run 1 of every row, then run 2, ...), so load from other work on the machine
falls on all rows alike. Every command is timed for two installs: the editable install of
this checkout in the interpreter that runs the benchmarks (`pip install -e .`, as the
README's first command does; this interpreter's site-packages also run other `.pth`
start-up hooks, which the reference rows include), and *wheel in a venv*: `pip install .`
into a virtual environment of its own (`.bench-cache/hpcprov-venv`, reinstalled from the
checkout at every run), which is what a user installing hpcprov gets and how ReFrame is
measured too. Commands run with only the bundled profiles (empty
`XDG_CONFIG_HOME`, no `HPCPROV_SITES_PATH`) and with bytecode caching on
(`PYTHONDONTWRITEBYTECODE` removed: a wheel install is byte-compiled, an editable one writes
`__pycache__` on first use; the warm-up run does that). Three cases per command that reads
a profile. *warm*: the user's profile cache (`$XDG_CACHE_HOME/hpcprov/profiles`, see
`hpcprov/site/cache.py`) holds the validated profiles, the usual case. *first run*: the
cache is emptied before every run, as on first use after installing: the bundled profiles
are parsed and validated (then cached). *changed profile*: the cache is emptied before every
run and the profiles are copies of the bundled ones with one comment line added, first on
`HPCPROV_SITES_PATH`, as after a user edits a profile: they are parsed and validated (then
cached), which is paid once per change. The target is {TARGET} s for `--help` and a warm
command, {FIRST_RUN_TARGET} s for a first run or a changed profile. The reference rows are
what every Python command pays here before any of hpcprov's code runs. ReFrame
(`reframe-hpc` from PyPI, in its own virtual environment under `.bench-cache/`) runs
`reframe --help` in the same run. The import rows run each
command once with `PYTHONPROFILEIMPORTTIME=1` and count heavy modules ({", ".join(HEAVY)})
imported; their notes list the import self-time by top-level package (inflated by the
instrumentation itself; compare them with each other, not with the wall times)."""


def _hpcprov() -> list[str]:
    script = Path(sys.executable).parent / "hpcprov"
    if script.is_file():
        return [str(script)]
    found = shutil.which("hpcprov")
    if found:
        return [found]
    return [sys.executable, "-m", "hpcprov"]


def _venv(ctx: Context, name: str, first: list[str], again: list[str] | None = None
          ) -> tuple[Path | None, str]:
    """(the bin folder of .bench-cache/NAME, "") after ``pip install FIRST`` into a new venv
    there on first use, and ``pip install AGAIN`` at every later call when given; (None,
    why) when that fails."""
    venv = ctx.cache / name
    python = venv / "bin" / "python"
    try:
        if not python.is_file():
            ctx.log(f"installing {' '.join(first)} into {venv} (first use only)")
            subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True,
                           capture_output=True, timeout=300)
            subprocess.run([str(python), "-m", "pip", "install", "-q", *first], check=True,
                           capture_output=True, timeout=1800)
        elif again:
            subprocess.run([str(python), "-m", "pip", "install", "-q", *again], check=True,
                           capture_output=True, timeout=600)
    except subprocess.CalledProcessError as exc:
        tail = (exc.stderr or b"").decode(errors="replace").strip().splitlines()[-1:]
        return None, f"install failed: {' '.join(tail) or exc}"
    except (OSError, subprocess.SubprocessError) as exc:
        return None, str(exc)
    return venv / "bin", ""


def _reframe(ctx: Context) -> tuple[list[str] | None, str]:
    """(argv of reframe, version) from .bench-cache/reframe-venv, created on first use."""
    bin_dir, why = _venv(ctx, "reframe-venv", ["reframe-hpc"])
    if bin_dir is None:
        return None, why
    exe = bin_dir / "reframe"
    try:
        version = subprocess.run([str(exe), "--version"], capture_output=True, text=True,
                                 timeout=120).stdout.strip()
    except (OSError, subprocess.SubprocessError) as exc:
        return None, str(exc)
    return [str(exe)], version


def imports(argv: list[str], env: dict[str, str]) -> tuple[set[str], dict[str, float]]:
    """(modules imported, self seconds by top-level package) of one run of argv."""
    proc = subprocess.run(argv, env={**env, "PYTHONPROFILEIMPORTTIME": "1"},
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                          timeout=300)
    names: set[str] = set()
    by_package: dict[str, float] = defaultdict(float)
    for line in proc.stderr.splitlines():
        if not line.startswith("import time:") or "self [us]" in line:
            continue
        self_us, _, name = line[len("import time:"):].split("|")
        name = name.strip()
        names.add(name)
        by_package[name.split(".")[0]] += int(self_us) / 1e6
    return names, dict(by_package)


def _import_row(name: str, argv: list[str], env: dict[str, str]) -> Result:
    names, by_package = imports(argv, env)
    heavy = sorted({n.split(".")[0] for n in names} & set(HEAVY))
    light = [m for m in ("pydantic", "yaml", "asyncio") if m in names]
    top = sorted(by_package.items(), key=lambda kv: -kv[1])[:6]
    note = (f"heavy: {', '.join(heavy) or 'none'}; pydantic/yaml/asyncio: "
            f"{', '.join(light) or 'none'}; {len(names)} modules; largest self-time: "
            + ", ".join(f"{k} {v * 1000:.0f} ms" for k, v in top))
    return Result(name, "modules", [float(len(heavy))], target=0, note=note)


def _wheel_install(ctx: Context) -> tuple[Path | None, str]:
    """(hpcprov console script, "") of hpcprov installed as a user installs it: `pip install
    .` (a wheel, byte-compiled) into its own venv, .bench-cache/hpcprov-venv, reinstalled
    from this tree at every run; (None, why) when that fails."""
    repo = str(Path(__file__).resolve().parent.parent)
    bin_dir, why = _venv(ctx, "hpcprov-venv", [repo],
                         again=["--no-deps", "--force-reinstall", repo])
    return (bin_dir / "hpcprov" if bin_dir else None), why


def _bundled_profiles() -> list[Path]:
    from hpcprov.site.loader import bundled_site_dir

    return sorted(bundled_site_dir().glob("*.yaml"))


def run(ctx: Context) -> list[Result]:
    hpcprov = _hpcprov()
    results: list[Result] = []
    with tempfile.TemporaryDirectory(prefix="hpcprov-bench-cli-") as tmp:
        env = {k: v for k, v in os.environ.items() if k not in UNSET}
        env["XDG_CONFIG_HOME"] = str(Path(tmp) / "config")
        warm = {**env, "XDG_CACHE_HOME": str(Path(tmp) / "warm")}
        cold_dir = Path(tmp) / "cold"
        cold = {**env, "XDG_CACHE_HOME": str(cold_dir)}
        edited = Path(tmp) / "edited-sites"
        edited.mkdir()
        for profile in _bundled_profiles():
            text = profile.read_text()
            (edited / profile.name).write_text(text + "\n# edited by the benchmark\n")
        changed = {**cold, "HPCPROV_SITES_PATH": str(edited)}

        def empty_cache() -> None:
            shutil.rmtree(cold_dir, ignore_errors=True)

        cases: dict[str, Process] = {
            label: Process([sys.executable, *args], env) for label, args in REFERENCES.items()}
        wheel, why = _wheel_install(ctx)
        installs = {"": hpcprov}
        if wheel is not None:
            installs[", wheel in a venv"] = [str(wheel)]
            cases["interpreter start-up (`python -c pass`), the venv"] = Process(
                [str(wheel.with_name("python")), "-c", "pass"], env)
        targets: dict[str, float] = {}
        for suffix, exe in installs.items():
            for label, args in COMMANDS.items():
                argv = [*exe, *args]
                if label == "--help":
                    name = f"`hpcprov {label}`{suffix}"
                    cases[name], targets[name] = Process(argv, warm), TARGET
                    if not suffix:
                        name = f"`python -m hpcprov {label}`"
                        cases[name] = Process([sys.executable, "-m", "hpcprov", *args], warm)
                        targets[name] = TARGET
                    continue
                name = f"`hpcprov {label}`, warm{suffix}"
                cases[name], targets[name] = Process(argv, warm), TARGET
                for case, case_env in (("first run", cold), ("changed profile", changed)):
                    name = f"`hpcprov {label}`, {case}{suffix}"
                    cases[name] = Process(argv, case_env, before=empty_cache)
                    targets[name] = FIRST_RUN_TARGET
        notes = {}
        on_path = shutil.which("hpcprov", path=env.get("PATH"))
        if on_path and Path(on_path).resolve() != Path(hpcprov[0]).resolve():
            cases["`hpcprov --help` through PATH"] = Process([on_path, "--help"], warm)
            notes["`hpcprov --help` through PATH"] = (
                f"PATH finds {on_path}, a wrapper (e.g. a pyenv shim) in front of "
                f"{hpcprov[0]}; the difference to `hpcprov --help` is the wrapper's")
        reframe, version = _reframe(ctx)
        rf_label = f"ReFrame `reframe --help` ({version})" if reframe \
            else "ReFrame `reframe --help`"
        if reframe is not None:
            cases[rf_label] = Process([*reframe, "--help"], env)
        ctx.log(f"{len(cases)} commands, interleaved, {ctx.repeat} runs each")
        try:
            runs = time_processes(cases, ctx.repeat)
        except BenchError as exc:
            if reframe is None or str(reframe[0]) not in str(exc):
                raise
            del cases[rf_label]  # only ReFrame failed: measure the others without it
            version = str(exc)
            reframe = None
            runs = time_processes(cases, ctx.repeat)
        for label in cases:
            results.append(Result(label, "s", runs[label],
                                  target=targets.get(label),
                                  note=notes.get(label, "")))
        if reframe is None:
            results.append(Result(rf_label, "s", status=f"not available: {version}"))
        if wheel is None:
            results.append(Result("hpcprov, wheel in a venv", "s",
                                  status=f"not available: {why}"))

        ctx.log("imports (PYTHONPROFILEIMPORTTIME)")
        for label, args in COMMANDS.items():
            argv = [*hpcprov, *args]
            if label == "--help":
                results.append(_import_row(f"imports: `hpcprov {label}`", argv, warm))
                continue
            results.append(_import_row(f"imports: `hpcprov {label}`, warm", argv, warm))
            empty_cache()
            results.append(_import_row(f"imports: `hpcprov {label}`, first run", argv, cold))
            empty_cache()
            results.append(_import_row(f"imports: `hpcprov {label}`, changed profile", argv,
                                       changed))
    _analyse(ctx, results)
    return results


def _analyse(ctx: Context, results: list[Result]) -> None:
    """The floor under any command that needs the site model, from this run's rows."""
    by_name = {r.name: r.median for r in results if r.median is not None}
    start = by_name.get("interpreter start-up (`python -c pass`)")
    bare = by_name.get("interpreter without site hooks (`python -S -c pass`)")
    click = by_name.get("`import click`")
    pyd = by_name.get("`from pydantic import BaseModel`")
    model = by_name.get("`import hpcprov.site.model` (the site model classes)")
    if None in (start, bare, click, pyd, model):
        return
    assert start and bare and click and pyd and model
    ctx.note(
        f"**Where the time goes** (this run): the interpreter starts in {start * 1000:.0f} ms, "
        f"{(start - bare) * 1000:.0f} ms of it in site-packages start-up hooks (`.pth` files of "
        f"this installation); click adds {(click - start) * 1000:.0f} ms. A *warm* command "
        f"reads its site from the profile cache into its typed classes "
        f"(`hpcprov/site/types.py`), so "
        f"it imports neither PyYAML nor pydantic (the import rows show it). On a *first run* "
        f"or with a *changed profile* hpcprov parses and validates it: pydantic alone costs "
        f"{(pyd - start) * 1000:.0f} ms (pydantic-core's schema module imports "
        f"`typing_extensions`, whose `deprecated` decorator imports asyncio, ssl, socket and "
        f"concurrent.futures) and the model classes {(model - pyd) * 1000:.0f} ms more, so "
        f"validating a profile cannot take less than {(model + click - start) * 1000:.0f} ms here; "
        f"that is paid once per install or profile change, then the site is cached.")
