"""Write the hpcprov profile of one GPU node (docs/gpu.md): no scheduler, one partition with
the node's GPUs, a venv over the PyTorch the node already has, Horovod 0.28.1 with NCCL and
Gloo, installed offline from the kit's wheels folder.

usage: python profile.py WORK WHEELS GPUS MODEL TORCH_VERSION [--system-site-packages]
(run.sh passes what `nvidia-smi -L` and the node's Python say, TORCH_VERSION as pip knows it:
the wheel's metadata, 2.14.1, not torch.__version__'s 2.14.1+cu130, which no installed wheel
satisfies; --system-site-packages when PyTorch is in the system Python's site-packages rather
than on PYTHONPATH). Prints the path.
"""

import os
import sys

import yaml


def profile(work: str, wheels: str, gpus: int, model: str, torch_version: str,
            system_site_packages: bool) -> dict:
    return {
        "name": "gpu-node",
        "description": f"one node with {gpus} x {model}, no scheduler, PyTorch from the node",
        "scheduler": "none",
        "login_hosts": [],
        "paths": {"scratch": work, "prefix": "{scratch}/env"},
        "modules": {"system": "none"},
        # one rank per GPU, a CPU each: where the node has fewer cores than GPUs (a small
        # build machine standing in for a GPU node), the ranks share them (no scheduler here
        # counts CPUs), so the profile passes `site check` on any core count
        "partitions": {"gpu": {"description": model, "nodes": 1,
                               "cores_per_node": max(os.cpu_count() or 1, gpus),
                               "gpus": {"count": gpus, "model": model}, "default": True}},
        "policies": {"compute_internet": False, "conda_allowed": False},
        "python": {"backend": "venv", "env_name": "horovod",
                   "venv": {"creator": "venv", "python": "python3", "no_index": True,
                            "system_site_packages": system_site_packages,
                            "wheelhouse": [wheels]},
                   "frameworks": {"pytorch": {"version": torch_version, "installer": "pip"}},
                   # the training checks need it; kept when the node's PyTorch brings one
                   "packages": ["numpy"]},
        "horovod": {"source": "pip", "version": "0.28.1", "frameworks": ["pytorch"],
                    "controllers": ["gloo"], "gpu_operations": "nccl"},
        "launchers": {"horovodrun": {"kind": "horovodrun", "controller": "gloo"},
                      "torchrun": {"kind": "torchrun", "per_node_wrapper": "none"}},
        "default_launcher": "horovodrun",
    }


def main(argv: list[str]) -> int:
    flags = [a for a in argv[1:] if a.startswith("--")]
    args = [a for a in argv[1:] if not a.startswith("--")]
    if len(args) != 5 or set(flags) - {"--system-site-packages"}:
        sys.stderr.write("usage: profile.py WORK WHEELS GPUS MODEL TORCH_VERSION "
                         "[--system-site-packages]\n")
        return 2
    work, wheels, gpus, model, version = args
    path = os.path.join(os.path.abspath(work), "gpu-node.yaml")
    data = profile(os.path.abspath(work), os.path.abspath(wheels), int(gpus), model, version,
                   "--system-site-packages" in flags)
    with open(path, "w", encoding="utf-8") as f:
        yaml.safe_dump(data, f, sort_keys=False)
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
