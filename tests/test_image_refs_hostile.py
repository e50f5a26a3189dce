"""A registry reference the shell or the runtime's command would change (issue 41, defect
7): setup pulled ``docker://nvcr.io/nvidia/pytorch:$TAG`` as written (one quoted word) while
the jobs and setup's own check ran it expanded (a ``Template``); ``*``, ``?`` and ``[``
became patterns of file names in the job's folder; a part starting with ``-`` became an
option of ``enroot import`` or ``podman-hpc pull``. Now :func:`hpcprov.site.image_refs.parse`
refuses a text written as a registry reference that is none as written (and a Docker/OCI
image that is none by its grammar), in one line: at the key's line of the profile, or for
``--image`` on the command line."""

from __future__ import annotations

from pathlib import Path

import pytest
from hpcprov_tests import Result, assert_one_line_error, cli, write_profile

from hpcprov.core.errors import UsageError
from hpcprov.site.image_refs import BadReference, parse, registry_reference, spelled

SITE = """\
name: hostile
scheduler: slurm
paths: {{prefix: "{prefix}"}}
partitions:
  gpu: {{nodes: 2, cores_per_node: 8, gpus: {{count: 4}}, default: true}}
python:
  backend: container
  container: {{image: pt, source: "{source}"}}
horovod: {{source: none}}
launchers:
  c: {{kind: container, runtime: {launcher}}}
default_launcher: c
containers:
  runtime: {runtime}
  gpu_flag: --nv
  images: {{pt: "{image}", hub: "{hub}"}}
  default_image: pt
"""
NGC = "docker://nvcr.io/nvidia/pytorch:24.01-py3"

# (test id, a reference that is none as written, what the refusal says)
REFUSED = [
    ("variable", "docker://nvcr.io/nvidia/pytorch:$TAG", "holds '$'"),
    ("braced-variable", "docker://${REGISTRY}/nvidia/pytorch:24.01-py3", "holds '$'"),
    ("backquote", "docker://nvcr.io/`id`/pytorch:24.01-py3", "holds '`'"),
    ("shifter-variable", "docker:nvcr.io/nvidia/pytorch:$TAG", "holds '$'"),
    ("star", "docker://nvcr.io/nvidia/pytorch:24.*", "holds '*'"),
    ("question-mark", "docker://nvcr.io/nvidia/pytorch:24.0?-py3", "holds '?'"),
    ("bracket", "oras://ghcr.io/acme/pytorch:2[45]", "holds '['"),
    ("enroot-star", "docker://nvcr.io#nvidia/pytorch:*", "holds '*'"),
    ("space", "docker://nvcr.io/nvidia/pytorch:24.01-py3 latest", "holds ' '"),
    ("dash-registry", "docker://-o.io/nvidia/pytorch:24.01-py3", "starts with '-'"),
    ("dash-shifter", "docker:--help.io/nvidia/pytorch:24.01-py3", "starts with '-'"),
    ("dash-enroot-user", "docker://-u@nvcr.io#nvidia/pytorch:24.01-py3", "starts with '-'"),
    ("dash-image", "docker://-x", "starts with '-'"),
    ("dash-oras", "oras://-x/pytorch:1", "starts with '-'"),
    ("uppercase-name", "docker://nvcr.io/NVIDIA/pytorch:24.01-py3", "no Docker/OCI image name"),
    ("short-digest", "docker://nvcr.io/nvidia/pytorch@sha256:1234", "no Docker/OCI image name"),
    ("no-image", "docker://", "names no image"),
]
# only the command line can carry these (the profile loader refuses control characters in
# every value already)
CONTROL = [
    ("newline", "docker://nvcr.io/nvidia/pytorch:24.01-py3\nlatest", "holds '\\n'"),
    ("tab", "docker://nvcr.io/nvidia/pytorch:24.01-py3\tlatest", "holds '\\t'"),
    ("escape", "docker://nvcr.io/nvidia/pytorch:24.01-py3\x1b[2J", "holds '\\x1b'"),
]


def ids(cases: list[tuple[str, str, str]]) -> list[str]:
    return [case[0] for case in cases]


def profile(tmp_path: Path, *, source: str = NGC, image: str = "/images/pt.sif",
            hub: str = NGC, runtime: str = "apptainer", launcher: str | None = None
            ) -> tuple[Path, str]:
    text = SITE.format(prefix=tmp_path / "prefix", source=source, image=image, hub=hub,
                       runtime=runtime, launcher=launcher or runtime)
    return write_profile(tmp_path / "sites", "hostile", text), text


def line_of(text: str, needle: str) -> int:
    (found,) = [i for i, ln in enumerate(text.splitlines(), 1) if needle in ln]
    return found


def refused_at(capsys: pytest.CaptureFixture[str], path: Path, text: str, key: str,
               needle: str, ref: str, why: str) -> None:
    """setup and site check refuse in one line, at the key's line, naming the reference
    and why."""
    line = assert_one_line_error(cli(capsys, "setup", "--site", str(path), "--dry-run"), 2,
                                 repr(ref), "refused as a registry reference", why)
    where = f"{path}:{line_of(text, needle)}: {key}: "
    assert line.startswith(f"hpcprov: error: {where}"), line
    res = cli(capsys, "site", "check", str(path))
    assert res.rc != 0 and where in res.out + res.err


@pytest.mark.parametrize(("ref", "why"), [c[1:] for c in REFUSED], ids=ids(REFUSED))
def test_the_source_is_refused_at_its_line(capsys: pytest.CaptureFixture[str],
                                            tmp_path: Path, ref: str, why: str) -> None:
    path, text = profile(tmp_path, source=ref)
    refused_at(capsys, path, text, "python.container.source", "container: {image:", ref, why)


@pytest.mark.parametrize(("ref", "why"), [c[1:] for c in REFUSED], ids=ids(REFUSED))
def test_an_image_entry_is_refused_at_its_line(capsys: pytest.CaptureFixture[str],
                                               tmp_path: Path, ref: str, why: str) -> None:
    """An entry no setup pulls (the jobs take it with --image hub) is refused too."""
    path, text = profile(tmp_path, hub=ref)
    refused_at(capsys, path, text, "containers.images.hub", "images: {pt:", ref, why)


@pytest.mark.parametrize(("runtime", "launcher"), [("shifter", "shifter"),
                                                  ("podman-hpc", "podman-hpc"),
                                                  ("enroot", "pyxis")])
def test_the_stores_and_enroot_refuse_a_variable_and_a_dash(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, runtime: str,
        launcher: str) -> None:
    """The defect's own cases: Shifter pulled $TAG literally and checked it expanded
    (--image=...); podman-hpc pull and enroot import took -o.io/... as an option."""
    for i, (ref, why) in enumerate([("docker://nvcr.io/nvidia/pytorch:$TAG", "holds '$'"),
                                    ("docker://-o.io#nvidia/pytorch:24.01-py3",
                                     "starts with '-'")]):
        path, _ = profile(tmp_path / str(i), source=ref, image=ref, hub=NGC,
                          runtime=runtime, launcher=launcher)
        line = assert_one_line_error(cli(capsys, "setup", "--site", str(path), "--dry-run"),
                                     2, repr(ref), why)
        assert f"{path}:" in line


def job(capsys: pytest.CaptureFixture[str], path: Path, image: str) -> Result:
    return cli(capsys, "jobscript", "--site", str(path), "-N", "1", "--image", image, "--",
               "python", "x.py")


@pytest.mark.parametrize(("ref", "why"), [c[1:] for c in REFUSED + CONTROL],
                         ids=ids(REFUSED + CONTROL))
def test_image_on_the_command_line_is_refused_in_one_line(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, ref: str, why: str) -> None:
    path, _ = profile(tmp_path)
    line = assert_one_line_error(job(capsys, path, ref), 2, repr(ref),
                                 "refused as a registry reference", why)
    assert line.startswith("hpcprov: error: image "), line


@pytest.mark.parametrize("runtime", ["shifter", "podman-hpc"])
def test_image_on_the_command_line_is_refused_for_the_stores(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, runtime: str) -> None:
    path, _ = profile(tmp_path, source=NGC, image=NGC, runtime=runtime)
    ref = "docker://nvcr.io/nvidia/pytorch:$TAG"
    assert_one_line_error(job(capsys, path, ref), 2, repr(ref), "holds '$'")


@pytest.mark.parametrize(("ref", "why"), [c[1:] for c in REFUSED + CONTROL],
                         ids=ids(REFUSED + CONTROL))
def test_parse_refuses_it_and_every_reader_with_it(ref: str, why: str) -> None:
    with pytest.raises(BadReference, match="refused as a registry reference") as e:
        parse(ref)
    assert why in str(e.value)
    assert isinstance(e.value, UsageError) and isinstance(e.value, ValueError)
    for read in (registry_reference, lambda r: spelled(r, "enroot")):
        with pytest.raises(BadReference):
            read(ref)


def test_a_long_reference_is_shown_bounded() -> None:
    ref = "docker://nvcr.io/nvidia/pytorch:" + "x" * 5000 + "$TAG"
    with pytest.raises(BadReference) as e:
        parse(ref)
    assert len(str(e.value)) < 600 and "..." in str(e.value)


# controls: what is a reference as written, and paths (which a job's shell does expand)
@pytest.mark.parametrize("ref", [
    NGC, "nvcr.io#nvidia/pytorch:24.01-py3", "docker://user.name@nvcr.io#nvidia/pytorch:24.01",
    "docker:nvcr.io/nvidia/pytorch:24.01-py3", "localhost:5000/torch:2", "debian:12",
    "acme/torch_x__y:v1.2-rc_3", "docker://ghcr.io/acme/torch@sha256:" + "a" * 64,
    "docker://ghcr.io/acme/torch:2@sha256:" + "0" * 64, "oras://ghcr.io/acme/pytorch:24.01",
    "library://acme/ml/pytorch:24.01", "shub://a/b", "dockerd://torch:2",
    "https://example.org/images/pytorch-24.01.sif",
])
def test_references_as_written_still_are(ref: str) -> None:
    assert parse(ref) is not None


@pytest.mark.parametrize("path", ["$SCRATCH/images/pytorch_*.sif", "/apps/img-[0-9].sif",
                                  "~/images/pt.sif", "/apps/my images/pt.sif"])
def test_paths_are_no_references_and_are_not_refused(path: str) -> None:
    assert parse(path) is None
