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
from constrain.automata.minimize_kernels import coarsest_classes, column_classes, quotient_renumber


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
    return (b"", np.array([1, 0, 0, 0], np.int64), 0, 0, 0, 0, args[6], args[7], -np.inf)


#: what :func:`ascii_byte_dfa` returns as its status when its ``source`` is
#: not in the syntax it parses itself (the caller takes the general path)
NOT_SIMPLE = -3
#: the most NFA states :func:`ascii_byte_dfa` takes: its subset construction
#: keeps one closure bitset per state (words: states x (states // 64 + 1))
KERNEL_MAX_WORDS = 4 * 1024 * 1024
#: groups nested deeper than this are left to the general path (its parser
#: names the offset of the error)
_MAX_GROUP_DEPTH = 100
#: repetition bounds and automaton sizes past this are left to the general
#: path (they keep the kernel's counts far from overflowing)
_BIG = 1 << 20

# node kinds of simple_ascii_nfa's parse, and the columns of a node
_CHARS, _CONCAT, _ALT, _REPEAT = 0, 1, 2, 3
_KIND, _A, _B, _LO, _HI, _STATES, _EPS, _EDGES, _SIZE = 0, 1, 2, 3, 4, 5, 6, 7, 8


@njit(cache=True, nogil=True)
def _is_punct(c):
    """An ASCII character that a backslash makes literal (``re``: any ASCII
    character but a letter or a digit; the controls are left out)."""
    return 32 <= c < 127 and not (48 <= c <= 57 or 65 <= c <= 90 or 97 <= c <= 122)


@njit(cache=True, nogil=True)
def _group_node(nodes, nn, kids, nk, stack, lo, hi, kind):
    """The node of ``stack[lo:hi]`` (a sequence's items, ``kind`` CONCAT, or a
    group's branches, ``kind`` ALT) as ``regex_syntax._simple_seq`` and
    ``_simple_alt`` make it: empty sequences left out of a sequence, one
    item or branch standing for itself. Returns ``(node, nn, nk)``."""
    count = 0
    for k in range(lo, hi):
        x = stack[k]
        if kind == _ALT or nodes[x, _KIND] != _CONCAT or nodes[x, _B] != 0:
            count += 1
    if count == 1:
        for k in range(lo, hi):
            x = stack[k]
            if kind == _ALT or nodes[x, _KIND] != _CONCAT or nodes[x, _B] != 0:
                return x, nn, nk
    node = nn
    nodes[node, _KIND] = kind
    nodes[node, _A] = nk
    nodes[node, _B] = count
    states = 1 if kind == _ALT else 0
    eps = count if kind == _ALT else 0
    edges = 0
    size = 0
    for k in range(lo, hi):
        x = stack[k]
        size += nodes[x, _SIZE]
        if kind == _ALT or nodes[x, _KIND] != _CONCAT or nodes[x, _B] != 0:
            kids[nk] = x
            nk += 1
            states += nodes[x, _STATES]
            eps += nodes[x, _EPS]
            edges += nodes[x, _EDGES]
    nodes[node, _STATES] = states
    nodes[node, _EPS] = eps
    nodes[node, _EDGES] = edges
    nodes[node, _SIZE] = size
    return node, nn + 1, nk


@njit(cache=True, nogil=True)
def _escape(src, j):
    """The code of the escape ``\\c`` at ``src[j]`` (a backslash) when ``c``
    is punctuation, else -1."""
    if j + 1 < len(src) and _is_punct(src[j + 1]):
        return src[j + 1]
    return -1


@njit(cache=True, nogil=True)
def _class_char(src, j):
    """The code of the class member at ``src[j]`` (a literal or a punctuation
    escape) and the index after it; -1 for anything else (``[``, a letter
    escape, non-ASCII: the general path's)."""
    ch = src[j]
    if ch == 92:
        return _escape(src, j), j + 2
    if ch >= 128 or ch == 91:
        return -1, j + 1
    return ch, j + 1


@njit(cache=True, nogil=True)
def _number(src, i, n):
    """The decimal number at ``src[i:]`` (capped past :data:`_BIG`) and the
    index after it (``i`` when there is no digit)."""
    v = 0
    while i < n and 48 <= src[i] <= 57:
        v = min(v * 10 + src[i] - 48, _BIG + 1)
        i += 1
    return v, i


@njit(cache=True, nogil=True, inline="always")
def _fork(eps_src, eps_dst, ne, s, a, b):
    # state s's two epsilon edges: into a body (a) and past it (b); the next free edge
    eps_src[ne] = s
    eps_dst[ne] = a
    eps_src[ne + 1] = s
    eps_dst[ne + 1] = b
    return ne + 2


@njit(cache=True, nogil=True)
def simple_ascii_nfa(src, max_repeat, max_positions):
    """The NFA of the pattern ``src`` (bytes, no flags) in :func:`ascii_byte_dfa`'s
    ``prog`` layout, with its start and final states, when the pattern is in
    the subset of ``regex_syntax._parse_simple`` that is all ASCII: literals,
    punctuation escapes, ``[...]`` classes of literals and ranges (not
    negated), ``(...)``, ``(?:...)``, ``|`` and the quantifiers ``* + ? {m}
    {m,} {m,n}`` (lazy or not), within ``max_repeat``, ``max_positions`` and
    :data:`KERNEL_MAX_WORDS`. The NFA is ``char_dfa._NFA.into``'s, built the
    same way. Anything else (other syntax, a syntax error, a limit) gives
    start -1: the general path parses it and says what is wrong.

    The parse keeps ``regex_syntax._parse_simple``'s rules, so the language is
    the one ``re`` gives; what it refuses, that function refuses too (or the
    kernel is more cautious)."""
    none = np.zeros(0, np.int64)
    n = len(src)
    cap = 2 * n + 4
    nodes = np.zeros((cap, 9), np.int64)
    nn = 0
    kids = np.empty(cap, np.int64)
    nk = 0
    # the character sets: intervals, per set its first interval and count
    iv = np.empty((n + 1, 2), np.int64)
    niv = 0
    set_first = np.empty(n + 1, np.int64)
    set_len = np.empty(n + 1, np.int64)
    n_sets = 0
    lit_set = np.full(128, -1, np.int64)
    items = np.empty(n + 1, np.int64)
    quantified = np.zeros(n + 1, np.bool_)
    it = 0
    branches = np.empty(n + 1, np.int64)
    bt = 0
    f_items = np.empty(_MAX_GROUP_DEPTH + 1, np.int64)
    f_branches = np.empty(_MAX_GROUP_DEPTH + 1, np.int64)
    depth = 0
    item_base = 0
    branch_base = 0
    i = 0
    while i < n:
        c = src[i]
        if c >= 128:
            return none, -1, -1
        code = -1
        if c == 92:  # \
            code = _escape(src, i)
            if code < 0:
                return none, -1, -1
            i += 2
        elif c == 91:  # [
            j = i + 1
            if j >= n or src[j] == 94 or src[j] == 93:  # [^ (beyond ASCII), []
                return none, -1, -1
            first = niv
            while True:
                if j >= n:
                    return none, -1, -1
                ch = src[j]
                if ch == 93:  # ]
                    break
                if (ch == 45 or ch == 38 or ch == 126 or ch == 124) and j + 1 < n \
                        and src[j + 1] == ch:
                    return none, -1, -1
                lo, j = _class_char(src, j)
                hi = lo
                if j + 1 < n and src[j] == 45 and src[j + 1] != 93:  # a range
                    if src[j + 1] == 45:
                        return none, -1, -1
                    hi, j = _class_char(src, j + 1)
                if lo < 0 or hi < lo:
                    return none, -1, -1
                iv[niv, 0] = lo
                iv[niv, 1] = hi
                niv += 1
            set_first[n_sets] = first
            set_len[n_sets] = niv - first
            n_sets += 1
            node = nn
            nn += 1
            nodes[node, _KIND] = _CHARS
            nodes[node, _A] = n_sets - 1
            nodes[node, _STATES] = nodes[node, _EDGES] = nodes[node, _SIZE] = 1
            items[it] = node
            quantified[it] = False
            it += 1
            i = j + 1
            continue
        elif c == 40:  # (
            if i + 1 < n and src[i + 1] == 63:  # ?
                if i + 2 >= n or src[i + 2] != 58:  # only (?:
                    return none, -1, -1
                i += 3
            else:
                i += 1
            if depth == _MAX_GROUP_DEPTH:
                return none, -1, -1
            f_items[depth] = item_base
            f_branches[depth] = branch_base
            depth += 1
            item_base = it
            branch_base = bt
            continue
        elif c == 124 or c == 41:  # | )
            node, nn, nk = _group_node(nodes, nn, kids, nk, items, item_base, it, _CONCAT)
            it = item_base
            branches[bt] = node
            bt += 1
            i += 1
            if c == 124:
                continue
            if depth == 0:
                return none, -1, -1
            node, nn, nk = _group_node(nodes, nn, kids, nk, branches, branch_base, bt, _ALT)
            bt = branch_base
            depth -= 1
            item_base = f_items[depth]
            branch_base = f_branches[depth]
            items[it] = node
            quantified[it] = False
            it += 1
            continue
        elif c == 42 or c == 43 or c == 63 or c == 123:  # * + ? {
            if it == item_base or quantified[it - 1]:
                return none, -1, -1  # nothing to repeat, or a repeated repetition
            if c == 123:
                lo, j = _number(src, i + 1, n)
                if j == i + 1:
                    return none, -1, -1
                hi = lo
                if j < n and src[j] == 44:  # ,
                    hi, k = _number(src, j + 1, n)
                    if k == j + 1:
                        hi = -1
                    j = k
                if j >= n or src[j] != 125:  # }
                    return none, -1, -1
                if lo > max_repeat or lo > _BIG or hi > max_repeat or hi > _BIG \
                        or (hi >= 0 and hi < lo):
                    return none, -1, -1
                i = j + 1
            else:
                lo = 1 if c == 43 else 0
                hi = 1 if c == 63 else -1
                i += 1
            if i < n and src[i] == 63:  # lazy: the same language
                i += 1
            elif i < n and src[i] == 43:  # possessive
                return none, -1, -1
            x = items[it - 1]
            size = nodes[x, _SIZE] * (hi if hi >= 0 else max(lo, 1))
            if size > max_positions:
                return none, -1, -1
            s, e, g = nodes[x, _STATES], nodes[x, _EPS], nodes[x, _EDGES]
            node = nn
            nn += 1
            nodes[node, _KIND] = _REPEAT
            nodes[node, _A] = x
            nodes[node, _LO] = lo
            nodes[node, _HI] = hi
            nodes[node, _SIZE] = size
            if hi < 0:
                copies = max(lo, 1)
                nodes[node, _STATES] = 1 + copies * s
                nodes[node, _EPS] = 2 + copies * e
                nodes[node, _EDGES] = copies * g
            else:
                nodes[node, _STATES] = (hi - lo) * (1 + s) + lo * s
                nodes[node, _EPS] = (hi - lo) * (2 + e) + lo * e
                nodes[node, _EDGES] = hi * g
            if nodes[node, _STATES] > _BIG or nodes[node, _EPS] > 4 * _BIG:
                return none, -1, -1
            items[it - 1] = node
            quantified[it - 1] = True
            continue
        elif c == 46 or c == 94 or c == 36 or c == 93 or c == 125:  # . ^ $ ] }
            return none, -1, -1
        else:
            code = c
            i += 1
        # a literal
        k = lit_set[code]
        if k < 0:
            k = lit_set[code] = n_sets
            iv[niv, 0] = iv[niv, 1] = code
            set_first[n_sets] = niv
            set_len[n_sets] = 1
            niv += 1
            n_sets += 1
        node = nn
        nn += 1
        nodes[node, _KIND] = _CHARS
        nodes[node, _A] = k
        nodes[node, _STATES] = nodes[node, _EDGES] = nodes[node, _SIZE] = 1
        items[it] = node
        quantified[it] = False
        it += 1
    if depth:
        return none, -1, -1
    node, nn, nk = _group_node(nodes, nn, kids, nk, items, item_base, it, _CONCAT)
    branches[bt] = node
    bt += 1
    root, nn, nk = _group_node(nodes, nn, kids, nk, branches, branch_base, bt, _ALT)
    n_states = nodes[root, _STATES] + 1
    if nodes[root, _SIZE] > max_positions or n_states > _BIG \
            or n_states * (n_states // 64 + 1) > KERNEL_MAX_WORDS:
        return none, -1, -1
    return _build_nfa(nodes, kids, root, n_states, nodes[root, _EPS], nodes[root, _EDGES],
                      iv, set_first, set_len, n_sets)


@njit(cache=True, nogil=True)
def _build_nfa(nodes, kids, root, n_states, n_eps, n_edges, iv, set_first, set_len, n_sets):
    """The NFA of :func:`simple_ascii_nfa`'s parse, back to front as
    ``char_dfa._NFA.into`` builds it (a frame stack: numba's cache cannot
    load recursive functions), in ``prog`` layout: ``(prog, start, final)``."""
    eps_src = np.empty(n_eps, np.int64)
    eps_dst = np.empty(n_eps, np.int64)
    ne = 0
    edge_src = np.empty(n_edges, np.int64)
    edge_set = np.empty(n_edges, np.int64)
    edge_dst = np.empty(n_edges, np.int64)
    ng = 0
    final = 0
    count = 1
    # a frame: node, nxt, phase, counter, cur, own state
    fr = np.empty((nodes.shape[0] + 1, 6), np.int64)
    fr[0, 0] = root
    fr[0, 1] = final
    fr[0, 2] = 0
    sp = 1
    ret = 0
    while sp:
        f = sp - 1
        node, nxt, phase = fr[f, 0], fr[f, 1], fr[f, 2]
        kind = nodes[node, _KIND]
        child = -1
        if kind == _CHARS:
            edge_src[ng] = count
            edge_set[ng] = nodes[node, _A]
            edge_dst[ng] = nxt
            ng += 1
            ret = count
            count += 1
            sp -= 1
            continue
        if kind == _CONCAT:  # items last to first
            if phase == 0:
                fr[f, 3] = nodes[node, _B] - 1
                fr[f, 4] = nxt
            else:
                fr[f, 4] = ret
                fr[f, 3] -= 1
            if fr[f, 3] < 0:
                ret = fr[f, 4]
                sp -= 1
                continue
            child = kids[nodes[node, _A] + fr[f, 3]]
            fr[f, 2] = 1
            nxt = fr[f, 4]
        elif kind == _ALT:  # a state with an epsilon edge into each branch
            if phase == 0:
                fr[f, 5] = count
                count += 1
                fr[f, 3] = 0
            else:
                eps_src[ne] = fr[f, 5]
                eps_dst[ne] = ret
                ne += 1
                fr[f, 3] += 1
            if fr[f, 3] == nodes[node, _B]:
                ret = fr[f, 5]
                sp -= 1
                continue
            child = kids[nodes[node, _A] + fr[f, 3]]
            fr[f, 2] = 1
        else:
            lo, hi = nodes[node, _LO], nodes[node, _HI]
            if phase == 0:
                if hi < 0:
                    # X{m,}: X{m-1} then a copy looping back through a
                    # junction; X*: the loop state and one copy
                    fr[f, 5] = count
                    count += 1
                    fr[f, 2] = 1
                    child = nodes[node, _A]
                    nxt = fr[f, 5]
                else:
                    fr[f, 4] = nxt
                    fr[f, 3] = hi - lo
                    phase = 2
            elif phase == 1:
                s = fr[f, 5]
                ne = _fork(eps_src, eps_dst, ne, s, ret, nxt)
                if lo:
                    fr[f, 4] = ret
                    fr[f, 3] = lo - 1
                else:
                    fr[f, 4] = s
                    fr[f, 3] = 0
                phase = 4
            elif phase == 3:  # an optional copy's body is built
                s = fr[f, 5]
                ne = _fork(eps_src, eps_dst, ne, s, ret, nxt)
                fr[f, 4] = s
                fr[f, 3] -= 1
                phase = 2
            elif phase == 5:  # a required copy is built
                fr[f, 4] = ret
                fr[f, 3] -= 1
                phase = 4
            if phase == 2:  # the optional copies, innermost first
                if fr[f, 3] == 0:
                    fr[f, 3] = lo
                    phase = 4
                else:
                    fr[f, 5] = count
                    count += 1
                    fr[f, 2] = 3
                    child = nodes[node, _A]
                    nxt = fr[f, 4]
            if phase == 4:  # the required copies
                if fr[f, 3] == 0:
                    ret = fr[f, 4]
                    sp -= 1
                    continue
                fr[f, 2] = 5
                child = nodes[node, _A]
                nxt = fr[f, 4]
        fr[sp, 0] = child
        fr[sp, 1] = nxt
        fr[sp, 2] = 0
        sp += 1
    start = ret
    # prog: epsilon edges grouped by source (in the order made), edges by source
    prog = np.empty(3 + count + ne + n_sets + 2 * set_first.shape[0] + 3 * ng, np.int64)
    prog[0] = count
    cnt = prog[1:1 + count]
    cnt[:] = 0
    for k in range(ne):
        cnt[eps_src[k]] += 1
    p = 1 + count
    prog[p] = ne
    p += 1
    pos = np.empty(count, np.int64)
    acc = p
    for s in range(count):
        pos[s] = acc
        acc += cnt[s]
    for k in range(ne):
        prog[pos[eps_src[k]]] = eps_dst[k]
        pos[eps_src[k]] += 1
    p += ne
    prog[p] = n_sets
    p += 1
    for c in range(n_sets):
        prog[p + c] = set_len[c]
    p += n_sets
    for c in range(n_sets):
        for k in range(set_first[c], set_first[c] + set_len[c]):
            prog[p] = iv[k, 0]
            prog[p + 1] = iv[k, 1]
            p += 2
    # one edge per character state: by source, states in order
    by_src = np.full(count, -1, np.int64)
    for k in range(ng):
        by_src[edge_src[k]] = k
    for s in range(count):
        k = by_src[s]
        if k >= 0:
            prog[p] = s
            prog[p + 1] = edge_set[k]
            prog[p + 2] = edge_dst[k]
            p += 3
    return prog[:p], start, final


@njit(cache=True, nogil=True)
def determinize(n_atoms, eps_ptr, eps_dst, edge_ptr, edge_atom, edge_dst, start, final,
                max_states, deadline):
    """Subset construction of an epsilon-NFA without assertions. A DFA state is
    the bitset of the *important* NFA states (with a character edge, or final) of
    an epsilon closure. Returns ``(table, accepting, n)``: ``table[d, a]`` is the
    successor of DFA state ``d`` on atom ``a`` (-1: none), state 0 the start;
    ``n`` is :data:`TOO_MANY_STATES` when more than ``max_states`` states would
    be needed, :data:`OUT_OF_TIME` past ``deadline`` (a ``now()``
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
def ascii_byte_dfa(source, prog, start, final, max_repeat, max_positions, max_states, alphabet,
                   deadline):
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
    edges grouped by source in increasing order. Or, with ``start < 0``, it is
    the NFA of the pattern ``source`` (bytes, no flags) that
    :func:`simple_ascii_nfa` makes within ``max_repeat`` and
    ``max_positions``: the parse, the NFA and the DFA in one call (a cold
    short pattern spent ~100-250 us in the Python parser and NFA builder). Returns
    ``(table, accepting, status)``: status :data:`TOO_MANY_STATES` when more
    than ``max_states`` character states are needed, :data:`OUT_OF_TIME` past
    ``deadline``, :data:`NOT_SIMPLE` when ``source`` is not in that syntax, 0
    when no string is accepted, 1 otherwise."""
    if start < 0:
        prog, start, final = simple_ascii_nfa(source, max_repeat, max_positions)
        if start < 0:
            return np.zeros((0, 256), np.int32), np.zeros(0, np.bool_), NOT_SIMPLE
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
    cls = coarsest_classes(reduced, accepting, live)
    full = np.zeros((count + 1, 256), np.int32)
    for q in range(count):
        for b in range(128):
            a = atom_of[b]
            if a >= 0 and alphabet[b]:
                full[q + 1, b] = table[q, a] + 1
    out, out_acc = quotient_renumber(full, accepting, cls, 1)
    return out, out_acc, 1
