"""``with_reasoning``: a thinking section of free text before a constrained
answer, as reasoning models write (``<think> ... </think>`` then the answer).

The output is ``start`` marker, free text that does not contain the ``end``
marker, the ``end`` marker, then a string of the wrapped constraint's
language. Tokens may straddle every boundary: a token that completes the end
marker and goes on is allowed exactly when the wrapped constraint accepts the
bytes it goes on with (:meth:`Constraint.advance_bytes`). A marker that the
vocabulary has as a special token (its bytes, not a text token) is that one
token instead, and then text tokens alone never spell it.

With ``max_tokens``, the section -- from the first token of the output to the
one that completes the end marker, both included -- has at most that many
tokens: a token is allowed in the section only if the end marker can still be
written in the tokens left (the fewest tokens that spell the rest of it,
counted on the vocabulary), so once the budget runs low only the tokens that
head for the end marker remain and the answer always follows.

Masks of the section depend on the marker position and, near the end of the
budget, on the tokens left; each is computed once (a numba walk of every
token) and kept by the constraint, under a lock: there are at most
``(len(start) + len(end) + 1) * (longest completion + 1)`` of them.
"""

from __future__ import annotations

import threading

import numpy as np

from constrain.cache import held_bytes
from constrain.errors import ConstraintError, InvalidLimitError, InvalidStateError
from constrain.protocol import Constraint, check_token_id, text_bytes
from constrain.runtime.bitmask import bitmask_words, check_bitmask, write_row
from constrain.runtime.reasoning_kernels import walk_section

__all__ = ["ReasoningConstraint", "with_reasoning"]

_OPEN, _THINK, _ANSWER = "open", "think", "answer"
#: the need of a section position from which no tokens finish it
_NEVER = 2 ** 62


def with_reasoning(constraint: Constraint, start: str | None = "<think>", end: str = "</think>",
                   max_tokens: int | None = None) -> "ReasoningConstraint":
    """``constraint`` after a thinking section: ``start``, free text without
    ``end``, ``end``, then the constraint's language (see the module
    docstring).

    Args:
        constraint: any compiled constraint; its ``advance_bytes`` is used for
            tokens that run from the end marker into the answer.
        start: the marker that opens the section; ``None`` when the prompt
            already opened it (a chat template that ends in ``<think>``).
        end: the marker that closes it (not empty).
        max_tokens: the most tokens the section may take, markers included
            (``None``: unbounded).

    Raises:
        ConstraintError: an empty ``end``, or a marker the vocabulary cannot spell.
        InvalidLimitError: ``max_tokens`` below the fewest tokens that spell
            the two markers.
    """
    return ReasoningConstraint(constraint, start, end, max_tokens)


def _special_id(vocab, marker: str | None) -> int | None:
    """The id of the special token whose bytes are ``marker``, if the vocabulary
    has one."""
    if marker is None:
        return None
    raw = marker.encode()
    for t in vocab.special_token_ids:
        if vocab.token_bytes(t) == raw:
            return int(t)
    return None


def _kmp(end: bytes) -> np.ndarray:
    """``kmp[m, b]``: how much of ``end`` is matched after byte ``b`` with ``m``
    bytes of it matched (the automaton of "text ending in ``end``")."""
    n = len(end)
    table = np.zeros((n + 1, 256), np.int64)
    fail = 0
    for m in range(n + 1):
        for b in range(256):
            if m < n and b == end[m]:
                table[m, b] = m + 1
            else:
                table[m, b] = table[fail, b] if m else 0
        if 0 < m < n:
            fail = table[fail, end[m]]
    return table


class ReasoningConstraint(Constraint):
    """A thinking section before ``inner``'s language; made by
    :func:`with_reasoning`. States are tuples: ``("open",)`` before a
    special start token, ``("think", position, tokens used)`` in the
    section, ``("answer", inner state)`` after it."""

    def __init__(self, inner: Constraint, start: str | None, end: str, max_tokens: int | None):
        if not isinstance(inner, Constraint):
            raise ConstraintError(f"with_reasoning wraps a compiled constraint, not "
                                  f"{type(inner).__name__}")
        if not isinstance(end, str) or not end:
            raise ConstraintError("the end marker must be a non-empty string")
        if start is not None and (not isinstance(start, str) or not start):
            raise ConstraintError("the start marker must be a non-empty string or None")
        for marker in (start, end):
            if marker is not None and text_bytes(marker) is None:
                raise ConstraintError(f"the marker {marker!r} is no text UTF-8 spells "
                                      f"(a lone surrogate)")
        vocab = self.vocab = inner.vocab
        self.inner, self.start, self.end = inner, start, end
        self.start_id = _special_id(vocab, start)
        self.end_id = _special_id(vocab, end)
        self._start = np.frombuffer(b"" if start is None or self.start_id is not None
                                    else start.encode(), np.uint8).copy()
        # a special end token is never spelled by text: an automaton that never completes
        self._kmp = _kmp(end.encode()) if self.end_id is None else np.zeros((2, 256), np.int64)
        ls, le = len(self._start), self._kmp.shape[0] - 1
        self._ls = ls
        self._words = bitmask_words(len(vocab))
        self._inner0 = inner.initial_state()
        self._walks: dict[int, tuple] = {}
        self._masks: dict[tuple, np.ndarray] = {}
        self._lock = threading.Lock()
        self._need = self._fewest_to_finish(ls + le)
        if self._need[0] >= _NEVER:
            which = "end marker" if ls == 0 else "markers"
            raise ConstraintError(f"the vocabulary cannot spell the {which} "
                                  f"{' then '.join(repr(m) for m in (start, end) if m)}")
        #: the largest finite need: a budget at least this large binds nothing
        self._cap = int(self._need[self._need < _NEVER].max())
        first = int(self._need[0]) + (self.start_id is not None)
        if max_tokens is not None:
            if isinstance(max_tokens, bool) or not isinstance(max_tokens, (int, np.integer)) \
                    or max_tokens < first:
                raise InvalidLimitError(
                    f"max_tokens must be an integer >= {first} (the fewest tokens that spell "
                    f"the markers), not {max_tokens!r}", "max_tokens")
            max_tokens = int(max_tokens)
        self.max_tokens = max_tokens

    def __repr__(self) -> str:
        return (f"ReasoningConstraint({self.inner!r}, start={self.start!r}, end={self.end!r}, "
                f"max_tokens={self.max_tokens})")

    def __getstate__(self):
        state = self.__dict__.copy()
        del state["_lock"]
        state["_walks"], state["_masks"] = {}, {}
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._lock = threading.Lock()

    # -- the section's walks --------------------------------------------------------

    def _fewest_to_finish(self, positions: int) -> np.ndarray:
        """``need[p]``: the fewest tokens that take position ``p`` of the
        section through the end marker into an answer the wrapped constraint
        takes (:data:`_NEVER` where none do), over the tokens' own walks: a
        token may finish the start marker and run on, or start the end marker
        again (after '<' of '</t>', '</t>' is one token, not the '/t>' that
        spelling the rest would take)."""
        succ, need = [], np.full(positions, _NEVER, np.int64)
        for p in range(positions):
            after, _, spill = self._walk(p)
            succ.append(np.unique(after[after >= 0]))
            if any(s is not None for s in spill.values()) or \
                    (self.end_id is not None and p >= self._ls):
                need[p] = 1
        for _ in range(positions):  # shortest paths over at most that many steps
            changed = False
            for p, qs in enumerate(succ):
                if len(qs):
                    best = int(need[qs].min()) + 1
                    if best < need[p]:
                        need[p], changed = best, True
            if not changed:
                break
        return need

    def _walk(self, p: int) -> tuple:
        """``(after, split, spill)`` of every token from position ``p``;
        ``spill[t]``: the answer state of a token that completes the end
        marker (``None``: the answer refuses the rest)."""
        hit = self._walks.get(p)
        if hit is not None:
            return hit
        data, offsets = self.vocab.flat
        after, split = walk_section(data, offsets, self.vocab.grammar_token_mask, self._start,
                                    self._kmp, p)
        spill = {}
        for t in np.flatnonzero(after == -2).tolist():
            rest = self.vocab.token_bytes(t)[int(split[t]):]
            spill[t] = self._inner0 if not rest else self.inner.advance_bytes(self._inner0, rest)
        with self._lock:
            return self._walks.setdefault(p, (after, split, spill))

    def _left_after(self, count: int) -> int | None:
        """Tokens the section may still take after one more (``None``: no budget)."""
        return None if self.max_tokens is None else self.max_tokens - count - 1

    def _mask(self, p: int, count: int) -> np.ndarray:
        left = self._left_after(count)
        # past the largest finite need a budget binds alike (only the
        # positions that never finish stay out)
        key = (p, None if left is None else min(left, self._cap))
        hit = self._masks.get(key)
        if hit is not None:
            return hit
        after, _, spill = self._walk(p)
        if key[1] is not None and key[1] < 0:  # the budget is spent (never reached)
            return np.zeros(self._words, np.uint32)
        allowed = after >= 0
        if key[1] is not None:
            allowed &= self._need[np.maximum(after, 0)] <= key[1]
        for t, s in spill.items():
            allowed[t] = s is not None
        if self.end_id is not None and p >= self._ls:
            allowed[self.end_id] = True
        words = np.packbits(allowed, bitorder="little")
        words = np.concatenate([words, np.zeros((-len(words)) % 4, np.uint8)]).view(np.uint32)
        with self._lock:
            return self._masks.setdefault(key, words)

    # -- the protocol ---------------------------------------------------------------

    def initial_state(self):
        """Before the section: its start marker comes first."""
        return (_OPEN,) if self.start_id is not None else (_THINK, 0, 0)

    def check_state(self, state):
        """``state`` if it is one of this constraint's (see the class docstring)."""
        if type(state) is tuple and state:
            kind = state[0]
            if kind == _ANSWER and len(state) == 2:
                self.inner.check_state(state[1])
                return state
            if kind == _THINK and len(state) == 3 and type(state[1]) is int \
                    and 0 <= state[1] < len(self._need) and type(state[2]) is int \
                    and state[2] >= 0:
                return state
            if kind == _OPEN and len(state) == 1 and self.start_id is not None:
                return state
        raise InvalidStateError(f"{state!r} is not a state of this reasoning constraint")

    def advance(self, state, token_id: int):
        """The state after ``token_id``, or ``None`` if it is not allowed."""
        state = self.check_state(state)
        t = token_id
        if t.__class__ is not int or not 0 <= t < len(self.vocab):
            t = check_token_id(token_id, len(self.vocab))
        kind = state[0]
        if kind == _ANSWER:
            nxt = self.inner.advance(state[1], t)
            return None if nxt is None else (_ANSWER, nxt)
        if kind == _OPEN:
            return (_THINK, 0, 1) if t == self.start_id else None
        _, p, count = state
        left = self._left_after(count)
        if left is not None and left < 0:
            return None
        if t == self.end_id and p >= self._ls:
            return (_ANSWER, self._inner0)
        after, _, spill = self._walk(p)
        a = int(after[t])
        if a == -2:
            s = spill[t]
            return None if s is None else (_ANSWER, s)
        if a < 0 or (left is not None and self._need[a] > left):
            return None
        return (_THINK, a, count + 1)

    def is_accepting(self, state) -> bool:
        """Whether the answer is complete (never inside the section)."""
        state = self.check_state(state)
        return state[0] == _ANSWER and self.inner.is_accepting(state[1])

    def is_terminated(self, state) -> bool:
        """Whether the answer ended with EOS."""
        state = self.check_state(state)
        return state[0] == _ANSWER and self.inner.is_terminated(state[1])

    def fill_bitmask(self, state, bitmask, row: int = 0) -> None:
        """Write the allowed tokens of ``state`` into row ``row`` of ``bitmask``."""
        state = self.check_state(state)
        if state[0] == _ANSWER:
            self.inner.fill_bitmask(state[1], bitmask, row)
            return
        target, row = check_bitmask(bitmask, self._words, row)
        if state[0] == _OPEN:
            words = np.zeros(self._words, np.uint32)
            words[self.start_id >> 5] = np.uint32(1 << (self.start_id & 31))
        else:
            words = self._mask(state[1], state[2])
        write_row(target, row, words)

    def memory_bytes(self) -> int:
        """The bytes this constraint holds, roughly: the wrapped constraint's
        (:func:`~constrain.cache.held_bytes`), the section's walks (two arrays
        over the vocabulary per marker position) and its masks."""
        walks = len(self._walks) * (self.vocab.flat[1].itemsize + 8) * len(self.vocab)
        return held_bytes(self.inner) + walks + 4 * self._words * len(self._masks)

    def has_cached_mask(self, state) -> bool:
        """Whether filling ``state``'s mask is a copy (the section's masks once
        walked, the answer's as the wrapped constraint says)."""
        state = self.check_state(state)
        if state[0] == _ANSWER:
            return self.inner.has_cached_mask(state[1])
        if state[0] == _OPEN:
            return True
        left = self._left_after(state[2])
        key = (state[1], None if left is None else min(left, self._cap))
        return key in self._masks

    def fill_cached_bitmask(self, state, bitmask, row: int = 0) -> bool:
        """:meth:`fill_bitmask` if :meth:`has_cached_mask`; returns whether it did."""
        if not self.has_cached_mask(state):
            return False
        self.fill_bitmask(state, bitmask, row)
        return True

    def advance_bytes(self, state, data: bytes):
        """The state after ``data`` (the section's bytes, then the answer's).
        Token budgets count tokens: bytes do not spend them."""
        state = self.check_state(state)
        if state[0] == _OPEN:
            return None if data else state  # a special token is not bytes
        if state[0] == _ANSWER:
            nxt = self.inner.advance_bytes(state[1], data)
            return None if nxt is None else (_ANSWER, nxt)
        _, p, count = state
        ls, le = self._ls, self._kmp.shape[0] - 1
        for i, b in enumerate(data):
            if p < ls:
                if b != self._start[p]:
                    return None
                p += 1
                continue
            m = int(self._kmp[p - ls, b])
            if m == le:
                nxt = self.inner.advance_bytes(self._inner0, bytes(data[i + 1:]))
                return None if nxt is None else (_ANSWER, nxt)
            p = ls + m
        return (_THINK, p, count)

    @property
    def byte_steps_are_tokens(self) -> bool:
        """The wrapped constraint's (the section's own budget counts tokens
        only: bytes do not spend it)."""
        return self.inner.byte_steps_are_tokens

    def allowed_bytes(self, state) -> np.ndarray:
        """``[256]`` bool: the bytes :meth:`advance_bytes` takes next -- the
        start marker's next byte where it is spelled as text, every byte in the
        section (free text: a byte that completes the end marker leads into
        the answer, which takes the empty rest), the answer's own after it;
        none before a special start token (see :meth:`allows_token_reference`)."""
        state = self.check_state(state)
        kind = state[0]
        if kind == _ANSWER:
            return self.inner.allowed_bytes(state[1])
        out = np.zeros(256, dtype=np.bool_)
        if kind == _THINK:
            p = state[1]
            if p < self._ls:
                out[int(self._start[p])] = True
            else:
                out[:] = True
        return out

    def allows_token_reference(self, state) -> bool:
        """Whether a special token may come next, which no byte spells: the
        start marker before the section, a special end marker inside it, and
        the answer's own (jump-forward stops there)."""
        state = self.check_state(state)
        kind = state[0]
        if kind == _ANSWER:
            refs = getattr(self.inner, "allows_token_reference", None)
            return bool(refs is not None and refs(state[1]))
        if kind == _OPEN:
            return True
        return self.end_id is not None and state[1] >= self._ls

    # -- the output -----------------------------------------------------------------

    def split_output(self, text: str) -> tuple[str, str]:
        """``(reasoning, answer)`` of an output: the section's free text (the
        markers left out) and what follows the end marker (``answer`` is
        ``""`` while the section is open)."""
        body = text[len(self.start):] if self.start and text.startswith(self.start) else text
        i = body.find(self.end)
        return (body, "") if i < 0 else (body[:i], body[i + len(self.end):])

    @property
    def output_type(self):
        """The wrapped constraint's output type, reading the answer only
        (``None`` when it has none)."""
        inner = getattr(self.inner, "output_type", None)
        return None if inner is None else _AnswerOutput(inner, self)


class _AnswerOutput:
    """An output type that parses the answer part of a reasoning output."""

    def __init__(self, inner, constraint: ReasoningConstraint):
        self.inner, self.constraint = inner, constraint

    def parse(self, text):
        """The inner output type's value of the answer."""
        if isinstance(text, bytes):
            text = text.decode("utf-8")
        return self.inner.parse(self.constraint.split_output(text)[1])
