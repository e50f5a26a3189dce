"""The text of a drafted site profile, from a draft's :class:`~hpcprov.draft.plan.Findings`.

Pure: each section is built as a commented YAML tree (:mod:`hpcprov.core.yaml_writer`) in which
every value's comment names the command it came from; what is particular to one scheduler
(its launchers, its own section, hints to a question) comes from its backend's drafting
part (:class:`hpcprov.schedulers.facts.Drafting`). What only the site's documentation
can say (mandatory and forbidden job options, internet on compute nodes, the rendezvous
network, scratch, the framework versions) is written commented out under a ``QUESTION``
line; what had to be guessed is listed in ``unverified:``. As written, the draft passes
``hpcprov site check`` unless a partition's core count could not be learned (then that
key is a question too, and the check's message points at it).
"""

from __future__ import annotations

from hpcprov import schedulers
from hpcprov.core.yaml_writer import Block, render
from hpcprov.draft.modules import Choice, ModulePlan
from hpcprov.draft.plan import (
    Findings,
    PartSummary,
    login_patterns,
    site_name,
    summarize,
)
from hpcprov.site.gpu_vendors import DEFAULT_VENDOR

FRAMEWORK_EXAMPLE = "2.1.2"


def _partition(s: PartSummary, unverified: list[str], interfaces: list[str]) -> Block:
    """One partition's block."""
    b = Block()
    src = s.sources
    gpu_text = f"{s.gpus}x GPU" + (f" ({s.gpu_type})" if s.gpu_type else "") if s.gpus else \
        "no GPUs"
    b.add("description", f"{s.hosts}: {gpu_text} per node" + (
        f"; features {','.join(s.features)}" if s.features else ""), src.get("nodes", ""),
        notes=s.notes)
    b.add("nodes", s.nodes, src.get("nodes", ""))
    _cores(b, s, unverified)
    if s.memory_gb:
        b.add("memory_gb", s.memory_gb, f"{src.get('memory_gb', '')} (least over the nodes)")
    if s.arch:
        b.add("arch", s.arch, src.get("arch", ""))
    if s.gpus:
        b.add("gpus", _gpus(s, unverified))
    limits = _limits(s)
    if limits.items:
        b.add("limits", limits)
    if s.gpus and s.cores:
        cpus = s.cores * s.threads_per_core
        b.add("cpus_per_task", max(1, cpus // s.gpus),
              "CPUs per node / GPUs: one rank per GPU gets this many CPUs")
        b.add("network", _network(s, interfaces), notes=_network_question(interfaces))
        unverified.append(f"partitions.{s.name}.network")
    if s.default:
        b.add("default", True, src.get("default", ""))
    return b


def _cores(b: Block, s: PartSummary, unverified: list[str]) -> None:
    """cores_per_node, or a question where the scheduler did not say."""
    if s.cores:
        b.add("cores_per_node", s.cores, s.sources.get("cores", ""))
        if s.threads_per_core > 1:
            b.add("threads_per_core", s.threads_per_core,
                  f"{s.sources.get('threads_per_core', '')} ({s.cpus} CPUs: the scheduler "
                  "counts hardware threads)")
        return
    b.add("cores_per_node", 32, commented=True,
          notes=[f"QUESTION (cores): how many cores has each node of {s.name}? The scheduler "
                 "did not say; `hpcprov site check` fails here until it is answered."])
    unverified.append(f"partitions.{s.name}.cores_per_node")


def _gpus(s: PartSummary, unverified: list[str]) -> Block:
    """The gpus block: count and type from the scheduler, model where known."""
    g = Block()
    g.add("count", s.gpus, s.sources.get("gpus", ""))
    if s.gpu_type:
        g.add("type", s.gpu_type, f"{s.sources.get('gpu_type', '')} (the label jobs ask for)")
    if s.gpu_vendor and s.gpu_vendor != DEFAULT_VENDOR:
        g.add("vendor", s.gpu_vendor, s.sources.get("gpu_vendor", ""))
    if s.gpu_model:
        g.add("model", s.gpu_model, s.sources.get("gpu_model", ""))
    else:
        g.add("model", "A100-SXM4-80GB", commented=True, notes=[
            "QUESTION (GPU model): which GPUs are these? (nvidia-smi on one of the nodes; "
            "the CUDA architectures of the build come from it)"])
        unverified.append(f"partitions.{s.name}.gpus.model")
    return g


def _limits(s: PartSummary) -> Block:
    """The limits the scheduler reported."""
    lim = Block()
    for key, value in (("max_walltime", s.max_walltime), ("default_walltime",
                       s.default_walltime), ("max_nodes_per_job", s.max_nodes),
                       ("max_jobs_per_user", s.max_jobs_per_user),
                       ("max_gpus_per_user", s.max_gpus_per_user)):
        if value is not None:
            src = "max_nodes" if key == "max_nodes_per_job" else key
            lim.add(key, value, s.sources.get(src, ""))
    return lim


def _partitions(findings: Findings, unverified: list[str]) -> tuple[Block, dict[str,
                                                                          PartSummary]]:
    """Every partition's block, and notes on those left out."""
    summaries, skipped = summarize(findings.cluster, findings.gpus, findings.host)
    block = Block(tail=skipped)
    for name, s in summaries.items():
        block.add(name, _partition(s, unverified, findings.interfaces))
    return block, summaries


def _modules(plan: ModulePlan | None, findings: Findings, unverified: list[str]) -> Block:
    """The module system and the two module sets, each choice with its alternatives."""
    m = Block()
    if plan is None or plan.system.kind == "none":
        why = "; ".join(n for n in findings.notes if "module" in n) or "no module command"
        m.add("system", "none", why)
        return m
    m.add("system", plan.system.kind, f"module system found: {plan.system.kind} "
          f"{plan.system.version}".rstrip())
    if plan.system.init:
        m.add("init", plan.system.init, "defines `module` where a job's shell has none")
    notes = [_choice_text(c) for c in plan.choices]
    notes += [f"also offered, not loaded: {title} {', '.join(mods)} (the Python stack below "
              "is a venv)" for title, mods in plan.others.items()]
    build, run = Block(), Block()
    build.add("load", plan.build, "module -t avail", notes=notes)
    run.add("load", plan.runtime, "module -t avail: the build set less CMake")
    m.add("build", build)
    m.add("runtime", run)
    unverified.append("modules")
    return m


def _choice_text(c: Choice) -> str:
    """One module choice as a comment line."""
    if c.chosen is None:
        hidden = f" (module spider finds {', '.join(c.spider_only)}: load its prerequisites " \
                 "first)" if c.spider_only else ""
        return f"{c.title}: none offered by module -t avail{hidden}"
    also = f"; also offered: {', '.join(c.alternatives)}" if c.alternatives else ""
    spider = f"; module spider also finds {', '.join(c.spider_only)}" if c.spider_only else ""
    return f"{c.title}: {c.chosen} ({c.why}{also}{spider})"


def _policies(findings: Findings) -> Block:
    """Questions only the site's documentation answers: mandatory and forbidden options,
    internet on compute nodes (all commented out)."""
    p = Block()
    c = findings.cluster
    hint = schedulers.backend(c.scheduler).drafting().option_hints(c)
    req = Block()
    account = Block()
    account.add("example", "def-yourgroup")
    account.add("reason", "every job is charged to an allocation")
    req.add("account", account)
    p.add("required_options", req, commented=True, notes=[
        "QUESTION (mandatory options): must every job name an account or project to charge, "
        "or carry a comment? The site's documentation says; uncomment and adapt (or delete "
        "if none).", *hint])
    forbidden = Block()
    forbidden.add("mem", "memory follows the cores here")
    p.add("forbidden_options", forbidden, commented=True, notes=[
        "QUESTION (forbidden options): does the site refuse some job options (--mem, "
        "--exclusive)? Name each with the reason."])
    p.add("compute_internet", False, commented=True, notes=[
        "QUESTION (internet on compute nodes): can jobs reach the internet (pip, git, data "
        "downloads)? A login node cannot tell; true (the default) when they can."])
    return p


def _nics(interfaces: list[str]) -> tuple[list[str], str]:
    """This host's interfaces (not lo), and the likeliest high-speed one as the example."""
    nics = [n for n in interfaces if n != "lo"]
    fast = next((n for n in nics if n.startswith(("ib", "hsn"))), nics[0] if nics else "ib0")
    return nics, fast


def _network_question(interfaces: list[str]) -> list[str]:
    """The rendezvous network question, with this host's interfaces."""
    nics, _ = _nics(interfaces)
    seen = f" This host's interfaces: {', '.join(nics)} (/sys/class/net)." if nics else ""
    return ["QUESTION (rendezvous network): do the nodes have another name on the "
            "high-speed network (gpu01-ib), and which interface should NCCL and Gloo use? "
            "The site's documentation says (uncomment what applies)." + seen]


def _network(s: PartSummary, interfaces: list[str]) -> Block:
    """A GPU partition's network section, commented out: the question's example."""
    _, fast = _nics(interfaces)
    n = Block()
    n.add("host_name", "{host}-ib", commented=True)
    n.add("nccl_socket_ifname", fast, commented=True)
    n.add("gloo_socket_ifname", fast, commented=True)
    return n


def _paths(findings: Findings, unverified: list[str]) -> Block:
    """Scratch: $SCRATCH where the login environment sets it, else a question."""
    p = Block()
    if findings.scratch:
        p.add("scratch", "$SCRATCH", f"$SCRATCH is set in this login environment "
              f"({findings.scratch}): is it on the compute nodes too?")
    else:
        p.add("scratch", "/scratch/$USER", commented=True, notes=[
            "QUESTION (scratch): where should jobs write and the Python environment live "
            "(a file system every node mounts)? Default: $HOME."])
    unverified.append("paths.scratch")
    return p


def _python(plan: ModulePlan | None) -> Block:
    """A venv from the site's Python (module or python3); frameworks are a question."""
    py = Block()
    py.add("backend", "venv", "a venv on the site's Python; hpcprov setup fills it")
    chosen = next((c.chosen for c in (plan.choices if plan else []) if c.kind == "python"
                   and c.chosen), None)
    venv = Block()
    venv.add("python", "python3", f"from the module {chosen}" if chosen else
             "the python3 on PATH (no Python module chosen)")
    py.add("venv", venv)
    fw = Block()
    torch = Block()
    torch.add("version", FRAMEWORK_EXAMPLE)
    fw.add("pytorch", torch)
    py.add("frameworks", fw, commented=True, notes=[
        "QUESTION (frameworks): which PyTorch (and TensorFlow) version should the "
        "environment get? Pick one built for the CUDA module above."])
    return py


def _header(findings: Findings) -> list[str]:
    """The comment lines at the top: where and when, how to finish it, what ran."""
    c = findings.cluster
    title = schedulers.backend(c.scheduler).title + (f" {c.version}" if c.version else "")
    lines = [f"Site profile drafted by `hpcprov site draft` on {findings.host} at "
             f"{findings.when} ({title}).",
             *([findings.also_on_path + "."] if findings.also_on_path else []),
             "Each value's comment names the command it came from. Before using it:",
             "  1. answer each QUESTION: uncomment the key under it (delete the '# ' after "
             "the indentation) and write the site's answer;",
             "  2. confirm what `unverified:` (at the end) lists, taking out each entry you "
             "have checked;",
             "  3. hpcprov site check FILE; after maintenance: hpcprov site draft --diff FILE.",
             "Commands run (all read-only):"]
    lines += [f"  {r.command}  [{r.seconds:.1f} s" + (f"; {r.problem}]" if r.problem else "]")
              for r in findings.ran]
    notes = [*findings.cluster.notes, *findings.notes]
    if notes:
        lines.append("What could not be learned:")
        lines += [f"  {n}" for n in notes]
    return lines


def profile(findings: Findings, name: str | None = None) -> tuple[Block, list[str]]:
    """The draft's tree and its header lines."""
    c = findings.cluster
    backend = schedulers.backend(c.scheduler)
    unverified: list[str] = []
    doc = Block()
    doc.add("name", site_name(findings, name), "--name" if name else (
        f"ClusterName ({c.sources.get('name', '')})" if c.name else "from this host's name"))
    doc.add("description", f"{backend.title} cluster drafted by "
            f"hpcprov site draft on {findings.when}")
    doc.add("scheduler", c.scheduler, f"{c.sources.get('queues', '')} answered")
    hosts = login_patterns(findings.host)
    doc.add("login_hosts", hosts, f"from this host's name {findings.host} (socket.getfqdn)")
    unverified.append("login_hosts")
    doc.add("paths", _paths(findings, unverified))
    doc.add("modules", _modules(findings.modules, findings, unverified))
    parts, summaries = _partitions(findings, unverified)
    doc.add("partitions", parts)
    doc.add("policies", _policies(findings))
    unverified += ["policies.required_options", "policies.forbidden_options",
                   "policies.compute_internet"]
    doc.add("python", _python(findings.modules))
    unverified.append("python.frameworks")
    gpus = any(s.gpus for s in summaries.values())
    cuda = any(c.kind == "cuda" and c.chosen for c in (findings.modules.choices if
                                                        findings.modules else []))
    if gpus and cuda:
        hv = Block()
        hv.add("gpu_operations", "nccl", "GPUs on the nodes and a CUDA module")
        doc.add("horovod", hv)
    drafting = backend.drafting()
    launchers, default = drafting.launchers(c)
    doc.add("launchers", launchers)
    doc.add("default_launcher", default)
    section = drafting.section(c, gpus)
    if section is not None:
        doc.add(backend.name, section)
    doc.add("unverified", unverified, "what the draft guessed: confirm, then take it out")
    return doc, _header(findings)


def draft_text(findings: Findings, name: str | None = None) -> str:
    """The drafted profile as YAML text with its comments."""
    doc, header = profile(findings, name)
    return render(doc, header)
