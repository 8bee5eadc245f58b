"""The vocabulary as a byte trie, flattened to arrays in preorder.

Walking a byte DFA over the trie visits each shared prefix once and skips a whole
subtree as soon as the DFA dies (``skip[i]`` is the first node after the subtree of
node ``i``). Built once per vocabulary (about 0.1 s for 200k tokens) and cached on
the :class:`~constrain.Vocabulary`.
"""

from __future__ import annotations

import numpy as np

from constrain.vocab.trie_kernels import (build_trie, loop_exits, subtree_bytes, subtree_height,
                                          text_chars, utf8_below)
from constrain.vocab.vocabulary import Vocabulary


#: the loop sets whose exits a trie keeps (TokenTrie.loop_exits); past them it
#: starts again (a JSON Schema's strings share one set, a regex body another)
MAX_LOOP_SETS = 16


def _positions(offsets: np.ndarray, order: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Indices into the flat token data of every byte of the tokens ``order``."""
    starts = np.repeat(offsets[order], lengths)
    within = np.arange(int(lengths.sum())) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    return starts + within


#: the dtypes of the packed arrays, in order (trie_kernels.trie_views reads them so)
_PACKED_DTYPES = (np.uint8, np.int32, np.int32, np.int32, np.int32, np.int32, np.int32, np.int32,
                  np.uint64, np.int32, np.int32, np.bool_, np.uint32)


def _pack(arrays, max_depth: int):
    """``arrays`` copied into one uint64 buffer, each from a word boundary:
    ``(buf, offs, views)``, ``offs`` the start word of each (and the end of the
    last), then each one's size, then ``max_depth``; ``views`` the copies, of
    the original shapes and dtypes."""
    arrays = [np.ascontiguousarray(a, dtype=dt) for a, dt in zip(arrays, _PACKED_DTYPES)]
    starts = np.zeros(len(arrays) + 1, dtype=np.int64)
    starts[1:] = np.cumsum([(a.nbytes + 7) // 8 for a in arrays])
    buf = np.zeros(int(starts[-1]), dtype=np.uint64)
    views = []
    for a, lo, hi in zip(arrays, starts.tolist(), starts[1:].tolist()):
        v = buf[lo:hi].view(np.uint8)[:a.nbytes].view(a.dtype).reshape(a.shape)
        v[...] = a
        views.append(v)
    offs = np.concatenate([starts, np.array([a.size for a in arrays] + [max_depth],
                                            dtype=np.int64)])
    return buf, offs, views


class TokenTrie:
    """The grammar tokens of a vocabulary (not EOS, special or padding ids) in a
    preorder byte trie.

    Attributes:
        byte, depth, skip, tok_start, tok_end: per-node arrays (see
            :func:`constrain.vocab.trie_kernels.build_trie`); node 0 is the root.
        order: token ids sorted by bytes; node ``i`` holds
            ``order[tok_start[i]:tok_end[i]]``.
        max_depth: the longest token, in bytes.
    """

    def __init__(self, vocab: Vocabulary):
        data, offsets = vocab.flat
        ids = np.flatnonzero(vocab.grammar_token_mask)
        tokens = vocab.tokens
        order = np.array(sorted(ids.tolist(), key=tokens.__getitem__), dtype=np.int32)
        lengths = offsets[order + 1] - offsets[order]
        n_max = int(lengths.sum()) + 1
        (self.byte, self.depth, self.skip, self.tok_start, self.tok_end,
         self.num_nodes) = build_trie(data, offsets, order, n_max)
        self.order = order
        self._node_tokens(len(vocab))
        # the characters each grammar token begins (ASCII and UTF-8 lead bytes),
        # for the needs of length-bounded strings (text_needs); the others and
        # no_token: the largest int32
        # (one int32 cumsum over the bytes: over o200k's 1.4 MB 1.7 ms, against
        # 3.5-6 ms through an int64 one of an int32 copy)
        begun = np.zeros(len(data) + 1, dtype=np.int32)
        np.cumsum((data < 0x80) | (data >= 0xC0), dtype=np.int32, out=begun[1:])
        chars = np.full(self.no_token + 1, np.iinfo(np.int32).max, dtype=np.int32)
        chars[ids] = begun[offsets[ids + 1]] - begun[offsets[ids]]
        self._token_chars = chars
        self._flat = (data, offsets)
        self._below = None
        self._full_row = None
        self._height = None
        self._utf8 = None
        self._kernel_arrays = None
        self._root_tokens = None
        self._loop_exits: dict = {}
        self._text_needs: dict = {}
        #: the node of each byte at depth 1 (-1: no token starts with it)
        self.first = np.full(256, -1, dtype=np.int32)
        d1 = np.flatnonzero(self.depth[:self.num_nodes] == 1)
        self.first[self.byte[d1]] = d1
        self.max_depth = int(lengths.max()) if len(lengths) else 0
        self.num_tokens = len(order)
        present = np.zeros(256, dtype=np.bool_)
        single = order[lengths == 1]
        present[data[offsets[single]]] = True
        #: byte values that exist as one-byte grammar tokens
        self.single_bytes = present
        #: byte values that occur anywhere in a grammar token
        self.alphabet = np.zeros(256, dtype=np.bool_)
        self.alphabet[np.unique(data[_positions(offsets, order, lengths)])] = True
        self._spells = bool(np.all(self.single_bytes[self.alphabet]))
        #: whether a twentieth or more of the nodes are bytes past ASCII (o200k:
        #: 40 %, SmolLM2: 1 %): the walks of length-bounded strings then take
        #: subtrees of multi-byte characters whole (lexer_kernels._set_good)
        self.multilingual = bool(20 * np.count_nonzero(self.byte[:self.num_nodes] >= 128)
                                 >= self.num_nodes)

    def _node_tokens(self, vocab_size: int) -> None:
        # Walk kernels set one bit per reached node: node_tok[i] is the token ending
        # at node i, or ``no_token`` -- a bit in a scratch word past the row, so
        # the kernel sets it without a branch (a loop over order[tok_start:tok_end]
        # mispredicts on about every other node and made the walk 1.3x slower).
        # Tokens with identical bytes share a node: all but the first are added
        # afterwards by add_duplicates.
        n = self.num_nodes
        #: int32 words of a mask row; walk kernels take rows of ``row_words + 1``
        self.row_words = (vocab_size + 31) // 32
        self.no_token = 32 * self.row_words
        counts = self.tok_end[:n] - self.tok_start[:n]
        has = np.flatnonzero(counts > 0)
        self.node_tok = np.full(n, self.no_token, dtype=np.int32)
        self.node_tok[has] = self.order[self.tok_start[has]]
        multi = np.flatnonzero(counts > 1)
        src, dst = [], []
        for i in multi.tolist():
            first = int(self.order[self.tok_start[i]])
            for k in range(int(self.tok_start[i]) + 1, int(self.tok_end[i])):
                src.append(first)
                dst.append(int(self.order[k]))
        self._dup_src = np.array(src, dtype=np.int64)
        self._dup_dst = np.array(dst, dtype=np.int64)
        #: whether some tokens share their bytes (see add_duplicates)
        self.has_duplicates = bool(src)

    def subtree_bytes(self) -> tuple[np.ndarray, np.ndarray]:
        """``(below, tok_before)`` of :func:`subtree_bytes`, computed on
        first use (32 bytes per node: 3 MB for SmolLM2) and kept."""
        if self._below is None:
            n = self.num_nodes
            self._below = subtree_bytes(self.byte[:n], self.depth[:n], self.skip[:n],
                                                self.tok_start[:n], self.tok_end[:n])
        return self._below

    def utf8_below(self) -> np.ndarray:
        """Per node, whether every byte path below it is a prefix of valid UTF-8
        read from a character boundary (:func:`utf8_below`; computed on
        first use and kept)."""
        if self._utf8 is None:
            n = self.num_nodes
            self._utf8 = utf8_below(self.byte[:n], self.depth[:n], self.skip[:n])
        return self._utf8

    def subtree_height(self) -> np.ndarray:
        """Per node, how many bytes the longest token below it extends past it
        (computed on first use and kept)."""
        if self._height is None:
            n = self.num_nodes
            self._height = subtree_height(self.depth[:n], self.skip[:n])
        return self._height

    def full_row(self) -> np.ndarray:
        """Every token of the trie set, as a :meth:`walk_row` (computed on first
        use and kept; the walk kernels copy it, never write it)."""
        if self._full_row is None:
            row = self.walk_row()
            ids = np.asarray(self.order[:int(self.subtree_bytes()[1][self.num_nodes])], dtype=np.int64)
            np.bitwise_or.at(row, ids >> 5, np.left_shift(np.uint32(1), (ids & 31).astype(np.uint32)))
            self._full_row = row
        return self._full_row

    def kernel_arrays(self) -> tuple[tuple, tuple]:
        """The trie as the grammar walk kernels take it, ``(trie, summaries)``
        (built on first use and kept, shared by every grammar of the
        vocabulary):

        ``trie``: the preorder trie, read by every walk:

        - ``byte``, ``depth``, ``skip``: per node, the byte leading to it, its
          depth (the root 0), the first node after its subtree;
        - ``tok_start``, ``tok_end``: per node, its tokens,
          ``order[tok_start[i]:tok_end[i]]``;
        - ``order``: token ids sorted by bytes;
        - ``max_depth``: the longest token, in bytes (an int).

        ``summaries``: what the lexer-state walk
        (:func:`constrain.cfg.lexer_kernels.lexer_walk`) reads besides:

        - ``node_tok``: per node, the one token it sets (see ``_node_tokens``);
        - ``first``: the node of each byte at depth 1 (-1: none);
        - ``below``, ``tok_before``: :meth:`subtree_bytes`;
        - ``height``: :meth:`subtree_height`;
        - ``utf8_below``: :meth:`utf8_below`;
        - ``full_row``: :meth:`full_row`.
        """
        if self._kernel_arrays is None:
            below, tok_before = self.subtree_bytes()
            buf, offs, views = _pack(
                (self.byte, self.depth, self.skip, self.tok_start, self.tok_end, self.order,
                 self.node_tok, self.first, below, tok_before, self.subtree_height(),
                 self.utf8_below(), self.full_row()), self.max_depth)
            # the arrays become views of the one buffer, so that it holds the
            # only copy
            (self.byte, self.depth, self.skip, self.tok_start, self.tok_end, self.order,
             self.node_tok, self.first, below, tok_before, self._height, self._utf8,
             self._full_row) = views
            self._below = (below, tok_before)
            self._packed = (buf, offs)
            self._kernel_arrays = (
                (self.byte, self.depth, self.skip, self.tok_start, self.tok_end, self.order,
                 self.max_depth),
                (self.node_tok, self.first, below, tok_before, self._height, self._utf8,
                 self._full_row))
        return self._kernel_arrays

    def packed(self) -> tuple[np.ndarray, np.ndarray]:
        """The arrays of :meth:`kernel_arrays` in one buffer, ``(buf, offs)``:
        what :func:`constrain.vocab.trie_kernels.trie_views` turns back into the
        two tuples inside a kernel. A kernel call unboxes each array argument
        (~50 ns) and types a tuple of them through numba's slow path (~35 ns
        more per array): two arguments instead of 13 arrays in two tuples."""
        if self._kernel_arrays is None:
            self.kernel_arrays()
        return self._packed

    def walk_row(self) -> np.ndarray:
        """A zeroed uint32 row for the walk kernels (``row_words + 1`` words, the
        last one scratch for ``no_token``)."""
        return np.zeros(self.row_words + 1, dtype=np.uint32)

    def add_duplicates(self, row: np.ndarray) -> np.ndarray:
        """Set the bits of tokens that share their bytes with a token set in
        ``row`` (the walk kernels set one token per node); returns ``row``."""
        if len(self._dup_src):
            on = (row[self._dup_src >> 5] >> (self._dup_src & 31).astype(np.uint32)) & 1
            d = self._dup_dst[on.astype(bool)]
            np.bitwise_or.at(row, d >> 5, np.left_shift(np.uint32(1), (d & 31).astype(np.uint32)))
        return row

    def root_tokens(self) -> np.ndarray:
        """Per first byte, how many tokens start with it (int64[256]; computed
        on first use and kept)."""
        if self._root_tokens is None:
            tok_before = self.subtree_bytes()[1]
            has = self.first >= 0
            counts = np.zeros(256, dtype=np.int64)
            counts[has] = tok_before[self.skip[self.first[has]]] - tok_before[self.first[has]]
            self._root_tokens = counts
        return self._root_tokens

    def loop_exits(self, loops: np.ndarray) -> np.ndarray | None:
        """:func:`~constrain.vocab.trie_kernels.loop_exits` of the loop set
        ``loops`` (a lexer state's ``[4]`` uint64 bytes that lead back to it),
        or ``None`` when more than a 64th of the nodes are exits (the trie walk
        then costs no more). Computed on first use (0.15 ms over SmolLM2, 0.55
        over o200k, for a JSON string's body) and kept with the trie, at most
        :data:`MAX_LOOP_SETS` sets: a JSON Schema's strings share one.

        Safe under concurrent use without a lock: the memo is replaced, never
        changed in place, and a set computed twice gives the same array."""
        key = loops.tobytes()
        memo = self._loop_exits
        hit = memo.get(key, memo)
        if hit is not memo:
            return hit
        buf, offs = self.packed()
        exits, n = loop_exits(np.ascontiguousarray(loops, dtype=np.uint64), buf, offs,
                              max(1, self.num_nodes // 64))
        exits = exits.copy() if n >= 0 else None
        if exits is not None:
            exits.setflags(write=False)
        fresh = dict(memo) if len(memo) < MAX_LOOP_SETS else {}
        fresh[key] = exits
        self._loop_exits = fresh
        return exits

    def text_needs(self, loops: np.ndarray, dtype) -> tuple[np.ndarray, np.ndarray] | None:
        """``(need, exit_chars)`` of :func:`~constrain.vocab.trie_kernels.text_chars`
        for the loop set ``loops`` (as :meth:`loop_exits`, whose exits they go
        with): per token id, and one more entry for ``no_token``, the
        characters a token of the text region begins, ``dtype``'s largest
        value for the others; per exit, the whole characters before it.
        ``None`` where :meth:`loop_exits` keeps no exits. Read-only; made on
        first use from the characters each token begins (counted with the
        trie) and the exits' tokens (~0.3 ms over o200k), and kept with the
        trie, at most :data:`MAX_LOOP_SETS` sets (0.4 MB each over o200k).

        A length-bounded JSON string's first position walked the whole trie
        for its tokens' needs (1.1-1.9 ms over o200k); with these it walks the
        exits' subtrees only. Safe under concurrent use as :meth:`loop_exits`."""
        exits = self.loop_exits(loops)
        if exits is None:
            return None
        key = (loops.tobytes(), np.dtype(dtype).str)
        memo = self._text_needs
        hit = memo.get(key)
        if hit is not None:
            return hit
        big = np.iinfo(dtype).max
        need = np.minimum(self._token_chars, big).astype(dtype)
        exit_chars = np.empty(len(exits), dtype=np.int32)
        text_chars(exits, self.order, *self._flat, need, big, exit_chars)
        need.setflags(write=False)
        exit_chars.setflags(write=False)
        fresh = dict(memo) if len(memo) < MAX_LOOP_SETS else {}
        fresh[key] = hit = (need, exit_chars)
        self._text_needs = fresh
        return hit

    def copy_to_duplicates(self, values: np.ndarray) -> np.ndarray:
        """Give each token that shares its bytes with an earlier one that
        token's entry of ``values`` (per token id; the kernels write one token
        per node); returns ``values``."""
        if len(self._dup_src):
            values[self._dup_dst] = values[self._dup_src]
        return values

    @classmethod
    def of(cls, vocab: Vocabulary) -> "TokenTrie":
        """The trie of ``vocab``, built on first use and kept by it."""
        return vocab.derived("trie", lambda: cls(vocab))

    def spells_alphabet(self) -> bool:
        """Whether every byte that occurs in some token is also a one-byte token.
        Then the byte strings the vocabulary can spell are exactly the strings over
        :attr:`alphabet`, and byte-level liveness is token-level liveness."""
        return self._spells

    def __repr__(self) -> str:
        return f"TokenTrie(tokens={self.num_tokens}, nodes={self.num_nodes})"
