"""The budgets every engine (vLLM, SGLang) reads from the environment
(``constrain.engines.requests.limits_from_env``): the engine-neutral names,
and the first, vLLM-named ones where those are unset. No engine is needed."""

import pytest

import constrain
from constrain.engines.requests import (CACHE_BYTES_ENV, DEFAULT_CACHE_BYTES, LEGACY_ENV,
                                        LIMITS_ENV, limits_from_env)


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
