"""The walks of a length-bounded string's positions (``LexerTables._near_walk``):
the string's one walk with no ``minLength`` from the same place in a character,
less the tokens and boundary nodes that need more characters than are left or,
closing the string, fewer than it still needs. Oracle: the trie walk itself
(``lexer_walk``) from the same lexer state, at every position from the opening
quote to ``maxLength`` -- below ``minLength`` too, characters of one to four
bytes, escapes, and positions inside a character or an escape -- and
brute-force masks (every token advanced) at some of them."""

from __future__ import annotations

import numpy as np
import pytest

from constrain import allocate_bitmask, compile_json_schema
from constrain.cfg.lexer import _NO_ROUTE

SCHEMAS = {
    "short": {"type": "string", "maxLength": 12},
    "min": {"type": "string", "minLength": 3, "maxLength": 40},
    "member": {"type": "object", "properties": {"k": {"type": "string", "minLength": 1, "maxLength": 9}},
               "required": ["k"], "additionalProperties": False},
    "fixed": {"type": "string", "minLength": 6, "maxLength": 6},
    # positions more than a token's bytes from the bound (LexerTables._periodic)
    "long": {"type": "string", "minLength": 2, "maxLength": 300},
}
# what the string holds, repeated: ASCII, two- to four-byte characters, escapes
TEXTS = ["a", "é", "中", "😀", "\\n", "\\u00e9", "a中\\t"]


def _trie_walk(lex, s):
    """``(row, nodes, states)`` of ``lexer_walk`` from lexer state ``s``."""
    t = lex.trie
    row = np.zeros(t.row_words + 1, dtype=np.uint32)
    out = np.empty((2, t.num_nodes), dtype=np.int32)
    n = lex._walk_expanding(s, row, out, None, -1, _NO_ROUTE)  # no loop exits: the plain walk
    row = row[:lex.words32]
    if t.has_duplicates:
        t.add_duplicates(row)
    return row, out[0, :n], out[1, :n]


def _positions(g, vocab, name):
    """The states at every prefix of each text, byte by byte (so also inside a
    character or an escape)."""
    byte_id = {d[0]: t for t, d in enumerate(vocab.tokens) if d is not None and len(d) == 1}
    head = '{"k":"' if name == "member" else '"'
    for text in TEXTS:
        data = (head + text * 40).encode()
        state = g.initial_state()
        for j, b in enumerate(data):
            state = g.advance(state, byte_id[b])
            if state is None:
                break
            if j >= len(head) - 1:
                yield data[:j + 1], state


@pytest.mark.parametrize("vocab_name", ["smollm2", "multilingual"])
@pytest.mark.parametrize("name", list(SCHEMAS))
def test_near_walks_equal_trie_walks(name, vocab_name, request):
    vocab = request.getfixturevalue(vocab_name + "_vocab")
    g = compile_json_schema(SCHEMAS[name], vocab)
    lex = g.lexer
    near_positions = below = 0
    for prefix, state in _positions(g, vocab, name):
        for _, s in state[1]:
            near = lex._near_bound(s)
            if near is None:
                continue
            near_positions += 1
            below += near[3] > 0
            got = lex._near_walk(*near)
            want = _trie_walk(lex, s)
            assert np.array_equal(got[0], want[0]), (prefix, near, np.flatnonzero(got[0] != want[0])[:5])
            # the same boundary nodes into the same states (a near walk lists
            # them by need, the trie walk in trie order)
            assert sorted(zip(got[1].tolist(), got[2].tolist())) \
                == sorted(zip(want[1].tolist(), want[2].tolist())), (prefix, near)
    assert near_positions >= (5 if name == "fixed" else 20)
    # positions below minLength (their closing tokens refused) were among them
    minimum = SCHEMAS[name].get("properties", {}).get("k", SCHEMAS[name]).get("minLength", 0)
    assert (below > 0) == (minimum > 0), below


def _mask(g, state):
    bm = allocate_bitmask(1, len(g.vocab), backend="numpy")
    g.fill_bitmask(state, bm, 0)
    return np.unpackbits(bm[0].view(np.uint8), bitorder="little")[:len(g.vocab)].astype(bool)


@pytest.mark.parametrize("name", ["min", "member", "fixed", "long"])
def test_near_bound_masks_equal_brute_force(name, multilingual_vocab):
    vocab = multilingual_vocab
    g = compile_json_schema(SCHEMAS[name], vocab)
    checked = 0
    for prefix, state in _positions(g, vocab, name):
        if not any(g.lexer._near_bound(s) for _, s in state[1]) or len(prefix) % 3:
            continue
        want = np.array([g.advance(state, t) is not None for t in range(len(vocab))])
        assert np.array_equal(_mask(g, state), want), prefix
        checked += 1
    assert checked >= 10


def test_near_bound_masks_per_context(smollm2_vocab, smollm2_tokenizer):
    """One bounded string terminal in two members: near its bound the same
    positions pass different tokens over the closing quote (``",`` after the
    first member, ``"}`` after the last), so what a near position's boundary
    walk found in one parser context must not be reused in the other."""
    vocab = smollm2_vocab
    bounded = {"type": "string", "maxLength": 9}
    g = compile_json_schema({"type": "object", "properties": {"a": bounded, "b": bounded},
                             "required": ["a", "b"], "additionalProperties": False}, vocab)
    assert len(g.terms.bounded) == 1
    checked = 0
    for head in ('{"a":"', '{"a":"x","b":"'):
        state = g.initial_state()
        for t in smollm2_tokenizer.encode(head + "abcdefgh", add_special_tokens=False):
            state = g.advance(state, t)
            if any(g.lexer._near_bound(s) for _, s in state[1]):
                want = np.array([g.advance(state, t) is not None for t in range(len(vocab))])
                assert np.array_equal(_mask(g, state), want), head
                checked += 1
    assert checked >= 4


def test_strings_with_one_tail_share_one_walk(smollm2_vocab, smollm2_tokenizer):
    """Bounded strings of one grammar that close into the same bytes read the
    same characters: one walk (over the widest) serves them all
    (``LexerTables._bounded_walk``), each with its own bounds and its own
    states past the quote. Masks against brute force at every position."""
    vocab = smollm2_vocab
    schema = {"type": "array", "items": {"anyOf": [
        {"type": "string", "minLength": 2, "maxLength": 3},
        {"type": "object", "properties": {"a": {"type": "string", "minLength": 4, "maxLength": 5},
                                          "b": {"type": "string", "maxLength": 12},
                                          "c": {"type": "string", "minLength": 1, "maxLength": 7}},
         "required": ["a", "b", "c"], "additionalProperties": False}]}}
    g = compile_json_schema(schema, vocab)
    lex = g.lexer
    assert len(g.terms.bounded) >= 4
    checked = 0
    text = '["ab",{"a":"wxyz","b":"hello world","c":"x"},"xyz",{"a":"abcde","b":"","c":"seven77"}]'
    state = g.initial_state()
    for t in smollm2_tokenizer.encode(text, add_special_tokens=False) + [None]:
        if any(lex._near_bound(s) for _, s in state[1]):
            want = np.array([g.advance(state, u) is not None for u in range(len(vocab))])
            assert np.array_equal(_mask(g, state), want), state
            checked += 1
        if t is None:
            break
        state = g.advance(state, t)
        assert state is not None
    assert checked >= 8
    tails = {g.terms.bounded_tails[t] for t in g.terms.bounded}
    walked = {t for t, _ in lex._near_refs}
    assert len(walked) > len(tails)  # strings of one tail were walked
    assert {tail for tail, _ in lex._near_walks} <= tails and len(lex._near_walks) <= len(tails) * 2
