"""Byte DFA × vocabulary → token masks and token transitions.

For every state of a byte DFA, one walk over the :class:`TokenTrie` (a numba
kernel) yields the allowed-token bitmask row and the sparse map token → next
state. Rows are computed for all states at once when they fit the memory budget
(``max_mask_bytes``), else on first visit and kept in an LRU pool of that size:
either way ``fill_bitmask`` on a state seen before is a copy of one row.

Soundness at the token level: a token is allowed only if some sequence of tokens
of this vocabulary completes the string. The byte DFA is first restricted to the
bytes that occur in tokens (SmolLM2, for one, has no token holding byte 0x04); when
every such byte is also a one-byte token (true of real byte-level vocabularies)
the restricted DFA's liveness is exactly token-level liveness. Otherwise (small
test vocabularies) liveness is recomputed over the token transitions and tokens
into token-dead states are removed.
"""

from __future__ import annotations

import operator
import threading
import time
from collections import OrderedDict

import numpy as np

from constrain.cache import check_budget
from constrain.errors import GrammarTooComplexError, InvalidStateError
from constrain.automata.deadline import Deadline, ready
from constrain.regular.token_kernels import coreachable_states, token_transitions
from constrain.automata.byte_dfa import ByteDFA
from constrain.vocab.trie import TokenTrie
from constrain.vocab.vocabulary import Vocabulary

DEFAULT_MAX_MASK_BYTES = 256 * 1024 * 1024
_NO_EOS = np.zeros(0, dtype=np.int64)
_ROW_ALIGN = 64  # bytes


def _aligned_rows(n: int, words: int) -> np.ndarray:
    """A zeroed ``(n, words)`` uint32 array whose rows each start on a 64-byte
    boundary: copying a row into a bitmask (which torch aligns to 64 bytes) is then
    ~7% faster on a 25 KB o200k row than from a misaligned source."""
    stride = -(-words * 4 // _ROW_ALIGN) * _ROW_ALIGN
    raw = np.zeros(n * stride + _ROW_ALIGN, dtype=np.uint8)
    off = (-raw.ctypes.data) % _ROW_ALIGN
    padded = raw[off:off + n * stride].view(np.uint32).reshape(n, stride // 4)
    return padded[:, :words]


class TokenAutomaton:
    """Token-level view of a byte DFA for one vocabulary.

    Args:
        dfa: the byte DFA (state 0 dead, 1 start).
        vocab: the vocabulary.
        max_mask_bytes: memory budget for the precomputed bitmask rows, and
            apart for their token transitions (8 bytes per allowed token): past
            either, rows are computed on first visit (or, where liveness needs
            every row, :class:`~constrain.errors.GrammarTooComplexError`).
        deadline: when the precomputed rows must be done (a
            ``time.perf_counter()`` value or a
            :class:`~constrain.automata.deadline.Deadline`), checked between
            chunks of states; past it, ``GrammarTooComplexError``.

    The queries take a DFA state ``0 <= state < num_states`` (0 is the dead
    state) and raise :class:`~constrain.errors.InvalidStateError` for any other
    value: the trie walk is a numba kernel that trusts its indices, so a bad one
    must not reach it.
    """

    def __init__(self, dfa: ByteDFA, vocab: Vocabulary, *,
                 max_mask_bytes: int = DEFAULT_MAX_MASK_BYTES, deadline=None):
        max_mask_bytes = check_budget("max_mask_bytes", max_mask_bytes)
        self._base(dfa, vocab, max_mask_bytes)
        trie = self.trie
        n, words = self.num_states, self.words
        row_bytes = words * 4
        exact_liveness = not trie.spells_alphabet()
        self.eager = exact_liveness or n * row_bytes <= max_mask_bytes
        walked = None
        if self.eager:
            self._pool = _aligned_rows(n, words)
            eos = _NO_EOS if exact_liveness else self._eos
            walked = self._walk_all(eos, Deadline.of(deadline), max_mask_bytes, exact_liveness)
            # over the transitions' budget: rows on first visit instead
            self.eager = walked is not None
        if self.eager:
            indptr, toks, nexts = walked
            self.live = None  # a trimmed byte DFA: every state but 0 is live
            if exact_liveness:
                indptr, toks, nexts = self._token_liveness(indptr, toks, nexts)
                for s in np.flatnonzero(dfa.accepting & self.live):
                    self._set_eos(self._pool[s])
            self._indptr, self._toks, self._nexts = indptr, toks, nexts
            self._slot = None
        else:
            self._lazy_pool()

    def _base(self, dfa: ByteDFA, vocab: Vocabulary, max_mask_bytes: int) -> None:
        self.dfa = dfa
        self.vocab = vocab
        self.max_mask_bytes = max_mask_bytes
        self.num_states = dfa.num_states
        self.words = (len(vocab) + 31) // 32
        self._eos = vocab.eos_token_array
        self._lock = threading.Lock()

    def _lazy_pool(self) -> None:
        """Rows on first visit, in an LRU pool of ``max_mask_bytes``."""
        capacity = max(1, self.max_mask_bytes // (4 * self.words))
        self._pool = _aligned_rows(capacity, self.words)
        self._slot: OrderedDict = OrderedDict()  # state -> (slot, toks, nexts)
        self._free = list(range(capacity - 1, -1, -1))
        self.live = None

    @property
    def trie(self) -> TokenTrie:
        """The vocabulary's token trie (a loaded automaton with eager rows never
        needs it, nor builds it)."""
        return TokenTrie.of(self.vocab)

    # -- saving ----------------------------------------------------------------------

    def snapshot(self, payload) -> None:
        """Write the rows and transitions into ``payload`` (a
        :class:`constrain.persist.Payload`): eager ones whole; lazy ones not at
        all (a row is a function of its state, computed again on first visit)."""
        payload.set("max_mask_bytes", self.max_mask_bytes)
        payload.set("eager", self.eager)
        if self.eager:
            payload.put("rows", np.ascontiguousarray(self._pool))
            payload.put("indptr", self._indptr)
            payload.put("toks", self._toks)
            payload.put("nexts", self._nexts)
            payload.set("live", self.live is not None)
            if self.live is not None:
                payload.put("live", self.live)

    @classmethod
    def restore(cls, payload, dfa: ByteDFA, vocab: Vocabulary) -> "TokenAutomaton":
        """The automaton :meth:`snapshot` wrote, over ``dfa`` and ``vocab``."""
        self = cls.__new__(cls)
        self._base(dfa, vocab, check_budget("max_mask_bytes", payload.value("max_mask_bytes")))
        self.eager = payload.value("eager", bool)
        if not self.eager:
            self._lazy_pool()
            return self
        n, words = self.num_states, self.words
        rows = payload.get("rows", np.uint32, 2, width=words)
        indptr = payload.get("indptr", np.int64)
        toks, nexts = payload.get("toks", np.int32), payload.get("nexts", np.int32)
        if rows.shape[0] != n or indptr.shape[0] != n + 1 or len(toks) != len(nexts) \
                or indptr[0] != 0 or indptr[-1] != len(toks) or (np.diff(indptr) < 0).any() \
                or (len(toks) and (toks.min() < 0 or toks.max() >= len(vocab)
                                   or nexts.min() < 0 or nexts.max() >= n)):
            raise ValueError("the token transitions do not fit the automaton")
        self._pool = _aligned_rows(n, words)
        self._pool[:] = rows
        self._indptr, self._toks, self._nexts = indptr, toks, nexts
        self.live = payload.get("live", np.bool_) if payload.value("live", bool) else None
        if self.live is not None and self.live.shape[0] != n:
            raise ValueError("the liveness does not fit the automaton")
        self._slot = None
        return self

    # -- computing rows ------------------------------------------------------------

    def _walk_all(self, eos: np.ndarray, deadline, max_bytes: int, required: bool):
        """Every state's row into the pool and the CSR of their transitions,
        walked in chunks of states between which the ``deadline`` is checked;
        ``None`` once the transitions pass ``max_bytes`` (unless ``required``:
        then ``GrammarTooComplexError``)."""
        n = self.num_states
        parts = []
        total = 0
        chunk = 64  # ~40 ms of SmolLM2 walks: the deadline's granularity
        for lo in range(0, n, chunk):
            states = np.arange(lo, min(n, lo + chunk), dtype=np.int32)
            if lo == 0:
                t = self.trie
                ready(token_transitions, (self.dfa.transitions, states, t.first, t.byte, t.depth,
                                          t.skip, t.tok_start, t.tok_end, t.order, t.max_depth,
                                          self._pool[:len(states)], 0, self.dfa.accepting, eos),
                      deadline, "TokenAutomaton")
            part = self._walk(states, self._pool[lo:lo + len(states)], eos)
            parts.append(part)
            total += part[1].nbytes + part[2].nbytes
            # past the budget, or bound to pass it twice over at this rate:
            # the walks so far are wasted either way
            if total > max_bytes or (not required and total * n > 2 * max_bytes * (lo + chunk)):
                if required:
                    raise GrammarTooComplexError(
                        f"the token transitions of {n} states need more than {max_bytes} "
                        f"bytes (pass max_mask_bytes= to raise the limit)")
                return None
            if deadline is not None and time.perf_counter() > deadline:
                raise GrammarTooComplexError(
                    f"computing the token masks of {n} states exceeded the time budget "
                    f"(pass time_budget= to raise it)")
        if len(parts) == 1:
            return parts[0]
        indptr = np.zeros(n + 1, dtype=np.int64)
        k = 0
        offset = 0
        for part_ptr, toks, _ in parts:
            m = len(part_ptr) - 1
            indptr[k + 1:k + m + 1] = part_ptr[1:] + offset
            k += m
            offset += len(toks)
        return (indptr, np.concatenate([p[1] for p in parts]),
                np.concatenate([p[2] for p in parts]))

    def _walk(self, states: np.ndarray, rows: np.ndarray, eos: np.ndarray):
        t = self.trie
        return token_transitions(
            self.dfa.transitions, states, t.first, t.byte, t.depth, t.skip, t.tok_start, t.tok_end,
            t.order, t.max_depth, rows, 0, self.dfa.accepting, eos)

    def _set_eos(self, row: np.ndarray) -> None:
        for e in self._eos:
            row[e >> 5] |= np.uint32(1 << (int(e) & 31))

    def _token_liveness(self, indptr, toks, nexts):
        n = self.num_states
        live = coreachable_states(n, indptr, nexts, self.dfa.accepting.copy())
        live[0] = False
        self.live = live
        keep = live[nexts]
        src = np.repeat(np.arange(n), np.diff(indptr))
        keep &= live[src]
        if keep.all():
            return indptr, toks, nexts
        src, toks, nexts = src[keep], toks[keep], nexts[keep]
        indptr = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(np.bincount(src, minlength=n), out=indptr[1:])
        self._pool[:] = 0
        stride = self._pool.strides[0] // 4
        flat = np.lib.stride_tricks.as_strided(self._pool, shape=(len(self._pool) * stride,), strides=(4,))
        np.bitwise_or.at(flat, src * stride + (toks >> 5),
                         (np.uint32(1) << (toks & 31).astype(np.uint32)))
        return indptr, toks, nexts

    def _lazy(self, state: int):
        # the caller holds self._lock: a slot is reused on eviction, so a row is
        # read (copied) under the same lock that may overwrite it
        entry = self._slot.get(state)
        if entry is not None:
            self._slot.move_to_end(state)
            return entry
        if self._free:
            slot = self._free.pop()
        else:
            _, (slot, _, _) = self._slot.popitem(last=False)
        row = self._pool[slot:slot + 1]
        row[:] = 0
        _, toks, nexts = self._walk(np.array([state], dtype=np.int32), row, self._eos)
        entry = self._slot[state] = (slot, toks, nexts)
        return entry

    # -- queries -----------------------------------------------------------------

    def _check(self, state) -> int:
        # operator.index: numpy integers are fine, floats are not
        try:
            s = operator.index(state)
        except TypeError:
            s = -1
        if not 0 <= s < self.num_states:
            raise InvalidStateError(f"{state!r} is not a state of this automaton "
                                    f"(0..{self.num_states - 1})")
        return s

    def row(self, state: int) -> np.ndarray:
        """The uint32 bitmask row of ``state`` (EOS bits set when accepting): a
        view of the eager pool (do not modify), or with lazy rows a copy, which
        no later eviction can overwrite (safe under concurrent use)."""
        state = self._check(state)
        if self._slot is None:
            return self._pool[state]
        with self._lock:
            return self._pool[self._lazy(state)[0]].copy()

    def is_computed(self, state: int) -> bool:
        """Whether ``state``'s row is computed (eager rows: always)."""
        state = self._check(state)
        return self._slot is None or state in self._slot

    @property
    def pool(self) -> np.ndarray:
        """The array the rows live in (eager rows are views into it; lazy ones
        are slots reused on eviction)."""
        return self._pool

    def transitions(self, state: int) -> tuple[np.ndarray, np.ndarray]:
        """``(tokens, next_states)`` of the grammar tokens allowed in ``state``
        (EOS not included)."""
        state = self._check(state)
        if self._slot is None:
            a, b = self._indptr[state], self._indptr[state + 1]
            return self._toks[a:b], self._nexts[a:b]
        with self._lock:
            _, toks, nexts = self._lazy(state)
        return toks, nexts

    def is_live(self, state: int) -> bool:
        """Whether some token sequence from ``state`` completes a string."""
        state = self._check(state)
        if self.live is not None:
            return bool(self.live[state])
        return state != 0
