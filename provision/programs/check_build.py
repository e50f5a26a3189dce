"""Run `horovodrun -cb` with the frameworks Horovod was built for already imported, and,
with ``--prove``, the 2-process allreduce proof from the same interpreter.

`horovodrun -cb` answers each of its questions (is the extension there, built with MPI, Gloo,
NCCL, DDL, CCL) in a forked process that imports the framework; a fork of a process that
imported it first inherits the import instead of repeating it. The output is horovodrun's own
(horovod.runner.launch, the function its `horovodrun` entry point runs), written to the file
given by ``--output`` as well.

``--prove PROGRAM...``: then each PROGRAM runs as 2 processes under horovodrun over Gloo on
this host (``horovodrun --gloo -np 2 -H localhost:2 python PROGRAM``), started from here, so
that horovodrun's own check that Gloo is built (one more forked import of the framework)
inherits the import too. The ranks are new processes, as a job's are. A failed proof exits 1.

Modules after ``--warm`` are imported too, where they exist, for their bytecode only: the
frameworks are installed without byte-compiling, and what a training process imports later
(PyTorch's optimizers import torch._dynamo on first use: about a thousand modules) would
otherwise be compiled again in every process of every job that cannot write the bytecode
(a shared prefix, PYTHONDONTWRITEBYTECODE). They are imported in a forked process that
inherits the frameworks, beside -cb and the proof (the other core), and waited for.

Usage: python check_build.py [--output FILE] MODULE... [--warm MODULE...] [--prove PROGRAM...]
(e.g. --output cb.txt torch --warm torch._dynamo --prove allreduce_pytorch.py); runs in the
environment's Python, which may be old: no newer syntax than 3.6.
"""

import contextlib
import importlib
import io
import os
import sys

# what starts a proof: 2 processes on this host through horovodrun over Gloo (the same
# words as hpcprov.provision.horovod_steps.proof_starter where Horovod has Gloo)
PROOF_STARTER = ["horovodrun", "--gloo", "-np", "2", "-H", "localhost:2"]


def parse(argv):
    """(output file or None, modules, warm modules, proof programs)."""
    output = None
    if argv[:1] == ["--output"]:
        output, argv = argv[1], argv[2:]
    groups = {"": [], "--warm": [], "--prove": []}
    at = ""
    for word in argv:
        if word in groups:
            at = word
        else:
            groups[at].append(word)
    return output, groups[""], groups["--warm"], groups["--prove"]


def warm_beside(names):
    """Import ``names`` for their bytecode in a forked process (it inherits what this one
    imported); its pid, or None where they were imported here (no fork on this system)."""
    if not names:
        return None
    if not hasattr(os, "fork"):
        _import_quietly(names)
        return None
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid:
        return pid
    _import_quietly(names)
    os._exit(0)  # the forked child: no exit handlers, no buffers of the parent's


def _import_quietly(names):
    for name in names:
        with contextlib.suppress(Exception):  # an older release without it: nothing to do
            importlib.import_module(name)


def horovodrun(words):
    """horovodrun with these words, in this process (horovod.runner.launch); its exit
    status (an error raised is 1)."""
    from horovod.runner.launch import run_commandline

    sys.argv = ["horovodrun", *words]
    try:
        run_commandline()
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except Exception as exc:  # horovodrun raises where a rank failed
        print(f"hpcprov: error: {exc}", file=sys.stderr)
        return 1
    return 0


def main(argv):
    output, modules, warm, proofs = parse(argv)
    for name in modules:
        importlib.import_module(name)
    child = warm_beside(warm)
    captured = io.StringIO()
    with contextlib.redirect_stdout(captured):
        code = horovodrun(["-cb"])
    sys.stdout.write(captured.getvalue())
    sys.stdout.flush()
    if output:
        with open(output, "w") as out:
            out.write(captured.getvalue())
    for program in proofs if code == 0 else ():
        code = horovodrun([*PROOF_STARTER[1:], "python", program])
        sys.stdout.flush()
        if code:
            break
    if child:
        os.waitpid(child, 0)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
