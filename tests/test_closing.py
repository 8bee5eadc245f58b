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


class _ByteModel:
    """What a decoding row and the closing helpers read of a model: the byte
    vocabulary, and an encoder spelling text one byte per token."""

    vocab = byte_vocabulary()
    vocab_size = len(vocab)
    eos_token_ids = vocab.eos_token_ids
    device = "cpu"

    def encode(self, text: str) -> list[int]:
        return list(text.encode("utf-8"))


def _adversarial_walk(constraint, budget: int, alphabet: bytes):
    """A decoding row with ``close=True`` whose free tokens are always the
    allowed byte of ``alphabet`` after which the shortest completion is the
    longest: its tokens and whether it ended with EOS, accepting."""
    from search.autoregressive.decoding import Row
    from search.autoregressive.logits_controls import StopStrings

    lm = _ByteModel()
    row = Row(lm, [0], constraint, None, StopStrings(None), False, close=True)
    out = []
    for step in range(budget):
        left = budget - step
        tok = row.closing_token(lm, left) if row.close else None
        if tok is None:
            state = row.matcher.state
            options = [(len(shortest_completion(constraint, after)), b) for b in alphabet
                       if (after := constraint.advance(state, b)) is not None]
            tok = max(options)[1] if options else min(lm.eos_token_ids)
            tok = row.closing_guard(lm, tok, left)
        out.append(tok)
        if not row.accept(tok, lm.vocab):
            return out, row.stop == "eos" and accepts(constraint, bytes(out[:-1]))
    return out, False


@pytest.mark.parametrize("source, alphabet", [
    ('start: "a" start "bb" | "x"', b"ax"),  # each "a" adds two bytes to close
    # a new item: ',' takes ']' to '""]' (no letters: every string closes at once)
    ({"type": "array", "items": {"type": "string"}}, b'[]",'),
])
def test_a_token_that_lengthens_the_completion_cannot_cut_the_output(source, alphabet):
    """Closing began only once the completion filled the tokens left, so a
    free token just before that lengthened the completion by two or more
    (a new array item: `""` before `]`) left the output cut. Every budget
    that holds a shortest complete output and EOS now ends complete."""
    v = byte_vocabulary()
    c = (constrain.compile_json_schema(source, v) if isinstance(source, dict)
         else constrain.compile_grammar(source, v))
    least = len(shortest_completion(c, c.initial_state())) + 1
    for budget in range(least, least + 24):
        out, closed = _adversarial_walk(c, budget, alphabet)
        assert closed and len(out) <= budget, (budget, bytes(t for t in out if t < 256))
