"""The fast profile path: libyaml parsing gives the same layers and errors as PyYAML's own
parser; the cache of validated profiles (one JSON form of a site) is used only while every
input is unchanged and its values pass the model's checks again; the caches trust only files
and folders of the user's own, and write without following planted symlinks (behaviour, not
timing: benchmarks/ measures the speed)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hpcprov_tests import BUNDLED, REPO, cli, planned_in_subprocess, write_profile

from hpcprov.core import fsutil
from hpcprov.core.errors import ProfileError
from hpcprov.site import cache as profile_cache
from hpcprov.site import loader
from hpcprov.site.codec import dump, load
from hpcprov.site.loader import available_sites, bundled_site_dir, read_yaml, resolve
from hpcprov.site.profiles import load_site, validate_file, validate_layer
from hpcprov.site.types import Site

HAVE_LIBYAML = loader._loaders()[1] is not None


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty cache directory of this test's own (the folder of the profile cache); the
    cache switched on."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg-cache"))
    monkeypatch.delenv("HPCPROV_NO_CACHE", raising=False)
    return tmp_path / "xdg-cache" / "hpcprov" / "profiles"


def _no_validation(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make any validation of profile data fail loudly: only the cache may answer."""
    def boom(*args: object, **kwargs: object) -> None:
        raise AssertionError("the profile was validated again")

    monkeypatch.setattr("hpcprov.site.profiles.validate_layer", boom)


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
    assert len(list(cache.glob("*.json"))) == 1
    _no_validation(monkeypatch)
    again = load_site("neuron")
    assert again == first and again is not first and type(again) is Site


def test_a_cached_site_behaves_in_a_fresh_process(cache: Path) -> None:
    """A cached site loads as the typed site with neither PyYAML nor pydantic imported;
    its methods and dump work, and the data are the validated ones."""
    load_site("neuron")
    probe = (
        "import sys, json\n"
        "from hpcprov.site.profiles import load_site\n"
        "s = load_site('neuron')\n"
        "assert 'yaml' not in sys.modules, 'parsed: not from the cache'\n"
        "assert 'pydantic' not in sys.modules, 'pydantic imported for a cached site'\n"
        "assert s.partition()[0] == 'amd_a100nv_8' and s.prefix().startswith('/scratch/')\n"
        "from hpcprov.site.codec import dump\n"
        "print(json.dumps(dump(s)))\n")
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          env={**os.environ}, timeout=120)
    assert proc.returncode == 0, proc.stderr
    fresh = validate_file(bundled_site_dir() / "neuron.yaml")  # validated by pydantic
    assert json.loads(proc.stdout) == dump(fresh)


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


@pytest.mark.parametrize("damage", ["garbage", "empty", "truncated", "bad-header",
                                    "group-writable"])
def test_a_damaged_entry_falls_back_silently(damage: str, cache: Path) -> None:
    want = load_site("neuron")
    (entry,) = cache.glob("*.json")
    data = entry.read_bytes()
    head, _, payload = data.partition(b"\n")
    if damage == "garbage":
        entry.write_bytes(os.urandom(2000))
    elif damage == "empty":
        entry.write_bytes(b"")
    elif damage == "truncated":
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
    from hpcprov.site.catalog import detect

    cold = detect("glogin01.ksc.re.kr")
    assert "neuron" in cold
    cli(capsys, "sites")  # validates and caches every profile

    def no_parsing(path: Path) -> None:
        raise AssertionError(f"{path} parsed again")

    monkeypatch.setattr("hpcprov.site.profiles.resolve", no_parsing)
    assert detect("glogin01.ksc.re.kr") == cold


def test_a_broken_profile_is_never_cached(cache: Path, user_dir: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    (user_dir / "broken.yaml").write_text("extends: local\nnodse: 1\n")
    for _ in range(2):
        rows = {r["name"]: r for r in json.loads(cli(capsys, "sites", "--json").out)}
        assert "nodse" in rows["broken"]["error"]


def _modules_after(argv: list[str], env: dict[str, str]) -> set[str]:
    probe = ("import sys, contextlib, io\n"
             "from hpcprov.app.cli import main\n"
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
    command plans from the cached site; the same output either way. The profile is a
    user's copy of neuron.yaml."""
    (user_dir / "neuron.yaml").write_bytes((bundled_site_dir() / "neuron.yaml").read_bytes())
    cold_heavy, cold_out = planned_in_subprocess(argv, {**os.environ})
    warm_heavy, warm_out = planned_in_subprocess(argv, {**os.environ})
    assert "pydantic" in cold_heavy  # the first run validated the profile
    assert warm_heavy == []
    assert warm_out == cold_out and warm_out.strip()


# ------------------------------------------------------------------ the one form of a site


@pytest.mark.parametrize("name", BUNDLED)
def test_a_cached_bundled_site_is_the_freshly_validated_one(name: str, cache: Path) -> None:
    path = bundled_site_dir() / f"{name}.yaml"
    want = validate_layer(resolve(path))  # validated, not cached
    load_site(name)  # validates and caches
    cached = profile_cache.load(path)
    assert type(cached) is Site and cached == want and cached is not want
    # the same data in the same order (fields, partitions: the first is the default one)
    assert json.dumps(dump(cached)) == json.dumps(dump(want))
    head = json.loads((next(cache.glob("*.json"))).read_text().splitlines()[0])
    assert set(head) == {"format", "fingerprint", "path", "files", "links"}  # the site alone


def _neuron() -> dict:
    return dump(validate_layer(resolve(bundled_site_dir() / "neuron.yaml")))


@pytest.mark.parametrize("change", [
    lambda d: d.update(scheduler="nope"),
    lambda d: d.update(unknown_key=1),
    lambda d: d.update(name="x\nrm -rf ~"),
    lambda d: d.update(env={"A\nB": "1"}),
    lambda d: d.update(partitions={"gpu\nid": next(iter(d["partitions"].values()))}),
    lambda d: d["partitions"][next(iter(d["partitions"]))].update(cores_per_node="64"),
    lambda d: d["partitions"][next(iter(d["partitions"]))].update(memory_gb=float("nan")),
    lambda d: d.update(launchers=[]),
    lambda d: d["policies"].update(notes="not a list"),
], ids=["unknown-enum", "unknown-key", "newline-in-name", "newline-in-a-key",
        "newline-in-a-partition-name", "wrong-type", "not-finite", "list-for-a-mapping",
        "str-for-a-list"])
def test_reading_refuses_what_dump_never_writes_or_the_model_refuses(change: object) -> None:
    data = _neuron()
    assert load(Site, json.loads(json.dumps(data))) is not None
    change(data)
    with pytest.raises((ValueError, TypeError, KeyError)):
        load(Site, json.loads(json.dumps(data)))


def test_free_text_may_span_lines_as_in_the_model() -> None:
    data = _neuron()
    data.update(description="two\nlines", guide={"setup": "a\nb"})
    data["policies"]["notes"] = ["x\ty"]
    site = load(Site, data)
    assert site.description == "two\nlines" and site.policies.notes == ["x\ty"]


def _edit_entry(cache: Path, change: object) -> None:
    """Apply change(header, site JSON) to the one entry in the cache, in place."""
    (entry,) = cache.glob("*.json")
    head, body = entry.read_text().splitlines()
    head, body = json.loads(head), json.loads(body)
    change(head, body)
    entry.write_text(json.dumps(head) + "\n" + json.dumps(body) + "\n")


@pytest.mark.parametrize("where", ["name", "partition-name", "login-host"])
def test_an_entry_with_a_newline_injected_is_a_miss(where: str, cache: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """A newline in a cached single-line value once produced a `# comment` line of a job
    script that ran: a cached value is checked as the model checks it."""
    want = load_site("neuron")
    path = available_sites()["neuron"]

    def inject(head: dict, body: dict) -> None:
        fields = body
        if where == "name":
            fields["name"] = "neuron\ntouch /tmp/pwned"
        elif where == "partition-name":
            part = fields["partitions"]["amd_a100nv_8"]
            fields["partitions"] = {"gpu\nid": part}
        else:
            fields["login_hosts"] = ["glogin*\nx"]

    _edit_entry(cache, inject)
    assert profile_cache.load(path) is None
    assert load_site("neuron") == want  # validated again, and cached again
    assert profile_cache.load(path) == want
    script = cli(capsys, "jobscript", "--site", "neuron", "-N", "1", "--", "true").out
    assert "touch /tmp/pwned" not in script


def test_free_text_in_an_entry_stays_a_hit(cache: Path) -> None:
    load_site("neuron")
    _edit_entry(cache, lambda h, b: b.update(description="two\nlines"))
    assert profile_cache.load(available_sites()["neuron"]).description == "two\nlines"


def test_an_edited_bundled_profile_is_validated_again(cache: Path, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """The cache entry of a bundled profile notices an edit of the file or of its parent."""
    import shutil

    copy = tmp_path / "bundled"
    shutil.copytree(bundled_site_dir(), copy, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(loader, "bundled_site_dir", lambda: copy)
    assert "sockeye*" in load_site("sockeye-slurm").login_hosts
    parent = copy / "sockeye.yaml"
    parent.write_text(parent.read_text().replace('"sockeye*"', '"sockeye?"'))
    assert profile_cache.load(copy / "sockeye-slurm.yaml") is None
    assert "sockeye?" in load_site("sockeye-slurm").login_hosts
    parent.write_text(parent.read_text() + "nodse: 1\n")
    with pytest.raises(ProfileError, match="nodse"):
        load_site("sockeye-slurm")


def test_no_pickle_anywhere() -> None:
    """Cache entries are JSON: no module of hpcprov reads or writes pickles."""
    word = re.compile(r"\bpickle\b")
    for folder in ("hpcprov", "provision", "validate"):
        for file in (REPO / folder).rglob("*.py"):
            assert not word.search(file.read_text(encoding="utf-8")), file


# ------------------------------------------------------------------ trust


def test_a_planted_symlink_is_never_written_through(cache: Path, tmp_path: Path) -> None:
    """At the temporary names the old code used, and at the entry itself: the victim file
    keeps its content, the entry becomes a file of its own."""
    load_site("neuron")
    (entry,) = cache.glob("*.json")
    entry.unlink()
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    for name in (entry.name, f".{entry.name}.{os.getpid()}.tmp", f".{entry.stem}.entry.tmp"):
        (cache / name).symlink_to(victim)
    load_site("neuron")
    assert victim.read_text() == "precious\n"
    assert not entry.is_symlink() and profile_cache.load(available_sites()["neuron"])


def test_a_symlink_at_an_entry_is_not_read(cache: Path, tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    load_site("neuron")
    (entry,) = cache.glob("*.json")
    elsewhere = tmp_path / "elsewhere.json"
    entry.rename(elsewhere)
    entry.symlink_to(elsewhere)
    assert profile_cache.load(available_sites()["neuron"]) is None


def test_atomic_write_replaces_a_symlink_and_sets_modes(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    target = tmp_path / "out.json"
    target.symlink_to(victim)
    fsutil.atomic_write(target, "new\n")
    assert victim.read_text() == "precious\n" and target.read_text() == "new\n"
    assert not target.is_symlink() and target.stat().st_mode & 0o777 == 0o600
    mask = os.umask(0o022)
    try:
        fsutil.atomic_write(target, b"shared\n", private=False)
    finally:
        os.umask(mask)
    assert target.stat().st_mode & 0o777 == 0o644
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.json", "victim"]  # no .tmp


def test_atomic_write_leaves_nothing_behind_on_failure(tmp_path: Path) -> None:
    with pytest.raises(OSError):
        fsutil.atomic_write(tmp_path / "no-such-dir" / "f", "x")
    (tmp_path / "a-dir").mkdir()
    with pytest.raises(OSError):
        fsutil.atomic_write(tmp_path / "a-dir", "x")  # cannot replace a directory
    assert [p.name for p in tmp_path.iterdir()] == ["a-dir"]


@pytest.mark.parametrize("write", ["journal", "manifest"])
def test_prefix_state_files_do_not_follow_planted_symlinks(write: str, tmp_path: Path) -> None:
    from hpcprov.provision.journal import Journal
    from hpcprov.provision.manifest import write_manifest

    state = tmp_path / "prefix" / ".hpcprov"
    state.mkdir(parents=True)
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    for name in ("journal.tmp", "manifest.tmp"):
        (state / name).symlink_to(victim)
    if write == "journal":
        Journal(state / "journal.json", "local").save()
    else:
        write_manifest({"a": 1}, tmp_path / "prefix")
    assert victim.read_text() == "precious\n"
    assert json.loads((state / f"{write}.json").read_text())


def test_xdg_folders() -> None:
    env = os.environ
    assert fsutil.cache_dir("x") == Path(env.get("XDG_CACHE_HOME") or Path.home() / ".cache") \
        / "hpcprov" / "x"
    assert loader.user_site_dirs()[-1] == fsutil.config_dir() / "sites"
    assert fsutil.config_dir() == Path(env["XDG_CONFIG_HOME"]) / "hpcprov"  # conftest's


def _as_root() -> None:
    if os.geteuid() != 0:
        pytest.skip("changing a folder's owner needs root")


def test_a_cache_folder_of_another_user_is_not_used(cache: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    _as_root()
    load_site("neuron")
    os.chown(cache, 65534, 65534)  # somebody else's now (nobody)
    path = available_sites()["neuron"]
    assert profile_cache.load(path) is None
    (entry,) = cache.glob("*.json")
    entry.unlink()
    assert load_site("neuron").name == "neuron"  # validated; nothing written there
    assert list(cache.iterdir()) == []


@pytest.mark.parametrize("how", ["group-writable", "a-symlink"])
def test_a_cache_folder_others_can_change_is_not_used(how: str, cache: Path,
                                                      tmp_path: Path) -> None:
    load_site("neuron")
    path = available_sites()["neuron"]
    if how == "group-writable":
        cache.chmod(0o770)
    else:
        cache.rename(tmp_path / "real")
        cache.symlink_to(tmp_path / "real")
    assert profile_cache.load(path) is None
    assert fsutil.trusted_dir(cache, create=True) is False


def test_new_cache_folders_are_private(cache: Path) -> None:
    old = os.umask(0o002)  # a group-sharing umask, as HPC sites set
    try:
        load_site("neuron")
    finally:
        os.umask(old)
    # every folder hpcprov made (xdg-cache/hpcprov/profiles) is 0700, whatever the umask
    for folder in (cache, cache.parent, cache.parent.parent):
        assert folder.stat().st_mode & 0o777 == 0o700, folder
    assert list(cache.glob("*.json"))


@pytest.mark.parametrize(("mode", "owner", "trusted"), [
    (0o700, "me", True),
    (0o1777, "me", True),       # sticky (as /tmp): others cannot rename what is mine
    (0o775, "me", False),       # the group could swap the cache folder for another
    (0o2775, "me", False),      # setgid is no sticky bit
    (0o755, "nobody", False),   # its owner could
])
def test_no_cache_below_a_folder_another_user_can_change(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: int, owner: str,
        trusted: bool) -> None:
    """Below a folder somebody else may write (and is not sticky), or somebody else's, the
    cache folder could be swapped for a symlink between hpcprov's check and its write: such
    a cache is neither made nor used, nothing is written there, and commands still work."""
    if owner != "me":
        _as_root()
    above = tmp_path / "shared"
    above.mkdir()
    above.chmod(mode)
    if owner != "me":
        os.chown(above, 65534, 65534)
    monkeypatch.setenv("XDG_CACHE_HOME", str(above / "cache"))
    monkeypatch.delenv("HPCPROV_NO_CACHE", raising=False)
    assert load_site("neuron").name == "neuron"
    folder = fsutil.cache_dir("profiles")
    assert fsutil.trusted_dir(folder) is trusted
    assert bool(list(folder.glob("*.json")) if folder.is_dir() else []) is trusted
    if not trusted:
        assert not (above / "cache").exists()  # made nothing there
        # one made earlier (by an older hpcprov) is not used either
        folder.mkdir(parents=True, mode=0o700)
        assert not fsutil.trusted_dir(folder, create=True)
        load_site("neuron")
        assert list(folder.iterdir()) == []


def test_a_symlink_above_the_cache_counts_by_its_owner_and_its_target(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    private, shared = tmp_path / "private", tmp_path / "shared"
    private.mkdir(mode=0o700)
    shared.mkdir()
    shared.chmod(0o777)
    link = tmp_path / "cache-link"
    link.symlink_to(private)
    assert fsutil.trusted_dir(link / "hpcprov" / "profiles", create=True)
    link.unlink()
    link.symlink_to(shared)  # a target others may write: they could swap what is inside
    assert not fsutil.trusted_dir(link / "hpcprov" / "profiles", create=True)
    assert list(shared.iterdir()) == []


# ------------------------------------------------------------------ the "ready" cache


def _ready_prefix(root: Path) -> Path:
    """A prefix that looks completely set up (manifest, every journal step done)."""
    state = root / ".hpcprov"
    state.mkdir(parents=True)
    (state / "manifest.json").write_text("{}")
    (state / "journal.json").write_text(json.dumps({"steps": {"env": {"status": "done"}}}))
    return root


def _request(prefix: str | None) -> Any:
    """The request of `setup --site local` (quick.Request), with --prefix PREFIX."""
    from hpcprov.provision import quick

    req = quick.request_key("local", {"prefix": prefix, "env": None, "on": "login",
                                      "container": None})
    assert req is not None
    return req


def test_a_ready_entry_for_another_prefix_does_not_answer(cache: Path, tmp_path: Path) -> None:
    from hpcprov.provision import quick

    a = _ready_prefix(tmp_path / "A")
    b = _ready_prefix(tmp_path / "B")
    asked_a = _request(str(a))
    quick.remember(asked_a, b)  # an entry under A's key that names B
    assert quick.ready_prefix(asked_a) is None
    quick.remember(asked_a, a)
    assert quick.ready_prefix(asked_a) == a
    site_default = _request(None)
    assert site_default.key != asked_a.key
    assert quick.ready_prefix(site_default) is None
    quick.remember(site_default, b)
    assert quick.ready_prefix(site_default) == b


def test_a_ready_prefix_with_a_variable_is_checked_as_expanded_today(
        cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from hpcprov.provision import quick

    monkeypatch.setenv("MY_SCRATCH", str(tmp_path / "one"))
    one = _ready_prefix(tmp_path / "one" / "env")
    req = _request("$MY_SCRATCH/env")
    quick.remember(req, one)
    assert quick.ready_prefix(req) == one
    monkeypatch.setenv("MY_SCRATCH", str(tmp_path / "two"))
    assert quick.ready_prefix(_request("$MY_SCRATCH/env")) is None


@pytest.mark.parametrize("damage", ["another-owner", "group-writable", "folder-of-another",
                                    "other-code", "not-json", "a-symlink"])
def test_a_ready_entry_not_trusted_is_a_miss(damage: str, cache: Path, tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    from hpcprov.provision import quick

    if damage in ("another-owner", "folder-of-another"):
        _as_root()
    prefix = _ready_prefix(tmp_path / "A")
    req = _request(str(prefix))
    quick.remember(req, prefix)
    assert quick.ready_prefix(req) == prefix
    folder = cache.parent / "ready"
    entry = folder / f"{req.key}.json"
    if damage == "another-owner":
        os.chown(entry, 65534, 65534)
    elif damage == "group-writable":
        entry.chmod(0o664)
    elif damage == "folder-of-another":
        os.chown(folder, 65534, 65534)
    elif damage == "other-code":
        monkeypatch.setattr(quick, "fingerprint", lambda: "another hpcprov")
    elif damage == "not-json":
        entry.write_text(str(prefix) + "\n")  # the old format
    else:
        entry.rename(tmp_path / "elsewhere")
        entry.symlink_to(tmp_path / "elsewhere")
    assert quick.ready_prefix(req) is None


def test_one_code_fingerprint_for_both_caches() -> None:
    from hpcprov.provision import quick

    assert quick.fingerprint is profile_cache.fingerprint


def test_a_cached_parent_replaced_by_a_fifo_is_a_miss_not_a_hang(tmp_path: Path) -> None:
    """The entry's files are read as profiles are: a FIFO in a parent's place is refused."""
    import subprocess
    import sys

    sites = tmp_path / "sites"
    write_profile(sites, "parent", (REPO / "sites" / "local.yaml").read_text()
                  .replace("name: local", "name: parent"))
    write_profile(sites, "child", "extends: parent\nname: child\n")
    env = {**os.environ, "HPCPROV_SITES_PATH": str(sites),
           "XDG_CACHE_HOME": str(tmp_path / "cache")}
    show = [sys.executable, "-m", "hpcprov", "site", "show", "child"]
    assert subprocess.run(show, env=env, capture_output=True, timeout=60).returncode == 0
    (sites / "parent.yaml").unlink()
    os.mkfifo(sites / "parent.yaml")
    proc = subprocess.run(show, env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "FIFO" in proc.stderr.upper(), proc.stderr


def test_a_fifo_planted_as_a_cache_entry_does_not_hang_jobscript(tmp_path: Path) -> None:
    """A FIFO at the very name of the profile's cache entry (the user's own, mode 0600: it
    passes every owner check) was opened to be read and waited for a writer forever. It is
    a miss now: the profile is validated again, the same script printed, and the FIFO
    replaced by a real entry."""
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")}
    env.pop("HPCPROV_NO_CACHE", None)
    jobscript = [sys.executable, "-m", "hpcprov", "jobscript", "--site", "neuron", "-N", "2",
                 "--", "python", "train.py"]
    first = subprocess.run(jobscript, env=env, capture_output=True, text=True, timeout=60)
    assert first.returncode == 0, first.stderr
    (entry,) = (tmp_path / "cache" / "hpcprov" / "profiles").glob("*.json")
    entry.unlink()
    os.mkfifo(entry, 0o600)
    again = subprocess.run(jobscript, env=env, capture_output=True, text=True,
                           timeout=60)  # before: TimeoutExpired, the test's hang guard
    assert again.returncode == 0 and again.stdout == first.stdout, again.stderr
    assert entry.is_file() and json.loads(entry.read_bytes().split(b"\n", 1)[0])


@pytest.mark.parametrize("planted", ["fifo", "too-large"])
def test_read_owned_refuses_a_fifo_or_a_huge_file_without_blocking(tmp_path: Path,
                                                                   planted: str) -> None:
    """Every reader of an entry of the caches (profiles, "ready", stored runs) goes through
    read_owned, which reads through read_regular: never waits on a FIFO, reads at most its
    limit. Run in a child with a timeout: the old reader blocked in open()."""
    path = tmp_path / "entry.json"
    if planted == "fifo":
        os.mkfifo(path, 0o600)
    else:
        path.write_bytes(b"x" * 101)
        path.chmod(0o600)
    limit = "" if planted == "fifo" else ", 100"
    code = ("import sys; from pathlib import Path; from hpcprov.core import fsutil; "
            f"print(fsutil.read_owned(Path(sys.argv[1]){limit}))")
    proc = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True,
                          text=True, timeout=30)
    assert proc.returncode == 0 and proc.stdout == "None\n", proc.stderr
    with pytest.raises(fsutil.NotRegularFile if planted == "fifo" else fsutil.TooLarge):
        fsutil.read_regular(path, 100, follow=False, owned_only=True)


@pytest.mark.parametrize("char", ["\x7f", "\x9b", "\x85"])
def test_an_entry_with_a_raw_control_character_is_a_miss(char: str, cache: Path) -> None:
    """JSON may hold DEL and the C1 characters unescaped (json.loads reads them): an entry
    that is not the printable ASCII json.dumps writes is checked value by value."""
    want = load_site("neuron")
    path = available_sites()["neuron"]
    (entry,) = cache.glob("*.json")
    head, body = entry.read_text().splitlines()
    site = json.loads(body)
    site["name"] = f"neuron{char}[31m"
    entry.write_text(head + "\n" + json.dumps(site, ensure_ascii=False) + "\n")
    assert profile_cache.load(path) is None
    assert load_site("neuron") == want


def test_the_code_state_follows_each_source_file(tmp_path: Path) -> None:
    """The code fingerprint changes with any source file's size or mtime, a new module in a
    subpackage, or a Horovod patch; bytecode caches and other files do not count."""
    root = tmp_path / "pkg"
    (root / "sub" / "__pycache__").mkdir(parents=True)
    (root / "patches").mkdir()
    for name in ("a.py", "sub/b.py", "patches/x.patch"):
        (root / name).write_text("x = 1\n")
    states = [profile_cache.code_state(str(root))]
    assert states[0].count(":") == 6  # three files, each its size and mtime

    def changed(state: str) -> str:
        assert state not in states
        states.append(state)
        return state

    (root / "sub" / "__pycache__" / "b.cpython-311.pyc").write_bytes(b"\0")
    (root / "notes.txt").write_text("n")
    (root / "sub" / "x.patch").write_text("not in patches/")
    assert profile_cache.code_state(str(root)) == states[0]
    (root / "sub" / "b.py").write_text("x = 22\n")  # another size
    changed(profile_cache.code_state(str(root)))
    st = (root / "a.py").stat()
    os.utime(root / "a.py", ns=(st.st_atime_ns, st.st_mtime_ns + 1))  # same size, touched
    changed(profile_cache.code_state(str(root)))
    (root / "sub" / "c.py").write_text("")
    changed(profile_cache.code_state(str(root)))
    (root / "patches" / "y.patch").write_text("")
    changed(profile_cache.code_state(str(root)))


def test_the_fingerprint_covers_all_of_hpcprov() -> None:
    """Every module of the package counts (the site's code is spread over site/, core/ and
    the schedulers' sections), not the folder of the cache alone."""
    import hpcprov

    package = Path(hpcprov.__file__).parent
    state = profile_cache.code_state(str(package))
    for module in ("site/types.py", "core/text.py", "schedulers/slurm.py", "jobs/api.py"):
        assert f"{module}:" in state
