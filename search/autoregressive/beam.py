"""Beam search over a (constrained) language model: breadth-first and best-first.

Both drivers take the same arguments and, for the default ``patience=1.0`` and no
``length_penalty``, return the same best hypothesis; see ``docs/search.md``.

* :func:`beam_search` — breadth-first beam search in the form of Meister, Vieira
  and Cotterell (TACL 2020, "Best-First Beam Search", Algorithm 1): the beam at
  step ``t`` holds the ``beam_size`` best hypotheses of ``t`` generated tokens, a
  hypothesis that has ended (EOS) staying in the running with its score unchanged
  ("padded"); the search stops when the best hypothesis of the beam has ended, or
  after ``max_new_tokens`` steps.
* :func:`best_first_beam_search` — their best-first beam search (Algorithm 2): a
  priority queue ordered by score, at most ``beam_size`` pops per length. Because a
  log-probability never increases as a hypothesis grows, it pops exactly the
  hypotheses of the breadth-first beams in score order and stops at the same
  answer, calling the model at most as often (usually far less often).
  ``beam_size=None`` is exact MAP search within ``max_new_tokens``.

Scores are sums of the model's log-probabilities of the generated tokens (EOS
included), *not* renormalised over the tokens a constraint allows. Tokens whose
log-probability is ``-inf`` are never expanded. With a constraint, each hypothesis
carries its own immutable constraint state, only allowed tokens are expanded and
EOS is expanded only where the constraint accepts.

Ties (equal scores) are broken the same way in both drivers: among hypotheses of the
same length, the lexicographically smaller token tuple ranks first.
"""

from __future__ import annotations

import dataclasses
import heapq
import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Hashable, Sequence

import numpy as np

from search.arguments import count, finite
from search.legacy import accepts_old_call_forms
from search.lm.protocol import as_lm, constraint_eos_ids, decoder, prompt_token_ids
from search.results import SearchResult

__all__ = ["Hypothesis", "beam_search", "best_first_beam_search"]


@dataclass(frozen=True)
class Hypothesis(SearchResult):
    """One hypothesis of a search; the beam drivers return a list of them.

    Attributes:
        tokens: the generated token ids (the prompt excluded; the EOS id included
            when the hypothesis has ended).
        score: the sum of the model's log-probabilities of ``tokens``.
        finished: whether the hypothesis ended with an EOS id.
        state: the constraint state after ``tokens`` (``None`` without a constraint).
        text: the text of :attr:`token_ids` in the hypotheses a driver returns,
            when the model can decode (:func:`search.lm.protocol.decoder`); else
            ``None``.
    """

    tokens: tuple[int, ...]
    score: float
    finished: bool
    state: Hashable = field(default=None, compare=False, repr=False)
    text: str | None = field(default=None, compare=False, repr=False)

    def __len__(self) -> int:
        return len(self.tokens)

    @property
    def token_ids(self) -> tuple[int, ...]:
        """:attr:`tokens` without the final EOS."""
        return self.tokens[:-1] if self.finished else self.tokens

    def normalized_score(self, length_penalty: float | None) -> float:
        """``score / max(1, len(tokens)) ** length_penalty`` (``score`` itself when
        ``length_penalty`` is ``None``)."""
        if length_penalty is None:
            return self.score
        return self.score / max(1, len(self.tokens)) ** float(length_penalty)


def _key(h: Hypothesis):
    """The order of hypotheses of one length: higher score first, then the smaller
    token tuple."""
    return (-h.score, h.tokens)


def _priority_fn(length_reward: float | None, max_new_tokens: int):
    """The monotone search score: ``score`` itself without a reward; with a reward
    ``r``, ``score + r * len(tokens)`` for a finished hypothesis and ``score + r *
    len(tokens) + max(r, 0) * (max_new_tokens - len(tokens))`` for an unfinished one
    (the most reward it could still collect: an admissible bonus), which never
    increases as a hypothesis grows."""
    if length_reward is None:
        return None
    r = float(length_reward)
    bonus = max(r, 0.0) * max_new_tokens

    def priority(h: Hypothesis) -> float:
        n = len(h.tokens)
        return h.score + (r * n if h.finished else r * n - max(r, 0.0) * n + bonus)

    return priority


def _key_fn(priority):
    if priority is None:
        return _key
    return lambda h: (-priority(h), h.tokens)


class _Expander:
    """Scores hypotheses with the model and builds their children."""

    def __init__(self, lm, prompt, constraint, limit: int | None, length_reward=None,
                 max_new_tokens: int = 0):
        self.lm = as_lm(lm)
        self.reward = None if length_reward is None else float(length_reward)
        self.T = int(max_new_tokens)
        self.prompt = prompt_token_ids(self.lm, prompt)
        self.constraint = constraint
        self.limit = limit
        self.eos = constraint_eos_ids(self.lm, constraint)
        self._all_ids = np.arange(self.lm.vocab_size, dtype=np.int64)

    def root(self) -> Hypothesis:
        state = None if self.constraint is None else self.constraint.initial_state()
        return Hypothesis((), 0.0, False, state)

    def expand(self, hyps: Sequence[Hypothesis]) -> list[list[Hypothesis]]:
        """The children of each (unfinished) hypothesis, one model call each. With
        ``limit`` set, only the ``limit`` best children of each are kept (no other
        child can enter a beam of that size)."""
        rows = self.lm.logprobs([self.prompt + h.tokens for h in hyps])
        rows = np.asarray(rows)
        c = self.constraint
        V = self.lm.vocab_size
        out = []
        for h, row in zip(hyps, rows):
            if c is None:
                ids = self._all_ids
            else:
                ids = np.asarray(c.allowed_token_ids(h.state), dtype=np.int64)
                ids = ids[ids < V]
            bad = np.isnan(row) | (row == np.inf)
            if bad.any():
                # (NaN had been dropped as -inf; +inf scored inf)
                t = int(np.flatnonzero(bad)[0])
                raise ValueError(f"the model's log-probability of token {t} is {row[t]} "
                                 f"(a log-probability is finite or -inf)")
            vals = row[ids].astype(np.float64, copy=False)
            ok = vals > -np.inf
            ids, vals = ids[ok], vals[ok]
            if self.limit is not None and len(ids) > self.limit:
                # keep the `limit` best by (priority desc, id asc), ties at the cut included
                # (computed as the drivers' keys are, so that rounding agrees)
                prio = h.score + vals
                if self.reward is not None:
                    r, n = self.reward, len(h.tokens) + 1
                    is_eos = np.isin(ids, np.fromiter(self.eos, dtype=np.int64))
                    prio = prio + np.where(is_eos, r * n, r * n - max(r, 0.0) * n + max(r, 0.0) * self.T)
                thr = np.partition(prio, len(prio) - self.limit)[len(prio) - self.limit]
                sel = prio >= thr
                ids, vals, prio = ids[sel], vals[sel], prio[sel]
                order = np.lexsort((ids, -prio))[: self.limit]
                ids, vals = ids[order], vals[order]
            children = []
            base = h.score
            eos = self.eos
            for t, v in zip(ids.tolist(), vals.tolist()):
                if c is None:
                    state = None
                else:
                    state = c.advance(h.state, t)
                    if state is None:  # bitmask and advance disagree: a constraint bug
                        raise RuntimeError(f"constraint refused token {t} that its bitmask allowed")
                children.append(Hypothesis(h.tokens + (t,), base + v, t in eos, state))
            out.append(children)
        return out

    def with_text(self, hyps: list[Hypothesis]) -> list[Hypothesis]:
        """The returned hypotheses, each with its :attr:`Hypothesis.text` (when the
        model can decode)."""
        decode = decoder(self.lm)
        if decode is None:
            return hyps
        return [dataclasses.replace(h, text=decode(h.token_ids)) for h in hyps]


def _check_args(beam_size, max_new_tokens, patience, length_penalty=None, length_reward=None,
                allow_none: bool = True):
    count("beam_size", beam_size, 1, optional=allow_none)
    count("max_new_tokens", max_new_tokens)
    finite("patience", patience, above=0)
    # (a NaN reward made every priority NaN: the beams came out in any order)
    for name, value in (("length_penalty", length_penalty), ("length_reward", length_reward)):
        if value is not None:
            finite(name, value)


def _patience_counts(patience: float, beam_size: int | None) -> tuple[float, float]:
    """``(n_more, n_less)``: stop once the best hypothesis of a beam has ended and at
    least ``n_more`` hypotheses have ended, or once ``n_less`` have ended."""
    if patience == 1.0 or beam_size is None:
        return 1, math.inf
    n = max(1, int(round(patience * beam_size)))
    if patience > 1.0:
        return n, math.inf
    return 1, n


def _rank(hyps, length_penalty):
    if length_penalty is None:
        return sorted(hyps, key=_key)
    return sorted(hyps, key=lambda h: (-h.normalized_score(length_penalty), h.tokens))


@accepts_old_call_forms(renamed={"prompt_ids": "prompt"})
def beam_search(lm, prompt, *, constraint=None, beam_size: int | None, max_new_tokens: int,
                patience: float = 1.0, length_penalty: float | None = None,
                length_reward: float | None = None) -> list[Hypothesis]:
    """Breadth-first beam search (Meister, Vieira & Cotterell 2020, Algorithm 1).

    Step ``t`` forms the beam ``B_t``: the ``beam_size`` best (by score; ties by
    token tuple) among the children of the unfinished hypotheses of ``B_{t-1}`` and
    the finished hypotheses of ``B_{t-1}``, which stay in the running with their
    score unchanged. The unfinished hypotheses of a beam are scored in one
    ``lm.logprobs`` batch. The search stops after step ``t`` when the best
    hypothesis of ``B_t`` has ended (no longer hypothesis can beat it: scores only
    fall as hypotheses grow), after ``max_new_tokens`` steps, or when no hypothesis
    can be extended (then the last non-empty beam is returned).

    Args:
        lm: a model of the LM protocol (:mod:`search.lm.protocol`), or a ``TransformersLM``.
        prompt: the token ids to condition on (each prefix scored is the prompt's
            ids followed by ``tokens``), or a text, turned into ids by
            ``lm.prompt_ids`` (the chat template for chat models).
        beam_size: the beam width ``k``; ``None`` keeps every hypothesis
            (exhaustive, exponential: for tiny models only).
        max_new_tokens: the most tokens a hypothesis may have (EOS included).
        constraint: a compiled grammar (:mod:`constrain.protocol`); only tokens it
            allows are expanded, EOS only where it accepts.
        patience: Kasai et al. (2022)'s patience factor ``p``, with
            ``n = max(1, round(p * beam_size))``: ``p = 1`` is the rule above;
            ``p > 1`` searches on after the best hypothesis has ended until ``n``
            distinct hypotheses have ended (entered a beam with EOS); ``p < 1``
            also stops as soon as ``n`` have ended, even if the best has not.
        length_penalty: ``alpha``; the returned hypotheses are ranked by
            ``score / len(tokens) ** alpha`` instead of ``score`` (lengths count
            the EOS). It does not change which hypotheses are kept or when the
            search stops (both use raw scores); raise ``patience`` to let more
            hypotheses end before ranking them.
        length_reward: ``r``, Meister et al.'s monotone stand-in for length
            normalisation: hypotheses are compared (in the beams, for stopping and
            for the returned order) by ``score + r * len(tokens)`` when finished and
            ``score + r * len(tokens) + max(r, 0) * (max_new_tokens - len(tokens))``
            when not (an admissible bonus: the most reward still to collect), which
            never increases as a hypothesis grows. ``score`` stays the plain sum of
            log-probabilities.

    Returns:
        the final beam, best first (a list of :class:`Hypothesis`, with their
        ``text`` when the model can decode).
    """
    _check_args(beam_size, max_new_tokens, patience, length_penalty, length_reward)
    ex = _Expander(lm, prompt, constraint, beam_size, length_reward, max_new_tokens)
    key = _key_fn(_priority_fn(length_reward, int(max_new_tokens)))
    n_more, n_less = _patience_counts(patience, beam_size)
    beam = [ex.root()]
    ended: set = set()
    for _ in range(int(max_new_tokens)):
        live = [h for h in beam if not h.finished]
        cands = [h for h in beam if h.finished]
        if live:
            for children in ex.expand(live):
                cands.extend(children)
        if not cands:
            break
        cands.sort(key=key)
        beam = cands if beam_size is None else cands[:beam_size]
        ended.update(h.tokens for h in beam if h.finished)
        if (beam[0].finished and len(ended) >= n_more) or len(ended) >= n_less:
            break
    if length_penalty is None:
        return ex.with_text(sorted(beam, key=key))
    return ex.with_text(_rank(beam, length_penalty))


@accepts_old_call_forms(renamed={"prompt_ids": "prompt"})
def best_first_beam_search(lm, prompt, *, constraint=None, beam_size: int | None, max_new_tokens: int,
                           patience: float = 1.0, length_penalty: float | None = None,
                           length_reward: float | None = None, queue_factor: float | None = None,
                           batch_size: int = 1) -> list[Hypothesis]:
    """Best-first beam search (Meister, Vieira & Cotterell 2020, Algorithm 2).

    A priority queue holds hypotheses keyed by (score, length, tokens), best first
    (the score with its ``length_reward`` terms, when one is given);
    at most ``beam_size`` hypotheses are popped (kept) per length, later ones at a
    full length are dropped. A popped unfinished hypothesis is scored and its
    children are pushed. A popped finished hypothesis is the answer if it is the
    first pop at its length; otherwise it is pushed again one length further
    ("padded"), keeping a beam slot there, exactly as it stays in the breadth-first
    beam. The first pop at length ``max_new_tokens`` is the answer too.

    Guarantee (``patience=1``, no ``length_penalty``, the same ``length_reward``,
    any ``batch_size``, no ``queue_factor``): the pops at each length are the
    breadth-first beam of that length in order, so the answer is the best hypothesis of :func:`beam_search`
    (same tokens, same score) and ``lm.calls`` grows by at most as much.
    ``beam_size=None`` pops everything in score order: exact MAP search over
    hypotheses of at most ``max_new_tokens`` tokens.

    Args:
        lm, prompt, beam_size, max_new_tokens, constraint: as for
            :func:`beam_search`.
        patience: as for :func:`beam_search`, counted over the finished
            hypotheses popped so far; ``p != 1`` loses the guarantee.
        length_penalty: not supported (``score / len ** alpha`` is not monotone, so
            best-first search cannot stop early on it): must be ``None``; use
            ``length_reward``, the paper's monotone stand-in.
        length_reward: as for :func:`beam_search`; the queue is ordered by that
            monotone score, and the guarantee holds with it (same ``length_reward``
            in both drivers).
        queue_factor: ``c``; keep at most ``c * beam_size`` entries in the queue,
            dropping the worst when it overflows (the memory-reduced variant). It
            bounds memory at the cost of the guarantee: a dropped low-scoring
            hypothesis could have been in a later beam.
        batch_size: pop up to this many hypotheses at once and score them in one
            ``lm.logprobs`` call; only consecutive pops of unfinished hypotheses of
            the same length (within its ``beam_size`` pops) are batched, so the
            answer is unchanged; the call count may grow (it stays within the
            guarantee). 1 (default) makes the fewest calls.

    Returns:
        a one-element list ``[answer]`` (a :class:`Hypothesis`, with its ``text``
        when the model can decode); the empty hypothesis when ``max_new_tokens ==
        0``.
    """
    _check_args(beam_size, max_new_tokens, patience, length_penalty, length_reward)
    if length_penalty is not None:
        raise NotImplementedError(
            "best_first_beam_search cannot rank by score / len ** alpha (not monotone); use "
            "length_reward (Meister et al.'s monotone stand-in) or beam_search")
    if queue_factor is not None:
        finite("queue_factor", queue_factor, above=0)
    count("batch_size", batch_size, 1)
    ex = _Expander(lm, prompt, constraint, beam_size, length_reward, max_new_tokens)
    priority = _priority_fn(length_reward, int(max_new_tokens))
    n_more, n_less = _patience_counts(patience, beam_size)
    cap = None
    if queue_factor is not None and beam_size is not None:
        cap = max(1, int(math.ceil(queue_factor * beam_size)))
    T = int(max_new_tokens)
    k = beam_size
    heap: list = []
    counter = 0

    def push(h: Hypothesis, level: int):
        nonlocal counter
        counter += 1
        heapq.heappush(heap, (-(h.score if priority is None else priority(h)), level, h.tokens, counter, h))

    push(ex.root(), 0)
    pops: Counter = Counter()
    first: dict[int, Hypothesis] = {}
    ended: set = set()
    while heap:
        _, level, _, _, h = heapq.heappop(heap)
        if k is not None and pops[level] >= k:
            continue
        pops[level] += 1
        is_first = pops[level] == 1
        if is_first:
            first[level] = h
        if h.finished:
            ended.add(h.tokens)
        if (is_first and h.finished and len(ended) >= n_more) or len(ended) >= n_less:
            return ex.with_text([h])
        if level >= T:
            if is_first:
                return ex.with_text([h])
            continue
        if h.finished:
            push(h, level + 1)
            continue
        batch = [h]
        while len(batch) < batch_size and heap:
            top = heap[0]
            nh = top[4]
            if top[1] != level or nh.finished or (k is not None and pops[level] >= k):
                break
            heapq.heappop(heap)
            pops[level] += 1
            batch.append(nh)
        for children in ex.expand(batch):
            for c in children:
                push(c, level + 1)
        if cap is not None and len(heap) > cap:
            heap = heapq.nsmallest(cap, heap)  # sorted, hence a valid heap
    # nothing left to expand (every hypothesis ran into a dead end): the best
    # hypothesis of the deepest beam, as beam_search returns
    return ex.with_text([first[max(first)]]) if first else []
