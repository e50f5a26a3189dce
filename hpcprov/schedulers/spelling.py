"""How each scheduler spells a job: one record per scheduler (:class:`Spelling`).

A record holds the directive prefix (``#SBATCH``), the flags of the job options hpcprov
writes (``job-name``: ``-J``...) and the scheduler's one-letter ones, how each word of a
directive is quoted so that the scheduler's own directive parser reads it back, and the
submit line. Planning (each backend's directives, submit and allocation lines, its
executor's submission), lint (how an option is named in a message; the names of one flag
are one option: :meth:`Spelling.key`) and the emulators of the tests (``tests/*_emulator.py``,
which read directives back with the scheduler's own reading rules) read these records;
nothing else spells a scheduler's flags or quotes its directives.

Options are hpcprov's (name, value) pairs: Slurm-style long names (``job-name``,
``account``) or the scheduler's own flag without its dash (``P`` for ``-P``). A value's unit
(LSF's minutes, Flux's durations, PBS's hours) is the backend's (:meth:`Backend.written`).

A quoting rule is data where it is data (:class:`Quoting`: PBS and LSF), a named function
where it is not (Slurm: :func:`sbatch_word`; Flux: :func:`rfc36_word`).

This module imports only the standard library and ``hpcprov.core``: the emulators load it.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from hpcprov.core.errors import UsageError
from hpcprov.core.text import shown


@dataclass(frozen=True)
class Quoting:
    """A quoting rule that is data: a word holding anything ``refused`` matches is refused
    (no form of it survives the scheduler's parser: ``why`` says so); a word that ``bare``
    matches whole is written as it is; any other inside ``wrap``, before and after."""

    bare: str     # a word written as it is (a regular expression it matches whole)
    wrap: str     # the quote character around any other word ("" where none is read)
    refused: str  # what no word may hold (a regular expression searched for)
    why: str      # the refusal, in words

    def __call__(self, word: str) -> str:
        if re.search(self.refused, word):
            raise ValueError(self.why)
        if re.fullmatch(self.bare, word) or not self.wrap:
            return word
        return f"{self.wrap}{word}{self.wrap}"


def sbatch_word(word: str) -> str:
    r"""One word of an ``#SBATCH`` line, read back as ``word`` by sbatch's directive parser
    (``_get_argument`` in Slurm's src/sbatch/opt.c): single and double quotes group as in a
    shell and ``#`` outside them ends the line, but a backslash escapes the next character
    inside quotes too. So a word is quoted as for a POSIX shell (``'it'"'"'s'``, a safe word
    bare) with each backslash doubled. Refused: ``hetjob`` or ``packjob`` anywhere (any
    case), which sbatch takes as the start of another component of a heterogeneous job."""
    if re.search(r"(?i)hetjob|packjob", word):
        raise ValueError("sbatch reads 'hetjob' or 'packjob' anywhere in an #SBATCH line as "
                         "the start of another job's options")
    quoted = shlex.quote(word)
    return word if quoted == word else quoted.replace("\\", "\\\\")


# what a # flux: word writes backslash-escaped, outside quotes (rfc36_word)
_RFC36_SPECIAL = ("'", '"', "\\")


def rfc36_word(word: str) -> str:
    r"""One word of a ``# flux:`` line, read back as ``word`` both by a POSIX shell and by
    flux batch's directive parser (RFC 36, flux-core's ``flux.job.directives``), which
    differs from a shell in two ways that matter here: any run of three quote characters
    (three single quotes, three double quotes, or mixed: ``'"'``) is a triple quote,
    rewritten or refused before the line is split into words; and inside single quotes a
    backslash escapes a quote or a backslash. So a word with a quote or a backslash has each
    ``'``, ``"`` and ``\`` backslash-escaped outside quotes and the rest single-quoted
    (``it's`` as ``it\'s``, not the shell's ``'it'"'"'s'``, which flux refuses): no three
    quote characters ever meet, and no backslash stands inside quotes. Any other word is
    quoted as for the shell. Refused: a line break (flux reads the script with universal
    newlines: a carriage return ends the line as a newline does), and what is no UTF-8 text
    (flux batch refuses the whole script)."""
    if "\n" in word or "\r" in word:
        raise ValueError("a # flux: line cannot hold a newline or a carriage return")
    try:
        word.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError("a # flux: line must be UTF-8 text, as flux batch reads the "
                         "script") from None
    if not any(c in word for c in _RFC36_SPECIAL):
        return shlex.quote(word)
    return "".join("\\" + part if part in _RFC36_SPECIAL else shlex.quote(part)
                   for part in re.findall(r"[^'\"\\]+|.", word, re.S))


@dataclass(frozen=True)
class Spelling:
    """How one scheduler spells a job's options, its directives and its submission."""

    scheduler: str                # the registry's name (``slurm``)
    prefix: str                   # a directive line: the prefix, a space, the option's words
    submit: tuple[str, ...]       # the submit command; the script's path follows
    quote: Callable[[str], str]   # one word of a directive, as the scheduler's parser reads it
    # hpcprov's option names the scheduler spells with a flag of its own (``job-name``: -J)
    flags: Mapping[str, str] = field(default_factory=dict)
    # the scheduler's one-letter flags and the long option name each is (``A``: account)
    short: Mapping[str, str] = field(default_factory=dict)
    single: str = "-"             # before a one-letter name not in ``flags``
    long: str = "--"              # before a longer one (PBS: ``-l ``, a resource; LSF: ``-``)
    # flags that take their value in the same word after ``=``, by how they start
    attached: tuple[str, ...] = ("--",)
    stdin: bool = False           # the submit command reads the script on stdin (bsub < FILE)
    # flags whose value is several words, apart at blanks (Grid Engine's -pe NAME SLOTS)
    several: frozenset[str] = frozenset()

    def flag(self, name: str) -> str:
        """The flag the option ``name`` is written with (``-l select`` for a PBS resource)."""
        found = self.flags.get(name)
        if found is not None:
            return found
        return (self.single if len(name) == 1 else self.long) + name

    def key(self, name: str) -> str:
        """The flag the scheduler reads the option ``name`` as, a one-letter name as its long
        one: two names with one key are one option (``account`` and ``A``)."""
        return self.flag(self.short.get(name, name))

    def named(self, name: str) -> str:
        """The option ``name`` as the scheduler's users write it, for messages: its flag,
        with hpcprov's name where the two differ (``-J (job-name)``)."""
        flag = self.flag(name)
        return f"{flag} ({name})" if name in self.flags else flag

    def argv(self, name: str, value: str | None) -> list[str]:
        """One option as the scheduler's words, unquoted (a command line's argv items):
        ``--job-name=x``, ``-J x``, ``-l select=2``."""
        words = self.flag(name).split(" ")
        if value is None:
            return words
        if self.flag(name) in self.several:
            return [*words, *value.split()]
        if self.flag(name).startswith(self.attached):
            return [*words[:-1], f"{words[-1]}={value}"]
        return [*words, value]

    def text(self, name: str, value: str | None) -> str:
        """One option as the text after a directive's prefix, each word quoted by the
        scheduler's rule; a value no form of which the scheduler would read back is
        refused (UsageError)."""
        try:
            return " ".join(self.quote(w) for w in self.argv(name, value))
        except ValueError as exc:
            raise UsageError(f"option {name}={shown(value)}: {exc}") from None

    def directive(self, name: str, value: str | None) -> str:
        """One option as a directive line (``#SBATCH --job-name=x``)."""
        return f"{self.prefix} {self.text(name, value)}"


SLURM = Spelling(
    "slurm", "#SBATCH", ("sbatch",), sbatch_word, single="--",
    # sbatch's one-letter options and their long names (hpcprov writes long names only)
    short=MappingProxyType({
        "A": "account", "b": "begin", "C": "constraint", "c": "cpus-per-task", "D": "chdir",
        "d": "dependency", "e": "error", "G": "gpus", "H": "hold", "i": "input",
        "J": "job-name", "k": "no-kill", "L": "licenses", "M": "clusters", "m": "distribution",
        "N": "nodes", "n": "ntasks", "O": "overcommit", "o": "output", "p": "partition",
        "q": "qos", "Q": "quiet", "S": "core-spec", "s": "oversubscribe", "t": "time",
        "W": "wait", "w": "nodelist", "x": "exclude",
    }))

# PBS reads a #PBS line's words apart at whitespace and hpcprov writes them as they are;
# the qsub flags of hpcprov's names, a one-letter name is qsub's own flag (P: -P), any other
# a -l resource (-l select=...)
PBS = Spelling(
    "pbs", "#PBS", ("qsub",),
    Quoting(bare=r"\S*", wrap="", refused=r"\s",
            why="PBS reads whitespace in a #PBS line as the start of another option; give "
                "the value without spaces"),
    flags=MappingProxyType({
        "job-name": "-N", "account": "-A", "partition": "-q", "queue": "-q", "output": "-o",
        "error": "-e", "mail-user": "-M", "mail-type": "-m", "join": "-j",
    }),
    long="-l ", attached=("-l ",))

# LSF: a value with brackets or spaces (span[ptile=4]) in double quotes as LSF's
# documentation writes them; any other name is bsub's own flag as LSF spells it (-G, -alloc_flags)
LSF = Spelling(
    "lsf", "#BSUB", ("bsub",),
    Quoting(bare=r"[A-Za-z0-9_.,:=%+@/*-]+", wrap='"', refused=r'["$`\\]',
            why="quotes, $, ` and \\ cannot be written in a #BSUB line"),
    flags=MappingProxyType({
        "job-name": "-J", "account": "-P", "project": "-P", "partition": "-q", "queue": "-q",
        "output": "-o", "error": "-e", "time": "-W", "ntasks": "-n", "nodes": "-nnodes",
        "resource": "-R", "gpu": "-gpu", "exclusive": "-x", "mail-user": "-u",
    }),
    long="-", attached=(), stdin=True)

FLUX = Spelling(
    "flux", "# flux:", ("flux", "batch"), rfc36_word,
    flags=MappingProxyType({
        "job-name": "--job-name", "account": "--bank", "bank": "--bank", "partition": "-q",
        "queue": "-q", "time": "-t", "time-limit": "-t", "nodes": "-N", "ntasks": "-n",
        "nslots": "-n", "cores-per-slot": "-c", "gpus-per-slot": "-g", "output": "--output",
        "error": "--error", "exclusive": "--exclusive", "setattr": "--setattr",
        "dependency": "--dependency", "requires": "--requires",
    }),
    # flux batch's one-letter options and the names hpcprov writes them from
    short=MappingProxyType({"B": "bank", "q": "queue", "t": "time", "S": "setattr"}))

# Grid Engine (Son of Grid Engine 8.1.9's qsub, tried on the testbed's real cell): a #$ line
# is split at blanks; a stretch in quotes, single or double, stays one word and the quote
# characters are dropped (no quote is ever read as itself, and nothing escapes one); a #
# ends the line, in quotes too; $ and \ are read as they are. hpcprov's names with a qsub
# flag, qsub's own multi-letter flags, a one-letter name as its flag (-A, -P, -g...), any
# other name a -l resource (-l h_rt=1:00:00, -l gpu=1)
GRIDENGINE = Spelling(
    "gridengine", "#$", ("qsub", "-terse"),
    Quoting(bare=r"[^\s'\"#]+", wrap='"', refused=r"['\"#\n\r]",
            why="Grid Engine's qsub drops quote characters from a #$ line and ends it at a "
                "#: a value cannot hold ', \" or #"),
    flags=MappingProxyType({
        "job-name": "-N", "account": "-A", "project": "-P", "partition": "-q", "queue": "-q",
        "output": "-o", "error": "-e", "join": "-j", "mail-user": "-M", "mail-type": "-m",
        "shell": "-S", **{f: f"-{f}" for f in (
            "pe", "cwd", "wd", "hold_jid", "hold_jid_ad", "now", "binding", "masterq",
            "ckpt", "notify", "sync", "tc", "pty", "js", "jsv", "ar", "ac", "dc", "sc",
            "dl", "hard", "soft", "clear", "verify", "R", "V")},
    }),
    # qsub's one-letter flags hpcprov writes under a name of its own
    short=MappingProxyType({"N": "job-name", "A": "account", "P": "project", "q": "queue",
                            "o": "output", "e": "error", "j": "join", "S": "shell"}),
    long="-l ", attached=("-l ",), several=frozenset({"-pe"}))
