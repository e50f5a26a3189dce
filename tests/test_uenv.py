"""uenv-style software stacks are a runtime like the others (issue 26): setup pulls the
stack and builds the environment inside it, jobs mount it, activate refuses without it."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from hpcprov_tests import cli, write_profile

from hpcprov.provision.plan import activate_lines, build_plan, render_script
from hpcprov.site.profiles import load_site

ALPS = """\
name: alps
extends: testbed
modules: {system: none}
uenv: {image: "prgenv-gnu/24.11:v1", view: default, mount: MOUNT}
"""

# a stub of the uenv command: logs its arguments; `run` mounts the stack for the command
# (its MOUNT/meta exists while the command runs), as the real one does
UENV = """#!/bin/bash
echo "uenv $*" >> "$UENV_LOG"
case "$1" in
  image) [ "$2" = pull ] && exit 0; exit 1 ;;   # inspect: not pulled yet
  repo) [ "$2" = create ] && exit 0; exit 1 ;;  # status: no repository yet
  run)
    shift
    while [ "$1" != "--" ]; do shift; done
    shift
    mkdir -p "$HPCPROV_UENV_MOUNT/meta"
    rc=0
    HPCPROV_TEST_INSIDE=1 "$@" || rc=$?
    rm -rf "$HPCPROV_UENV_MOUNT/meta"
    exit "$rc" ;;
esac
"""


@pytest.fixture()
def alps(tmp_path: Path) -> Path:
    return write_profile(tmp_path / "sites", "alps",
                         ALPS.replace("MOUNT", str(tmp_path / "user-environment")))


def test_jobs_mount_the_stack_through_slurms_uenv_plugin(
        capsys: pytest.CaptureFixture[str], alps: Path, tmp_path: Path) -> None:
    res = cli(capsys, "jobscript", "--site", str(alps), "-N", "2", "--", "python", "t.py")
    assert res.rc == 0, res.err
    assert "#SBATCH --uenv=prgenv-gnu/24.11:v1" in res.out.splitlines()
    assert "#SBATCH --view=default" in res.out.splitlines()
    guide = cli(capsys, "guide", "--site", str(alps))
    assert guide.rc == 0 and "salloc" in guide.out and "--uenv=prgenv-gnu/24.11:v1" in guide.out
    # a scheduler without a uenv plugin cannot mount it: one line, not a job that dies
    pbs = write_profile(tmp_path / "sites", "pbsuenv", "name: pbsuenv\nextends: sockeye\n"
                        "uenv: {image: prgenv-gnu/24.11:v1}\n")
    bad = cli(capsys, "jobscript", "--site", str(pbs), "-o", "account=st-x-1-gpu", "--",
              "python", "t.py")
    assert bad.rc == 2 and "[uenv]" in bad.err and "cannot mount" in bad.err


def test_setup_pulls_the_stack_then_runs_each_step_inside_it(alps: Path, tmp_path: Path) -> None:
    site = load_site(str(alps))
    plan = build_plan(site, str(tmp_path / "prefix"))
    ids = [s.id for s in plan.steps]
    assert ids[:3] == ["prepare", "pull-uenv", "preflight"]
    assert not plan.steps[1].in_stack and all(s.in_stack for s in plan.steps[2:])
    script = tmp_path / "setup.sh"
    script.write_text(render_script(plan))
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "uenv").write_text(UENV)
    (bindir / "uenv").chmod(0o755)
    log = tmp_path / "uenv.log"
    env = {**os.environ, "PATH": f"{bindir}:{os.environ['PATH']}", "UENV_LOG": str(log),
           "HPCPROV_NEED_MB": "1"}
    proc = subprocess.run(["bash", str(script), "prepare", "pull-uenv", "preflight"],
                          capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert log.read_text().splitlines() == [
        "uenv image inspect prgenv-gnu/24.11:v1", "uenv repo status", "uenv repo create",
        "uenv image pull prgenv-gnu/24.11:v1",
        f"uenv run --view=default prgenv-gnu/24.11:v1 -- bash {script} preflight"]
    assert "running step preflight inside uenv prgenv-gnu/24.11:v1" in proc.stderr
    # a step that fails inside the stack fails the setup with its status
    failing = script.read_text().replace("step_preflight() {\n",
                                         "step_preflight() {\n  [ -z \"$HPCPROV_TEST_INSIDE\" ]"
                                         " || exit 7\n", 1)
    script.write_text(failing)
    proc = subprocess.run(["bash", str(script), "preflight"], capture_output=True, text=True,
                          env=env, timeout=120)
    assert proc.returncode == 7, proc.stderr


def test_activate_refuses_outside_the_stack_naming_how_to_start_it(
        alps: Path, tmp_path: Path) -> None:
    site = load_site(str(alps))
    activate = tmp_path / "activate"
    activate.write_text("\n".join(activate_lines(site, str(tmp_path / "prefix"))) + "\n")
    proc = subprocess.run(["bash", "-c", f"source {activate} || exit $?; echo after"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1 and "after" not in proc.stdout
    assert "start it first (uenv start --view=default prgenv-gnu/24.11:v1)" in proc.stderr


def test_a_step_run_from_hpcprovs_sealed_copy_reaches_the_stack_as_a_private_file(
        alps: Path, tmp_path: Path) -> None:
    """Setup runs each step as `bash /dev/fd/N STEP` (provision/runner.py): a uenv run that
    passes no descriptor on (this stub closes every one above 2) still runs the step, from
    a private copy of the same bytes that is gone afterwards."""
    site = load_site(str(alps))
    plan = build_plan(site, str(tmp_path / "prefix"))
    bindir = tmp_path / "bin"
    bindir.mkdir()
    closing = UENV.replace('    HPCPROV_TEST_INSIDE=1 "$@" || rc=$?',
                           '    for fd in /proc/$$/fd/*; do n=${fd##*/}\n'
                           '      [ "$n" -gt 2 ] && eval "exec $n>&-"; done\n'
                           '    HPCPROV_TEST_INSIDE=1 "$@" || rc=$?')
    assert closing != UENV
    (bindir / "uenv").write_text(closing)
    (bindir / "uenv").chmod(0o755)
    log, tmp = tmp_path / "uenv.log", tmp_path / "tmp"
    tmp.mkdir()
    env = {**os.environ, "PATH": f"{bindir}:{os.environ['PATH']}", "UENV_LOG": str(log),
           "HPCPROV_NEED_MB": "1", "TMPDIR": str(tmp)}
    fd = os.memfd_create("setup.sh")
    try:
        os.write(fd, render_script(plan).encode())
        proc = subprocess.run(["bash", f"/dev/fd/{fd}", "prepare", "preflight"],
                              capture_output=True,
                              text=True, env=env, timeout=120, pass_fds=(fd,))
    finally:
        os.close(fd)
    assert proc.returncode == 0, proc.stderr
    (run,) = [line for line in log.read_text().splitlines() if " run " in line]
    copy = run.split(" -- bash ")[1].split()[0]
    # in the state folder (setup checks it is yours alone before every step), not $TMPDIR
    state = tmp_path / "prefix" / ".hpcprov"
    assert copy.startswith(f"{state}/.uenv-step.") and not Path(copy).exists()
    assert list(tmp.iterdir()) == []


def test_a_stack_mounted_elsewhere_than_uenv_mount_fails_once_saying_why(
        alps: Path, tmp_path: Path) -> None:
    """uenv run mounts the stack, but not where the profile's uenv.mount says: the step
    that uenv run started found no stack, called uenv run again, and so on without end.
    Now it fails once, in one line naming the mount and the fix."""
    site = load_site(str(alps))
    script = tmp_path / "setup.sh"
    script.write_text(render_script(build_plan(site, str(tmp_path / "prefix"))))
    bindir = tmp_path / "bin"
    bindir.mkdir()
    elsewhere = UENV.replace('mkdir -p "$HPCPROV_UENV_MOUNT/meta"', "mkdir -p elsewhere/meta")
    assert elsewhere != UENV
    (bindir / "uenv").write_text(elsewhere)
    (bindir / "uenv").chmod(0o755)
    log = tmp_path / "uenv.log"
    env = {**os.environ, "PATH": f"{bindir}:{os.environ['PATH']}", "UENV_LOG": str(log),
           "HPCPROV_NEED_MB": "1"}
    proc = subprocess.run(["bash", str(script), "prepare", "preflight"], capture_output=True,
                          text=True, env=env, timeout=60, cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr
    runs = [line for line in log.read_text().splitlines() if " run " in line]
    assert len(runs) == 1, runs
    mount = tmp_path / "user-environment"
    (line,) = [ln for ln in proc.stderr.splitlines() if "finds no stack" in ln]
    assert f"finds no stack at {mount}" in line and "set uenv.mount" in line
