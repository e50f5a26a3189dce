"""One rule for every file that something later executes (issue 33): the prefix's setup
script, a validation's run folder with its programs and job scripts, the allocation's pilot
and steps go through ``fsutil.write_code`` (their folder refused when another user could
write or swap it, files made without following links, whole, with explicit modes). A walk
of the source fails when a write that bypasses it appears; the run folder is refused as the
prefix is; and a job refuses to run a program changed after it was submitted."""

from __future__ import annotations

import ast
import os
import stat
import subprocess
from pathlib import Path

import pytest
from hpcprov_tests import REPO, assert_one_line_error, cli

from hpcprov.core import fsutil
from hpcprov.core.errors import HpcprovError
from hpcprov.request.job import JobRequest
from hpcprov.site.profiles import load_site
from hpcprov.validate.plan import Options, plan_jobs, program_check
from hpcprov.validate.run import copy_programs

# calls that create or write a file (a builtin open() only with a writing mode)
WRITERS = {"write_text", "write_bytes", "atomic_write", "write_code", "mkstemp",
           "open_nofollow", "fdopen", "copy", "copyfile", "copy2", "copytree",
           "memfd_create", "write_output", "symlink_to", "symlink", "open", "os.open"}

# Every write in hpcprov that is not write_code, and why it is not code something runs.
# A new write fails the walk until it goes through write_code or is named here.
NOT_CODE = {
    ("hpcprov/app/cli.py", "_stdout_lost", "os.open"): "opens /dev/null for a closed stdout",
    ("hpcprov/app/docgen.py", "write_all", "write_text"): "the repository's docs (make docs)",
    ("hpcprov/core/fsutil.py", "exclusive_lock", "open_nofollow"): "a lock file",
    ("hpcprov/core/fsutil.py", "open_nofollow", "os.open"): "the helper itself",
    ("hpcprov/core/fsutil.py", "read_regular", "os.open"): "reads",
    ("hpcprov/core/fsutil.py", "read_regular", "fdopen"): "reads",
    ("hpcprov/core/fsutil.py", "atomic_write", "mkstemp"): "the data writer itself",
    ("hpcprov/core/fsutil.py", "atomic_write", "fdopen"): "the data writer itself",
    ("hpcprov/core/fsutil.py", "write_output", "write_text"): "the user's --output file",
    ("hpcprov/core/fsutil.py", "write_code", "mkstemp"): "the code writer itself",
    ("hpcprov/core/fsutil.py", "write_code", "fdopen"): "the code writer itself",
    ("hpcprov/draft/api.py", "draft", "write_output"): "a draft profile (data) the user named",
    ("hpcprov/jobs/api.py", "plan_jobscript", "write_output"):
        "the job script the user asked for at the path they named (--output), to read and "
        "submit themselves",
    ("hpcprov/schedulers/allocation.py", "OneAllocation._start", "atomic_write"):
        "a step's host file (node names)",
    ("hpcprov/schedulers/allocation.py", "OneAllocation.cancel", "atomic_write"):
        "an empty cancel marker",
    ("hpcprov/schedulers/allocation.py", "OneAllocation.close", "atomic_write"):
        "an empty END marker",
    ("hpcprov/schedulers/local.py", "LocalExecutor.submit", "open"): "a job's output",
    ("hpcprov/schedulers/local.py", "_new_private_output", "open_nofollow"):
        "a job's output (data: new, 0644, read back only as the user's own)",
    ("hpcprov/site/cache.py", "store", "atomic_write"): "the profile cache (data)",
    ("provision/journal.py", "Journal.save", "atomic_write"): "the journal (data)",
    ("provision/manifest.py", "write_manifest", "atomic_write"): "the manifest (data)",
    ("provision/plan.py", "fingerprints", "copy"): "a copy of a Python object",
    ("provision/programs/check_build.py", "main", "open"):
        "horovodrun -cb's output, which the step's checks read (data)",
    ("provision/programs/nccl_home.py", "link", "symlink"):
        "links inside the environment, made by a step in the checked prefix",
    ("provision/programs/wheelhouse.py", "open_entry", "os.open"): "reads",
    ("provision/programs/wheelhouse.py", "open_file", "os.open"): "reads",
    ("provision/programs/wheelhouse.py", "read_small", "fdopen"): "reads",
    ("provision/programs/wheelhouse.py", "write_hashed", "fdopen"):
        "the wheelhouse's own rule (docs/security.md, The Horovod wheelhouse)",
    ("provision/programs/wheelhouse.py", "copy_hashed", "fdopen"): "the wheelhouse's own rule",
    ("provision/programs/wheelhouse.py", "copy_hashed", "os.open"): "the wheelhouse's own rule",
    ("provision/programs/wheelhouse.py", "get", "os.open"): "the wheelhouse's own rule",
    ("provision/programs/wheelhouse.py", "write_new", "os.open"): "the wheelhouse's own rule",
    ("provision/programs/wheelhouse.py", "existing", "fdopen"): "reads",
    ("provision/programs/wheelhouse.py", "put", "os.open"): "the wheelhouse's own rule",
    ("provision/quick.py", "remember", "atomic_write"): "the ready cache (data)",
    ("provision/runner.py", "script_fd", "memfd_create"): "the sealed in-memory copy",
    ("provision/runner.py", "script_fd", "mkstemp"):
        "the sealed copy's fallback, unlinked at once, in the checked state folder",
    ("provision/runner.py", "_open_log", "open_nofollow"): "a step's log",
    ("provision/runner.py", "_open_log", "fdopen"): "a step's log",
    ("validate/api.py", "_reports", "write_text"): "the --junit and --report files",
    ("validate/report.py", "save_history", "atomic_write"): "a stored run (data)",
}

# the files something runs, and the functions that write them: each through write_code
CODE = {
    ("provision/runner.py", "Runner._run"),           # PREFIX/.hpcprov/setup.sh
    ("validate/run.py", "copy_programs"),             # the programs and runtime.py
    ("validate/run.py", "_Rounds.run"),               # each job script
    ("hpcprov/schedulers/allocation.py", "OneAllocation._allocate"),  # the pilot
    ("hpcprov/schedulers/allocation.py", "OneAllocation._start"),     # a step file
}


def _mode(call: ast.Call) -> object:
    if len(call.args) > 1 and isinstance(call.args[1], ast.Constant):
        return call.args[1].value
    return next((k.value.value for k in call.keywords
                 if k.arg == "mode" and isinstance(k.value, ast.Constant)), "r")


def writes() -> list[tuple[str, str, str, int]]:
    """(file, function, writer, line) of every call that writes a file in hpcprov's code."""
    found: list[tuple[str, str, str, int]] = []
    for top in ("hpcprov", "provision", "validate"):
        for path in sorted((REPO / top).rglob("*.py")):
            rel = str(path.relative_to(REPO))
            stack: list[str] = []

            def visit(node: ast.AST, rel: str = rel, stack: list[str] = stack) -> None:
                named = isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
                if named:
                    stack.append(getattr(node, "name", "?"))
                if isinstance(node, ast.Call):
                    f = node.func
                    name = (f.attr if isinstance(f, ast.Attribute)
                            else f.id if isinstance(f, ast.Name) else None)
                    if name == "open":
                        if (isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name)
                                and f.value.id == "os"):
                            name = "os.open"
                        elif not (isinstance(_mode(node), str)
                                  and set(str(_mode(node))) & set("wax+")):
                            name = None
                    if name in WRITERS:
                        found.append((rel, ".".join(stack) or "<module>", str(name),
                                      node.lineno))
                for child in ast.iter_child_nodes(node):
                    visit(child)
                if named:
                    stack.pop()

            visit(ast.parse(path.read_text(encoding="utf-8")))
    return found


def test_every_write_of_code_goes_through_write_code() -> None:
    """A new write anywhere in hpcprov fails here until it is write_code (the one rule
    for code) or named in NOT_CODE with the reason it is not something a job runs."""
    found = writes()
    bypass = [f"{rel}:{line} {func}() writes with {name}" for rel, func, name, line in found
              if name != "write_code" and (rel, func, name) not in NOT_CODE]
    assert not bypass, ("writes that bypass fsutil.write_code; use it for a file something "
                        "runs, or name the write in NOT_CODE with why it is data: "
                        + "; ".join(bypass))
    seen = {(rel, func, name) for rel, func, name, _ in found}
    assert not set(NOT_CODE) - seen, f"stale NOT_CODE entries: {set(NOT_CODE) - seen}"
    through = {(rel, func) for rel, func, name, _ in found if name == "write_code"}
    assert through >= CODE, CODE - through


def test_write_code_replaces_a_planted_link_and_ignores_the_umask(tmp_path: Path) -> None:
    victim = tmp_path / "precious"
    victim.write_text("keep\n")
    folder = tmp_path / "new" / "run"
    old = os.umask(0o002)
    try:
        fsutil.code_folder(folder, "the programs")
        (folder / "job.sh").symlink_to(victim)
        fsutil.write_code(folder / "job.sh", "echo hi\n")
    finally:
        os.umask(old)
    assert victim.read_text() == "keep\n"
    assert not (folder / "job.sh").is_symlink()
    assert (folder / "job.sh").read_text() == "echo hi\n"
    for path in (tmp_path / "new", folder, folder / "job.sh"):
        assert not os.stat(path).st_mode & (stat.S_IWGRP | stat.S_IWOTH), path
    assert [p.name for p in folder.iterdir()] == ["job.sh"]  # no temporary file left


@pytest.mark.parametrize("where", ["above", "itself"])
def test_write_code_refuses_a_folder_another_user_could_write(tmp_path: Path,
                                                               where: str) -> None:
    project = tmp_path / "project"
    project.mkdir()
    folder = project / "run"
    if where == "above":
        project.chmod(0o2775)
    else:
        folder.mkdir()
        folder.chmod(0o2775)
    with pytest.raises(HpcprovError) as caught:
        fsutil.write_code(folder / "job.sh", "echo hi\n")
    bad = project if where == "above" else folder
    assert f"{bad} may be written by its group" in str(caught.value)
    assert "chmod +t" in str(caught.value) and "\n" not in str(caught.value)
    assert not (folder / "job.sh").exists()
    if where == "above":
        assert not folder.exists()  # refused before anything was made


@pytest.fixture
def fake_prefix(tmp_path: Path) -> Path:
    prefix = tmp_path / "env"
    (prefix / ".hpcprov").mkdir(parents=True)
    (prefix / ".hpcprov" / "manifest.json").write_text("{}")
    return prefix


def test_validate_refuses_a_group_writable_run_folder_before_writing(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, fake_prefix: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """validate's run folder is a trust boundary as the prefix is: in a setgid 2775 project
    folder a group member could rewrite envcheck.py while the job waits in the queue."""
    monkeypatch.setenv("HPCPROV_HISTORY", str(tmp_path / "history"))
    project = tmp_path / "scratch"
    project.mkdir()
    project.chmod(0o2775)
    res = cli(capsys, "validate", "--site", "local", "--env", str(fake_prefix), "--checks",
              "env", "--nodes", "1", "--workdir", str(project / "run"))
    assert_one_line_error(res, 2, f"{project} may be written by its group", "chmod +t")
    assert list(project.iterdir()) == []
    # the same folder made sticky (chmod +t): only an entry's owner may rename it
    project.chmod(0o3775)
    old = os.umask(0o002)
    try:
        fsutil.code_folder(project / "run", "the programs")
        copy_programs(project / "run")
    finally:
        os.umask(old)
    for path in (project / "run", *(project / "run").iterdir()):
        assert not os.stat(path).st_mode & (stat.S_IWGRP | stat.S_IWOTH), path


def _job_lines(rundir: Path) -> str:
    o = Options(JobRequest(load_site("local"), partition="local"), ("env",))
    job = plan_jobs(o)[0]
    return "\n".join(["set -eo pipefail", *program_check(job, str(rundir)), "echo RAN"])


@pytest.mark.parametrize("change", ["program", "runtime", "removed", "symlink"])
def test_a_job_refuses_a_program_changed_after_submission(tmp_path: Path, change: str) -> None:
    """The job script carries the SHA-256 of the program it runs and of runtime.py: a
    change between submission and start (however it was made) is refused in one line."""
    rundir = tmp_path / "run dir"
    fsutil.code_folder(rundir, "the programs")
    copy_programs(rundir)
    script = _job_lines(rundir)
    ok = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=60)
    assert ok.returncode == 0 and ok.stdout == "RAN\n", ok.stderr
    target = rundir / ("runtime.py" if change == "runtime" else "envcheck.py")
    if change == "removed":
        target.unlink()
    elif change == "symlink":
        evil = tmp_path / "evil.py"
        evil.write_text("print('evil')\n")
        target.unlink()
        target.symlink_to(evil)
    else:
        target.write_text(target.read_text() + "\nimport os; os.system('touch pwned')\n")
    bad = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 97 and "RAN" not in bad.stdout
    (line,) = bad.stderr.strip().splitlines()
    assert line == (f"hpcprov: {target} is not the program hpcprov wrote (it changed after "
                    "the job was submitted): refusing to run it; validate again from a "
                    "folder only you can write")
