"""The draft's YAML writer: every string reads back as exactly what was written, hostile
names included, and commented-out questions never change what the file means."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from hpcprov.core.yaml_writer import Block, comment_text, data, quote, render
from hpcprov.site.loader import resolve

HOSTILE = [
    "x: {}", "a\nb: 1", "# not a comment", '"quoted"', "back\\slash", "tab\there", "",
    " leading space", "trailing ", "- item", "&anchor", "*alias", "!tag", "%YAML", "@at",
    "`tick", "{", "[", "]", "|", ">", "'", "yes", "No", "on", "~", "null", "0x1F", "1e3",
    ".inf", "12:30", "nel\x85", "ls\u2028ps\u2029", "nul\x00bell\x07del\x7fc1\x9f",
    "bom\ufeff", "lone\ud800surrogate", "emoji \U0001F600", "cr\rlf", "key: value\n  - x",
    "é ü 中文",
]


@pytest.mark.parametrize("text", HOSTILE)
def test_a_quoted_string_reads_back_as_itself(text: str) -> None:
    assert yaml.safe_load(f"k: {quote(text)}\n") == {"k": text}


def test_hostile_keys_values_lists_and_comments_round_trip() -> None:
    doc = Block()
    part = Block()
    for i, text in enumerate(HOSTILE):
        part.add(text, text, comment=text, notes=[text])
        part.add(f"n{i}", i)
    doc.add("partitions", part)
    doc.add("names", HOSTILE, comment="\n".join(HOSTILE))
    text = render(doc, header=HOSTILE)
    assert yaml.safe_load(text) == data(doc)
    assert yaml.safe_load(text)["partitions"]["x: {}"] == "x: {}"
    # a newline in a comment cannot end the comment and start a key
    assert all(line.lstrip().startswith(("#", '"', "n", "partitions", "names"))
               for line in text.splitlines())


def test_the_projects_loader_reads_the_same_data(tmp_path: Path) -> None:
    doc = Block()
    part = Block()
    part.add("x: {}", "x: {}\nnot: a key")
    doc.add("partitions", part)
    doc.add("launchers", Block())
    path = tmp_path / "p.yaml"
    path.write_text(render(doc), encoding="utf-8")
    assert resolve(path).data["partitions"] == {"x: {}": "x: {}\nnot: a key"}
    assert resolve(path).data["launchers"] == {}


def test_numbers_and_booleans_keep_their_type_and_strings_stay_strings() -> None:
    doc = Block()
    doc.add("count", 8)
    doc.add("memory", 976.6)
    doc.add("flag", True)
    doc.add("none", None)
    doc.add("version", "3.10")
    doc.add("yes_string", "yes")
    assert yaml.safe_load(render(doc)) == {"count": 8, "memory": 976.6, "flag": True,
                                           "none": None, "version": "3.10",
                                           "yes_string": "yes"}
    with pytest.raises(ValueError):
        doc.add("nan", float("nan"))
        render(doc)


def test_a_block_of_questions_is_commented_out_and_uncommenting_gives_valid_yaml() -> None:
    doc = Block()
    doc.add("name", "x")
    pol = Block()
    req = Block()
    req.add("example", "def-pi")
    pol.add("required_options", Block([]), commented=True)
    inner = Block()
    inner.add("account", req)
    pol.items[0].value = inner
    pol.add("compute_internet", False, commented=True, notes=["QUESTION: internet?"])
    doc.add("policies", pol, notes=["QUESTION: policies?"])
    text = render(doc)
    assert yaml.safe_load(text) == {"name": "x"} == data(doc)
    assert "# policies:" in text and "  # compute_internet: false" in text
    answered = "\n".join(line.replace("# ", "", 1) if not line.lstrip().startswith(
        "# QUESTION") else line for line in text.splitlines())
    assert yaml.safe_load(answered) == {"name": "x", "policies": {
        "required_options": {"account": {"example": "def-pi"}}, "compute_internet": False}}


def test_an_empty_block_is_an_empty_mapping() -> None:
    doc = Block()
    doc.add("env", Block())
    assert render(doc) == "env: {}\n"
    assert yaml.safe_load(render(doc)) == data(doc) == {"env": {}}


def test_comment_text_is_one_line() -> None:
    assert "\n" not in comment_text("a\nb\rc\x85d\u2028e")
    assert comment_text("plain # text") == "plain # text"
