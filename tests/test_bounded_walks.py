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
from lexer_testing import is_text, keep_every_exit

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


def _partial_vocab():
    """Every byte, and tokens that break off a character, hold escapes and
    close the string into what follows: the exits' subtrees of every kind."""
    zhong, smile = "中".encode(), "😀".encode()
    extra = [zhong[:2], zhong[:2] + b"a", zhong[:1] + b'"', b"ab" + zhong[:2], smile[:3],
             b"x" + smile[:2], b'\\n', b'\\"', b'\\u00', b'\\u00e9x', b'a\\nb', b'"', b'",',
             b'"}', b'ab"', b'ab",', b'\xc3\xa9"}', b"abc", b"abcdef", b"\xc3\xa9\xc3\xa9",
             zhong + b'"', b"\x01a", b"a\x01"]
    from constrain import Vocabulary

    tokens = sorted({bytes([b]) for b in range(256)} | set(extra)) + [b"</s>"]
    return Vocabulary.from_tokens(tokens, eos_token_ids=[len(tokens) - 1])


@pytest.mark.parametrize("vocab_name", ["smollm2", "multilingual", "partial"])
@pytest.mark.parametrize("name", ["short", "min", "member", "fixed", "long"])
def test_exits_walk_equals_the_whole_tries(name, vocab_name, request, monkeypatch):
    """From a character boundary a bounded string's walk starts from the needs
    of its text kept with the trie (``TokenTrie.text_needs``) and walks the
    loop exits only: the same needs up to the bound, the same closing tokens
    below any ``minLength`` and the same boundary nodes as ``bounded_needs``
    over the whole trie (no exits)."""
    from constrain.cfg import lexer_kernels as gk
    from constrain.cfg.lexer import _NO_EXITS, _NO_NODES

    vocab = _partial_vocab() if vocab_name == "partial" else request.getfixturevalue(vocab_name + "_vocab")
    g = compile_json_schema(SCHEMAS[name], vocab)
    lex, trie = g.lexer, g.trie
    if vocab_name != "smollm2":
        keep_every_exit(monkeypatch, trie)
    tab, offsets, accepting, _, vmap = lex.terms.kernel_arrays
    (t, (lo, hi)), = lex.terms.bounded.items()
    base = int(offsets[t])
    loops = np.empty(4, dtype=np.uint64)
    assert gk.bounded_text(tab, accepting, vmap, base, hi, *trie.packed(), loops)
    known = trie.text_needs(loops, np.int16)
    assert known is not None and not known[0].flags.writeable
    assert trie.text_needs(loops, np.int16) is known
    exits = trie.loop_exits(loops)
    assert len(exits) == len(known[1]) > 0
    walks = []
    for need, ex, ec in ((known[0].copy(), exits, known[1]),
                         (np.full(trie.no_token + 1, np.iinfo(np.int16).max, dtype=np.int16),
                          _NO_EXITS, _NO_NODES)):
        closes = np.zeros(trie.no_token + 1, dtype=np.bool_)
        nodes = gk.bounded_needs(tab, accepting, vmap, base, 0, hi, *trie.packed(), need, closes,
                                 ex, ec)
        walks.append((trie.copy_to_duplicates(need[:32 * lex.words32]),
                      trie.copy_to_duplicates(closes[:32 * lex.words32]), nodes))
    (need, closes, nodes), (want_need, want_closes, want_nodes) = walks
    for left in range(hi + 1):
        assert np.array_equal(need <= left, want_need <= left), left
    for short in range(lo + 1):
        assert np.array_equal(closes & (need < short), want_closes & (want_need < short)), short
    assert all(np.array_equal(a, b) for a, b in zip(nodes, want_nodes))
    assert len(nodes[0]) > 0  # tokens that close the string and go on


def test_text_chars_counts_what_the_tokens_begin(monkeypatch):
    """``TokenTrie.text_needs``' parts against their definition, token by
    token: a token whose bytes are text (no exit above it) begins as many
    characters as it has ASCII and lead bytes (counted with the trie); the
    others are set to the value given (``text_chars``); an exit's count is the
    whole characters before its partial one."""
    from constrain.vocab.trie_kernels import loop_exits, text_chars

    vocab = _partial_vocab()
    g = compile_json_schema(SCHEMAS["short"], vocab)
    trie = g.trie
    loops = np.zeros(4, dtype=np.uint64)
    for b in range(32, 128):
        if b not in (34, 92):
            loops[b >> 6] |= np.uint64(1) << np.uint64(b & 63)
    exits = loop_exits(loops, *trie.packed(), trie.num_nodes)[0]
    need = trie._token_chars.copy()
    for tok, data in enumerate(vocab.tokens):  # the characters each token begins
        if data is not None and vocab.grammar_token_mask[tok]:
            assert need[tok] == sum(1 for b in data if b < 0x80 or b >= 0xC0), data
    exit_chars = np.zeros(len(exits), dtype=np.int32)
    text_chars(exits, trie.order, *vocab.flat, need, -1, exit_chars)

    for tok, data in enumerate(vocab.tokens):
        if data is None or not vocab.grammar_token_mask[tok]:
            continue
        want = sum(1 for b in data if b < 0x80 or b >= 0xC0) if is_text(data, loops) else -1
        assert need[tok] == want, data
    node_bytes = {}
    for i in range(trie.num_nodes):
        for k in range(trie.tok_start[i], trie.tok_end[i]):
            node_bytes[i] = vocab.tokens[int(trie.order[k])]
    checked = 0
    for row, chars in zip(exits.tolist(), exit_chars.tolist()):
        data = node_bytes.get(row[0])
        if data is None:
            continue
        before = data[:len(data) - 1 - row[1]]  # the path above the exit less its partial character
        assert chars == sum(1 for b in before if b < 0x80 or b >= 0xC0), data
        checked += 1
    assert checked >= 5
