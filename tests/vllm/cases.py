"""The constraint kinds of the real-engine tests, each with its 32 prompts,
its spec for both routes and the independent check of an output (jsonschema,
``re.fullmatch``, lark, membership). Every kind bounds its outputs, so that a
constrained output always completes within the tests' token budget."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Callable

PERSON_SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "minLength": 1, "maxLength": 16},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
        "city": {"enum": ["Paris", "London", "Tokyo", "Lima"]},
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 8}, "maxItems": 3},
    },
    "required": ["name", "age", "city"],
    "additionalProperties": False,
}
PHONE_REGEX = r"\([0-9]{3}\) [0-9]{3}-[0-9]{4}"
ARITH_GRAMMAR = r"""
start: expr
expr: term (OP term)~0..3
term: NUMBER | "(" NUMBER OP NUMBER ")"
OP: "+" | "-" | "*"
NUMBER: /[0-9]{1,3}/
"""
CHOICES = ["positive", "negative", "neutral"]
WEATHER_ARGS = {"type": "object", "properties": {"city": {"enum": ["Paris", "London", "Tokyo"]},
                                                 "days": {"type": "integer", "minimum": 1,
                                                          "maximum": 7}},
                "required": ["city", "days"], "additionalProperties": False}
# exactly one Hermes-style tool call (bounded), after optional free text that
# may not open anything else
TOOL_TAG = {"type": "structural_tag", "format": {
    "type": "triggered_tags", "triggers": ["<tool_call>"], "at_least_one": True,
    "stop_after_first": True,
    "tags": [{"type": "tag", "begin": '<tool_call>{"name": "get_weather", "arguments": ',
              "content": {"type": "json_schema", "json_schema": WEATHER_ARGS},
              "end": "}</tool_call>"}]}}
NAMES = ["Ada", "Grace", "Alan", "Edsger", "Barbara", "Donald", "Frances", "John"]


@dataclass(frozen=True)
class Case:
    """One constraint kind: its prompts, its Trellis spec (logits-processor
    route), its vLLM ``StructuredOutputsParams`` fields (backend route) and
    ``check(text)``, which raises on an invalid output."""

    kind: str
    prompts: list[str]
    spec: dict
    structured: dict
    check: Callable[[str], None]


def _check_json_schema(text: str) -> None:
    import jsonschema

    jsonschema.validate(json.loads(text), PERSON_SCHEMA)


def _check_json_object(text: str) -> None:
    assert isinstance(json.loads(text), dict), text


def _check_regex(text: str) -> None:
    assert re.fullmatch(PHONE_REGEX, text), text


def _lark_parser():
    import lark

    return lark.Lark(ARITH_GRAMMAR, parser="earley")


def _check_grammar(text: str) -> None:
    _lark_parser().parse(text)


def _check_choice(text: str) -> None:
    assert text in CHOICES, text


def _check_structural_tag(text: str) -> None:
    import jsonschema

    m = re.fullmatch(r'<tool_call>(\{"name": "get_weather", "arguments": .*\})</tool_call>', text,
                     re.S)
    assert m, text
    call = json.loads(m.group(1))
    jsonschema.validate(call["arguments"], WEATHER_ARGS)


def _prompts(template: str) -> list[str]:
    return [template.format(name=NAMES[i % len(NAMES)], i=i) for i in range(32)]


CASES = [
    Case("json_schema",
         _prompts("Describe {name}, person number {i}, as a JSON object with name, age and city."),
         {"json_schema": PERSON_SCHEMA}, {"json": PERSON_SCHEMA}, _check_json_schema),
    # any JSON object is unbounded: the prompt shows a short one to copy
    Case("json_object",
         _prompts('Repeat this JSON object exactly: {{"name": "{name}", "id": {i}}}'),
         {"json_object": True}, {"json_object": True}, _check_json_object),
    Case("regex",
         _prompts("Write a US phone number for {name} (contact {i})."),
         {"regex": PHONE_REGEX}, {"regex": PHONE_REGEX}, _check_regex),
    Case("grammar",
         _prompts("Write a short arithmetic expression that {name} might compute (task {i})."),
         {"grammar": ARITH_GRAMMAR}, {"grammar": ARITH_GRAMMAR}, _check_grammar),
    Case("choice",
         _prompts("Is this review positive, negative or neutral? '{name} loved item {i}.'"),
         {"choice": CHOICES}, {"choice": CHOICES}, _check_choice),
    Case("structural_tag",
         _prompts("Call the get_weather tool for {name}'s trip number {i}."),
         {"structural_tag": TOOL_TAG}, {"structural_tag": json.dumps(TOOL_TAG)},
         _check_structural_tag),
]
CASES_BY_KIND = {c.kind: c for c in CASES}


def chat_prompts(tokenizer, prompts: list[str]) -> list[str]:
    """``prompts`` as the model's chat template renders a user turn."""
    return [tokenizer.apply_chat_template([{"role": "user", "content": p}], tokenize=False,
                                          add_generation_prompt=True) for p in prompts]
