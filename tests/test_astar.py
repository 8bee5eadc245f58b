"""``search.reasoning.astar.astar_search`` on toy step trees and tiny models.

* Optimality: on random step trees (an ``expand`` hook) with a consistent PRM
  heuristic, the returned solution minimises ``g + 1 - r`` (brute force), for many
  seeds and heuristic strengths.
* Budgets: tokens and PRM calls never exceed their budgets, on trees and on a tiny
  model; without a constraint, tokens equal the model calls exactly.
* On a tiny model, the arithmetic PRM steers A* to the correct step, and the answer
  constraint produces a valid answer line.
"""

from __future__ import annotations

import functools
import math

import numpy as np
import pytest

from constrain import Vocabulary, compile_regex
from search.reasoning.astar import astar_search
from search.lm.protocol import CallableLM
from search.reasoning.prm import ArithmeticCheckerPRM, CallablePRM
from search.reasoning.steps import extract_answer

# -- random step trees -----------------------------------------------------------------


class ToyTree:
    """A random tree of steps: a node is a tuple of child indices; children have
    random costs; a node is final with probability ``p_final`` (always at
    ``depth``); final nodes have a random terminal value ``tv = 1 - r`` in [0, 1]."""

    def __init__(self, seed: int, depth: int = 4, max_children: int = 3, p_final: float = 0.3):
        self.seed, self.depth, self.max_children, self.p_final = seed, depth, max_children, p_final

    def _rng(self, node):
        return np.random.default_rng([self.seed, len(node), *node])

    @functools.lru_cache(maxsize=None)
    def children(self, node: tuple[int, ...]) -> list[tuple[tuple[int, ...], float, bool]]:
        rng = self._rng(node)
        n = int(rng.integers(1, self.max_children + 1))
        out = []
        for i in range(n):
            child = node + (i,)
            final = len(child) >= self.depth or rng.random() < self.p_final
            out.append((child, float(rng.uniform(0.01, 0.4)), bool(final)))
        return out

    @functools.lru_cache(maxsize=None)
    def tv(self, node) -> float:
        return float(np.random.default_rng([self.seed, 99, len(node), *node]).random())

    @functools.lru_cache(maxsize=None)
    def is_final(self, node) -> bool:
        if not node:
            return False
        return next(f for c, _, f in self.children(node[:-1]) if c == node)

    @functools.lru_cache(maxsize=None)
    def h_star(self, node) -> float:
        """The exact cost-to-go: min over completions of path cost + terminal value."""
        if self.is_final(node):
            return self.tv(node)
        return min(c + self.h_star(ch) for ch, c, _ in self.children(node))

    def leaves(self, node=(), g=0.0):
        """Every complete solution as ``(node, J = g + tv)``."""
        for ch, c, f in self.children(node):
            if f:
                yield ch, g + c + self.tv(ch)
            else:
                yield from self.leaves(ch, g + c)

    @staticmethod
    def text(node) -> str:
        return f"s{len(node)}.{node[-1]}"

    @staticmethod
    def node_of(step_texts) -> tuple[int, ...]:
        return tuple(int(t.split(".")[1]) for t in step_texts)

    def expand(self, step_texts):
        node = self.node_of(step_texts)
        return [(self.text(ch), c, f) for ch, c, f in self.children(node)]

    def prm(self, beta: float) -> CallablePRM:
        """``h = 1 - r``: the terminal value on final nodes, ``beta * h*`` elsewhere,
        scaled into [0, 1]: consistent for any ``beta`` in [0, 1]."""
        scale = min(1.0, 1.0 / max(self.h_star(()), 1e-9))
        interior_max = max([self.h_star(n) for n in self._interior()] + [1e-9])
        b = beta * min(scale, 1.0 / interior_max)

        def fn(prompt, steps):
            node = self.node_of(steps)
            h = self.tv(node) if self.is_final(node) else b * self.h_star(node)
            return 1.0 - h

        return CallablePRM(fn)

    def _interior(self, node=()):
        for ch, _, f in self.children(node):
            if not f:
                yield ch
                yield from self._interior(ch)


@pytest.mark.parametrize("beta", [0.0, 0.5, 1.0])
def test_astar_is_optimal_on_random_trees(beta):
    for seed in range(60):
        tree = ToyTree(seed)
        best = min(j for _, j in tree.leaves())
        res = astar_search(None, "toy", tree.prm(beta), expand=tree.expand, token_budget=None,
                           prm_budget=None, max_steps=10)
        assert res.complete and not res.budget_exhausted and res.stop_reason == "solution"
        node = tree.node_of([s.text for s in res.solution.steps])
        g = sum(dict((ch, c) for ch, c, _ in tree.children(node[:i]))[node[: i + 1]] for i in range(len(node)))
        j = g + tree.tv(node)
        assert math.isclose(j, best, abs_tol=1e-9), (seed, j, best)
        assert math.isclose(res.info["f"], best, abs_tol=1e-9)


def test_a_better_heuristic_expands_no_more_states():
    """With h* (beta=1) A* expands at most as many states as uniform-cost search
    (beta=0) on every tree (both consistent; ties aside, A* with a dominating
    consistent heuristic expands a subset)."""
    more = 0
    for seed in range(40):
        tree = ToyTree(seed, depth=5)
        a = astar_search(None, "toy", tree.prm(1.0), expand=tree.expand, token_budget=None, prm_budget=None)
        u = astar_search(None, "toy", tree.prm(0.0), expand=tree.expand, token_budget=None, prm_budget=None)
        more += a.info["expansions"] > u.info["expansions"]
    assert more <= 2  # equal-f ties may reorder a pop or two


def test_budgets_never_exceeded_on_trees():
    rng = np.random.default_rng(0)
    for seed in range(80):
        tree = ToyTree(seed, depth=6, max_children=3, p_final=0.1)
        tb, pb = int(rng.integers(0, 15)), int(rng.integers(0, 15))
        prm = tree.prm(0.5)
        res = astar_search(None, "toy", prm, expand=tree.expand, token_budget=tb, prm_budget=pb)
        assert res.tokens <= tb and res.prm_calls <= pb
        assert prm.calls == res.prm_calls
        if not res.complete:
            assert res.budget_exhausted or res.stop_reason == "frontier_empty"


# -- a tiny model whose tokens are whole lines ---------------------------------------------

TOKENS = [b"1+1=2\n", b"1+1=3\n", b"So it is 2", b"#### ", b"2", b"3", b"\n", b"<eos>"]
EOS = len(TOKENS) - 1
T = {t: i for i, t in enumerate(TOKENS)}


def toy_vocab() -> Vocabulary:
    return Vocabulary.from_tokens(TOKENS, eos_token_ids=[EOS])


def toy_lm(p_wrong: float = 0.5) -> CallableLM:
    """Root: a right or a wrong line; then "So it is 2" and EOS; the answer tokens
    are likeliest as "#### " then "2"."""

    def row(prefix):
        p = np.full(len(TOKENS), 1e-3)
        gen = prefix[1:]  # the first id is the prompt
        if not gen:
            p[T[b"1+1=2\n"]], p[T[b"1+1=3\n"]] = 1 - p_wrong, p_wrong
        elif gen[-1] in (T[b"1+1=2\n"], T[b"1+1=3\n"]):
            p[T[b"So it is 2"]] = 1.0
        elif gen[-1] == T[b"So it is 2"]:
            p[EOS] = 1.0
        elif gen[-1] in (T[b"\n"], T[b"#### "]):
            p[T[b"#### "]], p[T[b"2"]], p[T[b"3"]] = 0.5, 0.3, 0.1
        else:
            p[EOS] = 1.0
        with np.errstate(divide="ignore"):
            return np.log(p / p.sum())

    return CallableLM(row, vocab_size=len(TOKENS), eos_token_id=EOS)


def test_prm_steers_astar_to_the_correct_step():
    for seed in range(10):
        lm = toy_lm()
        res = astar_search(lm, [0], ArithmeticCheckerPRM(), k=6, token_budget=200, prm_budget=50,
                           vocab=toy_vocab(), seed=seed, temperature=1.0)
        assert res.complete and res.stop_reason == "solution"
        assert res.solution.steps[0].text == "1+1=2\n"
        assert res.score == 1.0
        # the k samples share their first row: one model call fewer per extra sample
        assert res.lm_calls <= res.tokens


def test_answer_line_generated_under_the_constraint():
    vocab = toy_vocab()
    c = compile_regex(r"#### [0-9]+", vocab)
    res = astar_search(toy_lm(p_wrong=0.0), [0], ArithmeticCheckerPRM(), k=1, token_budget=200,
                       prm_budget=50, vocab=vocab, constraint=c, seed=0, temperature=0.0)
    assert res.complete
    last = res.solution.steps[-1]
    assert last.text == "So it is 2\n#### 2"
    assert res.answer == "2" == extract_answer(res.text)
    # the answer line (after the delimiter) is a complete string of the constraint
    i = last.token_ids.index(T[b"\n"])
    assert c.accepts_tokens(last.token_ids[i + 1:])
    # inserted delimiter tokens count as tokens but cost no model call
    assert res.tokens == res.lm_calls + 1


def test_budgets_never_exceeded_on_a_tiny_model():
    vocab = toy_vocab()
    c = compile_regex(r"#### [0-9]+", vocab)
    rng = np.random.default_rng(1)
    for i in range(60):
        tb, pb = int(rng.integers(0, 25)), int(rng.integers(0, 8))
        lm = toy_lm(0.7)
        prm = ArithmeticCheckerPRM()
        res = astar_search(lm, [0], prm, k=int(rng.integers(1, 5)), token_budget=tb, prm_budget=pb,
                           vocab=vocab, constraint=c if i % 2 else None, seed=i, temperature=1.0)
        assert res.tokens <= tb and res.prm_calls <= pb and prm.calls == res.prm_calls
        assert res.lm_calls == lm.calls <= res.tokens
        assert res.complete or res.budget_exhausted


def test_smoke_default_model(default_lm):
    """The real model, a few dozen tokens: budgets hold, counts are consistent."""
    calls0 = default_lm.calls
    res = astar_search(default_lm, "What is 2 + 3? Answer briefly.", ArithmeticCheckerPRM(), k=2,
                       token_budget=12, prm_budget=4, max_step_tokens=6, seed=0)
    assert res.tokens <= 12 and res.prm_calls <= 4
    assert res.lm_calls == default_lm.calls - calls0 <= res.tokens
    assert res.solution is not None


def test_the_answer_line_ends_at_the_end_of_its_line():
    """Refused the newline it wants after ``#### 2``, the model would append digits; an
    answer line that the constraint accepts ends at a token holding the delimiter."""
    from search.reasoning.steps import Budget, LMStepSampler, Solution

    def row(prefix):
        gen = prefix[1:]
        p = np.full(len(TOKENS), 1e-6)
        if not gen:
            p[T[b"So it is 2"]] = 1.0
        elif gen[-1] == T[b"So it is 2"]:
            p[EOS] = 1.0
        elif gen[-1] in (T[b"\n"],):
            p[T[b"#### "]] = 1.0
        elif gen[-1] == T[b"#### "]:
            p[T[b"2"]] = 1.0
        else:  # after a digit: a newline, hardly ever EOS or another digit
            p[T[b"\n"]], p[T[b"3"]], p[EOS] = 0.9, 0.09, 0.01
        return np.log(p / p.sum())

    vocab = toy_vocab()
    c = compile_regex(r"#### [0-9]+", vocab)
    sampler = LMStepSampler(CallableLM(row, len(TOKENS), EOS), [0], vocab=vocab, constraint=c,
                            temperature=0.0)
    step = sampler.sample([Solution()], Budget())[0]
    assert step.final and step.text == "So it is 2\n#### 2"


def test_a_budget_cut_search_is_closed_with_an_answer_line():
    """A model that never ends: A* keeps back the tokens of one answer line and closes
    its best partial solution with it when the budget runs out."""
    vocab = toy_vocab()
    c = compile_regex(r"#### [0-9]+", vocab)

    def row(prefix):
        p = np.full(len(TOKENS), 1e-6)
        if prefix[-1] == T[b"#### "]:
            p[T[b"2"]] = 1.0
        elif prefix[-1] == T[b"2"]:
            p[T[b"\n"]] = 1.0
        else:
            p[T[b"1+1=2\n"]] = 1.0
        return np.log(p / p.sum())

    for tb in (6, 8, 13):
        res = astar_search(CallableLM(row, len(TOKENS), EOS), [0], ArithmeticCheckerPRM(), k=1, token_budget=tb,
                           prm_budget=None, vocab=vocab, constraint=c, seed=0, max_step_tokens=3)
        assert res.tokens <= tb and res.budget_exhausted
        assert res.complete and res.info["closed"] and res.answer == "2"
        assert res.text.endswith("1+1=2\n#### 2")
    # too small a budget to keep an answer line back: nothing is closed
    res = astar_search(CallableLM(row, len(TOKENS), EOS), [0], ArithmeticCheckerPRM(), k=1, token_budget=5,
                       prm_budget=None, vocab=vocab, constraint=c, seed=0, max_step_tokens=3)
    assert res.tokens <= 5 and not res.complete and not res.info["closed"]


@pytest.mark.parametrize("script", [
    [0, 0, 0, 1, 2, 0, 4],  # a step cut at max_step_tokens, then "# 1" and EOS
    [0, 0, 0, 4],           # a step cut at max_step_tokens, then EOS at once
])
def test_the_answer_line_is_a_line_of_its_own(script):
    """A final step after a step cut at ``max_step_tokens`` (no delimiter) was
    glued onto it: ``111# 1# 1`` counted as complete. The answer line now
    starts a line, and the last line of a complete solution matches."""
    v = Vocabulary.from_tokens([b"1", b"#", b" ", b"\n", b"<eos>"], eos_token_ids=[4])

    def f(p):
        r = np.full(5, -30.0)
        r[script[min(len(p) - 1, len(script) - 1)]] = 0
        return r - np.logaddexp.reduce(r)

    answer = compile_regex(r"# [0-9]+", v)
    r = astar_search(CallableLM(f, 5, 4), [0], CallablePRM(lambda p, s: .5), k=1, token_budget=50,
                     prm_budget=10, constraint=answer, vocab=v, max_step_tokens=3, seed=0)
    assert r.complete
    assert answer.matches(r.text.split("\n")[-1]), r.text
