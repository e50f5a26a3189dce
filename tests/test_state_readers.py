"""Trust, round three (issue 27): every file hpcprov reads goes through one reader
(hpcprov.core.fsutil.read_regular: a regular file only, opened without blocking, at most a
bound). These are the readers that once opened files by path and read them whole: the
journal of a prefix the ready cache names, the record step's fact files, a job's output,
the status file a job's EXIT trap writes and the nodes file of an allocation. A FIFO there
once hung hpcprov (open() waits for a writer), a huge file was read whole.

And `hpcprov doctor` prints what a manifest holds: every control character there reaches
the terminal escaped (\\xNN), never raw."""

from __future__ import annotations

import contextlib
import json
import os
import re
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hpcprov_tests import cli

from hpcprov.provision.journal import Journal, StepRecord


def _returns(call: Callable[[], Any], *fifos: Path, within: float = 30.0) -> Any:
    """What ``call()`` returns; a failure when it waits on one of ``fifos`` instead (a
    guard, not a timing: a reader that never opens them returns at once). A call found
    waiting is released first (this test opens each FIFO as its writer), so the test ends."""
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = call()
        except BaseException as exc:  # re-raised in the test's thread
            box["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(within)
    if thread.is_alive():
        for fifo in fifos:  # it waits in open() for a writer: be that writer, then leave
            with contextlib.suppress(OSError):  # ENXIO: nobody reading this one
                os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        thread.join(within)
        pytest.fail(f"waited on a FIFO ({', '.join(map(str, fifos))}) instead of refusing it")
    if "error" in box:
        raise box["error"]
    return box["value"]


def _sparse(path: Path, size: int, head: bytes = b"") -> Path:
    """A file of ``size`` bytes that takes no disk (``head``, then a hole)."""
    path.write_bytes(head)
    os.truncate(path, size)
    return path


# ------------------------------------------------------------------ the ready cache


def test_a_fifo_as_the_journal_of_a_ready_prefix_is_not_ready_and_never_waited_on(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`hpcprov setup` asks the ready cache first: the prefix it names had a FIFO as its
    journal, and setup hung there before anything else."""
    from hpcprov.provision import quick

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg-cache"))
    prefix = tmp_path / "env"
    state = prefix / ".hpcprov"
    state.mkdir(parents=True)
    (state / "manifest.json").write_text("{}")
    req = quick.request_key("local", {"prefix": str(prefix), "env": None, "on": "login",
                                      "container": None})
    assert req is not None
    quick.remember(req, prefix)
    journal = Journal(state / "journal.json")
    journal.steps["env"] = StepRecord("done", "f", 0.0)
    journal.save()
    assert quick.ready_prefix(req) == prefix  # the entry is believed: the journal decides
    (state / "journal.json").unlink()
    os.mkfifo(state / "journal.json")
    assert _returns(lambda: quick.ready_prefix(req), state / "journal.json") is None
    (state / "journal.json").unlink()
    _sparse(state / "journal.json", (4 << 20) + 1, (state / "manifest.json").read_bytes())
    assert quick.ready_prefix(req) is None  # more than a journal holds: not read


# ------------------------------------------------------------------ the manifest's facts


def test_a_fact_file_that_is_a_fifo_or_too_large_is_no_fact(tmp_path: Path) -> None:
    """The manifest is built from the files the record step wrote; one that is not a
    regular file is never waited on, one larger than MAX_FACT_BYTES never read: either is
    a fact not recorded, as a missing one is ("")."""
    from hpcprov.provision.manifest import MAX_FACT_BYTES, build_manifest
    from hpcprov.site.profiles import load_site

    prefix = tmp_path / "env"
    facts = prefix / ".hpcprov" / "facts"
    facts.mkdir(parents=True)
    os.mkfifo(facts / "pip-freeze.txt")
    _sparse(facts / "host.txt", MAX_FACT_BYTES + 1, b"node1\n")
    (facts / "python.txt").write_text("3.11.4\n")
    data = _returns(lambda: build_manifest(load_site("local"), "local", prefix,
                                           Journal(prefix / ".hpcprov" / "journal.json")),
                    facts / "pip-freeze.txt")
    assert data["pip_freeze"] == [] and data["versions"] == {}
    assert data["host"] == ""
    assert data["python"] == "3.11.4"  # the regular one is read as before
    json.dumps(data)


# ------------------------------------------------------------------ a job's output


def _job_result(tmp_path: Path, output: Path) -> Any:
    from hpcprov.schedulers.base import Handle
    from hpcprov.validate.plan import Job
    from hpcprov.validate.run import _result

    job = Job("env-1", "env", "torch", 1, 1, "local", "envcheck.py", ())
    now = time.monotonic()
    h = Handle("1", tmp_path / "env-1.sh", output, tmp_path / "env-1.exit", now,
               state="COMPLETED", exit_code=0, ended=now)
    return _returns(lambda: _result(job, h), output)


RECORD = b'HPCPROV_RESULT {"check": "env", "host": "n1", "imports": {}, "gpus_visible": 0}\n'


def test_a_job_output_that_is_a_fifo_is_that_jobs_error_never_waited_on(
        tmp_path: Path) -> None:
    from hpcprov.validate.judge import judge

    (tmp_path / "fine.out").write_bytes(b"starting\n" + RECORD)
    fine = _job_result(tmp_path, tmp_path / "fine.out")
    assert fine.records and not fine.malformed and fine.tail[0] == "starting"
    os.mkfifo(tmp_path / "env-1.out")
    res = _job_result(tmp_path, tmp_path / "env-1.out")
    assert res.records == [] and res.tail == []
    assert res.malformed == (f"output not read: {tmp_path / 'env-1.out'} is a FIFO (named "
                             "pipe), not a regular file")
    (outcome,) = judge([res], {})
    assert outcome.status == "error" and "is a FIFO (named pipe)" in outcome.detail


def test_a_job_output_larger_than_the_bound_is_not_read_and_is_that_jobs_error(
        tmp_path: Path) -> None:
    """A job that printed GBs: nothing of it is read (its records, if any, are not judged
    from a part of its output), and the job's error says how large it is."""
    from hpcprov.validate.judge import judge
    from hpcprov.validate.run import MAX_OUTPUT_BYTES

    out = _sparse(tmp_path / "env-1.out", MAX_OUTPUT_BYTES + 1, RECORD)
    res = _job_result(tmp_path, out)
    assert res.records == []
    assert res.malformed == (f"output not read: {out} is {MAX_OUTPUT_BYTES + 1} bytes; the "
                             f"limit is {MAX_OUTPUT_BYTES}")
    (outcome,) = judge([res], {})
    assert outcome.status == "error" and "the limit is" in outcome.detail


# ------------------------------------------------------------------ a job's status file


def test_a_status_file_that_is_a_fifo_or_too_large_is_no_status(tmp_path: Path) -> None:
    from hpcprov.schedulers.base import read_exit, read_run_seconds

    status = tmp_path / "job.exit"
    status.write_text("3 10.5 12.0\n")
    assert read_exit(status) == 3 and read_run_seconds(status) == 1.5
    status.unlink()
    os.mkfifo(status)
    assert _returns(lambda: read_exit(status), status) is None
    assert _returns(lambda: read_run_seconds(status), status) is None
    status.unlink()
    status.write_text("3 10.5 12.0" + " " * 4096 + "\n")  # not what the trap writes
    assert read_exit(status) is None and read_run_seconds(status) is None


# ------------------------------------------------------------------ an allocation's nodes


def test_an_allocation_nodes_file_that_is_a_fifo_or_too_large_is_not_known_yet(
        tmp_path: Path) -> None:
    from hpcprov.schedulers.allocation import OneAllocation
    from hpcprov.schedulers.slurm import SlurmExecutor

    ex = OneAllocation(SlurmExecutor(), tmp_path, lambda queue: "")
    nodes = tmp_path / "nodes"
    os.mkfifo(nodes)
    _returns(ex._read_nodes, nodes)
    assert ex.nodes is None
    nodes.unlink()
    _sparse(nodes, (4 << 20) + 1, b"n1\nn2\n")
    ex._read_nodes()
    assert ex.nodes is None
    nodes.unlink()
    nodes.write_text("n1\nn2\n")  # the pilot's (renamed into place whole)
    ex._read_nodes()
    assert ex.nodes == ["n1", "n2"]


# ------------------------------------------------------------------ doctor's printing

HOSTILE = {"site": "\x1b]0;owned\x07local", "profile": "local\x1b[2J",
           "host": "node\x9b31m\x85", "created": "today\x07\x1b[1A",
           "activate": "/env/activate\x1b]52;c;cGF5bG9hZA==\x07",
           "pip_freeze": ["torch==2.1\x1b[8m"]}
# what a terminal would obey: C0 (newline and tab aside), DEL and C1
RAW = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def test_doctor_escapes_every_control_character_a_manifest_holds(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """A manifest (anyone who could write the prefix, or a host name the record step
    found) with escape sequences: setting the terminal's title, clearing the screen,
    writing the clipboard (OSC 52), a C1 CSI. `hpcprov doctor` prints them as \\xNN."""
    from hpcprov.provision.manifest import build_manifest, write_manifest
    from hpcprov.site.profiles import load_site

    prefix = tmp_path / "env"
    (prefix / ".hpcprov").mkdir(parents=True)
    data = build_manifest(load_site("local"), "local", prefix,
                          Journal(prefix / ".hpcprov" / "journal.json"))
    write_manifest({**data, **HOSTILE}, prefix)
    res = cli(capsys, "doctor", "--site", "local", "--prefix", str(prefix))
    assert res.rc == 1, res.err  # activate is missing: that check fails, with its fix
    shown = res.out + res.err
    assert not RAW.search(shown), [m.group() for m in RAW.finditer(shown)]
    for escaped in (r"\x1b]0;owned\x07local", r"node\x9b31m\x85", r"today\x07\x1b[1A",
                    r"/env/activate\x1b]52;c;cGF5bG9hZA==\x07", r"local\x1b[2J",
                    r"2.1\x1b[8m"):
        assert escaped in res.out, (escaped, res.out)


def test_the_record_step_writes_its_facts_anew_past_a_planted_fifo(tmp_path: Path) -> None:
    """A FIFO left at a fact file's name blocked the record step's `> file` (and so a
    `setup --redo`): the facts folder is made anew before the facts are written."""
    import subprocess

    library = Path(__file__).resolve().parent.parent / "provision" / "scripts" / "horovod.sh"
    state = tmp_path / "state"
    (state / "facts").mkdir(parents=True)
    os.mkfifo(state / "facts" / "python.txt")
    proc = subprocess.run(["bash", "-c", f'source "{library}"; STATE="{state}"; '
                           "hpcprov_record_facts"], capture_output=True, text=True,
                          timeout=120)  # a hang guard, never reached with the fix
    assert proc.returncode == 0, proc.stderr
    facts = state / "facts" / "python.txt"
    assert facts.is_file() and re.fullmatch(r"3\.[0-9]+\.[0-9]+\n", facts.read_text())
