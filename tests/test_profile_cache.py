"""The fast profile path: libyaml parsing gives the same layers and errors as PyYAML's own
parser, and the cache of validated profiles is used only while every input is unchanged
(behaviour, not timing: benchmarks/ measures the speed)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hpcprov_tests import cli, planned_in_subprocess

from hpcprov import loader, profile_cache, shipped
from hpcprov.errors import ProfileError
from hpcprov.loader import available_sites, bundled_site_dir, read_yaml
from hpcprov.profiles import load_site, validate_file

HAVE_LIBYAML = loader._loaders()[1] is not None


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty cache directory of this test's own; the cache switched on. In this process
    the snapshots shipped for the bundled profiles are out of the way, so the user's cache is
    what answers (tests/test_shipped.py covers those)."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg-cache"))
    monkeypatch.delenv("HPCPROV_NO_CACHE", raising=False)
    monkeypatch.setattr(shipped, "snapshots_file", lambda: tmp_path / "no-snapshots.json")
    return tmp_path / "xdg-cache" / "hpcprov" / "profiles"


def _no_validation(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make any validation of profile data fail loudly: only the cache may answer."""
    def boom(*args: object, **kwargs: object) -> None:
        raise AssertionError("the profile was validated again")

    monkeypatch.setattr("hpcprov.profiles.validate_layer", boom)


# ------------------------------------------------------------------ libyaml vs PyYAML


@pytest.mark.skipif(not HAVE_LIBYAML, reason="PyYAML without libyaml")
@pytest.mark.parametrize("name", sorted(available_sites()))
def test_libyaml_and_pure_python_give_the_same_layer(name: str) -> None:
    path = available_sites()[name]
    text, _ = loader._read(path)
    py_loader, c_loader = loader._loaders()
    a = loader._parse(py_loader, text, str(path))
    b = loader._parse(c_loader, text, str(path))
    assert (a.data, a.origins, a.sources) == (b.data, b.origins, b.sources)


BAD = [
    "extends: local\ndescription: ok\n  bad: indent\n",
    "extends: local\nlogin_hosts: [a, b}\n",
    "extends: local\npartitions:\n\tlocal: {}\n",
    "extends: local\na: &a [1, 2]\nb: [*a, *a]\n",
    "extends: local\ndescription: a\ndescription: b\n",
    "extends: local\ndescription: !!python/name:os.system\n",
    "extends: local\ndescription: " + "[" * 60 + "]" * 60 + "\n",
    "extends: local\ndescription: 'unterminated\n",
    "extends: local\ndescription: bell\x07\n",
    "- a list\n",
]


@pytest.mark.parametrize("text", BAD)
def test_errors_are_the_same_with_and_without_libyaml(text: str, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(ProfileError) as with_c:
        read_yaml(path)
    py_loader = loader._loaders()[0]
    monkeypatch.setattr(loader, "_loaders", lambda: (py_loader, None))
    with pytest.raises(ProfileError) as pure:
        read_yaml(path)
    assert str(with_c.value) == str(pure.value)


def test_crlf_profiles_read_as_before(tmp_path: Path) -> None:
    path = tmp_path / "crlf.yaml"
    path.write_bytes(b"extends: local\r\ndescription: >\r\n  two\r\n  lines\r\n")
    assert read_yaml(path).data["description"] == "two lines\n"


# ------------------------------------------------------------------ the cache


def test_a_cached_site_equals_the_validated_one(cache: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    first = load_site("neuron")
    assert len(list(cache.glob("*.entry"))) == 1
    _no_validation(monkeypatch)
    again = load_site("neuron")
    assert again == first and again is not first
    assert again.model_dump() == first.model_dump()


def test_a_cached_site_behaves_in_a_fresh_process(cache: Path) -> None:
    """A cached site loads as its snapshot with neither PyYAML nor pydantic imported;
    dumping and copying still work, and the data are the validated ones."""
    load_site("neuron")
    probe = (
        "import sys, json\n"
        "from hpcprov.profiles import load_site\n"
        "s = load_site('neuron')\n"
        "assert 'yaml' not in sys.modules, 'parsed: not from the cache'\n"
        "assert 'pydantic' not in sys.modules, 'pydantic imported for a cached site'\n"
        "assert s.model_copy(update={'description': 'x'}).description == 'x'\n"
        "assert s.description != 'x'\n"
        "assert s.partition()[0] == 'amd_a100nv_8' and s.prefix().startswith('/scratch/')\n"
        "print(json.dumps(s.model_dump(mode='json')))\n")
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          env={**os.environ}, timeout=120)
    assert proc.returncode == 0, proc.stderr
    fresh = validate_file(bundled_site_dir() / "neuron.yaml")  # the model itself
    assert json.loads(proc.stdout) == fresh.model_dump(mode="json")


def test_a_changed_profile_is_validated_again(cache: Path, user_dir: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    profile = user_dir / "mine.yaml"
    profile.write_text("extends: local\ndescription: first\n")
    assert load_site("mine").description == "first"
    profile.write_text("extends: local\ndescription: second\n")
    assert load_site("mine").description == "second"
    profile.write_text("extends: local\ndescription: third\nnodse: 1\n")
    with pytest.raises(ProfileError, match="nodse"):
        load_site("mine")


def test_a_changed_parent_is_validated_again(cache: Path, user_dir: Path) -> None:
    (user_dir / "base.yaml").write_text("extends: local\ndescription: base one\n")
    (user_dir / "child.yaml").write_text("extends: base\nlogin_hosts: [x]\n")
    assert load_site("child").description == "base one"
    (user_dir / "base.yaml").write_text("extends: local\ndescription: base two\n")
    assert load_site("child").description == "base two"


def test_a_parent_shadowed_on_the_search_path_is_noticed(cache: Path, tmp_path: Path,
                                                         user_dir: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    (user_dir / "child.yaml").write_text("extends: local\n")
    assert load_site("child").description == load_site("local").description
    earlier = tmp_path / "earlier"
    earlier.mkdir()
    (earlier / "local.yaml").write_text("extends: local\ndescription: my local\n")
    monkeypatch.setenv("HPCPROV_SITES_PATH", f"{earlier}{os.pathsep}{user_dir}")
    assert load_site("child").description == "my local"


def test_other_code_does_not_use_old_entries(cache: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    load_site("local")
    monkeypatch.setattr(profile_cache, "fingerprint", lambda: "another hpcprov")
    assert profile_cache.load(available_sites()["local"]) is None


@pytest.mark.parametrize("damage", ["garbage", "empty", "bad-pickle", "bad-header",
                                    "group-writable"])
def test_a_damaged_entry_falls_back_silently(damage: str, cache: Path) -> None:
    want = load_site("neuron")
    (entry,) = cache.glob("*.entry")
    data = entry.read_bytes()
    head, _, payload = data.partition(b"\n")
    if damage == "garbage":
        entry.write_bytes(os.urandom(2000))
    elif damage == "empty":
        entry.write_bytes(b"")
    elif damage == "bad-pickle":
        entry.write_bytes(head + b"\n" + payload[: len(payload) // 2])
    elif damage == "bad-header":
        entry.write_bytes(b'{"format": 1, "files": 3}\n' + payload)
    else:
        entry.chmod(0o666)  # anyone could have written it: not trusted
    assert profile_cache.load(available_sites()["neuron"]) is None
    assert load_site("neuron") == want
    assert profile_cache.load(available_sites()["neuron"]) == want  # written again


def test_an_unwritable_cache_is_ignored(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocker))
    assert load_site("neuron").name == "neuron"
    assert load_site("neuron").name == "neuron"


def test_no_cache_when_switched_off(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HPCPROV_NO_CACHE", "1")
    load_site("neuron")
    assert not cache.exists()


def test_sites_lists_the_same_from_the_cache(cache: Path, capsys: pytest.CaptureFixture[str],
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    cold = cli(capsys, "sites", "--json")
    assert cold.rc == 0
    _no_validation(monkeypatch)
    warm = cli(capsys, "sites", "--json")
    assert warm.rc == 0 and json.loads(warm.out) == json.loads(cold.out)


def test_detect_reads_login_hosts_from_the_cache(cache: Path,
                                                capsys: pytest.CaptureFixture[str],
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    from hpcprov.detect import detect

    cold = detect("glogin01.ksc.re.kr")
    assert "neuron" in cold
    cli(capsys, "sites")  # validates and caches every profile

    def no_parsing(path: Path) -> None:
        raise AssertionError(f"{path} parsed again")

    monkeypatch.setattr("hpcprov.detect.resolve", no_parsing)
    assert detect("glogin01.ksc.re.kr") == cold


def test_a_broken_profile_is_never_cached(cache: Path, user_dir: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    (user_dir / "broken.yaml").write_text("extends: local\nnodse: 1\n")
    for _ in range(2):
        rows = {r["name"]: r for r in json.loads(cli(capsys, "sites", "--json").out)}
        assert "nodse" in rows["broken"]["error"]


def _modules_after(argv: list[str], env: dict[str, str]) -> set[str]:
    probe = ("import sys, contextlib, io\n"
             "from hpcprov.cli import main\n"
             "with contextlib.redirect_stdout(io.StringIO()):\n"
             f"    main({argv!r})\n"
             "print(' '.join(sorted(sys.modules)))\n")
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          env=env, timeout=120, check=True)
    return set(proc.stdout.split())


def test_start_up_imports_stay_light(cache: Path) -> None:
    env = {**os.environ}
    heavy = {"torch", "tensorflow", "horovod", "matplotlib", "rich", "numpy"}
    assert not heavy & _modules_after(["--help"], env)
    assert not {"pydantic", "yaml"} & _modules_after(["--help"], env)
    _modules_after(["sites"], env)  # fills the cache
    warm = _modules_after(["sites"], env)
    assert not {"pydantic", "yaml", "asyncio"} & warm
    jobscript = ["jobscript", "--site", "neuron", "-N", "2", "--", "python", "train.py"]
    assert not heavy & _modules_after(jobscript, env)
    assert "yaml" not in _modules_after(jobscript, env)  # cached: no YAML parsing


@pytest.mark.parametrize("argv", [
    ["setup", "--site", "neuron", "--dry-run"],
    ["jobscript", "--site", "neuron", "-N", "2", "--", "python", "train.py"],
], ids=["setup-dry-run", "jobscript"])
def test_planning_commands_on_a_cached_site_import_neither_yaml_nor_pydantic(
        cache: Path, user_dir: Path, argv: list[str]) -> None:
    """What keeps them within the CLI's start-up budget (benchmarks/bench_cli.py): a warm
    command plans from the cached snapshot; the same output either way. The profile is a
    user's copy of neuron.yaml (no shipped snapshot covers it: the first run validates)."""
    (user_dir / "neuron.yaml").write_bytes((bundled_site_dir() / "neuron.yaml").read_bytes())
    cold_heavy, cold_out = planned_in_subprocess(argv, {**os.environ})
    warm_heavy, warm_out = planned_in_subprocess(argv, {**os.environ})
    assert "pydantic" in cold_heavy  # the first run validated the profile
    assert warm_heavy == []
    assert warm_out == cold_out and warm_out.strip()
