"""The snapshots shipped for the bundled profiles (hpcprov/shipped.py, sites/snapshots.json):
current, equal to the validated sites, and used only while the bundled files, the links
between them on today's search path and the model code are what they were built from."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from hpcprov_tests import BUNDLED, REPO, cli, planned_in_subprocess

from hpcprov import loader, shipped
from hpcprov.errors import ProfileError
from hpcprov.kinds import LauncherKind, Scheduler
from hpcprov.loader import bundled_site_dir, find_profile, resolve
from hpcprov.profiles import load_site, validate_file, validate_layer
from hpcprov.site_view import SiteView, View, snapshot


@pytest.fixture(autouse=True)
def _own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An empty user cache of this test's own, caching switched on."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg-cache"))
    monkeypatch.delenv("HPCPROV_NO_CACHE", raising=False)


def _copy_of_sites(tmp_path: Path, name: str, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A copy of the bundled folder (profiles and snapshots), made the bundled folder."""
    copy = tmp_path / name
    shutil.copytree(bundled_site_dir(), copy, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(loader, "bundled_site_dir", lambda: copy)
    return copy


def _no_validation(monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(*args: object, **kwargs: object) -> None:
        raise AssertionError("the profile was validated")

    monkeypatch.setattr("hpcprov.profiles.validate_layer", boom)


# ------------------------------------------------------------------ the committed file


def test_the_committed_snapshots_are_current(tmp_path: Path) -> None:
    fresh = shipped.write(tmp_path / "snapshots.json")
    committed = REPO / "sites" / "snapshots.json"
    assert committed.is_file(), "run: python -m hpcprov.shipped"
    assert committed.read_text(encoding="utf-8") == fresh.read_text(encoding="utf-8"), \
        "sites/snapshots.json is stale: run python -m hpcprov.shipped"
    doc = json.loads(committed.read_text(encoding="utf-8"))
    assert sorted(doc["sites"]) == BUNDLED  # every bundled profile has one


@pytest.mark.parametrize("name", BUNDLED)
def test_a_shipped_snapshot_is_the_validated_site(name: str,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    path = bundled_site_dir() / f"{name}.yaml"
    want = snapshot(validate_layer(resolve(path)))  # validate_file, without caching it
    found = shipped.lookup(path)
    assert found is not None
    summary, site = found
    assert type(site) is SiteView and site == want and site is not want
    assert site.model_dump() == want.model_dump()  # the same enum members and tuples
    # the same data in the same order (fields, partitions: the first is the default one)
    assert json.dumps(site.model_dump(mode="json")) == json.dumps(want.model_dump(mode="json"))
    assert summary == {"scheduler": want.scheduler.value, "partitions": len(want.partitions),
                       "description": want.description}
    _no_validation(monkeypatch)
    assert load_site(name) == want  # the user cache is empty: the shipped snapshot answered


# ------------------------------------------------------------------ the encoding


def test_encoding_round_trips_views_enums_tuples_and_tag_like_keys() -> None:
    inner = View({"kind": LauncherKind.srun, "pair": (1, "a", None), "items": [1.5, True]})
    site = SiteView({"scheduler": Scheduler.pbs, "launchers": {"srun": inner},
                     "env": {"__view__": "a plain key", "x": [(2, 3)]}, "nested": ((),)})
    text = json.dumps(shipped.encode(site))
    back = shipped.decode(json.loads(text))
    assert back == site and type(back) is SiteView
    assert back.scheduler is Scheduler.pbs
    assert back.launchers["srun"].kind is LauncherKind.srun
    assert type(back.launchers["srun"]) is View
    assert type(back.launchers["srun"].pair) is tuple and type(back.launchers["srun"].items) is list
    assert back.env == {"__view__": "a plain key", "x": [(2, 3)]} and type(back.env) is dict
    assert type(back.env["x"][0]) is tuple and back.nested == ((),)


def test_a_real_site_round_trips() -> None:
    site = load_site("neuron")
    assert shipped.decode(json.loads(json.dumps(shipped.encode(site)))) == site


@pytest.mark.parametrize("value", [{1: "a"}, {"k": Path("/x")}, {"k": {"a", "b"}}],
                         ids=["int-key", "path", "set"])
def test_what_json_cannot_carry_is_refused(value: object) -> None:
    with pytest.raises(TypeError):
        shipped.encode(SiteView({"f": value}))


@pytest.mark.parametrize("bad", [
    {"__view__": {}},  # not a site
    {"__site__": {"s": {"__enum__": "Nope", "value": "slurm"}}},
    {"__site__": {"s": {"__enum__": "SiteMethods", "value": "slurm"}}},
    {"__site__": {"s": {"__weird__": 1}}},
    {"__site__": {"s": {"__tuple__": {"not": "a list"}}}},
], ids=["not-a-site", "unknown-enum", "not-an-enum", "unknown-tag", "bad-tuple"])
def test_decoding_refuses_what_encode_never_writes(bad: object) -> None:
    with pytest.raises((ValueError, TypeError)):
        shipped.decode(bad)


# ------------------------------------------------------------------ when it is used


@pytest.mark.parametrize("damage", ["unknown-enum", "unknown-tag", "other-code", "corrupt",
                                    "missing"])
def test_a_damaged_snapshots_file_is_a_miss(damage: str, tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    intact = _copy_of_sites(tmp_path, "intact", monkeypatch)
    assert shipped.lookup(intact / "neuron.yaml") is not None  # the copy itself is fine
    copy = _copy_of_sites(tmp_path, "damaged", monkeypatch)
    file = copy / "snapshots.json"
    doc = json.loads(file.read_text(encoding="utf-8"))
    fields = doc["sites"]["neuron"]["site"]["__site__"]
    if damage == "unknown-enum":
        fields["scheduler"]["__enum__"] = "Nope"
    elif damage == "unknown-tag":
        fields["paths"] = {"__weird__": fields["paths"]["__view__"]}
    elif damage == "other-code":
        doc["code"] = "0" * 64
    file.write_text(json.dumps(doc), encoding="utf-8")
    if damage == "corrupt":
        file.write_text(file.read_text(encoding="utf-8")[:5000], encoding="utf-8")
    elif damage == "missing":
        file.unlink()
    assert shipped.lookup(copy / "neuron.yaml") is None
    assert load_site("neuron") == snapshot(validate_file(copy / "neuron.yaml"))


@pytest.mark.parametrize(("edited", "site"), [("neuron", "neuron"),
                                              ("sockeye", "sockeye-slurm")],
                         ids=["the-profile", "its-parent"])
def test_an_edited_bundled_profile_is_validated(edited: str, site: str, tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    copy = _copy_of_sites(tmp_path, "sites-copy", monkeypatch)
    yaml_file = copy / f"{edited}.yaml"
    text = yaml_file.read_text(encoding="utf-8")
    before = '"glogin*"' if edited == "neuron" else '"sockeye*"'
    assert before in text
    yaml_file.write_text(text.replace(before, before.replace("*", "?")), encoding="utf-8")
    assert shipped.lookup(copy / f"{site}.yaml") is None
    assert shipped.header(copy / f"{site}.yaml") is None
    assert before.replace("*", "?").strip('"') in load_site(site).login_hosts

    yaml_file.write_text(text + "nodse: 1\n", encoding="utf-8")  # a broken edit
    with pytest.raises(ProfileError, match="nodse") as err:
        load_site(site)
    assert err.value.file == str(yaml_file)


def test_a_user_profile_named_like_a_bundled_one_shadows_it(
        user_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    mine = user_dir / "neuron.yaml"
    mine.write_text("extends: neuron\ndescription: my neuron\n", encoding="utf-8")
    assert find_profile("neuron") == mine
    assert shipped.lookup(mine) is None and shipped.header(mine) is None
    assert shipped.lookup(bundled_site_dir() / "neuron.yaml") is not None  # its parent's is
    assert load_site("neuron").description == "my neuron"
    rows = {r["name"]: r for r in json.loads(cli(capsys, "sites", "--json").out)}
    assert rows["neuron"]["description"] == "my neuron"
    assert rows["neuron"]["path"] == str(mine)


def test_a_bundled_profile_whose_parent_is_shadowed_is_validated(user_dir: Path) -> None:
    (user_dir / "sockeye.yaml").write_text("extends: sockeye\nlogin_hosts: ['mine*']\n",
                                           encoding="utf-8")
    child = find_profile("sockeye-slurm")
    assert child == bundled_site_dir() / "sockeye-slurm.yaml"  # the bundled file itself
    assert shipped.lookup(child) is None
    assert load_site("sockeye-slurm").login_hosts == ["mine*"]
    # a bundled profile extending nothing shadowed still answers
    assert shipped.lookup(bundled_site_dir() / "local-tf.yaml") is not None


def test_no_cache_switches_the_shipped_snapshots_off(monkeypatch: pytest.MonkeyPatch) -> None:
    path = bundled_site_dir() / "neuron.yaml"
    assert shipped.lookup(path) is not None and shipped.header(path) is not None
    monkeypatch.setenv("HPCPROV_NO_CACHE", "1")
    assert shipped.lookup(path) is None and shipped.header(path) is None


def test_sites_and_detect_answer_from_the_shipped_snapshots(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    from hpcprov.detect import detect

    monkeypatch.setenv("HPCPROV_NO_CACHE", "1")
    validated = json.loads(cli(capsys, "sites", "--json").out)
    hosts = detect("glogin01.ksc.re.kr")
    assert hosts == ["neuron"]
    monkeypatch.delenv("HPCPROV_NO_CACHE")

    def no_parsing(path: Path) -> None:
        raise AssertionError(f"{path} parsed")

    _no_validation(monkeypatch)
    monkeypatch.setattr("hpcprov.detect.resolve", no_parsing)
    assert json.loads(cli(capsys, "sites", "--json").out) == validated
    assert detect("glogin01.ksc.re.kr") == hosts


@pytest.mark.parametrize("argv", [
    ["setup", "--site", "neuron", "--dry-run"],
    ["jobscript", "--site", "neuron", "-N", "2", "--", "python", "train.py"],
    ["sites", "--json"],
], ids=["setup-dry-run", "jobscript", "sites"])
def test_a_first_run_imports_neither_yaml_nor_pydantic(argv: list[str], tmp_path: Path) -> None:
    """An empty user cache (first run after install): the shipped snapshot answers, and the
    command prints exactly what it prints when the profile is validated."""
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "empty-cache")}
    heavy, out = planned_in_subprocess(argv, env)
    assert heavy == []
    validated_heavy, validated_out = planned_in_subprocess(argv,
                                                           {**env, "HPCPROV_NO_CACHE": "1"})
    assert "pydantic" in validated_heavy and "yaml" in validated_heavy
    assert out == validated_out and out.strip()
