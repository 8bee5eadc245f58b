"""A character DFA → a DFA over UTF-8 bytes, trimmed and minimised.

The byte DFA is an ``int32`` table ``[states, 256]``. State 0 is the dead state
(every transition of it leads back to it) and state 1 the start state. Only valid
UTF-8 is accepted: no overlong forms, no surrogates, nothing above U+10FFFF. A
token holding part of a multi-byte character simply ends in a state in the middle
of that character.

Every live state can still reach an accepting state: states that cannot are merged
into the dead state, so "not dead" means "a prefix of some string of the language".
"""

from __future__ import annotations

import bisect
import time
from dataclasses import dataclass

import numpy as np

from .char_automaton import CharDFA
from .errors import GrammarTooComplexError

DEAD = 0
START = 1

# (first code point, last code point, continuation bytes, first lead byte)
_UTF8_CLASSES = (
    (0x80, 0x7FF, 1, 0xC0),
    (0x800, 0xFFFF, 2, 0xE0),
    (0x10000, 0x10FFFF, 3, 0xF0),
)


@dataclass
class ByteDFA:
    """A DFA over bytes: ``transitions[s, b]`` is the next state (0: dead),
    ``accepting[s]`` whether input may end at ``s``; the start state is 1."""

    transitions: np.ndarray
    accepting: np.ndarray

    @property
    def num_states(self) -> int:
        return self.transitions.shape[0]

    def walk(self, data: bytes, state: int = START) -> int:
        """The state after ``data`` (0 once dead)."""
        t = self.transitions
        for b in data:
            state = int(t[state, b])
            if state == DEAD:
                return DEAD
        return state

    def matches(self, data: bytes) -> bool:
        """Whether ``data`` is a complete string of the language."""
        return bool(self.accepting[self.walk(data)])


class _Builder:
    def __init__(self, n_char_states: int):
        self.rows: list[np.ndarray] = [np.zeros(256, dtype=np.int32) for _ in range(n_char_states + 1)]
        self.memo: dict = {}

    def new_state(self) -> int:
        self.rows.append(np.zeros(256, dtype=np.int32))
        return len(self.rows) - 1

    def continuation(self, remaining: int, spans: tuple) -> int:
        """The state reading ``remaining`` continuation bytes whose value, as an
        offset in the current block, picks the target from ``spans`` (sorted
        ``(lo, hi, target)`` offsets)."""
        key = (remaining, spans)
        s = self.memo.get(key)
        if s is not None:
            return s
        s = self.memo[key] = self.new_state()
        row = self.rows[s]
        size = 64 ** (remaining - 1)
        if remaining == 1:
            for lo, hi, t in spans:
                row[0x80 + lo:0x80 + hi + 1] = t
            return s
        for c in range(64):
            blo, bhi = c * size, c * size + size - 1
            sub = tuple(
                (max(lo, blo) - blo, min(hi, bhi) - blo, t)
                for lo, hi, t in spans if lo <= bhi and hi >= blo
            )
            if sub:
                row[0x80 + c] = self.continuation(remaining - 1, sub)
        return s


def char_dfa_to_bytes(dfa: CharDFA) -> ByteDFA:
    """Expand a :class:`CharDFA` into a byte DFA over UTF-8 (not yet minimised)."""
    n = len(dfa.transitions)
    b = _Builder(n)
    for q, row_map in enumerate(dfa.transitions):
        spans = []
        for atom, target in row_map.items():
            for lo, hi in dfa.atoms[atom].intervals:
                spans.append((lo, hi, target + 1))  # +1: state 0 is dead
        spans.sort()
        row = b.rows[q + 1]
        starts = [s[0] for s in spans]
        for lo, hi, t in spans:
            if lo < 0x80:
                row[lo:min(hi, 0x7F) + 1] = t
        for first, last, nbytes, lead0 in _UTF8_CLASSES:
            shift = 6 * nbytes
            leads = set()
            for lo, hi, _t in spans:
                lo, hi = max(lo, first), min(hi, last)
                if lo <= hi:
                    leads.update(range(lo >> shift, (hi >> shift) + 1))
            for lead in sorted(leads):
                base = lead << shift
                blo, bhi = max(base, first), min(base + (1 << shift) - 1, last)
                k = max(bisect.bisect_right(starts, blo) - 1, 0)
                sub = []
                while k < len(spans) and spans[k][0] <= bhi:
                    lo, hi, t = spans[k]
                    lo, hi = max(lo, blo), min(hi, bhi)
                    if lo <= hi:
                        sub.append((lo - base, hi - base, t))
                    k += 1
                if sub:
                    row[lead0 + lead] = b.continuation(nbytes, tuple(sub))
    trans = np.stack(b.rows)
    accepting = np.zeros(trans.shape[0], dtype=np.bool_)
    accepting[1:n + 1] = dfa.accepting
    return ByteDFA(trans, accepting)


def trim_and_minimize(dfa: ByteDFA, *, deadline: float | None = None,
                      max_rounds: int = 256, alphabet: np.ndarray | None = None) -> ByteDFA:
    """Send states that cannot reach acceptance to the dead state, drop
    unreachable states, and merge equivalent states (Moore's partition refinement,
    vectorised; skipped, not approximated, past ``max_rounds`` or the deadline).
    The result numbers states breadth-first from the start (1), dead = 0.

    ``alphabet`` (256 booleans) restricts the bytes that may be read: transitions
    on other bytes go to the dead state first."""
    trans, acc = dfa.transitions, dfa.accepting
    if alphabet is not None and not alphabet.all():
        trans = trans.copy()
        trans[:, ~alphabet] = DEAD
    live = _coreachable(trans, acc)
    trans = np.where(live[trans], trans, DEAD).astype(np.int32)
    trans[~live] = DEAD
    cls = _moore(trans, acc, live, deadline, max_rounds)
    if cls is not None:
        # representative per class; dead class maps to 0
        n_cls = int(cls.max()) + 1
        rep = np.full(n_cls, -1, dtype=np.int64)
        order = np.arange(len(cls))
        rep[cls[::-1]] = order[::-1]
        trans = cls[trans[rep]].astype(np.int32)
        acc = acc[rep]
        start = int(cls[START])
        dead_cls = int(cls[DEAD])
    else:
        start, dead_cls = START, DEAD
    return _renumber(trans, acc, start, dead_cls)


def _coreachable(trans: np.ndarray, acc: np.ndarray) -> np.ndarray:
    """Boolean mask of the states from which an accepting state is reachable."""
    n = trans.shape[0]
    src = np.repeat(np.arange(n, dtype=np.int64), 256)
    dst = trans.reshape(-1).astype(np.int64)
    keep = src != dst
    src, dst = src[keep], dst[keep]
    order = np.argsort(dst, kind="stable")
    src, dst = src[order], dst[order]
    indptr = np.searchsorted(dst, np.arange(n + 1))
    live = acc.copy()
    live[DEAD] = False
    frontier = np.flatnonzero(live)
    while frontier.size:
        preds = np.concatenate([src[indptr[v]:indptr[v + 1]] for v in frontier]) if frontier.size else frontier
        preds = np.unique(preds)
        preds = preds[~live[preds]]
        preds = preds[preds != DEAD]
        live[preds] = True
        frontier = preds
    return live


def _moore(trans, acc, live, deadline, max_rounds):
    """State classes of the coarsest equivalence, or None if not found in time."""
    cls = np.where(live, np.where(acc, 2, 1), 0).astype(np.int32)
    n_cls = len(np.unique(cls))
    # bytes whose columns are identical stay identical under refinement: keep one
    # column per byte class (a handful for most patterns, not 256)
    cols = trans.T.copy()
    _, first = np.unique(cols.view(np.dtype((np.void, cols.itemsize * cols.shape[1]))).reshape(-1),
                         return_index=True)
    trans = np.ascontiguousarray(trans[:, np.sort(first)])
    for _ in range(max_rounds):
        sig = np.ascontiguousarray(np.concatenate([cls[:, None], cls[trans]], axis=1))
        # rows as opaque byte strings: a memcmp sort, much faster than axis=0
        rows = sig.view(np.dtype((np.void, sig.itemsize * sig.shape[1]))).reshape(-1)
        _, new = np.unique(rows, return_inverse=True)
        new = new.reshape(-1).astype(np.int32)
        n_new = int(new.max()) + 1
        if n_new == n_cls:
            # canonical: dead class first
            return _canon(new, DEAD)
        cls, n_cls = new, n_new
        if deadline is not None and time.perf_counter() > deadline:
            return None
    return None


def _canon(cls: np.ndarray, dead: int) -> np.ndarray:
    d = cls[dead]
    out = cls.copy()
    out[cls == d] = 0
    out[(cls != d) & (cls < d)] += 1
    return out


def _renumber(trans: np.ndarray, acc: np.ndarray, start: int, dead: int) -> ByteDFA:
    """Keep the states reachable from ``start``; number them breadth-first with
    dead = 0 and start = 1."""
    n = trans.shape[0]
    new_id = np.full(n, -1, dtype=np.int64)
    new_id[dead] = 0
    order = [dead]
    if start != dead:
        new_id[start] = 1
        order.append(start)
    else:  # the empty language: a start state with no way out
        trans = np.vstack([trans, np.full((1, 256), dead, dtype=trans.dtype)])
        acc = np.append(acc, False)
        new_id = np.append(new_id, 1)
        order.append(n)
    head = 1
    while head < len(order):
        s = order[head]
        head += 1
        for t in np.unique(trans[s]):
            t = int(t)
            if new_id[t] < 0:
                new_id[t] = len(order)
                order.append(t)
    order_arr = np.asarray(order, dtype=np.int64)
    new_trans = new_id[trans[order_arr]].astype(np.int32)
    new_trans[0] = 0
    new_acc = acc[order_arr].copy()
    new_acc[0] = False
    return ByteDFA(np.ascontiguousarray(new_trans), new_acc)
