"""numba kernels of the subset construction: NFA over atoms to DFA, and the ASCII fast path straight to a byte DFA.

Kernels are compiled once and cached on disk (``cache=True``) and release the GIL
(``nogil=True``); they work on flat numpy arrays only.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from constrain.automata.bits import bit_index
from constrain.automata.deadline import clock
from constrain.automata.hash_table import grow_rows, hash_ints, table_probe, table_rehash
from constrain.automata.liveness import coreachable_dense
from constrain.automata.minimize_kernels import column_classes, moore_classes, quotient_renumber


#: the kernels look at the clock once per this many steps of their loops
_CLOCK_EVERY = 1 << 18
#: what determinize returns for ``n`` past its state and time budgets
TOO_MANY_STATES = -1
OUT_OF_TIME = -2


def tiny_determinize_args(args: tuple) -> tuple:
    """Arguments of :func:`determinize`'s types (those of ``args``) for a call
    on a one-state NFA with a deadline already past (:func:`deadline.ready`)."""
    i = np.zeros(2, np.int64)
    e = np.zeros(0, np.int64)
    return (args[0], i, e, i.copy(), e, e.copy(), 0, 0, args[8], -np.inf)


def tiny_ascii_args(args: tuple) -> tuple:
    """Arguments of :func:`ascii_byte_dfa`'s types (those of ``args``) for a
    call on a one-state NFA with a deadline already past."""
    return (np.array([1, 0, 0, 0], np.int64), 0, 0, args[3], args[4], args[5], -np.inf)


@njit(cache=True, nogil=True)
def determinize(n_atoms, eps_ptr, eps_dst, edge_ptr, edge_atom, edge_dst, start, final,
                max_states, deadline):
    """Subset construction of an epsilon-NFA without assertions. A DFA state is
    the bitset of the *important* NFA states (with a character edge, or final) of
    an epsilon closure. Returns ``(table, accepting, n)``: ``table[d, a]`` is the
    successor of DFA state ``d`` on atom ``a`` (-1: none), state 0 the start;
    ``n`` is :data:`TOO_MANY_STATES` when more than ``max_states`` states would
    be needed, :data:`OUT_OF_TIME` past ``deadline`` (a ``time.perf_counter()``
    value; the clock is read at the first step and every :data:`_CLOCK_EVERY`
    steps: the epsilon closures alone are quadratic in a long chain of optional
    copies)."""
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
    work = _CLOCK_EVERY - 1  # the clock once at the start (see deadline.ready)
    for s in range(n):
        top = 0
        stack[0] = s
        top = 1
        seen[s] = s
        while top > 0:
            top -= 1
            work += 1
            if work >= _CLOCK_EVERY:
                work = 0
                if clock() > deadline:
                    return np.zeros((0, n_atoms), np.int32), np.zeros(0, np.bool_), OUT_OF_TIME
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
    hashes[0] = hash_ints(sets[0], W, 0)
    htab[hashes[0] & np.uint64(hcap - 1)] = 0
    count = 1
    moves = np.zeros((n_atoms, W), np.uint64)
    used = np.zeros(n_atoms, np.bool_)
    fb = bit_of[final]
    d = 0
    while d < count:
        work += W * n_atoms + 1
        if work >= _CLOCK_EVERY:
            work = 0
            if clock() > deadline:
                return table[:0], acc[:0], OUT_OF_TIME
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
                work += W
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
            h = hash_ints(moves[a], W, 0)
            slot, found = table_probe(htab, hashes, sets, moves[a], h)
            if found < 0:
                if count >= max_states:
                    return table[:0], acc[:0], TOO_MANY_STATES
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
def ascii_byte_dfa(prog, start, final, max_states, alphabet, max_rounds, deadline):
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
    status)``: status :data:`TOO_MANY_STATES` when more than ``max_states``
    character states are needed, :data:`OUT_OF_TIME` past ``deadline``, 0 when
    no string is accepted, 1 otherwise."""
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
    # atoms: bytes with equal membership columns, numbered by their first byte
    # (bytes in no set have no atom)
    covered = np.empty(128, np.int64)
    n_covered = 0
    for b in range(128):
        for c in range(n_sets):
            if member[c, b]:
                covered[n_covered] = b
                n_covered += 1
                break
    covered = covered[:n_covered]
    cls, first = column_classes(member[:, covered])
    atom_of = np.full(128, -1, np.int64)
    atom_of[covered] = cls
    reps = covered[first]
    n_atoms = reps.shape[0]
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
                                    start, final, max_states, deadline)
    if count < 0:
        return np.zeros((0, 256), np.int32), np.zeros(0, np.bool_), count
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
