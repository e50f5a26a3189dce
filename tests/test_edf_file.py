"""The EDF environment file a job writes for an EDF-based engine (issue 33): whatever the
job's shell expands into it (a variable such as $SCRATCH, the file an image glob matches,
a quote in --image or containers.images) it stays a TOML file with exactly the intended
keys; it is a new file of a random name, so a link planted in the job's folder is never
followed; and a folder others may write is refused in one line."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
import tomllib
from hpcprov_tests import cli, write_profile

EDF = """\
name: edf
extends: testbed
modules: {system: none}
containers:
  runtime: enroot
  images: {ngc: IMAGE}
  default_image: ngc
  mounts: [$SCRATCH:/scratch, /users/shared:/shared]
  workdir: $SCRATCH/work
  env: {NCCL_DEBUG: WARN}
  annotations: {com.hooks.ofi.enabled: "true"}
launchers:
  edf: {kind: container, runtime: edf}
default_launcher: edf
"""

HOSTILE = "x'\ny = 1\n[evil]\nz = \"\\\" \t\x01"  # quotes, newlines, a table, controls


def edf_lines(capsys: pytest.CaptureFixture[str], tmp_path: Path, image: str,
              *args: str) -> str:
    """The lines of a job script that write the EDF file, and one printing its path."""
    ref = str(write_profile(tmp_path / "sites", "edf", EDF.replace("IMAGE", image)))
    res = cli(capsys, "jobscript", "--site", ref, "-N", "1", "--no-activate", *args,
              "--", "python", "train.py")
    assert res.rc == 0, res.err
    lines = res.out.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith(("hpcprov_images=",
                                                                   "hpcprov_toml()")))
    end = next(i for i in range(start, len(lines)) if lines[i].startswith("} > "))
    return "\n".join(["set -eo pipefail", *lines[start:end + 1], 'echo "$hpcprov_edf"'])


def run(script: str, cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", "-c", script], cwd=cwd, capture_output=True, text=True,
                          timeout=60, env={"PATH": "/usr/bin:/bin", "SLURM_JOB_ID": "42",
                                           **env})


def test_hostile_values_glob_matches_and_quotes_leave_exactly_the_intended_keys(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    images = tmp_path / "images"
    images.mkdir()
    match = images / "pytorch-25.01'\n[evil]\nq = 1.sqsh"  # a file the glob matches
    match.write_text("")
    script = edf_lines(capsys, tmp_path, f"{images}/pytorch-*.sqsh")
    job = tmp_path / "job"
    job.mkdir(mode=0o755)
    proc = run(script, job, SCRATCH=HOSTILE)
    assert proc.returncode == 0, proc.stderr
    data = tomllib.loads(Path(proc.stdout.strip()).read_text())
    assert data == {"image": str(match),
                    "mounts": [f"{HOSTILE}:/scratch", "/users/shared:/shared"],
                    "workdir": f"{HOSTILE}/work", "env": {"NCCL_DEBUG": "WARN"},
                    "annotations": {"com": {"hooks": {"ofi": {"enabled": "true"}}}}}


@pytest.mark.parametrize("image", ["it's.sqsh", "a\"b\\c.sqsh"])
def test_a_quote_in_the_image_gives_a_file_that_parses(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, image: str) -> None:
    for args in ((), ("--image", f"/img/{image}")):
        script = edf_lines(capsys, tmp_path, json.dumps(f"/img/{image}"), *args)
        proc = run(script, tmp_path, SCRATCH="/s")
        assert proc.returncode == 0, proc.stderr
        assert tomllib.loads(Path(proc.stdout.strip()).read_text())["image"] == f"/img/{image}"


def test_a_link_planted_at_the_edf_path_is_not_followed(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    precious = tmp_path / "precious"
    precious.write_text("keep\n")
    job = tmp_path / "job"
    job.mkdir(mode=0o755)
    (job / ".hpcprov-edf-42.toml").symlink_to(precious)  # the name the job used to write
    proc = run(edf_lines(capsys, tmp_path, "/img/x.sqsh"), job, SCRATCH="/s")
    assert proc.returncode == 0, proc.stderr
    written = Path(proc.stdout.strip())
    assert precious.read_text() == "keep\n"
    assert written.parent == job and not written.is_symlink()
    assert written.stat().st_mode & 0o777 == 0o600


def test_a_job_folder_others_may_write_is_refused_in_one_line(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    job = tmp_path / "group"
    job.mkdir()
    os.chmod(job, 0o2775)
    proc = run(edf_lines(capsys, tmp_path, "/img/x.sqsh"), job, SCRATCH="/s")
    assert proc.returncode == 1 and list(job.iterdir()) == []
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith(f"hpcprov: {job} may be written by others") and "chmod +t" in line
    os.chmod(job, 0o3775)  # sticky: only a file's owner may rename it
    assert run(edf_lines(capsys, tmp_path, "/img/x.sqsh"), job, SCRATCH="/s").returncode == 0
