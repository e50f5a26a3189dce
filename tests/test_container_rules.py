"""Containers by the site's own rules (issue 45, defects 11, 12, 13 and the container parts of
20): ``containers.mounts`` in every container line of every runtime and launcher (or the
profile refused at its line), a run folder validate's containers cannot see refused before
anything is submitted, a host launcher on a site whose Python lives only in the image
warned, ``validate --env`` read for a container site's image, ``doctor`` on a container
prefix, a container launcher with no runtime and ``add_horovod`` refused at their lines."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hpcprov_tests import (
    assert_one_line_error,
    cli,
    contains_run,
    one_line_starting,
    words,
    write_profile,
)

# the mounts every runtime must carry: one under a variable (SRC alone), one to another
# place, one with an option
MOUNTS = ["$SCRATCH", "/data:/in/data", "/src:/dst:ro"]
SPELLED = {
    "apptainer": ["-B", "${SCRATCH}", "-B", "/data:/in/data", "-B", "/src:/dst:ro"],
    "singularity": ["-B", "${SCRATCH}", "-B", "/data:/in/data", "-B", "/src:/dst:ro"],
    # podman and Shifter take no mount without its destination
    "podman-hpc": ["-v", "${SCRATCH}:${SCRATCH}", "-v", "/data:/in/data", "-v",
                   "/src:/dst:ro"],
    "shifter": ["--volume=${SCRATCH}:${SCRATCH};/data:/in/data;/src:/dst:ro"],
    # ch-run takes no mount options (refused at the line otherwise: below)
    "charliecloud": ["--bind=${SCRATCH}", "--bind=/data:/in/data"],
    "pyxis": ["--container-mounts=${SCRATCH},/data:/in/data,/src:/dst:ro"],
}
NGC = "docker://nvcr.io/nvidia/pytorch:24.01-py3"
COMMAND_LINE = ("apptainer", "singularity", "podman-hpc", "shifter", "charliecloud")

SLURM = """\
name: mt
scheduler: slurm
partitions:
  cpu: {{nodes: 4, cores_per_node: 8, default: true}}
python:
  backend: container
  container: {{image: torch, source: {image}}}
horovod: {{source: none}}
launchers:
{launchers}
default_launcher: box
containers:
  runtime: {setup_runtime}
  images: {{torch: {image}}}
  default_image: torch
  mounts: {mounts}
"""

PBS = SLURM.replace("scheduler: slurm", "scheduler: pbs")


def _profile(tmp_path: Path, template: str, runtime: str, launchers: dict[str, str],
             mounts: list[str]) -> Path:
    image = {"charliecloud": "/images/torch", "shifter": NGC, "podman-hpc": NGC}.get(
        runtime, "/images/torch.sif")  # Shifter and podman-hpc: an image of their store
    setup_runtime = {"pyxis": "enroot", "edf": "enroot"}.get(runtime, runtime)
    text = template.format(
        image=image, setup_runtime=setup_runtime, mounts=json.dumps(mounts),
        launchers="\n".join(f"  {name}: {spec}" for name, spec in launchers.items()))
    return write_profile(tmp_path, "mt", text)


def _launch(capsys: pytest.CaptureFixture[str], path: Path, launcher: str) -> str:
    res = cli(capsys, "launch", "--site", str(path), "-N", "2", "-l", launcher, "--",
              "python", "x.py")
    assert res.rc == 0, res.err
    return res.out


# (scheduler's template, launcher kind as the profile says it, the line's first word)
LAUNCHERS = {
    "slurm-container": (SLURM, "{{kind: container, runtime: {r}}}", "srun "),
    "slurm-srun": (SLURM, "{{kind: srun, runtime: {r}}}", "srun "),
    "slurm-ibrun": (SLURM, "{{kind: ibrun, runtime: {r}}}", "ibrun "),
    "slurm-torchrun": (SLURM, "{{kind: torchrun, runtime: {r}}}", "srun "),
    "pbs-container": (PBS, "{{kind: container, runtime: {r}}}", "mpiexec "),
    "pbs-mpiexec": (PBS, "{{kind: mpiexec, runtime: {r}}}", "mpiexec "),
    "slurm-mpirun": (SLURM, "{{kind: mpirun, runtime: {r}}}", "mpirun "),
    "pbs-torchrun": (PBS, "{{kind: torchrun, runtime: {r}}}", "mpiexec "),
}


@pytest.mark.parametrize("runtime", COMMAND_LINE)
@pytest.mark.parametrize("case", list(LAUNCHERS))
def test_mounts_reach_every_container_line_of_every_runtime_and_launcher(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, runtime: str, case: str) -> None:
    """Defect 11: Apptainer/Singularity under mpiexec, ibrun, srun and torchrun inside the
    image (and podman-hpc, Shifter) wrote no mount at all."""
    template, spec, first = LAUNCHERS[case]
    mounts = MOUNTS[:2] if runtime == "charliecloud" else MOUNTS
    launchers = {"box": spec.format(r=runtime)}
    if template is PBS:  # the site's MPI launcher starts the container's tasks
        launchers["mpi"] = "{kind: mpiexec}"
    path = _profile(tmp_path, template, runtime, launchers, mounts)
    assert cli(capsys, "site", "check", str(path)).rc == 0
    line = one_line_starting(_launch(capsys, path, "box"), first, shim=True)
    w = words(line, shim=True)
    assert contains_run(w, SPELLED[runtime]), (SPELLED[runtime], line)
    # the mounts and the image (Shifter's --image= is a flag as its --volume=) come before
    # the rank's command
    image = next(i for i, word in enumerate(w) if "/images/torch" in word or "pytorch" in word)
    assert max(w.index(SPELLED[runtime][0]), image) < w.index("x.py")
    if runtime != "shifter":
        assert w.index(SPELLED[runtime][0]) < image


def test_srun_runtimes_carry_the_mounts(capsys: pytest.CaptureFixture[str],
                                        tmp_path: Path) -> None:
    path = _profile(tmp_path, SLURM, "pyxis", {"box": "{kind: container, runtime: pyxis}"},
                    MOUNTS)
    line = one_line_starting(_launch(capsys, path, "box"), "srun ", shim=True)
    assert contains_run(words(line, shim=True), SPELLED["pyxis"])
    path = _profile(tmp_path, SLURM, "edf", {"box": "{kind: container, runtime: edf}"},
                    MOUNTS)
    out = _launch(capsys, path, "box")
    row = one_line_starting(out, "hpcprov_edf_row 'mounts", shim=True)
    assert words(row)[2:] == ["${SCRATCH}:${SCRATCH}", "/data:/in/data", "/src:/dst:ro"]


@pytest.mark.parametrize(("args", "want"), [
    (["--net=host"], ["podman-hpc", "run", "--rm", "--net=host"]),
    (["run", "-i"], ["podman-hpc", "run", "-i"]),  # the verb said: as written
])
def test_podman_hpc_args_keep_its_verb(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                       args: list[str], want: list[str]) -> None:
    """Defect 11: any args replaced ``run --rm`` (``podman-hpc --net=host IMAGE``)."""
    spec = "{kind: container, runtime: podman-hpc, args: " + json.dumps(args) + "}"
    path = _profile(tmp_path, SLURM, "podman-hpc", {"box": spec}, [])
    w = words(one_line_starting(_launch(capsys, path, "box"), "srun ", shim=True), shim=True)
    start = w.index("podman-hpc")
    assert w[start:start + len(want)] == want
    assert w[start + len(want)] == "nvcr.io/nvidia/pytorch:24.01-py3"


def test_apptainer_flags_without_a_verb_keep_exec(capsys: pytest.CaptureFixture[str],
                                                  tmp_path: Path) -> None:
    spec = "{kind: container, runtime: apptainer, args: [--cleanenv]}"
    path = _profile(tmp_path, SLURM, "apptainer", {"box": spec}, [])
    w = words(one_line_starting(_launch(capsys, path, "box"), "srun ", shim=True), shim=True)
    start = w.index("apptainer")
    assert w[start:start + 4] == ["apptainer", "exec", "--cleanenv", "/images/torch.sif"]


def line_of(text: str, needle: str) -> int:
    return next(i for i, ln in enumerate(text.splitlines(), 1) if needle in ln)


def test_charliecloud_mount_options_are_refused_at_their_line(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = _profile(tmp_path, SLURM, "charliecloud",
                    {"box": "{kind: container, runtime: charliecloud}"}, MOUNTS)
    res = cli(capsys, "site", "check", str(path))
    text = path.read_text()
    assert res.rc != 0
    assert f"{path}:{line_of(text, 'mounts:')}: containers.mounts.2: '/src:/dst:ro'" \
        in res.out + res.err
    assert "takes no mount options" in res.out + res.err


# --------------------------------------------------------------- 12: validate's run folder


def _validate(capsys: pytest.CaptureFixture[str], path: Path, workdir: str,
              *more: str) -> object:
    return cli(capsys, "validate", "--site", str(path), "--dry-run", "-N", "2",
               "--workdir", workdir, *more)


@pytest.mark.parametrize(("runtime", "mounts", "own", "workdir", "seen"), [
    ("apptainer", ["/scratch"], None, "/lus/u/run", False),   # nothing mounts /lus
    ("apptainer", ["/scratch"], None, "/scratch/u/run", True),  # a mount above it
    ("apptainer", ["/lus/u/run"], None, "/lus/u/run", True),  # the folder itself
    ("apptainer", ["/lus:/mnt"], None, "/lus/u/run", False),  # seen at another path
    ("apptainer", [], None, "/tmp/hpcprov-never/run", True),  # Apptainer binds /tmp
    ("apptainer", [], [], "/tmp/hpcprov-never/run", False),  # ... unless the site says not
    ("shifter", [], None, "/tmp/hpcprov-never/run", False),  # Shifter: the site's mounts
    ("shifter", [], ["/lus"], "/lus/u/run", True),
    ("pyxis", ["/lus/u:/lus/u"], None, "/lus/u/run", True),
])
def test_validate_refuses_a_run_folder_the_container_cannot_see(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, runtime: str, mounts: list[str],
        own: list[str] | None, workdir: str, seen: bool) -> None:
    """Defect 12: every check failed with "can't open file", and nothing said so before."""
    path = _profile(tmp_path, SLURM, runtime, {"box": f"{{kind: container, runtime: {runtime}}}"},
                    mounts)
    if own is not None:
        path.write_text(path.read_text() + f"  runtime_mounts: {json.dumps(own)}\n")
    res = _validate(capsys, path, workdir)
    if seen:
        assert res.rc == 0, res.err
        return
    line = assert_one_line_error(res, 2, f"{runtime} containers do not see {workdir}",
                                 "containers.mounts", "containers.runtime_mounts",
                                 "nothing was submitted")
    assert "Traceback" not in line


def test_a_host_launcher_does_not_ask_for_a_mount(capsys: pytest.CaptureFixture[str],
                                                  tmp_path: Path) -> None:
    text = SLURM.format(image="/images/torch.sif", setup_runtime="apptainer", mounts="[]",
                        launchers="  box: {kind: srun}")
    text = text.replace("backend: container", "backend: venv")
    text = text.replace("  container: {image: torch, source: /images/torch.sif}\n", "")
    path = write_profile(tmp_path, "host", text)
    assert _validate(capsys, path, "/lus/u/run").rc == 0


# ----------------------------------------------- 13: Python only in the image, --env


def test_a_host_launcher_on_a_container_only_site_is_warned_at_its_line(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = _profile(tmp_path, SLURM, "apptainer", {
        "box": "{kind: container, runtime: apptainer}", "host": "{kind: srun}",
        "hvd": "{kind: horovodrun}", "inside": "{kind: srun, runtime: apptainer}"}, [])
    res = cli(capsys, "site", "check", str(path))
    assert res.rc == 0 and res.out.strip() == f"{path}: ok", res.out
    text = path.read_text()
    warned = [ln for ln in res.err.splitlines() if "host's python" in ln]
    assert len(warned) == 2, res.err
    assert warned[0].startswith(f"hpcprov: warning: {path}:{line_of(text, '  host:')}: ")
    assert "launchers.host (srun)" in warned[0] and "set launchers.host.runtime" in warned[0]
    assert f"{path}:{line_of(text, '  hvd:')}: " in warned[1]
    assert "use a launcher of kind container" in warned[1]


def test_validate_env_reads_a_container_sites_image_from_that_prefix(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """Defect 13: --env PREFIX was dropped for a container site (the site's prefix read)."""
    ref = "docker://nvcr.io/nvidia/pytorch:24.01-py3"
    path = _profile(tmp_path, SLURM, "apptainer", {"box": "{kind: container, runtime: apptainer}"},
                    []).rename(tmp_path / "mt.yaml")
    path.write_text(path.read_text().replace("/images/torch.sif", f'"{ref}"'))
    prefix = tmp_path / "mine"
    res = _validate(capsys, path, "/tmp/hpcprov-never/run", "--env", str(prefix))
    assert res.rc == 0, res.err
    lines = [ln for ln in res.out.splitlines() if ln.startswith("srun ") and "apptainer" in ln]
    assert lines and all(f"{prefix}/images/torch.sif" in ln for ln in lines)
    # not provisioned there: one line before anything is written
    res = cli(capsys, "validate", "--site", str(path), "-N", "2", "--workdir",
              str(tmp_path / "run"), "--env", str(prefix))
    assert_one_line_error(res, 2, f"{prefix} is not a provisioned environment", "setup")
    assert not (tmp_path / "run").exists()


def test_validate_env_is_refused_where_no_prefix_holds_the_image(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = _profile(tmp_path, SLURM, "apptainer", {"box": "{kind: container, runtime: apptainer}"},
                    [])
    res = _validate(capsys, path, "/tmp/hpcprov-never/run", "--env", str(tmp_path / "p"))
    assert_one_line_error(res, 2, "/images/torch.sif", "no prefix holds", "drop --env")


# ------------------------------------------------------ 20: container parts


@pytest.mark.parametrize(("setup_runtime", "why"), [
    ("null", "has no runtime to start its ranks"),
    ("enroot", "starts no ranks: set launchers.box.runtime: pyxis"),
])
def test_a_container_launcher_without_a_runtime_is_refused_at_its_line(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, setup_runtime: str,
        why: str) -> None:
    """It used to end in "container runtime None is unknown" when a job was written."""
    text = SLURM.format(image="/images/torch.sif", setup_runtime=setup_runtime, mounts="[]",
                        launchers="  srun: {kind: srun}\n  box: {kind: container}")
    text = text.replace("python:\n  backend: container\n  container: "
                        "{image: torch, source: /images/torch.sif}\n", "")
    text = text.replace("default_launcher: box", "default_launcher: srun")
    path = write_profile(tmp_path, "nr", text)
    where = f"{path}:{line_of(text, '  box:')}: launchers.box: "
    res = cli(capsys, "site", "check", str(path))
    assert res.rc != 0 and where in res.out + res.err and why in res.out + res.err
    line = assert_one_line_error(cli(capsys, "launch", "--site", str(path), "-l", "box", "--",
                                     "python", "x.py"), 2, why)
    assert where in line and "None" not in line


def test_add_horovod_is_refused_where_setup_cannot_install_into_the_image(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """add_horovod was honoured only with enroot: with another runtime the image lacked
    Horovod silently."""
    path = _profile(tmp_path, SLURM, "apptainer", {"box": "{kind: container, runtime: apptainer}"},
                    [])
    text = path.read_text().replace("source: /images/torch.sif}",
                                    "source: /images/torch.sif, add_horovod: true}")
    path.write_text(text)
    where = f"{path}:{line_of(text, 'add_horovod')}: python.container.add_horovod: "
    line = assert_one_line_error(cli(capsys, "setup", "--site", str(path), "--dry-run"), 2,
                                 "only with containers.runtime: enroot")
    assert where in line
    # with enroot setup installs it into the image
    ok = write_profile(tmp_path, "tech", "extends: technion\nname: tech\n"
                       "python: {container: {add_horovod: true}}\n")
    res = cli(capsys, "setup", "--site", str(ok), "--dry-run")
    assert res.rc == 0 and "add-horovod" in res.out.replace("_", "-"), res.err


def test_doctor_checks_a_container_prefix(capsys: pytest.CaptureFixture[str],
                                          tmp_path: Path) -> None:
    """doctor sourced PREFIX/activate and ran its python, which a container site has not:
    every container prefix failed. Now: the image the jobs read, the runtime's module."""
    from hpcprov.provision.journal import Journal
    from hpcprov.provision.manifest import build_manifest, write_manifest
    from hpcprov.site.profiles import load_site

    ref = "docker://nvcr.io/nvidia/pytorch:24.01-py3"
    path = _profile(tmp_path, SLURM, "apptainer", {"box": "{kind: container, runtime: apptainer}"},
                    [])
    path.write_text(path.read_text().replace("/images/torch.sif", f'"{ref}"'))
    prefix = tmp_path / "prefix"
    (prefix / ".hpcprov").mkdir(parents=True)
    site = load_site(str(path))
    write_manifest(build_manifest(site, str(path), prefix,
                                  Journal(prefix / ".hpcprov" / "journal.json")), prefix)
    res = cli(capsys, "doctor", "--site", str(path), "--prefix", str(prefix))
    assert res.rc != 0 and f"no readable image at {prefix}/images/torch.sif" in res.out, \
        res.out + res.err
    (prefix / "images").mkdir()
    (prefix / "images" / "torch.sif").write_bytes(b"sif")
    res = cli(capsys, "doctor", "--site", str(path), "--prefix", str(prefix))
    assert res.rc == 0, res.out + res.err
    assert "activate" not in res.out and "is readable" in res.out


def test_a_mount_under_a_variable_not_set_here_is_a_warning_not_a_refusal(
        capsys: pytest.CaptureFixture[str], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The variable may hold the run folder on the nodes: validate cannot tell, and says so."""
    monkeypatch.delenv("HPCPROV_TEST_WORK", raising=False)
    path = _profile(tmp_path, SLURM, "apptainer",
                    {"box": "{kind: container, runtime: apptainer}"}, ["$HPCPROV_TEST_WORK"])
    res = _validate(capsys, path, "/lus/u/run")
    assert res.rc == 0, res.err
    assert "$HPCPROV_TEST_WORK is not set here" in res.err and "warning" in res.err
    monkeypatch.setenv("HPCPROV_TEST_WORK", "/lus")
    res = _validate(capsys, path, "/lus/u/run")
    assert res.rc == 0 and "HPCPROV_TEST_WORK" not in res.err
    monkeypatch.setenv("HPCPROV_TEST_WORK", "/elsewhere")
    assert_one_line_error(_validate(capsys, path, "/lus/u/run"), 2,
                          "apptainer containers do not see /lus/u/run")
