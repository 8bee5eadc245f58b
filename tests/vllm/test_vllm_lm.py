"""vLLM as the model of the search drivers (``search.lm.vllm.VLLMLM``), on a
real engine: its rows equal ``TransformersLM``'s for the same model, drivers
give the same answers on both, the prefix cache is used, constrained
generation runs inside the engine on the Trellis backend.

One engine for the module (whole-distribution rows: ``max_logprobs=-1``).
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from cases import PERSON_SCHEMA
from vllm_testing import ENGINE_KWARGS, engine_environment, model_dir

PROMPTS = ["What is the capital of France?", "Name a primary color.", "What is 7 times 8?"]


@pytest.fixture(scope="module")
def lms():
    engine_environment()
    import constrain.engines.vllm as trellis_vllm

    trellis_vllm.register()
    import search
    from search.lm.vllm import VLLMLM

    kwargs = {k: v for k, v in ENGINE_KWARGS.items() if k != "seed"}
    lm = VLLMLM.from_model(str(model_dir()), structured_outputs_config={"backend": "trellis"}, **kwargs)
    yield lm, search.load_default_model()
    lm.close()


def test_rows_equal_the_transformers_rows(lms):
    lm, hf = lms
    assert lm.vocab_size == hf.vocab_size and lm.eos_token_ids == tuple(hf.eos_token_ids)
    ids = tuple(lm.prompt_ids(PROMPTS[0]))
    assert list(ids) == hf.prompt_ids(PROMPTS[0])
    prefixes = [ids, ids + (504,), ids + (504, 3575)]
    calls = lm.calls
    got = lm.logprobs(prefixes)
    assert lm.calls == calls + 3 and got.shape == (3, lm.vocab_size) and np.isfinite(got).all()
    np.testing.assert_allclose(np.exp(got.astype(np.float64)).sum(axis=1), 1.0, rtol=1e-4)
    np.testing.assert_allclose(got, hf.logprobs(prefixes), atol=5e-4)
    # the prompt's blocks are cached: its children compute far less than their length
    tok = lm.tokens_computed
    lm.logprobs([ids + (t,) for t in range(100, 110)])
    assert lm.tokens_computed - tok < 10 * len(ids) // 2
    with pytest.raises(ValueError):
        lm.logprobs([()])
    assert lm.logprobs([]).shape == (0, lm.vocab_size)


def test_top_logprobs_rows_keep_the_k_best(lms):
    from search.lm.vllm import VLLMLM

    lm, _ = lms
    top = VLLMLM(lm.llm, top_logprobs=5)
    ids = tuple(lm.prompt_ids(PROMPTS[1]))
    row, whole = top.logprobs([ids])[0], lm.logprobs([ids])[0]
    finite = np.flatnonzero(np.isfinite(row))
    assert len(finite) == 5
    assert set(finite) == set(np.argsort(-whole)[:5])
    np.testing.assert_allclose(row[finite], whole[finite], atol=1e-5)
    with pytest.raises(ValueError):
        VLLMLM(lm.llm, top_logprobs=0)


@pytest.mark.parametrize("prompt", PROMPTS)
def test_drivers_give_the_transformers_answers(lms, prompt):
    import search
    from search.lm.vllm import VLLMLM

    lm, hf = lms
    ids = hf.prompt_ids(prompt)
    greedy = search.generate(hf, ids, max_new_tokens=12).token_ids
    [[(tokens, _)]] = lm.generate([ids], max_new_tokens=12)
    assert list(tokens[: len(greedy)]) == list(greedy)
    want = search.beam_search(hf, ids, beam_size=3, max_new_tokens=10)
    for m in (lm, VLLMLM(lm.llm, top_logprobs=3)):  # a beam of 3 needs only each row's 3 best
        got = search.beam_search(m, ids, beam_size=3, max_new_tokens=10)
        assert [h.tokens for h in got] == [h.tokens for h in want]
        assert abs(got[0].score - want[0].score) < 1e-3
    got = search.best_first_beam_search(lm, ids, beam_size=3, max_new_tokens=10)
    assert got[0].tokens == want[0].tokens


def test_constrained_drivers_and_generation(lms):
    import jsonschema

    import constrain
    import search

    lm, hf = lms
    digits = constrain.compile_regex(r"[0-9]{1,3}", lm.vocab)
    ids = hf.prompt_ids("A number between 1 and 999?")
    got = search.beam_search(lm, ids, beam_size=3, max_new_tokens=6, constraint=digits)
    want = search.beam_search(hf, ids, beam_size=3, max_new_tokens=6, constraint=digits)
    assert [h.tokens for h in got] == [h.tokens for h in want]
    # whole sequences inside the engine, its structured outputs on the Trellis backend
    outs = lm.generate([hf.prompt_ids(f"Describe person {i} as JSON.") for i in range(4)],
                       constraint={"json": PERSON_SCHEMA}, max_new_tokens=120, temperature=0.8, n=2, seed=1)
    assert len(outs) == 4 and all(len(o) == 2 for o in outs)
    for completions in outs:
        for tokens, logprob in completions:
            jsonschema.validate(json.loads(lm.decode(tokens)), PERSON_SCHEMA)
            assert logprob < 0


def test_lattice_and_smc_run_on_the_engine(lms):
    """The drivers that renormalise or sample, on whole rows: the lattice finds the
    transformers model's best path; SMC's particles all satisfy the constraint."""
    import constrain
    import search

    lm, hf = lms
    digits = constrain.compile_regex(r"[0-9]{1,3}", lm.vocab)
    ids = hf.prompt_ids("A number between 1 and 999?")
    got = search.lattice_search(lm, ids, budget=12, max_new_tokens=4, constraint=digits).k_best(2)
    want = search.lattice_search(hf, ids, budget=12, max_new_tokens=4, constraint=digits).k_best(2)
    assert [path for _, path in got] == [path for _, path in want]
    res = search.smc(lm, ids, constraint=digits, n_particles=4, max_new_tokens=4, seed=0)
    assert res.posterior and all(digits.matches(lm.decode(t)) for t in res.posterior)
