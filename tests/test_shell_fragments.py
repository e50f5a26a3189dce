"""Bash kept in files (issue 25): the allocation pilot (hpcprov/schedulers/allocation_pilot.sh),
the setup script's dispatcher (hpcprov_run in provision/scripts/common.sh) and the status
trap of validation jobs (validate/scripts/status_trap.sh) are shell files, shellchecked as
files, shipped as package data and carried verbatim into what runs, with every value set by
a quoted assignment; the user guide is the template hpcprov/app/guide.md.in filled in."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib
from hpcprov_tests import BUNDLED, REPO, needs_shellcheck, write_profile

from hpcprov.app import guide
from hpcprov.core.shell import NO_WRITE_FOR_OTHERS
from hpcprov.provision import library
from hpcprov.provision.plan import build_plan, dispatcher, render_script
from hpcprov.request.job import JobRequest
from hpcprov.schedulers import allocation
from hpcprov.site.profiles import load_site
from hpcprov.validate import plan as validate_plan

PILOT = REPO / "hpcprov" / "schedulers" / "allocation_pilot.sh"
TRAP = REPO / "validate" / "scripts" / "status_trap.sh"
COMMON = REPO / "provision" / "scripts" / "common.sh"
TEMPLATE = REPO / "hpcprov" / "app" / "guide.md.in"
RANK = REPO / "hpcprov" / "jobs" / "rank_env.sh"
FRAGMENTS = [PILOT, TRAP, RANK]
HOSTILE = ["a b", "$(touch x)", "it's", "`touch y`"]


def body(path: Path) -> str:
    """What a script carries of a fragment file: everything after its header."""
    return path.read_text(encoding="utf-8").split("\n\n", 1)[1]


# ---- the files: shellchecked, shipped, the ones the code reads -------------------------

@needs_shellcheck
@pytest.mark.parametrize("path", FRAGMENTS, ids=[p.name for p in FRAGMENTS])
def test_every_fragment_file_passes_shellcheck(path: Path) -> None:
    """As a file, at shellcheck's default severity (style and up), for bash."""
    proc = subprocess.run(["shellcheck", "-s", "bash", str(path)], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout


def test_ci_shellchecks_the_fragment_files() -> None:
    line = next(ln for ln in (REPO / ".ci" / "lint").read_text().splitlines()
                if ln.startswith("shellcheck "))
    checked = {p for word in shlex.split(line)[1:] if not word.startswith("-")
               for p in REPO.glob(word)}
    assert {*FRAGMENTS, COMMON} <= checked


def test_the_files_are_package_data_and_the_ones_the_code_reads() -> None:
    data = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    tool = data["tool"]["setuptools"]
    folders = {package: REPO / folder for package, folder in tool["package-dir"].items()}
    for package, path in [("hpcprov.schedulers", PILOT), ("hpcprov.validate", TRAP),
                          ("hpcprov.provision", COMMON), ("hpcprov.app", TEMPLATE),
                          ("hpcprov.jobs", RANK)]:
        folder = folders.get(package, REPO / package.replace(".", "/"))
        globs = tool["package-data"][package]
        assert path in {p for g in globs for p in folder.glob(g)}, (package, path)
    assert allocation.PILOT.resolve() == PILOT
    assert validate_plan.STATUS_TRAP.resolve() == TRAP
    assert guide.TEMPLATE.resolve() == TEMPLATE


def test_an_installed_copy_carries_the_files_and_renders_the_same(tmp_path: Path) -> None:
    """A real (non-editable) install, as a user makes (a few seconds): the fragments and
    the template are in it (without their package-data lines they are not), and what it
    generates is what the source tree generates."""
    copy = tmp_path / "installed"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps",
                    "--no-build-isolation", "--target", str(copy), str(REPO)], check=True,
                   capture_output=True, timeout=600)
    for name in ("schedulers/allocation_pilot.sh", "validate/scripts/status_trap.sh",
                 "provision/scripts/common.sh", "app/guide.md.in", "jobs/rank_env.sh"):
        assert (copy / "hpcprov" / name).is_file(), name
    probe = ("import sys, hpcprov;"
             "from hpcprov.schedulers.allocation import pilot_lines;"
             "from hpcprov.validate.plan import status_trap;"
             "from hpcprov.provision.plan import build_plan, render_script;"
             "from hpcprov.app.guide import render_guide;"
             "from hpcprov.site.profiles import load_site;"
             "site = load_site('local');"
             "print(hpcprov.__file__);"
             "print('\\n'.join(pilot_lines('/q', 'echo n1')));"
             "print('\\n'.join(status_trap('/e')));"
             "print(render_script(build_plan(site, '/p')));"
             "print(render_guide(site))")
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          cwd=tmp_path, env={"PYTHONPATH": str(copy), "PATH": "/usr/bin:/bin",
                                             "HOME": str(tmp_path)}, timeout=120)
    assert proc.returncode == 0, proc.stderr
    where, rest = proc.stdout.split("\n", 1)
    assert Path(where).is_relative_to(copy)
    site = load_site("local")
    assert rest == "\n".join([*allocation.pilot_lines("/q", "echo n1"),
                              *validate_plan.status_trap("/e"),
                              render_script(build_plan(site, "/p")),
                              guide.render_guide(site)]) + "\n"


# ---- carried verbatim, values quoted before them ---------------------------------------

@pytest.mark.parametrize("queue", ["/q", *HOSTILE])
def test_the_allocation_script_carries_the_pilot_file_verbatim(queue: str,
                                                               tmp_path: Path) -> None:
    o = validate_plan.Options(JobRequest(load_site("testbed"), partition="amd_a100nv_8",
                                         nodes=2, prefix="/p"), ("env",), device="cpu")
    text = validate_plan.allocation_script(o, tmp_path / queue)
    head, carried = text.split("\n# hpcprov/schedulers/allocation_pilot.sh, verbatim", 1)
    assert "# hpcprov/schedulers/allocation_pilot.sh, verbatim" + carried == body(PILOT)
    assert head.endswith("\n".join([
        f"q={shlex.quote(str(tmp_path / queue))}", "idle_s=300",
        "hpcprov_allocation_nodes() {", '  scontrol show hostnames "$SLURM_JOB_NODELIST"',
        "}"]))


def test_job_scripts_carry_the_status_trap_file_verbatim() -> None:
    o = validate_plan.Options(JobRequest(load_site("sockeye"), partition="gpu", activate=False),
                              ("allreduce",))
    job = validate_plan.plan_jobs(o)[0]
    script = validate_plan.job_script(job, o, "/run dir", ("python", "a.py"))
    assert f"\nhpcprov_exit_file='/run dir/{job.id}.exit'\n" + body(TRAP) in script


@pytest.mark.parametrize("site", BUNDLED)
def test_the_setup_script_ends_with_the_librarys_dispatcher(site: str) -> None:
    """hpcprov_run is common.sh's function (its comment left out), after the array of the
    steps, before the line that calls it."""
    plan = build_plan(load_site(site), "/p")
    definition = library.functions()["hpcprov_run"].split("\n")
    assert definition[0].startswith("# hpcprov_run STEP...")
    assert dispatcher() == definition[definition.index("hpcprov_run() {"):]
    assert "\n".join(dispatcher()) + "\n" in COMMON.read_text(encoding="utf-8")
    tail = render_script(plan).split("\nHPCPROV_STEPS=(", 1)[1].split("\n")
    assert tail[1:] == [*dispatcher(), 'if [ "$#" -gt 0 ]; then hpcprov_run "$@"; '
                        'else hpcprov_run "${HPCPROV_STEPS[@]}"; fi', ""]


# ---- what the files do, under bash ------------------------------------------------------

@pytest.mark.parametrize("name", ["exit.txt", *HOSTILE])
@pytest.mark.parametrize("status", [0, 3])
def test_the_status_trap_records_the_status_and_the_times(name: str, status: int,
                                                          tmp_path: Path) -> None:
    path = tmp_path / name
    script = "\n".join([*validate_plan.status_trap(str(path)), "sleep 0.05",
                        f"exit {status}"]) + "\n"
    proc = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=30,
                          cwd=tmp_path)
    assert proc.returncode == status, proc.stderr
    got, t0, t1 = path.read_text().split()
    assert got == str(status) and float(t0) + 0.05 <= float(t1)
    assert sorted(p.name for p in tmp_path.iterdir()) == [name]  # nothing ran


def test_the_dispatcher_runs_the_named_steps_or_all_and_refuses_unknown_ones(
        tmp_path: Path) -> None:
    lines = render_script(build_plan(load_site("local"), "/p")).split("\n")
    call = next(ln for ln in lines if ln.startswith('if [ "$#" -gt 0 ]'))
    script = tmp_path / "setup.sh"
    script.write_text("\n".join(["set -eo pipefail", "HPCPROV_STEPS=(one two-b)",
                                 "step_one() { echo 1; }", "step_two_b() { echo 2; }",
                                 *dispatcher(), call]) + "\n")

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["bash", str(script), *args], capture_output=True, text=True,
                              timeout=30)

    every = run()
    assert (every.returncode, every.stdout) == (0, "1\n2\n")
    assert every.stderr == "==> [hpcprov] one\n==> [hpcprov] two-b\n"
    assert run("two-b").stdout == "2\n"
    unknown = run("one", "nope")
    assert (unknown.returncode, unknown.stdout) == (2, "1\n")
    assert unknown.stderr.endswith("hpcprov: unknown step nope (steps: one two-b)\n")


def test_the_pilot_reads_its_idle_time_from_its_variable(tmp_path: Path) -> None:
    queue = tmp_path / "q"
    queue.mkdir()
    lines = allocation.pilot_lines(str(queue), "printf 'n1\\nn2\\n'", idle_s=0)
    assert lines[:3] == [NO_WRITE_FOR_OTHERS, f"q={shlex.quote(str(queue))}", "idle_s=0"]
    proc = subprocess.run(["bash", "-c", "\n".join(lines)], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "hpcprov: no step for 0 s: ending the allocation\n"
    assert (queue / "nodes").read_text() == "n1\nn2\n"


# ---- the guide: the template filled in --------------------------------------------------

@pytest.mark.parametrize("site", BUNDLED)
def test_the_guide_is_the_template_filled_in(site: str) -> None:
    """Every line of the template's guide section that holds no placeholder is in the guide,
    in order."""
    text = guide.render_guide(load_site(site)).split("\n")
    fixed = [ln for ln in guide._sections()["guide"] if ln and "${" not in ln]
    assert fixed and "## 3. Submit a batch job" in fixed
    at = 0
    for line in fixed:
        at = text.index(line, at) + 1


def test_the_templates_sections_are_the_ones_the_code_fills() -> None:
    names = set(re.findall(r'_section\(\s*"([a-z-]+)"', Path(guide.__file__).read_text()))
    assert names == set(guide._sections())
    assert all(lines[-1] == "" for lines in guide._sections().values())
    assert guide._section("jobscript-error", error="no ${site} $x") == [
        "(cannot generate the example: no ${site} $x)", ""]
    assert guide._section("jobscript", script=["a", "${b}"]) == [
        "```bash", "a", "${b}", "```", ""]


def test_profile_values_are_never_read_as_template_text(tmp_path: Path) -> None:
    path = write_profile(tmp_path, "dollars", (
        "extends: local\nname: dollars\n"
        "description: costs $5 ${site} $$ ${text}\n"
        "guide:\n  Money ${title}: 'pay $$ ${text}\n\n    twice'\n"))
    text = guide.render_guide(load_site(str(path)))
    assert "\ncosts $5 ${site} $$ ${text}\n\n## The cluster\n" in text
    assert text.endswith("\n## Money ${title}\n\npay $$ ${text}\ntwice\n")
