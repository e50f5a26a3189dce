"""Run `horovodrun -cb` with the frameworks Horovod was built for already imported.

`horovodrun -cb` answers each of its questions (is the extension there, built with MPI, Gloo,
NCCL, DDL, CCL) in a forked process that imports the framework; a fork of a process that
imported it first inherits the import instead of repeating it. The output is horovodrun's own
(horovod.runner.launch, the function its `horovodrun` entry point runs).

Modules after ``--warm`` are imported too, where they exist, for their bytecode only: the
frameworks are installed without byte-compiling, and what a training process imports later
(PyTorch's optimizers import torch._dynamo on first use: about a thousand modules) would
otherwise be compiled again in every process of every job that cannot write the bytecode
(a shared prefix, PYTHONDONTWRITEBYTECODE).

Usage: python check_build.py MODULE... [--warm MODULE...] (e.g. torch --warm torch._dynamo);
runs in the environment's Python, which may be old: no newer syntax than 3.6.
"""

import contextlib
import importlib
import sys


def main(argv):
    modules, warm = argv, []
    if "--warm" in argv:
        at = argv.index("--warm")
        modules, warm = argv[:at], argv[at + 1:]
    for name in modules:
        importlib.import_module(name)
    for name in warm:
        with contextlib.suppress(Exception):  # an older release without it: nothing to do
            importlib.import_module(name)
    from horovod.runner.launch import run_commandline

    sys.argv = ["horovodrun", "-cb"]
    run_commandline()


if __name__ == "__main__":
    main(sys.argv[1:])
