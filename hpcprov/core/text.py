"""The text rules, in one place: which characters a value may hold, and how text from
elsewhere is shown.

A *single-line* value (a name, a path, a module, an option value: anything that may reach a
shell line, a directive or a YAML scalar) holds no control character: C0 (newline and tab
included), DEL, or C1 (ESC and \\x9b start terminal escape sequences). *Free text* (the
fields named in :data:`FREE_TEXT`: descriptions, notes, guide sections) may span lines and
hold tabs, nothing else of those. The typed site (validated or read from the cache), job
options, the site draft and the command line's printing all use these definitions.
"""

from __future__ import annotations

import re

# C0, DEL and C1
CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
# the same less newline and tab: what free text and a terminal line may not hold
TEXT_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
# the profile fields that are free text (by field name, at any depth)
FREE_TEXT = frozenset({"description", "note", "notes", "reason", "guide"})

SINGLE_LINE_RULE = "control characters (newlines, tabs, escapes) are not allowed here"
TEXT_RULE = ("control characters other than newline and tab (escape sequences a terminal "
             "would obey) are not allowed in text")


def has_control(value: str, free: bool = False) -> bool:
    """True when ``value`` breaks the single-line rule (or the free-text one, ``free``)."""
    return (TEXT_CONTROL if free else CONTROL).search(value) is not None


def printable(text: str, replacement: str = "?") -> str:
    """``text`` with every control character (newline and tab included) replaced."""
    return CONTROL.sub(replacement, text)


def for_terminal(text: object, lines: bool = False) -> str:
    """``text`` for a terminal: every control character escaped as ``\\xNN`` (tabs kept);
    newlines kept with ``lines``, else escaped too (one line stays one line)."""
    out = TEXT_CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", str(text))
    return out if lines else out.replace("\n", "\\n")


def status_number(text: str | None) -> int | None:
    """An exit status or code as a scheduler or a job's trap writes it: ASCII digits, an
    optional minus, at most 9 digits; anything else (``²``, which ``str.isdigit`` takes
    and ``int`` refuses; Arabic-Indic digits, which ``int`` takes; 5000 digits, which
    ``int`` refuses) is no status: None."""
    text = (text or "").strip()
    number = ascii_int(text.removeprefix("-"), 9)
    return None if number is None else (-number if text.startswith("-") else number)


_DIGITS = r"[0-9]+"
_DECIMAL = r"[0-9]+(?:\.[0-9]+)?"


def ascii_int(text: str | None, digits: int = 15) -> int | None:
    """A count or size as a scheduler writes it (CPUs, MB, nodes, GPUs): ASCII digits only,
    at most ``digits`` of them, blanks around ignored; anything else (``²``, Arabic-Indic
    digits, a sign, ``1_000``, 5000 digits, ``UNLIMITED``) is no number: None."""
    text = (text or "").strip()
    return int(text) if len(text) <= digits and re.fullmatch(_DIGITS, text) else None


def ascii_decimal(text: str | None, digits: int = 15) -> float | None:
    """A decimal number as a scheduler writes it (``15.8``, ``720.0``): ASCII digits with at
    most one point, at most ``digits`` characters; anything else (``1.2.3``, ``²``, 5000
    digits, which float() would make infinite) is no number: None."""
    text = (text or "").strip()
    return float(text) if len(text) <= digits and re.fullmatch(_DECIMAL, text) else None


SHOWN = 60  # characters of a value a message echoes


def shown(value: object, limit: int = SHOWN) -> str:
    """A value as a message echoes it: quoted (repr), and when long, its start and how long
    it is, so a 5000-character value is still one short line."""
    text = repr(value)
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... ({len(str(value))} characters)"
