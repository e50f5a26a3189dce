"""Progress of `hpcprov setup`: a live line on a terminal (rich), plain lines elsewhere."""

from __future__ import annotations

import sys
from typing import IO, TYPE_CHECKING, Protocol

from hpcprov.provision.plan import Step

if TYPE_CHECKING:
    from rich.progress import TaskID


class Reporter(Protocol):
    def begin(self, index: int, total: int, step: Step) -> None: ...
    def line(self, text: str) -> None: ...
    def end(self, step: Step, seconds: float, ok: bool) -> None: ...
    def note(self, text: str) -> None: ...
    def close(self) -> None: ...


def _fmt(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.1f}s"
    return f"{int(seconds // 60)}m{int(seconds % 60):02d}s"


class PlainReporter:
    """One line per step start and end; with verbose, every line of the steps' output."""

    def __init__(self, stream: IO[str] | None = None, verbose: bool = False) -> None:
        self.stream = stream or sys.stderr
        self.verbose = verbose

    def _print(self, text: str) -> None:
        print(text, file=self.stream, flush=True)

    def begin(self, index: int, total: int, step: Step) -> None:
        self._print(f"[{index}/{total}] {step.title} ({step.id}) ...")

    def line(self, text: str) -> None:
        if self.verbose or text.startswith("hpcprov: "):
            self._print("    " + text)

    def end(self, step: Step, seconds: float, ok: bool) -> None:
        self._print(f"    {'done' if ok else 'FAILED'} in {_fmt(seconds)}")

    def note(self, text: str) -> None:
        self._print(text)

    def close(self) -> None:
        pass


class QuietReporter(PlainReporter):
    """Prints nothing (for --json)."""

    def _print(self, text: str) -> None:
        pass


class LiveReporter:
    """A spinner with the step, its elapsed time and the last line of its output."""

    def __init__(self) -> None:
        from rich.console import Console
        from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

        self.console = Console(stderr=True)
        self.progress = Progress(
            SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(),
            TextColumn("[dim]{task.fields[last]}", markup=True),
            console=self.console, transient=True,
        )
        self.task: TaskID | None = None
        self.label = ""
        self.progress.start()

    def begin(self, index: int, total: int, step: Step) -> None:
        self.label = f"[{index}/{total}] {step.title}"
        self.task = self.progress.add_task(self.label, last="")

    def line(self, text: str) -> None:
        from rich.markup import escape

        if self.task is not None:
            width = max(20, self.console.width - len(self.label) - 20)
            self.progress.update(self.task, last=escape(text.strip()[:width]))
        if text.startswith("hpcprov: "):
            self.progress.console.print("    " + escape(text), highlight=False)

    def end(self, step: Step, seconds: float, ok: bool) -> None:
        from rich.markup import escape

        if self.task is not None:
            self.progress.remove_task(self.task)
            self.task = None
        mark = "[green]done[/]" if ok else "[red]FAILED[/]"
        self.progress.console.print(f"{escape(self.label)}  {mark} in {_fmt(seconds)}",
                                    highlight=False)

    def note(self, text: str) -> None:
        from rich.markup import escape

        self.progress.console.print(escape(text), highlight=False)

    def close(self) -> None:
        self.progress.stop()


def make_reporter(verbose: bool = False, quiet: bool = False) -> Reporter:
    if quiet:
        return QuietReporter()
    if sys.stderr.isatty() and not verbose:
        return LiveReporter()
    return PlainReporter(verbose=verbose)
