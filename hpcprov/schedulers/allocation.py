"""Every job of a run as a step of one allocation: one wait in the queue, not one per job.

After maintenance, with the queue full, a validation of eight jobs submitted one after
another waits in the queue eight times. Here one job holds the nodes for the whole run: its
script (:func:`pilot_lines`, the bash of allocation_pilot.sh) starts every step file the
harness drops into a queue folder, in the background, and ends when told (an ``END`` file),
after a quiet spell, or at its time limit. A step is a job's own generated script run with
the variables its scheduler's executor gives (:meth:`Steps.env`), so that its launchers see
only its nodes and tasks; its EXIT trap writes the status file as in a job of its own. The
harness's view does not change: a Handle per job, the shared wait(), timeouts, cancellation
and node faults.

Only executors whose jobs can run other jobs' launches as steps offer this (their
``steps``, a :class:`Steps`); the others keep a job per check.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import hostlist

from hpcprov.core.fsutil import atomic_write, write_code
from hpcprov.core.shell import NO_WRITE_FOR_OTHERS, assign, fragment, join, quote
from hpcprov.schedulers.base import (
    Executor,
    Handle,
    Placement,
    Steps,
    final_state,
    interrupted,
    read_exit,
)

IDLE_S = 300  # a pilot with no step to run for this long ends (its harness is gone)
PILOT = Path(__file__).with_name("allocation_pilot.sh")  # the pilot's bash, a file


def pilot_lines(queue: str, nodes_command: str, idle_s: int = IDLE_S) -> list[str]:
    """The allocation's script body: write its nodes to QUEUE/nodes, then start each step
    file (QUEUE/N.step) in a session of its own, stop a step on QUEUE/N.cancel, end on
    QUEUE/END (after its steps) or when no step ran for ``idle_s`` seconds.

    The pilot is the shell file allocation_pilot.sh (shellchecked as a file), carried
    verbatim after its header; the lines before it set its variables, quoted, and define
    the function that prints the nodes (``nodes_command``: :meth:`Steps.nodes`)."""
    return [NO_WRITE_FOR_OTHERS, assign("q", queue), assign("idle_s", str(int(idle_s))),
            "hpcprov_allocation_nodes() {", f"  {nodes_command}", "}",
            *fragment(PILOT)]


class OneAllocation(Executor):
    """Runs the jobs it is given as steps of one allocation, submitted (through ``inner``,
    whose ``steps`` say how its jobs run as steps) with the first job; a new one if the
    allocation ended (a node failed) before the run. ``script``: the allocation's script."""

    def __init__(self, inner: Executor, folder: Path, script: Callable[[Path], str]) -> None:
        if inner.steps is None:
            raise ValueError(f"{inner.name} jobs cannot run other jobs as steps of one "
                             "allocation")
        super().__init__(inner.env)
        self.inner, self.folder, self.script = inner, folder, script
        self.inner_steps: Steps = inner.steps
        self.name = inner.name
        self.events = inner.events         # one record of submissions and states
        self.allocations: list[Handle] = []
        self.nodes: list[str] | None = None
        self._waiting: list[tuple[Handle, Placement | None, Path]] = []
        self._step_files: dict[str, Path] = {}   # job id -> its step's queue path (no suffix)
        self._seq = 0
        self.queue = folder

    # ---- the allocation ----------------------------------------------------------------
    def _allocate(self) -> Handle:
        self.nodes = None
        self.queue = self.folder / f"allocation-{len(self.allocations) + 1}"
        script = self.queue / "allocation.sh"  # the pilot: code, by the one rule
        write_code(script, self.script(self.queue), what="the allocation's pilot",
                   runs="the allocation")
        handle = self.inner.submit(script, self.queue / "allocation.out",
                                   self.queue / "allocation.exit")
        self.allocations.append(handle)
        return handle

    def pace(self) -> float:
        return self.inner.pace()  # its scheduler is the inner executor's

    @property
    def current(self) -> Handle | None:
        return self.allocations[-1] if self.allocations else None

    def _read_nodes(self) -> None:
        """The nodes the pilot wrote (QUEUE/nodes), once it has: a regular file of at most
        4 MiB (node names, one a line); a FIFO there is never waited on, /dev/zero never
        read: either is nodes not known yet."""
        from hpcprov.core.fsutil import read_regular

        if self.nodes is None:
            try:
                text = read_regular(self.queue / "nodes", 4 << 20, follow=False,
                                    owned_only=True).decode(errors="replace")
            except OSError:
                return
            self.nodes = [n for n in text.split() if n]

    # ---- steps -------------------------------------------------------------------------
    def submit(self, script: Path, output: Path, exit_file: Path,
               place: Placement | None = None) -> Handle:
        alloc = self.current
        if alloc is None or alloc.done:
            alloc = self._allocate()
        self._seq += 1
        h = Handle(f"{alloc.job_id}.{self._seq}", script, output, exit_file, time.monotonic())
        self._waiting.append((h, place, self.queue / f"{self._seq:04d}"))
        self._event(h, f"queued in allocation {alloc.job_id}")
        return h

    def _start(self, h: Handle, place: Placement | None, base: Path) -> None:
        """Write the step file (atomically: the pilot sees it whole or not at all)."""
        assert self.nodes is not None
        if place is None:
            place = Placement(len(self.nodes), 1)
        nodes = list(place.nodes) or self.nodes[place.first:place.first + place.count]
        missing = [n for n in nodes if n not in self.nodes]
        if missing or len(nodes) < place.count:
            h.state, h.ended = "NOT_IN_ALLOCATION", time.monotonic()
            h.reason = (f"needs {', '.join(missing) or f'{place.count} node(s)'}, the "
                        f"allocation has {', '.join(self.nodes)}")
            self._event(h, h.reason)
            return
        fixed = replace(place, count=len(nodes), nodes=tuple(nodes), first=0)
        env, hosts = self.inner_steps.env(fixed, base.with_suffix(".hosts"))
        if hosts is not None:
            atomic_write(base.with_suffix(".hosts"), hosts)
        body = [NO_WRITE_FOR_OTHERS, *(join(["unset", k]) if v is None else
                                       f"export {assign(k, v)}" for k, v in env.items())]
        body.append(join(["exec", "bash", str(h.script)]) + f" > {quote(str(h.output))} 2>&1")
        write_code(base.with_suffix(".step"), "\n".join(body) + "\n",
                   what="the allocation's steps", runs="the allocation")
        self._step_files[h.job_id] = base
        h.state, h.started, h.nodes = "RUNNING", time.monotonic(), \
            hostlist.collect_hostlist(nodes)
        self._event(h, "started as a step")

    def refresh(self, handles: list[Handle]) -> None:
        alloc = self.current
        if alloc is None:
            return
        if not alloc.done:  # the scheduler's traffic: the inner executor's pace
            self.inner.query([alloc], force=alloc.exit_file.exists())
        if alloc.done:
            for h in handles:
                if not h.done:
                    self._ended_with(h, alloc)
            self._waiting = []
            return
        self._read_nodes()
        if self.nodes is not None:
            for h, place, base in self._waiting:
                self._start(h, place, base)
            self._waiting = []
        for h in handles:
            if not h.done and h.job_id in self._step_files:
                code = read_exit(h.exit_file)
                if code is not None:
                    h.exit_code, h.state, h.ended = code, final_state(code), time.monotonic()

    def _ended_with(self, h: Handle, alloc: Handle) -> None:
        """The allocation ended under a step: the step ends with it. When the allocation
        failed (a node died, it was cancelled or ran out of time) so did the step, whatever
        status its trap wrote as it was killed (a killed srun may leave 0 there)."""
        code = read_exit(h.exit_file) if h.job_id in self._step_files else None
        if code is not None and alloc.state == "COMPLETED":
            h.exit_code, h.state = code, final_state(code)
        else:
            h.state = alloc.state if alloc.state != "COMPLETED" else "FAILED"
            h.reason = (f"allocation {alloc.job_id} ended ({alloc.state}"
                        + (f": {alloc.reason}" if alloc.reason else "") + ")")
            h.bad_nodes = alloc.bad_nodes
        h.ended = time.monotonic()

    def cancel(self, handle: Handle) -> None:
        self._waiting = [w for w in self._waiting if w[0] is not handle]
        base = self._step_files.get(handle.job_id)
        if base is not None:
            atomic_write(base.with_suffix(".cancel"), "")

    def usable_nodes(self, partition: str, picks: dict[str, str | None] | None = None
                     ) -> list[str] | None:
        return self.inner.usable_nodes(partition, picks)

    def close(self, grace_s: float = 60) -> None:
        """Tell the allocation to end (after its steps); cancel it if it does not."""
        alloc = self.current
        if alloc is None or alloc.done:
            return
        if alloc.started is None:  # still waiting in the queue: nothing to finish
            self.inner.cancel(alloc)
            alloc.state, alloc.ended = "CANCELLED", time.monotonic()
            self._event(alloc, "cancelled: the run ended before the allocation started")
            return
        atomic_write(self.queue / "END", "")
        self.inner.wait([alloc], grace_s)

    def abort(self, handles: list[Handle]) -> list[str]:
        """Cancel the allocation at once (its running steps end with it), not after its
        steps: the run was interrupted."""
        self._waiting = []
        steps = [h.job_id for h in handles if not h.done]
        for h in handles:
            if not h.done:
                interrupted(h)
        alloc = self.current
        if alloc is None or alloc.done:
            return []
        self.inner.cancel(alloc)
        alloc.state, alloc.ended = "CANCELLED", time.monotonic()
        self._event(alloc, "cancelled: the run was interrupted")
        return [f"allocation {alloc.job_id}"
                + (f" (steps {', '.join(steps)})" if steps else "")]
