"""``search.reasoning.foresight.foresight_search`` (φ-decoding) and ``search.reasoning.rerank.best_of_n``
on tiny models whose tokens are whole lines.

* best-of-N: the argmax choice has the top PRM score, the weighted vote the answer of
  largest total score (checked on the samples, and on a designed case where they differ).
* foresight: in-depth pruning stops at a dominant answer cluster; in-width pruning drops
  low-confidence candidates; the final answer is the largest cluster of what was seen.
* Both: tokens and PRM calls never exceed their budgets.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from constrain import Vocabulary, compile_regex
from search.reasoning.rerank import _choose, best_of_n
from search.reasoning.foresight import foresight_search
from search.lm.protocol import CallableLM
from search.reasoning.prm import ArithmeticCheckerPRM, CallablePRM
from search.reasoning.steps import Budget, LMStepSampler, Solution, Step

TOKENS = [b"Q", b"2+2=4\n", b"2+2=5\n", b"#### 4", b"#### 5", b"hmm\n", b"\n", b"<eos>"]
EOS = len(TOKENS) - 1
T = {t: i for i, t in enumerate(TOKENS)}
VOCAB = Vocabulary.from_tokens(TOKENS, eos_token_ids=[EOS])


def lm_of(table) -> CallableLM:
    """``table(generated ids) -> {token: prob}`` (unlisted tokens get 1e-9)."""

    def row(prefix):
        p = np.full(len(TOKENS), 1e-9)
        for tok, v in table(tuple(prefix[1:])).items():
            p[T[tok]] = v
        with np.errstate(divide="ignore"):
            return np.log(p / p.sum())

    return CallableLM(row, vocab_size=len(TOKENS), eos_token_id=EOS)


def two_paths(p_right=0.5, faithful=0.9):
    """A right or a wrong line, then (mostly) the answer that line implies, then EOS."""

    def table(gen):
        if not gen:
            return {b"2+2=4\n": p_right, b"2+2=5\n": 1 - p_right}
        if len(gen) == 1:
            right = gen[0] == T[b"2+2=4\n"]
            return {b"#### 4": faithful if right else 1 - faithful, b"#### 5": 1 - faithful if right else faithful}
        return {b"<eos>": 1.0}

    return lm_of(table)


# -- best-of-N --------------------------------------------------------------------------


def test_best_of_n_choices_match_their_definitions():
    for seed in range(20):
        res = best_of_n(two_paths(), [0], ArithmeticCheckerPRM(), n=6, vocab=VOCAB, seed=seed, temperature=1.0)
        cands = res.candidates
        assert len(cands) == 6 == res.prm_calls and all(s.complete for s, _, _ in cands)
        assert res.info["argmax"][1] == max(r for _, r, _ in cands)
        totals = Counter()
        for _, r, a in cands:
            totals[a] += r
        win = res.info["weighted_majority"][2]
        assert totals[win] == max(totals.values())
        assert res.answer == win  # the default method
        assert res.lm_calls <= res.tokens


def test_argmax_and_weighted_vote_differ_on_a_designed_case():
    def sol(ans):
        return Solution((Step(f"#### {ans}", final=True),))

    cands = [(sol(3), 0.3, "3"), (sol(3), 0.3, "3"), (sol(3), 0.3, "3"), (sol(2), 0.8, "2")]
    res = _choose(cands, "argmax", Budget(), 0)
    assert res.answer == "2" and res.info["weighted_majority"][2] == "3"
    assert _choose(cands, "weighted_majority", Budget(), 0).answer == "3"


def test_best_of_n_with_the_answer_constraint():
    """A model that never writes the answer line: it is generated under the constraint."""

    def table(gen):
        if not gen:
            return {b"2+2=4\n": 1.0}
        if gen[-1] == T[b"2+2=4\n"] and len(gen) == 1:
            return {b"hmm\n": 1.0}
        if gen[-1] == T[b"hmm\n"]:
            return {b"<eos>": 1.0}
        return {b"#### 4": 0.7, b"#### 5": 0.3}

    c = compile_regex(r"#### [0-9]", VOCAB)
    res = best_of_n(lm_of(table), [0], ArithmeticCheckerPRM(), n=3, vocab=VOCAB, constraint=c, seed=0,
                    temperature=0.0)
    assert res.complete and res.answer == "4"
    assert res.solution.steps[-1].text == "hmm\n#### 4"


# -- foresight --------------------------------------------------------------------------


@pytest.mark.parametrize("joint", [False, True])
def test_depth_pruning_stops_on_consensus(joint):
    lm = two_paths(faithful=1.0, p_right=1.0)
    res = foresight_search(lm, [0], k=4, beam_width=2, vocab=VOCAB, seed=0, cluster_threshold=0.7,
                           temperature=1.0, joint_rollouts=joint)
    assert res.stop_reason == "consensus" and res.info["rounds"] == 1
    assert res.complete and res.answer == "4"
    assert res.prm_calls == 0


@pytest.mark.parametrize("joint", [False, True])
def test_width_pruning_drops_low_confidence_candidates(joint):
    pruned_any = 0
    for seed in range(30):
        res = foresight_search(two_paths(p_right=0.9, faithful=1.0), [0], k=8, beam_width=1, max_steps=1,
                               vocab=VOCAB, seed=seed, cluster_threshold=2.0, temperature=1.0,
                               joint_rollouts=joint)
        if res.info["pruned_width"]:
            pruned_any += 1
            # only the confident first step (2+2=4, p=0.9) survives, so only its answer is seen
            assert res.solution.steps[0].text == "2+2=4\n"
            assert {a for _, _, a in res.candidates} == {"4"}
    assert pruned_any >= 10


def test_answer_is_the_largest_cluster_seen():
    for seed in range(20):
        res = foresight_search(two_paths(faithful=0.6), [0], ArithmeticCheckerPRM(), k=3, beam_width=2,
                               max_steps=2, vocab=VOCAB, seed=seed, cluster_threshold=2.0, temperature=1.0)
        sizes = Counter(a for _, _, a in res.candidates if a is not None)
        assert sizes[res.answer] == max(sizes.values())
        # the PRM scored every rolled-out candidate once
        assert res.prm_calls >= 1


def test_budgets_never_exceeded():
    c = compile_regex(r"#### [0-9]", VOCAB)
    rng = np.random.default_rng(0)
    for i in range(60):
        tb, pb = int(rng.integers(0, 30)), int(rng.integers(0, 6))
        prm = ArithmeticCheckerPRM()
        kw = dict(vocab=VOCAB, seed=i, temperature=1.0, constraint=c if i % 3 == 0 else None)
        lm = two_paths(faithful=0.6)
        r1 = foresight_search(lm, [0], prm, k=int(rng.integers(1, 5)), beam_width=2, token_budget=tb,
                              prm_budget=pb, joint_rollouts=bool(i % 2), **kw)
        assert r1.tokens <= tb and r1.prm_calls <= pb and prm.calls == r1.prm_calls
        assert r1.lm_calls == lm.calls
        prm2 = CallablePRM(lambda p, s: 0.5)
        r2 = best_of_n(two_paths(), [0], prm2, n=int(rng.integers(1, 6)), token_budget=tb, prm_budget=pb, **kw)
        assert r2.tokens <= tb and r2.prm_calls <= pb and prm2.calls == r2.prm_calls


def test_a_cut_off_sample_is_closed_with_an_answer_line():
    """A model that never ends: with a constraint, best-of-N closes each sample at its
    token limit with an answer line; without ``close_cutoff`` the samples are dropped."""

    def table(gen):
        if len(gen) >= 2 and gen[-1] in (T[b"#### 4"], T[b"#### 5"]):
            return {b"<eos>": 1.0}
        return {b"hmm\n": 0.98, b"#### 4": 0.01, b"#### 5": 0.01}

    c = compile_regex(r"#### [0-9]", VOCAB)
    kw = dict(n=2, vocab=VOCAB, constraint=c, seed=0, temperature=0.0, max_steps=3, max_step_tokens=1)
    res = best_of_n(lm_of(table), [0], ArithmeticCheckerPRM(), **kw)
    assert res.complete and res.answer == "4"
    assert res.solution.text == "hmm\nhmm\nhmm\n#### 4"
    assert best_of_n(lm_of(table), [0], ArithmeticCheckerPRM(), close_cutoff=False, **kw).solution is None


def test_blank_lines_join_the_next_step():
    def table(gen):
        return {b"hmm\n": 1.0} if len(gen) < 1 else ({b"\n": 1.0} if len(gen) < 3 else {b"2+2=4\n": 1.0})

    sampler = LMStepSampler(lm_of(table), [0], vocab=VOCAB, temperature=0.0)
    budget = Budget()
    first = sampler.sample([Solution()], budget)[0]
    second = sampler.sample([Solution((first,))], budget)[0]
    assert (first.text, second.text) == ("hmm\n", "\n\n2+2=4\n") and budget.tokens == 4


# -- one options object for the step settings -------------------------------------------


def test_step_options_equal_the_keywords_in_every_driver():
    """``options=StepOptions(...)`` gives each driver what the same keywords
    give (same solutions, counts and answers); a setting given both ways is a
    TypeError naming it."""
    from search import StepOptions, astar_search

    def answer(text):
        return "A" + text[-1]

    settings = dict(temperature=1.0, seed=3, vocab=VOCAB, max_step_tokens=5, prm_prompt="Q?",
                    answer_fn=answer)
    options = StepOptions(**settings)
    prm = ArithmeticCheckerPRM()
    drivers = {
        "best_of_n": lambda **kw: best_of_n(two_paths(), [0], prm, n=4, **kw),
        "foresight_search": lambda **kw: foresight_search(two_paths(), [0], prm, k=3, **kw),
        "astar_search": lambda **kw: astar_search(two_paths(), [0], prm, k=2, token_budget=40,
                                                  prm_budget=None, **kw),
    }
    for name, run in drivers.items():
        a, b = run(**settings), run(options=options)
        assert (a.solution, a.tokens, a.lm_calls, a.prm_calls, a.answer) == \
            (b.solution, b.tokens, b.lm_calls, b.prm_calls, b.answer), name
        assert a.answer in ("A4", "A5"), name  # answer_fn was applied
        with pytest.raises(TypeError, match=rf"{name}: seed, temperature given both"):
            run(options=options, seed=3, temperature=1.0)
        with pytest.raises(TypeError, match="StepOptions"):
            run(options=settings)
    assert options.replace(seed=4).seed == 4 and options.seed == 3
    with pytest.raises(AttributeError):
        options.seed = 5  # frozen
