"""numba kernels of byte-DFA minimisation: Hopcroft's partition refinement, the quotient, byte classes.

Kernels are compiled once and cached on disk (``cache=True``) and release the GIL
(``nogil=True``); they work on flat numpy arrays only.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from constrain.automata.liveness import coreachable_dense


@njit(cache=True, nogil=True)
def coarsest_classes(trans, accepting, live):
    """Coarsest equivalence of a dense DFA (``[n, k]``, 0 = dead): class 0 holds
    every state that cannot accept (``live`` false), and two live states share
    a class exactly when the same strings lead both to acceptance.

    Hopcroft's partition refinement (Hopcroft 1971), splitting by whole blocks
    (every symbol at once) and queueing the smaller half of each split. A
    transition into a state that cannot accept counts as missing, so every
    initial live block starts queued (Valmari and Lehtinen 2008 show the
    largest block may not be left out then). O(m log n) for the m transitions
    between live states; Moore's refinement, used before, needs one pass over
    the table per round and as many rounds as the longest string that tells
    two states apart (``\\w{1,500}``: 154,502 states, 256 rounds, 28 s, then
    given up)."""
    n, k = trans.shape
    # the transitions between live states, grouped by target: (source, symbol)
    start = np.zeros(n + 1, np.int64)
    for s in range(n):
        if live[s]:
            for c in range(k):
                t = trans[s, c]
                if live[t]:
                    start[t + 1] += 1
    for t in range(n):
        start[t + 1] += start[t]
    m = start[n]
    src = np.empty(m, np.int32)
    sym = np.empty(m, np.int16)
    fill = start[:n].copy()
    for s in range(n):
        if live[s]:
            for c in range(k):
                t = trans[s, c]
                if live[t]:
                    src[fill[t]] = s
                    sym[fill[t]] = c
                    fill[t] += 1
    # blocks are ranges of elems; loc[s] is s's index in elems
    cls = np.empty(n, np.int64)
    n_of = np.zeros(3, np.int64)
    for s in range(n):
        g = 0 if not live[s] else (2 if accepting[s] else 1)
        cls[s] = g
        n_of[g] += 1
    first = np.zeros(3, np.int64)
    first[1] = n_of[0]
    first[2] = n_of[0] + n_of[1]
    bstart = np.empty(n + 3, np.int64)
    bend = np.empty(n + 3, np.int64)
    queued = np.zeros(n + 3, np.bool_)
    stack = np.empty(n + 3, np.int64)
    top = 0
    # block ids: 0 the dead states, then the non-empty live groups
    gid = np.zeros(3, np.int64)
    nb = 1
    for g in range(3):
        if g == 0:
            bstart[0] = 0
            bend[0] = n_of[0]
        elif n_of[g] > 0:
            gid[g] = nb
            bstart[nb] = first[g]
            bend[nb] = first[g] + n_of[g]
            queued[nb] = True
            stack[top] = nb
            top += 1
            nb += 1
    elems = np.empty(n, np.int64)
    loc = np.empty(n, np.int64)
    for s in range(n):
        g = cls[s]
        cls[s] = gid[g]
        elems[first[g]] = s
        loc[s] = first[g]
        first[g] += 1
    marked = np.zeros(n + 3, np.int64)
    touched = np.empty(n + 3, np.int64)
    per_sym = np.zeros(k + 1, np.int64)
    gathered = np.empty(m, np.int32)
    while top > 0:
        top -= 1
        b0 = stack[top]
        queued[b0] = False
        # the splitter's in-edges, by symbol (the block as it is now: splits
        # made while it is used are queued on their own)
        per_sym[:] = 0
        for i in range(bstart[b0], bend[b0]):
            t = elems[i]
            for j in range(start[t], start[t + 1]):
                per_sym[sym[j] + 1] += 1
        for c in range(k):
            per_sym[c + 1] += per_sym[c]
        for i in range(bstart[b0], bend[b0]):
            t = elems[i]
            for j in range(start[t], start[t + 1]):
                c = sym[j]
                gathered[per_sym[c]] = src[j]
                per_sym[c] += 1
        lo = 0
        for c in range(k):
            hi = per_sym[c]
            n_touched = 0
            for j in range(lo, hi):
                s = gathered[j]
                b = cls[s]
                if marked[b] == 0:
                    touched[n_touched] = b
                    n_touched += 1
                # the marked states gather at the block's front
                p = bstart[b] + marked[b]
                q = loc[s]
                other = elems[p]
                elems[p] = s
                loc[s] = p
                elems[q] = other
                loc[other] = q
                marked[b] += 1
            lo = hi
            for i in range(n_touched):
                b = touched[i]
                mk = marked[b]
                marked[b] = 0
                size = bend[b] - bstart[b]
                if mk == size:
                    continue
                # the smaller part takes the new id and is queued: with the
                # other part queued or already used, that is enough
                new = nb
                nb += 1
                if mk <= size - mk:
                    bstart[new] = bstart[b]
                    bend[new] = bstart[b] + mk
                    bstart[b] += mk
                else:
                    bstart[new] = bstart[b] + mk
                    bend[new] = bend[b]
                    bend[b] = bstart[b] + mk
                for x in range(bstart[new], bend[new]):
                    cls[elems[x]] = new
                queued[new] = True
                stack[top] = new
                top += 1
    return cls


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
def trim_minimize(trans, accepting, alphabet):
    """Restrict a byte DFA to ``alphabet``, trim it (states that cannot accept
    become dead), minimise it (:func:`coarsest_classes`) and renumber it
    breadth-first from state 1 (dead = 0)."""
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
    return quotient_renumber(full, accepting, coarsest_classes(reduced, accepting, live), 1)
