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
from dataclasses import dataclass

import numpy as np

from constrain.automata.liveness import trim_dead
from constrain.automata.minimize_kernels import trim_minimize
from constrain.automata.char_dfa import CharDFA
from constrain.automata.deadline import passed
from constrain.cache import BoundedCache, registry
from constrain.errors import GrammarTooComplexError

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
    def __init__(self, n_char_states: int, max_states: int | None):
        self.table = np.zeros((n_char_states + 1 + 64, 256), dtype=np.int32)
        self.size = n_char_states + 1
        self.memo: dict = {}
        self.max_states = max_states

    def new_state(self) -> int:
        return self.new_states(1)

    def new_states(self, count: int) -> int:
        """The first of ``count`` new states (rows of zeros)."""
        if self.max_states is not None and self.size + count > self.max_states:
            raise GrammarTooComplexError(
                f"the UTF-8 automaton needs more than {self.max_states} byte-level states "
                f"(pass max_states= to raise the limit)")
        if self.size + count > self.table.shape[0]:
            grown = np.zeros((max(2 * self.table.shape[0], self.size + count), 256), dtype=np.int32)
            grown[:self.size] = self.table[:self.size]
            self.table = grown
        self.size += count
        return self.size - count

    def continuation(self, remaining: int, spans: tuple) -> int:
        """The state reading ``remaining`` continuation bytes whose value, as an
        offset in the current block, picks the target from ``spans`` (sorted
        ``(lo, hi, target)`` offsets)."""
        key = (remaining, spans)
        s = self.memo.get(key)
        if s is not None:
            return s
        s = self.memo[key] = self.new_state()
        if remaining == 1:
            row = self.table[s]
            for lo, hi, t in spans:
                row[0x80 + lo:0x80 + hi + 1] = t
            return s
        size = 64 ** (remaining - 1)
        if len(spans) == 1 and spans[0][0] == 0 and spans[0][1] == 64 * size - 1:
            # every continuation byte leads to the same sub-block (the common "any
            # character" case): one child instead of 64 identical ones
            self.table[s, 0x80:0xC0] = self.continuation(remaining - 1, ((0, size - 1, spans[0][2]),))
            return s
        for c in range(64):
            blo, bhi = c * size, c * size + size - 1
            sub = tuple(
                (max(lo, blo) - blo, min(hi, bhi) - blo, t)
                for lo, hi, t in spans if lo <= bhi and hi >= blo
            )
            if sub:
                target = self.continuation(remaining - 1, sub)
                self.table[s, 0x80 + c] = target
        return s


def char_dfa_to_bytes(dfa: CharDFA, max_states: int | None = None,
                      deadline=None) -> ByteDFA:
    """Expand a :class:`CharDFA` into a byte DFA over UTF-8 (not yet minimised),
    raising :class:`GrammarTooComplexError` past ``max_states`` byte states or
    the ``deadline`` (a :func:`~constrain.automata.deadline.now` value: the
    thread's CPU clock; checked per state with non-ASCII transitions: each
    costs Python work per atom)."""
    n, n_atoms = dfa.table.shape
    b = _Builder(n, max_states)
    # ASCII: each byte belongs to at most one atom, so all ASCII rows are one
    # gather from the (state, atom) table; column n_atoms stands for "no atom"
    atom_of_byte = np.full(128, n_atoms, dtype=np.int64)
    wide = []
    for a, cs in enumerate(dfa.atoms):
        for lo, hi in cs.intervals:
            if lo < 0x80:
                atom_of_byte[lo:min(hi, 0x7F) + 1] = a
        wide.append(bool(cs.intervals) and cs.intervals[-1][1] >= 0x80)
    by_atom = np.zeros((n, n_atoms + 1), dtype=np.int32)
    by_atom[:, :n_atoms] = dfa.table + 1  # +1: state 0 is dead, -1 (none) becomes 0
    b.table[1:n + 1, :128] = by_atom[:, atom_of_byte]
    wide_atoms = [a for a in range(n_atoms) if wide[a]]
    if wide_atoms:
        def spans_of(q: int) -> list:
            row = dfa.table[q]
            spans = [(lo, hi, int(row[a]) + 1) for a in wide_atoms if row[a] >= 0
                     for lo, hi in dfa.atoms[a].intervals if hi >= 0x80]
            spans.sort()
            return spans

        if n > _SHAPES_FROM:
            shapes, todo = _Shapes(), None  # (spans made one state at a time)
        else:
            # a small automaton's states are made directly (finding shapes cost
            # ~1.5 us a state: a JSON string's 8 states, 42 -> 52 us), unless one
            # has a class worth a template (\w's ~700 spans: ~8 ms made directly)
            todo = [spans_of(q) for q in range(n)]
            shapes = _Shapes() if any(len(s) >= _TEMPLATE_MIN_SPANS for s in todo) else _Direct
        for q in range(n):
            _check_deadline(deadline)
            spans = spans_of(q) if todo is None else todo[q]
            if spans:
                shapes.expand(b, q + 1, spans)
    accepting = np.zeros(b.size, dtype=np.bool_)
    accepting[1:n + 1] = dfa.accepting
    return ByteDFA(b.table[:b.size].copy(), accepting)


def _check_deadline(deadline) -> None:
    if deadline is not None and passed(deadline):
        raise GrammarTooComplexError(
            "expanding the automaton to UTF-8 bytes exceeded the time budget "
            "(pass time_budget= to raise it)")


#: char DFAs with more states than this expand through :class:`_Shapes`
_SHAPES_FROM = 32
#: a smaller char DFA expands through :class:`_Shapes` too when a state has this
#: many non-ASCII spans (``\d`` has 61, ``\w`` 730; ``\s`` 8)
_TEMPLATE_MIN_SPANS = 16
#: the states whose spans :class:`_Shapes` remembers, to give a later state with
#: the same spans (and targets) their lead bytes
_SAME_SPANS_KEPT = 64


class _Direct:
    """Every state through :func:`_multibyte`."""

    @staticmethod
    def expand(b, state: int, spans: list) -> None:
        _multibyte(b, state, spans)


class _Shapes:
    """:func:`_multibyte` for many states whose spans differ only in their
    targets (a counted repetition of a class: ``\\w{1,500}`` has 500 states
    alike, each with ~310 continuation states; :func:`_multibyte` cost ~16 ms
    a state of ``\\w`` in Python), and for a class that other patterns of the
    process have expanded: a state copies a template of its shape, with
    placeholders for the targets, in one numpy pass. Templates are kept in
    :data:`_TEMPLATES`, shared by every expansion of the process.

    The result is the table :func:`_multibyte` alone writes. Continuation
    states are shared through :meth:`_Builder.continuation`'s memo, whose keys
    name targets: a state none of whose targets a key names yet can share
    nothing and is copied (its keys are written once a later state names one
    of its targets: in a counted repetition, never), and one that can is made
    directly."""

    def __init__(self):
        self.keyed: set = set()    # targets that memo keys name
        self.pending: dict = {}    # target -> copies whose keys are not in the memo yet
        self.made: dict = {}       # spans -> the first state expanded with them

    def expand(self, b: _Builder, state: int, spans: list) -> None:
        same = tuple(spans)
        earlier = self.made.get(same)
        if earlier is None:
            # (a counted class's states differ in their targets: kept for the
            # first few only, each key holds a class's spans)
            if len(self.made) < _SAME_SPANS_KEPT:
                self.made[same] = state
        else:
            # the same spans, the same targets: _multibyte would find every
            # continuation state in the memo and write the earlier state's
            # lead bytes again (``\w*z``'s two states: 2 ms of Python for the
            # second); the memo keys of a copy stay pending until a state
            # that may share them is made directly
            b.table[state, 0x80:] = b.table[earlier, 0x80:]
            return
        targets = list(dict.fromkeys(t for _, _, t in spans))
        if self.pending:
            for t in targets:
                if t in self.pending:
                    self._write_keys(b, t)
        if any(t in self.keyed for t in targets):
            # it may share continuation states with earlier ones (through the memo)
            _multibyte(b, state, spans)
            self.keyed.update(targets)
            return
        index = {t: i for i, t in enumerate(targets)}
        shape = tuple((lo, hi, index[t]) for lo, hi, t in spans)
        rows, keys = _TEMPLATES.get_or_build(shape, lambda: _template(shape))
        # template ids: 0 dead, 1 the state itself, 2.. its continuation states
        # (keys[j - 2] memoises id j), -1-i target i; all new here
        first = b.new_states(len(keys))
        ids = np.empty(rows.shape[0] + 1, dtype=np.int32)
        ids[0], ids[1] = 0, state
        ids[2:] = np.arange(first, first + len(keys), dtype=np.int32)
        out = np.where(rows >= 0, ids[np.maximum(rows, 0)],
                       np.asarray(targets, dtype=np.int32)[np.maximum(-1 - rows, 0)])
        b.table[state, 0x80:] = out[0, 0x80:]
        b.table[first:first + len(keys)] = out[1:]
        copy = [keys, targets, ids, False]
        for t in targets:
            self.pending.setdefault(t, []).append(copy)

    def _write_keys(self, b: _Builder, target: int) -> None:
        """Put the memo keys of the copies that name ``target`` into the memo."""
        for copy in self.pending.pop(target):
            keys, targets, ids, written = copy
            if written:
                continue
            copy[3] = True
            for j, (remaining, sub) in enumerate(keys, 2):
                b.memo[(remaining, tuple([(lo, hi, targets[-1 - t]) for lo, hi, t in sub]))] = int(ids[j])
            self.keyed.update(targets)


def _template(shape: tuple) -> tuple:
    """``(rows, keys)``: the rows :func:`_multibyte` writes for spans of
    ``shape`` (their targets replaced by indices), the state's own row first
    (lead bytes only), then its continuation states, -1-i standing for target
    i; and the memo key of each continuation state. Read-only: shared."""
    b = _Builder(0, None)
    own = b.new_state()  # 1
    _multibyte(b, own, [(lo, hi, -1 - i) for lo, hi, i in shape])
    keys = [None] * (b.size - 2)
    for key, s in b.memo.items():
        keys[s - 2] = key
    rows = b.table[1:b.size].copy()
    rows.setflags(write=False)
    return rows, tuple(keys)


def _template_bytes(shape: tuple, template: tuple) -> int:
    """What a template and its shape hold, roughly: its rows, and ~150 bytes
    per span of its key and of its memo keys (tuples of three ints)."""
    return template[0].nbytes + 150 * (len(shape) + sum(len(sub) for _, sub in template[1]))


#: the templates of :class:`_Shapes`, by shape: a class expands alike in every
#: pattern (``\w``: ~310 byte states, 0.3 MB of rows, ~8 ms to make), so they
#: are shared by the process's expansions, whatever their vocabulary
_TEMPLATES = registry.register(BoundedCache("utf-8 templates", 32 << 20, max_entries=512,
                                            sizeof=_template_bytes))


def _multibyte(b: _Builder, state: int, spans: list) -> None:
    """Transitions of ``state`` on the lead bytes of multi-byte characters."""
    if (len(spans) == 2 and spans[0][0] <= 0x80 and spans[0][1] == 0xD7FF
            and spans[1][0] == 0xE000 and spans[1][1] == 0x10FFFF and spans[0][2] == spans[1][2]):
        _any_multibyte(b, state, spans[0][2])
        return
    starts = [s[0] for s in spans]
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
                target = b.continuation(nbytes, tuple(sub))
                b.table[state, lead0 + lead] = target


def _any_multibyte(b: _Builder, state: int, t: int) -> None:
    """:func:`_multibyte` for "every non-ASCII character leads to ``t``" (a JSON
    string's content, ``.``, negated classes): the same transitions, from seven
    continuation states written directly (through ``continuation`` they cost ~140
    Python calls per target, and a string with a length bound has one target per
    count)."""
    # (key as continuation() memoises it, continuation bytes, child key)
    two = (1, ((0, 63, t),))
    three = (2, ((0, 0xFFF, t),))
    four = (3, ((0, 0x3FFFF, t),))
    layout = (
        (two, 0x80, 0xC0, None),
        (three, 0x80, 0xC0, two),
        ((2, ((0x800, 0xFFF, t),)), 0xA0, 0xC0, two),     # after E0: no overlongs
        ((2, ((0, 0x7FF, t),)), 0x80, 0xA0, two),         # after ED: no surrogates
        (four, 0x80, 0xC0, three),
        ((3, ((0x10000, 0x3FFFF, t),)), 0x90, 0xC0, three),  # after F0
        ((3, ((0, 0xFFFF, t),)), 0x80, 0x90, three),         # after F4: up to U+10FFFF
    )
    # every state first: creating one may reallocate the table
    fresh = []
    ids = {}
    for key, _lo, _hi, _child in layout:
        s = b.memo.get(key)
        if s is None:
            s = b.memo[key] = b.new_state()
            fresh.append(key)
        ids[key] = s
    table = b.table
    for key, lo, hi, child in layout:
        if key in fresh:
            table[ids[key], lo:hi] = t if child is None else ids[child]
    row = table[state]
    row[0xC2:0xE0] = ids[two]
    row[0xE0] = ids[layout[2][0]]
    row[0xE1:0xED] = ids[three]
    row[0xED] = ids[layout[3][0]]
    row[0xEE:0xF0] = ids[three]
    row[0xF0] = ids[layout[5][0]]
    row[0xF1:0xF4] = ids[four]
    row[0xF4] = ids[layout[6][0]]


def minimize_char_dfa(dfa: CharDFA) -> CharDFA:
    """The trimmed, minimal equivalent of a :class:`CharDFA` (same atoms; states
    that cannot accept dropped; start 0). Minimising before the UTF-8 expansion
    expands each class of equivalent states once."""
    n, k = dfa.table.shape
    if n <= 2:
        return dfa
    table = np.zeros((n + 1, k), dtype=np.int32)
    table[1:] = dfa.table + 1  # dead 0, start 1
    accepting = np.zeros(n + 1, dtype=np.bool_)
    accepting[1:] = dfa.accepting
    out, acc = trim_minimize(table, accepting, np.ones(k, dtype=np.bool_))
    if out.shape[0] - 1 >= n:
        return dfa
    return CharDFA(dfa.atoms, out[1:] - 1, acc[1:])


def trim_and_minimize(dfa: ByteDFA, *, alphabet: np.ndarray | None = None) -> ByteDFA:
    """Send states that cannot reach acceptance to the dead state, drop
    unreachable states, and merge equivalent states (Hopcroft's partition
    refinement over byte classes, in one numba kernel: the minimal DFA, in
    O(m log n) for m transitions). The result numbers states breadth-first
    from the start (1), dead = 0.

    ``alphabet`` (256 booleans) restricts the bytes that may be read: transitions
    on other bytes go to the dead state first."""
    if alphabet is None:
        alphabet = _ALL_BYTES
    out, acc = trim_minimize(np.ascontiguousarray(dfa.transitions), dfa.accepting, alphabet)
    return ByteDFA(out, acc)


_ALL_BYTES = np.ones(256, dtype=np.bool_)


def minus_prefixes(dfa: ByteDFA, prefixes) -> ByteDFA:
    """``dfa``'s language without the strings that start with one of
    ``prefixes`` (byte strings), trimmed (not renumbered, not minimised).
    ``dfa`` must be trimmed; the result reads no byte ``dfa`` does not read.

    The product of ``dfa`` with the trie of ``prefixes``: a trie node pairs with
    the one state its bytes reach, and leaving the trie returns to ``dfa`` itself,
    so the product has at most ``dfa``'s states plus the trie's nodes. It replaces
    the regex of "any JSON string but these names" (an alternation over the trie
    with a deviation at every node), whose compilation took 1-3 ms on a typical
    object schema."""
    table = dfa.transitions
    n = table.shape[0]
    # trie nodes: 0 the root; kids[k] maps a byte to a child, or to -1 where a
    # whole prefix ends (the product is dead from there on)
    state_of = [START]
    kids: list[dict] = [{}]
    for p in prefixes:
        if not p:
            return ByteDFA(np.zeros((2, 256), np.int32), np.zeros(2, np.bool_))
        node = 0
        for i, b in enumerate(p):
            k = kids[node].get(b)
            if k is None:
                q = int(table[state_of[node], b])
                if q == DEAD:
                    break  # dfa refuses the prefix: nothing to remove
                if i == len(p) - 1:
                    kids[node][b] = -1
                    break
                k = kids[node][b] = len(state_of)
                state_of.append(q)
                kids.append({})
            elif k < 0:
                break  # a shorter prefix already removes this one
            elif i == len(p) - 1:
                kids[node][b] = -1
                break
            node = k
    # product rows: 0 dead, 1 + k for trie node k (1: the start), then dfa's
    # state d >= 1 at off + d - 1 (the trie left behind)
    m = len(state_of)
    off = m + 1
    shifted = np.where(table > DEAD, table + (off - 1), 0).astype(np.int32)
    out = np.zeros((off + n - 1, 256), dtype=np.int32)
    acc = np.zeros(off + n - 1, dtype=np.bool_)
    out[off:] = shifted[1:]
    acc[off:] = dfa.accepting[1:]
    qs = np.asarray(state_of, dtype=np.int64)
    out[1:off] = shifted[qs]
    acc[1:off] = dfa.accepting[qs]
    for node in range(m):
        row = out[node + 1]
        for b, k in kids[node].items():
            row[b] = 0 if k < 0 else k + 1
    # a trie node is live when its state in ``dfa`` has a live byte the trie does
    # not take (``dfa`` is trimmed), or a live child (children come after their
    # parent): when all are, the usual case, nothing needs trimming. Not
    # minimised either: only trie nodes left with the same excluded suffixes
    # coincide (rare and harmless), and minimising cost 50-150 us cold
    outdeg = np.count_nonzero(table, axis=1).tolist()
    live = [False] * m
    for node in range(m - 1, -1, -1):
        d = kids[node]
        live[node] = outdeg[state_of[node]] > len(d) or any(k > 0 and live[k] for k in d.values())
    if not all(live):
        out, acc = trim_dead(out, acc)
        if not acc[START] and not out[START].any():  # every string excluded
            return ByteDFA(np.zeros((2, 256), np.int32), np.zeros(2, np.bool_))
    return ByteDFA(out, acc)
