"""Regex IR → a deterministic automaton over Unicode characters.

Characters are grouped into *atoms*: the coarsest partition of the code points in
which every character set of the pattern is a union of atoms, so transitions are
per atom, not per character. Zero-width assertions (``^ $ \\A \\Z \\b \\B``) are
handled exactly during determinisation: a DFA state is a set of NFA threads, each
with an *obligation* on the next character (a set of atoms, or end of input), and
the class of the previous character where an assertion looks back.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass

import numpy as np

from constrain.automata.determinize_kernels import determinize
from constrain.automata.charset import CharSet, oracle_charset
from constrain.errors import GrammarTooComplexError
from constrain.automata.regex_syntax import Alt, Assert, Chars, Concat, Repeat

DEFAULT_MAX_STATES = 50_000


@dataclass
class CharDFA:
    """A DFA over atoms. State 0 is the start state.

    Attributes:
        atoms: the character set of each atom.
        table: ``int32 [states, atoms]``, the next state (-1: none).
        accepting: ``bool [states]``, whether input may end there.
    """

    atoms: list
    table: np.ndarray
    accepting: np.ndarray

    @classmethod
    def from_rows(cls, atoms: list, rows: list, accepting: list) -> "CharDFA":
        """From per-state dicts atom → next state."""
        table = np.full((len(rows), len(atoms)), -1, dtype=np.int32)
        for q, row in enumerate(rows):
            for a, t in row.items():
                table[q, a] = t
        return cls(atoms, table, np.asarray(accepting, dtype=np.bool_))


class _NFA:
    def __init__(self):
        self.eps: list[list] = []    # state -> [(target, Assert | None)]
        self.edges: list[list] = []  # state -> [(charset id, target)]
        self.charsets: list = []     # id -> CharSet
        self._ids: dict = {}         # CharSet intervals -> id
        self._obj_ids: dict = {}     # id() of a CharSet of the IR -> id
        self.has_asserts = False
        self.start = self.final = -1

    def new(self) -> int:
        self.eps.append([])
        self.edges.append([])
        return len(self.eps) - 1

    def charset_id(self, cs: CharSet) -> int:
        # keyed by the interval tuple: hashed and compared in C
        i = self._ids.get(cs.intervals)
        if i is None:
            i = self._ids[cs.intervals] = len(self.charsets)
            self.charsets.append(cs)
        return i

    def build(self, node) -> tuple[int, int]:
        """A fragment ``(start, final)`` for ``node``."""
        final = self.new()
        return self.into(node, final), final

    def into(self, node, nxt: int) -> int:
        """Build ``node`` so that it continues into state ``nxt``; return its start.
        Built back to front, a character needs one state and no epsilon edges."""
        # exact type tests and inlined state creation: for short patterns this
        # construction is a visible share of the whole compilation
        t = type(node)
        if t is Chars:
            eps = self.eps
            s = len(eps)
            eps.append([])
            cs = node.charset
            if cs.intervals:
                # by object first (IR nodes share their sets): an int hash, where
                # the interval tuple would be rehashed on every lookup
                i = self._obj_ids.get(id(cs))
                if i is None:
                    i = self._obj_ids[id(cs)] = self.charset_id(cs)
                self.edges.append([(i, nxt)])
            else:
                self.edges.append([])
            return s
        if t is Concat:
            for item in reversed(node.items):
                nxt = self.into(item, nxt)
            return nxt
        if t is Alt:
            s = self.new()
            self.eps[s].extend([(self.into(item, nxt), None) for item in node.items])
            return s
        if t is Repeat:
            if node.hi is None:
                loop = self.new()
                self.eps[loop].append((self.into(node.item, loop), None))
                self.eps[loop].append((nxt, None))
                cur = loop
            else:
                cur = nxt
                for _ in range(node.hi - node.lo):  # optional copies, innermost last
                    opt = self.new()
                    self.eps[opt].append((self.into(node.item, cur), None))
                    self.eps[opt].append((nxt, None))
                    cur = opt
            for _ in range(node.lo):
                cur = self.into(node.item, cur)
            return cur
        if t is Assert:
            self.has_asserts = True
            s = self.new()
            self.eps[s].append((nxt, node))
            return s
        raise TypeError(node)


def _partition(charsets: list[CharSet]) -> tuple[list[CharSet], list[int]]:
    """Atoms of the charsets, and for each charset the bitmask of its atoms."""
    events: dict[int, list] = {}
    for i, cs in enumerate(charsets):
        for lo, hi in cs.intervals:
            events.setdefault(lo, []).append((i, 1))
            events.setdefault(hi + 1, []).append((i, -1))
    points = sorted(events)
    active: dict[int, int] = {}
    atom_of_sig: dict[frozenset, int] = {}
    atom_intervals: list[list] = []
    for k, p in enumerate(points):
        for i, d in events[p]:
            c = active.get(i, 0) + d
            if c:
                active[i] = c
            else:
                active.pop(i, None)
        if active and k + 1 < len(points):
            sig = frozenset(active)
            a = atom_of_sig.get(sig)
            if a is None:
                a = atom_of_sig[sig] = len(atom_intervals)
                atom_intervals.append([])
            atom_intervals[a].append((p, points[k + 1] - 1))
    masks = [0] * len(charsets)
    for sig, a in atom_of_sig.items():
        for i in sig:
            masks[i] |= 1 << a
    return [CharSet(iv) for iv in atom_intervals], masks


_PREV_DEPENDENT = {"begin", "begin_line", "boundary", "non_boundary"}


def build_nfa(node) -> _NFA:
    """The epsilon-NFA of the regex IR ``node`` (``.start``, ``.final``)."""
    nfa = _NFA()
    nfa.start, nfa.final = nfa.build(node)
    return nfa


def ascii_nfa_arrays(nfa: _NFA):
    """The array :func:`constrain.automata.determinize_kernels.ascii_byte_dfa` takes, or ``None`` when
    that shortcut does not apply: a character outside ASCII, an assertion, or an
    NFA too large for the kernel's closure bitsets."""
    if nfa.has_asserts:
        return None
    eps = nfa.eps
    if len(eps) * (len(eps) // 64 + 1) > _KERNEL_MAX_WORDS:
        return None
    ivs = [cs.intervals for cs in nfa.charsets]
    for iv in ivs:
        if iv[-1][1] >= 0x80:
            return None
    eps_dst = [t for lst in eps for t, _ in lst]
    prog = [len(eps)]
    prog += [len(lst) for lst in eps]
    prog.append(len(eps_dst))
    prog += eps_dst
    prog.append(len(ivs))
    prog += [len(iv) for iv in ivs]
    prog += [x for iv in ivs for lo_hi in iv for x in lo_hi]
    prog += [x for s, lst in enumerate(nfa.edges) for c, t in lst for x in (s, c, t)]
    return np.array(prog, dtype=np.int64)


def too_many_states(pattern: str, max_states: int) -> GrammarTooComplexError:
    return GrammarTooComplexError(
        f"the regex {pattern[:80]!r} needs more than {max_states} automaton "
        f"states (pass max_states= to raise the limit)")


def build_char_dfa(node, *, max_states: int = DEFAULT_MAX_STATES,
                   deadline: float | None = None, pattern: str = "",
                   nfa: _NFA | None = None) -> CharDFA:
    """Determinise the regex IR ``node`` into a :class:`CharDFA` (``nfa``: its
    :func:`build_nfa`, when already built).

    Raises :class:`GrammarTooComplexError` past ``max_states`` states or the
    ``deadline`` (a ``time.perf_counter()`` value)."""
    if nfa is None:
        nfa = build_nfa(node)
    start, final = nfa.start, nfa.final
    asserts = {a for lst in nfa.eps for _, a in lst if a is not None}
    kinds = {a.kind for a in asserts}

    # Charsets the assertions look at must be unions of atoms too.
    extra = {}
    if kinds & {"end", "end_line", "begin_line"}:
        extra["nl"] = CharSet.of(10)
    if any(a.kind in ("boundary", "non_boundary") and not a.ascii for a in asserts):
        extra["word_u"] = oracle_charset(r"\w", 0)
    if any(a.kind in ("boundary", "non_boundary") and a.ascii for a in asserts):
        extra["word_a"] = oracle_charset(r"\w", re.ASCII)
    charsets = list(nfa.charsets) + list(extra.values())
    atoms, masks = _partition(charsets)
    n_atoms = len(atoms)
    END = 1 << n_atoms
    ALL = (END << 1) - 1
    edge_masks = masks[:len(nfa.charsets)]
    extra_mask = dict(zip(extra, masks[len(nfa.charsets):]))
    nl = extra_mask.get("nl", 0)
    word = {False: extra_mask.get("word_u", 0), True: extra_mask.get("word_a", 0)}
    eps = nfa.eps
    if not asserts:
        atom_lists = [[a for a in range(n_atoms) if m >> a & 1] for m in edge_masks]
        if len(eps) * (len(eps) // 64 + 1) <= _KERNEL_MAX_WORDS:
            # bounded by max_states; the time budget is checked once it returns,
            # unless that call JIT-compiled the kernel (not the pattern's cost)
            jitted = bool(determinize.signatures)
            dfa = _determinize_kernel(atoms, atom_lists, nfa, start, final, max_states, pattern)
            if jitted and deadline is not None:
                _StateIndex(None, max_states, deadline, pattern).done(0)
            return dfa
        plain_edges = [[(atom_lists[c], t) for c, t in lst] for lst in nfa.edges]
        return _determinize_plain(atoms, plain_edges, eps, start, final, max_states, deadline,
                                  pattern)
    edges = [[(edge_masks[c], t) for c, t in lst] for lst in nfa.edges]
    track_prev = bool(kinds & _PREV_DEPENDENT)

    # prev: None at the start of input, else the atom just read (only tracked when
    # an assertion looks back; otherwise a constant so states are not split).
    def prev_class(atom):
        if not track_prev:
            return 0
        if atom is None:
            return ("start",)
        bit = 1 << atom
        return (bool(nl & bit), bool(word[False] & bit), bool(word[True] & bit))

    def check(a: Assert, mask: int, nte: bool, prev):
        k = a.kind
        if k == "begin":
            return (mask, nte) if prev == ("start",) else None
        if k == "begin_line":
            return (mask, nte) if prev == ("start",) or prev[0] else None
        if k == "end_string":
            mask &= END
        elif k == "end_line":
            mask &= END | nl
        elif k == "end":
            mask &= END | nl
            nte = True
        else:
            w = word[a.ascii]
            nonword = (ALL & ~END) & ~w
            prev_word = prev != ("start",) and prev[2 if a.ascii else 1]
            if k == "boundary":
                mask &= (END | nonword) if prev_word else w
            elif prev_word:  # non_boundary after a word character
                mask &= w
            elif prev == ("start",):  # \B never matches the empty string
                mask &= nonword
            else:
                mask &= END | nonword
        return (mask, nte) if mask else None

    def closure(threads, prev):
        seen = set(threads)
        stack = list(threads)
        while stack:
            s, mask, nte = stack.pop()
            for t, a in eps[s]:
                if a is None:
                    th = (t, mask, nte)
                else:
                    r = check(a, mask, nte, prev)
                    if r is None:
                        continue
                    th = (t, r[0], r[1])
                if th not in seen:
                    seen.add(th)
                    stack.append(th)
        return frozenset(seen)

    init_prev = prev_class(None)
    states = _StateIndex((closure([(start, ALL, False)], init_prev), init_prev),
                         max_states, deadline, pattern)
    queue = states.queue
    transitions: list[dict] = []
    accepting: list[bool] = []
    while len(transitions) < len(queue):
        threads, prev = queue[len(transitions)]
        accepting.append(any(s == final and mask & END for s, mask, _ in threads))
        moves: dict[int, list] = {}
        for s, mask, nte in threads:
            for emask, t in edges[s]:
                m = emask & mask
                while m:
                    low = m & -m
                    a = low.bit_length() - 1
                    m ^= low
                    moves.setdefault(a, []).append(
                        (t, END, False) if (nte and nl & low) else (t, ALL, False))
        row = {}
        for a, targets in moves.items():
            p = prev_class(a)
            row[a] = states.id_of((closure(targets, p), p))
        transitions.append(row)
        states.done(len(transitions))
    return CharDFA.from_rows(atoms, transitions, accepting)


class _StateIndex:
    """Numbers DFA states (by their thread-set key) in discovery order, within the
    state and time budgets."""

    def __init__(self, initial, max_states: int, deadline: float | None, pattern: str):
        self.index = {initial: 0}
        self.queue = [initial]
        self.max_states, self.deadline, self.pattern = max_states, deadline, pattern

    def id_of(self, key) -> int:
        j = self.index.get(key)
        if j is None:
            j = self.index[key] = len(self.queue)
            self.queue.append(key)
            if len(self.queue) > self.max_states:
                raise GrammarTooComplexError(
                    f"the regex {self.pattern[:80]!r} needs more than {self.max_states} "
                    f"automaton states (pass max_states= to raise the limit)")
        return j

    def done(self, n_expanded: int) -> None:
        """Check the time budget every 256 expanded states."""
        if self.deadline is not None and n_expanded % 256 == 0 \
                and time.perf_counter() > self.deadline:
            raise GrammarTooComplexError(
                f"compiling the regex {self.pattern[:80]!r} exceeded its time budget "
                f"(pass time_budget= to raise it)")


# the numba subset construction keeps an epsilon-closure bitset per NFA state:
# bounded to 32 MiB, past that the Python construction (sets of ints) takes over
_KERNEL_MAX_WORDS = 4 * 1024 * 1024


def _determinize_kernel(atoms, atom_lists, nfa: _NFA, start, final, max_states,
                        pattern) -> CharDFA:
    """:func:`_determinize_plain` as one numba kernel over CSR arrays."""
    n = len(nfa.eps)
    eps_ptr = np.zeros(n + 1, dtype=np.int64)
    edge_ptr = np.zeros(n + 1, dtype=np.int64)
    eps_dst: list = []
    edge_atom: list = []
    edge_dst: list = []
    for s, (eps_s, edges_s) in enumerate(zip(nfa.eps, nfa.edges)):
        for t, _ in eps_s:
            eps_dst.append(t)
        eps_ptr[s + 1] = len(eps_dst)
        for c, t in edges_s:
            lst = atom_lists[c]
            edge_atom.extend(lst)
            edge_dst.extend([t] * len(lst))
        edge_ptr[s + 1] = len(edge_atom)
    table, accepting, count = determinize(
        len(atoms), eps_ptr, np.asarray(eps_dst, dtype=np.int64), edge_ptr,
        np.asarray(edge_atom, dtype=np.int64), np.asarray(edge_dst, dtype=np.int64),
        start, final, max_states)
    if count < 0:
        raise too_many_states(pattern, max_states)
    return CharDFA(atoms, table, accepting)


def _determinize_plain(atoms, edges, eps, start, final, max_states, deadline, pattern) -> CharDFA:
    """Subset construction for a pattern without assertions. A DFA state is the
    set of *important* NFA states (those with a character edge, and the final
    one) of an epsilon closure, as a Python int bitset: equivalent thread sets
    share one key, and unions are single OR operations. ``edges[s]`` lists
    ``(atom ids, target)``."""
    n = len(eps)
    closures: list = [None] * n

    def closure_of(s) -> int:
        c = closures[s]
        if c is None:
            seen = {s}
            stack = [s]
            while stack:
                for t, _ in eps[stack.pop()]:
                    if t not in seen:
                        seen.add(t)
                        stack.append(t)
            c = 0
            for x in seen:
                if edges[x] or x == final:
                    c |= 1 << x
            closures[s] = c
        return c

    # per NFA state: (atom, closure of target) pairs
    pairs: list = [None] * n
    final_bit = 1 << final
    states = _StateIndex(closure_of(start), max_states, deadline, pattern)
    queue = states.queue
    transitions: list[dict] = []
    accepting: list[bool] = []
    while len(transitions) < len(queue):
        d = queue[len(transitions)]
        accepting.append(bool(d & final_bit))
        moves: dict[int, int] = {}
        rest = d
        while rest:
            low = rest & -rest
            rest ^= low
            s = low.bit_length() - 1
            ps = pairs[s]
            if ps is None:
                ps = pairs[s] = [(a, closure_of(t)) for atom_list, t in edges[s] for a in atom_list]
            for a, c in ps:
                moves[a] = moves.get(a, 0) | c
        transitions.append({a: states.id_of(key) for a, key in moves.items()})
        states.done(len(transitions))
    return CharDFA.from_rows(atoms, transitions, accepting)
