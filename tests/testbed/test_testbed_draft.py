"""`hpcprov site draft` on the testbed's login side (the environment ``testbed.environ()``
gives): the draft, with nothing else given but the answers to its questions (an
account-free policy: the testbed's Neuron rule is a --comment, and where scratch is),
passes `site check` and gives a job script that `sbatch` runs on the testbed's 2 nodes
and, after reconfiguring it, on its 4; the diff mode catches the partitions that
reconfiguring added."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from hpcprov_testbed_tests import reconfigured
from hpcprov_tests import hpcprov_argv

from hpcprov.testbed.cluster import Testbed

pytestmark = pytest.mark.testbed

PROBE = "import json, os, socket\n" \
        "os.write(1, (json.dumps({'host': socket.gethostname(), " \
        "'rank': os.environ.get('SLURM_PROCID')}) + '\\n').encode())\n"


def hpcprov(env: dict[str, str], cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*hpcprov_argv(), *args], capture_output=True, text=True, env=env,
                          cwd=cwd, timeout=300)


def answer(text: str, scratch: Path) -> str:
    """The person's answers to the draft's questions, written where the draft asks them:
    scratch, and the policy (the testbed wants --comment on every job; no account)."""
    out = []
    for line in text.splitlines():
        if line == "# paths:":
            line = "paths:"
        elif line.startswith("  # scratch:"):
            line = f'  scratch: "{scratch}"'
        elif line == "# policies:":
            line = ("policies:\n  required_options:\n    comment: {default: python, reason: "
                    '"the testbed enforces Neuron\'s --comment rule"}\n  forbidden_options:\n'
                    '    mem: "refused by the testbed\'s job_submit policy"')
        out.append(line)
    return "\n".join(out) + "\n"



def login_env(tb: Testbed) -> dict[str, str]:
    """The testbed's login side, with this interpreter's bin dir first (python, hpcprov)."""
    env = tb.environ()
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    return env


def draft(tb: Testbed, work: Path, name: str) -> Path:
    """Draft on the login side, check it as written, answer it, check it again."""
    env = login_env(tb)
    path = work / name
    made = hpcprov(env, work, "site", "draft", "-o", str(path), "--timeout", "60")
    assert made.returncode == 0, made.stderr
    checked = hpcprov(env, work, "site", "check", str(path))
    assert checked.returncode == 0, (checked.stderr, path.read_text())
    path.write_text(answer(path.read_text(), tb.scratch / "pytest-draft" / "scratch"))
    checked = hpcprov(env, work, "site", "check", str(path))
    assert checked.returncode == 0, checked.stderr
    return path


def stand_in_environment(profile: Path, env: dict[str, str], work: Path) -> None:
    """What `hpcprov setup` would leave at the profile's prefix (a venv on this Python,
    without Horovod: the job runs plain python), so the job script's activation works."""
    show = hpcprov(env, work, "site", "show", str(profile), "--json")
    data = json.loads(show.stdout)
    prefix = data["paths"]["prefix"].replace("{scratch}", data["paths"]["scratch"])
    venv = Path(prefix) / "venvs" / data["python"]["env_name"]
    if not (venv / "bin" / "activate").exists():
        subprocess.run([sys.executable, "-m", "venv", "--system-site-packages",
                        "--without-pip", str(venv)], check=True, timeout=120)


def submit(slurm, profile: Path, *args: str) -> dict[str, str]:
    """`hpcprov jobscript --site PROFILE ARGS -- python x.py | sbatch`, waited for."""
    slurm.write("x.py", PROBE)
    line = " ".join([*hpcprov_argv(), "jobscript", "--site", str(profile), *args, "--",
                     "python", "x.py", "|", "sbatch", "--parsable"])
    proc = slurm.run("bash", "-o", "pipefail", "-c", line)
    job = proc.stdout.strip().split(";")[0]
    info = slurm.wait(job, timeout=180)
    out = slurm.workdir / f"hpcprov_{job}.out"
    info["output"] = out.read_text() if out.exists() else ""
    err = slurm.workdir / f"hpcprov_{job}.err"
    info["errors"] = err.read_text() if err.exists() else ""
    return info


def hosts_of(output: str) -> set[str]:
    return {json.loads(m)["host"] for m in re.findall(r"\{[^{}]*\}", output)}


def test_draft_runs_jobs_on_two_and_four_nodes_and_diff_sees_new_partitions(
        testbed: Testbed, slurm) -> None:
    work = slurm.workdir
    slurm.env = login_env(testbed)
    two = draft(testbed, work, "x.yaml")
    text = two.read_text()
    assert re.search(r"^  amd_a100nv_8:$", text, re.M) and "cas_v100_4" not in text
    assert "gcc/10.2.0" in text and "cudampi/openmpi-4.1.1" in text
    stand_in_environment(two, slurm.env, work)
    job = submit(slurm, two, "-N", "2")
    assert job["JobState"] == "COMPLETED", (job, job["output"], job["errors"])
    assert hosts_of(job["output"]) == {"gpu01", "gpu02"}
    same = hpcprov(slurm.env, work, "site", "draft", "--diff", str(two))
    assert same.returncode == 0, same.stdout + same.stderr

    with reconfigured(testbed, nodes=4) as big:
        slurm.env = login_env(big)
        diff = hpcprov(slurm.env, work, "site", "draft", "--diff", str(two), "--json")
        assert diff.returncode == 1, diff.stderr
        paths = {d["path"] for d in json.loads(diff.stdout)["differences"]}
        assert {"partitions.cas_v100_4", "partitions.all"} <= paths, diff.stdout
        four = draft(big, work, "x4.yaml")
        assert re.search(r"^  all:$", four.read_text(), re.M)
        stand_in_environment(four, slurm.env, work)
        job = submit(slurm, four, "-N", "4", "-p", "all")
        assert job["JobState"] == "COMPLETED", (job, job["output"], job["errors"])
        assert hosts_of(job["output"]) == {"gpu01", "gpu02", "gpu03", "gpu04"}
