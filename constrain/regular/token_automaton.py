"""Byte DFA × vocabulary → token masks and token transitions.

For every state of a byte DFA, one walk over the :class:`TokenTrie` (a numba
kernel) yields the allowed-token bitmask row and the sparse map token → next
state. A state's row is computed on its first visit (a walk visits few of the
states: a 5-token word at most 6 of the 42 of ``[a-z]{3,40}``), unless walking
every state at compile time is estimated to cost less than a few first visits
would (short patterns over narrow byte classes), or token-level liveness needs
every row. Rows and their
transitions count against one budget, ``max_mask_bytes``; lazily computed ones
are evicted oldest first past it. Either way ``fill_bitmask`` on a state seen
before is a copy of one row.

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
import sys
import threading
from collections import OrderedDict

import numpy as np

from constrain.cache import check_budget
from constrain.errors import GrammarTooComplexError, InvalidStateError
from constrain.automata.deadline import Deadline, passed, ready
from constrain.regular.token_kernels import (ROW_ALIGN, ROW_SLACK, aligned_rows,
                                             coreachable_states, row_spans, token_transitions)
# row_writer's rules: rows shorter than _PACK_MIN_BYTES are plain copies, the
# others' non-zero spans are split at gaps over _SPAN_GAP bytes, at most _MAX_SPANS
from constrain.runtime.bitmask import (_MAX_SPANS, _PACK_MIN_BYTES, _SPAN_GAP, row_writer,
                                       span_writer)
from constrain.automata.byte_dfa import ByteDFA
from constrain.vocab.trie import TokenTrie
from constrain.vocab.vocabulary import Vocabulary

DEFAULT_MAX_MASK_BYTES = 256 * 1024 * 1024
_NO_EOS = np.zeros(0, dtype=np.int64)
_NO_ROWS = np.zeros(0, dtype=np.uint32)  # token_transitions allocates the rows
# Walk every state at compile time when the trie nodes under the bytes the states
# can take number at most this (~60 us of walking on this machine): one kernel
# call for all then costs less than the ~6 us of Python and dispatch that each
# first visit pays, as in [0-9]{5}. The estimate is a bound (the walk prunes
# below the first byte), extrapolated from the first 8 states by the walk's
# kernel itself; DFAs past _CHEAP_STATES states are walked on first visit.
_CHEAP_NODES = 40_000
_CHEAP_STATES = 512
_CHUNK = 64  # states per kernel call of a whole walk: ~40 ms of SmolLM2 walks, the deadline's granularity


def _row_buffer(n: int, words: int) -> np.ndarray:
    """A zeroed buffer for ``n`` rows of ``words`` (``token_kernels.aligned_rows``)."""
    return np.zeros(n * (-(-words // ROW_SLACK) * ROW_SLACK) + ROW_SLACK, dtype=np.uint32)


def _aligned_rows(n: int, words: int) -> np.ndarray:
    """A zeroed ``(n, words)`` uint32 array whose rows each start on a
    ``ROW_ALIGN``-byte boundary."""
    return aligned_rows(_row_buffer(n, words), words)


class TokenAutomaton:
    """Token-level view of a byte DFA for one vocabulary.

    Args:
        dfa: the byte DFA (state 0 dead, 1 start).
        vocab: the vocabulary.
        max_mask_bytes: memory budget for the bitmask rows and their token
            transitions (8 bytes per allowed token) together. Rows computed on
            first visit are evicted oldest first past it (the row being
            returned stays); when token-level liveness needs every row and
            they do not fit: :class:`~constrain.errors.GrammarTooComplexError`.
        deadline: when the rows walked at compile time must be done (a
            value of :func:`~constrain.automata.deadline.now` (the thread's CPU clock) or a
            :class:`~constrain.automata.deadline.Deadline`), checked between
            chunks of states; past it, ``GrammarTooComplexError``.
        eager: ``True``: walk every state now (if the rows and transitions fit
            the budget, else on first visit); ``False``: on first visit;
            ``None`` (default): now only where that is cheap (see the module).
            Small vocabularies that lack a one-byte token for some byte they
            use are always walked whole (their liveness needs every row).

    ``eager`` is then whether every row is computed. The queries take a DFA
    state ``0 <= state < num_states`` (0 is the dead state) and raise
    :class:`~constrain.errors.InvalidStateError` for any other value: the trie
    walk is a numba kernel that trusts its indices, so a bad one must not
    reach it.

    Thread safety: a row is computed outside the lock (the kernel releases
    the GIL, so threads walk different states at once) and published under it;
    published rows, transitions and writers are never modified (eviction only
    drops them), so readers need no lock.
    """

    def __init__(self, dfa: ByteDFA, vocab: Vocabulary, *,
                 max_mask_bytes: int = DEFAULT_MAX_MASK_BYTES, deadline=None,
                 eager: bool | None = None):
        max_mask_bytes = check_budget("max_mask_bytes", max_mask_bytes)
        self._base(dfa, vocab, max_mask_bytes)
        trie = self.trie
        n = self.num_states
        exact_liveness = not trie.spells_alphabet()
        max_nodes = -1
        if exact_liveness:
            eager = True
        elif eager is None:
            # the walk's kernel estimates its cost first (see _CHEAP_NODES)
            eager, max_nodes = n <= _CHEAP_STATES, _CHEAP_NODES
        rows_bytes = n * self._row_bytes
        walked = None
        if exact_liveness or (eager and rows_bytes <= max_mask_bytes):
            if rows_bytes > max_mask_bytes:
                raise GrammarTooComplexError(
                    f"the token masks of {n} states need {rows_bytes} bytes, more than "
                    f"max_mask_bytes={max_mask_bytes}")
            eos = _NO_EOS if exact_liveness else self._eos
            walked = self._walk_all(True, eos, Deadline.of(deadline), max_mask_bytes - rows_bytes,
                                    exact_liveness, max_nodes)
        self.eager = walked is not None
        if self.eager:
            self._pool, indptr, toks, nexts, spans = walked
            self._spans = spans if len(spans) else None
            self.live = None  # a trimmed byte DFA: every state but 0 is live
            if exact_liveness:
                self._spans = None  # the rows change
                indptr, toks, nexts = self._token_liveness(indptr, toks, nexts)
                for s in np.flatnonzero(dfa.accepting & self.live):
                    self._set_eos(self._pool[s])
            self._indptr, self._toks, self._nexts = indptr, toks, nexts
            if n <= _CHUNK and 4 * self.words < _PACK_MIN_BYTES:
                self._dense_writers()
        else:
            self._lazy_rows()

    def _dense_writers(self) -> None:
        """Every state's writer at once, when the rows are plain copies
        (``bitmask.row_writer``: rows under its packing threshold) of one
        contiguous pool: slices of one memoryview. A first fill made each
        through numpy indexing and a Python call chain (~3-5 us a state on
        a cold cache; [0-9]{5} visits 6 of its 7)."""
        try:
            mv = memoryview(self._pool).cast("B")
        except TypeError:  # rows padded to the alignment: not one block
            return
        size = 4 * self.words
        self.writers[:self.num_states] = [mv[k:k + size] for k in range(0, len(mv), size)]

    def _base(self, dfa: ByteDFA, vocab: Vocabulary, max_mask_bytes: int) -> None:
        self.dfa = dfa
        self.vocab = vocab
        self.max_mask_bytes = max_mask_bytes
        self.num_states = dfa.num_states
        self.words = (len(vocab) + 31) // 32
        # a row's memory: its words padded to the 64-byte alignment
        self._row_bytes = -(-self.words * 4 // ROW_ALIGN) * ROW_ALIGN
        self._eos = vocab.eos_token_array
        self.live = None
        #: per state, how ``fill_bitmask`` writes its row (``bitmask.row_writer``),
        #: ``None`` until made; ``writers[num_states]`` is the all-zero row's
        self.writers: list = [None] * (self.num_states + 1)
        # rows the bitmask writes with pack_into (row_writer): the walk kernel
        # finds their spans as it writes them (a numpy scan per first fill was
        # ~35 us of a cold o200k first walk's each state); byte order as
        # row_writer reads the words
        self._max_spans = _MAX_SPANS if (4 * self.words >= _PACK_MIN_BYTES
                                         and sys.byteorder == "little") else 0
        self._spans = None

    def _lazy_rows(self) -> None:
        """Rows on first visit, in a budget of ``max_mask_bytes``."""
        self.eager = False
        # guards the entries (eager rows never change: no lock, ~10 us of a
        # cold compile)
        self._lock = threading.Lock()
        self._pool = self._indptr = self._toks = self._nexts = None
        # state -> (row, toks, nexts, writer, bytes), oldest first
        self._entries: OrderedDict = OrderedDict()
        self._bytes = 0

    @property
    def trie(self) -> TokenTrie:
        """The vocabulary's token trie (a loaded automaton with eager rows never
        needs it, nor builds it)."""
        return TokenTrie.of(self.vocab)

    # -- saving ----------------------------------------------------------------------

    def snapshot(self, payload) -> None:
        """Write the rows and transitions into ``payload`` (a
        :class:`constrain.persist.Payload`): eager ones whole; lazy ones as the
        rows computed so far (each a function of its state: whatever was not
        saved is computed again on first visit)."""
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
            return
        with self._lock:
            entries = list(self._entries.items())
        states = np.array([s for s, _ in entries], dtype=np.int32)
        rows = np.zeros((len(entries), self.words), dtype=np.uint32)
        for j, (_, e) in enumerate(entries):
            rows[j] = e[0]
        indptr, toks, nexts = _csr([e[1] for _, e in entries], [e[2] for _, e in entries])
        payload.put("states", states)
        payload.put("rows", rows)
        payload.put("indptr", indptr)
        payload.put("toks", toks)
        payload.put("nexts", nexts)

    @classmethod
    def restore(cls, payload, dfa: ByteDFA, vocab: Vocabulary) -> "TokenAutomaton":
        """The automaton :meth:`snapshot` wrote, over ``dfa`` and ``vocab``."""
        self = cls.__new__(cls)
        self._base(dfa, vocab, check_budget("max_mask_bytes", payload.value("max_mask_bytes")))
        self.eager = payload.value("eager", bool)
        n, words = self.num_states, self.words
        if not self.eager:
            self._lazy_rows()
            states = payload.get("states", np.int32)
            rows, (indptr, toks, nexts) = self._restore_csr(payload, len(states))
            if len(states) and (states.min() < 1 or states.max() >= n
                                or len(np.unique(states)) != len(states)):
                raise ValueError("the saved rows name states outside the automaton")
            for j, s in enumerate(states.tolist()):
                a, b = indptr[j], indptr[j + 1]
                row = _aligned_rows(1, words)[0]
                row[:] = rows[j]
                self._publish(s, row, toks[a:b].copy(), nexts[a:b].copy())
            return self
        rows, (indptr, toks, nexts) = self._restore_csr(payload, n)
        self._pool = _aligned_rows(n, words)
        self._pool[:] = rows
        self._indptr, self._toks, self._nexts = indptr, toks, nexts
        self.live = payload.get("live", np.bool_) if payload.value("live", bool) else None
        if self.live is not None and self.live.shape[0] != n:
            raise ValueError("the liveness does not fit the automaton")
        return self

    def _restore_csr(self, payload, m: int):
        """The saved ``rows`` of ``m`` states and their CSR of transitions,
        checked to fit the automaton (``ValueError`` else)."""
        rows = payload.get("rows", np.uint32, 2, width=self.words)
        indptr = payload.get("indptr", np.int64)
        toks, nexts = payload.get("toks", np.int32), payload.get("nexts", np.int32)
        if rows.shape[0] != m or indptr.shape[0] != m + 1 or len(toks) != len(nexts) \
                or indptr[0] != 0 or indptr[-1] != len(toks) or (np.diff(indptr) < 0).any() \
                or (len(toks) and (toks.min() < 0 or toks.max() >= len(self.vocab)
                                   or nexts.min() < 0 or nexts.max() >= self.num_states)):
            raise ValueError("the token transitions do not fit the automaton")
        return rows, (indptr, toks, nexts)

    # -- computing rows ------------------------------------------------------------

    def _walk_all(self, keep: bool, eos: np.ndarray, deadline, max_bytes: int, required: bool,
                  max_nodes: int = -1):
        """Every state's row and the CSR of their transitions, walked in chunks
        of states between which the ``deadline`` is checked: ``(rows, indptr,
        tokens, nexts, spans)`` (``keep`` false: the rows are not kept, ``rows``
        is ``None``; ``spans``: ``token_kernels.row_spans`` per state, or no
        rows). ``None`` once the transitions pass ``max_bytes`` (unless
        ``required``: then ``GrammarTooComplexError``), or when ``max_nodes >=
        0`` and the walk is estimated to visit more trie nodes per state
        (``token_kernels.token_transitions``)."""
        n = self.num_states
        parts = []
        total = 0
        rows = None
        # one chunk: the kernel allocates the rows
        buf = _row_buffer(n, self.words) if keep and n > _CHUNK else _NO_ROWS
        for lo in range(0, n, _CHUNK):
            hi = min(n, lo + _CHUNK)
            if not keep and n > _CHUNK:
                buf = _row_buffer(hi - lo, self.words)
            args = self._walk_args(lo, hi, buf, lo if keep else 0, eos, max_nodes if lo == 0 else -1)
            if lo == 0:
                ready(token_transitions, args, deadline, "TokenAutomaton")
            rows, *part = token_transitions(*args)
            if not len(part[0]):  # estimated dear: rows on first visit
                return None
            parts.append(part)
            total += part[1].nbytes + part[2].nbytes
            # past the budget, or bound to pass it twice over at this rate:
            # the walks so far are wasted either way
            if total > max_bytes or (not required and total * n > 2 * max_bytes * (lo + _CHUNK)):
                if required:
                    raise GrammarTooComplexError(
                        f"the token masks and transitions of {n} states need more than "
                        f"{self.max_mask_bytes} bytes (pass max_mask_bytes= to raise the limit)")
                return None
            if deadline is not None and passed(deadline):
                raise GrammarTooComplexError(
                    f"computing the token masks of {n} states exceeded the time budget "
                    f"(pass time_budget= to raise it)")
        if not keep:
            rows = None
        if len(parts) == 1:
            return (rows, *parts[0])
        indptr = np.zeros(n + 1, dtype=np.int64)
        k = 0
        offset = 0
        for part_ptr, toks, _, _ in parts:
            m = len(part_ptr) - 1
            indptr[k + 1:k + m + 1] = part_ptr[1:] + offset
            k += m
            offset += len(toks)
        return (rows, indptr, np.concatenate([p[1] for p in parts]),
                np.concatenate([p[2] for p in parts]), np.concatenate([p[3] for p in parts]))

    def _walk_args(self, lo: int, hi: int, buf: np.ndarray, row0: int, eos: np.ndarray,
                   max_nodes: int) -> tuple:
        """The arguments of ``token_kernels.token_transitions`` for states
        ``lo..hi-1`` into ``buf``'s rows from ``row0``."""
        t = self.trie
        below = self.vocab.derived("first_byte_nodes", lambda: _first_byte_nodes(t))
        return (self.dfa.transitions, lo, hi, t.first, t.byte, t.depth, t.skip, t.tok_start,
                t.tok_end, t.order, t.max_depth, buf, row0, self.words, self.dfa.accepting, eos,
                below, max_nodes, _SPAN_GAP, self._max_spans)

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

    def _entry(self, state: int):
        """``(row, toks, nexts, writer, bytes)`` of a lazily computed ``state``,
        computing it on first visit."""
        entry = self._entries.get(state)
        if entry is not None:
            with self._lock:
                if state in self._entries:
                    self._entries.move_to_end(state)
            return entry
        # outside the lock: the kernel releases the GIL, so threads visiting
        # different states walk at once (two visiting the same one both walk it,
        # and the first to publish wins: the rows are equal)
        rows, _, toks, nexts, spans = token_transitions(
            *self._walk_args(state, state + 1, _NO_ROWS, 0, self._eos, -1))
        # copies: the kernel's slices hold a buffer of one slot per token
        return self._publish(state, rows[0], toks.copy(), nexts.copy(),
                             spans[0] if len(spans) else None)

    def _publish(self, state: int, row: np.ndarray, toks: np.ndarray, nexts: np.ndarray,
                 spans: np.ndarray | None = None):
        for a in (row, toks, nexts):
            a.flags.writeable = False
        writer = mask_writer(row, spans)
        size = self._row_bytes + toks.nbytes + nexts.nbytes
        if writer.__class__ is tuple:
            size += sum(map(len, writer[1]))
        with self._lock:
            entry = self._entries.get(state)
            if entry is not None:
                return entry
            entry = self._entries[state] = (row, toks, nexts, writer, size)
            self._bytes += size
            self.writers[state] = writer
            while self._bytes > self.max_mask_bytes and len(self._entries) > 1:
                old, e = self._entries.popitem(last=False)
                self._bytes -= e[4]
                self.writers[old] = None
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

    def memory_bytes(self) -> int:
        """The bytes of the rows and transitions made so far (eager: all of
        them; lazy: those of the states visited, within ``max_mask_bytes``)."""
        if not self.eager:
            return self._bytes
        n = self._pool.nbytes
        if self._indptr is not None:  # (transitions may be left to first use)
            n += self._indptr.nbytes + self._toks.nbytes + self._nexts.nbytes
        return n

    def row(self, state: int) -> np.ndarray:
        """The uint32 bitmask row of ``state`` (EOS bits set when accepting),
        read-only or a view of the eager rows (do not modify): never changed
        after, not even by an eviction (safe under concurrent use)."""
        state = self._check(state)
        if self.eager:
            return self._pool[state]
        return self._entry(state)[0]

    def writer(self, state: int):
        """How ``fill_bitmask`` writes ``state``'s row (``bitmask.row_writer``),
        computing the row on first visit; ``state == num_states``: the
        all-zero row's. Kept in :attr:`writers`."""
        if state == self.num_states:
            w = self.writers[state] = row_writer(memoryview(bytes(4 * self.words)))
            return w
        state = self._check(state)
        if not self.eager:
            return self._entry(state)[3]
        w = self.writers[state] = mask_writer(self._pool[state],
                                              None if self._spans is None else self._spans[state])
        return w

    def is_computed(self, state: int) -> bool:
        """Whether ``state``'s row is computed (eager rows: always)."""
        state = self._check(state)
        return self.eager or state in self._entries

    def transitions(self, state: int) -> tuple[np.ndarray, np.ndarray]:
        """``(tokens, next_states)`` of the grammar tokens allowed in ``state``
        (EOS not included)."""
        state = self._check(state)
        if self.eager:
            a, b = self._indptr[state], self._indptr[state + 1]
            return self._toks[a:b], self._nexts[a:b]
        entry = self._entry(state)
        return entry[1], entry[2]

    def table(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(indptr, tokens, next_states)``: the transitions of every state as
        CSR (those of state ``s`` at ``indptr[s]:indptr[s + 1]``), for the
        analyses that need all of them at once. Eager rows: the compile's
        arrays; lazy ones: walked now (one kernel call per 64 states; the rows
        themselves are not kept), under ``max_mask_bytes``, past which
        :class:`~constrain.errors.GrammarTooComplexError`."""
        if self.eager:
            return self._indptr, self._toks, self._nexts
        return self._walk_all(False, self._eos, None, self.max_mask_bytes, True)[1:4]

    def is_live(self, state: int) -> bool:
        """Whether some token sequence from ``state`` completes a string."""
        state = self._check(state)
        if self.live is not None:
            return bool(self.live[state])
        return state != 0


def mask_writer(row: np.ndarray, spans: np.ndarray | list | None = None):
    """``bitmask.row_writer`` of the uint32 mask row ``row`` (C-contiguous),
    from its spans as ``token_kernels.row_spans`` finds them: ``spans`` (an
    array or a list) when a walk kernel found them already, else that
    kernel's here. Its one pass over the words costs a few us on a 25 KB
    o200k row where row_writer's numpy scan costs 20-30 us on a first walk's
    cold caches (a grammar makes one writer per state it fills)."""
    mv = memoryview(row).cast("B")
    if spans is None:
        if len(mv) < _PACK_MIN_BYTES:
            return mv
        spans = np.empty(2 * _MAX_SPANS + 1, np.int64)
        row_spans(row, _SPAN_GAP, _MAX_SPANS, spans)
    count, *ends = spans.tolist() if isinstance(spans, np.ndarray) else spans
    if count < 0:
        return mv
    return span_writer(mv, ends[0:2 * count:2], ends[1:2 * count:2])


def _first_byte_nodes(trie: TokenTrie) -> np.ndarray:
    """Per byte, the trie nodes of the tokens that start with it."""
    first = trie.first
    return np.where(first >= 0, trie.skip[np.maximum(first, 0)] - first, 0)


def _csr(toks: list, nexts: list):
    """The CSR ``(indptr, tokens, next_states)`` of per-state arrays."""
    indptr = np.zeros(len(toks) + 1, dtype=np.int64)
    np.cumsum([len(t) for t in toks], out=indptr[1:])
    if not toks:
        return indptr, np.zeros(0, np.int32), np.zeros(0, np.int32)
    return indptr, np.concatenate(toks), np.concatenate(nexts)
