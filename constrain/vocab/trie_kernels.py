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
