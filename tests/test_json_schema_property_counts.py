"""``minProperties``/``maxProperties`` on objects with additional members:
each subset of the optional declared members fixes their count, and the
additional members take what the bounds leave (a bounded run). Checked against
``jsonschema`` on every object of up to four members over a few names and
values (members in the grammar's order)."""

from __future__ import annotations

import itertools
import json

import jsonschema
import pytest

from byte_vocab import accepts, byte_vocabulary
from constrain import UnsupportedSchemaError, compile_json_schema, order_instance

SCHEMAS = [
    {"maxProperties": 2},
    {"type": "object", "maxProperties": 0},
    {"type": "object", "minProperties": 2},
    {"type": "object", "minProperties": 1, "maxProperties": 3,
     "additionalProperties": {"type": "boolean"}},
    {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "string"}},
     "required": ["a"], "maxProperties": 2},
    {"type": "object", "properties": {"a": {"type": "integer"}}, "minProperties": 2,
     "maxProperties": 3, "additionalProperties": {"type": "boolean"}},
    {"type": "object", "properties": {"a": {"type": "integer"}, "b": {}},
     "minProperties": 1, "maxProperties": 1},
    {"type": "object", "patternProperties": {"^c": {"type": "boolean"}},
     "additionalProperties": False, "maxProperties": 1},
]


def _objects():
    for k in range(5):
        for names in itertools.permutations("abcd", k):
            for values in itertools.product([1, "x", True], repeat=min(k, 3)):
                values = values + (1,) * (k - len(values))
                yield dict(zip(names, values))


@pytest.mark.parametrize("schema", SCHEMAS, ids=lambda s: json.dumps(s)[:60])
def test_counts_agree_with_jsonschema(schema):
    g = compile_json_schema(schema, byte_vocabulary())
    validator = jsonschema.Draft202012Validator(schema)
    n = 0
    for obj in _objects():
        text = json.dumps(order_instance(schema, obj), separators=(",", ":"))
        assert accepts(g, text) == validator.is_valid(obj), (schema, text)
        n += 1
    assert n > 500


def test_a_wide_count_range_over_additional_members_is_refused():
    with pytest.raises(UnsupportedSchemaError) as e:
        compile_json_schema({"type": "object", "maxProperties": 500}, byte_vocabulary())
    assert e.value.pointer == "/maxProperties"
