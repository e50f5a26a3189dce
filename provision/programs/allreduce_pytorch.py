"""hpcprov's proof of a PyTorch Horovod build: a 2-process allreduce (prove-allreduce step).

Each rank contributes rank+1 in every element; the sum over n ranks must be n(n+1)/2
everywhere. Prints one line per rank; exits 1 on a wrong result. The setup script carries
this file verbatim and runs it with horovodrun (or mpirun).
"""

import sys

import horovod.torch as hvd
import torch

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
