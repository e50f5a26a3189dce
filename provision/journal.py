"""The journal of a prefix: which steps of which plan finished, when, and how long they took.

Stored as PREFIX/.hpcprov/journal.json and rewritten atomically after every change, so a
crash at any moment leaves either the old or the new journal, never half of one.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Literal

from hpcprov.core import fsutil

MAX_JOURNAL_BYTES = 4 << 20  # a journal of every step: a few kB

Status = Literal["running", "done", "failed", "interrupted"]


@dataclass
class StepRecord:
    status: Status
    fingerprint: str
    started: float
    seconds: float = 0.0
    exit_code: int | None = None
    log: str = ""


@dataclass
class Journal:
    path: Path
    site: str = ""
    steps: dict[str, StepRecord] = field(default_factory=dict)

    @classmethod
    def load(cls, path: Path) -> Journal:
        """The journal at path; an empty one when it is missing or unreadable."""
        try:  # a regular file of bounded size: a FIFO or /dev/zero there is no journal
            data = json.loads(fsutil.read_regular(path, MAX_JOURNAL_BYTES).decode("utf-8"))
            records = data.get("steps", {}) if isinstance(data, dict) else None
            if not isinstance(records, dict):
                return cls(path)  # not a journal hpcprov wrote: start over
            steps = {k: StepRecord(**v) for k, v in records.items() if isinstance(v, dict)}
            return cls(path, str(data.get("site", "")), steps)
        except (OSError, ValueError, TypeError):
            return cls(path)

    def save(self) -> None:
        data = {"site": self.site, "steps": {k: asdict(v) for k, v in self.steps.items()}}
        fsutil.atomic_write(self.path, json.dumps(data, indent=2) + "\n", private=False)

    def done(self, step_id: str, fingerprint: str) -> bool:
        rec = self.steps.get(step_id)
        return rec is not None and rec.status == "done" and rec.fingerprint == fingerprint

    def pending(self, fingerprints: dict[str, str]) -> list[str]:
        """Steps to run: from the first one not done with its current fingerprint, on."""
        ids = list(fingerprints)
        for i, step_id in enumerate(ids):
            if not self.done(step_id, fingerprints[step_id]):
                return ids[i:]
        return []
