"""numba kernels for the loops over the vocabulary.

Everything here works on flat numpy arrays: the token trie in preorder, byte DFA
tables, bitmask rows. Kernels are compiled once and cached on disk
(``cache=True``), and release the GIL (``nogil=True``).
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True, nogil=True, inline="always")
def bit_index(low):
    """The index of the one set bit of ``low`` (a uint64 power of two)."""
    t = 0
    while low > np.uint64(1):
        low >>= np.uint64(1)
        t += 1
    return t


@njit(cache=True, nogil=True)
def build_trie(data, offsets, order, n_nodes_max):
    """A trie in preorder from token ids ``order`` sorted by their bytes.

    Returns ``(byte, depth, skip, tok_start, tok_end, n_nodes)``: node ``i`` is
    reached by byte ``byte[i]`` at depth ``depth[i]``; its subtree is nodes
    ``i..skip[i]-1``; the tokens ending there are ``order[tok_start[i]:tok_end[i]]``.
    Node 0 is the root (empty prefix).
    """
    byte = np.zeros(n_nodes_max, np.uint8)
    depth = np.zeros(n_nodes_max, np.int32)
    skip = np.zeros(n_nodes_max, np.int32)
    tok_start = np.zeros(n_nodes_max, np.int32)
    tok_end = np.zeros(n_nodes_max, np.int32)
    max_len = 0
    for k in range(order.shape[0]):
        t = order[k]
        ln = offsets[t + 1] - offsets[t]
        if ln > max_len:
            max_len = ln
    stack = np.zeros(max_len + 2, np.int32)  # node index at each depth of the path
    n = 1
    prev_len = 0
    prev = -1
    for k in range(order.shape[0]):
        t = order[k]
        s = offsets[t]
        ln = offsets[t + 1] - s
        lcp = 0
        if prev >= 0:
            ps = offsets[prev]
            pl = offsets[prev + 1] - ps
            m = min(pl, ln)
            while lcp < m and data[ps + lcp] == data[s + lcp]:
                lcp += 1
        # close the nodes of the previous path below the common prefix
        d = prev_len
        while d > lcp:
            skip[stack[d]] = n
            d -= 1
        for d in range(lcp + 1, ln + 1):
            byte[n] = data[s + d - 1]
            depth[n] = d
            stack[d] = n
            n += 1
        node = stack[ln]
        if tok_end[node] == 0:
            tok_start[node] = k
        tok_end[node] = k + 1
        prev = t
        prev_len = ln
    d = prev_len
    while d > 0:
        skip[stack[d]] = n
        d -= 1
    skip[0] = n
    return byte[:n], depth[:n], skip[:n], tok_start[:n], tok_end[:n], n


@njit(cache=True, nogil=True)
def trie_parents(tdepth):
    """Per trie node, its parent (node 0 is the root: its own entry is 0); in
    preorder a node's parent is the last node seen one level up."""
    n = tdepth.shape[0]
    parent = np.zeros(n, np.int32)
    stack = np.zeros(n + 1, np.int32)
    for i in range(1, n):
        parent[i] = stack[tdepth[i] - 1]
        stack[tdepth[i]] = i
    return parent


@njit(cache=True, nogil=True)
def subtree_bytes(tbyte, tdepth, tskip, tok_start, tok_end):
    """Per trie node, the bytes that occur strictly below it (256 bits in four
    uint64 words), and ``tok_before[i]``: how many tokens end at nodes before
    ``i`` -- the tokens below node ``i`` are ``order[tok_before[i + 1]:
    tok_before[tskip[i]]]`` (preorder keeps a subtree's tokens together)."""
    n = tbyte.shape[0]
    below = np.zeros((n, 4), np.uint64)
    # children come after their parent in preorder: fold each node into its
    # parent, last node first
    parent = trie_parents(tdepth)
    for i in range(n - 1, 0, -1):
        p = parent[i]
        b = tbyte[i]
        below[p, b >> 6] |= np.uint64(1) << np.uint64(b & 63)
        for w in range(4):
            below[p, w] |= below[i, w]
    tok_before = np.zeros(n + 1, np.int32)
    for i in range(n):
        tok_before[i + 1] = tok_before[i] + (tok_end[i] - tok_start[i])
    return below, tok_before


# UTF-8 as JSON strings and Trellis's regexes spell it (no overlongs, no
# surrogates, at most U+10FFFF): a decoder state per position, 0 at a character
# boundary; -1 an invalid byte
#   0 boundary  1-3 need 1-3 continuation bytes  4 after E0  5 after ED
#   6 after F0  7 after F4
@njit(cache=True, nogil=True, inline="always")
def _utf8_next(u, b):
    if u == 0:
        if b < 0x80:
            return 0
        if 0xC2 <= b <= 0xDF:
            return 1
        if b == 0xE0:
            return 4
        if b == 0xED:
            return 5
        if 0xE1 <= b <= 0xEF:
            return 2
        if b == 0xF0:
            return 6
        if 0xF1 <= b <= 0xF3:
            return 3
        if b == 0xF4:
            return 7
        return -1
    lo, hi = 0x80, 0xBF
    if u == 4:
        lo = 0xA0
    elif u == 5:
        hi = 0x9F
    elif u == 6:
        lo = 0x90
    elif u == 7:
        hi = 0x8F
    if b < lo or b > hi:
        return -1
    if u == 1:
        return 0
    if u == 2 or u == 4 or u == 5:
        return 1
    return 2


@njit(cache=True, nogil=True)
def utf8_below(tbyte, tdepth, tskip):
    """Per trie node, whether every byte path strictly below it is a prefix of
    valid UTF-8 when read from a character boundary (ASCII included): where a
    state that reads UTF-8 text back to itself stands at a node with this flag,
    the whole subtree stays in the text (see :func:`grammar_kernels.lexer_walk`)."""
    n = tbyte.shape[0]
    # ok[i] bit u: every path below i is valid from decoder state u
    ok = np.full(n, 0xFF, np.uint8)
    # fold each node into its parent, last node first (as subtree_bytes)
    parent = trie_parents(tdepth)
    for i in range(n - 1, 0, -1):
        b = tbyte[i]
        # the states u from which byte b, then everything below i, is valid
        good = 0
        for u in range(8):
            v = _utf8_next(u, b)
            if v >= 0 and (ok[i] >> v) & 1:
                good |= 1 << u
        ok[parent[i]] &= np.uint8(good)
    out = np.empty(n, np.bool_)
    for i in range(n):
        out[i] = (ok[i] & 1) != 0
    return out


@njit(cache=True, nogil=True)
def subtree_height(tdepth, tskip):
    """Per trie node, how many bytes the longest token below it extends past it
    (0 for a leaf)."""
    n = tdepth.shape[0]
    height = np.zeros(n, np.int32)
    for i in range(n - 1, -1, -1):
        h = 0
        j = i + 1
        while j < tskip[i]:
            if height[j] + 1 > h:
                h = height[j] + 1
            j = tskip[j]
        height[i] = h
    return height


@njit(cache=True, nogil=True)
def _walk(trans, state, first, tbyte, tdepth, tskip, tok_start, tok_end, order, stack,
          row, out_tok, out_next, n):
    """Walk the trie from DFA ``state``; set allowed tokens in ``row`` (uint32
    words) and append ``(token, next state)`` pairs from position ``n``.
    ``first[b]`` is the trie node of byte ``b`` at depth 1 (-1: none): the walk
    enters only the subtrees of the bytes the state can take, not every root child
    scattered over the trie's arrays (cache misses that dominated short patterns)."""
    for b in range(256):
        i = first[b]
        if i < 0:
            continue
        s = trans[state, b]
        if s == 0:
            continue
        stack[1] = s
        end = tskip[i]
        while i < end:
            d = tdepth[i]
            if d > 1:
                s = trans[stack[d - 1], tbyte[i]]
                if s == 0:
                    i = tskip[i]
                    continue
                stack[d] = s
            for k in range(tok_start[i], tok_end[i]):
                t = order[k]
                row[t >> 5] |= np.uint32(1) << np.uint32(t & 31)
                out_tok[n] = t
                out_next[n] = s
                n += 1
            i += 1
    return n


@njit(cache=True, nogil=True)
def token_transitions(trans, states, first, tbyte, tdepth, tskip, tok_start, tok_end, order,
                      max_depth, rows, capacity, accepting, eos):
    """Allowed-token rows and the sparse token → next-state map of ``states``.

    ``rows[j]`` receives the bits of ``states[j]``, and the bits of the ``eos`` ids
    when ``accepting[states[j]]``. Returns CSR arrays
    ``(indptr, tokens, nexts)``: the transitions of ``states[j]`` are
    ``tokens[indptr[j]:indptr[j+1]]`` → ``nexts[...]``, tokens ascending in byte
    order of the trie (not by id).
    """
    n_tokens = order.shape[0]
    out_tok = np.empty(max(capacity, n_tokens), np.int32)
    out_next = np.empty(max(capacity, n_tokens), np.int32)
    indptr = np.zeros(states.shape[0] + 1, np.int64)
    stack = np.zeros(max_depth + 2, np.int32)
    n = 0
    for j in range(states.shape[0]):
        if out_tok.shape[0] - n < n_tokens:
            grow = max(out_tok.shape[0] * 2, n + n_tokens)
            nt = np.empty(grow, np.int32)
            nn = np.empty(grow, np.int32)
            nt[:n] = out_tok[:n]
            nn[:n] = out_next[:n]
            out_tok = nt
            out_next = nn
        n = _walk(trans, states[j], first, tbyte, tdepth, tskip, tok_start, tok_end, order,
                  stack, rows[j], out_tok, out_next, n)
        indptr[j + 1] = n
        if accepting[states[j]]:
            for e in eos:
                rows[j, e >> 5] |= np.uint32(1) << np.uint32(e & 31)
    return indptr, out_tok[:n], out_next[:n]


@njit(cache=True, nogil=True)
def coreachable_states(n_states, indptr, nexts, accepting):
    """States from which a token path reaches an accepting state (token-level
    liveness), given each state's CSR of next states."""
    # reverse edges
    counts = np.zeros(n_states + 1, np.int64)
    for s in range(n_states):
        for k in range(indptr[s], indptr[s + 1]):
            counts[nexts[k] + 1] += 1
    for s in range(n_states):
        counts[s + 1] += counts[s]
    rev = np.empty(counts[n_states], np.int32)
    fill = counts[:-1].copy()
    for s in range(n_states):
        for k in range(indptr[s], indptr[s + 1]):
            t = nexts[k]
            rev[fill[t]] = s
            fill[t] += 1
    live = accepting.copy()
    queue = np.empty(n_states, np.int32)
    head = 0
    tail = 0
    for s in range(n_states):
        if live[s]:
            queue[tail] = s
            tail += 1
    while head < tail:
        t = queue[head]
        head += 1
        for k in range(counts[t], counts[t + 1]):
            s = rev[k]
            if not live[s]:
                live[s] = True
                queue[tail] = s
                tail += 1
    return live


@njit(cache=True, nogil=True)
def bits_to_ids(row, n):
    """Ids of the set bits of a uint32 bitmask row, below ``n``."""
    out = np.empty(n, np.int64)
    k = 0
    for w in range(row.shape[0]):
        x = row[w]
        if x == 0:
            continue
        for b in range(32):
            if (x >> np.uint32(b)) & np.uint32(1):
                t = w * 32 + b
                if t < n:
                    out[k] = t
                    k += 1
    return out[:k]


@njit(cache=True, nogil=True)
def apply_bitmask_rows(logits, bitmask, fill):
    """Set ``logits[i, t] = fill`` where bit ``t`` of row ``i`` is clear (and for
    every ``t`` past the bitmask's width)."""
    batch, v = logits.shape
    words = bitmask.shape[1]
    for i in range(batch):
        for t in range(v):
            w = t >> 5
            if w >= words or not ((bitmask[i, w] >> (t & 31)) & 1):
                logits[i, t] = fill


# -- byte DFA trimming and minimisation -------------------------------------------


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


# -- subset construction ------------------------------------------------------------


@njit(cache=True, nogil=True)
def _hash_words(words):
    h = np.uint64(1469598103934665603)
    for w in words:
        h = (h ^ w) * np.uint64(1099511628211)
        h ^= h >> np.uint64(29)
    return h


@njit(cache=True, nogil=True)
def table_probe(htab, hashes, rows, key, h):
    """Open-addressing lookup of the row ``key`` (hash ``h``) among ``rows``:
    ``(slot, index)``, index -1 when absent (``slot`` is then where it goes)."""
    mask = np.uint64(htab.shape[0] - 1)
    slot = h & mask
    while htab[slot] >= 0:
        c = htab[slot]
        if hashes[c] == h:
            same = True
            for j in range(key.shape[0]):
                if rows[c, j] != key[j]:
                    same = False
                    break
            if same:
                return slot, c
        slot = (slot + np.uint64(1)) & mask
    return slot, -1


@njit(cache=True, nogil=True)
def table_rehash(hashes, count, hcap, first=0):
    """A fresh open-addressing table of size ``hcap`` over hashes ``first:count``
    (ids below ``first`` are left out of the table)."""
    htab = np.full(hcap, -1, np.int64)
    for c in range(first, count):
        sl = hashes[c] & np.uint64(hcap - 1)
        while htab[sl] >= 0:
            sl = (sl + np.uint64(1)) & np.uint64(hcap - 1)
        htab[sl] = c
    return htab


@njit(cache=True, nogil=True)
def grow_rows(a, count, cap, fill):
    """``a`` (2-D) with room for ``cap`` rows, the first ``count`` kept, the rest ``fill``."""
    out = np.full((cap, a.shape[1]), fill, a.dtype)
    out[:count] = a[:count]
    return out


@njit(cache=True, nogil=True)
def determinize(n_atoms, eps_ptr, eps_dst, edge_ptr, edge_atom, edge_dst, start, final,
                max_states):
    """Subset construction of an epsilon-NFA without assertions. A DFA state is
    the bitset of the *important* NFA states (with a character edge, or final) of
    an epsilon closure. Returns ``(table, accepting, n)``: ``table[d, a]`` is the
    successor of DFA state ``d`` on atom ``a`` (-1: none), state 0 the start;
    ``n`` is -1 when more than ``max_states`` states would be needed."""
    n = eps_ptr.shape[0] - 1
    bit_of = np.full(n, -1, np.int64)
    m = 0
    for s in range(n):
        if edge_ptr[s + 1] > edge_ptr[s] or s == final:
            bit_of[s] = m
            m += 1
    state_of_bit = np.empty(m, np.int64)
    for s in range(n):
        if bit_of[s] >= 0:
            state_of_bit[bit_of[s]] = s
    W = (m + 63) // 64
    # epsilon closures, as bitsets of important states
    clo = np.zeros((n, W), np.uint64)
    seen = np.full(n, -1, np.int64)
    stack = np.empty(n, np.int64)
    for s in range(n):
        top = 0
        stack[0] = s
        top = 1
        seen[s] = s
        while top > 0:
            top -= 1
            u = stack[top]
            if bit_of[u] >= 0:
                b = bit_of[u]
                clo[s, b >> 6] |= np.uint64(1) << np.uint64(b & 63)
            for k in range(eps_ptr[u], eps_ptr[u + 1]):
                v = eps_dst[k]
                if seen[v] != s:
                    seen[v] = s
                    stack[top] = v
                    top += 1
    cap = 64
    sets = np.zeros((cap, W), np.uint64)
    table = np.full((cap, n_atoms), -1, np.int32)
    acc = np.zeros(cap, np.bool_)
    hcap = 256
    htab = np.full(hcap, -1, np.int64)
    hashes = np.zeros(cap, np.uint64)
    sets[0] = clo[start]
    hashes[0] = _hash_words(sets[0])
    htab[hashes[0] & np.uint64(hcap - 1)] = 0
    count = 1
    moves = np.zeros((n_atoms, W), np.uint64)
    used = np.zeros(n_atoms, np.bool_)
    fb = bit_of[final]
    d = 0
    while d < count:
        acc[d] = (sets[d, fb >> 6] >> np.uint64(fb & 63)) & np.uint64(1) == np.uint64(1)
        for a in range(n_atoms):
            used[a] = False
        for w in range(W):
            x = sets[d, w]
            while x != np.uint64(0):
                low = x & (~x + np.uint64(1))
                b = w * 64 + bit_index(low)
                x ^= low
                s = state_of_bit[b]
                for k in range(edge_ptr[s], edge_ptr[s + 1]):
                    a = edge_atom[k]
                    t = edge_dst[k]
                    if not used[a]:
                        used[a] = True
                        for j in range(W):
                            moves[a, j] = clo[t, j]
                    else:
                        for j in range(W):
                            moves[a, j] |= clo[t, j]
        for a in range(n_atoms):
            if not used[a]:
                continue
            h = _hash_words(moves[a])
            slot, found = table_probe(htab, hashes, sets, moves[a], h)
            if found < 0:
                if count >= max_states:
                    return table[:0], acc[:0], -1
                if count == cap:
                    cap *= 2
                    sets = grow_rows(sets, count, cap, np.uint64(0))
                    table = grow_rows(table, count, cap, np.int32(-1))
                    na = np.zeros(cap, np.bool_)
                    na[:count] = acc[:count]
                    acc = na
                    nh = np.zeros(cap, np.uint64)
                    nh[:count] = hashes[:count]
                    hashes = nh
                found = count
                sets[count] = moves[a]
                hashes[count] = h
                htab[slot] = count
                count += 1
                if 2 * count > hcap:  # rehash at half load
                    hcap *= 4
                    htab = table_rehash(hashes, count, hcap)
            table[d, a] = found
        d += 1
    return table[:count], acc[:count], count


@njit(cache=True, nogil=True)
def ascii_byte_dfa(prog, start, final, max_states, alphabet, max_rounds):
    """An epsilon-NFA over ASCII characters (no assertions) straight to its
    trimmed, minimal byte DFA, as :func:`trim_minimize` of the UTF-8 expansion of
    its :func:`determinize` would give. One call instead of several small Python
    and numpy steps, which dominate for short patterns. Atoms are the classes of
    bytes that no character set nor ``alphabet`` tells apart (``[0-9]`` is one or
    a few atoms, not ten bytes), so the subset construction and the minimisation
    work on a few columns; the 256-column table is built at the end.

    The NFA comes as one array (one conversion from Python): ``prog = [n,
    eps_cnt (n), n_eps, eps_dst (n_eps), n_sets, set_cnt (n_sets), intervals (2
    each), edges (3 each)]``: ``eps_cnt[s]`` epsilon edges leave NFA state ``s``
    (their targets consecutive in ``eps_dst``); set ``c`` is ``set_cnt[c]``
    intervals ``(lo, hi)`` of bytes < 128; an edge ``(source, set, target)``,
    edges grouped by source in increasing order. Returns ``(table, accepting,
    status)``: status -1 when more than ``max_states`` character states are
    needed, 0 when no string is accepted, 1 otherwise."""
    n = prog[0]
    p = 1
    eps_ptr = np.zeros(n + 1, np.int64)
    for s in range(n):
        eps_ptr[s + 1] = eps_ptr[s] + prog[p + s]
    p += n
    n_eps = prog[p]
    eps_dst = prog[p + 1:p + 1 + n_eps]
    p += 1 + n_eps
    n_sets = prog[p]
    set_cnt = prog[p + 1:p + 1 + n_sets]
    p += 1 + n_sets
    member = np.zeros((n_sets + 1, 128), np.bool_)  # last row: the alphabet
    for c in range(n_sets):
        for _ in range(set_cnt[c]):
            for b in range(prog[p], prog[p + 1] + 1):
                member[c, b] = True
            p += 2
    for b in range(128):
        member[n_sets, b] = alphabet[b]
    edges = prog[p:].reshape(-1, 3)
    # atoms: bytes with equal membership columns (bytes in no set have no atom)
    atom_of = np.full(128, -1, np.int64)
    reps = np.empty(128, np.int64)
    n_atoms = 0
    for b in range(128):
        covered = False
        for c in range(n_sets):
            if member[c, b]:
                covered = True
                break
        if not covered:
            continue
        for j in range(n_atoms):
            r = reps[j]
            same = True
            for c in range(n_sets + 1):
                if member[c, b] != member[c, r]:
                    same = False
                    break
            if same:
                atom_of[b] = j
                break
        if atom_of[b] < 0:
            reps[n_atoms] = b
            atom_of[b] = n_atoms
            n_atoms += 1
    m = 0
    for k in range(edges.shape[0]):
        c = edges[k, 1]
        for a in range(n_atoms):
            if member[c, reps[a]]:
                m += 1
    edge_ptr = np.zeros(n + 1, np.int64)
    edge_atom = np.empty(m, np.int64)
    edge_dst = np.empty(m, np.int64)
    j = 0
    for k in range(edges.shape[0]):
        c = edges[k, 1]
        for a in range(n_atoms):
            if member[c, reps[a]]:
                edge_atom[j] = a
                edge_dst[j] = edges[k, 2]
                j += 1
        edge_ptr[edges[k, 0] + 1] = j
    for s in range(n):  # states without edges end where the previous one did
        if edge_ptr[s + 1] < edge_ptr[s]:
            edge_ptr[s + 1] = edge_ptr[s]
    table, acc, count = determinize(n_atoms, eps_ptr, eps_dst, edge_ptr, edge_atom, edge_dst,
                                    start, final, max_states)
    if count < 0:
        return np.zeros((0, 256), np.int32), np.zeros(0, np.bool_), -1
    any_acc = False
    for q in range(count):
        if acc[q]:
            any_acc = True
    if not any_acc:
        return np.zeros((0, 256), np.int32), np.zeros(0, np.bool_), 0
    # trim and minimise over the atoms the alphabet allows, plus one dead column
    # (atoms are uniform in the alphabet: it is part of their signature)
    cols = np.empty(n_atoms, np.int64)
    k = 0
    for a in range(n_atoms):
        if alphabet[reps[a]]:
            cols[k] = a
            k += 1
    reduced = np.zeros((count + 1, k + 1), np.int32)
    accepting = np.zeros(count + 1, np.bool_)
    for q in range(count):
        accepting[q + 1] = acc[q]
        for i in range(k):
            reduced[q + 1, i] = table[q, cols[i]] + 1  # -1 (none) becomes dead 0
    live = coreachable_dense(reduced, accepting)
    cls, rounds = moore_classes(reduced, accepting, live, max_rounds)
    if rounds < 0:
        for s in range(count + 1):
            cls[s] = s if live[s] else 0
    full = np.zeros((count + 1, 256), np.int32)
    for q in range(count):
        for b in range(128):
            a = atom_of[b]
            if a >= 0 and alphabet[b]:
                full[q + 1, b] = table[q, a] + 1
    out, out_acc = quotient_renumber(full, accepting, cls, 1)
    return out, out_acc, 1


@njit(cache=True, nogil=True)
def float_multiples(ms, scale, n):
    """``ok[k]`` for ``k < n``: whether ``k / scale`` (a float) divided by every
    float in ``ms`` is integral, as ``jsonschema`` tests ``multipleOf`` (IEEE
    division, correctly rounded: no fast-math here). Branch-free over ``k`` so
    that the divisions vectorise (10M candidates: 30 -> ~10 ms)."""
    ok = np.ones(n, np.bool_)
    fscale = np.float64(scale)
    for j in range(ms.shape[0]):
        m = ms[j]
        for k in range(n):
            q = (np.float64(k) / fscale) / m
            ok[k] = ok[k] & (q == np.floor(q))
    return ok


@njit(cache=True, nogil=True)
def run_starts(rows):
    """Indices of the rows of a 2-D array that differ from the row before
    (row 0 included)."""
    n, w = rows.shape
    out = np.empty(max(n, 1), np.int64)
    m = 0
    if n:
        out[0] = 0
        m = 1
    for i in range(1, n):
        for j in range(w):
            if rows[i, j] != rows[i - 1, j]:
                out[m] = i
                m += 1
                break
    return out[:m]


@njit(cache=True, nogil=True)
def exclusion_product(t, acc, m, data, starts, alphabet):
    """A trimmed DFA's language less the strings that start with one of the
    byte strings ``data[starts[i]:starts[i+1]]``, written in place: on entry
    ``t[m:]``/``acc[m:]`` hold the DFA (its local state ``d`` at row ``m + d``,
    values unshifted, every state live over ``alphabet``) and ``t[:m+1]`` is
    zero; on exit row 1 is the start, rows ``1..m`` the trie of the prefixes
    (``m`` bounds its nodes, unused rows stay zero), each paired with the state
    its bytes reach, and leaving the trie returns to the DFA itself. Returns
    whether the language is non-empty (when not, the block is zeroed).

    Trimmed in place: a trie node that only leads into excluded strings is cut
    from its parent (columns outside ``alphabet`` are ignored, as the caller
    zeroes them). See :func:`constrain.automata.byte_dfa.minus_prefixes`, the same
    product on a DFA of its own."""
    rows, k = t.shape
    for r in range(m + 1, rows):
        for b in range(k):
            if t[r, b] > 0:
                t[r, b] += m
    t[1] = t[m + 1]
    acc[1] = acc[m + 1]
    used = 1
    for i in range(starts.shape[0] - 1):
        node = 1
        last = starts[i + 1] - 1
        for j in range(starts[i], starts[i + 1]):
            b = data[j]
            q = t[node, b]
            if q == 0:
                break  # refused by the DFA, or a shorter prefix removed it
            if j == last:
                t[node, b] = 0
                break
            if q > m:  # leaves the trie: a new node
                used += 1
                t[used] = t[q]
                acc[used] = acc[q]
                t[node, b] = used
                q = used
            node = q
    # children come after their parents: one backward pass
    live = np.zeros(used + 1, np.bool_)
    for node in range(used, 0, -1):
        ok = acc[node]
        for b in range(k):
            q = t[node, b]
            if q == 0:
                continue
            if q <= m and not live[q]:
                t[node, b] = 0
            elif alphabet[b]:
                ok = True
        live[node] = ok
    if not live[1]:
        t[:] = 0
        acc[:] = False
        return False
    return True


#: the kinds of TerminalAutomata's write operations (write_terminal_table)
TERMINAL_OTHER, TERMINAL_LITERAL, TERMINAL_LEXEME, TERMINAL_EXCLUSION, TERMINAL_TRIE = 0, 1, 2, 3, 4


@njit(cache=True, nogil=True)
def _write_lexeme(table, acc, o, row0, k, string, data, ta, tb, lex_rows, lex_acc, alphabet):
    # rows row0:row0+k of the lexeme tables restricted to the alphabet, then
    # the tail's chain from the last of them
    for r in range(k):
        for c in range(256):
            table[o + r, c] = lex_rows[row0 + r, c] if alphabet[c] else 0
        acc[o + r] = lex_acc[row0 + r]
    for j in range(tb - ta):
        table[o + k - 1 + j, data[ta + j]] = k + j
    if string:
        acc[o + k - 1 + tb - ta] = True


@njit(cache=True, nogil=True)
def write_terminal_table(table, acc, usable, ops, data, starts, lex_rows, lex_acc, alphabet):
    """Write a grammar's terminals into the stacked table of
    :class:`~constrain.cfg.lexer.TerminalAutomata` (``table``/``acc`` uninitialised:
    every row is written, zeros included). One operation per terminal ``t``,
    ``ops[t] = (kind, offset, rows, a, b, tail_start, tail_end, string, m,
    first, count)``:

    * ``TERMINAL_LITERAL``: the chain of bytes ``data[a:b]``;
    * ``TERMINAL_LEXEME``: rows ``a:a+b`` of the lexeme tables (``lex_rows``,
      ``lex_acc``) restricted to ``alphabet``, then the chain of the tail
      ``data[tail_start:tail_end]``; when ``string``, the tail's end accepts
      (the rows' last is a closing quote);
    * ``TERMINAL_EXCLUSION``: that lexeme (a string) after ``m`` trie rows,
      less the ``count`` prefixes whose bounds in ``data`` are
      ``starts[first:first + count + 1]`` (:func:`exclusion_product`);
      ``usable[t]`` is cleared when nothing is left;
    * ``TERMINAL_TRIE``: the trie of ``count`` strings (an alternation of
      literals: ``true|false``, an enum), whose bounds in ``data`` are
      ``starts[first:first + count + 1]``; ``rows`` is its node count plus 2;
    * ``TERMINAL_OTHER``: rows left zero (the caller writes a DFA there, or
      the terminal is unusable).

    One pass over the table, where zeroing it, writing each part and zeroing
    the columns outside the alphabet took ~12 numpy operations, each 15-35 us
    on a cold cache."""
    for t in range(ops.shape[0]):
        kind = ops[t, 0]
        o = ops[t, 1]
        size = ops[t, 2]
        for r in range(o, o + size):
            for c in range(256):
                table[r, c] = 0
            acc[r] = False
        if kind == TERMINAL_LITERAL:
            a = ops[t, 3]
            n = ops[t, 4] - a
            for j in range(n):
                table[o + 1 + j, data[a + j]] = j + 2
            acc[o + n + 1] = True
        elif kind == TERMINAL_LEXEME:
            _write_lexeme(table, acc, o, ops[t, 3], ops[t, 4], ops[t, 7] != 0, data, ops[t, 5],
                          ops[t, 6], lex_rows, lex_acc, alphabet)
        elif kind == TERMINAL_TRIE:
            free = 2  # local states: 0 dead, 1 the root
            for q in range(ops[t, 9], ops[t, 9] + ops[t, 10]):
                r = o + 1
                for j in range(starts[q], starts[q + 1]):
                    s2 = table[r, data[j]]
                    if s2 == 0:
                        s2 = free
                        free += 1
                        table[r, data[j]] = s2
                    r = o + s2
                acc[r] = True
        elif kind == TERMINAL_EXCLUSION:
            m = ops[t, 8]
            _write_lexeme(table, acc, o + m, ops[t, 3], ops[t, 4], True, data, ops[t, 5],
                          ops[t, 6], lex_rows, lex_acc, alphabet)
            first = ops[t, 9]
            if not exclusion_product(table[o:o + size], acc[o:o + size], m, data,
                                     starts[first:first + ops[t, 10] + 1], alphabet):
                usable[t] = False
