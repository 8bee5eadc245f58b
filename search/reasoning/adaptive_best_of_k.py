"""Adaptive best-of-k: samples allocated per input by a predicted reward distribution.

Fixed best-of-k spends ``k`` samples on every input, also on inputs that one
sample already solves and on inputs no number of samples would. Here a
:class:`RewardPredictor`, fitted on logged rewards (``(features of an input,
rewards of its samples)``), predicts for each input the distribution of a
sample's reward, hence the expected reward of the best of ``k`` samples,
``E_i(k)``:

* binary rewards (every logged reward 0 or 1; e.g. a verifier): a sample succeeds
  with probability ``p_i`` and ``E_i(k) = 1 - (1 - p_i)^k``;
* other rewards: Gaussian with mean ``mu_i`` and spread ``sigma_i``, ``E_i(k) =
  mu_i + sigma_i * e_k`` with ``e_k`` the expected maximum of ``k`` standard normals.

:func:`allocate_samples` then splits a total budget of samples greedily by
marginal gain: starting from ``k_min`` each, the next sample goes to the input
whose ``E_i(k_i + 1) - E_i(k_i)`` is largest (ties: the earlier input), until the
budget is spent or every input has ``k_max``. Both curves are concave in ``k``
from ``k = 1`` (the binary one from 0), and for concave curves this greedy split
maximises ``sum_i E_i(k_i)`` under the budget (separable concave resource
allocation): with ``k_min >= 1`` (the default), or binary rewards. With
``k_min = 0`` and Gaussian rewards the first sample gains nothing (``e_0 = e_1 =
0``) and the second ``0.564 * sigma_i``: curves that are not concave, which it
splits exactly by dynamic programming over the budget instead (the greedy gave
one input all its samples before any other got one). :func:`adaptive_best_of_k` runs
:func:`search.reasoning.rerank.best_of_n` with each input's ``k``.

Reference: Damani, Shenfeld, Sachdeva, Andreas & Kim, "Learning How Hard to
Think: Input-Adaptive Allocation of LM Computation" (ICLR 2025): predict the
marginal reward of more computation per input from the input, and allocate a
batch's budget greedily by predicted marginal gain (best-of-k being their main
case, with ``1 - (1 - p)^k`` for a binary reward).

Cost: the sum of the ``k_i`` samples (the budget) plus, with the default
features (:func:`prompt_features`), one model call per input.
"""

from __future__ import annotations

import heapq
import math
import warnings
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from search.arguments import count
from search.lm.protocol import as_lm, prompt_token_ids
from search.reasoning.rerank import best_of_n

# numpy 2 renamed trapz
_trapz = getattr(np, "trapezoid", None) or np.trapz

__all__ = ["RewardPredictor", "AdaptiveBestOfKResult", "adaptive_best_of_k", "allocate_samples",
           "prompt_features", "expected_max_normal"]


def expected_max_normal(k_max: int) -> np.ndarray:
    """``e_k``, the expected maximum of ``k`` independent standard normals, for
    ``k = 0 .. k_max`` (``e_0 = e_1 = 0``), by quadrature of ``k x phi(x)
    Phi(x)^(k-1)`` on a fine grid (error below 1e-6)."""
    x = np.linspace(-9.0, 9.0, 20001)
    phi = np.exp(-0.5 * x * x) / math.sqrt(2 * math.pi)
    Phi = 0.5 * (1.0 + np.frompyfunc(math.erf, 1, 1)(x / math.sqrt(2)).astype(np.float64))
    out = np.zeros(int(k_max) + 1)
    for k in range(2, int(k_max) + 1):
        out[k] = _trapz(k * x * phi * Phi ** (k - 1), x)
    return out


@dataclass
class RewardPredictor:
    """Predicts the distribution of a sample's reward from an input's features:
    ridge regressions (numpy least squares, an intercept unpenalised) of the
    per-input mean reward and, for non-binary rewards, of the per-input spread.

    Attributes:
        alpha: the ridge penalty (on standardised features).
        binary: whether the logged rewards were all 0/1 (set by :meth:`fit`).
    """

    alpha: float = 1.0
    binary: bool = True
    _mean: np.ndarray | None = field(default=None, repr=False)
    _std: np.ndarray | None = field(default=None, repr=False)
    _mu: np.ndarray | None = field(default=None, repr=False)
    _sd: np.ndarray | None = field(default=None, repr=False)

    def _design(self, X) -> np.ndarray:
        X = np.atleast_2d(np.asarray(X, dtype=np.float64))
        return np.hstack([np.ones((len(X), 1)), (X - self._mu) / self._sd])

    def fit(self, features, rewards: Sequence[Sequence[float]]) -> "RewardPredictor":
        """Fit on logged rewards: ``features`` ``(n, d)``, ``rewards[i]`` the
        rewards of input ``i``'s samples (at least one each). Returns ``self``."""
        X = np.atleast_2d(np.asarray(features, dtype=np.float64))
        if len(X) != len(rewards) or len(X) == 0:
            raise ValueError(f"RewardPredictor.fit: {len(X)} feature rows for {len(rewards)} reward lists")
        rs = [np.asarray(r, dtype=np.float64).reshape(-1) for r in rewards]
        if any(len(r) == 0 for r in rs):
            raise ValueError("RewardPredictor.fit: an input has no logged rewards")
        if not all(np.isfinite(r).all() for r in rs):
            raise ValueError("RewardPredictor.fit: a logged reward is not finite")
        self.binary = all(np.isin(r, (0.0, 1.0)).all() for r in rs)
        self._mu = X.mean(axis=0)
        sd = X.std(axis=0)
        self._sd = np.where(sd > 0, sd, 1.0)
        A = self._design(X)
        P = self.alpha * np.eye(A.shape[1])
        P[0, 0] = 0.0
        solve = lambda y: np.linalg.solve(A.T @ A + P, A.T @ y)  # noqa: E731
        self._mean = solve(np.array([r.mean() for r in rs]))
        self._std = solve(np.array([r.std() for r in rs]))
        return self

    def predict(self, features) -> tuple[np.ndarray, np.ndarray]:
        """``(mean, spread)`` of a sample's reward per input; for binary rewards
        the mean is the success probability (clipped to [0, 1]) and the spread
        ``sqrt(p (1 - p))``."""
        if self._mean is None:
            raise RuntimeError("RewardPredictor.predict: call fit() first")
        A = self._design(features)
        mean = A @ self._mean
        if self.binary:
            p = np.clip(mean, 0.0, 1.0)
            return p, np.sqrt(p * (1 - p))
        return mean, np.maximum(A @ self._std, 0.0)

    def expected_best(self, features, k_max: int) -> np.ndarray:
        """``E_i(k)``, the expected reward of the best of ``k`` samples, as an array
        ``(n, k_max + 1)`` for ``k = 0 .. k_max`` (``E_i(0) = 0``)."""
        mean, spread = self.predict(features)
        k = np.arange(int(k_max) + 1)
        if self.binary:
            out = 1.0 - (1.0 - mean[:, None]) ** k[None, :]
        else:
            out = mean[:, None] + spread[:, None] * expected_max_normal(k_max)[None, :]
            out[:, 0] = 0.0
        return out


#: the largest ``n * (extra samples + 1)`` table :func:`allocate_samples` fills
#: for curves that are not concave (int16 choices: 40 MB)
MAX_EXACT_CELLS = 20_000_000


def allocate_samples(expected_best, total_budget: int, *, k_min: int = 1) -> np.ndarray:
    """Split ``total_budget`` samples over inputs to maximise the summed expected
    best-of-k.

    Args:
        expected_best: ``(n, k_max + 1)``: ``E_i(k)`` for ``k = 0 .. k_max`` (a
            predictor's :meth:`RewardPredictor.expected_best`).
        total_budget: the number of samples to hand out.
        k_min: samples every input gets first.

    Returns:
        ``k`` (int array, ``n``). Guarantee: ``k_min <= k_i <= k_max``,
        ``sum(k) == min(total_budget, n * k_max)``, and ``sum_i E_i(k_i)`` is the
        largest such a split can reach. When every ``E_i`` is concave from
        ``k_min`` (both of :class:`RewardPredictor`'s forms are from ``k = 1``,
        the binary one from 0) the split is greedy by marginal gain: each sample
        beyond ``k_min`` goes to an input of largest ``E_i(k_i + 1) - E_i(k_i)``
        (ties: the smaller index), which is optimal for concave curves. Otherwise
        (``k_min = 0`` with Gaussian rewards: ``E_i(0) = E_i(1)``, so every first
        sample gains nothing and the greedy gave one input all its samples before
        the others got any) it is exact dynamic programming over the budget,
        ``O(n * budget * k_max)``, up to :data:`MAX_EXACT_CELLS` table cells; past
        that, the greedy split with a :class:`RuntimeWarning` that it may fall
        short. ``ValueError`` when the budget is below ``n * k_min``.
    """
    E = np.atleast_2d(np.asarray(expected_best, dtype=np.float64))
    n, k_max = E.shape[0], E.shape[1] - 1
    if int(total_budget) != total_budget or int(k_min) != k_min or k_min < 0 or k_min > k_max:
        raise ValueError(f"allocate_samples: need integers 0 <= k_min <= k_max={k_max} and a budget; got "
                         f"k_min={k_min!r}, total_budget={total_budget!r}")
    if total_budget < n * k_min:
        raise ValueError(f"allocate_samples: a budget of {total_budget} samples is below k_min * inputs = "
                         f"{n * k_min}")
    if not np.isfinite(E).all():
        raise ValueError("allocate_samples: expected_best has a non-finite entry")
    k_min, extra = int(k_min), min(int(total_budget), n * k_max) - n * int(k_min)
    gains = np.diff(E[:, k_min:], axis=1)
    slack = 1e-12 * max(1.0, float(np.abs(E).max()))
    if gains.shape[1] < 2 or bool((gains[:, 1:] <= gains[:, :-1] + slack).all()):
        return _greedy_split(E, k_min, extra)
    if n * (extra + 1) > MAX_EXACT_CELLS:
        warnings.warn(f"allocate_samples: the expected-best curves are not concave from k_min={k_min}, "
                      f"and the exact split of {extra} samples over {n} inputs needs more than "
                      f"{MAX_EXACT_CELLS} table cells: the greedy split is used, which may fall short "
                      f"of the best", RuntimeWarning, stacklevel=2)
        return _greedy_split(E, k_min, extra)
    return _exact_split(E, k_min, extra)


def _greedy_split(E: np.ndarray, k_min: int, extra: int) -> np.ndarray:
    """From ``k_min`` each, ``extra`` samples one at a time to the input of
    largest marginal gain (ties: the smaller index)."""
    n, k_max = E.shape[0], E.shape[1] - 1
    k = np.full(n, k_min, dtype=np.int64)
    heap = [(-(E[i, k_min + 1] - E[i, k_min]), i) for i in range(n) if k_min < k_max]
    heapq.heapify(heap)
    left = extra
    while left > 0 and heap:
        _, i = heapq.heappop(heap)
        k[i] += 1
        left -= 1
        if k[i] < k_max:
            heapq.heappush(heap, (-(E[i, k[i] + 1] - E[i, k[i]]), i))
    return k


def _exact_split(E: np.ndarray, k_min: int, extra: int) -> np.ndarray:
    """The split of exactly ``extra`` samples beyond ``k_min`` each that
    maximises ``sum_i E_i(k_i)``: dynamic programming over the inputs, the table
    the best sum of the inputs so far for each number of samples given out
    (ties: fewer samples to the later input)."""
    n, k_max = E.shape[0], E.shape[1] - 1
    width = k_max - k_min
    best = np.full(extra + 1, -np.inf)
    best[0] = 0.0
    choice = np.zeros((n, extra + 1), dtype=np.int16 if width < 2 ** 15 else np.int32)
    for i in range(n):
        row = E[i, k_min:]
        new = best + row[0]  # j = 0 more samples to input i
        pick = choice[i]
        for j in range(1, min(width, extra) + 1):
            cand = np.full(extra + 1, -np.inf)
            cand[j:] = best[:-j] + row[j]
            better = cand > new
            new[better] = cand[better]
            pick[better] = j
        best = new
    k = np.full(n, k_min, dtype=np.int64)
    r = extra
    for i in range(n - 1, -1, -1):
        j = int(choice[i, r])
        k[i] += j
        r -= j
    return k


def prompt_features(lm, prompt) -> np.ndarray:
    """Cheap features of an input for :class:`RewardPredictor`: the number of
    prompt tokens, and the entropy and top log-probability of the model's first
    next-token distribution (one model call)."""
    lm = as_lm(lm)
    ids = prompt_token_ids(lm, prompt)
    row = np.asarray(lm.logprobs([ids])[0], dtype=np.float64)
    x = row[row > -np.inf]
    p = np.exp(x - x.max())
    p /= p.sum()
    nz = p > 0
    return np.array([len(ids), float(-(p[nz] * np.log(p[nz])).sum()), float(x.max())])


@dataclass(frozen=True)
class AdaptiveBestOfKResult:
    """What :func:`adaptive_best_of_k` returns.

    Attributes:
        results: one :class:`search.reasoning.steps.ReasoningResult` per input
            (best-of-``k_i``).
        ks: the samples allocated per input.
        expected: the predicted ``E_i(k_i)``.
        lm_calls: prefixes the model scored in all (features included).
        feature_calls: those spent on the default features.
        tokens: tokens sampled in all.
    """

    results: list
    ks: tuple[int, ...]
    expected: tuple[float, ...]
    lm_calls: int
    feature_calls: int
    tokens: int

    @property
    def answers(self) -> list:
        """Each input's chosen answer (``None`` where none)."""
        return [None if r is None else r.answer for r in self.results]


def _seeded(kwargs: dict, seed, i: int) -> dict:
    """The seed argument of input ``i``'s ``best_of_n``: ``seed=`` or, with
    ``options`` in ``kwargs``, ``options=`` reseeded."""
    seed_i = None if seed is None else seed + i
    options = kwargs.get("options")
    if options is None:
        return {"seed": seed_i}
    return {} if seed is None else {"options": options.replace(seed=seed_i)}


def adaptive_best_of_k(lm, prompts: Sequence, prm, *, predictor, total_budget: int, k_max: int, k_min: int = 1,
                       features=None, seed=None, **kwargs) -> AdaptiveBestOfKResult:
    """Best-of-k over a batch of inputs with ``k`` chosen per input within a total
    budget of samples (module docstring).

    Args:
        lm, prm: as for :func:`search.reasoning.rerank.best_of_n` (``prm`` is the
            reward that picks among an input's samples).
        prompts: the inputs (texts or token ids).
        predictor: a fitted :class:`RewardPredictor`, or any object with
            ``expected_best(features, k_max) -> (n, k_max + 1)``.
        total_budget: samples over all inputs.
        k_max, k_min: bounds on an input's samples.
        features: ``(n, d)`` features of the inputs, or a function of one prompt
            returning its vector; default :func:`prompt_features` (one call each).
        seed: the base seed; input ``i`` is sampled with ``seed + i`` (in
            place of the seed of ``options``, when given).
        kwargs: passed to ``best_of_n`` (``method``, ``constraint``, ``max_steps``,
            ``options`` or the step-setting keywords such as ``temperature``...).

    Returns:
        :class:`AdaptiveBestOfKResult`; ``ks`` is :func:`allocate_samples` of the
        predictor's curves (its guarantee holds).
    """
    if "n" in kwargs:
        raise TypeError("adaptive_best_of_k: n is chosen per input; pass total_budget and k_max")
    k_max = count("adaptive_best_of_k: k_max", k_max, 1)
    total_budget = count("adaptive_best_of_k: total_budget", total_budget)
    if not len(prompts):
        raise ValueError("adaptive_best_of_k: no prompts")
    lm = as_lm(lm)
    calls0 = lm.calls
    if features is None:
        X = np.stack([prompt_features(lm, p) for p in prompts])
    elif callable(features):
        X = np.stack([np.asarray(features(p), dtype=np.float64) for p in prompts])
    else:
        X = np.atleast_2d(np.asarray(features, dtype=np.float64))
    if len(X) != len(prompts):
        raise ValueError(f"adaptive_best_of_k: {len(X)} feature rows for {len(prompts)} prompts")
    feature_calls = lm.calls - calls0
    E = np.asarray(predictor.expected_best(X, int(k_max)), dtype=np.float64)
    if E.shape != (len(prompts), int(k_max) + 1):
        raise ValueError(f"adaptive_best_of_k: the predictor's expected_best has shape {E.shape}, expected "
                         f"{(len(prompts), int(k_max) + 1)}")
    ks = allocate_samples(E, total_budget, k_min=k_min)
    results = []
    for i, (p, k) in enumerate(zip(prompts, ks)):
        if k == 0:
            results.append(None)
            continue
        results.append(best_of_n(lm, p, prm, n=int(k), **{**kwargs, **_seeded(kwargs, seed, i)}))
    return AdaptiveBestOfKResult(results=results, ks=tuple(int(k) for k in ks),
                                 expected=tuple(float(E[i, k]) for i, k in enumerate(ks)),
                                 lm_calls=int(lm.calls - calls0), feature_calls=int(feature_calls),
                                 tokens=int(sum(r.tokens for r in results if r is not None)))
