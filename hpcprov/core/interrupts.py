"""The signals that end a long run (Ctrl-C's SIGINT, a batch system's or a user's SIGTERM, a
closed terminal's SIGHUP) as one exception, so that what the run started can be cancelled
before hpcprov exits.

Inside :func:`cancelling`, the first of these signals raises :class:`Interrupted` in the
main thread; every later one is noted and ignored, so a second Ctrl-C cannot cut the
cancelling short and leave jobs running. :meth:`Guard.held` defers the first one over a
few lines that must not be cut in two (a submission and the bookkeeping of its job id).
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

from hpcprov.core.errors import HpcprovError

SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class Interrupted(HpcprovError):
    """A run ended by a signal: exit status 128 + the signal's number, as shells report."""

    def __init__(self, signum: int, what: str = "") -> None:
        self.signum = signum
        self.exit_code = 128 + signum
        name = signal.Signals(signum).name
        super().__init__(f"interrupted by {name}" + (f": {what}" if what else ""))


class Guard:
    """The state of one :func:`cancelling` block."""

    def __init__(self) -> None:
        self.fired: int | None = None   # the first signal, once it was raised or deferred
        self._holding = 0
        self._pending: int | None = None

    def _handler(self, signum: int, frame: FrameType | None) -> None:
        if self.fired is not None:
            return  # cancelling already: a second Ctrl-C must not cut it short
        self.fired = signum
        if self._holding:
            self._pending = signum
            return
        raise Interrupted(signum)

    @contextmanager
    def held(self) -> Iterator[None]:
        """Defer a signal that arrives inside until the block ends, however it ends: then it
        is raised. A block that fails (a submission the scheduler refused) does not swallow
        it: the signal replaces the block's own error (chained to it), so the run still ends
        and cancels what it started instead of going on with every later signal ignored."""
        self._holding += 1
        try:
            yield
        finally:
            self._holding -= 1
            if not self._holding and self._pending is not None:
                signum, self._pending = self._pending, None
                raise Interrupted(signum)  # the deferred signal wins


@contextmanager
def cancelling() -> Iterator[Guard]:
    """SIGINT, SIGTERM and SIGHUP raise :class:`Interrupted` (once) inside the block; the
    handlers before it come back after. Outside the main thread (where Python cannot take
    signals) the block runs unchanged."""
    guard = Guard()
    if threading.current_thread() is not threading.main_thread():
        yield guard
        return
    before = {s: signal.getsignal(s) for s in SIGNALS}
    for s in SIGNALS:
        signal.signal(s, guard._handler)
    try:
        yield guard
    finally:
        for s, handler in before.items():
            signal.signal(s, handler)
