"""The request specs both routes share, their cache, the budgets from the
environment and the version check (no engine needed)."""

from __future__ import annotations

import json
import re
import threading

import pytest

import constrain
from constrain.engines.vllm import compat
from constrain.engines.requests import (
    ConstraintSource,
    SpecError,
    choice_regex,
    limits_from_env,
    parse_spec,
)


@pytest.fixture(scope="module")
def source():
    tokens = [bytes([b]) for b in range(256)] + [b"ab", b'{"', b"<eos>"]
    return ConstraintSource(constrain.Vocabulary.from_tokens(tokens, eos_token_ids=[258]),
                            max_entries=3)


@pytest.mark.parametrize("spec, words", [
    ([], "must be a dict"),
    ({}, "it has none"),
    ({"regex": "a", "choice": ["a"]}, "'regex' and 'choice'"),
    ({"regex": "a", "start": "x"}, "unknown key 'start'"),
    ({"regex": 3}, "must be a string"),
    ({"choice": "ab"}, "non-empty list"),
    ({"choice": ["a", 1]}, "item 1"),
    ({"json_object": 1}, "must be true"),
    ({"json_schema": 3}, "'json_schema' must be a JSON object"),
    ({"structural_tag": 3}, "'structural_tag' must be a JSON object"),
    ({"json_schema": {}, "whitespace": "loose"}, "'compact' or 'flexible'"),
    ({"grammar": "start: A", "start": ""}, "rule name"),
])
def test_malformed_specs_name_the_key(spec, words):
    with pytest.raises(SpecError, match=re.escape(words)):
        parse_spec(spec)


def test_schema_text_and_dict_are_one_spec():
    schema = {"type": "object", "properties": {"b": {}, "a": {}}}
    assert parse_spec({"json_schema": schema}) == parse_spec({"json_schema": json.dumps(schema)})
    with pytest.raises(constrain.SchemaError, match="not valid JSON"):
        parse_spec({"json_schema": "{nope"})


def test_choice_regex_is_exactly_the_choices():
    choices = ["a.b", "a", "(x)", "a.b"]
    pattern = choice_regex(choices)
    for c in choices:
        assert re.fullmatch(pattern, c)
    for other in ["aXb", "x", "", "a.ba"]:
        assert not re.fullmatch(pattern, other)


def test_cache_compiles_once_and_is_bounded(source):
    a = source.compile({"regex": "[0-9]{2}"})
    assert source.compile({"regex": "[0-9]{2}"}) is a
    for i in range(3):
        source.compile({"regex": f"x{i}"})
    assert len(source) == 3
    assert source.compile({"regex": "[0-9]{2}"}) is not a  # evicted, compiled again


def test_errors_are_not_kept(source):
    for _ in range(2):
        with pytest.raises(constrain.RegexError, match="offset 0"):
            source.compile({"regex": "[0-"})


def test_threads_asking_at_once_get_one_compile(source):
    got = []
    barrier = threading.Barrier(4)

    def ask():
        barrier.wait()
        got.append(source.compile({"grammar": 'start: "x" start | "y"'}))

    threads = [threading.Thread(target=ask) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len({id(g) for g in got}) == 1


def test_choice_and_json_object_compile(source):
    choice = source.compile({"choice": ["ab", "b"]})
    assert choice.matches("ab") and choice.matches("b") and not choice.matches("a")
    obj = source.compile({"json_object": True})
    assert obj.matches('{"a":[1]}') and not obj.matches("[1]")


def test_structural_tag_and_gbnf_compile(source):
    tag = {"type": "structural_tag", "format": {
        "type": "triggered_tags", "triggers": ["<t>"], "stop_after_first": True,
        "tags": [{"type": "tag", "begin": "<t>", "end": "</t>",
                  "content": {"type": "json_schema", "json_schema": {"enum": [1, 2]}}}]}}
    c = source.compile({"structural_tag": json.dumps(tag)})
    assert c.matches("hi <t>2</t>") and not c.matches("hi <t>3</t>")
    g = source.compile({"grammar": 'root ::= "a" [0-9]+'})
    assert g.matches("a12") and not g.matches("a")


def test_limits_from_the_environment():
    limits, cache = limits_from_env({"TRELLIS_VLLM_LIMITS": '{"time_budget": 2, "max_states": 9}',
                                     "TRELLIS_VLLM_CACHE_BYTES": "1000000"})
    assert limits == constrain.Limits(time_budget=2.0, max_states=9) and cache == 1_000_000
    with pytest.raises(constrain.ConstraintError, match="TRELLIS_VLLM_LIMITS"):
        limits_from_env({"TRELLIS_VLLM_LIMITS": '{"colour": 1}'})
    with pytest.raises(constrain.InvalidLimitError):
        limits_from_env({"TRELLIS_VLLM_LIMITS": '{"time_budget": 0}'})


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
    """Past Python's recursion both were a RecursionError, which vLLM does not
    turn into a validation error."""
    from constrain.engines.vllm.logits_processor import request_spec

    deep: dict = {}
    node = deep
    for _ in range(3000):
        node["items"] = {}
        node = node["items"]
    with pytest.raises(constrain.SchemaTooComplexError, match="nests too deeply"):
        parse_spec({"json_schema": deep})

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
