"""Structural tags: random walks under 20 specs are accepted by an independent
checker of the format's semantics (tests/structural_tag_oracle.py), and on
their mutations the constraint and the checker agree; errors name the place."""

from __future__ import annotations

import random

import pytest

import constrain
from byte_vocab import accepts, byte_vocabulary
from grammar_sampling import mutate
from structural_tag_oracle import StructuralTagOracle

CITY = {"type": "object", "properties": {"city": {"enum": ["Paris", "Oslo"]}},
        "required": ["city"], "additionalProperties": False}
COUNT = {"type": "object", "properties": {"n": {"type": "integer", "minimum": 0, "maximum": 99}},
         "required": ["n"], "additionalProperties": False}


def tag(begin, content, end):
    return {"type": "tag", "begin": begin, "content": content, "end": end}


def const(v):
    return {"type": "const_string", "value": v}


def text(**kw):
    return {"type": "any_text", **kw}


def schema(s):
    return {"type": "json_schema", "json_schema": s}


TOOLS = [tag("<f=city>", schema(CITY), "</f>"), tag("<f=count>", schema(COUNT), "</f>")]

SPECS = {
    "think_then_answer": {"type": "sequence", "elements": [tag("<think>", text(), "</think>"),
                                                           const("A:"),
                                                           {"type": "regex", "pattern": "[0-9]{1,3}"}]},
    "tools_auto": {"type": "triggered_tags", "triggers": ["<f="], "tags": TOOLS},
    "two_triggers_excludes": {"type": "triggered_tags", "triggers": ["<a>", "[b"],
                              "tags": [tag("<a>", text(), "</a>"), tag("[b]", schema(COUNT), "[/b]")],
                              "excludes": ["STOP"]},
    "tools_at_least_one": {"type": "triggered_tags", "triggers": ["<f="], "tags": TOOLS,
                           "at_least_one": True},
    "tools_stop_after_first": {"type": "triggered_tags", "triggers": ["<f="], "tags": TOOLS,
                               "stop_after_first": True},
    "tools_exactly_one": {"type": "triggered_tags", "triggers": ["<f="], "tags": TOOLS,
                          "at_least_one": True, "stop_after_first": True},
    "separated": {"type": "tags_with_separator", "tags": TOOLS, "separator": ","},
    "separated_one": {"type": "tags_with_separator", "tags": TOOLS, "separator": ",",
                      "at_least_one": True, "stop_after_first": True},
    "nested_tags": tag("<o>", {"type": "sequence", "elements": [
        text(), tag("<i>", text(), "</i>"), text()]}, "</o>"),
    "or_consts_regex": {"type": "or", "elements": [const("yes"), const("no"),
                                                   {"type": "regex", "pattern": "maybe [a-c]+"}]},
    "repeat_tags": {"type": "repeat", "min": 1, "max": 3,
                    "content": tag("<x>", {"type": "regex", "pattern": "[a-b]*"}, "</x>")},
    "star_const": {"type": "sequence", "elements": [{"type": "star", "content": const("ab")},
                                                    const(".")]},
    "plus_regex": {"type": "plus", "content": {"type": "regex", "pattern": "[0-9]+;"}},
    "optional_prefix_json": {"type": "sequence", "elements": [
        {"type": "optional", "content": const("Answer: ")}, schema(COUNT)]},
    "dispatch_loop": {"type": "dispatch", "rules": [["@c", schema(CITY)], ["@n", schema(COUNT)]]},
    "dispatch_once_excludes": {"type": "sequence", "elements": [
        {"type": "dispatch", "rules": [["@n", schema(COUNT)]], "loop": False, "excludes": ["END"]},
        const("END")]},
    "bounded_chars": tag("<s>", text(max_chars=5), "</s>"),
    "end_choices": tag("<a>", text(), ["</a>", "</b>"]),
    "reason_then_tools": {"type": "sequence", "elements": [
        tag("<think>", text(), "</think>"),
        {"type": "triggered_tags", "triggers": ["<f="], "tags": TOOLS}]},
    "tools_inside_tag": tag("<answer>", {"type": "triggered_tags", "triggers": ["<f="],
                                         "tags": TOOLS}, "</answer>"),
}
ALPHABET = "<>/=f{}\"abcity:PrisOlo0123456789,;.@ ABEDNTSnmx[]ehkow"


def markers(spec) -> list[str]:
    """A spec's fixed strings: begins, ends, triggers, constants, separators,
    dispatch patterns, excludes."""
    out = []
    if isinstance(spec, dict):
        for k, v in spec.items():
            if k in ("begin", "end", "value", "triggers", "separator", "excludes"):
                out += v if isinstance(v, list) else [v]
            elif k == "rules":
                out += [p for p, _ in v] + [m for _, g in v for m in markers(g)]
            else:
                out += markers(v)
    elif isinstance(spec, list):
        for v in spec:
            out += markers(v)
    return [m for m in out if m]


def walk(c, rng, strings=(), max_len=200):
    """A random byte walk to EOS (``None`` if it ran too long). A fifth of
    the steps try to write one of ``strings`` whole, so that walks reach tags
    and their ends."""
    eos = c.vocab.eos_token_ids[0]
    state, out = c.initial_state(), []
    while len(out) < max_len:
        if strings and rng.random() < 0.2:
            m = rng.choice(strings).encode()
            nxt = c.advance_bytes(state, m)
            if nxt is not None:
                state = nxt
                out += m
                continue
        allowed = [int(t) for t in c.allowed_token_ids(state)]
        ends = eos in allowed
        allowed = [t for t in allowed if t != eos]
        if ends and (not allowed or rng.random() < 0.15):
            return bytes(out).decode("utf-8")
        t = rng.choice(allowed)
        state = c.advance(state, t)
        assert state is not None
        out.append(t)
    return None


@pytest.fixture(scope="module")
def compiled():
    v = byte_vocabulary()
    return {name: constrain.compile_structural_tag(spec, v) for name, spec in SPECS.items()}


@pytest.mark.parametrize("name", sorted(SPECS))
def test_walks_are_accepted_and_mutations_agree(compiled, name):
    c, oracle = compiled[name], StructuralTagOracle(SPECS[name])
    rng = random.Random(name)
    finished = 0
    strings = markers(SPECS[name]) + ['{"city":"Oslo"}', '{"n":7}']
    for _ in range(12):
        s = walk(c, rng, strings)
        if s is None:
            continue
        finished += 1
        assert oracle(s), (name, s)
        assert accepts(c, s)
        for _ in range(6):
            m = mutate(s, rng, ALPHABET)
            assert accepts(c, m) == oracle(m), (name, s, m, oracle(m))
    assert finished >= 4, name


def test_hand_written_texts():
    v = byte_vocabulary()
    tools = constrain.compile_structural_tag({"type": "structural_tag", "format": SPECS["tools_auto"]}, v)
    assert accepts(tools, 'Let me check. <f=city>{"city":"Oslo"}</f> and <f=count>{"n":3}</f> done')
    assert accepts(tools, "no tools at all")
    assert not accepts(tools, 'x <f=city>{"city":"Rome"}</f>')  # the schema applies
    assert not accepts(tools, "x <f=weather>{}</f>")  # a trigger opens one of the tags only
    think = constrain.compile_structural_tag(SPECS["think_then_answer"], v)
    assert accepts(think, "<think>2 + 2 </thin k> is 4</think>A:4")
    assert not accepts(think, "<think>a</think>b</think>A:4")  # the tag ends at its first end
    # the legacy form (vLLM's structures/triggers)
    legacy = constrain.compile_structural_tag({
        "type": "structural_tag", "triggers": ["<f="],
        "structures": [{"begin": "<f=city>", "schema": CITY, "end": "</f>"}]}, v)
    assert accepts(legacy, 'hi <f=city>{"city":"Paris"}</f>')
    # a Lark grammar inside a tag, its %ignore allowed only inside it
    g = constrain.compile_structural_tag(tag("<sum>", {"type": "grammar", "grammar": (
        'start: NUMBER ("+" NUMBER)*\n%import common.NUMBER\n%import common.WS\n%ignore WS\n')},
        "</sum>"), v)
    assert accepts(g, "<sum>1 + 2+3</sum>") and accepts(g, "<sum> 1</sum>")
    assert not accepts(g, " <sum>1</sum>") and not accepts(g, "<sum>1+</sum>")
    gbnf = constrain.compile_structural_tag(tag("<yn>", {"type": "grammar", "grammar":
                                                         'root ::= ("yes" | "no") "!"?'}, "</yn>"), v)
    assert accepts(gbnf, "<yn>yes!</yn>") and not accepts(gbnf, "<yn>maybe</yn>")


def test_a_real_vocabulary_crosses_boundaries(smollm2_vocab, smollm2_tokenizer):
    """SmolLM2's tokens, which span a tag's begin, its content and its end."""
    spec = SPECS["reason_then_tools"]
    c = constrain.compile_structural_tag(spec, smollm2_vocab)
    oracle = StructuralTagOracle(spec)
    rng = random.Random(0)
    eos = smollm2_vocab.eos_token_ids[0]
    pieces = [smollm2_tokenizer.encode(m, add_special_tokens=False)
              for m in markers(spec) + ['{"city":"Oslo"}', " and then", '{"n":12}</f>']]
    done = 0
    for _ in range(10):
        state, ids = c.initial_state(), []
        while len(ids) < 80:
            if rng.random() < 0.3:
                piece = rng.choice(pieces)
                nxt = c.advance_many(state, piece)
                if nxt is not None:
                    state, ids = nxt, ids + piece
                    continue
            allowed = [int(t) for t in c.allowed_token_ids(state)]
            if eos in allowed and rng.random() < 0.2:
                break
            t = rng.choice([t for t in allowed if t != eos])
            state = c.advance(state, t)
            ids.append(t)
        else:
            continue
        text_ = smollm2_vocab.decode(ids).decode("utf-8")
        assert oracle(text_), text_
        done += "<f=" in text_
    assert done >= 2


@pytest.mark.parametrize("spec, error, pointer", [
    ({"type": "tag", "begin": "<a>", "content": {"type": "any_text"}, "end": ""},
     "StructuralTagError", "/end"),
    ({"type": "sequence", "elements": [{"type": "nope"}]}, "StructuralTagError", "/elements/0/type"),
    ({"type": "triggered_tags", "triggers": ["<f="], "tags": [tag("<g>", const("x"), "</g>")]},
     "StructuralTagError", "/tags/0/begin"),
    ({"type": "structural_tag", "format": {"type": "token", "token": "<|x|>"}},
     "UnsupportedStructuralTagError", "/format/type"),
    ({"type": "any_text", "max_tokens": -1}, "StructuralTagError", "/max_tokens"),
    ({"type": "any_text", "max_tokens": "5"}, "StructuralTagError", "/max_tokens"),
    (tag("<a>", schema({"type": "object", "properties": {"x": {"type": "nope"}}}), "</a>"),
     "SchemaError", "/content/json_schema/properties/x/type"),
    # a budget error of the schema too (it named /minLength, the schema's own)
    (tag("<a>", schema({"type": "string", "minLength": 100_000}), "</a>"),
     "SchemaTooComplexError", "/content/json_schema/minLength"),
    # and a pattern past max_repeat, found when its automaton is built (it named
    # the embedded terminal, json0__STRING_7)
    (tag("<a>", schema({"type": "string", "pattern": "^a{12000}$"}), "</a>"),
     "SchemaTooComplexError", "/content/json_schema/pattern"),
    ({"type": "structural_tag", "triggers": ["<f"],
      "structures": [{"begin": "<f>", "schema": {"type": "string", "pattern": "^a{12000}$"},
                      "end": "</f>"}]},
     "SchemaTooComplexError", "/structures/0/schema/pattern"),
    ({"type": "regex", "pattern": "(a"}, "StructuralTagError", "/pattern"),
    ({"type": "repeat", "min": 3, "max": 2, "content": const("a")}, "StructuralTagError", "/max"),
    ({"type": "repeat", "min": -1, "max": 2, "content": const("a")}, "StructuralTagError", "/min"),
    ({"type": "const_string"}, "StructuralTagError", ""),
    # the legacy form's errors name its structures, not the triggered_tags it
    # is read as (/tags/0/content/json_schema/type before)
    ({"type": "structural_tag", "triggers": ["<f"],
      "structures": [{"begin": "<f>", "schema": {"type": "nope"}, "end": "</f>"}]},
     "SchemaError", "/structures/0/schema/type"),
    ({"type": "structural_tag", "triggers": ["<f"],
      "structures": [{"begin": "<g>", "schema": {"type": "string"}, "end": "</g>"}]},
     "StructuralTagError", "/structures/0/begin"),
    # from a review against XGrammar 0.2.9: fields that asserted nothing, an
    # int32 overflow, an empty exclude dropped
    (tag("<a>", {"type": "json_schema", "json_schema": {"type": "string"}, "excludes": ["x"]},
         "</a>"), "UnsupportedStructuralTagError", "/content/excludes"),
    ({"type": "triggered_tags", "triggers": ["<f>"], "tags": [tag("<f>", const("x"), "</f>")],
      "stop_after_frist": True}, "StructuralTagError", "/stop_after_frist"),
    (tag("<a>", {"type": "const_string", "value": "x", "extra": 1}, "</a>"),
     "StructuralTagError", "/content/extra"),
    (tag("<a>", {"type": "any_text", "max_tokens": 2**31}, "</a>"), "StructuralTagError",
     "/content/max_tokens"),
    (tag("<a>", {"type": "any_text", "max_chars": -1}, "</a>"), "StructuralTagError",
     "/content/max_chars"),
    (tag("<a>", {"type": "any_text", "excludes": [""]}, "</a>"), "StructuralTagError",
     "/content/excludes/0"),
    ({"type": "grammar", "grammar": 'root ::= "a"', "syntax": "lark"}, "StructuralTagError",
     "/grammar"),
    ({"type": "grammar", "grammar": 'root ::= "a"', "syntax": "bnf"}, "StructuralTagError",
     "/syntax"),
])
def test_errors_name_the_place(spec, error, pointer):
    with pytest.raises(constrain.ConstraintError) as e:
        constrain.compile_structural_tag(spec, byte_vocabulary())
    assert type(e.value).__name__ == error or error in [k.__name__ for k in type(e.value).__mro__]
    assert e.value.pointer == pointer, e.value


def test_response_format_structural_tag():
    v = byte_vocabulary()
    c = constrain.from_response_format({"type": "structural_tag", "format": SPECS["tools_auto"]}, v)
    assert accepts(c, 'ok <f=count>{"n":1}</f>')
    with pytest.raises(constrain.SchemaError) as e:
        constrain.from_response_format({"type": "structural_tag", "format": {"type": "x"}}, v)
    assert e.value.pointer == "/format/type"


NOTHING = {"type": "regex", "pattern": "[^\\x00-\\U0010FFFF]"}


@pytest.mark.parametrize("spec", [
    {"type": "or", "elements": [NOTHING, {"type": "const_string", "value": "a"}]},
    {"type": "sequence", "elements": [{"type": "optional", "content": NOTHING},
                                      {"type": "const_string", "value": "a"}]},
])
def test_an_alternative_that_matches_nothing_is_only_left_out(spec):
    """As in a grammar (``start: "a" | /[^\\x00-\\U0010FFFF]/``): it was
    EmptyLanguageError with no pointer, for a tag that matches "a"."""
    g = constrain.compile_structural_tag(spec, byte_vocabulary())
    assert g.matches("a") and not g.matches("")


def test_a_tag_that_matches_nothing_says_so():
    from constrain.regular.regex import EmptyLanguageError

    with pytest.raises(EmptyLanguageError, match="structural tag matches no text"):
        constrain.compile_structural_tag(NOTHING, byte_vocabulary())
    # the formats that match nothing are named by pointer (there was none)
    spec = {"type": "structural_tag", "format": {"type": "sequence", "elements": [
        {"type": "const_string", "value": "a"}, {"type": "const_string", "value": "\ud800"}]}}
    with pytest.raises(EmptyLanguageError, match="/format/elements/1/value"):
        constrain.compile_structural_tag(spec, byte_vocabulary())
    spec = {"type": "structural_tag", "format": {"type": "tag", "begin": "<a>", "end": "</a>",
                                                 "content": NOTHING}}
    with pytest.raises(EmptyLanguageError, match="/format/content/pattern"):
        constrain.compile_structural_tag(spec, byte_vocabulary())


@pytest.mark.parametrize("options, error", [(dict(max_state=1), TypeError), (dict(foo=0), TypeError),
                                            (dict(whitespace="banana"), ValueError)])
def test_options_are_checked_without_a_json_schema_format(options, error):
    """A misspelled budget was dropped silently unless a json_schema format read
    the options."""
    with pytest.raises(error):
        constrain.compile_structural_tag({"type": "const_string", "value": "a"}, byte_vocabulary(),
                                         **options)


def test_xgrammar_fields_that_now_assert():
    """max_whitespace_cnt was ignored (compact JSON only); any_text max_chars
    above 1000 was refused, XGrammar's own example (4096) among them."""
    schema = {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}
    g = constrain.compile_structural_tag(
        {"type": "json_schema", "json_schema": schema, "max_whitespace_cnt": 1}, byte_vocabulary())
    assert g.matches('{"q": "ok"}') and g.matches('{"q":"ok"}') and not g.matches('{"q":  "ok"}')
    g = constrain.compile_structural_tag(
        {"type": "json_schema", "json_schema": schema, "max_whitespace_cnt": 0}, byte_vocabulary())
    assert g.matches('{"q":"ok"}') and not g.matches('{"q": "ok"}')
    g = constrain.compile_structural_tag(
        tag("<t>", {"type": "any_text", "excludes": ["</t>"], "max_chars": 1500}, "</t>"),
        byte_vocabulary())
    assert g.matches("<t>" + "a" * 1500 + "</t>") and not g.matches("<t>" + "a" * 1501 + "</t>")
    g = constrain.compile_structural_tag(
        {"type": "grammar", "grammar": 'start: "a"', "syntax": "lark"}, byte_vocabulary())
    assert g.matches("a")
