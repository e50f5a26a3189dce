"""The programs that prove a Horovod build: a 2-process allreduce per framework.

Each rank contributes rank+1 in every element; the sum over n ranks must be n(n+1)/2
everywhere. The program prints one line per rank and exits non-zero on a wrong result.
"""

from __future__ import annotations

TORCH = """\
import sys
import torch
import horovod.torch as hvd

hvd.init()
n = hvd.size()
t = torch.full((4096,), float(hvd.rank() + 1))
out = hvd.allreduce(t, op=hvd.Sum, name="hpcprov_proof")
want = n * (n + 1) / 2
if n < 2 or not bool(torch.all(out == want)):
    print(f"hpcprov: error: torch allreduce on rank {hvd.rank()} of {n}: got "
          f"{out[:3].tolist()}, want {want}", file=sys.stderr)
    sys.exit(1)
print(f"hpcprov: torch allreduce ok on rank {hvd.rank()} of {n}: sum {want}")
"""

TENSORFLOW = """\
import os
import sys
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import tensorflow as tf
import horovod.tensorflow as hvd

hvd.init()
n = hvd.size()
t = tf.fill([4096], float(hvd.rank() + 1))
out = hvd.allreduce(t, op=hvd.Sum, name="hpcprov_proof_tf")
want = n * (n + 1) / 2
if n < 2 or not bool(tf.reduce_all(out == want)):
    print(f"hpcprov: error: tensorflow allreduce on rank {hvd.rank()} of {n}: got "
          f"{out.numpy()[:3].tolist()}, want {want}", file=sys.stderr)
    sys.exit(1)
print(f"hpcprov: tensorflow allreduce ok on rank {hvd.rank()} of {n}: sum {want}")
"""

PROGRAMS = {"pytorch": TORCH, "tensorflow": TENSORFLOW}

# Prints the facts that decide whether a built Horovod wheel fits this environment.
ABI_FACTS = """\
import platform, sysconfig
from importlib import metadata

def version(*names):
    for name in names:
        try:
            return name + " " + metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    return "none"

print("python=" + platform.python_implementation() + " " + platform.python_version()
      + " " + str(sysconfig.get_config_var("SOABI")))
print("platform=" + platform.machine() + " " + " ".join(platform.libc_ver()))
print("torch=" + version("torch"))
print("tensorflow=" + version("tensorflow", "tensorflow-cpu", "tensorflow-gpu",
                              "tensorflow-intel"))
print("mxnet=" + version("mxnet"))
"""
