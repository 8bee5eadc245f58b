"""``patternProperties`` that overlap each other and the declared names: a
member's value satisfies the schema of every pattern its key matches (and the
declared property's), ``additionalProperties`` only when it matches none; with
``propertyNames``, every key is also one of its strings.

Checked against ``jsonschema``: fixed schemas on every object of up to two
members over a set of keys and values, and random schemas (hypothesis) on
random objects and on random derivations of the compiled grammar. Over ASCII
keys without a newline every translation is exact, so agreement is asserted
both ways (members in the grammar's order: ``order_instance``)."""

from __future__ import annotations

import itertools
import json
import os
import warnings

import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from byte_vocab import accepts, byte_vocabulary
from constrain import (GrammarTooComplexError, UnsupportedSchemaError, compile_json_schema, json_schema_to_lark,
                       order_instance)
from grammar_sampling import GrammarSampler

BYTES = byte_vocabulary()

SCHEMAS = [
    {"patternProperties": {"a*": {"type": "integer"}, "aaa*": {"maximum": 20}}},
    {"patternProperties": {"[0-9]{2,}": {"type": "boolean"}, "X_": {"type": "string"}}},
    {"properties": {"foo": {"type": "array", "maxItems": 3}, "bar": {"type": "array"}},
     "patternProperties": {"f.o": {"minItems": 2}}, "additionalProperties": {"type": "integer"}},
    {"patternProperties": {"^a": {"type": "integer"}, "b$": {"type": "integer", "minimum": 5}},
     "additionalProperties": False},
    {"type": "object", "properties": {"ab": {"const": 7}, "x": {"type": "string"}},
     "patternProperties": {"^a": {"type": "integer"}, "b": {"maximum": 9}, "^x$": {"maxLength": 1}},
     "additionalProperties": {"type": "null"}, "required": ["x"]},
    {"patternProperties": {"^[a-c]*$": {"type": ["integer", "null"]}, ".": {"not": {"type": "null"}},
                           "^$": False}},
    # enough patterns that empty regions are pruned while refining
    {"patternProperties": {"^a": {"type": "integer"}, "^b": {"minimum": 3}, "^f": {"type": "array"},
                           "b$": {"maximum": 9}, "o$": {"minItems": 2}, "x": {"type": "boolean"}},
     "additionalProperties": {"type": "string"}},
    {"patternProperties": {"^a": {"type": "integer"}, "b": {"minimum": 2}}, "properties": {"ab": {}},
     "propertyNames": {"pattern": "^[a-c]+$"}, "additionalProperties": {"type": "string"}},
    {"allOf": [{"patternProperties": {"^a": {"minimum": 2}}},
               {"patternProperties": {"b$": {"maximum": 20}}, "additionalProperties": False}]},
]

KEYS = ["a", "aa", "aaaa", "b", "ab", "abb", "ba", "f_o", "foo", "fxo", "bar", "x", "xx", "12",
        "X_", "x_", "", "c"]
VALUES = [1, 5, 30, "s", "ss", True, None, [1], [1, 2], [1, 2, 3, 4]]


def _objects():
    yield {}
    for k in KEYS:
        for v in VALUES:
            yield {k: v}
    for k1, k2 in itertools.combinations(KEYS, 2):
        for v1, v2 in itertools.product(VALUES[:4], VALUES[5:8]):
            yield {k1: v1, k2: v2}


@pytest.mark.parametrize("schema", SCHEMAS, ids=lambda s: json.dumps(s)[:70])
def test_overlapping_patterns_agree_with_jsonschema(schema):
    g = compile_json_schema(schema, BYTES)
    validator = jsonschema.Draft202012Validator(schema)
    n = valid = 0
    for obj in _objects():
        text = json.dumps(order_instance(schema, obj), separators=(",", ":"))
        ok = validator.is_valid(obj)
        assert accepts(g, text) == ok, (schema, text, ok)
        n += 1
        valid += ok
    assert n > 1000 and 0 < valid < n


def test_a_newline_before_the_end_is_a_match_of_dollar():
    # Python's "$" also matches before a final newline: such a key is kept out
    # of the keys that match no pattern (sound), not given the pattern's schema
    schema = {"patternProperties": {"b$": {"type": "integer"}}, "additionalProperties": {"type": "string"}}
    g = compile_json_schema(schema, BYTES)
    assert jsonschema.Draft202012Validator(schema).is_valid({"b\n": 1})
    assert not accepts(g, '{"b\\n":"s"}') and accepts(g, '{"c\\n":"s"}') and accepts(g, '{"b":1}')


def test_keys_matching_no_pattern_when_their_regex_is_too_large():
    # the complement of ^p_[a-z]{0,80}$ has too many states to write as a regex:
    # the keys that do not start with "p_" are kept (a subset: "p_X" is left out)
    schema = {"properties": {"p_a": {"const": 0}}, "patternProperties": {"^p_[a-z]{0,80}$": {"type": "string"}},
              "additionalProperties": {"type": "integer"}}
    g = compile_json_schema(schema, BYTES)
    validator = jsonschema.Draft202012Validator(schema)
    for obj in [{"id": 1}, {"p": 2}, {"p_ab": "s"}, {"p_a": 0}, {"q_": 3}, {"id": "s"}, {"p_ab": 1},
                {"p_a": "s"}, {"p_X": 1}, {"p_" + "a" * 81: 1}]:
        text = json.dumps(order_instance(schema, obj), separators=(",", ":"))
        ok = validator.is_valid(obj)
        assert accepts(g, text) == (ok and not next(iter(obj)).startswith("p_X")
                                    and len(next(iter(obj))) <= 82), (text, ok)


def test_regions_whose_regex_is_too_large_keep_the_keys_without_the_required_text():
    """MaskBench Github_medium o83286: an unanchored pattern beside others.
    "Matches zz and not netdir_(projects|work|scratch|share)" is an automaton
    too large to write back as a regex, and every key of the other patterns was
    refused; now each such region keeps the keys that do not contain
    ``netdir_`` (a subset: "znetdir_zz" matches only zz and is left out)."""
    schema = {"type": "object", "patternProperties": {
        "netdir_(projects|work|scratch|share)": {"type": "object"},
        "zz": {"type": "integer"}, "q[0-9]": {"type": "string"}}}
    g = compile_json_schema(schema, BYTES)
    validator = jsonschema.Draft202012Validator(schema)
    left_out = {"znetdir_zz"}
    for obj in [{"zz": 1}, {"azzb": 2}, {"q1": "s"}, {"zzq1": 3}, {"netdir_work": {}},
                {"xnetdir_share_zz": {}}, {"other": None}, {"zz": "s"}, {"q1": 1},
                {"netdir_work": 1}, {"znetdir_zz": 1}]:
        text = json.dumps(order_instance(schema, obj), separators=(",", ":"))
        ok = validator.is_valid(obj)
        assert accepts(g, text) == (ok and next(iter(obj)) not in left_out), (text, ok)


def test_regions_past_the_bound_are_refused():
    schema = {"patternProperties": {c: {"type": "integer"} for c in "abcdefg"}}
    with pytest.raises(GrammarTooComplexError):
        compile_json_schema(schema, BYTES)


def test_the_complement_of_a_case_insensitive_pattern_is_refused():
    schema = {"patternProperties": {"(?i)^x": {"type": "integer"}}, "additionalProperties": {"type": "string"}}
    with pytest.raises(UnsupportedSchemaError) as e:
        compile_json_schema(schema, BYTES)
    assert e.value.pointer == "/patternProperties/(?i)^x"
    # without additional members no complement is needed
    g = compile_json_schema({"patternProperties": {"(?i)^x": {"type": "integer"}},
                             "additionalProperties": False}, BYTES)
    assert accepts(g, '{"X1":2}') and not accepts(g, '{"y":2}')


def test_multi_line_anchors_are_not_disjoint_prefixes():
    # (?m)^b also matches "a\nb": the key would need both schemas, and the
    # complement of a multi-line pattern is not written -- refused, not unsound
    schema = {"patternProperties": {"(?m)^a": {"type": "integer"}, "(?m)^b": {"type": "string"}},
              "additionalProperties": False}
    with pytest.raises(UnsupportedSchemaError):
        compile_json_schema(schema, BYTES)


# -- random schemas ---------------------------------------------------------------------

_PATTERNS = st.sampled_from(["^a", "a", "b$", "^[a-c]*$", "x", ".", "^.{2}$", "f.o", "[0-9]", "^$",
                             r"\d+", "^ab?$", "b|c"])
_NAMES = st.sampled_from(["a", "ab", "b", "foo", "x", "1", ""])
_VALUE_SCHEMAS = st.one_of(
    st.booleans(), st.just({}),
    st.builds(lambda t: {"type": t}, st.sampled_from(["integer", "string", "boolean", "null", "array"])),
    st.builds(lambda n: {"minimum": n}, st.integers(-2, 6)),
    st.builds(lambda n: {"maxLength": n}, st.integers(0, 2)),
    st.builds(lambda n: {"maxItems": n}, st.integers(0, 2)),
    st.builds(lambda v: {"const": v}, st.sampled_from([1, "a", None])))
_KEY_SCHEMAS = st.one_of(st.none(), st.builds(lambda n: {"maxLength": n}, st.integers(0, 3)),
                        st.just({"pattern": "^[a-c]*$"}), st.just({"enum": ["a", "ab", "x", "foo"]}))
_OBJECT_SCHEMAS = st.builds(
    lambda pp, p, ap, r, pn: {k: v for k, v in (("patternProperties", pp), ("properties", p),
                                                ("additionalProperties", ap), ("required", r),
                                                ("propertyNames", pn))
                              if v is not None},
    st.dictionaries(_PATTERNS, _VALUE_SCHEMAS, min_size=1, max_size=4),
    st.one_of(st.none(), st.dictionaries(_NAMES, _VALUE_SCHEMAS, max_size=3)),
    st.one_of(st.none(), _VALUE_SCHEMAS),
    st.one_of(st.none(), st.lists(_NAMES, max_size=2, unique=True)),
    _KEY_SCHEMAS)
_KEYS = st.one_of(_NAMES, st.text(alphabet="abcfox01 _", max_size=4))
_VALUES = st.one_of(st.none(), st.booleans(), st.integers(-3, 8), st.sampled_from(["", "a", "ab"]),
                    st.lists(st.integers(0, 3), max_size=3))


@settings(max_examples=int(os.environ.get("TRELLIS_PP_EXAMPLES", "80")), deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(_OBJECT_SCHEMAS, st.lists(st.dictionaries(_KEYS, _VALUES, max_size=3), min_size=5, max_size=25),
       st.integers(0, 2**16))
def test_random_pattern_schemas_are_exact(schema, objects, seed):
    try:
        g = compile_json_schema(schema, BYTES)
    except GrammarTooComplexError:
        return  # more regions than the bound: a refusal is allowed
    validator = jsonschema.Draft202012Validator(schema)
    for obj in objects:
        text = json.dumps(order_instance(schema, obj), separators=(",", ":"))
        assert accepts(g, text) == validator.is_valid(obj), (schema, text)
    sampler = GrammarSampler(g, seed)
    for _ in range(8):
        try:
            text = sampler.sentence(max_depth=6).decode("utf-8")
        except (ValueError, IndexError, RecursionError):
            break  # an empty language has no sentence
        assert validator.is_valid(json.loads(text)), (schema, text)


def test_a_region_left_out_in_part_is_told():
    """A region whose exact key automaton is too large is cut to a subset or
    left out (the strict side), which was silent: the user saw keys the
    schema allows refused with no word why."""
    schema = {"type": "object", "additionalProperties": False, "patternProperties": {
        "^[a-z]*a[a-z]{6}$": {"type": "integer"}, "^[a-z]*b[a-z]{6}$": {"type": "string"}}}
    with pytest.warns(UserWarning, match=r"admits only part of what the schema allows: keys "
                                         r"matching patternProperties '\^\[a-z\]\*a.* at "
                                         r"/patternProperties/\^\[a-z\]\*a"):
        json_schema_to_lark(schema)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        json_schema_to_lark({"type": "object", "patternProperties": {"^a": {"type": "integer"}}})
