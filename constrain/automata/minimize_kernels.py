"""numba kernels of byte-DFA minimisation: Moore's partition refinement, the quotient, byte classes.

Kernels are compiled once and cached on disk (``cache=True``) and release the GIL
(``nogil=True``); they work on flat numpy arrays only.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from constrain.automata.liveness import coreachable_dense


@njit(cache=True, nogil=True)
def moore_classes(trans, accepting, live, max_rounds):
    """Coarsest equivalence of a dense DFA (Moore's refinement, exact: states are
    grouped by a hash of their signature, then compared in full). Class 0 holds the
    dead state and every state that cannot accept. Returns ``(classes, rounds)``;
    ``rounds`` is -1 when ``max_rounds`` did not suffice."""
    n, k = trans.shape
    cls = np.empty(n, np.int64)
    for s in range(n):
        cls[s] = 0 if not live[s] else (2 if accepting[s] else 1)
    n_cls = 0
    seen = np.zeros(3, np.bool_)
    for s in range(n):
        if not seen[cls[s]]:
            seen[cls[s]] = True
            n_cls += 1
    sig = np.empty((n, k + 1), np.int64)
    h = np.empty(n, np.uint64)
    new = np.empty(n, np.int64)
    for r in range(max_rounds):
        for s in range(n):
            sig[s, 0] = cls[s]
            x = np.uint64(1469598103934665603) ^ np.uint64(cls[s])
            for c in range(k):
                v = cls[trans[s, c]]
                sig[s, c + 1] = v
                x = (x ^ np.uint64(v)) * np.uint64(1099511628211)
            h[s] = x
        order = np.argsort(h)
        count = 0
        for i in range(n):
            s = order[i]
            same = False
            # equal hashes are adjacent; compare in full with each earlier one
            j = i - 1
            while j >= 0 and h[order[j]] == h[s]:
                p = order[j]
                eq = True
                for c in range(k + 1):
                    if sig[s, c] != sig[p, c]:
                        eq = False
                        break
                if eq:
                    new[s] = new[p]
                    same = True
                    break
                j -= 1
            if not same:
                new[s] = count
                count += 1
        if count == n_cls:
            # canonical numbering: the class of state 0 (dead) becomes 0
            d = new[0]
            for s in range(n):
                v = new[s]
                cls[s] = 0 if v == d else (v + 1 if v < d else v)
            return cls, r
        n_cls = count
        for s in range(n):
            cls[s] = new[s]
    return cls, -1


@njit(cache=True, nogil=True)
def quotient_renumber(trans, accepting, cls, start):
    """The quotient DFA by ``cls`` (class 0 = dead), keeping the classes reachable
    from ``start``'s class, numbered breadth-first: dead = 0, start = 1. An empty
    language gives a start state with no way out."""
    n, k = trans.shape
    n_cls = 0
    for s in range(n):
        if cls[s] + 1 > n_cls:
            n_cls = cls[s] + 1
    rep = np.full(n_cls, -1, np.int64)
    for s in range(n):
        if rep[cls[s]] < 0:
            rep[cls[s]] = s
    new_id = np.full(n_cls, -1, np.int64)
    order = np.empty(n_cls + 1, np.int64)
    new_id[0] = 0
    order[0] = 0
    m = 1
    sc = cls[start]
    if sc != 0:
        new_id[sc] = 1
        order[1] = sc
        m = 2
    head = 1
    while head < m:
        c = order[head]
        head += 1
        s = rep[c]
        for b in range(k):
            t = cls[trans[s, b]]
            if new_id[t] < 0:
                new_id[t] = m
                order[m] = t
                m += 1
    size = m if sc != 0 else 2
    out = np.zeros((size, k), np.int32)
    acc = np.zeros(size, np.bool_)
    for i in range(1, m):
        s = rep[order[i]]
        acc[i] = accepting[s]
        for b in range(k):
            out[i, b] = new_id[cls[trans[s, b]]]
    return out, acc


@njit(cache=True, nogil=True)
def column_classes(trans):
    """Classes of identical columns of ``trans`` (``[n, k]``): ``(cls, reps)``, the
    class of each column, numbered by first column, and that first column. Columns
    are hashed first, so the cost is O(n k) plus one comparison per equal hash."""
    n, k = trans.shape
    hashes = np.zeros(k, np.uint64)
    for b in range(k):
        h = np.uint64(1469598103934665603)
        for s in range(n):
            h = (h ^ np.uint64(trans[s, b] + 1)) * np.uint64(1099511628211)
        hashes[b] = h
    cls = np.full(k, -1, np.int32)
    reps = np.zeros(k, np.int64)
    m = 0
    for b in range(k):
        for j in range(m):
            r = reps[j]
            if hashes[r] == hashes[b]:
                same = True
                for s in range(n):
                    if trans[s, r] != trans[s, b]:
                        same = False
                        break
                if same:
                    cls[b] = j
                    break
        if cls[b] < 0:
            reps[m] = b
            cls[b] = m
            m += 1
    return cls, reps[:m]


@njit(cache=True, nogil=True)
def trim_minimize(trans, accepting, alphabet, max_rounds):
    """Restrict a byte DFA to ``alphabet``, trim it (states that cannot accept
    become dead), minimise it (Moore, exact) and renumber it breadth-first from
    state 1 (dead = 0). Minimisation is skipped, not approximated, when it does
    not converge within ``max_rounds``."""
    n, k = trans.shape
    full = trans.copy()
    for b in range(k):
        if not alphabet[b]:
            for s in range(n):
                full[s, b] = 0
    reps = column_classes(full)[1]  # columns outside the alphabet are dead: zero
    reduced = np.empty((n, reps.shape[0]), np.int32)
    for s in range(n):
        for j in range(reps.shape[0]):
            reduced[s, j] = full[s, reps[j]]
    live = coreachable_dense(reduced, accepting)
    cls, rounds = moore_classes(reduced, accepting, live, max_rounds)
    if rounds < 0:
        for s in range(n):
            cls[s] = s if live[s] else 0
    return quotient_renumber(full, accepting, cls, 1)
