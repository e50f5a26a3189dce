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
``check`` field names the check). ``HPCPROV_DONE``: rank 0, last, whether the program passed.
A launcher may put a prefix before a line (``[0]<stdout>:`` from horovodrun, ``0: `` from
``srun --label``), so a record is found anywhere in its line.

Ranks come from torch's environment contract (:func:`discover_ranks`).
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
    """torch.distributed's env:// rendezvous: MASTER_ADDR and MASTER_PORT default to
    127.0.0.1 and 29500 where the launcher set none."""
    env = os.environ if env is None else env
    env.setdefault("MASTER_ADDR", "127.0.0.1")
    env.setdefault("MASTER_PORT", "29500")


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


def use_device(torch, device, local_rank):
    """This rank's device: the node's ``local_rank``-th (modulo how many torch sees) of the
    type; the CPU for ``cpu``."""
    accel = accelerator(torch, device)
    if accel is None:
        return torch.device("cpu")
    accel.set_device(local_rank % accel.device_count())
    return torch.device(device, accel.current_device())


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
