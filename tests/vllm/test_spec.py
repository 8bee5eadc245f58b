"""What of the request specs needs vLLM's own modules: the version check, the
backend's stop tokens, the logits processor's reading of a spec's text and its
loading under Model Runner V2. The specs, their cache and the budgets, which
need no engine, are tested in the default suite
(tests/test_engine_requests.py)."""

from __future__ import annotations

import re

import pytest

import constrain
from constrain.engines.vllm import compat
from constrain.engines.requests import SpecError


def test_version_check():
    assert compat.check_version() == compat.installed_version()
    assert compat.check_version("0.32.7+cpu") == "0.32.7+cpu"
    for version in ["0.31.2", "0.33.0", "1.0.0", "dev"]:
        with pytest.raises(compat.UnsupportedVLLMError, match=re.escape(compat.SUPPORTED)):
            compat.check_version(version)


def test_backend_stop_tokens_follow_acceptance():
    """TrellisGrammar.fill_bitmask: a stop token that is not EOS is allowed
    exactly when the output is complete, whatever the constraint's own mask
    says of it (here ``b`` is also text the regex takes before the output is
    complete, and ids 40 and 63 share a word of the row); the other bits are
    the constraint's."""
    from constrain.engines.vllm.backend import TrellisGrammar

    tokens = [bytes([b]) for b in range(256)] + [b"<eos>"]
    vocab = constrain.Vocabulary.from_tokens(tokens, eos_token_ids=[256])
    g = constrain.compile_regex("ab*c", vocab)
    stops = {ord("b"), 40, 63}
    grammar = TrellisGrammar(g, stop_token_ids=stops | {256})
    bitmask = constrain.allocate_bitmask(2, len(vocab), backend="torch")
    for text in ("", "a", "ac"):
        grammar.reset()
        assert grammar.accept_tokens("r", list(text.encode()))
        grammar.fill_bitmask(bitmask, 1)
        row = bitmask[1].numpy().view("uint32")
        allowed = {t for t in range(len(vocab)) if row[t >> 5] >> (t & 31) & 1}
        state = g.initial_state()
        for t in text.encode():
            state = g.advance(state, t)
        expected = set(g.allowed_token_ids(state).tolist()) - stops
        if g.is_accepting(state):
            expected |= stops
        assert allowed == expected, text
    # a stop token is never text, as the mask says: validate and accept took b
    # as text where the mask refused it (xgrammar's backend refuses it too)
    grammar.reset()
    assert grammar.validate_tokens(list(b"abc")) == [ord("a")]
    assert not grammar.accept_tokens("r", list(b"ab"))
    grammar.reset()
    assert grammar.accept_tokens("r", list(b"acb")) and grammar.is_terminated()
    grammar.reset()
    assert grammar.accept_tokens("r", list(b"ac"))
    # a tensor the grammar has not seen (vLLM keeps one; a new one is viewed anew)
    other = constrain.allocate_bitmask(2, len(vocab), backend="torch")
    grammar.fill_bitmask(other, 0)
    assert {t for t in stops if other[0].numpy().view("uint32")[t >> 5] >> (t & 31) & 1} == stops


def test_specs_nested_too_deeply_are_refused_by_name():
    """Past Python's recursion this was a RecursionError, which vLLM does not
    turn into a validation error (a spec's value nested too deeply:
    tests/test_engine_requests.py, in the default suite)."""
    from constrain.engines.vllm.logits_processor import request_spec

    class Params:
        extra_args = {"trellis": '{"json_schema": ' + "[" * 100_000}

    with pytest.raises(SpecError, match="nests too deeply"):
        request_spec(Params())


def test_the_processor_loads_under_model_runner_v2():
    """vLLM's Model Runner V2 (the GPU build's default) loads every installed
    logits-processor plugin through its own interface and refused this one:
    no engine in the environment could start. Now it loads, declines every
    request, and its front end refuses a Trellis spec with the way out."""
    pytest.importorskip("vllm.v1.worker.gpu.sample.logits_processor.loader")
    from vllm.exceptions import VLLMValidationError
    from vllm.sampling_params import SamplingParams
    from vllm.v1.worker.gpu.sample.logits_processor.loader import (
        _load_v2_logitsprocs, build_custom_logits_processors_params_validator)

    from constrain.engines.vllm.logits_processor import TrellisLogitsProcessor

    assert TrellisLogitsProcessor in _load_v2_logitsprocs(None)
    validate = build_custom_logits_processors_params_validator(())
    validate(SamplingParams(max_tokens=4))  # no spec: untouched
    with pytest.raises(VLLMValidationError, match="VLLM_USE_V2_MODEL_RUNNER=0"):
        validate(SamplingParams(max_tokens=4, extra_args={"trellis": {"regex": "[0-9]+"}}))
    processor = TrellisLogitsProcessor(object(), object())  # (vllm_config, req_states)
    assert processor.add_request(0, SamplingParams(max_tokens=4)) is False
    import torch

    logits = torch.zeros(2, 5)
    assert processor.apply(logits, object()) is logits
