"""The ASCII kernel's own regex parser (``determinize_kernels.simple_ascii_nfa``):
for the common syntax, all ASCII and without flags, ``regex_byte_dfa`` parses
the pattern inside ``ascii_byte_dfa``. Its DFA must be the one the general path
gives (Python's own parser, ``re.UNICODE`` set so that the direct parser is not
used either), its errors the general path's, and the patterns outside its
syntax must still compile exactly."""

from __future__ import annotations

import random
import re
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

from constrain.automata.determinize_kernels import NOT_SIMPLE, ascii_byte_dfa, simple_ascii_nfa
from constrain.errors import ConstraintError, RegexSyntaxError, RegexTooLargeError
from constrain.regular.regex import _NO_PROG, _maybe_kernel_syntax, regex_byte_dfa

sys.path.insert(0, str(Path(__file__).parent / "benchmarks"))
from regexes import CASES  # noqa: E402

ALPHABET = np.ones(256, dtype=np.bool_)
ALPHABET[[0x04, 0x06, 0x13]] = False  # as in SmolLM2: bytes no token holds

# pieces of the kernel's syntax, and of what it must leave to the general path
_ATOMS = ["a", "b", "x", "[a-c]", "[0-9]", r"\.", "[+-]", "(?:ab|c)", " ", "#", "\x00"] * 5 + [
    "-", r"\-", r"\]", r"\\", "[a-]", "[-b]", r"[\]a]", "[a-c-e]", r"[\\-a]", "}", "{", "]",
    "[]", "[^a]", r"\d", "[--a]", "[a--]", "[&&]", "x{", "[z-a]", "\t", "é", ".", "^", "$",
    r"\n", "[[]"]
_QUANTIFIERS = [""] * 30 + ["*", "+", "?", "{2}", "{1,3}", "{2,}"] * 3 + [
    "*?", "+?", "??", "{0}", "{0,2}?", "{3,1}", "{,2}", "*+", "**", "{1,2}+", "{002}", "{99999}"]


def _pattern(rng: random.Random, depth: int = 0) -> str:
    k = rng.randrange(5 if depth < 4 else 2)
    if k <= 1:
        return rng.choice(_ATOMS) + rng.choice(_QUANTIFIERS)
    if k == 2:
        return "".join(_pattern(rng, depth + 1) for _ in range(rng.randrange(4)))
    if k == 3:
        return "|".join(_pattern(rng, depth + 1) for _ in range(rng.randrange(1, 4)))
    return (rng.choice(["(", "(?:", "(?i:", "("]) + _pattern(rng, depth + 1)
            + rng.choice([")"] * 20 + [""]) + rng.choice(_QUANTIFIERS))


def _outcome(pattern: str, flags: int, **limits):
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)  # re's "possible set operation"
            dfa = regex_byte_dfa(pattern, ALPHABET, flags=flags, **limits)
    except ConstraintError as e:
        return type(e).__name__, str(e)
    return dfa.transitions.tolist(), dfa.accepting.tolist()


def _kernel_takes(pattern: str, max_repeat: int = 10_000, max_positions: int = 100_000) -> bool:
    _, _, status = ascii_byte_dfa(pattern.encode(), _NO_PROG, -1, -1, max_repeat, max_positions,
                                  50_000, ALPHABET, np.inf)
    return status != NOT_SIMPLE


def test_random_patterns_give_the_general_paths_dfa_or_error():
    rng = random.Random(24)
    taken = 0
    for _ in range(1500):
        pattern = _pattern(rng)
        limits = rng.choice([{}, {"max_repeat": 2}, {"max_positions": 5}])
        want = _outcome(pattern, re.UNICODE, **limits)
        assert _outcome(pattern, 0, **limits) == want, pattern
        if pattern.isascii() and _kernel_takes(pattern, **limits):
            taken += 1
            # what the kernel takes, Python's parser takes too
            assert not isinstance(want[0], str), (pattern, want)
    assert taken > 300  # the kernel's syntax is exercised, not only the fallback


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_the_benchmark_regexes_take_the_kernel_parser_where_they_can(case):
    # json_string has a negated class (non-ASCII members): the general path;
    # url has "$" (in a class), which the substring prefilter takes for an anchor
    assert _kernel_takes(case.pattern) == (case.name != "json_string")
    assert _maybe_kernel_syntax(case.pattern) == (case.name not in ("json_string", "url"))
    dfa = regex_byte_dfa(case.pattern, ALPHABET)
    for text in case.examples:
        assert dfa.matches(text.encode()), text
        assert not dfa.matches(text.encode() + b"\x7f"), text


@pytest.mark.parametrize("pattern, error", [
    ("a{3,2}", RegexSyntaxError),
    ("(ab", RegexSyntaxError),
    ("ab)", RegexSyntaxError),
    ("a**", RegexSyntaxError),
    ("*a", RegexSyntaxError),
    ("[b-a]", RegexSyntaxError),
    ("a{20000}", RegexTooLargeError),
    ("(" * 101 + "a" + ")" * 101, RegexTooLargeError),
])
def test_refused_patterns_raise_the_general_paths_error(pattern, error):
    assert not _kernel_takes(pattern)
    with pytest.raises(error) as info:
        regex_byte_dfa(pattern, ALPHABET)
    assert info.value.offset is not None
    assert (type(info.value).__name__, str(info.value)) == _outcome(pattern, re.UNICODE)


def test_limits_refuse_in_the_kernel_as_in_the_general_path():
    for pattern, limits in [("(?:ab){3}", {"max_positions": 5}), ("a{3}", {"max_repeat": 2}),
                            ("(?:a{100}){100}", {"max_positions": 9_999})]:
        assert not _kernel_takes(pattern, **{"max_repeat": 10_000, "max_positions": 100_000,
                                             **limits})
        with pytest.raises(RegexTooLargeError):
            regex_byte_dfa(pattern, ALPHABET, **limits)
    # an NFA past the kernel's closure bitsets goes the general way, same DFA
    pattern = "(?:a|b){0,9000}"
    assert not _kernel_takes(pattern)
    assert _outcome(pattern, 0) == _outcome(pattern, re.UNICODE)


def test_the_kernels_nfa_matches_re():
    rng = random.Random(7)
    for pattern in [r"(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])(\.(25[0-5]|[0-9])){3}",
                    "(a|)*b{2,}?", "()*x", "[+-]?[0-9]+(?:[eE][+-]?[0-9]+)?", "a{0}b", ""]:
        prog, start, final = simple_ascii_nfa(pattern.encode(), 10_000, 100_000)
        assert start >= 0, pattern
        dfa = regex_byte_dfa(pattern, ALPHABET)
        rx = re.compile(pattern)
        for _ in range(300):
            text = "".join(rng.choice("0123456789.+-eEabx") for _ in range(rng.randrange(12)))
            assert dfa.matches(text.encode()) == bool(rx.fullmatch(text)), (pattern, text)
