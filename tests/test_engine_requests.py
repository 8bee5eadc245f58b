"""What every serving engine (vLLM, SGLang) shares, with no engine installed
(``constrain.engines.requests``): request specs and their errors, the cache of
compiled constraints (``ConstraintSource``), the budgets read from the
environment, and the engines' release numbers."""

import json
import re
import threading

import pytest

import constrain
from constrain.engines.requests import (CACHE_BYTES_ENV, DEFAULT_CACHE_BYTES, LEGACY_ENV,
                                        LIMITS_ENV, ConstraintSource, SpecError, choice_regex,
                                        limits_from_env, parse_spec)


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


def test_specs_nested_too_deeply_are_refused_by_name():
    """Past Python's recursion this was a RecursionError, which an engine does
    not turn into a request's error (vLLM's own reading of a spec's text:
    tests/vllm/test_spec.py)."""
    deep: dict = {}
    node = deep
    for _ in range(3000):
        node["items"] = {}
        node = node["items"]
    with pytest.raises(constrain.SchemaTooComplexError, match="nests too deeply"):
        parse_spec({"json_schema": deep})


def test_the_names_are_engine_neutral():
    assert (LIMITS_ENV, CACHE_BYTES_ENV) == ("TRELLIS_LIMITS", "TRELLIS_CACHE_BYTES")
    assert LEGACY_ENV == {"TRELLIS_LIMITS": "TRELLIS_VLLM_LIMITS",
                          "TRELLIS_CACHE_BYTES": "TRELLIS_VLLM_CACHE_BYTES"}


def test_unset_means_the_defaults():
    assert limits_from_env({}) == (None, DEFAULT_CACHE_BYTES)
    assert limits_from_env({"TRELLIS_LIMITS": "", "TRELLIS_CACHE_BYTES": ""}) == \
        (None, DEFAULT_CACHE_BYTES)


def test_the_neutral_names():
    limits, cache = limits_from_env({"TRELLIS_LIMITS": '{"time_budget": 2, "max_states": 9}',
                                     "TRELLIS_CACHE_BYTES": "1000000"})
    assert limits == constrain.Limits(time_budget=2.0, max_states=9) and cache == 1_000_000


def test_the_first_names_where_the_neutral_ones_are_unset():
    limits, cache = limits_from_env({"TRELLIS_VLLM_LIMITS": '{"max_states": 7}',
                                     "TRELLIS_VLLM_CACHE_BYTES": "2000000"})
    assert limits == constrain.Limits(max_states=7) and cache == 2_000_000
    # each variable on its own: the neutral one wins where both are set
    limits, cache = limits_from_env({"TRELLIS_LIMITS": '{"max_states": 5}',
                                     "TRELLIS_VLLM_LIMITS": '{"max_states": 7}',
                                     "TRELLIS_VLLM_CACHE_BYTES": "2000000"})
    assert limits == constrain.Limits(max_states=5) and cache == 2_000_000


@pytest.mark.parametrize("env, name, message", [
    ({"TRELLIS_LIMITS": "{"}, "TRELLIS_LIMITS", "is not JSON"),
    ({"TRELLIS_VLLM_LIMITS": "[1]"}, "TRELLIS_VLLM_LIMITS", "must be a JSON object"),
    ({"TRELLIS_LIMITS": '{"colour": 1}'}, "TRELLIS_LIMITS", "colour"),
    ({"TRELLIS_CACHE_BYTES": "lots"}, "TRELLIS_CACHE_BYTES", "must be an integer"),
    ({"TRELLIS_VLLM_CACHE_BYTES": "1e9"}, "TRELLIS_VLLM_CACHE_BYTES", "must be an integer"),
])
def test_a_malformed_value_names_the_variable_it_came_from(env, name, message):
    with pytest.raises(constrain.ConstraintError) as info:
        limits_from_env(env)
    assert f"${name}" in str(info.value) and message in str(info.value)


def test_a_limit_out_of_range_is_refused():
    with pytest.raises(constrain.InvalidLimitError):
        limits_from_env({"TRELLIS_LIMITS": '{"time_budget": 0}'})


def test_vllm_configure_writes_what_every_engine_reads(monkeypatch):
    from constrain.engines import vllm

    for name in ("TRELLIS_LIMITS", "TRELLIS_CACHE_BYTES", "TRELLIS_VLLM_LIMITS",
                 "TRELLIS_VLLM_CACHE_BYTES", "TRELLIS_VLLM_JSON_WHITESPACE"):
        monkeypatch.delenv(name, raising=False)
    # a first-name setting left over from before: configure's values win
    monkeypatch.setenv("TRELLIS_VLLM_LIMITS", '{"max_states": 7}')
    vllm.configure(limits=constrain.Limits(max_states=11), cache_bytes=12_345_678)
    assert limits_from_env() == (constrain.Limits(max_states=11), 12_345_678)


@pytest.mark.parametrize("version, parts, expected", [
    ("0.32.0+cpu", 2, (0, 32)), ("0.5.23", 3, (0, 5, 23)), ("0.5", 3, None),
    ("0.5.dev1", 3, None), ("", 2, None), ("1.2.3.4", 2, (1, 2))])
def test_engine_release_numbers(version, parts, expected):
    from constrain.engines.versions import release, supported

    assert release(version, parts) == expected
    if expected is not None:
        assert supported(version, expected, tuple(x + 1 for x in expected))
        assert not supported(version, tuple(x + 1 for x in expected), (99,) * parts)
    else:
        assert not supported(version, (0,) * parts, (99,) * parts)


def test_a_spec_hashes_as_its_fields_in_every_process():
    import pickle
    import subprocess
    import sys

    spec = parse_spec({"json_schema": {"type": "string"}, "whitespace": "flexible"})
    assert hash(spec) == hash(parse_spec(spec)) and {spec: 1}[parse_spec(
        {"json_schema": '{"type": "string"}', "whitespace": "flexible"})] == 1
    # a pickled spec is hashed anew where it is loaded (string hashes differ
    # between processes)
    code = ("import pickle, sys; from constrain.engines.requests import parse_spec; "
            "s = pickle.loads(sys.stdin.buffer.read()); "
            "print(hash(s) == hash(parse_spec({'json_schema': {'type': 'string'}, "
            "'whitespace': 'flexible'})))")
    out = subprocess.run([sys.executable, "-c", code], input=pickle.dumps(spec),
                         capture_output=True, check=True)
    assert out.stdout.strip() == b"True"
