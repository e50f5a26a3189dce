"""hpcprov's proof of a TensorFlow Horovod build: a 2-process allreduce (prove-allreduce step).

Each rank contributes rank+1 in every element; the sum over n ranks must be n(n+1)/2
everywhere. Prints one line per rank; exits 1 on a wrong result. The setup script carries
this file verbatim and runs it with horovodrun (or mpirun).
"""

import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # before TensorFlow is imported

import horovod.tensorflow as hvd
import tensorflow as tf

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
