"""Tests of :mod:`constrain.frontends.json_schema.compiler`: JSON Schema → Lark grammar text.

Lark (Earley, scannerless, POSIX terminal matching; see
``tests/json_schema_oracle.py``) parses the grammars, so these tests do not
depend on the grammar engine. Ground truth is ``jsonschema``.
"""

from __future__ import annotations

import gzip
import json
import os
import random
import re
import warnings
from decimal import Decimal

import jsonschema
import pytest

from constrain.errors import (EmptySchemaError, GrammarTooComplexError, SchemaError,
                              SchemaTooComplexError, UnenforcedFormatWarning,
                              UnsupportedSchemaError)
from constrain.frontends.json_schema import compile_json_schema, json_schema_to_lark, order_instance
from constrain.frontends.json_schema.formats import FORMATS
from constrain.frontends.json_schema.patterns import translate_pattern
from constrain.frontends.json_schema.number_ranges import decimal_range_regex, int_range_regex, nat_multiple_regex

from automata_testing import same_language
from byte_vocab import byte_vocabulary
from json_schema_oracle import accepts, lark_parser

DATA = os.path.join(os.path.dirname(__file__), "data", "maskbench", "subset.jsonl.gz")


def compact(x) -> str:
    return json.dumps(x, separators=(",", ":"), ensure_ascii=False)


def parser_for(schema, **kw):
    return lark_parser(json_schema_to_lark(schema, **kw))


def check(schema, good=(), bad=(), **kw):
    """Every text in ``good`` is accepted, every one in ``bad`` rejected; the
    texts' jsonschema verdicts agree (so the test data itself is right)."""
    p = parser_for(schema, **kw)
    v = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)(schema)
    for text in good:
        assert v.is_valid(json.loads(text)), f"test data: {text} is invalid"
        assert accepts(p, text), f"rejected valid {text}"
    for text in bad:
        try:
            valid = v.is_valid(json.loads(text))
        except json.JSONDecodeError:
            valid = False
        assert not accepts(p, text), f"accepted {'valid' if valid else 'invalid'} {text}"


# -- number ranges ---------------------------------------------------------------------

@pytest.mark.parametrize("lo", [None, -120, -9, -1, 0, 1, 7, 10, 99, 100, 101, 999])
@pytest.mark.parametrize("hi", [None, -100, -10, -1, 0, 9, 10, 55, 100, 1000, 1234])
def test_int_range_brute_force(lo, hi):
    rx = int_range_regex(lo, hi)
    for n in range(-1500, 1500):
        want = (lo is None or n >= lo) and (hi is None or n <= hi)
        got = rx is not None and re.fullmatch(rx, str(n)) is not None
        assert got == want, (lo, hi, n, rx)
    if rx is not None:
        for t in ("-0", "00", "01", "+1", "1.0", "", "1.", "\u0661", "1\u0663"):
            assert re.fullmatch(rx, t) is None


_DECIMALS = [Decimal(x) for x in ("-2.5", "-1", "-0.05", "0", "0.001", "0.5", "1", "1.25", "10")]


def _decimal_texts():
    out = set()
    for n in range(-1100, 1100, 3):
        out.add(str(n // 10))
        out.add(f"{n / 100:.2f}")
        out.add(f"{n / 1000:.3f}")
        out.add(f"{n / 10:.1f}")
    out = {t for t in out if not re.fullmatch(r"-0(\.0*)?", t)}
    # not JSON: a trailing dot, non-ASCII digits
    out |= {"1.", "0.", "-1.", "10.", "\u0661", "1\u0660", "0.\u0665", "\U0001d7e5"}
    return sorted(out)


_TEXTS = _decimal_texts()


@pytest.mark.parametrize("lo", _DECIMALS + [None])
@pytest.mark.parametrize("hi", _DECIMALS + [None])
def test_decimal_range_brute_force(lo, hi):
    for lo_x in (False, True):
        for hi_x in (False, True):
            for req in (False, True):
                rx = decimal_range_regex(lo, lo_x, hi, hi_x, fraction_required=req)
                for t in _TEXTS:
                    if not re.fullmatch(r"-?(0|[1-9][0-9]*)(\.[0-9]+)?", t, re.ASCII):
                        assert rx is None or re.fullmatch(rx, t) is None, (rx, t)
                        continue
                    v = Decimal(t)
                    want = ((lo is None or (v > lo if lo_x else v >= lo))
                            and (hi is None or (v < hi if hi_x else v <= hi))
                            and (not req or "." in t))
                    got = rx is not None and re.fullmatch(rx, t) is not None
                    assert got == want, (lo, lo_x, hi, hi_x, req, t, rx)


@pytest.mark.parametrize("m", [1, 2, 4, 5, 8, 10, 16, 20, 25, 50, 100, 125, 1000])
def test_multiple_regex_brute_force(m):
    rx = nat_multiple_regex(m)
    for n in range(1, 5000):
        assert (re.fullmatch(rx, str(n)) is not None) == (n % m == 0)
    assert nat_multiple_regex(3) is None and nat_multiple_regex(7) is None


@pytest.mark.parametrize("seed", range(40))
def test_not_in_set_brute_force(seed):
    """The regex of "any key but these" (additional properties) matches the
    canonical encoding of exactly the strings over the alphabet, of at least
    min_len characters, that are not among the names."""
    from itertools import product

    from constrain.frontends.json_schema.exclusions import not_in_set as _not_in_set

    rng = random.Random(seed)
    chars = "ab\"\\\n\x01é" if seed % 4 == 0 else "abé"
    names = sorted({"".join(rng.choice(chars) for _ in range(rng.randint(0, 3)))
                    for _ in range(rng.randint(0, 5))})
    min_len = seed % 2 if "" not in names else 0
    alphabet = None if seed % 3 else [(ord(c), ord(c)) for c in sorted(set(chars + "c"))]
    rx = _not_in_set(names, alphabet=alphabet, min_len=min_len)
    pat = re.compile(rx)
    pool = sorted(set(chars + "cz\"\n"))
    for n in range(5):
        for t in product(pool, repeat=n):
            s = "".join(t)
            over = alphabet is None or all(any(lo <= ord(c) <= hi for lo, hi in alphabet) for c in s)
            want = over and len(s) >= min_len and s not in names
            enc = json.dumps(s, ensure_ascii=False)[1:-1]
            assert bool(pat.fullmatch(enc)) == want, (names, min_len, s, rx)


def test_number_bounds_against_jsonschema():
    rng = random.Random(5)
    texts = ["0", "1", "-1", "0.5", "-0.5", "10", "9.99", "10.0", "10.000001", "2.5", "3",
             "-3", "0.1", "0.30000000000000004", "1e2", "100", "-100.5", "7", "0.0001"]
    texts += [str(rng.randint(-200, 200)) for _ in range(50)]
    texts += [f"{rng.uniform(-200, 200):.{rng.randint(1, 4)}f}" for _ in range(100)]
    texts = [t for t in texts if not re.fullmatch(r"-0(\.0*)?", t)]
    schemas = [
        {"type": "number", "minimum": 0, "exclusiveMaximum": 10},
        {"type": "number", "exclusiveMinimum": 0.1, "maximum": 100},
        {"type": "number", "exclusiveMinimum": 0},
        {"type": "integer", "minimum": -5.5, "maximum": 150},
        {"type": "integer", "exclusiveMinimum": 2, "exclusiveMaximum": 7.5},
        {"type": "number", "minimum": -100.25, "maximum": -0.5},
        {"type": "integer", "multipleOf": 5, "minimum": 0},
        {"type": "integer", "multipleOf": 3, "minimum": -30, "maximum": 30},
        {"type": "number", "multipleOf": 2},
        {"type": "number", "maximum": 10, "exclusiveMaximum": True, "minimum": 0,
         "$schema": "http://json-schema.org/draft-04/schema#"},
    ]
    for schema in schemas:
        p = parser_for(schema)
        v = jsonschema.validators.validator_for(schema)(schema)
        for t in texts:
            if accepts(p, t):
                assert v.is_valid(json.loads(t)), (schema, t)
            elif v.is_valid(json.loads(t)) and "e" not in t:
                # only integers-with-fraction are left out on purpose
                assert schema["type"] == "integer" or "multipleOf" in schema, (schema, t)


# -- strings ---------------------------------------------------------------------------

def test_float_multiple_of():
    # 0.01 is within 2^-54 of 1/100: integer texts up to 2^53/100 are exact, and
    # beyond the quotient is at least 2^52 (every float there is an integer);
    # texts with a fraction are decided as jsonschema decides them (0.07/0.01 is
    # not integral)
    check({"type": "number", "multipleOf": 0.01},
          good=["1", "0", "-2", "90071992547409", "99.99", "8.25", "100.0", "-12.5", "0.5",
                "12345.67", "150000.0", "-90071992547409.00", "90071992547410",
                "-123456789012345678901234567"],
          bad=["null", "0.07", "99.991", "1.005"])
    # 0.1 is not close enough to 1/10 for integers to be exact (3/0.1 is, 0.3/0.1 is not)
    check({"type": "number", "multipleOf": 0.1}, good=["3", "12.5", "99.9"],
          bad=["0.3", "0.7", "0.05", "12.25"])
    check({"type": "integer", "multipleOf": 0.1}, good=["3", "10"], bad=["12.5", "3.0"])
    check({"allOf": [{"multipleOf": 0.25}, {"multipleOf": 0.1}]},
          good=["0.5", "1", "2.5"], bad=["0.25", "0.1", "0.3"])
    check({"type": "number", "multipleOf": 0.01, "minimum": 0, "exclusiveMaximum": 1},
          good=["0.99", "0", "0.5"], bad=["1", "1.0", "-0.01", "-1"])


@pytest.mark.parametrize("m", [0.01, 0.1, 0.25, 0.3, 0.05, 0.001, 1.5])
@pytest.mark.parametrize("bounds", [(None, False, None, False), (0, False, 1000, True),
                                    (-7.5, True, 12.25, False)])
def test_float_multiple_regex_against_jsonschema(m, bounds):
    """Sound for every text; complete for texts with at most the digits of m's
    shortest text below the cap."""
    from constrain.frontends.json_schema.number_ranges import float_multiple_regex, multiple_digits

    lo, lo_x, hi, hi_x = bounds
    rx, cap = float_multiple_regex((m,), lo, lo_x, hi, hi_x, integers=True)
    r = re.compile(rx)
    d = multiple_digits(m)
    rng = random.Random(hash((m, bounds)) & 0xFFFF)
    ints = list(range(0, 100)) + [rng.randrange(cap) for _ in range(120)] + [cap - 1, cap, cap + 7]
    for i in ints:
        for sign in ("", "-"):
            texts = [f"{sign}{i}"]
            for length in range(1, d + 2):
                texts += [f"{sign}{i}.{rng.randrange(10 ** length):0{length}d}" for _ in range(6)]
            for t in texts:
                v = json.loads(t)
                q = v / m
                valid = int(q) == q and (lo is None or (v > lo if lo_x else v >= lo)) \
                    and (hi is None or (v < hi if hi_x else v <= hi))
                got = r.fullmatch(t) is not None
                if got:
                    assert valid, (m, bounds, t)
                elif (valid and i < cap and len(t.partition(".")[2]) <= d
                      and not (sign and v == 0)):
                    raise AssertionError(f"rejected valid {t} (m={m}, bounds={bounds})")


def test_string_escapes_and_controls():
    check({"type": "string"},
          good=[r'"a\"b"', r'"\\"', r'"\n\t\u00e9\/"', '"é😀"', r'"\ud83d\ude00"',
                r'"\uD7FF\uE000\uDBFF\uDFFF"'],
          bad=['"a\nb"', '"\\x"', '"abc', 'abc"', '"\\u12"'])


def _token_walk(c, ids) -> bool:
    """Whether ``c`` accepts the token ids ``ids``, checking at each step that
    the mask allows the token exactly when ``advance`` takes it."""
    state = c.initial_state()
    for t in ids:
        allowed = t in set(c.allowed_token_ids(state).tolist())
        nxt = c.advance(state, t)
        assert allowed == (nxt is not None), (ids, t)
        if nxt is None:
            return False
        state = nxt
    return c.is_accepting(state)


@pytest.mark.parametrize("lo, hi, text, valid", [
    (1, 1, r'"\ud83d\ude00"', True),
    (2, 2, r'"\ud83d\ude00\u00e9"', True),
    (0, 40, '"' + "a" * 38 + r'\ud83d\ude00b"', True),  # the pair near the bound
    (0, 40, '"' + "a" * 39 + r'\ud83d\ude00b"', False),
    (0, 40, '"' + "a" * 39 + r'\ud83d\ude00"', True),
    (40, None, '"' + "a" * 38 + r'\ud83d\ude00b"', True),
    (40, None, '"' + "a" * 37 + r'\ud83d\ude00b"', False),
    (0, 2048, '"' + r"\ud83d\ude00" * 3 + "x" * 2045 + '"', True),
    (0, 2048, '"' + r"\ud83d\ude00" * 3 + "x" * 2046 + '"', False),
    (1, 8, r'"\ud83d\u0041"', False),
    (1, 8, r'"\ud800x"', False),
])
def test_a_surrogate_pair_is_one_character_of_a_bounded_string(smollm2_vocab, smollm2_tokenizer,
                                                                lo, hi, text, valid):
    """Counted as Python's json decodes it (bounded strings refused every
    surrogate escape before), through the token-level constraint: SmolLM2's
    own tokens of the text and one byte a token."""
    import constrain

    schema = {"type": "string", "minLength": lo} | ({} if hi is None else {"maxLength": hi})
    # (a lone surrogate is valid to jsonschema, refused here: the strict side)
    lone = re.search(r"\\u[dD][89a-fA-F]", text.replace(r"\ud83d\ude00", "")) is not None
    assert jsonschema.Draft202012Validator(schema).is_valid(json.loads(text)) == (valid or lone)
    c = constrain.compile_json_schema(schema, smollm2_vocab)
    assert _token_walk(c, smollm2_tokenizer.encode(text, add_special_tokens=False)) == valid
    b = constrain.compile_json_schema(schema, byte_vocabulary())
    assert _token_walk(b, list(text.encode())) == valid


@pytest.mark.parametrize("text", [r'"\ud800"', r'"\udc00"', r'"a\udfffb"', r'"\ud83d\u0041"',
                                  r'"\ud83d\ud83d"', r'"\ude00\ud83d"', r'"\ud83d"', r'"\ud83d\n"'])
def test_lone_surrogate_escapes_are_refused(smollm2_vocab, text):
    """A \\u escape of a surrogate only as half of a pair, high then low:
    Python's json decodes a lone one into a str with no UTF-8 encoding, and
    Pydantic, serde_json and I-JSON refuse the text (a Pydantic str field was
    let through such an output)."""
    import constrain

    check({"type": "string"}, bad=[text])
    # an open object's values, through the token-level constraint too
    c = constrain.compile_json_schema({"type": "object"}, smollm2_vocab)
    assert not c.matches('{"k":%s}' % text)
    assert c.matches('{"k":%s}' % text.replace("\\u", "x"))
    # (additional names only in canonical encoding: the pair as UTF-8)
    assert c.matches('{"😀":"\\ud83d\\ude00"}')


def test_length_counts_code_points():
    schema = {"type": "string", "minLength": 2, "maxLength": 3}
    check(schema, good=['"ab"', '"abc"', r'"a\n"', '"😀😀"', r'"\u00e9x"'],
          bad=['"a"', '"abcd"', '"😀"', r'"\ud83d\ude00"'])
    # a surrogate pair written as escapes is one code point, as Python's json
    # decodes it (bounded strings refused every surrogate escape before); a
    # lone one is none
    check({"type": "string", "minLength": 2}, bad=[r'"\ud83d\ude00"'])
    check({"type": "string", "minLength": 1, "maxLength": 1},
          good=[r'"\ud83d\ude00"', r'"\uDBFF\uDFFF"', '"😀"', r'"\ud7ff"'],
          bad=[r'"\ud83d\ude00x"', r'"\ud800"', r'"\udc00"', r'"\ud83d\u0041"', r'"\ud83d"'])
    check({"type": "string", "maxLength": 3},
          good=[r'"\ud83d\ude00\u00e9x"', r'"a\ud83d\ude00b"'], bad=[r'"\ud83d\ude00\ud83d\ude00ab"'])


@pytest.mark.parametrize("pattern,good,bad", [
    ("^[a-z]+$", ["abc", "z"], ["", "aB", "a1", "abc\n"]),
    ("^\\d{3}-\\d{4}$", ["555-1234"], ["5551234", "55-1234", "٣٣٣-1234"]),
    ("ab", ["ab", "xaby", "\"ab\""], ["a", "ba"]),
    ("^a|b$", ["ax", "xb", "ab"], ["xa", "bx"]),
    ("^\\w+@\\w+\\.com$", ["a_b@c.com"], ["a@b.org", "@b.com"]),
    ('^"[^"]*"$', ['"q"', '""'], ['"a"b"', "q"]),
    ("^\\\\[a-z]$", ["\\x"], ["x", "\\\\x"]),
    ("(?i)^abc$", ["ABC", "aBc"], ["abd"]),
    ("^[^\\s]+$", ["abc", "a-b"], ["a b", "a\tb", ""]),
    ("^.{2}$", ["ab", "a\"", "a\\"], ["a", "abc", "a\n"]),
    ("^(\\+|-)?[0-9]+(\\.[0-9]*)?$", ["+1.5", "-3", "7."], ["1.2.3", "a"]),
])
def test_pattern_translation(pattern, good, bad):
    schema = {"type": "string", "pattern": pattern}
    p = parser_for(schema)
    for s in good:
        assert re.search(pattern, s)
        assert accepts(p, compact(s)), s
    for s in bad:
        # all invalid, except "abc\n": Python's $ matches before a final newline,
        # and the translation is stricter there
        assert not accepts(p, compact(s)), s


def test_pattern_random_strings_sound():
    rng = random.Random(1)
    alphabet = 'ab1 _-."\\\n\té'
    patterns = ["^[a-z0-9_-]{2,5}$", "a.b", "^(ab|1)*$", "[^a]", "^\\S+$", "^a?b+$", "\\d$",
                "^[\\w.]+$", "^(?:a|b\\.)+1?$"]
    for pat in patterns:
        for schema in ({"type": "string", "pattern": pat},
                       {"type": "string", "pattern": pat, "maxLength": 4}):
            try:
                p = parser_for(schema)
            except UnsupportedSchemaError:
                continue
            v = jsonschema.Draft202012Validator(schema)
            for _ in range(300):
                s = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 6)))
                if accepts(p, compact(s)):
                    assert v.is_valid(s), (pat, s)


def test_pattern_with_length_bound_folds_into_repetition():
    check({"type": "string", "pattern": "^[a-z]+$", "minLength": 2, "maxLength": 3},
          good=['"ab"', '"abc"'], bad=['"a"', '"abcd"', '"A1"'])
    # two repetitions share the length budget (sound; "aab" is refused)
    check({"type": "string", "pattern": "^a+b+$", "maxLength": 3},
          good=['"ab"', '"abb"'], bad=['"aabb"', '"aab"'])
    with pytest.raises(UnsupportedSchemaError) as e:
        json_schema_to_lark({"type": "string", "pattern": "^(ab)+$", "maxLength": 3})
    assert e.value.pointer == "/pattern"


@pytest.mark.parametrize("pattern", ["^.*@.*\\..*$", "^[a-z]+-[0-9]*$", "^a*b*c*$", "x[0-9]+",
                                     "^[a-c]*(?:-|_)[a-c]+$", "^(?:ab|cd)[0-9]*@?$"])
def test_pattern_with_min_length_is_exact(pattern):
    """A minLength beside a pattern whose repetitions could each take the
    missing characters: every string the pattern matches that is long enough
    is accepted, whichever repetitions it lengthens (``user@example.com``
    under ``^.*@.*\\..*$`` and ``minLength: 6`` was refused: the last
    ``.*`` had to take all four), and no shorter or non-matching one."""
    rng = random.Random(pattern)
    alphabet = "abcx0-_@.9"
    texts = ["user@example.com", "ab@cd.ef", "a@b.cdef", "abc-", "ab-123", "aabbcc", "x123456",
             "abc_abc", "cd012@", "ab9@", "ab", "cd0"]
    texts += ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 10))) for _ in range(400)]
    for n in (2, 4, 6, 7):
        schema = {"type": "string", "pattern": pattern, "minLength": n}
        p = parser_for(schema)
        for s in texts:
            want = bool(re.search(pattern, s)) and len(s) >= n
            assert accepts(p, compact(s)) == want, (pattern, n, s)


def test_pattern_with_a_huge_min_length_is_bounded():
    """The exact minLength construction counts its alternatives before it
    spells one: a minLength of ten million over three repetitions (or one)
    falls back to the shared budget at once, instead of looping per
    character."""
    import time

    for pattern in ("^.*@.*\\..*$", "^a*$", "^a*b$"):
        t0 = time.process_time()
        rx = translate_pattern(pattern, 10_000_000, None)
        assert time.process_time() - t0 < 1.0, pattern
        assert rx is not None and any(str(n) in rx for n in (9_999_998, 9_999_999, 10_000_000)), rx


@pytest.mark.parametrize("pattern", ["^(?=a)a$", "(a)\\1", "(?<!a)b", "\\bfoo\\b"])
def test_pattern_unsupported(pattern):
    with pytest.raises(UnsupportedSchemaError) as e:
        json_schema_to_lark({"properties": {"x": {"type": "string", "pattern": pattern}}})
    assert e.value.pointer == "/properties/x/pattern"


def test_translate_pattern_direct():
    rx = translate_pattern("^a\"b$")
    assert re.fullmatch(rx, 'a\\"b') and not re.fullmatch(rx, 'a"b')


@pytest.mark.parametrize("fmt,good,bad", [
    ("date-time", ["2024-02-29T23:59:59Z", "2024-01-01T00:00:00.5+05:30", "2024-01-01t10:00:00z",
                   "0001-01-01T00:00:00Z", "0400-02-29T00:00:00Z"],
     ["2024-13-01T00:00:00Z", "2024-01-01", "2024-04-31T00:00:00Z",
      # no year 0 (the checker refuses it; models write it as a placeholder)
      "0000-01-01T00:00:00Z", "0000-02-29T12:00:00Z", "1900-02-29T00:00:00Z"]),
    ("date", ["2024-12-31", "0001-01-01", "2000-02-29", "0004-02-29"],
     ["2024-1-1", "24-01-01", "2024-12-32", "0000-01-01", "0000-02-29", "2100-02-29"]),
    ("time", ["10:20:30Z", "23:59:59.999-01:00"], ["24:00:00Z", "10:20"]),
    ("email", ["a.b+c@example.com"], ["a@", "@b.com", "a b@c.d"]),
    ("uri", ["https://example.com/a?b=c#d", "urn:isbn:123", "http://[::1]:80/x"],
     ["example.com", "http://a b", "x:%zz", "http://example.com/{", "a:#?[b", "://"]),
    ("uri-reference", ["relative/path", "#frag", "//host/p", "https://e.com"], ["://", "a b", "%g0"]),
    ("uuid", ["123e4567-e89b-12d3-a456-426614174000"], ["123e4567e89b12d3a456426614174000"]),
    ("ipv4", ["192.168.0.1", "0.0.0.0"], ["256.1.1.1", "1.2.3", "01.2.3.4x"]),
    ("ipv6", ["::1", "2001:db8::8a2e:370:7334", "::ffff:192.0.2.1"], ["1:::2", "12345::"]),
    ("hostname", ["example.com", "a-b.c"], ["-a.com", "a..b", "a." * 127 + "a"]),
])
def test_formats(fmt, good, bad):
    p = parser_for({"type": "string", "format": fmt})
    for s in good:
        assert re.fullmatch(FORMATS[fmt], s), s
        assert accepts(p, compact(s)), s
    for s in bad:
        assert not accepts(p, compact(s)), s


def test_dates_agree_with_the_format_checker():
    """Every day of years around the edges of the Gregorian rules, as the
    format checker decides for ``date`` and ``date-time``."""
    import jsonschema

    checker = jsonschema.Draft202012Validator.FORMAT_CHECKER
    # date-time is checked only with jsonschema's format extras (rfc3339-validator)
    date_time = "date-time" in checker.checkers
    for year in [*range(0, 6), *range(96, 102), *range(396, 402), 1900, 2000, 2024, 2100, 9999]:
        for month in range(0, 14):
            for day in range(0, 33):
                s = f"{year:04d}-{month:02d}-{day:02d}"
                ours = re.fullmatch(FORMATS["date"], s) is not None
                assert ours == checker.conforms(s, "date"), s
                ours_dt = re.fullmatch(FORMATS["date-time"], s + "T01:02:03Z") is not None
                assert ours_dt == ours, s
                if date_time:
                    assert ours == checker.conforms(s + "T01:02:03Z", "date-time"), s


def test_unknown_format_is_an_annotation():
    with pytest.warns(UnenforcedFormatWarning, match="'color' at /format "):
        check({"type": "string", "format": "color"}, good=['"anything"'])


def test_formats_not_enforced_are_named():
    schema = {"type": "object", "properties": {
        "a": {"type": "string", "format": "uri-template"},
        "b": {"type": "string", "format": "date", "maxLength": 12},
        "c": {"type": "string", "format": "date"},
        "n": {"type": "integer", "format": "int32"},  # OpenAPI's: not enforced on numbers
        "d": {"type": ["string", "number"], "format": "date"}}}
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        g = json_schema_to_lark(schema)
    assert [x.category for x in w] == [UnenforcedFormatWarning]
    text = str(w[0].message)
    assert "'uri-template' at /properties/a/format" in text
    assert "'date' at /properties/b/format" in text
    assert "'int32' at /properties/n/format" in text
    assert "/properties/c/" not in text and "/properties/d/" not in text  # enforced (strings only)
    assert text.count("/properties/") == 3  # once per pointer
    p = lark_parser(g)
    assert accepts(p, '{"a":"{x}","b":"not a date","c":"2024-01-31"}')
    assert not accepts(p, '{"c":"not a date"}')
    # formats as annotations: nothing is meant to assert, nothing to warn of
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        json_schema_to_lark(schema, formats="annotation")
        json_schema_to_lark({"type": "string", "format": "date-time"})


def test_formats_filter_enum_and_const_values():
    # jsonschema's check of an enum value asserts no format: the values a
    # format rejects are left out here, or the format is named as unenforced
    schema = {"type": "object", "properties": {
        "d": {"enum": ["2024-02-29", "2023-02-29", "soon", 7], "format": "date"},
        "e": {"anyOf": [{"const": "a@b.example"}, {"const": "nobody"}], "format": "email"},
        "t": {"enum": ["{x}", "y"], "format": "uri-template"},
        "n": {"enum": [1, 2], "format": "uri-template"}}}  # no string for it to judge
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        p = lark_parser(json_schema_to_lark(schema))
    assert [x.category for x in w] == [UnenforcedFormatWarning]
    text = str(w[0].message)
    assert "'uri-template' at /properties/t/format" in text and "/properties/n/" not in text
    assert accepts(p, '{"d":"2024-02-29","e":"a@b.example","t":"y","n":2}')
    assert accepts(p, '{"d":7}')  # a format asserts on strings only
    for bad in ('{"d":"2023-02-29"}', '{"d":"soon"}', '{"e":"nobody"}'):
        assert not accepts(p, bad), bad
    with pytest.raises(EmptySchemaError):
        json_schema_to_lark({"const": "soon", "format": "date"})
    # formats as annotations keep every value
    p = lark_parser(json_schema_to_lark(schema, formats="annotation"))
    assert accepts(p, '{"d":"soon","e":"nobody"}')


# -- structure ---------------------------------------------------------------------------

def test_object_order_required_and_additional():
    schema = {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "string"}},
              "required": ["b"]}
    check(schema, good=['{"b":"x"}', '{"a":1,"b":"x"}', '{"a":1,"b":"x","c":[1,{"d":null}]}',
                        '{"b":"x","":0}'],
          bad=['{}', '{"a":1}', '{"b":"x","a":1}', '{"b":"x","b":"y"}', '{"a":1.5,"b":""}'])
    check({**schema, "additionalProperties": False}, good=['{"b":""}'], bad=['{"b":"","c":1}'])
    check({**schema, "additionalProperties": {"type": "boolean"}},
          good=['{"b":"","c":true,"d":false}'], bad=['{"b":"","c":1}'])


@pytest.mark.parametrize("sub", [{}, True, {"description": "anything"}, {"$ref": "#/$defs/free"},
                                 {"allOf": [{}, {"title": "t"}]}, {"anyOf": [{}, {"type": "string"}]}])
def test_unconstrained_value_is_the_shared_any_value(sub):
    schema = {"type": "object", "properties": {"a": sub, "b": {"type": "integer"}},
              "required": ["a"], "$defs": {"free": {"title": "free"}}}
    text = json_schema_to_lark(schema)
    # "a" reads through the shared any-value rules, not a per-type copy of them
    assert "array_" not in text and "object_" in text
    check(schema, good=['{"a":null}', '{"a":[1,{"x":[]}],"b":2}', '{"a":{"":"s"}}', '{"a":-1.5e3}'],
          bad=['{"a":1,"b":"x"}', '{"b":1}', '{"a":[1,]}', '{"a":{1:2}}'])


def test_plain_object_and_array_are_the_shared_rules():
    schema = {"type": "object", "properties": {"o": {"type": "object"}, "a": {"type": "array", "items": {}},
                                               "m": {"type": "object", "minProperties": 1},
                                               "n": {"type": "array", "maxItems": 1}}}
    text = json_schema_to_lark(schema)
    assert "KEY_" in text and " any_object " in text and " any_array " in text
    # own rules only for n, m and the top object
    assert len(re.findall(r"^array_\d+:", text, re.M)) == 1
    assert len(re.findall(r"^object_\d+:", text, re.M)) == 2
    check(schema, good=['{"o":{"k":[1]},"a":[{},[]],"m":{"":0},"n":[{}]}', '{"o":{}}', '{"a":[]}'],
          bad=['{"o":[]}', '{"a":{}}', '{"m":{}}', '{"n":[1,2]}', '{"o":{"k"}}'])


def test_constrained_neighbours_of_an_unconstrained_node_still_bite():
    # a $ref next to constraints, and a conjunction of a free node with a typed one
    check({"$defs": {"free": {}}, "$ref": "#/$defs/free", "type": "integer"},
          good=['1', '-20'], bad=['"x"', '1.5', 'null'])
    check({"allOf": [{"description": "d"}, {"type": "array", "maxItems": 1}]},
          good=['[]', '[{}]'], bad=['[1,2]', '{}'])
    check({"not": {"required": ["x"]}, "type": "object"}, good=['{}', '{"y":1}'],
          bad=['{"x":1}'])


def test_pattern_properties():
    schema = {"type": "object", "properties": {"id": {"type": "integer"}},
              "patternProperties": {"^x-": {"type": "string"}}, "additionalProperties": False}
    check(schema, good=['{"id":1,"x-a":"v"}', '{"x-":""}'],
          bad=['{"id":1,"y":"v"}', '{"x-a":1}', '{"x-a":"v","id":1}'])


def test_class_pattern_properties_next_to_declared():
    check({"type": "object", "properties": {"basic": {"type": "string"}},
           "patternProperties": {"^[a-zA-Z0-9_]*$": {"type": ["string", "integer"]}},
           "additionalProperties": False},
          good=['{"basic":"x","o":1}', '{"zz":"s"}', '{"basics":1,"basi":2}'],
          bad=['{"basic":1}', '{"basic":"x","basic":"y"}', '{"o":null}', '{"a-b":1}'])


def test_one_of_with_a_non_object_branch():
    check({"oneOf": [{"type": "object", "properties": {"a": {}}, "required": ["a"]},
                     {"type": "object", "properties": {"b": {}}, "required": ["b"]},
                     {"type": "null"}]},
          good=['{"a":1}', '{"b":1}', "null"], bad=['{"a":1,"b":2}', "{}"])


def test_pattern_properties_with_distinct_prefixes():
    check({"type": "object", "properties": {"foo": {"type": "string"}},
           "patternProperties": {"^S_": {"type": "string"}, "^I_": {"type": "integer"}},
           "additionalProperties": False},
          good=['{"foo":"bar","S_foo":"string","I_foo":123}'],
          bad=['{"S_x":1}', '{"I_x":"s"}', '{"x":1}'])
    # overlapping patterns: a member must satisfy the schemas of the patterns
    # its key matches, and only those
    check({"type": "object", "patternProperties": {"^a": {"type": "integer"}, "b$": {"minimum": 3}},
           "additionalProperties": False},
          good=['{"ab":3}', '{"a":5}', '{"a":2}', '{"b":"s"}', '{"b":30}'],
          bad=['{"ab":2}', '{"ab":"s"}', '{"b":2}', '{"x":1}'])


def test_arrays_prefix_items_and_counts():
    check({"type": "array", "items": {"type": "boolean"}, "minItems": 2, "maxItems": 3},
          good=["[true,false]", "[true,true,true]"], bad=["[]", "[true]", "[true,true,true,true]"])
    check({"type": "array", "prefixItems": [{"type": "integer"}, {"type": "string"}],
           "items": False}, good=["[]", "[1]", '[1,"a"]'], bad=['[1,"a",2]', '["a"]'])
    check({"$schema": "http://json-schema.org/draft-07/schema#", "type": "array",
           "items": [{"type": "integer"}], "additionalItems": {"type": "string"}},
          good=['[1,"a","b"]', "[1]"], bad=["[1,2]"])
    check({"type": "array", "minItems": 1}, good=["[1]", '[{"a":[]}]'], bad=["[]"])


def test_big_counts_stay_linear():
    g = json_schema_to_lark({"type": "array", "items": {"type": "integer"}, "maxItems": 500})
    assert len(g) < 100_000 and g.count("\n") < 1100
    # Earley on a 500-rule chain is slow in Lark; check the bound on a smaller one
    p = parser_for({"type": "array", "items": {"type": "integer"}, "minItems": 3, "maxItems": 40})
    assert accepts(p, compact(list(range(40)))) and accepts(p, "[1,2,3]")
    assert not accepts(p, compact(list(range(41)))) and not accepts(p, "[1,2]")


def test_whitespace_flexible_is_capped():
    schema = {"type": "object", "properties": {"a": {"type": "array"}}}
    p = parser_for(schema, whitespace="flexible", max_whitespace=2)
    assert accepts(p, '{ "a" : [ 1 , 2 ] }')
    assert accepts(p, '{\n "a":[]}')
    assert not accepts(p, '{\n  "a":[]}')
    assert accepts(p, '{  }')
    assert not accepts(p, '{   "a":[]}')
    assert not accepts(p, ' {"a":[]}')
    c = parser_for(schema)
    assert not accepts(c, '{ "a":[]}')


def test_enum_const_are_exact():
    check({"enum": ["a", 1, None, {"x": [1]}, 2.5]},
          good=['"a"', "1", "null", '{"x":[1]}', "2.5"], bad=["2", '"b"', "true"])
    check({"type": "string", "enum": ["a", 1, "bb"], "maxLength": 1},
          good=['"a"'], bad=['"bb"', "1"])
    check({"const": "x\"y"}, good=['"x\\"y"'], bad=['"xy"'])


def test_enum_value_jsonschema_cannot_check_is_named():
    # a sibling keyword jsonschema fails on (Python's re has no named groups
    # spelled (?<x>...)): which enum values it admits is unknown, so strict
    # compiles refuse at its pointer, and strict=False drops the values
    # (narrowing, never widening) and says so when nothing is left
    schema = {"enum": ["ab", "cd"], "allOf": [{"pattern": "(?<x>a)"}]}
    with pytest.raises(UnsupportedSchemaError) as e:
        json_schema_to_lark(schema)
    assert e.value.pointer == "/allOf/0"
    assert "jsonschema cannot check" in str(e.value) and '"ab"' in str(e.value)
    with pytest.raises(UnsupportedSchemaError, match=r"strict=False set aside .* /allOf/0"):
        json_schema_to_lark(schema, strict=False)
    # what the checkable keywords decide stays (jsonschema itself cannot judge
    # this schema's data: no oracle here)
    with pytest.warns(UserWarning, match="/anyOf/1"):
        p = parser_for({"enum": ["ab", 1], "anyOf": [{"type": "integer"}, {"pattern": "(?<x>a)"}]},
                       strict=False)
    assert accepts(p, "1") and not accepts(p, '"ab"') and not accepts(p, "2")


def test_enum_values_checked_without_jsonschema_keep_their_type():
    # enum values are checked against the conjunction's other enum/const/type
    # nodes by the translator itself (not jsonschema): each check must still hold
    check({"type": "string", "enum": ["a", 1, True, None, "b"], "propertyOrder": 3},
          good=['"a"', '"b"'], bad=["1", "true", "null"])
    check({"allOf": [{"enum": [1, "x", 2.5, False]}, {"type": ["integer", "boolean"]}]},
          good=["1", "false"], bad=['"x"', "2.5"])
    check({"allOf": [{"enum": ["a", "b", "c"]}, {"const": "b", "title": "t"}]},
          good=['"b"'], bad=['"a"', '"c"'])
    # an integral float is an integer from draft 6 on, not in draft 4
    check({"$schema": "http://json-schema.org/draft-04/schema#",
           "allOf": [{"enum": [1.0, 2]}, {"type": "integer"}]}, good=["2"], bad=["1.0"])
    check({"allOf": [{"enum": [1.0, "s"]}, {"type": "integer"}]}, good=["1.0"], bad=['"s"'])
    # oneOf branches told apart by their enums and types
    check({"oneOf": [{"type": "string", "enum": ["a", "b"]}, {"enum": ["c", 3]}]},
          good=['"a"', '"c"', "3"], bad=['"d"', "4"])
    # enum values checked against combinators of such nodes (decided without
    # jsonschema too): exactly one oneOf branch, any anyOf branch, not
    check({"enum": ["x", "y", "z", 1],
           "oneOf": [{"enum": ["x", "y"]}, {"enum": ["y", "z"]}, {"type": "integer"}]},
          good=['"x"', '"z"', "1"], bad=['"y"'])
    check({"enum": ["x", "y", 2], "anyOf": [{"const": "x"}, {"type": "integer"}]},
          good=['"x"', "2"], bad=['"y"'])
    check({"enum": ["x", "y", 2], "allOf": [{"type": "string"}, {"not": {"const": "y"}}]},
          good=['"x"'], bad=['"y"', "2"])
    check({"enum": ["x", "y"], "example": "x", "oneOf": [{"enum": ["x"]}, {"enum": ["y"]}]},
          good=['"x"', '"y"'], bad=['"z"'])


def test_any_of_one_of_all_of():
    check({"anyOf": [{"type": "string"}, {"type": "integer", "minimum": 5}]},
          good=['"s"', "5"], bad=["4", "null"])
    check({"oneOf": [{"type": "string"}, {"type": "integer"}]}, good=['"x"', "3"], bad=["3.5"])
    check({"allOf": [{"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]},
                     {"properties": {"b": {"type": "string"}}, "required": ["b"]}]},
          good=['{"a":1,"b":""}'], bad=['{"a":1}', '{"a":"1","b":""}'])
    check({"allOf": [{"type": "number", "minimum": 0}, {"type": "integer", "maximum": 3}]},
          good=["0", "3"], bad=["4", "-1", "1.5"])
    check({"allOf": [{"properties": {"a": {}}, "additionalProperties": False},
                     {"properties": {"b": {}}}]},
          good=['{"a":1}'], bad=['{"b":1}'])


def test_one_of_overlapping_required_sets_made_exclusive():
    schema = {"type": "object", "properties": {"r": {"type": "number"}, "l": {"type": "number"},
                                               "w": {"type": "number"}},
              "oneOf": [{"required": ["r"]}, {"required": ["l", "w"]}]}
    check(schema, good=['{"r":1}', '{"l":1,"w":2}', '{"r":1,"l":2}'],
          bad=['{"r":1,"l":1,"w":2}', "{}", '{"l":1}'])


def test_one_of_required_sets_only_between_branches_that_overlap():
    """Two branches told apart by an enum that require the same names
    (GeoJSON's Point and LineString) and a third overlapping both (GeoJSON's
    Feature, whose "type" lost its enum to a typo, ``emum``): required sets
    separate the third from each of the two, never the two from each other,
    which emptied both (MaskBench Github_trivial o63308 refused its valid
    instances)."""
    def branch(name, member):
        return {"type": "object", "required": ["t", member],
                "properties": {"t": {"type": "string", **({"enum": [name]} if name else {})},
                               member: {"type": "integer"}}}

    check({"oneOf": [branch("P", "c"), branch("L", "c"), branch(None, "g")]},
          good=['{"t":"P","c":1}', '{"t":"L","c":1}', '{"t":"Z","g":1}', '{"t":"P","g":1}'],
          bad=['{"t":"P","c":1,"g":2}', '{"t":"Z","c":1}', "{}"])
    # the third requires all the first two do: no required set tells it from
    # them, so each branch excludes the others by their complements (exact);
    # before, every branch was emptied ("the schema admits no JSON value")
    check({"oneOf": [branch("P", "c"), branch("L", "c"), branch(None, "c")]},
          good=['{"t":"Z","c":1}', '{"t":"p","c":-3}'],
          bad=['{"t":"P","c":1}', '{"t":"L","c":1}', '{"t":"Z"}', '{"c":1}'])


def test_one_of_required_sets_that_empty_a_branch_only_without_complements():
    """The second branch requires every name the first does, and the first
    has no complement (a pattern): nothing exact can be stated, so the
    required sets still separate them, emptying the second (strict: its
    values with a name not matching the pattern are valid, and refused)."""
    schema = {"type": "object", "oneOf": [
        {"required": ["a"], "properties": {"a": {"type": "string", "pattern": "^x"}}},
        {"required": ["a", "b"]}]}
    check(schema, good=['{"a":"x1"}', '{"a":"xy","c":2}'],
          bad=['{"a":"x","b":1}', '{"a":"y"}', "{}"])
    p = parser_for(schema)
    assert not accepts(p, '{"a":"y","b":1}')  # valid (the second branch alone): the strict side


def test_one_of_told_apart_by_anchored_patterns():
    """JSend's success / fail / error, told apart by "status" patterns
    anchored on different literals and requiring the same names: proven
    disjoint by the patterns' literal prefixes, so each branch compiles
    exactly; before, required sets emptied success and fail (MaskBench
    Github_medium o71265-o71267)."""
    def branch(status, member):
        return {"required": ["status", member],
                "properties": {"status": {"type": "string", "pattern": f"^{status}$"}, member: {}}}

    check({"type": "object", "oneOf": [branch("success", "data"), branch("fail", "data"),
                                       branch("error", "message")]},
          good=['{"status":"success","data":1}', '{"status":"fail","data":null}',
                '{"status":"error","message":"x"}', '{"status":"error","message":"x","data":2}'],
          bad=['{"status":"succes","data":1}', '{"status":"error","data":1}', '{"data":1}'])


def test_one_of_untyped_branches_and_discriminator():
    # strings match both branches (invalid): dropped; objects are told apart by yesNo
    check({"oneOf": [{"properties": {"e": {"type": "null"}, "yesNo": {"enum": [False]}}},
                     {"properties": {"yesNo": {"enum": [True]}}, "required": ["yesNo", "e"]}]},
          good=["{}", '{"yesNo":false}', '{"yesNo":true,"e":3}'], bad=['"s"', '{"yesNo":true}', "3"])
    # no required sets: the member whose schemas differ is forced present
    check({"type": "object", "oneOf": [
        {"properties": {"type": {"enum": ["callback"]}, "value": {"type": "string"}}},
        {"properties": {"type": {"enum": ["field", "value"]}}}]},
        good=['{"type":"callback"}', '{"type":"field","value":3}'], bad=["{}", '{"type":"x"}'])


def test_one_of_overlap_refused_under_strict():
    schema = {"oneOf": [{"type": "string", "pattern": "^a"}, {"type": "string", "minLength": 2}]}
    with pytest.raises(UnsupportedSchemaError) as e:
        json_schema_to_lark(schema)
    assert e.value.pointer == "/oneOf"
    with pytest.warns(UserWarning, match="/oneOf"):
        json_schema_to_lark(schema, strict=False)


def test_one_of_beside_unevaluated_properties_is_not_proven_disjoint_by_it():
    # with both branches matching, "all" is evaluated by the first: the root's
    # unevaluatedProperties does not separate the branches (both match: invalid)
    check({"oneOf": [{"required": ["all"], "unevaluatedProperties": True},
                     {"required": ["a"], "properties": {"a": True}}],
           "unevaluatedProperties": False},
          good=['{"all":1}', '{"a":1}', '{"all":1,"b":2}'], bad=['{"all":1,"a":1}', '{"a":1,"all":1}', "{}"])


def test_not_required_lets_each_name_appear_alone():
    """``not: {required: [a, b]}``: an object may carry either name, not both.
    The names were kept out of the object altogether (MaskBench Github_trivial
    o91408, W3C Web Annotation, refused ``{"body": ...}``); now they are
    optional members with the schemas an additional member of that name has."""
    check({"type": "object", "not": {"required": ["body", "bodyValue"]}},
          good=["{}", '{"body":1}', '{"bodyValue":"x"}', '{"body":{"type":"T"},"id":"a"}'],
          bad=['{"body":1,"bodyValue":2}', '{"bodyValue":1,"body":2}'])
    check({"type": "object", "additionalProperties": {"type": "integer"},
           "not": {"required": ["a", "b"]}},
          good=['{"a":1}', '{"b":2,"c":3}'], bad=['{"a":"x"}', '{"a":1,"b":2}', '{"c":"x"}'])
    check({"type": "object", "additionalProperties": False, "properties": {"a": {}},
           "not": {"required": ["a", "b"]}},
          good=["{}", '{"a":1}'], bad=['{"b":1}', '{"a":1,"b":2}'])


def test_not_integer_among_numbers():
    # the numbers with a non-integral value (at most 9 + 6 digits, no exponent)
    check({"not": {"type": "integer"}}, good=["1.5", "-0.25", '"a"', "null", "999999999.000001"],
          bad=["1", "-3", "0", "1.0"])
    check({"oneOf": [{"type": "integer"}, {"type": "number", "minimum": 0}]},
          good=["-2", "1.5", "0.001"], bad=["2", "0", "-1.5"])
    check({"type": "number", "not": {"type": "integer"}, "minimum": 2, "exclusiveMaximum": 3.5},
          good=["2.5", "3.25"], bad=["2", "3", "1.5", "3.5", "3.75"])
    check({"if": {"type": "integer"}, "then": {"minimum": 3}, "else": {"type": "number"}},
          good=["3", "2.5"], bad=["1", "true"])


def test_dependencies_and_not_required():
    check({"type": "object", "properties": {"a": {}, "b": {}}, "dependentRequired": {"a": ["b"]}},
          good=['{"b":1}', '{"a":1,"b":2}', "{}"], bad=['{"a":1}'])
    check({"type": "object", "properties": {"a": {}, "b": {}}, "not": {"required": ["a", "b"]}},
          good=['{"a":1}', "{}"], bad=['{"a":1,"b":2}', "3"])
    check({"type": "object", "properties": {"a": {}, "b": {}, "c": {}},
           "not": {"anyOf": [{"required": ["a", "b"]}, {"required": ["a", "c"]}]}},
          good=["{}", '{"a":1}', '{"b":1,"c":1}'], bad=['{"a":1,"b":1}', '{"a":1,"c":2}'])
    check({"type": "object", "properties": {"a": {"type": "integer"}, "b": {}},
           "dependencies": {"a": {"required": ["b"]}}},
          good=["{}", '{"b":1}', '{"a":1,"b":2}'], bad=['{"a":1}'])
    check({"not": {"type": ["string", "null"]}}, good=["1", "[]"], bad=['"s"', "null"])


def test_not_enum_is_cut_out():
    check({"type": "integer", "minimum": 1024, "maximum": 65535, "not": {"enum": [6379, 6380]}},
          good=["1024", "6378", "6381", "65535"], bad=["6379", "6380", "1023"])
    check({"type": "number", "not": {"enum": [1, 2.5]}},
          good=["0", "1.5", "2.4", "3", "-7"], bad=["1", "2.5", "1.0"])
    check({"type": "string", "not": {"enum": ["intramural"]}},
          good=['"a"', '"intramurals"', '""'], bad=['"intramural"'])
    check({"not": {"type": "string", "enum": ["CAN", "MEX"]}},
          good=['"USA"', "1", "null"], bad=['"CAN"'])


def test_catch_all_pattern_properties_next_to_declared():
    check({"type": "object", "properties": {"basic": {"type": "string"}},
           "patternProperties": {"^[a-zA-Z0-9_]*": {"type": ["string", "integer"]}},
           "additionalProperties": False},
          good=['{"basic":"x","o":1}', '{"zz":"s"}'],
          bad=['{"basic":1}', '{"basic":"x","basic":"y"}', '{"o":null}'])


def test_min_length_one_with_pattern_is_exact():
    check({"type": "string", "pattern": "^[a-z]*[-]?[a-z]*$", "minLength": 1},
          good=['"a-b"', '"-"', '"ab"', '"a-"'], bad=['""', '"a--b"'])


def test_recursion_and_refs():
    schema = {"$defs": {"node": {"type": "object", "properties": {
        "v": {"type": "integer"}, "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}}},
        "required": ["v"], "additionalProperties": False}}, "$ref": "#/$defs/node"}
    g = json_schema_to_lark(schema)
    check(schema, good=['{"v":1}', '{"v":1,"kids":[{"v":2,"kids":[{"v":3}]},{"v":4}]}'],
          bad=['{"v":1,"kids":[{}]}', '{"v":1,"kids":[{"v":"x"}]}'])
    # the recursion is a rule cycle, not an unrolling
    assert g.count("KEY") < 20
    check({"type": "object", "properties": {"next": {"$ref": "#"}}, "additionalProperties": False},
          good=['{"next":{"next":{}}}'], bad=['{"next":1}'])
    check({"definitions": {"a/b": {"type": "integer"}, "c~d": {"type": "string"}},
           "properties": {"x": {"$ref": "#/definitions/a~1b"}, "y": {"$ref": "#/definitions/c~0d"}}},
          good=['{"x":1,"y":"s"}'], bad=['{"x":"s"}', '{"y":1}'])


def test_ref_inside_nested_resource_is_relative_to_it():
    check({"properties": {"a": {"$id": "http://x/a.json", "definitions": {"t": {"type": "integer"}},
                                "properties": {"b": {"$ref": "#/definitions/t"}}}},
           "definitions": {"t": {"type": "string"}}},
          good=['{"a":{"b":1}}'], bad=['{"a":{"b":"s"}}'])


def test_errors_name_pointers():
    with pytest.raises(SchemaError) as e:
        json_schema_to_lark({"properties": {"a": {"$ref": "#/$defs/missing"}}})
    assert e.value.pointer.startswith("/properties/a")
    with pytest.raises(UnsupportedSchemaError) as e:
        json_schema_to_lark({"type": "array", "items": {"type": "string", "not": {"pattern": "a"}}})
    assert e.value.pointer == "/items/not/pattern"
    with pytest.raises(UnsupportedSchemaError) as e:
        json_schema_to_lark({"type": "array", "uniqueItems": True})
    assert e.value.pointer == "/uniqueItems"
    with pytest.raises(UnsupportedSchemaError) as e:
        json_schema_to_lark({"type": "number", "multipleOf": 0.1234567})  # no short text
    assert e.value.pointer == "/multipleOf"
    with pytest.raises(SchemaError):
        json_schema_to_lark("{not json")
    with pytest.raises(UnsupportedSchemaError):
        json_schema_to_lark(False)


@pytest.mark.parametrize("schema,pointer", [
    ({"not": {"properties": {"a": {"enum": [{"x": 1}]}}}}, "/not/properties/a/enum"),
    ({"properties": {"b": {"not": {"properties": {"a": {"const": [1]}}}}}},
     "/properties/b/not/properties/a/const"),
    ({"not": {"anyOf": [{"properties": {"a": {"enum": [{"x": 1}]}}}, {"type": "string"}]}},
     "/not/anyOf/0/properties/a/enum"),
    ({"not": {"allOf": [{"properties": {"a": {"enum": [{"x": 1}]}}}, {"minLength": 2}]}},
     "/not/allOf/0/properties/a/enum"),
    ({"not": {"not": {"not": {"properties": {"a": {"enum": [{"x": 1}]}}}}}},
     "/not/not/not/properties/a/enum"),
    ({"not": {"items": {"enum": [{"x": 1}]}}}, "/not/items/enum"),
    ({"not": {"dependentSchemas": {"a": {"properties": {"b": {"enum": [{"x": 1}]}}}}}},
     "/not/dependentSchemas/a/properties/b/enum"),
    ({"if": {"properties": {"a": {"enum": [[1]]}}}, "then": True, "else": {"type": "object"}},
     "/if/properties/a/enum"),
    ({"oneOf": [{"enum": [{"a": 1}, 2]}, {"type": "object"}]}, "/oneOf"),
])
def test_errors_inside_complements_name_the_users_pointer(schema, pointer):
    """A keyword refused inside a schema the translator wrote (the complement
    of a ``not`` or ``if``, the exclusions of overlapping ``oneOf`` branches) is
    named by the pointer of the user's keyword it was made from, never by the
    generated schema's own ``@n<k>/...``; so are the keywords ``strict=False``
    ignores."""
    with pytest.raises(UnsupportedSchemaError) as e:
        json_schema_to_lark(schema)
    assert e.value.pointer == pointer
    assert f"at {pointer} (JSON pointer)" in str(e.value)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        json_schema_to_lark(schema, strict=False)
    assert [str(x.message).rsplit(" at: ", 1)[1] for x in w] == [pointer]


@pytest.mark.parametrize("schema,pointer,what", [
    ({"properties": {"a": {"type": "string", "minLength": 5000}}},
     "/properties/a/minLength", "minLength 5000 .*max_string_length"),
    ({"allOf": [{"minItems": 3}, {"minItems": 2000}], "type": "array"},
     "/allOf/1/minItems", "minItems 2000 .*max_array_length"),
    # the complement's strings longer than 5000 characters
    ({"not": {"properties": {"a": {"type": "string", "maxLength": 5000}}}},
     "/not/properties/a/maxLength", "minLength 5001 .*max_string_length"),
    ({"$defs": {"s": {"type": "string", "minLength": 5000}},
      "properties": {"a": {"$ref": "#/$defs/s"}}}, "/$defs/s/minLength", "minLength 5000"),
])
def test_a_lower_bound_past_the_cap_names_its_keyword(schema, pointer, what):
    """A minLength/minItems above max_string_length/max_array_length cannot be
    lowered (that would admit shorter values): the refusal names the keyword's
    pointer, the one the user wrote where the bound comes from a complement."""
    with pytest.raises(SchemaTooComplexError, match=f"{what}.* at {re.escape(pointer)} "
                                                    r"\(JSON pointer\)") as e:
        json_schema_to_lark(schema)
    assert e.value.pointer == pointer and isinstance(e.value, GrammarTooComplexError)


def test_translation_budgets_are_refused_at_a_pointer():
    """The translation's own budgets (time, alternatives after distributing
    anyOf over allOf) raise SchemaTooComplexError, a GrammarTooComplexError
    with the pointer of the part being translated."""
    with pytest.raises(SchemaTooComplexError, match=r"time budget.* at / \(JSON pointer\)") as e:
        json_schema_to_lark({"properties": {"a": {"type": "string"}}}, time_budget=0)
    assert e.value.pointer == ""
    wide = {"anyOf": [{"type": "integer", "minimum": i} for i in range(40)]}
    with pytest.raises(SchemaTooComplexError, match="more than 256 alternatives") as e:
        json_schema_to_lark({"properties": {"x": {"allOf": [wide, wide, wide]}}})
    assert e.value.pointer.startswith("/properties/x"), e.value.pointer


def test_integers_past_the_float_range_are_refused_or_compiled_not_a_crash():
    """json reads 10**400 exactly: as a bound it was an OverflowError in the
    well-formedness check, as an excluded value (not/const) in the number
    ranges. Now a far bound is refused at its keyword like 1e300, a far
    maximum is lowered to the cap as ever, and the complement of a 400-digit
    integer is written out (its integer range then refused as too complex by
    the compile, a typed error)."""
    with pytest.raises(UnsupportedSchemaError) as e:
        json_schema_to_lark({"minimum": 10**400})
    assert e.value.pointer == "/minimum" and "1.00e+400" in str(e.value)
    check({"type": "integer", "maximum": 10**400}, good=["5", "-3"], bad=["2.5"])
    assert "NUMBER" in json_schema_to_lark({"not": {"const": 10**400}})
    assert "NUMBER" in json_schema_to_lark({"type": "number", "not": {"enum": [-10**400, 1]}})
    with pytest.raises(GrammarTooComplexError):
        compile_json_schema({"not": {"const": 10**400}}, byte_vocabulary())


def test_non_strict_warns_once_listing_pointers():
    schema = {"type": "object", "properties": {"a": {"type": "array", "uniqueItems": True},
                                               "b": {"not": {"pattern": "x"}}}}
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        g = json_schema_to_lark(schema, strict=False)
    assert len(w) == 1
    assert "/properties/a/uniqueItems" in str(w[0].message)
    assert "/properties/b/not/pattern" in str(w[0].message)
    assert accepts(lark_parser(g), '{"a":[1,1]}')


def test_annotations_ignored_silently():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        json_schema_to_lark({"title": "t", "description": "d", "examples": [1], "default": 2,
                             "$comment": "c", "deprecated": True, "readOnly": True,
                             "x-custom": {"if": 1}, "type": "integer"})


def test_size_limit():
    schema = {"anyOf": [{"anyOf": [{"type": "integer", "minimum": i}, {"type": "string"}]}
                        for i in range(3)]}
    json_schema_to_lark(schema)
    deep = {"allOf": [{"anyOf": [{"minimum": j}, {"maximum": j}]} for j in range(12)]}
    with pytest.raises(GrammarTooComplexError):
        json_schema_to_lark(deep)


def test_pydantic_model_and_json_string():
    pydantic = pytest.importorskip("pydantic")

    class Item(pydantic.BaseModel):
        name: str
        price: float
        tags: list[str] = []

    g = json_schema_to_lark(Item)
    p = lark_parser(g)
    assert accepts(p, '{"name":"x","price":1.5,"tags":["a"]}')
    assert not accepts(p, '{"name":"x"}')
    # a model that ignores unknown fields is compiled closed; its raw schema is open
    assert not accepts(p, '{"name":"x","price":1.5,"colour":"red"}')
    open_p = lark_parser(json_schema_to_lark(json.dumps(Item.model_json_schema())))
    assert accepts(open_p, '{"name":"x","price":1.5,"colour":"red"}')


def test_terminals_never_empty_and_names_deterministic():
    schema = {"type": "object", "properties": {"a": {"type": "string", "maxLength": 0},
                                               "b": {"type": "array", "maxItems": 0}}}
    g1, g2 = json_schema_to_lark(schema), json_schema_to_lark(schema)
    assert g1 == g2
    p = lark_parser(g1)
    assert accepts(p, '{"a":"","b":[]}')


def test_compile_json_schema_passes_options(monkeypatch):
    import constrain.frontends.json_schema.compiler

    seen = {}

    def grammar_constraint(ir, vocab, *, source="", **budget):
        seen.update(ir=ir, source=source, vocab=vocab, budget=budget)
        return "compiled"

    monkeypatch.setattr(constrain.frontends.json_schema.compiler, "GrammarConstraint", grammar_constraint)
    out = compile_json_schema({"type": "integer"}, "VOCAB", whitespace="flexible",
                              time_budget=3.0)
    assert out == "compiled" and seen["vocab"] == "VOCAB"
    # the translation's time is taken out of the budget the grammar compiler gets
    assert set(seen["budget"]) == {"time_budget"} and 2.0 < seen["budget"]["time_budget"] <= 3.0
    assert any(t.name.startswith("INT") for t in seen["ir"].terminals) and not seen["ir"].exclusions
    # "any other key" is a stand-in terminal defined by its exclusion, which a
    # grammar that lost the definition could not match at all
    compile_json_schema({"type": "object", "properties": {"a": {}, "ab": {}}}, "VOCAB")
    (name, (base, prefixes)), = seen["ir"].exclusions.items()
    assert prefixes == (b'"a"', b'"ab"') and base.endswith('":')
    (term,) = [t for t in seen["ir"].terminals if t.name == name]
    assert re.search(term.pattern, '"a"') is None and "trellis_exclusion_" in term.pattern


@pytest.mark.parametrize("options, error", [
    (dict(max_string_length=-1), "max_string_length must be positive"),
    (dict(max_array_length=2.5), "max_array_length must be a positive integer"),
    (dict(whitespace="flexible", max_whitespace=2.5), "max_whitespace must be a positive integer"),
    (dict(max_whitespace=True), "max_whitespace must be a positive number"),
    (dict(strict="no"), "strict must be True or False"),
])
def test_translation_options_are_checked(options, error):
    """-1 was read as a cap ('minLength 0 exceeds the supported -1'), 2.5 was
    floored, True read as 1, strict='no' as strict."""
    with pytest.raises(ValueError, match=error):
        json_schema_to_lark({"type": "string", "maxLength": 5}, **options)


def test_order_instance():
    schema = {"type": "object", "properties": {"b": {"type": "object", "properties": {
        "y": {}, "x": {}}}, "a": {}}}
    inst = {"z": 1, "a": 2, "b": {"x": 1, "y": 2}}
    assert list(order_instance(schema, inst)) == ["b", "a", "z"]
    assert list(order_instance(schema, inst)["b"]) == ["y", "x"]


# -- MaskBench subset ----------------------------------------------------------------------

def _maskbench_rows():
    with gzip.open(DATA, "rt") as f:
        return [json.loads(line) for line in f]


def _format_checker():
    checker = jsonschema.FormatChecker()
    for name, rx in FORMATS.items():
        c = re.compile(rx)
        checker.checks(name)(lambda s, c=c: not isinstance(s, str) or c.fullmatch(s) is not None)
    return checker


def _mutations(value, rng, n):
    """Small random edits of a JSON value: a leaf replaced by another type or
    value, a member dropped or added, an array element dropped or duplicated."""
    leaves = [None, True, 0, -1, 2.5, "", "x", "2024-01-01", [], {}]

    def paths(v, prefix=()):
        yield prefix
        if isinstance(v, dict):
            for k, x in v.items():
                yield from paths(x, prefix + (k,))
        elif isinstance(v, list):
            for i, x in enumerate(v):
                yield from paths(x, prefix + (i,))

    all_paths = list(paths(value))
    out = []
    for _ in range(n):
        v = json.loads(json.dumps(value))
        path = rng.choice(all_paths)
        parent, key = None, None
        cur = v
        for k in path:
            parent, key, cur = cur, k, cur[k]
        op = rng.randrange(4)
        if op == 0 or parent is None:
            new = rng.choice(leaves)
            if parent is None:
                v = new
            else:
                parent[key] = new
        elif op == 1:
            del parent[key]
        elif op == 2 and isinstance(cur, dict):
            cur[rng.choice(["extra", "id", "name", "type"])] = rng.choice(leaves)
        elif isinstance(parent, list):
            parent.insert(key, cur)
        out.append(v)
    return out


@pytest.mark.parametrize("row", _maskbench_rows() if os.path.exists(DATA) else [],
                         ids=lambda r: r["id"])
def test_maskbench_subset(row):
    schema = row["schema"]
    grammar = json_schema_to_lark(schema)
    p = lark_parser(grammar)
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    plain, fmt = cls(schema), cls(schema, format_checker=_format_checker())
    rng = random.Random(row["id"])
    mutated = False
    for test in row["tests"]:
        data = test["data"]
        if plain.is_valid(data):
            if fmt.is_valid(data):
                assert accepts(p, compact(order_instance(schema, data))), compact(data)[:200]
            if mutated:
                continue
            mutated = True
            # soundness on random edits of the first valid instance
            for m in _mutations(data, rng, 3):
                text = compact(order_instance(schema, m))
                if accepts(p, text):
                    assert plain.is_valid(m), text[:200]
        else:
            assert not accepts(p, compact(data)), compact(data)[:200]


def test_maskbench_subset_present():
    rows = _maskbench_rows()
    assert len(rows) >= 100
    assert len({r["split"] for r in rows}) >= 10


def test_compile_json_schema_with_the_grammar_engine(smollm2_tokenizer, smollm2_vocab):
    pytest.importorskip("constrain.cfg.grammar")
    schema = {"type": "object", "additionalProperties": False, "required": ["name", "age"],
              "properties": {"name": {"type": "string", "maxLength": 20},
                             "age": {"type": "integer", "minimum": 0, "maximum": 150},
                             "tags": {"type": "array", "items": {"enum": ["a", "b"]}},
                             "email": {"type": "string", "format": "email"}}}
    g = compile_json_schema(schema, smollm2_vocab)
    for text, ok in [('{"name":"Bob","age":42,"tags":["a"]}', True),
                     ('{"name":"Bob","age":42,"email":"a@b.co"}', True),
                     ('{"name":"Bob","age":151}', False), ('{"age":1}', False)]:
        ids = smollm2_tokenizer.encode(text, add_special_tokens=False)
        assert g.accepts_tokens(ids) == ok, text
        assert g.matches(text) == ok, text


def test_escape_lark_regex_round_trip():
    """A regex escaped for a Lark ``/.../`` literal reads back (as lark reads it)
    to a regex that matches the same strings."""
    from constrain.automata.json_encoding import escape_lark_regex
    from constrain.frontends.lark import eval_escaping

    rng = random.Random(1)
    pieces = ["a", '"', "/", "\\\\", '\\"', "\\/", "\\d", "[/\"]", "x*", "(?:a|/)", "\\x22", "é", "'"]
    probes = ["", "a", '"', "/", "\\", "1", "é", "'", 'a"/', "x"]
    for _ in range(500):
        rx = "".join(rng.choice(pieces) for _ in range(rng.randint(1, 6)))
        back = eval_escaping(escape_lark_regex(rx))
        for p in probes:
            assert bool(re.fullmatch(rx, p)) == bool(re.fullmatch(back, p)), (rx, back, p)


@pytest.mark.parametrize("draft", ["http://json-schema.org/draft-04/schema#",
                                   "http://json-schema.org/draft-07/schema#",
                                   "https://json-schema.org/draft/2020-12/schema"])
def test_ref_siblings_follow_the_draft(draft):
    """Up to draft 7 the keywords beside a $ref are ignored (jsonschema agrees);
    from 2019-09 on they apply too."""
    defs = "definitions" if "draft-0" in draft else "$defs"
    schema = {"$schema": draft, defs: {"d": {"properties": {"a": {"type": "string"}}}},
              "type": "object", "properties": {"v": {"$ref": f"#/{defs}/d", "type": "object"}}}
    parser = lark_parser(json_schema_to_lark(schema))
    check = jsonschema.validators.validator_for(schema)(schema)
    for text in ['{"v":"x"}', '{"v":{"a":"y"}}', '{"v":{"a":1}}', '{"v":3}', '{}']:
        assert accepts(parser, text) == check.is_valid(json.loads(text)), text
    assert accepts(parser, '{"v":"x"}') == ("draft-0" in draft)


D4 = "http://json-schema.org/draft-04/schema#"
D7 = "http://json-schema.org/draft-07/schema#"


@pytest.mark.parametrize("schema", [
    # not a meta-schema URI jsonschema knows: 2020-12, whose $ref siblings apply
    {"$schema": "https://json-schema.org/draft-07/schema#", "definitions": {"a": {"type": "integer"}},
     "properties": {"x": {"$ref": "#/definitions/a", "maximum": 3}}},
    {"$schema": "http://example.com/custom-draft-07", "definitions": {"a": {"type": "integer"}},
     "properties": {"x": {"$ref": "#/definitions/a", "maximum": 3}}},
    {"$schema": "HTTP://json-schema.org/draft-07/schema", "definitions": {"a": {"type": "integer"}},
     "properties": {"x": {"$ref": "#/definitions/a", "maximum": 3}}},
    # keywords the declared draft lacks assert nothing (not looser under oneOf/not)
    {"$schema": D4, "oneOf": [{"type": "integer"}, {"const": 2.0}]},
    {"$schema": D4, "oneOf": [{"minimum": 1}, {"const": 2.0}]},
    {"$schema": D4, "not": {"const": 2}},
    {"$schema": D7, "not": {"type": "object", "dependentRequired": {"a": ["b"]}}},
    {"$schema": "https://json-schema.org/draft/2020-12/schema",
     "not": {"type": "object", "dependencies": {"a": ["b"]}}},
    # drafts 3/4: an integral float is no integer, and enum matches it and its integer
    {"$schema": D4, "enum": [1.0, 2.5], "not": {"type": "integer"}},
    {"$schema": D4, "oneOf": [{"type": "integer"}, {"enum": [1.0, 2.5]}]},
    {"$schema": D4, "oneOf": [{"type": "integer"}, {"enum": [1.0]}]},
    {"$schema": D4, "type": "number", "maximum": 5, "exclusiveMaximum": True},
])
def test_drafts_as_jsonschema_reads_them(schema):
    """Every probe text accepted validates under the draft jsonschema picks."""
    v = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)(schema)
    try:
        p = parser_for(schema)
    except EmptySchemaError:
        p = None
    texts = ["1", "1.0", "2", "2.0", "2.5", "4", "5", "-1", "{}", '{"a":1}', '{"a":1,"b":2}',
             '{"x":5}', '{"x":2}', '"s"', "null"]
    for text in texts:
        if p is not None and accepts(p, text):
            assert v.is_valid(json.loads(text)), text


_DEP = {"dependencies": {"a": ["b"]}}


@pytest.mark.parametrize("schema, texts", [
    ({"not": {"type": "object", **_DEP}}, ['{"a":1}', '{"a":1,"b":2}', "{}", "1"]),
    ({"type": "object", "oneOf": [{"required": ["x"], "dependencies": {"x": {"required": ["y"]}}},
                                  {"required": ["x"], "not": {"required": ["y"]}}]},
     ['{"x":1}', '{"x":1,"y":2}']),
    ({"type": "object", "if": _DEP, "then": {"required": ["t"]}, "else": {"required": ["e"]}},
     ['{"a":1,"e":1}', '{"t":1,"a":1}', '{"t":1,"a":1,"b":1}', '{"e":1,"a":1,"b":1}']),
    # reached through $ref from a not, and also positively (then read as 2020-12)
    ({"definitions": {"d": {"type": "object", **_DEP}}, "anyOf": [{"$ref": "#/definitions/d"}, {"type": "integer"}, {"required": ["a"]}],
      "not": {"allOf": [{"$ref": "#/definitions/d"}]}}, ['{"a":1}', '{"a":1,"b":2}', "{}", "2"]),
    ({"type": "array", "contains": {"type": "object", **_DEP}, "maxContains": 1},
     ['[{"a":1},{"a":1,"b":1}]', '[{"a":1},{"a":2}]', '[{"c":1}]']),
])
def test_older_keywords_without_a_draft_never_loosen(schema, texts):
    """Without ``$schema``, ``dependencies``/``additionalItems`` assert only where
    a stricter subschema is a stricter whole; under ``not``, ``if``, a ``oneOf``
    or a ``contains`` beside ``maxContains`` they read as 2020-12 reads them
    (not at all): ``not: {dependencies: ...}`` admitted ``{"a": 1}``, which
    jsonschema refuses. Each probe text is accepted iff jsonschema accepts it."""
    v = jsonschema.Draft202012Validator(schema)
    p = parser_for(schema)
    for text in texts:
        value = json.loads(text)
        spelled = json.dumps(order_instance(schema, value), separators=(",", ":"))
        assert accepts(p, spelled) == v.is_valid(value), text


def test_a_resource_is_read_under_its_own_draft():
    """jsonschema reads each document of ``resources`` under its own
    ``$schema``: keywords that draft lacks assert nothing there (draft 7 has
    no ``dependentRequired``). They were enforced: under ``not``, ``{"a": 1}``
    was admitted, which jsonschema refuses."""
    from referencing import Registry, Resource
    from referencing.jsonschema import DRAFT202012

    uri = "https://example.com/e.json"
    ext = {"$schema": D7, "type": "object", "dependentRequired": {"a": ["b"]},
           "$defs": {"d": {"type": "object", "dependentRequired": {"a": ["b"]}}}}
    registry = Registry().with_resources([(uri, Resource.from_contents(
        ext, default_specification=DRAFT202012))])
    # entered below its root, a document is read under the referring one's draft
    for root in ({"$ref": uri}, {"not": {"$ref": uri}}, {"$ref": uri + "#/$defs/d"},
                 {"not": {"$ref": uri + "#/$defs/d"}}):
        v = jsonschema.Draft202012Validator(root, registry=registry)
        p = parser_for(root, resources={uri: ext})
        for text in ('{"a":1}', '{"a":1,"b":2}', "1"):
            assert accepts(p, text) == v.is_valid(json.loads(text)), (root, text)


def test_older_keywords_without_a_draft_still_assert_where_stricter():
    """Where the subschema must match, draft 7's reading is kept (stricter than
    jsonschema's 2020-12, the documented side)."""
    check({"type": "object", "properties": {"o": {"type": "object", **_DEP}}},
          good=['{"o":{"a":1,"b":2}}', '{"o":{}}'], bad=['{"o":{"a":1}}'])
    # (jsonschema's 2020-12 cannot read an array items: no oracle here)
    p = parser_for({"type": "array", "items": [{"type": "integer"}], "additionalItems": False})
    assert [accepts(p, t) for t in ("[1]", "[]", "[1,2]")] == [True, True, False]


@pytest.mark.parametrize("kind", ["properties", "items", "anyOf"])
def test_deep_nesting_is_refused_with_a_pointer(kind):
    """200 levels raised a raw RecursionError (a server's untrusted schema)."""
    from constrain.frontends.json_schema.wellformed import MAX_SCHEMA_DEPTH

    def nest(depth):
        d = {"type": "integer"}
        for _ in range(depth):
            d = ({"type": "object", "properties": {"x": d}} if kind == "properties" else
                 {"type": "array", "items": d} if kind == "items" else {"anyOf": [d, {"type": "null"}]})
        return d

    json_schema_to_lark(nest(MAX_SCHEMA_DEPTH))
    with pytest.raises(SchemaTooComplexError, match="nest") as e:
        json_schema_to_lark(nest(200))
    assert e.value.pointer.count("/") > MAX_SCHEMA_DEPTH


def test_chains_of_refs_and_deep_json_text_are_refused():
    defs = {f"d{i}": {"type": "object", "properties": {"x": {"$ref": f"#/$defs/d{i + 1}"}}}
            for i in range(400)}
    defs["d400"] = {"type": "integer"}
    with pytest.raises(SchemaTooComplexError, match="nest too deeply"):
        json_schema_to_lark({"$defs": defs, "$ref": "#/$defs/d0"})
    with pytest.raises(SchemaTooComplexError, match="nests too deeply"):
        json_schema_to_lark("[" * 100_000 + "]" * 100_000)


def test_python_schemas_that_no_json_text_spells_are_refused_at_their_pointer():
    """A schema given as a Python object may share a dict, hold itself, or hold
    what JSON cannot (a set, NaN, an int key). These raised a raw TypeError,
    ValueError or AttributeError, ran out of memory (30 levels of sharing were
    walked path by path), or (NaN) compiled to a terminal matching the empty
    text."""
    import datetime

    from constrain.frontends.json_schema.wellformed import MAX_SCHEMA_VALUES

    loop = {"type": "object"}
    loop["properties"] = {"a": loop}
    cycle: list = []
    cycle.append(cycle)
    for schema, pointer, message in [
            ({"enum": [{1, 2}]}, "/enum/0", "a set is no JSON value"),
            ({"properties": {1: {"type": "string"}}}, "/properties", "key must be a string"),
            ({"type": "string", "default": datetime.date(2020, 1, 1)}, "/default", "a date"),
            ({"const": float("nan")}, "/const", "nan is no JSON number"),
            ({"maximum": float("inf")}, "/maximum", "inf is no JSON number"),
            ('{"const": NaN}', "", "NaN is no JSON number"),
            (loop, "/properties/a", "holds itself"),
            ({"enum": [cycle]}, "/enum/0/0", "holds itself")]:
        with pytest.raises(SchemaError, match=message) as e:
            json_schema_to_lark(schema)
        assert e.value.pointer == pointer, schema
    shared = {"type": "integer"}
    for _ in range(30):
        shared = {"anyOf": [shared, {"type": "object", "properties": {"a": shared}}]}
    with pytest.raises(SchemaTooComplexError, match=f"{MAX_SCHEMA_VALUES:,} values"):
        json_schema_to_lark(shared)
    # a document of resources too, named by its URI
    with pytest.raises(SchemaError, match="resource 'http://x/a.json': a set") as e:
        json_schema_to_lark({"$ref": "http://x/a.json"}, resources={"http://x/a.json": {"enum": [{1}]}})
    assert e.value.pointer == "/enum/0"
    # sharing itself is fine, and a keyword the draft lacks is gone on every path
    s = {"type": "object", "dependentRequired": {"a": ["b"]}}
    schema = {"$schema": D7, "type": "object", "properties": {"x": s, "y": {"not": {"not": s}}}}
    check(schema, good=['{"x":{"a":1},"y":{"a":1}}'], bad=['{"x":1}'])
    assert jsonschema.Draft7Validator(schema).is_valid({"x": {"a": 1}, "y": {"a": 1}})


@pytest.mark.parametrize("schema, pointer", [
    ({"type": "string", "pattern": "^a{12000}$"}, "/pattern"),
    ({"properties": {"k": {"type": "string", "pattern": "^a{12000}$"}}}, "/properties/k/pattern"),
    ({"patternProperties": {"^a{12000}$": {}}, "additionalProperties": False},
     "/patternProperties/^a{12000}$"),
    ({"type": "object", "propertyNames": {"pattern": "^a{12000}$"}}, "/propertyNames/pattern"),
])
def test_a_pattern_past_max_repeat_is_told_at_its_pointer(schema, pointer):
    """It was told by the generated terminal (``terminal STRING_7: ...``) with an
    offset into the translated regex, neither of which the user wrote."""
    vocab = byte_vocabulary()
    with pytest.raises(SchemaTooComplexError, match="repetition bound 12000.*max_repeat=") as e:
        compile_json_schema(schema, vocab)
    assert e.value.pointer == pointer
    assert "a{12000}" in str(e.value) and "terminal" not in str(e.value)
    compile_json_schema(schema, vocab, max_repeat=12000)


def test_draft_4_spells_each_integral_twin_it_validates():
    """In draft 4, enum matches 1 and 1.0 alike and only 1 is an integer: each
    is checked and spelled alone (the schema below was refused as empty)."""
    check({"$schema": D4, "enum": [1], "not": {"type": "integer"}}, good=["1.0"], bad=["1"])
    check({"$schema": D4, "enum": [1.0, 2.5], "not": {"type": "integer"}}, good=["1.0", "2.5"],
          bad=["1", "2"])
    check({"$schema": D4, "enum": [1, 2]}, good=["1", "1.0", "2.0"], bad=["3"])


def test_draft_3_is_refused():
    """Its ``required: true``, ``disallow``, ``extends`` and ``divisibleBy`` were
    ignored silently (a looser language); jsonschema's Draft3Validator
    enforces them."""
    schema = {"$schema": "http://json-schema.org/draft-03/schema#",
              "properties": {"a": {"type": "string", "required": True}}}
    with pytest.raises(UnsupportedSchemaError, match="draft 3") as e:
        json_schema_to_lark(schema)
    assert e.value.pointer == "/$schema"


def test_boolean_exclusive_bounds_are_draft_4s():
    with pytest.raises(SchemaError, match="draft 4") as e:
        json_schema_to_lark({"type": "number", "maximum": 5, "exclusiveMaximum": True})
    assert e.value.pointer == "/exclusiveMaximum"
    check({"$schema": D4, "type": "number", "maximum": 5, "exclusiveMaximum": True},
          good=["4", "4.5"], bad=["5", "6"])


@pytest.mark.parametrize("bounds", [{"maximum": 10, "exclusiveMaximum": 5}, {"exclusiveMinimum": 0},
                                    {"not": {"exclusiveMaximum": 5}}])
def test_numeric_exclusive_bounds_are_refused_in_draft_4(bounds):
    """jsonschema's Draft4Validator reads a number there by its truth (``5``
    made ``maximum`` exclusive and bounded nothing itself; Trellis read it as
    draft 6's bound, which under ``not`` admitted 5-10, which it refuses)."""
    with pytest.raises(SchemaError, match="a boolean in draft 4") as e:
        json_schema_to_lark({"$schema": D4, "type": "number", **bounds})
    assert e.value.pointer.endswith(("/exclusiveMaximum", "/exclusiveMinimum"))


@pytest.mark.parametrize("bounds", [{"minProperties": 2, "maxProperties": 2, "required": ["a"]},
                                    {"minProperties": 2}, {"maxProperties": 1},
                                    {"minProperties": 1, "maxProperties": 2, "required": ["c"]}])
def test_property_count_without_additional_members(bounds):
    """min/maxProperties beyond the required members, on a closed object: every
    subset of members (in schema order) is accepted iff jsonschema accepts it."""
    from itertools import combinations

    schema = {"type": "object", "additionalProperties": False,
              "properties": {"a": {"type": "integer"}, "b": {"type": "integer"},
                             "c": {"type": "integer"}}, **bounds}
    parser = lark_parser(json_schema_to_lark(schema))
    check = jsonschema.Draft202012Validator(schema)
    for k in range(4):
        for names in combinations("abc", k):
            obj = {n: 1 for n in names}
            text = json.dumps(obj, separators=(",", ":"))
            assert accepts(parser, text) == check.is_valid(obj), text


def test_clear_caches_drops_shared_tables():
    """constrain.clear_caches() empties the multipleOf tables (the process's,
    of translations outside a compile, and every compiler's) and the terminal
    caches; compiling afterwards rebuilds them with the same language."""
    import constrain
    from constrain.frontends.json_schema import caches, number_ranges

    schema = {"type": "number", "multipleOf": 0.01}
    before = json_schema_to_lark(schema)
    number_ranges.float_multiple_regex((0.01,), None, False, None, False, integers=False)
    assert len(caches.current().tables) > 0
    constrain.clear_caches()
    assert len(caches.current().tables) == 0
    assert all(len(c.terminal_automata) == 0 and len(c.schema_caches.tables) == 0
               for c in constrain.cache.registry.compilers())
    assert json_schema_to_lark(schema) == before
    check(schema, good=["99.99", "3"], bad=["0.07"])


# -- "any string but these names": the automaton product against the regex ---------------

@pytest.mark.parametrize("seed", range(6))
def test_exclusion_terminal_product_equals_regex(seed):
    """The compile path's exclusion automaton (a DFA less the names' prefixes)
    accepts exactly what the regex of json_schema_to_lark's text accepts: names
    that are prefixes of one another, escapes, control characters, multi-byte
    characters, the empty name, alphabets and a minimum length."""
    import numpy as np

    from constrain.frontends.json_schema.exclusions import exclusion_terminal
    from constrain.frontends.json_schema.rules import GrammarBuilder
    from constrain.cfg.ir import Terminal
    from constrain.cfg.lexer import terminal_dfa

    rng = random.Random(seed)
    chars = ["a", "b", "ab"[seed % 2] * 2, "é", '"', "\\", "\n", "\x01", "\x7f", "€", "😀", " "]
    alphabet = np.ones(256, dtype=np.bool_)
    for trial in range(25):
        names = sorted({"".join(rng.choice(chars) for _ in range(rng.randint(0, 4)))
                        for _ in range(rng.randint(0, 7))})
        tail = rng.choice(["", ":", "[ \\t\\n\\r]{0,2}:[ \\t\\n\\r]{0,2}"])
        if rng.random() < 0.3:
            ivs, min_len = [(0x61, 0x62), (0x20AC, 0x20AC)], rng.randint(0, 1)
            names = [n for n in names if all(c in "ab€" for c in n)]
        else:
            ivs, min_len = None, 0
        dfas = []
        for exclusions in (None, {}):
            comp = GrammarBuilder("", exclusions)
            name = exclusion_terminal(comp, names, tail, "KEY", ivs, min_len)
            term = Terminal(name, comp.terminal_defs[name])
            dfas.append(terminal_dfa(term, alphabet, max_states=50_000, deadline=None,
                                     exclusion=(exclusions or {}).get(name)))
        assert same_language(*dfas), (names, tail, ivs, min_len)


@pytest.mark.parametrize("seed", range(6))
def test_exclusion_written_in_place_equals_regex(seed):
    """TerminalAutomata writes "any key but these names" straight into its
    stacked table (exclusion_product): the rows spell the regex's
    language, trimmed, on alphabets that restrict the names' bytes; a name set
    that excludes every string leaves the terminal unusable."""
    import numpy as np

    from automata_testing import same_language
    from constrain.automata.byte_dfa import ByteDFA
    from constrain.frontends.json_schema.exclusions import exclusion_terminal
    from constrain.frontends.json_schema.rules import GrammarBuilder
    from constrain.cfg.ir import GrammarIR, Terminal
    from constrain.cfg.lexer import TerminalAutomata, terminal_dfa

    rng = random.Random(seed)
    chars = ["a", "b", "ab"[seed % 2] * 2, "é", '"', "\\", "\n", "\x01", "€", "😀", " "]
    alphabets = [np.ones(256, dtype=np.bool_)]
    no_e9 = np.ones(256, dtype=np.bool_)
    no_e9[[0xA9, ord("b")]] = False  # é's second byte, and b
    alphabets.append(no_e9)
    written = 0
    for trial in range(25):
        names = sorted({"".join(rng.choice(chars) for _ in range(rng.randint(0, 4)))
                        for _ in range(rng.randint(1, 7))})
        tail = rng.choice(["", ":"])
        comp = GrammarBuilder("", {})
        name = exclusion_terminal(comp, names, tail, "KEY")
        plain = GrammarBuilder("", None)
        want_name = exclusion_terminal(plain, names, tail, "KEY")
        terms = [Terminal("A", "a"), Terminal(name, comp.terminal_defs[name]), Terminal("B", "b")]
        ir = GrammarIR(terms, ["start"], [(0, (0, 1, 2))], 0, exclusions=comp.exclusions)
        for alphabet in alphabets:
            ta = TerminalAutomata(ir, alphabet, max_states=100_000, deadline=None)
            want = terminal_dfa(Terminal(want_name, plain.terminal_defs[want_name]), alphabet,
                                max_states=100_000, deadline=None)
            lo, hi = int(ta.offsets[1]), int(ta.offsets[2])
            written += hi - lo > 2
            if want is None:
                assert not ta.usable[1], names
                continue
            mine = ByteDFA(ta.table[lo:hi], ta.accepting[lo:hi])
            assert ta.usable[1] and same_language(mine, want), (names, tail, int(alphabet.sum()))
            assert ta.table[int(ta.offsets[0]) + 1, ord("a")] == 2
    assert written  # the in-place path ran
    # every string excluded: the empty name and any name would leave nothing
    # only if the names covered all keys, which a finite set cannot; but over an
    # alphabet of '"' alone the one key is "", excluded by the empty name
    quote = np.zeros(256, dtype=np.bool_)
    quote[ord('"')] = True
    comp = GrammarBuilder("", {})
    name = exclusion_terminal(comp, [""], "", "KEY")
    ir = GrammarIR([Terminal(name, comp.terminal_defs[name])], ["start"], [(0, (0,))], 0,
                   exclusions=comp.exclusions)
    ta = TerminalAutomata(ir, quote, max_states=100_000, deadline=None)
    assert not ta.usable[0]


def test_unproductive_rules_are_pruned(smollm2_tokenizer, smollm2_vocab):
    """A branch that admits no finite JSON value (an object that must contain
    itself) is dropped from the grammar, on the text path and the compile path,
    whatever the order its rules were made in; a schema of nothing but such
    branches is refused."""
    from constrain.errors import UnsupportedSchemaError

    loop = {"type": "object", "required": ["x"], "properties": {"x": {"$ref": "#/$defs/loop"}}}
    fine = {"type": "object", "properties": {"y": {"$ref": "#/$defs/loop"}},
            "additionalProperties": False}
    for schema in ({"$defs": {"loop": loop}, "anyOf": [{"$ref": "#/$defs/loop"}, {"type": "integer"}]},
                   {"$defs": {"loop": loop}, "anyOf": [{"type": "integer"}, {"$ref": "#/$defs/loop"}]},
                   {"$defs": {"loop": loop}, "anyOf": [{"type": "integer"}, fine]}):
        with_fine = schema["anyOf"][1] is fine
        check(schema, good=["1", "-20"] + (["{}"] if with_fine else []),
              bad=['{"y":{}}', '{"y":{"x":{}}}', "[]"] + ([] if with_fine else ["{}"]))
        g = compile_json_schema(schema, smollm2_vocab)
        for text in ["1", "{}", '{"x":', '{"y":{"x":{}}}']:
            ids = smollm2_tokenizer.encode(text, add_special_tokens=False)
            assert g.accepts_tokens(ids) == (text == "1" or (with_fine and text == "{}")), text
        # no dead end: the mask never lets a model start the unproductive branch
        for prefix, live in [("{", with_fine), ('{"x', False), ('{"y":{', False)]:
            state = g.initial_state()
            for i in smollm2_tokenizer.encode(prefix, add_special_tokens=False):
                state = None if state is None else g.advance(state, i)
            assert (state is not None) == live, prefix
    with pytest.raises(UnsupportedSchemaError):
        compile_json_schema({"$defs": {"loop": loop}, "$ref": "#/$defs/loop"}, smollm2_vocab)


def test_terminals_the_vocabulary_cannot_spell_are_dropped():
    """The translator's rules are all productive, but over a vocabulary that
    cannot spell some terminal (no "z" here) a branch that needs it derives
    nothing: it is never started (no dead end), and a schema that needs such a
    terminal is refused."""
    from constrain import Vocabulary
    from constrain.errors import GrammarError

    tokens = [b"{", b"}", b'"', b"a", b":", b",", b"b", b"1", b"[", b"]", b"</s>"]
    vocab = Vocabulary.from_tokens(tokens, eos_token_ids=[10])
    ids = {t.decode(): i for i, t in enumerate(tokens)}
    needs_z = {"type": "object", "properties": {"zb": {"type": "integer"}}, "required": ["zb"],
               "additionalProperties": False}
    g = compile_json_schema({"anyOf": [needs_z, {"type": "integer"}]}, vocab)
    assert g.accepts_tokens([ids["1"]])
    assert g.advance(g.initial_state(), ids["{"]) is None
    g = compile_json_schema({"anyOf": [needs_z, {"type": "object", "additionalProperties": False}]},
                            vocab)
    assert g.accepts_tokens([ids["{"], ids["}"]])
    assert g.advance(g.advance(g.initial_state(), ids["{"]), ids['"']) is None
    with pytest.raises(GrammarError):
        compile_json_schema({"const": "zz"}, vocab)


def test_literal_terminals_match_their_regex():
    """Terminals the translator marks as one string (member names with their
    colon, single-valued enums and consts, compact punctuation) spell exactly
    what their regex matches: names with spaces, quotes, escapes, non-ASCII and
    a lone surrogate (no UTF-8: not marked), flexible whitespace (not marked)."""
    import numpy as np

    from automata_testing import same_language
    from constrain.frontends.json_schema.compiler import translate
    from constrain.frontends.json_schema.ir import to_ir
    from constrain.frontends.json_schema.options import Options
    from constrain.cfg.lexer import _literal_dfa
    from constrain.regular.regex import regex_byte_dfa

    names = ["a", "first name", 'say "hi"', "back\\slash", "tab\there", "é€😀", "\ud800", "x:y"]
    schema = {"type": "object", "properties": {n: {"const": n} for n in names},
              "required": names[:2]}
    schema["properties"]["e"] = {"enum": ["only one\n"]}
    alphabet = np.ones(256, dtype=np.bool_)
    for whitespace in ("compact", "flexible"):
        comp = translate(schema, Options(whitespace=whitespace), {})
        ir = to_ir(comp.grammar, "start", comp.diag)
        marked = [t for t in ir.terminals if t.literal is not None]
        if whitespace == "flexible":
            assert not [t for t in marked if t.name.startswith(("KEY", "LBRACE", "COMMA"))]
        else:
            kinds = {t.name.split("_")[0] for t in marked}
            assert {"KEY", "CONST", "LBRACE", "COMMA"} <= kinds, kinds
            assert not [t for t in marked if "\ud800" in t.literal]
        for t in marked:
            want = regex_byte_dfa(t.pattern, alphabet)
            assert same_language(_literal_dfa(t.literal, 0, alphabet), want), (t.name, t.literal)


def test_lit_escapes_every_character_as_before():
    """_lit (a translate table for ASCII text) writes each character as the
    per-character rules say: letters and digits bare, space as \\x20, other
    printable ASCII backslash-escaped, the rest as \\x, \\u or \\U escapes; and
    the regex matches exactly the text."""
    from constrain.automata.json_encoding import lit as _lit

    def reference(text):
        out = []
        for c in text:
            if c.isascii() and c.isalnum():
                out.append(c)
            elif c == " ":
                out.append("\\x20")
            elif 0x20 < ord(c) < 0x7F:
                out.append("\\" + c)
            elif ord(c) < 0x100:
                out.append("\\x%02x" % ord(c))
            elif ord(c) < 0x10000:
                out.append("\\u%04x" % ord(c))
            else:
                out.append("\\U%08x" % ord(c))
        return "".join(out)

    rng = random.Random(3)
    alphabet = [chr(i) for i in range(128)] + ["é", "ÿ", "€", "😀", "\u0100"]
    for _ in range(300):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 12)))
        assert _lit(text) == reference(text), text
        assert re.fullmatch(_lit(text), text, re.DOTALL), text


def test_exclusion_ids_are_never_reused(smollm2_vocab):
    # "any key but the declared ones" is a stand-in terminal named by an id of
    # its owner (a compiler's SchemaCaches); one grammar dedups terminals by
    # that name. Forgetting the ids (clear() does) must never hand one to
    # another set, or two exclusions of one grammar could merge
    import constrain
    from constrain.frontends.json_schema.caches import SchemaCaches

    own = SchemaCaches(1 << 20, 1 << 20)
    base = '"[^"]*":'
    a = own.exclusion_id(base, (b'"a"',))
    assert own.exclusion_id(base, (b'"a"',)) == a  # remembered: the caches hit
    own.exclusion_ids.clear()
    b = own.exclusion_id(base, (b'"b"',))
    assert b != a and own.exclusion_id(base, (b'"a"',)) not in (a, b)
    # and the grammars built around a forgetting stay right
    compiler = constrain.Compiler(smollm2_vocab)
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    first = compiler.compile_json_schema(schema)
    assert len(compiler.schema_caches.exclusion_ids) == 1
    compiler.clear()
    second = compiler.compile_json_schema({"type": "object", "properties": {"b": {"type": "integer"}}})
    assert not first.matches('{"a":"x"}') and first.matches('{"b":"x"}')
    assert not second.matches('{"b":"x"}') and second.matches('{"a":"x"}')
