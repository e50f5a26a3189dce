"""The provisioner's pure parts: compatibility table, fingerprints, journal, diagnosis,
-cb parsing, doctor's judgement. The real runs are in test_provision_real.py."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from hpcprov_tests import assert_one_line_error, cli, write_profile

from hpcprov.core.errors import UsageError
from hpcprov.jobs.checkbuild import expected_check_build, parse_check_build
from hpcprov.provision.compat import evaluate, for_site, patches_for
from hpcprov.provision.diagnose import diagnose
from hpcprov.provision.doctor import judge, not_ready
from hpcprov.provision.journal import Journal, StepRecord
from hpcprov.provision.library import file_function
from hpcprov.provision.manifest import Manifest, parse_manifest
from hpcprov.provision.plan import build_plan, fingerprints, render_script
from hpcprov.site.profiles import load_site


def ids(matches: list) -> list[str]:
    return [m.rule.id for m in matches]


# the 0.28.1 rows applied at build time, when the toolchain's facts hold, and build-type
# (Release unless horovod.debug_info), which every 0.28.1 build applies, in table order
BUILD_TIME_CPU = ["std-includes", "build-type", "no-distutils"]
BUILD_TIME_GPU = ["std-includes", "cuda-std14", "build-type", "no-distutils"]


@pytest.mark.parametrize(("horovod", "torch", "tf", "gpu", "want"), [
    ("0.28.1", "2.13.0", None, False, ["cxx-standard", *BUILD_TIME_CPU]),
    ("0.28.1", "2.0.1", None, False, BUILD_TIME_CPU),
    ("0.28.1", "1.12.0", "2.10.0", True, BUILD_TIME_GPU),  # neuron: as the seed built it
    ("0.28.1", "2.13.0", "2.21.0", False,
     ["cxx-standard", "tf-xla-cpu", *BUILD_TIME_CPU, "keras3"]),
    ("0.28.1", "2.13.0", "2.21.0", True, ["cxx-standard", *BUILD_TIME_GPU, "keras3"]),
    ("0.27.0", "2.1.0", None, False, ["old-horovod-torch2"]),
    ("0.29.0", None, None, False, ["unknown-horovod"]),
    ("0.28.1", "2.14.1", None, False, ["cxx-standard", *BUILD_TIME_CPU]),
    ("0.28.1", "2.15.0", None, False, ["cxx-standard", *BUILD_TIME_CPU]),  # built in CI
    ("0.28.1", "2.16.0", None, False, ["cxx-standard", *BUILD_TIME_CPU, "untested-torch"]),
    ("0.21.1", "1.7.1", None, True, []),                # taurus
])
def test_compatibility_rules(horovod: str, torch: str | None, tf: str | None, gpu: bool,
                             want: list[str]) -> None:
    assert ids(evaluate(horovod, torch, tf, gpu)) == want


def test_local_build_always_applies_the_cxx_standard_patch_and_the_script_carries_it() -> None:
    site = load_site("local")
    unconditional = [p for p in patches_for(site) if p.when is None]
    assert [p.name for p in unconditional] == ["horovod-0.28.1-cxx-standard.patch",
                                               "horovod-0.28.1-build-type.patch"]
    name, text = unconditional[0].name, unconditional[0].text
    plan = build_plan(site)
    script = render_script(plan)
    assert "set(CMAKE_CXX_STANDARD 17)" in text
    assert "\n" + text in script  # the patch file, verbatim
    build = [ln.strip() for ln in plan.step("build-horovod").lines]
    assert f"{file_function(name)} | hpcprov_horovod_patch {name}" in build
    assert 'patch -d "$HPCPROV_SRC" -p1 --forward' in script


def test_tensorflow_variant_gets_its_patches_and_the_keras3_warning(
        capsys: pytest.CaptureFixture[str]) -> None:
    site = load_site("local-tf")
    assert [p.name for p in patches_for(site) if p.when is None] == [
        "horovod-0.28.1-cxx-standard.patch", "horovod-0.28.1-tf-xla-cpu.patch",
        "horovod-0.28.1-build-type.patch"]
    res = cli(capsys, "setup", "--site", "local-tf", "--dry-run")
    assert res.rc == 0
    (warning,) = [ln for ln in res.err.splitlines() if "compat-keras3" in ln]
    assert "DistributedGradientTape" in warning and "never averages" in warning
    guide = cli(capsys, "guide", "--site", "local-tf").out
    assert "DistributedGradientTape" in guide and "keras3" in guide


@pytest.mark.parametrize(("extra", "needle"), [
    ("horovod: {version: '0.27.0'}\n", "old-horovod-torch2"),
    ("horovod: {version: '0.30.0'}\n", "unknown-horovod"),
])
def test_known_bad_combinations_are_refused_before_anything_runs(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        extra: str, needle: str) -> None:
    write_profile(tmp_path, "bad", "extends: local\nname: bad\n" + extra)
    monkeypatch.setenv("HPCPROV_SITES_PATH", str(tmp_path))
    prefix = tmp_path / "prefix"
    for flags in (["--dry-run"], []):
        res = cli(capsys, "setup", "--site", "bad", "--prefix", str(prefix), *flags)
        assert_one_line_error(res, 2, needle, "horovod.version")
    assert not prefix.exists()


def test_fingerprints_change_from_the_changed_step_on(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    base = fingerprints(build_plan(load_site("local"), prefix="/p"))
    write_profile(tmp_path, "newer", "extends: local\nname: newer\npython:\n  frameworks:\n"
                  "    pytorch: {version: '2.13.0', packages: ['torch==2.13.0', 'numpy']}\n")
    monkeypatch.setenv("HPCPROV_SITES_PATH", str(tmp_path))
    other = fingerprints(build_plan(load_site("newer"), prefix="/p"))
    steps = list(base)
    first = steps.index("install-frameworks")
    assert [s for s in steps if base[s] == other[s]] == steps[:first]
    moved = fingerprints(build_plan(load_site("local"), prefix="/elsewhere"))
    assert all(base[s] != moved[s] for s in steps)  # the prefix is in every step


def test_journal_pending_resumes_at_the_first_step_not_done(tmp_path: Path) -> None:
    prints = {"a": "1", "b": "2", "c": "3"}
    j = Journal(tmp_path / "journal.json")
    assert j.pending(prints) == ["a", "b", "c"]
    j.steps["a"] = StepRecord("done", "1", 0.0)
    j.steps["b"] = StepRecord("failed", "2", 0.0)
    j.steps["c"] = StepRecord("done", "3", 0.0)
    j.save()
    again = Journal.load(tmp_path / "journal.json")
    assert again.pending(prints) == ["b", "c"]
    again.steps["b"].status = "done"
    assert again.pending(prints) == []
    assert again.pending({**prints, "a": "changed"}) == ["a", "b", "c"]
    (tmp_path / "broken.json").write_text("{not json")
    assert Journal.load(tmp_path / "broken.json").steps == {}


# pip's answer to `pip install torch==9.9.9` under a constraint file holding torch<=2.14.1,
# as pip 23.2 and pip 26.3 print it (pip 26 adds the "Additionally" paragraph).
PIP23_CONFLICT = """\
ERROR: Cannot install torch==9.9.9 because these package versions have conflicting dependencies.

The conflict is caused by:
    The user requested torch==9.9.9
    The user requested (constraint) torch<=2.14.1

To fix this you could try to:
1. loosen the range of package versions you've specified
2. remove package versions to allow pip attempt to solve the dependency conflict

ERROR: ResolutionImpossible: for help visit https://pip.pypa.io/en/latest/topics/dependency-resolution/#dealing-with-dependency-conflicts
"""
PIP26_CONFLICT = PIP23_CONFLICT.replace(
    "\n\nTo fix", "\n\nAdditionally, some packages in these conflicts have no matching "
    "distributions available for your environment:\n    torch\n\nTo fix",
).replace("allow pip attempt", "allow pip to attempt")
DEPENDENCY_CONFLICT = "ERROR: Cannot install foo==1.0 and torch==2.13.0 because these " + """\
package versions have conflicting dependencies.

The conflict is caused by:
    The user requested torch==2.13.0
    foo 1.0 depends on torch==2.0.1

ERROR: ResolutionImpossible: for help visit https://pip.pypa.io/en/latest/topics/dependency-resolution/#dealing-with-dependency-conflicts
"""
# what hpcprov_pip_settings logs on this machine (pip 26 lists a key once per file)
SETTINGS = ("hpcprov: pip settings: argument.find-links='/site/wheels' "
            "global.constraint='/etc/xdg/pip/constraints.txt' "
            "global.extra-index-url='file:///opt/pypi/simple file:///opt/pypi-more/simple' "
            "global.find-links='/opt/wheels' :env:.find-links='/opt/wheels' "
            ":env:.index-url='https://****@mirror.example/simple' :env:.no-index='0'\n")
NO_MATCH = ("ERROR: Could not find a version that satisfies the requirement torch==9.9.9\n"
            "ERROR: No matching distribution found for torch==9.9.9")


@pytest.mark.parametrize(("log", "needle"), [
    ("x\nhpcprov: error: module(s) not available here: cuda/99\n", "cuda/99"),
    pytest.param(PIP23_CONFLICT, "pip cannot install torch==9.9.9: it conflicts with the "
                 "constraint torch<=2.14.1", id="pip23-constraint"),
    pytest.param(PIP26_CONFLICT, "pip cannot install torch==9.9.9: it conflicts with the "
                 "constraint torch<=2.14.1", id="pip26-constraint"),
    pytest.param(DEPENDENCY_CONFLICT, "pip cannot install foo==1.0 and torch==2.13.0: the "
                 "requirements conflict (The user requested torch==2.13.0; foo 1.0 depends "
                 "on torch==2.0.1)", id="dependency-conflict"),
    pytest.param("ERROR: ResolutionImpossible: for help visit https://pip.pypa.io/",
                 "pip cannot install the requested packages", id="resolution-impossible"),
    pytest.param(SETTINGS + PIP26_CONFLICT, "constraints /etc/xdg/pip/constraints.txt "
                 "(global.constraint in pip's configuration)", id="settings-constraint-file"),
    pytest.param(SETTINGS + PIP23_CONFLICT, "extra index URLs file:///opt/pypi/simple "
                 "file:///opt/pypi-more/simple (global.extra-index-url", id="settings-extra"),
    pytest.param(SETTINGS + NO_MATCH, "pip found no torch==9.9.9", id="settings-no-match"),
    pytest.param(SETTINGS + NO_MATCH, "find-links /site/wheels (hpcprov's --find-links), "
                 "/opt/wheels (PIP_FIND_LINKS; global.find-links in pip's configuration)",
                 id="settings-find-links"),
    pytest.param(SETTINGS + NO_MATCH, "index URL https://****@mirror.example/simple "
                 "(PIP_INDEX_URL)", id="settings-index-url"),
    pytest.param("hpcprov: pip settings: \n" + NO_MATCH,
                 "pip was given no constraints, index URLs or find-links", id="settings-none"),
    pytest.param("Looking in indexes: https://pypi.org/simple, file:///opt/pypi/simple\n"
                 "Looking in links: /opt/wheels\n" + NO_MATCH,
                 "pip looked in the links /opt/wheels", id="pip-looking-in"),
    ("OSError: [Errno 28] No space left on device: '/p/venv'", "disk under the prefix is full"),
    ("ERROR: Could not find a version that satisfies the requirement torch==9.9.9\n"
     "ERROR: No matching distribution found for torch==9.9.9", "pip found no torch==9.9.9"),
    ("Lmod has detected the following error:  The following module(s) are unknown: "
     '"cuda/99"', "cuda/99"),
    ("curl: (6) Could not resolve host: repo.anaconda.com", "no network"),
    ("curl: (22) The requested URL returned error: 404", "HTTP 404"),
    ("CMake Error at CMakeLists.txt:3", "CMake configure failed"),
])
def test_diagnosis_names_the_cause(log: str, needle: str) -> None:
    assert needle in (diagnose(log) or "")


def test_unknown_failures_are_not_given_a_made_up_cause() -> None:
    assert diagnose("something odd happened\n") is None


def test_the_latest_pip_settings_line_counts_and_a_setting_listed_twice_keeps_its_last_value(
        ) -> None:
    older = "hpcprov: pip settings: global.constraint='/old/c.txt'\n"
    twice = ("hpcprov: pip settings: global.constraint='/etc/xdg/pip/constraints.txt' "
             "global.constraint=''\n")
    why = diagnose(older + twice + NO_MATCH) or ""
    assert "pip was given no constraints, index URLs or find-links" in why
    assert "constraints.txt" not in why and "/old/c.txt" not in why
    assert "no index" not in (diagnose(SETTINGS + NO_MATCH) or "")  # PIP_NO_INDEX=0 is off


FAKE_PIP = r"""#!/bin/bash
# stands in for `python -m pip config list` (pip 26's spelling, a key once per file)
[ "$*" = "-m pip config list" ] || exit 9
[ -n "${PIP_BROKEN:-}" ] && exit 1
cat <<'END'
global.cert='/etc/ssl/certs/ca-certificates.crt'
global.constraint='/etc/xdg/pip/constraints.txt'
global.extra-index-url='https://user:secret@mirror.example/simple'
:env:.default-timeout='180'
:env:.find-links='/opt/wheels'
END
"""


def _settings_output(tmp_path: Path, profile: str, **env: str) -> str:
    """What the setup script's hpcprov_pip_settings prints for a profile, with FAKE_PIP as
    python, under the script's own `set -eo pipefail`."""
    write_profile(tmp_path / "sites", "wh", profile)
    script = render_script(build_plan(load_site(str(tmp_path / "sites" / "wh.yaml")), "/p"))
    calls = {ln.strip() for ln in script.splitlines()
             if ln.strip().startswith("hpcprov_pip_settings") and "()" not in ln}
    assert len(calls) == 1, calls  # the same call in every step that runs pip install
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "python").write_text(FAKE_PIP)
    (tmp_path / "bin" / "python").chmod(0o755)
    head = script.split("\nHPCPROV_STEPS=(")[0]
    (tmp_path / "run.sh").write_text(head + "\n" + calls.pop() + "\necho after\n")
    proc = subprocess.run(["bash", str(tmp_path / "run.sh")], capture_output=True, text=True,
                          env={"PATH": f"{tmp_path / 'bin'}:/usr/bin:/bin", "HOME": "/h",
                               **env}, cwd=tmp_path, timeout=30)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[-1] == "after"  # a failing pip does not stop the step
    return proc.stdout


WHEELHOUSE_PROFILE = ("extends: local\nname: wh\npython:\n  venv:\n    no_index: true\n"
                      "    wheelhouse: ['$HOME/wh one', '/w$(touch PWNED1)']\n")


def test_the_setup_script_logs_pip_settings_that_diagnose_reads(tmp_path: Path) -> None:
    out = _settings_output(tmp_path, WHEELHOUSE_PROFILE)
    (line,) = [ln for ln in out.splitlines() if ln.startswith("hpcprov: pip settings:")]
    assert "secret" not in line and "https://****@mirror.example/simple" in line
    assert "cert" not in line and "timeout" not in line  # only what decides what pip finds
    why = diagnose(out + PIP23_CONFLICT) or ""
    assert "it conflicts with the constraint torch<=2.14.1" in why
    assert ("constraints /etc/xdg/pip/constraints.txt (global.constraint in pip's "
            "configuration)") in why
    assert ("find-links /h/wh one (hpcprov's --find-links), /w$(touch PWNED1) (hpcprov's "
            "--find-links), /opt/wheels (PIP_FIND_LINKS)") in why
    assert "no index (hpcprov's --no-index)" in why
    assert not list(tmp_path.rglob("PWNED*"))


def test_pip_settings_still_name_the_profile_when_pip_config_list_fails(tmp_path: Path
                                                                         ) -> None:
    out = _settings_output(tmp_path, WHEELHOUSE_PROFILE, PIP_BROKEN="1")
    why = diagnose(out + NO_MATCH) or ""
    assert "pip found no torch==9.9.9" in why
    assert "no index (hpcprov's --no-index)" in why and "/etc/xdg" not in why


@pytest.mark.parametrize("site", ["local", "cc", "neuron"])
def test_every_pip_install_step_logs_the_pip_settings_first(site: str) -> None:
    plan = build_plan(load_site(site), "/p")
    steps = [s for s in plan.steps if s.id != "create-env"
             and any("pip install" in ln for ln in s.lines)]
    assert steps
    for step in steps:  # before the first install, of pip or (installer: auto) uv
        first = min(i for i, ln in enumerate(step.lines)
                    if "pip install" in ln or "hpcprov_uv_install" in ln)
        assert any(ln.startswith("hpcprov_pip_settings") for ln in step.lines[:first]), step.id
    assert "hpcprov_pip_settings" in plan.library


CB = """Horovod v0.28.1:

Available Frameworks:
    [ ] TensorFlow
    [X] PyTorch
    [ ] MXNet

Available Controllers:
    [X] MPI
    [X] Gloo

Available Tensor Operations:
    [ ] NCCL
    [ ] DDL
    [ ] CCL
    [X] MPI
    [X] Gloo
""".replace("[X] Gloo\n", "[X] Gloo    \n")  # horovodrun pads the last line


def test_check_build_parsing_matches_what_local_expects() -> None:
    found = parse_check_build(CB)
    assert found["version"] == "0.28.1"
    want = expected_check_build(load_site("local").horovod)
    for key, names in want.items():
        assert names == found[key], key
    assert parse_check_build(CB.replace("[X] PyTorch", "[ ] PyTorch"))["frameworks"] == []


def manifest(**over: object) -> Manifest:
    base = {"site": "local", "created": "now", "host": "h", "activate": "/p/activate",
            "backend": "venv", "modules": {"runtime": []},
            "pip_freeze": ["torch==2.13.0+cpu", "horovod==0.28.1"]}
    return parse_manifest({**base, **over})


def facts(**over: str) -> dict[str, list[str]]:
    py = ('{"versions": {"torch": "2.13.0+cpu", "horovod": "0.28.1"}, '
          '"imports": {"horovod.torch": "ok"}}')
    base = {"activate_rc": "0", "gpus": "none", "mpi": "mpirun (Open MPI) 4.1.4",
            "python_json": py}
    return {k: [v] for k, v in {**base, **over}.items()}


def test_doctor_healthy() -> None:
    checks = judge(manifest(), facts(), None, "hpcprov setup")
    assert [c.status for c in checks if c.status == "fail"] == []


def test_doctor_catches_a_framework_changed_after_the_build() -> None:
    py = ('{"versions": {"torch": "2.12.0", "horovod": "0.28.1"}, "imports": '
          '{"horovod.torch": "HorovodVersionMismatchError: Framework pytorch installed with '
          'version 2.12.0 but found version 2.13.0+cpu"}}')
    checks = {c.name: c for c in judge(manifest(), facts(python_json=py), None, "hpcprov setup")}
    assert checks["version:torch"].status == "fail"
    assert "2.12.0" in checks["version:torch"].detail
    assert "torch==2.13.0+cpu" in checks["version:torch"].fix
    assert checks["import:horovod.torch"].status == "fail"


def test_doctor_says_to_load_the_module_a_framework_came_from() -> None:
    py = ('{"versions": {"torch": "2.2.0", "horovod": "0.28.1"}, "imports": '
          '{"horovod.torch": "ok"}}')
    profile = {"python": {"frameworks": {"pytorch": {"version": "2.13.0",
                                                     "installer": "module",
                                                     "module": "pytorch/2.13.0"}}}}
    checks = {c.name: c for c in judge(manifest(site_profile=profile), facts(python_json=py),
                                       None, "hpcprov setup")}
    torch = checks["version:torch"]
    assert torch.status == "fail" and "2.2.0" in torch.detail
    assert "module pytorch/2.13.0" in torch.fix and "pip install" not in torch.fix


def test_doctor_catches_conda_base_missing_modules_gpus_and_openmpi5() -> None:
    m = manifest(backend="conda", modules={"runtime": ["cuda/11.4"]})
    f = facts(conda_auto_activate_base="True", gpus="2", mpi="mpirun (Open MPI) 5.0.3")
    f["module_missing"] = ["cuda/11.4"]
    checks = {c.name: c for c in judge(m, f, 8, "hpcprov setup")}
    assert checks["conda-base"].status == "fail"
    assert checks["conda-base"].fix == "conda config --set auto_activate_base false"
    assert checks["modules"].status == "fail" and "cuda/11.4" in checks["modules"].detail
    assert checks["gpus"].status == "fail" and "2 of 8" in checks["gpus"].detail
    assert checks["horovodrun-mpi"].status == "warn"


def test_doctor_on_an_unfinished_prefix_names_the_step() -> None:
    c = not_ready(Path("/p"), {"prepare": {"status": "done"},
                               "build-horovod": {"status": "interrupted", "log": "/l"}},
                  "hpcprov setup --site local --prefix /p")
    assert c.status == "fail" and "build-horovod" in c.detail and "resumes" in c.fix


def test_every_bundled_build_site_has_a_rule_verdict_it_accepts() -> None:
    for name in ("local", "local-tf", "neuron", "taurus", "testbed"):
        assert all(m.rule.verdict != "bad" for m in for_site(load_site(name))), name


def test_pip_freeze_of_a_wheel_installed_from_a_file_gives_its_version() -> None:
    from hpcprov.provision.manifest import framework_versions, parse_freeze

    freeze = parse_freeze("horovod @ file:///w/0ef6/horovod-0.28.1-cp311-cp311-linux_x86_64"
                          ".whl#sha256=19\ntorch==2.13.0+cpu\ntensorflow-cpu==2.21.0\n-e x\n")
    assert framework_versions(freeze) == {"torch": "2.13.0+cpu", "tensorflow": "2.21.0",
                                          "horovod": "0.28.1"}


def test_the_rules_version_clauses_agree_with_pep440_specifier_sets() -> None:
    """compat evaluates its rules' specifiers without packaging.specifiers (start-up time);
    on released versions it must say exactly what SpecifierSet says."""
    from packaging.specifiers import SpecifierSet
    from packaging.version import Version

    from hpcprov.provision.compat import RULES, _matches

    specs = {s for r in RULES for s in (r.horovod, r.torch, r.tensorflow) if s}
    assert len(specs) >= 5
    versions = [f"{a}.{b}.{c}" for a in (0, 1, 2, 3) for b in (0, 1, 6, 13, 16, 21, 22, 27,
                                                            28, 29) for c in (0, 1, 2)]
    versions += ["2.21", "2.13", "0.28", "2.16"]
    for spec in specs:
        for v in versions:
            assert _matches(spec, v) == (Version(v) in SpecifierSet(spec)), (spec, v)
    assert _matches(">=2.0,<2.5", "2.4.1") and not _matches(">=2.0,<2.5", "2.5")
    assert not _matches("~=2.0", "2.1")  # not a plain comparison: never a match


def test_plain_releases_compare_without_packaging_and_others_as_pep440_orders_them() -> None:
    """Each clause is a comparison in PEP 440 order (packaging.version's), whether the
    version is a plain release (compared without packaging) or not."""
    import operator
    import re

    from packaging.version import Version

    from hpcprov.provision.compat import _matches, _version

    ops = {"<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge,
           "==": operator.eq, "!=": operator.ne}
    versions = ["2.13", "2.13.0", "2.13.0.0", "2.013", "2.9", "2.10", "2.13.1", "2.14rc1",
                "2.13.post1", "2.14.dev0", "1!1.0", "2.13.0a1"]
    specs = ["==2.13", "!=2.13.0", "<2.14", "<=2.13", ">2.13", ">=2.14", ">=2.10,<2.14",
             "<2.14rc2", ">=2.13.post0"]
    for spec in specs:
        clauses = [re.fullmatch(r"(<=|>=|==|!=|<|>)(.+)", c).groups() for c in spec.split(",")]
        for v in versions:
            expected = all(ops[op](Version(v), Version(x)) for op, x in clauses)
            assert _matches(spec, v) == expected, (spec, v)
    assert _version("2.13.0+cpu") == "2.13.0" and _version("2.14rc1") == "2.14rc1"
    assert _version("not-a-version") is None and _version("") is None


@pytest.mark.parametrize("text", ["[]", '{"steps": []}', '{"steps": {"a": "done"}}',
                                  '{"steps": {"a": 3, "b": null}}', '"x"', "null"])
def test_a_malformed_journal_is_an_empty_one_not_a_traceback(tmp_path: Path,
                                                             text: str) -> None:
    from hpcprov.provision.journal import Journal

    (tmp_path / "journal.json").write_text(text)
    j = Journal.load(tmp_path / "journal.json")
    assert j.steps == {} and j.pending({"a": "1"}) == ["a"]


def test_doctor_expects_no_horovod_where_the_profile_installs_none(tmp_path: Path) -> None:
    """sockeye (horovod.source: none): doctor must not demand `import horovod.torch`."""
    from hpcprov.provision.doctor import probe_script
    from hpcprov.provision.journal import Journal
    from hpcprov.provision.manifest import build_manifest
    from hpcprov.site.profiles import load_site

    site = load_site("sockeye")
    (tmp_path / ".hpcprov").mkdir()
    manifest = build_manifest(site, "sockeye.yaml", tmp_path,
                              Journal(tmp_path / ".hpcprov" / "journal.json"))
    assert manifest["check_build"]["expected"] == {}
    (call,) = [ln for ln in probe_script(parse_manifest(manifest), tmp_path).splitlines()
               if "| python -" in ln]
    assert "horovod." not in call
    neuron = build_manifest(load_site("neuron"), "neuron.yaml", tmp_path,
                            Journal(tmp_path / ".hpcprov" / "journal.json"))
    (call,) = [ln for ln in probe_script(parse_manifest(neuron), tmp_path).splitlines()
               if "| python -" in ln]
    assert "horovod.torch" in call


def test_a_complete_prefix_answers_nothing_to_do_without_writing(tmp_path: Path) -> None:
    """A finished prefix in a read-only software area: no lock, no journal write."""
    from hpcprov.provision.journal import Journal, StepRecord
    from hpcprov.provision.plan import build_plan, fingerprints
    from hpcprov.provision.progress import make_reporter
    from hpcprov.provision.runner import Runner
    from hpcprov.site.profiles import load_site

    plan = build_plan(load_site("local"), str(tmp_path))
    state = tmp_path / ".hpcprov"
    state.mkdir()
    journal = Journal(state / "journal.json")
    journal.steps = {k: StepRecord("done", v, 0.0) for k, v in fingerprints(plan).items()}
    journal.save()
    (state / "manifest.json").write_text("{}")
    before = sorted(p.name for p in state.iterdir())
    result = Runner(plan, make_reporter(quiet=True), prefix_path=tmp_path).run()
    assert result.status == "nothing-to-do"
    assert sorted(p.name for p in state.iterdir()) == before  # no lock file was made


def test_the_lock_names_a_step_its_dead_runner_left_running(tmp_path: Path) -> None:
    import subprocess
    import sys

    from hpcprov.provision.runner import _held_by

    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    step = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        text = f"{gone.pid} since 2026-11-23 12:00:00\nstep build-horovod pid {step.pid}\n"
        why = _held_by(tmp_path, tmp_path / "lock", text)
        assert f"locked by step build-horovod (pid {step.pid})" in why
        assert f"hpcprov (pid {gone.pid}) that is gone" in why
        alive = _held_by(tmp_path, tmp_path / "lock", f"{os.getpid()} since x\n")
        assert f"pid {os.getpid()}" in alive and "another hpcprov" in alive
    finally:
        step.kill()
        step.wait()


def test_a_failure_on_a_full_disk_says_so_when_the_tool_does_not(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """ensurepip on a full disk logs only an exit status: the free space tells."""
    import shutil as sh

    from hpcprov.provision import runner

    usage = sh.disk_usage(tmp_path)
    monkeypatch.setattr(runner.shutil, "disk_usage",
                        lambda p: usage._replace(free=3 * 2**20))
    assert "disk under the prefix is full (3 MiB free" in (runner._full_disk(tmp_path) or "")
    monkeypatch.setattr(runner.shutil, "disk_usage", lambda p: usage._replace(free=2**34))
    assert runner._full_disk(tmp_path) is None


# ---- build errors named (issue 24) ---------------------------------------------------------

@pytest.mark.parametrize(("line", "needles"), [
    ("/e/torch/include/c10/core/Scalar.h:9:12: error: 'strong_ordering' in namespace 'std' "
     "does not name a type", ["Scalar.h:9:12: error: 'strong_ordering'", "cxx-standard"]),
    ("nvcc fatal   : Unsupported gpu architecture 'compute_70'",
     ["nvcc fatal", "cannot target sm_70", "site check"]),
    ("  Could NOT find CUDAToolkit (missing: CUDAToolkit_INCLUDE_DIRECTORIES)",
     ["Could NOT find CUDAToolkit", "set CUDA_HOME"]),
    ("-- FOUND_LIB_cudart NOTFOUND", ["FOUND_LIB_cudart NOTFOUND", "set CUDA_HOME"]),
    ("/b/horovod/torch/mpi_ops_v2.cc:16:10: fatal error: Python.h: No such file or directory",
     ["fatal error: Python.h", "no-distutils"]),
    ("x/group_table.h:30:8: error: 'string' in namespace 'std' does not name a type",
     ["group_table.h:30:8", "std-includes"]),
    ("q.cu(3): a.cu:3:1: error: something new", ["a.cu:3:1: error: something new",
                                                 "consequences"]),
])
def test_a_failed_build_is_named_by_its_first_error(line: str, needles: list[str]) -> None:
    log = "\n".join(["-- configuring", line, *[f"noise {i}" for i in range(50)],
                     "error: command '/usr/bin/g++' failed with exit code 1",
                     "ERROR: Failed building wheel for horovod"])
    why = diagnose(log) or ""
    assert why.startswith("the build's first error: ") and len(why.splitlines()) == 2, why
    assert all(n in why for n in needles), why


def test_the_first_error_is_found_beyond_the_kept_tail(tmp_path: Path) -> None:
    """A real step fails: its first compiler error printed 2,000 lines before the end (the
    runner keeps 400), then the consequences; the failure names that first error."""
    from dataclasses import replace

    from hpcprov.provision.plan import Step, build_plan
    from hpcprov.provision.progress import make_reporter
    from hpcprov.provision.runner import Runner, SetupFailed
    from hpcprov.site.profiles import load_site

    plan = build_plan(load_site("local"), str(tmp_path / "p"))
    step = Step("build-horovod", "a build that fails", (
        "echo 'src/first.cc:12:3: error: the real cause'",
        "for i in $(seq 2000); do echo \"[ 50%] Building CXX object obj$i.o\"; done",
        "echo 'src/later.cc:1:1: error: a consequence'", "exit 2"))
    plan = replace(plan, steps=(step,))
    with pytest.raises(SetupFailed) as failed:
        Runner(plan, make_reporter(quiet=True), prefix_path=tmp_path / "p").run()
    message = str(failed.value)
    assert "the build's first error: src/first.cc:12:3: error: the real cause" in message
    assert "see the log" not in message and "later.cc" not in message


# ------------------------------------------------------- the manifest, read back typed


@pytest.mark.parametrize(("content", "said"), [
    ("{}", "site: Field required"),
    ('{"site": "local", "steps": "all"}', "steps: Input should be a valid list"),
    ('{"site": "local", "site_profile": {"partitions": {"gpu": {"gpus": {"count": "many"}}}}}',
     "site_profile.partitions.gpu.gpus.count"),
    ("[1, 2]", "(top level)"),
    ("{not json", "Expecting property name"),
    ("fifo", "a FIFO"),
])
def test_doctor_reads_a_malformed_manifest_as_one_line_naming_it_and_the_fix(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str, said: str) -> None:
    state = tmp_path / "prefix" / ".hpcprov"
    state.mkdir(parents=True)
    if content == "fifo":
        os.mkfifo(state / "manifest.json")  # read naively, doctor would wait forever
    else:
        (state / "manifest.json").write_text(content)
    err = assert_one_line_error(cli(capsys, "doctor", "--site", "local", "--prefix",
                                    str(tmp_path / "prefix")))
    assert str(state / "manifest.json") in err and said in err
    assert err.endswith("run hpcprov setup --redo")


def test_doctor_reads_the_gpus_of_a_partition_from_the_recorded_profile() -> None:
    recorded = manifest(site="neuron", site_profile={"partitions": {
        "gpu": {"gpus": {"count": 8}, "nodes": 4}, "cpu": {}}})
    assert recorded.gpus_of("gpu") == 8 and recorded.gpus_of("cpu") == 0
    with pytest.raises(UsageError, match=r"^--partition 'nope': site neuron has no such "
                       r"partition \(it has gpu, cpu\)$"):
        recorded.gpus_of("nope")


# ------------------------------------------------------- overrides (--env, --container)


def test_env_name_and_container_go_through_one_function() -> None:
    from hpcprov.site.overrides import with_overrides

    neuron = load_site("neuron")
    assert with_overrides(neuron) is neuron
    named = with_overrides(neuron, env_name="mine")
    assert named.python.env_name == "mine" and neuron.python.env_name != "mine"
    image = next(iter(neuron.containers.images))
    both = with_overrides(neuron, env_name="mine", container=image)
    assert both.python.backend == "container" and both.python.env_name == "mine"
    assert both.python.container.source == neuron.containers.images[image]
    assert both.horovod.source == "container" and neuron.horovod.source != "container"
    with pytest.raises(UsageError, match="^--env 'a b': use letters"):
        with_overrides(neuron, env_name="a b")
    with pytest.raises(UsageError, match="^--container 'nope': site neuron has "):
        with_overrides(neuron, container="nope")


SITE_IMAGE = """\
name: siteimg
extends: neuron
python:
  backend: container
  container: {image: pt, source: /apps/applications/singularity_images/ngc/pytorch.sif}
horovod: {source: none}
containers:
  images: {pt: /apps/applications/singularity_images/ngc/pytorch.sif}
  default_image: pt
"""


def test_a_site_provided_image_asks_no_build_modules_and_no_disk(tmp_path: Path) -> None:
    """Setup with the site's own image (a path, nothing pulled) loaded the build modules,
    checked they exist and asked 20 GB free under the prefix; with horovod.source: none it
    proves the image by importing the frameworks, not with horovodrun -cb."""
    from hpcprov.provision.plan import build_plan
    from hpcprov.site.profiles import load_site

    site = load_site(str(write_profile(tmp_path, "siteimg", SITE_IMAGE)))
    steps = {s.id: s for s in build_plan(site, str(tmp_path / "p")).steps}
    preflight = "\n".join(steps["preflight"].lines)
    assert "hpcprov_modules_build" not in preflight
    assert "hpcprov_check_disk 100" in preflight
    checked = next(ln for ln in steps["preflight"].lines if "hpcprov_check_modules" in ln)
    assert "singularity/3.9.7" in checked  # the runtime's module, and the runtime set only
    assert not set(site.modules.build.load) - set(site.modules.runtime.load) & set(
        checked.split())
    check = "\n".join(steps["check-build"].lines)
    # frameworks_import.py on the image's Python's stdin (no Python in the step's text)
    assert "horovodrun" not in check and "python -c" not in check
    assert steps["check-build"].lines[-1].startswith(
        "hpcprov_file_frameworks_import_py | singularity exec ")
    assert check.endswith(" python - torch tensorflow")  # neuron's frameworks


def test_activate_carries_the_network_variables_every_partition_sets_alike(
        tmp_path: Path) -> None:
    """PREFIX/activate loaded the modules and the Python environment but none of the
    partition's network variables, so a shell that sourced it (an interactive run, a
    user's own job script) reached NCCL and Gloo over the wrong interface."""
    from hpcprov.provision.plan import activate_lines
    from hpcprov.site.profiles import load_site

    site = load_site(str(write_profile(tmp_path, "nets", (
        "name: nets\nextends: testbed\n"
        "partitions:\n"
        "  amd_a100nv_8: {network: {gloo_socket_ifname: ib0, nccl_ib_hca: mlx5_0}}\n"
        "  cas_v100_4: {network: {gloo_socket_ifname: ib0, nccl_ib_hca: mlx5_1}}\n"
        "  all: {network: {gloo_socket_ifname: ib0}}\n"))))
    lines = activate_lines(site, str(tmp_path / "p"))
    assert "export GLOO_SOCKET_IFNAME=ib0" in lines
    assert not [ln for ln in lines if "NCCL_IB_HCA" in ln]  # partitions differ: jobs say it


def test_setup_resolves_a_glob_image_path_as_the_jobs_do(tmp_path: Path) -> None:
    """An image path with * (versioned names) was checked quoted whole by setup, so setup
    failed on a path every job resolves."""
    from hpcprov.provision.plan import build_plan, render_script
    from hpcprov.site.profiles import load_site

    root = Path(__file__).resolve().parents[1]
    site = load_site(str(root / "docs" / "examples" / "slurm-apptainer.yaml"))
    script = tmp_path / "setup.sh"
    script.write_text(render_script(build_plan(site, str(tmp_path / "prefix"))))
    images = tmp_path / "images"
    images.mkdir()
    env = {**os.environ, "SCRATCH": str(tmp_path)}
    none = subprocess.run(["bash", str(script), "check-image"], capture_output=True,
                          text=True, env=env, timeout=60)
    assert none.returncode == 1
    assert "no container image matches $SCRATCH/images/pytorch_*.sif" in none.stderr
    for version in ("24.01", "25.01"):
        (images / f"pytorch_{version}.sif").write_text("")
    found = subprocess.run(["bash", "-x", str(script), "check-image"], capture_output=True,
                           text=True, env=env, timeout=60)
    assert found.returncode == 0, found.stderr
    assert f"hpcprov_check_image {images}/pytorch_25.01.sif" in found.stderr
