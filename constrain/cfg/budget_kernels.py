"""numba kernels of token budgets (:attr:`GrammarIR.budgets`): the fewest tokens
that finish a terminal from each of its states, and the mask of a
configuration whose terminal in progress is near its budget.

A budget counts the tokens that carry bytes of one match of a terminal. It is
no property of bytes, so the lexer's walks, which are shared across grammars
and keyed by lexer state alone, cannot see it; these kernels walk the token
trie with the count at hand. See :mod:`constrain.cfg.budgets`.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from constrain.automata.bits import bit_index

#: the fewest tokens of a state no tokens finish
UNREACHABLE = 1 << 30

NEED_NONE = 0
NEED_NEXT = 1
NEED_START = 2
OVERFLOW = 3


@njit(cache=True, nogil=True)
def finish_tokens(table, accepting, off, size, tbyte, tdepth, tskip, tok_start, tok_end,
                  max_depth):
    """Per local state ``q`` of the terminal whose rows are ``table[off:off +
    size]`` (0 dead, 1 start), the fewest tokens whose bytes take it from ``q``
    to an accepting state, ending there (:data:`UNREACHABLE` when none do).

    One walk of the token trie per state collects the states one token
    reaches; a breadth-first search over those edges, backwards from the
    accepting states, counts the rest. ``O(size x trie nodes)``."""
    n_nodes = tskip[0]
    heads = np.full(size, -1, np.int64)  # reversed edges, as linked lists
    nxt = np.empty(0, np.int64)
    src = np.empty(0, np.int32)
    n_edges = 0
    stamp = np.full(size, -1, np.int32)
    st = np.empty(max_depth + 2, np.int32)
    for q in range(1, size):
        st[0] = q
        i = 1
        while i < n_nodes:
            d = tdepth[i]
            s = table[off + st[d - 1], tbyte[i]]
            if s == 0:
                i = tskip[i]
                continue
            st[d] = s
            if tok_start[i] < tok_end[i] and stamp[s] != q:
                stamp[s] = q
                if n_edges == nxt.shape[0]:
                    grown = np.empty(max(64, 2 * n_edges), np.int64)
                    grown[:n_edges] = nxt[:n_edges]
                    nxt = grown
                    g2 = np.empty(max(64, 2 * n_edges), np.int32)
                    g2[:n_edges] = src[:n_edges]
                    src = g2
                src[n_edges] = q
                nxt[n_edges] = heads[s]
                heads[s] = n_edges
                n_edges += 1
            i += 1
    dist = np.full(size, UNREACHABLE, np.int32)
    queue = np.empty(size, np.int32)
    lo = 0
    hi = 0
    for q in range(1, size):
        if accepting[off + q]:
            dist[q] = 0
            queue[hi] = q
            hi += 1
    while lo < hi:
        s = queue[lo]
        lo += 1
        e = heads[s]
        while e >= 0:
            q = src[e]
            if dist[q] == UNREACHABLE:
                dist[q] = dist[s] + 1
                queue[hi] = q
                hi += 1
            e = nxt[e]
    return dist


@njit(cache=True, nogil=True)
def _passes(pairs, poff, budget, finish, offsets, s, used):
    """Whether lexer state ``s`` has a pair that may end a token after
    ``used`` tokens of its match: a terminal without a budget, or one that
    the tokens left can still finish."""
    for j in range(poff[s], poff[s + 1], 2):
        t = pairs[j]
        n = budget[t]
        if n < 0 or finish[offsets[t] + pairs[j + 1]] <= n - used:
            return True
    return False


@njit(cache=True, nogil=True)
def _push(ls, lc, lb, d, m, width, s, c, born):
    for q in range(m):
        if ls[d, q] == s and lc[d, q] == c and lb[d, q] == born:
            return m
    if m == width:
        return -1
    ls[d, m] = s
    lc[d, m] = c
    lb[d, m] = born
    return m + 1


@njit(cache=True, nogil=True)
def budget_walk(trans, acc, has_acc, ctx_next, ctx_start, ignore_bits, pairs, poff, budget,
                finish, offsets, s0, c0, k0, tbyte, tdepth, tskip, tok_start, tok_end, order,
                max_depth, width, row):
    """Set in ``row`` the tokens allowed from configuration ``(c0, s0)`` whose
    terminals in progress have taken ``k0`` tokens: those after which some
    path through the token keeps a pair that may end the token there
    (:func:`_passes`, with ``k0 + 1`` tokens used for the terminals in
    progress and 1 for those started inside the token), and where a terminal
    that ends inside the token after carrying bytes of it stays within its
    budget.

    Every trie node keeps the ``(lexer state, context, born)`` triples alive
    along its path (at most ``width``; ``born``: started inside the token).
    Returns ``(status, a, b)`` as :func:`~constrain.cfg.lexer_kernels.boundary_walk`
    does (``NEED_NEXT`` / ``NEED_START`` for a missing parser entry: fill it
    and call again; ``OVERFLOW``)."""
    ls = np.empty((max_depth + 2, width), np.int32)
    lc = np.empty((max_depth + 2, width), np.int32)
    lb = np.empty((max_depth + 2, width), np.uint8)
    cnt = np.zeros(max_depth + 2, np.int32)
    W = acc.shape[1]
    # every terminal in progress spent: past the first byte, its paths can
    # neither end a token nor cross a boundary (the usual case at the end of
    # a free-text budget; without this the walk went through the whole trie)
    spent = True
    for j in range(poff[s0], poff[s0 + 1], 2):
        n = budget[pairs[j]]
        if n < 0 or k0 + 1 <= n:
            spent = False
    ls[0, 0] = s0
    lc[0, 0] = c0
    lb[0, 0] = 0
    cnt[0] = 1
    n_nodes = tskip[0]
    i = 1
    while i < n_nodes:
        d = tdepth[i]
        b = tbyte[i]
        m = 0
        for p in range(cnt[d - 1]):
            s = ls[d - 1, p]
            c = lc[d - 1, p]
            born = lb[d - 1, p]
            s2 = trans[s, b]
            if s2 != 0 and not (spent and born == 0):
                m = _push(ls, lc, lb, d, m, width, s2, c, born)
                if m < 0:
                    return OVERFLOW, 0, 0
            if not has_acc[s]:
                continue
            # a terminal ends before this byte and the next begins with it
            for w in range(W):
                x = acc[s, w]
                while x != np.uint64(0):
                    low = x & (~x + np.uint64(1))
                    t = w * 64 + bit_index(low)
                    x ^= low
                    if born == 0 and d > 1 and budget[t] >= 0 and k0 + 1 > budget[t]:
                        continue  # it took bytes of this token: one too many
                    if (ignore_bits[w] & low) != np.uint64(0):
                        c2 = c
                    else:
                        c2 = ctx_next[c, t]
                        if c2 == -2:
                            return NEED_NEXT, c, t
                        if c2 < 0:
                            continue
                    l0 = ctx_start[c2]
                    if l0 == -2:
                        return NEED_START, c2, 0
                    s3 = trans[l0, b]
                    if s3 == 0:
                        continue
                    m = _push(ls, lc, lb, d, m, width, s3, c2, 1)
                    if m < 0:
                        return OVERFLOW, 0, 0
        if m == 0:
            i = tskip[i]
            continue
        cnt[d] = m
        if tok_start[i] < tok_end[i]:
            for p in range(m):
                used = 1 if lb[d, p] else k0 + 1
                if _passes(pairs, poff, budget, finish, offsets, ls[d, p], used):
                    for k in range(tok_start[i], tok_end[i]):
                        tok = order[k]
                        row[tok >> 5] |= np.uint32(1) << np.uint32(tok & 31)
                    break
        i += 1
    return NEED_NONE, 0, 0
