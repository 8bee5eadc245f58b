"""What the persistence and pickling tests share: constraints of every kind
over the byte vocabulary, and the check that two constraints give the same
masks along the same walks."""

from __future__ import annotations

import random

import numpy as np

import constrain
from byte_vocab import byte_vocabulary

#: a schema with an enum, a bounded string, a pattern, nesting and additional
#: properties (an exclusion terminal): most of the JSON Schema tables
SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 12},
        "age": {"type": "integer", "minimum": 0},
        "tags": {"type": "array", "items": {"enum": ["red", "green", "blue"]}, "maxItems": 3},
        "code": {"type": "string", "pattern": "^[A-Z]{2}[0-9]{1,3}$"},
        "extra": {"type": "object", "additionalProperties": {"type": "number"}},
    },
    "required": ["name"],
}
SCHEMA_TEXT = '{"name":"Ada","age":36,"tags":["red","blue"],"code":"AB12","extra":{"k":1.5}}'

GRAMMAR = r"""
start: expr
expr: expr "+" term | term
term: NUMBER | NAME | "(" expr ")"
NAME: /[a-z_][a-z0-9_]*/
%import common.NUMBER
%import common.WS
%ignore WS
"""
GRAMMAR_TEXT = "(a1 + 22) + x_y"

REGEX = r"[0-9]{1,3}(\.[0-9]+)?|[A-Z][a-z]*é"


def vocab():
    """The 256-byte test vocabulary."""
    return byte_vocabulary()


def constraints(v=None) -> dict:
    """One constraint of every kind over ``v`` (default: the byte
    vocabulary), by name, with a text each accepts."""
    v = v or vocab()
    regex = constrain.compile_regex(REGEX, v)
    return {
        "regex": (regex, "12.5"),
        "choice": (constrain.compile_choice(["yes", "no", "maybe"], v), "maybe"),
        "lark": (constrain.compile_grammar(GRAMMAR, v), GRAMMAR_TEXT),
        "json_schema": (constrain.compile_json_schema(SCHEMA, v), SCHEMA_TEXT),
        "response_format": (constrain.from_response_format(
            {"type": "json_schema", "json_schema": {"name": "p", "schema": SCHEMA}}, v),
            SCHEMA_TEXT),
        "reasoning": (constrain.with_reasoning(regex, "<t>", "</t>", max_tokens=12),
                      "<t>hm</t>Ab\u00e9"),
    }


def walk(constraint, seed: int, steps: int = 40, start=None) -> tuple[list, list]:
    """A random walk of ``steps`` allowed tokens from ``start`` (default: the
    initial state): the allowed ids before each step (and after the last) and
    the states met."""
    rng = random.Random(seed)
    eos = constraint.vocab.eos_token_set
    state = constraint.initial_state() if start is None else start
    masks, states = [], [state]
    for _ in range(steps):
        ids = constraint.allowed_token_ids(state)
        masks.append(ids)
        choices = [t for t in ids.tolist() if t not in eos]
        if not choices:
            break
        state = constraint.advance(state, rng.choice(choices))
        states.append(state)
    masks.append(constraint.allowed_token_ids(state))
    return masks, states


def same_walks(a, b, seeds=range(3), steps: int = 40) -> bool:
    """Whether ``a`` and ``b`` allow the same tokens, and accept alike, along
    the same random walks."""
    for seed in seeds:
        ma, sa = walk(a, seed, steps)
        mb, sb = walk(b, seed, steps)
        if len(ma) != len(mb) or not all(np.array_equal(x, y) for x, y in zip(ma, mb)):
            return False
        if [a.is_accepting(s) for s in sa] != [b.is_accepting(s) for s in sb]:
            return False
    return True


def bitmask_of(constraint, state) -> np.ndarray:
    """The bitmask row ``fill_bitmask`` writes for ``state``."""
    bm = constrain.allocate_bitmask(1, len(constraint.vocab), backend="numpy")
    constraint.fill_bitmask(state, bm, 0)
    return bm[0].copy()
