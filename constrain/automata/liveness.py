"""numba kernels for liveness in byte DFAs: co-reachability and trimming of dead states.

Kernels are compiled once and cached on disk (``cache=True``) and release the GIL
(``nogil=True``); they work on flat numpy arrays only.
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True, nogil=True)
def coreachable_dense(trans, accepting):
    """States of a dense DFA table (``[states, columns]``, 0 = dead) from which an
    accepting state is reachable."""
    n, k = trans.shape
    counts = np.zeros(n + 1, np.int64)
    for s in range(n):
        for c in range(k):
            counts[trans[s, c] + 1] += 1
    for s in range(n):
        counts[s + 1] += counts[s]
    rev = np.empty(counts[n], np.int32)
    fill = counts[:-1].copy()
    for s in range(n):
        for c in range(k):
            t = trans[s, c]
            rev[fill[t]] = s
            fill[t] += 1
    live = np.zeros(n, np.bool_)
    queue = np.empty(n, np.int32)
    tail = 0
    for s in range(1, n):
        if accepting[s]:
            live[s] = True
            queue[tail] = s
            tail += 1
    head = 0
    while head < tail:
        t = queue[head]
        head += 1
        for j in range(counts[t], counts[t + 1]):
            s = rev[j]
            if s != 0 and not live[s]:
                live[s] = True
                queue[tail] = s
                tail += 1
    return live


@njit(cache=True, nogil=True)
def trim_dead(trans, accepting):
    """A copy of a byte DFA (``[n, 256]``, 0 dead) with every transition into a
    state that cannot accept sent to the dead state: trimmed, not minimised or
    renumbered (one pass, for automata near-minimal by construction)."""
    n, k = trans.shape
    live = coreachable_dense(trans, accepting)
    out = np.zeros((n, k), np.int32)
    for s in range(n):
        for b in range(k):
            if live[trans[s, b]]:
                out[s, b] = trans[s, b]
    return out, accepting & live
