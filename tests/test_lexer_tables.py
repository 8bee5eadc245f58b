"""The lexer's product states (``grammar_kernels.expand_states``) against their
definition: a lexer state is the sorted list of ``(terminal, local state)`` pairs
alive; on a byte each pair moves by its terminal's automaton, the dead ones drop
out, and what is left is the successor state (0 when nothing is). Checked state
by state, byte by byte, on grammars that reach each way the kernel builds a row:
one pair alone, literals beside one wider terminal (member names and "any other
name"), and literals beside several wider ones."""

from __future__ import annotations

import itertools
import re

import numpy as np
import pytest

from constrain import allocate_bitmask, compile_grammar, compile_json_schema

KEYS = ('start: "{" (pair ("," pair)*)? "}"\n'
        'pair: (K1 | K2 | K3 | K4 | OTHER) VALUE\n'
        'K1: "\\"name\\":"\nK2: "\\"nickname\\":"\nK3: "\\"age\\":"\nK4: "\\"n\\":"\n'
        'OTHER: /"[a-z]*":/\n'
        'VALUE: /[0-9]+/\n')
# a second wide terminal beside the names: rows combined pair by pair
TWO_WIDE = KEYS.replace("| OTHER)", "| OTHER | DIGITS)") + 'DIGITS: /"[a-z0-9]{1,3}":/\n'

SCHEMA = {"type": "object",
          "properties": {"name": {"type": "string", "maxLength": 5}, "nickname": {"type": "string"},
                         "age": {"type": "integer"}, "n": {"type": "boolean"}},
          "additionalProperties": {"type": "integer"}}


def _pairs(lex, s):
    p = lex.pairs[lex.poff[s]:lex.poff[s + 1]].tolist()
    return list(zip(p[0::2], p[1::2]))


def _check_tables(g):
    lex, terms = g.lexer, g.terms
    tab, off, acc_t = terms.rows_of(), terms.offsets, terms.accepting
    expanded = [s for s in range(1, lex.n) if lex.walk_flags[s]]
    assert expanded
    for s in expanded:
        pairs = _pairs(lex, s)
        assert pairs == sorted(pairs) and pairs
        ends = {t for t, v in pairs if acc_t[off[t] + v]}
        assert set(lex.accepting_terminals(s)) == ends
        assert bool(lex.has_acc[s]) == bool(ends)
        loops = np.zeros(4, dtype=np.uint64)
        for b in range(256):
            succ = [(t, int(tab[off[t] + v, b])) for t, v in pairs if tab[off[t] + v, b]]
            got = int(lex.trans[s, b])
            if not succ:
                assert got == 0, (s, b)
                continue
            assert 0 < got < lex.n and _pairs(lex, got) == succ, (s, b, pairs, succ)
            if got == s:
                loops[b >> 6] |= np.uint64(1) << np.uint64(b & 63)
        assert (lex.loops[s] == loops).all(), s
        flag = int(lex.walk_flags[s])
        if ends:
            assert flag == 1
        elif loops.any():
            assert flag == 2
        else:
            assert flag in (3, 4, 5)


def _visit(g, texts):
    """Fill the masks along each text's bytes (building the lexer states met)."""
    bm = allocate_bitmask(1, len(g.vocab), backend="numpy")
    for text in texts:
        fresh, configs = g.initial_state()
        g.fill_bitmask((fresh, configs), bm, 0)
        data = text.encode()
        for k in range(1, len(data) + 1):
            configs = g._step(g.initial_state()[1], data[:k])
            assert configs, text[:k]
            g.fill_bitmask((False, configs), bm, 0)


@pytest.mark.parametrize("source", [KEYS, TWO_WIDE], ids=["one-wide", "two-wide"])
def test_lexer_states_follow_their_pairs(source, smollm2_vocab):
    g = compile_grammar(source, smollm2_vocab)
    _visit(g, ['{"name":1,"nick":22,"n":3,"age":4}', '{"ab1":5}' if source is TWO_WIDE else '{}'])
    _check_tables(g)


def test_json_schema_lexer_states_follow_their_pairs(smollm2_vocab):
    g = compile_json_schema(SCHEMA, smollm2_vocab)
    _visit(g, ['{"name":"abc","nickname":"x y","age":-4,"n":true,"nam":7}'])
    _check_tables(g)


def test_start_state_of_a_terminal_set_is_the_parsers(smollm2_vocab):
    """``LexerTables.start_state`` (a set of terminal ids) and the bitset path
    the grammar takes name the same lexer state, whose pairs are the usable
    terminals at their start."""
    g = compile_grammar(KEYS, smollm2_vocab)
    _visit(g, ['{"name":1,"n":3}'])
    lex = g.lexer
    for c in range(g.parser.num_contexts):
        expected = g.parser.expected(c) | g._ignore
        s = lex.start_state(expected)
        assert s == g._start(c)
        usable = sorted(t for t in expected if g.terms.usable[t])
        assert (_pairs(lex, s) == [(t, 1) for t in usable]) if usable else (s == 0)
    assert lex.start_state(frozenset()) == 0


def test_alternation_of_literals_is_its_trie(smollm2_vocab):
    """An alternation of literals (``true|false``, an enum) is written as the trie of
    its strings, repeats and shared prefixes merged, and accepts exactly them."""
    alts = ["car", "cat", "ca", "dog", "car", "\u00e9t\u00e9"]
    g = compile_grammar("start: W (\",\" W)*\nW: /" + "|".join(alts) + "/\n", smollm2_vocab)
    terms = g.terms
    w = [t for t, term in enumerate(g.ir.terminals) if term.name == "W"][0]
    nodes = {a.encode()[:i] for a in set(alts) for i in range(1, len(a.encode()) + 1)}
    assert terms.offsets[w + 1] - terms.offsets[w] == len(nodes) + 2
    pieces = ["car", "cat", "ca", "c", "cats", "dog", "do", "\u00e9t\u00e9", "\u00e9t", ""]
    word = re.compile("|".join(alts))
    for a, b in itertools.product(pieces, repeat=2):
        text = f"{a},{b}"
        assert g.matches(text) == bool(word.fullmatch(a) and word.fullmatch(b)), text
        assert g.matches(a) == bool(word.fullmatch(a)), a


def test_packed_trie_is_the_kernel_arrays(smollm2_vocab):
    """The trie packed in one buffer (what the walk kernels take) reads back, in
    a kernel, as the arrays of kernel_arrays: same dtypes, shapes and values."""
    from constrain.vocab.trie import TokenTrie
    from constrain.vocab.trie_kernels import trie_views

    trie = TokenTrie.of(smollm2_vocab)
    want = trie.kernel_arrays()
    got = trie_views(*trie.packed())
    for w, g in zip(want[0] + want[1], got[0] + got[1]):
        if isinstance(w, int):
            assert g == w
        else:
            assert g.dtype == w.dtype and g.shape == w.shape and np.array_equal(g, w)


def test_only_broad_walks_are_shared(smollm2_vocab):
    """A walk goes to the compiler's shared cache when the tokens under the
    root bytes its state takes are an eighth of the trie or more (string bodies,
    open keys); narrower ones (literals, numbers) stay with the grammar. Masks
    still equal advance's (test_grammar_masks); here, which walks were shared."""
    from constrain import Compiler

    compiler = Compiler(smollm2_vocab)
    g = compiler.compile_json_schema(SCHEMA)
    state = g.initial_state()
    for b in b'{"name":"Ada","nickname":"x y","age":36,"n":true,"zz":1}':
        g.mask_row(state)
        state = g.advance_bytes(state, bytes([b]))
    lex, trie = g.lexer, g.trie
    first, tok_before = trie.first, trie.subtree_bytes()[1]
    shared = lex._shared
    kinds = set()
    for s in lex._rows:
        live = sum(int(tok_before[trie.skip[first[b]]] - tok_before[first[b]])
                   for b in range(256) if first[b] >= 0 and lex.trans[s, b])
        broad = live >= trie.num_tokens // 8
        kinds.add(broad)
        assert (shared.get(lex._names.key(s)) is not None) == broad, (s, live)
    assert kinds == {True, False}
