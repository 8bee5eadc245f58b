"""Random strings of a compiled grammar's language, and near misses, for oracle tests.

``sample_sentence`` draws a derivation of the grammar (shortest expansions once
``max_depth`` is reached) and a random string for every terminal (a random walk in
its byte DFA that heads for acceptance past ``max_len`` bytes), with ``%ignore``
terminals sprinkled between terminals. ``mutate`` edits a string at random.
"""

from __future__ import annotations

import random

import numpy as np


def _min_heights(ir, usable):
    n_t = ir.n_terminals
    inf = float("inf")
    h = [inf] * len(ir.nonterminals)
    changed = True
    while changed:
        changed = False
        for lhs, rhs in ir.rules:
            v = 1 + max((0 if s < n_t and usable[s] else inf if s < n_t else h[s - n_t])
                        for s in rhs) if rhs else 1
            if v < h[lhs]:
                h[lhs] = v
                changed = True
    return h


def _distances(table, accepting):
    """Steps from each DFA state to acceptance (backwards BFS)."""
    n = table.shape[0]
    dist = np.full(n, 1 << 30, dtype=np.int64)
    dist[accepting] = 0
    for _ in range(n):
        nd = np.minimum(dist, 1 + np.where(table > 0, dist[table], 1 << 30).min(axis=1))
        nd[0] = 1 << 30
        if np.array_equal(nd, dist):
            break
        dist = nd
    return dist


class GrammarSampler:
    """Samples strings from a :class:`constrain.cfg.grammar.GrammarConstraint`'s grammar."""

    def __init__(self, constraint, seed: int = 0):
        self.ir = constraint.ir
        self.terms = constraint.terms
        self.rng = random.Random(seed)
        self.heights = _min_heights(self.ir, self.terms.usable)
        self.by_lhs = {}
        for lhs, rhs in self.ir.rules:
            self.by_lhs.setdefault(lhs, []).append(rhs)
        self._dist = {}

    def terminal_string(self, t: int, max_len: int = 8) -> bytes:
        off = self.terms.offsets
        table = self.terms.rows_of(t)
        acc = self.terms.accepting[off[t]:off[t + 1]]
        if t not in self._dist:
            self._dist[t] = _distances(table, acc)
        dist = self._dist[t]
        s, out = 1, bytearray()
        while True:
            nxt = np.flatnonzero(table[s] > 0)
            if acc[s] and (self.rng.random() < 0.35 or len(out) >= max_len or not len(nxt)):
                return bytes(out)
            if len(out) >= max_len:  # head for acceptance
                nxt = [b for b in nxt if dist[table[s, b]] < dist[s]]
            b = int(self.rng.choice(list(nxt)))
            out.append(b)
            s = int(table[s, b])

    def sentence(self, max_depth: int = 12) -> bytes:
        n_t = self.ir.n_terminals
        out = bytearray()

        def expand(sym, depth):
            if sym < n_t:
                if self.ir.ignore and self.rng.random() < 0.15:
                    out.extend(self.terminal_string(self.rng.choice(self.ir.ignore), 3))
                out.extend(self.terminal_string(sym))
                return
            nt = sym - n_t
            options = [r for r in self.by_lhs.get(nt, ())
                       if all((s < n_t and self.terms.usable[s]) or
                              (s >= n_t and self.heights[s - n_t] < float("inf")) for s in r)]
            if depth >= max_depth:
                best = min(1 + max([0] + [self.heights[s - n_t] if s >= n_t else 0 for s in r])
                           for r in options)
                options = [r for r in options
                           if 1 + max([0] + [self.heights[s - n_t] if s >= n_t else 0 for s in r]) == best]
            for s in self.rng.choice(options):
                expand(s, depth + 1)

        expand(n_t + self.ir.start, 0)
        return bytes(out)


def mutate(text: str, rng: random.Random, alphabet: str) -> str:
    """Delete, insert or replace one character, or swap two neighbours."""
    op = rng.randrange(4)
    i = rng.randrange(len(text) + 1)
    if op == 0 and text:
        i = min(i, len(text) - 1)
        return text[:i] + text[i + 1:]
    if op == 1:
        return text[:i] + rng.choice(alphabet) + text[i:]
    if op == 2 and text:
        i = min(i, len(text) - 1)
        return text[:i] + rng.choice(alphabet) + text[i + 1:]
    if len(text) >= 2:
        i = min(i, len(text) - 2)
        return text[:i] + text[i + 1] + text[i] + text[i + 2:]
    return text + rng.choice(alphabet)
