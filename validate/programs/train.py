#!/usr/bin/env python3
"""Training smoke test of the hpcprov validation suite: is data-parallel training really
synchronised, and how fast is it?

Runs inside a job, in the user's environment: the standard library, runtime.py beside it
(rank discovery and the records, as for allreduce.py) and the frameworks (torch, or
TensorFlow + numpy, and Horovod for the Horovod APIs), nothing of hpcprov.

Every rank trains the same small MLP (1024 -> 1024 -> 1024 -> 10, same seed everywhere,
broadcast from rank 0 as the API prescribes) on synthetic data that is DIFFERENT on each
rank (seeded with the rank): if the gradients are not averaged, the ranks' weights drift
apart. After the steps every rank's trainable parameters are flattened into one float64
vector and combined over the ranks (element-wise max and min):

    max_param_spread = max over elements of (max over ranks - min over ranks)
    in_sync          = max_param_spread <= 1e-6 * (1 + max |param|)

APIs: ``--framework torch --api ddp`` (torch.distributed DistributedDataParallel),
``--framework torch --api horovod`` (horovod.torch DistributedOptimizer +
broadcast_parameters), ``--framework tensorflow --api tape`` (horovod.tensorflow
DistributedGradientTape on the models' tf.Variables, which Keras 3 needs) and
``--framework tensorflow --api keras`` (horovod.tensorflow.keras DistributedOptimizer with
model.fit: under Keras 3 it does not average, and this program reports what it measures).

Output (compact JSON after the tag): every rank prints once at start ::

    HPCPROV_RANK {"rank":0,"host":"node1","local_rank":0,"rank_source":"torchrun"}

then rank 0 prints ::

    HPCPROV_RESULT {"check":"train","framework":"torch","api":"ddp",...,"in_sync":true,...}
    HPCPROV_DONE {"check":"train","ok":true}

Each rank first takes the steps an unmodified env:// script takes: its device from
LOCAL_RANK (``torch.cuda.set_device(LOCAL_RANK)``; device 0 with ``--per-rank one``, the
partition's ``gpus.per_rank``), then ``init_process_group()`` from the environment. Where
the GPU binding makes that device no device of the rank's, the rank prints one
``HPCPROV_RESULT {"check":"binding",...,"detail":LINE}`` record (LINE names the binding:
``--visible-devices`` and its value) and the line on stderr, and exits 1 before any
collective.

Exit status: 0 when the ranks' parameters are in sync, 1 when not (or the device step
failed), 2 for bad arguments.
"""

import argparse
import os
import sys
import time

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
    binding_problem,
    default_rendezvous,
    device_word,
    discover_ranks,
    emit,
    no_device,
    pick_backend,
    use_device,
)

sys.dont_write_bytecode = _writes_bytecode

CHECK = "train"
FEATURES, HIDDEN, CLASSES = 1024, 1024, 10
POOL = 16  # synthetic batches per rank, cycled through
APIS = {"torch": ("ddp", "horovod"), "tensorflow": ("tape", "keras")}

def in_sync(spread, max_abs):
    return spread <= 1e-6 * (1 + max_abs)


class Report:
    """What each rank measured; rank 0 prints the combined result."""

    def __init__(self, args, rank, size, local_rank, rank_source):
        self.args, self.rank, self.size = args, rank, size
        self.host = announce(rank, local_rank, rank_source)

    def finish(self, gathered, spread, max_abs, losses, extra=None):
        """``gathered``: every rank's {"host", "samples_per_s", "step_time_s"}."""
        ok = in_sync(spread, max_abs)
        if self.rank == 0:
            args = self.args
            hosts = sorted({g["host"] for g in gathered})
            per_rank = [g["samples_per_s"] for g in gathered]
            result = {
                "check": CHECK, "framework": args.framework, "api": args.api,
                "device": args.device, "no_sync": args.no_sync, "model": args.model,
                "ranks": self.size, "nodes": len(hosts), "hosts": hosts,
                "batch": args.batch, "steps": args.steps, "warmup_steps": args.warmup_steps,
                "samples_per_s_per_rank": per_rank, "samples_per_s_total": sum(per_rank),
                "step_time_s": max(g["step_time_s"] for g in gathered),
                "max_param_spread": spread, "max_abs_param": max_abs, "in_sync": ok,
                "loss_first": losses[0] if losses else None,
                "loss_last": losses[-1] if losses else None,
            }
            result.update(extra or {})
            emit(RESULT, result)
            emit(DONE, {"check": CHECK, "ok": ok})
        return 0 if ok else 1


# ------------------------------------------------------------------ PyTorch


def torch_main(args):
    import torch

    why = no_device(torch, args.device, "train.py")
    if why:
        print(why, file=sys.stderr)
        return 2
    accel = accelerator(torch, args.device)
    hvd = dist = None
    local_size = None  # LOCAL_WORLD_SIZE
    if args.api == "horovod":
        import horovod.torch as hvd

        hvd.init()
        rank, size, local_rank, source = hvd.rank(), hvd.size(), hvd.local_rank(), "horovod"
        local_size = hvd.local_size()
    else:
        import torch.distributed as dist

        rank, size, local_rank, source = discover_ranks()
        default_rendezvous()
        backend = pick_backend(dist, args.dist_backend or (
            "gloo" if accel is None else "nccl"), args.fallback_backend)
    # the steps of an unmodified env:// script: its device from LOCAL_RANK (device 0 where
    # the profile declares one GPU per rank), then init_process_group() from the environment
    try:
        device = use_device(torch, args.device, local_rank, "train.py", args.per_rank,
                            args.visible_devices, local_size)
    except BindingError as exc:
        return binding_failed(CHECK, rank, local_rank, exc)
    if dist is not None:
        if backend == "mpi":
            dist.init_process_group("mpi")
            source = "mpi"
        else:
            dist.init_process_group(backend)  # env://: RANK, WORLD_SIZE, MASTER_*
        rank, size = dist.get_rank(), dist.get_world_size()
    report = Report(args, rank, size, local_rank, source)

    torch.manual_seed(0)  # the same initial weights everywhere (and broadcast below)
    model = torch.nn.Sequential(
        torch.nn.Linear(FEATURES, HIDDEN), torch.nn.ReLU(),
        torch.nn.Linear(HIDDEN, HIDDEN), torch.nn.ReLU(),
        torch.nn.Linear(HIDDEN, CLASSES)).to(device)
    net = model
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    if not args.no_sync:
        if hvd is not None:
            optimizer = hvd.DistributedOptimizer(optimizer,
                                                 named_parameters=model.named_parameters())
            hvd.broadcast_parameters(model.state_dict(), root_rank=0)
            hvd.broadcast_optimizer_state(optimizer, root_rank=0)
        else:
            net = torch.nn.parallel.DistributedDataParallel(
                model, device_ids=[device.index] if accel is not None else None)
    generator = torch.Generator().manual_seed(rank)  # different data on every rank
    pool = [(torch.randn(args.batch, FEATURES, generator=generator).to(device),
             torch.randint(0, CLASSES, (args.batch,), generator=generator).to(device))
            for _ in range(min(POOL, args.warmup_steps + args.steps))]
    loss_fn = torch.nn.CrossEntropyLoss()
    sync = accel.synchronize if accel is not None else (lambda: None)

    losses = []
    for step in range(args.warmup_steps + args.steps):
        if step == args.warmup_steps:
            sync()
            start = time.perf_counter()
        x, y = pool[step % len(pool)]
        optimizer.zero_grad()
        loss = loss_fn(net(x), y)
        loss.backward()
        optimizer.step()
        losses.append(loss.detach())
    sync()
    elapsed = time.perf_counter() - start
    losses = [float(v) for v in losses]

    with torch.no_grad():
        flat = torch.cat([p.detach().reshape(-1).to(torch.float64)
                          for p in model.parameters() if p.requires_grad])
        if hvd is not None:
            high = hvd.allreduce(flat, op=hvd.Max, name="hpcprov.param.max")
            low = hvd.allreduce(flat, op=hvd.Min, name="hpcprov.param.min")
        else:
            high, low = flat.clone(), flat.clone()
            dist.all_reduce(high, op=dist.ReduceOp.MAX)
            dist.all_reduce(low, op=dist.ReduceOp.MIN)
        spread = float((high - low).max())
        max_abs = float(torch.maximum(high.abs(), low.abs()).max())

    mine = {"host": report.host, "samples_per_s": args.batch * args.steps / elapsed,
            "step_time_s": elapsed / args.steps}
    if hvd is not None:
        gathered = hvd.allgather_object(mine, name="hpcprov.report")
    else:
        gathered = [None] * size
        dist.all_gather_object(gathered, mine)
    rc = report.finish(gathered, spread, max_abs, losses,
                       {"torch_version": torch.__version__})
    # a last collective: no rank exits before rank 0 has printed everything
    if hvd is not None:
        hvd.allgather_object(rc, name="hpcprov.done")
        hvd.shutdown()
    else:
        dist.all_gather_object([None] * size, rc)
        dist.destroy_process_group()
    return rc


# ------------------------------------------------------------------ TensorFlow


def tf_variables(tf, variables):
    """Keras 3 variables wrap a tf.Variable in ``.value``; Horovod needs that one."""
    out = []
    for v in variables:
        inner = getattr(v, "value", None)
        out.append(inner if isinstance(inner, tf.Variable) else v)
    return out


def tensorflow_main(args):
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import horovod.tensorflow as hvd
    import numpy as np
    import tensorflow as tf

    hvd.init()
    rank, size, local_rank = hvd.rank(), hvd.size(), hvd.local_rank()
    gpus = tf.config.list_physical_devices("GPU")
    if args.device != "cpu":
        if not gpus:
            print(f"train.py: --device {args.device}, but TensorFlow sees no GPU",
                  file=sys.stderr)
            return 2
        # as a Horovod script takes it: gpus[hvd.local_rank()] (gpus[0]: one GPU per rank)
        why = binding_problem("train.py", args.device, len(gpus), local_rank, hvd.local_size(),
                              args.per_rank, args.visible_devices,
                              os.environ.get(args.visible_devices))
        if why:
            return binding_failed(CHECK, rank, local_rank,
                                  BindingError(why, len(gpus),
                                               os.environ.get(args.visible_devices)))
        gpu = gpus[0 if args.per_rank == "one" else local_rank]
        tf.config.experimental.set_memory_growth(gpu, True)
        tf.config.set_visible_devices(gpu, "GPU")
    elif gpus:
        tf.config.set_visible_devices([], "GPU")
    report = Report(args, rank, size, local_rank, "horovod")
    keras = tf.keras
    keras.utils.set_random_seed(0)  # the same initial weights everywhere
    model = keras.Sequential([
        keras.Input((FEATURES,)),
        keras.layers.Dense(HIDDEN, activation="relu"),
        keras.layers.Dense(HIDDEN, activation="relu"),
        keras.layers.Dense(CLASSES)])
    # Keras 3 (TensorFlow >= 2.16) has variables of its own that wrap a tf.Variable
    keras3 = not isinstance(model.variables[0], tf.Variable)
    keras_version = getattr(keras, "__version__", None)
    if not keras_version and callable(getattr(keras, "version", None)):
        keras_version = keras.version()
    rng = np.random.default_rng(rank)  # different data on every rank
    total = args.warmup_steps + args.steps
    count = min(POOL, total)
    pool_x = rng.standard_normal((count, args.batch, FEATURES), dtype=np.float32)
    pool_y = rng.integers(0, CLASSES, (count, args.batch)).astype(np.int64)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    clock = time.perf_counter
    extra = {"tensorflow_version": tf.__version__, "keras_version": keras_version,
             "keras3": keras3}

    if args.api == "tape":
        optimizer = keras.optimizers.SGD(args.lr, momentum=0.9)
        hvd.broadcast_variables(tf_variables(tf, model.variables), root_rank=0)
        trainable = tf_variables(tf, model.trainable_variables)
        losses = []
        for step in range(total):
            if step == args.warmup_steps:
                if losses:
                    float(losses[-1])  # wait for the warmup's work
                start = clock()
            x, y = pool_x[step % count], pool_y[step % count]
            with tf.GradientTape() as tape:
                loss = loss_fn(y, model(x, training=True))
            grads = hvd.DistributedGradientTape(tape).gradient(loss, trainable)
            optimizer.apply_gradients(zip(grads, model.trainable_variables))  # noqa: B905
            losses.append(loss)
        losses = [float(v) for v in losses]
        elapsed = clock() - start
        extra["broadcast"] = True
    else:
        import horovod.tensorflow.keras as hvd_keras

        optimizer = hvd_keras.DistributedOptimizer(keras.optimizers.SGD(args.lr, momentum=0.9))
        model.compile(optimizer=optimizer, loss=loss_fn)
        marks = {}
        losses = []

        class Timer(keras.callbacks.Callback):
            def on_train_batch_begin(self, batch, logs=None):
                if batch == args.warmup_steps:
                    marks["start"] = clock()

            def on_train_batch_end(self, batch, logs=None):
                marks["end"] = clock()
                if logs and "loss" in logs:
                    losses.append(float(logs["loss"]))  # Keras: the running mean

        callbacks = [Timer()]
        # Keras 3: BroadcastGlobalVariablesCallback crashes; the weights start equal anyway
        # (same seed), so what is measured is whether the optimizer averages
        extra["broadcast"] = not keras3
        if not keras3:
            callbacks.insert(0, hvd_keras.callbacks.BroadcastGlobalVariablesCallback(0))
        index = [step % count for step in range(total)]
        model.fit(pool_x[index].reshape(-1, FEATURES), pool_y[index].reshape(-1),
                  batch_size=args.batch, epochs=1, shuffle=False, verbose=0,
                  callbacks=callbacks)
        elapsed = marks["end"] - marks.get("start", marks["end"])
        elapsed = elapsed or float("nan")

    flat = tf.concat([tf.reshape(tf.cast(v, tf.float64), [-1])
                      for v in tf_variables(tf, model.trainable_variables)], 0)
    high = hvd.allreduce(flat, op=hvd.Max, name="hpcprov.param.max").numpy()
    low = hvd.allreduce(flat, op=hvd.Min, name="hpcprov.param.min").numpy()
    spread = float((high - low).max())
    max_abs = float(np.maximum(np.abs(high), np.abs(low)).max())
    mine = {"host": report.host, "samples_per_s": args.batch * args.steps / elapsed,
            "step_time_s": elapsed / args.steps}
    gathered = hvd.allgather_object(mine, name="hpcprov.report")
    rc = report.finish(gathered, spread, max_abs, losses, extra)
    hvd.allgather_object(rc, name="hpcprov.done")  # nobody exits before rank 0 printed
    return rc


# ------------------------------------------------------------------ main


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        description="Data-parallel training smoke test: throughput and parameter sync.")
    parser.add_argument("--framework", choices=sorted(APIS), default="torch")
    parser.add_argument("--api", choices=["ddp", "horovod", "tape", "keras"], default=None,
                        help="torch: ddp (default) or horovod; tensorflow: tape (default, "
                        "horovod.tensorflow) or keras (horovod.tensorflow.keras)")
    parser.add_argument("--steps", type=int, default=30, help="timed steps")
    parser.add_argument("--warmup-steps", type=int, default=5, help="untimed steps first")
    parser.add_argument("--batch", type=int, default=32, help="samples per step and rank")
    parser.add_argument("--model", choices=["mlp"], default="mlp")
    parser.add_argument("--device", type=device_word, default="cpu",
                        help="cpu, or torch's device type of the GPUs (cuda, xpu)")
    parser.add_argument("--dist-backend", type=device_word, default=None,
                        help="torch.distributed backend for --api ddp: gloo, mpi, nccl, "
                        "xccl... (default gloo, nccl on a device)")
    parser.add_argument("--fallback-backend", default=None, metavar="NAME:MODULE",
                        help="the backend where this torch lacks --dist-backend, after "
                        "importing MODULE (e.g. ccl:oneccl_bindings_for_pytorch)")
    parser.add_argument("--lr", type=float, default=0.01)
    add_binding_args(parser)
    # test hook (torch only): plain optimizer, no averaging, no broadcast: must be caught
    parser.add_argument("--no-sync", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.api is None:
        args.api = APIS[args.framework][0]
    if args.api not in APIS[args.framework]:
        parser.error(f"--api {args.api} is not one of {args.framework}'s: "
                     + ", ".join(APIS[args.framework]))
    if args.steps < 1 or args.warmup_steps < 0 or args.batch < 1:
        parser.error("--steps and --batch must be at least 1, --warmup-steps at least 0")
    if args.dist_backend is not None and args.api != "ddp":
        parser.error("--dist-backend is for --framework torch --api ddp")
    if args.no_sync and args.framework != "torch":
        parser.error("--no-sync is for --framework torch")
    return args


def main(argv=None):
    args = parse_args(argv)
    if args.framework == "torch":
        return torch_main(args)
    return tensorflow_main(args)


if __name__ == "__main__":
    code = main()
    # the verdict is printed and every rank has met the last collective: leave without the
    # interpreter's teardown, where torch's C++ threads can abort at exit ("terminate called
    # without an active exception") and turn a passed run into a failed exit status
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0 if code is None else code if isinstance(code, int) else 1)
