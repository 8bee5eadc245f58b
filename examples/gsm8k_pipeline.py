"""A reasoning pipeline on GSM8K: greedy, best-of-N, A*, φ-decoding and SMC with the
default model and the arithmetic-checking PRM.

Run from the repository root (CPU; a few minutes per question with every method):

    nice -n 10 .venv/bin/python examples/gsm8k_pipeline.py --limit 5

Each question is asked through the chat template with an instruction to reason one
step per line and to finish with ``#### <number>``. The answer line of every method
is generated under the regex ``#### -?[0-9]+`` (see ``docs/reasoning.md``): A*,
best-of-N, foresight and greedy enforce it on the final step; SMC, which has no
notion of steps, samples whole outputs from the model restricted to
``[^#]*#### -?[0-9]+``. The PRM is :class:`search.reasoning.prm.ArithmeticCheckerPRM`; SMC
uses it as a critic (a twist) on the steps finished so far.

Printed: accuracy (the extracted answer equals the reference ``final_answer``),
completion rate, and mean tokens, model calls (``lm.calls``) and PRM calls per
question, for each method. Data: ``examples/data/gsm8k_test_100.jsonl`` (see
``examples/data/PROVENANCE.md``).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import constrain  # noqa: E402
import search  # noqa: E402
from search.reasoning.astar import astar_search  # noqa: E402
from search.reasoning.rerank import best_of_n  # noqa: E402
from search.reasoning.foresight import foresight_search  # noqa: E402
from search.reasoning.prm import ArithmeticCheckerPRM  # noqa: E402
from search.reasoning.steps import Budget, LMStepSampler, Solution, extract_answer  # noqa: E402

DATA = Path(__file__).resolve().parent / "data" / "gsm8k_test_100.jsonl"
INSTRUCTION = ("\nSolve the problem step by step, one short step per line, writing each calculation "
               "out (for example 3 * 4 = 12). Finish with a last line of the form '#### <number>'.")
METHODS = ("greedy", "bon-argmax", "bon-vote", "astar", "foresight", "smc")


class LockstepLM:
    """The LM protocol over a :class:`search.TransformersLM` for drivers that extend
    every prefix by one token per call (SMC): the previous call's prefixes keep one
    batched KV cache, and a call whose prefixes each extend one of them selects
    those rows (repeats allowed, as after resampling) and runs one batched forward
    pass. Anything else is prefilled (batched when the lengths agree). Counts one
    call per prefix, like ``TransformersLM.logprobs``; results equal its rows up to
    float rounding of batched kernels."""

    def __init__(self, tlm):
        self.tlm = tlm
        self.vocab_size = tlm.vocab_size
        self.eos_token_ids = tlm.eos_token_ids
        self.keys: dict[tuple[int, ...], int] = {}
        self.cache = None

    @property
    def calls(self) -> int:
        """Prefixes scored by the wrapped model."""
        return self.tlm.calls

    def _run(self, ids, cache):
        """One batched forward pass (counted by the model): rows and the new cache."""
        import torch

        logits, cache = self.tlm.forward_batch(ids, cache)
        with torch.inference_mode():
            return torch.log_softmax(logits.float(), -1).cpu().numpy(), cache

    def logprobs(self, prefixes):
        """Next-token log-probabilities after each prefix, ``(n, vocab_size)``."""
        import torch

        prefixes = [tuple(int(t) for t in p) for p in prefixes]
        if not prefixes:
            return np.zeros((0, self.vocab_size))
        parents = [self.keys.get(p[:-1]) for p in prefixes]
        if self.cache is not None and all(j is not None for j in parents):
            self.cache.batch_select_indices(torch.tensor(parents, dtype=torch.long))
            rows, self.cache = self._run([[p[-1]] for p in prefixes], self.cache)
        elif len({len(p) for p in prefixes}) == 1:
            rows, self.cache = self._run([list(p) for p in prefixes], None)
        else:
            self.cache, self.keys = None, {}
            return self.tlm.logprobs(prefixes)  # counts its own calls
        self.keys = {p: i for i, p in enumerate(prefixes)}
        return rows


def step_critic(lm, prm, question: str, delimiter: str = "\n"):
    """An SMC critic: ``log`` of the PRM's score of the steps *finished* so far
    (the text up to the last delimiter), so the PRM is asked once per new step, not
    per token. Returns ``(critic, counter)``; ``counter["calls"]`` counts PRM calls."""
    memo: dict[tuple[str, ...], float] = {}
    counter = {"calls": 0}

    def critic(tokens):
        text = lm.decode([t for t in tokens if t not in lm.eos_token_ids])
        done = tuple(s.strip() for s in text.split(delimiter)[:-1] if s.strip())
        if not done:
            return 0.0
        if done not in memo:
            counter["calls"] += 1
            memo[done] = math.log(max(prm.score_last(question, list(done)), 1e-6))
        return memo[done]

    return critic, counter


def run_question(lm, row, args, answer_c, full_c, prm):
    """Every method on one question: ``{method: (answer, complete, tokens, lm_calls, prm_calls, seconds)}``."""
    q = row["question"]
    ids = lm.apply_chat_template(q + INSTRUCTION)
    out = {}
    common = dict(step_delimiter="\n", constraint=answer_c, max_step_tokens=args.max_step_tokens,
                  prm_prompt=q, temperature=args.temperature)
    # best-of-N and foresight bound a sample by max_steps * max_step_tokens tokens
    max_steps = -(-args.max_tokens // args.max_step_tokens)

    # greedy: one stream at temperature 0, answer line under the constraint
    t, c0 = time.perf_counter(), lm.calls
    budget = Budget(args.max_tokens + args.max_step_tokens + 2)  # room for the answer line
    sampler = LMStepSampler(lm, ids, delimiter="\n", constraint=answer_c, temperature=0.0,
                            max_step_tokens=args.max_step_tokens, close_cutoff=True)
    sol = sampler.rollouts(Solution(), 1, budget, args.max_tokens)[0]
    ans = extract_answer(sol.text) if sol is not None else None
    out["greedy"] = (ans, sol is not None, budget.tokens, lm.calls - c0, 0, time.perf_counter() - t)

    t, c0 = time.perf_counter(), lm.calls
    r = best_of_n(lm, ids, prm, n=args.n, method="argmax", max_steps=max_steps, seed=args.seed, **common)
    dt = time.perf_counter() - t
    for name, key in (("bon-argmax", "argmax"), ("bon-vote", "weighted_majority")):
        pick = r.info[key]
        out[name] = (pick[2] if pick else None, bool(pick and pick[0].complete), r.tokens, r.lm_calls,
                     r.prm_calls, dt)

    t = time.perf_counter()
    # A* and foresight get the tokens of n samples, answer lines included
    search_budget = args.n * (args.max_tokens + args.max_step_tokens)
    r = astar_search(lm, ids, prm, k=args.k, token_budget=search_budget, prm_budget=args.prm_budget,
                     max_steps=args.astar_max_steps, step_cost=args.step_cost, seed=args.seed, **common)
    out["astar"] = (r.answer, r.complete, r.tokens, r.lm_calls, r.prm_calls, time.perf_counter() - t)

    t = time.perf_counter()
    r = foresight_search(lm, ids, prm, k=args.k, beam_width=1, max_steps=args.foresight_rounds,
                         token_budget=search_budget, prm_budget=args.prm_budget,
                         joint_rollouts=True, max_rollout_steps=max_steps, seed=args.seed, **common)
    out["foresight"] = (r.answer, r.complete, r.tokens, r.lm_calls, r.prm_calls, time.perf_counter() - t)

    t, c0 = time.perf_counter(), lm.calls
    fast = LockstepLM(lm)
    critic, counter = step_critic(lm, prm, q)
    # the others get max_tokens plus an answer line; SMC the same room in one piece
    res = search.smc(fast, ids, constraint=full_c, n_particles=args.n,
                     max_new_tokens=args.max_tokens + args.max_step_tokens, seed=args.seed, critic=critic)
    best = res.best()
    ans = extract_answer(lm.decode(best)) if best is not None else None
    # SMC samples one token per live particle per step; particles sharing a prefix share
    # a row, so rows scored (= model calls) is what it spent
    out["smc"] = (ans, best is not None, res.lm_calls, lm.calls - c0, counter["calls"], time.perf_counter() - t)
    return out


def main(argv=None):
    """Parse the options, run every method on the first ``--limit`` questions, print the table."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--limit", type=int, default=5, help="questions (the first N of the file)")
    ap.add_argument("--offset", type=int, default=0, help="skip this many questions first")
    ap.add_argument("--n", type=int, default=3, help="best-of-N samples and SMC particles; A* and foresight "
                                                     "get n * (max-tokens + max-step-tokens) tokens")
    ap.add_argument("--k", type=int, default=3, help="steps sampled per A*/foresight expansion")
    ap.add_argument("--max-tokens", type=int, default=128, help="tokens of one solution (plus its answer line)")
    ap.add_argument("--max-step-tokens", type=int, default=40)
    ap.add_argument("--prm-budget", type=int, default=64)
    ap.add_argument("--astar-max-steps", type=int, default=12, help="A* does not expand longer solutions")
    ap.add_argument("--step-cost", type=float, default=0.0,
                    help="A*'s g per step (0: greedy best-first on the PRM, ties deeper)")
    ap.add_argument("--foresight-rounds", type=int, default=2)
    ap.add_argument("--temperature", type=float, default=0.7)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1, help="torch threads")
    ap.add_argument("--jsonl", type=Path, default=None, help="also write per-question results here")
    args = ap.parse_args(argv)

    import torch

    torch.set_num_threads(args.threads)
    rows = [json.loads(line) for line in DATA.read_text().splitlines() if line.strip()]
    rows = rows[args.offset: args.offset + args.limit]
    t0 = time.perf_counter()
    lm = search.load_default_model()
    answer_c = constrain.compile_regex(r"#### -?[0-9]+", lm.vocab)
    full_c = constrain.compile_regex(r"[^#]*#### -?[0-9]+", lm.vocab)
    prm = ArithmeticCheckerPRM()
    print(f"loaded {lm.name} and compiled the constraints in {time.perf_counter() - t0:.1f} s", flush=True)

    totals = {m: np.zeros(6) for m in METHODS}  # correct, complete, tokens, calls, prm calls, seconds
    log = open(args.jsonl, "w") if args.jsonl else None
    for i, row in enumerate(rows):
        out = run_question(lm, row, args, answer_c, full_c, prm)
        gold = extract_answer("#### " + str(row["final_answer"]))
        for m in METHODS:
            ans, complete, tok, calls, prmc, dt = out[m]
            totals[m] += [ans == gold, complete, tok, calls, prmc, dt]
        line = " ".join(f"{m}={out[m][0]}" for m in METHODS)
        print(f"[{i + 1}/{len(rows)}] gold={gold} {line}", flush=True)
        if log:
            log.write(json.dumps({"id": row.get("id_orig"), "gold": gold, **{m: out[m] for m in METHODS}}) + "\n")
            log.flush()
        # the table so far after every question, so a run cut short still reports
        print_table(totals, i + 1, args, time.perf_counter() - t0)
    if log:
        log.close()


def print_table(totals, n_done: int, args, seconds: float) -> None:
    """The Markdown table of means per question over the ``n_done`` questions so far."""
    n = max(1, n_done)
    print(f"\n{n_done} questions, n={args.n}, k={args.k}, max_tokens={args.max_tokens}, "
          f"T={args.temperature}, seed={args.seed}; means per question\n")
    print("| method | accuracy | complete | tokens | model calls | PRM calls | seconds |")
    print("|---|---|---|---|---|---|---|")
    for m in METHODS:
        c, comp, tok, calls, prmc, dt = totals[m]
        print(f"| {m} | {c / n:.0%} ({int(c)}/{n_done}) | {comp / n:.0%} | {tok / n:.0f} | {calls / n:.0f} | "
              f"{prmc / n:.1f} | {dt / n:.1f} |")
    print(f"\ntotal {seconds:.0f} s\n", flush=True)

if __name__ == "__main__":
    main()
