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
**busbw against a bare loop, in one process.** One job starts 2 ranks once; each rank loads
hpcprov's allreduce program (`validate/programs/allreduce.py`, the file a validation job
runs) as a module and `benchmarks/interleaved_allreduce.py` alternates, block by block,
three measurements on the same process group: the program's own `measure()` and
`bandwidth()` (checked warm-up, the timed allreduces, checked iterations again: what a
validation job reports), and twice the bare loop of
`benchmarks/bare_allreduce.py` (warm-up, one barrier, {ITERS} back-to-back
`dist.all_reduce` calls timed as a block, no checks). Sizes
{", ".join(f"{s >> 20} MiB" for s in SIZES)}, {ITERS} iterations each; the order of the three
rotates from block to block. Each block gives one ratio per size, hpcprov / bare; the table
shows the median over the blocks. Target: >= 0.95 at every size >= 1 MiB. The *A/A control*
rows (bare again / bare, same block) show how far two runs of the very same loop differ, so
a hpcprov / bare ratio can be read against the noise; the *pooled* rows put every size's
ratios together. An earlier version launched each program separately and alternated the
launches: the A/A control then spread 0.92-1.12 per size, more than the 5% margin, because
two launches differ (placement, memory layout); alternating inside one process removes that.
Two placements: *local* (2 processes on this machine, torchrun, Gloo over loopback) and
*testbed* (2 nodes of the Slurm testbed, one rank each, srun, Gloo over the veth bridge).

**Harness overhead.** `hpcprov validate --site testbed -N 2 --checks allreduce` (three
jobs, one after the other: torch Gloo, Horovod Gloo, Horovod MPI; sizes up to 1 MiB,
3 iterations) timed as a whole process, minus the jobs' own run times (each job script
records its own start and end in its status file). What is left is hpcprov's start-up,
writing the scripts, `sbatch`, the wait for Slurm to start each job, the polling delay
after each job ends, judging and reporting. Target: <= 5 s."""


def _here() -> Path:
    return Path(__file__).resolve().parent


def _program() -> Path:
    from importlib import resources

    return Path(str(resources.files("hpcprov.validate") / "programs" / "allreduce.py"))


def ratios(text: str, num: str = "HPCPROV", den: str = "BARE") -> list[dict[int, float]]:
    """Per block: size -> busbw of ``num`` / busbw of ``den``, from the ``BLOCK`` lines of
    interleaved_allreduce.py (hpcprov / bare by default; BARE2 / BARE for the A/A control)."""
    blocks: dict[int, dict[int, float]] = {}
    for line in text.splitlines():
        if m := re.search(r"(?:^|\s)BLOCK (\{.*\})", line):
            rec = json.loads(m.group(1))
            blocks.setdefault(rec["block"], {})[rec["size_bytes"]] = rec[num] / rec[den]
    return [blocks[k] for k in sorted(blocks)]


def _script(blocks: int, launch: str, prelude: str = "", python: bool = True) -> str:
    """The job: one launch of the interleaved program; ``launch`` starts the ranks (torchrun
    takes the script itself, srun the interpreter and the script)."""
    exe = [sys.executable] if python else []
    argv = shlex.join([*exe, str(_here() / "interleaved_allreduce.py"), "--program",
                       str(_program()), "--sizes", ",".join(str(s) for s in SIZES),
                       "--iters", str(ITERS), "--blocks", str(blocks)])
    return "\n".join(["#!/bin/bash", "set -eo pipefail", prelude, f"{launch} {argv}", ""])


def _ratio_results(place: str, text: str) -> list[Result]:
    per_block = ratios(text)
    control = ratios(text, "BARE2", "BARE")
    if not per_block:
        raise BenchError(f"{place}: no results from the job")
    out = []
    for size in SIZES:
        out.append(Result(f"{place}: busbw ratio at {size >> 20} MiB", "ratio",
                          [r[size] for r in per_block if size in r], target=0.95, op=">="))
        out.append(Result(f"{place}: A/A control (bare / bare) at {size >> 20} MiB", "ratio",
                          [r[size] for r in control if size in r]))
    return out + pooled(place, per_block, control)


def pooled(place: str, per_block: list[dict[int, float]], control: list[dict[int, float]]
           ) -> list[Result]:
    """Every size's ratios in one row, for hpcprov / bare and for the A/A control: with
    4x the samples, a bias can be told from this machine's block-to-block noise."""
    def every(blocks: list[dict[int, float]]) -> list[float]:
        return [r[size] for size in SIZES for r in blocks if size in r]

    return [Result(f"{place}: busbw ratio, all sizes pooled", "ratio", every(per_block),
                   target=0.95, op=">="),
            Result(f"{place}: A/A control, all sizes pooled", "ratio", every(control))]


def _local(ctx: Context, blocks: int) -> list[Result]:
    launch = (f"{shlex.quote(sys.executable)} -m torch.distributed.run --standalone "
              "--nproc_per_node 2")
    script = ctx.cache / "fidelity-local.sh"
    script.write_text(_script(blocks, launch, python=False))
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(["bash", str(script)], capture_output=True, text=True, env=env,
                          timeout=3600)
    if proc.returncode != 0:
        raise BenchError(f"local fidelity job failed: {proc.stderr.strip()[-300:]}")
    return _ratio_results("local", proc.stdout)


def _testbed():
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


def _testbed_ratios(tb, blocks: int) -> list[Result]:
    work = tb.scratch / "hpcprov-bench"
    work.mkdir(parents=True, exist_ok=True)
    prelude = ("export MASTER_ADDR=$(scontrol show hostnames \"$SLURM_JOB_NODELIST\" | head -1)"
               " MASTER_PORT=29611 OMP_NUM_THREADS=1")
    launch = ("srun --mpi=none bash -c 'RANK=$SLURM_PROCID WORLD_SIZE=$SLURM_NTASKS "
              "LOCAL_RANK=$SLURM_LOCALID exec \"$@\"' _")
    script = work / "fidelity.sh"
    script.write_text(_script(blocks, launch, prelude))
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


def _overhead(ctx: Context, tb, runs: int) -> Result:
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
                               "--device", "cpu", "--checks", "allreduce", "--env",
                               str(prefix), "--max-bytes", "1048576", "--iters", "3",
                               "--workdir", str(rundir),
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
    blocks = 3 if ctx.quick else 3 * ctx.repeat  # a multiple of 3: each order as often
    ctx.log(f"local fidelity job ({blocks} blocks per size)")
    results = _local(ctx, blocks)
    tb = _testbed()
    if tb is None:
        results.append(Result("testbed", "ratio", status="not available: needs root and the "
                              "testbed's packages (bash testbed/install-deps.sh)"))
        return results
    ctx.log(f"testbed fidelity job ({blocks} blocks per size)")
    results += _testbed_ratios(tb, blocks)
    ctx.log("harness overhead on the testbed")
    results.append(_overhead(ctx, tb, 3 if ctx.quick else 5))
    return results
