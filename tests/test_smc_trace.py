"""The per-step weight trace of :func:`search.smc` (``log_weight_history``,
``resampled_at``) and its ``progress`` lines: consistent with ``ess_history``,
``n_resamples`` and the final particles."""

from __future__ import annotations

import math

import numpy as np

import search
from constrain import compile_regex
from test_awrs_smc import letters_vocab, tiny_lm, tiny_table


def _ess(log_w) -> float:
    w = np.exp(np.asarray(log_w) - max(log_w))
    return float(w.sum() ** 2 / (w * w).sum())


def test_weight_trace_matches_ess_and_resampling(capsys):
    c = compile_regex(r"a(b|c)*d?", letters_vocab(4))
    lm = tiny_lm(tiny_table(3, 5, 6))
    res = search.smc(lm, [], constraint=c, n_particles=8, max_new_tokens=7, seed=1, progress=True)
    assert len(res.log_weight_history) == len(res.ess_history) == res.steps
    assert all(len(w) == 8 for w in res.log_weight_history)
    for w, ess in zip(res.log_weight_history, res.ess_history):
        assert math.isclose(_ess(w), ess, rel_tol=1e-9) if max(w) > -math.inf else ess == 0.0
    assert len(res.resampled_at) == res.n_resamples > 0
    assert all(1 <= s <= res.steps for s in res.resampled_at)
    lines = capsys.readouterr().err.strip().split("\n")
    assert len(lines) == res.steps and lines[0].startswith("smc: step 1/7: ")
    assert sum(line.endswith(", resampled") for line in lines) == res.n_resamples


def test_no_progress_by_default(capsys):
    c = compile_regex(r"ab?", letters_vocab(2))
    search.smc(tiny_lm(tiny_table(0, 3, 3)), [], constraint=c, n_particles=4, max_new_tokens=4, seed=0)
    assert capsys.readouterr().err == ""
