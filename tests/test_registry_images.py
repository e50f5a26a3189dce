"""An image named by a registry reference (issue 34): ``containers.images.NAME`` or
``python.container.source`` as ``docker://nvcr.io/nvidia/pytorch:24.01-py3``, enroot's
``nvcr.io#nvidia/pytorch:24.01-py3``, a bare ``nvcr.io/nvidia/pytorch:24.01-py3``,
``oras://`` or ``library://``. Setup took the reference for a file path: it made a folder
``docker:`` in the directory it ran in and imported about 20 GB there, and the jobs read the
reference (every rank pulled it) or that relative path (from another folder).

Now setup pulls it once into the prefix, spelled for the runtime (apptainer/singularity
``pull PREFIX/images/NAME.sif docker://REGISTRY/IMAGE:TAG``, enroot ``import -o
PREFIX/images/NAME.sqsh docker://REGISTRY#IMAGE:TAG``), and the jobs (singularity/apptainer,
pyxis, edf) read that file; Shifter and podman-hpc pull into their stores and the job names
the same image as setup pulled; what no runtime could pull, or not where the jobs read it,
is refused in one line at the key's line of the profile."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from hpcprov_tests import (
    Stubs,
    assert_one_line_error,
    cli,
    lines_starting,
    one_line_starting,
    words,
    write_profile,
)

from hpcprov.site.image_refs import registry_reference, same_image, spelled

SITE = """\
name: reg
scheduler: slurm
paths: {{prefix: "{prefix}"}}
partitions:
  gpu: {{nodes: 2, cores_per_node: 8, gpus: {{count: 4}}, default: true}}
python:
  backend: {backend}
  container: {{image: pt, source: "{source}"}}
horovod: {{source: none}}
launchers:
  c: {{kind: container, runtime: {launcher}}}
default_launcher: c
containers:
  runtime: {runtime}
  gpu_flag: --nv
  images: {{pt: "{image}"}}
  default_image: pt
"""

NGC = "nvcr.io/nvidia/pytorch:24.01-py3"
# the ways profiles write one Docker/OCI image
DOCKER_SPELLINGS = [f"docker://{NGC}", "nvcr.io#nvidia/pytorch:24.01-py3", NGC,
                    "docker://nvcr.io#nvidia/pytorch:24.01-py3"]


def profile(tmp_path: Path, *, image: str, source: str | None = None,
            runtime: str = "apptainer", launcher: str | None = None,
            backend: str = "container") -> tuple[Path, Path, str]:
    """(profile file, prefix, its text) of a one-image site."""
    prefix = tmp_path / "prefix"
    text = SITE.format(prefix=prefix, image=image, source=source or image, runtime=runtime,
                       launcher=launcher or runtime, backend=backend)
    return write_profile(tmp_path / "sites", "reg", text), prefix, text


def line_of(text: str, needle: str) -> int:
    """The profile line holding ``needle``."""
    (found,) = [i for i, ln in enumerate(text.splitlines(), 1) if needle in ln]
    return found


def setup_script(capsys: pytest.CaptureFixture[str], path: Path, *args: str) -> str:
    res = cli(capsys, "setup", "--site", str(path), *args, "--dry-run")
    assert res.rc == 0, res.err
    return res.out


def step_lines(script: str, step: str) -> list[list[str]]:
    """The words of each line of one step's function."""
    body = script.split(f"step_{step.replace('-', '_')}() {{\n")[1].split("\n}")[0]
    return [words(ln) for ln in body.splitlines()]


def job(capsys: pytest.CaptureFixture[str], path: Path, *args: str) -> str:
    res = cli(capsys, "jobscript", "--site", str(path), "-N", "1", *args, "--", "python",
              "x.py")
    assert res.rc == 0, res.err
    return res.out


# ------------------------------------------------------------- singularity / apptainer


@pytest.mark.parametrize("runtime", ["apptainer", "singularity"])
@pytest.mark.parametrize(("ref", "uri"), [
    *[(ref, f"docker://{NGC}") for ref in DOCKER_SPELLINGS],
    ("debian:12", "docker://debian:12"),
    ("oras://ghcr.io/acme/pytorch:24.01", "oras://ghcr.io/acme/pytorch:24.01"),
    ("library://acme/ml/pytorch:24.01", "library://acme/ml/pytorch:24.01"),
])
def test_apptainer_pulls_once_into_the_prefix_and_the_job_reads_the_file(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, runtime: str, ref: str,
        uri: str) -> None:
    path, prefix, _ = profile(tmp_path, image=ref, runtime=runtime)
    script = setup_script(capsys, path)
    sif = "${PREFIX}/images/pt.sif"
    # the reference is pulled, never made a folder (the relative "docker:/nvcr.io")
    assert step_lines(script, "pull-image") == [["hpcprov_mkdir_parent", sif],
                                                [runtime, "pull", sif, uri]]
    check = step_lines(script, "check-build")[-1]
    assert check[check.index(runtime):check.index(runtime) + 4] == [runtime, "exec", "--nv",
                                                                    sif]
    # the job reads the pulled file, not the reference (which every rank would pull)
    srun = words(one_line_starting(job(capsys, path), "srun "))
    i = srun.index(runtime)
    assert srun[i:i + 4] == [runtime, "exec", "--nv", f"{prefix}/images/pt.sif"]
    assert ref not in srun and uri not in srun


# ----------------------------------------------------------------- enroot: pyxis, edf


@pytest.mark.parametrize("ref", [*DOCKER_SPELLINGS, "debian:12"])
@pytest.mark.parametrize("launcher", ["pyxis", "edf"])
def test_enroot_imports_into_the_prefix_and_pyxis_and_edf_jobs_read_the_sqsh(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, ref: str, launcher: str) -> None:
    path, prefix, _ = profile(tmp_path, image=ref, runtime="enroot", launcher=launcher)
    script = setup_script(capsys, path)
    sqsh = "${PREFIX}/images/pt.sqsh"
    # enroot's own form: docker://[USER@][REGISTRY#]IMAGE[:TAG] (docker://nvcr.io/x would
    # be Docker Hub's image nvcr.io/x)
    uri = "docker://debian:12" if ref == "debian:12" else \
        "docker://nvcr.io#nvidia/pytorch:24.01-py3"
    assert step_lines(script, "import-image")[1:] == [["hpcprov_mkdir_parent", sqsh],
                                                      ["enroot", "import", "-o", sqsh, uri]]
    assert ["enroot", "create", "--name", "hpcprov-pt-check", sqsh] in \
        step_lines(script, "check-build")
    out = job(capsys, path)
    pulled = f"{prefix}/images/pt.sqsh"
    if launcher == "pyxis":  # the .sqsh, not a reference each job would import again
        srun = words(one_line_starting(out, "srun "))
        assert f"--container-image={pulled}" in srun
        assert not [w for w in srun if w.startswith("--container-image=") and w.endswith(
            ref)]
    else:  # the EDF's image: the .sqsh (the engine would take the reference, and cache it
        # per user; the job reads the file setup checked, as pyxis does)
        rows = [words(ln) for ln in lines_starting(out, "hpcprov_edf_row 'image")]
        assert rows == [["hpcprov_edf_row", "image = %s", pulled]]


def test_setup_writes_the_image_under_the_prefix_not_where_it_runs(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, stubs: Stubs) -> None:
    """Run against stub tools that write their output file: the image lands in
    PREFIX/images, and the folder setup ran in stays empty (the issue's relative
    ``docker:/nvcr.io/...`` folder)."""
    for runtime, launcher, step, tool in (("enroot", "pyxis", "import-image", "enroot"),
                                          ("apptainer", "apptainer", "pull-image",
                                           "apptainer")):
        where = tmp_path / runtime
        path, prefix, _ = profile(where, image=f"docker://{NGC}", runtime=runtime,
                                  launcher=launcher)
        # enroot import -o FILE URI; apptainer pull FILE URI: write FILE
        (stubs.bin / tool).write_text('#!/bin/bash\nif [ "$1" = import ]; then out=$3; '
                                      'else out=$2; fi\necho image > "$out"\n')
        (stubs.bin / tool).chmod(0o755)
        script = setup_script(capsys, path)
        proc = stubs.run(script, "prepare", step, name="setup.sh")
        assert proc.returncode == 0, proc.stderr
        suffix = ".sqsh" if runtime == "enroot" else ".sif"
        assert (prefix / "images" / f"pt{suffix}").read_text() == "image\n"
        assert sorted(p.name for p in stubs.work.iterdir()) == ["setup.sh"]


def test_a_job_without_the_pulled_image_stops_naming_the_setup_that_pulls_it(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    # a venv site whose container launcher runs a registry image: setup --container pulls it
    path, prefix, _ = profile(tmp_path, image=f"docker://{NGC}", backend="venv")
    out = job(capsys, path)
    (check,) = lines_starting(out, "[ -r ")
    proc = subprocess.run(["bash", "-c", check], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1
    assert proc.stderr.strip() == (
        f"hpcprov: no image at {prefix}/images/pt.sif: containers.images.pt is the registry "
        f"reference docker://{NGC}, which setup pulls there once and the jobs read (hpcprov "
        "setup --site reg --container pt)")
    # setup --container pt pulls it into that very file
    script = setup_script(capsys, path, "--container", "pt")
    assert step_lines(script, "pull-image")[-1] == [
        "apptainer", "pull", "${PREFIX}/images/pt.sif", f"docker://{NGC}"]
    (prefix / "images").mkdir(parents=True)
    (prefix / "images" / "pt.sif").write_text("")
    proc = subprocess.run(["bash", "-c", check], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr


# --------------------------------------------------------------- shifter, podman-hpc


@pytest.mark.parametrize(("runtime", "name"), [
    ("shifter", f"docker:{NGC}"),   # Shifter's IMAGETYPE:NAME
    ("podman-hpc", NGC),            # podman runs no transport (docker://) from its store
])
def test_shifter_and_podman_hpc_jobs_run_the_image_setup_pulled(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, runtime: str, name: str) -> None:
    for i, ref in enumerate(DOCKER_SPELLINGS):
        path, _, _ = profile(tmp_path / str(i), image=ref, runtime=runtime)
        script = setup_script(capsys, path)
        assert step_lines(script, "pull-image") == [
            ["shifterimg" if runtime == "shifter" else "podman-hpc", "pull", name]], ref
        srun = words(one_line_starting(job(capsys, path), "srun "))
        assert (f"--image={name}" if runtime == "shifter" else name) in srun, ref


# ----------------------------------------------------------------------- refusals


def refused_at(capsys: pytest.CaptureFixture[str], path: Path, text: str, key: str,
               needle: str, *needles: str) -> str:
    """setup refuses in one line, exit 2, at the line of the key (``needle``: its text in
    the profile), naming it; so does site check."""
    line = assert_one_line_error(cli(capsys, "setup", "--site", str(path), "--dry-run"), 2,
                                 *needles)
    where = f"{path}:{line_of(text, needle)}: {key}: "
    assert line.startswith(f"hpcprov: error: {where}"), line
    res = cli(capsys, "site", "check", str(path))
    assert res.rc != 0 and where in res.out + res.err
    return line


def test_a_relative_image_path_is_refused_at_its_line(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path, _, text = profile(tmp_path, image="images/pt.sif", source=f"docker://{NGC}")
    refused_at(capsys, path, text, "containers.images.pt", "images: {pt:",
               "relative path", "relative to which folder", "every job in its own",
               "$PREFIX/images/pt.sif")


@pytest.mark.parametrize("ref", ["oras://ghcr.io/acme/pytorch:24.01",
                                 "library://acme/ml/pytorch:24.01"])
def test_a_reference_enroot_cannot_import_is_refused_at_its_line(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, ref: str) -> None:
    path, _, text = profile(tmp_path, image=ref, runtime="enroot", launcher="pyxis")
    refused_at(capsys, path, text, "python.container.source", "container: {image:",
               "enroot import cannot pull", "docker://[USER@][REGISTRY#]IMAGE[:TAG]")


@pytest.mark.parametrize(("runtime", "launcher", "wants"), [
    ("apptainer", "pyxis", "set containers.runtime: enroot"),
    ("enroot", "apptainer", "set containers.runtime: apptainer"),
    ("apptainer", "shifter", "set containers.runtime: shifter"),
])
def test_a_registry_image_the_jobs_would_not_find_where_setup_pulls_is_refused(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, runtime: str, launcher: str,
        wants: str) -> None:
    path, _, text = profile(tmp_path, image=f"docker://{NGC}", runtime=runtime,
                            launcher=launcher, backend="venv")
    refused_at(capsys, path, text, "containers.images.pt", "images: {pt:",
               f"launcher c runs it with {launcher}", wants)


def test_setup_pulls_the_image_the_jobs_read_or_refuses(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    # two images: setup would pull one into the file the jobs read for the other
    path, _, text = profile(tmp_path / "a", image=f"docker://{NGC}",
                            source="docker://nvcr.io/nvidia/pytorch:25.01-py3")
    refused_at(capsys, path, text, "containers.images.pt", "images: {pt:",
               "another image than python.container.source", "name one image in both")
    # a path to import from and a reference to run: setup pulls nothing
    path, _, text = profile(tmp_path / "b", image=f"docker://{NGC}", source="/apps/pt.sif")
    refused_at(capsys, path, text, "containers.images.pt", "images: {pt:",
               "setup pulls nothing")
    # one image however spelled is one image
    path, _, _ = profile(tmp_path / "c", image=f"nvcr.io#{NGC.split('/', 1)[1]}",
                         source=f"docker://{NGC}")
    assert "pull" in setup_script(capsys, path)


CH = """\
name: ch
scheduler: slurm
partitions:
  cpu: {{nodes: 2, cores_per_node: 8, default: true}}
python:
  backend: container
  container: {{image: torch, source: "{source}"}}
horovod: {{source: none}}
launchers:
  ch: {{kind: container}}
default_launcher: ch
containers:
  runtime: charliecloud
  images: {{torch: "{image}", hub: "docker://{ngc}"}}
  default_image: torch
"""


def test_charliecloud_refuses_a_registry_reference_at_its_line(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    needles = ("registry reference", "Charliecloud runs directory images", "ch-image",
               "ch-convert")
    text = CH.format(source=f"docker://{NGC}", image="/images/torch", ngc=NGC)
    path = write_profile(tmp_path / "a", "ch", text)
    refused_at(capsys, path, text, "python.container.source", "container: {image:", *needles)
    text = CH.format(source="/images/torch", image=f"docker://{NGC}", ngc=NGC)
    path = write_profile(tmp_path / "b", "ch", text)
    refused_at(capsys, path, text, "containers.images.torch", "images: {torch:", *needles)
    # a job asked to run the registry image: refused, not ch-run docker://...
    text = CH.format(source="/images/torch", image="/images/torch", ngc=NGC)
    path = write_profile(tmp_path / "c", "ch", text)
    assert_one_line_error(cli(capsys, "jobscript", "--site", str(path), "-N", "1", "--image",
                              "hub", "--", "python", "x.py"), 2, *needles)


# ------------------------------------------------------------------ the spellings


@pytest.mark.parametrize(("ref", "apptainer", "enroot", "shifter", "podman"), [
    (f"docker://{NGC}", f"docker://{NGC}", "docker://nvcr.io#nvidia/pytorch:24.01-py3",
     f"docker:{NGC}", NGC),
    ("docker://user@nvcr.io#nvidia/pytorch:24.01-py3", f"docker://{NGC}",
     "docker://user@nvcr.io#nvidia/pytorch:24.01-py3", f"docker:{NGC}", NGC),
    (f"docker:{NGC}", f"docker://{NGC}", "docker://nvcr.io#nvidia/pytorch:24.01-py3",
     f"docker:{NGC}", NGC),
    ("localhost:5000/torch:2", "docker://localhost:5000/torch:2",
     "docker://localhost:5000#torch:2", "docker:localhost:5000/torch:2",
     "localhost:5000/torch:2"),
    ("acme/torch:2", "docker://acme/torch:2", "docker://acme/torch:2", "docker:acme/torch:2",
     "docker.io/acme/torch:2"),
    ("debian:12", "docker://debian:12", "docker://debian:12", "docker:debian:12",
     "docker.io/library/debian:12"),
    ("oras://ghcr.io/a/b:1", "oras://ghcr.io/a/b:1", None, None, None),
    ("shub://a/b", "shub://a/b", None, None, None),
    ("dockerd://torch:2", None, "dockerd://torch:2", None, None),
])
def test_each_runtime_spells_a_reference_its_own_way(
        ref: str, apptainer: str | None, enroot: str | None, shifter: str | None,
        podman: str | None) -> None:
    assert registry_reference(ref)
    assert spelled(ref, "apptainer") == spelled(ref, "singularity") == apptainer
    assert spelled(ref, "enroot") == spelled(ref, "pyxis") == spelled(ref, "edf") == enroot
    assert spelled(ref, "shifter") == shifter
    assert spelled(ref, "podman-hpc") == podman
    assert spelled(ref, "charliecloud") is None


@pytest.mark.parametrize(("ref", "registry"), [
    ("nvcr.io#nvidia/pytorch:24.01-py3", True),    # enroot's and pyxis's form
    ("nvcr.io#nvidia/pytorch", True),
    (f"docker:{NGC}", True),                        # Shifter's
    ("/apps/images/pytorch.sif", False),
    ("$SCRATCH/images/pytorch_*.sif", False),
    ("images/pt.sif", False),
])
def test_what_a_registry_reference_is(ref: str, registry: bool) -> None:
    assert registry_reference(ref) is registry


def test_one_image_however_spelled() -> None:
    assert same_image(f"docker://{NGC}", "nvcr.io#nvidia/pytorch:24.01-py3")
    assert same_image("debian:12", "docker://docker.io/library/debian:12")
    assert not same_image(f"docker://{NGC}", "docker://nvcr.io/nvidia/pytorch:25.01-py3")
