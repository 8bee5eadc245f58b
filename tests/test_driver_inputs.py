"""What the search drivers do with input they cannot use: a typed error
naming the argument, never a crash, a hang, a torch error or a result that
looks fine. Found by a review (each case failed before its fix)."""

from __future__ import annotations

import re
import warnings

import numpy as np
import pytest

import constrain
import search
from search.diffusion.driver import diffusion_generate
from search.testing.tiny_diffusion import tiny_json_model


@pytest.fixture(scope="module")
def tiny():
    return tiny_json_model()


# -- diffusion ----------------------------------------------------------------------------


@pytest.mark.parametrize("method", ["dingo", "naive", "none"])
def test_diffusion_with_no_completion_in_reach_ends_stuck(tiny, method):
    """dingo crashed (its fallback wrote into None) where the others ended."""
    c = constrain.compile_regex(r"[a-z]{300}", tiny.vocab)
    r = diffusion_generate(tiny, (), constraint=c, gen_length=24, method=method)
    assert r.valid is False and r.stuck_step == 1


@pytest.mark.parametrize("trailing_exact", [None, 4])
def test_infilling_with_no_completion_in_reach_ends(tiny, trailing_exact):
    """Infilling looped for ever: no token passed its check, no position was
    kept, and the block's loop never ended."""
    grammar = 'start: "{" A "}"\nA: /a{300}/'
    r = diffusion_generate(tiny, (), constraint=grammar, gen_length=24, block_length=8, steps=12,
                           trailing_exact=trailing_exact)
    assert r.valid is False and r.stuck_step is not None
    if trailing_exact is None:
        assert r.stuck_step == 0  # seen before the first step


@pytest.mark.parametrize("kwargs", [dict(gen_length=0), dict(gen_length=8, block_length=0),
                                    dict(gen_length=8, block_length=-8), dict(gen_length=8, steps=-3),
                                    dict(gen_length=8, temperature=-1.0),
                                    dict(gen_length=8, temperature=float("nan")),
                                    dict(gen_length=8, max_tries=0), dict(gen_length=2.5)])
def test_diffusion_arguments_are_checked(tiny, kwargs):
    with pytest.raises(ValueError):
        diffusion_generate(tiny, (), **kwargs)


# -- autoregressive drivers ---------------------------------------------------------------


@pytest.fixture(scope="module")
def foreign():
    """A constraint over another vocabulary than the model's."""
    v = constrain.Vocabulary.from_tokens([b"a", b"b", b"<eos>"], eos_token_ids=[2])
    return constrain.compile_regex("ab", v)


@pytest.mark.parametrize("call", [
    lambda lm, c: search.generate(lm, "Say ab.", constraint=c, max_new_tokens=4),
    lambda lm, c: search.beam_search(lm, "Say ab.", constraint=c, beam_size=2, max_new_tokens=4),
    lambda lm, c: search.best_first_beam_search(lm, "Say ab.", constraint=c, beam_size=2,
                                                max_new_tokens=4),
    lambda lm, c: search.lattice_search(lm, "Say ab.", constraint=c, budget=4),
    lambda lm, c: search.smc(lm, "Say ab.", constraint=c, n_particles=2, max_new_tokens=3),
])
def test_a_constraint_of_another_vocabulary_is_refused(lm, foreign, call):
    """Beam, best-first and lattice search returned SmolLM2's special tokens
    as a finished answer; smc raised a misleading token-id error."""
    with pytest.raises(constrain.VocabularyError, match="compile it with lm.vocab"):
        call(lm, foreign)


@pytest.mark.parametrize("prompt, error", [([10 ** 6], ValueError), ([-1], ValueError),
                                           ([1.5, 2.0], TypeError), (b"hi", TypeError),
                                           ([True], TypeError)])
def test_bad_prompt_ids_are_refused(lm, prompt, error):
    """Out-of-range ids were torch's IndexError, floats were truncated and
    bytes read as ids."""
    for call in (lambda: search.generate(lm, prompt, max_new_tokens=2),
                 lambda: search.beam_search(lm, prompt, beam_size=2, max_new_tokens=2)):
        with pytest.raises(error):
            call()


def test_prompt_ids_of_arrays_and_tensors(lm):
    import torch

    plain = search.generate(lm, [1, 2, 3], max_new_tokens=2).token_ids
    assert search.generate(lm, np.array([1, 2, 3]), max_new_tokens=2).token_ids == plain
    assert search.generate(lm, torch.tensor([1, 2, 3]), max_new_tokens=2).token_ids == plain


@pytest.mark.parametrize("constraint", ["abc", object()])
def test_a_constraint_that_is_no_constraint_is_refused(lm, constraint):
    with pytest.raises(TypeError, match="compiled constraint"):
        search.generate(lm, "hi", constraint=constraint, max_new_tokens=2)


def test_numbers_are_checked(lm):
    with pytest.raises(ValueError, match="temperature"):
        search.generate(lm, "hi", temperature=float("nan"), max_new_tokens=2)
    with pytest.raises(ValueError, match="max_new_tokens"):
        search.lattice_search(lm, "hi", budget=4, max_new_tokens=-1)
    with pytest.raises(ValueError, match="beam_size"):
        search.beam_search(lm, "hi", beam_size=True, max_new_tokens=2)
    with pytest.raises(ValueError, match="n_particles"):
        search.smc(lm, "hi", constraint=constrain.compile_regex("a", lm.vocab), n_particles=2.5,
                   max_new_tokens=2)
    # a numpy integer seed is one seed, as generate takes it
    rows = search.generate_batch(lm, ["hi", "yo"], seed=np.int64(3), max_new_tokens=2,
                                 temperature=0.5)
    assert len(rows) == 2
    # each named (they were raw TypeErrors, a Jinja error, torch's overflow, or
    # silently read: True as 1 token, seed 1.5 as 1)
    for kwargs, words in [(dict(max_new_tokens=None), "max_new_tokens"),
                          (dict(max_new_tokens="8"), "max_new_tokens"),
                          (dict(max_new_tokens=2.5), "max_new_tokens"),
                          (dict(max_new_tokens=True), "max_new_tokens"),
                          (dict(temperature="0.7"), "temperature"),
                          (dict(temperature=None), "temperature"),
                          (dict(seed="abc"), "seed"), (dict(seed=1.5), "seed"),
                          (dict(seed=2**64, temperature=0.5), "seed"),
                          (dict(stop=5), "stop"), (dict(system=5), "system")]:
        with pytest.raises(ValueError, match=words):
            search.generate(lm, "hi", **{"max_new_tokens": 2, **kwargs})


def test_search_arguments_are_named():
    """smc and the beams took a count of None, 2.5, inf or True, a NaN reward
    (every priority NaN: beams in any order) or a critic returning None, with
    raw TypeErrors, OverflowErrors or silently."""
    v = constrain.Vocabulary.from_tokens([b"a", b"b", b"</s>"], [2])
    c = constrain.compile_regex("[ab]+", v)
    lm = search.CallableLM(lambda p: np.log(np.array([0.5, 0.3, 0.2])), 3, 2)
    run = {"smc": lambda **k: search.smc(lm, [], constraint=c, **{
               "n_particles": 2, "max_new_tokens": 2, **k}),
           "beam": lambda **k: search.beam_search(lm, [], constraint=c, **{
               "beam_size": 2, "max_new_tokens": 2, **k}),
           "best": lambda **k: search.best_first_beam_search(lm, [], constraint=c, **{
               "beam_size": 2, "max_new_tokens": 2, **k})}
    for call, kwargs, name in [
            ("smc", dict(max_new_tokens=None), "max_new_tokens"),
            ("smc", dict(max_new_tokens=2.5), "max_new_tokens"),
            ("smc", dict(max_new_tokens=True), "max_new_tokens"),
            ("smc", dict(ess_threshold="0.5"), "ess_threshold"),
            ("smc", dict(critic=lambda t: None), "critic"),
            ("beam", dict(max_new_tokens=float("inf")), "max_new_tokens"),
            ("beam", dict(beam_size=float("nan")), "beam_size"),
            ("beam", dict(patience=None), "patience"),
            ("beam", dict(length_reward=float("nan")), "length_reward"),
            ("beam", dict(length_penalty=float("nan")), "length_penalty"),
            ("best", dict(batch_size=None), "batch_size"),
            ("best", dict(queue_factor="x"), "queue_factor")]:
        with pytest.raises(ValueError, match=name):
            run[call](**kwargs)
    with pytest.raises(ValueError, match="negative"):
        search.smc(lm, [-1], constraint=c, n_particles=2, max_new_tokens=2)
    # an int seed, as AWRS takes one
    assert search.awrs_step(np.log([0.5, 0.3, 0.2]), c, c.initial_state(), 0).token in (0, 1)


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_non_finite_log_probabilities_are_refused(bad):
    """A NaN (even on a token the constraint refuses) made smc report log_z
    -inf, no valid string at all, and awrs draw token 0 with a NaN weight;
    beam search dropped NaN and scored +inf."""
    v = constrain.Vocabulary.from_tokens([b"a", b"b", b"c", b"</s>"], [3])
    c = constrain.compile_regex("[ab]+", v)
    row = np.log(np.array([0.5, 0.3, 0.1, 0.1]))
    row[2] = bad
    lm = search.CallableLM(lambda p: row, 4, 3)
    with pytest.raises(ValueError, match="finite or -inf"):
        search.smc(lm, [], constraint=c, n_particles=4, max_new_tokens=3, seed=0)
    with pytest.raises(ValueError, match="finite or -inf"):
        search.beam_search(lm, [], constraint=c, beam_size=2, max_new_tokens=3)
    with pytest.raises(ValueError, match="finite or -inf"):
        search.awrs_step(row, c, c.initial_state(), np.random.default_rng(0))


def test_an_ess_threshold_of_one_resamples_every_step():
    v = constrain.Vocabulary.from_tokens([b"a", b"b", b"c", b"</s>"], [3])
    lm = search.CallableLM(lambda p: np.log(np.full(4, 0.25)), 4, 3)
    r = search.smc(lm, [], constraint=constrain.compile_regex("[abc]*", v), n_particles=8,
                   max_new_tokens=5, ess_threshold=1.0, seed=0)
    assert r.resampled_at == list(range(1, len(r.ess_history) + 1))


def test_model_inputs_are_checked(lm):
    """Ids reached torch (IndexError: a device assert on CUDA) or were read by
    int() (2.9 scored id 2); n=-1 failed after a counted forward pass."""
    for prefix in ([1, -1], [1, lm.vocab_size], [1, 2.9]):
        with pytest.raises((ValueError, TypeError)):
            lm.logprobs([prefix])
    calls = lm.calls
    with pytest.raises(ValueError, match="n must be"):
        lm.open_streams((1, 2), -1)
    assert lm.calls == calls
    with pytest.raises(ValueError, match="EOS"):
        search.TransformersLM(lm.model, lm.tokenizer, eos_token_ids="12")
    with pytest.raises(ValueError, match="outside"):
        search.TransformersLM(lm.model, lm.tokenizer, eos_token_ids=[-1])


def test_old_call_forms_say_how_many_arguments(lm, foreign):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(TypeError, match="at most 2 positional"):
            search.beam_search(lm, [1, 2], foreign, 2, 3)


def test_accepted_is_about_the_text_before_the_stop_string(lm):
    """The matcher's state was after the stop string: ``(yes|no)\\.`` with
    ``stop="."`` said the text "no" was accepted."""
    c = constrain.compile_regex(r"(yes|no)\.", lm.vocab)
    r = search.generate(lm, "Is the sky blue? Answer yes or no.", constraint=c,
                        max_new_tokens=5, stop=".")
    assert r.stop_reason == "stop" and re.fullmatch(r"(yes|no)\.", r.text) is None
    assert r.accepted is False
    c = constrain.compile_regex(r"(yes|no)(\. ok)?", lm.vocab)
    r = search.generate(lm, "Is the sky blue? Answer yes or no.", constraint=c,
                        max_new_tokens=5, stop=".")
    assert r.stop_reason == "stop" and r.accepted is True and c.matches(r.text)


# -- reasoning and lattice drivers ----------------------------------------------------------

_STEP_TOKENS = [b"So it is 2", b"#### ", b"2", b"\n", b"<eos>"]


@pytest.fixture(scope="module")
def step_lm():
    vocab = constrain.Vocabulary.from_tokens(_STEP_TOKENS, eos_token_ids=[4])
    row = np.log(np.array([0.6, 0.1, 0.1, 0.1, 0.1]))
    return search.CallableLM(lambda p: row, vocab_size=5, eos_token_id=4), vocab


@pytest.mark.parametrize("temperature", [float("nan"), float("inf")])
def test_reasoning_temperature_is_checked(step_lm, temperature):
    """NaN made every draw the last id (EOS here): an empty answer line was
    returned as complete, under a constraint it breaks."""
    lm, vocab = step_lm
    c = constrain.compile_regex(r"#### [0-9]+", vocab)
    prm = search.CallablePRM(lambda q, s: 0.5)
    with pytest.raises(ValueError, match="temperature"):
        search.best_of_n(lm, [0], prm, n=2, constraint=c, vocab=vocab, temperature=temperature)


def test_a_temperature_that_overflows_is_greedy(step_lm):
    """1e-310: logp / T overflowed to NaN, as above; now softmax's limit."""
    lm, vocab = step_lm
    c = constrain.compile_regex(r"#### [0-9]+", vocab)
    prm = search.CallablePRM(lambda q, s: 0.5)
    kw = dict(n=2, constraint=c, vocab=vocab, seed=0, max_step_tokens=4)
    tiny = search.best_of_n(lm, [0], prm, temperature=1e-310, **kw)
    greedy = search.best_of_n(lm, [0], prm, temperature=0, **kw)
    assert tiny.text == greedy.text and tiny.complete == greedy.complete


class _ListPRM:
    def __init__(self, scores):
        self.scores = scores

    def score(self, prompt, steps):
        return self.scores[:len(steps)]


@pytest.mark.parametrize("scores, how", [([0.5, float("nan")], "min"), ([2.0, 0.4], "prod"),
                                         ([1.7, 0.9], "min"), ([float("nan"), 0.9], "last")])
def test_every_prm_score_is_checked(scores, how):
    """min() passed a NaN that was not first, a product landed back in range."""
    from search.reasoning.steps import prm_score_last

    with pytest.raises(ValueError, match="outside"):
        prm_score_last(_ListPRM(scores), "q", ["a", "b"], how)


@pytest.mark.parametrize("call", [
    lambda lm, v, p: search.astar_search(lm, [0], p, k=2.5, vocab=v, token_budget=9, prm_budget=9),
    lambda lm, v, p: search.astar_search(lm, [0], p, k="2", vocab=v, token_budget=9, prm_budget=9),
    lambda lm, v, p: search.astar_search(lm, [0], p, vocab=v, token_budget=float("inf"), prm_budget=9),
    lambda lm, v, p: search.astar_search(lm, [0], p, vocab=v, aggregate="mean", token_budget=9,
                                         prm_budget=9),
    lambda lm, v, p: search.best_of_n(lm, [0], p, n=2.5, vocab=v),
    lambda lm, v, p: search.best_of_n(lm, [0], p, max_steps=0, vocab=v),
    lambda lm, v, p: search.best_of_n(lm, [0], p, aggregate="mean", vocab=v),
    lambda lm, v, p: search.foresight_search(lm, [0], p, beam_width=2.5, vocab=v),
    lambda lm, v, p: search.foresight_search(lm, [0], p, max_steps=-1, vocab=v),
    lambda lm, v, p: search.foresight_search(lm, [0], p, tau=float("nan"), vocab=v),
    lambda lm, v, p: search.foresight_search(lm, [0], p, cluster_threshold=float("nan"), vocab=v),
    lambda lm, v, p: search.lattice_search(lm, [0], budget=float("inf")),
    lambda lm, v, p: search.lattice_search(lm, [0], budget=None),
    lambda lm, v, p: search.lattice_search(lm, [0], budget=5, merge_ngram=True),
])
def test_reasoning_and_lattice_counts_are_checked(step_lm, call):
    """Each was a raw TypeError, OverflowError or a silent empty result; now a
    ValueError naming the argument, before any model call."""
    lm, vocab = step_lm
    calls = lm.calls
    with pytest.raises(ValueError, match=r"^(k|n|max_steps|beam_width|tau|cluster_threshold|"
                                         r"token_budget|budget|merge_ngram|unknown aggregate)"):
        call(lm, vocab, search.CallablePRM(lambda q, s: 0.5))
    assert lm.calls == calls


def test_lattice_queries_take_counts(step_lm):
    """k_best(2.5) was a slice TypeError, sample(2.5) returned []."""
    lattice = search.lattice_search(step_lm[0], [0], budget=5, max_new_tokens=2)
    for query in (lambda: lattice.k_best(2.5), lambda: lattice.sample(2.5), lambda: lattice.k_best(-1)):
        with pytest.raises(ValueError, match="^[kn] must be"):
            query()


def test_answers_keep_their_digits():
    """Read through a float: 12345678901234567890 became ...7168."""
    from search.reasoning.steps import extract_answer

    assert extract_answer("#### 12345678901234567890") == "12345678901234567890"
    assert extract_answer("#### 9007199254740993") == "9007199254740993"
    assert [extract_answer(t) for t in ("#### 36.0", "#### 1,234", "so 3.50", "#### -0")] == \
        ["36", "1234", "3.5", "0"]


@pytest.mark.parametrize("method", ["none", "dingo"])
def test_diffusion_with_every_token_impossible_ends(tiny, method):
    """A position whose every score is -inf (a temperature so small that
    logp / T overflows, or a model giving every token probability zero): argmax
    picked the mask id, the position stayed masked, and the block's loop ran for
    ever. Now the position is filled and the result says it is invalid."""
    grammar = constrain.compile_regex(r"[a-z]{4}", tiny.vocab)

    class Impossible:
        mask_token_id = tiny.mask_token_id
        vocab_size = tiny.vocab_size

        def logprobs(self, canvas):
            return np.full((1, np.asarray(canvas).shape[1], self.vocab_size), -np.inf)

    r = diffusion_generate(Impossible(), constraint=grammar, gen_length=4, steps=4, method=method)
    assert tiny.mask_token_id not in r.token_ids and r.valid is False
    # an overflowing temperature is the argmax, as the other drivers read it
    r = diffusion_generate(tiny, constraint=constrain.compile_regex(r"[a-z]{24}", tiny.vocab),
                           gen_length=24, method=method, temperature=1e-310)
    assert tiny.mask_token_id not in r.token_ids


def test_diffusion_model_and_vocabulary_must_agree(tiny):
    grammar = constrain.compile_regex(r"[a-z]{4}", tiny.vocab)

    class Wider:
        mask_token_id = tiny.mask_token_id
        vocab_size = tiny.vocab_size + 1

        def logprobs(self, canvas):
            return np.zeros((1, np.asarray(canvas).shape[1], self.vocab_size))

    with pytest.raises(ValueError, match="vocab_size"):
        diffusion_generate(Wider(), constraint=grammar, gen_length=4, method="dingo")
    with pytest.raises(ValueError, match="temperature"):
        diffusion_generate(tiny, constraint=grammar, gen_length=4, temperature="1")
