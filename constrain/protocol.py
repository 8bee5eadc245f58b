"""The constraint protocol that every compiled grammar implements and every search
driver uses.

A constraint is a deterministic automaton over token ids. Its states are immutable
and hashable values (for regexes, plain ``int``), so a search can fork thousands of
them for free and use them as dictionary keys. All mutation lives in
:class:`constrain.Matcher`, the stateful wrapper for serving engines.

Semantics (for every implementation):

* ``advance(state, t)`` is not ``None`` iff the bytes so far followed by the bytes of
  ``t`` are a prefix of some string of the language (*sound and complete*), or ``t``
  is an EOS id and ``is_accepting(state)``.
* Advancing with an EOS id gives a state for which ``is_terminated`` is true; nothing
  is allowed after it.
* ``fill_bitmask`` sets bit ``t % 32`` of word ``t // 32`` iff ``advance(state, t)``
  is not ``None``. Special tokens and padding ids are never allowed.

Misuse is refused, never a crash or a guess (every implementation):

* a state that is not one of this constraint's (another type, out of range, a
  state another grammar made that this one cannot have made) raises
  :class:`~constrain.errors.InvalidStateError` from every method that takes a
  state; :meth:`Constraint.check_state` is the check;
* so does a token id outside ``range(len(vocab))`` (negative ones included:
  they do not count from the end) or one that is not an integer
  (:func:`check_token_id`);
* a bitmask that is not a C-contiguous 2-D int32 numpy array or torch tensor
  at least ``ceil(V/32)`` words wide, or a row that is not one of its indices,
  raises :class:`~constrain.errors.BitmaskError` before anything is written
  (:func:`constrain.runtime.bitmask.check_bitmask`).
"""

from __future__ import annotations

import abc
from typing import Hashable

import numpy as np

from constrain.errors import ConstraintError, InvalidStateError, as_index
from constrain.vocab.vocabulary import Vocabulary

State = Hashable


def check_token_id(token_id, vocab_size: int) -> int:
    """``token_id`` as an ``int``, checked to be a token of a vocabulary of
    ``vocab_size`` ids (numpy and torch integers are fine); anything else --
    a negative id, one past the end, a bool, a float -- raises
    :class:`~constrain.errors.InvalidStateError`. Implementations call it when
    the id is not a plain non-negative ``int``, which keeps their fast path one
    type test."""
    t = as_index(token_id, lambda: InvalidStateError(f"a token id is an integer, not {token_id!r}"))
    if not 0 <= t < vocab_size:
        raise InvalidStateError(f"token id {t} is outside the vocabulary of {vocab_size}")
    return t


def as_bytes(data) -> bytes:
    """``data`` (bytes, bytearray, memoryview) as bytes; anything else is no
    byte string (a ``str`` would be read as characters):
    :class:`~constrain.errors.ConstraintError`."""
    if data.__class__ is bytes:
        return data
    if isinstance(data, (bytearray, memoryview)):
        return bytes(data)
    raise ConstraintError(f"expected bytes, not {type(data).__name__}")


def text_bytes(text) -> bytes | None:
    """``text`` (a ``str``, or bytes-like) as UTF-8 bytes; ``None`` for a
    ``str`` that UTF-8 cannot encode (a lone surrogate: in no language)."""
    if isinstance(text, str):
        try:
            return text.encode("utf-8")
        except UnicodeEncodeError:
            return None
    return as_bytes(text)


class Constraint(abc.ABC):
    """Abstract base of compiled grammars (regex, JSON Schema, Lark grammar)."""

    #: the vocabulary the grammar was compiled against
    vocab: Vocabulary

    @abc.abstractmethod
    def initial_state(self) -> State:
        """The state before any token has been generated."""

    def check_state(self, state: State) -> State:
        """``state`` if it is a state of this constraint (normalised to its
        canonical type), else :class:`~constrain.errors.InvalidStateError`.
        Every method that takes a state runs this check (or an equivalent fast
        one); this default, for constraints that cannot tell, accepts
        anything."""
        return state

    @abc.abstractmethod
    def advance(self, state: State, token_id: int) -> State | None:
        """The state after ``token_id``, or ``None`` if the token is not allowed."""

    @abc.abstractmethod
    def is_accepting(self, state: State) -> bool:
        """Whether the bytes so far form a complete string of the language (so EOS is
        allowed)."""

    @abc.abstractmethod
    def is_terminated(self, state: State) -> bool:
        """Whether the state was reached through EOS; nothing is allowed after it."""

    @abc.abstractmethod
    def fill_bitmask(self, state: State, bitmask, row: int = 0) -> None:
        """Write the allowed tokens of ``state`` into row ``row`` of ``bitmask``, an
        int32 array or torch tensor of shape ``(batch, ceil(V/32))``."""

    def has_cached_mask(self, state: State) -> bool:
        """Whether :meth:`fill_bitmask` of ``state`` is a copy of a mask already
        computed (microseconds), not a first visit; a batch filler
        (:class:`constrain.BatchMatcher`) copies those rows itself and hands the
        others to its threads. Precomputed masks: always ``True``."""
        return True

    def fill_cached_bitmask(self, state: State, bitmask, row: int = 0) -> bool:
        """:meth:`fill_bitmask` if :meth:`has_cached_mask` (one call for both: a
        batch filler's per-row cost); returns whether it filled the row."""
        self.fill_bitmask(state, bitmask, row)
        return True

    def allowed_token_ids(self, state: State) -> np.ndarray:
        """The allowed token ids of ``state``, sorted, as an int64 numpy array."""
        from constrain.runtime.bitmask import allocate_bitmask, bitmask_to_ids

        bm = allocate_bitmask(1, len(self.vocab), backend="numpy")
        self.fill_bitmask(state, bm, 0)
        return bitmask_to_ids(bm[0], len(self.vocab))

    def advance_bytes(self, state: State, data: bytes) -> State | None:
        """The state after the bytes ``data``, which need not end on a token
        boundary, or ``None`` if no string of the language continues the output
        with them. Jump-forward decoding (:meth:`constrain.Matcher.find_jump_forward_string`)
        walks bytes with it; a constraint that cannot says so."""
        raise NotImplementedError(f"{type(self).__name__} cannot advance by bytes")

    def allowed_bytes(self, state: State) -> np.ndarray:
        """``[256]`` bool: the bytes that may come next (``advance_bytes(state,
        bytes([b]))`` is not ``None``). EOS is not a byte: see
        :meth:`is_accepting`."""
        raise NotImplementedError(f"{type(self).__name__} cannot list its next bytes")

    def allows_token_reference(self, state: State) -> bool:
        """Whether a token reference (a grammar's ``<[id]>``, ``<|name|>``) may
        match the next token: then the bytes of :meth:`allowed_bytes` are not
        all that may follow (jump-forward stops there). ``False`` for a
        constraint without token references (a regex); the state is checked."""
        self.check_state(state)
        return False

    @property
    def byte_steps_are_tokens(self) -> bool:
        """Whether :meth:`advance_bytes` counts each call as one token (a
        grammar's ``rule[max_tokens=N]`` budgets): a walk byte by byte then
        spends a token per byte, and prunes paths a real tokenization keeps
        (jump-forward walks such a constraint's bytes in one call instead).
        ``False`` here."""
        return False

    def save(self, path) -> None:
        """Write this constraint, as it is now (masks computed so far
        included), to the file ``path``, atomically, for
        :func:`constrain.load` in any process with the same vocabulary and
        Trellis (see ``docs/persistence.md``). Raises
        :class:`~constrain.errors.ConstraintError` for a kind Trellis cannot
        save."""
        from constrain.persist import save

        save(self, path)

    def advance_many(self, state: State, token_ids) -> State | None:
        """Advance through a sequence of tokens; ``None`` as soon as one is refused."""
        for t in token_ids:
            # not int(t), which would take 97.5 for 97
            state = self.advance(state, t if t.__class__ is int else
                                 check_token_id(t, len(self.vocab)))
            if state is None:
                return None
        return state

    def accepts_tokens(self, token_ids) -> bool:
        """Whether the token sequence spells a complete string of the language (a
        trailing EOS is allowed)."""
        state = self.advance_many(self.initial_state(), token_ids)
        return state is not None and (self.is_terminated(state) or self.is_accepting(state))
