"""numba kernels of token automata: walking a byte DFA down the token trie, and liveness over token transitions.

Kernels are compiled once and cached on disk (``cache=True``) and release the GIL
(``nogil=True``); they work on flat numpy arrays only.
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True, nogil=True)
def walk_state(trans, state, first, tbyte, tdepth, tskip, tok_start, tok_end, order, stack,
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


#: a bitmask row starts on this many bytes (the words of each row padded to it)
ROW_ALIGN = 64
#: uint32 words of slack in a row buffer, for its first row's alignment
ROW_SLACK = ROW_ALIGN // 4


@njit(cache=True, nogil=True)
def aligned_rows(buf, words):
    """The ``(m, words)`` rows of ``buf``, a flat uint32 buffer of ``m``
    rows of ``words`` padded to :data:`ROW_ALIGN` bytes plus
    :data:`ROW_SLACK`: each row starts on a :data:`ROW_ALIGN`-byte boundary
    (copying a row into a bitmask, which torch aligns so, is then ~7% faster on
    a 25 KB o200k row than from a misaligned source)."""
    stride = -(-words // ROW_SLACK) * ROW_SLACK
    off = ((-buf.ctypes.data) % ROW_ALIGN) // 4
    m = (buf.shape[0] - ROW_SLACK) // stride
    return buf[off:off + m * stride].reshape((m, stride))[:, :words]


@njit(cache=True, nogil=True)
def row_spans(row, gap, max_spans, out):
    """Into ``out`` (``2 * max_spans + 1`` ints), the spans of the non-zero
    bytes of ``row`` (uint32 words, read as little-endian bytes) as
    ``constrain.runtime.bitmask.row_writer`` finds them: ``out[0]`` their
    count (0: an all-zero row; -1: dense, written as a plain copy), then
    ``(start, end)`` byte offsets. Spans are split where more than ``gap``
    zero bytes lie between two non-zero ones, unless that makes more than
    ``max_spans``: then one span from the first non-zero byte to the last."""
    # bytes less than 16 words apart are never a gap apart: only then are a
    # word's lowest and highest non-zero bytes looked at; the row is dense as
    # soon as the spans so far cover half of it; past max_spans spans only the
    # last byte is left to find, from the end (numpy's vectorised scan of a
    # dense 25 KB row beat a byte-by-byte loop)
    words = row.shape[0]
    first = -1
    pw = -1  # the last non-zero word
    n = 0
    done = 0  # bytes of the finished spans
    over = False
    w0 = 0
    while w0 < words and not over:
        # zero words 64 and then 8 at a time (a sparse o200k row took 3.7 us
        # word by word, and a grammar's first visit of a state makes its
        # writer); no word of a block without a zero word can open a span but
        # the first (spans are more than 16 words apart), so a dense row's scan
        # goes a block at a time too
        step = 8
        full = False
        last = min(w0 + 8, words)
        if w0 % 64 == 0 and w0 + 64 <= words:
            acc = np.uint32(0)
            nonzero = True
            block = row[w0:w0 + 64]  # a fixed trip count: ~3x faster than range(w0, w0 + 64)
            for k in range(64):
                acc |= block[k]
                nonzero &= block[k] != 0
            if acc == 0:
                w0 += 64
                continue
            if nonzero:
                step = 64
                full = True
        if not full and last - w0 == 8:
            if (row[w0] | row[w0 + 1] | row[w0 + 2] | row[w0 + 3] | row[w0 + 4]
                    | row[w0 + 5] | row[w0 + 6] | row[w0 + 7]) == 0:
                w0 += 8
                continue
            full = (row[w0] != 0) & (row[w0 + 1] != 0) & (row[w0 + 2] != 0) & (row[w0 + 3] != 0) \
                & (row[w0 + 4] != 0) & (row[w0 + 5] != 0) & (row[w0 + 6] != 0) & (row[w0 + 7] != 0)
        for w in range(w0, w0 + 1 if full else last):
            x = row[w]
            if x == 0:
                continue
            if first < 0:
                first = 4 * w + _low_byte(x)
                out[1] = first
                n = 1
            elif w - pw >= 16:
                low = 4 * w + _low_byte(x)
                prev = 4 * pw + _high_byte(row[pw])
                if low - prev > gap:
                    if n == max_spans:
                        over = True
                        break
                    out[2 * n] = prev + 1
                    out[2 * n + 1] = low
                    done += prev + 1 - out[2 * n - 1]
                    n += 1
            pw = w
            if 2 * (done + 4 * w + 1 - out[2 * n - 1]) > 4 * words:
                out[0] = -1
                return
        if full and not over:
            pw = w0 + step - 1
            if 2 * (done + 4 * pw + 1 - out[2 * n - 1]) > 4 * words:
                out[0] = -1
                return
        w0 += step
    if first < 0:
        out[0] = 0
        return
    if over:
        n = 1
        for w in range(words - 1, -1, -1):
            if row[w] != 0:
                pw = w
                break
    out[2 * n] = 4 * pw + _high_byte(row[pw]) + 1
    total = 0
    for i in range(n):
        total += out[2 * i + 2] - out[2 * i + 1]
    out[0] = -1 if 2 * total > 4 * words else n


@njit(cache=True, nogil=True, inline="always")
def _low_byte(x):
    """The index of the lowest non-zero byte of the non-zero uint32 ``x``."""
    return 0 if x & np.uint32(0xFF) else 1 if x & np.uint32(0xFF00) else \
        2 if x & np.uint32(0xFF0000) else 3


@njit(cache=True, nogil=True, inline="always")
def _high_byte(x):
    """The index of the highest non-zero byte of the non-zero uint32 ``x``."""
    return 3 if x >> np.uint32(24) else 2 if x >> np.uint32(16) else \
        1 if x >> np.uint32(8) else 0


@njit(cache=True, nogil=True)
def token_transitions(trans, lo, hi, first, tbyte, tdepth, tskip, tok_start, tok_end, order,
                      max_depth, buf, row0, words, accepting, eos, below, max_nodes, gap,
                      max_spans):
    """Allowed-token rows and the sparse token → next-state map of the states
    ``lo <= s < hi``.

    ``buf`` holds the rows (:func:`aligned_rows`, zeroed): state ``s``'s is
    row ``row0 + s - lo``; it receives the bits of ``s``'s tokens, and those of
    the ``eos`` ids when ``accepting[s]``. An empty ``buf``: the kernel
    allocates one of ``row0 + hi - lo`` rows (a numpy allocation in Python
    cost ~10-20 us of a cold compile, a path nothing else there takes). Returns
    ``(rows, indptr, tokens, nexts, spans)``: ``rows`` the rows of ``buf``,
    the transitions of ``lo + j`` are ``tokens[indptr[j]:indptr[j+1]]`` →
    ``nexts[...]``, tokens ascending in byte order of the trie (not by id);
    ``spans[j]``: :func:`row_spans` of ``lo + j``'s row when ``max_spans > 0``
    (else ``spans`` has no rows).

    ``max_nodes >= 0``: walk only if the trie nodes under the bytes of the
    first (up to) 8 states, ``below[b]`` under byte ``b``, extrapolated to all
    of ``trans``'s states, number at most ``max_nodes`` per sampled state (a
    bound: the walk prunes below the first byte); else nothing is walked and
    ``indptr`` is empty. Deciding here spares the caller's numpy steps, which
    cost more than the walk of a small automaton on a cold CPU cache.
    """
    if buf.shape[0] == 0:
        buf = np.zeros((row0 + hi - lo) * (-(-words // ROW_SLACK) * ROW_SLACK) + ROW_SLACK,
                       np.uint32)
    rows = aligned_rows(buf, words)
    if max_nodes >= 0:
        n_all = trans.shape[0]
        m = min(n_all - 1, 8)
        nodes = 0
        for s in range(1, 1 + m):
            for b in range(256):
                if trans[s, b] != 0:
                    nodes += below[b]
        if nodes * (n_all - 1) > max_nodes * m:
            e = np.zeros(0, np.int32)
            return rows, np.zeros(0, np.int64), e, e, np.zeros((0, 1), np.int64)
    spans = np.zeros((hi - lo if max_spans > 0 else 0, 2 * max_spans + 1), np.int64)
    n_tokens = order.shape[0]
    out_tok = np.empty(n_tokens, np.int32)
    out_next = np.empty(n_tokens, np.int32)
    indptr = np.zeros(hi - lo + 1, np.int64)
    stack = np.zeros(max_depth + 2, np.int32)
    n = 0
    for j in range(hi - lo):
        if out_tok.shape[0] - n < n_tokens:
            grow = max(out_tok.shape[0] * 2, n + n_tokens)
            nt = np.empty(grow, np.int32)
            nn = np.empty(grow, np.int32)
            nt[:n] = out_tok[:n]
            nn[:n] = out_next[:n]
            out_tok = nt
            out_next = nn
        row = rows[row0 + j]
        n = walk_state(trans, lo + j, first, tbyte, tdepth, tskip, tok_start, tok_end, order,
                       stack, row, out_tok, out_next, n)
        indptr[j + 1] = n
        if accepting[lo + j]:
            for e in eos:
                row[e >> 5] |= np.uint32(1) << np.uint32(e & 31)
        if max_spans > 0:
            row_spans(row, gap, max_spans, spans[j])
    return rows, indptr, out_tok[:n], out_next[:n], spans


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
