"""The scheduler backends as units: the registry, what every backend answers, the command
runner they share, and lint across schedulers."""

from __future__ import annotations

import dataclasses
import sys
import time
from pathlib import Path

import pytest
from hpcprov_tests import BUNDLED, process_gone

from hpcprov import schedulers
from hpcprov.core.commands import run_command
from hpcprov.jobs.lint import lint
from hpcprov.request.job import JobRequest
from hpcprov.schedulers.base import Backend, Executor
from hpcprov.site.kinds import SCHEDULER_BACKENDS, Scheduler
from hpcprov.site.profiles import load_site
from hpcprov.site.sections import SCHEDULER_SECTIONS
from hpcprov.site.types import Site


def test_every_registered_scheduler_is_a_backend_with_its_profile_section() -> None:
    assert [s.value for s in Scheduler] == list(SCHEDULER_BACKENDS)
    for name in SCHEDULER_BACKENDS:
        backend = schedulers.backend(name)
        assert isinstance(backend, Backend) and backend.name == name
        assert isinstance(backend.executor(), Executor)
        if backend.settings:
            section = SCHEDULER_SECTIONS[name]
            assert {f.name for f in dataclasses.fields(section)} == set(backend.settings)
            assert name in {f.name for f in dataclasses.fields(Site)}


@pytest.mark.parametrize("site_name", BUNDLED)  # every backend a bundled profile uses
def test_each_backend_plans_a_job_without_asking_which_scheduler_it_is(site_name: str) -> None:
    site = load_site(site_name)
    backend = schedulers.of(site)
    req = JobRequest(site=site, nodes=1, command=("python", "x.py"),
                     options={n: "x" for n in site.policies.required_options})
    lines = backend.directives(req)
    assert all(line.startswith("#") for line in lines)
    assert bool(lines) == (backend.name != "none")
    assert backend.submit_argv("job.sh")[-1] == "job.sh"
    assert (backend.job_id() is None) == (backend.max_nodes == 1)


def test_another_schedulers_variable_is_refused_naming_both() -> None:
    site = load_site("neuron")
    req = JobRequest(site=site, nodes=1, command=("python", "x.py", "$LSB_DJOB_HOSTFILE"),
                     options={"comment": "pytorch"})
    (finding,) = [f for f in lint(req) if f.code == "lsf-variable"]
    assert "LSF variable" in finding.message and "runs Slurm" in finding.message
    assert "$SLURM_JOB_NODELIST" in finding.fix


def test_a_missing_command_is_a_result_not_an_exception(tmp_path: Path) -> None:
    got = run_command(["no-such-scheduler-cmd"], {"PATH": str(tmp_path)}, 5)
    assert got.returncode == 127 and "not found on PATH" in got.stderr


def test_a_hung_command_is_stopped_and_named() -> None:
    start = time.monotonic()
    got = run_command([sys.executable, "-c", "import time; time.sleep(30)"], None, 1)
    assert got.returncode == 124 and "did not answer within 1 s" in got.stderr
    assert time.monotonic() - start < 20


def test_a_hung_scheduler_command_is_killed_with_what_it_started() -> None:
    """sh signalled only the command on a timeout, and waited for its pipes, which the
    command's children held: now its whole session's group is killed."""
    got = run_command(["bash", "-c", 'sleep 600 & echo "$!"; sleep 600'], None, 1)
    assert got.returncode == 124 and "did not answer within 1 s" in got.stderr
    assert process_gone(int(got.stdout))


def test_a_command_that_leaves_a_child_holding_its_output_is_not_waited_for() -> None:
    got = run_command(["bash", "-c", 'sleep 600 & echo "$!"; exit 3'], None, 600)
    assert got.returncode == 3 and process_gone(int(got.stdout))


def test_output_status_and_stdin_come_back(tmp_path: Path) -> None:
    script = tmp_path / "in.txt"
    script.write_text("hello\n")
    got = run_command([sys.executable, "-c",
                       "import sys; print(sys.stdin.read().upper(), end=''); "
                       "print('warn', file=sys.stderr); sys.exit(3)"], None, 30, stdin=script)
    assert got == (3, "HELLO\n", "warn\n")


@pytest.mark.parametrize("fmt", ["{bogus}", "{nodes:>900000000}", "{nodes.__class__.__mro__}",
                                 "{nodes!r}", "{nodes}:ncpus={ncpus", "{}"])
def test_a_pbs_select_format_is_profile_text_not_a_format_string(tmp_path: Path,
                                                                 fmt: str) -> None:
    from hpcprov.site.profiles import check_file

    path = tmp_path / "sel.yaml"
    path.write_text(f"extends: sockeye\nname: sel\npbs:\n  select_format: '{fmt}'\n")
    (error,) = check_file(path)
    assert error.line == 4 and "pbs.select_format" in error.problem


def test_a_pbs_select_format_fills_only_its_fields() -> None:
    from hpcprov.schedulers.pbs import render_select

    assert render_select("{nodes}:ncpus={ncpus}:mpiprocs={mpiprocs}:ngpus={gpus}",
                         {"nodes": 2, "ncpus": 8, "mpiprocs": 4, "gpus": 4}) \
        == "2:ncpus=8:mpiprocs=4:ngpus=4"


def test_a_command_sees_no_terminal_so_it_never_waits_in_a_pager() -> None:
    got = run_command(["bash", "-c", "test -t 1 && echo tty || echo pipe"], None, 30)
    assert got.stdout == "pipe\n"

