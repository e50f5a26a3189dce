#!/usr/bin/env python3
"""Environment check of the hpcprov validation suite, run on every node (or rank) of a job.

Runs in the user's environment with the standard library only (and runtime.py beside it,
for rank discovery and the record). The frameworks are imported in one child process of this
Python, one after another (``--in-process``: in this one), so an import that crashes the
interpreter (an ABI mismatch, a missing library) is reported instead of taking the check down
with it; the modules after it are imported in a new child. One child, not one per module:
each of torch, horovod and horovod.torch imports torch, which is most of the check's time.

With ``--check-build`` the child then answers ``horovodrun -cb`` (Horovod's own code, as the
``horovodrun`` command runs it) with the frameworks already imported: its checking processes
are forks that inherit them. Each line of its answer is printed tagged ``HPCPROV_CB``.

Every process prints one line (compact JSON after the tag)::

    HPCPROV_RESULT {"check":"env","host":"node1","rank":0,"local_rank":0,
                    "rank_source":"slurm","python":"3.11.7",
                    "executable":"/path/bin/python","modules":["gcc/12","openmpi/4.1"],
                    "imports":{"torch":"2.13.0",...},"import_ok":{"torch":true,...},
                    "gpus_visible":0,"gpu_source":"torch","visible_devices":null,
                    "visible_devices_var":"CUDA_VISIBLE_DEVICES","per_rank":null,
                    "binding":null}

``imports`` holds the module's version (its package's, for submodules such as horovod.torch)
or, when the import failed, ``error: <the exception's last line>``; ``import_ok`` says which.
``gpus_visible`` is ``torch.<device>.device_count()`` when torch imports (``--gpu-device``:
cuda, xpu), else the GPUs the vendor's count command lists (``--gpu-count-command``, one
match of ``--gpu-count-pattern`` per GPU: ``nvidia-smi -L`` by default; at most as many as
the ``--visible-devices`` variable names), else 0. hpcprov passes the site's GPU vendor's
command, pattern and variable.

``binding``: with ``--per-rank`` (the partition's ``gpus.per_rank``, where validation runs
on GPUs), the one line that says why the device an unmodified env:// script takes
(LOCAL_RANK; device 0 under ``one``) is not this rank's (runtime.py's ``binding_problem``),
else null; the judge fails the check with it.

Exit status: 0, or 1 when a module named by ``--require`` does not import or ``binding``
says why the device step fails.
"""

import argparse
import contextlib
import importlib
import io
import json
import os
import queue
import re
import shutil
import socket
import subprocess
import sys
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # runtime.py lies beside
# its bytecode is never written beside it (a __pycache__ there could be replaced by others;
# the job's program check refuses one, as it hashes runtime.py, not what is cached)
sys.dont_write_bytecode, _writes_bytecode = True, sys.dont_write_bytecode
from runtime import (  # noqa: E402 - after its bytecode is switched off
    CHECK_BUILD,
    CHILD,
    PER_RANK,
    RESULT,
    binding_problem,
    discover_ranks,
    emit,
    local_world_size,
)

sys.dont_write_bytecode = _writes_bytecode

CHECK = "env"
DEFAULT_IMPORTS = "torch,tensorflow,horovod,horovod.torch,horovod.tensorflow"
MARK = CHILD + " "
CB_MARK = CHECK_BUILD + " "
CB_TIMEOUT = 300.0  # seconds for horovodrun -cb, after the imports
DEVICE_VAR = "HPCPROV_GPU_DEVICE"  # --gpu-device, for the importing child


def describe(name):
    """Import ``name``; its version (and torch's CUDA device count)."""
    module = importlib.import_module(name)
    top = sys.modules[name.split(".")[0]]
    version = getattr(module, "__version__", None) or getattr(top, "__version__", None)
    info = {"version": str(version or "unknown")}
    if name == "torch":  # the GPU vendor's device type: the parent passes it down
        accel = getattr(module, os.environ.get(DEVICE_VAR) or "cuda", None)
        info["device_count"] = int(accel.device_count()) if accel is not None else 0
    return info


def last_line(text):
    lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
    return lines[-1] if lines else ""


def import_here(name):
    """(ok, info or error text), importing ``name`` in this interpreter."""
    try:
        return True, describe(name)
    except Exception as exc:  # any failure of the import is the answer
        return False, f"error: {type(exc).__name__}: {exc}".splitlines()[0]


def check_build_lines():
    """``horovodrun -cb``'s answer, as lines (run in this process: what is imported stays)."""
    from horovod.runner.launch import run_commandline

    out = io.StringIO()
    argv = sys.argv
    sys.argv = ["horovodrun", "-cb"]
    try:
        with contextlib.redirect_stdout(out):
            run_commandline()
    except SystemExit:
        pass
    finally:
        sys.argv = argv
    return out.getvalue().splitlines()


def child(names, check_build):
    """The child's work: import each module, a MARK line for each as it is done (so that a
    crash names the module it happened in), then ``horovodrun -cb`` if asked."""
    for name in names:
        ok, info = import_here(name)
        sys.stdout.write(MARK + json.dumps({"name": name, "ok": ok, "info": info}) + "\n")
        sys.stdout.flush()
    if check_build:
        try:
            lines = check_build_lines()
        except Exception as exc:  # reported as -cb's answer: the judge finds nothing built
            lines = [f"error: {type(exc).__name__}: {exc}".splitlines()[0]]
        sys.stdout.write("".join(CB_MARK + line + "\n" for line in lines))
        sys.stdout.flush()


def _reader(stream, lines):
    """Put each line of ``stream`` on the queue, then None."""
    for line in stream:
        lines.put(line)
    lines.put(None)


def _slurp(stream, into):
    into.append(stream.read())


def import_isolated(names, timeout, check_build=False):
    """({name: (ok, info or error text)}, -cb's lines): the imports in children of this
    interpreter, one child for all of them unless one crashes it or takes longer than
    ``timeout`` seconds (its module gets the error; the rest go on in a new child)."""
    env = dict(os.environ)
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    results, cb_lines, left = {}, [], list(names)
    pending_cb = check_build
    while left or pending_cb:
        proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--child",
                                 *(["--check-build"] if pending_cb else []), *left],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env=env)
        lines = queue.Queue()
        threading.Thread(target=_reader, args=(proc.stdout, lines), daemon=True).start()
        errors = []
        stderr = threading.Thread(target=_slurp, args=(proc.stderr, errors), daemon=True)
        stderr.start()
        timed_out = False
        while True:
            try:
                line = lines.get(timeout=timeout if left else CB_TIMEOUT)
            except queue.Empty:
                proc.kill()
                timed_out = True
                break
            if line is None:
                break
            if line.startswith(MARK):
                got = json.loads(line[len(MARK):])
                results[got["name"]] = (got["ok"], got["info"])
                left.remove(got["name"])
            elif line.startswith(CB_MARK):
                cb_lines.append(line[len(CB_MARK):].rstrip("\n"))
        code = proc.wait()
        stderr.join(10)
        why = (f"timed out after {timeout if left else CB_TIMEOUT:g} s" if timed_out
               else f"crashed the interpreter (signal {-code})" if code < 0
               else f"exit status {code}")
        if not left:  # every import answered: the child was in -cb, or done
            if pending_cb and code != 0 and not cb_lines:
                cb_lines.append(f"error: horovodrun -cb {why}; " + last_line("".join(errors)))
            break
        name = left.pop(0)  # the import the child was in when it ended
        if timed_out:
            results[name] = (False, f"error: import timed out after {timeout:g} s")
        elif code < 0:
            results[name] = (False, f"error: the import {why}; " + last_line("".join(errors)))
        else:
            results[name] = (False, "error: " + (last_line("".join(errors)) or why))
    return results, cb_lines


def command_gpus(argv, pattern, visible_var):
    """The GPUs ``argv`` lists (distinct matches of ``pattern``, a line at a time), at most
    as many as ``visible_var`` names; None without the command."""
    exe = shutil.which(argv[0]) if argv else None
    if not exe:
        return None
    try:
        out = subprocess.run([exe, *argv[1:]], capture_output=True, text=True,
                             timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    found = (re.search(pattern, line) for line in out.splitlines())
    count = len({m.group(0) for m in found if m})
    visible = os.environ.get(visible_var)
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
    parser.add_argument("--check-build", action="store_true",
                        help="also print horovodrun -cb's answer, each line tagged "
                             + CHECK_BUILD)
    parser.add_argument("--in-process", action="store_true",
                        help="import in this interpreter instead of a child")
    parser.add_argument("--import-timeout", type=float, default=300.0,
                        help="seconds per import in the child")
    parser.add_argument("--gpu-device", default="cuda",
                        help="torch's device type of the node's GPUs (cuda, xpu)")
    parser.add_argument("--gpu-count-command", default="nvidia-smi -L",
                        help="the command that lists the node's GPUs, without torch")
    parser.add_argument("--gpu-count-pattern", default=r"^GPU [0-9]+:",
                        help="a regular expression matching once per GPU it lists")
    parser.add_argument("--visible-devices", default="CUDA_VISIBLE_DEVICES",
                        help="the variable that limits the GPUs a process sees")
    parser.add_argument("--per-rank", choices=PER_RANK, default=None,
                        help="what each rank sees of its node's GPUs (the partition's "
                        "gpus.per_rank): check that the device an unmodified script takes "
                        "(LOCAL_RANK; device 0 for one) is this rank's; default: not checked")
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    os.environ[DEVICE_VAR] = args.gpu_device
    required = names(args.require)
    wanted = names(args.imports)
    wanted += [n for n in required if n not in wanted]
    extra = [] if "torch" in wanted else ["torch"]  # how GPUs are counted

    if args.in_process:
        results = {name: import_here(name) for name in wanted + extra}
        cb_lines = check_build_lines() if args.check_build else []
    else:
        results, cb_lines = import_isolated(wanted + extra, args.import_timeout,
                                            args.check_build)
    if cb_lines:
        sys.stdout.write("".join(CB_MARK + line + "\n" for line in cb_lines))
        sys.stdout.flush()

    gpus, source = None, None
    torch = results.get("torch", (False, None))
    if torch[0]:
        gpus, source = torch[1].get("device_count"), "torch"
    if gpus is None:
        command = args.gpu_count_command.split()
        gpus = command_gpus(command, args.gpu_count_pattern, args.visible_devices)
        source = command[0] if gpus is not None else None
    rank, _size, local_rank, rank_source = discover_ranks()
    visible = os.environ.get(args.visible_devices)
    # the device step of an unmodified script, where torch counted this rank's devices (none
    # seen is the GPU count's failure, not the binding's)
    binding = binding_problem("envcheck.py", args.gpu_device, gpus, local_rank,
                              local_world_size(), args.per_rank, args.visible_devices,
                              visible) if args.per_rank and source == "torch" and gpus else None
    emit(RESULT, {
        "check": CHECK, "host": socket.gethostname(), "rank": rank, "local_rank": local_rank,
        "rank_source": rank_source, "python": sys.version.split()[0],
        "executable": sys.executable,
        "modules": names(os.environ.get("LOADEDMODULES", "").replace(":", ",")),
        "imports": {n: (results[n][1]["version"] if results[n][0] else results[n][1])
                    for n in wanted},
        "import_ok": {n: results[n][0] for n in wanted},
        "gpus_visible": gpus or 0, "gpu_source": source,
        "visible_devices": visible, "visible_devices_var": args.visible_devices,
        "per_rank": args.per_rank, "binding": binding,
    })
    if binding:
        sys.stderr.write(binding + "\n")
    return 1 if binding or any(not results[n][0] for n in required) else 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:  # import_isolated's child: --child [--check-build] NAME...
        cb = sys.argv[2:3] == ["--check-build"]
        child(sys.argv[3 if cb else 2:], cb)
        sys.exit(0)
    sys.exit(main())
