"""The automaton of a partial output: fixed text, bytes and token runs with
:class:`Hole` s between them, as an epsilon-free byte NFA whose language is every
filling of the holes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from constrain.errors import GrammarTooComplexError, as_index

#: Default largest partial-output automaton (states) before GrammarTooComplexError.
DEFAULT_MAX_STATES = 4000


@dataclass(frozen=True)
class Hole:
    """A gap of ``min_tokens`` to ``max_tokens`` units (``None``: unbounded).

    A unit is one token of the vocabulary passed alongside (any of its grammar
    tokens), or one Unicode character when no vocabulary is given.
    """

    min_tokens: int = 0
    max_tokens: int | None = None

    def __post_init__(self):
        lo, hi = self.min_tokens, self.max_tokens
        # a bool or a float is no count (Hole(None) raised a bare TypeError from
        # the comparison, Hole(1.5) built a hole no loop could unroll)
        if not (_is_count(lo) and (hi is None or _is_count(hi))):
            raise ValueError(f"a hole's bounds are counts of units (integers >= 0, max_tokens "
                             f"also None), not {lo!r}..{hi!r}")
        if hi is not None and hi < lo:
            raise ValueError(f"bad hole bounds: {lo}..{hi} (max_tokens below min_tokens)")


def text_bytes(k: int, text: str) -> bytes:
    """The UTF-8 bytes of segment ``k``'s ``text``; ``ValueError`` for a lone
    surrogate, which no bytes spell (it was ``UnicodeEncodeError``)."""
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError as e:
        raise ValueError(f"segment {k}: the text has a lone surrogate at character "
                         f"{e.start}, which no UTF-8 bytes spell") from None


def bad_segment(k: int, seg) -> TypeError:
    """The error for segment ``k`` of a type no partial output has."""
    return TypeError(f"segment {k}: a partial output's segments are text (str), bytes, "
                     f"token id lists and Holes, not {type(seg).__name__}")


def _is_count(x) -> bool:
    try:
        return as_index(x, TypeError) >= 0
    except TypeError:
        return False


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


def _too_many_states(max_states: int) -> GrammarTooComplexError:
    return GrammarTooComplexError(
        f"the partial output's automaton needs more than {max_states} states "
        f"(pass max_states= to raise the limit, or use shorter holes)")


class _NFABuilder:
    """States with byte edges and epsilon edges, epsilon-eliminated at the end."""

    def __init__(self, max_states: int):
        self.edges: list[list] = []
        self.eps: list[list] = []
        self.max_states = max_states

    def new(self) -> int:
        if len(self.edges) >= self.max_states:
            raise _too_many_states(self.max_states)
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
        order = [start]
        index = {start: 0}
        for s in order:
            for _, t in out[s]:
                if t not in index:
                    index[t] = len(order)
                    order.append(t)
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
            if i == len(tok) - 1:
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
    :class:`Hole`); see :mod:`constrain.analysis` for the units of a hole.

    Guarantee: it accepts exactly the byte strings obtained by filling the holes
    (Thompson-style construction, epsilon-eliminated; Hopcroft & Ullman 1979,
    ch. 2). With ``minimize`` it is the minimal DFA of that language (same
    language, fewer states; the subset construction can blow up on long token
    holes, hence off by default).

    A run through an id that is no grammar token (EOS, a special or padding
    id) spells no text of the language: the automaton is then empty.

    Raises:
        GrammarTooComplexError: more than ``max_states`` states.
        ValueError: a token run without ``vocab``, a token id outside it, or
            text with a lone surrogate (no bytes spell it).
        TypeError: a segment of another type.
    """
    nb = _NFABuilder(max_states)
    tokens = None
    if vocab is not None:
        from constrain.vocab.vocabulary import Vocabulary

        if not isinstance(vocab, Vocabulary):
            raise TypeError(f"vocab must be a constrain.Vocabulary, not {type(vocab).__name__}")
        tokens = [bytes(vocab.tokens[i]) for i in range(len(vocab)) if vocab.grammar_token_list[i]]
    start = cur = nb.new()
    for k, seg in enumerate(segments):
        if isinstance(seg, str):
            cur = nb.chain(cur, text_bytes(k, seg))
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
        elif isinstance(seg, (list, tuple, np.ndarray)):
            if vocab is None:
                raise ValueError(f"segment {k}: a token run needs vocab=")
            n = len(vocab)
            for t in seg:
                # a negative id read the vocabulary from its end, one past it
                # was an IndexError
                bad = lambda: ValueError(f"segment {k}: token id {t!r} is not one of the "  # noqa: E731
                                         f"vocabulary's 0..{n - 1}")
                i = as_index(t, bad)
                if not 0 <= i < n:
                    raise bad()
                if not vocab.grammar_token_list[i]:
                    # EOS, a special or a padding id spells no text of the
                    # language: nothing fills a run through one (it read EOS
                    # as the text "</s>"), as can_complete_regex drops it
                    cur = nb.new()  # unreachable: the language is empty
                    continue
                cur = nb.chain(cur, vocab.tokens[i])
        else:
            raise bad_segment(k, seg)
    P = nb.finish(start, cur)
    return _minimize(P, max_states) if minimize else P


def _minimize(P: PartialOutput, max_states: int) -> PartialOutput:
    """The minimal DFA of ``P``'s language (subset construction, then constrain's
    Hopcroft minimisation), as a :class:`PartialOutput` (the fixpoint's cost is cubic
    in the number of states)."""
    from constrain.automata.byte_dfa import ByteDFA, trim_and_minimize

    if P.n == 1 and not P.accepting[0]:
        return P
    # byte-DFA state 0 is dead, so subset k is state k and the start {0} is 1
    index = {frozenset([0]): 1}
    subsets = [None, frozenset([0])]
    rows = [None]
    k = 1
    while k < len(subsets):
        moves: dict = {}
        for p in subsets[k]:
            for b, t in P.out[p]:
                moves.setdefault(b, set()).add(t)
        row = {}
        for b, ts in moves.items():
            key = frozenset(ts)
            j = index.get(key)
            if j is None:
                if len(subsets) > max_states:
                    raise _too_many_states(max_states)
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
    t = dfa.transitions
    out = []
    for q in range(1, dfa.num_states):
        bs = np.flatnonzero(t[q])
        out.append([(int(b), int(t[q, b]) - 1) for b in bs])
    return PartialOutput(out, dfa.accepting[1:].copy())


__all__ = ["Hole", "PartialOutput", "partial_output", "DEFAULT_MAX_STATES"]
