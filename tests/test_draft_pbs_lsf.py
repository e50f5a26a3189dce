"""PBS and LSF discovery for `hpcprov site draft`: the parsers on outputs recorded from the
schedulers' documentation (tests/data/draft/pbs-*.txt, lsf-*.txt, each naming its source),
and the whole command against the emulators (tests/pbs_emulator.py, tests/lsf_emulator.py),
which answer pbsnodes/qstat -Qf/-Bf and bqueues/bhosts as the real commands do."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml
from hpcprov_tests import FakeRunner, cli_subprocess, recorded

from hpcprov.draft.plan import Findings, summarize
from hpcprov.draft.profile import draft_text
from hpcprov.schedulers.discovery import lsf, pbs
from hpcprov.site.profiles import check_file

HERE = Path(__file__).parent
DATA = HERE / "data" / "draft"






PBS = FakeRunner({"pbsnodes -av": recorded("pbs-pbsnodes-av.txt"),
            "qstat -Qf": recorded("pbs-qstat-Qf.txt"),
            "qstat -Bf": recorded("pbs-qstat-Bf.txt")})
LSF = FakeRunner({"bqueues -l": recorded("lsf-bqueues-l.txt"),
            "bhosts -l": recorded("lsf-bhosts-l.txt"),
            "bhosts -l -gpu": recorded("lsf-bhosts-l-gpu.txt")})


def test_pbsnodes_gives_cpus_memory_gpus_and_the_qlist() -> None:
    nodes = pbs.parse_nodes(recorded("pbs-pbsnodes-av.txt"))
    assert list(nodes) == ["node01", "node02", "cpu01", "cpu02"]
    assert (nodes["node01"].cores, nodes["node01"].gpus, nodes["node01"].queues) == (
        40, 4, ("gpu",))
    assert nodes["node01"].memory_mb == 394907648 // 1024
    assert nodes["cpu01"].memory_mb == 196608 and nodes["cpu01"].gpus == 0
    assert nodes["cpu02"].state == "down,offline"


def test_qstat_Qf_gives_execution_queues_and_their_limits() -> None:
    queues = {q.name: q for q in pbs.parse_queues(recorded("pbs-qstat-Qf.txt"))}
    # the routing queue is kept (users submit to it: issue 26), its destinations named
    assert list(queues) == ["default", "workq", "gpu"]
    assert queues["default"].routes_to == ["workq", "gpu"] and not queues["gpu"].routes_to
    # written as the profile writes times: [D-]HH:MM:SS
    assert (queues["workq"].max_time, queues["workq"].default_time) == ("1-00:00:00",
                                                                        "01:00:00")
    assert queues["workq"].max_jobs_per_user == 10
    assert queues["gpu"].max_gpus_per_user == 8 and queues["gpu"].max_time == "3-00:00:00"
    assert pbs.parse_server(recorded("pbs-qstat-Bf.txt")) == {
        "server": "pbsserver", "default_queue": "default", "pbs_version": "2022.1.1"}


def test_pbs_discovery_ties_nodes_to_queues_and_keeps_the_routing_default() -> None:
    """`site draft` left the routing queue out (it holds no nodes), so the draft had no
    default partition and no way to name the queue users submit to."""
    cluster = pbs.discover(PBS)
    queues = {q.name: q for q in cluster.queues}
    assert queues["gpu"].nodes == ["node01", "node02"]
    assert queues["workq"].nodes == ["cpu01", "cpu02"]
    assert "not tied to a queue" in queues["workq"].sources["nodes"]
    assert cluster.version == "2022.1.1"
    assert [q.name for q in cluster.queues if q.default] == ["default"]
    route = queues["default"]
    assert route.nodes == ["cpu01", "cpu02", "node01", "node02"]  # its destinations'
    assert route.max_time == "3-00:00:00" and "longest" in route.sources["max_time"]
    assert any("routing queue" in n and "workq, gpu" in n for n in route.notes)
    assert cluster.notes == []
    summaries, _ = summarize(cluster)
    assert (summaries["gpu"].cores, summaries["gpu"].gpus, summaries["gpu"].memory_gb) == (
        40, 4, 376.6)


def test_bqueues_l_gives_run_limits_hosts_and_the_default_queue() -> None:
    queues = {q.name: q for q in lsf.parse_queues(recorded("lsf-bqueues-l.txt"))}
    assert list(queues) == ["normal", "gpu", "night"]
    assert queues["normal"].default and not queues["gpu"].default
    assert (queues["normal"].max_time, queues["normal"].default_time) == ("12:00:00", None)
    assert (queues["gpu"].max_time, queues["gpu"].default_time) == ("1-00:00:00", "01:00:00")
    assert queues["night"].state == "Open:Inact"


def test_bhosts_l_gives_slots_and_bhosts_gpu_the_gpus() -> None:
    hosts = lsf.parse_hosts(recorded("lsf-bhosts-l.txt"))
    assert {n: (h.cores, h.state) for n, h in hosts.items()} == {
        "cpu01": (32, "ok"), "gpu01": (40, "ok"), "gpu02": (40, "closed_Adm")}
    gpus = lsf.parse_gpus(recorded("lsf-bhosts-l-gpu.txt"))
    assert gpus == {"cpu01": (0, None), "gpu01": (4, "TeslaV100_SXM2_16GB"),
                    "gpu02": (4, "TeslaV100_SXM2_16GB")}


def test_lsf_discovery_reads_the_hosts_lines() -> None:
    cluster = lsf.discover(LSF)
    queues = {q.name: q for q in cluster.queues}
    assert queues["normal"].nodes == ["cpu01"]  # all ~gpu01 ~gpu02
    assert queues["gpu"].nodes == ["gpu01", "gpu02"]  # gpu02+2: a preference, not a name
    assert queues["night"].nodes == ["cpu01", "gpu01", "gpu02"]
    assert any("cpuhosts/" in n and "bmgroup" in n for n in queues["night"].notes)
    summaries, _ = summarize(cluster)
    assert (summaries["gpu"].gpus, summaries["gpu"].gpu_model) == (4, "TeslaV100_SXM2_16GB")


@pytest.mark.parametrize("run", [PBS, LSF], ids=["pbs", "lsf"])
def test_the_pbs_and_lsf_drafts_pass_site_check(run: FakeRunner, tmp_path: Path) -> None:
    module = pbs if run is PBS else lsf
    findings = Findings(cluster=module.discover(run), host="login1.cluster.example.org",
                        when="2024-01-09 10:00")
    path = tmp_path / "draft.yaml"
    path.write_text(draft_text(findings), encoding="utf-8")
    assert check_file(path) == []
    data = yaml.safe_load(path.read_text())
    assert data["scheduler"] == ("pbs" if run is PBS else "lsf")
    assert data["default_launcher"] == "mpirun" and data["login_hosts"] == [
        "login*.cluster.example.org"]


# --------------------------------------------------------------- against the emulators

PBS_EMULATOR = HERE / "pbs_emulator.py"
LSF_EMULATOR = HERE / "lsf_emulator.py"


def _emulated(tmp_path: Path, emulator: Path, tools: tuple[str, ...],
              **env: str) -> dict[str, str]:
    """PATH with the emulator's tools; no Slurm commands in front of them."""
    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    for tool in tools:
        if not (bindir / tool).exists():
            (bindir / tool).symlink_to(emulator)
    return {**os.environ, "PATH": f"{bindir}{os.pathsep}{os.environ['PATH']}",
            "PBS_EMULATOR_DIR": str(tmp_path / "pbs"), "LSF_EMULATOR_DIR": str(tmp_path /
                                                                           "lsf"), **env}


def test_pbs_draft_through_the_emulator_then_diff_after_a_change(tmp_path: Path) -> None:
    env = _emulated(tmp_path, PBS_EMULATOR, ("pbsnodes", "qstat", "qsub", "qdel"),
                    PBS_EMULATOR_NCPUS="16", PBS_EMULATOR_NGPUS="2",
                    PBS_EMULATOR_MAX_WALLTIME="48:00:00")
    out = tmp_path / "pbs.yaml"
    res = cli_subprocess("site", "draft", "--scheduler", "pbs", "-o", str(out), "--timeout",
                         "30", env=env)
    assert res.rc == 0, res.err
    assert cli_subprocess("site", "check", str(out)).rc == 0
    part = yaml.safe_load(out.read_text())["partitions"]["workq"]
    assert (part["cores_per_node"], part["gpus"]["count"]) == (16, 2)
    assert part["limits"]["max_walltime"] == "2-00:00:00" and part["default"] is True
    assert "# pbsnodes -av" in out.read_text() and "qstat -Qf" in out.read_text()
    same = cli_subprocess("site", "draft", "--diff", str(out), env=env)
    assert same.rc == 0, same.out + same.err
    env["PBS_EMULATOR_NCPUS"] = "32"
    changed = cli_subprocess("site", "draft", "--diff", str(out), env=env)
    assert changed.rc == 1
    assert "partitions.workq.cores_per_node: the profile says 16, the cluster 32 " \
           "(pbsnodes -av)" in changed.out


def test_lsf_draft_through_the_emulator_and_its_jobscript(tmp_path: Path) -> None:
    env = _emulated(tmp_path, LSF_EMULATOR, ("bqueues", "bhosts", "bsub", "bjobs", "bkill"),
                    LSF_EMULATOR_SLOTS="8", LSF_EMULATOR_NGPUS="2",
                    LSF_EMULATOR_RUNLIMIT="720")
    out = tmp_path / "lsf.yaml"
    res = cli_subprocess("site", "draft", "--scheduler", "lsf", "-o", str(out), env=env)
    assert res.rc == 0, res.err
    data = yaml.safe_load(out.read_text())
    part = data["partitions"]["normal"]
    assert (part["cores_per_node"], part["gpus"]["count"], part["gpus"]["model"]) == (
        8, 2, "TeslaV100_SXM2_16GB")
    assert part["limits"] == {"max_walltime": "12:00:00"} and part["default"] is True
    script = cli_subprocess("jobscript", "--site", str(out), "--no-activate", "--",
                            "python", "x.py")
    assert script.rc == 0, script.err
    assert "#BSUB -q normal" in script.out and "#BSUB -gpu num=2" in script.out
    env["LSF_EMULATOR_NGPUS"] = "4"
    changed = cli_subprocess("site", "draft", "--diff", str(out), "--json", env=env)
    assert changed.rc == 1
    import json

    assert {d["path"] for d in json.loads(changed.out)["differences"]} == {
        "partitions.normal.gpus.count"}


def test_queues_that_take_jobs_from_routing_queues_only_are_left_out() -> None:
    text = recorded("pbs-qstat-Qf.txt").replace(
        "Queue: gpu\n    queue_type = Execution\n",
        "Queue: gpu\n    queue_type = Execution\n    from_route_only = True\n", 1)
    assert "from_route_only" in text
    runs = dict(PBS.answers)
    runs["qstat -Qf"] = text
    cluster = pbs.discover(FakeRunner(runs))
    queues = {q.name: q for q in cluster.queues}
    assert list(queues) == ["default", "workq"]  # a job cannot name gpu itself
    assert queues["default"].nodes == ["cpu01", "cpu02", "node01", "node02"]
    assert any("gpu take jobs from routing queues only" in n for n in cluster.notes)
