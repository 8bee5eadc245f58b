"""JSON Schema cases beyond the official suite where a constraint once let
through what its schema rejects, or a malformed schema was silently read as a
weaker one: each must now be exact, or refused with a typed error naming the
place."""

from __future__ import annotations

import json
import time

import jsonschema
import pytest

from constrain import EmptySchemaError, SchemaError, UnsupportedSchemaError
from constrain import compile_json_schema
from byte_vocab import accepts, byte_vocabulary

BYTES = byte_vocabulary()


def agrees(schema, values):
    """Every value: accepted by the constraint iff jsonschema validates it."""
    c = compile_json_schema(schema, BYTES)
    for v in values:
        text = json.dumps(v, separators=(",", ":"))
        assert accepts(c, text) == jsonschema.Draft202012Validator(schema).is_valid(v), (schema, v)


def test_one_of_with_an_overlapping_enum_branch_is_exact():
    agrees({"oneOf": [{"enum": ["fast", "slow"]}, {"type": "string"}]},
           ["fast", "slow", "x", "", 1])
    agrees({"oneOf": [{"enum": [1, 2]}, {"enum": [2, 3]}]}, [1, 2, 3, 4])
    agrees({"oneOf": [{"const": None}, {"type": ["null", "integer"]}]}, [None, 0, "a"])


def test_properties_false_forbids_the_name():
    agrees({"properties": {"foo": True, "bar": False}}, [{"bar": 2}, {"foo": 1}, {}])
    agrees({"properties": {"bar": False}, "additionalProperties": {"type": "integer"}},
           [{"bar": 1}, {"baz": 1}, {"baz": "x"}])


def test_urn_anchor_ref_resolves_to_the_anchor():
    schema = {"$id": "urn:uuid:deadbeef-1234-ff00-00ff-4321feebdaed",
              "properties": {"foo": {"$ref": "urn:uuid:deadbeef-1234-ff00-00ff-4321feebdaed#something"}},
              "$defs": {"bar": {"$anchor": "something", "type": "string"}}}
    agrees(schema, [{"foo": "bar"}, {"foo": 12}])


def test_if_then_else_and_not_are_exact():
    agrees({"if": {"exclusiveMaximum": 0}, "then": {"minimum": -10}, "else": {"multipleOf": 2}},
           [-100, -1, 0, 3, 4, "x"])
    agrees({"not": {"type": "object", "required": ["a"]}}, [{"a": 1}, {"b": 1}, 1, "a"])
    agrees({"not": {"properties": {"a": {"type": "string"}}}}, [{"a": "x"}, {"a": 1}, {}, 2])


def test_contains_counts_exactly():
    agrees({"contains": {"const": 1}, "minContains": 2, "maxContains": 3},
           [[1], [1, 1], [1, 2, 1], [1, 1, 1, 1], [], "x"])
    agrees({"items": {"type": "integer"}, "contains": {"minimum": 5}}, [[1, 6], [1, 2], [6]])


@pytest.mark.parametrize("schema, pointer", [
    ({"enum": "abc"}, "/enum"),
    ({"required": "a"}, "/required"),
    ({"minimum": True}, "/minimum"),
    ({"type": 5}, "/type"),
    ({"type": ["string", 5]}, "/type"),
    ({"properties": {"a": {"maxLength": -1}}}, "/properties/a/maxLength"),
    ({"items": 3}, "/items"),
    ({"allOf": []}, "/allOf"),
    ({"anyOf": [{"pattern": 5}]}, "/anyOf/0/pattern"),
    ({"dependentRequired": {"a": "b"}}, "/dependentRequired"),
])
def test_malformed_keywords_are_refused_at_their_pointer(schema, pointer):
    with pytest.raises(SchemaError) as e:
        compile_json_schema(schema, BYTES)
    assert e.value.pointer == pointer


def test_huge_bounds_are_refused_or_capped_at_once():
    t0 = time.perf_counter()
    with pytest.raises(UnsupportedSchemaError) as e:
        compile_json_schema({"minimum": 1e308}, BYTES)
    assert e.value.pointer == "/minimum"
    c = compile_json_schema({"type": "number", "maximum": 1.7976931348623157e308}, BYTES)
    assert accepts(c, "12.5") and accepts(c, "-3")
    assert time.perf_counter() - t0 < 5


def test_a_schema_admitting_nothing_says_so():
    for schema in (False, {"not": {}}, {"allOf": [{"type": "string"}, {"type": "integer"}]}):
        with pytest.raises(EmptySchemaError):
            compile_json_schema(schema, BYTES)


def test_no_ref_is_ever_fetched():
    # an unknown remote document is a SchemaError, not a download (the enum check
    # runs jsonschema, whose default registry would fetch it)
    with pytest.raises(SchemaError, match="resources="):
        compile_json_schema({"enum": [1, 2], "$ref": "http://127.0.0.1:9/x.json"}, BYTES)
    c = compile_json_schema({"enum": [1, 2], "not": {"$ref": "http://example.test/x.json"}}, BYTES,
                            resources={"http://example.test/x.json": {"const": 2}})
    assert accepts(c, "1") and not accepts(c, "2")


def test_unique_items_over_a_finite_domain_is_exact():
    agrees({"type": "array", "items": {"enum": ["a", "b", "c"]}, "uniqueItems": True},
           [[], ["a"], ["a", "b"], ["a", "a"], ["c", "b", "a"], ["a", "b", "c", "a"], ["d"]])
    agrees({"type": "array", "items": {"type": "boolean"}, "uniqueItems": True, "minItems": 2},
           [[True, False], [True], [True, True], [False, True]])
    agrees({"items": {"enum": [1, 1.0, 2]}, "uniqueItems": True}, [[1, 2], [1, 1.0], [2, 1]])
    with pytest.raises(UnsupportedSchemaError):
        compile_json_schema({"type": "array", "items": {"type": "string"}, "uniqueItems": True},
                            BYTES)


@pytest.mark.parametrize("schema", [
    {"type": "array", "items": {"type": "boolean"}, "uniqueItems": True, "contains": {"const": True}},
    {"allOf": [{"type": "array", "items": {"enum": [1, 2]}, "uniqueItems": True},
               {"contains": {"const": 1}}]},
    {"type": "array", "items": {"enum": [1, 2, 3, "a"]}, "uniqueItems": True,
     "contains": {"type": "integer"}, "minContains": 2, "maxContains": 2},
    {"type": "array", "prefixItems": [{"enum": [1, 2]}], "items": {"enum": [3, 4]},
     "uniqueItems": True, "contains": {"enum": [4]}, "minContains": 0, "maxContains": 0},
    {"type": "array", "items": {"enum": [1, 2, 3]}, "uniqueItems": True, "maxItems": 2,
     "contains": {"enum": [1, 2]}, "maxContains": 1},
])
def test_unique_items_counts_contains(schema):
    """``contains``/``minContains``/``maxContains`` beside a ``uniqueItems``
    over a finite domain were dropped: ``[]`` and ``[false]`` passed
    ``contains: {const: true}``. Every array of up to 3 distinct values of a
    small universe, against jsonschema."""
    import itertools

    universe = [1, 2, 3, 4, "a", True, False]
    agrees(schema, [list(a) for n in range(4) for a in itertools.permutations(universe, n)])


def test_multiple_of_one_admits_only_integers():
    for m in (1, 1.0, 2.0):
        c = compile_json_schema({"type": "number", "multipleOf": m}, BYTES)
        for text in ("2.5", "0.5", "-1.5", "3.25"):
            assert not accepts(c, text), (m, text)
        assert accepts(c, "4") and accepts(c, "-2")
