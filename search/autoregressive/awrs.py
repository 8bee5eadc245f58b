"""Adaptive weighted rejection sampling (AWRS) of one constrained token.

Lipkin et al., "Fast Controlled Generation from Language Models with Adaptive
Weighted Rejection Sampling" (COLM 2025); reference library genlm-control.

Given the model's next-token distribution ``p`` (one row of log-probabilities)
and a constraint state, :func:`awrs_step` draws a token from ``p`` restricted to
the allowed set ``A`` *without computing the mask*: it walks the vocabulary in
a random order that is a draw without replacement from ``p`` (Gumbel-top-k),
checks each token with ``constraint.advance`` and stops at the first allowed
one. That token is an exact draw from ``q(a) = p(a) / Z`` on ``A``, where
``Z = p(A)`` is the allowed mass. It then checks *one more* token, the next in
the same order (the "second round"), and returns the importance weight

* ``w = 1 - rho``   if that next token is allowed (or there is none),
* ``w = p(a)``      if it is refused,

where ``rho`` is the mass of the tokens refused before ``a``. ``w`` is an
unbiased estimate of ``Z`` *given the returned token*, so
``E[w * 1{x = a}] = p(a) * 1{a in A}`` for every token ``a`` (proper
weighting). The derivation is in ``docs/smc.md``. A step costs (refusals + 2)
constraint checks at most, which is a handful when model and constraint agree,
against ``V`` for a full mask.

EOS ids count as allowed iff ``constraint.is_accepting(state)``. When nothing is
allowed the step returns ``token=None`` and weight 0 (``log_weight=-inf``).

Example::

    import numpy as np, constrain, search
    vocab = constrain.Vocabulary.from_tokens([b"a", b"b", b"<eos>"], eos_token_ids=[2])
    c = constrain.compile_regex("ab", vocab)
    row = np.log([0.5, 0.3, 0.2])
    step = search.awrs_step(row, c, c.initial_state(), np.random.default_rng(0))
    step.token, step.weight     # (0, 0.5): 'a' is the only allowed token
"""

from __future__ import annotations

import math
from typing import Callable, Iterable, NamedTuple

import numpy as np

from search.lm.protocol import _eos_tuple

__all__ = ["AWRS", "AWRSStep", "awrs_step"]

#: tokens of the order found by repeated ``argmax`` (the walk almost always stops within
#: them); past them the whole row is sorted once
_ARGMAX_STEPS = 16


class AWRSStep(NamedTuple):
    """The outcome of one AWRS draw.

    Attributes:
        token: the sampled token id, or ``None`` when no token is allowed.
        state: the constraint state after ``token`` (the old state when
            ``token`` is ``None``).
        log_weight: log of the importance weight ``w`` (``-inf`` when nothing is
            allowed). ``w`` is unbiased for the allowed mass given the token.
        checks: constraint checks made (``advance`` calls, EOS acceptance tests).
        rejections: tokens refused before ``token`` was accepted.
    """

    token: int | None
    state: object
    log_weight: float
    checks: int
    rejections: int

    @property
    def weight(self) -> float:
        """``exp(log_weight)``: the importance weight itself."""
        return math.exp(self.log_weight) if self.log_weight > -math.inf else 0.0


def _log_normalise(row: np.ndarray) -> tuple[np.ndarray, float]:
    """``(row - logsumexp(row), logsumexp(row))``; all ``-inf`` rows give (row, -inf)."""
    m = float(np.max(row)) if row.size else -math.inf
    if m == -math.inf:
        return row, -math.inf
    lse = m + math.log(float(np.sum(np.exp(row - m))))
    return row - lse, lse


class _Order:
    """Token ids by decreasing key, found lazily: the first ``_ARGMAX_STEPS`` by repeated
    ``argmax`` (O(V) each, no sort), the rest by one full sort; keys of ``-inf``
    (impossible tokens) end the order."""

    __slots__ = ("keys", "order", "work", "full")

    def __init__(self, keys: np.ndarray):
        self.keys = keys
        self.order: list[int] = []
        self.work: np.ndarray | None = None
        self.full = False

    def get(self, i: int) -> int | None:
        """The ``i``-th token of the order, or ``None`` past the possible tokens."""
        while i >= len(self.order) and not self.full:
            if len(self.order) >= _ARGMAX_STEPS:
                self.order = np.argsort(-self.keys, kind="stable").tolist()
                self.full = True
                break
            if self.work is None:
                self.work = self.keys.copy()
            t = int(np.argmax(self.work))
            if self.work[t] == -math.inf:
                self.order = np.argsort(-self.keys, kind="stable").tolist()
                self.full = True
                break
            self.order.append(t)
            self.work[t] = -math.inf
        if i >= len(self.order):
            return None
        t = self.order[i]
        return None if self.keys[t] == -math.inf else t


def _walk(logp: np.ndarray, order: _Order, check: Callable[[int], object]) -> tuple:
    """The AWRS walk over a fixed order (a draw without replacement from ``exp(logp)``,
    which must be normalised): ``(token, new_state, log_w, checks, rejections)``.

    ``check(t)`` returns the next state or ``None``. Separated from the random order so
    that the tests can average over every order exactly.
    """
    rejected = 0.0  # mass of the refused tokens
    refused: list[int] = []
    checks = 0
    i = 0
    while True:
        t = order.get(i)
        if t is None:
            return None, None, -math.inf, checks, i
        checks += 1
        new_state = check(t)
        if new_state is not None:
            break
        rejected += math.exp(float(logp[t]))
        refused.append(t)
        i += 1
    if rejected > 0.5:
        # 1 - rejected would cancel catastrophically when little mass is left: sum what is left
        rest = np.exp(logp)
        rest[refused] = 0.0
        remaining = float(rest.sum())
    else:
        remaining = 1.0 - rejected
    nxt = order.get(i + 1)
    if nxt is None:
        # ``t`` is the last possible token: the remaining mass is exactly p(t)
        log_w = float(logp[t])
    else:
        checks += 1
        if check(nxt) is not None:
            log_w = math.log(remaining) if remaining > 0 else float(logp[t])
        else:
            log_w = float(logp[t])
        # floating point: the weight never exceeds the remaining mass nor 1
        if remaining > 0:
            log_w = min(log_w, math.log(remaining))
    return t, new_state, min(log_w, 0.0), checks, i


def _checker(constraint, state, eos_ids: frozenset[int], n_tokens: int) -> Callable[[int], object]:
    """``check(t)``: the state after ``t`` or ``None`` (EOS allowed iff
    accepting; an id past the constraint's ``n_tokens``, a model's padding,
    never)."""

    def check(t: int):
        if t >= n_tokens:
            return None
        if t in eos_ids:
            if not constraint.is_accepting(state):
                return None
            nxt = constraint.advance(state, t)
            return nxt if nxt is not None else state
        return constraint.advance(state, t)

    return check


def awrs_step(logprobs, constraint, state, rng: np.random.Generator, *,
              eos_token_ids: Iterable[int] | None = None) -> AWRSStep:
    """Sample the next token under ``constraint`` by adaptive weighted rejection sampling.

    Args:
        logprobs: one row of next-token log-probabilities, length ``V`` (``-inf`` for
            impossible tokens). A row that does not sum to one is treated as an
            unnormalised measure: its log total is added to the weight.
        constraint: a :class:`constrain.Constraint` (only ``advance``,
            ``is_accepting`` and ``is_terminated`` are used; never a mask).
        state: the constraint state before the token.
        rng: a ``numpy.random.Generator`` or a seed.
        eos_token_ids: the ids that end the text (default: the constraint
            vocabulary's EOS ids). They are allowed iff ``is_accepting(state)``.

    Returns:
        An :class:`AWRSStep`: the first allowed token of a without-replacement draw
        order, the new state, and ``log_weight`` with
        ``E[exp(log_weight) * 1{token = a}] = p(a) * 1{a allowed}`` for every ``a``.
        When nothing is allowed, ``token`` is ``None`` and the weight is 0.
    """
    row = np.asarray(logprobs, dtype=np.float64)
    if row.ndim != 1 and row.size != row.shape[-1]:
        raise ValueError(f"logprobs is one row of log-probabilities, not an array of shape "
                         f"{row.shape}")
    row = row.reshape(-1)
    # a NaN or +inf poisons the row's total: every key NaN, token 0 drawn, and
    # SMC read the weight as 0 (no valid string at all)
    bad = np.isnan(row) | (row == np.inf)
    if bad.any():
        t = int(np.flatnonzero(bad)[0])
        raise ValueError(f"logprobs[{t}] is {row[t]} (a log-probability is finite or -inf)")
    if not isinstance(rng, np.random.Generator):
        rng = np.random.default_rng(rng)
    vocab = getattr(constraint, "vocab", None)
    n_tokens = row.shape[0] if vocab is None else len(vocab)
    if row.shape[0] < n_tokens:
        from constrain import VocabularyError

        raise VocabularyError(f"logprobs has {row.shape[0]} entries, fewer than the "
                              f"{n_tokens} tokens of the constraint's vocabulary")
    if eos_token_ids is None:
        eos_token_ids = constraint.vocab.eos_token_ids
    eos = frozenset(_eos_tuple(eos_token_ids))
    if constraint.is_terminated(state):
        return AWRSStep(None, state, -math.inf, 0, 0)
    logp, log_total = _log_normalise(row)
    if log_total == -math.inf:
        return AWRSStep(None, state, -math.inf, 0, 0)
    # Gumbel-top-k as an exponential race: log p(t) - log E_t, E_t ~ Exp(1) (-log E_t is Gumbel)
    order = _Order(logp - np.log(rng.standard_exponential(logp.shape[0])))
    t, new_state, log_w, checks, rejections = _walk(logp, order, _checker(constraint, state, eos, n_tokens))
    if t is None:
        return AWRSStep(None, state, -math.inf, checks, rejections)
    return AWRSStep(t, new_state, log_w + log_total, checks, rejections)


class AWRS:
    """An AWRS sampler: a model, a constraint, a random generator and a counter of
    constraint checks.

    Args:
        lm: a model of the LM protocol (see :mod:`search.lm.protocol`), or ``None`` when only
            :meth:`step` on given rows is used.
        constraint: the constraint to sample under.
        rng: a ``numpy.random.Generator`` or a seed.
        eos_token_ids: the ids that end the text (allowed iff the state
            accepts); default: the model's, or without a model the constraint
            vocabulary's.

    Attributes:
        checks: constraint checks made so far by this sampler.
        steps: tokens sampled so far (dead ends included).
    """

    def __init__(self, lm, constraint, rng=None, *, eos_token_ids: Iterable[int] | None = None):
        from search.lm.protocol import as_lm

        self.lm = as_lm(lm) if lm is not None else None
        self.constraint = constraint
        self.rng = rng if isinstance(rng, np.random.Generator) else np.random.default_rng(rng)
        if eos_token_ids is None:
            eos_token_ids = self.lm.eos_token_ids if self.lm is not None else constraint.vocab.eos_token_ids
        self.eos_token_ids = _eos_tuple(eos_token_ids)
        self.checks = 0
        self.steps = 0

    def __repr__(self) -> str:
        return f"AWRS(checks={self.checks}, steps={self.steps})"

    def step(self, logprobs, state) -> AWRSStep:
        """One AWRS draw from a row of log-probabilities (see :func:`awrs_step`);
        adds its constraint checks to :attr:`checks`."""
        out = awrs_step(logprobs, self.constraint, state, self.rng, eos_token_ids=self.eos_token_ids)
        self.checks += out.checks
        self.steps += 1
        return out

    def sample(self, prefix, state) -> AWRSStep:
        """Score ``prefix`` (prompt plus generated ids) with the model (one call) and
        draw the next token under the constraint from ``state``."""
        if self.lm is None:
            raise ValueError("this AWRS sampler has no model")
        row = self.lm.logprobs([tuple(prefix)])[0]
        return self.step(row, state)

    @property
    def checks_per_step(self) -> float:
        """Mean constraint checks per sampled token."""
        return self.checks / self.steps if self.steps else 0.0
