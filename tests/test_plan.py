"""The setup plan and its rendered script: named steps, order, JSON = script."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from hpcprov_tests import BUNDLED, Stubs, cli, stub_steps, trust_stub_installer, write_profile

from hpcprov.provision.plan import activate_lines, build_plan, render_script
from hpcprov.site.launcher_kinds import KINDS
from hpcprov.site.profiles import load_site


def script_steps(script: str) -> list[str]:
    m = re.search(r"^HPCPROV_STEPS=\((.*)\)$", script, flags=re.M)
    assert m, "no HPCPROV_STEPS array"
    return m.group(1).split()


def local_setup(capsys: pytest.CaptureFixture[str], prefix: Path, *extra: str) -> str:
    res = cli(capsys, "setup", "--site", "local", "--prefix", str(prefix), "--dry-run", *extra)
    assert res.rc == 0, res.err
    return res.out


def announced(stderr: str) -> list[str]:
    return re.findall(r"^==> \[hpcprov\] (\S+)$", stderr, flags=re.M)


def test_a_single_named_step_runs_alone(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                        stubs: Stubs) -> None:
    prefix = tmp_path / "opt" / "hpcprov"
    script = local_setup(capsys, prefix)
    proc = stubs.run(script, "prepare", name="setup.sh")
    assert proc.returncode == 0, proc.stderr
    assert prefix.is_dir()
    assert announced(proc.stderr) == ["prepare"]
    assert sorted(prefix.iterdir()) == [prefix / ".hpcprov"]  # create-env etc. did not run
    assert stubs.calls() == []


def test_named_steps_run_in_the_given_order(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                            stubs: Stubs) -> None:
    prefix = tmp_path / "p"
    site = load_site("local")
    script = local_setup(capsys, prefix)
    proc = stubs.run(script, "prepare", "write-activate", name="setup.sh")
    assert proc.returncode == 0, proc.stderr
    assert announced(proc.stderr) == ["prepare", "write-activate"]
    written = (prefix / "activate").read_text(encoding="utf-8")
    assert written.splitlines() == activate_lines(site, str(prefix))
    assert not (prefix / "activate.part").exists()


def test_unknown_step_exits_2_and_lists_the_steps(tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str],
                                                  stubs: Stubs) -> None:
    prefix = tmp_path / "p"
    script = local_setup(capsys, prefix)
    proc = stubs.run(script, "prepare", "no-such-step", name="setup.sh")
    assert proc.returncode == 2
    (line,) = [x for x in proc.stderr.splitlines() if "no-such-step" in x]
    for step in script_steps(script):
        assert step in line
    # nothing after the unknown step ran, steps before it did
    assert announced(proc.stderr) == ["prepare"]
    # an unknown step alone runs nothing at all
    other = tmp_path / "q"
    proc = stubs.run(local_setup(capsys, other), "bogus", name="setup2.sh")
    assert proc.returncode == 2 and not other.exists()


def test_the_whole_script_runs_every_step_in_order(tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str],
                                                   stubs: Stubs) -> None:
    prefix = tmp_path / "p"
    script = local_setup(capsys, prefix)
    proc = stubs.run(script, *stub_steps(script), name="setup.sh")
    assert proc.returncode == 0, proc.stderr
    assert announced(proc.stderr) == stub_steps(script)
    assert (prefix / "venvs" / "horovod" / "bin" / "activate").is_file()
    assert (prefix / "activate").is_file()
    pip = [c for c in stubs.calls("python") if "install" in c]
    assert any("horovod==0.28.1" in c and "download" in c for c in stubs.calls("python"))
    # local's installer is auto: uv where it is (here a stub), into the environment's python
    uv = [c for c in stubs.calls("uv") if c[1:3] == ["pip", "install"]]
    assert any("torch==2.13.0" in c and c[3:5] == ["--python", str(stubs.bin / "python")]
               for c in uv)
    assert not any("torch==2.13.0" in c for c in pip)


def test_a_failing_step_stops_the_run_and_names_itself(tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]
                                                       ) -> None:
    stubs = Stubs.create(tmp_path / "sandbox", failing=["horovodrun"])
    prefix = tmp_path / "p"
    script = local_setup(capsys, prefix)
    proc = stubs.run(script, name="setup.sh")
    assert proc.returncode != 0
    steps = script_steps(script)
    ran = announced(proc.stderr)
    assert ran == steps[: steps.index("check-build") + 1]  # stopped at the failing step
    assert not (prefix / "activate").exists()  # later steps did not run


@pytest.mark.parametrize("site", BUNDLED)
def test_json_steps_match_the_script(capsys: pytest.CaptureFixture[str], site: str) -> None:
    res = cli(capsys, "setup", "--site", site, "--dry-run", "--json")
    assert res.rc == 0, res.err
    data = json.loads(res.out)
    plan, script = data["plan"], data["script"]
    ids = [s["id"] for s in plan["steps"]]
    assert ids == script_steps(script)
    assert ids[0] == "prepare" and len(set(ids)) == len(ids)
    m = re.search(r"^# Steps: (.*)$", script, flags=re.M)
    assert m and m.group(1).split() == ids
    for step in plan["steps"]:
        assert f"\n{step['function']}() {{\n" in script
        assert step["function"] == "step_" + step["id"].replace("-", "_")
        comment = re.search(rf"^# {re.escape(step['id'])}: (.*)$", script, flags=re.M)
        assert comment, step["id"]
        assert comment.group(1).endswith("(needs network)") is step["needs_network"]
    # the plan's variables are assigned and exported by the script
    for name in plan["variables"]:
        assert re.search(rf"^{name}=", script, flags=re.M)
    assert re.search(r"^export " + " ".join(plan["variables"]) + "$", script, flags=re.M)


@pytest.mark.parametrize("site", BUNDLED)
def test_plan_is_pure_and_deterministic(tmp_path: Path, site: str) -> None:
    s = load_site(site)
    first = render_script(build_plan(s, prefix=str(tmp_path / "x")))
    assert first == render_script(build_plan(s, prefix=str(tmp_path / "x")))
    assert not (tmp_path / "x").exists()  # building and rendering touch nothing


def test_runs_on_changes_the_header_only_where_it_matters() -> None:
    cc = load_site("cc")
    login, compute = build_plan(cc, runs_on="login"), build_plan(cc, runs_on="compute")
    assert [s.id for s in login.steps] == [s.id for s in compute.steps]
    assert "runs on the compute node" in render_script(compute)


@pytest.mark.parametrize("site", BUNDLED)
def test_jobs_run_in_the_environment_setup_built(tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str],
                                                 stubs: Stubs, site: str,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """setup (all steps) then the job script, both against stub tools and one --prefix:
    every path the job sources must be one the setup created."""
    if trust_stub_installer(tmp_path / "sites", site):  # a pinned installer: the stub's
        monkeypatch.setenv("HPCPROV_SITES_PATH", str(tmp_path / "sites"))
    prefix = tmp_path / "prefix"
    res = cli(capsys, "setup", "--site", site, "--prefix", str(prefix), "--dry-run")
    assert res.rc == 0, res.err
    proc = stubs.run(res.out, *stub_steps(res.out), name="setup.sh")
    assert proc.returncode == 0, proc.stderr
    s = load_site(site)
    options = [f"--option={n}={r.default or r.example or 'x'}"
               for n, r in s.policies.required_options.items()]
    res = cli(capsys, "jobscript", "--site", site, "--prefix", str(prefix), *options,
              "--", "python", "train.py")
    assert res.rc == 0, res.err
    stubs.reset_log()
    nodefile = stubs.work / "nodefile"
    nodefile.write_text("node1\n", encoding="utf-8")
    proc = stubs.run(res.out, name="job.sh", extra_env={
        "PBS_O_WORKDIR": str(stubs.work), "PBS_NODEFILE": str(nodefile),
        "SLURM_JOB_NODELIST": "node1", "SLURM_JOB_ID": "1", "PBS_JOBID": "1"})
    assert proc.returncode == 0, proc.stderr
    calls = stubs.calls()
    assert calls, "the launcher was never started"
    launcher = calls[-1]
    assert launcher[0] in KINDS  # a launcher kind's program (each is named for its program)
    assert launcher[-1] in {"train.py", "python -u train.py"}


def test_neuron_through_its_singularity_image(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                              stubs: Stubs) -> None:
    """--container: the site's own .sif is used where it is (no pull) and checked with -cb."""
    res = cli(capsys, "setup", "--site", "neuron", "--container", "pytorch", "--prefix",
              str(tmp_path / "p"), "--dry-run")
    assert res.rc == 0, res.err
    script = res.out
    assert script_steps(script) == ["prepare", "preflight", "check-image", "check-build"]
    image = "/apps/applications/singularity_images/ngc/pytorch_22.03-hd-py3.sif"
    check = [ln.strip() for ln in script.split("step_check_build() {")[1].split("}")[0]
             .splitlines() if ln.strip()]
    assert check == ["hpcprov_modules_init", "module load singularity/3.9.7",
                     f"singularity exec --nv {image} horovodrun -cb"]
    assert " pull " not in script
    # the image is not on this machine: the step says so, by name, and stops
    proc = stubs.run(script, "check-image", name="setup.sh")
    assert proc.returncode == 3
    assert f"image {image} not readable here" in proc.stderr


def test_technion_image_without_horovod_gets_it_installed_inside(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """enroot import to a base image, Horovod pip-installed in a writable container with the
    build variables, exported to the image that jobs run, then checked with -cb."""
    from hpcprov_tests import words, write_profile

    write_profile(tmp_path, "tech-nohvd", "extends: technion\nname: tech-nohvd\npython:\n"
                  "  container: {image: pytorch, source: 'docker://nvcr.io#nvidia/pytorch:"
                  "22.09-py3', add_horovod: true}\nhorovod: {frameworks: [pytorch]}\n")
    monkeypatch.setenv("HPCPROV_SITES_PATH", str(tmp_path))
    res = cli(capsys, "setup", "--site", "tech-nohvd", "--dry-run")
    assert res.rc == 0, res.err
    script = res.out
    assert script_steps(script) == ["prepare", "preflight", "import-image", "add-horovod",
                                    "check-build"]
    body = script.split("step_add_horovod() {")[1].split("\n}")[0]
    lines = [words(ln) for ln in body.strip().splitlines()]
    start = next(w for w in lines if w[:3] == ["enroot", "start", "--rw"])
    inner = start[-1]  # the sh -c text run inside the container
    assert "HOROVOD_GPU_OPERATIONS=NCCL" in inner and "HOROVOD_WITH_PYTORCH=1" in inner
    assert "pip install" in inner and "horovod==0.28.1" in inner
    export = next(w for w in lines if w[:2] == ["enroot", "export"])
    assert export[-2:] == ["$HOME/hpcprov/images/pytorch.sqsh", "hpcprov-pytorch"] or \
        export[-1] == "hpcprov-pytorch"
    imp = script.split("step_import_image() {")[1].split("\n}")[0]
    assert "enroot import -o" in imp and "pytorch-base.sqsh" in imp
    assert "docker://nvcr.io#nvidia/pytorch:22.09-py3" in imp


def test_site_env_means_the_same_in_activate_and_the_setup_script(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """$NAME expands when the line runs, a command substitution stays text, as in jobs."""
    import subprocess

    sites = tmp_path / "sites"
    write_profile(sites, "envy", "extends: local\nname: envy\n"
                  "env: {DATA: '$HOME/data', ODD: '$(echo pwned)'}\n")
    monkeypatch.setenv("HPCPROV_SITES_PATH", str(sites))
    site = load_site("envy")
    activate = [ln for ln in activate_lines(site, "/p") if "DATA" in ln or "ODD" in ln]
    runtime = build_plan(site).functions["hpcprov_modules_runtime"]
    assert [ln for ln in runtime if "DATA" in ln or "ODD" in ln] == activate
    out = subprocess.run(["bash", "-c", "\n".join([*activate, 'echo "$DATA|$ODD"'])],
                         capture_output=True, text=True, timeout=30,
                         env={"HOME": "/h", "PATH": "/usr/bin:/bin"}).stdout
    assert out.strip() == "/h/data|$(echo pwned)"


def test_the_profiles_trusted_publishers_reach_the_wheelhouse_lookup_and_publish(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sites = tmp_path / "sites"
    write_profile(sites, "trusty", "extends: local\nname: trusty\n"
                                       "paths: {wheelhouse_trust: [alice, '@hpc-staff']}\n")
    monkeypatch.setenv("HPCPROV_SITES_PATH", str(sites))
    script = render_script(build_plan(load_site("trusty")))
    assert "if ! hpcprov_wheelhouse_get alice @hpc-staff; then" in script
    assert "hpcprov_wheelhouse_put alice @hpc-staff" in script
    plain = render_script(build_plan(load_site("local")))
    assert "if ! hpcprov_wheelhouse_get; then" in plain
