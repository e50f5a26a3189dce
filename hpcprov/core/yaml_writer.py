"""YAML with comments, written from data: the text of a drafted site profile.

PyYAML cannot keep comments, so the draft is a small tree of :class:`Item` (a key, a value
or a nested :class:`Block`, the comment that says where the value came from, note lines
before it) rendered here. Every string is written double-quoted with YAML's escapes, and
keys that are not plain identifiers are quoted too, so names from the cluster (a partition
called ``x: {}``, a newline, a ``#``) read back as exactly the same text and never as
other keys. Comments are single lines with control characters escaped.

An item can be *commented out*: a question's example the person uncomments (removing
``# `` after the indentation) once they know the answer. A block whose items are all
commented out is commented out itself, so the file stays valid as written.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import TypeAlias

Scalar: TypeAlias = "str | int | float | bool | None"
# (a list as built: of strings, or of any scalars; list is invariant)
Written: TypeAlias = "Scalar | list[str] | list[Scalar]"
Value: TypeAlias = "Written | Block"

_PLAIN_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]*$")
# words YAML 1.1 (PyYAML) reads as booleans or null when unquoted
_SPECIAL = {"y", "n", "yes", "no", "on", "off", "true", "false", "null", "~"}
_ESCAPES = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\t": "\\t", "\r": "\\r", "\0": "\\0"}


def _printable(ch: str) -> bool:
    """A character YAML lets stand for itself in a double-quoted scalar or a comment (no
    control characters, no YAML line breaks U+0085/U+2028/U+2029, no BOM, no surrogates)."""
    o = ord(ch)
    return (0x20 <= o <= 0x7E or 0xA0 <= o <= 0xD7FF or 0xE000 <= o <= 0xFFFD
            or o >= 0x10000) and ch not in "\u2028\u2029\ufeff"


def _escape(ch: str) -> str:
    if ch in _ESCAPES:
        return _ESCAPES[ch]
    if _printable(ch):
        return ch
    o = ord(ch)
    return f"\\x{o:02x}" if o < 0x100 else f"\\u{o:04x}" if o < 0x10000 else f"\\U{o:08x}"


def quote(text: str) -> str:
    """A string as a double-quoted YAML scalar that reads back as exactly ``text``."""
    return '"' + "".join(_escape(ch) for ch in text) + '"'


def comment_text(text: str) -> str:
    """Text safe on one comment line (line breaks and control characters escaped)."""
    return "".join(ch if ch not in "\\\n\r\t" and _printable(ch) else _escape(ch)
                   for ch in text)


def key_text(key: str) -> str:
    """A mapping key: plain when it is an identifier YAML reads as a string, else quoted."""
    if _PLAIN_KEY.match(key) and key.lower() not in _SPECIAL:
        return key
    return quote(key)


def scalar_text(value: Scalar) -> str:
    """A scalar as YAML: strings always quoted, numbers and booleans plain."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"{value} cannot be written in a profile")
        return repr(value)
    return quote(str(value))


@dataclass
class Item:
    """One key of a block: its value, where the value came from (``comment``), lines of
    notes before it, and whether it is written commented out (a question's example)."""

    key: str
    value: Value
    comment: str = ""
    notes: list[str] = field(default_factory=list)
    commented: bool = False


@dataclass
class Block:
    """A mapping: items in order, and note lines after them (``tail``)."""

    items: list[Item] = field(default_factory=list)
    tail: list[str] = field(default_factory=list)

    def add(self, key: str, value: Value, comment: str = "", notes: list[str] | None = None,
            commented: bool = False) -> Item:
        item = Item(key, value, comment, list(notes or []), commented)
        self.items.append(item)
        return item

    def live(self) -> bool:
        """Whether any item is written as data (not commented out)."""
        return any(not i.commented and (not isinstance(i.value, Block) or i.value.live()
                                        or not i.value.items) for i in self.items)


def plain(**values: Scalar) -> Block:
    """A block of plain ``key: value`` items, in order, without comments."""
    b = Block()
    for key, value in values.items():
        b.add(key, value)
    return b


def _value_text(value: Written) -> str:
    if isinstance(value, list):
        return "[" + ", ".join(scalar_text(v) for v in value) + "]"
    return scalar_text(value)


def _line(indent: int, text: str, commented: bool, comment: str = "") -> str:
    """One line: indentation, ``# `` when commented out, the text, the trailing comment."""
    head = " " * indent + ("# " if commented else "") + text
    return head + (f"  # {comment_text(comment)}" if comment else "")


def render_block(block: Block, indent: int = 0, commented: bool = False) -> list[str]:
    """The lines of a block (and of the blocks within it)."""
    lines: list[str] = []
    for item in block.items:
        lines += [" " * indent + "# " + comment_text(n) for n in item.notes]
        off = commented or item.commented
        if isinstance(item.value, Block):
            nested = item.value
            off = off or (bool(nested.items) and not nested.live())
            if not nested.items:
                lines.append(_line(indent, f"{key_text(item.key)}: {{}}", off, item.comment))
                continue
            lines.append(_line(indent, f"{key_text(item.key)}:", off, item.comment))
            lines += render_block(nested, indent + 2, off)
        else:
            lines.append(_line(indent, f"{key_text(item.key)}: {_value_text(item.value)}",
                               off, item.comment))
    lines += [" " * indent + "# " + comment_text(n) for n in block.tail]
    return lines


def render(block: Block, header: list[str] | None = None) -> str:
    """The whole document: header comment lines, then the block."""
    lines = ["# " + comment_text(h) if h else "#" for h in header or []]
    return "\n".join([*lines, *render_block(block)]) + "\n"


def data(block: Block) -> dict[str, object]:
    """What the rendered text means, as plain data (commented-out items left out): what
    ``yaml.safe_load(render(block))`` must give back."""
    out: dict[str, object] = {}
    for item in block.items:
        if item.commented:
            continue
        if isinstance(item.value, Block):
            if item.value.items and not item.value.live():
                continue
            out[item.key] = data(item.value)
        else:
            out[item.key] = list(item.value) if isinstance(item.value, list) else item.value
    return out
