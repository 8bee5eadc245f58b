"""The language of a compiled regex is exactly ``re.fullmatch``'s, at the byte
level (no vocabulary involved): random regexes and strings from hypothesis, and
hand-picked corner cases (assertions, flags, Unicode classes, case folding)."""

from __future__ import annotations

import re

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from constrain import GrammarTooComplexError
from constrain.automata.byte_dfa import char_dfa_to_bytes, trim_and_minimize
from constrain.automata.char_dfa import build_char_dfa
from constrain.automata.regex_syntax import parse_regex
from regex_strategies import ALPHABET, OracleTimeout, fullmatch_oracle, regex_and_string


def byte_dfa(pattern: str, max_states: int = 50_000):
    return trim_and_minimize(char_dfa_to_bytes(
        build_char_dfa(parse_regex(pattern), max_states=max_states), max_states=4 * max_states))


@settings(max_examples=400, deadline=None, suppress_health_check=list(HealthCheck),
          database=None, derandomize=True)
@given(regex_and_string())
def test_fullmatch_agrees_with_re(case):
    pattern, text = case
    try:
        dfa = byte_dfa(pattern, max_states=2000)
    except GrammarTooComplexError:
        assume(False)
    try:
        expected = fullmatch_oracle(pattern, text)
    except OracleTimeout:
        assume(False)
    assert dfa.matches(text.encode()) == expected, (pattern, text)


CORNER_CASES = [
    r"^abc$", r"a$", r"a$\n", r"a\Z", r"\Aa", r"(?m)^a$\n^b$", r"(?m)a$", r"a^b",
    r"\bfoo\b", r"\Bx\B", r"\B", r"\b", r"-\B-", r"\b\w+\b( \b\w+\b)*", r"(?a)\b\w\b",
    r"(?i)straße", r"(?i)[k-m]+", r"(?i)\u017f", r"(?i)ǅ", r"(?ia)k", r"[^\W\d_]+", r"\d+", r"(?a)\d+",
    r"\s+", r"(?s).", r".", r"[\U0001F600-\U0001F64F]+", r"[^a]", r"(a|ab)(c|bcd)(d*)",
    r"(?x) a b # comment", r"(?i:a)b", r"a{,3}", r"(ab){2,3}?", r"x*?y+?z??", r"[\x00-\x7f]*",
    r"(?i)[^a-z]", r"[\w&&\d]", r"(?:)", r"|a", r"a||b", r"\x41\u00e9\U0001F600\N{GREEK SMALL LETTER ALPHA}",
]
_CORNER_ALPHABET = ALPHABET + ["\u212a", "k", "ǆ", "Ǆ", "ǅ", "\u0660", "\x85", "\u00a0", "ß", "ẞ", "ss", "&", "α"]


@pytest.mark.filterwarnings("ignore:Possible set intersection:FutureWarning")
@pytest.mark.parametrize("pattern", CORNER_CASES)
def test_corner_cases_agree_with_re(pattern):
    dfa = byte_dfa(pattern)
    rx = re.compile(pattern)
    import random

    rnd = random.Random(pattern)
    samples = {"", "a", "a\n", "abc", "foo", "foo bar", "x", "-", "--", "straße", "STRASSE", "ſ"}
    for _ in range(3000):
        samples.add("".join(rnd.choice(_CORNER_ALPHABET) for _ in range(rnd.randint(0, 5))))
    for s in samples:
        assert dfa.matches(s.encode()) == bool(rx.fullmatch(s)), (pattern, s)


@settings(max_examples=100, deadline=None)
@given(st.binary(max_size=8))
def test_invalid_utf8_is_never_accepted(data):
    dfa = byte_dfa(r"(?s).*")
    try:
        data.decode("utf-8")
        valid = True
    except UnicodeDecodeError:
        valid = False
    assert dfa.matches(data) == valid


def test_overlong_and_surrogate_encodings_are_dead():
    dfa = byte_dfa(r"(?s).*")
    for bad in [b"\xc0\x80", b"\xe0\x80\x80", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\xf8"]:
        assert dfa.walk(bad) == 0, bad


def test_every_live_state_can_still_accept():
    from constrain.automata.liveness import coreachable_dense

    dfa = byte_dfa(r"a\bb|ab\d{2}")  # the first branch can never match
    live = coreachable_dense(dfa.transitions, dfa.accepting)
    assert live[1:].all()
    assert dfa.walk(b"ab") != 0 and dfa.walk(b"ab1") != 0


@pytest.mark.parametrize("pattern", [
    r"(?>c(?:ab|a){0,150}d)",        # no string a prefix of another: X's plain DFA
    r"(?>(?:é|éa){0,120}b)",
    r"(?>(?:a|ab){0,120})",          # "ab": the group keeps "a", then the end fails
    r"(?>a{100}|a{100}b)",
    r"(?>x{100,120}y?)",
    r"(?>(?:a|b){0,100}?c)",
])
def test_a_whole_atomic_group_with_a_large_count_is_exact(pattern):
    """A Lark terminal is ``(?>X)``; where X has a count of 100 or more, X's
    plain DFA is tried first (the group's prioritised construction is quadratic
    in the count: ``(?>c(?:a|aa){0,1500}b)`` took 15.6 s) and kept only when
    no string of X's language is a proper prefix of another, where the group
    cannot change what matches. Both outcomes, against ``re.fullmatch``."""
    import random

    from constrain.regular.regex import regex_byte_dfa

    import numpy as np

    dfa = regex_byte_dfa(pattern, np.ones(256, dtype=np.bool_))
    rng = random.Random(pattern)
    letters = "abcdxyé"
    # (re backtracks exponentially on a failed (?:a|aa){n}: the oracle's
    # patterns split their strings one way)
    texts = ["c" + "a" * 150 + "d", "c" + "a" * 151 + "d", "c" + "ab" * 75 + "d", "ab",
             "a" * 100 + "b", "a" * 100,
             "x" * 100 + "y", "x" * 121, "é" * 120 + "b", "éa" * 60 + "b", "ab" * 50 + "c"]
    for _ in range(2000):
        base = rng.choice(texts)
        cut = rng.randint(0, len(base))
        texts.append(base[:cut] + "".join(rng.choice(letters) for _ in range(rng.randint(0, 3)))
                     + base[cut + rng.randint(0, 2):])
    for text in texts:
        assert dfa.matches(text.encode()) == bool(re.fullmatch(pattern, text)), (pattern, text)


def test_a_draw_stopped_by_the_oracle_alarm_leaves_hypothesis_usable():
    """regex_and_string stops a slow draw with an alarm, which can land inside
    hypothesis's strategy unwrapping and leave a strategy noted as in progress:
    from then on every from_regex on the thread failed ('LazyStrategy' object
    has no attribute 'intervals'). The strategy forgets that state when it
    catches the alarm."""
    from hypothesis.strategies._internal import lazy
    from hypothesis.strategies._internal.regex import chars_not_in_alphabet
    from regex_strategies import _reset_hypothesis_unwrapping

    alphabet = st.characters(codec="utf-8")
    # as on its first unwrapping (a finished one is memoised on the strategy)
    alphabet.__dict__.pop("_unwrapped", None)
    lazy.threadlocal.unwrap_cache[alphabet] = alphabet  # what an interrupted unwrap leaves
    try:
        with pytest.raises(AttributeError, match="intervals"):
            chars_not_in_alphabet(alphabet, "aa")
    finally:
        _reset_hypothesis_unwrapping()
    assert chars_not_in_alphabet(alphabet, "aa") == set()
    assert not lazy.threadlocal.unwrap_cache and lazy.threadlocal.unwrap_depth == 0


def test_the_cased_scalars_are_re_s_own():
    """The cased scalar values found block by block with ``str.lower`` and
    ``str.upper`` (what a case-insensitive class is built from) are exactly those
    ``re``'s own test finds one code point at a time, on this Python's Unicode
    database."""
    import _sre

    from constrain.automata import regex_syntax

    want = [c for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF and _sre.unicode_iscased(c)]
    assert regex_syntax._unicode_cased() == want
    assert regex_syntax._cased(False)[0] == want
    assert regex_syntax._cased(True)[0] == [c for c in range(128) if _sre.ascii_iscased(c)]
