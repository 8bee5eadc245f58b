"""Grammar-constrained infilling: can a partial output with gaps still be completed?

A *partial output* is a sequence of segments: fixed text (``str``), fixed bytes,
fixed token runs (lists of token ids, spelled through a vocabulary) and
:class:`Hole` objects. Its language ``P`` is the set of byte strings obtained by
filling every hole. The question "can it still be completed to a string of the
language ``L``?" is the emptiness of ``L ∩ P``:

* for a context-free grammar (Lark syntax, the semantics of
  ``lark.Lark(text, parser="earley", lexer="dynamic_complete")``: scannerless,
  terminals are regular languages, ``%ignore`` terminals anywhere between
  terminals and at both ends) it is decided exactly by the Bar-Hillel construction
  (Bar-Hillel, Perles, Shamir 1961), as used for diffusion LMs by Mündler et al.
  2025: each terminal's byte DFA is composed with ``P``'s automaton to get the
  pairs ``(p, p')`` of ``P`` states it can span, then a least fixpoint gives the
  pairs every nonterminal can span. :func:`can_complete` answers, and
  :func:`find_completion` also returns a witness string;
* for a regular constraint (:class:`constrain.DFAConstraint`) it is reachability
  over the token transition graph: :func:`can_complete_regex`, exact at the
  token level.

Units of a hole: with a ``vocab`` a hole of ``k`` tokens is any concatenation of
``k`` grammar-token byte strings of that vocabulary (exact for token-level
infilling); without one it is any ``k`` Unicode characters.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Sequence

import numpy as np

__all__ = [
    "Hole",
    "InfillGrammar",
    "load_grammar",
    "can_complete",
    "find_completion",
    "can_complete_regex",
    "PartialOutput",
    "partial_output",
    "fim_allowed",
]

#: Default largest partial-output automaton (states) before GrammarTooComplexError.
DEFAULT_MAX_STATES = 4000
#: Default work budget: elementary steps (product-automaton edges + bytes of packed
#: rows combined). About 4 million steps a second were measured on this team's
#: machines, so the default stops a check after roughly a minute.
DEFAULT_MAX_WORK = 200_000_000


@dataclass(frozen=True)
class Hole:
    """A gap of ``min_tokens`` to ``max_tokens`` units (``None``: unbounded).

    A unit is one token of the vocabulary passed alongside (any of its grammar
    tokens), or one Unicode character when no vocabulary is given.
    """

    min_tokens: int = 0
    max_tokens: int | None = None

    def __post_init__(self):
        if self.min_tokens < 0 or (self.max_tokens is not None and self.max_tokens < self.min_tokens):
            raise ValueError(f"bad hole bounds: {self.min_tokens}..{self.max_tokens}")


# -- the partial output's automaton ----------------------------------------------------


class PartialOutput:
    """An epsilon-free NFA over bytes: ``out[p]`` lists ``(byte, p')``; state 0 is
    the start; ``accepting`` is a boolean array."""

    def __init__(self, out: list, accepting: np.ndarray):
        self.out = out
        self.accepting = accepting
        self.n = len(out)

    def accepts(self, data: bytes) -> bool:
        """Whether ``data`` is one of the strings of the partial output (exact:
        the subset simulation of the NFA, Thompson 1968)."""
        cur = {0}
        for b in data:
            cur = {p2 for p in cur for bb, p2 in self.out[p] if bb == b}
            if not cur:
                return False
        return any(self.accepting[p] for p in cur)


class _NFABuilder:
    """States with byte edges and epsilon edges, epsilon-eliminated at the end."""

    def __init__(self, max_states: int):
        self.edges: list[list] = []
        self.eps: list[list] = []
        self.max_states = max_states

    def new(self) -> int:
        if len(self.edges) >= self.max_states:
            from constrain.errors import GrammarTooComplexError

            raise GrammarTooComplexError(
                f"the partial output's automaton needs more than {self.max_states} states "
                f"(pass max_states= to raise the limit, or use shorter holes)")
        self.edges.append([])
        self.eps.append([])
        return len(self.edges) - 1

    def chain(self, s: int, data: bytes) -> int:
        for b in data:
            t = self.new()
            self.edges[s].append((b, t))
            s = t
        return s

    def finish(self, start: int, final: int) -> PartialOutput:
        """Epsilon elimination, then renumbering from ``start`` (reachable and
        co-reachable states only)."""
        n = len(self.edges)
        closure = []
        for s in range(n):
            seen = {s}
            stack = [s]
            while stack:
                x = stack.pop()
                for y in self.eps[x]:
                    if y not in seen:
                        seen.add(y)
                        stack.append(y)
            closure.append(seen)
        out = [sorted({(b, t) for x in closure[s] for b, t in self.edges[x]}) for s in range(n)]
        acc = [final in closure[s] for s in range(n)]
        # reachable from start
        order = [start]
        index = {start: 0}
        for s in order:
            for _, t in out[s]:
                if t not in index:
                    index[t] = len(order)
                    order.append(t)
        # co-reachable to acceptance
        rev: dict = {}
        for s in order:
            for _, t in out[s]:
                rev.setdefault(t, set()).add(s)
        live = {s for s in order if acc[s]}
        stack = list(live)
        while stack:
            x = stack.pop()
            for y in rev.get(x, ()):
                if y not in live:
                    live.add(y)
                    stack.append(y)
        if start not in live:
            return PartialOutput([[]], np.zeros(1, dtype=bool))
        keep = [s for s in order if s in live]
        newid = {s: i for i, s in enumerate(keep)}
        new_out = [[(b, newid[t]) for b, t in out[s] if t in newid] for s in keep]
        return PartialOutput(new_out, np.array([acc[s] for s in keep], dtype=bool))


# one Unicode character as UTF-8 (the grammar's byte DFAs reject ill-formed UTF-8,
# so this slight over-approximation of well-formedness does not change L ∩ P)
_LEADS = ((range(0x00, 0x80), 0), (range(0xC2, 0xE0), 1), (range(0xE0, 0xF0), 2),
          (range(0xF0, 0xF5), 3))


def _one_char(nb: _NFABuilder, s: int) -> int:
    end = nb.new()
    conts = {0: end}
    for k in (1, 2, 3):
        c = nb.new()
        for b in range(0x80, 0xC0):
            nb.edges[c].append((b, conts[k - 1]))
        conts[k] = c
    for leads, k in _LEADS:
        for b in leads:
            nb.edges[s].append((b, conts[k]))
    return end


def _one_token(nb: _NFABuilder, s: int, tokens: list[bytes]) -> int:
    """A trie of the token byte strings from ``s``; every token ends in one state."""
    end = nb.new()
    trie: dict = {}
    for tok in tokens:
        node, x = trie, s
        for i, b in enumerate(tok):
            last = i == len(tok) - 1
            if last:
                nb.edges[x].append((b, end))
                break
            if b not in node:
                y = nb.new()
                node[b] = ({}, y)
                nb.edges[x].append((b, y))
            node, x = node[b]
    return end


def partial_output(segments: Sequence, vocab=None, *,
                   max_states: int = DEFAULT_MAX_STATES, minimize: bool = False) -> PartialOutput:
    """The byte automaton of ``segments`` (``str``, ``bytes``, lists of token ids,
    :class:`Hole`); see the module docstring for the units of a hole.

    Guarantee: it accepts exactly the byte strings obtained by filling the holes
    (Thompson-style construction, epsilon-eliminated; Hopcroft & Ullman 1979,
    ch. 2). With
    ``minimize`` it is the minimal DFA of that language (same language, fewer
    states).

    Raises:
        GrammarTooComplexError: more than ``max_states`` states.
        ValueError: a token run or a token hole without ``vocab``.
    """
    nb = _NFABuilder(max_states)
    tokens = None
    if vocab is not None:
        tokens = [bytes(vocab.tokens[i]) for i in range(len(vocab)) if vocab.grammar_token_list[i]]
    start = cur = nb.new()
    for seg in segments:
        if isinstance(seg, str):
            cur = nb.chain(cur, seg.encode("utf-8"))
        elif isinstance(seg, (bytes, bytearray)):
            cur = nb.chain(cur, bytes(seg))
        elif isinstance(seg, Hole):
            unit = ((lambda s: _one_token(nb, s, tokens)) if tokens is not None
                    else (lambda s: _one_char(nb, s)))
            for _ in range(seg.min_tokens):
                cur = unit(cur)
            if seg.max_tokens is None:
                loop = nb.new()
                nb.eps[cur].append(loop)
                back = unit(loop)
                nb.eps[back].append(loop)
                cur = loop
            else:
                ends = [cur]
                for _ in range(seg.max_tokens - seg.min_tokens):
                    cur = unit(cur)
                    ends.append(cur)
                join = nb.new()
                for e in ends:
                    nb.eps[e].append(join)
                cur = join
        else:
            ids = list(seg)
            if vocab is None:
                raise ValueError("a token run needs vocab=")
            for t in ids:
                cur = nb.chain(cur, vocab.tokens[int(t)])
    P = nb.finish(start, cur)
    return _minimize(P, max_states) if minimize else P


def _minimize(P: PartialOutput, max_states: int) -> PartialOutput:
    """The minimal DFA of ``P``'s language (subset construction, then constrain's
    Moore minimisation), as a :class:`PartialOutput` (the fixpoint's cost is cubic
    in the number of states)."""
    from constrain.automata.byte_dfa import ByteDFA, trim_and_minimize
    from constrain.errors import GrammarTooComplexError

    if P.n == 1 and not P.accepting[0]:
        return P
    index = {frozenset([0]): 1}
    subsets = [None, frozenset([0])]
    rows = [None]
    k = 1
    while k < len(subsets):
        sub = subsets[k]
        moves: dict = {}
        for p in sub:
            for b, t in P.out[p]:
                moves.setdefault(b, set()).add(t)
        row = {}
        for b, ts in moves.items():
            key = frozenset(ts)
            j = index.get(key)
            if j is None:
                if len(subsets) > max_states:
                    raise GrammarTooComplexError(
                        f"the partial output's automaton needs more than {max_states} states "
                        f"(pass max_states= to raise the limit, or use shorter holes)")
                j = index[key] = len(subsets)
                subsets.append(key)
            row[b] = j
        rows.append(row)
        k += 1
    table = np.zeros((len(subsets), 256), dtype=np.int32)
    acc = np.zeros(len(subsets), dtype=np.bool_)
    for j in range(1, len(subsets)):
        for b, t in rows[j].items():
            table[j, b] = t
        acc[j] = any(P.accepting[p] for p in subsets[j])
    dfa = trim_and_minimize(ByteDFA(table, acc))
    n = dfa.num_states - 1
    t = dfa.transitions
    out = []
    for q in range(1, n + 1):
        bs = np.flatnonzero(t[q])
        out.append([(int(b), int(t[q, b]) - 1) for b in bs])
    return PartialOutput(out, dfa.accepting[1:].copy())


# -- grammars ----------------------------------------------------------------------------


@dataclass
class InfillGrammar:
    """A context-free grammar over bytes: ``rules`` are ``(lhs, rhs)`` with symbols
    named by strings, ``terminals`` maps a terminal name to its Python regex,
    ``ignore`` lists the terminals allowed between any two terminals."""

    rules: list
    terminals: dict
    ignore: list
    start: str


def load_grammar(source: str, start: str | None = None) -> InfillGrammar:
    """Load a Lark grammar into an :class:`InfillGrammar` (the only place that
    touches lark, so another loader can replace it).

    Guarantee: the language is what ``lark.Lark(source, parser="earley",
    lexer="dynamic_complete")`` accepts (rules after Lark's own expansion of
    ``?``, ``[]``, ``*``, ``+`` and templates; terminal patterns with their flags).
    Reference: Lark documentation, "Grammar Reference".

    Raises:
        constrain.GrammarError: Lark rejects the grammar.
    """
    import lark

    from constrain.errors import GrammarError

    kwargs = {"start": start} if start is not None else {}
    try:
        g = lark.Lark(source, parser="earley", lexer="dynamic_complete", **kwargs)
    except lark.exceptions.GrammarError as exc:
        raise GrammarError(str(exc)) from None
    except lark.exceptions.UnexpectedInput as exc:
        raise GrammarError(f"bad grammar syntax: {exc}", getattr(exc, "line", None),
                           getattr(exc, "column", None)) from None
    terminal_names = {t.name for t in g.terminals}
    rules = []
    for r in g.rules:
        rhs = tuple(("T" if sym.is_term else "N", sym.name) for sym in r.expansion)
        rules.append((r.origin.name, rhs))
    terminals = {t.name: t.pattern.to_regexp() for t in g.terminals}
    ignore = [name for name in g.ignore_tokens if name in terminal_names]
    return InfillGrammar(rules, terminals, ignore, g.options.start[0] if start is None else start)


def _terminal_dfa(regex: str):
    """A Lark terminal's regex → a trimmed, minimal byte DFA (via constrain's
    regex pipeline: the same Python ``re`` semantics)."""
    from constrain.automata.byte_dfa import char_dfa_to_bytes, trim_and_minimize
    from constrain.automata.char_dfa import build_char_dfa
    from constrain.automata.regex_syntax import parse_regex

    node = parse_regex(regex)
    return trim_and_minimize(char_dfa_to_bytes(build_char_dfa(node, pattern=regex)))


class _Compiled:
    """A grammar with its terminals compiled to byte DFAs (cached per source)."""

    def __init__(self, grammar: InfillGrammar):
        self.grammar = grammar
        self.dfas = {}
        for name, rx in grammar.terminals.items():
            dfa = _terminal_dfa(rx)
            self.dfas[name] = (dfa.transitions.tolist(), dfa.accepting.tolist(), dfa)
        # Ignored terminals may appear at both ends and between any two terminals:
        # IGN → ε | IGN X (X ignored), each terminal T becomes ⟨T⟩ → T IGN and the
        # start becomes START' → IGN S.
        ign, top = "\0ign", "\0start"
        rules = [(ign, ())] + [(ign, (("N", ign), ("T", x))) for x in grammar.ignore]
        used = set()
        for lhs, rhs in grammar.rules:
            new = []
            for kind, name in rhs:
                if kind == "T":
                    used.add(name)
                    new.append(("N", "\0t:" + name))
                else:
                    new.append((kind, name))
            rules.append((lhs, tuple(new)))
        for name in sorted(used):
            rules.append(("\0t:" + name, (("T", name), ("N", ign))))
        rules.append((top, (("N", ign), ("N", grammar.start))))
        self.rules = rules
        self.top = top
        self.used_terminals = sorted(used | set(grammar.ignore))


_CACHE: dict = {}


def _compiled(grammar) -> _Compiled:
    if isinstance(grammar, _Compiled):
        return grammar
    key = grammar if isinstance(grammar, str) else id(grammar)
    c = _CACHE.get(key)
    if c is None or (not isinstance(grammar, str) and c.grammar is not grammar):
        g = load_grammar(grammar) if isinstance(grammar, str) else grammar
        c = _CACHE[key] = _Compiled(g)
    return c


# -- the emptiness check -----------------------------------------------------------------


class _Budget:
    def __init__(self, max_work: int):
        self.left = max_work

    def spend(self, n: int) -> None:
        self.left -= n
        if self.left < 0:
            from constrain.errors import GrammarTooComplexError

            raise GrammarTooComplexError(
                "the infilling check exceeded its work budget (pass max_work= to raise it)")


def _bits_to_rows(bits: int, n: int) -> np.ndarray:
    """The indices of the set bits of ``bits`` (< n)."""
    raw = np.frombuffer(bits.to_bytes((n + 7) // 8, "little"), dtype=np.uint8)
    return np.flatnonzero(np.unpackbits(raw, bitorder="little")[:n])


def _terminal_relation(trans, accepting, P: PartialOutput, budget: _Budget) -> np.ndarray:
    """``R[p, p']``: some string of the terminal leads ``P`` from ``p`` to ``p'``.

    Reachability in the product (terminal DFA × P), carrying for every product
    state the set of ``P`` states it was entered from, as a bitset."""
    n = P.n
    reach = {(1, p): 1 << p for p in range(n)}
    queued = set(reach)
    work = deque(reach)
    out = P.out
    while work:
        key = work.popleft()
        queued.discard(key)
        q, p = key
        bits = reach[key]
        row = trans[q]
        edges = out[p]
        budget.spend(len(edges) + 1)
        for b, p2 in edges:
            q2 = row[b]
            if q2 == 0:
                continue
            k2 = (q2, p2)
            old = reach.get(k2, 0)
            new = old | bits
            if new != old:
                reach[k2] = new
                if k2 not in queued:
                    queued.add(k2)
                    work.append(k2)
    R = np.zeros((n, n), dtype=bool)
    for (q, p), bits in reach.items():
        if accepting[q]:
            R[_bits_to_rows(bits, n), p] = True
    return R


def _compose(A: np.ndarray, B: np.ndarray, budget: "_Budget") -> np.ndarray:
    """Boolean relation product ``A · B``: row ``p`` is the OR of the rows of ``B``
    selected by ``A[p]``, on bit-packed rows. Cost grows with the non-zeros of
    ``A`` (relations over a partial output are sparse), and no BLAS is involved:
    a threaded BLAS on a shared machine made the float product 200x slower."""
    r, c = np.nonzero(A)
    n = B.shape[1]
    budget.spend(len(r) * ((n + 7) // 8) + A.shape[0])
    if not len(r):
        return np.zeros((A.shape[0], n), dtype=bool)
    packed = np.packbits(B, axis=1)
    starts = np.flatnonzero(np.r_[True, r[1:] != r[:-1]])
    out = np.zeros((A.shape[0], packed.shape[1]), dtype=np.uint8)
    out[r[starts]] = np.bitwise_or.reduceat(packed[c], starts, axis=0)
    return np.unpackbits(out, axis=1, count=n).astype(bool)


def _fixpoint(comp: _Compiled, P: PartialOutput, budget: _Budget, stop_early: bool):
    """Least fixpoint of the spans ``(p, p')`` of every symbol (Gauss-Seidel).

    Returns ``(R, T)``: boolean and first-derivation-time matrices per symbol.
    A fact derived at time ``t`` rests only on facts of smaller times, which makes
    witness extraction well-founded."""
    n = P.n
    never = np.iinfo(np.int64).max
    R, T = {}, {}
    for name in comp.used_terminals:
        trans, acc, _ = comp.dfas[name]
        r = _terminal_relation(trans, acc, P, budget)
        key = ("T", name)
        R[key] = r
        T[key] = np.where(r, 0, never)
    for lhs, _ in comp.rules:
        key = ("N", lhs)
        if key not in R:
            R[key] = np.zeros((n, n), dtype=bool)
            T[key] = np.full((n, n), never, dtype=np.int64)
    eye = np.eye(n, dtype=bool)
    finals = P.accepting
    top = ("N", comp.top)
    # a rule is re-evaluated only when one of its symbols changed since its last turn
    version = {key: 0 for key in R}
    seen = [None] * len(comp.rules)
    clock = 1
    changed = True
    while changed:
        changed = False
        for r, (lhs, rhs) in enumerate(comp.rules):
            key = ("N", lhs)
            stamp = tuple(version[sym] for sym in rhs)
            if seen[r] == stamp:
                continue
            seen[r] = stamp
            if not rhs:
                prod = eye
            else:
                prod = R[rhs[0]]
                for sym in rhs[1:]:
                    prod = _compose(prod, R[sym], budget)
            new = prod & ~R[key]
            if new.any():
                R[key] = R[key] | new
                T[key][new] = clock
                version[key] += 1
                clock += 1
                changed = True
                if stop_early and key == top and (R[top][0] & finals).any():
                    return R, T
    return R, T


def _terminal_witness(trans, accepting, P: PartialOutput, p: int, p2: int) -> bytes:
    """A shortest string of the terminal leading ``P`` from ``p`` to ``p2`` (BFS)."""
    start = (1, p)
    parent = {start: None}
    work = deque([start])
    while work:
        key = work.popleft()
        q, x = key
        if x == p2 and accepting[q]:
            out = []
            while parent[key] is not None:
                key, b = parent[key]
                out.append(b)
            return bytes(reversed(out))
        for b, y in P.out[x]:
            q2 = trans[q][b]
            if q2 and (q2, y) not in parent:
                parent[(q2, y)] = (key, b)
                work.append((q2, y))
    raise AssertionError("terminal relation without a witness")


def _witness(comp: _Compiled, P: PartialOutput, R, T, key, p: int, p2: int) -> bytes:
    """A string derived from symbol ``key`` spanning ``p → p2`` (iterative, by
    decreasing derivation time)."""
    by_lhs: dict = {}
    for lhs, rhs in comp.rules:
        by_lhs.setdefault(lhs, []).append(rhs)
    out = []
    stack = [(key, p, p2)]
    while stack:
        (kind, name), a, b = stack.pop()
        if kind == "T":
            trans, acc, _ = comp.dfas[name]
            out.append(_terminal_witness(trans, acc, P, a, b))
            continue
        t = T[(kind, name)][a, b]
        for rhs in by_lhs[name]:
            if not rhs:
                if a == b:
                    break
                continue
            rels = [R[s] & (T[s] < t) for s in rhs]
            # backward sets: back[k] = states from which rhs[k:] reaches b
            back = [None] * (len(rhs) + 1)
            back[-1] = np.zeros(P.n, dtype=bool)
            back[-1][b] = True
            for k in range(len(rhs) - 1, -1, -1):
                back[k] = (rels[k] & back[k + 1][None, :]).any(axis=1)
            if not back[0][a]:
                continue
            pieces = []
            x = a
            for k, sym in enumerate(rhs):
                y = int(np.flatnonzero(rels[k][x] & back[k + 1])[0])
                pieces.append((sym, x, y))
                x = y
            stack.extend(reversed(pieces))
            break
        else:
            raise AssertionError("derivation without a witness")
    return b"".join(out)


def find_completion(grammar, segments: Sequence, *, vocab=None,
                    max_states: int = DEFAULT_MAX_STATES,
                    max_work: int = DEFAULT_MAX_WORK) -> bytes | None:
    """A string of the grammar's language that fills the partial output, or ``None``.

    Guarantee: the result is ``None`` exactly when no filling of the holes of
    ``segments`` gives a string that ``lark.Lark(grammar, parser="earley",
    lexer="dynamic_complete")`` accepts; otherwise it is such a string (UTF-8
    bytes). Exact emptiness of ``L(G) ∩ P`` by the Bar-Hillel construction
    (Bar-Hillel, Perles, Shamir 1961; for diffusion LMs, Mündler et al. 2025).

    Args:
        grammar: Lark grammar text, an :class:`InfillGrammar`, or a compiled one.
        segments: ``str`` / ``bytes`` / token-id lists / :class:`Hole` objects.
        vocab: a :class:`constrain.Vocabulary`: token runs are spelled through it
            and holes count its tokens (without it, holes count characters).
        max_states, max_work: budgets.

    Raises:
        constrain.GrammarTooComplexError: a budget was exceeded.
        constrain.GrammarError: the grammar is not valid Lark.
    """
    return _decide(grammar, segments, vocab, max_states, max_work, witness=True)


def can_complete(grammar, segments: Sequence, *, vocab=None,
                 max_states: int = DEFAULT_MAX_STATES,
                 max_work: int = DEFAULT_MAX_WORK) -> bool:
    """Whether the partial output ``segments`` can be completed to a string of the
    grammar's language (exact; same arguments and semantics as
    :func:`find_completion`, which also returns a witness). Reference:
    Mündler et al. 2025, emptiness of the grammar intersected with the partial
    output's regular language."""
    return _decide(grammar, segments, vocab, max_states, max_work, witness=False) is not None


def _decide(grammar, segments, vocab, max_states, max_work, witness):
    comp = _compiled(grammar)
    P = partial_output(segments, vocab, max_states=max_states)
    if not P.accepting.any():
        return None
    budget = _Budget(max_work)
    R, T = _fixpoint(comp, P, budget, stop_early=not witness)
    top = ("N", comp.top)
    finals = np.flatnonzero(R[top][0] & P.accepting)
    if not len(finals):
        return None
    if not witness:
        return b""
    return _witness(comp, P, R, T, top, 0, int(finals[0]))


# -- regular constraints ---------------------------------------------------------------


def can_complete_regex(grammar, segments: Sequence, state: int | None = None) -> bool:
    """Whether the token-level partial output ``segments`` can be completed from
    ``state`` to a string that ``grammar`` (a :class:`constrain.DFAConstraint`)
    accepts.

    Guarantee: exact at the token level: fixed runs (token-id lists) must be
    allowed token by token (``grammar.advance``), a ``Hole(k, m)`` is any ``k`` to
    ``m`` grammar tokens allowed in sequence, ``str``/``bytes`` segments are walked
    byte by byte through the DFA; the answer is whether some filling ends in an
    accepting state. Reachability over the token transition graph (the DFA view
    of Mündler et al. 2025's check; DINGO, Suresh et al. 2025, uses the same graph).
    """
    from constrain.automata.byte_dfa import DEAD

    cur = {grammar.initial_state() if state is None else int(state)}
    if -1 in cur:
        # after EOS only the empty continuation remains
        return all((isinstance(s, Hole) and s.min_tokens == 0)
                   or (not isinstance(s, Hole) and len(s) == 0) for s in segments)
    trans = grammar.dfa.transitions

    def step(states):
        nxt = set()
        for q in states:
            _, nexts = grammar.token_transitions(q)
            nxt.update(np.unique(nexts).tolist())
        return nxt

    for seg in segments:
        if not cur:
            return False
        if isinstance(seg, (str, bytes, bytearray)):
            data = seg.encode("utf-8") if isinstance(seg, str) else bytes(seg)
            new = set()
            for q in cur:
                for b in data:
                    q = int(trans[q, b])
                    if q == DEAD:
                        break
                else:
                    new.add(q)
            cur = new
        elif isinstance(seg, Hole):
            for _ in range(seg.min_tokens):
                cur = step(cur)
            total = set(cur)
            layer = set(cur)
            if seg.max_tokens is None:
                while layer:
                    layer = step(layer) - total
                    total |= layer
            else:
                for _ in range(seg.max_tokens - seg.min_tokens):
                    if not layer:
                        break
                    layer = step(layer)
                    total |= layer
            cur = total
        else:
            new = set()
            for q in cur:
                for t in seg:
                    q = grammar.advance(q, int(t))
                    if q is None or q == -1:
                        break
                else:
                    new.add(q)
            cur = new
    return any(grammar.is_accepting(q) for q in cur)


def fim_allowed(grammar, prefix: Sequence[int], suffix: Sequence, *, vocab,
                candidates: Sequence[int] | None = None,
                max_middle_tokens: int | None = None, **budgets) -> list[int]:
    """For fill-in-the-middle with an autoregressive model: the candidate next
    tokens after ``prefix`` (token ids) for which ``prefix + token + middle +
    suffix`` can still be a string of the language, for some middle of at most
    ``max_middle_tokens - 1`` further tokens (unbounded by default). EOS ids are
    allowed when ``prefix + suffix`` is itself complete.

    Guarantee: exact (one :func:`can_complete` per candidate, so cost grows with
    the number of candidates: pass the model's top few). Reference: Mündler et al.
    2025, applied left to right; the same check as the diffusion driver.

    Args:
        grammar: as for :func:`can_complete` (Lark text, InfillGrammar) or a
            :class:`constrain.DFAConstraint` (then token-level reachability).
        suffix: segments after the middle (``str``, ``bytes``, token-id lists).
        vocab: the vocabulary; candidates default to all its grammar tokens.
    """
    from constrain import DFAConstraint

    if candidates is None:
        candidates = [i for i in range(len(vocab)) if vocab.grammar_token_list[i]]
    rest = None if max_middle_tokens is None else max(0, max_middle_tokens - 1)
    middle = Hole(0, rest)
    regular = isinstance(grammar, DFAConstraint)
    out = []
    for t in candidates:
        t = int(t)
        if t in vocab.eos_token_set:
            segs = [list(prefix), *suffix]
        elif not vocab.grammar_token_list[t]:
            continue
        else:
            segs = [list(prefix) + [t], middle, *suffix]
        if regular:
            ok = can_complete_regex(grammar, segs)
        else:
            ok = can_complete(grammar, segs, vocab=vocab, **budgets)
        if ok:
            out.append(t)
    return out
