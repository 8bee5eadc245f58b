"""numba kernels of the Earley recognizer (:mod:`constrain.cfg.earley`): scanning a
terminal from an interned chart column, closing the result, interning it.

The recognizer's state lives in flat arrays that the kernels read and append to
(the Python class owns and grows them):

* the grammar: ``rd_next[rd]``, the symbol after the dot of dotted rule ``rd``
  (``-1 - symbol`` of the left-hand side when the dot is at the end);
  ``nullable[n]``; ``lhs_off``/``lhs_rd``, the first dotted rule of each kept
  rule, grouped by left-hand nonterminal;
* per nonterminal ``n``, its prediction (computed on first use):
  ``pred_sym``/``pred_rd[pred_off[n]:pred_off[n] + pred_len[n]]``, the predicted
  dotted rules with the symbol each waits for, sorted by that symbol;
  ``pexp[n]``, the bitset of the terminals among those symbols;
* per context ``c`` (chart column): its explicit items
  ``items[c_ioff[c]:c_ioff[c + 1]]`` sorted by (waited symbol, item), its
  predicted nonterminals ``roots[c_roff[c]:c_roff[c + 1]]``, the bitset of the
  terminals it expects ``c_exp[c]``, whether it accepts ``c_acc[c]``, and the
  hash of its items ``c_hash[c]``, under which ``htab`` interns it;
* ``meta``: the counters (see the ``M_*`` indices).

The kernels take them as ``meta`` and three tuples: ``grammar = (rd_next,
nullable, lhs_off, lhs_rd)``, ``pred = (pred_off, pred_len, pred_sym, pred_rd,
pexp)`` and ``chart = (c_ioff, items, c_roff, roots, c_exp, c_acc, c_hash,
htab)``, as :func:`earley_tables` returns them. The two that Python calls once
per new context, :func:`earley_next` and :func:`earley_union`, take them as
one descriptor array instead (:mod:`constrain.automata.table_views`, slots
:data:`SLOTS` in that order; :meth:`constrain.cfg.earley.EarleyRecognizer._bind_tables`
binds them): numba's dispatcher unboxes each array argument on each call, and
the 18 loose arrays were 2.2 of an Earley step's 3.5 us on MaskBench's first
walks (as tuples they cost more still).

A kernel that runs out of room returns a ``GROW_*`` status with the size it
needs; Python grows the arrays and calls again. Only predictions and whole
contexts are ever written, each complete before it is published, so a call
that stops half-way leaves nothing inconsistent behind.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from constrain.automata.hash_table import hash_ints
from constrain.automata.table_views import TableLayout, b1_1d, i64_1d, u8_1d, u64_1d, u64_2d

#: ``meta`` indices
M_CONTEXTS = 0     # contexts so far
M_PRED = 1         # entries used in pred_sym / pred_rd
M_TRUNCATED = 2    # columns cut at M_MAX_ITEMS (see earley_next)
M_N_T = 3          # terminals
M_N_RD = 4         # dotted rules
M_ACCEPT_ITEM = 5  # the item S' -> start . from context 0
M_MAX_CONTEXTS = 6
M_MAX_ITEMS = 7    # items one column keeps; its closure pushes at most PUSHES_PER_ITEM times as many
META_SIZE = 8

#: the closure of a new column pushes at most this many items per item it may keep
PUSHES_PER_ITEM = 64

DONE = 0
GROW_PRED = 1
GROW_CONTEXTS = 2
GROW_ITEMS = 3
GROW_ROOTS = 4
TOO_MANY_CONTEXTS = 5

#: an odd int64 multiplier (Fibonacci hashing of items into ``seen``)
_MIX = 0x5851F42D4C957F2D


@njit(cache=True, nogil=True, inline="always")
def _pushed(buf, n, v):
    """``buf`` with ``v`` written at ``n``, doubled first when full (the caller
    counts ``n``)."""
    if n == buf.shape[0]:
        grown = np.empty(2 * n + 16, np.int64)
        grown[:n] = buf
        buf = grown
    buf[n] = v
    return buf


@njit(cache=True, nogil=True)
def _predict(x, meta, grammar, pred):
    """Compute the prediction of nonterminal symbol ``x`` (the dotted rules
    predicted from it, advanced over nullable symbols) unless it is known.
    Returns the room it needs in ``pred_sym`` when that is too small, else 0."""
    rd_next, nullable, lhs_off, lhs_rd = grammar
    pred_off, pred_len, pred_sym, pred_rd, pexp = pred
    n_t = meta[M_N_T]
    nt = x - n_t
    if pred_off[nt] >= 0:
        return 0
    mark_nt = np.zeros(pred_off.shape[0], np.bool_)
    mark_rd = np.zeros(rd_next.shape[0], np.bool_)
    out = np.empty(16, np.int64)
    k = 0
    todo = np.empty(16, np.int64)
    top = 0
    todo[0] = x
    top = 1
    while top:
        top -= 1
        y0 = todo[top]
        if mark_nt[y0 - n_t]:
            continue
        mark_nt[y0 - n_t] = True
        for j in range(lhs_off[y0 - n_t], lhs_off[y0 - n_t + 1]):
            rd = lhs_rd[j]
            while not mark_rd[rd]:
                mark_rd[rd] = True
                out = _pushed(out, k, rd)
                k += 1
                y = rd_next[rd]
                if y < n_t:
                    break  # a terminal, or the rule is complete
                todo = _pushed(todo, top, y)
                top += 1
                if not nullable[y - n_t]:
                    break
                rd += 1
    # keep the rules that wait for a symbol, grouped by that symbol
    m = 0
    for i in range(k):
        if rd_next[out[i]] >= 0:
            out[m] = out[i]
            m += 1
    base = meta[M_PRED]
    if base + m > pred_sym.shape[0]:
        return base + m
    syms = np.empty(m, np.int64)
    for i in range(m):
        syms[i] = rd_next[out[i]]
    order = np.argsort(syms, kind="mergesort")
    for i in range(m):
        rd = out[order[i]]
        y = rd_next[rd]
        pred_sym[base + i] = y
        pred_rd[base + i] = rd
        if y < n_t:
            pexp[nt, y >> 6] |= np.uint64(1) << np.uint64(y & 63)
    meta[M_PRED] = base + m
    pred_len[nt] = m
    pred_off[nt] = base
    return 0


@njit(cache=True, nogil=True)
def _first_at_least(a, lo, hi, v):
    """The first index in ``a[lo:hi]`` (sorted) whose value is at least ``v``."""
    while lo < hi:
        mid = (lo + hi) >> 1
        if a[mid] < v:
            lo = mid + 1
        else:
            hi = mid
    return lo


@njit(cache=True, nogil=True)
def _first_wait_at_least(items, lo, hi, v, rd_next, n_rd):
    """As :func:`_first_at_least` over the symbols the items wait for."""
    while lo < hi:
        mid = (lo + hi) >> 1
        if rd_next[items[mid] % n_rd] < v:
            lo = mid + 1
        else:
            hi = mid
    return lo


@njit(cache=True, nogil=True)
def _push_advanced(c, sym, stack, top, meta, grammar, pred, chart):
    """Push the items of context ``c`` that wait for ``sym``, the dot moved past
    it (predicted ones get origin ``c``); returns the new stack (and its top)."""
    rd_next = grammar[0]
    pred_off, pred_len, pred_sym, pred_rd, _ = pred
    c_ioff, items, c_roff, roots, _, _, _, _ = chart
    n_rd = meta[M_N_RD]
    n_t = meta[M_N_T]
    lo = _first_wait_at_least(items, c_ioff[c], c_ioff[c + 1], sym, rd_next, n_rd)
    hi = _first_wait_at_least(items, lo, c_ioff[c + 1], sym + 1, rd_next, n_rd)
    need = top + (hi - lo)
    for r in range(c_roff[c], c_roff[c + 1]):
        need += pred_len[roots[r] - n_t]
    if need > stack.shape[0]:
        grown = np.empty(max(2 * stack.shape[0], need), np.int64)
        grown[:top] = stack[:top]
        stack = grown
    # the earliest origins on top of the stack, so popped first: predicted items
    # (origin c) first, then the others from the latest origin down. A set either
    # way; but when a closure is cut (max_items) the parses that began earliest
    # are the ones kept, and with them the way to acceptance
    off = (c + 1) * n_rd + 1
    for r in range(c_roff[c], c_roff[c + 1]):
        nt = roots[r] - n_t
        p0 = pred_off[nt]
        p1 = p0 + pred_len[nt]
        a = _first_at_least(pred_sym, p0, p1, sym)
        while a < p1 and pred_sym[a] == sym:
            stack[top] = off + pred_rd[a]
            top += 1
            a += 1
    for i in range(hi - 1, lo - 1, -1):
        stack[top] = items[i] + 1
        top += 1
    return stack, top


@njit(cache=True, nogil=True)
def add_context(buf, k, root_buf, n_roots, accepts, h, slot, meta, grammar, pred, chart):
    """Append a context with items ``buf[:k]`` (sorted by waited symbol, then
    item) and predicted nonterminals ``root_buf[:n_roots]``; interned under
    ``slot`` of ``htab`` unless ``slot`` is negative. Returns ``(status, c)``."""
    rd_next = grammar[0]
    pexp = pred[4]
    c_ioff, items, c_roff, roots, c_exp, c_acc, c_hash, htab = chart
    n_t = meta[M_N_T]
    for r in range(n_roots):
        need = _predict(root_buf[r], meta, grammar, pred)
        if need:
            return GROW_PRED, need
    c = meta[M_CONTEXTS]
    if c >= meta[M_MAX_CONTEXTS]:
        return TOO_MANY_CONTEXTS, c
    if c + 1 >= c_acc.shape[0] or 2 * (c + 1) > htab.shape[0]:
        return GROW_CONTEXTS, c + 2
    if c_ioff[c] + k > items.shape[0]:
        return GROW_ITEMS, c_ioff[c] + k
    if c_roff[c] + n_roots > roots.shape[0]:
        return GROW_ROOTS, c_roff[c] + n_roots
    n_rd = meta[M_N_RD]
    base = c_ioff[c]
    for j in range(k):
        it = buf[j]
        items[base + j] = it
        y = rd_next[it % n_rd]
        if y < n_t:
            c_exp[c, y >> 6] |= np.uint64(1) << np.uint64(y & 63)
    c_ioff[c + 1] = base + k
    rb = c_roff[c]
    for r in range(n_roots):
        x = root_buf[r]
        roots[rb + r] = x
        nt = x - n_t
        for w in range(c_exp.shape[1]):
            c_exp[c, w] |= pexp[nt, w]
    c_roff[c + 1] = rb + n_roots
    c_acc[c] = accepts
    c_hash[c] = h
    if slot >= 0:
        htab[slot] = c
    meta[M_CONTEXTS] = c + 1
    return DONE, c


#: the descriptor slots of :func:`earley_next` and :func:`earley_union`:
#: ``meta``, then the fields of ``grammar``, ``pred`` and ``chart``, as
#: ``(dtype, dimensions)``
SLOTS = ((np.int64, 1),
         (np.int64, 1), (np.bool_, 1), (np.int64, 1), (np.int64, 1),
         (np.int64, 1), (np.int64, 1), (np.int64, 1), (np.int64, 1), (np.uint64, 2),
         (np.int64, 1), (np.int64, 1), (np.int64, 1), (np.int64, 1), (np.uint64, 2),
         (np.uint8, 1), (np.uint64, 1), (np.int64, 1))
#: :data:`SLOTS` as a :class:`~constrain.automata.table_views.TableLayout`
LAYOUT = TableLayout(SLOTS)


@njit(cache=True, nogil=True, inline="always")
def tables(desc):
    """``(meta, grammar, pred, chart)`` viewed through the descriptors ``desc``."""
    grammar = (i64_1d(desc, 1), b1_1d(desc, 2), i64_1d(desc, 3), i64_1d(desc, 4))
    pred = (i64_1d(desc, 5), i64_1d(desc, 6), i64_1d(desc, 7), i64_1d(desc, 8), u64_2d(desc, 9))
    chart = (i64_1d(desc, 10), i64_1d(desc, 11), i64_1d(desc, 12), i64_1d(desc, 13),
             u64_2d(desc, 14), u8_1d(desc, 15), u64_1d(desc, 16), i64_1d(desc, 17))
    return i64_1d(desc, 0), grammar, pred, chart


@njit(cache=True, nogil=True)
def earley_next(c, t, desc):
    """The context after terminal ``t`` in context ``c``: ``(DONE, context)``
    (context -1 when ``t`` is refused), or a ``GROW_*`` / ``TOO_MANY_CONTEXTS``
    status with the size needed. ``desc``: the recognizer's tables
    (:data:`SLOTS`)."""
    meta, grammar, pred, chart = tables(desc)
    return next_column(c, t, meta, grammar, pred, chart)


@njit(cache=True, nogil=True)
def next_column(c, t, meta, grammar, pred, chart):
    """:func:`earley_next` over the tables themselves."""
    rd_next, nullable = grammar[0], grammar[1]
    c_exp = chart[4]
    if not (c_exp[c, t >> 6] >> np.uint64(t & 63)) & np.uint64(1):
        return DONE, -1
    n_rd = meta[M_N_RD]
    n_t = meta[M_N_T]
    accept_item = meta[M_ACCEPT_ITEM]
    max_items = meta[M_MAX_ITEMS]
    max_pushed = PUSHES_PER_ITEM * max_items
    stack = np.empty(64, np.int64)
    stack, top = _push_advanced(c, t, stack, 0, meta, grammar, pred, chart)
    pushed = top
    cut = False
    # the closure: what the scanned items complete, and the items after nullable
    # symbols; ``seen`` is an open-addressing set of items.
    #
    # A very ambiguous grammar (``a: a a | "x"``) has columns that grow with
    # the input, and closures that grow with its square: a column keeps at
    # most ``max_items`` items, and the closure stops after ``max_pushed``
    # pushes -- but never before the column has an item that waits for a
    # symbol or accepts, so it stays live. Every item kept is an item of the
    # full column, so the column's language is a subset of the full one: the
    # masks stay sound (they allow only what some kept parse allows) and lose
    # completeness only for the parses cut.
    cap = 64
    while cap < 4 * top:
        cap *= 2
    seen = np.full(cap, -1, np.int64)
    n_seen = 0
    inc = np.empty(32, np.int64)
    k = 0
    accepts = False
    while top:
        if k >= max_items or (pushed >= max_pushed and (k or accepts)):
            cut = True
            break
        top -= 1
        it = stack[top]
        mask = cap - 1
        slot = ((it * _MIX) >> 17) & mask
        dup = False
        while seen[slot] >= 0:
            if seen[slot] == it:
                dup = True
                break
            slot = (slot + 1) & mask
        if dup:
            continue
        seen[slot] = it
        n_seen += 1
        if 2 * n_seen > cap:
            old = seen
            cap *= 2
            mask = cap - 1
            seen = np.full(cap, -1, np.int64)
            for v in old:
                if v >= 0:
                    s2 = ((v * _MIX) >> 17) & mask
                    while seen[s2] >= 0:
                        s2 = (s2 + 1) & mask
                    seen[s2] = v
        y = rd_next[it % n_rd]
        if y < 0:
            if it == accept_item:
                accepts = True
            before = top
            stack, top = _push_advanced(it // n_rd - 1, -1 - y, stack, top, meta, grammar, pred,
                                        chart)
            pushed += top - before
        else:
            inc = _pushed(inc, k, it)
            k += 1
            if y >= n_t and nullable[y - n_t]:
                stack = _pushed(stack, top, it + 1)
                top += 1
                pushed += 1
    status, g = _intern(inc, k, accepts, meta, grammar, pred, chart)
    if cut and status == DONE:
        meta[M_TRUNCATED] += 1
    return status, g


@njit(cache=True, nogil=True)
def _intern(inc, k, accepts, meta, grammar, pred, chart):
    """The context with the distinct items ``inc[:k]`` (any order) and the
    ``accepts`` flag: the one interned already, or a new one, whose predicted
    nonterminals are those its items wait for. Returns ``(status, c)`` as
    :func:`add_context`."""
    rd_next = grammar[0]
    c_ioff, items, _, _, _, c_acc, c_hash, htab = chart
    n_rd = meta[M_N_RD]
    n_t = meta[M_N_T]
    # canonical order: by waited symbol, then item
    buf = np.sort(inc[:k])
    syms = np.empty(k, np.int64)
    for j in range(k):
        syms[j] = rd_next[buf[j] % n_rd]
    order = np.argsort(syms, kind="mergesort")
    buf = buf[order]
    h = hash_ints(buf, k, accepts)
    mask = htab.shape[0] - 1
    slot = h & np.uint64(mask)
    while htab[slot] >= 0:
        g = htab[slot]
        if c_hash[g] == h and c_acc[g] == accepts and c_ioff[g + 1] - c_ioff[g] == k:
            base = c_ioff[g]
            same = True
            for j in range(k):
                if items[base + j] != buf[j]:
                    same = False
                    break
            if same:
                return DONE, g
        slot = (slot + np.uint64(1)) & np.uint64(mask)
    # a new context: its roots are the nonterminals its items wait for
    root_buf = np.empty(k, np.int64)
    n_roots = 0
    last = -1
    for j in range(k):
        y = syms[order[j]]
        if y >= n_t and y != last:
            root_buf[n_roots] = y
            n_roots += 1
            last = y
    return add_context(buf, k, root_buf, n_roots, accepts, h, np.int64(slot), meta, grammar,
                       pred, chart)


@njit(cache=True, nogil=True)
def earley_union(cs, desc):
    """The context whose items are those of all the contexts ``cs`` (none of
    them context 0, whose prediction of the start symbol is not among its
    items), accepting if one of them does: ``(DONE, context)`` or a ``GROW_*``
    / ``TOO_MANY_CONTEXTS`` status, as :func:`earley_next`, which takes the
    same descriptors.

    Two configurations at one input position with one lexer state are one
    with this union: what follows either column follows the union (Earley's
    own column is the union of every history's items), and items keep their
    origins, so nothing is mixed up. Without it, an ambiguous grammar kept one
    configuration per way of splitting the input so far."""
    meta, grammar, pred, chart = tables(desc)
    c_ioff, items, c_acc = chart[0], chart[1], chart[5]
    total = 0
    for c in cs:
        total += c_ioff[c + 1] - c_ioff[c]
    inc = np.empty(max(total, 1), np.int64)
    k = 0
    accepts = False
    for c in cs:
        for i in range(c_ioff[c], c_ioff[c + 1]):
            inc[k] = items[i]
            k += 1
        if c_acc[c]:
            accepts = True
    # distinct items, the first max_items of them (by origin, then dotted
    # rule): a subset of a live column's waiting items is live, and its
    # language a subset (see earley_next)
    inc = np.sort(inc[:k])
    m = 0
    max_items = meta[M_MAX_ITEMS]
    cut = False
    for j in range(k):
        if m == 0 or inc[j] != inc[m - 1]:
            if m == max_items:
                cut = True
                break
            inc[m] = inc[j]
            m += 1
    status, g = _intern(inc, m, accepts, meta, grammar, pred, chart)
    if cut and status == DONE:
        meta[M_TRUNCATED] += 1
    return status, g


@njit(cache=True, nogil=True)
def derives(lhs, off, flat, n_t, n_sym, term_ok, rule_ok):
    """Per nonterminal, whether one of its rules (those with ``rule_ok``) has
    every symbol ok: a terminal ``x`` when ``term_ok[x]``, a nonterminal when it
    is in the result. Rule ``r`` is ``lhs[r] -> flat[off[r]:off[r + 1]]``. A
    worklist over per-rule counts of symbols not yet known ok: linear in the
    grammar (the round-robin loop it replaced took ~1 ms on a large JSON Schema
    grammar)."""
    n_r = lhs.shape[0]
    done = np.zeros(n_sym, np.bool_)
    missing = np.zeros(n_r, np.int64)
    uoff = np.zeros(n_sym + 1, np.int64)
    counted = np.zeros(n_r, np.bool_)
    for r in range(n_r):
        if not rule_ok[r]:
            continue
        ok = True
        for j in range(off[r], off[r + 1]):
            x = flat[j]
            if x < n_t and not term_ok[x]:
                ok = False
                break
        if not ok:
            continue  # a terminal that is never ok: the rule never counts
        counted[r] = True
        for j in range(off[r], off[r + 1]):
            x = flat[j]
            if x >= n_t:
                uoff[x - n_t + 1] += 1
                missing[r] += 1
    for a in range(n_sym):
        uoff[a + 1] += uoff[a]
    users = np.empty(uoff[n_sym], np.int64)
    fill = uoff[:n_sym].copy()
    todo = np.empty(n_sym, np.int64)
    top = 0
    for r in range(n_r):
        if not counted[r]:
            continue
        for j in range(off[r], off[r + 1]):
            x = flat[j]
            if x >= n_t:
                users[fill[x - n_t]] = r
                fill[x - n_t] += 1
        if missing[r] == 0 and not done[lhs[r]]:
            done[lhs[r]] = True
            todo[top] = lhs[r]
            top += 1
    while top:
        top -= 1
        a = todo[top]
        for u in range(uoff[a], uoff[a + 1]):
            r = users[u]
            missing[r] -= 1
            if missing[r] == 0 and not done[lhs[r]]:
                done[lhs[r]] = True
                todo[top] = lhs[r]
                top += 1
    return done


@njit(cache=True, nogil=True)
def earley_tables(lhs, off, flat, n_t, term_ok, check_productive, max_contexts, max_items):
    """Every array of a recognizer for the rules ``lhs[r] -> flat[off[r]:off[r +
    1]]`` (the last rule is the augmented start ``S' -> start``), with context 0
    made; a chart column keeps at most ``max_items`` items (see
    :func:`earley_next`). Rules using a symbol that derives nothing ``term_ok`` allows are left
    out when ``check_productive`` (else every rule is known productive).

    Returns ``(ok, meta, grammar, pred, chart)`` (the tuples of the module
    docstring); ``ok`` is false when the start symbol derives nothing."""
    n_r = lhs.shape[0]
    n_sym = lhs[n_r - 1] + 1  # the augmented start symbol is the last
    rule_ok = np.ones(n_r, np.bool_)
    ok = True
    if check_productive:
        productive = derives(lhs, off, flat, n_t, n_sym, term_ok, rule_ok)
        ok = productive[n_sym - 1]
        for r in range(n_r):
            for j in range(off[r], off[r + 1]):
                x = flat[j]
                if (x < n_t and not term_ok[x]) or (x >= n_t and not productive[x - n_t]):
                    rule_ok[r] = False
                    break
    nullable = derives(lhs, off, flat, n_t, n_sym, np.zeros(max(n_t, 1), np.bool_), rule_ok)
    # dotted rules: rule r's start at off[r] + r, its end at off[r + 1] + r
    rd_next = np.empty(flat.shape[0] + n_r, np.int64)
    lhs_off = np.zeros(n_sym + 1, np.int64)
    for r in range(n_r):
        b = off[r] + r
        for j in range(off[r], off[r + 1]):
            rd_next[b + j - off[r]] = flat[j]
        rd_next[off[r + 1] + r] = -1 - n_t - lhs[r]
        if rule_ok[r]:
            lhs_off[lhs[r] + 1] += 1
    for a in range(n_sym):
        lhs_off[a + 1] += lhs_off[a]
    lhs_rd = np.empty(lhs_off[n_sym], np.int64)
    fill = lhs_off[:n_sym].copy()
    for r in range(n_r):
        if rule_ok[r]:
            lhs_rd[fill[lhs[r]]] = off[r] + r
            fill[lhs[r]] += 1
    words = max(1, (n_t + 63) // 64)
    # room for the contexts and predictions of a mid-sized JSON Schema's walk:
    # each growth of a table makes the kernel run again
    cap = 256
    meta = np.zeros(META_SIZE, np.int64)
    meta[M_N_T] = n_t
    meta[M_N_RD] = rd_next.shape[0]
    meta[M_ACCEPT_ITEM] = rd_next.shape[0] + off[n_r - 1] + n_r - 1 + 1
    meta[M_MAX_CONTEXTS] = max_contexts
    meta[M_MAX_ITEMS] = max_items
    pred_off = np.full(n_sym, -1, np.int64)
    pred_len = np.zeros(n_sym, np.int64)
    pred_sym = np.empty(2048, np.int64)
    pred_rd = np.empty(2048, np.int64)
    pexp = np.zeros((n_sym, words), np.uint64)
    c_ioff = np.zeros(cap + 1, np.int64)
    items = np.empty(4096, np.int64)
    c_roff = np.zeros(cap + 1, np.int64)
    roots = np.empty(1024, np.int64)
    c_exp = np.zeros((cap, words), np.uint64)
    c_acc = np.zeros(cap, np.uint8)
    c_hash = np.zeros(cap, np.uint64)
    htab = np.full(4 * cap, -1, np.int64)
    grammar = (rd_next, nullable, lhs_off, lhs_rd)
    chart = (c_ioff, items, c_roff, roots, c_exp, c_acc, c_hash, htab)
    if ok:
        # context 0: nothing read, the start symbol predicted (not interned: a
        # column with no items and nothing predicted is another context).
        # S' -> start . is predicted when start derives the empty string
        start = np.empty(1, np.int64)
        start[0] = n_t + n_sym - 1
        while True:
            pred = (pred_off, pred_len, pred_sym, pred_rd, pexp)
            status, need = add_context(start[:0], 0, start, 1, nullable[n_sym - 1], np.uint64(0), -1,
                                       meta, grammar, pred, chart)
            if status == DONE:
                break
            # nothing is written before the room is checked
            pred_sym = np.empty(max(2 * pred_sym.shape[0], need), np.int64)
            pred_rd = np.empty(pred_sym.shape[0], np.int64)
    return ok, meta, grammar, (pred_off, pred_len, pred_sym, pred_rd, pexp), chart
