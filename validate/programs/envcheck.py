#!/usr/bin/env python3
"""Environment check of the hpcprov validation suite, run on every node (or rank) of a job.

Runs in the user's environment with the standard library only (and runtime.py beside it,
for rank discovery and the record); the frameworks are imported each in a child process of
this Python (``--in-process``: in this one), so an import that crashes the interpreter (an
ABI mismatch, a missing library) is reported instead of taking the check down with it.

Every process prints one line (compact JSON after the tag)::

    HPCPROV_RESULT {"check":"env","host":"node1","rank":0,"local_rank":0,
                    "rank_source":"slurm","python":"3.11.7",
                    "executable":"/path/bin/python","modules":["gcc/12","openmpi/4.1"],
                    "imports":{"torch":"2.13.0",...},"import_ok":{"torch":true,...},
                    "gpus_visible":0,"gpu_source":"torch","cuda_visible_devices":null}

``imports`` holds the module's version (its package's, for submodules such as horovod.torch)
or, when the import failed, ``error: <the exception's last line>``; ``import_ok`` says which.
``gpus_visible`` is torch.cuda.device_count() when torch imports, else the GPUs that
``nvidia-smi -L`` lists (at most as many as CUDA_VISIBLE_DEVICES names), else 0.

Exit status: 0, or 1 when a module named by ``--require`` does not import.
"""

import argparse
import importlib
import json
import os
import shutil
import socket
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # runtime.py lies beside
from runtime import CHILD, RESULT, discover_ranks, emit

CHECK = "env"
DEFAULT_IMPORTS = "torch,tensorflow,horovod,horovod.torch,horovod.tensorflow"
MARK = CHILD + " "

# a child imports one module and prints what describe() below returns
CHILD_SOURCE = r"""
import importlib, json, sys
name = sys.argv[1]
module = importlib.import_module(name)
top = sys.modules[name.split(".")[0]]
version = getattr(module, "__version__", None) or getattr(top, "__version__", None)
info = {"version": str(version or "unknown")}
if name == "torch":
    info["cuda_device_count"] = int(module.cuda.device_count())
print(MARK + json.dumps(info))
""".replace("MARK", repr(MARK))


def describe(name):
    """Import ``name``; its version (and torch's CUDA device count), as CHILD_SOURCE does."""
    module = importlib.import_module(name)
    top = sys.modules[name.split(".")[0]]
    version = getattr(module, "__version__", None) or getattr(top, "__version__", None)
    info = {"version": str(version or "unknown")}
    if name == "torch":
        info["cuda_device_count"] = int(module.cuda.device_count())
    return info


def last_line(text):
    lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
    return lines[-1] if lines else ""


def import_isolated(name, timeout):
    """(ok, info or error text), importing ``name`` in a child of this interpreter."""
    env = dict(os.environ)
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    try:
        proc = subprocess.run([sys.executable, "-c", CHILD_SOURCE, name], capture_output=True,
                              text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return False, f"error: import timed out after {timeout:g} s"
    for line in proc.stdout.splitlines():
        if line.startswith(MARK) and proc.returncode == 0:
            return True, json.loads(line[len(MARK):])
    if proc.returncode < 0:
        return False, f"error: the import crashed the interpreter (signal {-proc.returncode}); " \
            + last_line(proc.stderr)
    return False, "error: " + (last_line(proc.stderr) or f"exit status {proc.returncode}")


def import_here(name):
    try:
        return True, describe(name)
    except Exception as exc:  # any failure of the import is the answer
        return False, f"error: {type(exc).__name__}: {exc}".splitlines()[0]


def nvidia_smi_gpus():
    exe = shutil.which("nvidia-smi")
    if not exe:
        return None
    try:
        out = subprocess.run([exe, "-L"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    count = sum(1 for line in out.splitlines() if line.startswith("GPU "))
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        count = min(count, len([d for d in visible.split(",") if d.strip()]))
    return count


def names(text):
    return [n.strip() for n in (text or "").split(",") if n.strip()]


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        description="Report this process's environment: modules, imports, GPUs.")
    parser.add_argument("--imports", default=DEFAULT_IMPORTS,
                        help=f"modules to import, comma-separated (default {DEFAULT_IMPORTS})")
    parser.add_argument("--require", default="",
                        help="modules that must import (also imported): exit 1 otherwise")
    parser.add_argument("--in-process", action="store_true",
                        help="import in this interpreter instead of one child per module")
    parser.add_argument("--import-timeout", type=float, default=300.0,
                        help="seconds per import in its child")
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    required = names(args.require)
    wanted = names(args.imports)
    wanted += [n for n in required if n not in wanted]

    results = {}
    for name in wanted:
        if args.in_process:
            results[name] = import_here(name)
        else:
            results[name] = import_isolated(name, args.import_timeout)

    gpus, source = None, None
    torch = results.get("torch")
    if torch is None:  # not asked for, but it is how GPUs are counted
        torch = import_here("torch") if args.in_process \
            else import_isolated("torch", args.import_timeout)
    if torch[0]:
        gpus, source = torch[1].get("cuda_device_count"), "torch"
    if gpus is None:
        gpus = nvidia_smi_gpus()
        source = "nvidia-smi" if gpus is not None else None
    rank, _size, local_rank, rank_source = discover_ranks()
    emit(RESULT, {
        "check": CHECK, "host": socket.gethostname(), "rank": rank, "local_rank": local_rank,
        "rank_source": rank_source, "python": sys.version.split()[0],
        "executable": sys.executable,
        "modules": names(os.environ.get("LOADEDMODULES", "").replace(":", ",")),
        "imports": {n: (info["version"] if ok else info) for n, (ok, info) in results.items()},
        "import_ok": {n: ok for n, (ok, _info) in results.items()},
        "gpus_visible": gpus or 0, "gpu_source": source,
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
    })
    return 1 if any(not results[n][0] for n in required) else 0


if __name__ == "__main__":
    sys.exit(main())
