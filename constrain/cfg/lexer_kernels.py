"""numba kernels of the grammar runtime: the lexer product automaton and the two
token-trie walks (per lexer state, and across terminal boundaries).

Conventions: a *lexer state* is a global ``int32`` id into one table ``[n, 256]``
(0 is dead). ``acc`` holds, per lexer state, a bitset (uint64 words) of the
terminals whose automaton accepts there. Parser contexts are ``int32`` ids;
``ctx_next[c, t]`` is the context after terminal ``t`` (-1: refused, -2: not yet
computed) and ``ctx_start[c]`` the lexer state that starts the next terminal
(-2: not yet computed). A kernel that meets a -2 stops and reports it, Python fills
the entry in, and the kernel runs again: the tables only ever grow.

The kernels take each structure as one tuple of arrays, built and documented
by the object that owns it: ``terms``
(:attr:`constrain.cfg.lexer.TerminalAutomata.kernel_arrays`), the lexer's
``states``, ``index`` and ``memos`` (:meth:`constrain.cfg.lexer.LexerTables._pack`),
the token ``trie`` and its ``summaries``
(:meth:`constrain.vocab.trie.TokenTrie.kernel_arrays`). The ones a first
visit calls from Python (:func:`expand_start`, :func:`lexer_walk_narrow`,
:func:`lexer_walk_rows`, :func:`boundary_walk`) take the lexer's tables as one
descriptor array instead (:data:`LEX_SLOTS`), and view them on entry.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from constrain.vocab.trie_kernels import trie_views, utf8_next
from constrain.automata.bits import bit_index
from constrain.automata.hash_table import hash_ints
from constrain.cfg.earley_kernels import DONE as EARLEY_DONE, next_column, tables as parser_tables
from constrain.automata.table_views import (TableLayout, b1_1d, i8_1d, i16_1d, i32_1d, i32_2d,
                                            i64_1d, u8_1d, u64_1d, u64_2d)

NEED_NONE = 0
NEED_NEXT = 1
NEED_START = 2
OVERFLOW = 3

#: lexer_walk_rows: a broad state, to be looked up in the shared walks first
WALK_SHARED = -2
#: a walk that met a lexer state not expanded yet returns ``PENDING_BASE - state``
#: (:func:`pending_of`); boundary_walk reports it as ``NEED_EXPAND``
PENDING_BASE = -3
NEED_EXPAND = 4

# ``walk_flags`` per lexer state. States are made when a row first points at
# them and expanded (their row, acceptance and flag written) later, a bounded
# number per call (expand_states' ``limit``): a length-bounded string's tens of
# thousands of states are expanded as walks reach them. Zero, what grown tables
# hold, is "not expanded": no kernel reads such a state's row, it reports it
F_PENDING = 0
F_ENDS = 1  # some terminal may end here
F_LOOP = 2  # none may, some byte loops
F_RUN = 3  # neither, and a counted run of at least MIN_RUN bytes (count_run)
F_PLAIN = 4  # neither, a short run
F_NEW = 5  # neither, not yet classified (lexer_walk turns it into F_RUN or F_PLAIN)
F_QUEUED = 6  # in expand_states' queue


@njit(cache=True, nogil=True, inline="always")
def pending_of(code):
    """The lexer state a walk's ``PENDING_BASE - state`` return names."""
    return PENDING_BASE - code


@njit(cache=True, nogil=True, inline="always")
def _term_step(tab, vmap, row, b):
    """The target of virtual terminal row ``row`` on byte ``b`` (0: dead; see
    :class:`constrain.cfg.lexer.TerminalAutomata`: the row is written at
    ``vmap[row, 0]``, its targets up to ``vmap[row, 2]`` shifted by
    ``vmap[row, 1]``)."""
    s2 = tab[vmap[row, 0], b]
    if s2 != 0 and s2 <= vmap[row, 2]:
        s2 += vmap[row, 1]
    return s2


@njit(cache=True, nogil=True)
def _probe(htab, hashes, pairs, poff, buf, m, h):
    """Open-addressing lookup of the pair list ``buf[:m]``: ``(slot, state)``,
    state -1 when absent (``slot`` is then where it goes)."""
    mask = np.uint64(htab.shape[0] - 1)
    slot = h & mask
    while htab[slot] >= 0:
        g = htab[slot]
        if hashes[g] == h and poff[g + 1] - poff[g] == m:
            base = poff[g]
            same = True
            for j in range(m):
                if pairs[base + j] != buf[j]:
                    same = False
                    break
            if same:
                return slot, g
        slot = (slot + np.uint64(1)) & mask
    return slot, -1


@njit(cache=True, nogil=True)
def find_state(index, buf):
    """The lexer state whose alive (terminal, local state) pairs, flattened and
    sorted by terminal, are ``buf``; -1 when there is none."""
    pairs, poff, hashes, htab, _, _ = index
    m = buf.shape[0]
    return _probe(htab, hashes, pairs, poff, buf, m, hash_ints(buf, m, 0))[1]


@njit(cache=True, nogil=True, inline="always")
def _add_state(buf, m, h, slot, n, pairs, poff, hashes, htab, single, offsets):
    """Append the state with pairs ``buf[:m]`` (hash ``h``, free hash slot
    ``slot``) as state ``n``; returns the new count."""
    pairs[poff[n]:poff[n] + m] = buf[:m]
    poff[n + 1] = poff[n] + m
    hashes[n] = h
    htab[slot] = n
    if m == 2:
        single[offsets[buf[0]] + buf[1]] = n
    return n + 1


EXPAND_DONE = 0
EXPAND_GROW = 1
EXPAND_OVERFLOW = 2


@njit(cache=True, nogil=True, inline="always")
def _rename_row(terms, states, index, t, s, skip, d, n, max_states, buf):
    """Row ``d`` of ``trans`` as terminal ``t``'s row ``s`` alone, on every byte
    not in ``skip``: each successor ``(t, s2)`` renamed to its lexer state, added
    when new; runs of bytes with one target are renamed once (~5x faster than
    combining pairs byte by byte). Sets ``loops[d]`` for those bytes. Returns
    ``(status, n, looped)``, ``status`` as :func:`expand_states` reports room."""
    tab, offsets, _, _, vmap = terms
    trans, _, _, loops, _, _ = states
    pairs, poff, hashes, htab, single, _ = index
    off = offsets[t]
    row = off + s
    prow, shift, lim = vmap[row, 0], vmap[row, 1], vmap[row, 2]
    last_s2 = -1
    g = 0
    looped = False
    for b in range(256):
        s2 = tab[prow, b]
        if s2 == 0 or skip[b]:
            trans[d, b] = 0
            continue
        if s2 <= lim:
            s2 += shift
        if s2 != last_s2:
            g = single[off + s2]
            if g < 0:
                buf[0] = t
                buf[1] = s2
                h = hash_ints(buf, 2, 0)
                slot, g = _probe(htab, hashes, pairs, poff, buf, 2, h)
                if g < 0:
                    if n >= max_states:
                        return EXPAND_OVERFLOW, n, looped
                    if n >= trans.shape[0] or poff[n] + 2 > pairs.shape[0]:
                        return EXPAND_GROW, n, looped
                    g = n
                    n = _add_state(buf, 2, h, slot, n, pairs, poff, hashes, htab, single, offsets)
            last_s2 = s2
        trans[d, b] = g
        if g == d:
            loops[d, b >> 6] |= np.uint64(1) << np.uint64(b & 63)
            looped = True
    return EXPAND_DONE, n, looped


@njit(cache=True, nogil=True, inline="always")
def _enqueue(trans, flags, queue, qs, d, new_from, n):
    """Row ``d`` is written: queue the states it made (``new_from:n``) and,
    when some state was ever left unexpanded (``qs[3]``), those of its targets
    not expanded (nor queued); count ``d`` as expanded. (Scanning every row's
    256 targets cost ~0.1-0.2 us a state, a fifth of an expansion.)"""
    for g in range(new_from, n):
        queue[qs[1]] = g
        qs[1] += 1
        flags[g] = F_QUEUED
    if qs[3]:
        for b in range(256):
            g = trans[d, b]
            if g != 0 and flags[g] == F_PENDING:
                queue[qs[1]] = g
                qs[1] += 1
                flags[g] = F_QUEUED
    qs[0] += 1
    qs[2] += 1


@njit(cache=True, nogil=True)
def expand_states(terms, states, index, start, n, max_states, queue, qs, limit, layer_limit):
    """Add the lexer state ``start`` (flattened (terminal, local state) pairs,
    sorted by terminal) to the global tables and expand it and the states it
    reaches, breadth first, at most ``limit`` of them, running the terminals'
    DFAs (stacked in ``tab`` by ``offsets``) side by side. The states the
    expanded rows point at exist (pairs, hash); those past the limit stay
    ``F_PENDING`` until a walk or a step reaches them (:data:`PENDING_BASE`).
    The limit is what keeps a ``maxLength: 2048`` string from expanding its
    ~28k states (64 MB of rows) on its first visit.

    A lexer state is the set of pairs alive, so states are shared by every
    expected set that reaches them: a known state is never expanded again (a
    JSON object's key positions differ in their expected sets, but past the
    first bytes of a key they mostly meet states seen before). ``queue`` (as
    long as the tables) and ``qs`` (int64: head, tail, expanded, 1 once some
    state was left unexpanded, the first state the current row made) hold the
    breadth-first queue; ``qs[1] ==
    0`` starts a new call. Returns ``(status,
    n, state)``: ``EXPAND_GROW`` when the tables are full (grow them, queue
    included, and call again with the same ``qs``: the work done is kept),
    ``EXPAND_OVERFLOW`` past ``max_states``. The call also stops at the
    ``layer_limit``-th state of a length-bounded string's layers (one
    terminal alive, in a counted row: ``vmap[row, 2] > 0``), which stays
    pending with the rest of the queue: walks read a token's depth of layers
    ahead, and a string shorter than its bound never reaches the others. Once done, the states expanded are
    ``queue[:qs[0]]``. ``single[offsets[t] +
    s]`` memoises the state where only terminal ``t`` is alive, in local state
    ``s`` (-1: not yet known): deep inside a terminal, as in a length-bounded
    string's thousands of states, every successor is one, and the array lookup
    replaces the hash probe. ``row_byte`` (per terminal row, see below) is
    filled in as rows are met."""
    tab, offsets, accepting, _, vmap = terms
    trans, acc, has_acc, loops, flags, _ = states
    pairs, poff, hashes, htab, single, row_byte = index
    cap = trans.shape[0]
    m0 = start.shape[0]
    h0 = hash_ints(start, m0, 0)
    slot, g0 = _probe(htab, hashes, pairs, poff, start, m0, h0)
    if g0 < 0:
        if n >= max_states:
            return EXPAND_OVERFLOW, n, -1
        if n >= cap or poff[n] + m0 > pairs.shape[0]:
            return EXPAND_GROW, n, -1
        g0 = n
        n = _add_state(start, m0, h0, slot, n, pairs, poff, hashes, htab, single, offsets)
    if qs[1] == 0:
        qs[0] = 0
        if flags[g0] != F_PENDING:
            return EXPAND_DONE, n, g0
        queue[0] = g0
        qs[1] = 1
        qs[2] = 0
        flags[g0] = F_QUEUED
        # states made from here on are queued as their row is done
        qs[4] = n
    width = 2 * (m0 if m0 > 64 else 64)
    buf = np.empty(width, np.int32)
    prev = np.empty(width, np.int32)
    live = np.zeros(256, np.bool_)
    new_from = qs[4]  # the row a full table cut short made some already
    layers = 0
    while qs[0] < qs[1] and qs[2] < limit:
        qs[4] = new_from
        d = queue[qs[0]]
        base = poff[d]
        m = poff[d + 1] - base
        if m > width:
            width = m
            buf = np.empty(width, np.int32)
            prev = np.empty(width, np.int32)
        if m == 2:
            # one terminal alive (deep inside a string, a number, a name): its
            # row is the terminal's row renamed, and runs of bytes with one
            # target are renamed once (~5x faster than the general loop below,
            # which most new states used to take). _rename_row does the same
            # for a wide pair beside literals; called here, it made a
            # length-bounded string's 28k states 8% slower
            t = pairs[base]
            off = offsets[t]
            row = off + pairs[base + 1]
            if vmap[row, 2] > 0:
                layers += 1
                if layers > layer_limit:
                    # left in the queue, as past ``limit`` (below): popped and
                    # marked pending here, a later row could queue it again
                    break
            ends = accepting[row]
            if ends:
                acc[d, t >> 6] |= np.uint64(1) << np.uint64(t & 63)
            has_acc[d] = ends
            looped = False
            last_s2 = -1
            g = 0
            prow, shift, lim = vmap[row, 0], vmap[row, 1], vmap[row, 2]
            for b in range(256):
                s2 = tab[prow, b]
                if s2 == 0:
                    trans[d, b] = 0
                    continue
                if s2 <= lim:
                    s2 += shift
                if s2 != last_s2:
                    g = single[off + s2]
                    if g < 0:
                        buf[0] = t
                        buf[1] = s2
                        h = hash_ints(buf, 2, 0)
                        slot, g = _probe(htab, hashes, pairs, poff, buf, 2, h)
                        if g < 0:
                            if n >= max_states:
                                return EXPAND_OVERFLOW, n, g0
                            if n >= cap or poff[n] + 2 > pairs.shape[0]:
                                return EXPAND_GROW, n, g0
                            g = n
                            n = _add_state(buf, 2, h, slot, n, pairs, poff, hashes, htab, single,
                                           offsets)
                    last_s2 = s2
                trans[d, b] = g
                if g == d:
                    loops[d, b >> 6] |= np.uint64(1) << np.uint64(b & 63)
                    looped = True
            flags[d] = F_ENDS if ends else (F_LOOP if looped else F_NEW)
            _enqueue(trans, flags, queue, qs, d, new_from, n)
            new_from = n
            continue
        ends = False
        for j in range(0, m, 2):
            t = pairs[base + j]
            if accepting[offsets[t] + pairs[base + j + 1]]:
                acc[d, t >> 6] |= np.uint64(1) << np.uint64(t & 63)
                ends = True
        has_acc[d] = ends
        looped = False
        prev_m = -1
        prev_g = 0
        # bytes on which some pair lives: a start state of many literals (a
        # JSON object's member names) lives on a handful of bytes. A terminal row
        # with one live byte is memoised in ``row_byte`` (-2: not yet known, -1:
        # several, -3: none), so a literal's row is scanned once, not once per
        # lexer state it appears in
        live[:] = False
        wide = -1
        n_wide = 0
        for j in range(0, m, 2):
            row = offsets[pairs[base + j]] + pairs[base + j + 1]
            rb = row_byte[row]
            if rb == -2:
                rb = -3
                prow = vmap[row, 0]
                for b in range(256):
                    if tab[prow, b] != 0:
                        rb = b if rb == -3 else -1
                        if rb == -1:
                            break
                row_byte[row] = rb
            if rb >= 0:
                live[rb] = True
            elif rb == -1:
                wide = j
                n_wide += 1
        if n_wide <= 1:
            # literals beside at most one wider terminal (member names and "any
            # other name", a name's prefix and that other name): the row is the
            # wide terminal's alone, renamed as for one pair above, but on the
            # literals' few bytes, which are combined in full below (the general
            # loop ran every pair on every byte: ~1.2 us per state, and a
            # Kubernetes object's names made 200 of them in one first visit)
            if n_wide == 1:
                status, n, looped = _rename_row(terms, states, index, pairs[base + wide],
                                                pairs[base + wide + 1], live, d, n, max_states,
                                                buf)
                if status != EXPAND_DONE:
                    return status, n, g0
            else:
                trans[d, :] = 0
        else:
            for j in range(0, m, 2):
                row = offsets[pairs[base + j]] + pairs[base + j + 1]
                if row_byte[row] == -1:
                    prow = vmap[row, 0]
                    for b in range(256):
                        if tab[prow, b] != 0:
                            live[b] = True
        for b in range(256):
            if not live[b]:
                if n_wide > 1:
                    trans[d, b] = 0
                continue
            k = 0
            for j in range(0, m, 2):
                t = pairs[base + j]
                s2 = _term_step(tab, vmap, offsets[t] + pairs[base + j + 1], b)
                if s2 != 0:
                    buf[k] = t
                    buf[k + 1] = s2
                    k += 2
            if k == 0:
                trans[d, b] = 0
                continue
            if k == prev_m:
                same = True
                for j in range(k):
                    if buf[j] != prev[j]:
                        same = False
                        break
                if same:
                    trans[d, b] = prev_g
                    if prev_g == d:
                        loops[d, b >> 6] |= np.uint64(1) << np.uint64(b & 63)
                        looped = True
                    continue
            g = single[offsets[buf[0]] + buf[1]] if k == 2 else -1
            if g < 0:
                h = hash_ints(buf, k, 0)
                slot, g = _probe(htab, hashes, pairs, poff, buf, k, h)
            if g < 0:
                if n >= max_states:
                    return EXPAND_OVERFLOW, n, g0
                if n >= cap or poff[n] + k > pairs.shape[0]:
                    return EXPAND_GROW, n, g0
                g = n
                n = _add_state(buf, k, h, slot, n, pairs, poff, hashes, htab, single, offsets)
            trans[d, b] = g
            if g == d:
                loops[d, b >> 6] |= np.uint64(1) << np.uint64(b & 63)
                looped = True
            prev[:k] = buf[:k]
            prev_m = k
            prev_g = g
        flags[d] = F_ENDS if ends else (F_LOOP if looped else F_NEW)
        _enqueue(trans, flags, queue, qs, d, new_from, n)
        new_from = n
    # what the limit left in the queue is expanded when reached
    if qs[0] < qs[1]:
        qs[3] = 1
        for k in range(qs[0], qs[1]):
            flags[queue[k]] = F_PENDING
            # a row not expanded reads as dead (see LexerTables.left_pending)
            trans[queue[k], :] = 0
    qs[1] = 0
    return EXPAND_DONE, n, g0


RUN_UNKNOWN = -1
_RUN_OPEN = -2
#: the most children one count_run search looks at (a run search runs down a
#: chain of positions, one child each; one that branches and meets again is
#: cut short)
MAX_RUN_STEPS = 1 << 16

#: bit of ``live[s, 2]``: state ``s`` reads every valid UTF-8 character as one
#: of its good bytes (see :func:`_set_good`); bits 0 and 1 say that its live
#: ASCII bytes and its good bytes are known
UTF8_RUN = np.uint64(4)
#: bits of ``live[s, 2]``: whether state ``s`` reads every valid UTF-8
#: character back into itself is known, and whether it does
#: (:func:`_reads_utf8_back`)
UTF8_BACK_KNOWN = np.uint64(8)
UTF8_BACK = np.uint64(16)

#: the states of one character of a length-bounded string
#: (:data:`constrain.cfg.lexemes.LAYER`, which the lexer checks at import)
BOUNDED_LAYER = 20

# _utf8_reads_to's empty flags (a terminal's own rows) and accepting (a lexer's table)
_NO_FLAGS = np.zeros(0, np.uint8)
# and its empty vmap (a lexer's table is written as it is read)
_NO_VMAP = np.zeros((0, 3), np.int32)
_NO_BOOLS = np.zeros(0, np.bool_)


@njit(cache=True, nogil=True)
def _ascii_live(trans, s, live):
    """The ASCII bytes state ``s`` takes (128 bits), memoised in ``live[s]``
    (``live[s, 2]`` is 1 once known)."""
    if live[s, 2] == np.uint64(0):
        lo = np.uint64(0)
        hi = np.uint64(0)
        base = s << 8
        for b in range(64):
            if trans[base + b] != 0:
                lo |= np.uint64(1) << np.uint64(b)
            if trans[base + 64 + b] != 0:
                hi |= np.uint64(1) << np.uint64(b)
        live[s, 0] = lo
        live[s, 1] = hi
        live[s, 2] = np.uint64(1)


#: the fewest ASCII bytes a state takes for it to have good bytes
#: (:func:`_set_good`; fewer: literals, digits, whose walks are cheap anyway)
GOOD_MIN_LIVE = 16


@njit(cache=True, nogil=True)
def _ascii_live_count(trans, s, live):
    """How many ASCII bytes state ``s`` takes (:func:`_ascii_live`, memoised)."""
    _ascii_live(trans, s, live)
    n = 0
    for b in range(128):
        if (live[s, b >> 6] >> np.uint64(b & 63)) & np.uint64(1):
            n += 1
    return n


@njit(cache=True, nogil=True)
def _set_good(trans, flags, s, live, good, below, utf8):
    """``good[s]``: the ASCII bytes on which ``s`` goes to a state where no
    terminal ends that takes the same ASCII bytes as ``s`` (a counter's next
    position); none when ``s`` takes fewer than 16 ASCII bytes (literals, digits:
    walks that are cheap anyway). Bit 2 of ``live[s, 2]`` (:data:`UTF8_RUN`)
    says whether ``s`` also reads every valid UTF-8 character of the
    vocabulary's alphabet (``below[0]``), without ending a terminal on the way,
    into the state its lowest good byte leads to: then a character counts as
    one good byte (a ``maxLength`` string's position; see
    :func:`_run_covers_utf8`). Asked only when ``utf8`` (a multilingual
    vocabulary, :attr:`TokenTrie.multilingual
    <constrain.vocab.trie.TokenTrie.multilingual>`): the check costs ~0.6 us a
    state (a first counted walk over SmolLM2 checks ~160 of them: +0.1 ms),
    and SmolLM2's tokens past ASCII are 1 % of its trie. Returns 0, or a successor not expanded yet (then nothing is written)."""
    lo = np.uint64(0)
    hi = np.uint64(0)
    if _ascii_live_count(trans, s, live) >= GOOD_MIN_LIVE:
        base = s << 8
        for b in range(128):
            x = trans[base + b]
            if x == 0 or flags[x] == F_ENDS:
                continue
            if flags[x] == F_PENDING:
                return x
            _ascii_live(trans, x, live)
            if live[x, 0] == live[s, 0] and live[x, 1] == live[s, 1]:
                if b < 64:
                    lo |= np.uint64(1) << np.uint64(b)
                else:
                    hi |= np.uint64(1) << np.uint64(b - 64)
    mark = np.uint64(3)
    if utf8 and lo | hi:
        b0 = bit_index(lo & (~lo + np.uint64(1))) if lo else 64 + bit_index(hi & (~hi + np.uint64(1)))
        t = trans[(s << 8) + b0]
        # a state whose first bytes of longer characters lead where t's do
        # (an object's declared names beside "any other key", t that key's
        # text: every name's letters a state) reads them into t as t reads
        # them into itself: asked once per t, not once per state (each ~0.6 us
        # over o200k, ~55 of a first key walk's ~130 hot)
        r = -1
        if t != s:
            base_s = s << 8
            base_t = t << 8
            b = 0xC2
            while b < 0xF5 and trans[base_s + b] == trans[base_t + b]:
                b += 1
            if b == 0xF5:
                r = _reads_utf8_back(trans, flags, live, below, t)
        if r < 0:
            r = _utf8_reads_to(trans.reshape(-1, 256), 0, flags, _NO_BOOLS, _NO_VMAP, s, 0, below, t)
        if r < 0:
            return -r
        if r == 1:
            mark |= UTF8_RUN
    good[s, 0] = lo
    good[s, 1] = hi
    live[s, 2] = mark | (live[s, 2] & (UTF8_BACK_KNOWN | UTF8_BACK))
    return 0


@njit(cache=True, nogil=True)
def _reads_utf8_back(trans, flags, live, below, t):
    """Whether lexer state ``t`` reads every valid UTF-8 character of the
    vocabulary's alphabet back into itself without ending a terminal
    (:func:`_utf8_reads_to` from ``t`` into ``t``: 1 or 0, ``-q`` for a state
    ``q`` on the way not expanded yet), memoised in ``live[t, 2]``
    (:data:`UTF8_BACK_KNOWN`). Another state that reads the first byte of each
    longer character into the states ``t`` does reads them into ``t`` alike."""
    m = live[t, 2]
    if m & UTF8_BACK_KNOWN:
        return 1 if m & UTF8_BACK else 0
    r = _utf8_reads_to(trans.reshape(-1, 256), 0, flags, _NO_BOOLS, _NO_VMAP, t, 0, below, t)
    if r >= 0:
        # (its ASCII bytes first: _ascii_live reads live[t, 2] == 0 as unknown)
        _ascii_live(trans, t, live)
        live[t, 2] |= UTF8_BACK_KNOWN | (UTF8_BACK if r == 1 else np.uint64(0))
    return r


@njit(cache=True, nogil=True)
def _covers(good, live, x, s):
    """Whether ``x`` takes every good byte of ``s`` (and UTF-8 text, when ``s`` does)."""
    return ((good[s, 0] & ~good[x, 0]) == np.uint64(0) and (good[s, 1] & ~good[x, 1]) == np.uint64(0)
            and (live[s, 2] & ~live[x, 2] & UTF8_RUN) == np.uint64(0))


@njit(cache=True, nogil=True)
def count_run(trans, flags, memos, s0, cap, below, utf8):
    """``run[s0]``: a length ``r <= cap`` such that every string of at most ``r``
    bytes from ``good[s0]`` leads from ``s0`` through states where no terminal
    ends, that take the same ASCII bytes as ``s0`` -- so a token subtree no
    deeper than ``r`` whose bytes are all in ``good[s0]`` is allowed whole. This
    is what a length-bounded string's positions have instead of a loop: ``r`` is
    the distance to the bound (capped at the longest token).

    ``r(s) = min(cap, 1 + min over good bytes b of r'(t))``, ``t`` the successor,
    where ``r'(t) = r(t)`` when ``good[t]`` covers ``good[s]``, else 0. Computed
    by an iterative depth-first search no deeper than ``2 * cap`` (a state
    ``k`` levels down needs its run only up to ``2 * cap - k``: the search stays
    within two tokens' reach, expanded or not beyond), memoised in ``run``
    where exact -- a state's within ``cap`` levels of ``s0`` (its run, capped
    at ``cap``, is then known), and a deeper state's shorter than what its
    level asked; so the states of a bounded string's positions are memoised
    ``cap`` at a time (states of a cycle met again count 0: a lower bound, hence
    still sound); a state that reads UTF-8 characters as good bytes
    (:data:`UTF8_RUN`) counts only successors that do too (:func:`_covers`).
    ``memos`` holds ``run``, ``good``, the per-state ASCII bytes taken (bits
    of ``live[s, 2]``: 1 once they are known, 2 once ``good[s]`` is too,
    :data:`UTF8_RUN`) and the scratch of the search; ``below`` and ``utf8`` as
    for :func:`_set_good`. ``flags`` as for :func:`lexer_walk`.

    A state not expanded yet within reach stops the search: ``PENDING_BASE -
    state`` is returned and nothing memoised that depended on it (the states
    on the search's stack are unknown again)."""
    run, good, live, scratch = memos
    if run[s0] >= 0:
        return run[s0]
    if (live[s0, 2] & np.uint64(2)) == np.uint64(0):
        x = _set_good(trans, flags, s0, live, good, below, utf8)
        if x:
            return PENDING_BASE - x
    stk, pos, best, last = scratch[0], scratch[1], scratch[2], scratch[3]
    lim = 2 * cap
    top = 0
    stk[0] = s0
    pos[0] = 0
    best[0] = lim
    last[0] = 0
    run[s0] = _RUN_OPEN
    steps = 0
    while top >= 0:
        s = stk[top]
        b = pos[top]
        pushed = False
        # what a child may add at this level: its run counts up to lim - top - 1
        room = lim - top - 1
        while b < 128:
            if (good[s, b >> 6] >> np.uint64(b & 63)) & np.uint64(1):
                if room <= 0:
                    # one byte left: every child gives 1, none need be looked at
                    if best[top] > 1:
                        best[top] = 1
                    b += 1
                    continue
                x = trans[(s << 8) + b]
                if x == last[top]:
                    # the child of the byte before (a class's bytes share one)
                    b += 1
                    continue
                last[top] = x
                steps += 1
                if steps > MAX_RUN_STEPS:
                    # a search that branches: give up on a run (0, a lower bound)
                    for k in range(1, top + 1):
                        run[stk[k]] = RUN_UNKNOWN
                    run[s0] = 0
                    return 0
                rx = run[x]
                if rx == RUN_UNKNOWN:
                    if flags[x] == F_PENDING:
                        y = x
                    elif (live[x, 2] & np.uint64(2)) == np.uint64(0):
                        y = _set_good(trans, flags, x, live, good, below, utf8)
                    else:
                        y = 0
                    if y:
                        for k in range(top + 1):
                            run[stk[k]] = RUN_UNKNOWN
                        return PENDING_BASE - y
                    run[x] = _RUN_OPEN
                    pos[top] = b + 1
                    top += 1
                    stk[top] = x
                    pos[top] = 0
                    best[top] = lim - top
                    last[top] = 0
                    pushed = True
                    break
                r2 = rx if (rx >= 0 and _covers(good, live, x, s)) else 0
                if r2 > room:
                    r2 = room
                if r2 + 1 < best[top]:
                    best[top] = r2 + 1
            b += 1
        if pushed:
            continue
        r = best[top] if (good[s, 0] | good[s, 1]) != np.uint64(0) else 0
        # r is at most the true run: exact when below the level's limit, and
        # enough when cap or more (runs are capped at cap)
        if r >= cap:
            run[s] = cap
        elif r < lim - top:
            run[s] = r
        else:
            run[s] = RUN_UNKNOWN
        top -= 1
        if top >= 0:
            p = stk[top]
            r2 = r if _covers(good, live, s, p) else 0
            if r2 + 1 < best[top]:
                best[top] = r2 + 1
    return run[s0]


#: a state's count_run is at least this long: worth checking at every node (below
#: it, a bounded string's last positions, most subtrees are deeper than the run
#: and the check only slows the walk down: ~30% at 8 of 16 characters)
MIN_RUN = 8


@njit(cache=True, nogil=True)
def _good_into_a_loop(trans, flags, live, s):
    """Whether ``s`` has a good byte (:func:`_set_good`) into a state that
    the same byte leads back to itself: a byte ``b`` into ``x``, a state where
    no terminal ends that takes the same ASCII bytes as ``s`` (at least 16 of
    them) and reads ``b`` back into ``x``."""
    if _ascii_live_count(trans, s, live) < GOOD_MIN_LIVE:
        return False
    base = s << 8
    last = -1
    for b in range(128):
        x = trans[base + b]
        if x == 0 or x == last:
            continue
        last = x
        if trans[(x << 8) + b] != x or flags[x] == F_ENDS or flags[x] == F_PENDING:
            continue
        _ascii_live(trans, x, live)
        if live[x, 0] == live[s, 0] and live[x, 1] == live[s, 1]:
            return True
    return False


@njit(cache=True, nogil=True)
def _classify(trans, flags, memos, s, cap, below, utf8):
    """Turn ``flags[s]`` from ``F_NEW`` (neither ends nor loops) into ``F_RUN`` (a
    counted run of at least ``MIN_RUN`` bytes, see :func:`count_run`) or
    ``F_PLAIN``; returns it, or ``PENDING_BASE - state`` for a state in reach
    not expanded yet (``flags[s]`` unchanged)."""
    if _good_into_a_loop(trans, flags, memos[2], s):
        # that state's run is at most 1 (count_run counts a cycle 0), so s's
        # is at most 2: plain, without the search or s's good bytes (an
        # object's key walk over o200k meets one such state per declared
        # name's letter, beside "any other key"'s text: ~0.35 us each, ~33
        # of a first walk's ~78 us with the trie in cache)
        flags[s] = F_PLAIN
        return F_PLAIN
    r = count_run(trans, flags, memos, s, cap, below, utf8)
    if r < 0:
        return r
    f = F_RUN if r >= MIN_RUN else F_PLAIN
    flags[s] = f
    return f


@njit(cache=True, nogil=True)
def _utf8_reads_to(rows, base, flags, accepting, vmap, s, u0, below, target):
    """Whether state ``s`` reads any valid UTF-8 character (one of two to four
    bytes) into state ``target`` without ending a terminal on the way; with
    ``u0`` (a decoder state of :func:`~constrain.vocab.trie_kernels.utf8_next`,
    not 0), any valid rest of a character already begun.
    ``rows[base + q, b]`` is state ``q``'s successor on byte ``b`` (0: dead):
    a lexer's table (``base`` 0; ``flags`` its walk flags: a state where a
    terminal ends stops the character, one not expanded yet leaves the answer
    unknown; ``vmap`` empty) or one terminal's own virtual rows (``flags``
    empty; ``accepting[base + q]`` stops it; ``vmap`` says where each is
    written, see :func:`_term_step`). Bytes no token has (not under the trie's root,
    ``below[0]``) are not asked about: the tables are restricted to the
    vocabulary's alphabet. Returns 1 or 0, or ``-q`` when state ``q`` on the
    way is not expanded yet."""
    # (decoder state, lexer state) pairs, breadth first from (boundary, s)
    cap = 64
    us = np.empty(cap, np.int32)
    qs = np.empty(cap, np.int32)
    us[0], qs[0] = u0, s
    n, k = 1, 0
    while k < n:
        u, q = us[k], qs[k]
        k += 1
        lo, hi = (0xC2, 0xF5) if u == 0 else (0x80, 0xC0)
        last_v = -1
        last_q = -1
        for b in range(lo, hi):
            v = utf8_next(u, b)
            if v < 0:
                continue
            q2 = _term_step(rows, vmap, base + q, b) if vmap.shape[0] else rows[base + q, b]
            if v == last_v and q2 == last_q and q2 != 0:
                # a byte class's bytes lead alike: checked with the first
                continue
            last_v = v
            last_q = q2
            if q2 == 0:
                if (below[0, b >> 6] >> np.uint64(b & 63)) & np.uint64(1):
                    return 0
                continue
            if v == 0:
                if q2 != target:
                    return 0
                continue
            if flags.shape[0]:
                if flags[q2] == F_ENDS:
                    return 0
                if flags[q2] == F_PENDING:
                    return -q2
            elif accepting[base + q2]:
                return 0
            new = True
            for m in range(n):
                if us[m] == v and qs[m] == q2:
                    new = False
                    break
            if new:
                if n == cap:
                    return 0
                us[n], qs[n] = v, q2
                n += 1
    return 1


@njit(cache=True, nogil=True)
def _reads_utf8(trans, flags, s, below):
    """Whether state ``s`` reads any valid UTF-8 character back to itself
    (:func:`_utf8_reads_to`): a JSON string's body, and a regex body over ``.``
    or a broad class. With its ASCII bytes looping too, ``s`` keeps every valid
    UTF-8 text alive and boundary-free. Returns 1 or 0, or -1 when a state on
    the way is not expanded yet (unknown: taken as 0 by the walk, settled again
    later)."""
    r = _utf8_reads_to(trans.reshape(-1, 256), 0, flags, _NO_BOOLS, _NO_VMAP, s, 0, below, s)
    return -1 if r < 0 else r


@njit(cache=True, nogil=True)
def settle_reads_utf8(states, below, which):
    """:func:`_reads_utf8` for the loop states (``F_LOOP``) among ``which`` not
    yet settled: run after each build (the flag is only set there), so that
    :func:`lexer_walk` only reads the memo. Returns how many stay unknown (a
    state on the way not expanded yet)."""
    trans2, _, _, _, flags, reads_utf8 = states
    trans = trans2.reshape(-1)
    unknown = 0
    for k in range(which.shape[0]):
        s = which[k]
        if flags[s] == F_LOOP and reads_utf8[s] < 0:
            reads_utf8[s] = _reads_utf8(trans, flags, s, below)
            if reads_utf8[s] < 0:
                unknown += 1
    return unknown


#: the slots of a lexer's descriptor array (:mod:`constrain.automata.table_views`;
#: :meth:`constrain.cfg.lexer.LexerTables._pack` binds them), as ``(dtype,
#: dimensions)``: ``states`` (0-5), ``index`` (6-11) and ``memos`` (12-15) as
#: that method lists them, the terminal automata's ``kernel_arrays`` (16-20),
#: the trie's bytes below each node, the expansion queue and its counters
#: (21-23), the packed trie (24-25) and the narrow walk's trie arrays (26-29:
#: bytes, skips, node tokens, first children). The kernels Python calls on a
#: first visit take this one array: numba unboxes every array argument on
#: every call (~45 ns an array hot, ~110 on a first walk's cold caches; 23
#: arrays in three tuples were ~2.5 us of an expand_start that found its
#: state).
LEX_SLOTS = ((np.int32, 2), (np.uint64, 2), (np.bool_, 1), (np.uint64, 2), (np.uint8, 1),
             (np.int8, 1),
             (np.int32, 1), (np.int64, 1), (np.uint64, 1), (np.int64, 1), (np.int32, 1),
             (np.int16, 1),
             (np.int32, 1), (np.uint64, 2), (np.uint64, 2), (np.int32, 2),
             (np.int32, 2), (np.int64, 1), (np.bool_, 1), (np.bool_, 1), (np.int32, 2),
             (np.uint64, 2), (np.int32, 1), (np.int64, 1),
             (np.uint64, 1), (np.int64, 1),
             (np.uint8, 1), (np.int32, 1), (np.int32, 1), (np.int32, 1))
#: :data:`LEX_SLOTS` as a :class:`~constrain.automata.table_views.TableLayout`
LEX_LAYOUT = TableLayout(LEX_SLOTS)


@njit(cache=True, nogil=True, inline="always")
def _states_of(desc):
    return (i32_2d(desc, 0), u64_2d(desc, 1), b1_1d(desc, 2), u64_2d(desc, 3), u8_1d(desc, 4),
            i8_1d(desc, 5))


@njit(cache=True, nogil=True, inline="always")
def _index_of(desc):
    return (i32_1d(desc, 6), i64_1d(desc, 7), u64_1d(desc, 8), i64_1d(desc, 9), i32_1d(desc, 10),
            i16_1d(desc, 11))


@njit(cache=True, nogil=True, inline="always")
def _terms_of(desc):
    return (i32_2d(desc, 16), i64_1d(desc, 17), b1_1d(desc, 18), b1_1d(desc, 19),
            i32_2d(desc, 20))


@njit(cache=True, nogil=True)
def expand_start(desc, expected, extra, n, max_states, limit, layer_limit):
    """:func:`start_of_expected` over the lexer's descriptors ``desc``
    (:data:`LEX_SLOTS`)."""
    return start_of_expected(_terms_of(desc), _states_of(desc), _index_of(desc), u64_2d(desc, 21),
                             expected, extra, n, max_states, i32_1d(desc, 22), i64_1d(desc, 23),
                             limit, layer_limit)


@njit(cache=True, nogil=True)
def start_of_expected(terms, states, index, below, expected, extra, n, max_states, queue, qs,
                      limit, layer_limit):
    """The lexer state that starts the usable terminals of the bitset ``expected
    | extra`` (uint64 words; terminal ``t`` is bit ``t & 63`` of word ``t >> 6``),
    added and expanded by :func:`expand_states` (``queue``, ``qs`` and
    ``limit`` as there); when that is done, the loop states it expanded are
    settled (:func:`settle_reads_utf8`). Returns :func:`expand_states`'
    ``(status, n, state)``, state 0 when no terminal is usable. One call where building the
    start pairs in Python and calling the two kernels cost ~4 us per new
    expected set, one of the steps of a new parser state's first mask. (The
    settling is here so that a walk meeting a new loop state mid-way, a key's
    body after the declared names, can take its text subtrees whole.)"""
    usable = terms[3]
    start = np.empty(2 * usable.shape[0], np.int32)
    k = 0
    for w in range(expected.shape[0]):
        x = expected[w] | extra[w]
        while x != np.uint64(0):
            low = x & (~x + np.uint64(1))
            x ^= low
            t = w * 64 + bit_index(low)
            if usable[t]:
                start[k] = t
                start[k + 1] = 1
                k += 2
    if k == 0:
        return EXPAND_DONE, n, 0
    status, n, g = expand_states(terms, states, index, start[:k], n, max_states, queue, qs, limit,
                                 layer_limit)
    if status == EXPAND_DONE:
        settle_reads_utf8(states, below, queue[:qs[0]])
    return status, n, g


@njit(cache=True, nogil=True, inline="always")
def _stays_below(below, loops, utf8_below, reads_utf8, i, s):
    """Whether the whole subtree under trie node ``i`` stays in state ``s`` (no
    terminal ending): every byte under it loops on ``s``; or its ASCII bytes
    loop, the rest is valid UTF-8 from a character boundary and ``s`` reads any
    such character back to itself (``reads_utf8[s] == 1``, see
    :func:`settle_reads_utf8`)."""
    if ((below[i, 0] & ~loops[s, 0]) | (below[i, 1] & ~loops[s, 1])) != np.uint64(0):
        return False
    if ((below[i, 2] & ~loops[s, 2]) | (below[i, 3] & ~loops[s, 3])) == np.uint64(0):
        return True
    # this order: with the per-state memo read first, a string body's walk over
    # SmolLM2 took 26 instead of 12 us (numba's code for the loop, not the work)
    return utf8_below[i] and reads_utf8[s] == 1


@njit(cache=True, nogil=True, inline="always")
def _run_covers(below, good, height, run, i, s):
    """Whether state ``s``'s counted run covers the subtree under node ``i``: no
    deeper than the run, and only run bytes (ASCII) below it."""
    return height[i] <= run[s] and (
        (below[i, 0] & ~good[s, 0]) | (below[i, 1] & ~good[s, 1])
        | below[i, 2] | below[i, 3]) == np.uint64(0)


@njit(cache=True, nogil=True)
def _run_covers_utf8(below, good, live, utf8_below, height, run, i, s):
    """:func:`_run_covers` where the subtree also has bytes past ASCII: valid
    UTF-8 from a character boundary that ``s`` reads as good bytes
    (:func:`_set_good`; every state of the run does, :func:`_covers`); the run
    counts bytes, and a character is at least one. Without it o200k's
    multilingual subtrees were walked node by node at each position of a
    ``maxLength`` string: 1.5-2.6 ms a fill. Not inlined: in the walk's loop
    the longer test made every walk slower (a string body's 9 -> 14 us, with
    no counted state in it)."""
    return ((live[s, 2] & UTF8_RUN) != np.uint64(0) and utf8_below[i] and height[i] <= run[s]
            and ((below[i, 0] & ~good[s, 0]) | (below[i, 1] & ~good[s, 1])) == np.uint64(0))


@njit(cache=True, nogil=True, inline="always")
def _set_tokens(row, order, lo, hi):
    """Set the bits of tokens ``order[lo:hi]`` (a skipped subtree's, or one
    node's) in ``row``."""
    for k in range(lo, hi):
        t = order[k]
        row[t >> 5] |= np.uint32(1) << np.uint32(t & 31)


@njit(cache=True, nogil=True, inline="always")
def _live_tokens(trans, state, first, tskip, tok_before):
    """The tokens below the root children that lexer state ``state`` takes
    (``trans`` flat: ``state * 256 + byte``). Root children are found through
    ``first``, not by chasing ``tskip`` across the trie (256 scattered reads, a
    third of a literal's walk)."""
    base = state << 8
    live = 0
    for b in range(256):
        i = first[b]
        if i >= 0 and trans[base | b] != 0:
            live += tok_before[tskip[i]] - tok_before[i]
    return live


@njit(cache=True, nogil=True)
def lexer_walk(trans2, loops, flags, reads_utf8, memos, trie, summaries, state, row, out_node,
               out_state, live=-1, utf8=False):
    """Walk the token trie from lexer state ``state`` without ending a terminal.

    Sets in ``row`` (uint32 words, one scratch word past the vocabulary for
    ``node_tok``'s "no token") the tokens along which the current terminals stay
    alive, and writes to ``out_node``/``out_state`` the trie nodes below the root,
    with children, at which some terminal could end, and the lexer state there --
    where a token may cross into the next terminal. Returns their number, or -1
    when the output arrays are too small (call again with larger ones; the
    buffers are preallocated because growing them inside the loop makes it three
    times slower), or ``PENDING_BASE - s`` when it reached a state ``s`` not
    expanded yet (expand it, clear ``row`` and call again). ``state`` itself is
    expanded.

    ``flags[s]`` is ``F_ENDS`` when some terminal may end in ``s``, ``F_LOOP``
    when none may and some byte loops on ``s``, else ``F_NEW``, ``F_RUN`` or
    ``F_PLAIN`` (below). ``loops[s]`` are the bytes
    on which ``s`` stays ``s`` and ``below[i]`` the bytes under node ``i`` (256 bits each): when
    every byte under a node loops in a state where no terminal ends (a JSON
    string's body), the whole subtree is allowed and stays there, and its tokens
    (``order[tok_before[i + 1]:tok_before[tskip[i]]]``) are set without walking
    it -- a string body's walk over SmolLM2 went from 380 to 62 us. The same
    holds where only the ASCII bytes under the node loop, the rest is valid
    UTF-8 from a character boundary (``utf8_below[i]``, per vocabulary) and the
    state reads any valid UTF-8 character back to itself (``reads_utf8[s]``,
    settled when the state is built): o200k's multilingual tokens had
    a string body's walk visit most of its 420k nodes (1.2-2.0 ms; now 0.1-0.2
    ms, and SmolLM2's 12 -> 9 us).

    A state with neither (``F_NEW``) may be a position of a
    length-bounded string: on first sight :func:`count_run` finds how many more
    bytes of which kind it takes without changing kind (``flags[s]`` becomes
    ``F_RUN``, or ``F_PLAIN`` when that run is short), and a subtree no deeper than that (``height``)
    over those bytes is allowed whole the same way (a ``maxLength``
    position's walk visited most of the trie: ~400 us on SmolLM2), with the
    per-state memos and scratch of ``memos``. With ``utf8``, a counted state
    also learns whether it reads any UTF-8 character as one of its bytes, and
    a subtree with such characters is then allowed whole too (see
    :func:`_run_covers_utf8`).

    When most tokens start with a byte the state takes, the walk runs the other
    way round: ``row`` starts as ``full_row`` (every token of the trie) and the
    tokens of dead subtrees are cleared, so that a skipped subtree costs nothing
    instead of one bit per token (the floor of a string body's walk was setting
    ~45k bits one by one). ``live`` is :func:`_live_tokens` when known (-1: not
    yet).
    """
    trans = trans2.reshape(-1)  # state * 256 + byte
    run, good, lv, _ = memos
    tbyte, tdepth, tskip, _, _, order, max_depth = trie
    node_tok, first, below, tok_before, height, utf8_below, full_row = summaries
    # reads_utf8 is settled when loop states are built (settle_reads_utf8), not
    # here: a call in the loop, even one never taken, made a string body's walk
    # over SmolLM2 3x slower
    stack = np.zeros(max_depth + 2, np.int32)
    stack[0] = state
    n_nodes = tbyte.shape[0]
    cap = out_node.shape[0]
    n = 0
    base = state << 8
    if live < 0:
        live = _live_tokens(trans, state, first, tskip, tok_before)
    if 2 * live > tok_before[n_nodes]:
        row[:] = full_row
        for b in range(256):
            i = first[b]
            if i < 0:
                continue
            end = tskip[i]
            while i < end:
                d = tdepth[i]
                s = trans[(stack[d - 1] << 8) | tbyte[i]]
                nxt = tskip[i]
                if s == 0:
                    for k in range(tok_before[i], tok_before[nxt]):
                        t = order[k]
                        row[t >> 5] &= ~(np.uint32(1) << np.uint32(t & 31))
                    i = nxt
                    continue
                stack[d] = s
                f = flags[s]
                if f == F_PENDING:
                    return PENDING_BASE - s
                if f == F_ENDS:
                    if nxt > i + 1:
                        if n < cap:
                            out_node[n] = i
                            out_state[n] = s
                        n += 1
                elif f == F_LOOP:
                    if nxt > i + 1 and _stays_below(
                            below, loops, utf8_below, reads_utf8, i, s):
                        i = nxt
                        continue
                elif f != F_PLAIN and nxt > i + 1:
                    if f == F_NEW:
                        f = _classify(trans, flags, memos, s, max_depth, below, utf8)
                        if f < 0:
                            return f
                    if f == F_RUN and (_run_covers(below, good, height, run, i, s) or (
                            utf8 and _run_covers_utf8(below, good, lv, utf8_below, height, run, i, s))):
                        i = nxt
                        continue
                i += 1
        return n if n <= cap else -1
    for b in range(256):
        i = first[b]
        if i < 0 or trans[base | b] == 0:
            continue
        end = tskip[i]
        while i < end:
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
            if f == F_PLAIN:
                i += 1
                continue
            if f == F_PENDING:
                return PENDING_BASE - s
            if f == F_NEW:
                f = _classify(trans, flags, memos, s, max_depth, below, utf8)
                if f < 0:
                    return f
                if f == F_PLAIN:
                    i += 1
                    continue
            if f == F_RUN:
                nxt = tskip[i]
                if nxt > i + 1 and (_run_covers(below, good, height, run, i, s) or (
                        utf8 and _run_covers_utf8(below, good, lv, utf8_below, height, run, i, s))):
                    _set_tokens(row, order, tok_before[i + 1], tok_before[nxt])
                    i = nxt
                    continue
                i += 1
                continue
            if f == F_ENDS:
                if tskip[i] > i + 1:
                    if n < cap:
                        out_node[n] = i
                        out_state[n] = s
                    n += 1
            else:
                nxt = tskip[i]
                if nxt > i + 1 and _stays_below(
                        below, loops, utf8_below, reads_utf8, i, s):
                    _set_tokens(row, order, tok_before[i + 1], tok_before[nxt])
                    i = nxt
                    continue
            i += 1
    return n if n <= cap else -1


@njit(cache=True, nogil=True)
def text_route(trans2, flags, reads_utf8, below, state, route):
    """Which root children of the token trie lexer state ``state`` reads as
    text: sets ``route[b]`` (uint8, one per byte) where every token under the
    root child ``b`` reaches, once its first character is read, one state
    ``T`` that reads text back to itself (``F_LOOP`` with ``reads_utf8``: a
    JSON string's body) -- ``b`` an ASCII byte ``state`` reads into ``T``, or
    the first byte of a character any valid rest of which ``state`` reads into
    ``T`` through states where no terminal ends. Returns ``T`` (then
    :func:`lexer_walk_exits` walks those subtrees only from ``T``'s loop
    exits), 0 when there is none, or ``PENDING_BASE - q`` when a state ``q``
    on the way is not expanded yet.

    ``T`` is ``state`` itself when it reads text; else the text state most
    of its ASCII bytes lead to: after an object's ``{"`` the declared names
    begin with a few letters and every other first character is "any other
    key"'s body, so over o200k the walk went node by node under each
    multi-byte first character (15,000 nodes, 100-200 us hot for three
    names)."""
    trans = trans2.reshape(-1)
    base = state << 8
    route[:] = 0
    if flags[state] == F_LOOP and reads_utf8[state] == 1:
        # every valid character comes back (reads_utf8): each live first byte
        for b in range(256):
            q = trans[base | b]
            if q != 0 and (b >= 0xC2 and b <= 0xF4 or q == state):
                route[b] = 1
        return state
    # the text state most ASCII bytes lead to
    cands = np.zeros(128, np.int32)
    counts = np.zeros(128, np.int32)
    m = 0
    target = 0
    best = 0
    for b in range(128):
        q = trans[base | b]
        if q == 0 or flags[q] != F_LOOP or reads_utf8[q] != 1:
            continue
        k = 0
        while k < m and cands[k] != q:
            k += 1
        if k == m:
            cands[m] = q
            m += 1
        counts[k] += 1
        if counts[k] > best:
            best = counts[k]
            target = q
    if target == 0:
        return 0
    for b in range(128):
        if trans[base | b] == target:
            route[b] = 1
    # first bytes of longer characters, judged once per (state, decoder state)
    seen_q = np.zeros(64, np.int32)
    seen_u = np.zeros(64, np.int64)
    seen_ok = np.zeros(64, np.uint8)
    m = 0
    rows = trans2.reshape(-1, 256)
    for b in range(0xC2, 0xF5):
        q = trans[base | b]
        if q == 0:
            continue
        u = utf8_next(0, b)
        k = 0
        while k < m and (seen_q[k] != q or seen_u[k] != u):
            k += 1
        if k == m:
            f = flags[q]
            if f == F_PENDING:
                return PENDING_BASE - q
            ok = 0
            if f != F_ENDS:
                r = _utf8_reads_to(rows, 0, flags, _NO_BOOLS, _NO_VMAP, q, u, below, target)
                if r < 0:
                    return PENDING_BASE + r
                ok = r
            if m < 64:
                seen_q[m], seen_u[m], seen_ok[m] = q, u, ok
                m += 1
            route[b] = ok
        else:
            route[b] = seen_ok[k]
    return target


@njit(cache=True, nogil=True)
def lexer_walk_exits(trans2, loops, flags, reads_utf8, memos, trie, summaries, state, row, out_node,
                     out_state, exits, route, target, utf8=False):
    """:func:`lexer_walk` where the root children ``route`` marks lead, once
    their first character is read, into the text state ``target``
    (:func:`text_route`), given the exits of its loop set
    (:func:`constrain.vocab.trie_kernels.loop_exits`): ``row`` starts with
    every token; under such a root child only the exits' subtrees are
    walked, each from the state its partial character leads to (from
    ``state`` when that character is the first); the other root children are
    walked whole, from ``state``. What lies outside the exits is text, which
    ``target`` keeps alive with no boundary, so the walk is the same; it no
    longer finds the exits itself (a string body over o200k: 15,000 nodes
    read one after another, 300-550 us from a cold cache, against 65 from
    1,391 exits; over SmolLM2 8.3 -> 4.6 us hot). The same loop as
    :func:`lexer_walk`'s over all tokens, kept apart: with a branch for the
    exits in it, the other walks of ``bench_lexer_walk.py`` took 11-35 %
    longer (numba's code for the loop, not the work)."""
    trans = trans2.reshape(-1)  # state * 256 + byte
    run, good, lv, _ = memos
    tbyte, tdepth, tskip, _, _, order, max_depth = trie
    first, below, tok_before, height, utf8_below, full_row = summaries[1:]
    stack = np.zeros(max_depth + 2, np.int32)
    cap = out_node.shape[0]
    # the subtrees to walk, and the state at the parent of each (root
    # children in byte order, exits in preorder: one pass over both)
    # (an exit whose own byte is dead, most of them, is cleared from its
    # row alone: it does not touch the trie's arrays)
    n_exits = exits.shape[0]
    seg_node = np.empty(256 + n_exits, np.int32)
    seg_state = np.empty(256 + n_exits, np.int32)
    m = 0
    x = 0
    row[:] = full_row
    # a text state's own exits cover every root child it does not route (its
    # other bytes are exits at depth 1): one pass over them, not 256 children
    # (a string body over SmolLM2 4.6 -> 5.3 us with them)
    b = -1 if target == state else 0
    while b < 256:
        if b < 0:
            i, end = 0, tskip.shape[0]
            b = 256
        else:
            i = first[b]
            b += 1
            if i < 0:
                continue
            if route[b - 1] == 0:
                seg_node[m] = i
                seg_state[m] = state
                m += 1
                continue
            end = tskip[i]
        while x < n_exits and exits[x, 0] < i:
            x += 1
        while x < n_exits and exits[x, 0] < end:
            k = exits[x, 1]
            p = state if k == exits[x, 6] - 1 else target
            for q in range(k):
                p = trans[(p << 8) | exits[x, 2 + q]]
            if p != 0 and flags[p] == F_PENDING:
                return PENDING_BASE - p
            if trans[(p << 8) | exits[x, 5]] == 0:
                for k in range(exits[x, 7], exits[x, 8]):
                    t = order[k]
                    row[t >> 5] &= ~(np.uint32(1) << np.uint32(t & 31))
            else:
                seg_node[m] = exits[x, 0]
                seg_state[m] = p
                m += 1
            x += 1
    n = 0
    for g in range(m):
        i = seg_node[g]
        stack[tdepth[i] - 1] = seg_state[g]
        end = tskip[i]
        while i < end:
            d = tdepth[i]
            s = trans[(stack[d - 1] << 8) | tbyte[i]]
            nxt = tskip[i]
            if s == 0:
                for k in range(tok_before[i], tok_before[nxt]):
                    t = order[k]
                    row[t >> 5] &= ~(np.uint32(1) << np.uint32(t & 31))
                i = nxt
                continue
            stack[d] = s
            f = flags[s]
            if f == F_PENDING:
                return PENDING_BASE - s
            if f == F_ENDS:
                if nxt > i + 1:
                    if n < cap:
                        out_node[n] = i
                        out_state[n] = s
                    n += 1
            elif f == F_LOOP:
                if nxt > i + 1 and _stays_below(
                        below, loops, utf8_below, reads_utf8, i, s):
                    i = nxt
                    continue
            elif f != F_PLAIN and nxt > i + 1:
                if f == F_NEW:
                    f = _classify(trans, flags, memos, s, max_depth, below, utf8)
                    if f < 0:
                        return f
                if f == F_RUN and (_run_covers(below, good, height, run, i, s) or (
                        utf8 and _run_covers_utf8(below, good, lv, utf8_below, height, run, i, s))):
                    i = nxt
                    continue
            i += 1
    return n if n <= cap else -1


@njit(cache=True, nogil=True)
def bounded_needs(tab, accepting, vmap, base, r0, hi, tbuf, toffs, need, closes, exits, exit_chars):
    """How many characters a length-bounded string must have room for, per
    token, walking the trie from state ``r0`` of a character's layer (a local
    row ``2 + r0`` of the terminal's table, read through ``vmap``:
    :func:`_term_step`; layers of :data:`BOUNDED_LAYER` states from row 2,
    the last at the bound ``hi``; see
    :func:`constrain.cfg.lexemes.write_bounded_string`) as if the string had
    no ``minLength``: every layer reads the characters of layer 0 (every
    layer of the table reads alike) and the closing quote may follow any
    whole character.
    Inside the string, the characters begun (one more when the token ends
    inside a character or an escape: the rest must fit too); past the closing
    quote, the characters read before it, and ``closes`` set (``closes`` is
    given cleared: a token's node is visited once).

    So a position ``k`` characters in, at ``r0`` of its layer, of a string of
    ``lo`` to ``hi`` characters walks exactly the tokens whose need is at
    most ``hi - k`` and, of those that close the string, at least ``lo - k``
    (:meth:`constrain.cfg.lexer.LexerTables._near_walk`): one walk per string
    and state in the layer serves every position. ``need`` and ``closes``
    (per token id, and one more entry: the trie's ``no_token``) get it for
    every token that stays in the terminal, but for the second and later
    tokens with one node's bytes (the caller copies them: one write per node
    is 2.0 instead of 3.3 ms over o200k); the others, and some that need
    more than ``hi`` (no position has room for them), keep their value.
    Returns the nodes, with children, where the terminal accepts (past the
    quote, where a token may go on into the next terminal), their need and
    their local state.

    With ``exits`` not empty (``r0`` 0, and the rows of
    :func:`~constrain.vocab.trie_kernels.loop_exits` for the string's text,
    :func:`bounded_text`), ``need`` comes holding every text token's need
    and ``exit_chars`` the characters before each exit
    (:meth:`TokenTrie.text_needs <constrain.vocab.trie.TokenTrie.text_needs>`,
    the same for every such string of the vocabulary): the walk reads the
    exits' subtrees only, from the state their partial characters lead to.
    Over o200k the whole trie's walk was 1.1-1.9 ms of a string's first
    position; the tokens past the quote and the escapes are under ~200 of
    its ~1,400 exits."""
    trie, summaries = trie_views(tbuf, toffs)
    tbyte, tdepth, tskip, _, _, _, max_depth = trie
    node_tok, _, below, _, _, utf8_below, _ = summaries
    n = tbyte.shape[0]
    L = BOUNDED_LAYER
    last = 2 + L * hi
    # per depth: the row in layer 0 (2 + r) or past the quote (> last), and
    # the characters begun or read before the quote
    qs = np.empty(max_depth + 2, np.int32)
    cs = np.empty(max_depth + 2, np.int32)
    starts = np.zeros(max_depth + 2, np.int32)  # characters begun below a plain node
    qs[0] = 2 + r0
    cs[0] = 0
    # the closing quote's state (0: the alphabet has no quote)
    close = _term_step(tab, vmap, base + last, 34)
    # layer 0's rows read directly, not through vmap (o200k, maxLength 3:
    # 0.88 -> 0.80 ms; 300: 1.55 -> 1.36)
    step0 = np.zeros((L, 256), np.int32)
    for r in range(L if last > 2 else 1):
        for b in range(256):
            step0[r, b] = _term_step(tab, vmap, base + 2 + r, b)
    p0, p1, utf8 = _bounded_plain(tab, accepting, vmap, base, last, below)
    n_exits = exits.shape[0]
    # the subtrees to walk: the whole trie, or the exits' that live, each from
    # the state its partial character leads to after the characters before it
    # (a call per exit, of a helper with the walk's ~30 arguments, cost ~80 ns:
    # most of the exits' walk over o200k, whose ~1,200 dead exits it skips)
    seg_node = np.empty(max(n_exits, 1), np.int32)
    seg_state = np.empty(max(n_exits, 1), np.int32)
    seg_chars = np.empty(max(n_exits, 1), np.int32)
    n_seg = 0
    if n_exits == 0:
        seg_node[0] = 1
        seg_state[0] = 2 + r0
        seg_chars[0] = 0
        n_seg = 1
    for x in range(n_exits):
        q = 2
        c = exit_chars[x]
        for k in range(exits[x, 1]):
            q = step0[q - 2, exits[x, 2 + k]]
            if q == 0:
                break
            if q >= 2 + L:
                q -= L
                c += 1
        if q == 0:
            continue
        b = exits[x, 5]
        if not (b == 34 and q == 2) and step0[q - 2, b] == 0:
            continue  # (its tokens keep need's value: they leave the string)
        seg_node[n_seg] = exits[x, 0]
        seg_state[n_seg] = q
        seg_chars[n_seg] = c
        n_seg += 1
    # as long as the nodes walked: arrays grown inside the loop made numba
    # count references on every node, 24 instead of 3.7 ms over o200k (and
    # three of the trie's length took ~30-100 us to allocate: exits walk few)
    size = n
    if n_exits:
        size = 0
        for g in range(n_seg):
            size += tskip[seg_node[g]] - seg_node[g]
    nodes = np.empty(size, np.int32)
    needs = np.empty(size, np.int32)
    states = np.empty(size, np.int32)
    m = 0
    for g in range(n_seg):
        i = seg_node[g]
        stop = tskip[i] if n_exits else n
        qs[tdepth[i] - 1] = seg_state[g]
        cs[tdepth[i] - 1] = seg_chars[g]
        while i < stop:
            d = tdepth[i]
            q = qs[d - 1]
            b = tbyte[i]
            c = cs[d - 1]
            if q > last:
                q2 = _term_step(tab, vmap, base + q, b)
                past = True
            elif b == 34 and q == 2:
                q2 = close
                past = True
            else:
                # within layer 0, or on to layer 1's first state: one character more
                q2 = step0[q - 2, b]
                if q2 >= 2 + L:
                    q2 -= L
                    c += 1
                past = False
            # (a need only grows below a node: past the bound, so is the subtree)
            c2 = c if (past or q2 == 2) else c + 1
            if q2 == 0 or c2 > hi:
                i = tskip[i]
                continue
            qs[d] = q2
            cs[d] = c
            need[node_tok[i]] = c2
            if past:
                closes[node_tok[i]] = True
            end = tskip[i]
            if (end > i + 1 and q2 == 2 and not past
                    and ((below[i, 0] & ~p0) | (below[i, 1] & ~p1)) == np.uint64(0)
                    and ((below[i, 2] | below[i, 3]) == np.uint64(0) or (utf8 and utf8_below[i]))):
                # a plain subtree from a character boundary: each token's need is
                # this node's plus the characters it begins below it (no quote, no
                # escape, valid UTF-8), counted without the table (the walk over
                # o200k: 2.0 -> 0.95 ms, SmolLM2 0.47 -> 0.18)
                starts[d] = 0
                if hi > 3:
                    # tokens past the bound get their need too (never at most what is
                    # left): a test per node costs more than the subtrees it skips
                    # but for the shortest bounds (o200k, minimum of 15 walks:
                    # maxLength 3 0.85 ms with the test, 1.25 without; 6: 1.58, 1.30)
                    for j in range(i + 1, end):
                        dj = tdepth[j]
                        bj = tbyte[j]
                        starts[dj] = starts[dj - 1] + (1 if (bj < 0x80 or bj >= 0xC0) else 0)
                        need[node_tok[j]] = c + starts[dj]
                    i = end
                    continue
                j = i + 1
                while j < end:
                    dj = tdepth[j]
                    bj = tbyte[j]
                    sj = starts[dj - 1] + (1 if (bj < 0x80 or bj >= 0xC0) else 0)
                    if c + sj > hi:
                        j = tskip[j]
                        continue
                    starts[dj] = sj
                    need[node_tok[j]] = c + sj
                    j += 1
                i = end
                continue
            if past and accepting[base + q2] and end > i + 1:
                nodes[m] = i
                needs[m] = c
                states[m] = q2
                m += 1
            i += 1
    return nodes[:m], needs[:m], states[:m]


@njit(cache=True, nogil=True, inline="always")
def _bounded_plain(tab, accepting, vmap, base, last, below):
    """``(p0, p1, utf8)`` of a length-bounded string's table: its "plain"
    bytes, those a character boundary reads, as a whole character, into the
    next layer's boundary (text but the quote and the backslash; ASCII bits
    0-63 and 64-127), and whether any valid UTF-8 character is read so too.
    Every layer is written alike (write_bounded), so layer 0's boundary
    tells."""
    L = BOUNDED_LAYER
    p0 = np.uint64(0)
    p1 = np.uint64(0)
    utf8 = False
    if last > 2:
        for b in range(128):
            if _term_step(tab, vmap, base + 2, b) == 2 + L:
                if b < 64:
                    p0 |= np.uint64(1) << np.uint64(b)
                else:
                    p1 |= np.uint64(1) << np.uint64(b - 64)
        utf8 = _utf8_reads_to(tab, base, _NO_FLAGS, accepting, vmap, 2, 0, below, 2 + L) == 1
    return p0, p1, utf8


@njit(cache=True, nogil=True)
def bounded_text(tab, accepting, vmap, base, hi, tbuf, toffs, loops):
    """Whether a length-bounded string's characters are text to
    :func:`~constrain.vocab.trie_kernels.loop_exits` (ASCII bytes of a set,
    any valid UTF-8 character), writing that set to ``loops`` (``[4]``
    uint64): then its walk from a character boundary may start from the
    needs of :meth:`TokenTrie.text_needs
    <constrain.vocab.trie.TokenTrie.text_needs>` (:func:`bounded_needs`)."""
    summaries = trie_views(tbuf, toffs)[1]
    p0, p1, utf8 = _bounded_plain(tab, accepting, vmap, base, 2 + BOUNDED_LAYER * hi,
                                  summaries[2])
    loops[0] = p0
    loops[1] = p1
    loops[2] = 0
    loops[3] = 0
    return utf8


@njit(cache=True, nogil=True)
def lexer_walk_rows(desc, state, row, out, share_min, utf8, exits, route, target):
    """:func:`lexer_walk` as Python calls it: the lexer's tables and the packed
    trie (:meth:`TokenTrie.packed <constrain.vocab.trie.TokenTrie.packed>`)
    through its descriptors ``desc`` (:data:`LEX_SLOTS`), the boundary nodes
    and their states written to ``out[0]`` and ``out[1]``. Returns their number, or -1
    when ``out`` is too small (``row`` is then to be zeroed and the call made
    again with a larger ``out``), or :func:`lexer_walk`'s ``PENDING_BASE -
    state``. Few arguments and no outputs to allocate and
    box: those took 3.3 of a 4.6 us call that walked for 1.3 us.

    With ``share_min >= 0``, a state whose first bytes lead to at least that
    many tokens is not walked: the call returns :data:`WALK_SHARED`, for the
    caller to look in the walks shared across grammars first. Such broad walks
    (a string body, any key) cost 19-35 us on SmolLM2, and sharing pays; the
    others (a literal, a number: 3.6-7.5 us) cost less than a look-up and a
    store in the shared cache (~5 us). With ``exits`` (not empty) the walk
    is :func:`lexer_walk_exits`', with ``route`` and ``target`` from
    :func:`text_route`, where more than half the tokens start live."""
    trans, loops = i32_2d(desc, 0), u64_2d(desc, 3)
    flags, reads_utf8 = u8_1d(desc, 4), i8_1d(desc, 5)
    run, good = i32_1d(desc, 12), u64_2d(desc, 13)
    live, scratch = u64_2d(desc, 14), i32_2d(desc, 15)
    trie, summaries = trie_views(u64_1d(desc, 24), i64_1d(desc, 25))
    tskip = trie[2]
    first, tok_before = summaries[1], summaries[3]
    n_live = _live_tokens(trans.reshape(-1), state, first, tskip, tok_before)
    if 0 <= share_min <= n_live:
        return WALK_SHARED
    # the exits' walk clears what dies from every token: where most die, the
    # plain walk, which sets what lives, costs less (a pattern's body whose
    # first bytes reach 25k of o200k's 200k tokens: 56 against 141 us)
    if exits.shape[0] and 2 * n_live > tok_before[tskip.shape[0]]:
        return lexer_walk_exits(trans, loops, flags, reads_utf8, (run, good, live, scratch), trie,
                                summaries, state, row, out[0], out[1], exits, route, target, utf8)
    return lexer_walk(trans, loops, flags, reads_utf8, (run, good, live, scratch), trie,
                      summaries, state, row, out[0], out[1], n_live, utf8)


#: lexer_walk_narrow: a walk it does not take (the caller walks with
#: :func:`lexer_walk_rows`)
NOT_NARROW = -1


#: lexer_walk_narrow's bounds: the nodes waiting on its stack, the children it
#: tests. A literal's walk tests a few dozen; a broad state gives up within ~1 us
NARROW_WIDTH = 64
NARROW_BUDGET = 512


@njit(cache=True, nogil=True)
def lexer_walk_narrow(desc, state, row, out, spans, gap):
    """:func:`walk_narrow` over the lexer's descriptors ``desc`` (:data:`LEX_SLOTS`)."""
    return walk_narrow(i32_2d(desc, 0), u8_1d(desc, 4), u8_1d(desc, 26), i32_1d(desc, 27),
                       i32_1d(desc, 28), i32_1d(desc, 29), state, row, out, spans, gap)


@njit(cache=True, nogil=True)
def walk_narrow(trans2, flags, tbyte, tskip, node_tok, first, state, row, out, spans, gap):
    """:func:`lexer_walk` of a *narrow* lexer state, for the states where it
    costs least: a position inside a literal (an object's key, an enum
    value) or at its end, whose first visits were most of a tool-calling
    schema's first walk. Clears ``row``, sets the tokens in it and writes the boundary
    nodes and their states to ``out[0]``/``out[1]``, in trie order, as
    :func:`lexer_walk` does, and returns their number;
    ``PENDING_BASE - s`` when it reached a state ``s`` not expanded yet
    (expand it and call again); or :data:`NOT_NARROW`, with ``row`` clear,
    for a broad state, whose walk the general kernel does better: more than
    :data:`NARROW_WIDTH` nodes waiting on the stack, more than
    :data:`NARROW_BUDGET` children tested, or more boundary nodes than
    ``out`` holds. (Cleared here, where a decline at the root's bytes, as a
    string's body makes, has set nothing: the caller's numpy clear of an
    o200k row was 2.7 us of such a first visit.)

    With a non-empty ``spans`` (``2 * max_spans + 1`` ints) it also writes
    there what :func:`~constrain.regular.token_kernels.row_spans` would find
    in the finished row (split at more than ``gap`` zero bytes), from the
    tokens it set: a wide vocabulary's row writer then needs no scan of the
    row (25 KB over o200k: 2.1 us hot of a first fill's ~14 us).

    Where the general walk allows a subtree whole without walking it (a
    state that loops or counts over every byte below: ``F_LOOP``, ``F_RUN``),
    it is a subtree where every node lives and no terminal ends, so walking
    it sets the same tokens and finds no boundary node; a state not
    classified yet (``F_NEW``) is left so, for the general walk to classify
    when it needs to skip.

    The general walk tests every child of every live node in preorder; this
    one tests the same children, but starts from the live root bytes alone and
    takes no trie summaries (their unpacking, the live-token count and the two
    passes over 256 bytes were 1.4 of a literal position's 4 us walk; the
    whole call is ~1.3 us)."""
    trans = trans2.reshape(-1)  # state * 256 + byte
    # cleared here, not by the caller: np.zeros of a 6 KB row cost ~1 us of a
    # first fill's ~7 (a cold allocation and a Python call) against ~0.1 here
    row[:] = 0
    width = NARROW_WIDTH
    budget = NARROW_BUDGET
    nodes = np.empty(width, np.int32)
    states = np.empty(width, np.int32)
    out_node = out[0]
    out_state = out[1]
    cap = out_node.shape[0]
    # the tokens set, for spans: one per node pushed (at most width at a
    # time, budget + 2 * width in all before the walk gives up)
    want = spans.shape[0] > 0
    toks = np.empty(budget + 2 * width + 1 if want else 0, np.int32)
    m = 0
    top = 0
    base = state << 8
    for b in range(256):
        s = trans[base | b]
        if s != 0:
            i = first[b]
            if i >= 0:
                if top == width:
                    return NOT_NARROW
                nodes[top] = i
                states[top] = s
                top += 1
    n = 0
    while top:
        top -= 1
        i = nodes[top]
        s = states[top]
        f = flags[s]
        if f == F_PENDING:
            return PENDING_BASE - s
        if f == F_QUEUED:
            return _declined(row)
        t = node_tok[i]
        row[t >> 5] |= np.uint32(1) << np.uint32(t & 31)
        if want:
            toks[m] = t
            m += 1
        end = tskip[i]
        if end == i + 1:
            continue
        if f == F_ENDS:
            if n == cap:
                return _declined(row)
            out_node[n] = i
            out_state[n] = s
            n += 1
        j = i + 1
        sb = s << 8
        while j < end:
            budget -= 1
            s2 = trans[sb | tbyte[j]]
            if s2 != 0:
                if top == width:
                    return _declined(row)
                nodes[top] = j
                states[top] = s2
                top += 1
            j = tskip[j]
        if budget < 0:
            return _declined(row)
    if n > 1:  # in trie order (the stack pops a node's children last first)
        _sort_pairs(out_node, out_state, n)
    if want:
        token_spans(toks, m, 4 * (row.shape[0] - 1), gap, spans)
    return n


@njit(cache=True, nogil=True, inline="always")
def _declined(row):
    """:data:`NOT_NARROW`, once ``row`` is cleared of the bits set before
    :func:`walk_narrow` gave up."""
    row[:] = 0
    return NOT_NARROW


@njit(cache=True, nogil=True, inline="always")
def _sort_pairs(keys, values, n):
    """Sort ``keys[:n]`` in place, ``values[:n]`` along (``values`` may be
    ``keys`` itself): by insertion when few (a narrow walk's usual handful:
    numpy's sort costs more there), else by ``argsort`` (a walk that gives up
    only after hundreds of nodes made insertion quadratic: 150 us for 640
    tokens, 6 us so)."""
    if n <= 32:
        for k in range(1, n):
            a = keys[k]
            b = values[k]
            j = k
            while j and keys[j - 1] > a:
                keys[j] = keys[j - 1]
                values[j] = values[j - 1]
                j -= 1
            keys[j] = a
            values[j] = b
        return
    order = np.argsort(keys[:n])
    vs = values[:n][order]
    keys[:n] = keys[:n][order]
    values[:n] = vs


@njit(cache=True, nogil=True)
def token_spans(toks, m, n_bytes, gap, out):
    """Into ``out`` (``2 * max_spans + 1`` ints), what
    :func:`~constrain.regular.token_kernels.row_spans` finds in a row of
    ``n_bytes`` bytes whose set bits are the tokens ``toks[:m]`` (any order,
    repeats allowed; tokens past the row are left out): ``out[0]`` the
    count of spans (0: none; -1: dense, the spans covering more than half the
    row), then ``(start, end)`` byte offsets, split where more than ``gap``
    zero bytes lie between two non-zero ones unless that makes more than
    ``max_spans`` (then one span from the first non-zero byte to the last).
    Sorts ``toks[:m]`` in place."""
    max_spans = (out.shape[0] - 1) // 2
    _sort_pairs(toks, toks, m)
    n = 0
    first = -1
    prev = -1
    covered = 0
    for k in range(m):
        b = toks[k] >> 3  # little-endian words: token t's bit is in byte t >> 3
        if b >= n_bytes:
            break
        if first < 0:
            first = b
            out[1] = b
            n = 1
        elif b - prev > gap:
            if n < max_spans:
                out[2 * n] = prev + 1
                out[2 * n + 1] = b
                covered += prev + 1 - out[2 * n - 1]
            n += 1
        prev = b
    if first < 0:
        out[0] = 0
        return
    if n > max_spans:
        n = 1
        covered = 0
    out[2 * n] = prev + 1
    covered += prev + 1 - out[2 * n - 1]
    out[0] = -1 if 2 * covered > n_bytes else n


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
def _end_terminals(trans, flags, acc, ctx_next, ctx_start, ignore_bits, s, c, b, ls, lc, d, m,
                   width):
    """End each terminal accepting in lexer state ``s`` (context ``c``), start the
    next one and, when ``b >= 0``, read byte ``b`` with it; add the pairs at depth
    ``d``. Returns ``(status, m, a, t)``: ``NEED_NEXT`` with ``(a, t)`` the
    context and terminal whose next context is not known yet, ``NEED_START``
    with ``a`` the context whose start state is not, ``NEED_EXPAND``,
    ``OVERFLOW``, or ``NEED_NONE``; ``m`` counts the pairs added so far, and
    a call again once the missing entry is made adds the rest (a pair present
    is not added twice).

    The parser's and the lexer's tables that make a missing entry
    (:func:`_end_missing`) are not arguments here: numba passed their ~40
    arrays, reference counts and all, at every call, used or not, and this
    runs per trie node and pair of a boundary walk (a string value's first
    visit over o200k: 210 us hot, 15-25 without them)."""
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
            if flags[s3] == F_PENDING:
                return NEED_EXPAND, m, s3, 0
            m = _push(ls, lc, d, m, width, s3, c2)
            if m < 0:
                return OVERFLOW, m, 0, 0
    return NEED_NONE, m, 0, 0


@njit(cache=True, nogil=True)
def _end_missing(ctx_next, ctx_start, status, a, t, parser, starts):
    """Make the entry :func:`_end_terminals` reported missing (``status``
    ``NEED_NEXT``: ``ctx_next[a, t]``; ``NEED_START``: ``ctx_start[a]``);
    whether it could here (else the caller's Python path must)."""
    if status == NEED_NEXT:
        return _resolve_next(ctx_next, a, t, parser) != -2
    # parser[3][4]: the chart's expected terminals per context (c_exp)
    return _resolve_start(ctx_start, a, parser[3][4], starts) != -2


@njit(cache=True, nogil=True)
def _resolve_next(ctx_next, c, t, parser):
    """``ctx_next[c, t]``, the parser's context after terminal ``t`` in context
    ``c`` (-1: refused), computed by :func:`~constrain.cfg.earley_kernels.next_column`
    and stored; -2 when the parser's tables must grow first or the context is
    past ``ctx_next``'s rows (the caller's Python path does both, then finds
    the same context interned). In the kernel, a boundary walk's new contexts
    cost no return to Python, no call of their own and no argument unboxing
    (~5 us of Python and dispatch a new context, where the walk re-entered)."""
    status, v = next_column(c, t, parser[0], parser[1], parser[2], parser[3])
    if status != EARLEY_DONE or v >= ctx_next.shape[0]:
        return -2
    ctx_next[c, t] = v
    return v


@njit(cache=True, nogil=True)
def _resolve_start(ctx_start, c, c_exp, starts):
    """``ctx_start[c]``, the lexer state that starts the terminals context
    ``c`` expects (with ``starts``' extra ones, the ``%ignore`` terminals), made
    by :func:`start_of_expected` and stored; -2 when the lexer's tables must
    grow first or its state budget is spent (the caller's Python path grows
    them, or raises, resuming the same expansion). ``starts``: the lexer's
    ``(terms, states, index, below, extra, counts, queue, qs)``, ``counts`` int64
    ``[n, max_states, limit, layer_limit]`` with ``n`` updated here."""
    terms, states, index, below, extra, counts, queue, qs = starts
    status, n, g = start_of_expected(terms, states, index, below, c_exp[c], extra, counts[0],
                                     counts[1], queue, qs, counts[2], counts[3])
    counts[0] = n
    if status != EXPAND_DONE:
        return -2
    ctx_start[c] = g
    return g


@njit(cache=True, nogil=True)
def _dead_below(trans, acc, ls, d, m, below_i):
    """Whether none of the ``m`` lexer states at depth ``d`` of ``ls`` may
    end a terminal, and none takes a byte of ``below_i`` (the bytes under a
    trie node, 256 bits): then no token below the node crosses a boundary
    from them, and its subtree need not be walked. A number's boundary nodes
    over o200k (``1``..``9``, ``10``..``99``: every three-digit number is a
    token) had their ten children each read for nothing: 100 us a fill."""
    W = acc.shape[1]
    for q in range(m):
        s = ls[d, q]
        for w in range(W):
            if acc[s, w] != np.uint64(0):
                return False
        for w in range(4):
            x = below_i[w]
            while x != np.uint64(0):
                low = x & (~x + np.uint64(1))
                x ^= low
                if trans[s, w * 64 + bit_index(low)] != 0:
                    return False
    return True


@njit(cache=True, nogil=True)
def _pairs_take(trans, acc, ls, d, m, takes):
    """Into ``takes[:4]`` the bytes (256 bits) that some of the ``m`` lexer
    states at depth ``d`` of ``ls`` read; ``takes[4]`` 1 when one of them may
    end a terminal (then a byte it does not read may still follow)."""
    takes[:] = 0
    W = acc.shape[1]
    for q in range(m):
        s = ls[d, q]
        for w in range(W):
            if acc[s, w] != np.uint64(0):
                takes[4] = 1
        for b in range(256):
            if trans[s, b] != 0:
                takes[b >> 6] |= np.uint64(1) << np.uint64(b & 63)


@njit(cache=True, nogil=True)
def boundary_walk(desc, parser_desc, ctx_next, ctx_start, ignore_bits, extra, counts, starts_node,
                  starts_state, ctx, j0, ls, lc, row):
    """:func:`walk_boundaries` with the lexer's tables and the packed trie
    through its descriptors ``desc`` (:data:`LEX_SLOTS`) and the parser's
    through ``parser_desc`` (``earley_kernels.SLOTS``); ``extra`` and
    ``counts`` as :func:`_resolve_start` takes them."""
    starts = (_terms_of(desc), _states_of(desc), _index_of(desc), u64_2d(desc, 21), extra, counts,
              i32_1d(desc, 22), i64_1d(desc, 23))
    return walk_boundaries(i32_2d(desc, 0), u8_1d(desc, 4), u64_2d(desc, 1), ctx_next, ctx_start,
                           ignore_bits, starts_node, starts_state, ctx, j0, u64_1d(desc, 24),
                           i64_1d(desc, 25), ls, lc, row, parser_tables(parser_desc), starts)


@njit(cache=True, nogil=True)
def walk_boundaries(trans, flags, acc, ctx_next, ctx_start, ignore_bits, starts_node, starts_state,
                    ctx, j0, tbuf, toffs, ls, lc, row, parser, starts):
    """The tokens that cross at least one terminal boundary below given trie nodes.

    For each ``(starts_node[j], starts_state[j])`` — a trie node reached from the
    current lexer state without a boundary, where some terminal may end — end each
    accepting terminal there (the parser, through ``ctx_next``, decides which may),
    start the next terminal (``ctx_start``) and walk the node's subtree, where
    terminals may end again. Every node keeps the set of ``(lexer state, context)``
    pairs alive along its path, at most ``width``.

    A context or start state met for the first time is made on the way, in the
    parser's tables (``parser``: ``(meta, grammar, pred, chart)``, see
    :func:`~constrain.cfg.earley_kernels.tables`) and the lexer's (``starts``, see
    :func:`_resolve_start`), and stored in ``ctx_next`` / ``ctx_start``.

    Returns ``(status, a, b, j)``: ``status`` 0 when done (bits set in ``row``),
    ``NEED_NEXT`` with ``(a, b) = (context, terminal)`` or ``NEED_START`` with
    ``a`` the context whose start state is missing, when making it needs a
    table grown (or the context is past ``ctx_next``'s rows, or a budget is
    spent: the caller's Python path says so), ``NEED_EXPAND`` with ``a``
    a lexer state not expanded yet (``flags``), ``OVERFLOW`` when a node had
    more than ``width`` pairs; ``j`` is the start node being walked, where a call
    after the missing entry is filled in may resume (bits only ever get set, so
    walking node ``j`` again is harmless).

    ``tbuf`` and ``toffs`` are the token trie, packed
    (:meth:`~constrain.vocab.trie.TokenTrie.packed`); ``ls`` and ``lc`` are
    scratch, int32 ``(max_depth + 2, width)`` each: ``width`` is their
    number of columns.
    """
    trie, summaries = trie_views(tbuf, toffs)
    tbyte, tdepth, tskip, tok_start, tok_end, order, max_depth = trie
    below = summaries[2]
    # ls, lc: the pairs alive per depth, (max_depth + 2, width) each, the
    # caller's scratch (50 KB each on SmolLM2: allocated per call they were
    # malloc's slow path on a fragmented heap), not zeroed: depth d's pairs are
    # written before they are read, as the walk goes down the trie
    width = ls.shape[1]
    cnt = np.zeros(max_depth + 2, np.int32)
    # the bytes the last start state's root pairs take (none may end a
    # terminal; else takes[4] is 1): start nodes come in runs of one state,
    # a number's 110 over o200k in two, and a node none of whose bytes they
    # take is skipped on four words
    last_s = -1
    takes = np.zeros(5, np.uint64)
    for j in range(j0, starts_node.shape[0]):
        root = starts_node[j]
        s0 = starts_state[j]
        if s0 == last_s and takes[4] == np.uint64(0) and (
                (takes[0] & below[root, 0]) | (takes[1] & below[root, 1])
                | (takes[2] & below[root, 2]) | (takes[3] & below[root, 3])) == np.uint64(0):
            continue
        d0 = tdepth[root]
        # the pairs at the root node: each accepting terminal ended, next one started
        m = 0
        while True:
            status, m, a, t = _end_terminals(trans, flags, acc, ctx_next, ctx_start, ignore_bits,
                                             s0, ctx, -1, ls, lc, d0, m, width)
            if status == NEED_NONE:
                break
            if status > NEED_START or not _end_missing(ctx_next, ctx_start, status, a, t,
                                                       parser, starts):
                return status, a, t, j
        if s0 != last_s:
            last_s = s0
            if m <= 4:
                _pairs_take(trans, acc, ls, d0, m, takes)
            else:  # (256 reads a pair: not for an ambiguous grammar's many)
                takes[4] = 1
        if m == 0 or (m <= 4 and _dead_below(trans, acc, ls, d0, m, below[root])):
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
                    if flags[s2] == F_PENDING:
                        return NEED_EXPAND, s2, 0, j
                    m = _push(ls, lc, d, m, width, s2, c)
                    if m < 0:
                        return OVERFLOW, 0, 0, j
                # or it ends before this byte and the next one begins with it
                # (most states on the way end none: no call for them)
                ends = False
                for w in range(acc.shape[1]):
                    if acc[s, w] != np.uint64(0):
                        ends = True
                while ends:
                    status, m, a, t = _end_terminals(trans, flags, acc, ctx_next, ctx_start,
                                                     ignore_bits, s, c, b, ls, lc, d, m, width)
                    if status == NEED_NONE:
                        break
                    if status > NEED_START or not _end_missing(ctx_next, ctx_start, status, a,
                                                               t, parser, starts):
                        return status, a, t, j
            if m == 0:
                i = tskip[i]
                continue
            cnt[d] = m
            _set_tokens(row, order, tok_start[i], tok_end[i])
            i += 1
    return NEED_NONE, 0, 0, 0
