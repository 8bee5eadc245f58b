"""``search.reasoning.adaptive_best_of_k``: the allocation follows the predictor.

* :func:`allocate_samples` spends exactly the budget within ``[k_min, k_max]`` and
  maximises the summed expected best-of-k (checked against brute force on small
  concave curves);
* :class:`RewardPredictor` recovers success probabilities and spreads from logged
  rewards, and its curves are ``1 - (1 - p)^k`` / ``mu + sigma e_k``;
* :func:`adaptive_best_of_k` runs best-of-``k_i`` with the ``k_i`` a hand-made
  predictor implies (more samples to the unsure input, one to the sure ones).
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from search.lm.protocol import CallableLM
from search.reasoning.adaptive_best_of_k import (RewardPredictor, adaptive_best_of_k, allocate_samples,
                                                 expected_max_normal)
from search.reasoning.prm import ArithmeticCheckerPRM
from tests.test_foresight import VOCAB, two_paths


def curves(p, k_max):
    k = np.arange(k_max + 1)
    return 1 - (1 - np.asarray(p)[:, None]) ** k[None, :]


@pytest.mark.parametrize("seed", range(40))
def test_allocation_is_optimal_and_spends_the_budget(seed):
    rng = np.random.default_rng(seed)
    n, k_max = int(rng.integers(1, 5)), int(rng.integers(1, 5))
    k_min = int(rng.integers(0, k_max + 1))
    E = curves(rng.uniform(0, 1, n), k_max)
    budget = int(rng.integers(n * k_min, n * k_max + 3))
    k = allocate_samples(E, budget, k_min=k_min)
    assert k.sum() == min(budget, n * k_max) and k.min() >= k_min and k.max() <= k_max
    best = max(sum(E[i, c[i]] for i in range(n))
               for c in itertools.product(range(k_min, k_max + 1), repeat=n) if sum(c) <= budget)
    assert np.isclose(sum(E[i, k[i]] for i in range(n)), best)


def test_allocation_follows_predicted_gains():
    # a sure input (p=0.99), a hopeless one (p=0.01) and an unsure one (p=0.4)
    E = curves([0.99, 0.01, 0.4], 6)
    assert allocate_samples(E, 3).tolist() == [1, 1, 1]
    assert allocate_samples(E, 7).tolist() == [1, 1, 5]
    assert allocate_samples(E, 3, k_min=0).tolist() == [1, 0, 2]
    # equal gains: the earlier input first
    assert allocate_samples(curves([0.5, 0.5], 3), 3).tolist() == [2, 1]
    with pytest.raises(ValueError, match="below k_min"):
        allocate_samples(E, 2)


def test_predictor_binary_and_gaussian():
    rng = np.random.default_rng(0)
    X = rng.uniform(0, 1, size=(200, 1))
    p = 0.1 + 0.8 * X[:, 0]
    rewards = [rng.random(50) < q for q in p]
    pred = RewardPredictor(alpha=1e-3).fit(X, [r.astype(float) for r in rewards])
    assert pred.binary
    mean, _ = pred.predict([[0.0], [1.0]])
    assert np.allclose(mean, [0.1, 0.9], atol=0.05)
    E = pred.expected_best([[0.5]], 4)
    assert np.allclose(E[0], 1 - (1 - mean.mean()) ** np.arange(5), atol=0.05)

    rewards = [rng.normal(0.5, 0.1 + 0.2 * x, size=80) for x in X[:, 0]]
    pred = RewardPredictor(alpha=1e-3).fit(X, rewards)
    assert not pred.binary
    mean, spread = pred.predict([[0.0], [1.0]])
    assert np.allclose(mean, 0.5, atol=0.03) and np.allclose(spread, [0.1, 0.3], atol=0.03)
    E = pred.expected_best([[1.0]], 3)
    assert np.allclose(E[0, 1:], mean[1] + spread[1] * expected_max_normal(3)[1:])
    assert np.isclose(expected_max_normal(2)[2], 1 / np.sqrt(np.pi), atol=1e-6)


class HandPredictor:
    """Success probability = the input's first feature."""

    def expected_best(self, X, k_max):
        return curves(np.asarray(X)[:, 0], k_max)


def test_adaptive_best_of_k_runs_the_allocated_samples():
    lm = two_paths(p_right=0.5, faithful=1.0)
    res = adaptive_best_of_k(lm, [[0], [0], [0]], ArithmeticCheckerPRM(), predictor=HandPredictor(),
                             features=[[0.99], [0.4], [0.98]], total_budget=8, k_max=6, vocab=VOCAB, seed=0,
                             temperature=1.0, method="argmax")
    assert res.ks == (1, 6, 1) and res.feature_calls == 0
    assert [len(r.candidates) for r in res.results] == [1, 6, 1]
    assert res.lm_calls == sum(r.lm_calls for r in res.results)
    assert np.isclose(res.expected[1], 1 - 0.6 ** 6)
    # the step settings as one options object: input i still gets seed + i
    from search import StepOptions

    same = adaptive_best_of_k(two_paths(p_right=0.5, faithful=1.0), [[0], [0], [0]],
                              ArithmeticCheckerPRM(), predictor=HandPredictor(),
                              features=[[0.99], [0.4], [0.98]], total_budget=8, k_max=6, seed=0,
                              options=StepOptions(vocab=VOCAB, temperature=1.0, seed=99),
                              method="argmax")
    assert [r.solution for r in same.results] == [r.solution for r in res.results]
    # six samples of a fair coin: the checker finds the right line
    assert res.results[1].answer == "4"


def test_default_features_cost_one_call_each():
    lm = two_paths()
    res = adaptive_best_of_k(lm, [[0], [0]], ArithmeticCheckerPRM(), predictor=HandPredictor(), total_budget=2,
                             k_max=2, vocab=VOCAB, seed=0)
    assert res.feature_calls == 2 and res.ks == (1, 1)
    with pytest.raises(TypeError, match="n is chosen per input"):
        adaptive_best_of_k(lm, [[0]], ArithmeticCheckerPRM(), predictor=HandPredictor(), total_budget=1, k_max=1,
                           n=3)


def _brute_best(E, budget, k_min):
    n, k_max = E.shape[0], E.shape[1] - 1
    spend = min(budget, n * k_max)
    return max(sum(E[i, c[i]] for i in range(n))
               for c in itertools.product(range(k_min, k_max + 1), repeat=n) if sum(c) == spend)


@pytest.mark.parametrize("seed", range(40))
def test_allocation_is_optimal_for_curves_that_are_not_concave(seed):
    """Gaussian rewards with k_min=0 (E(0) = E(1) = mu: the first sample gains
    nothing) and arbitrary increasing curves: the split is the brute force's best."""
    rng = np.random.default_rng(1000 + seed)
    n, k_max = int(rng.integers(1, 5)), int(rng.integers(2, 6))
    if seed % 2:
        mu, sigma = rng.uniform(-1, 1, n), rng.uniform(0.1, 1, n)
        E = mu[:, None] + sigma[:, None] * expected_max_normal(k_max)[None, :]
        k_min = 0
    else:
        E = np.cumsum(rng.uniform(0, 1, (n, k_max + 1)), axis=1)
        k_min = int(rng.integers(0, k_max))
    budget = int(rng.integers(n * k_min, n * k_max + 3))
    k = allocate_samples(E, budget, k_min=k_min)
    assert k.sum() == min(budget, n * k_max) and k.min() >= k_min and k.max() <= k_max
    assert np.isclose(sum(E[i, k[i]] for i in range(n)), _brute_best(E, budget, k_min))


def test_gaussian_first_samples_are_spread():
    # three inputs alike: the greedy split gave the first one every sample
    # (its first sample gains nothing, like everyone's, and then it leads)
    E = 0.2 + 0.5 * expected_max_normal(8)[None, :].repeat(3, axis=0)
    k = allocate_samples(E, 6, k_min=0)
    assert sorted(k.tolist()) == [2, 2, 2]
    # the greedy split, for the record
    from search.reasoning.adaptive_best_of_k import _greedy_split

    assert _greedy_split(E, 0, 6).tolist() == [6, 0, 0]


def test_too_large_an_exact_split_warns_and_falls_back(monkeypatch):
    import search.reasoning.adaptive_best_of_k as A

    E = 0.2 + 0.5 * expected_max_normal(8)[None, :].repeat(3, axis=0)
    monkeypatch.setattr(A, "MAX_EXACT_CELLS", 10)
    with pytest.warns(RuntimeWarning, match="not concave"):
        k = allocate_samples(E, 6, k_min=0)
    assert k.sum() == 6
