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
