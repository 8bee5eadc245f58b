"""Masks agree with ``advance`` token by token (brute force over the whole
vocabulary) on grammars where terminals overlap, split inside tokens, nest and
recurse; and the grammar constraint follows the protocol."""

from __future__ import annotations

import numpy as np
import pytest

from constrain import InvalidStateError, allocate_bitmask, compile_grammar
from constrain.cfg.grammar import TERMINATED
from lexer_testing import greedy_token_ids

GRAMMARS = {
    "keywords": 'start: "select"i _WS NAME (_C NAME)* _WS "from"i _WS NAME\n'
                'NAME: /[a-z_][a-z0-9_]*/i\n_WS: /[ ]+/\n_C: /, ?/\n',
    "adjacent": "start: A A B\nA: /a+/\nB: /a?b/\n",
    "ignore": 'start: expr\n?expr: expr "+" term | term\n?term: term "*" atom | atom\n'
              '?atom: NUMBER | "(" expr ")"\nNUMBER: /[0-9]+(\\.[0-9]+)?/\n%ignore / +/\n',
    "nullable": 'start: a b c\na: "x"*\nb: "y"?\nc: "x" | "z" |\n',
    "ambiguous": 'start: s\ns: s s | "a" | "ab" | "b"\n',
    "json": None,
}


def _grammar(name, vocab):
    from constrain import grammar_path

    src = GRAMMARS[name]
    return compile_grammar(grammar_path("json.lark") if src is None else src, vocab)


def _brute_mask(g, state):
    vocab = g.vocab
    return np.array([g.advance(state, t) is not None for t in range(len(vocab))])


def _mask_ids(g, state):
    bm = allocate_bitmask(1, len(g.vocab), backend="numpy")
    g.fill_bitmask(state, bm, 0)
    bits = np.unpackbits(bm[0].view(np.uint8), bitorder="little")[:len(g.vocab)]
    return bits.astype(bool)


@pytest.mark.parametrize("name", list(GRAMMARS))
def test_mask_equals_advance(name, smollm2_vocab):
    g = _grammar(name, smollm2_vocab)
    rng = np.random.default_rng(len(name))
    state = g.initial_state()
    checked = 0
    for _ in range(6):
        want = _brute_mask(g, state)
        got = _mask_ids(g, state)
        diff = np.flatnonzero(want != got)
        assert not len(diff), [(int(t), smollm2_vocab.token_bytes(int(t)), bool(want[t])) for t in diff[:5]]
        checked += 1
        grammar_ids = np.flatnonzero(want & smollm2_vocab.grammar_token_mask)
        if not len(grammar_ids):
            break
        state = g.advance(state, int(rng.choice(grammar_ids)))
    assert checked >= 2


def test_the_compile_makes_the_first_mask(smollm2_vocab):
    """A compiled grammar holds its initial state's mask, made by the compile
    while its tables are in the CPU's caches (``_prepare_first_fill``): the
    first fill is a cached one (a batch serves it without a first visit), and
    it is the mask advance agrees with."""
    g = _grammar("json", smollm2_vocab)
    init = g.initial_state()
    assert g.has_cached_mask(init)
    bm = allocate_bitmask(1, len(smollm2_vocab), backend="numpy")
    assert g.fill_cached_bitmask(init, bm, 0)
    got = np.unpackbits(bm[0].view(np.uint8), bitorder="little")[:len(smollm2_vocab)].astype(bool)
    assert (got == _brute_mask(g, init)).all()


def test_protocol(smollm2_vocab, smollm2_tokenizer):
    g = _grammar("ignore", smollm2_vocab)
    s0 = g.initial_state()
    assert hash(s0) == hash(g.initial_state()) and not g.is_accepting(s0)
    ids = smollm2_tokenizer.encode("(1 + 2.5)*3", add_special_tokens=False)
    s = g.advance_many(s0, ids)
    assert s is not None and g.is_accepting(s)
    eos = smollm2_vocab.eos_token_ids[0]
    end = g.advance(s, eos)
    assert end == TERMINATED and g.is_terminated(end) and not g.is_accepting(end)
    # filled states answer from their row writers (TERMINATED's included: still
    # terminated), and a state never filled is checked as before
    bitmask = allocate_bitmask(1, len(smollm2_vocab), backend="numpy")
    for state in (s0, s, end):
        g.fill_bitmask(state, bitmask, 0)
    assert not g.is_terminated(s0) and not g.is_terminated(s) and g.is_terminated(end)
    assert g.is_terminated(TERMINATED)
    with pytest.raises(InvalidStateError):
        g.is_terminated((False, ((10 ** 6, 10 ** 6),)))
    assert g.advance(end, ids[0]) is None
    assert len(g.allowed_token_ids(end)) == 0
    assert eos in g.allowed_token_ids(s) and eos not in g.allowed_token_ids(s0)
    with pytest.raises(InvalidStateError):
        g.advance("nonsense", ids[0])
    with pytest.raises(InvalidStateError):
        g.advance(s0, len(smollm2_vocab) + 10)
    # torch bitmasks work too, and rows beyond the vocabulary stay zero
    torch = pytest.importorskip("torch")
    bm = torch.full((2, (len(smollm2_vocab) + 31) // 32 + 2), -1, dtype=torch.int32)
    g.fill_bitmask(s, bm, 1)
    assert int(bm[1, -1]) == 0 and int(bm[0, 0]) == -1
    np_bm = allocate_bitmask(2, len(smollm2_vocab), backend="numpy")
    g.fill_bitmask(s, np_bm, 1)
    assert np.array_equal(bm[1, :np_bm.shape[1]].numpy(), np_bm[1])


def test_matches_and_overlaps(smollm2_vocab):
    g = _grammar("keywords", smollm2_vocab)
    assert g.matches("SELECT a, b FROM t")
    assert g.matches("select selection from fromage")  # keywords are valid names here
    assert not g.matches("SELECTa FROM t")
    assert not g.matches("select a from")
    g = _grammar("adjacent", smollm2_vocab)
    assert g.matches("aab") and g.matches("aaaab") and g.matches("aaab")
    assert not g.matches("ab") and not g.matches("aa")


def test_duplicate_tokens_share_masks():
    """Two ids with the same bytes (some vocabularies have them) share a trie node;
    both must be allowed wherever one is, by grammars and regexes alike."""
    from constrain import Vocabulary, compile_regex

    tokens = [b"a", b"b", b"ab", b"ab", b"ba", b'"', b'"a', b'a"', b"a", b"</s>"]
    vocab = Vocabulary.from_tokens(tokens, eos_token_ids=[9])
    for g in (compile_grammar('start: S ("," S)*\nS: /"[ab]*"/\n', vocab),
              compile_grammar("start: X+\nX: /ab?/\n", vocab), compile_regex("(ab|a|b)+", vocab)):
        state = g.initial_state()
        for _ in range(4):
            want = _brute_mask(g, state)
            got = _mask_ids(g, state)
            assert want.tolist() == got.tolist()
            allowed = np.flatnonzero(want[:9])
            if not len(allowed):
                break
            state = g.advance(state, int(allowed[-1]))


def test_fill_bitmask_switching_bitmasks(smollm2_vocab):
    """Fills alternate between bitmasks of different widths and kinds whose rows
    start with stale bits; every row must be exactly the state's mask."""
    g = _grammar("json", smollm2_vocab)
    v = len(smollm2_vocab)
    words = (v + 31) // 32
    masks = [allocate_bitmask(2, v), allocate_bitmask(1, v, backend="numpy"),
             np.full((2, words + 3), -1, dtype=np.int32)]
    rng = np.random.default_rng(3)
    state = g.initial_state()
    states = [state]
    for _ in range(12):
        ids = g.allowed_token_ids(state)
        ids = ids[ids != smollm2_vocab.eos_token_ids[0]]
        if not len(ids):
            break
        state = g.advance(state, int(rng.choice(ids)))
        states.append(state)
    for _ in range(2):
        for s in states:
            want = np.flatnonzero(_brute_mask(g, s)).tolist() if s is states[0] else None
            ids = g.allowed_token_ids(s).tolist()
            if want is not None:
                assert ids == want
            for bm in masks:
                r = len(bm) - 1
                bm[r] = -1
                g.fill_bitmask(s, bm, r)
                got = np.asarray(bm[r])
                bits = np.unpackbits(got[:words].view(np.uint8), bitorder="little")[:v]
                assert np.flatnonzero(bits).tolist() == ids
                assert not got[words:].any()


def test_lexer_tables_grow_mid_expansion():
    """A lexer that outgrows its first tables (1,024 states, 16k pair slots) while
    expanding: the kernel stops, the tables grow, the expansion resumes; masks still
    equal advance. Forty terminals alive together fill the pair arena, a long chain
    the state table, and the inverted walk (most tokens alive) runs on both."""
    from constrain import Vocabulary

    tokens = [b"a", b"aa", b"aaaa", b"a" * 16, b"b", b"ab", b"ba", b"c", b"cb", b"</s>"]
    vocab = Vocabulary.from_tokens(tokens, eos_token_ids=[9])
    rules = "\n".join(f"T{i}: /a{{0,300}}b{{{i + 1}}}/" for i in range(40))
    src = ("start: t | LONG\n?t: " + " | ".join(f"T{i}" for i in range(40)) + "\n" + rules +
           "\nLONG: /c(?:a|aa){0,1500}b/\n")
    g = compile_grammar(src, vocab)
    for path in ([0] * 40 + [3] * 10, [7] + [1] * 700, [7, 2, 3, 0, 4]):
        state = g.initial_state()
        for tok in path:
            assert _brute_mask(g, state).tolist() == _mask_ids(g, state).tolist()
            nxt = g.advance(state, tok)
            if nxt is None:
                break
            state = nxt
        assert _brute_mask(g, state).tolist() == _mask_ids(g, state).tolist()
    assert g.lexer.n > 1024 and g.lexer.pairs.shape[0] > 16 * 1024
    assert g.matches("a" * 300 + "b" * 40) and not g.matches("a" * 301 + "b")
    assert g.matches("c" + "aa" * 700 + "b")


def test_boundary_walks_make_contexts_past_every_table():
    """Tokens that cross several terminal boundaries at once ("((((", "))))")
    send the boundary walk to parser contexts it makes itself; past the
    grammar's first 256 contexts and the parser's first tables, the walk hands
    each new one back to Python to grow the tables (the same context is then
    found interned). Masks equal advance all the way down and back."""
    from constrain import Vocabulary

    tokens = [b"(", b"((((", b"(" * 16, b")", b"))))", b")" * 16, b"x", b"x)", b"x))))", b"</s>"]
    vocab = Vocabulary.from_tokens(tokens, eos_token_ids=[9])
    g = compile_grammar('start: "(" start ")" | "x"\n', vocab)
    depth = 600
    path = [2] * (depth // 16) + [1] * 2 + [6] + [5] * (depth // 16) + [4] * 2
    state = g.initial_state()
    for k, tok in enumerate(path):
        if k % 7 == 0 or k > len(path) - 40:
            assert _brute_mask(g, state).tolist() == _mask_ids(g, state).tolist()
        else:
            g.fill_bitmask(state, allocate_bitmask(1, len(vocab), backend="numpy"), 0)
        state = g.advance(state, tok)
        assert state is not None
    assert g.parser.num_contexts > depth and g._ctx_cap > 256
    assert g.is_accepting(state) and np.flatnonzero(_mask_ids(g, state)).tolist() == [9]


def test_boundary_walk_hands_back_a_start_state_past_the_lexer_table(monkeypatch):
    """A token that ends one terminal and starts a long one ("(a") sends the
    boundary walk to a lexer start state it makes itself; each such state
    expands a chunk of its terminal's automaton (512 states), and the third
    outgrows the lexer's first 1,024 rows: the walk hands that start state back
    to Python (NEED_START), which grows the tables and resumes the same
    expansion. Masks equal advance along each branch."""
    from constrain import Vocabulary
    from constrain.cfg import grammar as grammar_module

    statuses = []
    walk = grammar_module.gk.boundary_walk

    def spy(*args):
        out = walk(*args)
        statuses.append(int(out[0]))
        return out

    monkeypatch.setattr(grammar_module.gk, "boundary_walk", spy)
    tokens = [b"(a", b"[b", b"{c", b"(", b"[", b"{", b"a", b"b", b"c", b")", b"]", b"}",
              b"aa", b"</s>"]
    vocab = Vocabulary.from_tokens(tokens, eos_token_ids=[13])
    g = compile_grammar('start: "(" A ")" | "[" B "]" | "{" C "}"\n'
                        'A: /a{1,900}/\nB: /b{1,900}/\nC: /c{1,900}/\n', vocab)
    # the fill first: advance (the brute force) would make the states itself
    first = _mask_ids(g, g.initial_state()).tolist()
    assert grammar_module.gk.NEED_START in statuses and g.lexer.n > 1024
    assert first == _brute_mask(g, g.initial_state()).tolist()
    for path in ([0, 6, 12, 9], [1, 7, 10], [5, 8, 8, 11], [0] + [12] * 449 + [6, 9]):
        state = g.initial_state()
        for k, tok in enumerate(path):
            if k < 4 or k > len(path) - 3:
                assert _brute_mask(g, state).tolist() == _mask_ids(g, state).tolist()
            state = g.advance(state, tok)
            assert state is not None
        assert g.is_accepting(state)
    # 901 a's are one too many
    state = g.advance(g.initial_state(), 0)
    for _ in range(449):
        state = g.advance(state, 12)
    assert g.advance(state, 12) is None and g.advance(g.advance(state, 6), 6) is None


def test_walks_shared_across_grammars(smollm2_vocab):
    """Two grammars over one vocabulary share the walk of a lexer state they both
    have (a JSON string's body); the second maps the walk's boundary states to its
    own ids. Its masks still equal advance."""
    from constrain import compile_json_schema

    first = compile_json_schema({"type": "object", "properties": {"a": {"type": "string"}}},
                                smollm2_vocab)
    second = compile_json_schema({"type": "array", "items": {"type": "string"}}, smollm2_vocab)
    for g, prefix in ((first, b'{"a":"x'), (second, b'["x')):
        state = g.initial_state()
        for b in prefix:
            tok = next(t for t in range(len(g.vocab)) if g.vocab.token_bytes(t) == bytes([b]))
            assert _brute_mask(g, state).tolist() == _mask_ids(g, state).tolist()
            state = g.advance(state, tok)
        assert _brute_mask(g, state).tolist() == _mask_ids(g, state).tolist()
    assert second.lexer._local_ids, "the second grammar did not reuse the first one's walk"


def test_shared_walk_outlives_its_grammar(smollm2_vocab):
    """A walk is cached with the state ids of the grammar that made it and named
    across grammars on first use elsewhere, by that grammar's state names, which
    the cache keeps: once the grammar is gone (a server's usual case: one grammar
    per request) the next one still reuses its walks, and the names are cut to the
    states in use. Masks still equal advance."""
    import gc

    from constrain import compile_json_schema, default_compiler

    # walks left by other tests may already be named by keys (shared for good)
    default_compiler(smollm2_vocab).lexer_walks.clear()
    schema = {"type": "object", "properties": {"a": {"type": "string"}}}
    first = compile_json_schema(schema, smollm2_vocab)
    tok = {b: next(t for t in range(len(smollm2_vocab)) if smollm2_vocab.token_bytes(t) == bytes([b]))
           for b in b'{"a:x['}
    state = first.initial_state()
    for b in b'{"a":"x':
        first.mask_row(state)
        state = first.advance(state, tok[b])
    names = first.lexer._names
    assert names.pairs.shape[0] >= 16 * 1024  # room to grow
    del first, state
    gc.collect()
    assert names.pairs.shape[0] == names.poff[-1] and len(names.poff) == names.n + 1 < 1024
    second = compile_json_schema({"type": "array", "items": {"type": "string"}}, smollm2_vocab)
    state = second.initial_state()
    for b in b'["x':
        assert _brute_mask(second, state).tolist() == _mask_ids(second, state).tolist()
        state = second.advance(state, tok[b])
    assert _brute_mask(second, state).tolist() == _mask_ids(second, state).tolist()
    assert second.lexer._local_ids, "did not reuse the walks of a grammar that is gone"


def test_utf8_text_skip_matches_advance():
    """Where a state reads any UTF-8 character back to itself (a JSON string's
    body), the lexer walk takes whole subtrees of valid UTF-8 text at once
    (utf8_below, grammar_kernels._reads_utf8). Tokens here are byte-level
    fragments: whole characters, cut ones, stray continuation bytes, overlongs,
    surrogates, code points past U+10FFFF, 0xFF, and characters a class leaves
    out; masks equal advance token by token, in states that read UTF-8 and in
    loop states that do not."""
    from constrain import Vocabulary, compile_grammar, compile_json_schema

    chars = ["é", "ж", "中", "𝄞", "\U0010ffff", "\ud7ff", "\ue000"]
    frags = [b"a", b"ab", b'"', b'a"', b"\\", b"\\n", b"\\u00e9"]
    for c in chars:
        e = c.encode("utf-8")
        frags += [e, e[:1], e[1:], e[:-1], b"a" + e, e + b"a", e + e[:1], e + b'"', e[1:] + e]
    frags += [b"\xc0\x80", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\xff", b"a\xff", b"\xe0\x80",
              b"\xf0\x80\x80", b"\x80a", b"\xc3", b"\xc3\xa9\xc3", b"x\x01", b"{", b"}", b":",
              b"<", b">", b'{"', b'":"', b'"}', b"a>", "é>".encode(), b"</s>"]
    # subtrees the walk may take at once (clean text below a node) and ones it may
    # not (a bad sequence, or a character the state refuses, somewhere below)
    for head in (b"x", b"y", "é".encode(), b"ab"):
        frags += [head + c.encode("utf-8") for c in chars] + [head + "é".encode() * 2]
    frags += [b"y\xff", b"y\xc0\x80", b"y\xed\xa0\x80", "é".encode() + b"\x80",
              b"ab\xf4\x90\x80\x80"]
    tokens = list(dict.fromkeys(frags))
    vocab = Vocabulary.from_tokens(tokens, eos_token_ids=[tokens.index(b"</s>")])
    grammars = [compile_json_schema({"type": "string"}, vocab),
                compile_json_schema({"type": "object", "additionalProperties": {"type": "string"}},
                                    vocab),
                # bodies that loop on ASCII and read most characters, not all:
                # no subtree with one of the others is taken at once
                compile_grammar('start: TAG\nTAG: /<[^>é]*>/', vocab),
                compile_grammar('start: TAG\nTAG: /<[^>\\u4e00-\\u9fff]*>/', vocab)]
    rng = np.random.default_rng(7)
    for g in grammars:
        for _ in range(4):
            state = g.initial_state()
            for _ in range(12):
                want = _brute_mask(g, state)
                assert _mask_ids(g, state).tolist() == want.tolist()
                ok = np.flatnonzero(want[:len(tokens) - 1])
                if not len(ok):
                    break
                state = g.advance(state, int(rng.choice(ok)))


# Length-bounded strings: their positions have no loop for the trie walk to skip,
# so the walk skips subtrees by counting (grammar_kernels.count_run). Brute-force
# masks at positions far from, near and at the bound, with bounds below and above
# the longest token (81 bytes on SmolLM2), escapes and multi-byte characters.
BOUNDED = {
    "maxlength5": ({"type": "string", "maxLength": 5}, ['"', '"ab', '"abcd', '"abcde']),
    "maxlength100": ({"type": "string", "minLength": 2, "maxLength": 100},
                     ['"', '"a', '"' + "x" * 15, '"' + "y" * 40, '"' + "z" * 90, '"' + "w" * 99,
                      '"' + "v" * 100, '"\\u00e9' + "é" * 30 + '\\n']),
    "pattern": ({"type": "object", "properties": {"k": {"type": "string", "pattern": "^[a-z ]{3,70}$"}},
                 "required": ["k"]}, ['{"k":"', '{"k":"ab', '{"k":"' + "a b" * 10, '{"k":"' + "q" * 69]),
    "lark": ('start: NAME "x" NAME\nNAME: /[a-z ]{1,90}/\n', ["a", "ab", "a" * 60, "a" * 89 + "x"]),
}


@pytest.mark.parametrize("name", list(BOUNDED))
def test_bounded_string_masks(name, smollm2_vocab):
    from constrain import compile_json_schema

    src, prefixes = BOUNDED[name]
    g = (compile_grammar(src, smollm2_vocab) if isinstance(src, str)
         else compile_json_schema(src, smollm2_vocab))
    byte_id = {}
    for t, data in enumerate(smollm2_vocab.tokens):
        if data is not None and len(data) == 1 and smollm2_vocab.grammar_token_list[t]:
            byte_id.setdefault(data[0], t)
    for text in prefixes:
        state = g.initial_state()
        if text:
            state = g.advance_many(state, [byte_id[b] for b in text.encode()])
        assert state is not None, text
        want = _brute_mask(g, state)
        got = _mask_ids(g, state)
        diff = np.flatnonzero(want != got)
        assert not len(diff), (text, [(int(t), smollm2_vocab.token_bytes(int(t)), bool(want[t]))
                                      for t in diff[:5]])


def test_unspellable_literal_is_never_allowed():
    """A literal with a byte no token has is an unusable terminal (its chain is not
    written into the stacked table); the alternatives around it still work."""
    from constrain import Vocabulary

    tokens = [b"a", b"b", b"ab", b"c", b"</s>"]
    vocab = Vocabulary.from_tokens(tokens, eos_token_ids=[4])
    g = compile_grammar('start: "ab" "c" | "ax" "c" | "b"\n', vocab)
    assert not g.terms.usable.all()
    for text, ok in [(b"abc", True), (b"b", True), (b"axc", False), (b"ab", False)]:
        assert g.matches(text) is ok, text
    state = g.initial_state()
    assert _mask_ids(g, state).tolist() == _brute_mask(g, state).tolist()


def test_advance_memo_returns_what_a_fresh_step_does(smollm2_vocab):
    """advance keeps its results per (state, token): a second pass over tokens
    (refusals and EOS included) returns equal states, a grammar whose memo
    holds 2 entries (cleared all the time) refuses and ends the same tokens,
    and each memo stays within its bound."""
    src = GRAMMARS["ignore"]
    g = compile_grammar(src, smollm2_vocab)
    tiny = compile_grammar(src, smollm2_vocab, mask_cache_bytes=16 * ((len(smollm2_vocab) + 31) // 32))
    assert tiny._max_masks == 2
    eos = int(smollm2_vocab.eos_token_array[0])
    ids = list(range(0, len(smollm2_vocab), 7)) + [eos]
    for text in (b"", b"(1", b"(1 + 2) * 3"):
        outs = []
        for grammar in (g, tiny):
            state = grammar.initial_state()
            if text:
                state = grammar.advance_bytes(state, text)
            first = [grammar.advance(state, t) for t in ids]
            assert [grammar.advance(state, t) for t in ids] == first
            assert len(grammar._advances) <= grammar._max_masks
            outs.append([None if x is None else x == TERMINATED for x in first])
        assert outs[0] == outs[1]
        assert None in outs[0] and False in outs[0]
        assert (True in outs[0]) == (text == b"(1 + 2) * 3")


def test_first_fill_into_the_last_bitmask_checks_the_state(smollm2_vocab):
    """A state filled for the first time into the bitmask of the previous fill
    (the path that skips the bitmask's checks) is still checked: a foreign or
    malformed state is an InvalidStateError, and the row is right."""
    g = _grammar("keywords", smollm2_vocab)
    bm = allocate_bitmask(2, len(smollm2_vocab), backend="numpy")
    state = g.initial_state()
    g.fill_bitmask(state, bm, 0)
    for bad in ((False, ((10**6, 1),)), (False, ()), (True, ((0, 0),)), ("x", [1]), [1, 2]):
        with pytest.raises(InvalidStateError):
            g.fill_bitmask(bad, bm, 1)
    nxt = g.advance_bytes(state, b"SELECT a")
    g.fill_bitmask(nxt, bm, 1)
    bits = np.unpackbits(bm[1].view(np.uint8), bitorder="little")[:len(smollm2_vocab)].astype(bool)
    assert (bits == _brute_mask(g, nxt)).all()


# counted positions whose subtrees hold multi-byte characters: taken whole where
# the string reads any character (below minLength, or a pattern's ``.``; from
# minLength on a maxLength string's walks are LexerTables._near_walk's), walked
# where it reads only some (a pattern's class: the walk must not take a subtree
# with a character it refuses)
MULTILINGUAL = {
    "maxlength": ({"type": "string", "minLength": 2, "maxLength": 60}, 60),
    "dot": ({"type": "string", "pattern": "^.{2,60}$"}, 60),
    "long_min": ({"type": "string", "minLength": 40, "maxLength": 50}, 50),
    "pattern": ({"type": "string", "pattern": "^[a-zé ]{3,50}$"}, 50),
}


@pytest.mark.parametrize("name", list(MULTILINGUAL))
def test_bounded_string_masks_with_multibyte_subtrees(name, multilingual_vocab):
    from constrain import compile_json_schema

    vocab = multilingual_vocab
    schema, hi = MULTILINGUAL[name]
    g = compile_json_schema(schema, vocab)
    assert g.lexer.trie.multilingual  # the vocabulary for which walks check UTF-8
    byte_id = {data[0]: t for t, data in enumerate(vocab.tokens) if data is not None and len(data) == 1}
    text = "a" if name == "pattern" else "é"
    checked = 0
    for k in (0, 1, 2, 5, 9, 17, 30, hi - 12, hi - 5, hi - 1, hi):
        if not 0 <= k <= hi:
            continue
        state = g.advance_many(g.initial_state(), [byte_id[b] for b in ('"' + text * k).encode()])
        assert state is not None, k
        want = _brute_mask(g, state)
        got = _mask_ids(g, state)
        diff = np.flatnonzero(want != got)
        assert not len(diff), (k, [(int(t), vocab.token_bytes(int(t)), bool(want[t])) for t in diff[:5]])
        checked += 1
    assert checked >= 8
    # the counted walk took subtrees with multi-byte characters whole (maxLength)
    # or never (the pattern's class reads é only)
    from constrain.cfg.lexer_kernels import UTF8_RUN

    lex = g.lexer
    marked = (lex.live[:lex.n, 2] & UTF8_RUN) != 0
    assert marked.any() == (name != "pattern")


def test_wide_rows_through_every_fill_path(o200k_vocab):
    """Over o200k (25 KB rows, past the threshold where rows are written by
    span writers, ``struct.pack_into`` of their non-zero spans) every fill of a
    walk's states, through ``fill_bitmask`` and ``fill_cached_bitmask`` into
    rows of stale bits, writes exactly ``mask_row`` and nothing else: the
    copies of a state's first fills and, from its ``SPAN_WRITER_AFTER``-th
    fill, its span writer."""
    from constrain.cfg.grammar import SPAN_WRITER_AFTER

    g = _grammar("json", o200k_vocab)
    state = g.initial_state()
    states = [state]
    for text in (b'{"', b'ab', b'c"', b': [', b'1', b'2, ', b'tr', b'ue], "', b'x":', b' "', b'y', b'"}'):
        for t in greedy_token_ids(o200k_vocab, text):
            state = g.advance(state, t)
            assert state is not None
            states.append(state)
    bm = allocate_bitmask(3, len(o200k_vocab), backend="numpy")
    kinds = set()
    for k, s in enumerate(states):
        want = g.mask_row(s)
        for n in range(SPAN_WRITER_AFTER + 2):
            bm[:] = -1
            if k % 2 and n % 2:
                assert g.fill_cached_bitmask(s, bm, 1)
            else:
                g.fill_bitmask(s, bm, 1)
            assert np.array_equal(bm[1].view(np.uint32), want), (k, n)
            assert (bm[0] == -1).all() and (bm[2] == -1).all()
        w = g._writers[s]
        assert w.__class__ is not list, k  # bought by now
        kinds.add(len(w[1]) if w.__class__ is tuple else "copy")
    # both kinds of writer: a plain copy (dense rows) and spans
    assert "copy" in kinds and len(kinds) >= 2, kinds
