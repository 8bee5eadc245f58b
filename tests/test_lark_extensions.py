"""llguidance's Lark extensions (constrain/frontends/lark.py): ``%json { schema }``
items, ``%import common.*``, and the errors of special-token terminals (their
language: tests/test_token_refs.py).

The oracle of ``%json`` is the JSON Schema front end itself (a grammar that is
one ``%json`` is ``compile_json_schema(schema, whitespace="flexible")``), and
jsonschema on what is accepted; the oracle of ``common.*`` is importing each
terminal by name.
"""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

import jsonschema
import pytest

import constrain
from byte_vocab import accepts, byte_vocabulary
from constrain.errors import GrammarError
from grammar_sampling import GrammarSampler, mutate

CASES = Path(__file__).parent / "data" / "grammar_cases" / "llguidance_lark_cases.jsonl"


@pytest.fixture(scope="module")
def vocab():
    return byte_vocabulary()


def _json_cases():
    """llguidance's ``start: %json {...}`` cases with their strings (those whose
    x-guidance options Trellis has)."""
    out = []
    for line in CASES.read_text().splitlines():
        c = json.loads(line)
        if c["kind"] != "lark_str_test_many" or "%json" not in c["grammar"]:
            continue
        body = c["grammar"].strip()
        m = re.fullmatch(r"start:\s*%json\s*(\{.*\})", body, re.S)
        if m is None:
            continue
        try:
            schema = json.loads(m.group(1))
        except json.JSONDecodeError:
            continue  # a case of a malformed grammar
        if set(schema.get("x-guidance", {})) - {"lenient", "whitespace_flexible"}:
            continue
        out.append((body, schema, c["accept"] + c["reject"]))
    return out


JSON_CASES = _json_cases()


def test_json_cases_found():
    assert len(JSON_CASES) >= 6


@pytest.mark.parametrize("grammar, schema, strings", JSON_CASES,
                         ids=[f"case{i}" for i in range(len(JSON_CASES))])
def test_json_item_is_the_schema(grammar, schema, strings, vocab):
    g = constrain.compile_grammar(grammar, vocab)
    s = constrain.compile_json_schema(schema, vocab, whitespace="flexible")
    rng = random.Random(0)
    more = [mutate(x, rng, '"{}[]:,0123456789abc\\u ') for x in strings for _ in range(3)]
    for text in strings + more:
        assert accepts(g, text) == accepts(s, text), text
        if accepts(g, text):
            jsonschema.validate(json.loads(text), schema)


PERSON = {"type": "object", "properties": {"name": {"type": "string"},
                                           "age": {"type": "integer", "minimum": 0}},
          "required": ["name", "age"], "additionalProperties": False}


def test_json_inside_a_grammar(vocab):
    grammar = f'''
start: "people:" person ("," person)* "."
person: %json {json.dumps(PERSON, indent=2)}
'''
    g = constrain.compile_grammar(grammar, vocab)
    one = '{"name":"Ada","age":36}'
    assert accepts(g, f"people:{one}.")
    assert accepts(g, f'people:{one},{{ "name" : "Bo", "age" : 0 }}.')
    assert not accepts(g, 'people:{"name":"Ada"}.')
    assert not accepts(g, 'people:{"name":"Ada","age":-1}.')
    assert not accepts(g, f"people: {one}.")  # no %ignore: nothing between
    # the schema's own strings, sampled from the combined grammar, all validate
    sampler = GrammarSampler(g, 5)
    for _ in range(30):
        text = sampler.sentence(10).decode("utf-8", "replace")
        assert accepts(g, text)
        for part in re.findall(r"\{.*?\}(?=,|\.$)", text[len("people:"):]):
            jsonschema.validate(json.loads(part), PERSON)


def test_json_with_ignore(vocab):
    g = constrain.compile_grammar('''
%import common.WS
%ignore WS
start: "set" NAME "=" %json {"type": "array", "items": {"type": "integer"}} ";"
NAME: /[a-z]+/
''', vocab)
    assert accepts(g, "set x=[1,2];")
    assert accepts(g, "set  x = [1, 2] ;")  # WS ignored around the value; JSON's own inside
    assert accepts(g, "set x =\n[ 1 ]\n;")


def test_two_schemas_on_one_line_and_places_after_them(vocab):
    g = constrain.compile_grammar('start: %json {"const": 1} "+" %json {"const": 2}', vocab)
    assert accepts(g, "1+2") and not accepts(g, "2+1")
    # a multi-line schema: errors below it name their own lines
    text = 'start: a b\na: %json {\n  "type": "integer"\n}\nb: UNDEFINED_X\n'
    with pytest.raises(GrammarError) as info:
        constrain.compile_grammar(text, vocab)
    assert info.value.line == 5


def test_lenient_guidance_option(vocab):
    schema = {"type": "string", "x-guidance": {"lenient": True}, "format": "nonsense-format"}
    g = constrain.compile_grammar(f"start: %json {json.dumps(schema)}", vocab)
    assert accepts(g, '"x"')
    g = constrain.compile_grammar(
        'start: %json {"type": "array", "x-guidance": {"whitespace_flexible": false}}', vocab)
    assert accepts(g, "[1,2]") and not accepts(g, "[1, 2]")


@pytest.mark.parametrize("text, line, column, message", [
    ("start: FOO\nFOO: %json { }", 2, 6, "cannot be used in terminals"),
    ("start: %json {", 1, 15, "invalid JSON"),
    ('start: %json { foo', 1, 16, "invalid JSON"),
    ("start: %json []", 1, 8, "the schema cannot be compiled"),
    ('start: "a"\n  | %json {"type": "strin"}', 2, 5, "the schema cannot be compiled"),
    ('start: %json {"x-guidance": {"json_allowed_escapes": "nt"}}', 1, 8, "not supported"),
    ('start: "a" <|assistant|>', 1, 12, "is no token of the vocabulary"),
    ("start: <[1234]>", 1, 8, "outside the vocabulary"),
    ('x: "a"\nstart: x <[100-300]>*', 2, 10, "token id 300"),
    ('start: A\nA: "a" <[1]>', 2, 8, "cannot be used in terminals"),
    ('start: "a" <[1 2]>', 1, 12, "expected token ids"),
])
def test_errors_name_the_place(text, line, column, message, vocab):
    with pytest.raises(GrammarError, match=re.escape(message)) as info:
        constrain.compile_grammar(text, vocab)
    assert (info.value.line, info.value.column) == (line, column)


def test_look_alikes_in_strings_regexes_and_comments(vocab):
    g = constrain.compile_grammar(r'''
start: "<|x|>" /<\[1\]>/ "%json {}" // <|comment|> %json {
''', vocab)
    assert accepts(g, "<|x|><[1]>%json {}")


def _common_terminals() -> list[str]:
    import lark

    text = (Path(lark.__file__).parent / "grammars" / "common.lark").read_text()
    return re.findall(r"(?m)^([A-Z][A-Z_0-9]*)\s*(?:\.\d+)?\s*:", text)


@pytest.mark.parametrize("name", _common_terminals())
def test_import_common_star_is_every_terminal(name, vocab):
    star = constrain.compile_grammar(f"%import common.*\nstart: {name}", vocab)
    one = constrain.compile_grammar(f"%import common.{name}\nstart: {name}", vocab)
    rng = random.Random(name)
    sampler = GrammarSampler(one, 1)
    strings = [sampler.sentence().decode("latin-1") for _ in range(20)]
    strings += [mutate(s, rng, " \t\n\r0123456789.eE+-_aZ\"\\/*#") for s in strings]
    for s in strings:
        assert accepts(star, s) == accepts(one, s), s


def test_import_common_star_leaves_own_definitions(vocab):
    g = constrain.compile_grammar('%import common.*\nWS: "_"\nstart: INT WS INT', vocab)
    assert accepts(g, "1_2") and not accepts(g, "1 2")
    g = constrain.compile_grammar('%import common.*\n%import common (WS)\n%ignore WS\nstart: INT INT',
                                  vocab)
    assert accepts(g, "1 2")
