"""Walks from the exits of a loop set (``TokenTrie.loop_exits``): a lexer state
that reads text back to itself (a JSON string's body, a pattern over ``.`` or a
broad class), or whose first characters lead into such a state (an object's
declared keys beside "any other key": ``text_route``), walks only the subtrees
under the nodes where text stops, from the state its partial character leads
to. Checked against the plain walk (the
same kernel finding its own way) at every byte position of texts with one- to
four-byte characters and escapes, against the definition of text token by
token, and against brute-force masks."""

from __future__ import annotations

import json

import numpy as np
import pytest

from constrain import Vocabulary, allocate_bitmask, compile_grammar, compile_json_schema
from constrain.cfg import lexer_kernels as gk
from constrain.cfg.lexer import _NO_ROUTE
from constrain.vocab.trie_kernels import loop_exits
from lexer_testing import is_text, keep_every_exit, plain_walk

GRAMMARS = {
    "string": ("schema", {"type": "object", "properties": {"a": {"type": "string"}},
                          "required": ["a"]}),
    # any key but the declared ones: an exclusion automaton's body
    "keys": ("schema", {"type": "object", "properties": {"name": {"type": "integer"}},
                        "additionalProperties": {"type": "boolean"}}),
    # declared names that begin with multi-byte characters: their first bytes
    # lead into a declared name, not into "any other key"'s text alone
    "keys_utf8": ("schema", {"type": "object", "properties": {
        "中文": {"type": "integer"}, "é": {"type": "integer"}, "😀x": {"type": "integer"},
        "a": {"type": "integer"}}, "additionalProperties": {"type": "boolean"}}),
    # a pattern's body that takes every character but a few ASCII ones
    "pattern": ("schema", {"type": "string", "pattern": "^[^#~]*$"}),
    # a Lark terminal whose body loops on printable ASCII and any UTF-8
    "lark": ("lark", 'start: TAG ("," TAG)*\nTAG: /<[^<>\\x00-\\x1f]*>/\n'),
}
# what the bodies hold, byte by byte: ASCII, two- to four-byte characters,
# escapes, and the bytes that end or break the body
TEXTS = ["ab", "é", "中文", "😀", "\\n", "\\u00e9", 'a"', "x~#<", "a>,<b"]
HEADS = {"string": '{"a":"', "keys": '{"', "keys_utf8": '{"', "pattern": '"', "lark": "<"}


def _compile(name, vocab):
    kind, spec = GRAMMARS[name]
    if kind == "schema":
        return compile_json_schema(spec, vocab)
    return compile_grammar(spec, vocab)


def _states(g, name):
    """The lexer states at every byte of each text after the body's head."""
    head = HEADS[name].encode()
    for text in TEXTS:
        data = head + text.encode()
        state = g.initial_state()
        for k in range(len(data)):
            state = g.advance_bytes(state, data[k:k + 1])
            if state is None:
                break
            if k + 1 >= len(head):
                yield data[:k + 1], state


@pytest.mark.parametrize("name", sorted(GRAMMARS))
@pytest.mark.parametrize("vocab_name", ["smollm2", "multilingual"])
def test_exit_walks_equal_plain_walks(name, vocab_name, request, monkeypatch):
    vocab = request.getfixturevalue(vocab_name + "_vocab")
    g = _compile(name, vocab)
    lex = g.lexer
    keep_every_exit(monkeypatch, g.trie)
    checked, into = set(), set()
    for prefix, state in _states(g, name):
        for _, s in state[1]:
            if s in checked:
                continue
            checked.add(s)
            route = lex._text_route(s)
            if not len(route[0]):
                continue
            target = route[2]
            assert target != s or lex.walk_flags[s] == gk.F_LOOP and lex.reads_utf8[s] == 1
            into.add(target != s)
            got, want = plain_walk(lex, s, route), plain_walk(lex, s, _NO_ROUTE)
            assert np.array_equal(got[0], want[0]), (prefix, np.flatnonzero(got[0] != want[0])[:5])
            # the same boundary nodes, in trie order, into the same states
            assert np.array_equal(got[1], want[1]) and np.array_equal(got[2], want[2]), prefix
    # the body walked from its exits; before the keys' bodies, the state
    # after `{"` too
    assert False in into, "no state read text back to itself"
    if name.startswith("keys"):
        assert True in into, "no state led into text"


@pytest.mark.parametrize("vocab_name", ["smollm2", "multilingual"])
def test_exits_are_where_text_stops(vocab_name, request):
    vocab = request.getfixturevalue(vocab_name + "_vocab")
    g = _compile("string", vocab)
    lex, trie = g.lexer, g.trie
    s = g.advance_bytes(g.initial_state(), b'{"a":"')[1][0][1]
    loops = lex.loops[s]
    exits, n = loop_exits(loops, *trie.packed(), trie.num_nodes)
    assert n == len(exits) > 0
    # the trie keeps them, or none past a 64th of its nodes
    kept = trie.loop_exits(loops)
    assert trie.loop_exits(loops) is kept
    if vocab_name == "smollm2":
        assert kept is not None and np.array_equal(kept, exits) and not kept.flags.writeable
    elif kept is None:
        assert len(exits) > trie.num_nodes // 64
    # a token lies under an exit exactly when its bytes are not text
    under = np.zeros(trie.num_nodes + 1, dtype=np.int64)
    for e in exits[:, 0].tolist():
        under[e] += 1
        under[trie.skip[e]] -= 1
    under = np.cumsum(under)[:trie.num_nodes] > 0
    node_of = {}
    for i in range(trie.num_nodes):
        for k in range(trie.tok_start[i], trie.tok_end[i]):
            node_of[int(trie.order[k])] = i
    for tok, i in node_of.items():
        data = vocab.tokens[tok]
        assert bool(under[i]) == (not is_text(data, loops)), data
    # each exit's partial character is the bytes before it since a boundary
    for row in exits.tolist():
        node, k = row[0], row[1]
        depth = int(trie.depth[node])
        assert 0 <= k < depth


def test_a_narrow_loop_set_walks_as_before(multilingual_vocab):
    # a state that reads UTF-8 back but few ASCII bytes: most root children
    # are exits, and the trie walk costs no more than finding them
    g = compile_json_schema({"type": "string", "pattern": "^[a\u0080-\U0010ffff]*$"},
                            multilingual_vocab)
    lex = g.lexer
    s = g.advance_bytes(g.initial_state(), b'"a')[1][0][1]
    assert lex.walk_flags[s] == gk.F_LOOP and lex.reads_utf8[s] == 1
    assert g.trie.loop_exits(lex.loops[s]) is None
    assert lex._text_route(s) is _NO_ROUTE


def _mask(g, state):
    bm = allocate_bitmask(1, len(g.vocab), backend="numpy")
    g.fill_bitmask(state, bm, 0)
    return np.unpackbits(bm[0].view(np.uint8), bitorder="little")[:len(g.vocab)].astype(bool)


@pytest.mark.parametrize("name", ["string", "lark", "keys_utf8"])
@pytest.mark.parametrize("vocab_name", ["smollm2", "multilingual"])
def test_exit_walk_masks_equal_brute_force(name, vocab_name, request, monkeypatch):
    vocab = request.getfixturevalue(vocab_name + "_vocab")
    g = _compile(name, vocab)
    if vocab_name == "multilingual":
        keep_every_exit(monkeypatch, g.trie)
    checked = 0
    for prefix, state in _states(g, name):
        if not any(len(g.lexer._text_route(s)[0]) for _, s in state[1]) or len(prefix) % 2:
            continue
        want = np.array([g.advance(state, t) is not None for t in range(len(vocab))])
        assert np.array_equal(_mask(g, state), want), prefix
        checked += 1
    assert checked >= 5


def test_exits_inside_a_character(monkeypatch):
    # tokens that break off a character and go on (bytes a tokenizer may
    # hold): their exit is the byte that breaks it, and the walk from there
    # starts in the state the character's first bytes lead to
    zhong, smile = "中".encode(), "😀".encode()
    extra = [zhong[:2] + b"a", zhong[:2] + b'"', b"a" + zhong[:1] + b"bc", smile[:3] + b"x",
             smile[:2] + zhong, b"ok" + zhong[:2] + b"\\n", zhong + zhong[:1] + b"\x80\x80",
             b"ab" + zhong, zhong[:2] + zhong[2:] + b'",', b'"' + zhong[:1]]
    tokens = sorted({bytes([b]) for b in range(256)} | set(extra)) + [b"</s>"]
    vocab = Vocabulary.from_tokens(tokens, eos_token_ids=[len(tokens) - 1])
    g = _compile("string", vocab)
    trie, lex = g.trie, g.lexer
    keep_every_exit(monkeypatch, trie)
    s = g.advance_bytes(g.initial_state(), b'{"a":"')[1][0][1]
    route = lex._text_route(s)
    partial = {tuple(r[2:2 + r[1]]) for r in route[0].tolist() if r[1]}
    assert {tuple(zhong[:2]), tuple(smile[:3]), tuple(zhong[:1])} <= partial
    got, want = plain_walk(lex, s, route), plain_walk(lex, s, _NO_ROUTE)
    assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1]) \
        and np.array_equal(got[2], want[2])
    state = g.advance_bytes(g.initial_state(), b'{"a":"x')
    want = np.array([g.advance(state, t) is not None for t in range(len(vocab))])
    assert np.array_equal(_mask(g, state), want)


def test_declared_names_with_multibyte_first_characters(monkeypatch):
    # after `{"`, "any other key"'s body is text, but a first character
    # that begins a declared name leads into that name too: tokens spelling a
    # whole name and what follows it must be walked from the name's state
    # (routing them as text would read `中文":t` as an unknown key's boolean)
    tokens = {bytes([b]) for b in range(256)}
    for name in ("中文", "é", "😀x", "ab"):
        n = name.encode()
        tokens |= {n, n + b'"', n + b'":', n + b'":1', n + b'":t', n + b'x":t', n + b'x":1',
                   n[:2], n[:2] + b'"', n + b"\\n"}
    tokens |= {"中".encode() + b'":t', "日本".encode(), "日本".encode() + b'":t'}
    tokens = sorted(tokens) + [b"</s>"]
    vocab = Vocabulary.from_tokens(tokens, eos_token_ids=[len(tokens) - 1])
    g = compile_json_schema({"type": "object", "properties": {
        n: {"type": "integer"} for n in ("中文", "é", "😀x", "ab")},
        "additionalProperties": {"type": "boolean"}}, vocab)
    lex = g.lexer
    keep_every_exit(monkeypatch, g.trie)
    state = g.advance_bytes(g.initial_state(), b'{"')
    (_, s), = state[1]
    route = lex._text_route(s)
    assert route[2] not in (0, s)
    # the first bytes of the declared names are not read as text
    for first in (0xE4, 0xC3, 0xF0, ord("a")):
        assert route[1][first] == 0
    assert route[1][0xE6] == 1 and route[1][ord("x")] == 1
    got, want = plain_walk(lex, s, route), plain_walk(lex, s, _NO_ROUTE)
    assert all(np.array_equal(a, b) for a, b in zip(got, want))
    want = np.array([g.advance(state, t) is not None for t in range(len(vocab))])
    mask = _mask(g, state)
    assert np.array_equal(mask, want)
    assert mask[vocab.tokens.index("中文".encode() + b'":1')]
    assert not mask[vocab.tokens.index("中文".encode() + b'":t')]
    assert mask[vocab.tokens.index("日本".encode() + b'":t')]


def test_text_below_a_declared_names_letters(monkeypatch):
    # a token that begins a declared name and leaves it (`nap` beside `name`,
    # `a\\` beside `a\"b`) is "any other key"'s text again from where it
    # leaves, under a root child the route walks whole: the walk from the
    # route equals the plain one there too, boundary nodes in trie order
    # included, with partial characters, escapes and quotes below the names
    names = ("name", "names", "nick", "a\"b", "é")
    tokens = {bytes([b]) for b in range(256)}
    zhong = "中".encode()
    for stem in (b"na", b"nam", b"ni", b"a", b"a\\", "é".encode()):
        for tail in (b"p", b"px", b"p\\n", b'p"', b'p":t', b'p":1', b"p\\u00", b"p" + zhong,
                     b"p" + zhong[:2], b"p" + zhong[:1] + b"x", zhong, zhong + b'":t', b"\\\"",
                     b'\\"x":t', b"pq,", b"\x80", b"p\x00"):
            tokens |= {stem + tail, stem + tail[:1]}
    for name in names:
        n = json.dumps(name, ensure_ascii=False)[1:-1].encode()
        tokens |= {n, n + b'"', n + b'":', n + b'":1', n + b'x":t', n + b"x"}
    tokens = sorted(tokens) + [b"</s>"]
    vocab = Vocabulary.from_tokens(tokens, eos_token_ids=[len(tokens) - 1])
    g = compile_json_schema({"type": "object", "properties": {
        n: {"type": "integer"} for n in names}, "additionalProperties": {"type": "boolean"}}, vocab)
    lex = g.lexer
    keep_every_exit(monkeypatch, g.trie)
    state = g.advance_bytes(g.initial_state(), b'{"')
    (_, s), = state[1]
    route = lex._text_route(s)
    assert route[2] not in (0, s) and route[1][ord("n")] == 0
    got, want = plain_walk(lex, s, route), plain_walk(lex, s, _NO_ROUTE)
    assert np.array_equal(got[0], want[0]), np.flatnonzero(got[0] != want[0])[:5]
    assert np.array_equal(got[1], want[1]) and np.array_equal(got[2], want[2])
    want = np.array([g.advance(state, t) is not None for t in range(len(vocab))])
    assert np.array_equal(_mask(g, state), want)
    # and from inside a name, where the same text lies one byte down
    for head in (b'{"n', b'{"na', b'{"a'):
        state = g.advance_bytes(g.initial_state(), head)
        want = np.array([g.advance(state, t) is not None for t in range(len(vocab))])
        assert np.array_equal(_mask(g, state), want), head


@pytest.mark.parametrize("names", [("name", "names", "nick"), ("中文", "é", "😀x", "a\"b")])
def test_utf8_marks_read_through_the_key_text(names, multilingual_vocab):
    # a state among declared names' letters asks whether it reads every
    # UTF-8 character into "any other key"'s text; where its first bytes of
    # longer characters lead where that text's do, the text's own answer
    # (kept once) is taken: every mark must be what the state's own search
    # says, names with multi-byte first characters included (their states'
    # first bytes lead elsewhere)
    from constrain.cfg.lexer_kernels import (F_PENDING, UTF8_BACK_KNOWN, UTF8_RUN, _NO_BOOLS,
                                             _NO_VMAP, _set_good, _utf8_reads_to)

    g = compile_json_schema({"type": "object", "properties": {n: {"type": "integer"} for n in names},
                             "additionalProperties": {"type": "boolean"}}, multilingual_vocab)
    lex = g.lexer
    bm = allocate_bitmask(1, len(multilingual_vocab), backend="numpy")
    for head in (b'{"', b'{"n', b'{"ni', b'{"a\\', b'{"x'):
        state = g.advance_bytes(g.initial_state(), head)
        if state is not None:
            g.fill_bitmask(state, bm, 0)
    trans, flags, live, good = lex.trans.reshape(-1), lex.walk_flags, lex.live, lex.good
    checked = 0
    # every expanded state's marks, as the walks' classification makes them
    for s in range(1, lex.n):
        if flags[s] == F_PENDING or _set_good(trans, flags, s, live, good, lex._below, True):
            continue
        lo, hi = int(good[s, 0]), int(good[s, 1])
        if not lo | hi:
            continue
        b0 = (lo & -lo).bit_length() - 1 if lo else 64 + (hi & -hi).bit_length() - 1
        r = _utf8_reads_to(lex.trans, 0, flags, _NO_BOOLS, _NO_VMAP, s, 0, lex._below,
                           trans[(s << 8) + b0])
        assert r >= 0
        assert bool(live[s, 2] & UTF8_RUN) == (r == 1), s
        checked += 1
    assert checked >= 5
    assert (live[:lex.n, 2] & UTF8_BACK_KNOWN).any()  # the text's answer was kept and read


def test_states_beside_a_loop_are_plain_without_a_search(multilingual_vocab):
    # a state whose good bytes lead into a state that reads one of them back
    # to itself (a declared name's letter beside "any other key"'s text) is
    # plain without count_run's search: that search would find a run below
    # MIN_RUN for each of them; a counted pattern's positions, which lead
    # from one position to the next, are still counted
    from constrain.cfg.lexer_kernels import F_PLAIN, F_RUN, MIN_RUN, _good_into_a_loop, count_run

    g = compile_json_schema({"type": "object", "properties": {
        "name": {"type": "integer"}, "nick": {"type": "integer"}, "alpha": {"type": "integer"},
        "apex": {"type": "integer"}, "bio": {"type": "string", "pattern": "^[a-z ]{3,70}$"}},
        "additionalProperties": {"type": "boolean"}}, multilingual_vocab)
    bm = allocate_bitmask(1, len(multilingual_vocab), backend="numpy")
    for head in (b'{"', b'{"n', b'{"ni', b'{"a', b'{"al', b'{"bio":"', b'{"bio":"ab',
                 b'{"bio":"' + b"x" * 20, b'{"bio":"' + b"y z" * 12):
        g.fill_bitmask(g.advance_bytes(g.initial_state(), head), bm, 0)
    lex = g.lexer
    flags, memos = lex.walk_flags, lex.kernel_arrays[2]
    by_rule = [s for s in range(1, lex.n) if flags[s] == F_PLAIN
               and _good_into_a_loop(lex.trans.reshape(-1), flags, memos[2], s)]
    assert len(by_rule) >= 3
    for s in by_rule:
        r = count_run(lex.trans.reshape(-1), flags, memos, s, lex.trie.max_depth, lex._below,
                      lex.trie.multilingual)
        assert 0 <= r < MIN_RUN, s
    assert (flags[:lex.n] == F_RUN).sum() >= 10  # the pattern's positions
