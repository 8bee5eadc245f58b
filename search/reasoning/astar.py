"""A* search over reasoning steps, guided by a process reward model.

States are partial solutions (tuples of steps, :mod:`search.reasoning.steps`).
The priority of a state ``s`` is

    f(s) = g(s) + h(s),      h(s) = 1 - r(s),

where ``r(s)`` in [0, 1] is the PRM's score of ``s`` (aggregated by
``aggregate``, default the score of the whole partial solution) and ``g`` is the
cost of the path so far:

    g(s) = sum over its steps of  step_cost + logprob_weight * (-log p(step))

(for steps from an ``expand`` hook, the hook's own step cost). With the defaults
(``step_cost=0.1``, ``logprob_weight=0``) ``g`` is 0.1 per step: a mild preference
for short solutions, so that the PRM decides and a long detour must earn its
length. The root (no steps) has ``h = 0`` and is not scored. Note that any
``g`` that grows with depth turns A* into breadth-first search wherever the PRM
is flat (a rule-based PRM that only checks arithmetic is flat on prose steps);
``step_cost=0`` then gives greedy best-first search on the PRM score, ties going
deeper.

The search pops the state of lowest ``f`` (ties: more steps, then first
generated). A popped *complete* solution is returned. Otherwise ``k`` next steps
are sampled (from the model, or from the hook), each new state is scored by the
PRM and pushed. A complete solution is only returned when popped, so what is
returned minimises the objective ``J(x) = g(x) + 1 - r(x)`` over the complete
solutions of the tree that the search samples, provided ``h`` is *consistent*
(``h(parent) <= cost(step) + h(child)`` on every edge): this is A*'s optimality
with the terminal edge ``x -> goal`` of cost ``h(x)`` (Hart, Nilsson, Raphael,
1968). The tests check it against brute force on random step trees.

Budgets: before every sampled token and before every PRM call the budget is
checked; the search stops instead of exceeding it and returns the best it has
found, marked ``budget_exhausted`` (the complete solution of lowest ``J`` if any
was generated, else the partial state of lowest ``f``, deeper first; ``complete``
tells which).

Reference: A* decoding with a PRM as heuristic (Chatziveroglou, "A*-Decoding:
Token-Efficient Inference Scaling", 2025); Hart, Nilsson & Raphael (1968).
"""

from __future__ import annotations

import heapq
import itertools
from dataclasses import dataclass
from typing import Callable

from search.arguments import count
from search.reasoning.steps import (UNSET, Budget, HookStepSampler, LMStepSampler, ReasoningResult, Solution,
                                    Step, StepOptions, aggregate_scores, prm_score_last, step_options)

__all__ = ["astar_search"]


@dataclass
class _Node:
    sol: Solution
    g: float
    h: float
    r: float
    order: int

    @property
    def f(self) -> float:
        return self.g + self.h

    def key(self):
        # ties go to the deeper state: with a flat PRM this finishes a solution
        # instead of widening every level (A*'s optimality holds for any tie rule)
        return (self.f, -len(self.sol.steps), self.order)


def astar_search(lm, prompt, prm, *, k: int = 4, token_budget: int | None, prm_budget: int | None,
                 constraint=None, step_cost: float = 0.1, logprob_weight: float = 0.0,
                 aggregate: str = "last", max_steps: int = 16, expand: Callable | None = None,
                 dedupe: bool = True, close_on_budget: bool = True,
                 options: StepOptions | None = None, step_delimiter: str = UNSET,
                 max_step_tokens: int = UNSET, temperature: float = UNSET, seed=UNSET, vocab=UNSET,
                 prm_prompt: str | None = UNSET,
                 answer_fn: Callable[[str], str | None] = UNSET) -> ReasoningResult:
    """A* over reasoning steps with priority ``f = g + (1 - PRM score)``.

    Args:
        lm: a model of the LM protocol or a :class:`search.TransformersLM`; may be
            ``None`` when ``expand`` is given.
        prompt: a string (turned into ids by the model's chat template) or token ids.
        prm: a PRM (:mod:`search.reasoning.prm`): ``prm.score(prompt, steps)``.
        k: next steps sampled per expansion.
        token_budget: the most tokens to spend (``None``: no limit).
        prm_budget: the most PRM calls (``None``: no limit).
        constraint: the answer-line constraint (see :mod:`search.reasoning.steps`),
            compiled against the model's vocabulary.
        step_cost, logprob_weight: define ``g`` (module docstring).
        aggregate: how per-prefix PRM scores become ``r``: ``"last"``, ``"min"``,
            ``"prod"``.
        max_steps: states with this many steps are not expanded.
        expand: a hook ``expand(step_texts) -> [(text, cost, final), ...]``
            replacing the model (toy step trees); each child costs one token.
        dedupe: skip (no PRM call) a sampled step whose text equals a sibling's.
        close_on_budget: with a constraint and a token budget, keep back enough
            tokens for one answer line (``max_step_tokens + 1`` plus the
            delimiter); if the search ends without a complete solution, the best
            partial one is closed with an answer line under the constraint
            (``info["closed"]``; not scored again by the PRM).
        options: the step settings (a :class:`search.reasoning.steps.StepOptions`),
            or give them one by one as the keyword arguments below; each
            keyword left out takes its :class:`StepOptions` default, and one
            given both ways raises ``TypeError``.
        step_delimiter, max_step_tokens, temperature, seed, vocab, prm_prompt,
        answer_fn: the fields of :class:`~search.reasoning.steps.StepOptions`
            (the text that ends a step, default ``"\\n"``; the most tokens of
            one step and of the answer line, 64; sampling temperature, 0.7; the
            sampler's seed; the vocabulary for decoding, default ``lm.vocab``;
            the problem text the PRM sees, default the prompt; the function
            that reads the final answer, default ``extract_answer``).

    Returns:
        a :class:`search.reasoning.steps.ReasoningResult`; ``complete`` and
        ``budget_exhausted`` say whether a complete solution was popped or a budget
        cut the search. Guarantees: ``tokens <= token_budget``, ``prm_calls <=
        prm_budget``; with a consistent heuristic, a returned popped solution
        minimises ``g + 1 - r`` over the complete solutions of the sampled tree.

    References: Hart, Nilsson & Raphael, "A Formal Basis for the Heuristic
    Determination of Minimum Cost Paths" (1968); Chatziveroglou, "A*-Decoding:
    Token-Efficient Inference Scaling" (2025).
    """
    k = count("k", k, 1)
    max_steps = count("max_steps", max_steps, 1)
    aggregate_scores((), aggregate)  # an unknown one, before any model call
    opts = step_options("astar_search", options, step_delimiter=step_delimiter,
                        max_step_tokens=max_step_tokens, temperature=temperature, seed=seed,
                        vocab=vocab, prm_prompt=prm_prompt, answer_fn=answer_fn)
    budget = Budget(token_budget, prm_budget)
    if expand is not None:
        sampler = HookStepSampler(expand)
        text = (opts.prm_prompt if opts.prm_prompt is not None
                else (prompt if isinstance(prompt, str) else ""))
        calls0 = getattr(lm, "calls", 0) if lm is not None else 0
    else:
        sampler = opts.sampler(lm, prompt, constraint)
        text = opts.prm_text(sampler)
        lm = sampler.lm
        calls0 = lm.calls
    reserve = 0
    if (close_on_budget and constraint is not None and token_budget is not None
            and isinstance(sampler, LMStepSampler)):
        reserve = opts.max_step_tokens + 1 + len(sampler.delim_ids or ())
        if token_budget > reserve:
            budget.max_tokens = token_budget - reserve
        else:
            reserve = 0

    counter = itertools.count()
    root = _Node(Solution(), 0.0, 0.0, 1.0, next(counter))
    frontier = [(root.key(), root)]
    generated: list[_Node] = []
    expansions = 0
    stop = "frontier_empty"
    answer_node: _Node | None = None

    def step_g(step: Step) -> float:
        if step.cost is not None:
            return float(step.cost)
        return step_cost + logprob_weight * (-step.logprob)

    while frontier:
        _, node = heapq.heappop(frontier)
        if node.sol.complete:
            answer_node, stop = node, "solution"
            break
        if len(node.sol.steps) >= max_steps:
            continue
        if budget.tokens_left() <= 0:
            budget.exhausted = budget.exhausted or "token_budget"
            break
        expansions += 1
        if isinstance(sampler, HookStepSampler):
            steps = sampler.children(node.sol, budget)
        else:
            steps = [s for s in sampler.sample([node.sol] * k, budget) if s is not None]
        seen: set[str] = set()
        for step in steps:
            if dedupe and step.text in seen:
                continue
            seen.add(step.text)
            child = node.sol.extend(step)
            if not budget.take_prm_call():
                break
            r = prm_score_last(prm, text, child.step_texts, aggregate)
            cn = _Node(child, node.g + step_g(step), 1.0 - r, r, next(counter))
            generated.append(cn)
            heapq.heappush(frontier, (cn.key(), cn))
        if budget.exhausted:
            break
    if budget.exhausted:
        stop = budget.exhausted

    budget.max_tokens = token_budget if token_budget is None else int(token_budget)
    closed = False
    if answer_node is None and generated:
        done = [n for n in generated if n.sol.complete]
        pool = done or generated
        answer_node = min(pool, key=lambda n: (n.f, -len(n.sol.steps), n.order))
    sol = answer_node.sol if answer_node is not None else None
    if reserve and sol is not None and not sol.complete:
        # the reserved tokens close the best partial solution with an answer line
        last = sampler.answer_line(Solution(sol.steps[:-1]), sol.steps[-1], budget, 0.0)
        if last is not None:
            sol, closed = Solution(sol.steps[:-1] + (last,)), True
    calls = (lm.calls - calls0) if lm is not None and hasattr(lm, "calls") else 0
    return ReasoningResult(
        solution=sol,
        answer=opts.answer_fn(sol.text) if sol is not None and sol.complete else None,
        complete=bool(sol is not None and sol.complete),
        budget_exhausted=budget.exhausted is not None,
        stop_reason=stop,
        tokens=budget.tokens,
        lm_calls=int(calls),
        prm_calls=budget.prm_calls,
        score=answer_node.r if answer_node is not None else None,
        info={"expansions": expansions, "generated": len(generated), "closed": closed,
              "f": answer_node.f if answer_node is not None else None,
              "g": answer_node.g if answer_node is not None else None},
    )
