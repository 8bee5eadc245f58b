"""Best-of-N with a process reward model: the baseline for the step searches.

``n`` complete solutions are sampled independently, one step at a time
(:mod:`search.reasoning.steps`; the answer line under ``constraint``), each is
scored once by the PRM (``aggregate`` of its per-step scores, default the last:
the score of the whole solution) and two choices are made from the same samples:

* ``"argmax"``: the solution with the highest PRM score (ties: the earlier
  sample);
* ``"weighted_majority"``: the answers (``answer_fn``) are voted for with the
  PRM scores as weights and the answer of largest total wins; the returned
  solution is its highest-scoring sample (Uesato et al. 2022; Wang et al. 2023,
  "Self-Consistency", for the unweighted vote). Samples without an answer do
  not vote; if none has one, this falls back to ``"argmax"``.

``result.info["argmax"]`` and ``result.info["weighted_majority"]`` hold both
choices; ``result.solution`` is the one asked for by ``method``.
"""

from __future__ import annotations

from typing import Callable

from search.arguments import count
from search.reasoning.steps import (UNSET, Budget, ReasoningResult, Solution, StepOptions, aggregate_scores,
                                    prm_score_last, step_options)

__all__ = ["best_of_n"]

METHODS = ("argmax", "weighted_majority")


def best_of_n(lm, prompt, prm, *, n: int = 4, method: str = "weighted_majority",
              constraint=None, token_budget: int | None = None, prm_budget: int | None = None,
              aggregate: str = "last", max_steps: int = 16, close_cutoff: bool = True,
              options: StepOptions | None = None, step_delimiter: str = UNSET,
              max_step_tokens: int = UNSET, temperature: float = UNSET, seed=UNSET, vocab=UNSET,
              prm_prompt: str | None = UNSET,
              answer_fn: Callable[[str], str | None] = UNSET) -> ReasoningResult:
    """Sample ``n`` solutions and pick one by PRM argmax or PRM-weighted majority vote.

    Args:
        lm, prompt, prm, constraint, aggregate, options, step_delimiter,
        max_step_tokens, temperature, seed, vocab, prm_prompt, answer_fn: as for
            :func:`search.reasoning.astar.astar_search` (the step settings:
            ``options=`` or keywords, :class:`~search.reasoning.steps.StepOptions`).
        n: the number of samples.
        method: ``"argmax"`` or ``"weighted_majority"`` (module docstring).
        token_budget, prm_budget: optional limits, never exceeded; the samples are
            drawn together (lock-step), and one cut off by the token budget is
            dropped (``budget_exhausted`` is then set).
        max_steps: with ``max_step_tokens``, bounds a sample's length
            (``max_steps * max_step_tokens`` tokens); a sample that has not ended
            by then is dropped, unless ``close_cutoff`` (the default) and a
            constraint: it is then closed with an answer line under the constraint.
        (PRM budget: samples beyond it are not scored and not chosen from.)

    Returns:
        a :class:`search.reasoning.steps.ReasoningResult`; ``candidates`` lists
        ``(solution, score, answer)`` for every scored sample. Guarantee: the
        argmax choice has the largest score among the candidates, the majority
        choice the answer of largest total score.

    References: Lightman et al., "Let's Verify Step by Step" (2023), best-of-N
    with a PRM; Uesato et al., "Solving math word problems with process- and
    outcome-based feedback" (2022), verifier-weighted voting.
    """
    n = count("n", n, 1)
    max_steps = count("max_steps", max_steps, 1)
    aggregate_scores((), aggregate)  # an unknown one, before any model call
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}; expected one of {METHODS}")
    opts = step_options("best_of_n", options, step_delimiter=step_delimiter,
                        max_step_tokens=max_step_tokens, temperature=temperature, seed=seed,
                        vocab=vocab, prm_prompt=prm_prompt, answer_fn=answer_fn)
    budget = Budget(token_budget, prm_budget)
    sampler = opts.sampler(lm, prompt, constraint, close_cutoff=close_cutoff)
    text = opts.prm_text(sampler)
    calls0 = sampler.lm.calls
    cands: list[tuple[Solution, float, str | None]] = []
    # the n samples share the prompt: drawn together, the prompt is scored once
    for sol in sampler.rollouts(Solution(), n, budget, max_steps * opts.max_step_tokens):
        if sol is None or not sol.steps:
            continue
        if not budget.take_prm_call():
            break
        r = prm_score_last(prm, text, sol.step_texts, aggregate)
        cands.append((sol, r, opts.answer_fn(sol.text) if sol.complete else None))
    return _choose(cands, method, budget, sampler.lm.calls - calls0)


def _choose(cands, method: str, budget: Budget, lm_calls: int) -> ReasoningResult:
    """Both choices over scored candidates ``(solution, score, answer)``."""
    argmax = max(range(len(cands)), key=lambda i: (cands[i][1], -i)) if cands else None
    totals: dict[str, float] = {}
    for sol, r, a in cands:
        if a is not None:
            totals[a] = totals.get(a, 0.0) + r
    if totals:
        win = max(totals.items(), key=lambda kv: kv[1])[0]
        majority = max((i for i in range(len(cands)) if cands[i][2] == win), key=lambda i: (cands[i][1], -i))
    else:
        majority = argmax
    pick = argmax if method == "argmax" else majority
    sol, score, ans = cands[pick] if pick is not None else (None, None, None)
    return ReasoningResult(
        solution=sol,
        answer=ans,
        complete=bool(sol is not None and sol.complete),
        budget_exhausted=budget.exhausted is not None,
        stop_reason=budget.exhausted or "done",
        tokens=budget.tokens,
        lm_calls=int(lm_calls),
        prm_calls=budget.prm_calls,
        score=score,
        candidates=list(cands),
        info={"argmax": None if argmax is None else cands[argmax],
              "weighted_majority": None if majority is None else cands[majority],
              "votes": totals},
    )

