"""Any scheduler flag as the site spells it (issue 45, defect 2 and deliverable 2; defect 18's
``$(id -gn)`` default): a job option named by the scheduler's own flag (PBS ``qsub -P``,
``-k``; LSF ``bsub -G``, ``-alloc_flags``, ``-core_isolation``) is written as that flag, as
``-o``, a partition's option, a mandatory option or its default; names written as one flag
are one option, so a forbidden flag is refused under any of them; a default the directives
would carry literally is refused at its line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hpcprov_tests import Result, assert_one_line_error, cli, pbs_directives, write_profile

from hpcprov.request.options import parse_option

# a PBS Pro site that charges projects with `qsub -P PROJECT` (as NCI's Gadi does)
PBS = """\
name: {name}
scheduler: pbs
partitions:
  gpu:
    nodes: 16
    cores_per_node: 48
    gpus: {{count: 4}}
    limits: {{max_walltime: "48:00:00", default_walltime: "01:00:00"}}
    default: true
pbs:
  queue_always: true
policies:
{policies}
launchers:
  mpirun: {{kind: mpirun, hosts: hostfile, hostfile: $PBS_NODEFILE, oversubscribe: true}}
default_launcher: mpirun
"""
CHARGES_P = """\
  required_options:
    P: {example: grp, reason: "jobs are charged to a project: qsub -P PROJECT"}
"""


def pbs_site(tmp_path: Path, policies: str = CHARGES_P, name: str = "pbsp") -> str:
    return str(write_profile(tmp_path, name, PBS.format(name=name, policies=policies)))


def lsf_site(tmp_path: Path, policies: str, name: str = "lsfg", extra: str = "") -> str:
    """lsf-example (LSF) with these policies and a default time limit."""
    text = (f"extends: lsf-example\nname: {name}\npartitions:\n  gpuv100:\n"
            f"    limits: {{default_walltime: '01:00:00'}}\n{extra}policies:\n{policies}")
    return str(write_profile(tmp_path, name, text))


def jobscript(capsys: pytest.CaptureFixture[str], site: str, *args: str) -> Result:
    return cli(capsys, "jobscript", "--site", site, "-N", "2", *args, "--", "python", "x.py")


def dry_run(capsys: pytest.CaptureFixture[str], site: str, tmp_path: Path,
            *args: str) -> Result:
    return cli(capsys, "validate", "--site", site, "--dry-run", "-N", "2",
               "--env", str(tmp_path / "env"), "--workdir", str(tmp_path / "run"), *args)


def planned_scripts(res: Result) -> list[str]:
    """The scripts of a ``validate --dry-run --json`` (``dry_run(..., "--json")``)."""
    assert res.rc == 0, res.err
    scripts = [s["text"] for s in json.loads(res.out)["scripts"]]
    assert scripts
    return scripts


def bsub_lines(script: str) -> list[str]:
    return [line for line in script.splitlines() if line.startswith("#BSUB ")]


# ---------------------------------------------------------------- PBS: qsub -P, -k


def test_pbs_charges_a_project_with_qsub_P(capsys: pytest.CaptureFixture[str],
                                            tmp_path: Path) -> None:
    site = pbs_site(tmp_path)
    res = jobscript(capsys, site, "-o", "P=grp")
    assert res.rc == 0, res.err
    lines = pbs_directives(res.out)
    assert ["-P", "grp"] in lines
    assert not [w for w in lines if w[0] == "-l" and w[1].lower().startswith(("p=", "project"))]
    for script in planned_scripts(dry_run(capsys, site, tmp_path, "--json", "-o", "P=grp")):
        assert ["-P", "grp"] in pbs_directives(script), script


def test_a_pbs_project_default_reaches_every_planned_job(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    site = pbs_site(tmp_path, "  required_options:\n    P: {default: grp}\n")
    for script in planned_scripts(dry_run(capsys, site, tmp_path, "--json")):
        assert pbs_directives(script).count(["-P", "grp"]) == 1, script
    res = jobscript(capsys, site, "-o", "P=mine")  # the user's value replaces the default
    assert res.rc == 0, res.err
    assert [w for w in pbs_directives(res.out) if w[0] == "-P"] == [["-P", "mine"]]


def test_pbs_k_and_other_qsub_letters_are_written_as_qsub_flags(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    site = pbs_site(tmp_path)
    res = jobscript(capsys, site, "-o", "P=grp", "-o", "k=oe", "-o", "W=group_list=grp")
    assert res.rc == 0, res.err
    lines = pbs_directives(res.out)
    assert ["-k", "oe"] in lines and ["-W", "group_list=grp"] in lines
    # a qsub letter that names an option hpcprov writes itself replaces it: one -N
    res = jobscript(capsys, site, "-o", "P=grp", "-o", "N=mine")
    assert res.rc == 0, res.err
    assert [w for w in pbs_directives(res.out) if w[0] == "-N"] == [["-N", "mine"]]
    # as a partition's option too
    text = Path(site).read_text(encoding="utf-8").replace(
        "    default: true\n", "    default: true\n    options: {k: oe}\n")
    part = write_profile(tmp_path, "pbsk", text.replace("name: pbsp", "name: pbsk"))
    res = jobscript(capsys, str(part), "-o", "P=grp")
    assert res.rc == 0, res.err
    assert ["-k", "oe"] in pbs_directives(res.out)


def test_a_missing_pbs_project_is_one_line_from_jobscript_and_validate(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    site = pbs_site(tmp_path)
    needles = ("[missing-option] -P is mandatory", "qsub -P PROJECT", "--option P=grp")
    res = jobscript(capsys, site)
    assert_one_line_error(res, 2, *needles)
    assert res.out == ""
    res = dry_run(capsys, site, tmp_path)
    assert_one_line_error(res, 2, *needles)
    assert res.out == ""


# ---------------------------------------------------------------- LSF: bsub -G, -alloc_flags

CHARGES_G = """\
  required_options:
    G: {example: bank, reason: "jobs are charged to a bank: bsub -G BANK"}
"""


def test_lsf_charges_a_bank_with_bsub_G(capsys: pytest.CaptureFixture[str],
                                        tmp_path: Path) -> None:
    site = lsf_site(tmp_path, CHARGES_G)
    res = jobscript(capsys, site, "-o", "G=bank")
    assert res.rc == 0, res.err
    assert "#BSUB -G bank" in bsub_lines(res.out)
    assert not [line for line in bsub_lines(res.out) if line.startswith("#BSUB -P")]
    for script in planned_scripts(dry_run(capsys, site, tmp_path, "--json", "-o", "G=bank")):
        assert "#BSUB -G bank" in bsub_lines(script), script


def test_a_missing_lsf_bank_is_one_line_from_jobscript_and_validate(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    site = lsf_site(tmp_path, CHARGES_G)
    needles = ("[missing-option] -G is mandatory", "--option G=bank")
    assert_one_line_error(jobscript(capsys, site), 2, *needles)
    assert_one_line_error(dry_run(capsys, site, tmp_path), 2, *needles)


def test_lsf_flags_with_underscores(capsys: pytest.CaptureFixture[str],
                                    tmp_path: Path) -> None:
    assert parse_option("alloc_flags=smt4") == ("alloc_flags", "smt4")
    assert parse_option("-core_isolation 2") == ("core_isolation", "2")
    site = lsf_site(tmp_path, "  required_options:\n    alloc_flags: {default: ipisolate}\n",
                    extra="    options: {core_isolation: '2'}\n")
    res = cli(capsys, "site", "check", site)
    assert res.rc == 0, res.err
    res = jobscript(capsys, site)
    assert res.rc == 0, res.err
    assert {"#BSUB -alloc_flags ipisolate", "#BSUB -core_isolation 2"} <= set(bsub_lines(res.out))
    res = jobscript(capsys, site, "-o", "alloc_flags=smt4")
    assert res.rc == 0, res.err
    flags = [line for line in bsub_lines(res.out) if "alloc_flags" in line]
    assert flags == ["#BSUB -alloc_flags smt4"]


# ---------------------------------------------------------------- one flag, any name


@pytest.mark.parametrize(("forbidden", "given"), [("P", "account"), ("account", "P"),
                                                  ("P", "project"), ("project", "account")])
def test_lsf_forbidden_flag_is_refused_under_any_name(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, forbidden: str, given: str) -> None:
    site = lsf_site(tmp_path, f"  forbidden_options:\n    {forbidden}: charge with -G\n")
    for res in (jobscript(capsys, site, "-o", f"{given}=x"),
                dry_run(capsys, site, tmp_path, "-o", f"{given}=x")):
        line = assert_one_line_error(res, 2, "[forbidden-option] -P", "is not allowed",
                                     "charge with -G", f"remove --option {given}")
        assert res.out == "", line
    res = jobscript(capsys, site, "-o", "G=bank")  # another flag passes
    assert res.rc == 0, res.err


def test_lsf_forbidden_flag_in_a_partitions_options_under_an_alias(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    site = lsf_site(tmp_path, "  forbidden_options:\n    P: charge with -G\n",
                    extra="    options: {account: x}\n")
    assert_one_line_error(jobscript(capsys, site), 2, "[forbidden-option] -P",
                          "remove account from partitions.gpuv100.options")


def test_pbs_forbidden_flag_is_refused_under_any_name(capsys: pytest.CaptureFixture[str],
                                                      tmp_path: Path) -> None:
    site = pbs_site(tmp_path, "  forbidden_options:\n    A: charge with -P\n")
    assert_one_line_error(jobscript(capsys, site, "-o", "account=x"), 2,
                          "[forbidden-option] -A", "remove --option account")
    site = pbs_site(tmp_path, "  forbidden_options:\n    account: charge with -P\n", "pbsa")
    assert_one_line_error(jobscript(capsys, site, "-o", "A=x"), 2,
                          "[forbidden-option] -A (account)", "remove --option A")


def test_a_mandatory_flag_given_under_another_name(capsys: pytest.CaptureFixture[str],
                                                   tmp_path: Path) -> None:
    """LSF's account and P are one flag: a mandatory P given as account is given, and
    written once (the user's value, not the default)."""
    site = lsf_site(tmp_path, "  required_options:\n    P: {default: def}\n")
    res = jobscript(capsys, site, "-o", "account=mine")
    assert res.rc == 0, res.err
    assert [line for line in bsub_lines(res.out) if line.startswith("#BSUB -P")] == [
        "#BSUB -P mine"]
    site = lsf_site(tmp_path, "  required_options:\n    account: {example: proj}\n", "lsfa")
    res = jobscript(capsys, site, "-o", "P=mine")
    assert res.rc == 0, res.err
    assert "#BSUB -P mine" in bsub_lines(res.out)


# ---------------------------------------------------------------- a default no shell expands


def test_a_default_the_directives_would_carry_literally_is_refused_at_its_line(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    text = ("extends: neuron\nname: gn\npolicies:\n  required_options:\n"
            "    account:\n      default: \"$(id -gn)\"\n")
    path = write_profile(tmp_path, "gn", text)
    line = assert_one_line_error(cli(capsys, "site", "check", str(path)), 2,
                                 f"{path}:6:", "required_options.account.default",
                                 "$(id -gn)", "no shell expands", "-o NAME=VALUE")
    assert "Traceback" not in line
    res = cli(capsys, "jobscript", "--site", str(path), "--", "python", "x.py")
    assert_one_line_error(res, 2, f"{path}:6:", "written literally")
    assert "id -gn" not in res.out


# ---------------------------------------------------------------- a site's own flags (data)


def test_a_pbs_site_declares_project_as_qsub_P(capsys: pytest.CaptureFixture[str],
                                               tmp_path: Path) -> None:
    """pbs.flags: {project: -P}: -o project=grp writes #PBS -P grp (qsub refuses the
    -l project=grp it wrote before), in every job validate plans."""
    site = pbs_site(tmp_path, "  required_options:\n    project: {example: grp}\n")
    text = Path(site).read_text(encoding="utf-8").replace(
        "  queue_always: true\n", "  queue_always: true\n  flags: {project: -P}\n")
    Path(site).write_text(text, encoding="utf-8")
    res = jobscript(capsys, site, "-o", "project=grp")
    assert res.rc == 0, res.err
    lines = pbs_directives(res.out)
    assert ["-P", "grp"] in lines and not [w for w in lines if "project" in " ".join(w)]
    for script in planned_scripts(dry_run(capsys, site, tmp_path, "--json", "-o",
                                          "project=grp")):
        assert ["-P", "grp"] in pbs_directives(script), script
    assert_one_line_error(jobscript(capsys, site), 2, "[missing-option] -P (project) is "
                          "mandatory", "--option project=grp")
    res = jobscript(capsys, site, "-o", "P=mine")  # the flag's own name is the same option
    assert res.rc == 0, res.err
    assert [w for w in pbs_directives(res.out) if w[0] == "-P"] == [["-P", "mine"]]


def test_an_lsf_site_declares_account_as_bsub_G(capsys: pytest.CaptureFixture[str],
                                                tmp_path: Path) -> None:
    """lsf.flags: {account: -G}: account is bsub -G at this site, never -P; forbidding
    account forbids G, and a forbidden P no longer catches account."""
    site = lsf_site(tmp_path, "  required_options:\n    account: {example: bank}\n"
                    "  forbidden_options:\n    P: projects are not charged here\n",
                    extra="lsf:\n  flags: {account: -G}\n")
    res = jobscript(capsys, site, "-o", "account=bank")
    assert res.rc == 0, res.err
    assert "#BSUB -G bank" in bsub_lines(res.out)
    assert not [line for line in bsub_lines(res.out) if line.startswith("#BSUB -P")]
    assert_one_line_error(jobscript(capsys, site), 2, "[missing-option] -G (account) is "
                          "mandatory", "--option account=bank")
    assert_one_line_error(jobscript(capsys, site, "-o", "account=bank", "-o", "project=x"),
                          2, "[forbidden-option] -P", "remove --option project")
    site = lsf_site(tmp_path, "  forbidden_options:\n    account: charged by -G only\n",
                    "lsfna", extra="lsf:\n  flags: {account: -G}\n")
    assert_one_line_error(jobscript(capsys, site, "-o", "G=bank"), 2,
                          "[forbidden-option] -G (account)", "remove --option G")
    assert jobscript(capsys, site, "-o", "P=proj").rc == 0


def test_a_declared_flag_must_be_spelled_as_a_flag(capsys: pytest.CaptureFixture[str],
                                                    tmp_path: Path) -> None:
    path = write_profile(tmp_path, "bad", "extends: lsf-example\nname: bad\nlsf:\n"
                         "  flags: {account: G}\n")
    assert_one_line_error(cli(capsys, "site", "check", str(path)), 2, f"{path}:4:",
                          "lsf.flags", "'G' is not a flag", "-G")
