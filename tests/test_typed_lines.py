"""Issue 45: the lines hpcprov prints for a person to type (`launch`, `launch --allocate`,
the guide's "Run interactively") load what the batch job loads, cannot close the person's
shell, and are never lines the CLI refuses (defects 6, 18, 13's interactive part;
deliverables 1 and 9)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from hpcprov_tests import assert_one_line_error, cli, write_profile

from hpcprov.jobs.api import plan_jobscript, plan_launch
from hpcprov.request.job import JobRequest
from hpcprov.site.profiles import load_site

APPTAINER = Path(__file__).parents[1] / "docs" / "examples" / "slurm-apptainer.yaml"


def test_a_stopping_setup_line_ends_a_subshell_not_the_persons_shell(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """Defect 18: the image check of a launch (`exit 1` where no image matches the site's
    glob) closed the shell of the person who pasted the lines. Typed now, it ends a
    subshell: the message is printed and the person's shell goes on."""
    res = cli(capsys, "launch", "--site", str(APPTAINER), "-N", "1", "--", "python", "t.py")
    assert res.rc == 0, res.err
    lines = res.out.splitlines()
    assert "(" in lines and lines[-1] == ")"
    env = {**os.environ, "SCRATCH": str(tmp_path)}  # no image there
    ran = subprocess.run(["bash", "-c", res.out + "echo the-shell-goes-on\n"], env=env,
                         capture_output=True, text=True, cwd=tmp_path)
    assert "no container image matches" in ran.stderr
    assert ran.stdout.strip().endswith("the-shell-goes-on"), ran


def test_assignments_only_are_typed_as_they_are(capsys: pytest.CaptureFixture[str]) -> None:
    """A launch whose setup only assigns (the rank contract, exports) needs no subshell: its
    last line is the launch line, as the site's tutorial writes it."""
    res = cli(capsys, "launch", "--site", "neuron", "-N", "1", "-l", "mpirun", "--",
              "python", "t.py")
    assert res.rc == 0 and res.out.splitlines()[-1].startswith("mpirun ")
    assert "(" not in res.out.splitlines()


@pytest.mark.parametrize(("launcher", "must"), [
    ("mpirun", ["module load gcc/10.2.0 cuda/11.4 cudampi/openmpi-4.1.1",
                "conda activate horovod"]),
    ("container", ["module purge", "module load singularity/3.9.7"]),
])
def test_typed_lines_load_what_the_batch_job_loads(launcher: str, must: list[str]) -> None:
    """Defects 13 and 18: `launch` (and `launch --allocate`) printed no module loads and no
    activation, and a container launcher's lines not containers.module: typed in a fresh
    allocation, the launch found no MPI, no Python, no runtime. Now the lines carry the batch
    job's own, in its order."""
    req = JobRequest(site=load_site("neuron"), nodes=1, launcher=launcher,
                     command=("python", "t.py"), options={"comment": "python"},
                     time="01:00:00")
    typed = plan_launch(req, allocate=True).lines(True)
    script = plan_jobscript(req).script.splitlines()
    for line in must:
        assert line in typed and line in script
    assert [ln for ln in typed if ln in must] == [ln for ln in script if ln in must]
    assert typed.index(must[-1]) < next(i for i, ln in enumerate(typed) if ln.startswith(
        ("hpcprov_rank=", "(")))


def test_the_guide_shows_no_command_the_cli_refuses(capsys: pytest.CaptureFixture[str],
                                                   tmp_path: Path) -> None:
    """Deliverable 1: the guide printed its example batch script and its salloc line
    unlinted: for a partition taking jobs of 4 nodes or more, a 2-node script that `hpcprov
    jobscript` refuses. Now it says why in one line instead of showing it."""
    path = write_profile(tmp_path, "big", "extends: neuron\nname: big\npartitions:\n"
                         "  amd_a100nv_8:\n    limits: {min_nodes_per_job: 4}\n")
    res = cli(capsys, "guide", "--site", str(path))
    assert res.rc == 0, res.err
    assert "#SBATCH" not in res.out and "salloc " not in res.out
    assert "refuses" in res.out and "[nodes-limit]" in res.out
    refused = cli(capsys, "jobscript", "--site", str(path), "-N", "2", "-o", "comment=python",
                  "--", "python", "train_hvd.py")
    assert refused.rc == 2 and "[nodes-limit]" in refused.err


def test_a_site_without_a_known_scheduler_is_refused_in_one_line_each(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """Deliverable 9: with scheduler none, jobscript -N 2 printed two errors (the node count
    and "no scheduler"), validate a partition fact that did not say why; each now says in one
    line that hpcprov knows no scheduler there."""
    res = cli(capsys, "jobscript", "--site", "local", "-N", "2", "--", "python", "t.py")
    assert_one_line_error(res, 2, "[nodes-local]", "no scheduler hpcprov knows")
    res = cli(capsys, "validate", "--site", "local", "-N", "2", "--dry-run", "--env",
              str(tmp_path / "env"), "--workdir", str(tmp_path / "run"))
    assert_one_line_error(res, 2, "[nodes-local]", "no scheduler hpcprov knows",
                          "nothing was submitted")


def test_what_only_a_scheduler_reads_is_said_to_be_dropped(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Defect 6: with scheduler none, job options, --time and --job-name were accepted and
    dropped in silence."""
    res = cli(capsys, "jobscript", "--site", "local", "-t", "01:00:00", "-J", "x", "-o",
              "account=y", "--", "python", "t.py")
    assert res.rc == 0
    (line,) = [ln for ln in res.err.splitlines() if "[no-scheduler]" in ln]
    assert "-o" in line and "--time" in line and "--job-name" in line
    quiet = cli(capsys, "jobscript", "--site", "local", "--", "python", "t.py")
    assert "[no-scheduler]" not in quiet.err


def test_an_interactive_allocation_asks_for_the_sites_interactive_time(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """Defect 20: [no-time] fired on most bundled sites, so users learned to ignore it.
    Neuron's public 48 h default is now the profile's (no warning), and its 8 h cap on
    interactive jobs, limits.interactive_walltime, what salloc asks for; above max_walltime
    it is refused at its line."""
    batch = cli(capsys, "jobscript", "--site", "neuron", "-N", "2", "-o", "comment=python",
                "--", "python", "t.py")
    assert batch.rc == 0 and "[no-time]" not in batch.err
    assert "#SBATCH --time=2-00:00:00" in batch.out
    typed = cli(capsys, "launch", "--site", "neuron", "-N", "2", "--allocate", "-o",
                "comment=python", "--", "python", "t.py")
    assert typed.rc == 0 and typed.out.startswith("salloc ")
    assert "--time=08:00:00" in typed.out.splitlines()[0]
    given = cli(capsys, "launch", "--site", "neuron", "-N", "2", "--allocate", "-t", "1:00:00",
                "-o", "comment=python", "--", "python", "t.py")
    assert "--time=1:00:00" in given.out.splitlines()[0]
    path = write_profile(tmp_path, "long", "extends: neuron\nname: long\npartitions:\n"
                         "  skl:\n    limits: {interactive_walltime: '3-00:00:00'}\n")
    assert_one_line_error(cli(capsys, "site", "check", str(path)), 2, "interactive_walltime",
                          "longer than max_walltime")
