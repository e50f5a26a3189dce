"""One spelling record per scheduler (hpcprov.schedulers.spelling): its directives read back.

Each registered scheduler's record writes hostile values (quotes, blanks, ``#``, ``$``,
backslashes, triple quotes) into a directive, and its emulator's directive parser (the
scheduler's own reading rules, tests/*_emulator.py; flux-core's parser where it is
installed) must read back exactly the words the record means, or the record must refuse the
value in its own words. Planning and the emulators read the same record object: a job script
planned for the scheduler's conformance profile is read back option for option, and its
submit line is the record's. A scheduler joins these tests by its ``EMULATED`` entry in
tests/test_backend_conformance.py (the emulator it names); one without a record (``none``)
writes no directives.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from types import ModuleType

import pytest
from test_backend_conformance import EMULATED

from hpcprov import schedulers
from hpcprov.core.errors import UsageError
from hpcprov.jobs.api import plan_jobscript, request
from hpcprov.schedulers.base import Backend
from hpcprov.schedulers.spelling import SLURM, Spelling, sbatch_word

HOSTILE = [
    "it's", 'say "hi"', "a b", "two  spaces", "a#b", "#start", "x #comment", "$HOME",
    "${HOME}", "$(id)", "`id`", "a\\b", "end\\", "\\", "\\'", "'", '"', "'''", '"""',
    "x'\"'y", "a=b,c:d", "semi;colon|pipe&", "(paren)", "span[ptile=4]", "ünïcode",
]
# what each record refuses, by design: no form of it reaches the scheduler intact
REFUSES = {
    "pbs": lambda v: any(c.isspace() for c in v),    # PBS splits a #PBS line at blanks
    "lsf": lambda v: any(c in v for c in '"$`\\'),   # nothing escapes inside a #BSUB "..."
    # Grid Engine drops quotes from a #$ line and ends it at a #
    "gridengine": lambda v: any(c in v for c in "'\"#"),
}
# job names for the planned scripts, the most hostile first: each scheduler gets the first
# one its record writes
JOB_NAMES = ["it's \"q\" #1 $HOME `id` a\\b", "it's#1$HOME\\b\"q\"'''", "it's a #1 (x)",
             "it is $HOME `id` a\\b (x)"]
SPELLED = [b.name for b in schedulers.all_backends() if b.spelling is not None]


def emulator(backend: Backend) -> ModuleType:
    """The module of the emulator the backend's conformance entry names."""
    name = EMULATED[backend.name].emulator
    assert name is not None, f"{backend.name} has a spelling record but no emulator"
    return importlib.import_module(Path(name).stem)


def spelling(backend: Backend) -> Spelling:
    assert backend.spelling is not None
    return backend.spelling


def test_every_scheduler_but_none_has_a_record_of_its_own() -> None:
    for backend in schedulers.all_backends():
        if backend.name == "none":  # no scheduler: no directives, `bash SCRIPT`
            assert backend.spelling is None and backend.submit_argv("x") == ["bash", "x"]
            continue
        assert backend.spelling is not None, f"{backend.name} has no spelling record"
        assert backend.spelling.scheduler == backend.name


@pytest.mark.parametrize("name", SPELLED)
@pytest.mark.parametrize("option", ["job-name", "comment", "P"])
def test_hostile_values_read_back_through_the_schedulers_own_parser(
        name: str, option: str) -> None:
    backend = schedulers.backend(name)
    record, parser = spelling(backend), emulator(backend)
    read_back = 0
    for value in HOSTILE:
        refused = REFUSES.get(name, lambda v: False)(value)
        try:
            line = record.directive(option, value)
        except UsageError as exc:
            assert refused, f"{name} refused {value!r}: {exc}"
            assert str(exc).startswith(f"option {option}={value!r}: ")
            continue
        assert not refused, f"{name} wrote {value!r} it cannot carry: {line}"
        assert line.startswith(record.prefix + " ")
        script = f"#!/bin/bash\n{line}\nhostname\n"
        assert parser.directive_args(script) == record.argv(option, value), line
        read_back += 1
    assert read_back >= len(HOSTILE) // 2


@pytest.mark.parametrize("name", SPELLED)
def test_a_planned_script_reads_back_option_for_option_and_submits_as_the_record_says(
        name: str) -> None:
    backend = schedulers.backend(name)
    record, parser = spelling(backend), emulator(backend)
    assert parser.SPELLING is record  # the emulator reads planning's record, no copy
    entry = EMULATED[name]
    job_name = next(v for v in JOB_NAMES if _writes(record, v))
    # a mandatory account too
    comment = {"pbs": "comment=x#y", "gridengine": "comment=x $y"}.get(name, "comment=x #y")
    req = request(entry.site, (comment, "account=proj-1"), store=False,
                  partition=entry.partition, job_name=job_name, command=("true",))
    job = plan_jobscript(req)
    words = [w for n, v in backend.options(req, batch=True)
             for w in record.argv(n, backend.written(n, v))]
    assert parser.directive_args(job.script) == words
    assert record.argv("job-name", job_name)[-1].endswith(job_name)
    assert job_name in [w.split("=", 1)[-1] for w in words]
    assert job.submit[:len(record.submit)] == list(record.submit)
    assert job.submit[-1] == "job.sh"


def _writes(record: Spelling, value: str) -> bool:
    try:
        record.text("job-name", value)
    except UsageError:
        return False
    return True


def test_sbatch_reads_a_backslash_as_an_escape_inside_quotes_too() -> None:
    """Shell quoting alone ('a\\b') would reach sbatch as ab: each backslash is doubled."""
    assert sbatch_word("--comment=a\\b") == "'--comment=a\\\\b'"
    assert sbatch_word("--comment=it's") == "'--comment=it'\"'\"'s'"
    assert sbatch_word("--job-name=plain") == "--job-name=plain"
    with pytest.raises(ValueError, match="hetjob"):
        sbatch_word("--job-name=my-HetJob")


def test_names_of_one_flag_share_a_key_and_messages_name_the_flag() -> None:
    assert SLURM.key("A") == SLURM.key("account") == "--account"
    lsf = schedulers.backend("lsf")
    assert lsf.flag_key("P") == lsf.flag_key("account") == lsf.flag_key("project") == "-P"
    assert lsf.option_name("account") == "-P (account)"
    pbs = schedulers.backend("pbs")
    assert pbs.option_name("select") == "-l select" and pbs.option_name("P") == "-P"
    flux = schedulers.backend("flux")
    assert flux.flag_key("B") == flux.flag_key("account") == "--bank"
