"""Charliecloud (``ch-run``) as a container runtime: the launch words of a launcher that
starts its ranks through it (a container launcher, srun with ``runtime: charliecloud``), and
the setup steps of a site whose ``containers.runtime`` is charliecloud (a directory image:
checked where it lies, never pulled; a registry reference refused).

The generated lines are run with bash against stub tools (srun, ch-run) that record what
they were given, so the tests check what a shell does with them."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest
from hpcprov_tests import (
    REPO,
    Stubs,
    assert_one_line_error,
    cli,
    one_line_starting,
    words,
    write_profile,
)

from hpcprov.provision.plan import registry_reference

SITE = """\
name: cc
scheduler: slurm
partitions:
  cpu: {{nodes: 2, cores_per_node: 8, default: true}}
python:
  backend: container
  container: {{image: torch, source: "{source}"}}
horovod: {{source: none}}
launchers:
  ch: {{kind: container}}                         # containers.runtime: charliecloud
  srun-ch: {{kind: srun, runtime: charliecloud}}
default_launcher: ch
containers:
  runtime: charliecloud
  images: {{torch: "{image}", hub: "docker://nvcr.io/nvidia/pytorch:24.01-py3"}}
  default_image: torch
  mounts: ["{shared}", "{data}:/data"]
"""


def profile(tmp_path: Path, source: str | None = None) -> tuple[Path, Path, Path]:
    """(profile, image directory, shared directory) of a Charliecloud site under tmp_path."""
    image, shared = tmp_path / "images" / "torch", tmp_path / "shared"
    text = SITE.format(source=source or image, image=image, shared=shared,
                       data=tmp_path / "data")
    return write_profile(tmp_path, "cc", text), image, shared


def run_ok(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    res = cli(capsys, *args)
    assert res.rc == 0, (args, res.err)
    return res.out


def fake_tools(bin_dir: Path, record: Path) -> dict[str, str]:
    """srun that runs its command, ch-run that records its argv (one word a line), the
    $USER it got and its standard input (RECORD.stdin), scontrol that names one node: the
    environment to run lines with, with no $USER (a batch job may lack it)."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    tools = {
        "srun": '#!/bin/bash\nwhile [ "${1#--}" != "$1" ]; do shift; done\nexec "$@"\n',
        "ch-run": (f'#!/bin/bash\nprintf "%s\\n" "USER=$USER" "$@" > {record}\n'
                   f'cat > {record}.stdin\n'),
        "scontrol": "#!/bin/bash\necho node1\n",
    }
    for name, text in tools.items():
        (bin_dir / name).write_text(text, encoding="utf-8")
        (bin_dir / name).chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k != "USER"}
    return {**env, "PATH": f"{bin_dir}:{env.get('PATH', '/usr/bin:/bin')}"}


@pytest.mark.parametrize("launcher", ["ch", "srun-ch"])
def test_a_rank_starts_through_ch_run(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                      launcher: str) -> None:
    path, image, shared = profile(tmp_path)
    out = run_ok(capsys, "launch", "--site", str(path), "-N", "1", "-l", launcher, "--",
                 "python", "x.py")
    # ch-run refuses to start without $USER, which a batch job may lack
    assert 'export USER="${USER:-$(id -un)}"' in out.splitlines()
    line = one_line_starting(out, "srun ", shim=True)
    w = words(line, shim=True)
    start = w.index("ch-run")
    # each containers.mounts entry a --bind (SRC:DST as written, SRC alone bound at SRC),
    # the working directory, the image, then -- before the rank's command
    assert w[start:start + 6] == ["ch-run", f"--bind={shared}",
                                  f"--bind={tmp_path / 'data'}:/data",
                                  "--cd=$hpcprov_cd", str(image), "--"]
    assert w[start + 6:start + 8] == ["bash", "-c"]  # the rank contract, after the --
    assert words(line)[-2:] == ["python", "x.py"]
    # run by bash, from a folder a mount holds: ch-run gets $USER, the folder as the image
    # sees it, and the -- before the command
    work = shared / "run"
    work.mkdir(parents=True)
    record = tmp_path / "ch-run.argv"
    env = fake_tools(tmp_path / "bin", record)
    proc = subprocess.run(["bash", "-c", out], capture_output=True, text=True, env=env,
                          cwd=work, timeout=60, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr
    got = record.read_text(encoding="utf-8").splitlines()
    assert got[0] != "USER=" and got[0].startswith("USER=")
    assert got[1:6] == [f"--bind={shared}", f"--bind={tmp_path / 'data'}:/data",
                        f"--cd={work}", str(image), "--"]
    assert got[6:8] == ["bash", "-c"] and got[-2:] == ["python", "x.py"]


def test_containers_runtime_says_charliecloud(capsys: pytest.CaptureFixture[str],
                                              tmp_path: Path) -> None:
    path, _, _ = profile(tmp_path)
    assert run_ok(capsys, "site", "check", str(path)).strip().endswith(": ok")
    bundled = REPO / "sites" / "testbed-container.yaml"
    assert run_ok(capsys, "site", "check", str(bundled)).strip() == f"{bundled}: ok"


def setup_steps(script: str) -> dict[str, list[str]]:
    """Each step function's body lines, by step id."""
    out: dict[str, list[str]] = {}
    for m in re.finditer(r"^step_(\w+)\(\) \{\n(.*?)^\}$", script, flags=re.M | re.S):
        out[m.group(1).replace("_", "-")] = [ln.strip() for ln in m.group(2).splitlines()]
    return out


def test_setup_checks_the_directory_image_and_runs_the_check_in_it(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, stubs: Stubs) -> None:
    path, image, shared = profile(tmp_path)
    script = run_ok(capsys, "setup", "--site", str(path), "--dry-run")
    steps = setup_steps(script)
    assert list(steps) == ["prepare", "preflight", "check-image", "check-build"]
    assert "(needs network)" not in script  # nothing is pulled
    assert not [ln for ln in script.splitlines() if "singularity" in ln or " pull" in ln]
    assert steps["check-image"] == [f"hpcprov_check_ch_image {image} containers.images.torch"]
    check = steps["check-build"]
    assert 'export USER="${USER:-$(id -un)}"' in check
    # the program that imports the frameworks reaches the image's Python on its stdin
    assert words(check[-1]) == ["hpcprov_file_frameworks_import_py", "|", "ch-run",
                                f"--bind={shared}", f"--bind={tmp_path / 'data'}:/data",
                                str(image), "--", "python", "-", "torch"]
    # the image missing: check-image fails, naming the profile key and ch-image/ch-convert
    proc = stubs.run(script, "check-image", name="setup.sh")
    assert proc.returncode == 3, proc.stderr
    assert "containers.images.torch" in proc.stderr and "ch-image" in proc.stderr \
        and "ch-convert" in proc.stderr
    # a directory image: found; check-build runs ch-run with the -- before the command
    image.mkdir(parents=True)
    proc = stubs.run(script, "check-image", name="setup.sh")
    assert proc.returncode == 0 and f"image {image} found (a directory)" in proc.stdout
    record = tmp_path / "ch-run.argv"
    env = fake_tools(tmp_path / "bin", record)
    proc = subprocess.run(["bash", str(stubs.work / "setup.sh"), "check-build"],
                          capture_output=True, text=True, env=env, cwd=stubs.work,
                          timeout=60, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr
    got = record.read_text(encoding="utf-8").splitlines()
    assert got[0].startswith("USER=") and got[0] != "USER="
    assert got[1:] == [f"--bind={shared}", f"--bind={tmp_path / 'data'}:/data", str(image),
                       "--", "python", "-", "torch"]
    program = (REPO / "provision" / "programs" / "frameworks_import.py").read_text()
    assert Path(f"{record}.stdin").read_text(encoding="utf-8") == program


def test_the_testbed_container_site_sets_up_with_ch_run(
        capsys: pytest.CaptureFixture[str]) -> None:
    steps = setup_steps(run_ok(capsys, "setup", "--site", "testbed-container", "--dry-run"))
    image = "/var/lib/hpcprov-testbed/scratch/images/debian12-torch"
    assert steps["check-image"] == [f"hpcprov_check_ch_image {image} containers.images.torch"]
    assert words(steps["check-build"][-1]) == [
        "hpcprov_file_frameworks_import_py", "|", "ch-run",
        "--bind=/var/lib/hpcprov-testbed/scratch", image, "--", "python", "-", "torch"]


@pytest.mark.parametrize("source", ["docker://nvcr.io/nvidia/pytorch:24.01-py3",
                                    "nvcr.io/nvidia/pytorch:24.01-py3", "debian:12"])
def test_a_registry_reference_is_refused(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                         source: str) -> None:
    path, _, _ = profile(tmp_path, source=source)
    needles = ("registry reference", "ch-image", "ch-convert")
    line = assert_one_line_error(cli(capsys, "setup", "--site", str(path), "--dry-run"), 2,
                                 "python.container.source", *needles)
    # located: the profile's file and the line of python.container.source
    assert line.startswith(f"hpcprov: error: {path}:7: python.container.source: "), line
    # --container NAME makes the image's entry the source
    path, _, _ = profile(tmp_path)
    assert_one_line_error(cli(capsys, "setup", "--site", str(path), "--container", "hub",
                              "--dry-run"), 2, "containers.images.hub", *needles)


@pytest.mark.parametrize(("ref", "registry"), [
    ("docker://nvcr.io/nvidia/pytorch:24.01-py3", True),
    ("nvcr.io/nvidia/pytorch:24.01-py3", True),
    ("localhost:5000/torch@sha256:" + "0" * 64, True),
    ("debian:12", True),
    ("/var/lib/hpcprov-testbed/scratch/images/debian12-torch", False),
    ("$SCRATCH/images/torch:2.4", False),
    ("$PREFIX/images/torch", False),
    ("images/torch", False),
])
def test_what_a_registry_reference_is(ref: str, registry: bool) -> None:
    assert registry_reference(ref) is registry
