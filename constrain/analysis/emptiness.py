"""Whether a grammar's language meets a partial output's, and a string in both.

Emptiness of ``L(G) ∩ P`` by the Bar-Hillel construction (Bar-Hillel, Perles,
Shamir 1961), as used for diffusion LMs by Mündler et al. 2025: each terminal's
byte DFA is composed with ``P``'s automaton to get the pairs ``(p, p')`` of ``P``
states it can span, then a least fixpoint gives the pairs every nonterminal can
span; ``P`` can be completed iff the top symbol spans the start and an accepting
state. Each fact's first derivation time is recorded, so a witness is read back by
always choosing a rule and split points of strictly earlier facts.
"""

from __future__ import annotations

from collections import deque
from typing import Sequence

import numpy as np

from constrain.analysis.partial_output import DEFAULT_MAX_STATES, PartialOutput, partial_output
from constrain.analysis.prepared import PreparedGrammar, prepare, refuse_budgets
from constrain.errors import GrammarTooComplexError, as_index

#: Default work budget: elementary steps (product-automaton edges + bytes of packed
#: rows combined). About 4 million steps a second were measured on this team's
#: machines, so the default stops a check after roughly a minute.
DEFAULT_MAX_WORK = 200_000_000

_NEVER = np.iinfo(np.int64).max


class _Budget:
    def __init__(self, max_work: int):
        self.left = max_work

    def spend(self, n: int) -> None:
        self.left -= n
        if self.left < 0:
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


def _compose(A: np.ndarray, B: np.ndarray, budget: _Budget) -> np.ndarray:
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


def _fixpoint(g: PreparedGrammar, P: PartialOutput, budget: _Budget, stop_early: bool):
    """Least fixpoint of the spans ``(p, p')`` of every symbol (Gauss-Seidel).

    Returns ``(R, T)``: per symbol, the boolean span matrix and the matrix of
    first derivation times (``None`` for symbols the grammar does not use). A fact
    derived at time ``t`` rests only on facts of smaller times, which makes
    witness extraction well-founded."""
    n = P.n
    # two n x n tables per symbol (9 bytes a cell), written whole before any
    # step: 60 symbols over a 3,000-state partial output were 4.9 GB, and a
    # bare MemoryError
    budget.spend(n * n * (len(g.dfas) + len(g.nonterminals)))
    R: list = [None] * g.n_symbols
    T: list = [None] * g.n_symbols
    for t, dfa in g.dfas.items():
        r = (np.zeros((n, n), dtype=bool) if dfa is None
             else _terminal_relation(dfa[0], dfa[1], P, budget))
        R[t] = r
        T[t] = np.where(r, 0, _NEVER)
    for s in g.nonterminals:
        R[s] = np.zeros((n, n), dtype=bool)
        T[s] = np.full((n, n), _NEVER, dtype=np.int64)
    eye = np.eye(n, dtype=bool)
    finals = P.accepting
    top = g.top
    # a rule is re-evaluated only when one of its symbols changed since its last turn
    version = [0] * g.n_symbols
    seen: list = [None] * len(g.rules)
    clock = 1
    changed = True
    while changed:
        changed = False
        for i, (lhs, rhs) in enumerate(g.rules):
            stamp = tuple([version[s] for s in rhs])
            if seen[i] == stamp:
                continue
            seen[i] = stamp
            if not rhs:
                prod = eye
            else:
                prod = R[rhs[0]]
                for s in rhs[1:]:
                    prod = _compose(prod, R[s], budget)
            new = prod & ~R[lhs]
            if new.any():
                R[lhs] |= new
                T[lhs][new] = clock
                version[lhs] += 1
                clock += 1
                changed = True
                if stop_early and lhs == top and (R[top][0] & finals).any():
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


#: the work a witness charges per distinct (symbol, from, to) it expands (~25
#: us each, where the budget's steps are ~0.25 us); its bytes cost a step each
_WITNESS_STEP = 100


def _expansion(g: PreparedGrammar, P: PartialOutput, R, T, s: int, a: int, b: int) -> list:
    """The pieces ``(symbol, from, to)`` of one rule of nonterminal ``s``
    spanning ``a -> b`` from facts derived strictly before ``T[s][a, b]``
    (so expanding them again ends)."""
    t = T[s][a, b]
    for rhs in g.by_lhs[s]:
        if not rhs:
            if a == b:
                return []
            continue
        rels = [R[x] & (T[x] < t) for x in rhs]
        # back[k]: the states from which rhs[k:] reaches b
        back = [None] * (len(rhs) + 1)
        back[-1] = np.zeros(P.n, dtype=bool)
        back[-1][b] = True
        for k in range(len(rhs) - 1, -1, -1):
            back[k] = (rels[k] & back[k + 1][None, :]).any(axis=1)
        if not back[0][a]:
            continue
        pieces = []
        x = a
        for k, sym_k in enumerate(rhs):
            y = int(np.flatnonzero(rels[k][x] & back[k + 1])[0])
            pieces.append((sym_k, x, y))
            x = y
        return pieces
    raise AssertionError("derivation without a witness")


def _witness(g: PreparedGrammar, P: PartialOutput, R, T, sym: int, p: int, p2: int,
             budget: _Budget) -> bytes:
    """A string derived from ``sym`` spanning ``p → p2``, each (symbol, from,
    to) expanded once by decreasing derivation time (:func:`_expansion`).

    It may be exponentially long in the grammar's size (``n_i: n_{i+1}
    n_{i+1}`` derives ``2**i`` bytes from ``i`` distinct expansions), so its
    length is counted first, expansion by expansion, and charged to
    ``budget`` (a step a byte) before any byte is written: a witness past the
    budget is refused at once, where building it leaf by leaf ran 10-14 s
    into the default budget before refusing."""
    root = (sym, p, p2)
    parts: dict = {}  # (symbol, from, to) -> terminal bytes, or its pieces
    size: dict = {}   # (symbol, from, to) -> the length of its string
    done = []         # the keys, each after its pieces
    stack = [root]
    while stack:
        key = stack[-1]
        if key in size:
            stack.pop()
            continue
        part = parts.get(key)
        if part is None:
            budget.spend(_WITNESS_STEP)
            s, a, b = key
            if s in g.dfas:
                trans, acc = g.dfas[s]
                part = parts[key] = _terminal_witness(trans, acc, P, a, b)
            else:
                part = parts[key] = _expansion(g, P, R, T, s, a, b)
                todo = [k for k in part if k not in size]
                if todo:
                    stack.extend(todo)
                    continue
        n = size[key] = len(part) if part.__class__ is bytes else sum(size[k] for k in part)
        budget.spend(n)
        done.append(key)
        stack.pop()
    text: dict = {}
    for key in done:
        part = parts[key]
        text[key] = part if part.__class__ is bytes else b"".join(text[k] for k in part)
    return text[root]


def find_completion(grammar, segments: Sequence, *, vocab=None,
                    max_states: int = DEFAULT_MAX_STATES,
                    max_work: int = DEFAULT_MAX_WORK) -> bytes | None:
    """A string of the grammar's language that fills the partial output, or ``None``.

    Guarantee: the result is ``None`` exactly when no filling of the holes of
    ``segments`` gives a string of the grammar's language (for Lark text, what
    ``lark.Lark(grammar, parser="earley", lexer="dynamic_complete")`` accepts; see
    :mod:`constrain.analysis`); otherwise it is such a string (UTF-8 bytes). Exact
    emptiness of ``L(G) ∩ P`` by the Bar-Hillel construction (Bar-Hillel, Perles,
    Shamir 1961; for diffusion LMs, Mündler et al. 2025).

    Args:
        grammar: Lark grammar text (or a ``.lark`` path), a
            :class:`constrain.cfg.ir.GrammarIR`, or a :class:`constrain.GrammarConstraint`.
        segments: ``str`` / ``bytes`` / token-id lists / :class:`Hole` objects.
        vocab: a :class:`constrain.Vocabulary`: token runs are spelled through it
            and holes count its tokens (without it, holes count characters).
        max_states: the partial output's largest automaton.
        max_work: the largest number of elementary steps: the fixpoint's, its
            tables' (two per symbol, as many cells as the partial output has
            states squared) and the witness's (which may be exponentially
            long in the grammar's size: ``n_i: n_{i+1} n_{i+1}``).

    Raises:
        constrain.GrammarTooComplexError: a budget was exceeded.
        constrain.GrammarError: the grammar is rejected, or has token budgets
            (``rule[max_tokens=N]``), which a check of the text cannot see.
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
    g = prepare(grammar)
    if g.budgets:
        refuse_budgets(grammar, "find_completion" if witness else "can_complete")
    for name, value in (("max_states", max_states), ("max_work", max_work)):
        if as_index(value, lambda: ValueError(f"{name} must be a count, not {value!r}")) < 1:
            raise ValueError(f"{name} must be >= 1, got {value}")
    P = partial_output(segments, vocab, max_states=max_states)
    if not P.accepting.any():
        return None
    budget = _Budget(max_work)
    R, T = _fixpoint(g, P, budget, stop_early=not witness)
    finals = np.flatnonzero(R[g.top][0] & P.accepting)
    if not len(finals):
        return None
    if not witness:
        return b""
    return _witness(g, P, R, T, g.top, 0, int(finals[0]), budget)


__all__ = ["can_complete", "find_completion", "DEFAULT_MAX_WORK"]
