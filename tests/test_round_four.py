"""Issue 33's smaller defects: JUnit that parses whatever a job printed, doctor's one line
for a wrongly typed manifest field, a control character in an env value located at its
key."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from hpcprov_tests import assert_one_line_error, cli, write_profile

from hpcprov.provision.journal import Journal


@pytest.mark.parametrize("printed", ["\ufffe", "\uffff", "\ud800", "ok \ufffe\x00\x1b[2J"],
                         ids=["U+FFFE", "U+FFFF", "lone-surrogate", "mixed"])
def test_junit_parses_whatever_the_job_printed(printed: str) -> None:
    from hpcprov.validate import report
    from hpcprov.validate.judge import Outcome

    o = Outcome("env", f"env on n1{printed}", "fail", None, "imports", "", "n1",
                f"last line: {printed}")
    data = {"site": "s", "partition": "p", "nodes": 1, "ok": False, "started": "t",
            "seconds": 1.0, "overhead_s": 0.0, "outcomes": [o.to_json()], "jobs": []}
    xml = report.junit(data)
    xml.encode("utf-8")  # no lone surrogate left: the file can be written
    case = ET.fromstring(xml.split("?>", 1)[1]).find("testcase")
    assert case is not None
    failure = case.find("failure")
    assert failure is not None and "\\u" in str(failure.text).split("last line: ")[1]


@pytest.mark.parametrize(("field", "value"), [
    ("check_build.expected.frameworks", 5),
    ("check_build.expected", ["pytorch"]),
    ("check_build.found.frameworks", {"a": 1}),
    ("modules.runtime", 5),
    ("horovod_wheel", ["x"]),
    ("versions", {"torch": 2}),
])
def test_doctor_says_one_line_for_a_wrongly_typed_manifest_field(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, field: str, value: object) -> None:
    from hpcprov.provision.manifest import build_manifest, write_manifest
    from hpcprov.site.profiles import load_site

    prefix = tmp_path / "env"
    (prefix / ".hpcprov").mkdir(parents=True)
    data = build_manifest(load_site("local"), "local", prefix,
                          Journal(prefix / ".hpcprov" / "journal.json"))
    data = json.loads(json.dumps(data))
    at: dict = data
    *path, last = field.split(".")
    for key in path:
        at = at.setdefault(key, {})
    at[last] = value
    write_manifest(data, prefix)
    res = cli(capsys, "doctor", "--site", "local", "--prefix", str(prefix))
    line = assert_one_line_error(res, 2, "setup --redo")
    assert field.split(".")[0] in line, line


def test_a_newline_in_an_env_value_is_reported_at_its_key(tmp_path: Path) -> None:
    from hpcprov.site.profiles import check_file

    path = write_profile(tmp_path, "nl", 'name: nl\nextends: local\nenv:\n  GOOD: fine\n'
                                         '  BAD: "one\\ntwo"\n')
    (err,) = check_file(path)
    assert err.line == 5 and "env.BAD:" in str(err), str(err)
