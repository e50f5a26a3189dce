"""Provisioning the `local` profile: cold, wheelhouse hit and warm, with the time per step."""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from benchmarks import BenchError, Context, Process, Result, part_rows, time_processes

NAME = "provision"
TITLE = "Provisioning (`hpcprov setup --site local`)"
COLD_RUNS = int(os.environ.get("HPCPROV_BENCH_COLD_RUNS", "1"))
HIT_RUNS = 3
HIT_TARGET = 12.0  # issue 36: a wheelhouse hit, the proof and the jobs' bytecode kept
METHOD = f"""\
`hpcprov setup --site local --prefix P` as a user runs it, timed as a whole process:

- **cold**: a new prefix, an empty wheelhouse and pip's cache off (`PIP_NO_CACHE_DIR=1`):
  the environment is created, torch 2.13.0 (CPU) installed, Horovod 0.28.1 downloaded,
  patched and compiled, proven and recorded. {COLD_RUNS} run(s) (each is several minutes;
  `HPCPROV_BENCH_COLD_RUNS` sets more). Target: none (the Horovod compile dominates).
- **wheelhouse hit**: a new prefix with the wheelhouse the cold run filled: the same steps,
  but Horovod's wheel for this ABI is installed instead of built. {HIT_RUNS} runs (1 with
  `--quick`). Target: <= 12 s (issue 36; issue 16 asked 20 s, it was 60 s).
- **warm**: the same command again on the finished prefix (nothing changed): it must say
  "nothing to do". Target: <= 1 s.
- **bare steps**: the same setup done by hand (`benchmarks/bare_setup.sh`: a virtualenv,
  torch and numpy, Horovod's sdist with the C++17 and build-type patches built Release with
  PyTorch, MPI and Gloo,
  installed, `horovodrun -cb`, a 2-process allreduce), run right after the cold setup with
  the same cache settings; the ratio row is cold / bare. Target: <= 1.1 (issue 16).

Every run has pip's cache and ccache off (`PIP_NO_CACHE_DIR=1`, `CCACHE_DISABLE=1`), so
"cold" compiles everything.

`local` installs with uv where it is on the PATH (`python.venv.installer: auto`); the run's
note says whether it was. uv's cache is the run's own (`UV_CACHE_DIR`): empty for the cold
run, which fills it for the wheelhouse hits, as a user's second environment finds it. The
check-build step also byte-compiles what a training process imports later (torch._dynamo,
about 4 s here, in a forked process beside `horovodrun -cb` and the proof) so that jobs do
not; where Horovod has Gloo the 2-process proof runs from check-build's interpreter, which
has torch imported (no prove-allreduce step).

The per-step rows come from each run's journal (`PREFIX/.hpcprov/journal.json`, the runner's
own clock around each step). torch is installed from this machine's local wheel directory,
so "install-frameworks" is unpacking and linking, not downloading."""


CHECK_BUILD_NOTE = (
    "`check-build` is `horovodrun -cb`, which forks a process per framework and feature it "
    "reports, then (Horovod has Gloo) the 2-process proof through horovodrun, both from one "
    "interpreter that imported torch first: the forks, and horovodrun's own check that Gloo "
    "is built, inherit the import. A forked process imports torch._dynamo beside them (what "
    "a training process's optimizer imports on first use) to write its bytecode once, here, "
    "instead of in every rank of every job that cannot write it.")


def _hpcprov() -> list[str]:
    exe = Path(sys.executable).with_name("hpcprov")
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "hpcprov"]


def _setup(prefix: Path, env: dict[str, str]) -> tuple[float, dict[str, float]]:
    """One real setup into a new ``prefix``: (wall seconds, seconds per step)."""
    shutil.rmtree(prefix, ignore_errors=True)
    t0 = time.perf_counter()
    Process([*_hpcprov(), "setup", "--site", "local", "--prefix", str(prefix)], env,
            timeout=3600).once()
    wall = time.perf_counter() - t0
    journal = json.loads((prefix / ".hpcprov" / "journal.json").read_text())
    return wall, {name: s["seconds"] for name, s in journal["steps"].items()
                  if s.get("status") == "done"}


def _bare(prefix: Path, env: dict[str, str]) -> float:
    """The bare steps (bare_setup.sh) into ``prefix``: wall seconds."""
    here = Path(__file__).resolve().parent
    proof = here.parent / "provision" / "programs" / "allreduce_pytorch.py"
    patches = [str(here.parent / "provision" / "patches" / f"horovod-0.28.1-{name}.patch")
               for name in ("cxx-standard", "build-type")]  # what hpcprov applies for local here
    t0 = time.perf_counter()
    Process(["bash", str(here / "bare_setup.sh"), str(prefix), str(proof), *patches], env,
            timeout=3600).once()
    return time.perf_counter() - t0


def run(ctx: Context) -> list[Result]:
    ctx.cache.mkdir(parents=True, exist_ok=True)
    base = Path(tempfile.mkdtemp(prefix="provision-", dir=ctx.cache))
    wheelhouse = base / "wheelhouse"
    # uv's cache is the run's own: empty for the cold run, filled by it for the hits (as a
    # user's second environment finds it); pip's cache and ccache stay off throughout
    env = {**os.environ, "HPCPROV_WHEELHOUSE": str(wheelhouse), "PIP_NO_CACHE_DIR": "1",
           "CCACHE_DISABLE": "1", "UV_CACHE_DIR": str(base / "uv-cache")}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    results: list[Result] = []
    try:
        cold_walls, cold_steps = [], []
        for i in range(COLD_RUNS):
            shutil.rmtree(wheelhouse, ignore_errors=True)
            ctx.log(f"cold setup {i + 1}/{COLD_RUNS} (builds Horovod: several minutes)")
            wall, steps = _setup(base / "cold", env)
            cold_walls.append(wall)
            cold_steps.append(steps)
        results.append(Result("cold (nothing cached)", "s", cold_walls))
        ctx.log("bare steps (the same setup by hand: several minutes)")
        bare = _bare(base / "bare", env)
        results.append(Result("bare steps (the same by hand)", "s", [bare]))
        results.append(Result("cold / bare steps", "x", [cold_walls[0] / bare], target=1.1))
        hits = 1 if ctx.quick else HIT_RUNS
        hit_walls, hit_steps = [], []
        for i in range(hits):
            ctx.log(f"wheelhouse-hit setup {i + 1}/{hits}")
            wall, steps = _setup(base / "hit", env)
            if "build-horovod" not in steps:
                raise BenchError("the wheelhouse-hit setup ran no build-horovod step")
            hit_walls.append(wall)
            hit_steps.append(steps)
        results.append(Result("wheelhouse hit (Horovod built before for this ABI)", "s",
                              hit_walls, target=HIT_TARGET,
                              note="installer: " + ("uv" if shutil.which("uv") else "pip")))
        ctx.log("warm setups (nothing to do)")
        warm = time_processes({"warm": Process(
            [*_hpcprov(), "setup", "--site", "local", "--prefix", str(base / "hit")], env)},
            ctx.repeat)["warm"]
        results.append(Result("warm (nothing changed: \"nothing to do\")", "s", warm,
                              target=1.0))
        results += part_rows("cold", cold_steps, "step ") \
            + part_rows("wheelhouse hit", hit_steps, "step ")
        if hit_steps:
            hit = {k: sorted(r[k] for r in hit_steps)[len(hit_steps) // 2]
                   for k in hit_steps[0]}
            top = sorted(hit.items(), key=lambda kv: -kv[1])[:3]
            ctx.note("Where a wheelhouse-hit setup spends its time (median per step): "
                     + ", ".join(f"{k} {v:.1f} s" for k, v in top) + ". " + CHECK_BUILD_NOTE)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    return results
