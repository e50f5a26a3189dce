"""Trust, round five (issue 41, defects 1 and 3): under umask 002 (a setgid 2775 project
folder, as docs/security.md describes) nothing that a later shell, job or doctor runs, and no
file hpcprov reads back as a job's truth, may be writable by the group.

* setup's steps and its library's writer run with group and other write masked, whatever the
  caller's umask: the venv, activate and the state come out 0755/0644;
* doctor, validate --env and every job script refuse a prefix that someone else could change
  (core.fsutil.others_can_change; hpcprov/jobs/env_trust.sh in the jobs), in one line;
* validation jobs run ``python -B`` and refuse a __pycache__ beside their programs;
* a job's output and status file are read only as the user's own files nobody else may write;
  the local executor creates the output anew, 0644, never through a planted link;
* the allocation's pilot keeps its steps' pids in memory: a pid file planted in its queue
  kills nothing.

The same attacks by a real second user are in tests/test_second_user.py."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest
from hpcprov_tests import process_gone

from hpcprov.core import fsutil
from hpcprov.core.shell import NO_WRITE_FOR_OTHERS, quote
from hpcprov.jobs.jobscript import build_jobscript
from hpcprov.request.job import JobRequest
from hpcprov.schedulers.base import Handle, read_exit, read_run_seconds
from hpcprov.schedulers.local import LocalExecutor
from hpcprov.site.profiles import load_site

REPO = Path(__file__).resolve().parent.parent


def _writable_by_others(root: Path) -> list[str]:
    return [str(p) for p in (root, *root.rglob("*"))
            if not p.is_symlink() and p.lstat().st_mode & 0o022]


def _with_umask(mask: int) -> int:
    return os.umask(mask)


# ------------------------------------------------------------------ setup


def test_setup_under_umask_002_makes_nothing_others_may_write(tmp_path: Path) -> None:
    """The venv (bin/, site-packages), the state, the logs, the journal: a real setup of
    `local` up to create-env, started with umask 002. Before, the venv came out 0775/0664."""
    prefix = tmp_path / "env"
    env = {**os.environ, "HPCPROV_NO_CACHE": "1"}
    proc = subprocess.run(
        ["sh", "-c", 'umask 002; exec "$@"', "sh", sys.executable, "-m", "hpcprov", "setup",
         "--site", "local", "--prefix", str(prefix), "--until", "install-frameworks"],
        capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert list(prefix.glob("venvs/*/bin/python*")), list(prefix.rglob("*"))[:20]
    assert _writable_by_others(prefix) == []


def _library_bash(tmp_path: Path, body: str, umask: str = "002") -> subprocess.CompletedProcess:
    """Run ``body`` after hpcprov's setup library (as the setup script carries it)."""
    lib = (REPO / "provision" / "scripts" / "common.sh").read_text()
    script = tmp_path / "lib.sh"
    script.write_text(f"umask {umask}\n{lib}\n{body}\n")
    return subprocess.run(["bash", str(script)], capture_output=True, text=True, timeout=60,
                          cwd=tmp_path)


def test_activate_is_written_with_no_write_for_others_whatever_the_umask(
        tmp_path: Path) -> None:
    """hpcprov_write_lines (PREFIX/activate): 0644 under umask 002 and 000, and a planted
    PATH.part of somebody's is replaced, not written through."""
    target = tmp_path / "activate"
    planted = tmp_path / "elsewhere"
    planted.write_text("precious\n")
    (tmp_path / "activate.part").symlink_to(planted)
    for mask in ("002", "000"):
        proc = _library_bash(tmp_path, f"hpcprov_write_lines {quote(str(target))} 'export A=1'",
                             umask=mask)
        assert proc.returncode == 0, proc.stderr
        assert stat.S_IMODE(target.stat().st_mode) & 0o022 == 0, oct(target.stat().st_mode)
        assert target.read_text() == "export A=1\n"
    assert planted.read_text() == "precious\n"


def test_every_step_runs_with_group_and_other_write_masked(tmp_path: Path) -> None:
    """hpcprov_run: a step's files are 0755/0644 though the step was started at umask 002,
    and a stricter umask (077) is kept."""
    body = ("HPCPROV_STEPS=(make)\n"
            'step_make() { mkdir "$PWD/made"; : > "$PWD/made/file"; umask > "$PWD/mask"; }\n'
            "hpcprov_run make")
    proc = _library_bash(tmp_path, body, umask="002")
    assert proc.returncode == 0, proc.stderr
    assert _writable_by_others(tmp_path / "made") == []
    assert (tmp_path / "mask").read_text().strip() == "0022"
    proc = _library_bash(tmp_path, body.replace("made", "made2"), umask="077")
    assert (tmp_path / "mask").read_text().strip() == "0077"


def test_the_runner_itself_masks_group_write_while_it_runs() -> None:
    """What setup's own process writes (journal, manifest, logs) under no_write_for_others;
    the caller's umask comes back after."""
    before = os.umask(0o002)
    try:
        with fsutil.no_write_for_others() as inside:
            assert inside == 0o022 and _with_umask(inside) == 0o022
        assert _with_umask(0o002) == 0o002
        os.umask(0o077)
        with fsutil.no_write_for_others() as inside:
            assert inside == 0o077  # a stricter umask is kept
    finally:
        os.umask(before)


# ------------------------------------------------------------------ a prefix others could change


def _prefix(root: Path) -> Path:
    """A prefix shaped as setup leaves it (a venv of `local`, activate, an image), 0755/0644,
    with a manifest."""
    from hpcprov.provision.journal import Journal
    from hpcprov.provision.manifest import build_manifest, write_manifest

    prefix = root / "prefix"
    (prefix / ".hpcprov").mkdir(parents=True)
    write_manifest(build_manifest(load_site("local"), "local", prefix,
                                  Journal(prefix / ".hpcprov" / "journal.json")), prefix)
    site = prefix / "venvs" / "horovod" / "lib" / "python3.11" / "site-packages"
    site.mkdir(parents=True)
    (site / "mod.py").write_text("x = 1\n")
    bin_ = prefix / "venvs" / "horovod" / "bin"
    bin_.mkdir()
    (bin_ / "activate").write_text("")
    (bin_ / "python").symlink_to(sys.executable)
    (prefix / "activate").write_text(f"source {bin_}/activate\n")
    image = prefix / "images" / "dirimage" / "tmp"
    image.mkdir(parents=True)
    image.chmod(0o1777)  # an image's own /tmp: not the prefix's business
    (prefix / "images" / "x.sif").write_text("sif")
    for p in (root, prefix, *prefix.rglob("*")):
        if not p.is_symlink() and p != image:
            p.chmod(p.stat().st_mode & ~0o022)
    return prefix


def _group_writable(path: Path) -> None:
    path.chmod(path.stat().st_mode | 0o020)


@pytest.mark.parametrize("where", ["activate", "venvs/horovod/bin",
                                   "venvs/horovod/lib/python3.11/site-packages/mod.py",
                                   "images", "images/x.sif", "images/dirimage"])
def test_a_prefix_entry_others_may_write_is_named(tmp_path: Path, where: str) -> None:
    prefix = _prefix(tmp_path)
    assert fsutil.others_can_change(prefix) is None
    _group_writable(prefix / where)
    assert fsutil.others_can_change(prefix) == \
        f"{prefix / where} may be written by its group"


def test_what_is_not_the_prefixs_own_is_not_judged(tmp_path: Path) -> None:
    """A link's own mode, a directory image's content, conda's package cache."""
    prefix = _prefix(tmp_path)
    (prefix / "images" / "dirimage" / "etc").mkdir(mode=0o775)
    (prefix / "images" / "dirimage" / "etc").chmod(0o775)
    pkgs = prefix / "miniconda3" / "pkgs"
    pkgs.mkdir(parents=True)
    (prefix / "miniconda3").chmod(0o755)
    pkgs.chmod(0o775)
    (prefix / "build" / "horovod").mkdir(parents=True, mode=0o755)
    (prefix / "build").chmod(0o755)
    (prefix / "build" / "horovod").chmod(0o775)  # sources as their archive left them
    assert fsutil.others_can_change(prefix) is None
    script = _job(prefix, tmp_path)  # and the jobs' own check agrees
    proc = subprocess.run(["bash", str(script)], capture_output=True, text=True, timeout=120,
                          cwd=tmp_path)
    assert "may be written" not in proc.stderr, proc.stderr


def test_a_prefix_entry_of_another_user_or_a_folder_above_is_named(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("chown to another user needs root (tests run as root in CI)")
    prefix = _prefix(tmp_path)
    os.chown(prefix / "activate", 65534, 65534)
    assert fsutil.others_can_change(prefix) == f"{prefix / 'activate'} belongs to user 65534"
    os.chown(prefix / "activate", 0, 0)
    tmp_path.chmod(0o2775)  # a setgid project folder above, not sticky
    assert fsutil.others_can_change(prefix) == f"{tmp_path} may be written by its group"
    tmp_path.chmod(0o3775)  # sticky: nobody can rename the prefix away
    assert fsutil.others_can_change(prefix) is None


def test_doctor_refuses_a_prefix_others_could_change_and_runs_nothing(tmp_path: Path) -> None:
    """A group member appended a line to activate; doctor's probe sourced it as the owner.
    Now doctor refuses in one line, before anything of the prefix runs."""
    prefix = _prefix(tmp_path)
    marker = tmp_path / "ran"
    with (prefix / "activate").open("a") as fh:
        fh.write(f"touch {marker}\n")
    _group_writable(prefix / "activate")
    proc = subprocess.run([sys.executable, "-m", "hpcprov", "doctor", "--site", "local",
                           "--prefix", str(prefix)], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode != 0, proc.stdout
    (line,) = proc.stderr.strip().splitlines()
    assert f"{prefix / 'activate'} may be written by its group" in line, line
    assert "chmod -R go-w" in line and "Traceback" not in proc.stderr
    assert not marker.exists()


def test_validate_refuses_a_prefix_others_could_change(tmp_path: Path) -> None:
    prefix = _prefix(tmp_path)
    _group_writable(prefix / "venvs" / "horovod" / "bin")
    proc = subprocess.run([sys.executable, "-m", "hpcprov", "validate", "--site", "local",
                           "--env", str(prefix), "--checks", "env", "--nodes", "1",
                           "--workdir", str(tmp_path / "run")],
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, "HPCPROV_HISTORY": str(tmp_path / "h")})
    assert proc.returncode == 2, proc.stdout + proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert f"{prefix / 'venvs' / 'horovod' / 'bin'} may be written by its group" in line
    assert not (tmp_path / "run").exists()  # refused before anything was written


def _job(prefix: Path, tmp_path: Path) -> Path:
    req = replace(JobRequest(load_site("local"), prefix=str(prefix)),
                  command=("true",))
    script = tmp_path / "job.sh"
    script.write_text(build_jobscript(req, prolog=["echo PROLOG-DONE"],
                                      epilog=["echo JOB-RAN"]))
    return script


@pytest.mark.parametrize("where", ["activate", "venvs/horovod/lib/python3.11/site-packages",
                                   None])
def test_every_job_script_refuses_a_prefix_others_could_change(tmp_path: Path,
                                                               where: str | None) -> None:
    """The generated job script's own check (env_trust.sh), before it sources anything of
    the prefix: one line, exit 2; a prefix that is the owner's alone passes it."""
    prefix = _prefix(tmp_path)
    if where:
        _group_writable(prefix / where)
    script = _job(prefix, tmp_path)
    assert NO_WRITE_FOR_OTHERS in script.read_text().splitlines()
    proc = subprocess.run(["bash", str(script)], capture_output=True, text=True, timeout=120,
                          cwd=tmp_path)
    if where:
        assert proc.returncode == 2, proc.stdout + proc.stderr
        (line,) = proc.stderr.strip().splitlines()
        assert line.startswith(f"hpcprov: {prefix / where} may be written by others: "), line
        assert "JOB-RAN" not in proc.stdout
    else:
        assert "may be written" not in proc.stderr, proc.stderr


def test_a_job_through_a_symlinked_prefix_checks_the_real_one(tmp_path: Path) -> None:
    prefix = _prefix(tmp_path)
    link = tmp_path / "link"
    link.symlink_to(prefix)
    _group_writable(prefix / "activate")
    proc = subprocess.run(["bash", str(_job(link, tmp_path))], capture_output=True,
                          text=True, timeout=120, cwd=tmp_path)
    assert proc.returncode == 2 and f"{prefix / 'activate'} may be written" in proc.stderr


# ------------------------------------------ what jobs write and hpcprov reads


def test_a_jobs_output_or_status_file_others_may_write_is_not_believed(tmp_path: Path) -> None:
    """A forged PASS: a group member rewrote RUN/env.out (0664 under umask 002)."""
    from hpcprov.validate.plan import Job
    from hpcprov.validate.run import _result

    out, exit_file = tmp_path / "env.out", tmp_path / "env.exit"
    out.write_text('HPCPROV_RESULT {"check": "env"}\n')
    exit_file.write_text("0 1.0 2.0\n")
    h = Handle("1", tmp_path / "env.sh", out, exit_file, time.monotonic(), "COMPLETED", 0)
    assert read_exit(exit_file) == 0 and read_run_seconds(exit_file) == 1.0
    for path in (out, exit_file):
        path.chmod(0o664)
    assert read_exit(exit_file) is None and read_run_seconds(exit_file) is None
    job = Job("env", "env", "", 1, 1, "python", "envcheck.py", ())
    res = _result(job, h)
    assert res.records == [] and "output not read" in res.malformed
    assert "not a file of yours that only you may write" in res.malformed
    out.chmod(0o644)
    out.unlink()
    out.symlink_to(tmp_path / "env.exit")
    assert "is a symbolic link" in _result(job, h).malformed


def test_the_local_executor_makes_each_output_anew_and_0644(tmp_path: Path) -> None:
    planted = tmp_path / "precious"
    planted.write_text("precious\n")
    out = tmp_path / "job.out"
    out.symlink_to(planted)
    script = tmp_path / "job.sh"
    script.write_text("echo hello\n")
    old = os.umask(0o002)
    try:
        ex = LocalExecutor()
        h = ex.submit(script, out, tmp_path / "job.exit")
        ex.wait([h], 60)
    finally:
        os.umask(old)
    assert planted.read_text() == "precious\n"
    assert not out.is_symlink() and out.read_text() == "hello\n"
    assert stat.S_IMODE(out.stat().st_mode) == 0o644


@pytest.mark.parametrize("program", ["envcheck.py", "allreduce.py", "train.py"])
def test_the_programs_write_no_bytecode_beside_them(tmp_path: Path, program: str) -> None:
    """Bytecode on (PYTHONDONTWRITEBYTECODE unset, as the attack ran): the first job's
    import of runtime.py made RUN/__pycache__, group-writable under umask 002, which a
    member replaced. The programs now switch bytecode writing off for that import."""
    from hpcprov.validate.plan import programs

    for name, text in programs().items():
        (tmp_path / name).write_text(text)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    proc = subprocess.run([sys.executable, str(tmp_path / program), "--help"],
                          capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert not (tmp_path / "__pycache__").exists()


def test_a_validation_job_refuses_bytecode_beside_its_programs(tmp_path: Path) -> None:
    """A __pycache__ beside the programs (planted, or left by a Python that wrote one) holds
    bytecode Python would load instead of runtime.py: the program check refuses it."""
    from hpcprov.validate.plan import Options, plan_jobs, program_check, programs

    o = Options(JobRequest(load_site("local"), activate=False), ("env",))
    job = plan_jobs(o)[0]
    for name, text in programs().items():
        (tmp_path / name).write_text(text)
    script = tmp_path / "check.sh"
    script.write_text("\n".join([*program_check(job, str(tmp_path)), "echo CHECKED"]) + "\n")
    ok = subprocess.run(["bash", str(script)], capture_output=True, text=True, timeout=60)
    assert ok.returncode == 0 and "CHECKED" in ok.stdout, ok.stderr
    (tmp_path / "__pycache__").mkdir()
    bad = subprocess.run(["bash", str(script)], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 97 and "CHECKED" not in bad.stdout
    (line,) = bad.stderr.strip().splitlines()
    assert f"{tmp_path}/__pycache__ holds bytecode" in line


def test_the_pilot_kills_no_process_a_planted_pid_file_names(tmp_path: Path) -> None:
    """The pilot kept each step's pid in QUEUE/N.pid and ran kill -- -$(cat N.pid): a
    group member's pid file killed a process group of their choosing. Now the pids are the
    pilot's own: a step is cancelled, a planted pid file is never read."""
    from hpcprov.schedulers.allocation import pilot_lines

    queue = tmp_path / "q"
    queue.mkdir()
    bystander = subprocess.Popen(["sleep", "300"], start_new_session=True)
    try:
        step_pid = tmp_path / "step.pid"
        (queue / "0001.step").write_text(f"echo $$ > {quote(str(step_pid))}\nexec sleep 300\n")
        script = tmp_path / "pilot.sh"
        script.write_text("\n".join(pilot_lines(str(queue), "echo n1", idle_s=30)) + "\n")
        pilot = subprocess.Popen(["bash", str(script)], stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 30
        while not (step_pid.exists() and step_pid.read_text().strip()):
            assert time.monotonic() < deadline and pilot.poll() is None, pilot.communicate()
            time.sleep(0.05)
        assert not list(queue.glob("*.pid"))  # nothing on disk names the step's pid
        (queue / "0001.pid").write_text(f"{bystander.pid}\n")  # what a member would plant
        (queue / "0002.pid").write_text(f"{bystander.pid}\n")
        (queue / "0002.cancel").write_text("")   # a cancel of a step the pilot never ran
        (queue / "0001.cancel").write_text("")   # and of its own step
        step = int(step_pid.read_text())
        assert process_gone(step, within_s=30)
        (queue / "END").write_text("")
        pilot.communicate(timeout=60)
        assert bystander.poll() is None, "the pilot killed a process a pid file named"
    finally:
        bystander.kill()
        bystander.wait()


# ------------------------------------------ the default run folder (defect 6)


@pytest.mark.parametrize("squat", ["another user's folder", "a file", "a link"])
def test_the_default_run_folder_is_the_users_own_and_cannot_be_squatted(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, squat: str) -> None:
    """One parent for every user (SCRATCH/hpcprov-validate) made the first validating
    member its owner, and the folder rule refused all others; a member could take the name
    on purpose. Now the parent is the user's own, and a name held by something not theirs
    puts the run folder beside it, with a warning naming why."""
    import pwd

    from hpcprov.validate.plan import Options
    from hpcprov.validate.run import default_rundir

    monkeypatch.setenv("HOME", str(tmp_path))  # local's scratch
    o = Options(JobRequest(load_site("local"), activate=False), ("env",))
    user = pwd.getpwuid(os.getuid()).pw_name
    path, note = default_rundir(o)
    assert path.startswith(f"$HOME/hpcprov-validate-{user}/local-") and note is None
    parent = tmp_path / f"hpcprov-validate-{user}"
    if squat == "a file":
        parent.write_text("")
        why = "is not a folder"
    elif squat == "a link":
        (tmp_path / "elsewhere").mkdir()
        parent.symlink_to(tmp_path / "elsewhere")
        why = "is a symbolic link"
    else:
        if os.geteuid() != 0:
            pytest.skip("a folder of another user's needs root to make (CI runs as root)")
        parent.mkdir()
        os.chown(parent, 65534, 65534)
        why = "belongs to user 65534"
    path, note = default_rundir(o)
    assert path.startswith(f"$HOME/hpcprov-validate-{user}-local-"), path
    assert note == f"$HOME/hpcprov-validate-{user} {why}: this run's folder is beside it instead"
    assert default_rundir(o)[0] != path  # a new random name each time
