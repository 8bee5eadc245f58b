"""A prefix tree of KV-cache segments, shared along common prefixes.

:class:`KVPrefixTree` keeps, for token sequences a model has run, the keys and
values of every position *once*: a node holds the segment of positions its edge
adds to its parent's (a tensor ``(layers, 2, heads, length, head_dim)``), so two
prefixes that share a start share the nodes of that start, and extending a prefix
by one token adds one node of one position. Nothing is copied to reuse a cached
prefix; a forward pass gathers the segments of its rows into one batched cache
(:meth:`KVPrefixTree.gather`), a copy proportional to the positions it attends to,
the same copy transformers' own cache makes when it grows.

A node may also keep the next-token logits after its last position, so that a
prefix asked for again is answered without a forward pass.

Memory is bounded by a byte budget (:attr:`KVPrefixTree.budget`): after an
insertion the least recently used *leaves* are evicted until the tree fits.
Recency is kept so that a node is always more recent than its descendants (a
touch refreshes the node and then each of its ancestors), so the oldest node of
the order is always a leaf and eviction never cuts a path in the middle.

The tree holds opaque torch tensors and does no model work; see
:meth:`search.TransformersLM.logits` for how it is used. Not thread-safe by
itself: its owner serialises access.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Sequence

__all__ = ["KVPrefixTree", "KVNode", "common_length"]


class KVNode:
    """One edge of the tree: ``tokens`` (the ids it adds), ``kv`` (their keys and
    values, ``(layers, 2, heads, len(tokens), head_dim)``; ``None`` at the root),
    ``depth`` (the length of the prefix it ends), ``logits`` (the next-token
    logits after that prefix, or ``None``) and its ``children`` by first token."""

    __slots__ = ("parent", "tokens", "kv", "depth", "logits", "children", "nbytes", "__weakref__")

    def __init__(self, parent, tokens: tuple, kv, depth: int):
        self.parent = parent
        self.tokens = tokens
        self.kv = kv
        self.depth = depth
        self.logits = None
        self.children: dict = {}
        self.nbytes = _nbytes(kv)

    def __repr__(self) -> str:
        return f"KVNode(depth={self.depth}, tokens={len(self.tokens)}, children={len(self.children)})"


def _nbytes(t) -> int:
    return 0 if t is None else t.element_size() * t.nelement()


def common_length(a: Sequence[int], b: Sequence[int], start: int = 0) -> int:
    """How many leading items of ``a`` equal those of ``b[start:]``."""
    n = min(len(a), len(b) - start)
    i = 0
    while i < n and a[i] == b[start + i]:
        i += 1
    return i


class KVPrefixTree:
    """KV-cache segments of the token sequences a model has run, shared along
    common prefixes, within a byte budget (see the module docstring).

    Args:
        budget: bytes of keys, values and kept logits the tree may hold; after
            each :meth:`insert` the least recently used leaves are evicted until
            it fits (a single sequence larger than the budget is not kept).
    """

    def __init__(self, budget: int):
        self.budget = int(budget)
        self.root = KVNode(None, (), None, 0)
        self._order: OrderedDict = OrderedDict()  # node -> None, oldest first; the root is not in it
        #: bytes held now / at most since the tree was made or cleared
        self.nbytes = 0
        self.peak_nbytes = 0
        #: nodes evicted since the tree was made
        self.evictions = 0

    def __len__(self) -> int:
        """The number of nodes (the root not counted)."""
        return len(self._order)

    def clear(self) -> None:
        """Forget every segment."""
        self.root = KVNode(None, (), None, 0)
        self._order.clear()
        self.nbytes = 0
        self.peak_nbytes = 0

    # -- lookup -----------------------------------------------------------------

    def match(self, ids: Sequence[int]) -> tuple[list, int]:
        """``(path, n)``: the longest start of ``ids`` that the tree holds, ``n``
        positions long, as the nodes it runs through, each with how many of its
        positions it contributes (the last one may be used in part)."""
        path = []
        node, n = self.root, 0
        while n < len(ids):
            child = node.children.get(ids[n])
            if child is None:
                break
            m = common_length(child.tokens, ids, n)
            path.append((child, m))
            n += m
            if m < len(child.tokens):
                break
            node = child
        return path, n

    def cached_logits(self, ids: Sequence[int]):
        """The logits kept after exactly ``ids``, or ``None``; a hit refreshes the
        path."""
        path, n = self.match(ids)
        if n != len(ids) or not path or path[-1][1] != len(path[-1][0].tokens):
            return None
        node = path[-1][0]
        if node.logits is None:
            return None
        self.touch(node)
        return node.logits

    def touch(self, node: KVNode) -> None:
        """Make ``node`` and its ancestors the most recently used (ancestors
        last, so that each stays more recent than its descendants)."""
        order = self._order
        while node is not self.root:
            order.move_to_end(node)
            node = node.parent

    # -- gathering ----------------------------------------------------------------

    @staticmethod
    def gather(path: list, out, row: int, end: int) -> None:
        """Copy the positions of ``path`` (from :meth:`match`, cut to the wanted
        length) into ``out[:, :, row, :, end - n:end]``, ``out`` a tensor
        ``(layers, 2, batch, heads, length, head_dim)``."""
        start = end - sum(m for _, m in path)
        for node, m in path:
            out[:, :, row, :, start:start + m] = node.kv[:, :, :, :m]
            start += m

    @staticmethod
    def cut(path: list, n: int) -> list:
        """``path`` limited to its first ``n`` positions."""
        out, left = [], n
        for node, m in path:
            if left <= 0:
                break
            out.append((node, min(m, left)))
            left -= m
        return out

    # -- insertion ------------------------------------------------------------------

    def _split(self, node: KVNode, m: int) -> KVNode:
        """Cut ``node`` after its first ``m`` positions; returns the upper part
        (a new node that ends at ``node.depth - len(node.tokens) + m``)."""
        parent = node.parent
        upper = KVNode(parent, node.tokens[:m], node.kv[:, :, :, :m].clone(),
                       node.depth - len(node.tokens) + m)
        lower_kv = node.kv[:, :, :, m:].clone()
        self.nbytes += upper.nbytes + _nbytes(lower_kv) - _nbytes(node.kv)
        parent.children[upper.tokens[0]] = upper
        node.parent = upper
        node.tokens = node.tokens[m:]
        node.kv = lower_kv
        node.nbytes = _nbytes(lower_kv) + _nbytes(node.logits)
        upper.children[node.tokens[0]] = node
        # just older than ``node``, so that it stays more recent than its subtree
        self._order[upper] = None
        self.touch(node)
        return upper

    def insert(self, ids: Sequence[int], kv, kv_start: int, logits=None) -> None:
        """Record that ``ids`` has been run: ``kv`` holds the keys and values of
        positions ``kv_start ..`` of ``ids`` (``(layers, 2, heads, len(ids) -
        kv_start, head_dim)``), which must cover every position the tree does not
        hold yet; ``logits`` (optional) are the next-token logits after ``ids``.
        Then evicts least recently used leaves until the tree fits its budget."""
        path, n = self.match(ids)
        if n < kv_start:  # evicted since ``kv`` was computed: nothing to hang it on
            return
        if not path:
            node = self.root
        elif path[-1][1] < len(path[-1][0].tokens) and (n < len(ids) or logits is not None):
            node = self._split(path[-1][0], path[-1][1])
        else:
            node = path[-1][0]
        if n < len(ids):
            # a slice would keep the positions the tree already holds alive
            seg = kv if n == kv_start else kv[:, :, :, n - kv_start:].clone()
            child = KVNode(node, tuple(ids[n:]), seg, len(ids))
            if node.logits is not None:  # the search moved past ``node``: its logits are unlikely to be asked again
                self._drop_logits(node)
            node.children[child.tokens[0]] = child
            self._order[child] = None
            self.nbytes += child.nbytes
            node = child
        if node is not self.root:
            if logits is not None and node.logits is None and not node.children:
                node.logits = logits
                node.nbytes += _nbytes(logits)
                self.nbytes += _nbytes(logits)
            self.touch(node)
        self.evict()
        self.peak_nbytes = max(self.peak_nbytes, self.nbytes)

    def _drop_logits(self, node: KVNode) -> None:
        size = _nbytes(node.logits)
        node.logits = None
        node.nbytes -= size
        self.nbytes -= size

    def evict(self) -> None:
        """Drop least recently used leaves until the tree fits its budget."""
        order = self._order
        while self.nbytes > self.budget and order:
            node, _ = order.popitem(last=False)
            assert not node.children, "the oldest node must be a leaf"
            del node.parent.children[node.tokens[0]]
            self.nbytes -= node.nbytes
            self.evictions += 1
