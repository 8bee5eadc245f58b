"""The interned Earley recognizer against a textbook Earley recognizer (full item
sets, per-column fixpoint, no interning) on random grammars -- left-recursive,
ambiguous and with empty rules -- and every terminal string up to a length."""

from __future__ import annotations

import itertools
import random

import pytest

from constrain.cfg.earley import EarleyRecognizer
from constrain.cfg.ir import GrammarIR, Terminal


def _reference(rules, n_t, start, word) -> bool:
    """Earley (1970) with each column closed by iterating to a fixpoint, which
    handles empty rules without any nullable analysis."""
    aug = len(rules)
    rules = list(rules) + [(10**6, (n_t + start,))]  # S' -> start, S' used nowhere
    cols = [{(aug, 0, 0)}]
    for i in range(len(word) + 1):
        col = cols[i]
        changed = True
        while changed:
            changed = False
            for (r, d, o) in list(col):
                lhs, rhs = rules[r]
                if d == len(rhs):
                    for (r2, d2, o2) in list(cols[o] if o < i else col):
                        rhs2 = rules[r2][1]
                        if d2 < len(rhs2) and rhs2[d2] == n_t + lhs and (r2, d2 + 1, o2) not in col:
                            col.add((r2, d2 + 1, o2))
                            changed = True
                elif rhs[d] >= n_t:
                    for r2, (lhs2, _) in enumerate(rules):
                        if lhs2 == rhs[d] - n_t and (r2, 0, i) not in col:
                            col.add((r2, 0, i))
                            changed = True
        if i == len(word):
            return (aug, 1, 0) in col
        cols.append({(r, d + 1, o) for (r, d, o) in col
                     if d < len(rules[r][1]) and rules[r][1][d] == word[i]})


def _random_grammar(rng):
    n_t, n_nt = rng.randint(1, 3), rng.randint(1, 5)
    rules = []
    for lhs in range(n_nt):
        for _ in range(rng.randint(1, 3)):
            rules.append((lhs, tuple(rng.randrange(n_t + n_nt) for _ in range(rng.randint(0, 3)))))
    ir = GrammarIR(terminals=[Terminal(f"T{t}", f"t{t}", 0, None) for t in range(n_t)],
                   nonterminals=[f"n{k}" for k in range(n_nt)], rules=rules, start=0)
    return ir, n_t


@pytest.mark.parametrize("seed", range(150))
def test_recognizer_matches_textbook_earley(seed):
    rng = random.Random(seed)
    ir, n_t = _random_grammar(rng)
    try:
        rec = EarleyRecognizer(ir)
    except Exception:
        # the start symbol derives nothing: the reference must agree on every word
        for n in range(5):
            for word in itertools.product(range(n_t), repeat=n):
                assert not _reference(ir.rules, n_t, 0, word)
        return
    for n in range(6 if n_t < 3 else 5):
        for word in itertools.product(range(n_t), repeat=n):
            assert rec.recognize(word) == _reference(ir.rules, n_t, 0, word), (ir.rules, word)
    # expected() names exactly the terminals next() accepts
    for c in range(rec.num_contexts):
        assert rec.expected(c) == {t for t in range(n_t) if rec.next(c, t) >= 0}


def test_loops_reuse_contexts():
    """``value ("," value)*``: a long list cycles through a fixed set of contexts."""
    # start: "[" items "]" ; items: items "," "x" | "x"
    ir = GrammarIR(terminals=[Terminal(n, n, 0, None) for n in ("L", "R", "C", "X")],
                   nonterminals=["start", "items"],
                   rules=[(0, (0, 5, 1)), (1, (5, 2, 3)), (1, (3,))], start=0)
    rec = EarleyRecognizer(ir)
    word = [0, 3] + [2, 3] * 50 + [1]
    assert rec.recognize(word)
    assert rec.num_contexts < 10
    assert not rec.recognize(word[:-2] + [1])


def test_tables_grow_past_their_initial_room():
    """Deep nesting (thousands of contexts, items and roots) and a prediction of
    thousands of dotted rules: every table of the kernels grows, and the
    answers stay right."""
    # start: "(" start ")" | "x"
    ir = GrammarIR(terminals=[Terminal(n, n, 0, None) for n in ("L", "R", "X")],
                   nonterminals=["start"], rules=[(0, (0, 3, 1)), (0, (2,))], start=0)
    rec = EarleyRecognizer(ir)
    depth = 3000
    word = [0] * depth + [2] + [1] * depth
    assert rec.recognize(word)
    assert rec.num_contexts > depth
    assert not rec.recognize(word[:-1])
    assert not rec.recognize(word + [1])
    # start: "a" n_0, n_i: n_{i+1} T_i | T_i -- after "a", predicting n_0
    # predicts every rule
    n = 1500
    rules = [(i, (n + 1 + i + 1, i)) for i in range(n - 1)] + [(i, (i,)) for i in range(n)]
    rules.append((n, (n, n + 1)))
    ir = GrammarIR(terminals=[Terminal(f"T{i}", f"t{i}", 0, None) for i in range(n)]
                   + [Terminal("A", "a", 0, None)],
                   nonterminals=[f"n{i}" for i in range(n)] + ["start"], rules=rules, start=n)
    rec = EarleyRecognizer(ir)
    assert rec.expected(0) == frozenset([n])
    assert rec.expected(rec.next(0, n)) == frozenset(range(n))
    assert rec.recognize([n, 7, 6, 5, 4, 3, 2, 1, 0])
    assert rec.recognize([n, n - 1] + list(range(n - 2, -1, -1)))
    assert not rec.recognize([n, 0, 1])
    assert not rec.recognize([n, 7, 5, 4, 3, 2, 1, 0])
    assert not rec.recognize([7, 6, 5, 4, 3, 2, 1, 0])
    # the same chain as the start symbol: context 0's prediction outgrows its
    # table while the recognizer is built
    ir = GrammarIR(terminals=ir.terminals[:n], nonterminals=[f"n{i}" for i in range(n)],
                   rules=[(i, (n + i + 1, i)) for i in range(n - 1)] + [(i, (i,)) for i in range(n)],
                   start=0)
    rec = EarleyRecognizer(ir)
    assert rec.expected(0) == frozenset(range(n))
    assert rec.recognize([3, 2, 1, 0]) and not rec.recognize([3, 1, 0])


def test_bad_context_or_terminal_is_an_index_error():
    """The kernel trusts its indices: the recognizer checks them first."""
    ir = GrammarIR(terminals=[Terminal(n, n, 0, None) for n in ("A", "B")],
                   nonterminals=["start"], rules=[(0, (0, 1))], start=0)
    rec = EarleyRecognizer(ir)
    for c, t in ((0, 2), (0, -1), (5, 0), (-1, 0)):
        with pytest.raises(IndexError):
            rec.next(c, t)
    assert rec.recognize([0, 1]) and not rec.recognize([1])


def test_max_contexts_bounds_the_chart():
    """Past ``max_contexts`` chart columns the recognizer refuses with
    GrammarTooComplexError (a server's memory bound), and keeps what it built."""
    from constrain.errors import GrammarTooComplexError

    ir = GrammarIR(terminals=[Terminal(n, n, 0, None) for n in ("L", "R", "X")],
                   nonterminals=["start"], rules=[(0, (0, 3, 1)), (0, (2,))], start=0)
    rec = EarleyRecognizer(ir, max_contexts=40)
    assert rec.recognize([0] * 10 + [2] + [1] * 10)
    with pytest.raises(GrammarTooComplexError, match="40 chart columns"):
        rec.recognize([0] * 100 + [2] + [1] * 100)
    assert rec.num_contexts <= 40
    assert rec.recognize([0] * 10 + [2] + [1] * 10)
