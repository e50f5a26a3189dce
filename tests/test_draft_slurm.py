"""Slurm discovery for `hpcprov site draft`: the parsers on recorded `scontrol ... -o`,
`sinfo`, `sacctmgr` and `srun --mpi=list` text (tests/data/draft/slurm-*.txt), the
partition summaries, and the drafted profile (hostile partition names included)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from hpcprov_tests import FakeRunner, recorded

from hpcprov.core.commands import Completed
from hpcprov.draft.modules import System, parse_listing, plan_modules
from hpcprov.draft.plan import Findings, login_patterns, site_name, summarize
from hpcprov.draft.profile import draft_text
from hpcprov.schedulers.discovery import slurm
from hpcprov.schedulers.facts import Cluster, DiscoveryError, LocalGpus, Queue
from hpcprov.site.profiles import check_file

DATA = Path(__file__).parent / "data" / "draft"




ANSWERS = {
    "scontrol show partition -o": "slurm-show-partition.txt",
    "scontrol show node -o": "slurm-show-node.txt",
    "sinfo -h -o %P|%a|%D|%t": "slurm-sinfo.txt",
    "sacctmgr -n -P show qos format=Name,MaxWall,MaxJobsPU,MaxTRESPU":
        "slurm-sacctmgr-qos.txt",
    "scontrol show config": "slurm-show-config.txt",
    "srun --mpi=list": "slurm-mpi-list.txt",
}




def recorded_run() -> FakeRunner:
    answers: dict[str, str | Completed] = {k: recorded(v) for k, v in ANSWERS.items()}
    answers["scontrol --version"] = "slurm 22.05.8\n"
    return FakeRunner(answers)


def test_a_record_value_may_hold_spaces_and_equals_signs() -> None:
    rec = slurm.parse_record("NodeName=n1 OS=Linux 4.18 #1 SMP Fri Apr 15 RealMemory=10 "
                             "TRES=cpu=4,mem=10M Reason=bad DIMM [root@2024]")
    assert rec["OS"] == "Linux 4.18 #1 SMP Fri Apr 15"
    assert rec["RealMemory"] == "10" and rec["TRES"] == "cpu=4,mem=10M"
    assert rec["Reason"] == "bad DIMM [root@2024]"


@pytest.mark.parametrize(("gres", "count", "label"), [
    ("gpu:a100:8(S:0-1)", 8, "a100"),
    ("gpu:8", 8, None),
    ("gpu:v100l:4(S:0-1),mps:400", 4, "v100l"),
    ("gpu:a100:2,gpu:v100:2", 4, None),
    ("(null)", 0, None),
    ("mps:100", 0, None),
])
def test_gres_gives_the_gpu_count_and_type_label(gres: str, count: int,
                                                 label: str | None) -> None:
    assert slurm.parse_gres(gres) == (count, label)


def test_nodes_from_recorded_scontrol_show_node() -> None:
    nodes = slurm.parse_nodes(recorded("slurm-show-node.txt"))
    assert list(nodes) == ["gpu01", "gpu02", "gpu03", "gpu04", "skl01"]
    a100 = nodes["gpu01"]
    assert (a100.cores, a100.cpus, a100.threads_per_core) == (64, 128, 2)
    assert (a100.gpus, a100.gpu_type, a100.memory_mb) == (8, "a100", 1031000)
    assert a100.arch == "x86_64" and a100.features == ("a100", "nvlink")
    assert a100.queues == ("amd_a100nv_8", "all")
    assert nodes["gpu04"].state == "IDLE+DRAIN"
    assert nodes["skl01"].gpus == 0 and nodes["skl01"].features == ()


def test_partitions_from_recorded_scontrol_show_partition() -> None:
    parts = {q.name: q for q in slurm.parse_partitions(recorded("slurm-show-partition.txt"))}
    a100 = parts["amd_a100nv_8"]
    assert a100.default and a100.nodes == ["gpu01", "gpu02"] and a100.total_nodes == 2
    assert (a100.max_time, a100.default_time, a100.qos) == ("2-00:00:00", "01:00:00",
                                                            "gpu_a100")
    assert parts["cas_v100_4"].max_nodes == 2 and parts["cas_v100_4"].max_time == \
        "1-12:00:00"
    assert parts["all"].max_time is None and parts["all"].nodes == [
        "gpu01", "gpu02", "gpu03", "gpu04"]
    assert parts["skl"].max_time == "08:00:00"
    assert parts["retired"].nodes == [] and parts["retired"].state == "INACTIVE"


def test_sinfo_qos_config_and_mpi_plugins() -> None:
    info = slurm.parse_sinfo(recorded("slurm-sinfo.txt"))
    assert info["amd_a100nv_8"] == (True, {"idle": 1, "alloc": 1})
    assert info["all"][1] == {"drain": 1, "alloc": 1, "idle": 2}
    qos = slurm.parse_qos(recorded("slurm-sacctmgr-qos.txt"))
    assert qos["gpu_a100"] == {"max_time": "2-00:00:00", "max_jobs_per_user": 4,
                               "max_gpus_per_user": 64}
    assert qos["debug"]["max_gpus_per_user"] is None
    config = slurm.parse_config(recorded("slurm-show-config.txt"))
    assert config["ClusterName"] == "neuronlike" and config["MpiDefault"] == "none"
    assert slurm.parse_mpi_list(recorded("slurm-mpi-list.txt")) == [
        "cray_shasta", "none", "pmi2", "pmix"]
    assert slurm.parse_mpi_list("srun: MPI types are...\nsrun: none\nsrun: pmix\n") == [
        "none", "pmix"]
    assert slurm.parse_version("slurm 22.05.8\n") == "22.05.8"


def test_discover_applies_qos_and_default_and_names_its_commands() -> None:
    run = recorded_run()
    cluster = slurm.discover(run)
    assert cluster.name == "neuronlike" and cluster.version == "22.05.8"
    assert "pmix" in cluster.mpi_plugins and cluster.settings["JobSubmitPlugins"] == "lua"
    a100 = next(q for q in cluster.queues if q.name == "amd_a100nv_8")
    assert (a100.max_jobs_per_user, a100.max_gpus_per_user) == (4, 64)
    assert "sacctmgr" in a100.sources["max_gpus_per_user"]
    assert run.ran[:2] == ["scontrol show partition -o", "scontrol show node -o"]


def test_a_failing_sacctmgr_is_noted_not_fatal_and_a_dead_controller_is_fatal() -> None:
    run = recorded_run()
    run.answers["sacctmgr -n -P show qos format=Name,MaxWall,MaxJobsPU,MaxTRESPU"] = \
        Completed(1, "", "sacctmgr: error: Problem talking to the database\n")
    cluster = slurm.discover(run)
    assert any("sacctmgr" in n and "Problem talking" in n for n in cluster.notes)
    run.answers["scontrol show partition -o"] = Completed(
        124, "", "scontrol show partition -o did not answer within 5 s")
    with pytest.raises(DiscoveryError, match="scontrol show partition -o did not answer"):
        slurm.discover(run)


def test_summaries_take_the_least_over_mixed_nodes_and_skip_empty_partitions() -> None:
    summaries, skipped = summarize(slurm.discover(recorded_run()))
    assert list(summaries) == ["amd_a100nv_8", "cas_v100_4", "all", "skl"]
    a100 = summaries["amd_a100nv_8"]
    assert (a100.nodes, a100.cores, a100.gpus, a100.gpu_type) == (2, 64, 8, "a100")
    assert a100.memory_gb == pytest.approx(1006.8)
    mixed = summaries["all"]
    assert (mixed.cores, mixed.gpus, mixed.gpu_type) == (40, 4, None)
    assert any("nodes differ in GPUs" in n for n in mixed.notes)
    assert skipped == ["partition retired left out: it has no nodes now "
                       "(scontrol show partition -o)"]


def test_the_local_gpu_model_goes_where_the_type_label_matches() -> None:
    gpus = LocalGpus(("NVIDIA A100-SXM4-80GB",), "nvidia-smi")
    summaries, _ = summarize(slurm.discover(recorded_run()), gpus, "glogin01")
    assert summaries["amd_a100nv_8"].gpu_model == "NVIDIA A100-SXM4-80GB"
    assert "nvidia-smi" in summaries["amd_a100nv_8"].sources["gpu_model"]
    assert summaries["cas_v100_4"].gpu_model is None
    here, _ = summarize(slurm.discover(recorded_run()), gpus, "gpu03.cluster")
    assert here["cas_v100_4"].gpu_model == "NVIDIA A100-SXM4-80GB"  # runs on gpu03 itself


@pytest.mark.parametrize(("fqdn", "patterns"), [
    ("glogin01.ksc.re.kr", ["glogin*.ksc.re.kr"]),
    ("login3", ["login*"]),
    ("frontend.cluster.org", ["frontend.cluster.org"]),
    ("LOGIN2.Example.ORG.", ["login*.example.org"]),
])
def test_login_host_patterns_from_the_fqdn(fqdn: str, patterns: list[str]) -> None:
    assert login_patterns(fqdn) == patterns


def _findings(cluster: Cluster, **kw: object) -> Findings:
    listing = parse_listing(recorded("lmod-avail.txt"))
    plan = plan_modules(System("lmod", "8.7", "/usr/share/lmod/lmod/init/bash"), listing,
                        [], True)
    base: dict[str, object] = {"modules": plan, "listing": listing,
                               "host": "glogin01.ksc.re.kr", "when": "2024-01-09 10:00",
                               "interfaces": ["eth0", "ib0", "lo"]}
    return Findings(cluster=cluster, **{**base, **kw})


def test_the_draft_passes_site_check_as_written(tmp_path: Path) -> None:
    text = draft_text(_findings(slurm.discover(recorded_run())))
    path = tmp_path / "draft.yaml"
    path.write_text(text, encoding="utf-8")
    assert check_file(path) == []
    data = yaml.safe_load(text)
    assert data["name"] == "neuronlike" and data["scheduler"] == "slurm"
    assert data["partitions"]["amd_a100nv_8"]["default"] is True
    assert data["partitions"]["amd_a100nv_8"]["limits"] == {
        "max_walltime": "2-00:00:00", "default_walltime": "01:00:00",
        "max_jobs_per_user": 4, "max_gpus_per_user": 64}
    assert data["modules"]["build"]["load"] == [
        "gcc/10.2.0", "cuda/11.4", "cudampi/openmpi-4.1.1", "nccl/2.8.4-cuda11.4",
        "cmake/3.26.2", "python/3.9.5"]
    assert data["launchers"]["srun"]["mpi"] == "pmix"
    assert "policies" not in data and "env" not in data  # questions, commented out
    assert "network" not in data["partitions"]["amd_a100nv_8"]
    assert data["partitions"]["amd_a100nv_8"]["threads_per_core"] == 2
    assert {"policies.required_options", "policies.compute_internet",
            "partitions.amd_a100nv_8.network",
            "partitions.amd_a100nv_8.gpus.model"} <= set(data["unverified"])


def test_every_value_names_its_command_and_questions_are_marked() -> None:
    text = draft_text(_findings(slurm.discover(recorded_run())))
    assert "max_gpus_per_user: 64  # sacctmgr -n -P show qos" in text
    assert "threads_per_core: 2  # scontrol show node -o (128 CPUs: the scheduler counts " \
        "hardware threads)" in text
    assert "cpus_per_task: 16  # CPUs per node / GPUs" in text
    assert "# QUESTION (mandatory options)" in text
    assert "job_submit plugin(s) lua" in text
    assert "# QUESTION (rendezvous network)" in text and "eth0, ib0" in text
    assert '    # network:\n      # host_name: "{host}-ib"\n      # nccl_socket_ifname: "ib0"' \
        in text
    assert 'slurm:\n  version: "22.05.8"  # scontrol --version' in text
    assert "# MPI: cudampi/openmpi-4.1.1 (CUDA-aware by its name" in text
    assert "also offered, not loaded: PyTorch pytorch/1.12.0" in text


HOSTILE_PARTITIONS = [
    "x: {}", "evil\nname: injected", "# comment", "ok-part", "\x85nel", "a b", "",
]


@pytest.mark.parametrize("name", HOSTILE_PARTITIONS)
def test_a_hostile_partition_name_leaves_the_profile_valid_and_unchanged(
        name: str, tmp_path: Path) -> None:
    cluster = Cluster("slurm", queues=[
        Queue("good", ["n1"], 1, default=True),
        Queue(name, ["n1"], 1, max_time="01:00:00")],
        nodes=slurm.parse_nodes("NodeName=n1 CPUTot=8 Sockets=1 CoresPerSocket=8 "
                                "RealMemory=8000 Gres=gpu:x\x00y: {}:2 Arch=x86_64 "
                                "AvailableFeatures=a\nb: c"),
        sources={"nodes": "scontrol show node -o", "queues": "scontrol show partition -o"})
    text = draft_text(_findings(cluster, host="evil\nhost: x"))
    path = tmp_path / "draft.yaml"
    path.write_text(text, encoding="utf-8")
    data = yaml.safe_load(text)
    assert check_file(path) == [], text
    expected = {"good", name} if name == "ok-part" else {"good"}
    assert set(data["partitions"]) == expected
    assert set(data) <= {"name", "description", "scheduler", "login_hosts", "modules",
                         "partitions", "python", "horovod", "launchers",
                         "default_launcher", "slurm", "unverified"}
    if name != "ok-part":
        assert "left out" in text


def test_the_site_name_fits_a_profile_name() -> None:
    findings = _findings(Cluster("slurm", name="My Cluster!"))
    assert site_name(findings) == "My-Cluster"
    assert site_name(_findings(Cluster("slurm"), host="login1.bigiron.example.org")) == \
        "bigiron"
    assert site_name(_findings(Cluster("slurm"), host="login1")) == "login"
    assert site_name(findings, "given") == "given"


def test_real_testbed_output_parses_into_the_testbeds_shape() -> None:
    """`scontrol show node|partition -o` and `srun --mpi=list` recorded on the testbed
    (4 nodes): the OS field there holds '#1 SMP PREEMPT_DYNAMIC @0' and double spaces."""
    nodes = slurm.parse_nodes(recorded("testbed-show-node.txt"))
    assert {n: (x.cores, x.gpus, x.memory_mb) for n, x in nodes.items()} == {
        "gpu01": (64, 8, 1000000), "gpu02": (64, 8, 1000000),
        "gpu03": (40, 4, 384000), "gpu04": (40, 4, 384000)}
    parts = slurm.parse_partitions(recorded("testbed-show-partition.txt"))
    assert [(q.name, q.default, q.nodes, q.max_time) for q in parts] == [
        ("amd_a100nv_8", True, ["gpu01", "gpu02"], "2-00:00:00"),
        ("cas_v100_4", False, ["gpu03", "gpu04"], "2-00:00:00"),
        ("all", False, ["gpu01", "gpu02", "gpu03", "gpu04"], "2-00:00:00")]
    assert "pmix" in slurm.parse_mpi_list(recorded("testbed-mpi-list.txt"))


def test_the_bundled_testbed_profile_matches_what_the_testbed_says() -> None:
    from hpcprov.draft.diff import compare
    from hpcprov.site.catalog import load

    run = FakeRunner({"scontrol show node -o": recorded("testbed-show-node.txt"),
                "scontrol show partition -o": recorded("testbed-show-partition.txt")})
    findings = Findings(cluster=slurm.discover(run))
    assert compare(load("testbed"), findings) == []
    # the same profile on a cluster whose cas_v100_4 nodes got 8 GPUs of another kind
    text = recorded("testbed-show-node.txt").replace("Gres=gpu:4", "Gres=gpu:h100:8")
    run.answers["scontrol show node -o"] = text
    found = {d.path: d for d in compare(load("testbed"), Findings(cluster=slurm.discover(
        run)))}
    assert found["partitions.cas_v100_4.gpus.count"].cluster == "8"
    assert found["partitions.cas_v100_4.gpus.model"].cluster == "GPU type h100"
