"""A profile that extends another can drop what it inherits: ``NAME: null`` removes an
inherited launcher, image or annotation, and a partition's ``unset_options`` its inherited
options (in options ``null`` is a flag without a value). Removing what is not inherited, or
the default launcher without naming another, is an error at the child's line."""

from __future__ import annotations

from pathlib import Path

import pytest
from hpcprov_tests import assert_one_line_error, cli, write_profile

from hpcprov.site.profiles import check_file, load_site

PARENT = """\
extends: sockeye
name: parent
launchers:
  extra: {kind: torchrun}
containers:
  runtime: enroot
  images: {a: /img/a.sqsh, b: /img/b.sqsh}
  annotations: {k.one: "1", k.two: "2"}
partitions:
  gpu:
    options: {exclusive: null, constraint: gpu}
"""

CHILD = """\
extends: parent.yaml
name: child
launchers: {extra: null}
containers:
  images: {b: null}
  annotations: {k.two: null}
partitions:
  gpu:
    unset_options: [constraint]
"""


def test_a_child_drops_inherited_launchers_images_annotations_and_options(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    write_profile(tmp_path, "parent", PARENT)
    child = write_profile(tmp_path, "child", CHILD)
    res = cli(capsys, "site", "check", str(child))
    assert res.rc == 0 and res.out.strip() == f"{child}: ok", res
    site = load_site(str(child))
    assert set(site.launchers) == {"mpirun", "torchrun"}
    assert dict(site.containers.images) == {"a": "/img/a.sqsh"}
    assert dict(site.containers.annotations) == {"k.one": "1"}
    assert dict(site.partitions["gpu"].options) == {"exclusive": None}  # the flag stays
    # a grandchild can give an option back; the removal is not inherited
    grand = write_profile(tmp_path, "grand", (
        "extends: child.yaml\nname: grand\n"
        "partitions:\n  gpu:\n    options: {constraint: big}\n"))
    assert dict(load_site(str(grand)).partitions["gpu"].options) == {
        "exclusive": None, "constraint": "big"}


@pytest.mark.parametrize(("text", "line", "needle"), [
    ("launchers: {nope: null}\n", 3, "no profile this one extends has one named 'nope'"),
    ("containers:\n  images: {c: null}\n", 4, "named 'c'"),
    ("containers:\n  annotations:\n    k.three: null\n", 5, "named 'k.three'"),
    ("partitions:\n  gpu:\n    unset_options: [exclusive, qos]\n", 5,
     "an option 'qos' to unset"),
    ("launchers: {mpirun: null}\n", 3, "removes the inherited default_launcher"),
])
def test_removing_what_is_not_inherited_is_an_error_at_its_line(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, text: str, line: int,
        needle: str) -> None:
    write_profile(tmp_path, "parent", PARENT)
    child = write_profile(tmp_path, "child", f"extends: parent.yaml\nname: child\n{text}")
    (err,) = check_file(child)
    assert (err.file, err.line) == (str(child), line) and needle in str(err), str(err)
    assert_one_line_error(cli(capsys, "site", "check", str(child)), 2, f"{child}:{line}:")


def test_the_default_launcher_can_go_when_the_child_names_another(tmp_path: Path) -> None:
    write_profile(tmp_path, "parent", PARENT)
    child = write_profile(tmp_path, "child", (
        "extends: parent.yaml\nname: child\n"
        "launchers: {mpirun: null}\ndefault_launcher: torchrun\n"))
    site = load_site(str(child))
    assert site.default_launcher == "torchrun" and "mpirun" not in site.launchers


def test_a_removal_in_a_profile_that_extends_nothing_is_an_error(tmp_path: Path) -> None:
    text = (Path(__file__).resolve().parent.parent / "sites" / "sockeye.yaml").read_text()
    path = write_profile(tmp_path, "base", text + "containers:\n  images: {x: null}\n")
    (err,) = check_file(path)
    assert err.file == str(path) and "named 'x'" in str(err)
