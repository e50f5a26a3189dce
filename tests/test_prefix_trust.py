"""Trust, round three (issue 27, class 1): the prefix itself. `setup` runs
PREFIX/.hpcprov/setup.sh once per step, as whoever runs setup: nobody else may be able to
write or swap it, and nothing planted there is followed."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

import pytest
from hpcprov_tests import hpcprov_argv

from hpcprov.core.errors import HpcprovError


def setup(prefix: Path, *more: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*hpcprov_argv(), "setup", "--site", "local", "--prefix", str(prefix),
                           "--until", "preflight", *more],
                          capture_output=True, text=True, timeout=300)


def test_a_prefix_in_a_group_writable_folder_is_refused_before_anything_runs(
        tmp_path: Path) -> None:
    """In a setgid 2775 project folder (umask 002) a group member could rename a file over
    setup.sh between steps and have it run as the user running setup."""
    project = tmp_path / "project"
    project.mkdir()
    project.chmod(0o2775)
    res = setup(project / "env")
    assert res.returncode == 2, res.stdout + res.stderr
    err = res.stderr.strip()
    assert len(err.splitlines()) == 1
    assert f"{project} may be written by its group" in err and "chmod +t" in err
    assert not (project / "env").exists()  # refused before anything was created (issue 33)
    # a sticky folder (as /tmp): only an entry's owner may rename it; the prefix is made
    # writable by its owner alone, whatever the umask
    project.chmod(0o3777)
    old = os.umask(0o002)
    try:
        ok = setup(project / "env")
    finally:
        os.umask(old)
    assert ok.returncode == 0, ok.stderr
    for folder in (project / "env", project / "env" / ".hpcprov"):
        assert not os.stat(folder).st_mode & (stat.S_IWGRP | stat.S_IWOTH), folder


def test_a_group_writable_state_folder_is_refused(tmp_path: Path) -> None:
    prefix = tmp_path / "env"
    assert setup(prefix).returncode == 0
    (prefix / ".hpcprov").chmod(0o775)
    res = setup(prefix, "--redo")
    assert res.returncode == 2 and "may be written by its group" in res.stderr


def test_links_planted_at_the_script_lock_and_log_are_not_followed(tmp_path: Path) -> None:
    prefix = tmp_path / "env"
    state = prefix / ".hpcprov"
    (state / "logs").mkdir(parents=True)
    victims = {name: tmp_path / f"victim-{name}" for name in ("script", "lock", "log")}
    for victim in victims.values():
        victim.write_text("precious\n")
    (state / "setup.sh").symlink_to(victims["script"])
    (state / "lock").symlink_to(victims["lock"])
    (state / "logs" / "01-prepare.log").symlink_to(victims["log"])
    res = setup(prefix)
    # the lock is refused (a link there is not hpcprov's lock); nothing was written through
    assert all(v.read_text() == "precious\n" for v in victims.values()), res.stderr
    (state / "lock").unlink()
    res = setup(prefix)
    assert res.returncode == 0, res.stderr
    assert all(v.read_text() == "precious\n" for v in victims.values())
    assert not (state / "setup.sh").is_symlink() and "hpcprov setup plan" in (
        state / "setup.sh").read_text()


def test_a_fifo_as_the_journal_does_not_hang_setup(tmp_path: Path) -> None:
    prefix = tmp_path / "env"
    assert setup(prefix).returncode == 0
    journal = prefix / ".hpcprov" / "journal.json"
    journal.unlink()
    os.mkfifo(journal)
    res = setup(prefix)  # timeout=300 in setup(): a hang fails the test
    assert res.returncode in (0, 1, 2), res.stderr


def test_a_group_writable_folder_above_a_link_on_the_way_is_refused(tmp_path: Path) -> None:
    """The reason-giving check followed a symlink on the way to its target and stopped
    there: the folders above the link (where the link itself could be replaced) went
    unchecked, unlike safe_above's. One walker now serves both."""
    from hpcprov.core.fsutil import safe_above, why_untrusted

    shared = tmp_path / "shared"
    shared.mkdir()
    mine = tmp_path / "mine"
    mine.mkdir()
    (shared / "link").symlink_to(mine)
    shared.chmod(0o2775)
    state = shared / "link" / "env" / ".hpcprov"
    why = why_untrusted(state)
    assert why is not None and f"{shared} may be written by its group" in why
    assert not safe_above(shared / "link" / "x")
    shared.chmod(0o755)
    assert why_untrusted(state) is None and safe_above(shared / "link" / "x")


def _two_step_plan(prefix: Path, first: tuple[str, ...]):  # a Plan
    """The local profile's plan with two steps of the test's own: FIRST, then one that
    says it ran."""
    from dataclasses import replace

    from hpcprov.provision.plan import Step, build_plan
    from hpcprov.site.profiles import load_site

    plan = build_plan(load_site("local"), str(prefix))
    return replace(plan, steps=(Step("prepare", "swap the script", first),
                                Step("second", "the second step", ("echo SECOND-RAN",))))


@pytest.mark.parametrize("how", ["renamed-over", "written-in-place", "symlinked"])
def test_setup_sh_swapped_between_steps_by_the_same_user_is_not_run(tmp_path: Path,
                                                                    how: str) -> None:
    """The issue's "the setup script is executed from bytes hpcprov wrote and no one else
    can swap (not re-opened by path each step)": the first step replaces setup.sh (as
    anyone who could write the state folder might, between two steps); the second step
    still runs hpcprov's own bytes, never the swapped file."""
    from hpcprov.provision.progress import make_reporter
    from hpcprov.provision.runner import Runner

    prefix, marker = tmp_path / "env", tmp_path / "PWNED"
    evil = tmp_path / "evil.sh"
    evil.write_text(f"touch {marker}\necho EVIL-RAN\n")
    swap = {"renamed-over": f'cp {evil} "$STATE/new" && mv -f "$STATE/new" "$STATE/setup.sh"',
            "written-in-place": f'cat {evil} > "$STATE/setup.sh"',
            "symlinked": f'ln -sf {evil} "$STATE/setup.sh"'}[how]
    plan = _two_step_plan(prefix, ('mkdir -p "$STATE"', swap))
    result = Runner(plan, make_reporter(quiet=True), prefix_path=prefix).run()
    assert result.status == "ready" and result.ran == ["prepare", "second"]
    assert not marker.exists(), "the swapped setup.sh ran"
    log = (prefix / ".hpcprov" / "logs" / "02-second.log").read_text()
    assert "SECOND-RAN" in log and "EVIL-RAN" not in log
    assert "EVIL-RAN" in (prefix / ".hpcprov" / "setup.sh").read_text()  # it was swapped


def test_the_state_folder_is_checked_again_before_each_step(tmp_path: Path) -> None:
    """A step that leaves a folder above the state writable by its group (a `chmod g+w` in a
    profile's commands, say) stops the setup before the next step runs. (What a step leaves
    group-writable inside the prefix, the step's own end takes back: issue 41.)"""
    from hpcprov.provision.progress import make_reporter
    from hpcprov.provision.runner import Runner

    prefix = tmp_path / "area" / "env"
    prefix.parent.mkdir()
    plan = _two_step_plan(prefix, ('mkdir -p "$STATE"', 'chmod g+w "$STATE" "$PREFIX/.."'))
    with pytest.raises(HpcprovError, match=f"{prefix.parent} may be written by its group"):
        Runner(plan, make_reporter(quiet=True), prefix_path=prefix).run()
    assert not (prefix / ".hpcprov" / "logs" / "02-second.log").exists()
    assert not (prefix / ".hpcprov").stat().st_mode & 0o022  # taken back after the step


def test_a_fifo_as_a_step_log_does_not_hang_setup(tmp_path: Path) -> None:
    """A FIFO at a log's name (no reader): opening it to write waited for a reader forever.
    It is replaced by a new log now."""
    prefix = tmp_path / "env"
    assert setup(prefix).returncode == 0
    log = prefix / ".hpcprov" / "logs" / "01-prepare.log"
    log.unlink()
    os.mkfifo(log)
    res = subprocess.run([*hpcprov_argv(), "setup", "--site", "local", "--prefix", str(prefix),
                          "--until", "preflight", "--redo"],
                         capture_output=True, text=True, timeout=60)  # the hang guard
    assert res.returncode == 0, res.stderr
    assert stat.S_ISREG(os.lstat(log).st_mode) and "==> [hpcprov] prepare" in log.read_text()
