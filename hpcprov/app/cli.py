"""The `hpcprov` command line. Heavy modules are imported inside commands, so start-up is fast."""

from __future__ import annotations

import json
import os
import sys
import warnings
from collections.abc import Sequence
from typing import Any, Literal, NoReturn

import click

from hpcprov.core.text import for_terminal, shown
from hpcprov.site.gpu_vendors import VENDORS

CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


def _emit_json(data: Any) -> None:
    click.echo(json.dumps(data, indent=2, default=str))


def _fail(message: str, code: int = 2) -> NoReturn:
    _print_error(message)
    raise click.exceptions.Exit(code)


# what a terminal may take as the start of an escape sequence (an OSC title, a cursor move)
# is printed as \xNN instead (hpcprov.core.text)
safe = for_terminal


def _print_error(message: str) -> None:
    for line in str(message).splitlines() or ["error"]:
        click.echo(f"hpcprov: error: {safe(line)}", err=True)


def _show_warning(message: Warning | str, category: type[Warning], filename: str,
                  lineno: int, file: Any = None, line: str | None = None) -> None:
    """warnings.showwarning for the CLI: hpcprov's own as one `hpcprov: warning:` line."""
    from hpcprov.core.errors import HpcprovWarning

    if issubclass(category, HpcprovWarning):
        click.echo(f"hpcprov: warning: {safe(message)}", err=True)
    else:
        sys.stderr.write(warnings.formatwarning(message, category, filename, lineno, line))


def _load(site: str | None) -> Any:
    """The site a command works on (hpcprov.site.catalog.load)."""
    from hpcprov.site.catalog import load

    return load(site)


def _site_names(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[Any]:
    from click.shell_completion import CompletionItem

    from hpcprov.site.loader import available_sites

    return [CompletionItem(n) for n in available_sites() if n.startswith(incomplete)]


site_option = click.option(
    "--site", "-s", shell_complete=_site_names,
    help="site name or profile path (default: $HPCPROV_SITE, detected, or local)")
json_option = click.option("--json", "as_json", is_flag=True, help="machine-readable output")


@click.group(context_settings=CONTEXT)
@click.version_option(package_name="hpcprov")
def cli() -> None:
    """Provision, launch and validate distributed deep learning on HPC clusters."""


@cli.command("sites")
@json_option
def sites_cmd(as_json: bool) -> None:
    """List the known site profiles."""
    from hpcprov.site.catalog import catalog

    rows = [row.to_json() for row in catalog()]
    if as_json:
        _emit_json(rows)
        return
    width = max(len(safe(r["name"])) for r in rows) if rows else 4
    for r in rows:
        desc = f"BROKEN: {r['error']}" if r["error"] else r["description"]
        click.echo(f"{safe(r['name']):<{width}}  {safe(r['scheduler']):<6} {safe(desc)}")


@cli.group("site")
def site_group() -> None:
    """Show, check and describe site profiles."""


@site_group.command("show")
@click.argument("name", shell_complete=_site_names)
@json_option
def site_show(name: str, as_json: bool) -> None:
    """Print a profile with `extends` resolved and defaults filled in."""
    import yaml

    data = _load(name).profile_data()
    if as_json:
        _emit_json(data)
    else:
        click.echo(yaml.safe_dump(data, sort_keys=False, width=100), nl=False)


@site_group.command("check")
@click.argument("files", nargs=-1, required=True, type=click.Path(dir_okay=False))
@json_option
def site_check(files: tuple[str, ...], as_json: bool) -> None:
    """Validate profile files, and lint each partition's default job; one line per
    problem, exit 2 if any. A name with no such file here is a site on the search path
    (`hpcprov site check neuron`)."""
    from hpcprov.jobs.api import check_sites

    report = check_sites(files)
    if as_json:
        _emit_json(report.to_json())
    else:
        for f, errors in report.files.items():
            for err in errors:
                click.echo(safe(err), err=True)
            if not errors:
                click.echo(f"{safe(f)}: ok")
    if not report.ok:
        raise click.exceptions.Exit(2)


@site_group.command("schema")
def site_schema() -> None:
    """Print the JSON Schema of site profiles (for editor completion)."""
    from hpcprov.site.model import json_schema

    _emit_json(json_schema())


class _DraftSchedulers(click.Choice):
    """The schedulers `site draft` can ask: the registered backends with a marker command,
    in registry order (hpcprov.schedulers.drafting). Read when help or parsing needs them,
    so that other commands import no scheduler backend for this option."""

    def __init__(self) -> None:
        # not Choice.__init__, which stores the choices: they are read on each use
        self.case_sensitive = True

    @property
    def choices(self) -> Sequence[str]:
        from hpcprov.schedulers import drafting

        return tuple(b.name for b in drafting())

    @choices.setter
    def choices(self, value: Sequence[str]) -> None:
        # click.Choice's choices are a plain attribute; these are the registry's, never set
        raise AttributeError("the schedulers site draft can ask are the registry's")


@site_group.command("draft")
@click.option("--scheduler", type=_DraftSchedulers(),
              help="default: the one whose commands are on PATH")
@click.option("--output", "-o", "out_path", type=click.Path(dir_okay=False),
              help="write the draft here (default: stdout); an existing file needs --force")
@click.option("--force", is_flag=True, help="overwrite the --output file")
@click.option("--diff", "diff_ref", metavar="PROFILE",
              help="compare this profile (name or file) with what the cluster says now "
              "instead; exit 1 when they differ")
@click.option("--name", help="the profile's name (default: the cluster's)")
@click.option("--timeout", type=click.FloatRange(1), default=60, show_default=True,
              help="seconds each command may take before it counts as hung")
@json_option
def site_draft(scheduler: str | None, out_path: str | None, force: bool,
               diff_ref: str | None, name: str | None, timeout: float,
               as_json: bool) -> None:
    """Draft a site profile from the cluster this login node belongs to.

    Runs read-only commands (the scheduler's, `module -t avail`, nvidia-smi), each with a
    timeout, and writes YAML whose comments name the command behind every value; what
    only the site's documentation can say is left as QUESTION lines.
    """
    from hpcprov.draft.api import DraftOptions, draft

    result = draft(DraftOptions(scheduler=scheduler, output=out_path, force=force,
                                diff=diff_ref, name=name, timeout=timeout, json=as_json))
    for problem in result.warnings:
        click.echo(f"hpcprov: warning: {safe(problem)}", err=True)
    if result.profile is not None:
        _draft_diff(result, as_json)
    elif result.written:
        click.echo(f"hpcprov: wrote {safe(result.written)}; answer its QUESTION lines, then: "
                   f"hpcprov site check {safe(result.written)}", err=True)
    else:
        click.echo(result.text or "", nl=False)


def _draft_diff(result: Any, as_json: bool) -> None:
    """Print how a profile differs from the cluster; exit 1 when it does."""
    found, ref = result.differences, result.profile
    if as_json:
        _emit_json(result.to_json())
    elif found:
        for d in found:
            click.echo(d.text())
        click.echo(f"hpcprov: {len(found)} difference(s) between {ref} and the cluster",
                   err=True)
    else:
        click.echo(f"hpcprov: {ref} matches what the cluster says")
    if found:
        raise click.exceptions.Exit(1)


@cli.command("detect")
@click.option("--hostname", help="host name to match (default: this machine's)")
@json_option
def detect_cmd(hostname: str | None, as_json: bool) -> None:
    """Name the site whose login host patterns match this machine."""
    import socket

    from hpcprov.core.errors import warn
    from hpcprov.site.catalog import matches
    from hpcprov.site.detect import warn_if_ambiguous

    host = hostname or socket.getfqdn()
    result = matches(host)
    found = result.sites
    for name, pattern in result.catch_alls:
        warn(f"site {name}: login_hosts pattern {pattern!r} matches every host and is not "
             "used for detection; set HPCPROV_SITE to make it the default")
    warn_if_ambiguous(result)
    if as_json:
        _emit_json({"hostname": host, "sites": found})
    elif found:
        click.echo(safe(found[0]))
    if not found:
        if not as_json:
            _print_error(f"no site profile matches host {shown(host)}; use --site NAME "
                         "(e.g. local)")
        raise click.exceptions.Exit(1)


def _job_options(func: Any) -> Any:
    opts = [
        site_option,
        click.option("--nodes", "-N", type=click.IntRange(min=1), default=1, show_default=True),
        click.option("--gpus-per-node", "-G", type=click.IntRange(min=0),
                     help="default: all GPUs of the partition"),
        click.option("--partition", "-p", help="default: the site's default partition"),
        click.option("--launcher", "-l", help="srun, mpirun, horovodrun, torchrun, container"),
        click.option("--tasks-per-node", type=click.IntRange(min=1),
                     help="ranks per node (default: one per GPU)"),
        click.option("--hosts", "-H", multiple=True,
                     help="node list for mpirun/horovodrun -H, e.g. gpu[32-33]"),
        click.option("--image", help="container image name or path (container launcher)"),
        click.option("--option", "-o", "options", multiple=True, metavar="NAME=VALUE",
                     help="scheduler option, e.g. comment=pytorch, account=def-pi (not nodes, "
                     "tasks, GPUs, time or queue: their flags set those)"),
        click.option("--time", "-t", help="walltime, e.g. 24:00:00"),
        click.option("--job-name", "-J"),
        click.option("--cpus-per-task", type=click.IntRange(min=1)),
        json_option,
        click.argument("command", nargs=-1, required=True),
    ]
    for opt in reversed(opts):
        func = opt(func)
    return func


def _job_request(kw: dict[str, Any], **more: Any) -> Any:
    """The job the flags describe: each flag of :func:`_job_options` is named as the request's
    field it sets (``--json`` aside)."""
    from hpcprov.jobs.api import request

    return request(**{k: v for k, v in kw.items() if k != "as_json"}, **more)


def _warn_all(warnings: list[Any]) -> None:
    for w in warnings:
        click.echo(f"hpcprov: warning: {safe(w)}", err=True)


@cli.command("launch")
@_job_options
@click.option("--allocate", is_flag=True, help="also print the salloc/qsub -I line first")
def launch_cmd(allocate: bool, **kw: Any) -> None:
    """Print the launch command for CMD (run it inside an allocation), after the site's
    and the partition's variables and the lines it needs first."""
    from hpcprov.jobs.api import plan_launch

    launch = plan_launch(_job_request(kw), allocate=allocate)
    _warn_all(launch.warnings)
    if kw["as_json"]:
        _emit_json(launch.to_json())
        return
    for line in launch.lines(allocate):
        click.echo(line)


@cli.command("jobscript")
@_job_options
@click.option("--prefix", help="environment prefix to activate (default: the site's)")
@click.option("--no-activate", is_flag=True, help="do not activate the Python environment")
@click.option("--output", "out_path", type=click.Path(dir_okay=False, writable=True),
              help="write the script here instead of stdout")
def jobscript_cmd(prefix: str | None, no_activate: bool, out_path: str | None,
                  **kw: Any) -> None:
    """Print a batch script (sbatch, PBS, or bash) that runs CMD with the site's rules."""
    from hpcprov.jobs.api import plan_jobscript

    job = plan_jobscript(_job_request(kw, prefix=prefix, activate=not no_activate), out_path)
    _warn_all(job.warnings)
    if kw["as_json"]:
        _emit_json(job.to_json())
    elif not out_path:
        click.echo(job.script, nl=False)


@cli.command("setup")
@site_option
@click.option("--prefix", help="install prefix (default: the site's)")
@click.option("--env", "env_name", help="environment name (default: the site's)")
@click.option("--on", "runs_on", type=click.Choice(["login", "compute"]), default="login",
              show_default=True, help="where the steps will run")
@click.option("--dry-run", is_flag=True, help="print the complete bash script, run nothing")
@click.option("--until", "until", metavar="STEP",
              help="stop after this step (the prefix is not ready then)")
@click.option("--redo", is_flag=True, help="run every step again, ignoring the journal")
@click.option("--verbose", "-v", is_flag=True, help="print every line the steps print")
@click.option("--container", "container", metavar="IMAGE",
              help="provision through one of the site's container images (containers.images) "
              "instead of its Python environment")
@json_option
def setup_cmd(site: str | None, prefix: str | None, env_name: str | None,
              runs_on: Literal["login", "compute"],
              dry_run: bool, until: str | None, redo: bool, verbose: bool,
              container: str | None, as_json: bool) -> None:
    """Provision the Python environment and Horovod for a site, and prove the build.

    Runs the plan that --dry-run prints, step by step, with a journal: running it again
    after success does nothing, after a failure or Ctrl-C it resumes at the failed step.
    """
    from hpcprov.provision.api import SetupOptions, already_ready, plan_setup

    opts = SetupOptions(site=site, prefix=prefix, env_name=env_name,
                        runs_on=runs_on, until=until, redo=redo,
                        container=container)
    ready = None if dry_run else already_ready(opts)
    if ready is not None:
        _nothing_to_do(ready, site or os.environ.get("HPCPROV_SITE", ""), as_json)
        return
    planned = plan_setup(opts)
    if as_json and dry_run:
        _emit_json({"plan": planned.plan.to_json(), "script": planned.script,
                    "warnings": [f.to_json() for f in planned.warnings]})
        return
    if not as_json:
        for f in planned.warnings:
            click.echo(f"hpcprov: warning: {safe(f)}", err=True)
    if dry_run:
        click.echo(planned.script, nl=False)
        return
    _run_setup(planned, verbose, as_json)


def _nothing_to_do(prefix: Any, site: str, as_json: bool, steps: int | None = None) -> None:
    if as_json:
        _emit_json({"status": "nothing-to-do", "prefix": str(prefix), "ran": [],
                    "manifest": str(prefix / ".hpcprov" / "manifest.json")})
        return
    done = f"; {steps} steps done before" if steps is not None else ""
    click.echo(f"hpcprov: nothing to do: {prefix} is ready (site {site}{done}). "
               f"Activate with: source {prefix / 'activate'}")


def _run_setup(planned: Any, verbose: bool, as_json: bool) -> None:
    from hpcprov.provision.api import run_setup
    from hpcprov.provision.runner import SetupFailed

    target, until = planned.target, planned.options.until
    try:
        result = run_setup(planned, verbose=verbose, quiet=as_json)
    except SetupFailed as exc:
        if as_json:
            _emit_json({"status": "failed", "prefix": str(target), "step": exc.step,
                        "log": str(exc.log or ""), "error": str(exc)})
            raise click.exceptions.Exit(exc.exit_code) from None
        raise
    if as_json:
        _emit_json(result.to_json())
    elif result.status == "nothing-to-do":
        _nothing_to_do(target, planned.site.name, False, len(result.skipped))
    elif result.status == "stopped":
        click.echo(f"hpcprov: stopped after step {until} as asked; {target} is not ready yet "
                   "(run without --until to finish)")
    else:
        click.echo(f"hpcprov: {target} is ready ({len(result.ran)} steps in "
                   f"{result.seconds:.0f} s). Activate with: source {target / 'activate'}\n"
                   f"hpcprov: manifest: {result.manifest}; check it any time with: "
                   f"hpcprov doctor --prefix {target}")


@cli.command("doctor")
@site_option
@click.option("--prefix", help="the provisioned prefix (default: the site's)")
@click.option("--partition", "-p", help="partition whose GPUs should be visible "
              "(default: $SLURM_JOB_PARTITION inside a job, else none)")
@json_option
def doctor_cmd(site: str | None, prefix: str | None, partition: str | None,
               as_json: bool) -> None:
    """Check a provisioned environment against its manifest (exit 1 when a check fails)."""
    from hpcprov.provision.api import doctor

    report = doctor(site, prefix, partition)
    checks = report.checks
    if as_json:
        _emit_json({"prefix": str(report.prefix), "ok": report.ok,
                    "checks": [c.to_json() for c in checks]})
    else:
        width = max(len(c.name) for c in checks)
        for c in checks:
            # the details quote the manifest and the probe: control characters escaped
            click.echo(f"{c.status.upper():5} {c.name:{width}}  {for_terminal(c.detail)}")
            if c.fix and c.status in ("fail", "warn"):
                click.echo(f"{'':5} {'':{width}}  fix: {for_terminal(c.fix)}")
        failed = [c for c in checks if c.status == "fail"]
        click.echo(f"hpcprov: {len(failed)} check(s) failed" if failed
                   else f"hpcprov: {report.prefix} is healthy")
    if not report.ok:
        raise click.exceptions.Exit(1)


@cli.command("validate")
@site_option
@click.option("--partition", "-p", help="partition (default: the site's default)")
@click.option("--nodes", "-N", type=click.IntRange(1),
              help="nodes per job (default: 2, or 1 where the partition has one)")
@click.option("--checks", default=None,
              help="comma-separated: env, allreduce, train, pernode, links (default: env, "
              "allreduce, train; a part that cannot run is a SKIPPED row; a check named "
              "here that cannot run at all is an error)")
@click.option("--launchers", default=None, metavar="all|NAME,...",
              help="run the checks through each of these launchers (all: every one the "
              "profile defines); default: the site's default launcher, and Horovod's")
@click.option("--env", "prefix", help="provisioned prefix to run in (default: the site's)")
@click.option("--ranks-per-node", type=click.IntRange(1),
              help="ranks per node (default: one per GPU, 1 without GPUs)")
@click.option("--device", type=click.Choice(["cpu", *dict.fromkeys(
                  v.torch_device for v in VENDORS.values())]),
              help="where tensors live: torch's device type (default: the partition's GPUs' "
              "where it has GPUs, e.g. cuda, xpu; else cpu)")
@click.option("--max-bytes", type=click.IntRange(8), default=256 * 1024 * 1024,
              show_default=True, help="largest allreduce message")
@click.option("--iters", type=click.IntRange(1), default=20, show_default=True)
@click.option("--link-bytes", type=click.IntRange(8), default=64 * 1024 * 1024,
              show_default=True, help="message size of the links check's pair jobs")
@click.option("--steps", type=click.IntRange(1), default=30, show_default=True,
              help="training steps")
@click.option("--timeout", type=click.FloatRange(1), default=1800, show_default=True,
              help="seconds for the whole run; late jobs are cancelled")
@click.option("--pending-timeout", type=click.FloatRange(1), default=600, show_default=True,
              help="cancel a job still pending after this many seconds")
@click.option("--workdir", help="run directory, visible to the nodes (default: under scratch)")
@click.option("--option", "-o", "options", multiple=True, metavar="NAME=VALUE",
              help="scheduler option for every job (e.g. -o account=def-pi; not nodes, tasks, "
              "GPUs, time or queue)")
@click.option("--junit", type=click.Path(dir_okay=False), help="write JUnit XML here")
@click.option("--report", type=click.Path(dir_okay=False),
              help="write a Markdown report here (with busbw.png beside it)")
@click.option("--compare", metavar="latest|FILE",
              help="compare with a stored run (a regression over 10%% fails)")
@click.option("--no-history", is_flag=True, help="do not store this run in the history")
@click.option("--allocation", type=click.Choice(["one", "per-job"]),
              help="one: every job a step of one allocation, a single wait in the queue "
                   "(default where the scheduler can, Slurm); per-job: a job per check")
@click.option("--quick", is_flag=True,
              help="a smoke run: 4 MiB messages, 5 iterations, 8 training steps, on CPUs "
                   "the jobs side by side (bandwidth and throughput not judged); explicit "
                   "sizes win")
@click.option("--dry-run", is_flag=True,
              help="print every script the run would submit (the allocation's, then each "
              "job's), byte for byte; submit nothing")
@json_option
def validate_cmd(site: str | None, partition: str | None, nodes: int | None,
                 checks: str | None, launchers: str | None, prefix: str | None,
                 ranks_per_node: int | None, device: str | None, max_bytes: int,
                 iters: int, link_bytes: int, steps: int, timeout: float, pending_timeout: float,
                 workdir: str | None, options: tuple[str, ...], junit: str | None,
                 report: str | None, compare: str | None, no_history: bool,
                 allocation: str | None, quick: bool, dry_run: bool, as_json: bool) -> None:
    """Submit multi-node allreduce and training jobs, measure, judge, report (exit 0 = pass)."""
    from hpcprov.validate.api import ValidateOptions, plan_validation, validate
    from hpcprov.validate.report import checks_ran, table

    wanted = None if checks is None else tuple(c.strip() for c in checks.split(",")
                                               if c.strip())
    through = tuple(n.strip() for n in (launchers or "").split(",") if n.strip())
    opts = ValidateOptions(
        site=site, partition=partition, nodes=nodes, checks=wanted, launchers=through,
        prefix=prefix,
        ranks_per_node=ranks_per_node, device=device, max_bytes=max_bytes, iters=iters,
        link_bytes=link_bytes, steps=steps, timeout=timeout, pending_timeout=pending_timeout,
        workdir=workdir, options=options, junit=junit, report=report, compare=compare,
        history=not no_history, allocation=allocation, quick=quick)
    if dry_run:
        planned = plan_validation(opts)
        if as_json:
            _emit_json(planned.to_json())
        else:
            for p in planned.scripts:
                click.echo(f"# ==> {safe(p.path)} <==")
                click.echo(p.text, nl=False)
            for s in planned.skipped:
                click.echo(f"hpcprov: SKIPPED {safe(s.name)}: {safe(s.reason)}", err=True)
            for note in planned.notes:
                click.echo(f"hpcprov: {safe(note)}", err=True)
        return
    say = (lambda m: None) if as_json else (lambda m: click.echo(f"hpcprov: {m}", err=True))
    result = validate(opts, say)
    if as_json:
        _emit_json(result.to_json())
    else:
        click.echo(table(result.outcomes))
        verdict = "PASS" if result.ok else "FAIL"
        queued = (f", {result.submissions} submission(s) ({result.allocation})"
                  if result.submissions else "")
        ran = checks_ran(result.document)
        ran = f"{ran}, " if ran else ""
        click.echo(f"hpcprov: {verdict}: {ran}{result.site}/{result.partition}, "
                   f"{result.nodes} node(s), {result.seconds:.1f} s (harness overhead "
                   f"{result.overhead_s:.2f} s{queued}); run directory {result.rundir}")
    if not result.ok:
        raise click.exceptions.Exit(1)


@cli.command("guide")
@site_option
@click.option("--partition", "-p")
def guide_cmd(site: str | None, partition: str | None) -> None:
    """Print the site's walkthrough for a new user (Markdown)."""
    from hpcprov.app.guide import render_guide

    click.echo(safe(render_guide(_load(site), partition, ref=site), lines=True), nl=False)


@cli.command("completion")
@click.argument("shell", type=click.Choice(["bash", "zsh", "fish"]))
def completion_cmd(shell: str) -> None:
    """Print the shell completion script: eval "$(hpcprov completion bash)"."""
    from click.shell_completion import get_completion_class

    comp_cls = get_completion_class(shell)
    assert comp_cls is not None
    comp = comp_cls(cli, {}, "hpcprov", "_HPCPROV_COMPLETE")
    click.echo(comp.source())


def _stdout_lost() -> None:
    """After stdout failed (a closed pipe, a full disk): point it at /dev/null, so the
    interpreter's last flush has nothing left to fail on (no 'Exception ignored')."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):  # not a real file (tests capture it)
        pass


def _output_error(exc: OSError) -> int:
    """An OSError no command handled: writing the output failed (stdout on a full disk),
    or a file could not be read or written. One error line, exit status 2."""
    _stdout_lost()
    what = f"{exc.filename}: " if exc.filename else "cannot write the output: "
    _print_error(f"{what}{exc.strerror or exc}")
    return 2


def main(argv: list[str] | None = None) -> int:
    """Entry point: errors become one line on stderr and exit status 2 (never a traceback),
    hpcprov's warnings one `hpcprov: warning:` line each. Stdout is flushed here, so a
    failure to write the output (a full disk) is such an error too."""
    from hpcprov.core.errors import HpcprovWarning

    with warnings.catch_warnings():
        warnings.simplefilter("default", HpcprovWarning)  # each once per command
        warnings.showwarning = _show_warning
        try:
            rc = _run(argv)
            sys.stdout.flush()
        except BrokenPipeError:  # the reader went away (| head): not an error
            _stdout_lost()
            return 0
        except OSError as exc:
            return _output_error(exc)
    return rc


def _json_error(argv: list[str] | None, message: str, code: int) -> None:
    """With --json (before any ``--``), an error is also a JSON object on stdout, so a
    program reading the output always gets JSON; the exit status stays the error's."""
    args = sys.argv[1:] if argv is None else argv
    mine = args[:args.index("--")] if "--" in args else args
    if "--json" in mine:
        click.echo(json.dumps({"ok": False, "error": str(message), "exit_code": code}))


def _run(argv: list[str] | None) -> int:
    """Run the command; its errors as one line each (and as JSON with --json), the exit
    status returned."""
    from hpcprov.core.errors import HpcprovError

    try:
        rc = cli.main(args=argv, prog_name="hpcprov", standalone_mode=False)
    except click.exceptions.Exit as exc:
        return exc.exit_code
    except click.exceptions.Abort:  # Ctrl-C outside a run that cancels its jobs
        _print_error("aborted")
        _json_error(argv, "aborted", 130)
        return 130
    except click.exceptions.NoArgsIsHelpError as exc:
        click.echo(exc.ctx.get_help() if exc.ctx else "")
        return 0
    except click.ClickException as exc:
        ctx = getattr(exc, "ctx", None)
        hint = f" (see: {ctx.command_path} --help)" if ctx else ""
        _print_error(exc.format_message() + hint)
        _json_error(argv, exc.format_message() + hint, 2)
        return 2
    except HpcprovError as exc:
        _print_error(str(exc))
        _json_error(argv, str(exc), exc.exit_code)
        return exc.exit_code
    return rc if isinstance(rc, int) else 0


if __name__ == "__main__":
    sys.exit(main())
