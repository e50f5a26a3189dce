"""Bad profiles: every problem is one line `FILE:LINE: problem` on stderr, exit 2, no traceback,
and nothing in the file is ever executed or expanded."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hpcprov_tests import assert_one_line_error, cli, cli_subprocess, write_profile

from hpcprov.core.errors import ProfileError
from hpcprov.site.loader import MAX_BYTES
from hpcprov.site.profiles import check_file, load_site

BOMB = """\
extends: local
a: &a ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]
b: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]
c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]
d: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c]
e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d]
f: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e]
g: &g [*f, *f, *f, *f, *f, *f, *f, *f, *f]
h: &h [*g, *g, *g, *g, *g, *g, *g, *g, *g]
i: &i [*h, *h, *h, *h, *h, *h, *h, *h, *h]
"""

# (id, file text, line the error must name, words the message must contain)
CASES = [
    ("syntax", "extends: local\ndescription: ok\n  bad: indent\npartitions: {}\n", 3,
     ["YAML error"]),
    ("syntax-bad-flow", "extends: local\nlogin_hosts: [a, b}\ndescription: x\n", 2,
     ["YAML error"]),
    ("syntax-tab", "extends: local\npartitions:\n\tlocal: {}\n", 3, ["YAML error"]),
    ("wrong-type", "extends: local\npartitions:\n  local:\n    nodes: many\n", 4,
     ["partitions.local.nodes", "integer"]),
    ("wrong-type-list", "extends: local\nlogin_hosts: glogin01\n", 2, ["login_hosts", "list"]),
    ("wrong-enum", "extends: local\nscheduler: sge\n", 2, ["scheduler", "slurm"]),
    ("unknown-key", "extends: local\npartitions:\n  local:\n    nodse: 2\n", 4,
     ["partitions.local.nodse", "unknown key", "did you mean 'nodes'"]),
    ("missing-parent-name", "description: x\nextends: nosuchparent\n", 2,
     ["nosuchparent"]),
    ("missing-parent-path", "extends: ./nope/parent.yaml\n", 1, ["parent.yaml", "not found"]),
    ("bomb", BOMB, 3, ["alias"]),
    ("python-tag", 'extends: local\ndescription: !!python/object/apply:os.system ["touch X"]\n',
     2, ["tag", "not allowed"]),
    ("python-tag-key", 'extends: local\n? !!python/object/apply:os.system ["touch X"]\n: 1\n',
     2, []),
    ("python-name-tag", "extends: local\ndescription: !!python/name:os.system\n", 2, ["tag"]),
    ("duplicate-key", "extends: local\ndescription: a\nname: x\ndescription: b\n", 4,
     ["duplicate", "description"]),
    ("empty", "", 1, ["empty"]),
    ("only-comments", "# nothing here\n\n", 1, ["empty"]),
    ("top-level-list", "- name: x\n- name: y\n", 1, ["mapping"]),
    ("top-level-scalar", "just a string\n", 1, ["mapping"]),
    ("merge-key", "extends: local\n<<: {description: x}\n", 2, []),
    ("deep-nesting", "extends: local\ndescription: " + "[" * 100 + "]" * 100 + "\n", 2,
     ["nesting"]),
]


@pytest.mark.parametrize(("text", "line", "needles"), [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])
def test_site_check_names_file_and_line(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                        text: str, line: int, needles: list[str]) -> None:
    path = write_profile(tmp_path, "bad", text)
    res = cli(capsys, "site", "check", str(path))
    msg = assert_one_line_error(res, 2, f"{path}:{line}:", *needles)
    assert msg.startswith(f"{path}:{line}: ")
    assert res.out == ""
    # the same problem from the library, and when the profile is used by a command
    errors = check_file(path)
    assert [(e.file, e.line) for e in errors] == [(str(path), line)]
    res = cli(capsys, "jobscript", "--site", str(path), "--", "python", "x.py")
    assert_one_line_error(res, 2, f"{path}:{line}:")
    assert res.out == ""


def test_two_mib_file_is_refused_before_parsing(tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "huge.yaml"
    filler = "# " + "x" * 1000 + "\n"
    path.write_text("extends: local\n" + filler * (2 * 1024 * 1024 // len(filler) + 1),
                    encoding="utf-8")
    assert path.stat().st_size > 2 * MAX_BYTES - 1
    res = cli(capsys, "site", "check", str(path))
    assert_one_line_error(res, 2, f"{path}:1:", "MiB")


def test_cycle_is_reported_with_the_chain(tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    a = write_profile(tmp_path, "a", "extends: b.yaml\ndescription: a\n")
    b = write_profile(tmp_path, "b", "extends: a.yaml\n")
    res = cli(capsys, "site", "check", str(a))
    line = assert_one_line_error(res, 2, f"{a}:1:", "cycle")
    assert str(b) in line
    # by name through the search path as well
    res = cli(capsys, "site", "check", str(b))
    assert_one_line_error(res, 2, f"{b}:1:", "cycle")


def test_self_extension_by_path_is_a_cycle(tmp_path: Path) -> None:
    path = write_profile(tmp_path, "me", "extends: ./me.yaml\n")
    (err,) = check_file(path)
    assert (err.file, err.line) == (str(path), 1) and "cycle" in err.problem


def test_python_tag_is_never_executed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    marker = tmp_path / "X"
    monkeypatch.chdir(tmp_path)  # `touch X` would land here
    path = write_profile(tmp_path, "evil", (
        "extends: local\n"
        'description: !!python/object/apply:os.system ["touch X"]\n'
        f'guide: {{a: !!python/object/apply:subprocess.call [["touch", "{marker}"]]}}\n'
    ))
    res = cli_subprocess("site", "check", str(path), cwd=tmp_path)
    assert_one_line_error(res, 2, f"{path}:2:", "tag")
    with pytest.raises(ProfileError):
        load_site(str(path))
    res = cli(capsys, "jobscript", "--site", str(path), "--", "python", "x.py")
    assert_one_line_error(res, 2, f"{path}:2:")
    assert not marker.exists()


def test_several_problems_are_one_line_each(tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    path = write_profile(tmp_path, "multi", "extends: local\nscheduler: sge\nlogin_hosts: x\n")
    res = cli(capsys, "site", "check", str(path))
    assert res.rc == 2
    assert [line.split(": ")[0] for line in res.err_lines] == [f"{path}:2", f"{path}:3"]
    res = cli(capsys, "site", "check", "--json", str(path))
    assert res.rc == 2
    data = json.loads(res.out)
    assert data["ok"] is False and len(data["files"][str(path)]) == 2
    # used by a command, the first problem is shown with a count of the others
    res = cli(capsys, "launch", "--site", str(path), "--", "python", "x")
    assert_one_line_error(res, 2, f"{path}:2:", "+1 more")


def test_check_of_good_and_bad_files_together(tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    good = write_profile(tmp_path, "good", "extends: cc\n")  # (neuron warns: mixed arch)
    bad = write_profile(tmp_path, "bad", "extends: neuron\npolicies: {purge_days: 0}\n")
    res = cli(capsys, "site", "check", str(good), str(bad))
    assert res.rc == 2
    assert res.out.strip() == f"{good}: ok"
    assert_one_line_error(res, 2, f"{bad}:2:", "policies.purge_days")


def test_missing_file_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "nope.yaml"
    res = cli(capsys, "site", "check", str(path))
    assert_one_line_error(res, 2, str(path))
    res = cli(capsys, "jobscript", "--site", str(path), "--", "python", "x")
    assert_one_line_error(res, 2, str(path))


@pytest.mark.parametrize(("text", "written"), [
    ("python:\n  frameworks:\n    tensorflow: {version: 2.10}\n", "2.10"),
    ("partitions:\n  local:\n    limits: {max_walltime: 48:00:00}\n", "48:00:00"),
], ids=["version-2.10", "walltime-48h"])
def test_quote_hint_repeats_what_was_written(tmp_path: Path, text: str, written: str) -> None:
    path = write_profile(tmp_path, "hint", "extends: local\n" + text)
    (err,) = check_file(path)
    assert "quote it" in err.problem
    assert f"'{written}'" in err.problem


@pytest.mark.parametrize("text", [
    "extends: local\ndescription: 'abc\n",
    "extends: local\nlogin_hosts: [a, b\n",
], ids=["quote", "bracket"])
def test_unterminated_construct_is_located_where_it_opens(tmp_path: Path, text: str) -> None:
    path = write_profile(tmp_path, "open", text)
    (err,) = check_file(path)
    assert "YAML error" in err.problem
    assert err.line == 2, str(err)  # the file has 2 lines; the construct opens on line 2
