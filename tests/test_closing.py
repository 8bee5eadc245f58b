"""close=True: an output that would be cut off by max_new_tokens ends with a
shortest completion instead."""

from __future__ import annotations

import json

import pytest

import constrain
import search
from byte_vocab import accepts, byte_vocabulary
from search.autoregressive.closing import shortest_completion

SCHEMA = {"type": "object", "additionalProperties": False, "required": ["name", "bio", "tags"],
          "properties": {"name": {"type": "string"}, "bio": {"type": "string"},
                         "tags": {"type": "array", "items": {"type": "string"}}}}


@pytest.mark.parametrize("prefix, completion", [
    (b'{"name":"Ad', b'","bio":"","tags":[]}'),
    (b'{"name":"Ada","bio":"x","tags":["a"', b"]}"),
    (b"", b'{"name":"","bio":"","tags":[]}'),
])
def test_shortest_completion_of_a_schema(prefix, completion):
    c = constrain.compile_json_schema(SCHEMA, byte_vocabulary())
    state = c.advance_bytes(c.initial_state(), prefix)
    got = shortest_completion(c, state)
    assert got == completion and accepts(c, prefix + got)


def test_shortest_completion_of_regexes_and_grammars():
    v = byte_vocabulary()
    r = constrain.compile_regex(r"[a-z]+@[a-z]+\.(com|org)", v)
    assert shortest_completion(r, r.advance_bytes(r.initial_state(), b"ab")) == b"@a.com"
    g = constrain.compile_grammar('start: "(" start ")" | "x"', v)
    assert shortest_completion(g, g.advance_bytes(g.initial_state(), b"(((")) == b"x)))"
    assert shortest_completion(g, g.advance_bytes(g.initial_state(), b"(x)")) == b""


@pytest.mark.parametrize("budget", [12, 25])
def test_outputs_close_within_the_budget(lm, budget):
    c = constrain.compile_json_schema(SCHEMA, lm.vocab)
    prompt = "Describe a famous scientist as JSON with a long bio."
    cut = search.generate(lm, prompt, constraint=c, max_new_tokens=budget)
    assert cut.stop_reason == "max_new_tokens" and not cut.accepted
    closed = search.generate(lm, prompt, constraint=c, max_new_tokens=budget, close=True)
    assert closed.stop_reason == "eos" and closed.accepted
    assert len(closed.token_ids) + 1 <= budget
    assert set(json.loads(closed.text)) == {"name", "bio", "tags"}
    # the batch closes the same way
    [row] = search.generate_batch(lm, [prompt], constraints=c, max_new_tokens=budget, close=True)
    assert row.text == closed.text


def test_a_budget_below_the_shortest_output_says_so(lm):
    """The docs promised a complete output; below the shortest one none fits,
    which was silent."""
    c = constrain.compile_json_schema(SCHEMA, lm.vocab)
    with pytest.warns(UserWarning, match="close=True: the shortest completion needs"):
        r = search.generate(lm, "Describe", constraint=c, max_new_tokens=6, close=True)
    assert not r.accepted and r.stop_reason == "max_new_tokens"
