"""What lint reports: a finding (error or warning, with its fix) and the error it raises."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Literal

from hpcprov.core.errors import HpcprovError

Level = Literal["error", "warning"]


@dataclass(frozen=True)
class Finding:
    level: Level
    code: str
    message: str
    fix: str

    def __str__(self) -> str:
        return f"[{self.code}] {self.message} (fix: {self.fix})"

    def to_json(self) -> dict[str, str]:
        return asdict(self)


class LintFailed(HpcprovError):
    """Raised when lint found errors; ``str()`` lists them one per line."""

    def __init__(self, findings: list[Finding]) -> None:
        self.findings = findings
        errors = [f for f in findings if f.level == "error"]
        super().__init__("\n".join(str(f) for f in errors))
