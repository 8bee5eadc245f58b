"""numba kernels of the token trie: building it in preorder, and what its subtrees spell.

Kernels are compiled once and cached on disk (``cache=True``) and release the GIL
(``nogil=True``); they work on flat numpy arrays only.
"""

from __future__ import annotations

import numpy as np
from numba import njit


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
def utf8_next(u, b):
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
            v = utf8_next(u, b)
            if v >= 0 and (ok[i] >> v) & 1:
                good |= 1 << u
        ok[parent[i]] &= np.uint8(good)
    out = np.empty(n, np.bool_)
    for i in range(n):
        out[i] = (ok[i] & 1) != 0
    return out


#: columns of a :func:`loop_exits` row: the node, then the bytes of the
#: partial character before it (their count, then up to three), then the
#: node's byte and depth and its subtree's tokens (``order[lo:hi]``)
EXIT_COLUMNS = 9


@njit(cache=True, nogil=True)
def loop_exits(loops, buf, offs, max_exits):
    """The trie nodes where a lexer state stops reading text back to itself:
    for a state that takes each ASCII byte of ``loops`` (256 bits as four
    uint64) back to itself and any valid UTF-8 character back to itself through
    states where no terminal ends (a JSON string's body: ``reads_utf8``), every
    token whose bytes are such text -- the *text region* of the trie, read
    from the root -- stays alive with no boundary. The others pass through one
    of the returned nodes: a child of the region by a byte that is not text
    there (a quote, a backslash, a control byte, invalid UTF-8). Each row
    (:data:`EXIT_COLUMNS`): the node, then the bytes of the partial character
    read before it (0-3: the state at its parent is the state after them),
    then the node's byte, its depth, and the bounds of its subtree's tokens
    in ``order``: what a walk needs of an exit its state does not take, read
    in one row instead of from five arrays (after a cache flush, the walk of
    an object's keys over o200k took 116 us, most of it those reads). A
    region node whose whole subtree is text (its ASCII bytes in ``loops``,
    valid UTF-8 below: ``utf8_below``) is not descended. In preorder; an
    empty array (shape ``(0, EXIT_COLUMNS)``) with ``-1`` when there are more
    than ``max_exits``.

    Computed once per vocabulary and loop set (:meth:`TokenTrie.loop_exits
    <constrain.vocab.trie.TokenTrie.loop_exits>`): a walk from such a state
    starts from every token and walks only these subtrees
    (:func:`constrain.cfg.lexer_kernels.lexer_walk_exits`). Over o200k a JSON
    string body's walk visited ~15,000 nodes (the region's nodes that are
    not wholly text, and their children): 100-230 us hot, 300-550 us after a
    cache flush; from its 1,391 exits 20 / 65 us."""
    trie, summaries = trie_views(buf, offs)
    tbyte, tdepth, tskip = trie[0], trie[1], trie[2]
    first, below, tok_before, utf8 = summaries[1], summaries[2], summaries[3], summaries[5]
    out = np.empty((max_exits + 1, EXIT_COLUMNS), np.int32)
    n = 0
    # decoder state after each depth of the path (utf8_next), and its bytes
    ustate = np.zeros(trie[6] + 2, np.int64)
    path = np.zeros(trie[6] + 2, np.int32)
    for b in range(256):
        i = first[b]
        if i < 0:
            continue
        end = tskip[i]
        while i < end:
            d = tdepth[i]
            c = tbyte[i]
            nxt = tskip[i]
            up = ustate[d - 1]
            u = utf8_next(up, c)
            if u < 0 or (u == 0 and up == 0 and
                         (loops[c >> 6] >> np.uint64(c & 63)) & np.uint64(1) == 0):
                if n == max_exits:
                    return out[:0], -1
                out[n, 0] = i
                k = 0
                while k < d - 1 and ustate[d - 1 - k] != 0:
                    k += 1
                out[n, 1] = k
                for q in range(3):
                    out[n, 2 + q] = path[d - k + q] if q < k else 0
                out[n, 5] = c
                out[n, 6] = d
                out[n, 7] = tok_before[i]
                out[n, 8] = tok_before[nxt]
                n += 1
                i = nxt
                continue
            ustate[d] = u
            path[d] = c
            if u == 0 and nxt > i + 1 and utf8[i] and \
                    ((below[i, 0] & ~loops[0]) | (below[i, 1] & ~loops[1])) == np.uint64(0):
                i = nxt
                continue
            i += 1
    return out[:n], n


@njit(cache=True, nogil=True)
def text_chars(exits, order, data, offsets, need, big, exit_chars):
    """What a loop set's exits (:func:`loop_exits`' rows ``exits``) change in
    the characters each token begins (``need``, per token id: its ASCII and
    UTF-8 lead bytes, a character it ends inside counted; :meth:`TokenTrie.text_needs
    <constrain.vocab.trie.TokenTrie.text_needs>`): ``big`` for every token
    under an exit, whose bytes are not text; and ``exit_chars[x]``, the whole
    characters on the path to exit ``x`` before its partial one (read off the
    bytes of the first token below it, ``data[offsets[t]:offsets[t + 1]]``).

    Those are the needs of a length-bounded string's walk from a character
    boundary (:func:`constrain.cfg.lexer_kernels.bounded_needs`) over the
    tokens that stay in the string, for every string whose characters are
    that text: with them the walk reads the exits' subtrees only."""
    for x in range(exits.shape[0]):
        lo, hi = exits[x, 7], exits[x, 8]
        for k in range(lo, hi):
            need[order[k]] = big
        t = order[lo]
        start = offsets[t]
        c = 0
        for q in range(exits[x, 6] - 1 - exits[x, 1]):
            b = data[start + q]
            if b < 0x80 or b >= 0xC0:
                c += 1
        exit_chars[x] = c


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


@njit(cache=True, nogil=True, inline="always")
def _words(buf, offs, k):
    """Part ``k`` of a packed trie buffer, as its uint64 words."""
    return buf[offs[k]:offs[k + 1]]


@njit(cache=True, nogil=True)
def trie_views(buf, offs):
    """The ``(trie, summaries)`` tuples of
    :meth:`constrain.vocab.trie.TokenTrie.kernel_arrays` as views of the buffer
    of :meth:`~constrain.vocab.trie.TokenTrie.packed` (no copies)."""
    m = 13
    size = offs[m + 1:]
    tbyte = _words(buf, offs, 0).view(np.uint8)[:size[0]]
    tdepth = _words(buf, offs, 1).view(np.int32)[:size[1]]
    tskip = _words(buf, offs, 2).view(np.int32)[:size[2]]
    tok_start = _words(buf, offs, 3).view(np.int32)[:size[3]]
    tok_end = _words(buf, offs, 4).view(np.int32)[:size[4]]
    order = _words(buf, offs, 5).view(np.int32)[:size[5]]
    node_tok = _words(buf, offs, 6).view(np.int32)[:size[6]]
    first = _words(buf, offs, 7).view(np.int32)[:size[7]]
    below = _words(buf, offs, 8)[:size[8]].reshape(size[8] // 4, 4)
    tok_before = _words(buf, offs, 9).view(np.int32)[:size[9]]
    height = _words(buf, offs, 10).view(np.int32)[:size[10]]
    utf8_below = _words(buf, offs, 11).view(np.bool_)[:size[11]]
    full_row = _words(buf, offs, 12).view(np.uint32)[:size[12]]
    return ((tbyte, tdepth, tskip, tok_start, tok_end, order, size[m]),
            (node_tok, first, below, tok_before, height, utf8_below, full_row))
