"""`hpcprov site draft` against hostile scheduler output (issue 27): numbers that are not
ASCII digits or have thousands of them, host lists that are unclosed or name millions of
nodes, an unreadable LSF time limit, output too large to hold, a PBS cluster with many
queues, and Ctrl-C while a command hangs. Each is a note, or one error line with a non-zero
exit status: never a traceback, a hang or a draft that silently lacks facts."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from hpcprov_tests import (
    FakeRunner,
    assert_one_line_error,
    cli,
    cli_subprocess,
    hpcprov_argv,
    recorded,
)

from hpcprov.core import commands
from hpcprov.core.text import ascii_decimal, ascii_int
from hpcprov.draft import run as draft_run
from hpcprov.draft.modules import Module
from hpcprov.draft.plan import Findings, summarize
from hpcprov.draft.profile import draft_text
from hpcprov.schedulers.discovery import lsf, pbs, slurm
from hpcprov.schedulers.facts import memory_mb

DATA = Path(__file__).parent / "data" / "draft"
HUGE = "9" * 5000  # int() refuses it; float() makes it infinite
NOT_ASCII = ["²", "١٢", "１２", HUGE, "1_000", "+4", "-4", "", "UNLIMITED"]
NOT_ASCII_IDS = ["superscript", "arabic-indic", "fullwidth", "5000-digits", "underscore",
                 "plus", "minus", "empty", "unlimited"]






# ------------------------------------------------------------------ 1. numbers


@pytest.mark.parametrize("value", NOT_ASCII, ids=NOT_ASCII_IDS)
def test_a_number_that_is_not_bounded_ascii_digits_is_no_number(value: str) -> None:
    assert ascii_int(value) is None
    assert ascii_decimal(value) is None
    assert ascii_int(" 42 ") == 42 and ascii_decimal("15.8") == 15.8
    assert ascii_decimal("1.2.3") is None


def test_slurm_numbers_that_are_not_ascii_digits_are_no_value() -> None:
    """``²`` passed str.isdigit() and then int() raised; Arabic-Indic digits were read."""
    for value in NOT_ASCII:
        nodes = slurm.parse_nodes(f"NodeName=n1 CPUTot={value} Sockets={value} "
                                  f"CoresPerSocket=4 RealMemory={value} "
                                  f"Gres=gpu:a100:{value} Partitions=p\n")
        n1 = nodes["n1"]
        assert (n1.cpus, n1.cores, n1.memory_mb, n1.gpus) == (None, None, None, 0), value
        assert slurm.parse_gres(f"gpu:{value}") == (0, None), value
        assert slurm.parse_sinfo(f"p*|up|{value}|idle\n") == {}, value
        qos = slurm.parse_qos(f"normal||{value}|gres/gpu={value}\n")
        assert qos["normal"]["max_jobs_per_user"] is None, value
        assert qos["normal"]["max_gpus_per_user"] is None, value


def test_pbs_numbers_that_are_not_ascii_digits_are_no_value() -> None:
    for value in NOT_ASCII:
        nodes = pbs.parse_nodes(f"n1\n    resources_available.ncpus = {value}\n"
                                f"    resources_available.mem = {value}gb\n"
                                f"    resources_available.ngpus = {value}\n")
        n1 = nodes["n1"]
        assert (n1.cpus, n1.memory_mb, n1.gpus) == (None, None, 0), value
        queues = pbs.parse_queues(f"Queue: q\n    queue_type = Execution\n"
                                  f"    max_run = [u:PBS_GENERIC={value}]\n")
        assert queues[0].max_jobs_per_user is None, value


def test_a_memory_size_with_thousands_of_digits_is_no_value() -> None:
    """float() made it infinite and int() raised OverflowError."""
    assert memory_mb(HUGE + "gb") is None
    assert memory_mb("1.2.3gb") is None
    assert memory_mb("192gb") == 192 * 1024


def test_a_module_version_with_thousands_of_digits_orders_and_does_not_raise() -> None:
    assert Module("gcc/" + HUGE).version[:1] == (999_999_999_999_999,)
    assert Module("gcc/١٢.3").version == (3,)
    assert Module("openmpi/4.1.1").version == (4, 1, 1)


def test_a_draft_from_hostile_numbers_completes() -> None:
    run = FakeRunner({"scontrol show partition -o": "PartitionName=p Nodes=n1 TotalNodes=²\n",
                "scontrol show node -o": f"NodeName=n1 CPUTot=² RealMemory={HUGE} "
                                         "Gres=gpu:²,gpu:a100:١ Partitions=p\n",
                "sinfo -h -o %P|%a|%D|%t": "p*|up|²|idle\n"})
    findings = Findings(cluster=slurm.discover(run), host="login1.x.org", when="now")
    text = draft_text(findings)
    assert "QUESTION (cores): how many cores has each node of p?" in text


# ------------------------------------------------------------------ 2. host lists

HOSTILE_LISTS = {
    "huge": "gpu[1-99999999]",
    "unclosed": "gpu[01-02",
    "nested": "gpu[[1-2]]",
    "digits": f"gpu[1-{HUGE}]",
    "many-ranges": "gpu[" + ",".join(["1-99999"] * 20) + "]",  # hostlist built 2M first
    "many-parts": ",".join(f"g{i}x[1-99999]" for i in range(3)),
    "product": "gpu[1-999][1-999]",
}


def test_a_host_list_is_counted_without_expanding_it() -> None:
    assert slurm.hostlist_size("gpu[01-04,7],cpu1,,n[1-2]x[1-3]") == 4 + 1 + 1 + 6
    assert slurm.hostlist_size("gpu[1-99999999]") == slurm.MAX_HOSTS + 1
    for bad in ("gpu[01-02", "gpu01]", "gpu[[1-2]]", "gpu[2-1]", "gpu[]", "gpu[a-b]",
                f"gpu[{HUGE}]"):
        assert slurm.hostlist_size(bad) is None, bad


@pytest.mark.parametrize("nodes", list(HOSTILE_LISTS.values()), ids=list(HOSTILE_LISTS))
def test_a_bad_or_huge_host_list_is_a_note_on_its_partition(nodes: str) -> None:
    text = (f"PartitionName=bad Nodes={nodes} TotalNodes=2\n"
            "PartitionName=ok Nodes=n[1-2] TotalNodes=2\n")
    queues = {q.name: q for q in slurm.parse_partitions(text)}
    assert queues["bad"].nodes == []
    assert len(queues["bad"].notes) == 1
    assert "its node list" in queues["bad"].notes[0]
    assert "scontrol show partition -o" in queues["bad"].notes[0]
    assert len(queues["bad"].notes[0]) < 300  # the list is shortened, not copied
    assert queues["ok"].nodes == ["n1", "n2"] and queues["ok"].notes == []


def test_the_draft_completes_for_the_partitions_whose_host_lists_read() -> None:
    parts = "".join(f"PartitionName={name.replace('-', '_')} Nodes={nodes} TotalNodes=2\n"
                    for name, nodes in HOSTILE_LISTS.items())
    run = FakeRunner({"scontrol show partition -o": parts + "PartitionName=ok Nodes=n[1-2]\n",
                "scontrol show node -o": "NodeName=n1 CPUTot=8 Sockets=1 CoresPerSocket=8"
                                         " Partitions=ok\nNodeName=n2 CPUTot=8 Sockets=1 "
                                         "CoresPerSocket=8 Partitions=ok\n"})
    cluster = slurm.discover(run)
    summaries, _ = summarize(cluster)
    assert summaries["ok"].cores == 8 and summaries["ok"].nodes == 2
    text = draft_text(Findings(cluster=cluster, host="login1.x.org", when="now"))
    assert "cores_per_node: 8" in text
    assert text.count("its node list") == len(HOSTILE_LISTS)


# ------------------------------------------------------------------ 3. LSF time limits

BQUEUES = """QUEUE: bad
  -- A queue with a broken limit.

PARAMETERS/STATISTICS
PRIO NICE STATUS          MAX JL/U JL/P JL/H NJOBS  PEND   RUN SSUSP USUSP  RSV PJOBS
 30    0  Open:Active       -    -    -    -     0     0     0     0     0    0     0

 RUNLIMIT
 {limit}

HOSTS:  all

QUEUE: good
  -- This is the default queue.

PARAMETERS/STATISTICS
PRIO NICE STATUS          MAX JL/U JL/P JL/H NJOBS  PEND   RUN SSUSP USUSP  RSV PJOBS
 30    0  Open:Active       -    -    -    -     0     0     0     0     0    0     0

 RUNLIMIT
 720.0 min

HOSTS:  all
"""


@pytest.mark.parametrize("limit", ["1.2.3 min", "² min", f"{HUGE} min", "1e400 min"],
                         ids=["1.2.3", "superscript", "5000-digits", "exponent"])
def test_a_malformed_lsf_time_limit_is_a_note(limit: str) -> None:
    queues = {q.name: q for q in lsf.parse_queues(BQUEUES.format(limit=limit))}
    assert queues["bad"].max_time is None
    problems = [n for n in queues["bad"].notes if "RUNLIMIT" in n]
    assert len(problems) == 1 and "not a time in minutes" in problems[0]
    assert "bqueues -l" in problems[0]
    assert queues["good"].max_time == "12:00:00" and queues["good"].default


def test_a_short_or_odd_lsf_gpu_row_ends_the_table() -> None:
    """A row of one word (``0``, ``²``) passed isdigit() and then lacked its model."""
    text = ("HOST: gpu01\nNGPUS NGPUS_SHARED_AVAIL\n4 4\n\nSTATIC ATTRIBUTES\n"
            "GPU_ID  MODEL\n0       V100\n1\n²       A100\n\nHOST: gpu02\nNGPUS\n²\n")
    assert lsf.parse_gpus(text) == {"gpu01": (4, "V100"), "gpu02": (0, None)}


# ------------------------------------------------------------------ stub commands

STUB = """#!/bin/bash
# answers from files in $STUB_DIR named after the arguments; "$STUB_DIR/<args>.sh" runs
f="$STUB_DIR/${0##*/} $*"
[ -f "$f.sh" ] && . "$f.sh"
[ -f "$f" ] || { echo "${0##*/}: error: $* unknown to the stub" >&2; exit 1; }
cat "$f"
"""


def stub_cluster(tmp_path: Path, answers: dict[str, str] | None = None,
                 scripts: dict[str, str] | None = None) -> dict[str, str]:
    """PATH with stub Slurm commands answering recorded text (``answers`` replace some),
    and shell snippets some commands run first (``scripts``); no module command."""
    bindir, stub_dir = tmp_path / "bin", tmp_path / "answers"
    bindir.mkdir()
    stub_dir.mkdir()
    for tool in ("scontrol", "sinfo", "sacctmgr", "srun"):
        (bindir / tool).write_text(STUB)
        (bindir / tool).chmod(0o755)
    files = {"scontrol show partition -o": recorded("slurm-show-partition.txt"),
             "scontrol show node -o": recorded("slurm-show-node.txt"),
             **(answers or {})}
    for command, text in files.items():
        (stub_dir / command).write_text(text)
    for command, text in (scripts or {}).items():
        (stub_dir / f"{command}.sh").write_text(text)
    return {**os.environ, "PATH": f"{bindir}{os.pathsep}{os.environ['PATH']}",
            "STUB_DIR": str(stub_dir)}


def _alive(pid: int) -> bool:
    """The process runs (a zombie waiting to be reaped does not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _until(check: Callable[[], bool], seconds: float = 60) -> bool:
    """Poll ``check`` until it holds (a hang guard, not a timing assertion)."""
    deadline = time.monotonic() + seconds
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def _pids(folder: Path) -> list[int]:
    return [int(p.read_text()) for p in sorted(folder.glob("*.pid"))]


def _reap(folder: Path) -> None:
    """Kill what a failed test's stubs left running (only the processes they started)."""
    for pid in _pids(folder):
        if _alive(pid):
            os.kill(pid, signal.SIGKILL)


# the stub sleeps in a grandchild too: killing the stub alone would leave it holding the pipe
HANG = """sleep 600 &
echo $! > "$STUB_DIR/sleep.pid"
echo $$ > "$STUB_DIR/stub.tmp" && mv "$STUB_DIR/stub.tmp" "$STUB_DIR/stub.pid"
wait
"""


# ------------------------------------------------------------------ 4. output too large


def test_output_over_the_cap_is_one_error_line_naming_the_command(tmp_path: Path) -> None:
    """1.5 GB of `scontrol show node` was buffered: a MemoryError in a reader thread, then
    exit 0 with a draft missing every node fact."""
    env = stub_cluster(tmp_path, scripts={
        "scontrol show node -o": "head -c 70000000 /dev/zero | tr '\\0' x; exit 0\n"})
    out = tmp_path / "x.yaml"
    res = cli_subprocess("site", "draft", "-o", str(out), env=env)
    assert_one_line_error(res, 2, "scontrol show node -o: output too large", "64 MiB")
    assert not out.exists()


def test_output_over_the_cap_with_json_is_a_json_error(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(draft_run, "OUTPUT_CAP", 1000)
    env = stub_cluster(tmp_path)
    monkeypatch.setenv("PATH", env["PATH"])
    monkeypatch.setenv("STUB_DIR", env["STUB_DIR"])
    res = cli(capsys, "site", "draft", "--diff", "sockeye-slurm", "--json")
    assert res.rc == 2
    assert res.err_lines == ["hpcprov: error: scontrol show partition -o: output too large "
                             "(over 1000 bytes); nothing was drafted"]
    assert json.loads(res.out) == {"ok": False, "exit_code": 2, "error":
                                   "scontrol show partition -o: output too large (over "
                                   "1000 bytes); nothing was drafted"}


def test_stderr_is_kept_only_in_part(tmp_path: Path) -> None:
    env = {**os.environ}
    got = commands.run_command(
        ["bash", "-c", "head -c 5000000 /dev/zero | tr '\\0' e >&2; echo ok; exit 3"],
        env, 60)
    assert (got.returncode, got.stdout) == (3, "ok\n")
    assert len(got.stderr) == commands.ERRORS_KEPT


# ------------------------------------------------------------------ 5. PBS, many queues


def test_pbsnodes_is_parsed_once_however_many_queues(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """3,000 nodes and 300 queues: pbsnodes -av was parsed again for every queue (killed
    at 60 s). Counted in parsed blocks, not in seconds."""
    nodes, queues = 40, 25
    node_text = "".join(f"n{i}\n    state = free\n    resources_available.ncpus = 8\n"
                        f"    resources_available.site = s{i % queues}\n\n"
                        for i in range(nodes))
    queue_text = "".join(f"Queue: q{j}\n    queue_type = Execution\n"
                         f"    default_chunk.site = s{j}\n\n" for j in range(queues))
    calls: list[int] = []
    real = pbs.fields

    def counting(text: str) -> dict[str, str]:
        calls.append(1)
        return real(text)

    monkeypatch.setattr(pbs, "fields", counting)
    cluster = pbs.discover(FakeRunner({"pbsnodes -av": node_text, "qstat -Qf": queue_text,
                                 "qstat -Bf": "Server: s\n    default_queue = q0\n"}))
    assert len(calls) == nodes + queues + 1  # each block once
    by_name = {q.name: q for q in cluster.queues}
    assert by_name["q3"].nodes == ["n3", "n28"]
    assert "default_chunk" in by_name["q3"].sources["nodes"]


# ------------------------------------------------------------------ 6. Ctrl-C, timeouts


def test_ctrl_c_kills_the_hung_command_at_once_and_exits_130(tmp_path: Path) -> None:
    """Ctrl-C waited for the hung command's timeout (60 s by default)."""
    env = stub_cluster(tmp_path, scripts={"scontrol show partition -o": HANG})
    stub_dir = Path(env["STUB_DIR"])
    proc = subprocess.Popen([*hpcprov_argv(), "site", "draft"], env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert _until(lambda: (stub_dir / "stub.pid").exists() or proc.poll() is not None)
        assert proc.poll() is None, proc.communicate()
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)  # a hang guard: the timeout is 60 s
        assert proc.returncode == 130, (out, err)
        assert err.splitlines() == ["hpcprov: error: interrupted by SIGINT: scontrol show "
                                    "partition -o was stopped; nothing was drafted"]
        assert out == ""
        assert _until(lambda: not any(map(_alive, _pids(stub_dir))), 10), _pids(stub_dir)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
        _reap(stub_dir)


def test_a_timeout_kills_what_the_hung_command_started(tmp_path: Path) -> None:
    """Killing the command alone left its child holding the output pipe open."""
    env = stub_cluster(tmp_path, scripts={"scontrol show partition -o": HANG})
    stub_dir = Path(env["STUB_DIR"])
    try:
        res = cli_subprocess("site", "draft", "--timeout", "1", env=env)
        assert_one_line_error(res, 2, "scontrol show partition -o did not answer within 1 s")
        assert len(_pids(stub_dir)) == 2
        assert _until(lambda: not any(map(_alive, _pids(stub_dir))), 10), _pids(stub_dir)
    finally:
        _reap(stub_dir)


def test_a_hostile_slurm_cluster_drafts_through_the_command(tmp_path: Path) -> None:
    parts = recorded("slurm-show-partition.txt") + (
        "PartitionName=huge Nodes=gpu[1-99999999] TotalNodes=99999999\n"
        "PartitionName=open Nodes=gpu[01-02 TotalNodes=2\n")
    env = stub_cluster(tmp_path, answers={"scontrol show partition -o": parts,
                                          "sinfo -h -o %P|%a|%D|%t": "all|up|²|idle\n"})
    out = tmp_path / "x.yaml"
    res = cli_subprocess("site", "draft", "-o", str(out), env=env)
    assert res.rc == 0, res.err
    assert "Traceback" not in res.err
    text = out.read_text()
    assert "amd_a100nv_8:" in text and "cores_per_node: 64" in text
    assert "its node list gpu[1-99999999] names more than 100000 nodes" in text
    assert "its node list gpu[01-02 is not a host list" in text
