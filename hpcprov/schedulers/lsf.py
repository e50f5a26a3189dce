"""IBM Spectrum LSF: ``#BSUB`` directives, ``bsub -Is``, ``$LSB_DJOB_HOSTFILE``, and
bsub/bjobs/bkill.

Generated from IBM's LSF 10.1 command reference (bsub, bjobs -o, bkill, blaunch) and
verified against tests/lsf_emulator.py, not against a real LSF cluster (none can run here).

* Job options use hpcprov's generic (Slurm-style) names; those with an LSF spelling are
  translated (``job-name`` -J, ``account`` -P, ``partition``/``queue`` -q, ``time`` -W in
  minutes, ``ntasks`` -n, ``nodes`` -nnodes, ``resource`` -R, ``exclusive`` -x ...); any
  other name is passed as ``-NAME VALUE`` (e.g. ``-o alloc_flags=smt4``).
* ``task_request: slots`` asks for ``-n TOTAL -R "span[ptile=PER_NODE]"``; ``nnodes``
  asks for whole nodes (``-nnodes N``) as IBM CSM/jsrun systems want.
* ``$LSB_DJOB_HOSTFILE`` lists one line per slot. On CSM systems its first line is the
  launch (batch) node, which runs no ranks: ``launch_node_in_hostfile: true`` skips it.
* A job script is submitted as ``bsub < SCRIPT``: bsub reads ``#BSUB`` lines from stdin.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import TYPE_CHECKING

from hpcprov.core.errors import HpcprovError, UsageError
from hpcprov.core.findings import Finding
from hpcprov.core.shell import Raw, Template
from hpcprov.request.job import JobRequest
from hpcprov.request.options import Option
from hpcprov.schedulers.base import (
    Backend,
    Executor,
    Handle,
    PerNode,
    Placement,
    head_options,
    slots_list,
    with_overrides,
)
from hpcprov.schedulers.facts import (
    Cluster,
    Node,
    Queue,
    Run,
    as_int,
    optional,
    required,
    text_blocks,
    walltime_text,
)
from hpcprov.site.kinds import LauncherKind
from hpcprov.site.sections import settings_of

if TYPE_CHECKING:
    from hpcprov.core.yaml_writer import Block
from hpcprov.core.walltime import walltime_seconds

FLAGS = {
    "job-name": "-J", "account": "-P", "project": "-P", "partition": "-q", "queue": "-q",
    "output": "-o", "error": "-e", "time": "-W", "ntasks": "-n", "nodes": "-nnodes",
    "resource": "-R", "gpu": "-gpu", "exclusive": "-x", "mail-user": "-u",
}
_SAFE = re.compile(r"^[A-Za-z0-9_.,:=%+@/*-]+$")
_FINISHED = {"DONE", "EXIT"}
_RUNNING = {"RUN", "USUSP", "SSUSP"}


def minutes(walltime: str) -> str:
    """A [D-]HH:MM:SS limit as LSF's ``-W [HOURS:]MINUTES`` (rounded up to a minute)."""
    seconds = walltime_seconds(walltime)
    if seconds is None:
        raise UsageError(f"--time {walltime!r}: use HH:MM:SS or D-HH:MM:SS")
    total = math.ceil(seconds / 60)
    return f"{total // 60}:{total % 60:02d}"


def directive(name: str, value: str | None) -> str:
    """The text after ``#BSUB `` for one generic option (values with brackets or spaces,
    such as ``span[ptile=4]``, in double quotes as LSF's documentation writes them)."""
    flag = FLAGS.get(name, f"-{name}")
    if value is None:
        return flag
    if name == "time":
        value = minutes(value)
    if _SAFE.match(value):
        return f"{flag} {value}"
    if re.search(r'["$`\\]', value):
        raise UsageError(f"option {name}={value!r}: quotes, $, ` and \\ cannot be written "
                         "in a #BSUB line")
    return f'{flag} "{value}"'


def argv_words(name: str, value: str | None) -> list[str]:
    """One option as bsub command-line words (for ``bsub -Is``)."""
    flag = FLAGS.get(name, f"-{name}")
    if value is None:
        return [flag]
    return [flag, minutes(value) if name == "time" else value]


class Lsf(Backend):
    name = "lsf"
    title = "LSF"
    marker = "bqueues"
    settings = settings_of("lsf")
    # Horovod (0.28.1, runner/driver/driver_service.py) skips finding the hosts' network
    # interfaces when it sees LSF (LSB_JOBID) and its Gloo launcher then fails; under LSF
    # horovodrun starts ranks with jsrun (CSM systems) or mpirun instead
    horovodrun_gloo = False
    variable = re.compile(r"\$\{?LSB_[A-Z_]+")
    variable_example = "$LSB_DJOB_HOSTFILE"
    monitor = "bjobs"

    def _tasks(self, req: JobRequest) -> list[Option]:
        if self.section(req.site).task_request == "nnodes":
            return [("nodes", str(req.nodes))]
        per_node = req.scheduler_tasks_per_node
        return [("ntasks", str(per_node * req.nodes)), ("resource", f"span[ptile={per_node}]")]

    def options(self, req: JobRequest, *, batch: bool) -> list[Option]:
        conf = self.section(req.site)
        opts = head_options(req, batch=batch, queue="queue")
        opts += self._tasks(req)
        if req.gpus > 0 and conf.gpu_request == "gpu":
            opts.append(("gpu", f"num={req.gpus}"))
        if batch:
            opts.append(("output", conf.output))
            if conf.error:
                opts.append(("error", conf.error))
        return with_overrides(req, opts)

    def directives(self, req: JobRequest) -> list[str]:
        return ["#BSUB " + directive(n, v) for n, v in self.options(req, batch=True)]

    def prolog(self, req: JobRequest) -> list[str]:
        return ['cd "$LS_SUBCWD"']

    def submit_argv(self, script: str) -> list[str]:
        return ["bsub", Raw("<"), script]

    def allocate_argv(self, req: JobRequest) -> list[str]:
        words = [w for n, v in self.options(req, batch=False) for w in argv_words(n, v)]
        return ["bsub", "-Is", *words, self.shell(req)]

    def _hosts(self, req: JobRequest) -> str:
        """Shell text printing the job's hosts once each, in order."""
        skip = "NR > 1 && " if self.section(req.site).launch_node_in_hostfile else ""
        return f"awk '{skip}!seen[$0]++' \"$LSB_DJOB_HOSTFILE\""

    def first_node(self, req: JobRequest) -> str:
        """awk stops at the node itself (no pipe that a long host file could break)."""
        skip = "NR > 1 " if self.section(req.site).launch_node_in_hostfile else ""
        return Raw(f"\"$(awk '{skip}{{print; exit}}' \"$LSB_DJOB_HOSTFILE\")\"")

    def host_slots(self, req: JobRequest, slots: int, *, horovodrun: bool,
                   template: str | None) -> list[str]:
        if horovodrun or template or self.section(req.site).launch_node_in_hostfile:
            return ["-H", slots_list(self._hosts(req), slots, template)]
        return ["--hostfile", Template("$LSB_DJOB_HOSTFILE")]

    def job_id(self) -> str | None:
        return Raw('"$LSB_JOBID"')

    def per_node(self, req: JobRequest) -> PerNode:
        """``blaunch -u FILE`` runs the command once per line of FILE: the job's hosts."""
        setup = ['hpcprov_hosts="$(mktemp)"', f'{self._hosts(req)} > "$hpcprov_hosts"']
        return PerNode(["blaunch", "-u", Raw('"$hpcprov_hosts"')], setup)

    def pin(self, nodes: str) -> dict[str, str] | None:
        return {"m": " ".join(nodes.split(","))}

    def lint(self, req: JobRequest) -> list[Finding]:
        if req.launch.kind == LauncherKind.horovodrun and "--gloo" in req.launch.args:
            return [Finding("error", "lsf-horovod-gloo",
                            "horovodrun --gloo fails under LSF: Horovod skips finding the "
                            "hosts' network interfaces there",
                            f"drop --gloo from launcher {req.launcher_name} (horovodrun then "
                            "uses jsrun or mpirun), or use an mpirun launcher")]
        return []

    def executor(self, env: dict[str, str] | None = None) -> Executor:
        return LsfExecutor(env)

    # ---- `hpcprov site draft` (discovery: the end of this module) ----------------------
    def discover(self, run: Run) -> Cluster:
        return discover(run)

    def draft_launchers(self, cluster: Cluster) -> tuple[Block, str]:
        """mpirun (the default), horovodrun without --gloo, torchrun."""
        from hpcprov.core.yaml_writer import Block, plain

        b = Block()
        b.add("mpirun", plain(kind="mpirun", rendezvous_env=True))
        b.add("horovodrun", plain(kind="horovodrun"), notes=[
            "no --gloo: under LSF horovodrun starts ranks with jsrun or mpirun"])
        b.add("torchrun", plain(kind="torchrun"))
        return b, "mpirun"


BACKEND = Lsf()


def job_fields(line: str) -> dict[str, str]:
    """One ``bjobs -noheader -o "jobid stat exit_code exec_host delimiter='|'"`` line."""
    keys = ("jobid", "stat", "exit_code", "exec_host")
    values = line.strip().split("|")
    return dict(zip(keys, values, strict=True)) if len(values) == len(keys) else {}


def exec_hosts(text: str) -> str:
    """``4*hostA:4*hostB`` (bjobs EXEC_HOST) as ``hostA,hostB``."""
    hosts = [part.split("*", 1)[-1] for part in text.split(":") if part and part != "-"]
    return ",".join(dict.fromkeys(hosts))


class LsfExecutor(Executor):
    """bsub < SCRIPT, then ``bjobs -o``; the status file answers once LSF has cleaned the
    job from its memory (CLEAN_PERIOD, one hour by default)."""

    name = "lsf"
    FORMAT = "jobid stat exit_code exec_host delimiter='|'"

    def submit(self, script: Path, output: Path, exit_file: Path,
               place: Placement | None = None) -> Handle:
        proc = self._run("bsub", "-o", str(output), "-e", str(output), stdin=script)
        self._submitted(proc, "bsub", script)
        m = re.search(r"Job <(\d+)>", proc.stdout)
        if not m:
            raise HpcprovError(f"bsub gave no job id for {script.name}: {proc.stdout.strip()}")
        return self._accepted(m.group(1), script, output, exit_file)

    def refresh(self, handles: list[Handle]) -> None:
        for h in handles:
            proc = self._run("bjobs", "-noheader", "-o", self.FORMAT, h.job_id)
            info = job_fields(proc.stdout) if proc.returncode == 0 else {}
            state = info.get("stat", "")
            if info.get("exec_host", "-") not in ("", "-"):
                h.nodes = exec_hosts(info["exec_host"])
            if not info or state in _FINISHED:
                self._ended(h, info)
            elif state in _RUNNING:
                self._started(h)

    def _ended(self, h: Handle, info: dict[str, str]) -> None:
        code: int | None = None
        if info.get("stat") == "DONE":
            code = 0
        elif info.get("exit_code", "-").isdigit():
            code = int(info["exit_code"])
        self._finished(h, code, "", "LSF no longer knows the job and it left no status file")

    def cancel(self, handle: Handle) -> None:
        self._run("bkill", handle.job_id)


# ---- discovery for `hpcprov site draft` ----------------------------------------------
# Pure parsers of `bqueues -l` and `bhosts -l` (and `bhosts -l -gpu`, LSF 10.1), and
# discover(), which runs them through the draft's recording runner. Every command only reads.


QUEUES_CMD = ["bqueues", "-l"]
HOSTS_CMD = ["bhosts", "-l"]
GPUS_CMD = ["bhosts", "-l", "-gpu"]
_BLOCK_QUEUE = re.compile(r"^QUEUE:\s*(\S+)")
_BLOCK_HOST = re.compile(r"^HOST:?\s+(\S+)\s*$")


def _minutes(text: str) -> str | None:
    """``720.0 min`` (``of HOST_MODEL`` after it or not) as [D-]HH:MM:SS."""
    m = re.search(r"([\d.]+)\s*min", text)
    return walltime_text(str(round(float(m.group(1))))) if m else None


def _limit_below(lines: list[str], i: int, name: str) -> str | None:
    """The value under the column ``name`` of header line ``i`` (next non-empty line)."""
    col = lines[i].index(name)
    for value in lines[i + 1:]:
        if value.strip():
            return value[max(col - 2, 0):] if len(value) > col - 2 else None
    return None


def _run_limits(lines: list[str]) -> tuple[str | None, str | None]:
    """(maximum, default) RUNLIMIT of one queue: the default under ``DEFAULT LIMITS:``,
    the maximum under ``MAXIMUM LIMITS:`` or on its own (older LSF)."""
    limits: dict[str, str | None] = {"max": None, "default": None}
    section = "max"
    for i, line in enumerate(lines):
        if line.strip().startswith("DEFAULT LIMITS"):
            section = "default"
        elif line.strip().startswith("MAXIMUM LIMITS"):
            section = "max"
        elif re.search(r"\bRUNLIMIT\b", line) and not re.search(r"\d", line):
            value = _limit_below(lines, i, "RUNLIMIT")
            limits[section] = _minutes(value or "") or limits[section]
    return limits["max"], limits["default"]


def _hosts_line(lines: list[str]) -> list[str]:
    """The words of a queue's ``HOSTS:`` line (``all``, hosts, ``group/``, ``~host``)."""
    for line in lines:
        if line.startswith("HOSTS:"):
            return line.removeprefix("HOSTS:").split()
    return ["all"]


def parse_queues(text: str) -> list[Queue]:
    """``bqueues -l``: each queue's run limits, its hosts as written, and whether its
    description calls it the default queue (bqueues has no field for that)."""
    cmd = " ".join(QUEUES_CMD)
    out = []
    for name, lines in text_blocks(text, _BLOCK_QUEUE):
        desc = " ".join(ln.strip().removeprefix("--").strip() for ln in lines
                        if ln.strip().startswith("--"))
        status = next((lines[i + 1].split()[2] for i, ln in enumerate(lines[:-1])
                       if ln.startswith("PRIO") and len(lines[i + 1].split()) > 2), "")
        max_time, default_time = _run_limits(lines)
        q = Queue(name=name, state=status, max_time=max_time, default_time=default_time,
                  default="default queue" in desc.lower(),
                  sources={"max_time": cmd, "default_time": cmd,
                           "default": f"{cmd} (its description)"})
        q.notes.append("HOSTS: " + " ".join(_hosts_line(lines)))
        out.append(q)
    return out


def _row(lines: list[str], head: str) -> dict[str, str]:
    """The values under a header line that starts with ``head`` (column by column)."""
    for i, line in enumerate(lines[:-1]):
        if line.split()[:1] == [head]:
            return dict(zip(line.split(), lines[i + 1].split(), strict=False))
    return {}


def parse_hosts(text: str) -> dict[str, Node]:
    """``bhosts -l``: each host's status and job slots (MAX), taken as its cores."""
    out = {}
    for name, lines in text_blocks(text, _BLOCK_HOST):
        row = _row(lines, "STATUS")
        slots = as_int(row.get("MAX"))
        out[name] = Node(name=name, cpus=slots, cores=slots, state=row.get("STATUS", ""))
    return out


def parse_gpus(text: str) -> dict[str, tuple[int, str | None]]:
    """``bhosts -l -gpu``: host -> (GPUs, model) from NGPUS and the STATIC ATTRIBUTES
    table (model None where the GPUs differ)."""
    out = {}
    for name, lines in text_blocks(text, _BLOCK_HOST):
        count = as_int(_row(lines, "NGPUS").get("NGPUS")) or 0
        models = set()
        for i, line in enumerate(lines):
            if line.split()[:2] == ["GPU_ID", "MODEL"]:
                for row in lines[i + 1:]:
                    if not row.strip() or not row.split()[0].isdigit():
                        break
                    models.add(row.split()[1])
        out[name] = (count, models.pop() if len(models) == 1 else None)
    return out


def assign_hosts(queues: list[Queue], nodes: dict[str, Node]) -> None:
    """A queue's hosts from its HOSTS line: ``all`` or host groups (members unknown
    without bmgroup: every host, noted), named hosts, less ``~excluded`` ones."""
    for q in queues:
        words = next((n.removeprefix("HOSTS: ").split() for n in q.notes
                      if n.startswith("HOSTS: ")), ["all"])
        named = [re.sub(r"\+\d+$", "", w) for w in words if not w.startswith("~")]
        excluded = {w[1:] for w in words if w.startswith("~")}
        groups = [w for w in named if w.endswith("/") or w in ("all", "others")]
        hosts = [w for w in named if w in nodes]
        if groups and not hosts:
            hosts = list(nodes)
            if groups != ["all"]:
                q.notes.append(f"host groups {' '.join(groups)}: members unknown "
                               "(bmgroup), every host counted")
        q.nodes = [h for h in dict.fromkeys(hosts) if h not in excluded]
        q.total_nodes = len(q.nodes)
        q.sources["nodes"] = f"{' '.join(QUEUES_CMD)} (HOSTS) and {' '.join(HOSTS_CMD)}"


def discover(run: Run) -> Cluster:
    """Queues and hosts of the LSF cluster ``run`` reaches; GPUs where bhosts -gpu works."""
    notes: list[str] = []
    queues = parse_queues(required(run, QUEUES_CMD))
    nodes = parse_hosts(required(run, HOSTS_CMD))
    gpu_text = optional(run, GPUS_CMD, notes)
    for name, (count, model) in parse_gpus(gpu_text or "").items():
        if name in nodes:
            nodes[name].gpus, nodes[name].gpu_model = count, model
    assign_hosts(queues, nodes)
    if not any(q.default for q in queues):
        notes.append("no queue's description names it the default (lsb.params "
                     "DEFAULT_QUEUE; `bparams` shows it)")
    notes.append("cores are the hosts' job slots (bhosts -l MAX); memory and architecture "
                 "are not in bhosts (lshosts -w shows them)")
    return Cluster(scheduler="lsf", queues=queues, nodes=nodes, notes=notes,
                   sources={"nodes": " ".join(HOSTS_CMD), "queues": " ".join(QUEUES_CMD),
                            "gpus": " ".join(GPUS_CMD)})
