"""Hostile input that is not a string in a script: special files where a profile should be,
huge `extends` merges, output that cannot be written, terminal escapes in free text,
numbers that are not numbers, misplaced blame, and a search path or host patterns that pick
a site the user did not mean. Every error is one line, a non-zero exit, never a traceback;
nothing hangs (each command that could runs in a subprocess under a timeout and a memory
limit) and nothing reads without bound."""

from __future__ import annotations

import os
import resource
import socket
import subprocess
from pathlib import Path

import pytest
from hpcprov_tests import Result, assert_one_line_error, cli, hpcprov_argv, write_profile

from hpcprov.core import fsutil
from hpcprov.core.errors import HpcprovWarning
from hpcprov.site import codec as site_codec
from hpcprov.site import loader, model
from hpcprov.site import types as site_types
from hpcprov.site.catalog import detect
from hpcprov.site.detect import catch_all
from hpcprov.site.loader import MAX_EXTENDS, Layer, merge, resolve
from hpcprov.site.profiles import check_file, load_site

ESC = "\x1b"
OSC_TITLE = "\x1b]0;pwned\x07"
MEMORY_LIMIT = 2 << 30  # a runaway read fails here instead of eating the machine


def _limits() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))


def run(*args: str, env: dict[str, str] | None = None, timeout: float = 30,
        stdout: int | None = None) -> Result:
    """``hpcprov ARGS`` in a subprocess, killed after ``timeout`` (a hang fails the test)
    and limited to MEMORY_LIMIT of address space."""
    proc = subprocess.run([*hpcprov_argv(), *args], stdout=stdout or subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, env=env, timeout=timeout,
                          preexec_fn=_limits)
    return Result(proc.returncode, proc.stdout or "", proc.stderr)


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    """os.environ for a subprocess: no user profiles, caches under tmp_path."""
    out = dict(os.environ)
    for name in ("HPCPROV_SITES_PATH", "HPCPROV_SITE"):
        out.pop(name, None)
    out["XDG_CONFIG_HOME"] = str(tmp_path / "xdg-config")
    out["XDG_CACHE_HOME"] = str(tmp_path / "xdg-cache")
    return out


# ------------------------------------------------------------ 2: special files


@pytest.fixture
def fifo(tmp_path: Path) -> Path:
    path = tmp_path / "f.yaml"
    os.mkfifo(path)
    return path


def test_site_check_of_a_fifo_is_refused_without_waiting(fifo: Path,
                                                         env: dict[str, str]) -> None:
    res = run("site", "check", str(fifo), env=env)
    line = assert_one_line_error(res, 2, str(fifo), "FIFO")
    assert "not a profile file" in line


@pytest.mark.parametrize("args", [
    ("site", "check", "/dev/zero"),
    ("setup", "--site", "/dev/zero", "--dry-run"),
    ("setup", "--site", "/dev/zero"),
    ("jobscript", "--site", "/dev/zero", "--", "python", "x.py"),
], ids=["site-check", "setup-dry-run", "setup", "jobscript"])
def test_dev_zero_is_refused_before_a_byte_is_read(args: tuple[str, ...],
                                                   env: dict[str, str]) -> None:
    res = run(*args, env=env)
    assert_one_line_error(res, 2, "/dev/zero", "character device", "not a profile file")


def test_fifo_given_to_site_is_refused(fifo: Path, env: dict[str, str]) -> None:
    res = run("jobscript", "--site", str(fifo), "--", "python", "x.py", env=env)
    assert_one_line_error(res, 2, str(fifo), "FIFO")


@pytest.fixture
def special_search_dir(tmp_path: Path, env: dict[str, str]) -> Path:
    """A folder on HPCPROV_SITES_PATH holding a FIFO and a symlink to /dev/zero."""
    folder = tmp_path / "sites"
    folder.mkdir()
    os.mkfifo(folder / "fifo.yaml")
    (folder / "zero.yaml").symlink_to("/dev/zero")
    env["HPCPROV_SITES_PATH"] = str(folder)
    return folder


@pytest.mark.parametrize("args", [
    ("sites",),
    ("detect", "--hostname", "glogin01"),
    ("jobscript", "--", "python", "x.py"),
], ids=["sites", "detect", "default-site"])
def test_special_files_on_the_search_path_are_passed_over(special_search_dir: Path,
                                                          env: dict[str, str],
                                                          args: tuple[str, ...]) -> None:
    res = run(*args, env=env)
    assert res.rc == 0, res.err
    assert "Traceback" not in res.err
    warnings = [line for line in res.err_lines if line.startswith("hpcprov: warning: ")]
    assert any("fifo.yaml" in w and "FIFO" in w for w in warnings), res.err
    assert any("zero.yaml" in w and "character device" in w for w in warnings), res.err
    assert "fifo" not in res.out and "zero" not in res.out


def test_read_regular_reads_at_most_the_limit(tmp_path: Path) -> None:
    path = tmp_path / "big"
    path.write_bytes(b"x" * 100)
    assert fsutil.read_regular(path, 100) == b"x" * 100
    with pytest.raises(fsutil.TooLarge):
        fsutil.read_regular(path, 99)
    with pytest.raises(fsutil.NotRegularFile, match="character device"):
        fsutil.read_regular(Path("/dev/zero"), 100)
    with pytest.raises(fsutil.NotRegularFile, match="directory"):
        fsutil.read_regular(tmp_path, 100)


# ------------------------------------------------------- 4: linear `extends` merging


class Key(tuple):
    """A layer key that counts how often it is sliced or indexed (merge's unit of work)."""

    uses = 0

    def __getitem__(self, index: object) -> object:
        Key.uses += 1
        return super().__getitem__(index)


def _env_layer(n: int, value: str, fname: str, extra: dict[str, object]) -> Layer:
    env = {f"V{i}": f"{value}{i}" for i in range(n)}
    origins = {Key(("env", k)): (fname, i + 3) for i, k in enumerate(env)}
    origins.update({Key(("env",)): (fname, 2), Key(()): (fname, 1)})
    sources = {Key(("env", k)): v for k, v in env.items()}
    for key, item in extra.items():
        origins[Key((key,))] = (fname, 1)
        if isinstance(item, list):
            origins.update({Key((key, i)): (fname, 1) for i in range(len(item))})
    return Layer(data={"env": env, **extra}, origins=origins, files=[fname], sources=sources)


def test_merge_does_work_linear_in_the_keys() -> None:
    n = 2000
    parent = _env_layer(n, "a", "parent", {"hosts": list(range(50)), "x": 1})
    child = _env_layer(n, "b", "child", {"hosts": "replaced", "x": [1, 2]})
    Key.uses = 0
    merged = merge(parent, child)
    assert Key.uses <= 10 * n, Key.uses  # quadratic merging slices n * 2n keys
    assert merged.data["env"]["V7"] == "b7" and merged.data["hosts"] == "replaced"
    assert merged.origins[("env", "V7")] == ("child", 10)
    assert not [k for k in merged.origins if k[:1] == ("hosts",) and len(k) > 1]
    assert merged.origins[("x", 1)] == ("child", 1)


def test_merge_keeps_what_the_child_does_not_replace() -> None:
    parent = Layer(data={"a": {"x": 1, "y": [1, 2]}, "b": 1},
                   origins={("a",): ("p", 1), ("a", "x"): ("p", 2), ("a", "y"): ("p", 3),
                            ("a", "y", 0): ("p", 3), ("b",): ("p", 4)},
                   sources={("a", "x"): "1", ("b",): "1"})
    child = Layer(data={"a": {"y": 3}, "b": {"z": 1}},
                  origins={("a",): ("c", 1), ("a", "y"): ("c", 2), ("b",): ("c", 3),
                           ("b", "z"): ("c", 4)},
                  sources={("a", "y"): "3", ("b", "z"): "1"})
    merged = merge(parent, child)
    assert merged.data == {"a": {"x": 1, "y": 3}, "b": {"z": 1}}
    assert merged.origins == {("a",): ("c", 1), ("a", "x"): ("p", 2), ("a", "y"): ("c", 2),
                              ("b",): ("c", 3), ("b", "z"): ("c", 4)}
    assert merged.sources == {("a", "x"): "1", ("a", "y"): "3", ("b", "z"): "1"}


def test_twenty_thousand_key_profiles_extend_in_seconds(tmp_path: Path,
                                                        env: dict[str, str]) -> None:
    """The issue's case: two valid ~0.5 MB profiles, 20,000 env keys each (44 s before)."""
    keys = 20_000
    write_profile(tmp_path, "parent", "extends: local\nenv:\n" + "".join(
        f"  VAR_{i:05d}: value-{i}\n" for i in range(keys)))
    child = write_profile(tmp_path, "child", "extends: ./parent.yaml\nenv:\n" + "".join(
        f"  VAR_{i:05d}: other-{i}\n" for i in range(keys)))
    res = run("site", "check", str(child), env=env, timeout=60)
    assert res.rc == 0 and res.out.strip() == f"{child}: ok", res.err


# ----------------------------------------------------------- 6: output errors


@pytest.mark.parametrize("target", ["/nonexistent/x.sh", "/dev/full", "FILE/x.sh"],
                         ids=["missing-folder", "full-disk", "under-a-file"])
def test_jobscript_output_that_cannot_be_written(tmp_path: Path, env: dict[str, str],
                                                 target: str) -> None:
    (tmp_path / "FILE").write_text("a file, not a folder\n")
    target = target.replace("FILE", str(tmp_path / "FILE"))
    res = run("jobscript", "--site", "local", "--output", target, "--", "python", "x.py",
              env=env)
    assert_one_line_error(res, 2, "hpcprov: error: cannot write", target)


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes read-only files")
def test_jobscript_output_to_a_read_only_target(tmp_path: Path, env: dict[str, str]) -> None:
    folder = tmp_path / "ro"
    folder.mkdir()
    target = folder / "job.sh"
    target.write_text("old\n")
    target.chmod(0o444)
    folder.chmod(0o555)
    try:
        res = run("jobscript", "--site", "local", "--output", str(target), "--", "python",
                  "x.py", env=env)
    finally:
        folder.chmod(0o755)
    assert res.rc == 2 and "Traceback" not in res.err and len(res.err_lines) == 1, res.err


@pytest.mark.parametrize("args", [
    ("setup", "--site", "local", "--dry-run"),
    ("sites",),
    ("site", "show", "neuron"),
], ids=["setup-dry-run", "sites", "site-show"])
def test_stdout_on_a_full_disk_is_one_error(env: dict[str, str], args: tuple[str, ...]) -> None:
    with open("/dev/full", "w") as full:
        res = run(*args, env=env, stdout=full.fileno())
    assert_one_line_error(res, 2, "hpcprov: error: cannot write the output",
                          "No space left on device")


@pytest.mark.parametrize("args", [("sites",), ("setup", "--site", "local", "--dry-run")],
                         ids=["short-output", "long-output"])
def test_stdout_closed_by_the_reader_is_quiet(env: dict[str, str],
                                              args: tuple[str, ...]) -> None:
    """`| head -c0`: no error, no 'Exception ignored' at exit (a pipe closed while click
    writes a long output exits 1, click's own choice; a short one is found closed when
    main flushes it, exit 0)."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        res = run(*args, env=env, stdout=write_end)
    finally:
        os.close(write_end)
    assert res.rc in (0, 1) and res.err == "", (res.rc, res.err)


# ---------------------------------------------------------- 12: terminal escapes


@pytest.mark.parametrize(("text", "line"), [
    (f'description: "x{OSC_TITLE}y"\n', 2),
    ('partitions:\n  local:\n    description: "a\\x9b31mb"\n', 4),
    ('policies:\n  required_options:\n    account: {reason: "a\\e[2Jb"}\n', 4),
    ('policies:\n  notes: ["ok", "bad\\rline"]\n', 3),
    ('guide:\n  setup: "one\\n\\e]8;;http://x\\e\\\\two"\n', 3),  # at its key (issue 33)
], ids=["description-osc", "partition-c1-csi", "reason-csi", "notes-cr", "guide-osc8"])
def test_free_text_with_escapes_is_refused(tmp_path: Path, text: str, line: int) -> None:
    text = text.replace(OSC_TITLE, "\\e]0;pwned\\a")
    path = write_profile(tmp_path, "esc", "extends: local\n" + text)
    (err,) = check_file(path)
    assert err.line == line and "control characters" in err.problem, str(err)


def test_free_text_keeps_newlines_and_tabs(tmp_path: Path) -> None:
    path = write_profile(tmp_path, "ok", 'extends: local\ndescription: "a\\tb"\n'
                         'guide: {setup: "line one\\n\\tline two"}\n')
    assert check_file(path) == []


def test_single_line_values_refuse_c1_controls(tmp_path: Path) -> None:
    path = write_profile(tmp_path, "c1", 'extends: local\npaths: {scratch: "/s\\x9bx"}\n')
    (err,) = check_file(path)
    assert err.line == 2 and "paths.scratch" in err.problem


def test_sites_never_prints_an_escape(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    folder = tmp_path / "sites"
    write_profile(folder, "titled", f'extends: local\ndescription: "{OSC_TITLE}"\n'
                  .replace(OSC_TITLE, "\\e]0;pwned\\a"))
    write_profile(folder, f"a{OSC_TITLE}b", "extends: local\nname: named\n")
    monkeypatch.setenv("HPCPROV_SITES_PATH", str(folder))
    res = cli(capsys, "sites")
    assert res.rc == 0
    for stream in (res.out, res.err):
        assert ESC not in stream and "\x07" not in stream
    assert "a\\x1b]0;pwned\\x07b" in res.out  # the file name, escaped
    assert "titled" in res.out and "BROKEN" in res.out


def test_errors_escape_what_the_user_typed(capsys: pytest.CaptureFixture[str]) -> None:
    res = cli(capsys, "jobscript", "--site", f"x{OSC_TITLE}", "--", "python", "x.py")
    line = assert_one_line_error(res, 2, "unknown site")
    assert ESC not in line and "\\x1b" in line


def test_cached_free_text_is_checked_as_the_model_checks_it() -> None:
    def cached(change: dict) -> object:
        data = site_codec.dump(load_site("neuron"))
        data.update(change)
        return site_codec.load(site_types.Site, data)

    with pytest.raises(ValueError):
        cached({"description": f"x{OSC_TITLE}"})
    part = site_codec.dump(load_site("neuron").partition()[1])
    with pytest.raises(ValueError):
        cached({"partitions": {"p": {**part, "memory_gb": float("inf")}}})
    assert cached({"guide": {"a": "x\n\ty"}}).guide == {"a": "x\n\ty"}


# -------------------------------------------------------------------- 13: numbers


NUMBERS = [
    ("inf-memory", "partitions:\n  local:\n    memory_gb: .inf\n", 4,
     ["memory_gb", "finite", ".inf"]),
    ("nan-reference", "partitions:\n  local:\n    references:\n"
     "      x: {value: .nan, unit: s}\n", 5, ["references.x.value", "finite"]),
    ("inf-bound", "partitions:\n  local:\n    references:\n"
     "      x: {value: 1, upper: .inf, unit: s}\n", 5, ["references.x.upper", "finite"]),
    ("lower-below-minus-one", "partitions:\n  local:\n    references:\n"
     "      x: {value: 1, lower: -2, unit: s}\n", 5, ["references.x.lower"]),
    ("bool-nodes", "partitions:\n  local:\n    nodes: true\n", 4,
     ["partitions.local.nodes", "integer", "yes/no"]),
    ("bool-gpus", "partitions:\n  local:\n    gpus: {count: yes}\n", 4, ["gpus.count"]),
    ("float-cores", "partitions:\n  local:\n    cores_per_node: 2.0\n", 4,
     ["cores_per_node", "whole number"]),
    ("bool-memory", "partitions:\n  local:\n    memory_gb: true\n", 4, ["memory_gb"]),
    ("huge-nodes", "partitions:\n  local:\n    nodes: 1000000000000\n", 4,
     ["partitions.local.nodes", "1000000"]),
    ("huge-cores", "partitions:\n  local:\n    cores_per_node: 100000\n", 4,
     ["cores_per_node"]),
    ("huge-jobs", "partitions:\n  local:\n    limits: {max_jobs_per_user: 100000000000}\n",
     4, ["max_jobs_per_user"]),
    ("bool-purge-days", "policies: {purge_days: true}\n", 2, ["purge_days", "yes/no"]),
]


@pytest.mark.parametrize(("text", "line", "needles"), [c[1:] for c in NUMBERS],
                         ids=[c[0] for c in NUMBERS])
def test_numbers_are_finite_strict_and_bounded(tmp_path: Path, text: str, line: int,
                                               needles: list[str]) -> None:
    path = write_profile(tmp_path, "num", "extends: local\n" + text)
    (err,) = check_file(path)
    assert err.line == line, str(err)
    for needle in needles:
        assert needle in err.problem, (needle, str(err))


def test_site_show_json_is_standard_json(capsys: pytest.CaptureFixture[str]) -> None:
    res = cli(capsys, "site", "show", "neuron", "--json")
    assert res.rc == 0 and "Infinity" not in res.out and "NaN" not in res.out


def test_bounds_say_why_in_the_reference() -> None:
    schema = model.json_schema(model.Partition)["properties"]
    assert "1,000,000" in schema["nodes"]["description"]
    assert "more than any machine" in schema["nodes"]["description"]


# ------------------------------------------------------- 14: messages and locations


def test_bad_utf8_is_located_by_line_and_column(tmp_path: Path) -> None:
    path = tmp_path / "bin.yaml"
    path.write_bytes(b"extends: local\ndescription: ok\nnotes: caf\xe9\n")
    (err,) = check_file(path)
    assert (err.file, err.line) == (str(path), 3), str(err)
    assert "UTF-8" in err.problem and "column 11" in err.problem and "position" not in str(err)


def test_nameless_profile_with_a_bad_file_name_is_blamed_on_itself(tmp_path: Path) -> None:
    path = write_profile(tmp_path, "my site", "extends: local\ndescription: x\n")
    (err,) = check_file(path)
    assert (err.file, err.line) == (str(path), 1), str(err)
    assert "name" in err.problem and "file name" in err.problem and "'my site'" in err.problem


def test_long_extends_chain_is_reported_on_the_first_file(tmp_path: Path) -> None:
    depth = 220
    for i in range(depth):
        write_profile(tmp_path, f"c{i}", f"description: level {i}\nextends: ./c{i + 1}.yaml\n")
    write_profile(tmp_path, f"c{depth}", "extends: local\n")
    (err,) = check_file(tmp_path / "c0.yaml")
    assert (err.file, err.line) == (str(tmp_path / "c0.yaml"), 2), str(err)
    assert "chain" in err.problem and str(MAX_EXTENDS) in err.problem
    assert "nesting" not in err.problem


def test_chain_at_the_limit_is_fine(tmp_path: Path) -> None:
    last = MAX_EXTENDS - 2  # c0 .. c{last}, then local: MAX_EXTENDS profiles
    for i in range(last):
        write_profile(tmp_path, f"c{i}", f"extends: ./c{i + 1}.yaml\n")
    write_profile(tmp_path, f"c{last}", "extends: local\n")
    assert len(resolve(tmp_path / "c0.yaml").files) == MAX_EXTENDS
    write_profile(tmp_path, "top", "extends: ./c0.yaml\n")
    (err,) = check_file(tmp_path / "top.yaml")
    assert "chain" in err.problem


def test_self_extension_by_name_says_so(tmp_path: Path,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    path = write_profile(tmp_path / "sites", "me", "description: x\nextends: me\n")
    monkeypatch.setenv("HPCPROV_SITES_PATH", str(tmp_path / "sites"))
    (err,) = check_file(path)
    assert (err.file, err.line) == (str(path), 2), str(err)
    assert "itself" in err.problem and "did you mean" not in err.problem


def test_user_profile_may_extend_the_bundled_one_of_its_name(user_dir: Path) -> None:
    path = write_profile(user_dir, "local", "extends: local\ndescription: mine\n")
    assert check_file(path) == []


def test_site_given_a_directory_says_so(tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    res = cli(capsys, "jobscript", "--site", f"{tmp_path}/", "--", "python", "x.py")
    line = assert_one_line_error(res, 2, "is a directory", "not a profile file")
    assert "no such" not in line


def test_bad_default_walltime_fails_site_check(tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    path = write_profile(tmp_path, "wt", "extends: local\npartitions:\n  local:\n"
                         "    limits:\n      default_walltime: soon\n")
    res = cli(capsys, "site", "check", str(path))
    assert_one_line_error(res, 2, f"{path}:5:", "default_walltime", "HH:MM:SS")
    res = cli(capsys, "jobscript", "--site", str(path), "--", "python", "x.py")
    line = assert_one_line_error(res, 2, f"{path}:5:", "default_walltime")
    assert "--time" not in line


def test_default_walltime_over_the_maximum_fails_site_check(tmp_path: Path) -> None:
    path = write_profile(tmp_path, "wt", "extends: local\npartitions:\n  local:\n"
                         "    limits:\n      max_walltime: '1:00:00'\n"
                         "      default_walltime: '2:00:00'\n")
    (err,) = check_file(path)
    assert err.line == 6 and "max_walltime" in err.problem


# ------------------------------------------------- 16: search path and detection


def test_relative_search_path_entry_is_ignored(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    write_profile(tmp_path / "sites", "local", "extends: neuron\nname: local\n"
                  "description: HIJACKED\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HPCPROV_SITES_PATH", "sites")
    res = cli(capsys, "site", "show", "local", "--json")
    assert res.rc == 0 and "HIJACKED" not in res.out
    (warning,) = res.err_lines
    assert warning.startswith("hpcprov: warning: ") and "'sites' is relative" in warning


def test_relative_xdg_config_home_is_ignored(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", "conf")
    assert fsutil.config_dir() == Path.home() / ".config" / "hpcprov"


@pytest.mark.parametrize(("pattern", "expected"), [
    ("*", True), ("*.*", True), ("?*", True), ("[a-z]*", True), ("**.*", True),
    ("glogin*", False), ("*.ksc.re.kr", False), ("node[0-9]*", False),
])
def test_catch_all_patterns(pattern: str, expected: bool) -> None:
    assert catch_all(pattern) is expected


@pytest.fixture
def hosts_dir(user_dir: Path) -> Path:
    write_profile(user_dir, "everywhere", "extends: local\nlogin_hosts: ['*']\n")
    write_profile(user_dir, "wide", "extends: local\nlogin_hosts: ['node*']\n")
    write_profile(user_dir, "narrow", "extends: local\nlogin_hosts: ['node1*']\n")
    return user_dir


def test_catch_all_is_not_every_users_default(hosts_dir: Path, monkeypatch: pytest.MonkeyPatch,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    assert detect("login.example.org") == []
    res = cli(capsys, "detect", "--hostname", "login.example.org")
    assert res.rc == 1
    assert any("everywhere" in w and "'*'" in w and "HPCPROV_SITE" in w
               for w in res.err_lines if w.startswith("hpcprov: warning: "))
    monkeypatch.setattr(socket, "getfqdn", lambda: "login.example.org")
    res = cli(capsys, "jobscript", "--", "python", "x.py")
    assert res.rc == 0 and "for site local," in res.out
    monkeypatch.setenv("HPCPROV_SITE", "everywhere")
    res = cli(capsys, "jobscript", "--", "python", "x.py")
    assert res.rc == 0 and "for site everywhere," in res.out


def test_several_matches_are_named(hosts_dir: Path, monkeypatch: pytest.MonkeyPatch,
                                   capsys: pytest.CaptureFixture[str]) -> None:
    res = cli(capsys, "detect", "--hostname", "node1.example.org")
    assert res.rc == 0 and res.out.strip() == "narrow"
    ambiguous = [w for w in res.err_lines if "2 sites" in w]
    assert ambiguous and "narrow, wide" in ambiguous[0] and "HPCPROV_SITE" in ambiguous[0]
    monkeypatch.setattr(socket, "getfqdn", lambda: "node1.example.org")
    res = cli(capsys, "jobscript", "--", "python", "x.py")
    assert res.rc == 0 and "for site narrow," in res.out
    assert any("narrow, wide" in w for w in res.err_lines), res.err
    with pytest.warns(HpcprovWarning, match="narrow, wide"):
        from hpcprov.site.catalog import default_site

        assert default_site() == "narrow"


def test_one_match_gives_no_warning(hosts_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    res = cli(capsys, "detect", "--hostname", "nodeX")
    assert res.rc == 0 and res.out.strip() == "wide"
    assert not [w for w in res.err_lines if "sites (" in w]


def test_search_path_docs_exist() -> None:
    text = (Path(loader.__file__).resolve().parents[2] / "docs" / "security.md").read_text()
    assert "## Profiles and the search path" in text
