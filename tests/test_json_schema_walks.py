"""Random walks over compiled JSON Schemas end in values ``jsonschema`` accepts.

Uniform choices among the allowed tokens go where no model would, which is the
point: non-ASCII digits, dangling decimal points, escapes, long strings.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

jsonschema = pytest.importorskip("jsonschema")

from constrain import compile_json_schema  # noqa: E402

SCHEMAS = [
    {"type": "number", "minimum": 0, "maximum": 1},
    {"type": "integer", "minimum": -5, "exclusiveMaximum": 1000},
    {"type": "object", "properties": {
        "day": {"type": "string", "format": "date"},
        "n": {"type": "number"},
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 4}, "maxItems": 3}},
     "required": ["day", "n"], "additionalProperties": False},
    {"type": "object", "properties": {"kind": {"enum": ["a", "b", 3]},
                                      "child": {"$ref": "#"}},
     "additionalProperties": False},
]


@pytest.mark.parametrize("schema", SCHEMAS, ids=[f"schema{i}" for i in range(len(SCHEMAS))])
def test_random_walks_validate(schema, smollm2_vocab):
    g = compile_json_schema(schema, smollm2_vocab)
    validator = jsonschema.Draft202012Validator(schema, format_checker=jsonschema.FormatChecker())
    rng = np.random.default_rng(1)
    eos = set(smollm2_vocab.eos_token_ids)
    finished = 0
    for _ in range(25):
        state, out = g.initial_state(), bytearray()
        for _ in range(120):
            ids = g.allowed_token_ids(state)
            assert len(ids), out
            t = int(rng.choice(ids))
            if t in eos:
                finished += 1
                value = json.loads(out.decode("utf-8"))
                assert validator.is_valid(value), out
                break
            out += smollm2_vocab.token_bytes(t)
            state = g.advance(state, t)
            assert state is not None
    assert finished >= 3
