"""The EDF environment file a job writes for an EDF-based engine (issue 33): whatever the
job's shell expands into it (a variable such as $SCRATCH, the file an image glob matches,
a quote in --image or containers.images) it stays a TOML file with exactly the intended
keys; it is a new file of a random name, so a link planted in the job's folder is never
followed; a folder another user could replace it in is refused in one line: the job's
folder, symlinks resolved, and every folder above it up to / must be the user's or root's,
and one its group or others may write must be sticky (issue 41); and a value that is not
UTF-8, which TOML cannot hold, is refused in one line, leaving no file."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
import tomllib
from hpcprov_tests import cli, free_id, write_profile

from hpcprov.jobs.launchers.images import EDF_WRITER

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


def run(script: str, cwd: Path, *user: str, **env: str) -> subprocess.CompletedProcess[str]:
    """Run SCRIPT with bash in CWD (USER: a command prefix such as setpriv's)."""
    return subprocess.run([*user, "bash", "-c", script], cwd=cwd, capture_output=True,
                          text=True, timeout=60, env={"PATH": "/usr/bin:/bin",
                                                      "SLURM_JOB_ID": "42", **env})


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
    assert line.startswith(f"hpcprov: {job} may be written by its group: ") and "chmod +t" in line
    os.chmod(job, 0o3775)  # sticky: only a file's owner may rename it
    assert run(edf_lines(capsys, tmp_path, "/img/x.sqsh"), job, SCRATCH="/s").returncode == 0


# ------------------------------------------------------ the folders above, owners, links (41)


def refusal(proc: subprocess.CompletedProcess[str], job: Path) -> str:
    """The one line a refused job printed (status 1, no EDF file left in JOB)."""
    assert proc.returncode == 1, proc.stdout
    assert not [p for p in job.iterdir() if p.name.startswith(".hpcprov-edf-")]
    (line,) = proc.stderr.strip().splitlines()
    assert "someone else could replace the job's EDF file" in line and "chmod +t" in line
    return line


needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="chown to another user needs root "
                                "(tests run as root in CI)")
NOBODY = 65534  # the owner of the other user's folders (no account needed)


@needs_root
def test_a_sticky_folder_of_another_user_is_refused(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """The owner of a sticky folder may still replace any file in it: a sticky 1777 folder
    another user made is refused, for root too (it is neither the user's nor root's)."""
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chown(shared, NOBODY, NOBODY)
    os.chmod(shared, 0o1777)
    proc = run(edf_lines(capsys, tmp_path, "/img/x.sqsh"), shared, SCRATCH="/s")
    assert refusal(proc, shared).startswith(f"hpcprov: {shared} belongs to user {NOBODY}: ")


@needs_root
def test_a_folder_above_of_another_user_is_refused(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """Another user's folder above the job's (mode 755) lets them rename the job's folder
    and put one of theirs in its place."""
    theirs = tmp_path / "theirs"
    job = theirs / "job"
    job.mkdir(parents=True)
    os.chown(theirs, NOBODY, NOBODY)
    proc = run(edf_lines(capsys, tmp_path, "/img/x.sqsh"), job, SCRATCH="/s")
    assert refusal(proc, job).startswith(f"hpcprov: {theirs} belongs to user {NOBODY}: ")


@pytest.mark.parametrize(("mode", "who"), [(0o2775, "its group"), (0o757, "everyone"),
                                           (0o777, "its group and everyone")],
                         ids=["2775", "757", "777"])
def test_a_folder_above_that_others_may_write_is_refused_unless_sticky(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, mode: int, who: str) -> None:
    above = tmp_path / "group"
    job = above / "me" / "job"
    job.mkdir(parents=True, mode=0o755)
    os.chmod(above, mode)
    script = edf_lines(capsys, tmp_path, "/img/x.sqsh")
    line = refusal(run(script, job, SCRATCH="/s"), job)
    assert line.startswith(f"hpcprov: {above} may be written by {who}: ")
    assert f"under {job} before srun reads it" in line
    os.chmod(above, mode | 0o1000)  # sticky, as /tmp: only an entry's owner may rename it
    proc = run(script, job, SCRATCH="/s")
    assert proc.returncode == 0, proc.stderr
    assert Path(proc.stdout.strip()).parent == job


def test_a_symlinked_path_to_a_good_folder_is_accepted_and_written_in_the_real_folder(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """A job submitted from a symlinked scratch path ($PWD a link, as `cd` leaves it): the
    real folder is what is checked and written in, not the link (a link's own mode is 777)."""
    job = tmp_path / "real" / "job"
    job.mkdir(parents=True, mode=0o755)
    link = tmp_path / "scratch"
    link.symlink_to(job)
    script = (f'cd -L {link} && [ "$PWD" = {link} ] || exit 9\n'
              + edf_lines(capsys, tmp_path, "/img/x.sqsh"))
    proc = run(script, tmp_path, SCRATCH="/s")
    assert proc.returncode == 0, proc.stderr
    written = Path(proc.stdout.strip())
    assert written.parent == job and written.stat().st_mode & 0o777 == 0o600
    assert tomllib.loads(written.read_text())["image"] == "/img/x.sqsh"


def test_a_symlinked_path_to_a_folder_others_may_write_is_refused(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """Through the link the real folder is judged: a group-writable one is refused, named."""
    job = tmp_path / "real" / "group"
    job.mkdir(parents=True)
    os.chmod(job, 0o2775)
    link = tmp_path / "scratch"
    link.symlink_to(job)
    script = f"cd -L {link}\n" + edf_lines(capsys, tmp_path, "/img/x.sqsh")
    line = refusal(run(script, tmp_path, SCRATCH="/s"), job)
    assert line.startswith(f"hpcprov: {job} may be written by its group: ")


@needs_root
@pytest.mark.skipif(shutil.which("setpriv") is None, reason="setpriv (util-linux) is needed")
def test_an_unprivileged_user_writes_in_its_own_folder_and_not_in_another_users_sticky_one(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, area: Path) -> None:
    """The job's user is the one running it (its uid, not root's): its own folder passes,
    a sticky folder another user made does not, though the user may create files in it."""
    me = free_id()
    as_me = [str(shutil.which("setpriv")), f"--reuid={me}", f"--regid={me}", "--clear-groups",
             "--"]
    script = edf_lines(capsys, tmp_path, "/img/x.sqsh")
    mine, shared = area / "mine", area / "shared"
    for folder, owner, mode in ((mine, me, 0o755), (shared, NOBODY, 0o1777)):
        folder.mkdir()
        os.chown(folder, owner, owner)
        os.chmod(folder, mode)
    proc = run(script, mine, *as_me, SCRATCH="/s")
    assert proc.returncode == 0, proc.stderr
    written = Path(proc.stdout.strip())
    assert written.parent == mine and written.stat().st_uid == me
    line = refusal(run(script, shared, *as_me, SCRATCH="/s"), shared)
    assert line.startswith(f"hpcprov: {shared} belongs to user {NOBODY}: ")


# --------------------------------------------------------------------- values not UTF-8 (41)


def test_a_glob_match_whose_name_is_not_utf8_is_refused_in_one_line(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """TOML cannot hold bytes that are not UTF-8: the file an image glob matched named with
    byte 0xff is refused, naming why, and the job leaves no EDF file behind."""
    images = tmp_path / "images"
    images.mkdir()
    (images / os.fsdecode(b"pytorch-\xff.sqsh")).write_text("")
    script = edf_lines(capsys, tmp_path, f"{images}/pytorch-*.sqsh")
    job = tmp_path / "job"
    job.mkdir(mode=0o755)
    for locale in ("C", "C.UTF-8"):
        proc = run(script, job, SCRATCH="/s", LC_ALL=locale)
        assert proc.returncode == 1, proc.stdout
        assert list(job.iterdir()) == []
        (line,) = proc.stderr.strip().splitlines()
        assert line.startswith("hpcprov: a value for the job's EDF file is not UTF-8 "
                               f'(byte 0xff after "{images}/pytorch-"): TOML cannot hold it')


# The edges of UTF-8: each value is written (and parses back to itself) or refused.
VALID = ["\x01\n\x1f\x7f", "\x80\x85\x9b\x9f", "\xa0é\u07ff", "\u0800",
         "\ud7ff\ue000\uffff", "\U00010000\U0010ffff", "€ 😀 \t\"\\"]
INVALID = [b"\x80", b"\xbf", b"\xc0\xaf", b"\xc1\xbf", b"\xc2", b"\xc2\xc0", b"\xe0\x80\xaf",
           b"\xe2\x82", b"\xed\xa0\x80", b"\xf0\x80\x80\x80", b"\xf4\x90\x80\x80",
           b"\xf5\x80\x80\x80", b"\xff", b"ok\xfe"]


@pytest.mark.parametrize("locale", ["C", "C.UTF-8"])
def test_every_value_is_valid_toml_or_refused_whatever_the_locale(
        tmp_path: Path, locale: str) -> None:
    """hpcprov_toml alone, on the edges of UTF-8 (overlong forms, surrogates, beyond
    U+10FFFF, truncated sequences): valid text parses back to itself with every control,
    C1 (U+0080-009F) included, escaped; anything else is refused, status 1."""
    body = EDF_WRITER.read_text().split("\n\n", 1)[1]
    script = body + ('\nfor v in "$@"; do if o=$(hpcprov_toml "$v"); then printf "0%s\\0" "$o";'
                     ' else printf "1\\0"; fi; done\n')
    values = [v.encode() for v in VALID] + INVALID
    proc = subprocess.run(["bash", "-c", script, "bash", *values], cwd=tmp_path,
                          capture_output=True, timeout=60,
                          env={"PATH": "/usr/bin:/bin", "LC_ALL": locale})
    assert proc.returncode == 0, proc.stderr
    results = proc.stdout.split(b"\0")[:-1]
    assert results[len(VALID):] == [b"1"] * len(INVALID)
    for value, got in zip(VALID, results, strict=False):
        text = got.decode()
        assert text[0] == "0" and tomllib.loads(f"k = {text[1:]}")["k"] == value
        assert not [c for c in text[1:] if ord(c) < 32 or 0x7f <= ord(c) <= 0x9f]
