"""Fidelity in one process: hpcprov's own measurement and a bare loop, block by block.

Loads the validation suite's allreduce program (``--program``, the very file a validation
job runs) as a module and, on one process group, measures every size in ``--blocks``
blocks. A block runs three measurements, in an order that rotates from block to block:

- ``HPCPROV``: the program's ``measure()`` (its checked warm-up, the timed allreduces,
  checked iterations again; the slowest rank's mean), made busbw by its ``bandwidth()``:
  what a validation job reports;
- ``BARE`` and ``BARE2``: the bare loop of ``bare_allreduce.py`` (warm-up, a barrier,
  back-to-back allreduces timed as one block), twice, for an A/A control.

Rank 0 prints one line per block: ``BLOCK {"size_bytes": S, "block": k, "HPCPROV": busbw,
"BARE": busbw, "BARE2": busbw}`` (GB/s). Launching once and alternating inside the process
takes the launch-to-launch differences (placement, memory layout, page cache) out of the
comparison. Run with torchrun, or srun setting RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT.
"""

import argparse
import importlib.util
import json

import torch
import torch.distributed as dist
from bare_allreduce import bare_busbw

KINDS = ("HPCPROV", "BARE", "BARE2")


def load_program(path: str):
    spec = importlib.util.spec_from_file_location("hpcprov_allreduce_program", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--program", required=True, help="validate/programs/allreduce.py")
    parser.add_argument("--sizes", required=True, help="comma-separated message sizes, bytes")
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--blocks", type=int, default=7)
    args = parser.parse_args()
    program = load_program(args.program)
    comm = program.TorchComm(torch, "gloo", "cpu")  # init_process_group, as a job does
    cpu = torch.device("cpu")

    def hpcprov(size: int) -> float:
        t = program.measure(torch, comm, comm.allreduce_, size // 4, torch.float32, cpu,
                            args.iters, args.warmup, 0)
        if t.failures:
            raise SystemExit(f"allreduce of {size} bytes was wrong {t.failures} times")
        return program.bandwidth(size, t.mean_s, comm.size)[1]

    def bare(size: int) -> float:
        return bare_busbw(size, args.iters, args.warmup)

    measure = {"HPCPROV": hpcprov, "BARE": bare, "BARE2": bare}
    for size in (int(s) for s in args.sizes.split(",")):
        for block in range(args.blocks):
            order = KINDS[block % 3:] + KINDS[:block % 3]
            record = {"size_bytes": size, "block": block}
            for kind in order:
                record[kind] = measure[kind](size)
            if comm.rank == 0:
                print("BLOCK " + json.dumps(record), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
