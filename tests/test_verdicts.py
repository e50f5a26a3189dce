"""Trust, round three (issue 27, class 4): the verdict is never lost after the run. What a
validation ends with (the baseline, the report files, the history folder) is checked
before any job runs; stored runs are read as hostile files."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
from hpcprov_tests import cli

from hpcprov.validate.report import BadRun, load_baseline, read_run, save_history


@pytest.fixture()
def prefix(tmp_path: Path) -> Path:
    p = tmp_path / "prefix"  # looks provisioned: these runs stop before any job
    (p / ".hpcprov").mkdir(parents=True)
    (p / ".hpcprov" / "manifest.json").write_text("{}")
    return p


def validate(capsys: pytest.CaptureFixture[str], prefix: Path, run: Path, *more: str):
    return cli(capsys, "validate", "--site", "local", "--env", str(prefix), "--workdir",
               str(run), "--checks", "env", "--timeout", "60", *more)


@pytest.mark.parametrize(("content", "why"), [
    ("{not json", "not a run hpcprov stored"),
    ("[1, 2]", "no list of outcomes"),
    (b"\xe9t\xe9".decode("latin-1"), "not a run hpcprov stored"),
    ('{"outcomes": [{"name": "x", "measured": "fast"}]}', "no list of outcomes"),
])
def test_a_bad_compare_file_is_one_line_before_any_job_runs(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, prefix: Path, content: str,
        why: str) -> None:
    bad = tmp_path / "before.json"
    bad.write_bytes(content.encode("latin-1") if "\xe9" in content else content.encode())
    run = tmp_path / "run"
    res = validate(capsys, prefix, run, "--compare", str(bad), "--no-history")
    assert res.rc == 2 and why in res.err and len(res.err.strip().splitlines()) == 1
    assert not run.exists()  # refused before the run: nothing submitted


def test_a_fifo_or_dev_zero_as_the_compare_file_neither_hangs_nor_eats_memory(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, prefix: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for path in (fifo, Path("/dev/zero")):
        res = validate(capsys, prefix, tmp_path / "run", "--compare", str(path),
                       "--no-history")
        assert res.rc == 2 and "not a run hpcprov stored" in res.err


def test_latest_passes_over_truncated_and_foreign_history_files(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HPCPROV_HISTORY", str(tmp_path / "history"))
    good = {"site": "s", "quick": False, "outcomes": [{"name": "a", "measured": 1.0}]}
    save_history(good)
    folder = tmp_path / "history" / "s"
    (folder / "99999999-999999-truncated.json").write_text('{"site": "s", "outc')
    writable = folder / "99999999-999998-writable.json"
    writable.write_text(json.dumps(good))
    writable.chmod(0o666)  # anyone could have written it
    run, notes = load_baseline("s", "latest")
    assert run == good
    assert len(notes) == 2 and any("truncated" in n for n in notes)
    # stored whole or not at all: no temporary file is left beside the run
    assert all(p.suffix == ".json" for p in folder.iterdir())
    with pytest.raises(BadRun, match="not a regular file of yours"):
        read_run(writable, owned_only=True)


def test_an_unwritable_report_or_history_is_refused_before_the_run(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, prefix: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    run = tmp_path / "run"
    res = validate(capsys, prefix, run, "--junit", str(tmp_path / "missing" / "j.xml"),
                   "--no-history")
    assert res.rc == 2 and "--junit" in res.err and not run.exists()
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    monkeypatch.setenv("HPCPROV_HISTORY", str(shared))
    res = validate(capsys, prefix, run)
    assert res.rc == 2 and "history folder" in res.err and "may be written by" in res.err
    assert not run.exists()


def test_job_output_reaches_no_report_raw() -> None:
    """A failed job's last lines went verbatim into JUnit (NUL/ESC/BEL: the XML did not
    parse), Markdown (extra cells, raw HTML, remote images) and the terminal (OSC title
    sequences)."""
    import xml.etree.ElementTree as ET

    from hpcprov.validate import report
    from hpcprov.validate.judge import Outcome

    hostile = ("boom\x00\x07 | extra | cell <img src=x onerror=alert(1)> "
               "![t](http://evil/p.png) \x1b]0;owned\x07 [a](javascript:x)")
    o = Outcome("env", "env on n1", "fail", None, "imports", "", "n1", hostile)
    data = {"site": "s", "partition": "p", "nodes": 1, "ok": False, "started": "t",
            "seconds": 1.0, "overhead_s": 0.0, "outcomes": [o.to_json()],
            "jobs": [{"id": "env\x1b[2J", "state": "FAILED", "exit_code": 1,
                      "node_list": "n1|n2", "seconds": 1.0}]}
    xml = report.junit(data)
    case = ET.fromstring(xml.split("?>", 1)[1]).find("testcase")
    assert case is not None and "\\x00" in case.find("failure").text  # escaped, parsed
    md = report.markdown(data, None)
    row = next(ln for ln in md.splitlines() if ln.startswith("| fail"))
    assert len(re.findall(r"(?<!\\)\|", row)) == 7  # six cells, as the header has
    assert "<img" not in md and "![" not in md and "](" not in md and "\x1b" not in md
    term = report.table([o])
    assert "\x1b" not in term and "\x07" not in term and "\x00" not in term


@pytest.mark.parametrize("text", ["\u00b2", "\u0661\u0662", "9" * 5000, "1.5", "", None])
def test_a_status_that_is_no_ascii_number_is_no_status(text: str | None) -> None:
    """`²` passed str.isdigit() and int() raised; Arabic-Indic digits were read; 5000 digits
    gave a traceback."""
    from hpcprov.core.text import status_number
    from hpcprov.schedulers.pbs import exit_status
    from hpcprov.schedulers.slurm import exit_code

    assert status_number(text) is None
    assert exit_status(text) == (None, "")
    assert exit_code(f"{text}:0") is None
    assert (status_number("-3"), status_number(" 42 ")) == (-3, 42)


def test_a_walltime_in_other_digits_or_of_5000_digits_is_refused_in_one_line(
        capsys: pytest.CaptureFixture[str]) -> None:
    for bad in ("\u0661\u0662:\u0660\u0660:\u0660\u0660", "9" * 5000):
        res = cli(capsys, "jobscript", "--site", "testbed", "-t", bad, "--", "python", "x.py")
        assert res.rc == 2 and "cannot read --time" in res.err
        assert len(res.err.strip().splitlines()) == 1 and "#SBATCH" not in res.out
        assert len(res.err) < 300  # the value is shown short, not echoed whole


@pytest.mark.parametrize("argv", [
    ["-o", "5" * 5000], ["-l", "y" * 5000], ["-o", "z" * 5000 + "=1\n"]])
def test_a_long_value_is_shown_short_in_its_error(capsys: pytest.CaptureFixture[str],
                                                 argv: list[str]) -> None:
    res = cli(capsys, "jobscript", "--site", "testbed", *argv, "--", "python", "x.py")
    assert res.rc == 2 and len(res.err.strip().splitlines()) == 1
    assert len(res.err) < 300 and re.search(r"\.\.\. \(500[0-9] characters\)", res.err), res.err


GOOD_ENV = {"check": "env", "host": "n1", "imports": {"torch": "2.13.0"},
            "import_ok": {"torch": True}, "gpus_visible": 0}
GOOD_ALLREDUCE = {"check": "allreduce", "size_bytes": 8, "busbw_GBps": 1.5, "correct": True,
                  "ranks": 1}


@pytest.mark.parametrize(("record", "where"), [
    ({**GOOD_ENV, "imports": ["torch"]}, "imports"),
    ({**GOOD_ENV, "gpus_visible": "many"}, "gpus_visible"),
    ({**GOOD_ENV, "gpus_visible": -1}, "gpus_visible"),
    ({**GOOD_ALLREDUCE, "size_bytes": "8"}, "size_bytes"),
    ({**GOOD_ALLREDUCE, "correct": "yes"}, "correct"),
    ({k: v for k, v in GOOD_ALLREDUCE.items() if k != "busbw_GBps"}, "busbw_GBps"),
    ({"check": "train", "in_sync": True, "samples_per_s_total": [1]}, "samples_per_s_total"),
])
def test_a_result_record_of_the_wrong_shape_is_that_jobs_error(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, prefix: Path, record: dict,
        where: str) -> None:
    """A job that prints a record the judge cannot read (a program of another version, a
    corrupted line) is that job's error, naming the field; the run ends with its table, the
    other jobs judged, never a traceback."""
    good = GOOD_ENV if record["check"] != "env" else GOOD_ALLREDUCE
    program = {"env": "envcheck.py", "allreduce": "allreduce.py", "train": "train.py"}
    bin_ = prefix / "venvs" / "horovod" / "bin"
    bin_.mkdir(parents=True)
    (bin_ / "activate").write_text(f'export PATH="{bin_}:$PATH"\n')
    stub = bin_ / "python"  # every program prints its record; one prints the bad one
    stub.write_text("#!/bin/bash\ncase \"$*\" in\n"
                    f"  *{program[record['check']]}*) echo 'HPCPROV_RESULT "
                    f"{json.dumps(record)}' ;;\n"
                    f"  *{program[good['check']]}*) echo 'HPCPROV_RESULT {json.dumps(good)}' ;;\n"
                    "esac\n")
    stub.chmod(0o755)
    checks = ",".join(sorted({record["check"], good["check"]}))
    res = validate(capsys, prefix, tmp_path / "run", "--json", "--checks", checks,
                   "--nodes", "1", "--no-history", "--iters", "1", "--steps", "1")
    assert res.rc == 1 and "Traceback" not in res.err, res.err
    outcomes = json.loads(res.out)["outcomes"]
    bad = [o for o in outcomes if o["status"] == "error"]
    assert len(bad) >= 1 and all(o["check"] == record["check"] for o in bad), outcomes
    assert f"a result record of the wrong shape ({record['check']}: {where}" in bad[0]["detail"]
    assert any(o["check"] == good["check"] and o["status"] in ("pass", "info")
               for o in outcomes), outcomes


def test_a_job_that_prints_more_than_hpcprov_reads_is_that_jobs_error(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, prefix: Path) -> None:
    """A job whose output grew past the bound (a program printing GBs; here a hole, no
    disk): none of it is read, not its records either (a verdict is never judged from a
    part of the output), and the job is an error saying how large its output was."""
    from hpcprov.validate.run import MAX_OUTPUT_BYTES

    bin_ = prefix / "venvs" / "horovod" / "bin"
    bin_.mkdir(parents=True)
    (bin_ / "activate").write_text(f'export PATH="{bin_}:$PATH"\n')
    stub = bin_ / "python"  # the record, then the job's output (its stdout) grows past it
    stub.write_text(f"#!/bin/bash\necho 'HPCPROV_RESULT {json.dumps(GOOD_ENV)}'\n"
                    f"truncate -s {MAX_OUTPUT_BYTES + 1} /proc/self/fd/1\n")
    stub.chmod(0o755)
    res = validate(capsys, prefix, tmp_path / "run", "--json", "--nodes", "1",
                   "--no-history")
    assert res.rc == 1 and "Traceback" not in res.err, res.err
    (outcome,) = json.loads(res.out)["outcomes"]
    assert outcome["status"] == "error", outcome
    assert f"the limit is {MAX_OUTPUT_BYTES}" in outcome["detail"]
    assert f"output not read: {tmp_path / 'run' / 'env.out'} is " in outcome["detail"]


@pytest.mark.parametrize("argv", [
    ["jobscript", "--site", "testbed", "--json", "--output", "/nonexistent/dir/job.sh", "--",
     "python", "x.py"],
    ["site", "draft", "--json", "--scheduler", "slurm"],
    ["validate", "--site", "local", "--json", "--env", "/nonexistent/prefix"],
    ["jobscript", "--site", "testbed", "--json", "-t", "9" * 5000, "--", "python", "x.py"],
    ["setup", "--site", "no-such-site", "--json"],
], ids=["jobscript-output", "draft", "validate", "walltime", "setup"])
def test_with_json_every_error_is_json(capsys: pytest.CaptureFixture[str],
                                       argv: list[str]) -> None:
    res = cli(capsys, *argv)
    assert res.rc == 2 and "Traceback" not in res.err
    data = json.loads(res.out)
    assert data["ok"] is False and data["exit_code"] == 2
    assert data["error"] in res.err
