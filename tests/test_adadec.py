"""``search.reasoning.adadec``: AdaDec on tiny models with known entropies.

* it pauses exactly at the steps whose (masked) entropy exceeds the threshold, and
  commits greedy's token everywhere else;
* at a pause the lookahead picks the candidate whose roll-out is more probable;
* no prefix is scored twice (rows of the chosen roll-out are reused);
* thresholds: quantile and logistic fits, JSON save/load round trip, typed errors.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from constrain import Vocabulary, compile_regex
from search.lm.protocol import CallableLM
from search.reasoning.adadec import (AdaDecThresholds, adadec_generate, fit_adadec_threshold, model_name,
                                     next_token_entropy)

V, EOS = 5, 4


def positional_lm(seed: int, L: int = 8):
    """A model whose next-token row depends on the position only (random
    sharpness per position), EOS forced at position ``L``; records the prefixes."""
    rng = np.random.default_rng(seed)
    rows = rng.normal(size=(L + 1, V)) * rng.uniform(0.1, 6.0, size=(L + 1, 1))
    rows[:, EOS] = -np.inf
    rows[L] = -np.inf
    rows[L, EOS] = 0.0
    rows = rows - np.log(np.exp(rows).sum(axis=1, keepdims=True))
    seen = []

    def fn(prefix):
        seen.append(prefix)
        return rows[min(len(prefix) - 1, L)]

    lm = CallableLM(fn, vocab_size=V, eos_token_id=EOS)
    return lm, rows, seen


@pytest.mark.parametrize("seed", range(30))
def test_pauses_exactly_where_entropy_crosses_the_threshold(seed):
    lm, rows, seen = positional_lm(seed)
    ents = [next_token_entropy(r) for r in rows]
    thr = float(np.quantile(ents[:-1], np.random.default_rng(seed).uniform(0.2, 0.8)))
    res = adadec_generate(lm, [0], threshold=thr, lookahead=2, top_k=3, max_new_tokens=20)
    assert res.finished and len(res.token_ids) == len(rows) - 1
    assert res.paused_at == tuple(i for i, h in enumerate(ents) if h > thr)
    assert np.allclose(res.entropies, ents)
    for i, t in enumerate(res.token_ids):
        if i not in res.paused_at:
            assert t == int(np.argmax(rows[i]))
    assert len(seen) == len(set(seen)) == res.lm_calls  # no prefix scored twice


def test_no_threshold_is_greedy():
    lm, rows, _ = positional_lm(3)
    res = adadec_generate(lm, [0], threshold=None, max_new_tokens=20)
    assert res.paused_at == () and res.token_ids == tuple(int(np.argmax(r)) for r in rows[:-1])
    assert res.lm_calls == len(rows) and res.threshold == float("inf")


def trap_lm():
    """Token 0 is a little more likely first (0.55) but leads to a flat
    distribution; token 1 (0.45) leads to a certain continuation."""
    flat = np.log(np.array([0.25, 0.25, 0.25, 0.25, 1e-12]))
    sure = np.log(np.array([1e-12, 1e-12, 1.0 - 4e-12, 1e-12, 1e-12]))
    eos = np.log(np.array([1e-12] * 4 + [1.0]))

    def fn(prefix):
        gen = prefix[1:]
        if not gen:
            return np.log(np.array([0.55, 0.45, 1e-12, 1e-12, 1e-12]))
        if len(gen) >= 3:
            return eos
        return flat if gen[0] == 0 else sure

    return CallableLM(fn, vocab_size=V, eos_token_id=EOS)


def test_lookahead_picks_the_better_candidate():
    greedy = adadec_generate(trap_lm(), [0], threshold=None, max_new_tokens=10)
    assert greedy.token_ids[0] == 0
    res = adadec_generate(trap_lm(), [0], threshold=0.5, lookahead=2, top_k=2, max_new_tokens=10)
    assert res.paused_at[0] == 0 and res.changed_at == (0,)
    assert res.token_ids == (1, 2, 2) and res.finished
    assert res.logprob > greedy.logprob
    # a lookahead of 0 reranks by the candidate alone: greedy's choice
    assert adadec_generate(trap_lm(), [0], threshold=0.5, lookahead=0, top_k=2).token_ids == greedy.token_ids


def test_entropy_is_that_of_the_allowed_tokens():
    toks = [b"a", b"b", b"c", b"d", b"<eos>"]
    vocab = Vocabulary.from_tokens(toks, eos_token_ids=[EOS])
    c = compile_regex(r"[cd]+", vocab)
    uniform = np.log(np.full(V, 1 / V))
    lm = CallableLM(lambda p: uniform, vocab_size=V, eos_token_id=EOS)
    res = adadec_generate(lm, [0], constraint=c, threshold=0.69, max_new_tokens=3)
    assert np.isclose(res.entropies[0], np.log(2))  # c or d, renormalised
    assert np.isclose(res.entropies[1], np.log(3))  # c, d or EOS
    # summed log-probabilities favour ending: EOS alone beats a token and its roll-out
    assert res.paused_at == (0, 1) and res.finished and len(res.token_ids) == 1
    # the mean does not; equal means: the more probable candidate, then the smaller id
    res = adadec_generate(lm, [0], constraint=c, threshold=0.69, max_new_tokens=3, score="mean")
    assert res.paused_at == (0, 1, 2) and res.token_ids == (2, 2, 2) and not res.finished


def test_quantile_fit_save_load(tmp_path):
    lm, rows, _ = positional_lm(5)
    table = fit_adadec_threshold(lm, [[0], [1]], quantile=0.75, max_new_tokens=20)
    ents = [next_token_entropy(r) for r in rows] * 2
    name = model_name(lm)
    assert name == "CallableLM"
    assert np.isclose(table.thresholds[name], np.quantile(ents, 0.75))
    assert table.info[name]["method"] == "quantile" and table.info[name]["steps"] == len(ents)
    path = tmp_path / "thr.json"
    table.save(path)
    back = AdaDecThresholds.load(path)
    assert back.thresholds == table.thresholds and back.for_model(lm) == table.thresholds[name]
    res = adadec_generate(lm, [0], threshold=back, max_new_tokens=20)
    assert res.threshold == table.thresholds[name]
    assert len(res.paused_at) == sum(h > res.threshold for h in ents[:len(rows)])


def test_logistic_fit_puts_the_threshold_between_sure_and_unsure_steps():
    # sure steps (entropy ~0) agree with the reference; unsure ones (entropy ~log 4) do not
    sure = np.log(np.array([1 - 4e-6, 1e-6, 1e-6, 1e-6, 1e-6]))
    unsure = np.log(np.array([0.3, 0.25, 0.25, 0.2, 1e-9]))

    def fn(prefix):
        return unsure if len(prefix) % 3 == 0 else sure

    lm = CallableLM(fn, vocab_size=V, eos_token_id=EOS)
    # the reference takes token 0 at sure steps, token 1 at unsure ones
    prompts = [[0], [0, 0]]
    refs = [[0 if (1 + i) % 3 else 1 for i in range(9)], [0 if (2 + i) % 3 else 1 for i in range(9)]]
    table = fit_adadec_threshold(lm, prompts, references=refs)
    thr = table.for_model(lm)
    assert table.info["CallableLM"]["method"] == "logistic" and table.info["CallableLM"]["mismatches"] == 6
    assert next_token_entropy(sure) < thr < next_token_entropy(unsure)


def test_errors(tmp_path):
    lm, _, _ = positional_lm(0)
    with pytest.raises(KeyError, match="no AdaDec threshold for model 'CallableLM'"):
        AdaDecThresholds({"other": 1.0}).for_model(lm)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"thresholds": {}}))
    with pytest.raises(ValueError, match="not an AdaDec thresholds file"):
        AdaDecThresholds.load(bad)
    with pytest.raises(ValueError, match="top_k"):
        adadec_generate(lm, [0], top_k=0)
    with pytest.raises(ValueError, match="score"):
        adadec_generate(lm, [0], score="max")
    with pytest.raises(ValueError, match="quantile"):
        fit_adadec_threshold(lm, [[0]], quantile=1.0)


def test_logistic_boundary_outside_the_data_is_not_used():
    from search.reasoning.adadec import _logistic_threshold

    h = np.array([0.5, 1.0, 1.5, 2.0, 2.5, 3.0, 3.5, 4.0])
    # a boundary inside the data: the entropy where mismatches begin
    thr = _logistic_threshold(h, np.array([0, 0, 0, 1, 0, 1, 1, 1.0]))
    assert thr is not None and 1.5 < thr < 3.0
    # almost every step mismatches: the fitted boundary lies below every entropy
    # (an extrapolation, possibly a negative entropy), so the fit is degenerate
    assert _logistic_threshold(h, np.array([1, 1, 1, 0, 1, 1, 1, 1.0])) is None
