"""A container-only site validated for real: `hpcprov validate --site testbed-container` on
the 2-node testbed, every rank started by srun through Charliecloud's ch-run in a Debian 12
image with torch 2.13.0 (testbed/image/build-image.sh: Debian's and PyPI's packages, no
registry), the rank contract running inside the image.

The image: ``$HPCPROV_TEST_IMAGE`` (CI builds it in the background beside other phases),
else the profile's path under the testbed's scratch; either way the build script runs
first: it returns at once on a finished image, waits for a build under way, and builds
(about a minute) where there is none. Without root, mmdebstrap or ch-run the test is
skipped, and fails instead under ``HPCPROV_REQUIRE_TESTBED=1``.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from hpcprov_tests import hpcprov_argv

pytestmark = [pytest.mark.testbed, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
BUILD = REPO / "testbed" / "image" / "build-image.sh"
PROFILE = REPO / "sites" / "testbed-container.yaml"
REQUIRE = os.environ.get("HPCPROV_REQUIRE_TESTBED") == "1"
RANK_LINE = re.compile(r"^HPCPROV_RANK (\{.*\})$", re.M)


def _unavailable(reason: str) -> None:
    if REQUIRE:
        pytest.fail(f"container image required (HPCPROV_REQUIRE_TESTBED=1) but unavailable: "
                    f"{reason}", pytrace=False)
    pytest.skip(f"container image unavailable: {reason}")


@pytest.fixture(scope="module")
def site(testbed, tmp_path_factory) -> tuple[str, str, dict[str, str]]:
    """(the profile to validate, its image, the image's stamp: its versions), the image built or
    reused first. A ``$HPCPROV_TEST_IMAGE`` elsewhere than the profile says gets a profile
    of its own, extending the bundled one."""
    bundled = yaml.safe_load(PROFILE.read_text())["containers"]["images"]["torch"]
    image = os.environ.get("HPCPROV_TEST_IMAGE") or bundled
    missing = [tool for tool in ("ch-run", "mmdebstrap") if shutil.which(tool) is None]
    if missing:
        _unavailable(f"{' and '.join(missing)} missing (bash testbed/install-deps.sh)")
    if os.geteuid() != 0:
        _unavailable("building the image needs root (mmdebstrap, chroot)")
    proc = subprocess.run(["bash", str(BUILD), image], capture_output=True, text=True,
                          timeout=1200)
    assert proc.returncode == 0, f"build-image.sh failed:\n{proc.stderr[-4000:]}"
    stamp = dict(line.split("=", 1) for line in
                 (Path(image) / ".hpcprov-image").read_text().splitlines())
    if image == bundled:
        return "testbed-container", image, stamp
    profile = tmp_path_factory.mktemp("site") / "testbed-container-ci.yaml"
    profile.write_text(yaml.safe_dump({
        "name": "testbed-container-ci", "extends": "testbed-container",
        "python": {"container": {"image": "torch", "source": image}},
        "containers": {"images": {"torch": image}}}))
    return str(profile), image, stamp


def test_env_allreduce_and_ddp_training_pass_with_every_rank_in_the_image(
        testbed, site, tmp_path: Path) -> None:
    profile, image, stamp = site
    rundir = testbed.scratch / "pytest-validate" / f"container-{tmp_path.name}"
    shutil.rmtree(rundir, ignore_errors=True)  # an earlier session's run of the same name
    env = {**testbed.environ(), "HPCPROV_HISTORY": str(tmp_path / "history")}
    proc = subprocess.run(
        [*hpcprov_argv(), "validate", "--site", profile, "-N", "2", "--device", "cpu",
         "--checks", "env,allreduce,train", "--json", "--workdir", str(rundir),
         "--max-bytes", "4194304", "--iters", "3", "--steps", "8"],
        capture_output=True, text=True, env=env, timeout=900)
    data = json.loads(proc.stdout or "{}")
    assert proc.returncode == 0 and data["ok"], (data.get("outcomes"), proc.stderr[-3000:])
    passed = {o["name"] for o in data["outcomes"] if o["status"] == "pass"}
    assert {"env imports", "allreduce-torch-gloo correctness",
            "train-torch-ddp in sync"} <= passed, data["outcomes"]
    jobs = {j["id"]: j for j in data["jobs"]}
    assert {"env", "allreduce-torch-gloo", "train-torch-ddp"} <= set(jobs)
    for job in jobs.values():
        assert (job["state"], job["exit_code"]) == ("COMPLETED", 0), job
        # srun started each rank through ch-run, in the image, with the run folder bound
        script = (rundir / f"{job['id']}.sh").read_text()
        launch = (r"^srun .*\bch-run --bind=/var/lib/hpcprov-testbed/scratch "
                  rf"--cd=\"\$hpcprov_cd\" {re.escape(image)} -- bash -c \"\$hpcprov_rank\"")
        assert re.search(launch, script, re.M), script[-800:]

    # the env check's Python is the image's (Debian's 3.11 in /usr/bin), not the host's, on
    # both nodes, and its rank came from the rank contract run inside the image (slurm)
    env_records = jobs["env"]["records"]
    assert sorted(r["host"] for r in env_records) == ["gpu01", "gpu02"]
    for r in env_records:
        assert (r["python"], r["executable"], r["rank_source"]) == \
            (stamp["python"], "/usr/bin/python", "slurm"), r
        assert r["imports"]["torch"] == stamp["torch"] == "2.13.0+cpu"
    assert sys.executable != "/usr/bin/python"

    # allreduce and DDP: 2 ranks on 2 nodes, each told its rank by the contract (slurm)
    for name in ("allreduce-torch-gloo", "train-torch-ddp"):
        ranks = [json.loads(m) for m in RANK_LINE.findall(
            (rundir / f"{name}.out").read_text())]
        assert sorted((r["rank"], r["host"], r["rank_source"]) for r in ranks) == \
            [(0, "gpu01", "slurm"), (1, "gpu02", "slurm")], ranks
    records = jobs["allreduce-torch-gloo"]["records"]
    assert records and all(r["correct"] and (r["ranks"], r["nodes"]) == (2, 2)
                           for r in records)
    train = jobs["train-torch-ddp"]["records"][0]
    assert train["in_sync"] and train["max_param_spread"] == 0.0
    assert train["torch_version"] == stamp["torch"]
