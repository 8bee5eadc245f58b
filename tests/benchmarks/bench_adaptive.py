"""AdaDec and adaptive best-of-k against greedy, beam search and fixed best-of-k on
one-step arithmetic with the default model (SmolLM2-135M-Instruct, CPU).

Task: ``What is A + B? Answer with the number only.`` (A, B of 1-3 digits, drawn
with a fixed seed; a calibration set and an evaluation set that do not overlap);
an output is right when its last number is A + B.

Methods (every one at most ``--k`` samples' worth of work per prompt):

* greedy; beam search (``beam_size=k``);
* AdaDec (threshold fitted on the calibration prompts with their answers as
  references: the logistic fit; ``top_k=3``, ``lookahead=3``);
* best-of-k, fixed ``k`` per prompt: by majority vote (no verifier) and by a
  verifier (the reward checks the answer: 1 if it is A + B), temperature 0.7;
* adaptive best-of-k with the same verifier and the same total of samples
  (``k * prompts``, ``k_max = 2k``): the predictor is fitted on logged verifier
  rewards of ``--calib-k`` samples per calibration prompt, on the default
  features (prompt length, first-token entropy and top log-probability).

Reported: accuracy, model calls (prefixes scored), tokens and wall time.
Usage: ``.venv/bin/python tests/benchmarks/bench_adaptive.py [--n 20] [--k 4]``.
"""

from __future__ import annotations

import argparse
import re
import time

import numpy as np

import search
from search.reasoning.adadec import adadec_generate, fit_adadec_threshold
from search.reasoning.adaptive_best_of_k import RewardPredictor, adaptive_best_of_k, prompt_features
from search.reasoning.prm import CallablePRM
from search.reasoning.rerank import best_of_n
from search.reasoning.steps import extract_answer

_Q = re.compile(r"What is (\d+) \+ (\d+)\?")


def problems(n: int, seed: int) -> list[tuple[str, str]]:
    """``n`` prompts with their answers; digits per operand drawn from 1-3."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        a, b = (int(rng.integers(1, 10 ** int(rng.integers(1, 4)))) for _ in range(2))
        out.append((f"What is {a} + {b}? Answer with the number only.", str(a + b)))
    return out


def verifier(prompt: str, steps) -> float:
    """1 when the solution's answer is the sum the prompt asks for."""
    a, b = map(int, _Q.findall(prompt)[-1])
    return float(extract_answer("\n".join(steps)) == str(a + b))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=20)
    ap.add_argument("--calib", type=int, default=12)
    ap.add_argument("--calib-k", type=int, default=6)
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--max-new-tokens", type=int, default=8)
    args = ap.parse_args()
    lm = search.as_lm(search.load_default_model())
    evals, calib = problems(args.n, 0), problems(args.calib, 1)
    prompts = [p for p, _ in evals]
    T = args.max_new_tokens
    bon = dict(max_steps=1, max_step_tokens=T, temperature=0.7, vocab=lm.vocab)
    rows = []

    def run(name, fn):
        c0, t0 = lm.calls, time.perf_counter()
        answers, tokens = fn()
        wall = time.perf_counter() - t0
        acc = np.mean([a == y for a, (_, y) in zip(answers, evals)])
        rows.append((name, acc, lm.calls - c0, tokens, wall))
        print(f"{name:34s} acc {acc:.2f}  calls {lm.calls - c0:5d}  tokens {tokens:5d}  wall {wall:6.1f} s",
              flush=True)

    def greedy():
        rs = [adadec_generate(lm, p, threshold=None, max_new_tokens=T) for p in prompts]
        print(f"  greedy outputs: {[r.text for r in rs[:3]]}", flush=True)
        return [extract_answer(r.text) for r in rs], sum(len(r.token_ids) + r.finished for r in rs)

    def beam():
        hs = [search.beam_search(lm, p, beam_size=args.k, max_new_tokens=T)[0] for p in prompts]
        return [extract_answer(h.text) for h in hs], sum(len(h.tokens) for h in hs)

    run("greedy", greedy)
    run(f"beam search (beam {args.k})", beam)

    c0, t0 = lm.calls, time.perf_counter()
    table = fit_adadec_threshold(lm, [p for p, _ in calib], references=[y for _, y in calib])
    print(f"AdaDec threshold {table.for_model(lm):.3f} nats ({table.info[search.reasoning.adadec.model_name(lm)]}); "
          f"fit: {lm.calls - c0} calls, {time.perf_counter() - t0:.1f} s", flush=True)

    def adadec():
        rs = [adadec_generate(lm, p, threshold=table, top_k=3, lookahead=3, max_new_tokens=T) for p in prompts]
        print(f"  AdaDec paused at {sum(len(r.paused_at) for r in rs)} of {sum(len(r.entropies) for r in rs)} "
              f"steps, changed greedy's token at {sum(len(r.changed_at) for r in rs)}", flush=True)
        return [extract_answer(r.text) for r in rs], sum(len(r.token_ids) + r.finished for r in rs)

    run("AdaDec (top 3, lookahead 3)", adadec)

    vote = CallablePRM(lambda prompt, steps: 1.0)
    check = CallablePRM(verifier)

    def fixed(prm, method):
        def go():
            rs = [best_of_n(lm, p, prm, n=args.k, method=method, seed=i, **bon) for i, p in enumerate(prompts)]
            return [r.answer for r in rs], sum(r.tokens for r in rs)
        return go

    run(f"best-of-{args.k}, majority vote", fixed(vote, "weighted_majority"))
    run(f"best-of-{args.k}, verifier", fixed(check, "argmax"))

    # logged rewards: calib-k verifier-scored samples per calibration prompt
    c0, t0 = lm.calls, time.perf_counter()
    X, logged = [], []
    for i, (p, _) in enumerate(calib):
        X.append(prompt_features(lm, p))
        r = best_of_n(lm, p, check, n=args.calib_k, method="argmax", seed=1000 + i, **bon)
        logged.append([s for _, s, _ in r.candidates] + [0.0] * (args.calib_k - len(r.candidates)))
    pred = RewardPredictor(alpha=1.0).fit(np.array(X), logged)
    print(f"predictor fitted on {sum(map(len, logged))} logged rewards (mean {np.mean(np.concatenate(logged)):.2f}): "
          f"{lm.calls - c0} calls, {time.perf_counter() - t0:.1f} s", flush=True)

    def adaptive():
        res = adaptive_best_of_k(lm, prompts, check, predictor=pred, total_budget=args.k * len(prompts),
                                 k_max=2 * args.k, seed=0, method="argmax", **bon)
        print(f"  k per prompt: {list(res.ks)}", flush=True)
        return res.answers, res.tokens

    run(f"adaptive best-of-k, verifier (mean k {args.k})", adaptive)

    print("\n| method | accuracy | model calls | tokens | wall (s) |\n|---|---|---|---|---|")
    for name, acc, calls, tokens, wall in rows:
        print(f"| {name} | {acc:.2f} | {calls} | {tokens} | {wall:.1f} |")


if __name__ == "__main__":
    main()
