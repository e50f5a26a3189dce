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

Ranks come from the launcher's variables, the first set of :data:`RANK_ENV` that is present.
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

# (source, rank, world size, local rank): the first launcher whose rank and size are set
# wins. The launchers' own variables come before Slurm's: mpirun or mpiexec started inside
# a batch script inherit the batch step's SLURM_PROCID=0, which would make every rank 0.
# jsrun (LSF) sets JSM_NAMESPACE_*, and the Open MPI ones too where it runs Spectrum MPI.
RANK_ENV = (
    ("torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK"),
    ("horovod", "HOROVOD_RANK", "HOROVOD_SIZE", "HOROVOD_LOCAL_RANK"),
    ("openmpi", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"),
    ("pals", "PALS_RANKID", "PMI_SIZE", "PALS_LOCAL_RANKID"),  # HPE Cray's mpiexec
    ("pmi", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID"),
    ("jsrun", "JSM_NAMESPACE_RANK", "JSM_NAMESPACE_SIZE", "JSM_NAMESPACE_LOCAL_RANK"),
    ("slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"),
)


def discover_ranks(env=None):
    """(rank, world_size, local_rank, source) from the launcher's environment variables;
    (0, 1, 0, "single") without a launcher."""
    env = os.environ if env is None else env
    for source, rank, size, local in RANK_ENV:
        if env.get(rank, "") != "" and env.get(size, "") != "":
            return int(env[rank]), int(env[size]), int(env.get(local) or 0), source
    return 0, 1, 0, "single"


def default_rendezvous(env=None):
    """torch.distributed's env:// rendezvous: MASTER_ADDR and MASTER_PORT default to
    127.0.0.1 and 29500 where the launcher set none."""
    env = os.environ if env is None else env
    env.setdefault("MASTER_ADDR", "127.0.0.1")
    env.setdefault("MASTER_PORT", "29500")


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
