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


TEXT_VS_IR = [
    {"type": "object", "properties": {"a": {"type": "integer"}, "ab": {"type": "string"}},
     "required": ["a"]},
    {"type": "object", "patternProperties": {"^[a-z_0-9]+$": {"type": "boolean"}},
     "properties": {"x_1": {"const": 1}}, "additionalProperties": {"type": "null"}},
    {"type": "array", "items": {"anyOf": [{"enum": ["red", "green", "x"]}, {"type": "number"}]},
     "minItems": 1},
    {"type": "object", "properties": {"s": {"type": "string", "not": {"enum": ["no", "n"]}}},
     "required": ["s"], "additionalProperties": False},
]


# where "any other key" must refuse a declared name, or may take a new one
PROBES = ['{"a":1,"a":2}', '{"a":1,"ab":"x","ab":"y"}', '{"a":1,"abc":2,"b":null}', '{"a":1,"":3}',
          '{"x_1":1,"x_1":true}', '{"x_1":1,"x_2":true}', '{"x_1":1,"X":null}', '{"":null}',
          '{"s":"no"}', '{"s":"n"}', '{"s":"nn"}', '["x","red",1]']


@pytest.mark.parametrize("whitespace", ["compact", "flexible"])
@pytest.mark.parametrize("schema", TEXT_VS_IR, ids=[f"schema{i}" for i in range(len(TEXT_VS_IR))])
def test_compiled_ir_equals_grammar_text(schema, whitespace, smollm2_vocab):
    """compile_json_schema builds the grammar without its Lark text, and writes
    "any key but these" as automata: along random walks its masks are those of
    the text json_schema_to_lark writes, compiled by compile_grammar."""
    from constrain import compile_grammar, json_schema_to_lark

    direct = compile_json_schema(schema, smollm2_vocab, whitespace=whitespace)
    text = compile_grammar(json_schema_to_lark(schema, whitespace=whitespace), smollm2_vocab)
    sp = "" if whitespace == "compact" else " "
    for probe in PROBES:
        probe = probe.replace(":", ":" + sp)
        assert direct.matches(probe) == text.matches(probe), probe
    rng = np.random.default_rng(0)
    for walk in range(4):
        a, b = direct.initial_state(), text.initial_state()
        for step in range(60):
            ids = direct.allowed_token_ids(a)
            assert np.array_equal(ids, text.allowed_token_ids(b)), (walk, step)
            ids = ids[~np.isin(ids, smollm2_vocab.eos_token_ids)]
            if len(ids) == 0 or (direct.is_accepting(a) and rng.random() < 0.2):
                break
            tok = int(rng.choice(ids))
            a, b = direct.advance(a, tok), text.advance(b, tok)
