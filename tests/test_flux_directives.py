"""`# flux:` directives as flux batch reads them (RFC 36; issue 41, defect 5).

flux-core's directive parser is not a POSIX shell: a run of three quote characters is a
"triple quote" it rewrites (or refuses) before splitting the line, and inside single quotes
a backslash escapes. hpcprov quoted directives for a POSIX shell, so a `'` in a job name made
flux batch refuse the script and `x\"\"\" --nodes=64 \"\"\"` made it read `--nodes=64`.

Every case runs through flux-core's own parser (flux/job/directives.py of flux-python, a
development dependency; it loads without libflux-core), which the emulator's `flux batch`
reads scripts with too (tests/flux_emulator.py :func:`parse_directives`): RFC 36's own
examples, what that parser does where the RFC says nothing, and hpcprov's directives read
back as the words hpcprov means. (An earlier reimplementation of its rules, kept for machines
without flux-python, was compared with it here; flux-python is now required instead.)
"""

from __future__ import annotations

import json
import os
import random
import shlex
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from flux_emulator import parse_directives
from hpcprov_tests import cli

from hpcprov.core.errors import UsageError
from hpcprov.schedulers.flux import directive

EMULATOR = Path(__file__).with_name("flux_emulator.py")
Outcome = list[tuple[int, str, list[str]]] | str  # the directives, or "error"


def outcome(parse: Callable[[str], Outcome | None], script: str) -> Outcome | None:
    try:
        return parse(script)
    except ValueError:
        return "error"


def both(script: str) -> Outcome:
    """The script's directives as flux batch reads them (flux-core's parser)."""
    found = outcome(parse_directives, script)
    assert found is not None
    return found


def setargs(*words: str, line: int = 1) -> list[tuple[int, str, list[str]]]:
    return [(line, "SETARGS", list(words))]


# RFC 36's own examples (flux-framework/rfc spec_36.rst), and what each reads as
RFC_EXAMPLES = [
    # a comment inside a directive
    ("# flux: -N4 # -c2 : comment out for now\n", setargs("-N4")),
    # triple quotes hold quotes without escaping
    ('# flux: --setattr=user.foo="""{"key": 42}"""\n',
     setargs('--setattr=user.foo={"key": 42}')),
    ("# flux: --setattr=user.bar='''It's a \"job\"'''\n",
     setargs("--setattr=user.bar=It's a \"job\"")),
    ("# flux: --job-name='''It's a \"job\"'''\n", setargs("--job-name=It's a \"job\"")),
    # a multi-line literal
    ('# flux: --setattr=user.conf="""\n# flux: [config]\n# flux:   item = "foo"\n'
     '# flux: """\n', setargs('--setattr=user.conf=[config]\n  item = "foo"\n')),
    # comments between directives that share the prefix do not end them
    ("# flux: -N 4 -c 2\n# Set job name:\n# flux: --job-name\n",
     [(1, "SETARGS", ["-N", "4", "-c", "2"]), (3, "SETARGS", ["--job-name"])]),
    # maximum nostalgia mode
    ("#!/bin/sh\n#FLUX: -N4                  # Request four nodes\n"
     "#FLUX: --queue=batch        # Submit to the batch queue\n"
     "#FLUX: --job-name=app001    # Set an explicit job name\nflux run -N4 app\n",
     [(2, "SETARGS", ["-N4"]), (3, "SETARGS", ["--queue=batch"]),
      (4, "SETARGS", ["--job-name=app001"])]),
    # in a Python docstring, with a multi-line directive
    ('#!/usr/bin/env python3\ndef main():\n    """\n    flux: -N4\n    flux: --queue=batch\n'
     '    flux: --job-name="my python job"\n     \n    # Set some arbitrary user data:\n'
     "    flux: --setattr=user.data='''\n    flux: x, y, z\n    flux: a, b, c\n"
     "    flux: '''\n    \"\"\"\n    run()\n",
     [(4, "SETARGS", ["-N4"]), (5, "SETARGS", ["--queue=batch"]),
      (6, "SETARGS", ["--job-name=my python job"]),
      (9, "SETARGS", ["--setattr=user.data=x, y, z\na, b, c\n"])]),
    # Lua: several options in one directive
    ("#!/usr/bin/lua\n--\n-- flux: -N1 --exclusive\n-- flux: --output=job.out\n"
     "local app = require 'app'\napp.run()\n",
     [(3, "SETARGS", ["-N1", "--exclusive"]), (4, "SETARGS", ["--output=job.out"])]),
    ("#!/bin/sh\n# Set flux directives\n#FLUX: -N1\n# Set job name:\n"
     "#FLUX: --job-name=test\nhostname; date\n",
     [(3, "SETARGS", ["-N1"]), (5, "SETARGS", ["--job-name=test"])]),
    ('#!/usr/bin/env python3\n"""\nflux: --nodes=4\n\nSet an arbitrary value in jobspec:\n'
     'flux: --setattr=user.foo="hello, earth"\n"""\n',
     [(3, "SETARGS", ["--nodes=4"]), (6, "SETARGS", ["--setattr=user.foo=hello, earth"])]),
    # single quotes quote double quotes
    ("# flux: --setattr=user.data='{\"option\": \"arg\"}'\n",
     setargs('--setattr=user.data={"option": "arg"}')),
    # errors: a directive after the directives ended (orphan), a changed sentinel
    ("# flux: -N4\n# flux: -c2\necho hello, world\n# flux: --queue=batch\n", "error"),
    ("#!/bin/sh\n#FLUX: -N1\nhostname; date\n#FLUX: --job-name=test\n", "error"),
    ("# flux: -N4\n#flux: -c2\n", "error"),
]


@pytest.mark.parametrize(("script", "want"), RFC_EXAMPLES)
def test_flux_cores_parser_reads_rfc36s_examples_as_the_rfc_says(
        script: str, want: Outcome) -> None:
    assert both(script) == want


# Where flux-core's parser (flux-python 0.88.0, flux/job/directives.py) reads a line otherwise
# than a POSIX shell would; each case checked against that parser
QUIRKS = [
    # any three quote characters are a triple quote: POSIX's '"'"' for a quote is refused
    ("# flux: '--job-name=it'\"'\"'s'\n", "error"),
    # ... and a paired triple quote inside single quotes is rewritten: three words, not one
    ("# flux: '--job-name=x\"\"\" --nodes=64 --setattr=system.evil=1 \"\"\"'\n",
     setargs("--job-name=x", "--nodes=64", "--setattr=system.evil=1", "")),
    # a backslash escapes inside single quotes
    ("# flux: '--job-name=a\\'b'\n", setargs("--job-name=a'b")),
    ("# flux: '--job-name=a\\\\b'\n", setargs("--job-name=a\\b")),
    ("# flux: '--job-name=a\\b'\n", setargs("--job-name=a\\b")),
    # and outside quotes, as in a shell
    ("# flux: --job-name=it\\'s\\\"\\\\\n", setargs("--job-name=it's\"\\")),
    # `#` comments out the rest of the line inside a word too
    ("# flux: -N4 a#b c\n", setargs("-N4", "a")),
    # `();<>|&` are words of their own
    ("# flux: -J a;b&&c\n", setargs("-J", "a", ";", "b", "&&", "c")),
    # a carriage return ends the line (universal newlines)
    ("# flux: -J 'a\rb'\n", "error"),
    # three quote characters at the end of the line open a multi-line string, which the end
    # of the script drops without a word
    ("# flux: -J '''\n# flux: x\n", []),
    ("# flux: -J '\"'\n", setargs("-J", '"')),
    ("# flux:\n", []),
    ("# flux: \n", [(1, "NOOP", [])]),
    ("# flux: x\n", "error"),
]


@pytest.mark.parametrize(("script", "want"), QUIRKS)
def test_flux_cores_parser_is_no_shell_where_hpcprovs_quoting_must_know_it(
        script: str, want: Outcome) -> None:
    assert both(script) == want


# --- hpcprov's directives ---------------------------------------------------------------------

HOSTILE = [
    "it's", 'x""" --nodes=64 --setattr=system.evil=1 """', "x''' --nodes=64 '''", '"""',
    "'''", "'\"'", "\"'\"", '""', "''", '"', "'", "\\", "a\\b", "a\\'b", "\\\\'", "x'''",
    'a "b" \'c\'', "a#b", "#", " lead and trail ", "a;b&c|d", "$(id) `id` ${X}", "é ü 漢",
    "--nodes=64", "", "\t", "''''''", '"""x"""',
]


@pytest.mark.parametrize("value", HOSTILE)
def test_a_directive_reads_back_as_the_words_hpcprov_means(value: str) -> None:
    for name, want in (("job-name", [f"--job-name={value}"]), ("queue", ["-q", value]),
                       ("setattr", [f"--setattr={value}"])):
        text = directive(name, value)
        assert both(f"#!/bin/bash\n# flux: {text}\nhostname\n") == setargs(*want, line=2)
        assert shlex.split(text) == want  # and a POSIX shell reads the same words


def test_random_values_round_trip_through_the_directive_parser() -> None:
    rng = random.Random(5)
    alphabet = "'\"\\ #;&|<>()$`*?~=-_.\tabcé漢"
    for _ in range(2000):
        value = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 10)))
        text = directive("job-name", value)
        assert both(f"# flux: {text}\n") == setargs(f"--job-name={value}"), text
        assert shlex.split(text) == [f"--job-name={value}"]


@pytest.mark.parametrize("value", ["a\nb", "a\rb", "a\r\nb", "a\r"])
def test_a_line_break_in_a_directive_is_refused(value: str) -> None:
    with pytest.raises(UsageError, match="newline or a carriage return"):
        directive("job-name", value)


def test_a_directive_that_is_no_utf8_text_is_refused() -> None:
    with pytest.raises(UsageError, match="UTF-8"):
        directive("job-name", "a\udcffb")  # a byte that was no UTF-8, as Python decodes argv


def test_a_job_script_with_a_hostile_job_name_reads_as_meant(
        capsys: pytest.CaptureFixture[str]) -> None:
    name = "it's \"x\"\"\" --nodes=64 \\ \"\"\""
    res = cli(capsys, "jobscript", "--site", "flux-example", "-N", "2", "-J", name,
              "--", "python", "train.py")
    assert res.rc == 0, res.err
    found = both(res.out)
    assert found != "error", res.out
    args = [w for _, _, words in found for w in words]
    assert args[:2] == [f"--job-name={name}", "-t"]
    assert "--nodes=64" not in args and args[args.index("-N"):][:2] == ["-N", "2"]


# --- the emulator's flux batch reads directives as flux does ----------------------------------

def _batch(tmp_path: Path, script_text: str) -> subprocess.CompletedProcess[str]:
    script = tmp_path / "job.sh"
    script.write_text(script_text)
    env = {**os.environ, "FLUX_EMULATOR_DIR": str(tmp_path / "state"),
           "FLUX_EMULATOR_HOLD": "1"}
    return subprocess.run([sys.executable, str(EMULATOR), "batch", str(script)], env=env,
                          capture_output=True, text=True, check=False)


def test_the_emulators_flux_batch_refuses_what_flux_refuses(tmp_path: Path) -> None:
    proc = _batch(tmp_path, "#!/bin/bash\n# flux: '--job-name=it'\"'\"'s'\nhostname\n")
    assert proc.returncode == 1
    assert "flux-batch: ERROR:" in proc.stderr and "triple quote" in proc.stderr


@pytest.mark.parametrize(("line", "nodes"), [
    ("-N 3", 3), ("-N3", 3), ("--nodes=3", 3), ("-n 8 --nodes 3 # four", 3),
    ("'-N' \"3\"", 3), ("-N 2\n# flux: -N 3", 3), ("--nodes=3 # -N 5", 3)])
def test_the_emulators_flux_batch_takes_the_node_count_from_the_parsed_directives(
        tmp_path: Path, line: str, nodes: int) -> None:
    proc = _batch(tmp_path, f"#!/bin/bash\n# flux: {line}\nhostname\n")
    assert proc.returncode == 0, proc.stderr
    (state,) = [p for p in (tmp_path / "state").glob("f*.json")]
    assert json.loads(state.read_text())["nodes"] == nodes
