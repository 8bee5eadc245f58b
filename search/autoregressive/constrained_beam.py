"""Lexically constrained beam search with dynamic beam allocation.

:func:`constrained_beam_search` is the dynamic beam allocation (DBA) of Post and
Vilar (NAACL 2018, "Fast Lexically Constrained Decoding with Dynamic Beam
Allocation for Neural Machine Translation"): every returned hypothesis contains
every given phrase, and the beam keeps its size ``k`` whatever the number of
phrases (grid beam search, Hokamp and Liu 2017, needs a beam per constraint
token). Each hypothesis carries how far it is through each phrase; at each step
the candidates are

* the ``k`` best continuations of each hypothesis (which include its best single
  token),
* the tokens that advance an unmet phrase: its first token, and the next token of
  each phrase the hypothesis is inside,

and they are grouped into *banks* by the number of phrase tokens met. The ``k``
slots of the next beam are split evenly over the banks (the remainder to the
bank of the hypotheses that met everything); slots a bank cannot fill go to the
bank below, and what bank 0 cannot fill goes back up (:func:`allocate_banks`).
Each bank keeps its best candidates, so a hypothesis that has just been forced
into a phrase competes only with hypotheses as far through the phrases as it.

Phrases are tracked with one Aho-Corasick automaton per phrase over its
alternatives (:class:`PhraseTracker`): a phrase started and abandoned loses its
progress (the hypothesis drops to a lower bank), and a phrase the model produces
unforced counts as met. EOS is allowed only once every phrase is met (and where
the grammar constraint, if any, accepts).

With a grammar constraint, every candidate is also a token the grammar allows,
and before the search each phrase is checked to fit somewhere in the grammar's
language (:func:`constrain.analysis.can_complete_regex` for a regex,
:func:`constrain.analysis.can_complete` for a context-free grammar); a phrase
that cannot is a ``ValueError`` before any model call. So that outputs end
complete rather than cut off by ``max_new_tokens``, a hypothesis that has met
every phrase also proposes the first token of the grammar's shortest completion
(as ``generate(close=True)`` spells it), and a candidate that could no longer
meet its phrases, close the grammar and end within the budget is dropped.

The cost per step is the one ``lm.logprobs`` call of a beam search of the same
``beam_size`` (``k`` prefixes), whatever the number of phrases, plus
bookkeeping over at most ``k * (k + a + 1)`` candidates (``a``: the tokens that
advance a phrase), linear in the number of phrases per candidate, and with a
grammar one mask per hypothesis, one ``advance`` and one (cached) shortest
completion per candidate; small beside a model call. See ``docs/search.md``.
"""

from __future__ import annotations

import dataclasses
from numbers import Integral
from typing import Sequence

import numpy as np

from search.autoregressive.beam import Hypothesis
from search.autoregressive.closing import completion_tokens, shortest_completion
from search.lm.protocol import as_constraint, as_lm, constraint_eos_ids, decoder, prompt_token_ids

__all__ = ["constrained_beam_search", "allocate_banks", "PhraseTracker"]

#: the tracker's entry for a phrase that has been met
MET = -1


class PhraseTracker:
    """Which phrases a token sequence contains, read token by token.

    Each phrase is a set of alternatives (token-id tuples); it is met once one of
    them occurs as a contiguous run. Per phrase, an Aho-Corasick automaton over its
    alternatives (Aho and Corasick 1975) follows the longest suffix of the tokens
    so far that is a prefix of an alternative, so a broken-off phrase falls back to
    the longest partial match still open (as KMP does), never to a guess.

    A tracker state is a tuple with one entry per phrase: :data:`MET`, or the
    automaton node of its open partial match (0: none). States are immutable and
    hashable, like constraint states.

    Args:
        phrases: per phrase, its alternatives, each a non-empty tuple of token ids.
    """

    def __init__(self, phrases: Sequence[Sequence[tuple[int, ...]]]):
        self.n = len(phrases)
        self._children: list[list[dict[int, int]]] = []
        self._fail: list[list[int]] = []
        self._matched: list[list[bool]] = []
        self._left: list[list[int]] = []
        self._advancing: list[list[frozenset[int]]] = []
        self._goto: list[dict[tuple[int, int], int]] = []
        for alternatives in phrases:
            self._build(alternatives)
        #: per phrase, the length of its shortest alternative
        self.need = tuple(left[0] for left in self._left)
        #: the number of phrase tokens a hypothesis that met every phrase has met
        self.total = sum(self.need)
        self._alphabet = frozenset(t for alts in phrases for alt in alts for t in alt)
        self._disjoint = not _phrases_overlap(phrases)

    def _build(self, alternatives: Sequence[tuple[int, ...]]) -> None:
        children: list[dict[int, int]] = [{}]
        end = [False]
        for alt in alternatives:
            node = 0
            for t in alt:
                nxt = children[node].get(t)
                if nxt is None:
                    nxt = len(children)
                    children[node][t] = nxt
                    children.append({})
                    end.append(False)
                node = nxt
            end[node] = True
        # nodes are numbered after their parents, so this visits children first
        below = [0] * len(children)
        for u in range(len(children) - 1, -1, -1):
            below[u] = 0 if end[u] else 1 + min(below[v] for v in children[u].values())
        fail = [0] * len(children)
        matched = list(end)
        left = [below[0]] * len(children)
        advancing = [frozenset(children[0])] * len(children)
        queue = list(children[0].values())
        for v in queue:  # breadth first: a node's failure link is shallower, so done
            left[v] = 0 if end[v] else min(below[v], left[fail[v]])
            matched[v] = end[v] or matched[fail[v]]
            advancing[v] = frozenset(children[v]) | advancing[fail[v]]
            for t, w in children[v].items():
                f = fail[v]
                while f and t not in children[f]:
                    f = fail[f]
                fail[w] = children[f].get(t, 0)
                queue.append(w)
        self._children.append(children)
        self._fail.append(fail)
        self._matched.append(matched)
        self._left.append(left)
        self._advancing.append(advancing)
        self._goto.append({})

    def initial(self) -> tuple[int, ...]:
        """The state before any token: no phrase met, nothing open."""
        return (0,) * self.n

    def _next(self, c: int, node: int, t: int) -> int:
        key = (node, t)
        memo = self._goto[c]
        nxt = memo.get(key)
        if nxt is None:
            children, fail = self._children[c], self._fail[c]
            while node and t not in children[node]:
                node = fail[node]
            nxt = children[node].get(t, 0)
            if self._matched[c][nxt]:
                nxt = MET
            memo[key] = nxt
        return nxt

    def advance(self, state: tuple[int, ...], token: int) -> tuple[int, ...]:
        """The state after one more token."""
        if token not in self._alphabet:  # no phrase has it: every open match breaks off
            return tuple(MET if s == MET else 0 for s in state)
        return tuple(s if s == MET else self._next(c, s, token) for c, s in enumerate(state))

    def done(self, state: tuple[int, ...]) -> bool:
        """Whether every phrase has been met."""
        return all(s == MET for s in state)

    def met_tokens(self, state: tuple[int, ...]) -> int:
        """The bank of ``state``: per phrase, its shortest length if met, else how
        many tokens of it the open match has covered (the shortest length less the
        fewest tokens that would still complete it), summed; in ``0..total``."""
        return self.total - sum(0 if s == MET else self._left[c][s] for c, s in enumerate(state))

    def tokens_needed(self, state: tuple[int, ...]) -> int:
        """A lower bound on the tokens any continuation needs to meet every phrase:
        the sum of each unmet phrase's fewest completing tokens when no two
        phrases' alternatives can overlap in a text (then their occurrences are
        disjoint), else the largest of them."""
        lefts = [self._left[c][s] for c, s in enumerate(state) if s != MET]
        if not lefts:
            return 0
        return sum(lefts) if self._disjoint else max(lefts)

    def advancing(self, state: tuple[int, ...]) -> frozenset[int]:
        """The tokens that advance an unmet phrase from ``state``: the first token of
        each of its alternatives and the next token of each partial match open."""
        out: frozenset[int] = frozenset()
        for c, s in enumerate(state):
            if s != MET:
                out = out | self._advancing[c][s]
        return out


def _phrases_overlap(phrases: Sequence[Sequence[tuple[int, ...]]]) -> bool:
    """Whether an alternative of one phrase and one of another can share a token
    position in some text: one contains the other, or a non-empty suffix of one is
    a prefix of the other."""
    for i in range(len(phrases)):
        for j in range(i + 1, len(phrases)):
            for a in phrases[i]:
                for b in phrases[j]:
                    if _contains(a, b) or _contains(b, a):
                        return True
                    for x, y in ((a, b), (b, a)):
                        if any(x[-n:] == y[:n] for n in range(1, min(len(x), len(y)))):
                            return True
    return False


def _contains(a: tuple[int, ...], b: tuple[int, ...]) -> bool:
    return any(a[i:i + len(b)] == b for i in range(len(a) - len(b) + 1))


def allocate_banks(beam_size: int, counts: Sequence[int]) -> list[int]:
    """How many slots of a beam of ``beam_size`` each bank gets (dynamic beam
    allocation, Post and Vilar 2018, section 3.2).

    ``counts[b]`` is the number of candidates in bank ``b`` (bank ``b``: ``b``
    phrase tokens met; the last bank met every phrase). Each of the ``n`` banks
    gets ``beam_size // n`` slots and the last bank the remainder too; then, from
    the last bank down, the slots a bank has no candidates for pass to the bank
    below; what bank 0 cannot use goes back to the highest banks that have
    candidates left. So the slots add up to ``min(beam_size, sum(counts))`` and no
    bank gets more than its candidates.
    """
    n = len(counts)
    if n == 0:
        return []
    size, rem = divmod(int(beam_size), n)
    alloc = [size] * n
    alloc[-1] += rem
    for b in range(n - 1, 0, -1):
        spare = alloc[b] - counts[b]
        if spare > 0:
            alloc[b] -= spare
            alloc[b - 1] += spare
    spare = alloc[0] - counts[0]
    if spare > 0:
        alloc[0] = counts[0]
        for b in range(n - 1, 0, -1):
            take = min(spare, counts[b] - alloc[b])
            alloc[b] += take
            spare -= take
    return alloc


def _is_token_ids(x) -> bool:
    return (isinstance(x, (list, tuple, np.ndarray)) and len(x) > 0
            and all(isinstance(t, (Integral, np.integer)) and not isinstance(t, (bool, np.bool_)) for t in x))


def _read_phrases(lm, phrases, leading_space: bool, eos: frozenset[int]) -> list[list[tuple[int, ...]]]:
    """Each phrase as its deduplicated alternatives (token-id tuples)."""
    if isinstance(phrases, (str, bytes)) or not isinstance(phrases, Sequence):
        raise TypeError(f"phrases must be a list of phrases, got {type(phrases).__name__}")
    V = lm.vocab_size
    out = []
    for i, phrase in enumerate(phrases):
        alternatives = [phrase] if isinstance(phrase, str) or _is_token_ids(phrase) else phrase
        if isinstance(alternatives, (bytes, bytearray)) or not isinstance(alternatives, (list, tuple)) \
                or not alternatives:
            raise ValueError(f"phrase {i} ({phrase!r}) is not a text, a list of token ids or a "
                             f"non-empty list of alternatives")
        alts: list[tuple[int, ...]] = []
        for alt in alternatives:
            if isinstance(alt, str):
                if not alt:
                    raise ValueError(f"phrase {i} has an empty text")
                encode = getattr(lm, "encode", None)
                if encode is None:
                    raise TypeError(f"{type(lm).__name__} has no encode() to turn phrase {i} ({alt!r}) "
                                    f"into token ids; pass token ids instead")
                texts = [alt] if not leading_space or alt[0].isspace() else [alt, " " + alt]
                spelled = [tuple(int(t) for t in encode(s)) for s in texts]
            elif _is_token_ids(alt):
                spelled = [tuple(int(t) for t in alt)]
            else:
                raise ValueError(f"phrase {i}: alternative {alt!r} is neither a text nor a list of token ids")
            for ids in spelled:
                if not ids:
                    raise ValueError(f"phrase {i} ({alt!r}) encodes to no tokens")
                bad = [t for t in ids if not 0 <= t < V or t in eos]
                if bad:
                    raise ValueError(f"phrase {i} ({alt!r}) has token id {bad[0]}, which is "
                                     f"{'an EOS id' if bad[0] in eos else f'outside the vocabulary of {V}'}")
                if ids not in alts:
                    alts.append(ids)
        out.append(alts)
    return out


def _placeable(constraint, alt: tuple[int, ...]) -> bool:
    """Whether the grammar's language has a string that contains ``alt``: exact at
    the token level for a regex; for a context-free grammar, whether some string
    contains the bytes ``alt`` spells (the grammar's masks are byte-exact, so any
    vocabulary that spells every byte can then place it). Other constraints, and
    grammars too large to decide within the analysis budget, count as placeable."""
    from constrain import DFAConstraint, GrammarConstraint, GrammarTooComplexError
    from constrain.analysis import Hole, can_complete, can_complete_regex

    try:
        if isinstance(constraint, DFAConstraint):
            return can_complete_regex(constraint, [Hole(), list(alt), Hole()])
        if isinstance(constraint, GrammarConstraint):
            return can_complete(constraint, [Hole(), constraint.vocab.decode(alt), Hole()])
    except GrammarTooComplexError:
        return True
    return True


def _check_placeable(constraint, phrases, given) -> list[list[tuple[int, ...]]]:
    """The alternatives the grammar can place; a ``ValueError`` naming the phrase
    when it can place none of a phrase's."""
    kept = []
    for i, alts in enumerate(phrases):
        ok = [a for a in alts if _placeable(constraint, a)]
        if not ok:
            raise ValueError(f"phrase {i} ({given[i]!r}) cannot occur in any output the grammar "
                             f"constraint allows")
        kept.append(ok)
    return kept


@dataclasses.dataclass(frozen=True)
class _Item:
    """A hypothesis under search: its tokens, score, grammar and phrase states."""

    tokens: tuple[int, ...]
    score: float
    state: object
    phrases: tuple[int, ...]


def constrained_beam_search(lm, prompt, *, constraint=None, phrases, beam_size: int, max_new_tokens: int,
                            leading_space: bool = True) -> list[Hypothesis]:
    """Beam search whose outputs contain every phrase: dynamic beam allocation
    (Post & Vilar 2018), composable with a grammar constraint.

    Step ``t`` scores the live hypotheses (at most ``beam_size``) in one
    ``lm.logprobs`` call and forms candidates: the ``beam_size`` best allowed
    tokens of each (ties at the cut included), every allowed token that
    advances an unmet phrase (:meth:`PhraseTracker.advancing`) and, with a
    grammar, for a hypothesis that met every phrase, the first token of the
    grammar's shortest completion. A candidate is dropped when ``t`` plus the
    larger of the tokens its phrases still need
    (:meth:`PhraseTracker.tokens_needed`) and the tokens of the grammar's
    shortest completion, plus one for EOS, exceeds ``max_new_tokens`` (except
    at the last step, where a candidate that met every phrase stays as a
    cut-off output). The candidates are grouped
    into banks by phrase tokens met (:meth:`PhraseTracker.met_tokens`) and the
    beam's slots are allocated over them (:func:`allocate_banks`); each bank keeps
    its best. A live hypothesis that has met every phrase also ends (EOS, where the
    grammar accepts): that finished hypothesis is collected without taking a beam
    slot. The search stops once the best finished hypothesis scores above every
    live one (scores only fall as hypotheses grow), when no candidate is left, or
    after ``max_new_tokens`` steps.

    Guarantee: every returned hypothesis contains every phrase (one of its
    alternatives, as a contiguous run of token ids; so its text contains the
    phrase's text), and a finished one is accepted by ``constraint``. With
    ``beam_size`` at least the number of candidates of every step, the search is
    exhaustive and the first hypothesis is the most probable finished sequence of
    at most ``max_new_tokens`` tokens (EOS included) that contains every phrase
    (with a grammar: where its shortest completions, as spelled, are also its
    fewest tokens, as over a vocabulary of single bytes; a longer spelling may
    drop a hypothesis that could have closed in time).

    Args:
        lm, prompt, constraint, max_new_tokens: as for
            :func:`search.beam_search`; ``constraint`` may also be a Python type
            (compiled over ``lm.vocab`` with :func:`constrain.compile_type`).
        phrases: the phrases every output must contain, in any order. Each is a
            text (encoded with ``lm.encode``), a list of token ids, or a list of
            alternatives (texts or token-id lists) of which one must occur:
            ``["Paris", ["big city", "metropolis"]]``.
        beam_size: the beam width ``k`` (a positive integer), shared by all
            banks, so the cost of a step does not grow with the phrases.
        leading_space: a text phrase that does not start with whitespace also
            matches as the encoding of itself after a space (how BPE tokenizers
            spell a word inside a sentence); ``False`` takes only its own encoding.

    Returns:
        the finished hypotheses collected, best first, at most ``beam_size`` of
        them (:class:`search.Hypothesis`, with their ``text`` when the model can
        decode); if none finished within ``max_new_tokens``, the hypotheses of the
        last beam that contain every phrase, cut off (``finished`` false); an
        empty list if there are none.

    Raises:
        ValueError: a phrase that is empty, holds an EOS id or an id outside the
            vocabulary, or cannot occur in any output of the grammar
            ``constraint`` (checked before any model call); a bad ``beam_size``
            or ``max_new_tokens``.
        TypeError: a text phrase for a model without ``encode``.
    """
    if isinstance(beam_size, bool) or not isinstance(beam_size, Integral) or beam_size < 1:
        raise ValueError(f"beam_size must be a positive integer, got {beam_size!r}")
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, Integral) or max_new_tokens < 0:
        raise ValueError(f"max_new_tokens must be a non-negative integer, got {max_new_tokens!r}")
    lm = as_lm(lm)
    vocab = getattr(lm, "vocab", None)
    if vocab is not None:
        constraint = as_constraint(constraint, vocab)
    eos = constraint_eos_ids(lm, constraint)
    alts = _read_phrases(lm, phrases, leading_space, eos)
    if constraint is not None:
        alts = _check_placeable(constraint, alts, phrases)
    prompt_ids = prompt_token_ids(lm, prompt)
    tracker = PhraseTracker(alts)
    T, k, V = int(max_new_tokens), int(beam_size), lm.vocab_size
    eos_ids = np.array(sorted(e for e in eos if e < V), dtype=np.int64)
    closing = None if constraint is None else _Closing(lm, constraint)
    root_state = None if constraint is None else constraint.initial_state()
    live = [_Item((), 0.0, root_state, tracker.initial())]
    finished: list[Hypothesis] = []
    for t in range(1, T + 1):
        rows = np.asarray(lm.logprobs([prompt_ids + h.tokens for h in live]), dtype=np.float64)
        banks: list[list[_Item]] = [[] for _ in range(tracker.total + 1)]
        for h, row in zip(live, rows):
            masked = _allowed_row(row, constraint, h.state, V)
            tokens = set()
            if tracker.done(h.phrases):
                for e in eos_ids.tolist():
                    if masked[e] > -np.inf:
                        finished.append(Hypothesis(h.tokens + (e,), h.score + float(masked[e]), True,
                                                   _advance(constraint, h.state, e)))
                if closing is not None:
                    tokens.add(closing(h.state)[1])
            masked[eos_ids] = -np.inf
            tokens.update(_top(masked, k).tolist())
            tokens.update(tracker.advancing(h.phrases))
            for tok in sorted(x for x in tokens if x is not None and masked[x] > -np.inf):
                ps = tracker.advance(h.phrases, tok)
                need = tracker.tokens_needed(ps)
                state = _advance(constraint, h.state, tok)
                close = 0 if closing is None else closing(state)[0]
                # it must still meet its phrases, close the grammar and end (EOS) within
                # T, or be a cut-off output of the last step that met every phrase
                if t + max(need, close) + 1 <= T or (t == T and need == 0):
                    banks[tracker.met_tokens(ps)].append(
                        _Item(h.tokens + (tok,), h.score + float(masked[tok]), state, ps))
        alloc = allocate_banks(k, [len(b) for b in banks])
        live = []
        for bank, n in zip(banks, alloc):
            if n:
                bank.sort(key=_rank)
                live.extend(bank[:n])
        live.sort(key=_rank)
        if not live:
            break
        if finished and max(f.score for f in finished) > live[0].score:
            break
    if finished:
        out = sorted(finished, key=lambda h: (-h.score, h.tokens))[:k]
    else:
        out = [Hypothesis(h.tokens, h.score, False, h.state) for h in live if tracker.done(h.phrases)][:k]
    decode = decoder(lm)
    if decode is None:
        return out
    return [dataclasses.replace(h, text=decode(h.token_ids)) for h in out]


def _rank(h: _Item):
    """Higher score first, then the smaller token tuple (as in :mod:`search.autoregressive.beam`)."""
    return (-h.score, h.tokens)


class _Closing:
    """What a grammar state needs before EOS: ``(tokens, first)``, the length and
    first token of the grammar's shortest completion as
    ``generate(close=True)`` spells it (:mod:`search.autoregressive.closing`:
    breadth-first over bytes, then the tokenizer's spelling or one token per
    byte); ``(0, None)`` where the grammar accepts, ``(1, None)`` where no
    completion is found (one token is the least any state needs). Cached per state."""

    def __init__(self, lm, constraint):
        self.lm = lm if hasattr(lm, "encode") else _BytesOnly()
        self.constraint = constraint
        self.memo: dict = {}

    def __call__(self, state) -> tuple[int, int | None]:
        if self.constraint.is_accepting(state):
            return 0, None
        hit = self.memo.get(state)
        if hit is None:
            completion = shortest_completion(self.constraint, state)
            ids = None if completion is None else completion_tokens(self.lm, self.constraint, state, completion)
            hit = self.memo[state] = (len(ids), ids[0]) if ids else (1, None)
        return hit


class _BytesOnly:
    """A model without a tokenizer, for :func:`completion_tokens`: no spelling of
    its own, so completions are spelled one token per byte."""

    @staticmethod
    def encode(text: str) -> list[int]:
        return []


def _allowed_row(row: np.ndarray, constraint, state, V: int) -> np.ndarray:
    """``row`` (a fresh copy) with ``-inf`` at every token the grammar does not
    allow from ``state`` and at NaN entries."""
    if constraint is None:
        masked = row.copy()
    else:
        ids = np.asarray(constraint.allowed_token_ids(state), dtype=np.int64)
        ids = ids[ids < V]
        masked = np.full(V, -np.inf)
        masked[ids] = row[ids]
    masked[np.isnan(masked)] = -np.inf
    return masked


def _top(masked: np.ndarray, k: int) -> np.ndarray:
    """The ids of the ``k`` largest finite entries, ties at the cut included."""
    finite = np.flatnonzero(masked > -np.inf)
    if len(finite) <= k:
        return finite
    vals = masked[finite]
    thr = np.partition(vals, len(vals) - k)[len(vals) - k]
    return finite[vals >= thr]


def _advance(constraint, state, token: int):
    if constraint is None:
        return None
    nxt = constraint.advance(state, token)
    if nxt is None:  # bitmask and advance disagree: a constraint bug
        raise RuntimeError(f"constraint refused token {token} that its bitmask allowed")
    return nxt
