"""Python types as constraints (``constrain.compile_type``), objects out of
``search.generate``, choices and OpenAI ``response_format``s."""

from __future__ import annotations

import dataclasses
import datetime
import enum
import json
import pickle
from typing import Annotated, Literal, Optional, Union

import pytest
from typing_extensions import TypedDict  # typing.TypedDict: Pydantic wants this one on Python < 3.12

pydantic = pytest.importorskip("pydantic")
from pydantic import BaseModel, ConfigDict, Field  # noqa: E402

import constrain  # noqa: E402
from constrain import SchemaError, SchemaTooComplexError, UnsupportedSchemaError  # noqa: E402
from byte_vocab import accepts, byte_vocabulary  # noqa: E402
from constrain.frontends.python_types import is_python_type, type_schema  # noqa: E402

BYTES = byte_vocabulary()


class Address(BaseModel):
    street: str = Field(max_length=40)
    country: Literal["UK", "US", "FR"]


class Cat(BaseModel):
    kind: Literal["cat"]
    indoor: bool


class Dog(BaseModel):
    kind: Literal["dog"]
    breed: str = Field(max_length=20)


class Person(BaseModel):
    name: str = Field(max_length=30)
    age: int = Field(ge=0, le=120)
    email: Optional[str] = Field(default=None, max_length=40)
    address: Address
    pet: Union[Cat, Dog] = Field(discriminator="kind")
    born: datetime.datetime
    skills: Annotated[list[Annotated[str, Field(max_length=20)]], Field(min_length=1, max_length=3)]


PERSON = ('{"name":"Ada","age":36,"address":{"street":"1 Loop St","country":"UK"},'
          '"pet":{"kind":"cat","indoor":true},"born":"1815-12-10T00:00:00Z","skills":["maths"]}')


def test_a_pydantic_model_is_closed_and_parses_back():
    c = constrain.compile_type(Person, BYTES)
    assert accepts(c, PERSON)
    person = constrain.parse_output(c, PERSON)
    assert isinstance(person, Person) and isinstance(person.pet, Cat)
    assert person.born == datetime.datetime(1815, 12, 10, tzinfo=datetime.timezone.utc)
    # invented keys are out, at every level; the constraints of the fields hold
    assert not accepts(c, PERSON.replace('"age":36', '"age":36,"street_number":4'))
    assert not accepts(c, PERSON.replace('"country":"UK"', '"country":"UK","zip":"x"'))
    assert not accepts(c, PERSON.replace('"age":36', '"age":130'))
    assert not accepts(c, PERSON.replace('"kind":"cat","indoor":true', '"kind":"dog","indoor":true'))
    assert not accepts(c, PERSON.replace('["maths"]', '[]'))


class _Note(BaseModel):
    text: str
    tags: dict[str, str]


@pytest.mark.parametrize("escapes", [r"\ud800", r"\udfff", r"a\ud83d", r"\ud83d\u0041", r"\ude00\ud83d",
                                     r"\ud83d\ude00", r"\uDBFF\uDFFF", r"\ud7ff\ue000"])
def test_a_str_is_what_pydantic_parses(escapes):
    """Every output parses back (Pydantic refuses a \\u escape of a lone
    surrogate, which Python's json would decode): an escaped surrogate only
    as half of a pair, in a field and in an open dict's values."""
    c = constrain.compile_type(_Note, BYTES)
    for text in ('{"text":"%s","tags":{}}' % escapes, '{"text":"","tags":{"k":"%s"}}' % escapes):
        try:
            parsed = constrain.parse_output(c, text)
        except pydantic.ValidationError:
            parsed = None
        assert accepts(c, text) == (parsed is not None), text


@pytest.mark.parametrize("pattern", [r"^\W+$", r"^[^\w]+$", r"^[^\w\s]+$", r"^\w+$", r"^\S+$", r"^\D+$"])
def test_a_pattern_means_no_more_than_pydantic_reads(pattern):
    """Pydantic checks a field's pattern with Rust's regex, whose \\w also
    holds the combining marks, the connector punctuation, the joiners and the
    circled letters: \\W admitted those (Python's \\W does), and Pydantic
    refused the output."""
    from pydantic import TypeAdapter

    tp = Annotated[str, Field(pattern=pattern)]
    adapter, c = TypeAdapter(tp), constrain.compile_type(tp, BYTES)
    sample = [*range(0x20, 0x400), 0x200C, 0x200D, 0x203F, 0xFE33, 0x24B6, 0x1F130, 0x1F600,
              0x2160, 0x0660, 0xE0100, 0x3000, 0x00A0, 0x1C]
    for cp in sample:
        text = json.dumps(chr(cp) * 2, ensure_ascii=False)
        if accepts(c, text):
            adapter.validate_json(text)  # raises if Pydantic refuses it


def test_open_on_request_and_models_that_say_what_they_want():
    assert accepts(constrain.compile_type(Address, BYTES, closed=False),
                   '{"street":"x","country":"UK","zip":"1"}')

    class Allow(BaseModel):
        model_config = ConfigDict(extra="allow")
        a: int

    class Forbid(BaseModel):
        model_config = ConfigDict(extra="forbid")
        a: int

    assert accepts(constrain.compile_type(Allow, BYTES), '{"a":1,"b":2}')
    assert not accepts(constrain.compile_type(Forbid, BYTES), '{"a":1,"b":2}')
    # a dict type says what its values are: untouched
    assert type_schema(dict[str, int])["additionalProperties"] == {"type": "integer"}
    # compile_json_schema of a model class is closed too; of its raw schema, open
    assert not accepts(constrain.compile_json_schema(Address, BYTES), '{"street":"x","country":"UK","z":1}')
    assert accepts(constrain.compile_json_schema(Address.model_json_schema(), BYTES),
                   '{"street":"x","country":"UK","z":1}')


@dataclasses.dataclass
class Point:
    x: int
    y: int


class Colour(enum.Enum):
    RED = "red"
    BLUE = "blue"


class Movie(TypedDict):
    title: str
    year: int


@pytest.mark.parametrize("tp, good, value, bad", [
    (Point, '{"x":1,"y":2}', Point(1, 2), '{"x":1}'),
    (Colour, '"red"', Colour.RED, '"green"'),
    (Movie, '{"title":"M","year":1927}', {"title": "M", "year": 1927}, '{"title":"M","year":1927,"x":1}'),
    (Literal["a", "b"], '"b"', "b", '"c"'),
    (list[int], "[1,2]", [1, 2], '[1,"2"]'),
    (Optional[int], "null", None, '"x"'),
    (tuple[int, str], '[1,"a"]', (1, "a"), '[1,"a",2]'),
])
def test_types_pydantic_takes(tp, good, value, bad):
    assert is_python_type(tp)
    c = constrain.compile_type(tp, BYTES)
    assert accepts(c, good) and not accepts(c, bad)
    assert constrain.parse_output(c, good) == value


def test_cached_pickled_and_errors():
    assert constrain.compile_type(Point, BYTES) is constrain.compile_type(Point, BYTES)
    out = pickle.loads(pickle.dumps(constrain.compile_type(Point, BYTES).output_type))
    assert out.parse('{"x":3,"y":4}') == Point(3, 4)
    for not_types in ({"type": "string"}, "int", 3, constrain.compile_regex("a", BYTES)):
        assert not is_python_type(not_types)

    class Strange:
        pass

    with pytest.raises(SchemaError, match="Pydantic"):
        constrain.compile_type(Strange, BYTES)
    with pytest.raises(ValueError, match="compile_type"):
        constrain.parse_output(constrain.compile_regex("a", BYTES), "a")


class _Letter(enum.Enum):
    A = "a"
    B = "b"


class _Tagged(BaseModel):
    tags: set[str]
    letters: set[_Letter] = set()
    groups: list[frozenset[int]] = []


def test_sets_compile_and_merge_duplicates_as_pydantic_does():
    """Pydantic writes uniqueItems for a set but merges duplicates when it
    validates; a ``set[str]`` field was refused (uniqueItems over strings).
    Enforced still where the items are a few values (an Enum's)."""
    c = constrain.compile_type(_Tagged, BYTES)
    for text, ok in (('{"tags":["x","x"]}', True), ('{"tags":[],"groups":[[1,1],[2]]}', True),
                     ('{"tags":[],"letters":["a","b"]}', True), ('{"tags":[],"letters":["a","a"]}', False)):
        assert accepts(c, text) == ok, text
        if ok:
            assert constrain.parse_output(c, text) == _Tagged.model_validate_json(text)
    with pytest.raises(UnsupportedSchemaError, match="uniqueItems"):
        constrain.compile_json_schema(type_schema(_Tagged), BYTES)


def test_choice():
    c = constrain.compile_choice(["yes", "no", "n/a (?)", "no"], BYTES)
    assert [accepts(c, t) for t in ("yes", "no", "n/a (?)", "ye", "yesno", "")] == [
        True, True, True, False, False, False]
    with pytest.raises(constrain.ConstraintError):
        constrain.compile_choice([], BYTES)
    with pytest.raises(constrain.ConstraintError, match=r"choices\[1\]"):
        constrain.compile_choice(["a", 2], BYTES)
    with pytest.raises(constrain.ConstraintError):
        constrain.compile_choice("yes", BYTES)


#: the examples of OpenAI's structured outputs guide
MATH_RESPONSE = {"type": "json_schema", "json_schema": {"name": "math_response", "strict": True, "schema": {
    "type": "object",
    "properties": {"steps": {"type": "array", "items": {
        "type": "object", "properties": {"explanation": {"type": "string"}, "output": {"type": "string"}},
        "required": ["explanation", "output"], "additionalProperties": False}},
        "final_answer": {"type": "string"}},
    "required": ["steps", "final_answer"], "additionalProperties": False}}}


def test_response_format():
    c = constrain.from_response_format(MATH_RESPONSE, BYTES)
    assert accepts(c, '{"steps":[{"explanation":"add","output":"2"}],"final_answer":"2"}')
    assert not accepts(c, '{"steps":[],"final_answer":"2","x":1}')
    assert constrain.from_response_format(json.dumps(MATH_RESPONSE), BYTES) is not None
    obj = constrain.from_response_format({"type": "json_object"}, BYTES)
    assert accepts(obj, '{"a":[1,{"b":null}]}') and not accepts(obj, "[1]")
    assert constrain.from_response_format({"type": "text"}, BYTES) is None
    with pytest.raises(SchemaError) as e:
        constrain.from_response_format({"type": "json_schema", "json_schema": {
            "name": "x", "strict": True, "schema": {"properties": {"a": {"enum": "x"}}}}}, BYTES)
    assert e.value.pointer == "/json_schema/schema/properties/a/enum"
    strict = {"type": "json_schema", "json_schema": {"name": "x", "strict": True,
                                                     "schema": {"type": "array", "uniqueItems": True}}}
    with pytest.raises(UnsupportedSchemaError) as e:
        constrain.from_response_format(strict, BYTES)
    assert e.value.pointer == "/json_schema/schema/uniqueItems"
    lenient = json.loads(json.dumps(strict))
    lenient["json_schema"]["strict"] = False
    with pytest.warns(UserWarning, match="at: /json_schema/schema/uniqueItems"):
        constrain.from_response_format(lenient, BYTES)
    # warnings name their places within the response format too, as errors do
    # (not past it: the same schema compiled on its own after)
    fmt = {"type": "json_schema", "json_schema": {"name": "x", "schema": {
        "type": "object", "properties": {"x": {"type": "string", "format": "byte"}}}}}
    with pytest.warns(constrain.UnenforcedFormatWarning,
                      match="'byte' at /json_schema/schema/properties/x/format"):
        constrain.from_response_format(fmt, BYTES)
    with pytest.warns(constrain.UnenforcedFormatWarning, match="'byte' at /properties/x/format"):
        constrain.compile_json_schema(fmt["json_schema"]["schema"], BYTES)
    for bad in ({"type": "xml"}, {"type": "json_schema"}, [], "{", {"type": "json_schema", "json_schema": {
            "schema": {}, "strict": "yes"}}):
        with pytest.raises(SchemaError):
            constrain.from_response_format(bad, BYTES)
    with pytest.raises(SchemaError, match="needs 'format'"):  # structural tags: see test_structural_tag
        constrain.from_response_format({"type": "structural_tag"}, BYTES)
    # OpenAI's field types (name 5 was taken); a budget error points inside too
    for key in ("name", "description"):
        with pytest.raises(SchemaError, match=f"json_schema.{key} must be a string") as e:
            constrain.from_response_format({"type": "json_schema", "json_schema": {
                key: 5, "schema": {}}}, BYTES)
        assert e.value.pointer == f"/json_schema/{key}"
    with pytest.raises(SchemaTooComplexError) as e:
        constrain.from_response_format({"type": "json_schema", "json_schema": {
            "name": "x", "schema": {"type": "string", "minLength": 100_000}}}, BYTES)
    assert e.value.pointer == "/json_schema/schema/minLength"
    # a null schema read as {"type": "text"}: no constraint at all
    with pytest.raises(SchemaError, match="not null") as e:
        constrain.from_response_format({"type": "json_schema", "json_schema": {
            "name": "x", "schema": None}}, BYTES)
    assert e.value.pointer == "/json_schema/schema"
    # bytes not UTF-8 and nesting past json's parser were a raw UnicodeDecodeError
    # and RecursionError
    with pytest.raises(SchemaError, match="not UTF-8"):
        constrain.from_response_format(b"\xff", BYTES)
    with pytest.raises(SchemaTooComplexError, match="nests too deeply"):
        constrain.from_response_format("[" * 100_000, BYTES)
    with pytest.raises(SchemaError, match="NaN is no JSON number"):
        constrain.from_response_format('{"type": "json_schema", "json_schema": {"schema": NaN}}',
                                       BYTES)


def test_generate_returns_validated_objects(lm):
    # the full Person, 10 samples: examples/pydantic_objects.py (docs/api.md)
    import search

    r = search.generate(lm, "Where does Ada live? Answer as JSON.", constraint=Address,
                        temperature=0.7, seed=0, max_new_tokens=80)
    assert r.finished, r.text
    assert isinstance(r.value, Address), (r.value_error, r.text)
    assert json.loads(r.text)["country"] == r.value.country
    free = search.generate(lm, "Hi", max_new_tokens=2)
    assert free.value is None and free.value_error is None
    cut = search.generate(lm, "Describe a person as JSON.", constraint=Person, max_new_tokens=3)
    assert cut.value is None and "not complete" in cut.value_error


def test_cli_response_format_and_choice(lm, tmp_path, capsys):
    from search.cli import app as cli

    rf = tmp_path / "rf.json"
    rf.write_text(json.dumps(MATH_RESPONSE))
    assert cli.main(["generate", "-q", "--response-format", str(rf), "--max-new-tokens", "12",
                     "What is 1+1? Answer as JSON."]) == 1  # cut off, but on the way
    assert capsys.readouterr().out.startswith('{"steps":[')
    assert cli.main(["generate", "-q", "--choice", "yes", "--choice", "no", "Is fire hot?"]) == 0
    assert capsys.readouterr().out.strip().splitlines()[-1] in ("yes", "no")
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"type": "json_schema", "json_schema": {"strict": True, "schema": {
        "type": "array", "uniqueItems": True}}}))
    assert cli.main(["generate", "--response-format", str(bad), "hi"]) == 2
    assert "/json_schema/schema/uniqueItems" in capsys.readouterr().err


class _TagDefault(BaseModel):
    t: Literal["a"] = "a"
    x: int


class _TagRequired(BaseModel):
    t: Literal["b"]
    y: str


class _HoldsTagged(BaseModel):
    item: Annotated[Union[_TagDefault, _TagRequired], Field(discriminator="t")]
    plain: _TagDefault


def test_a_discriminated_union_needs_its_tag():
    """Pydantic reads the tag before it picks a branch: a branch whose tag has a
    default left it out of ``required``, and ``{"x": 1}`` was accepted, which
    Pydantic refuses. The model used on its own keeps its default."""
    from pydantic import TypeAdapter

    c = constrain.compile_type(_HoldsTagged, BYTES)
    adapter = TypeAdapter(_HoldsTagged)
    for text in ('{"item":{"t":"a","x":1},"plain":{"x":2}}', '{"item":{"x":1},"plain":{"x":2}}',
                 '{"item":{"t":"b","y":"q"},"plain":{"t":"a","x":2}}',
                 '{"item":{"t":"b","x":1},"plain":{"x":2}}'):
        try:
            adapter.validate_json(text)
            valid = True
        except ValueError:
            valid = False
        assert accepts(c, text) == valid, text


def test_fields_named_like_keywords():
    """A field named ``properties`` was taken for an object schema and closed:
    the member ``additionalProperties`` became a declared field."""
    class Open(BaseModel):
        model_config = ConfigDict(extra="allow")
        properties: int
        enum: Optional[int] = None

    assert set(type_schema(Open)["properties"]) == {"properties", "enum"}
    c = constrain.compile_type(Open, BYTES)
    assert accepts(c, '{"properties":1,"additionalProperties":5}')
    assert accepts(c, '{"properties":1,"enum":2}') and not accepts(c, '{"properties":"x"}')


def test_new_types_and_aliases_are_types():
    """``NewType`` and ``TypeAliasType`` objects have no origin: they were passed
    on uncompiled, and a Matcher refused them."""
    from typing import NewType

    from typing_extensions import TypeAliasType

    user_id = NewType("UserId", int)
    ids = TypeAliasType("Ids", list[int])
    assert is_python_type(user_id) and is_python_type(ids)
    assert accepts(constrain.compile_type(user_id, BYTES), "12")
    assert accepts(constrain.compile_type(ids, BYTES), "[1,2]")


def test_what_pydantic_checks_beyond_its_schema_is_warned():
    """Pydantic's JSON Schema for these says less than it validates: the
    constraint lets through outputs that fail to parse, so it says so."""
    import decimal

    from pydantic import NaiveDatetime

    from constrain.frontends.python_types import unenforced

    class Gaps(BaseModel):
        by_id: dict[int, str]
        when: NaiveDatetime
        amount: decimal.Decimal

    gaps = unenforced(Gaps)
    assert len(gaps) == 3 and "dict keys of type int" in gaps[0]
    with pytest.warns(UserWarning, match="may still fail to parse.*dict keys of type int"):
        constrain.compile_type(dict[int, str], BYTES)
    assert unenforced(Address) == [] and unenforced(dict[str, int]) == []
