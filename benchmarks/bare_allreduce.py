"""The reference for the fidelity benchmark: a bare torch.distributed allreduce loop.

No checks, no refills, no per-iteration barrier: ``warmup`` allreduces, a barrier, then
``iters`` back-to-back allreduces timed as one block; the slowest rank's time per allreduce
gives busbw as nccl-tests defines it. :func:`bare_busbw` is that loop for one size
(``interleaved_allreduce.py`` imports it); run as a program it prints one JSON line per size:
``BARE {"size_bytes": ..., "busbw_GBps": ...}`` (``--label`` changes the word). Run with
torchrun (or srun setting RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT).
"""

import argparse
import json
import time

import torch
import torch.distributed as dist


def bare_busbw(size: int, iters: int, warmup: int) -> float:
    """busbw in GB/s of ``iters`` back-to-back allreduces of ``size`` bytes (float32)."""
    n = dist.get_world_size()
    t = torch.ones(size // 4, dtype=torch.float32)
    for _ in range(warmup):
        dist.all_reduce(t)
    dist.barrier()
    t0 = time.perf_counter()
    for _ in range(iters):
        dist.all_reduce(t)
    per = torch.tensor([(time.perf_counter() - t0) / iters], dtype=torch.float64)
    dist.all_reduce(per, op=dist.ReduceOp.MAX)
    return size / float(per[0]) * 2 * (n - 1) / n / 1e9


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", required=True, help="comma-separated message sizes, bytes")
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--label", default="BARE", help="the word its output lines start with")
    args = parser.parse_args()
    dist.init_process_group("gloo")
    for size in (int(s) for s in args.sizes.split(",")):
        busbw = bare_busbw(size, args.iters, args.warmup)
        if dist.get_rank() == 0:
            record = {"size_bytes": size, "busbw_GBps": busbw}
            print(f"{args.label} " + json.dumps(record), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
