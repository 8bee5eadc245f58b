"""Random JSON Schemas against ``jsonschema`` (hypothesis).

For every generated schema, compiled over a byte vocabulary: a refusal must be a
:class:`~constrain.errors.ConstraintError` (never another exception); texts drawn
from the compiled grammar (random derivations) must be JSON that ``jsonschema``
validates; random values, and near misses of the drawn texts, that the
constraint accepts must be valid too; and valid values the constraint refuses are
counted (completeness is measured by the official suite, not asserted here).
Malformed schemas (a keyword given a random JSON value) must raise nothing but a
``ConstraintError``.

A few hundred cases run by default; ``TRELLIS_FUZZ=long`` runs thousands.
"""

from __future__ import annotations

import json
import os
import random

import jsonschema
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from constrain import compile_json_schema
from constrain.errors import ConstraintError
from byte_vocab import accepts, byte_vocabulary
from grammar_sampling import GrammarSampler, mutate

LONG = os.environ.get("TRELLIS_FUZZ") == "long"
BYTES = byte_vocabulary()
_SETTINGS = dict(max_examples=2000 if LONG else 120, deadline=None, derandomize=not LONG,
                 suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

_NAMES = st.sampled_from(["a", "b", "c", "id", "x y"])
_SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-20, 20),
                     st.sampled_from([0.5, -1.5, 2.0]), st.sampled_from(["", "a", "ab", "xyz", "1"]))
_VALUES = st.recursive(_SCALARS, lambda v: st.one_of(
    st.lists(v, max_size=3), st.dictionaries(_NAMES, v, max_size=3)), max_leaves=6)
_TYPES = st.sampled_from(["null", "boolean", "integer", "number", "string", "array", "object"])


def _leaf():
    small = st.integers(0, 4)
    num = st.integers(-10, 10)
    return st.one_of(
        st.just({}), st.booleans(),
        st.builds(lambda t: {"type": t}, _TYPES),
        st.builds(lambda t: {"type": t}, st.lists(_TYPES, min_size=1, max_size=3, unique=True)),
        st.builds(lambda v: {"const": v}, _VALUES),
        st.builds(lambda vs: {"enum": vs}, st.lists(_VALUES, min_size=1, max_size=4)),
        st.builds(lambda k, v: {k: v}, st.sampled_from(
            ["minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"]), num),
        st.builds(lambda m: {"multipleOf": m}, st.sampled_from([2, 3, 5, 10])),
        st.builds(lambda k, v: {k: v}, st.sampled_from(
            ["minLength", "maxLength", "minItems", "maxItems", "minProperties", "maxProperties"]),
            small),
        st.builds(lambda p: {"type": "string", "pattern": p},
                  st.sampled_from(["^a", "b$", "^[a-c]*$", "x", "^.{2}$"])),
        st.builds(lambda r: {"required": r}, st.lists(_NAMES, min_size=1, max_size=2, unique=True)),
    )


def _extend(child):
    return st.one_of(
        st.builds(lambda s: {"allOf": s}, st.lists(child, min_size=1, max_size=3)),
        st.builds(lambda s: {"anyOf": s}, st.lists(child, min_size=1, max_size=3)),
        st.builds(lambda s: {"oneOf": s}, st.lists(child, min_size=1, max_size=3)),
        st.builds(lambda s: {"not": s}, child),
        st.builds(lambda i, t, e: {"if": i, "then": t, "else": e}, child, child, child),
        st.builds(lambda p, r, ap: {"type": "object", "properties": p, "required": r,
                                    "additionalProperties": ap},
                  st.dictionaries(_NAMES, child, max_size=3),
                  st.lists(_NAMES, max_size=2, unique=True), st.one_of(st.booleans(), child)),
        st.builds(lambda p, u: {"properties": p, "unevaluatedProperties": u},
                  st.dictionaries(_NAMES, child, max_size=2), st.booleans()),
        st.builds(lambda i: {"type": "array", "items": i}, child),
        st.builds(lambda p, i: {"prefixItems": p, "items": i},
                  st.lists(child, min_size=1, max_size=2), st.one_of(st.booleans(), child)),
        st.builds(lambda c, lo, hi: {k: v for k, v in (("contains", c), ("minContains", lo),
                                                       ("maxContains", hi)) if v is not None},
                  child, st.one_of(st.none(), st.integers(0, 2)),
                  st.one_of(st.none(), st.integers(0, 3))),
        st.builds(lambda t, d: {"dependentSchemas": {t: d}}, _NAMES, child),
        st.builds(lambda t, n: {"dependentRequired": {t: n}}, _NAMES,
                  st.lists(_NAMES, max_size=2, unique=True)),
        st.builds(lambda k, p: {"type": "object", "propertyNames": k, "properties": p}, child,
                  st.dictionaries(_NAMES, child, max_size=2)),
        st.builds(lambda i, p, n: {"items": i, "prefixItems": p, "uniqueItems": True, "minItems": n},
                  child, st.lists(child, max_size=2), st.integers(0, 2)),
    )


SCHEMAS = st.recursive(_leaf(), _extend, max_leaves=8)


def _valid(schema, value) -> bool:
    return jsonschema.Draft202012Validator(schema).is_valid(value)


def _check_sound(schema, constraint, values, seed: int) -> None:
    rng = random.Random(seed)
    sampler = GrammarSampler(constraint, seed)
    texts = []
    for _ in range(12):
        try:
            text = sampler.sentence(max_depth=8).decode("utf-8")
        except (ValueError, IndexError, RecursionError):
            break  # an empty language has no sentence
        texts.append(text)
        assert accepts(constraint, text), (schema, text)
        assert _valid(schema, json.loads(text)), (schema, text)
    for text in texts:
        for _ in range(3):
            near = mutate(text, rng, '{}[],:"0123456789abcxyz -.e')
            if accepts(constraint, near):
                assert _valid(schema, json.loads(near)), (schema, near)
    for v in values:
        text = json.dumps(v, separators=(",", ":"))
        if accepts(constraint, text):
            assert _valid(schema, v), (schema, text)


@settings(**_SETTINGS)
@given(SCHEMAS, st.lists(_VALUES, max_size=8), st.integers(0, 2**16))
def test_random_schemas_are_sound(schema, values, seed):
    try:
        constraint = compile_json_schema(schema, BYTES, formats="annotation", time_budget=10)
    except ConstraintError:
        return
    _check_sound(schema, constraint, values, seed)


_KEYWORDS = ["type", "enum", "const", "minimum", "maxLength", "pattern", "required", "properties",
             "items", "prefixItems", "allOf", "anyOf", "oneOf", "not", "if", "contains",
             "additionalProperties", "dependentRequired", "$ref", "minContains", "format",
             "multipleOf", "uniqueItems", "propertyNames", "patternProperties", "$defs"]


@settings(**_SETTINGS)
@given(SCHEMAS, st.sampled_from(_KEYWORDS), _VALUES, st.integers(0, 2**16))
def test_malformed_schemas_raise_only_constraint_errors(schema, keyword, junk, seed):
    bad = dict(schema) if isinstance(schema, dict) else {}
    bad[keyword] = junk
    try:
        constraint = compile_json_schema(bad, BYTES, formats="annotation", time_budget=10)
    except ConstraintError:
        return
    try:
        jsonschema.Draft202012Validator.check_schema(bad)
    except jsonschema.SchemaError:
        # not a 2020-12 schema (Trellis also reads older drafts' forms, e.g. an
        # array of items): the oracle cannot judge it
        return
    _check_sound(bad, constraint, [], seed)
