"""Generate docs/reference.md (from the model) and docs/sites/*.md (from the profiles).

Run ``python -m hpcprov.app.docgen [DOCS_DIR]``; a test checks the committed files are current.
"""

from __future__ import annotations

import dataclasses
import sys
import typing
from enum import Enum
from pathlib import Path

from hpcprov.site.types import Site

PUBLIC_DOCS = "the site's public user documentation"
SEED_SOURCES = {
    "neuron": f"seeds 000 (KISTI tutorial README) and 001 (KISTI slides), {PUBLIC_DOCS}",
    "taurus": f"seed 003 (ZIH Taurus docs), {PUBLIC_DOCS}",
    "sockeye": f"seed 004 (HPC_helper, Sockeye part, PBS), {PUBLIC_DOCS}",
    "sockeye-slurm": f"{PUBLIC_DOCS} (Sockeye moved to Slurm in 2024); extends sockeye",
    "cc": f"seed 004 (HPC_helper, CC part), {PUBLIC_DOCS}",
    "technion": f"seed 002 (Technion multi-node tutorial), {PUBLIC_DOCS}",
    "local": "this machine (hpcprov's embedded default)",
}


def _type_name(ann: object) -> str:
    origin = typing.get_origin(ann)
    args = typing.get_args(ann)
    if origin is typing.Annotated:
        return _type_name(args[0])
    if origin in (typing.Union, getattr(__import__("types"), "UnionType", None)):
        return " | ".join(_type_name(a) for a in args)
    if origin is typing.Literal:
        return " | ".join(repr(a) for a in args)
    if origin in (list, tuple):
        return f"list[{', '.join(_type_name(a) for a in args)}]"
    if origin is dict:
        return f"map[{_type_name(args[0])} -> {_type_name(args[1])}]"
    if ann is type(None):
        return "null"
    if isinstance(ann, type) and issubclass(ann, Enum):
        return " | ".join(repr(m.value) for m in ann)
    return getattr(ann, "__name__", str(ann))


def _hints(model: type) -> dict[str, typing.Any]:
    return typing.get_type_hints(model, include_extras=True)


def _models(root: type) -> list[type]:
    seen: list[type] = []

    def walk(ann: object) -> None:
        if isinstance(ann, type) and dataclasses.is_dataclass(ann):
            if ann not in seen:
                seen.append(ann)
                for hint in _hints(ann).values():
                    walk(hint)
            return
        for arg in typing.get_args(ann):
            walk(arg)

    walk(root)
    return seen


def _default(field: dataclasses.Field[typing.Any]) -> str:
    if field.default is not dataclasses.MISSING:
        value = field.default.value if isinstance(field.default, Enum) else field.default
        return f"`{value!r}`"
    if field.default_factory is not dataclasses.MISSING:
        value = field.default_factory()
        if dataclasses.is_dataclass(value):
            return "(section defaults)"
        return f"`{value!r}`"
    return "**required**"


def reference() -> str:
    """Markdown reference of every section of a site profile."""
    out = ["# Site profile reference", "",
           "Generated from `hpcprov/site/types.py` by `python -m hpcprov.app.docgen`; do not edit.",
           "Unknown keys are errors everywhere. `hpcprov site schema` prints the same as JSON "
           "Schema for editors.", ""]
    for model in _models(Site):
        doc = model.__doc__ or ""
        if doc.startswith(f"{model.__name__}("):  # the one dataclasses writes: no doc
            doc = ""
        out += [f"## {model.__name__}", "", doc.strip().splitlines()[0] if doc else "", "",
                "| key | type | default | meaning |", "|---|---|---|---|"]
        hints = _hints(model)
        for field in dataclasses.fields(model):
            name = field.name
            desc = (field.metadata.get("description") or "").replace("|", "\\|")
            typ = _type_name(hints[name]).replace("|", "\\|")
            out.append(f"| `{name}` | {typ} | {_default(field).replace('|', '/')} | {desc} |")
        out.append("")
    return "\n".join([*out, *launcher_kinds(), *rank_contract()])


def launcher_kinds() -> list[str]:
    """The reference's table of launcher kinds: each kind's facts as
    :mod:`hpcprov.site.launcher_kinds` declares them."""
    from hpcprov.site.launcher_kinds import KINDS

    out = ["## Launcher kinds", "",
           "Each kind is one unit: its facts below (`hpcprov/site/launcher_kinds.py`) and its "
           "builder (`hpcprov/jobs/launchers/KIND.py`). *Keys*: the launcher keys it reads "
           "beyond `kind`, `description`, `args` and `modules` (any other is refused at its "
           "line). *Ranks*: tasks of one scheduler's own starter (srun, flux run: step "
           "options such as `--cpu-bind` go on its line), tasks of the job's task starter "
           "(the scheduler's own where it has one, else the site's MPI launcher: mpiexec, "
           "mpirun, jsrun, lrun or ibrun; any scheduler), one process per node spawning that "
           "node's ranks (the scheduler's per-node starter: srun, flux run, blaunch; else the "
           "site's MPI launcher), or started by the launcher. *Env*: inherited from the "
           "job's shell, or only the variables named to it (`-x NAME`: the site env, the network "
           "variables and `export_env` are named). *Validation*: the role it plays in "
           "`hpcprov validate`.", "",
           "| kind | keys | ranks | env | validation |", "|---|---|---|---|---|"]
    for name, k in KINDS.items():
        ranks = (f"tasks of {k.scheduler}'s starter (needs {k.scheduler})" if k.scheduler
                 else "tasks of the job's task starter" if k.task_starter
                 else "one per node" if k.per_node else "started by it")
        if k.container:
            ranks += ", inside the image"
        roles = [f"torch.distributed (preference {k.torch_order})"] if k.torch_order else []
        if k.horovod == "mpi":
            roles.append("Horovod over MPI")
        if k.horovod == "pmi":
            roles.append("Horovod over MPI, where `mpi:` names the MPI's plugin")
        if k.horovod == "controller":
            roles.append("Horovod over its controller (Gloo)")
        keys = ", ".join(f"`{key}`" for key in sorted(k.keys))
        out.append(f"| {name} | {keys} | {ranks} | {k.env} | {'; '.join(roles) or '-'} |")
    return [*out, ""]


def rank_contract() -> list[str]:
    """The reference's section on the rank contract: what each rank gets, from which
    starter's variables, and which values are evaluated where."""
    from hpcprov.jobs.ranks import STARTERS
    from hpcprov.schedulers import all_backends
    from hpcprov.site.launcher_kinds import KINDS

    out = ["## The rank contract", "",
           "Every rank that srun, mpirun, mpiexec, jsrun, horovodrun or a container launcher "
           "starts runs hpcprov's shim first (`bash -c \"$hpcprov_rank\" hpcprov-rank SIZE "
           "PER_NODE ADDR PORT [WRAPPER...] -- COMMAND`; the text is `hpcprov/jobs/rank_env.sh`"
           ", assigned to `hpcprov_rank` before the launch line). It exports torch."
           "distributed's environment, so an unmodified `init_process_group()` (env://) "
           "works under any of them: `RANK`, `WORLD_SIZE`, `LOCAL_RANK`, `LOCAL_WORLD_SIZE`, "
           "`NODE_RANK` from the first starter below whose rank, size and local rank are all "
           "set (what a starter does not say comes from the geometry hpcprov planned: SIZE, "
           "PER_NODE); `MASTER_ADDR` and `MASTER_PORT` as the launch exported them, else ADDR "
           "(the job's first node) and PORT (the launcher's `port`); `HPCPROV_RANK_SOURCE` "
           "names the starter. torchrun gives its ranks these variables itself.", "",
           "Where values are evaluated:", "",
           "- **Once, by the job's shell** (the batch script, or your shell for `hpcprov "
           "launch`): the launch line itself, the job's first node (ADDR), `env` and "
           "`network.env`, `args`.",
           "- **On each rank, by the shim**: the `wrapper` words. `$NAME` and `${NAME}` in "
           "them become that rank's values (`CUDA_VISIBLE_DEVICES=$LOCAL_RANK`, "
           "`ROCR_VISIBLE_DEVICES=$SLURM_LOCALID`); nothing else in them is evaluated: no "
           "command substitution, globbing or word splitting, whatever a value holds.", "",
           "| launcher kind | starters read, first found first |", "|---|---|"]
    out += [f"| {name} | {', '.join(k.starters)} |" for name, k in KINDS.items() if k.starters]
    out += [f"| {name} | the job's task starter's: " + ", ".join(
        f"{b.task_starter_name} ({', '.join(b.task_starters)})" for b in all_backends()
        if b.task_starters) + "; elsewhere the site's MPI launcher's |"
        for name, k in KINDS.items() if k.container]
    out += ["", "| starter | rank | size | local rank | local size | node rank |",
            "|---|---|---|---|---|---|"]
    out += [f"| {name} | " + " | ".join(f"`{v}`" if v else "-" for v in starter) + " |"
            for name, starter in STARTERS.items()]
    return [*out, ""]


def site_page(name: str) -> str:
    """A docs page for one bundled site: provenance, unverified values, the walkthrough."""
    from hpcprov.app.guide import render_guide
    from hpcprov.site.profiles import load_site

    site = load_site(name)
    head = [f"<!-- Generated by python -m hpcprov.app.docgen from sites/{name}.yaml; "
            "do not edit. -->",
            "", f"Profile: `sites/{name}.yaml`. Sources: {SEED_SOURCES.get(name, 'user')}.", ""]
    if site.unverified:
        head += ["Values not confirmed against the live site (also marked in the YAML): "
                 + ", ".join(f"`{u}`" for u in site.unverified) + ".", ""]
    head += ["Verification: everything below is generated by hpcprov and checked by its golden "
             "tests against the seed text, `bash -n` and shellcheck; it has not been run on this "
             "cluster by hpcprov's developers.", ""]
    guide = render_guide(site)
    title, _, rest = guide.partition("\n")
    return "\n".join([title, "", *head]) + rest


def compatibility() -> str:
    """docs/compatibility.md: the Horovod x PyTorch x TensorFlow table hpcprov acts on."""
    from hpcprov.provision.compat import BUILD_FACTS, BUILD_NOTES, LAUNCH_NOTES, RULES
    from hpcprov.provision.compat import for_site as matches
    from hpcprov.site.loader import bundled_site_dir
    from hpcprov.site.profiles import load_site

    out = ["<!-- Generated by python -m hpcprov.app.docgen from provision/compat.py; "
           "do not edit. -->",
           "", "# Compatibility: Horovod x PyTorch x TensorFlow", "",
           "`hpcprov setup` reads this table: it refuses the **bad** rows (exit 2, with the "
           "explanation), applies the patch of every **patch** row inside the build step "
           "(the patches are in `provision/patches/`, each with its reason in its header), and "
           "prints the **caveat** rows as warnings; `hpcprov guide` repeats them for users.", "",
           "A row with a **build-time condition** depends on the toolchain the site's modules "
           "provide, which only the build step can see: the step reads the fact "
           "(" + "; ".join(f"`{k}`: {v}" for k, v in BUILD_FACTS.items()) + ") and applies "
           "the patch when it holds; the key of the built wheel records those facts.", "",
           "| rule | verdict | Horovod | PyTorch | TensorFlow | GPU build | build-time condition "
           "| what and why | how it is known |", "|---|---|---|---|---|---|---|---|---|"]
    for r in RULES:
        gpu = {None: "any", True: "yes", False: "no"}[r.gpu]
        what = r.explanation + (f" (patch `{r.patch}`)" if r.patch else "")
        out.append(f"| {r.id} | {r.verdict} | {r.horovod} | {r.torch or 'any'} | "
                   f"{r.tensorflow or 'any'} | {gpu} | {r.condition() or 'none'} | {what} | "
                   f"{r.evidence} |")
    out += ["", "## Build tools and libraries", ""]
    out += [f"- **{name}**: {text}" for name, text in BUILD_NOTES]
    from hpcprov.site.cuda_arch import CUDA_TARGETS

    out += ["", "### The GPU architectures each CUDA release targets", "",
            "NVIDIA's CUDA toolkit release notes; the CUDA 13.0 row agrees with `nvcc "
            "--list-gpu-arch` of 13.0.88 (compute_75 to compute_121), checked in the tests.",
            "", "| CUDA from | lowest | highest |", "|---|---|---|"]
    out += [f"| {major}.{minor} | sm_{low} | sm_{high} |"
            for (major, minor), low, high in CUDA_TARGETS]
    out += ["", "## Launching", ""]
    out += [f"- **{name}**: {text}" for name, text in LAUNCH_NOTES]
    out += ["", "## What applies to each bundled site", "",
            "| site | Horovod | rules |", "|---|---|---|"]
    for path in sorted(bundled_site_dir().glob("*.yaml")):
        site = load_site(path.stem)
        found = ", ".join(f"{m.rule.id} ({m.rule.verdict})" for m in matches(site)) or "none"
        source = site.horovod.source + (f" {site.horovod.version}" if site.horovod.version
                                        else "")
        out.append(f"| {site.name} | {source} | {found} |")
    return "\n".join(out) + "\n"


# the walks of docs/onboarding.md, in order: one example profile of each kind of site
WALKS = ("pbs-pals", "slurm-apptainer", "torchrun-mpi", "edf", "uenv", "intel-gpus",
         "lsf-jsrun", "lsf-lrun", "flux", "pbs-container", "flux-torchrun-image", "gridengine")


class WalkOptions(typing.TypedDict, total=False):
    """The options of a walk's jobscript line, as :func:`hpcprov.jobs.api.request`'s
    keywords."""

    nodes: int
    launcher: str
    options: tuple[str, ...]


def _walk_args(line: str) -> tuple[WalkOptions, tuple[str, ...]]:
    """The options and command of an example's ``# walk: jobscript ARGS -- COMMAND``."""
    words = line.split()
    assert words[0] == "jobscript" and "--" in words, line
    cut = words.index("--")
    opts: WalkOptions = {}
    options: list[str] = []
    flags, command = words[1:cut], tuple(words[cut + 1:])
    for flag, value in zip(flags[::2], flags[1::2], strict=True):
        if flag == "-N":
            opts["nodes"] = int(value)
        elif flag == "-l":
            opts["launcher"] = value
        elif flag == "-o":
            options.append(value)
        else:
            raise ValueError(f"walk: {flag} is not read here")
    return {**opts, "options": tuple(options)}, command


def walk(example: Path) -> list[str]:
    """One walk: what the example says it is, its profile, and what hpcprov generates from
    it (the job script, the rank contract's shim elided; the setup steps)."""
    from hpcprov.jobs.api import plan_jobscript, request
    from hpcprov.jobs.launchers import RANK_SHIM_VAR, build_launch
    from hpcprov.provision.plan import build_plan
    from hpcprov.site.profiles import load_site

    text = example.read_text(encoding="utf-8")
    lead = [ln[2:] for ln in text.splitlines() if ln.startswith("# ")]
    about = [ln for ln in lead if not ln.startswith("walk: ")]
    command = next(ln for ln in lead if ln.startswith("walk: ")).removeprefix("walk: ")
    opts, argv = _walk_args(command)
    ref = f"docs/examples/{example.name}"
    req = request(str(example), command=argv, **opts)
    script = plan_jobscript(req).script
    # the shim line as the job script has it (a container kind's reads the variables of
    # the starter of the job's tasks)
    shim = next((ln for ln in build_launch(req, "batch").setup
                 if ln.startswith(f"{RANK_SHIM_VAR}=")), "")
    if shim and shim in script:
        script = script.replace(shim, "hpcprov_rank='...'  # the rank contract's shim "
                                "(docs/reference.md), elided here")
    site = load_site(str(example))
    steps = " ".join(s.id for s in build_plan(site).steps)
    return [f"## {site.description or site.name}", "", " ".join(about), "",
            f"Profile `{ref}` (`hpcprov site check {ref}` passes):", "", "```yaml",
            text.rstrip(), "```", "",
            f"`hpcprov {command.replace('jobscript', 'jobscript --site ' + ref, 1)}` writes:",
            "", "```bash", script.rstrip(), "```", "",
            f"`hpcprov setup --site {ref}` runs the steps: {steps}.", "",
            *_validate_walk(example, ref, opts, shim)]


WALK_ENV, WALK_RUN = "/scratch/me/hpcprov", "/scratch/me/hpcprov-validate/run"


def _validate_walk(example: Path, ref: str, opts: WalkOptions, shim: str) -> list[str]:
    """What ``validate --dry-run`` plans for an example: each job's script by name and the
    line that starts its ranks (the shim elided), and what it would report SKIPPED."""
    from hpcprov.site.profiles import load_site
    from hpcprov.validate.api import ValidateOptions, plan_validation

    options = opts.get("options", ())
    # a site whose Python is its image has no environment to name (--env there names where
    # setup pulled a registry image, and these examples' images are files of the site's)
    env = None if load_site(str(example)).python.backend == "container" else WALK_ENV
    planned = plan_validation(ValidateOptions(
        site=str(example), nodes=opts.get("nodes", 2), prefix=env,
        workdir=WALK_RUN, options=options))
    flags = "".join(f" -o {x}" for x in options)
    given = f" --env {env}" if env else ""
    out = [f"`hpcprov validate --site {ref}{given} --workdir {WALK_RUN}{flags} "
           "--dry-run` plans these jobs (each script's line that starts the ranks):", "",
           "```bash"]
    for p in planned.scripts:
        if p.path.name == "allocation.sh":
            out.append(f"# {p.path.name}: one allocation, the jobs below its steps")
            continue
        line = next((ln for ln in p.text.splitlines() if not ln.startswith("#")
                     and ("hpcprov-rank" in ln or "torch.distributed.run" in ln)), "")
        out += [f"# {p.path.name}", line.replace(shim, "hpcprov_rank='...'") if shim else line]
    out.append("```")
    out += [f"- SKIPPED {s.name}: {s.reason}" for s in planned.skipped]
    return [*out, ""]


def walks(root: Path) -> str:
    """docs/walks.md: a site of each kind, from its example profile to what hpcprov
    generates (regenerated and compared by the tests, so every line is what runs)."""
    out = ["<!-- Generated by python -m hpcprov.app.docgen from docs/examples/*.yaml; do not "
           "edit. -->", "", "# Walks: a site of each kind", "",
           "Each section starts from an example profile in `docs/examples/` (each `extends` "
           "a bundled profile and says only what makes its kind of site) and shows what hpcprov "
           "generates from it: the job script, the setup steps, and the jobs `hpcprov validate` "
           "would submit (its allreduce and training run through the site's own launcher, "
           "whatever its kind: docs/validation.md). The job scripts are verified here as far "
           "as this machine can: the rank contract under stub starters for PALS, ibrun and "
           "jsrun, and under real srun, mpirun, MPICH's Hydra mpiexec, horovodrun, torchrun and "
           "Charliecloud's ch-run on the testbed; Apptainer, the EDF engine, uenv and Intel GPUs "
           "by stub commands that stand for them (`tests/test_rank_contract.py`, "
           "`tests/test_uenv.py`, `tests/test_gpu_vendors.py`). None of them ran on such a "
           "cluster.", ""]
    for name in WALKS:
        out += walk(root / f"{name}.yaml")
    return "\n".join(out)


def write_all(docs: Path) -> list[Path]:
    from hpcprov.site.loader import bundled_site_dir

    written = []
    ref = docs / "reference.md"
    ref.write_text(reference(), encoding="utf-8")
    written.append(ref)
    compat = docs / "compatibility.md"
    compat.write_text(compatibility(), encoding="utf-8")
    written.append(compat)
    page = docs / "walks.md"
    page.write_text(walks(docs / "examples"), encoding="utf-8")
    written.append(page)
    (docs / "sites").mkdir(parents=True, exist_ok=True)
    for path in sorted(bundled_site_dir().glob("*.yaml")):
        page = docs / "sites" / f"{path.stem}.md"
        page.write_text(site_page(path.stem), encoding="utf-8")
        written.append(page)
    return written


if __name__ == "__main__":
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else Path("docs")
    for p in write_all(target):
        print(p)
