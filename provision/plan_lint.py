"""Lint a setup plan before it runs: steps that need the internet where there is none, and
the Horovod x framework combinations the compatibility table knows to be bad or risky."""

from __future__ import annotations

from typing import TYPE_CHECKING

from hpcprov.core.findings import Finding
from hpcprov.provision.compat import for_site
from hpcprov.provision.horovod import gpu_vendor
from hpcprov.site.cuda_arch import CudaTargets, cc_list, cuda_findings
from hpcprov.site.gpu_vendors import DEFAULT_VENDOR, VENDORS

if TYPE_CHECKING:
    from hpcprov.provision.plan import Plan
    from hpcprov.site.types import Site


def lint_plan(plan: Plan, site: Site, nvcc: CudaTargets | None = None) -> list[Finding]:
    """Problems of a setup plan: steps that need the internet where there is none, the
    Horovod x framework combinations the compatibility table knows to be bad (errors) or
    to have caveats (warnings), and GPUs the build's CUDA cannot target (errors; ``nvcc``:
    what the nvcc at hand targets, where the build modules name no CUDA)."""
    findings = []
    for match in for_site(site):
        if match.rule.verdict == "bad":
            findings.append(Finding("error", f"compat-{match.rule.id}", match.message(),
                                    "change horovod.version or the framework versions in "
                                    "the profile (see docs/compatibility.md)"))
        elif match.rule.verdict == "caveat":
            findings.append(Finding("warning", f"compat-{match.rule.id}", match.message(),
                                    "see docs/compatibility.md"))
    findings += _cuda_arch(site)
    findings += [Finding("error", "cuda-target", problem, fix)
                 for _, problem, fix in cuda_findings(site, nvcc, this_build=True)]
    # a proxy the profile names is how its compute nodes reach the internet (setup exports it
    # where its scope says it works)
    proxy = site.policies.proxy
    works = proxy is not None and proxy.scope in ("compute", "both")
    if plan.runs_on != "compute" or site.policies.compute_internet or works:
        return findings
    return findings + [
        Finding("error", "no-internet",
                f"step {step.id} needs the internet, but compute nodes of {site.name} have none",
                "run setup on a login node (--on login), or point the profile at a local "
                "installer/wheelhouse")
        for step in plan.steps if step.needs_network
    ]


def _cuda_arch(site: Site) -> list[Finding]:
    """A GPU build for a model whose compute capability hpcprov does not know."""
    if not (site.horovod.gpu_operations or site.horovod.gpu_allreduce):
        return []
    if not VENDORS[gpu_vendor(site) or DEFAULT_VENDOR].cuda_arches:  # e.g. ROCm builds
        return []
    _, unknown = cc_list(site)
    if not unknown:
        return []
    return [Finding("warning", "cuda-arch",
                    f"no compute capability known for GPU model(s) {', '.join(unknown)}: "
                    "Horovod's kernels are built for every architecture nvcc knows (slow)",
                    "set horovod.env.HOROVOD_BUILD_CUDA_CC_LIST (e.g. '80,90') in the profile")]
