#!/usr/bin/env python3
"""Allreduce bandwidth and correctness benchmark of the hpcprov validation suite.

Runs inside a job, in the user's environment: the standard library, runtime.py beside it,
and torch (and Horovod for ``--impl horovod``), nothing of hpcprov. Start one process per GPU
(or per slot on CPU) with torchrun, srun, mpirun or horovodrun.

For each message size every rank fills a tensor with ``rank + 1`` and runs ``--warmup``
allreduces, each refilled and checked (every element must equal ``n (n + 1) / 2``). Then the
``--iters`` timed ones. ``--max-seconds-per-size`` is the budget of a size's calls: a size
whose calls would take longer (estimated from the first two warm-up calls) runs those two,
fewer timed ones (never fewer than 2) and, on the CPU, 2 checked ones. On CPU, where the
collectives are synchronous, they run as nccl-tests and a bare loop run them: one barrier,
then back to back, with no refill or check in between (with either, the ranks drift apart
and every call times its wait for a partner), each call timed with ``time.perf_counter``;
after them the checked iterations run again (as many as the warm-up, at least 2; 2 for a
size over its budget), so a fault that shows only later is still
caught. On GPUs every timed allreduce is refilled and checked on the device, timed with
CUDA events around the call alone, so the loop has no host synchronisation. The time of a
size is the slowest rank's mean time per allreduce (``time_s``; ``time_min_s`` and
``time_median_s`` are the slowest rank's fastest and median call), and the bandwidth is
defined as nccl-tests defines it for allreduce::

    algbw = size_bytes / time_s          busbw = algbw * 2 * (n - 1) / n     (1 GB = 1e9 B)

Output (compact JSON after the tag): every rank prints once at start ::

    HPCPROV_RANK {"rank":0,"host":"node1","local_rank":0,"rank_source":"torchrun"}

then rank 0 prints one line per size and a final line ::

    HPCPROV_RESULT {"check":"allreduce","impl":"torch.gloo","device":"cpu",...,"correct":true}
    HPCPROV_DONE {"check":"allreduce","ok":true}

Ranks for torch.distributed (gloo, nccl; mpi asks MPI) come from torch's environment
contract (RANK, WORLD_SIZE, LOCAL_RANK), which hpcprov's launch lines give every rank from
whichever starter launched it (hpcprov/jobs/rank_env.sh) and torchrun gives its own.
MASTER_ADDR and MASTER_PORT default to 127.0.0.1 and 29500 (and a process no launcher
started is rank 0 of 1), which ``init_process_group()`` then reads, as a script's does.
The records and rank discovery are runtime.py's, which the validation suite copies beside
this file.

Each rank takes its device as an unmodified env:// script does (LOCAL_RANK; device 0 with
``--per-rank one``) before ``init_process_group()``; where the GPU binding makes that no
device of the rank's, it prints a ``binding`` record naming the binding and exits 1, as
train.py does.

Exit status: 0 when every size was correct on every rank, 1 otherwise, 2 for bad arguments.
"""

import argparse
import os
import statistics
import sys
import time
from collections import namedtuple

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # runtime.py lies beside
# its bytecode is never written beside it (a __pycache__ there could be replaced by others;
# the job's program check refuses one, as it hashes runtime.py, not what is cached)
sys.dont_write_bytecode, _writes_bytecode = True, sys.dont_write_bytecode
from runtime import (  # noqa: E402 - after its bytecode is switched off
    DONE,
    RESULT,
    BindingError,
    accelerator,
    add_binding_args,
    announce,
    binding_failed,
    default_rendezvous,
    device_word,
    discover_ranks,
    emit,
    no_device,
    pick_backend,
    use_device,
)

sys.dont_write_bytecode = _writes_bytecode

CHECK = "allreduce"
# the budget of one size's calls (warm-up, timed, checked): where one call takes a quarter
# second or more (256 MiB over Gloo on a CPU), 2 s still times at least 2 of them, and the
# 14 sizes of a default run cost about what the 3 slowest take, not 30 calls each
MAX_SECONDS_PER_SIZE = 2.0
ITEMSIZE = {"float32": 4, "float64": 8}

# one size's measurement: the times are the slowest rank's mean, fastest and median call
Timing = namedtuple("Timing", "iters mean_s min_s median_s failures")

def size_list(min_bytes, max_bytes, factor):
    sizes = []
    size = min_bytes
    while size < max_bytes:
        sizes.append(size)
        size *= factor
    sizes.append(max_bytes)
    return sizes


def bandwidth(size_bytes, time_s, ranks):
    """(algbw, busbw) in GB/s, as nccl-tests defines them for allreduce."""
    algbw = size_bytes / time_s / 1e9
    busbw = algbw * 2 * (ranks - 1) / ranks
    return algbw, busbw


# ------------------------------------------------------------------ communicators


def located(comm, step, *args):
    """``step(*args)``; a BindingError it raises carries the rank it happened on."""
    try:
        return step(*args)
    except BindingError as exc:
        exc.rank, exc.local_rank = comm.rank, comm.local_rank
        raise


class TorchComm:
    """torch.distributed with a backend (gloo, mpi, nccl, xccl, ...), on a device type."""

    def __init__(self, torch, backend, device, fallback=None, binding=()):
        import torch.distributed as dist

        self.dist = dist
        self.rank, _, local_rank, self.rank_source = discover_ranks()
        self.local_rank = local_rank
        default_rendezvous()
        # an unmodified env:// script's steps: its device from LOCAL_RANK (BindingError
        # where the binding makes that no device of this rank's), then init_process_group()
        self.device = located(self, use_device, torch, device, local_rank, "allreduce.py",
                              *binding)
        backend = pick_backend(dist, backend, fallback)
        if backend == "mpi":
            # rank and size come from the MPI runtime
            dist.init_process_group("mpi")
            self.rank_source = "mpi"
        else:
            dist.init_process_group(backend)  # env://: RANK, WORLD_SIZE, MASTER_*
        self.rank = dist.get_rank()
        self.size = dist.get_world_size()
        self.name = "torch." + backend
        self.allreduce_ = dist.all_reduce
        self.barrier = dist.barrier

    def max_(self, tensor):
        self.dist.all_reduce(tensor, op=self.dist.ReduceOp.MAX)
        return tensor

    def allgather_object(self, obj):
        out = [None] * self.size
        self.dist.all_gather_object(out, obj)
        return out

    def finalize(self):
        self.dist.destroy_process_group()


class HorovodComm:
    """horovod.torch (its controller and data plane: MPI, Gloo, NCCL, ...)."""

    def __init__(self, torch, device, binding=()):
        import horovod.torch as hvd

        self.hvd = hvd
        hvd.init()
        self.rank, self.size, self.local_rank = hvd.rank(), hvd.size(), hvd.local_rank()
        self.rank_source = "horovod"
        self.device = located(self, use_device, torch, device, self.local_rank,
                              "allreduce.py", *binding, hvd.local_size())
        self.name = "horovod"
        self.barrier = getattr(hvd, "barrier", None) or (  # hvd.barrier: Horovod >= 0.23
            lambda: hvd.allreduce(torch.zeros(1), name="hpcprov.barrier"))

    def named_allreduce_(self, name):
        hvd = self.hvd
        op = hvd.Sum

        def allreduce_(tensor):
            hvd.allreduce_(tensor, op=op, name=name)

        return allreduce_

    def max_(self, tensor):
        hvd = self.hvd
        if hasattr(hvd, "Max"):
            return hvd.allreduce(tensor, op=hvd.Max, name="hpcprov.max")
        gathered = hvd.allgather(tensor.view(1, -1), name="hpcprov.max")
        return gathered.max(dim=0).values

    def allgather_object(self, obj):
        return self.hvd.allgather_object(obj, name="hpcprov.objects")

    def finalize(self):
        self.hvd.shutdown()


# ------------------------------------------------------------------ measurement


def run_iters(torch, comm, allreduce_, tensor, value, expected, count, corrupt=False):
    """``count`` allreduces, each on a tensor refilled with ``value`` and checked afterwards;
    only the allreduce is timed. Returns (seconds per iteration, failed iterations, wall
    seconds per iteration including refill, barrier and check)."""
    accel = accelerator(torch, tensor.device.type)
    if accel is not None:
        # the device's events around the allreduce (CUDA's, XPU's): no host synchronisation
        # inside the loop, so the launches stay as pipelined as in a bare loop; fill and
        # check are outside the events
        event = accel.Event
        starts = [event(enable_timing=True) for _ in range(count)]
        ends = [event(enable_timing=True) for _ in range(count)]
        bad = torch.zeros((), dtype=torch.int64, device=tensor.device)
        wall = time.perf_counter()
        for i in range(count):
            tensor.fill_(value)
            starts[i].record()
            allreduce_(tensor)
            ends[i].record()
            if corrupt:
                tensor[0] += 1
            bad += (tensor != expected).any()
        accel.synchronize()
        wall = (time.perf_counter() - wall) / max(count, 1)
        return ([starts[i].elapsed_time(ends[i]) / 1e3 for i in range(count)], int(bad),
                [wall] * count)
    # CPU tensors: the checked iterations (warm-up, and the checks after timed_block, which
    # times the bandwidth). A barrier after the refill lines the ranks up, so the walls
    # estimate one synchronous iteration for the time budget.
    barrier = comm.barrier
    clock = time.perf_counter
    times, walls = [], []
    failures = 0
    for _ in range(count):
        began = clock()
        tensor.fill_(value)
        barrier()
        start = clock()
        allreduce_(tensor)
        times.append(clock() - start)
        if corrupt:
            tensor[0] += 1
        if not bool(torch.all(tensor == expected)):
            failures += 1
        walls.append(clock() - began)
    return times, failures, walls


def timed_block(comm, allreduce_, tensor, value, count):
    """``count`` allreduces back to back after one barrier, each call on its own clock
    (CPU tensors: the call returns when the collective is done). No refill or check in
    between: with them a rank that finished first would time its wait for the others, and
    even a barrier before every call leaves that wait in (3-6% less bandwidth than a bare
    loop at 1-64 MiB over Gloo, measured with benchmarks/interleaved_allreduce.py)."""
    tensor.fill_(value)
    comm.barrier()
    clock = time.perf_counter
    times = []
    for _ in range(count):
        start = clock()
        allreduce_(tensor)
        times.append(clock() - start)
    return times


def measure(torch, comm, allreduce_, nel, dtype, device, iters, warmup, max_seconds,
            corrupt=False):
    """Time allreduces of ``nel`` elements; returns a Timing, every field the maximum of
    the ranks' values.

    ``max_seconds`` is the budget of the whole size: warm-up, timed and checked calls. The
    first two warm-up calls give every rank the same estimate of one call (the second's, the
    slowest rank's: the first pays for buffers and connections); a size whose calls the
    budget holds runs them all, a slower one its first two warm-up calls (they warmed it
    up), at least 2 timed calls and on the CPU 2 checked ones."""
    ranks = comm.size
    value = float(comm.rank + 1)
    expected = ranks * (ranks + 1) / 2
    tensor = torch.empty(nel, dtype=dtype, device=device)

    first = min(warmup, 2)
    _, failures, warm_walls = run_iters(torch, comm, allreduce_, tensor, value, expected,
                                        first)
    more = warmup - first
    on_device = tensor.device.type != "cpu"
    checks = 0 if on_device else max(2, warmup)  # checked again after the timed block (CPU)
    if warm_walls and max_seconds > 0:
        # estimated per iteration from the warm-up (refill, barrier, allreduce, check: an
        # upper bound); every rank must run the same counts
        rest = warm_walls[1:] or warm_walls
        estimate = torch.tensor([sum(rest) / len(rest)], dtype=torch.float64, device=device)
        estimate = float(comm.max_(estimate)[0])
        room = int(max_seconds / estimate) - first if estimate > 0 else more + iters + checks
        if room < more + iters + checks:
            more, checks = 0, min(checks, 2)
            iters = min(iters, max(2, room - checks))
    if more:
        _, more_failures, _ = run_iters(torch, comm, allreduce_, tensor, value, expected, more)
        failures += more_failures

    if on_device:
        times, timed_failures, _ = run_iters(torch, comm, allreduce_, tensor, value, expected,
                                             iters, corrupt)
    else:
        times = timed_block(comm, allreduce_, tensor, value, iters)
        _, timed_failures, _ = run_iters(torch, comm, allreduce_, tensor, value, expected,
                                         checks, corrupt)
    stats = torch.tensor([sum(times) / len(times), min(times), statistics.median(times),
                          float(failures + timed_failures)], dtype=torch.float64, device=device)
    mean_s, min_s, median_s, failed = comm.max_(stats).tolist()
    return Timing(iters, mean_s, min_s, median_s, int(failed))


# ------------------------------------------------------------------ main


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        description="Allreduce bandwidth (nccl-tests algbw/busbw) and correctness, per size.")
    parser.add_argument("--impl", choices=["torch", "horovod"], default="torch")
    parser.add_argument("--dist-backend", type=device_word, default=None,
                        help="torch.distributed backend: gloo, mpi, nccl, xccl... (--impl "
                        "torch only; default gloo, nccl on a device)")
    parser.add_argument("--fallback-backend", default=None, metavar="NAME:MODULE",
                        help="the backend where this torch lacks --dist-backend, after "
                        "importing MODULE (e.g. ccl:oneccl_bindings_for_pytorch)")
    parser.add_argument("--device", type=device_word, default="cpu",
                        help="cpu, or torch's device type of the GPUs (cuda, xpu)")
    parser.add_argument("--min-bytes", type=int, default=8)
    parser.add_argument("--max-bytes", type=int, default=256 * 1024 * 1024)
    parser.add_argument("--factor", type=int, default=4,
                        help="sizes min, min*factor, ... below max, then max")
    parser.add_argument("--iters", type=int, default=20, help="timed iterations per size")
    parser.add_argument("--warmup", type=int, default=5, help="untimed iterations per size")
    parser.add_argument("--max-seconds-per-size", type=float, default=MAX_SECONDS_PER_SIZE,
                        help="the budget of a size's warm-up, timed and checked calls, "
                        "estimated from the first two warm-up calls: a slower size runs "
                        "those two, at least 2 timed and (CPU) 2 checked ones; 0: no limit")
    parser.add_argument("--dtype", choices=sorted(ITEMSIZE), default="float32")
    add_binding_args(parser)
    # test hook: this rank adds 1 to one element after each timed allreduce
    parser.add_argument("--fault-rank", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    itemsize = ITEMSIZE[args.dtype]
    if args.min_bytes < itemsize or args.min_bytes % itemsize or args.max_bytes % itemsize:
        parser.error(f"--min-bytes and --max-bytes must be multiples of {itemsize} "
                     f"(the size of {args.dtype}), at least {itemsize}")
    if args.max_bytes < args.min_bytes:
        parser.error("--max-bytes is smaller than --min-bytes")
    if args.factor < 2:
        parser.error("--factor must be at least 2")
    if args.iters < 1 or args.warmup < 0:
        parser.error("--iters must be at least 1 and --warmup at least 0")
    if args.impl == "horovod" and args.dist_backend is not None:
        parser.error("--dist-backend is for --impl torch (Horovod picks its own)")
    if args.dist_backend is None:
        args.dist_backend = "gloo" if args.device == "cpu" else "nccl"
    return args


def main(argv=None):
    args = parse_args(argv)
    import torch

    why = no_device(torch, args.device, "allreduce.py")
    if why:
        print(why, file=sys.stderr)
        return 2
    binding = (args.per_rank, args.visible_devices)
    try:
        if args.impl == "horovod":
            comm = HorovodComm(torch, args.device, binding)
        else:
            comm = TorchComm(torch, args.dist_backend, args.device, args.fallback_backend,
                             binding)
    except BindingError as exc:  # before any collective: no rank waits for this one
        return binding_failed(CHECK, exc.rank, exc.local_rank, exc)
    device = comm.device
    dtype = getattr(torch, args.dtype)
    itemsize = ITEMSIZE[args.dtype]

    host = announce(comm.rank, comm.local_rank, comm.rank_source)
    hosts = sorted(set(comm.allgather_object(host)))

    ok = True
    for size in size_list(args.min_bytes, args.max_bytes, args.factor):
        if args.impl == "horovod":
            allreduce_ = comm.named_allreduce_(f"hpcprov.allreduce.{size}")
        else:
            allreduce_ = comm.allreduce_
        t = measure(torch, comm, allreduce_, size // itemsize, dtype, device, args.iters,
                    args.warmup, args.max_seconds_per_size,
                    corrupt=args.fault_rank == comm.rank)
        algbw, busbw = bandwidth(size, t.mean_s, comm.size)
        ok = ok and t.failures == 0
        if comm.rank == 0:
            emit(RESULT, {
                "check": CHECK, "impl": comm.name, "device": args.device, "dtype": args.dtype,
                "ranks": comm.size, "nodes": len(hosts), "hosts": hosts, "size_bytes": size,
                "iters": t.iters, "time_s": t.mean_s, "time_min_s": t.min_s,
                "time_median_s": t.median_s, "algbw_GBps": algbw, "busbw_GBps": busbw,
                "correct": t.failures == 0})
    if comm.rank == 0:
        emit(DONE, {"check": CHECK, "ok": ok})
    # a last collective: no rank exits (and has the launcher kill the others) before rank 0
    # has printed everything
    comm.max_(torch.zeros(1, dtype=torch.float64, device=device))
    comm.finalize()
    return 0 if ok else 1


if __name__ == "__main__":
    code = main()
    # the verdict is printed and every rank has met the last collective: leave without the
    # interpreter's teardown, where torch's C++ threads can abort at exit ("terminate called
    # without an active exception") and turn a passed run into a failed exit status
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0 if code is None else code if isinstance(code, int) else 1)
