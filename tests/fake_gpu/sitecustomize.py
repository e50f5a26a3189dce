"""A fake GPU vendor for the tests of the validation programs' device step: there is no GPU
here and torch is a CPU build. Put this folder on PYTHONPATH and set HPCPROV_TEST_GPUS=N (a
node's GPUs): every Python process that imports torch then finds ``torch.cuda`` a node of N
GPUs, narrowed by CUDA_VISIBLE_DEVICES as the CUDA runtime narrows it:

* ``device_count()``: the GPUs CUDA_VISIBLE_DEVICES names (up to its first entry that is no
  GPU of the node), all N without it;
* ``set_device(i)``: ``CUDA error: invalid device ordinal`` unless 0 <= i < device_count();
  each rank's pick is appended to HPCPROV_TEST_GPU_LOG (``RANK LOCAL_RANK GPU``, GPU the
  node's index) where set;
* what is moved to a cuda device stays on the CPU, the nccl backend is gloo, and
  DistributedDataParallel gets no device_ids: the programs' work runs as on the CPU.

Nothing changes without HPCPROV_TEST_GPUS; torch is patched right after its own import."""

import importlib.abc
import importlib.util
import os
import sys


def _visible(total):
    # HPCPROV_TEST_GPU_VAR: the variable that narrows them instead (ROCm's
    # ROCR_VISIBLE_DEVICES, which Slurm's binding of AMD GPUs sets)
    value = os.environ.get(os.environ.get("HPCPROV_TEST_GPU_VAR", "CUDA_VISIBLE_DEVICES"))
    if value is None:
        return list(range(total))
    out = []
    for item in value.split(","):
        item = item.strip()
        if not item.isdigit() or int(item) >= total:
            break
        out.append(int(item))
    return out


def _install(torch):
    import torch.distributed as dist
    import torch.nn.parallel

    total = int(os.environ["HPCPROV_TEST_GPUS"])
    state = {"current": 0}

    def device_count():
        return len(_visible(total))

    def set_device(device):
        index = device.index if isinstance(device, torch.device) else int(device)
        if not 0 <= index < device_count():
            raise RuntimeError("CUDA error: invalid device ordinal")
        state["current"] = index
        log = os.environ.get("HPCPROV_TEST_GPU_LOG")
        if log:
            with open(log, "a") as f:
                f.write(f"{os.environ.get('RANK')} {os.environ.get('LOCAL_RANK')} "
                        f"{_visible(total)[index]}\n")

    cuda = torch.cuda
    cuda.device_count = device_count
    cuda.is_available = lambda: device_count() > 0
    cuda.set_device = set_device
    cuda.current_device = lambda: state["current"]
    cuda.synchronize = lambda device=None: None

    def on_cpu(value):
        if isinstance(value, torch.device) and value.type == "cuda":
            return torch.device("cpu")
        if isinstance(value, str) and value.startswith("cuda"):
            return "cpu"
        return value

    def moved(function):
        def call(*args, **kwargs):
            if "device" in kwargs:
                kwargs["device"] = on_cpu(kwargs["device"])
            return function(*(on_cpu(a) for a in args), **kwargs)
        return call

    torch.Tensor.to = moved(torch.Tensor.to)
    torch.nn.Module.to = moved(torch.nn.Module.to)
    for name in ("empty", "zeros", "ones", "tensor"):
        setattr(torch, name, moved(getattr(torch, name)))

    init_group = dist.init_process_group

    def init_process_group(backend=None, *args, **kwargs):
        return init_group("gloo" if backend == "nccl" else backend, *args, **kwargs)

    dist.init_process_group = init_process_group
    ddp = torch.nn.parallel.DistributedDataParallel
    ddp_init = ddp.__init__

    def init_ddp(self, module, device_ids=None, output_device=None, *args, **kwargs):
        ddp_init(self, module, None, None, *args, **kwargs)

    ddp.__init__ = init_ddp


class _AfterTorch(importlib.abc.MetaPathFinder):
    """Finds torch as the path finder does, and installs the fake once it has run."""

    def find_spec(self, name, path=None, target=None):
        if name != "torch":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec("torch")
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            _install(module)

        spec.loader.exec_module = exec_module
        return spec


if os.environ.get("HPCPROV_TEST_GPUS"):
    sys.meta_path.insert(0, _AfterTorch())
