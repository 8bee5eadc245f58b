"""The Earley recognizer's grammar analysis (productive and nullable symbols)
against the naive round-robin fixpoints, on random grammars."""

from __future__ import annotations

import random

import pytest

from constrain.cfg.earley import EarleyRecognizer


def _naive(rules, n_t, n_nt, base_ok):
    done = [False] * n_nt
    changed = True
    while changed:
        changed = False
        for lhs, rhs in rules:
            if not done[lhs] and all((x >= n_t and done[x - n_t]) or (x < n_t and base_ok(x))
                                     for x in rhs):
                done[lhs] = True
                changed = True
    return done


@pytest.mark.parametrize("seed", range(200))
def test_fixpoint_matches_naive(seed):
    rng = random.Random(seed)
    n_t, n_nt = rng.randint(1, 5), rng.randint(1, 8)
    rules = []
    for _ in range(rng.randint(1, 14)):
        rhs = tuple(rng.randrange(n_t + n_nt) for _ in range(rng.randint(0, 4)))
        rules.append((rng.randrange(n_nt), rhs))
    ok_terms = {t for t in range(n_t) if rng.random() < 0.7}
    for base_ok in (lambda t: t in ok_terms, lambda t: False, lambda t: True):
        assert EarleyRecognizer._fixpoint(rules, n_t, n_nt, base_ok) == \
            _naive(rules, n_t, n_nt, base_ok), (rules, ok_terms)
