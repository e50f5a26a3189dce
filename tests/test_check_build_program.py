"""check-build's program (provision/programs/check_build.py) and the plan around it: where
Horovod has Gloo, the proof runs from check-build's interpreter (the frameworks imported
once, horovodrun's own Gloo check inheriting them) and the warm-up imports run beside it in
a forked process; elsewhere the proof is a step of its own. Run here against a stand-in
horovod.runner.launch that records what it is asked (the real one: test_provision_real)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from hpcprov_tests import write_profile

from hpcprov.provision.horovod_steps import proof_starter, proves_in_check
from hpcprov.provision.plan import build_plan
from hpcprov.site.profiles import load_site, validate_file

PROGRAM = Path(__file__).resolve().parent.parent / "provision" / "programs" / "check_build.py"

LAUNCH = '''
import os, sys
def run_commandline():
    with open(os.environ["CALLS"], "a") as out:
        out.write(" ".join(sys.argv) + "\\n")
    if sys.argv[1:] == ["-cb"]:
        print("Available Frameworks:\\n    [X] PyTorch")
        sys.exit(0)
    if os.environ.get("FAIL_PROOF"):
        raise RuntimeError("Horovod detected that one or more processes exited with non-zero")
    print("[0]<stdout>:proof ok")
'''


@pytest.fixture
def fake(tmp_path: Path) -> dict[str, str]:
    pkg = tmp_path / "lib" / "horovod" / "runner"
    pkg.mkdir(parents=True)
    (tmp_path / "lib" / "horovod" / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "launch.py").write_text(LAUNCH)
    # a framework that counts its imports, and a warm module that says which process ran it
    (tmp_path / "lib" / "framework.py").write_text(textwrap.dedent("""
        import os
        with open(os.environ["CALLS"], "a") as out:
            out.write("import framework %d\\n" % os.getpid())
    """))
    (tmp_path / "lib" / "warm_me.py").write_text(textwrap.dedent("""
        import os, framework
        with open(os.environ["CALLS"], "a") as out:
            out.write("warm %d\\n" % os.getpid())
    """))
    return {**os.environ, "PYTHONPATH": str(tmp_path / "lib"),
            "CALLS": str(tmp_path / "calls.txt")}


def _run(env: dict[str, str], tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(PROGRAM), "--output", str(tmp_path / "cb.txt"),
                           *args], capture_output=True, text=True, env=env, timeout=60)


def test_cb_then_the_proof_from_one_interpreter_warming_beside(fake: dict[str, str],
                                                               tmp_path: Path) -> None:
    proc = _run(fake, tmp_path, "framework", "--warm", "warm_me", "--prove", "p1.py", "p2.py")
    assert proc.returncode == 0, proc.stderr
    calls = (tmp_path / "calls.txt").read_text().splitlines()
    (imported,) = [c for c in calls if c.startswith("import framework")]  # once: inherited
    (warm,) = [c for c in calls if c.startswith("warm ")]
    assert warm.split()[1] != imported.split()[2]  # in a forked process, not this one
    runs = [c for c in calls if c.startswith("horovodrun")]
    assert runs == ["horovodrun -cb",
                    "horovodrun --gloo -np 2 -H localhost:2 python p1.py",
                    "horovodrun --gloo -np 2 -H localhost:2 python p2.py"]
    # the output file holds -cb's output alone; the proof's lines follow it on stdout
    assert (tmp_path / "cb.txt").read_text() == "Available Frameworks:\n    [X] PyTorch\n"
    assert proc.stdout.index("[X] PyTorch") < proc.stdout.index("proof ok")


def test_a_failed_proof_fails_the_step(fake: dict[str, str], tmp_path: Path) -> None:
    proc = _run({**fake, "FAIL_PROOF": "1"}, tmp_path, "framework", "--prove", "p1.py",
                "p2.py")
    assert proc.returncode == 1
    assert "hpcprov: error: Horovod detected" in proc.stderr
    runs = [c for c in (tmp_path / "calls.txt").read_text().splitlines()
            if c.startswith("horovodrun")]
    assert runs == ["horovodrun -cb", "horovodrun --gloo -np 2 -H localhost:2 python p1.py"]


def test_without_prove_only_cb_runs(fake: dict[str, str], tmp_path: Path) -> None:
    proc = _run(fake, tmp_path, "framework")
    assert proc.returncode == 0, proc.stderr
    runs = [c for c in (tmp_path / "calls.txt").read_text().splitlines()
            if c.startswith("horovodrun")]
    assert runs == ["horovodrun -cb"]


def test_the_programs_starter_is_the_plans() -> None:
    namespace: dict[str, object] = {}
    exec(compile(PROGRAM.read_text(), str(PROGRAM), "exec"), namespace)
    site = load_site("local")
    assert proves_in_check(site)
    assert namespace["PROOF_STARTER"] == proof_starter(site)


def test_a_gloo_site_proves_in_check_build_and_an_mpi_one_in_its_own_step(
        tmp_path: Path) -> None:
    gloo = build_plan(load_site("local"), str(tmp_path / "p"))
    ids = [s.id for s in gloo.steps]
    assert "prove-allreduce" not in ids
    (check,) = [s for s in gloo.steps if s.id == "check-build"]
    assert "prove it" in check.title and any("--prove" in line for line in check.lines)
    nogloo = validate_file(write_profile(tmp_path, "nogloo", (
        "extends: testbed\nhorovod:\n  controllers: [mpi]\n")))
    mpi = build_plan(nogloo, str(tmp_path / "q"))
    ids = [s.id for s in mpi.steps]
    assert ids.index("check-build") + 1 == ids.index("prove-allreduce")
    (check,) = [s for s in mpi.steps if s.id == "check-build"]
    assert not any("--prove" in line for line in check.lines)
