"""Lexer states expanded as they are reached (``LexerTables.chunk``): a grammar
whose lexer expands one state per call -- every walk, boundary walk and step
then meets states not expanded yet and has them expanded -- gives the masks,
acceptance and steps of one that expands everything it reaches at once. The
oracle is the same grammar, compiled by another compiler, with the expansion
unbounded; random walks go deep into length-bounded strings, where the lazy
lexer keeps most states unexpanded."""

from __future__ import annotations

import random

import numpy as np
import pytest

from constrain import Compiler, allocate_bitmask
from constrain.cfg import lexer as lexer_module
from lexer_testing import compile_expanding

SCHEMAS = {
    "bounded": {"type": "object",
                "properties": {"a": {"type": "string", "maxLength": 300},
                               "b": {"type": "string", "minLength": 5, "maxLength": 40},
                               "c": {"type": "string", "pattern": "^[a-z]{3,90}$"},
                               "n": {"type": "integer"}},
                "required": ["a", "b"], "additionalProperties": False},
    "long": {"type": "array", "items": {"type": "string", "maxLength": 2048}, "maxItems": 3},
}
GRAMMARS = {
    "words": 'start: X ("," X)*\nX: /[a-z0-9]{2,60}/\n',
    "text": 'start: "<" T ">" (" " N)?\nT: /[^<>]{1,200}/\nN: /[0-9]{1,12}/\n',
}


def _walk_both(lazy, full, vocab, seed, steps):
    """Masks, acceptance and allowed bytes equal along a random walk; the
    tokens it took."""
    rng = random.Random(seed)
    taken = []
    bm = allocate_bitmask(1, len(vocab), backend="numpy")
    a, b = lazy.initial_state(), full.initial_state()
    for _ in range(steps):
        ra, rb = lazy.mask_row(a), full.mask_row(b)
        assert np.array_equal(ra, rb)
        lazy.fill_bitmask(a, bm, 0)
        assert np.array_equal(bm[0].view(np.uint32), rb)
        assert lazy.is_accepting(a) == full.is_accepting(b)
        ids = full.allowed_token_ids(b)
        ids = [t for t in ids.tolist() if t not in vocab.eos_token_set]
        if not ids:
            break
        # mostly long tokens: the walk gets far into the bounded strings
        pick = max(rng.sample(ids, min(4, len(ids))), key=lambda t: len(vocab.tokens[t] or b""))
        taken.append(pick)
        a, b = lazy.advance(a, pick), full.advance(b, pick)
        assert (a is None) == (b is None)
        if a is None:
            break
        assert lazy.allowed_bytes(a).tolist() == full.allowed_bytes(b).tolist()
    return taken


def _steps_alone(lazy, full, tokens):
    """Steps with no mask in between (the steps then meet the unexpanded
    states first): the same refusals and acceptance, and masks at the end."""
    a, b = lazy.initial_state(), full.initial_state()
    for t in tokens:
        a, b = lazy.advance(a, t), full.advance(b, t)
        assert (a is None) == (b is None)
        if a is None:
            return
        assert lazy.is_accepting(a) == full.is_accepting(b)
    assert np.array_equal(lazy.mask_row(a), full.mask_row(b))


@pytest.mark.parametrize("chunk", [1, 5])
@pytest.mark.parametrize("name", sorted(SCHEMAS) + sorted(GRAMMARS))
def test_lazy_expansion_gives_the_same_masks(name, chunk, smollm2_vocab, monkeypatch):
    kind, source = ("schema", SCHEMAS[name]) if name in SCHEMAS else ("grammar", GRAMMARS[name])
    full = compile_expanding(kind, source, smollm2_vocab, 10 ** 9, monkeypatch)
    lazy = compile_expanding(kind, source, smollm2_vocab, chunk, monkeypatch)
    assert lazy.lexer.chunk == chunk
    fresh = compile_expanding(kind, source, smollm2_vocab, chunk, monkeypatch)
    for seed in range(3):
        _steps_alone(fresh, full, _walk_both(lazy, full, smollm2_vocab, seed, 120))
    # the lazy lexer asked for states as it went; the long bounds it left
    # partly unexpanded (a short one, the walks reach whole)
    lex = lazy.lexer
    assert (lex.walk_flags[1:lex.n] != 0).sum() > 1
    if name in SCHEMAS:
        assert (lex.walk_flags[1:lex.n] == 0).any()


def test_bounded_string_expands_only_what_walks_reach(smollm2_vocab, smollm2_tokenizer):
    """A ``maxLength: 2048`` string's lexer (~14 states a character, ~28k in
    all) expands what the walks of its first 60 characters reach (a token's
    depth of layers ahead: ~2.6k states), not all of it."""
    g = Compiler(smollm2_vocab).compile_json_schema({"type": "string", "maxLength": 2048})
    state = g.initial_state()
    for t in smollm2_tokenizer.encode('"' + "hello world " * 5, add_special_tokens=False):
        g.mask_row(state)
        state = g.advance(state, t)
        assert state is not None
    lex = g.lexer
    expanded = int((lex.walk_flags[1:lex.n] != 0).sum())
    assert expanded < 6_000 and lex.n < 6_000, (expanded, lex.n)
    assert g.mask_row(state).any()


def test_persisted_lexer_keeps_pending_states(smollm2_vocab, smollm2_tokenizer, tmp_path):
    from constrain import load

    schema = {"type": "string", "maxLength": 1000}
    g = Compiler(smollm2_vocab).compile_json_schema(schema)
    texts = ['"' + "abc def " * 30 + '"', '"' + "x" * 400 + '"']
    state = g.initial_state()
    g.mask_row(state)
    path = tmp_path / "g.trellis"
    g.save(path)
    h = load(path, smollm2_vocab, compiler=Compiler(smollm2_vocab))
    assert (h.lexer.walk_flags[1:h.lexer.n] == 0).any()
    for text in texts:
        a, b = g.initial_state(), h.initial_state()
        for t in smollm2_tokenizer.encode(text, add_special_tokens=False):
            assert np.array_equal(g.mask_row(a), h.mask_row(b))
            a, b = g.advance(a, t), h.advance(b, t)
            assert (a is None) == (b is None)
            if a is None:
                break
        else:
            assert g.is_accepting(a) and h.is_accepting(b)


def test_token_budgets_expand_completely(smollm2_vocab, monkeypatch):
    """A grammar with token budgets reads lexer rows in its budget walks without
    asking for them: its lexer expands everything it reaches, whatever the
    chunk, even past table growths."""
    monkeypatch.setattr(lexer_module, "EXPAND_CHUNK", 1)
    monkeypatch.setattr(lexer_module, "EXPAND_PER_BYTE", 0)
    g = Compiler(smollm2_vocab).compile_grammar(
        'start: "<" r ">" N\nr[max_tokens=40]: /[a-z ]{1,900}/\nN: /[0-9]{1,900}/\n')
    assert g.lexer.chunk > 1
    state = g.initial_state()
    g.mask_row(state)
    for t in g.allowed_token_ids(state).tolist()[:1]:
        state = g.advance(state, t)
        g.mask_row(state)
    lex = g.lexer
    assert lex.n > 1024 and (lex.walk_flags[1:lex.n] != 0).all()


PERIODIC = {"type": "object",
            "properties": {"a": {"type": "string", "minLength": 3, "maxLength": 120},
                           "b": {"type": "array", "items": {"type": "string", "maxLength": 90}},
                           "c": {"type": "string", "maxLength": 400}},
            "required": ["a", "b", "c"], "additionalProperties": False}


@pytest.mark.parametrize("seed", range(4))
def test_periodic_walks_give_the_same_masks(seed, smollm2_vocab):
    """A bounded string's positions far from both bounds share one walk and one
    mask per context (``LexerTables._periodic``): masks along random walks --
    through the first characters (below ``minLength``), the middle and up to
    the bound -- equal those of the same grammar walking every position."""
    shared = Compiler(smollm2_vocab).compile_json_schema(PERIODIC)
    alone = Compiler(smollm2_vocab).compile_json_schema(PERIODIC)
    alone.lexer._periodic = lambda s: None
    _walk_both(shared, alone, smollm2_vocab, seed, 400)
    assert shared.lexer._near_refs  # the periodic positions' walks


@pytest.mark.parametrize("lo,hi", [(0, 1), (0, 7), (3, 3), (2, 40), (0, 300)])
def test_bounded_string_rows_written_in_the_kernel(lo, hi, smollm2_vocab):
    """``terminal_kernels.write_bounded`` (the stacked table's pass) writes a
    length-bounded string's rows as ``lexemes.write_bounded_string`` does,
    restricted to the vocabulary's alphabet, tail included: read through the
    virtual rows, from at most two template layers."""
    from constrain.cfg.lexemes import bounded_string_table
    from constrain.cfg.lexemes import bounded_template_size

    g = Compiler(smollm2_vocab).compile_json_schema(
        {"type": "object", "properties": {"s": {"type": "string", "minLength": lo, "maxLength": hi}},
         "required": ["s"], "additionalProperties": False})
    terms = g.terms
    assert len(terms.bounded) == 1
    (t, bound), = terms.bounded.items()
    assert bound == (lo, hi)
    o, end = int(terms.offsets[t]), int(terms.offsets[t + 1])
    alphabet = g.trie.alphabet
    for tail in (b"", b",", b"}", b"}}", b"]"):
        want, acc = bounded_string_table(lo, hi, tail)
        if want.shape[0] == end - o:
            want[:, ~alphabet] = 0
            assert np.array_equal(terms.rows_of(t), want), tail
            assert np.array_equal(terms.accepting[o:end], acc), tail
            written = terms.vmap[o:end, 0]
            assert written.max() - written.min() + 1 == bounded_template_size(lo, hi, tail)
            break
    else:
        raise AssertionError("no tail gave the terminal's size")
