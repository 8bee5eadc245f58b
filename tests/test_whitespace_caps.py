"""Free whitespace is bounded: random walks that pick whitespace whenever they
can, under grammars/json.lark, grammars/sql.lark and 50 MaskBench schemas
(flexible whitespace), never write more in a row than the documented cap."""

from __future__ import annotations

import gzip
import json
import random
import re
from pathlib import Path

import pytest

import constrain
from byte_vocab import byte_vocabulary
from constrain.frontends.json_schema.options import DEFAULT_MAX_WHITESPACE

WHITESPACE = [ord(c) for c in " \t\n\r"]
MASKBENCH = Path(__file__).parent / "data" / "maskbench" / "subset.jsonl.gz"


def greedy_whitespace_walk(c, rng, steps=160) -> str:
    """A byte walk that takes whitespace whenever the constraint allows some
    (four times in five), else any allowed byte."""
    state, out = c.initial_state(), []
    for _ in range(steps):
        allowed = [int(t) for t in c.allowed_token_ids(state) if t < 256]
        if not allowed:
            break
        ws = [t for t in allowed if t in WHITESPACE]
        t = rng.choice(ws) if ws and rng.random() < 0.8 else rng.choice(allowed)
        state = c.advance(state, t)
        out.append(t)
    return bytes(out).decode("utf-8", errors="replace")


def runs_outside_strings(text: str, quotes: str = '"') -> list[str]:
    """The whitespace runs of ``text`` outside quoted strings (an unclosed
    string at the end counts as a string); ``[`` in ``quotes`` stands for
    SQLite's bracketed names."""
    pattern = "|".join(r"\[[^\]]*(?:\]|$)" if q == "[" else
                       f"{q}(?:[^{q}\\\\]|\\\\.)*(?:{q}|$)" for q in quotes)
    return re.findall(r"[ \t\r\n]+", re.sub(pattern, "''", text, flags=re.S))


def json_lark_ok(run: str) -> bool:
    """json.lark's cap: 16 blanks, or 16 blanks then 1-2 line breaks each
    followed by 64 blanks."""
    return re.fullmatch(r"[ \t]{1,16}|[ \t]{0,16}(?:\r?\n[ \t]{0,64}){1,2}", run) is not None


def sql_lark_ok(run: str) -> bool:
    """sql.lark's cap: 16 blanks per line, 2 line breaks."""
    return re.fullmatch(r"[ \t]{1,16}(?:\r?\n[ \t]{0,16}){0,2}|(?:\r?\n[ \t]{0,16}){1,2}", run) \
        is not None


@pytest.mark.parametrize("name, ok, quotes", [("json.lark", json_lark_ok, '"'),
                                              ("sql.lark", sql_lark_ok, "'\"`[")])
def test_shipped_grammars(name, ok, quotes):
    c = constrain.compile_grammar(constrain.grammar_path(name), byte_vocabulary())
    rng = random.Random(name)
    seen = 0
    for _ in range(30):
        text = greedy_whitespace_walk(c, rng)
        for run in runs_outside_strings(text, quotes):
            seen += 1
            assert ok(run), (name, run, text)
    assert seen > 40


def test_json_lark_still_reads_pretty_printed_json():
    c = constrain.compile_grammar(constrain.grammar_path("json.lark"), byte_vocabulary())
    deep = {"a": [1, {"b": None, "c": ["x", True]}], "d": {}, "e": []}
    for _ in range(12):
        deep = {"k": [deep]}
    for text in (json.dumps(deep), json.dumps(deep, indent=2), json.dumps(deep, indent="\t"),
                 " [1 , 2]\r\n"):
        assert c.matches(text)
    assert not c.matches("[" + " " * 17 + "1]") and not c.matches("[\n\n\n1]")


def test_maskbench_schemas_with_flexible_whitespace():
    with gzip.open(MASKBENCH, "rt") as f:
        schemas = [json.loads(line)["schema"] for line in f][:50]
    cap = DEFAULT_MAX_WHITESPACE
    rng = random.Random(0)
    seen = 0
    for schema in schemas:
        c = constrain.compile_json_schema(schema, byte_vocabulary(), whitespace="flexible")
        text = greedy_whitespace_walk(c, rng, steps=80)
        for run in runs_outside_strings(text):
            seen += 1
            assert len(run) <= cap, (schema, run, text)
    assert seen > 100
