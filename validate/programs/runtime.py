#!/usr/bin/env python3
"""What every validation program shares: rank discovery and the result protocol.

Standard library only, Python 3.8 or newer, nothing of hpcprov: it runs in the user's
environment. The validation suite copies it into a job's run directory beside the programs,
which import it as ``runtime`` (each puts its own directory first on ``sys.path``, so this
works under ``python -P`` too). hpcprov's judge imports the same file as
``hpcprov.validate.programs.runtime`` and reads the job output with :func:`parse_line`: one
definition of the protocol for both ends.

The protocol: one record per line, a tag, one space and a compact JSON object::

    HPCPROV_RANK {"rank":0,"host":"node1","local_rank":0,"rank_source":"torchrun"}
    HPCPROV_RESULT {"check":"allreduce",...}
    HPCPROV_DONE {"check":"allreduce","ok":true}

``HPCPROV_RANK``: every rank, once, at its start. ``HPCPROV_RESULT``: a measurement (its
``check`` field names the check; ``binding``: a rank whose device step failed,
:func:`binding_record`). ``HPCPROV_DONE``: rank 0, last, whether the program passed.
A launcher may put a prefix before a line (``[0]<stdout>:`` from horovodrun, ``0: `` from
``srun --label``), so a record is found anywhere in its line.

Ranks come from torch's environment contract (:func:`discover_ranks`); each rank's device
as an unmodified env:// script takes it (:func:`use_device`).
"""

import json
import os
import re
import socket
import sys

RANK = "HPCPROV_RANK"
RESULT = "HPCPROV_RESULT"
DONE = "HPCPROV_DONE"
TAGS = (RANK, RESULT, DONE)  # the tags of JSON records
# not JSON records: a line of ``horovodrun -cb`` that the env job's shell prefixed with this
# tag, and envcheck's child telling its parent what one import found
CHECK_BUILD = "HPCPROV_CB"
CHILD = "HPCPROV_CHILD"
# the ``check`` of the result record a rank prints where its device step fails
BINDING = "binding"

_RECORD = re.compile(r"(HPCPROV_[A-Z]+) (\{.*\})")

def discover_ranks(env=None):
    """(rank, world_size, local_rank, source) from torch's environment contract: RANK,
    WORLD_SIZE and LOCAL_RANK, which hpcprov's launch lines give every rank from whichever
    starter launched it (the rank shim, hpcprov/jobs/rank_env.sh, which names that starter
    in HPCPROV_RANK_SOURCE) and torchrun gives its ranks itself; (0, 1, 0, "single")
    without them."""
    env = os.environ if env is None else env
    if env.get("RANK", "") != "" and env.get("WORLD_SIZE", "") != "":
        source = env.get("HPCPROV_RANK_SOURCE") or "torchrun"
        return int(env["RANK"]), int(env["WORLD_SIZE"]), int(env.get("LOCAL_RANK") or 0), source
    return 0, 1, 0, "single"


def default_rendezvous(env=None):
    """torch.distributed's env:// rendezvous as ``init_process_group()`` reads it: MASTER_ADDR
    and MASTER_PORT default to 127.0.0.1 and 29500 where the launcher set none, and a
    process no launcher started (no RANK and WORLD_SIZE) is rank 0 of 1 (LOCAL_RANK 0)."""
    env = os.environ if env is None else env
    env.setdefault("MASTER_ADDR", "127.0.0.1")
    env.setdefault("MASTER_PORT", "29500")
    if discover_ranks(env)[3] == "single":
        env.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0")


_WORD = re.compile(r"^[a-z][a-z0-9_]*$")


def device_word(text):
    """argparse type of --device and --dist-backend: a lowercase word (cpu, cuda, xpu;
    gloo, nccl, xccl): the GPU vendor's data in hpcprov names them, not these programs."""
    if not _WORD.match(text):
        raise ValueError(text)
    return text


def accelerator(torch, device):
    """torch's module for a device type (torch.cuda, torch.xpu: each has set_device,
    device_count, current_device, synchronize, Event), None for the CPU."""
    if device == "cpu":
        return None
    return getattr(torch, device, None)


# what a rank sees of its node's GPUs: the profile's gpus.per_rank (all, one), or, for the
# check of several ranks on a node with one GPU, "shared": every rank takes device
# LOCAL_RANK % device_count() (NCCL cannot put two ranks on one GPU; Gloo can)
PER_RANK = ("all", "one", "shared")


class BindingError(RuntimeError):
    """The device an unmodified script takes (LOCAL_RANK, or device 0 under one GPU per
    rank) is not this rank's: its one-line message says why and what to do; ``count`` and
    ``visible`` are the devices the rank sees and the visible-devices variable's value."""

    def __init__(self, message, count=None, visible=None):
        super().__init__(message)
        self.count, self.visible = count, visible


def local_world_size(env=None):
    """LOCAL_WORLD_SIZE (the ranks of this node, from the rank shim or torchrun), or None."""
    env = os.environ if env is None else env
    value = env.get("LOCAL_WORLD_SIZE", "")
    return int(value) if value.isdigit() and int(value) > 0 else None


def binding_problem(program, device, count, local_rank, local_size, per_rank, var, value):
    """Why a rank that sees ``count`` devices of type ``device`` cannot take the one an
    unmodified script takes (None where it can): with ``per_rank`` ``all``, the
    ``local_rank``-th (LOCAL_RANK runs 0 .. ``local_size`` - 1 on the node, each rank seeing
    as many devices as this one: a binding that gives each rank fewer fails some); with
    ``one``, device 0, which must be this rank's alone: where several ranks share the node,
    each must see exactly one. ``var`` and ``value``: the variable that limits the devices a
    process sees, and its value here (None: unset), named in the line."""
    binding = f"{var}={value}" if value is not None else f"{var} unset"
    top = max(local_rank + 1, local_size or 0)
    if per_rank == "shared":
        return None if count >= 1 else (f"{program}: this rank sees no {device} device "
                                        f"({binding})")
    if per_rank == "one":
        if count == 1 or top <= 1:
            return None
        return (f"{program}: the profile declares one GPU per rank (gpus.per_rank: one), "
                f"but this rank sees {count} {device} devices ({binding}) with {top} ranks "
                f"on its node: the launcher does not bind each rank to one GPU of its own "
                f"(srun --gpus-per-task=1, jsrun resource sets of one GPU, an affinity "
                f"wrapper); bind it, or declare gpus.per_rank: all")
    if top <= count:
        return None
    bad = (f"LOCAL_RANK {count} is no valid device index" if count == top - 1
           else f"LOCAL_RANK {count}..{top - 1} are no valid device indices")
    return (f"{program}: the GPU binding gives each rank {count} {device} device"
            f"{'' if count == 1 else 's'} ({binding} on LOCAL_RANK {local_rank}) while "
            f"LOCAL_RANK runs 0..{top - 1} on the node: {bad}, so "
            f"an env:// script's torch.{device}.set_device(int(os.environ['LOCAL_RANK'])) "
            f"fails there (invalid device ordinal); scripts must use device 0 "
            f"(LOCAL_RANK % device_count()), or the profile must declare the binding "
            f"(the partition's gpus.per_rank: one)")


def use_device(torch, device, local_rank, program="", per_rank="all",
               visible_var="CUDA_VISIBLE_DEVICES", local_size=None):
    """This rank's device, taken as an unmodified env:// script takes it: the
    ``local_rank``-th of the type (``torch.cuda.set_device(LOCAL_RANK)``), or device 0 where
    the profile declares one GPU per rank (``per_rank`` ``one``); the CPU for ``cpu``.
    Raises :class:`BindingError` (its message one line, naming ``program``) where that
    device is not this rank's: LOCAL_RANK is no valid index under the binding, or under
    ``one`` the rank sees more than its own. ``local_size``: the ranks of this node
    (default LOCAL_WORLD_SIZE)."""
    accel = accelerator(torch, device)
    if accel is None:
        return torch.device("cpu")
    count = int(accel.device_count())
    visible = os.environ.get(visible_var)
    why = binding_problem(program or "program", device, count, local_rank,
                          local_world_size() if local_size is None else local_size,
                          per_rank, visible_var, visible)
    if why:
        raise BindingError(why, count, visible)
    accel.set_device(0 if per_rank == "one" else local_rank % count if per_rank == "shared"
                     else local_rank)
    return torch.device(device, accel.current_device())


def binding_record(check, rank, local_rank, error):
    """The HPCPROV_RESULT record of a rank whose device step failed (a
    :class:`BindingError`): the judge fails the check with its ``detail`` line."""
    return {"check": BINDING, "of": check, "host": socket.gethostname(), "rank": rank,
            "local_rank": local_rank, "device_count": getattr(error, "count", None),
            "visible_devices": getattr(error, "visible", None), "detail": str(error)}


def binding_failed(check, rank, local_rank, error):
    """A rank whose device step failed: its record (:func:`binding_record`) and its one
    line on stderr; the exit status 1 (the check failed)."""
    emit(RESULT, binding_record(check, rank, local_rank, error))
    sys.stderr.write(f"{error}\n")
    sys.stderr.flush()
    return 1


def add_binding_args(parser):
    """The options of the device step: what a rank sees (--per-rank) and the variable that
    limits it (--visible-devices), both from the profile's GPU vendor and partition."""
    parser.add_argument("--per-rank", choices=PER_RANK, default="all",
                        help="what each rank sees of its node's GPUs (the partition's "
                        "gpus.per_rank): all (device LOCAL_RANK) or one (device 0, its own); "
                        "shared: device LOCAL_RANK %% device_count(), ranks sharing a GPU")
    parser.add_argument("--visible-devices", default="CUDA_VISIBLE_DEVICES",
                        help="the variable that limits the GPUs a process sees")


def no_device(torch, device, program):
    """Why ``device`` cannot be used here (None where it can): torch knows no such device
    type, or sees none of it."""
    if device == "cpu":
        return None
    accel = accelerator(torch, device)
    if accel is None or not accel.is_available():
        return (f"{program}: --device {device}, but torch {torch.__version__} sees no "
                f"{device} device")
    return None


def pick_backend(dist, backend, fallback):
    """The torch.distributed backend to run: ``backend``, else where this torch lacks it and
    ``fallback`` is ``NAME:MODULE`` (an older stack's backend and the bindings that register
    it, e.g. ccl:oneccl_bindings_for_pytorch), that one after importing its bindings."""
    available = getattr(dist, "is_backend_available", None)
    if not fallback or available is None or backend == "mpi" or available(backend):
        return backend
    name, _, module = fallback.partition(":")
    if module:
        __import__(module)
    return name


def format_record(tag, obj):
    """One record as its line, without the newline."""
    return tag + " " + json.dumps(obj, separators=(",", ":"))


def emit(tag, obj):
    """Print one record on stdout."""
    # one write per line: print() writes the text and the newline separately when Python
    # runs unbuffered (PYTHONUNBUFFERED, python -u), and the ranks share the launcher's pipe
    sys.stdout.write(format_record(tag, obj) + "\n")
    sys.stdout.flush()


def announce(rank, local_rank, source):
    """Emit this rank's HPCPROV_RANK record; returns the host name it names."""
    host = socket.gethostname()
    emit(RANK, {"rank": rank, "host": host, "local_rank": local_rank, "rank_source": source})
    return host


def parse_line(line):
    """(tag, record) of the record in one line of output, or None: no record, a tag that is
    not one of TAGS, or JSON that does not parse (two ranks' lines mixed)."""
    match = _RECORD.search(line)
    if not match or match.group(1) not in TAGS:
        return None
    try:
        record = json.loads(match.group(2))
    except ValueError:
        return None
    return (match.group(1), record) if isinstance(record, dict) else None


def parse_output(text):
    """Every (tag, record) in a job's output, in order."""
    found = (parse_line(line) for line in text.splitlines())
    return [item for item in found if item is not None]
