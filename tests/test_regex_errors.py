"""Bad regexes raise a typed ``ConstraintError`` that names the problem and its
offset, fast; limits are enforced before any work explodes."""

from __future__ import annotations

import time

import pytest

from constrain import (
    ConstraintError,
    EmptyLanguageError,
    GrammarTooComplexError,
    RegexSyntaxError,
    RegexTooLargeError,
    UnsupportedRegexError,
    Vocabulary,
    compile_grammar,
    compile_regex,
)


@pytest.fixture(scope="module")
def vocab():
    tokens = [bytes([b]) for b in range(256)] + [b"ab", b"abc", b"12", b"\xc3\xa9", b"<eos>"]
    return Vocabulary.from_tokens(tokens, eos_token_ids=[len(tokens) - 1])


@pytest.mark.parametrize("pattern,error,offset,words", [
    (r"(a)\1", UnsupportedRegexError, 3, "backreference"),
    (r"(?P<x>a)(?P=x)", UnsupportedRegexError, 8, "backreference"),
    (r"(a)?(?(1)b|c)", UnsupportedRegexError, 4, "conditional"),
    (r"(?>a(?>b))", UnsupportedRegexError, 4, "atomic group inside an atomic group"),
    (r"x(?>a*+)", UnsupportedRegexError, 6, "possessive quantifier inside an atomic group"),
    (r"(?<=a+)b", RegexSyntaxError, 0, "fixed-width"),
    (r"(?<=a|bc)b", RegexSyntaxError, 0, "fixed-width"),
    (r"(ab", RegexSyntaxError, 0, "missing )"),
    (r"ab)", RegexSyntaxError, 2, "unbalanced parenthesis"),
    (r"[a-", RegexSyntaxError, 0, "unterminated character set"),
    (r"a**", RegexSyntaxError, 2, "multiple repeat"),
    (r"\p{L}", RegexSyntaxError, 0, "bad escape"),
    (r"[z-a]", RegexSyntaxError, 1, "bad character range"),
    (r"x{20001}", RegexTooLargeError, 1, "repetition bound 20001"),
    (r"a{5,20000000}", RegexTooLargeError, 1, "repetition bound"),
    (r"(?:ab{1000}){1000}", RegexTooLargeError, 12, "expands to more than"),
    # past re's own count (an OverflowError there): a count past max_repeat too
    (r"ab{4294967295}", RegexTooLargeError, 2, "repetition bound 4294967295"),
    # a scoped (?x:...) comment is no pattern text: the offsets pointed into it
    ("(?x:a # {20000}\n)b{20000}", RegexTooLargeError, 18, "repetition bound 20000"),
    ("(?x:a # (?<=b+)\n)(?<=c+)", RegexSyntaxError, 17, "fixed-width"),
    ("(?x:# \\1\n)(a)\\1", UnsupportedRegexError, 13, "backreference"),
    ("(?x:# (?>\n)(?>(?>a))", UnsupportedRegexError, 14, "atomic group inside"),
    ("(?x:# x\n)(?-x:# {20000})b{20000}", RegexTooLargeError, 16, "repetition bound"),
])
def test_bad_regexes_name_problem_and_offset(vocab, pattern, error, offset, words):
    t = time.thread_time()
    with pytest.raises(error) as info:
        compile_regex(pattern, vocab)
    assert time.thread_time() - t < 1.0  # CPU: a busy machine's waits do not count
    e = info.value
    assert isinstance(e, ConstraintError) and isinstance(e, ValueError)
    assert words in str(e)
    assert e.offset == offset, str(e)
    assert f"offset {offset}" in str(e)
    assert e.pattern == pattern


def test_state_explosion_is_refused_within_budget(vocab):
    t = time.thread_time()
    with pytest.raises(GrammarTooComplexError, match="max_states"):
        compile_regex(r"[ab]*a[ab]{20}", vocab, max_states=2000)
    assert time.thread_time() - t < 1.0  # CPU: a busy machine's waits do not count


def test_time_budget(vocab):
    with pytest.raises(GrammarTooComplexError, match="time budget"):
        compile_regex(r"[ab]*a[ab]{14}", vocab, time_budget=1e-9)


def test_empty_language(vocab):
    with pytest.raises(EmptyLanguageError):
        compile_regex(r"a\bb", vocab)
    with pytest.raises(EmptyLanguageError):
        compile_regex(r"[^\x00-\U0010ffff]", vocab)


def test_empty_for_this_vocabulary():
    v = Vocabulary.from_tokens([b"a", b"b", b"<eos>"], eos_token_ids=[2])
    with pytest.raises(EmptyLanguageError, match="spell"):
        compile_regex(r"ac", v)


def test_non_str_pattern(vocab):
    with pytest.raises(RegexSyntaxError):
        compile_regex(b"abc", vocab)  # type: ignore[arg-type]


def test_bad_vocab():
    with pytest.raises(ConstraintError):
        compile_regex("a", ["a"])  # type: ignore[arg-type]


def test_repeat_limit_is_configurable(vocab):
    g = compile_regex(r"a{20001}", vocab, max_repeat=30000, max_positions=30000)
    assert g.num_states > 20000


def test_flags_argument(vocab):
    import re

    g = compile_regex(r"\d+", vocab, flags=re.ASCII)
    assert g.matches("123") and not g.matches("١٢٣")
    assert compile_regex(r"\d+", vocab).matches("١٢٣")
    assert compile_regex("abc", vocab, flags=re.IGNORECASE).matches("AbC")
    # re.DEBUG printed the parse tree, re.TEMPLATE (under which re refuses a*),
    # True and unknown bits were taken silently
    for bad in (re.DEBUG, re.TEMPLATE, True, 1 << 20, -1, "i", re.LOCALE):
        with pytest.raises(UnsupportedRegexError, match="flags"):
            compile_regex("a*", vocab, flags=bad)


def test_fast_parser_code_escapes_match_re():
    """The fast parser reads \\x, \\u, \\U and control escapes as re does, in and
    out of classes (generated JSON patterns are full of them), and leaves
    malformed ones to re's parser and its errors."""
    import re as _re

    from constrain.automata.regex_syntax import _parse_simple, parse_regex

    cases = [r"\x41\u00e9\U0001F600", r"[\x20\!\#-\[\]-\ud7ff\ue000-\U0010ffff]+",
             r"a\tb\nc", r"[\x00-\x1f]", r"\u00e9{2}"]
    for p in cases:
        assert _parse_simple(p, 1000, 10 ** 6) is not None, p
    for bad in (r"\x4", r"\u00g1", r"\U00110000", r"[\x4-z]"):
        assert _parse_simple(bad, 1000, 10 ** 6) is None, bad
        with pytest.raises(RegexSyntaxError):
            parse_regex(bad)
    samples = ["A\u00e9\U0001F600", " !#[", "a\tb\nc", "\x05", "\u00e9\u00e9", "\"", "\\"]
    for p in cases:
        for s in samples:
            assert (_re.fullmatch(p, s) is not None) == _accepts(p, s), (p, s)


def _accepts(pattern, text):
    import numpy as np

    from constrain.regular.regex import regex_byte_dfa

    try:
        dfa = regex_byte_dfa(pattern, np.ones(256, dtype=np.bool_))
    except Exception:
        return False
    return dfa.matches(text.encode("utf-8"))


def test_a_str_no_utf8_spells_is_in_no_language(vocab):
    """matches('\\ud800') raised UnicodeEncodeError: it is simply no string of
    the language."""
    assert not compile_regex(r"[\s\S]*", vocab).matches("\ud800")
    assert not compile_grammar('start: /[\\s\\S]+/', vocab).matches("a\ud800")
