"""Run `horovodrun -cb` with the frameworks Horovod was built for already imported.

`horovodrun -cb` answers each of its questions (is the extension there, built with MPI, Gloo,
NCCL, DDL, CCL) in a forked process that imports the framework; a fork of a process that
imported it first inherits the import instead of repeating it. The output is horovodrun's own
(horovod.runner.launch, the function its `horovodrun` entry point runs).

Usage: python check_build.py MODULE... (e.g. torch tensorflow); runs in the environment's
Python, which may be old: no newer syntax than 3.6.
"""

import importlib
import sys


def main(modules):
    for name in modules:
        importlib.import_module(name)
    from horovod.runner.launch import run_commandline

    sys.argv = ["horovodrun", "-cb"]
    run_commandline()


if __name__ == "__main__":
    main(sys.argv[1:])
