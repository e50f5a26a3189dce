"""`hpcprov site draft` as a Python function, with typed options and a typed result.

    from hpcprov.draft.api import DraftOptions, draft
    result = draft(DraftOptions(name="mycluster"))
    print(result.text)                   # the drafted profile (YAML with comments)
    result = draft(DraftOptions(diff="neuron"))
    for d in result.differences: print(d.text())

The options are checked first (a conflict is a one-line UsageError, before any command
runs); then the read-only discovery commands run (:mod:`hpcprov.draft.run`, the effects),
and the draft or the comparison is planned from what they said.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from hpcprov.core.errors import UsageError
from hpcprov.core.fsutil import write_output

if TYPE_CHECKING:
    from hpcprov.draft.diff import Difference
    from hpcprov.draft.plan import Findings


@dataclass(frozen=True)
class DraftOptions:
    """What `hpcprov site draft` takes (the CLI's flags, by name)."""

    scheduler: str | None = None  # None: the first registered one whose marker is on PATH
    output: str | None = None  # write the draft here (else: the result's text only)
    force: bool = False  # overwrite ``output``
    diff: str | None = None  # compare this profile (name or path) with the cluster instead
    name: str | None = None  # the drafted site's name
    timeout: float = 60  # seconds per command
    json: bool = False  # the caller wants JSON (only a comparison has a JSON form)


@dataclass(frozen=True)
class DraftResult:
    """A drafted profile, or how a profile differs from the cluster (with ``diff``)."""

    findings: Findings
    text: str | None = None  # the draft (None for a comparison)
    written: str | None = None  # where the draft was written
    profile: str | None = None  # the compared profile (as given), and its site's name
    site: str | None = None
    differences: list[Difference] = field(default_factory=list)

    @property
    def warnings(self) -> list[str]:
        """A command that failed for another reason than being absent; another scheduler's
        commands on PATH beside the one drafted."""
        also = self.findings.also_on_path
        return [*([also] if also else []),
                *(r.problem for r in self.findings.ran if r.problem and r.returncode != 127)]

    def to_json(self) -> dict[str, object]:
        return {"profile": self.profile, "site": self.site,
                "differences": [d.to_json() for d in self.differences]}


def check_options(o: DraftOptions) -> None:
    """Refuse conflicting options (before anything runs)."""
    if o.output and o.diff:
        raise UsageError("--diff compares and writes nothing: drop --output")
    if o.json and not o.diff:
        raise UsageError("--json goes with --diff (the draft itself is YAML with comments)")
    if o.output and Path(o.output).exists() and not o.force:
        raise UsageError(f"{o.output} exists; pass --force to overwrite it")


def draft(o: DraftOptions) -> DraftResult:
    """Draft a profile from the cluster this host belongs to, or compare one with it."""
    from hpcprov.draft.run import discover
    from hpcprov.schedulers import drafting

    check_options(o)
    scheduler = o.scheduler
    site = None
    if o.diff:
        from hpcprov.site.catalog import load

        site = load(o.diff)
        if scheduler is None:
            scheduler = site.scheduler.value
            if scheduler not in [b.name for b in drafting()]:
                raise UsageError(f"{o.diff} has no scheduler to ask (scheduler: {scheduler})")
    findings = discover(scheduler, timeout=o.timeout)
    if site is not None:
        from hpcprov.draft.diff import compare

        return DraftResult(findings, profile=o.diff, site=site.name,
                           differences=compare(site, findings))
    from hpcprov.draft.profile import draft_text

    text = draft_text(findings, o.name)
    if o.output:
        write_output(o.output, text)
    return DraftResult(findings, text=text, written=o.output)
