"""φ-decoding: foresight sampling over reasoning steps (Xu et al., 2025).

Xu et al., "φ-Decoding: Adaptive Foresight Sampling for Balanced
Inference-Time Exploration and Exploitation" (ACL 2025). Each round, from each of
the ``beam_width`` kept partial solutions:

1. **candidates**: ``k`` next steps are sampled (:mod:`search.reasoning.steps`);
2. **in-width pruning**: a candidate whose confidence (mean token
   log-probability of the step) is below ``mean - width_sigma * std`` over the
   round's candidates is dropped before it costs a roll-out (at least one stays);
3. **foresight**: each remaining candidate is rolled out to a complete solution
   (final steps are their own roll-out); its value ``F`` is the roll-out's mean
   token log-probability over the whole solution;
4. **scores**: the *advantage* ``F(candidate) - F(parent)`` (the parent's ``F``
   is that of the roll-out it was chosen with; 0 at the root) and the *cluster
   agreement* ``|cluster| / #roll-outs``, where roll-outs are clustered by their
   final answer (``answer_fn``; a roll-out without an answer is its own
   cluster). The value of a candidate is ``softmax(advantage / tau)`` plus the
   normalised agreement (plus ``prm_weight`` times its PRM score, when a PRM is
   given);
5. **in-depth pruning**: when the largest cluster holds at least
   ``cluster_threshold`` of the round's roll-outs (and there are at least two),
   the search stops and returns that cluster's roll-out of highest ``F``
   (``stop_reason == "consensus"``);
6. **selection**: ``beam_width`` candidates are drawn without replacement with
   probability proportional to their value (``select="sample"``, the paper's
   choice) or the best are kept (``select="top"``). A chosen final step ends its
   beam.

At the end (``max_steps`` rounds, no beam left, or a budget), the answer is the
largest answer cluster among every roll-out and finished solution, and within it
the solution of highest ``F``. Budgets are never exceeded (checked before every
token and PRM call); a search cut short returns the best it has, marked
``budget_exhausted``.
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Callable

import numpy as np

from search.arguments import count, finite
from search.reasoning.steps import (UNSET, Budget, ReasoningResult, Solution, StepOptions, prm_score_last,
                                    step_options)

__all__ = ["foresight_search"]


def _mean_lp(sol: Solution) -> float:
    n = max(1, sum(s.n_tokens for s in sol.steps))
    return sol.logprob / n


def _softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - np.max(x))
    return e / e.sum()


def foresight_search(lm, prompt, prm=None, *, k: int = 4, beam_width: int = 2,
                     max_steps: int = 8, token_budget: int | None = None, prm_budget: int | None = None,
                     constraint=None, width_sigma: float = 1.0, cluster_threshold: float = 0.7,
                     tau: float = 1.0, prm_weight: float = 1.0, select: str = "sample",
                     max_rollout_steps: int = 16, joint_rollouts: bool = False,
                     close_cutoff: bool = True, options: StepOptions | None = None,
                     step_delimiter: str = UNSET, max_step_tokens: int = UNSET,
                     temperature: float = UNSET, seed=UNSET, vocab=UNSET,
                     prm_prompt: str | None = UNSET,
                     answer_fn: Callable[[str], str | None] = UNSET) -> ReasoningResult:
    """φ-decoding (foresight sampling with width and depth pruning); see the module docstring.

    Args:
        lm, prompt, constraint, options, step_delimiter, max_step_tokens,
        temperature, seed, vocab, prm_prompt, answer_fn: as for
            :func:`search.reasoning.astar.astar_search` (the step settings:
            ``options=`` or keywords, :class:`~search.reasoning.steps.StepOptions`).
        prm: an optional PRM (:mod:`search.reasoning.prm`) adding ``prm_weight * r`` to a
            candidate's value (one PRM call per rolled-out candidate).
        k: candidate steps per kept partial solution and round.
        beam_width: partial solutions kept per round.
        max_steps: the most rounds (steps chosen).
        token_budget, prm_budget: limits, never exceeded.
        width_sigma: in-width pruning threshold in standard deviations (``None``
            or ``inf`` disables it).
        cluster_threshold: in-depth pruning: the fraction of roll-outs the largest
            answer cluster needs to stop (``> 1`` disables it).
        tau: softmax temperature of the advantages.
        select: ``"sample"`` or ``"top"``.
        close_cutoff: with a constraint, close a roll-out cut off by its token
            limit with an answer line instead of dropping it.
        joint_rollouts: draw each candidate together with its roll-out (``k``
            roll-outs per kept solution, sampled in lock-step; the candidate is a
            roll-out's first new step). The same distribution as sampling the step
            and then rolling out from it, at a fraction of the model cost, but
            in-width pruning then filters candidates without saving roll-outs.
        max_rollout_steps: a roll-out gets ``(max_rollout_steps - steps so far) *
            max_step_tokens`` tokens at most; one that has not ended by then is
            dropped.

    Returns:
        a :class:`search.reasoning.steps.ReasoningResult` with
        ``info["rounds"]``, ``info["rollouts"]``, ``info["pruned_width"]``.
        Guarantee: ``tokens <= token_budget`` and ``prm_calls <= prm_budget``.

    Reference: Xu et al., "φ-Decoding: Adaptive Foresight Sampling for Balanced
    Inference-Time Exploration and Exploitation" (ACL 2025).
    """
    k = count("k", k, 1)
    beam_width = count("beam_width", beam_width, 1)
    max_steps = count("max_steps", max_steps, 1)
    max_rollout_steps = count("max_rollout_steps", max_rollout_steps, 1)
    if select not in ("sample", "top"):
        raise ValueError(f"select must be 'sample' or 'top', got {select!r}")
    tau = finite("tau", tau, above=0)
    width_sigma = finite("width_sigma", width_sigma)
    cluster_threshold = finite("cluster_threshold", cluster_threshold)
    prm_weight = finite("prm_weight", prm_weight)
    opts = step_options("foresight_search", options, step_delimiter=step_delimiter,
                        max_step_tokens=max_step_tokens, temperature=temperature, seed=seed,
                        vocab=vocab, prm_prompt=prm_prompt, answer_fn=answer_fn)
    rng = np.random.default_rng(opts.seed)
    budget = Budget(token_budget, prm_budget)
    sampler = opts.sampler(lm, prompt, constraint, rng=rng, close_cutoff=close_cutoff)
    text = opts.prm_text(sampler)
    calls0 = sampler.lm.calls

    beams: list[tuple[Solution, float]] = [(Solution(), 0.0)]
    pool: list[tuple[Solution, float, str | None]] = []  # every complete solution seen: (sol, F, answer)
    rounds = rollouts_n = pruned = 0
    stop = "max_depth"
    consensus: tuple[Solution, float, str | None] | None = None

    for _ in range(max_steps):
        if not beams:
            stop = "done"
            break
        rounds += 1
        # 1. candidates (with joint roll-outs: the first step of each roll-out)
        cands: list[tuple[int, Solution, Solution | None]] = []
        for b, (sol, _) in enumerate(beams):
            if joint_rollouts:
                room = max(0, max_rollout_steps - len(sol.steps)) * opts.max_step_tokens
                for ro in sampler.rollouts(sol, k, budget, room):
                    if ro is not None and len(ro.steps) > len(sol.steps):
                        rollouts_n += 1
                        cands.append((b, Solution(ro.steps[: len(sol.steps) + 1]), ro))
            else:
                for step in sampler.sample([sol] * k, budget):
                    if step is not None:
                        cands.append((b, sol.extend(step), None))
        if not cands:
            stop = "done"  # nothing left to extend (it read "max_depth")
            break
        # 2. in-width pruning on step confidence
        if width_sigma is not None and math.isfinite(width_sigma) and len(cands) > 2:
            conf = np.array([c.steps[-1].logprob / max(1, c.steps[-1].n_tokens) for _, c, _ in cands])
            thr = conf.mean() - width_sigma * conf.std()
            keep = [i for i in range(len(cands)) if conf[i] >= thr] or [int(np.argmax(conf))]
            pruned += len(cands) - len(keep)
            cands = [cands[i] for i in keep]
        # 3. foresight roll-outs (already drawn when joint)
        rolled: list[tuple[int, Solution, Solution]] = []
        for b, c, ro in cands:
            if ro is None:
                ro = c if c.complete else sampler.rollout(c, budget, max_rollout_steps)
                if ro is None:
                    continue
                if ro is not c:
                    rollouts_n += 1
            rolled.append((b, c, ro))
            if ro.complete:
                pool.append((ro, _mean_lp(ro), opts.answer_fn(ro.text)))
        if not rolled:
            stop = "done"
            break
        # 4. advantage, agreement, optional PRM
        F = np.array([_mean_lp(ro) for _, _, ro in rolled])
        adv = F - np.array([beams[b][1] for b, _, _ in rolled])
        answers = [opts.answer_fn(ro.text) if ro.complete else None for _, _, ro in rolled]
        sizes = Counter(a for a in answers if a is not None)
        agree = np.array([sizes[a] if a is not None else 1 for a in answers], dtype=np.float64)
        value = _softmax(adv / tau) + agree / agree.sum()
        if prm is not None and prm_weight:
            for i, (_, c, _) in enumerate(rolled):
                if not budget.take_prm_call():
                    value = value[:i]
                    rolled = rolled[:i]
                    break
                value[i] += prm_weight * prm_score_last(prm, text, c.step_texts)
            if not rolled:
                break
            F, answers = F[: len(rolled)], answers[: len(rolled)]
            sizes = Counter(a for a in answers if a is not None)
        # 5. in-depth pruning
        if sizes and len(rolled) >= 2:
            top, cnt = sizes.most_common(1)[0]
            if cnt / len(rolled) >= cluster_threshold:
                best = max((i for i in range(len(rolled)) if answers[i] == top), key=lambda i: F[i])
                consensus = (rolled[best][2], float(F[best]), top)
                stop = "consensus"
                break
        if budget.exhausted:
            break
        # 6. selection
        m = min(beam_width, len(rolled))
        if select == "top":
            chosen = list(np.argsort(-value, kind="stable")[:m])
        else:
            chosen = list(rng.choice(len(rolled), size=m, replace=False, p=value / value.sum()))
        beams = []
        for i in chosen:
            _, c, _ = rolled[int(i)]
            if not c.complete:
                beams.append((c, float(F[int(i)])))
    if budget.exhausted:
        stop = budget.exhausted

    if consensus is not None:
        sol, f, ans = consensus
    elif pool:
        sizes = Counter(a for _, _, a in pool if a is not None)
        if sizes:
            top = sizes.most_common(1)[0][0]
            sol, f, ans = max((p for p in pool if p[2] == top), key=lambda p: p[1])
        else:
            sol, f, ans = max(pool, key=lambda p: p[1])
    elif beams and beams[0][0].steps:
        sol, f, ans = beams[0][0], beams[0][1], None
    else:
        sol, f, ans = None, None, None
    return ReasoningResult(
        solution=sol,
        answer=ans if sol is not None and sol.complete else None,
        complete=bool(sol is not None and sol.complete),
        budget_exhausted=budget.exhausted is not None,
        stop_reason=stop,
        tokens=budget.tokens,
        lm_calls=int(sampler.lm.calls - calls0),
        prm_calls=budget.prm_calls,
        score=f,
        candidates=pool,
        info={"rounds": rounds, "rollouts": rollouts_n, "pruned_width": pruned},
    )
