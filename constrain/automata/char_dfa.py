"""Regex IR → a deterministic automaton over Unicode characters.

Characters are grouped into *atoms*: the coarsest partition of the code points in
which every character set of the pattern is a union of atoms, so transitions are
per atom, not per character. Zero-width assertions are handled exactly during
determinisation (:class:`_Engine`): a DFA state is a set of NFA threads, each with
a condition on the next character (a set of atoms, or end of input) and the
lookaheads still to be decided, plus the class of the previous character where an
assertion looks back and, per lookbehind, the run of its body over the text so
far. An atomic group is a run of its body in Python's backtracking order (the
ordered thread list of a Pike VM), which the thread waits on and leaves where the
run finds a match, under the condition that no earlier-ranked path of the run
finds one later.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from constrain.automata.deadline import Deadline, kernel_deadline, passed, ready
# KERNEL_MAX_WORDS: the kernels keep an epsilon-closure bitset per NFA state,
# bounded to 32 MiB; past that the Python construction (sets of ints) takes over
from constrain.automata.determinize_kernels import (KERNEL_MAX_WORDS, OUT_OF_TIME, determinize,
                                                    tiny_determinize_args)
from constrain.automata.charset import CharSet, sre_category
from constrain.cache import BoundedCache, registry
from constrain.errors import GrammarTooComplexError, UnsupportedRegexError
from constrain.automata.regex_syntax import Alt, Assert, Atomic, Chars, Concat, Look, Repeat

try:  # Python 3.11+
    import re._constants as sre_c
except ImportError:  # pragma: no cover - Python 3.10
    import sre_constants as sre_c  # type: ignore

DEFAULT_MAX_STATES = 50_000


class _LookMark:
    """The epsilon edge of a lookaround: its body runs from ``start`` to
    ``final``; ``k`` numbers the lookbehinds (their runs are part of the DFA
    state) and the lookaheads apart."""

    __slots__ = ("kind", "k", "start", "final", "behind", "negate", "offset")

    def __init__(self, k, start, final, behind, negate, offset):
        self.kind = "look"
        self.k, self.start, self.final = k, start, final
        self.behind, self.negate, self.offset = behind, negate, offset


class _AtomicMark:
    """The epsilon edge into an atomic group: its body runs, in priority order,
    from ``start`` to ``final``; the thread goes on at ``next``."""

    __slots__ = ("kind", "k", "start", "final", "next", "offset")

    def __init__(self, k, start, final, nxt, offset):
        self.kind = "atomic"
        self.k, self.start, self.final, self.next, self.offset = k, start, final, nxt, offset


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
        self.behinds: list[_LookMark] = []   # by k, inner ones first
        self.aheads: list[_LookMark] = []
        self.atomics: list[_AtomicMark] = []
        #: the final state of every body (lookarounds, atomic groups)
        self.body_finals: set[int] = set()
        #: Python's rule for a repetition whose iteration matched the empty
        #: string: no further iteration, go on after the repetition. A state
        #: ``s`` in ``guard`` (a loop's head, a counted repetition's next
        #: optional copy) reached while ``guard[s]`` is on the search path at
        #: the same position is such a case, and goes to ``loop_exit[s]``
        #: (only the priority order of atomic groups depends on it)
        self.guard: dict[int, int] = {}
        self.loop_exit: dict[int, int] = {}
        #: id of a lookaround or atomic IR node -> (the node, its body's mark)
        self._bodies: dict = {}
        self.deadline, self.pattern = None, ""

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
            # epsilon edges in the order Python tries them: another copy first
            # unless lazy (only atomic groups see the order)
            lo = node.lo
            if node.hi is None and lo:
                # X{m,} as X{m-1} then X+, whose one copy loops back through a
                # junction: m copies, as _positions counts them (X X* made two
                # per level, and nested + grew the NFA exponentially)
                junction = self.new()
                cur = self.into(node.item, junction)
                body = (cur, None)
                self.eps[junction].extend([(nxt, None), body] if node.lazy
                                          else [body, (nxt, None)])
                self.guard[junction], self.loop_exit[junction] = junction, nxt
                lo -= 1
            elif node.hi is None:
                loop = self.new()
                body = (self.into(node.item, loop), None)
                self.eps[loop].extend([(nxt, None), body] if node.lazy else [body, (nxt, None)])
                self.guard[loop], self.loop_exit[loop] = loop, nxt
                cur = loop
            else:
                cur = nxt
                for _ in range(node.hi - node.lo):  # optional copies, innermost last
                    check_deadline(self.deadline, self.pattern)
                    opt = self.new()
                    body = (self.into(node.item, cur), None)
                    self.eps[opt].extend([(nxt, None), body] if node.lazy
                                         else [body, (nxt, None)])
                    if cur != nxt:  # the next copy, reached from this one's body
                        self.guard[cur], self.loop_exit[cur] = opt, nxt
                    cur = opt
            for _ in range(lo):
                check_deadline(self.deadline, self.pattern)
                cur = self.into(node.item, cur)
            return cur
        if t is Assert:
            self.has_asserts = True
            s = self.new()
            self.eps[s].append((nxt, node))
            return s
        if t is Look or t is Atomic:
            # a body is a sub-NFA of its own, whatever follows: the copies a
            # repetition makes share it (and their runs and obligations with it;
            # (?=a){4000} made 4000 runs of one body at every position)
            self.has_asserts = True
            shared = self._bodies.get(id(node))
            if shared is None:
                final = self.new()
                start = self.into(node.body, final)  # inner lookbehinds numbered first
                self.body_finals.add(final)
                if t is Look:
                    marks = self.behinds if node.behind else self.aheads
                    mark = _LookMark(len(marks), start, final, node.behind, node.negate,
                                     node.offset)
                    marks.append(mark)
                else:
                    mark = (len(self.atomics), start, final)
                    self.atomics.append(_AtomicMark(mark[0], start, final, nxt, node.offset))
                shared = self._bodies[id(node)] = (node, mark)
            mark = shared[1]
            if t is Atomic:
                mark = _AtomicMark(*mark, nxt, node.offset)
            s = self.new()
            self.eps[s].append((nxt, mark))
            return s
        raise TypeError(node)


def _partition(charsets: list[CharSet]) -> tuple[list[CharSet], list[int]]:
    """Atoms of the charsets, and for each charset the bitmask of its atoms."""
    # a charset met twice (``\\w+`` has two edges of \\w) splits nothing more
    distinct = tuple(dict.fromkeys(charsets))
    atoms, masks = _partition_distinct(distinct)
    mask_of = dict(zip(distinct, masks))
    return list(atoms), [mask_of[cs] for cs in charsets]


def _partition_bytes(charsets: tuple, value: tuple) -> int:
    """What a partition and its key hold, roughly: ~100 bytes an interval of
    the charsets and of their atoms (a tuple of two ints in a tuple)."""
    return 100 * (sum(len(cs.intervals) for cs in charsets)
                  + sum(len(a.intervals) for a in value[0])) + 8 * len(value[1])


#: the partitions of :func:`_partition_distinct`, by their charsets: the same
#: classes are partitioned again by every pattern that has them (\w's ~700
#: intervals: ~2 ms of Python a pattern). Bounded by bytes as well as entries:
#: a pattern's charsets, and so its partition, grow with its length
_PARTITIONS = registry.register(BoundedCache("charset partitions", 16 << 20, max_entries=256,
                                             sizeof=_partition_bytes))


def _partition_distinct(charsets: tuple) -> tuple[tuple, tuple]:
    """:func:`_partition` of distinct charsets: ``(atoms, masks)`` as tuples,
    atoms numbered by their lowest code point (immutable: shared through
    :data:`_PARTITIONS`)."""
    if len(charsets) == 1:
        return ((charsets[0],), (1,)) if charsets[0] else ((), (0,))
    return _PARTITIONS.get_or_build(charsets, lambda: _atoms(charsets))


def _atoms(charsets: tuple) -> tuple[tuple, tuple]:
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
    return tuple(CharSet(iv) for iv in atom_intervals), tuple(masks)


_PREV_DEPENDENT = {"begin", "begin_line", "boundary", "non_boundary"}


def build_nfa(node, deadline=None, pattern: str = "") -> _NFA:
    """The epsilon-NFA of the regex IR ``node`` (``.start``, ``.final``), built
    by the ``deadline`` (checked per copy a repetition makes: up to
    ``max_positions`` states, a second of Python)."""
    nfa = _NFA()
    nfa.deadline, nfa.pattern = deadline, pattern
    nfa.start, nfa.final = nfa.build(node)
    check_deadline(deadline, pattern)
    return nfa


def ascii_nfa_arrays(nfa: _NFA):
    """The array :func:`constrain.automata.determinize_kernels.ascii_byte_dfa` takes, or ``None`` when
    that shortcut does not apply: a character outside ASCII, an assertion, or an
    NFA too large for the kernel's closure bitsets."""
    if nfa.has_asserts:
        return None
    eps = nfa.eps
    if len(eps) * (len(eps) // 64 + 1) > KERNEL_MAX_WORDS:
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
    """The error of a regex whose automaton needs more than ``max_states``."""
    return GrammarTooComplexError(
        f"the regex {pattern[:80]!r} needs more than {max_states} automaton "
        f"states (pass max_states= to raise the limit)")


def out_of_time(pattern: str) -> GrammarTooComplexError:
    """The error of a regex whose compilation ran past its time budget."""
    return GrammarTooComplexError(
        f"compiling the regex {pattern[:80]!r} exceeded its time budget "
        f"(pass time_budget= to raise it)")


def check_deadline(deadline, pattern: str) -> None:
    """Raise :func:`out_of_time` once ``deadline`` (``None``: none) has passed."""
    if deadline is not None and passed(deadline):
        raise out_of_time(pattern)


class UndecidedAtomicExit(Exception):
    """Raised by :func:`build_char_dfa` with ``strict_atomic_exits``: a thread
    reached the end of the pattern while whether an atomic group it left had
    found its first match was still open."""


def build_char_dfa(node, *, max_states: int = DEFAULT_MAX_STATES,
                   deadline: float | Deadline | None = None, pattern: str = "",
                   nfa: _NFA | None = None, strict_atomic_exits: bool = False) -> CharDFA:
    """Determinise the regex IR ``node`` into a :class:`CharDFA` (``nfa``: its
    :func:`build_nfa`, when already built).

    Raises :class:`GrammarTooComplexError` past ``max_states`` states or the
    ``deadline`` (a :func:`~constrain.automata.deadline.now` value: the
    thread's CPU clock; or a :class:`Deadline`, which
    the numba kernel's compilation moves later). With ``strict_atomic_exits``,
    :class:`UndecidedAtomicExit` where a thread reaches the end of the pattern
    with an atomic group's exit still undecided (``(?>X).``: whether the
    character after ``X``'s match decides it)."""
    deadline = Deadline.of(deadline)
    if nfa is None:
        nfa = build_nfa(node, deadline, pattern)
    start, final = nfa.start, nfa.final
    asserts = {a for lst in nfa.eps for _, a in lst if a is not None}
    kinds = {a.kind for a in asserts}

    # Charsets the assertions look at must be unions of atoms too.
    extra = {}
    if kinds & {"end", "end_line", "begin_line"}:
        extra["nl"] = CharSet.of(10)
    if any(a.kind in ("boundary", "non_boundary") and not a.ascii for a in asserts):
        extra["word_u"] = sre_category(sre_c.CATEGORY_WORD)
    if any(a.kind in ("boundary", "non_boundary") and a.ascii for a in asserts):
        extra["word_a"] = sre_category(sre_c.CATEGORY_WORD, ascii_only=True)
    charsets = list(nfa.charsets) + list(extra.values())
    atoms, masks = _partition(charsets)
    n_atoms = len(atoms)
    END = 1 << n_atoms
    edge_masks = masks[:len(nfa.charsets)]
    extra_mask = dict(zip(extra, masks[len(nfa.charsets):]))
    nl = extra_mask.get("nl", 0)
    word = {False: extra_mask.get("word_u", 0), True: extra_mask.get("word_a", 0)}
    eps = nfa.eps
    if not asserts:
        atom_lists = [[a for a in range(n_atoms) if m >> a & 1] for m in edge_masks]
        if len(eps) * (len(eps) // 64 + 1) <= KERNEL_MAX_WORDS:
            return _determinize_kernel(atoms, atom_lists, nfa, start, final, max_states,
                                       pattern, deadline)
        plain_edges = [[(atom_lists[c], t) for c, t in lst] for lst in nfa.edges]
        return _determinize_plain(atoms, plain_edges, eps, start, final, max_states, deadline,
                                  pattern)
    edges = [[(edge_masks[c], t) for c, t in lst] for lst in nfa.edges]
    engine = _Engine(nfa, edges, END, nl, word, bool(kinds & _PREV_DEPENDENT), pattern, deadline)
    initial = engine.initial()
    # a thread is a tuple of four (~100 bytes with its obligations' share)
    states = _StateIndex(initial, max_states, deadline, pattern,
                         size=lambda key: 100 * (len(key[0]) + sum(len(r) for r in key[2])))
    queue = states.queue
    transitions: list[dict] = []
    accepting: list[bool] = []
    while len(transitions) < len(queue):
        key = queue[len(transitions)]
        if strict_atomic_exits and any(th[0] == final and any(ob[0] == "P" for ob in th[3])
                                       for th in key[0]):
            raise UndecidedAtomicExit(pattern)
        accepting.append(engine.accepts(key))
        row = {}
        for a in engine.atoms_read(key):
            nxt = engine.step(key, a)
            if nxt is not None:
                row[a] = states.id_of(nxt)
        transitions.append(row)
        states.done(len(transitions))
    return CharDFA.from_rows(atoms, transitions, accepting)


_EMPTY = frozenset()
#: in a priority run, a match of the body found earlier whose conditions on
#: the text after it are still open (no NFA state is negative)
_DONE = -1


class _Engine:
    """Subset construction with assertions, lookaround and atomic groups.

    A DFA state is ``(threads, prev, behind)``: ``prev`` the class of the
    character just read (``("start",)`` before the first; a constant unless an
    assertion looks back), ``behind`` per lookbehind the threads of its body
    started at every position so far (a run of ``.*body``), and ``threads`` a
    frozenset of ``(state, mask, nte, obligations)``:

    * ``mask``: the atoms (and ``END`` bit) the next character may be;
      ``nte``: if it is a newline, the input must end right after (``$``);
    * ``obligations``: a frozenset of what must still be decided about the text
      ahead: ``("L", final, negate, run)`` for a lookahead whose body ends at
      NFA state ``final`` (``run`` the threads of its body: it holds once a
      thread reaches the body's end with nothing left to check), or for a
      lookbehind whose body's matches ending here left conditions on the text
      ahead (``run`` those threads, at ``final``), and ``("P", k, run)`` after leaving atomic group ``k``:
      the earlier-ranked threads of its body's run (waiting matches among
      them), none of which may match (else Python would have found that match
      first);
    * ``state`` is an NFA state, or ``("W", k, next, run)`` for a thread inside
      atomic group ``k``, waiting on ``run``, the body's threads in priority
      order, to go on at ``next`` (the copies of one group a repetition makes
      share its body, not where they go on).

    The run of an atomic group's body is a tuple of threads in priority order;
    a path that reaches the body's end with conditions still open (an
    assertion on the next character, a lookahead) is a match only if they
    hold, so it does not cut the paths after it: it waits in the run
    (:data:`_DONE`) until they are decided. Atomic groups do not nest (the
    parser refuses it)."""

    def __init__(self, nfa: _NFA, edges, END: int, nl: int, word: dict, track_prev: bool,
                 pattern: str, deadline: Deadline | None):
        self.eps, self.edges = nfa.eps, edges
        self.final = nfa.final
        self.body_finals = nfa.body_finals
        self.behinds, self.aheads, self.atomics = nfa.behinds, nfa.aheads, nfa.atomics
        self.guard, self.loop_exit = nfa.guard, nfa.loop_exit
        #: the states whose presence on a search path a guard tests
        self.guard_targets = frozenset(nfa.guard.values())
        self.END, self.ALL = END, (END << 1) - 1
        self.nl, self.word = nl, word
        self.track_prev = track_prev
        self.pattern = pattern
        self.deadline = deadline
        self.start = nfa.start
        self._work = 0

    # -- positions ------------------------------------------------------------

    def prev_class(self, atom):
        if not self.track_prev:
            return 0
        if atom is None:
            return ("start",)
        bit = 1 << atom
        return (bool(self.nl & bit), bool(self.word[False] & bit), bool(self.word[True] & bit))

    def initial(self):
        prev = self.prev_class(None)
        behind = self._behind([None] * len(self.behinds), prev, None)
        threads = self.closure([(self.start, self.ALL, False, _EMPTY)], prev, behind)
        return threads, prev, behind

    def _behind(self, runs, prev, atom):
        """The lookbehind runs at the new position: each stepped over ``atom``
        (``None``: the start) and restarted here; inner lookbehinds first, as
        an outer body may test them."""
        out = []
        for k, mark in enumerate(self.behinds):
            seeds = [(mark.start, self.ALL, False, _EMPTY)]
            if atom is not None:
                # the obligations of its threads (a lookahead or an atomic
                # group inside the body) look at inner lookbehinds only, which
                # come first
                seeds += self.advance(runs[k], atom, False, prev, tuple(out))
            out.append(self.closure(seeds, prev, tuple(out)))
        return tuple(out)

    def atoms_read(self, key):
        """The atoms some thread of ``key`` may read next (a superset)."""
        threads = key[0]
        m = 0
        for s, mask, _nte, _obls in threads:
            if type(s) is tuple:
                m |= mask
            elif s not in self.body_finals:
                for emask, _t in self.edges[s]:
                    m |= emask & mask
        m &= ~self.END
        out = []
        while m:
            low = m & -m
            out.append(low.bit_length() - 1)
            m ^= low
        return out

    def step(self, key, atom):
        """The DFA state after ``atom``, or ``None`` when no thread survives."""
        threads, _prev, behind = key
        prev = self.prev_class(atom)
        behind = self._behind(behind, prev, atom)
        nxt = self.closure(self.advance(threads, atom, False, prev, behind), prev, behind)
        return (nxt, prev, behind) if nxt else None

    def accepts(self, key) -> bool:
        """Whether input may end in DFA state ``key``."""
        return any(th[0] == self.final and self.ends(th) for th in key[0])

    # -- threads --------------------------------------------------------------

    def advance(self, threads, atom, keep_final: bool, prev, behind) -> list:
        """The threads after reading ``atom``, before their epsilon closure at the
        new position (where ``prev`` and ``behind`` hold). ``keep_final``: a
        thread at a body's end stays (a lookahead body that matched but whose
        own conditions are still open)."""
        low = 1 << atom
        nl_read = bool(self.nl & low)
        out = []
        for s, mask, nte, obls in threads:
            if not mask & low:
                continue
            after = self.END if nte and nl_read else self.ALL
            obls = self.step_obligations(obls, atom, prev, behind) if obls else obls
            if obls is None:
                continue
            if type(s) is tuple:
                _, k, then, run = s
                run = self.pstep(run, atom, self.atomics[k].final, prev, behind)
                # a match of the body: go on after the group, unless an
                # earlier-ranked thread of the run matches later
                exits, run = self.exits(run, k)
                for m, n, o in exits:
                    if after & m:
                        out.append((then, after & m, n, obls | o))
                if run:
                    out.append((("W", k, then, run), after, False, obls))
            elif s in self.body_finals or s == self.final:
                if keep_final:
                    out.append((s, after, False, obls))
            else:
                for emask, t in self.edges[s]:
                    if emask & low:
                        out.append((t, after, False, obls))
        return out

    def step_obligations(self, obls, atom, prev, behind):
        """``obls`` after ``atom``, at the new position: the open ones, or
        ``None`` once one fails."""
        out = []
        for ob in obls:
            if ob[0] == "L":
                _, final, negate, run = ob
                run = self.closure(self.advance(run, atom, True, prev, behind), prev, behind)
                verdict = self.decide(run, final)
                if verdict is None:
                    out.append(("L", final, negate, run))
                elif verdict == negate:
                    return None
            else:
                _, k, run = ob
                run = self.pstep(run, atom, self.atomics[k].final, prev, behind)
                if any(m == self.ALL and not n and not o for s, m, n, o in run
                       if s == _DONE or s == self.atomics[k].final):
                    return None  # an earlier-ranked path matched
                if run:
                    out.append(("P", k, run))
        return frozenset(out)

    def decide(self, run, final):
        """``True`` once a thread of ``run`` reached ``final`` with nothing left
        to check, ``False`` when the run is empty, else ``None``."""
        if (final, self.ALL, False, _EMPTY) in run:
            return True
        return False if not run else None

    def closure(self, threads, prev, behind):
        """The epsilon closure of ``threads`` at a position where the previous
        character's class is ``prev`` and the lookbehind runs are ``behind``."""
        ALL = self.ALL
        seen = set(threads)
        stack = list(seen)
        eps = self.eps
        while stack:
            self._work += 1
            if not self._work & 4095:
                # one closure may be long (many lookaheads to start): the clock
                check_deadline(self.deadline, self.pattern)
            s, mask, nte, obls = stack.pop()
            if type(s) is tuple:
                continue
            for t, a in eps[s]:
                if a is None:
                    th = (t, mask, nte, obls)
                elif type(a) is Assert:
                    r = self.check(a, mask, nte, prev)
                    if r is None:
                        continue
                    th = (t, r[0], r[1], obls)
                elif a.kind == "look":
                    if a.behind:
                        for m, n, o in self.behind_options(a, behind, mask, nte, obls):
                            th = (t, m, n, o)
                            if th not in seen:
                                seen.add(th)
                                stack.append(th)
                        continue
                    else:
                        run = self.closure([(a.start, ALL, False, _EMPTY)], prev, behind)
                        verdict = self.decide(run, a.final)
                        if verdict is None:
                            th = (t, mask, nte, obls | {("L", a.final, a.negate, run)})
                        elif verdict != a.negate:
                            th = (t, mask, nte, obls)
                        else:
                            continue
                else:  # an atomic group
                    exits, run = self.exits(self.pclosure(a.start, a.final, prev, behind), a.k)
                    for m, n, o in exits:
                        th = (t, mask & m, nte or n, obls | o)
                        if th[1] and th not in seen:
                            seen.add(th)
                            stack.append(th)
                    if not run:
                        continue
                    th = (("W", a.k, t, run), mask, nte, obls)
                if th not in seen:
                    seen.add(th)
                    stack.append(th)
        return frozenset(seen)

    def behind_options(self, mark, behind, mask, nte, obls) -> list:
        """The ways a thread ``(mask, nte, obls)`` passes lookbehind ``mark``
        here, as ``(mask, nte, obls)`` triples (none: it fails). Its body's run
        holds the threads at the body's end; those whose only condition is on
        the next character (``\\b`` at the body's end) narrow ``mask``, and those
        with more (a lookahead inside the body, ``$``) pass their conditions
        on: a positive lookbehind takes the conditions of one of them (a thread
        each), a negative one the obligation that none of them holds."""
        ALL = self.ALL
        cond = 0
        rest = []
        for th in behind[mark.k]:
            if th[0] == mark.final:
                s, m, n, o = th
                if not n and not o:
                    if m == ALL:
                        return [] if mark.negate else [(mask, nte, obls)]
                    cond |= m
                else:
                    rest.append(th)
        if mark.negate:
            m = mask & ~cond
            if not m:
                return []
            if rest:
                obls = obls | {("L", mark.final, True, frozenset(rest))}
            return [(m, nte, obls)]
        out = [(mask & cond, nte, obls)] if mask & cond else []
        for _s, m, n, o in rest:
            if mask & m:
                out.append((mask & m, nte or n, obls | o))
        return out

    def check(self, a: Assert, mask: int, nte: bool, prev):
        """``(mask, nte)`` under the assertion ``a``, or ``None`` when it fails."""
        k = a.kind
        END = self.END
        if k == "begin":
            return (mask, nte) if prev == ("start",) else None
        if k == "begin_line":
            return (mask, nte) if prev == ("start",) or prev[0] else None
        nl = self.nl
        if k == "end_string":
            mask &= END
        elif k == "end_line":
            mask &= END | nl
        elif k == "end":
            mask &= END | nl
            nte = True
        else:
            w = self.word[a.ascii]
            nonword = (self.ALL & ~END) & ~w
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

    def ends(self, thread) -> bool:
        """Whether ``thread`` (at the end of its scope) is satisfied if the input
        ends here."""
        _s, mask, _nte, obls = thread
        if not mask & self.END:
            return False
        for ob in obls:
            if ob[0] == "L":
                _, final, negate, run = ob
                held = any(th[0] == final and self.ends(th) for th in run)
                if held == negate:
                    return False
            else:  # ("P", k, run): an earlier-ranked match whose conditions hold here
                final = self.atomics[ob[1]].final
                if any(th[0] in (final, _DONE) and self.ends(th) for th in ob[2]):
                    return False
        return True

    # -- priority runs (atomic groups) --------------------------------------------

    def exits(self, run, k: int):
        """The matches of atomic group ``k`` that ``run`` (its body's threads in
        priority order) found at this position, each as the ``(mask, nte,
        obligations)`` the thread leaving the group takes on: the match's own
        conditions, and that no earlier-ranked thread of the run matches (a
        ``"P"`` obligation); and the run to wait on for later matches, in which
        a conditional match stays (as :data:`_DONE`) until its conditions are
        decided. An unconditional match ends the run (later paths are never
        tried)."""
        final = self.atomics[k].final
        ALL = self.ALL
        out: list = []
        rest: list = []
        for th in run:
            s, m, n, o = th
            if s != final:
                rest.append(th)
                continue
            out.append((m, n, o | {("P", k, tuple(rest))} if rest else o))
            if m == ALL and not n and not o:
                break
            done = (_DONE, m, n, o)
            # a waiting match the same as an earlier-ranked one decides
            # nothing: if their conditions hold the earlier one matched first
            # (kept, a* under an unbounded lookahead added one per character
            # read, and no two states were ever the same)
            if done not in rest:
                rest.append(done)
        if all(th[0] == _DONE for th in rest):
            rest = []  # no thread left to find another match
        return out, tuple(rest)

    def pclosure(self, start: int, final, prev, behind) -> tuple:
        """The priority-ordered closure of the body starting at NFA state
        ``start``: the threads that read a character and those at ``final``
        (a match, with the conditions its path met), in the order Python's
        backtracking tries them, cut after an unconditional match (Python never
        tries later paths)."""
        out: list = []
        self._pvisit((start, self.ALL, False, _EMPTY), final, prev, behind, out, set())
        return tuple(out)

    def pstep(self, run, atom, final, prev, behind) -> tuple:
        """``run`` after ``atom``, in priority order, cut after an unconditional
        match, closed at the new position (``prev``, ``behind``). A waiting
        match (:data:`_DONE`) has its conditions stepped: it goes when they
        fail, and cuts what follows it once they hold."""
        low = 1 << atom
        nl_read = bool(self.nl & low)
        ALL = self.ALL
        out: list = []
        seen: set = set()
        waiting: set = set()
        for s, mask, nte, obls in run:
            if not mask & low:
                continue
            after = self.END if nte and nl_read else ALL
            if obls:
                obls = self.step_obligations(obls, atom, prev, behind)
                if obls is None:
                    continue
            if s == _DONE or s == final:
                if after == ALL and not obls:
                    out.append((_DONE, after, False, obls))
                    return tuple(out)
                # (a copy of an earlier-ranked waiting match decides nothing:
                # see exits)
                if (after, obls) not in waiting:
                    waiting.add((after, obls))
                    out.append((_DONE, after, False, obls))
                continue
            for emask, t in self.edges[s]:
                if emask & low and self._pvisit((t, after, False, obls), final, prev, behind,
                                                out, seen):
                    return tuple(out)
        return tuple(out)

    def _pvisit(self, start, final, prev, behind, out, seen) -> bool:
        """Depth-first from the thread ``start`` in edge order, the order
        Python's backtracking tries paths in, each path keeping the conditions
        it meets (assertions on the next character, lookaheads, lookbehinds);
        ``True`` once a path reaches ``final`` unconditionally. Iterative: a
        stack of ``[thread, successors, next index]`` frames, whose states are
        the search path (for the empty-iteration rule of :attr:`_NFA.guard`).

        A thread is followed once per ``seen`` *and* per set of guarding
        states on the path above it: where an iteration matched the empty
        string depends on the path, so a thread met again under other guards
        goes on differently. (Deduplicated by thread alone, ``(?:\\b\\b|a)++``
        lost the empty second iteration that its first assertion's thread
        had already been through in the first, and ranked reading ``a`` ahead
        of the empty match Python commits to: ``a`` was accepted.)"""
        eps, edges = self.eps, self.edges
        guard, loop_exit = self.guard, self.loop_exit
        guards = self.guard_targets
        ALL = self.ALL
        # a count per state: a state may be on the path twice, under other guards
        on_path: dict = {}
        stack = [[start, None, 0, ()]]
        while stack:
            frame = stack[-1]
            th, succ, i, ctx = frame
            u = th[0]
            if succ is not None:
                if i < len(succ):
                    frame[2] = i + 1
                    stack.append([succ[i], None, 0, ctx + (u,) if u in guards else ctx])
                else:
                    k = on_path[u] - 1
                    if k:
                        on_path[u] = k
                    else:
                        del on_path[u]
                    stack.pop()
                continue
            g = guard.get(u)
            if g is not None and g in on_path:
                # an iteration matched the empty string: Python goes on after
                # the repetition, and tries no further iteration
                frame[0] = (loop_exit[u],) + th[1:]
                continue
            key = (th, ctx) if ctx else th
            if key in seen:
                stack.pop()
                continue
            seen.add(key)
            _, mask, nte, obls = th
            if u == final:
                out.append(th)
                if mask == ALL and not nte and not obls:
                    return True
                stack.pop()  # a match if its conditions hold: later paths count too
                continue
            if edges[u]:
                out.append(th)
                stack.pop()
                continue
            nxt = []
            for t, a in eps[u]:
                if a is None:
                    nxt.append((t, mask, nte, obls))
                elif type(a) is Assert:
                    r = self.check(a, mask, nte, prev)
                    if r is not None:
                        nxt.append((t, r[0], r[1], obls))
                elif a.behind:
                    for m, n, o in self.behind_options(a, behind, mask, nte, obls):
                        nxt.append((t, m, n, o))
                else:  # a lookahead (the parser refuses atomic groups here)
                    run = self.closure([(a.start, ALL, False, _EMPTY)], prev, behind)
                    verdict = self.decide(run, a.final)
                    if verdict is None:
                        nxt.append((t, mask, nte, obls | {("L", a.final, a.negate, run)}))
                    elif verdict != a.negate:
                        nxt.append((t, mask, nte, obls))
            on_path[u] = on_path.get(u, 0) + 1
            frame[1] = nxt
        return False


#: what the keys of one Python subset construction may hold together, in bytes
#: (a key is a bitset of up to ~300k NFA states, or a set of threads:
#: max_states of them alone would allow gigabytes)
MAX_KEY_BYTES = 512 * 1024 * 1024


class _StateIndex:
    """Numbers DFA states (by their thread-set key) in discovery order, within the
    state, time and memory budgets (``size(key)``: the bytes a key holds,
    roughly)."""

    def __init__(self, initial, max_states: int, deadline: float | None, pattern: str,
                 size=None):
        self.index = {initial: 0}
        self.queue = [initial]
        self.max_states, self.deadline, self.pattern = max_states, deadline, pattern
        self.size = size
        self.bytes = 0 if size is None else size(initial)

    def id_of(self, key) -> int:
        j = self.index.get(key)
        if j is None:
            j = self.index[key] = len(self.queue)
            self.queue.append(key)
            if len(self.queue) > self.max_states:
                raise GrammarTooComplexError(
                    f"the regex {self.pattern[:80]!r} needs more than {self.max_states} "
                    f"automaton states (pass max_states= to raise the limit)")
            if self.size is not None:
                self.bytes += self.size(key)
                if self.bytes > MAX_KEY_BYTES:
                    raise GrammarTooComplexError(
                        f"the regex {self.pattern[:80]!r} needs an automaton of more than "
                        f"{MAX_KEY_BYTES >> 20} MiB to build")
        return j

    def done(self, n_expanded: int) -> None:
        """Check the time budget after each expanded state (one state's closures
        can take long: the clock costs far less)."""
        if self.deadline is not None and passed(self.deadline):
            raise out_of_time(self.pattern)


def _determinize_kernel(atoms, atom_lists, nfa: _NFA, start, final, max_states,
                        pattern, deadline: Deadline | None) -> CharDFA:
    """:func:`_determinize_plain` as one numba kernel over CSR arrays, which
    reads the clock as it goes (its own compilation not counted)."""
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
    args = (len(atoms), eps_ptr, np.asarray(eps_dst, dtype=np.int64), edge_ptr,
            np.asarray(edge_atom, dtype=np.int64), np.asarray(edge_dst, dtype=np.int64),
            start, final, max_states, kernel_deadline(deadline))
    ready(determinize, args, deadline, "char_dfa", tiny_determinize_args)
    table, accepting, count = determinize(*args[:-1], kernel_deadline(deadline))
    if count == OUT_OF_TIME:
        raise out_of_time(pattern)
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
            # a closure is up to the whole NFA (chains of optional copies), and
            # one DFA state may compute hundreds: the clock, per closure
            check_deadline(deadline, pattern)
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
    states = _StateIndex(closure_of(start), max_states, deadline, pattern,
                         size=lambda key: 8 + key.bit_length() // 8)
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
