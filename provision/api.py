"""`hpcprov setup` and `hpcprov doctor` as Python functions, with typed options.

    from hpcprov.provision.api import SetupOptions, plan_setup, run_setup
    planned = plan_setup(SetupOptions(site="neuron", prefix="/scratch/me/hvd"))
    print(planned.script)                    # exactly what run_setup executes
    result = run_setup(planned)              # resumable; raises SetupFailed with the step

The CLI only parses flags into these objects and prints what comes back.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from hpcprov.core.errors import HpcprovError, UsageError
from hpcprov.core.findings import Finding, LintFailed
from hpcprov.jobs.layout import expand_prefix
from hpcprov.provision.plan import Plan, build_plan, render_script
from hpcprov.provision.plan_lint import lint_plan
from hpcprov.site.catalog import default_site, load
from hpcprov.site.loader import find_profile
from hpcprov.site.overrides import with_overrides

if TYPE_CHECKING:
    from hpcprov.provision.doctor import Check
    from hpcprov.provision.manifest import Manifest
    from hpcprov.provision.progress import Reporter
    from hpcprov.provision.quick import Request
    from hpcprov.provision.runner import SetupResult
    from hpcprov.site.cuda_arch import CudaTargets
    from hpcprov.site.types import Site


@dataclass(frozen=True)
class SetupOptions:
    """Everything `hpcprov setup` takes (the CLI's flags, by name)."""

    site: str | None = None
    prefix: str | None = None
    env_name: str | None = None
    runs_on: Literal["login", "compute"] = "login"
    until: str | None = None
    redo: bool = False
    container: str | None = None


@dataclass(frozen=True)
class PlannedSetup:
    """A setup planned and linted: the site it is for, its plan, the script, the warnings."""

    options: SetupOptions
    site: Site
    plan: Plan
    warnings: list[Finding] = field(default_factory=list)

    @property
    def script(self) -> str:
        return render_script(self.plan)

    @property
    def target(self) -> Path:
        return Path(expand_prefix(self.plan.prefix))


def _absolute(prefix: str | None) -> str | None:
    if prefix and "$" not in prefix:
        return os.path.abspath(os.path.expanduser(prefix))
    return prefix


def quick_request(o: SetupOptions) -> Request | None:
    """The "already set up?" key of a request (None where the fast answer cannot apply)."""
    ref = o.site or os.environ.get("HPCPROV_SITE")
    if o.redo or o.until is not None or not ref:
        return None
    from hpcprov.provision.quick import request_key

    return request_key(ref, {"prefix": _absolute(o.prefix), "env": o.env_name,
                             "on": o.runs_on, "container": o.container})


def already_ready(o: SetupOptions) -> Path | None:
    """The prefix when this exact request finished before (no model, no plan needed)."""
    from hpcprov.provision.quick import ready_prefix

    request = quick_request(o)
    return ready_prefix(request) if request else None


def _nvcc_at_hand(site: Site) -> CudaTargets | None:
    """What the nvcc on PATH targets, asked only where a CUDA build's modules name no CUDA
    (then that nvcc is the build's)."""
    from hpcprov.site.cuda_arch import needs_nvcc_probe, probe_nvcc

    return probe_nvcc() if needs_nvcc_probe(site) else None


def plan_setup(o: SetupOptions) -> PlannedSetup:
    """Load the site, apply --env/--container, plan and lint; errors raise (one line)."""
    site = with_overrides(load(o.site), env_name=o.env_name, container=o.container)
    plan = build_plan(site, prefix=_absolute(o.prefix), runs_on=o.runs_on)
    findings = lint_plan(plan, site, _nvcc_at_hand(site))
    if any(f.level == "error" for f in findings):
        raise LintFailed(findings)
    if o.until is not None and o.until not in [st.id for st in plan.steps]:
        raise UsageError(f"--until {o.until!r}: no such step (steps: "
                         f"{' '.join(st.id for st in plan.steps)})")
    return PlannedSetup(o, site, plan, [f for f in findings if f.level != "error"])


def run_setup(planned: PlannedSetup, reporter: Reporter | None = None,
              verbose: bool = False, quiet: bool = True) -> SetupResult:
    """Run the plan step by step (journal, lock, resume), write the manifest, and remember
    a finished request for the fast "nothing to do" answer. Raises SetupFailed."""
    from hpcprov.provision.manifest import build_manifest, write_manifest
    from hpcprov.provision.progress import make_reporter
    from hpcprov.provision.quick import remember
    from hpcprov.provision.runner import Runner

    o, site = planned.options, planned.site
    profile = str(find_profile(o.site or default_site()))

    def manifest(prefix: Path, journal: Any) -> None:
        write_manifest(build_manifest(site, profile, prefix, journal), prefix)

    reporter = reporter or make_reporter(verbose=verbose, quiet=quiet)
    runner = Runner(planned.plan, reporter, manifest_writer=manifest,
                    prefix_path=planned.target)
    try:
        result = runner.run(until=o.until, redo=o.redo)
    finally:
        reporter.close()
    request = quick_request(o)
    if request and result.status in ("ready", "nothing-to-do"):
        remember(request, planned.target)
    return result


@dataclass(frozen=True)
class DoctorReport:
    """What `hpcprov doctor` found for a prefix."""

    prefix: Path
    checks: list[Check]

    @property
    def ok(self) -> bool:
        return not [c for c in self.checks if c.status == "fail"]


def doctor(site: str | None = None, prefix: str | None = None,
           partition: str | None = None) -> DoctorReport:
    """Check a provisioned environment against its manifest (or say why it is not ready)."""
    from hpcprov.provision.doctor import judge, not_ready, probe
    from hpcprov.provision.journal import Journal
    from hpcprov.provision.manifest import read_manifest

    target = Path(expand_prefix(prefix if prefix is not None else load(site).prefix()))
    manifest = read_manifest(target)  # typed; a malformed one is a one-line error
    if manifest is None:
        rerun = f"hpcprov setup --site {site or default_site()} --prefix {target}"
        journal = Journal.load(target / ".hpcprov" / "journal.json")
        steps = {k: {"status": v.status, "log": v.log} for k, v in journal.steps.items()}
        return DoctorReport(target, [not_ready(target, steps, rerun)])
    rerun = f"hpcprov setup --site {manifest.profile or manifest.site} --prefix {target}"
    _trusted_env(target, "doctor's probe (it sources activate)")
    return DoctorReport(target, judge(manifest, probe(manifest, target),
                                      _gpus_expected(manifest, partition), rerun))


def _trusted_env(prefix: Path, runs: str) -> None:
    """Refuse, in one line, a prefix someone else could change (fsutil.others_can_change):
    nothing is run from it (doctor sources its activate)."""
    from hpcprov.core import fsutil

    why = fsutil.others_can_change(prefix)
    if why is not None:
        raise HpcprovError(fsutil.untrusted_env(prefix, why, runs))


def _gpus_expected(manifest: Manifest, partition: str | None) -> int | None:
    """GPUs a node of the partition should show (inside a job: its partition)."""
    partition = partition or os.environ.get("SLURM_JOB_PARTITION")
    return manifest.gpus_of(partition) if partition else None
