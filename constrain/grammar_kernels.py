"""numba kernels of the grammar runtime: the lexer product automaton and the two
token-trie walks (per lexer state, and across terminal boundaries).

Conventions: a *lexer state* is a global ``int32`` id into one table ``[n, 256]``
(0 is dead). ``acc`` holds, per lexer state, a bitset (uint64 words) of the
terminals whose automaton accepts there. Parser contexts are ``int32`` ids;
``ctx_next[c, t]`` is the context after terminal ``t`` (-1: refused, -2: not yet
computed) and ``ctx_start[c]`` the lexer state that starts the next terminal
(-2: not yet computed). A kernel that meets a -2 stops and reports it, Python fills
the entry in, and the kernel runs again: the tables only ever grow.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from .kernels import bit_index, grow_rows, table_probe, table_rehash

NEED_NONE = 0
NEED_NEXT = 1
NEED_START = 2
OVERFLOW = 3


@njit(cache=True, nogil=True)
def _hash_vec(v):
    h = np.uint64(1469598103934665603)
    for x in v:
        h = (h ^ np.uint64(x)) * np.uint64(1099511628211)
        h ^= h >> np.uint64(29)
    return h


@njit(cache=True, nogil=True)
def joint_byte_classes(classes):
    """Bytes that every row of ``classes`` (``[k, 256]`` class ids, each row
    numbered from 0) puts in one class form one joint class. Returns ``(cls,
    reps)``: each byte's joint class, numbered by first byte, and that first byte.
    (``np.unique(axis=0)`` on the stacked columns did the same in ~80 us.)"""
    cls = np.zeros(256, np.int32)
    n = 1
    for r in range(classes.shape[0]):
        row = classes[r]
        width = row.max() + 1
        relabel = np.full(n * width, -1, np.int32)
        m = 0
        for b in range(256):
            key = cls[b] * width + row[b]
            c = relabel[key]
            if c < 0:
                c = relabel[key] = m
                m += 1
            cls[b] = c
        n = m
    reps = np.zeros(n, np.int64)
    seen = np.zeros(n, np.bool_)
    for b in range(256):
        if not seen[cls[b]]:
            seen[cls[b]] = True
            reps[cls[b]] = b
    return cls, reps


@njit(cache=True, nogil=True)
def install_states(table, cls, gid, new, vecs, ids, offsets, accepting, first,
                   trans, acc, has_acc, loops, flags):
    """Write the lexer states ``new`` (product states, numbered ``first``, ``first +
    1``, ... globally) into the global tables: transitions by byte (``table`` is
    by class ``cls[b]``; ``gid`` maps product states to global ones), the bitset
    of accepting terminals, the bytes on which a state stays itself, and the
    walk flags (1: some terminal may end; 2: else some byte loops). One pass
    instead of ~10 numpy calls over (states, 256) arrays, ~100 us a build."""
    for j in range(new.shape[0]):
        p = new[j]
        g = first + j
        ends = False
        for k in range(ids.shape[0]):
            v = vecs[p, k]
            t = ids[k]
            if v > 0 and accepting[offsets[t] + v]:
                acc[g, t >> 6] |= np.uint64(1) << np.uint64(t & 63)
                ends = True
        has_acc[g] = ends
        looped = False
        for b in range(256):
            nxt = gid[table[p, cls[b]]]
            trans[g, b] = nxt
            if nxt == g:
                loops[g, b >> 6] |= np.uint64(1) << np.uint64(b & 63)
                looped = True
        flags[g] = 1 if ends else (2 if looped else 0)


@njit(cache=True, nogil=True)
def product_dfa(tab, offsets, starts, reps, max_states):
    """Run k terminal DFAs side by side (their product, which is deterministic).

    ``tab`` stacks the terminals' tables (terminal ``i``'s rows start at row
    ``offsets[i]``, with local state ids, 0 dead); ``starts[i]`` is
    its local start state, 0 to leave it out. ``reps`` is one byte per byte class.
    Returns ``(table, vecs, n)``: ``table[s, c]`` the successor of product state
    ``s`` on class ``c`` (0: dead; state 1 the start), ``vecs[s]`` the local state
    of each terminal; ``n`` is -1 past ``max_states``.
    """
    k = starts.shape[0]
    nc = reps.shape[0]
    cap = 64
    vecs = np.zeros((cap, k), np.int32)
    table = np.zeros((cap, nc), np.int32)
    hashes = np.zeros(cap, np.uint64)
    hcap = 256
    htab = np.full(hcap, -1, np.int64)
    # state 0: all dead
    hashes[0] = _hash_vec(vecs[0])
    htab[hashes[0] & np.uint64(hcap - 1)] = 0
    vecs[1] = starts
    hashes[1] = _hash_vec(vecs[1])
    sl = hashes[1] & np.uint64(hcap - 1)
    while htab[sl] >= 0:
        sl = (sl + np.uint64(1)) & np.uint64(hcap - 1)
    htab[sl] = 1
    count = 2
    nxt = np.zeros(k, np.int32)
    d = 1
    while d < count:
        for c in range(nc):
            b = reps[c]
            alive = False
            for i in range(k):
                s = vecs[d, i]
                if s != 0:
                    t = tab[offsets[i] + s, b]
                    nxt[i] = t
                    if t != 0:
                        alive = True
                else:
                    nxt[i] = 0
            if not alive:
                continue
            h = _hash_vec(nxt)
            slot, found = table_probe(htab, hashes, vecs, nxt, h)
            if found < 0:
                if count >= max_states:
                    return table[:0], vecs[:0], -1
                if count == cap:
                    cap *= 2
                    vecs = grow_rows(vecs, count, cap, np.int32(0))
                    table = grow_rows(table, count, cap, np.int32(0))
                    nh = np.zeros(cap, np.uint64)
                    nh[:count] = hashes[:count]
                    hashes = nh
                found = count
                vecs[count] = nxt
                hashes[count] = h
                htab[slot] = count
                count += 1
                if 2 * count > hcap:
                    hcap *= 4
                    htab = table_rehash(hashes, count, hcap)
            table[d, c] = found
        d += 1
    return table[:count], vecs[:count], count


@njit(cache=True, nogil=True)
def lexer_walk(trans, flags, loops, state, tbyte, tdepth, tskip, node_tok, below,
               tok_before, order, max_depth, row, out_node, out_state):
    """Walk the token trie from lexer state ``state`` without ending a terminal.

    ``trans`` is the flat transition table (state * 256 + byte). Sets in ``row``
    (uint32 words, one scratch word past the vocabulary for ``node_tok``'s "no
    token") the tokens along which the current terminals stay alive, and writes to
    ``out_node``/``out_state`` the trie nodes below the root, with children, at
    which some terminal could end, and the lexer state there -- where a token may
    cross into the next terminal. Returns their number, or -1 when the output
    arrays are too small (call again with larger ones; the buffers are
    preallocated because growing them inside the loop makes it three times
    slower).

    ``flags[s]`` is 1 when some terminal may end in ``s``, 2 when none may and
    some byte loops on ``s``, else 0. ``loops[s]`` are the bytes on which ``s``
    stays ``s`` and ``below[i]`` the bytes under node ``i`` (256 bits each): when
    every byte under a node loops in a state where no terminal ends (a JSON
    string's body), the whole subtree is allowed and stays there, and its tokens
    (``order[tok_before[i + 1]:tok_before[tskip[i]]]``) are set without walking
    it -- a string body's walk over SmolLM2 went from 380 to 62 us.
    """
    stack = np.zeros(max_depth + 2, np.int32)
    stack[0] = state
    n_nodes = tbyte.shape[0]
    cap = out_node.shape[0]
    n = 0
    i = 1
    while i < n_nodes:
        d = tdepth[i]
        s = trans[(stack[d - 1] << 8) | tbyte[i]]
        if s == 0:
            i = tskip[i]
            continue
        stack[d] = s
        t = node_tok[i]
        row[t >> 5] |= np.uint32(1) << np.uint32(t & 31)
        # test the per-state flags first: they branch the same way for long runs
        # of nodes, where "has children" is a coin flip the CPU mispredicts (in
        # the other order a counting state's walk took 620 instead of 350 us)
        f = flags[s]
        if f == 0:
            i += 1
            continue
        if f == 1:
            if tskip[i] > i + 1:
                if n < cap:
                    out_node[n] = i
                    out_state[n] = s
                n += 1
        else:
            nxt = tskip[i]
            if nxt > i + 1 and (
                    (below[i, 0] & ~loops[s, 0]) | (below[i, 1] & ~loops[s, 1])
                    | (below[i, 2] & ~loops[s, 2]) | (below[i, 3] & ~loops[s, 3])) == np.uint64(0):
                for k in range(tok_before[i + 1], tok_before[nxt]):
                    t = order[k]
                    row[t >> 5] |= np.uint32(1) << np.uint32(t & 31)
                i = nxt
                continue
        i += 1
    return n if n <= cap else -1


@njit(cache=True, nogil=True)
def _push(ls, lc, d, m, width, s, c):
    """Add the pair ``(s, c)`` at depth ``d`` (``m`` pairs there so far) unless
    present; the new count, or -1 past ``width``."""
    for q in range(m):
        if ls[d, q] == s and lc[d, q] == c:
            return m
    if m == width:
        return -1
    ls[d, m] = s
    lc[d, m] = c
    return m + 1


@njit(cache=True, nogil=True)
def _end_terminals(trans, acc, ctx_next, ctx_start, ignore_bits, s, c, b, ls, lc, d, m, width):
    """End each terminal accepting in lexer state ``s`` (context ``c``), start the
    next one and, when ``b >= 0``, read byte ``b`` with it; add the pairs at depth
    ``d``. Returns ``(status, m, a, t)`` as :func:`boundary_walk` reports a
    missing table entry or an overflow."""
    W = acc.shape[1]
    for w in range(W):
        x = acc[s, w]
        while x != np.uint64(0):
            low = x & (~x + np.uint64(1))
            t = w * 64 + bit_index(low)
            x ^= low
            if (ignore_bits[w] & low) != np.uint64(0):
                c2 = c
            else:
                c2 = ctx_next[c, t]
                if c2 == -2:
                    return NEED_NEXT, m, c, t
                if c2 < 0:
                    continue
            l0 = ctx_start[c2]
            if l0 == -2:
                return NEED_START, m, c2, 0
            s3 = l0 if b < 0 else trans[l0, b]
            if s3 == 0:
                continue
            m = _push(ls, lc, d, m, width, s3, c2)
            if m < 0:
                return OVERFLOW, m, 0, 0
    return NEED_NONE, m, 0, 0


@njit(cache=True, nogil=True)
def boundary_walk(trans, acc, ctx_next, ctx_start, ignore_bits, starts_node, starts_state, ctx, j0,
                  tbyte, tdepth, tskip, tok_start, tok_end, order, max_depth, width, row):
    """The tokens that cross at least one terminal boundary below given trie nodes.

    For each ``(starts_node[j], starts_state[j])`` — a trie node reached from the
    current lexer state without a boundary, where some terminal may end — end each
    accepting terminal there (the parser, through ``ctx_next``, decides which may),
    start the next terminal (``ctx_start``) and walk the node's subtree, where
    terminals may end again. Every node keeps the set of ``(lexer state, context)``
    pairs alive along its path, at most ``width``.

    Returns ``(status, a, b, j)``: ``status`` 0 when done (bits set in ``row``),
    ``NEED_NEXT`` with ``(a, b) = (context, terminal)`` or ``NEED_START`` with
    ``a`` the context whose start state is missing, ``OVERFLOW`` when a node had
    more than ``width`` pairs; ``j`` is the start node being walked, where a call
    after the missing entry is filled in may resume (bits only ever get set, so
    walking node ``j`` again is harmless).
    """
    ls = np.zeros((max_depth + 2, width), np.int32)
    lc = np.zeros((max_depth + 2, width), np.int32)
    cnt = np.zeros(max_depth + 2, np.int32)
    for j in range(j0, starts_node.shape[0]):
        root = starts_node[j]
        d0 = tdepth[root]
        # the pairs at the root node: each accepting terminal ended, next one started
        status, m, a, t = _end_terminals(trans, acc, ctx_next, ctx_start, ignore_bits,
                                         starts_state[j], ctx, -1, ls, lc, d0, 0, width)
        if status != NEED_NONE:
            return status, a, t, j
        if m == 0:
            continue
        cnt[d0] = m
        end = tskip[root]
        i = root + 1
        while i < end:
            d = tdepth[i]
            b = tbyte[i]
            m = 0
            for p in range(cnt[d - 1]):
                s = ls[d - 1, p]
                c = lc[d - 1, p]
                # the terminal goes on
                s2 = trans[s, b]
                if s2 != 0:
                    m = _push(ls, lc, d, m, width, s2, c)
                    if m < 0:
                        return OVERFLOW, 0, 0, j
                # or it ends before this byte and the next one begins with it
                status, m, a, t = _end_terminals(trans, acc, ctx_next, ctx_start, ignore_bits,
                                                 s, c, b, ls, lc, d, m, width)
                if status != NEED_NONE:
                    return status, a, t, j
            if m == 0:
                i = tskip[i]
                continue
            cnt[d] = m
            for k in range(tok_start[i], tok_end[i]):
                t = order[k]
                row[t >> 5] |= np.uint32(1) << np.uint32(t & 31)
            i += 1
    return NEED_NONE, 0, 0, 0
