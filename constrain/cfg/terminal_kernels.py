"""numba kernels that write a grammar's terminals into the stacked terminal table: literals, tries, JSON lexemes and key exclusions.

Kernels are compiled once and cached on disk (``cache=True``) and release the GIL
(``nogil=True``); they work on flat numpy arrays only.
"""

from __future__ import annotations

import numpy as np
from numba import njit


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
TERMINAL_BOUNDED = 5


@njit(cache=True, nogil=True)
def write_lexeme(table, acc, o, row0, k, string, data, ta, tb, lex_rows, lex_acc, alphabet):
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
def write_bounded(table, acc, vmap, o, vo, lo, hi, data, ta, tb, layer, alphabet):
    """A length-bounded JSON string (``lexemes.write_bounded_string``, ``hi``
    not None) restricted to ``alphabet``, as two template layers at row ``o``
    of the zeroed ``table`` and its ``2 + W * hi + 2 + tail`` virtual rows in
    ``vmap`` from row ``vo`` (``layer``: ``[W, 256]`` local targets, -1 dead,
    ``W`` the next layer's first state).

    Local states are the full table's (``2 + W * k + r`` after ``k``
    characters, the bound's position ``last = 2 + W * hi``, then the closing
    quote and the tail), so lexer states, walks and steps see every count;
    but every layer before ``lo`` reads alike, and so does every layer from
    ``lo`` on (which may also close the string), so only one of each is
    written, with the targets of layers 0 and ``lo``: virtual row ``v`` of
    the terminal reads physical row ``vmap[v, 0]`` and adds ``vmap[v, 1]``
    (``W`` per layer it is past its template) to every target up to
    ``vmap[v, 2]`` (``last``; the closing quote and the tail are not
    shifted). A ``maxLength: 2048`` string: 33 rows instead of 28,676
    (28 MB written, 56 ms on fresh pages)."""
    w = layer.shape[0]
    ks = np.empty(w * 256, np.int32)
    bs = np.empty(w * 256, np.int32)
    ts = np.empty(w * 256, np.int32)
    m = 0
    for k in range(w):
        for b in range(256):
            if layer[k, b] >= 0 and alphabet[b]:
                ks[m] = k
                bs[m] = b
                ts[m] = layer[k, b]
                m += 1
    quote = 34
    last = 2 + w * hi
    close = last + 1
    n_a = 1 if lo > 0 else 0
    n_b = 1 if hi > lo else 0
    pa = o + 2
    pb = pa + w * n_a
    pl = pb + w * n_b
    pc = pl + 1
    if alphabet[quote]:
        table[o + 1, quote] = 2
    if n_a:
        for i in range(m):
            table[pa + ks[i], bs[i]] = 2 + ts[i]
    if n_b:
        base = 2 + w * lo
        for i in range(m):
            table[pb + ks[i], bs[i]] = base + ts[i]
        if alphabet[quote]:
            table[pb, quote] = close
    if alphabet[quote]:
        table[pl, quote] = close
    for i in range(tb - ta):
        c = data[ta + i]
        if alphabet[c]:
            table[pc + i, c] = close + i + 1
    acc[pc + tb - ta] = True
    for q in range(2):
        vmap[vo + q, 0] = o + q
        vmap[vo + q, 1] = 0
        vmap[vo + q, 2] = 0
    for k in range(hi):
        p = pa if k < lo else pb
        d = w * k if k < lo else w * (k - lo)
        v = vo + 2 + w * k
        for r in range(w):
            vmap[v + r, 0] = p + r
            vmap[v + r, 1] = d
            vmap[v + r, 2] = last
    for i in range(tb - ta + 2):
        vmap[vo + last + i, 0] = pl + i
        vmap[vo + last + i, 1] = 0
        vmap[vo + last + i, 2] = 0


@njit(cache=True, nogil=True)
def write_terminal_table(table, acc, vmap, voffsets, usable, ops, data, starts, lex_rows, lex_acc,
                         alphabet, cp_layer):
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
    * ``TERMINAL_BOUNDED``: a length-bounded JSON string, ``lo = a`` to ``hi =
      b`` characters, then the tail ``data[tail_start:tail_end]``
      (:func:`write_bounded`: two template layers of ``cp_layer``, ``rows``
      of them, for the terminal's ``voffsets[t + 1] - voffsets[t]`` virtual
      rows);
    * ``TERMINAL_OTHER``: rows left zero (the caller writes a DFA there, or
      the terminal is unusable).

    ``offset`` and ``rows`` are physical rows of ``table``; ``acc`` is per
    physical row too. ``vmap`` (``[voffsets[-1], 3]`` int32) gets, per
    virtual row (local state ``q`` of terminal ``t`` is virtual row
    ``voffsets[t] + q``), its physical row, the shift of its targets and the
    largest target shifted (see :func:`write_bounded`); every terminal but a
    bounded string is its own rows, unshifted.

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
        if kind != TERMINAL_BOUNDED:
            vo = voffsets[t]
            for q in range(size):
                vmap[vo + q, 0] = o + q
                vmap[vo + q, 1] = 0
                vmap[vo + q, 2] = 0
        if kind == TERMINAL_LITERAL:
            a = ops[t, 3]
            n = ops[t, 4] - a
            for j in range(n):
                table[o + 1 + j, data[a + j]] = j + 2
            acc[o + n + 1] = True
        elif kind == TERMINAL_BOUNDED:
            write_bounded(table, acc, vmap, o, voffsets[t], ops[t, 3], ops[t, 4], data,
                          ops[t, 5], ops[t, 6], cp_layer, alphabet)
        elif kind == TERMINAL_LEXEME:
            write_lexeme(table, acc, o, ops[t, 3], ops[t, 4], ops[t, 7] != 0, data, ops[t, 5],
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
            write_lexeme(table, acc, o + m, ops[t, 3], ops[t, 4], True, data, ops[t, 5],
                          ops[t, 6], lex_rows, lex_acc, alphabet)
            first = ops[t, 9]
            if not exclusion_product(table[o:o + size], acc[o:o + size], m, data,
                                     starts[first:first + ops[t, 10] + 1], alphabet):
                usable[t] = False
