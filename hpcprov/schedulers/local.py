"""No scheduler (``scheduler: none``): one machine, jobs are local ``bash`` processes."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from pathlib import Path

from hpcprov.core.findings import Finding
from hpcprov.request.job import JobRequest
from hpcprov.schedulers.base import Backend, Executor, Handle, Placement, final_state
from hpcprov.site.sections import Section


class Local(Backend[Section]):  # (no profile section)
    name = "none"
    title = "no scheduler"
    max_nodes = 1

    def lint(self, req: JobRequest) -> list[Finding]:
        """More than one node is refused (one host runs the job: every "node" would be this
        one); what only a scheduler reads (job options, walltime, job name) is said to be
        dropped, never dropped in silence."""
        if req.nodes > 1:
            return [Finding("error", "nodes-local",
                            f"site {req.site.name} has no scheduler hpcprov knows (scheduler: "
                            f"none): a job runs on this one host, so {req.nodes} nodes cannot "
                            "be planned", "use --nodes 1, or set the site's scheduler")]
        given = [what for what, value in (("job options (-o)", req.options),
                                          ("--time", req.time), ("--job-name", req.job_name))
                 if value]
        if given:
            return [Finding("warning", "no-scheduler",
                            f"site {req.site.name} has no scheduler (scheduler: none), so "
                            f"nothing applies {', '.join(given)}",
                            "drop them, or set the site's scheduler")]
        return []

    def executor(self, env: dict[str, str] | None = None) -> Executor:
        return LocalExecutor(env)


BACKEND = Local()


def _new_private_output(path: str, flags: int) -> int:
    """``open``'s opener for a job's output: a new file (``O_EXCL``), never a link planted at
    its name (``O_NOFOLLOW``), mode 0644 whatever the umask."""
    from hpcprov.core.fsutil import open_nofollow

    fd = open_nofollow(Path(path), flags | os.O_EXCL, 0o644)
    os.fchmod(fd, 0o644)
    return fd


class LocalExecutor(Executor):
    """Jobs as local processes in their own session (killed as a group on cancel)."""

    name = "local"

    def submit(self, script: Path, output: Path, exit_file: Path,
               place: Placement | None = None) -> Handle:
        env = dict(self.env or os.environ)
        if os.geteuid() == 0:  # Open MPI refuses root unless told (mpirun launchers)
            env.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
            env.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        # the output is made anew, never through a link planted at its name, and with no
        # write for group or others whatever the umask: it is read back as the job's truth
        output.unlink(missing_ok=True)
        with open(output, "wb", opener=_new_private_output) as out:
            proc = subprocess.Popen(["bash", str(script)], stdout=out, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, start_new_session=True, env=env,
                                    cwd=script.parent)
        h = Handle(str(proc.pid), script, output, exit_file, time.monotonic(), "RUNNING",
                   nodes=os.uname().nodename, proc=proc)
        h.started = h.submitted
        self._event(h, "started")
        return h

    def refresh(self, handles: list[Handle]) -> None:
        for h in handles:
            rc = h.proc.poll() if h.proc is not None else None
            if rc is not None:
                rc = 128 - rc if rc < 0 else rc  # killed by signal N: 128 + N, as shells say
                h.exit_code, h.ended = rc, time.monotonic()
                h.state = final_state(rc)

    def cancel(self, handle: Handle) -> None:
        if handle.proc is not None and handle.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(handle.proc.pid, signal.SIGKILL)
            handle.proc.wait()
