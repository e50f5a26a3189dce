"""How soon the shared poll loop (Executor.wait) notices a job's end: the scheduler is asked
within 20 ms of the job script's status file appearing, however long the delay between
queries had grown; without a status file the delay grows to 0.5 s as before. A fake clock:
nothing here sleeps."""

from __future__ import annotations

from pathlib import Path

import pytest

from hpcprov.schedulers import base
from hpcprov.schedulers.base import Executor, Handle


class Clock:
    def __init__(self) -> None:
        self.now = 0.0
        self.events: list[tuple[float, Path]] = []  # (when, file to create then)

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds
        for when, path in self.events:
            if self.now >= when and not path.exists():
                path.write_text("0 1 2\n")


class Recorder(Executor):
    """Ends a job on the first query after its status file exists."""

    def __init__(self, clock: Clock) -> None:
        super().__init__()
        self.clock, self.queries = clock, []

    def refresh(self, handles: list[Handle]) -> None:
        self.queries.append(self.clock.now)
        for h in handles:
            if h.exit_file.exists():
                h.state, h.exit_code, h.ended = "COMPLETED", 0, self.clock.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    c = Clock()
    monkeypatch.setattr(base.time, "monotonic", c.monotonic)
    monkeypatch.setattr(base.time, "sleep", c.sleep)
    return c


def _handle(tmp_path: Path, name: str) -> Handle:
    return Handle(job_id=name, script=tmp_path / f"{name}.sh", output=tmp_path / f"{name}.out",
                  exit_file=tmp_path / f"{name}.exit", submitted=0.0)


def test_a_job_ending_late_is_asked_after_within_20_ms(clock: Clock, tmp_path: Path) -> None:
    h = _handle(tmp_path, "1")
    clock.events.append((30.0, h.exit_file))  # after many polls: the delay is 0.5 s by then
    ex = Recorder(clock)
    ex.wait([h], timeout_s=600)
    assert h.done and h.exit_code == 0
    gaps = [b - a for a, b in zip(ex.queries, ex.queries[1:], strict=False)]
    assert max(gaps) == pytest.approx(0.5)  # the delay had grown
    assert ex.queries[-1] - 30.0 <= 0.02 + 1e-9  # asked right after the file appeared


def test_the_delay_starts_over_for_each_job_that_ends(clock: Clock, tmp_path: Path) -> None:
    a, b = _handle(tmp_path, "a"), _handle(tmp_path, "b")
    clock.events += [(10.0, a.exit_file), (20.0, b.exit_file)]
    ex = Recorder(clock)
    ex.wait([a, b], timeout_s=600)
    assert a.ended is not None and a.ended - 10.0 <= 0.02 + 1e-9
    assert b.ended is not None and b.ended - 20.0 <= 0.02 + 1e-9
