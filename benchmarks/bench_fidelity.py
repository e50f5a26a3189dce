"""Measurement fidelity: hpcprov's allreduce busbw against a bare torch.distributed loop in
the same job, and the harness overhead of `hpcprov validate` around its jobs."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

from benchmarks import BenchError, Context, Result

NAME = "fidelity"
TITLE = "Measurement fidelity"
SIZES = (1 << 20, 4 << 20, 16 << 20, 64 << 20)
ITERS = 20
METHOD = f"""\
**busbw against a bare loop.** One job runs hpcprov's allreduce program
(`validate/programs/allreduce.py --impl torch --dist-backend gloo`) and a bare loop
(`benchmarks/bare_allreduce.py`: warm-up, one barrier, {ITERS} back-to-back
`dist.all_reduce` calls timed as a block, no checks) one after the other, alternating, with
the same 2 ranks and the same sizes ({", ".join(f"{s >> 20} MiB" for s in SIZES)}, {ITERS}
iterations each). Each alternation gives one ratio per size, hpcprov / bare; the table
shows the median over the alternations. Target: >= 0.95 at every size >= 1 MiB. Each
alternation also runs the bare loop a second time: the *A/A control* rows (bare / bare
again) show how far two runs of the very same loop differ here, so a hpcprov / bare ratio
can be read against the noise; the *pooled* rows put every size's ratios together. Two
placements:
*local* (2 processes on this machine, torchrun, Gloo over loopback) and *testbed* (2 nodes
of the Slurm testbed, one rank each, srun, Gloo over the veth bridge).

**Harness overhead.** `hpcprov validate --site testbed -N 2 --checks allreduce` (three
jobs, one after the other: torch Gloo, Horovod Gloo, Horovod MPI; sizes up to 1 MiB,
3 iterations) timed as a whole process, minus the jobs' own run times (each job script
records its own start and end in its status file). What is left is hpcprov's start-up,
writing the scripts, `sbatch`, the wait for Slurm to start each job, the polling delay
after each job ends, judging and reporting. Target: <= 5 s."""


def _bare() -> Path:
    return Path(__file__).resolve().parent / "bare_allreduce.py"


def _program() -> Path:
    from importlib import resources

    return Path(str(resources.files("hpcprov.validate") / "programs" / "allreduce.py"))


def _ratios(text: str, label: str = "BARE", against: str = "HPCPROV_RESULT"
            ) -> list[dict[int, float]]:
    """Per alternation: size -> busbw of `against` / busbw of `label`, from the job's
    output (the hpcprov / bare ratios by default; BARE against BARE2 for the A/A control)."""
    out: list[dict[int, float]] = []
    ours: dict[int, float] = {}
    for line in text.splitlines():
        if m := re.search(rf"{against} (\{{.*\}})", line):
            rec = json.loads(m.group(1))
            ours[rec["size_bytes"]] = rec["busbw_GBps"]
        elif m := re.search(rf"(?:^|\s){label} (\{{.*\}})", line):
            rec = json.loads(m.group(1))
            if rec["size_bytes"] in ours:
                if not out or rec["size_bytes"] in out[-1]:
                    out.append({})
                out[-1][rec["size_bytes"]] = ours[rec["size_bytes"]] / rec["busbw_GBps"]
    return out


def _script(rounds: int, launch: str, prelude: str = "", python: bool = True) -> str:
    """The job: the two programs alternating; ``launch`` starts the ranks (torchrun takes
    the script itself, srun the interpreter and the script)."""
    sizes = ",".join(str(s) for s in SIZES)
    exe = [sys.executable] if python else []
    ours = shlex.join([*exe, str(_program()), "--impl", "torch", "--dist-backend",
                       "gloo", "--min-bytes", str(SIZES[0]), "--max-bytes", str(SIZES[-1]),
                       "--iters", str(ITERS), "--max-seconds-per-size", "0"])
    bare = shlex.join([*exe, str(_bare()), "--sizes", sizes, "--iters", str(ITERS)])
    return "\n".join(["#!/bin/bash", "set -eo pipefail", prelude,
                      f"for i in $(seq {rounds}); do",
                      f"  {launch} {ours}", f"  {launch} {bare}",
                      f"  {launch} {bare} --label BARE2", "done", ""])


def _ratio_results(place: str, text: str) -> list[Result]:
    per_round = _ratios(text)
    control = _ratios(text, "BARE2", "BARE")
    if not per_round or not control:
        raise BenchError(f"{place}: no results from the job")
    out = []
    for size in SIZES:
        out.append(Result(f"{place}: busbw ratio at {size >> 20} MiB", "ratio",
                          [r[size] for r in per_round if size in r], target=0.95, op=">="))
        out.append(Result(f"{place}: A/A control (bare / bare) at {size >> 20} MiB", "ratio",
                          [r[size] for r in control if size in r]))
    return out + pooled(place, per_round, control)


def pooled(place: str, per_round: list[dict[int, float]], control: list[dict[int, float]]
           ) -> list[Result]:
    """Every size's ratios in one row, for hpcprov / bare and for the A/A control: with
    4x the samples, a bias can be told from this machine's run-to-run noise."""
    def every(rounds: list[dict[int, float]]) -> list[float]:
        return [r[size] for size in SIZES for r in rounds if size in r]

    return [Result(f"{place}: busbw ratio, all sizes pooled", "ratio", every(per_round),
                   target=0.95, op=">="),
            Result(f"{place}: A/A control, all sizes pooled", "ratio", every(control))]


def _local(ctx: Context, rounds: int) -> list[Result]:
    launch = (f"{shlex.quote(sys.executable)} -m torch.distributed.run --standalone "
              "--nproc_per_node 2")
    script = ctx.cache / "fidelity-local.sh"
    script.write_text(_script(rounds, launch, python=False))
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(["bash", str(script)], capture_output=True, text=True, env=env,
                          timeout=3600)
    if proc.returncode != 0:
        raise BenchError(f"local fidelity job failed: {proc.stderr.strip()[-300:]}")
    return _ratio_results("local", proc.stdout)


def _testbed():  # noqa: ANN202 - Testbed, imported lazily (root only)
    from hpcprov.testbed.cluster import Testbed

    tb = Testbed.from_state()
    if os.geteuid() != 0 or tb.problems():
        return None
    tb.up()
    return tb


def _wait(env: dict[str, str], job: str, timeout: float = 3600) -> str:
    deadline, delay = time.monotonic() + timeout, 0.05
    while time.monotonic() < deadline:
        out = subprocess.run(["scontrol", "show", "job", "-o", job], capture_output=True,
                             text=True, env=env, timeout=60).stdout
        state = re.search(r"JobState=(\w+)", out)
        if state and state.group(1) not in ("PENDING", "RUNNING", "CONFIGURING",
                                            "COMPLETING"):
            return state.group(1)
        time.sleep(delay)
        delay = min(delay * 1.5, 0.5)
    raise BenchError(f"job {job} did not finish in {timeout:.0f} s")


def _testbed_ratios(tb, rounds: int) -> list[Result]:  # noqa: ANN001
    work = tb.scratch / "hpcprov-bench"
    work.mkdir(parents=True, exist_ok=True)
    prelude = ("export MASTER_ADDR=$(scontrol show hostnames \"$SLURM_JOB_NODELIST\" | head -1)"
               " MASTER_PORT=29611 OMP_NUM_THREADS=1")
    launch = ("srun --mpi=none bash -c 'RANK=$SLURM_PROCID WORLD_SIZE=$SLURM_NTASKS "
              "LOCAL_RANK=$SLURM_LOCALID exec \"$@\"' _")
    script = work / "fidelity.sh"
    script.write_text(_script(rounds, launch, prelude))
    out = work / "fidelity.out"
    env = tb.environ()
    sub = subprocess.run(["sbatch", "--parsable", "--comment=python", "-N", "2",
                          "--ntasks-per-node=1", f"--output={out}", str(script)],
                         capture_output=True, text=True, env=env, cwd=work, timeout=60)
    if sub.returncode != 0:
        raise BenchError(f"sbatch: {sub.stderr.strip()}")
    state = _wait(env, sub.stdout.strip().split(";")[0])
    if state != "COMPLETED":
        raise BenchError(f"testbed fidelity job {state}: {out.read_text()[-300:]}")
    return _ratio_results("testbed", out.read_text())


def _overhead(ctx: Context, tb, runs: int) -> Result:  # noqa: ANN001
    prefix = Path(os.environ.get("HPCPROV_BENCH_TESTBED_PREFIX")
                  or tb.scratch / "hpcprov-bench" / "prefix")
    hpcprov = [str(Path(sys.executable).with_name("hpcprov"))]
    env = tb.environ()
    if not (prefix / ".hpcprov" / "manifest.json").exists():
        ctx.log(f"provisioning the testbed environment in {prefix} (once)")
        setup = subprocess.run([*hpcprov, "setup", "--site", "testbed", "--prefix",
                                str(prefix)], capture_output=True, text=True, env=env,
                               timeout=3600)
        if setup.returncode != 0:
            raise BenchError(f"setup --site testbed failed: {setup.stderr.strip()[-300:]}")
    values = []
    for i in range(runs):
        rundir = tb.scratch / "hpcprov-bench" / f"overhead-{i}"
        t0 = time.perf_counter()
        proc = subprocess.run([*hpcprov, "validate", "--site", "testbed", "-N", "2",
                               "--checks", "allreduce", "--env", str(prefix), "--max-bytes",
                               "1048576", "--iters", "3", "--workdir", str(rundir),
                               "--no-history", "--json"], capture_output=True, text=True,
                              env=env, timeout=1800)
        wall = time.perf_counter() - t0
        data = json.loads(proc.stdout or "{}")
        own = [j.get("run_s") for j in data.get("jobs", [])]
        if proc.returncode != 0 or not own or None in own:
            raise BenchError(f"validate on the testbed: exit {proc.returncode}, "
                             f"{proc.stderr.strip()[-300:]}")
        values.append(wall - sum(own))
    return Result("testbed: harness overhead (validate wall - jobs' own run time, 3 jobs)",
                  "s", values, target=5.0)


def run(ctx: Context) -> list[Result]:
    ctx.cache.mkdir(parents=True, exist_ok=True)
    rounds = 3 if ctx.quick else ctx.repeat
    ctx.log(f"local fidelity job ({rounds} alternations)")
    results = _local(ctx, rounds)
    tb = _testbed()
    if tb is None:
        results.append(Result("testbed", "ratio", status="not available: needs root and the "
                              "testbed's packages (bash testbed/install-deps.sh)"))
        return results
    ctx.log(f"testbed fidelity job ({rounds} alternations)")
    results += _testbed_ratios(tb, rounds)
    ctx.log("harness overhead on the testbed")
    results.append(_overhead(ctx, tb, 3 if ctx.quick else 5))
    return results
