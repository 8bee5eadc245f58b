"""Lookahead, lookbehind, atomic groups and possessive quantifiers compile
exactly: the language is ``re.fullmatch``'s (hand-picked cases, every terminal
of lark's ``common.lark``; random regexes in test_fuzz_regex.py); scoped type flags follow ``re``; deep
nesting and oversized patterns are refused with a typed error and an offset."""

from __future__ import annotations

import itertools
import random
import re
import time

import pytest

from constrain import RegexTooLargeError, UnsupportedRegexError, compile_regex
from constrain.automata.byte_dfa import char_dfa_to_bytes, trim_and_minimize
from constrain.automata.char_dfa import build_char_dfa
from constrain.automata.regex_syntax import MAX_DEPTH, parse_regex
from constrain.errors import GrammarTooComplexError
from byte_vocab import byte_vocabulary


@pytest.fixture(scope="module")
def vocab():
    return byte_vocabulary()


def byte_dfa(pattern: str, max_states: int = 20_000):
    return trim_and_minimize(char_dfa_to_bytes(
        build_char_dfa(parse_regex(pattern), max_states=max_states), max_states=4 * max_states))


def _samples(pattern: str, alphabet: str, exhaustive: int = 4, n: int = 3000) -> set[str]:
    rnd = random.Random(pattern)
    out = {"".join(s) for k in range(exhaustive + 1)
           for s in itertools.product(alphabet[:6], repeat=k)}
    for _ in range(n):
        out.add("".join(rnd.choice(alphabet) for _ in range(rnd.randint(0, 10))))
    return out


CASES = [
    r"(?<=ab)c", r"a(?<=a)b", r"x*(?<!x)y", r"(?=ab)a.", r"(?!ab)..", r"a(?=b)", r"a(?!b)",
    r"(?>a|ab)c", r"(?>a*)a", r"(?>a*?)a", r"a*+b", r"(?>a+|b)+", r"(?>ab|a)b", r"(?>a{1,3})a",
    r"(?>(?:ab|a)(?:c|bc))", r"(?>a?)(?=b)b", r"(?=(?>a*)b)a*b", r"(?>(?<=a)b|ab)*",
    r'".*?(?<!\\)(\\\\)*?"', r'(?>".*?(?<!\\)(\\\\)*?")',
    r"(?=a$)a", r"(?=.*b)a*b?", r"(?=(?=a)a)a", r"(?!a(?!b))..", r"\b(?<=a)b?", r"(?<=\ba)b",
    r"(?<!^)a", r"(?<=^)a", r"(?i)(?<=k)x", r"((?<=x)y|x)*", r"(?<!a)(?<=b)c|.c", r"(?m)(?<=\n)a",
    r"(?=\w\b)..?", r"(?<=a\b).", r"(?<!a\b)\W", r"a(?=\Z)", r"a(?!$)\n?", r"(?:(?!ab).)*",
    r"(?:a(?=b)|b(?!a)|c)+", r"(?<=(?<=a)b)c", r"(?<=a(?<!b))c", r"(?=a(?=b(?=c)))abc",
    # Python's rule for an iteration that matched the empty string, in atomic groups
    r"(?>(|a)*)a?", r"(?>(a|)*)b?", r"(?>(|a)+)a", r"(?>(|a)*?)b", r"(?>(?:a?){2,5})a",
    r"(?>(?:|a){2,5})a*", r"(?>(?:(?:|a)|b)*)b?", r"(?>(?:a*)*)a", r"(?>(?:|a){0,3})a?",
    r"(?>(?:b*|a)*)c?", r"(?>(?:a?b?)+?)b", r"(?>(?:a|(?:)){1,3}?)a", r"(?i)(?>(a?){2,30}b)",
    # inside a lookbehind: lookaheads (looking past its end), '$', atomic groups
    r"[ab]*(?<=a(?=b))b", r"(?<!a(?=b)).b?", r"[ab]*(?<!a(?!b))[ab]*", r"a\n?(?<=a$)",
    r"(?<!a$)[ab\n]*", r"[ab\n]*(?<=b$)[ab\n]?", r"(?:(?<=a(?=b))b|a)*", r"[ab]*(?<=(?=a)a)b?",
    r"[ab]*(?<=a(?=[bc](?<=ab)))[bc]", r"[ab]*(?<!(?=b)[ab])a", r"[ab]*(?<=a(?=b)|b(?=a))[ab]*",
    r"(?m)[ab\n]*(?<=a$)\n[ab]*", r"[abx]*(?<=x(?>a|b))b?", r"[ab]*(?<=(?>a|b)(?=b))b",
    r"[ab]*(?<=a(?=b$))b\n?", r"(?:(?<!\b(?=a)[ab])[ab ])*",
    # inside an atomic group: lookaheads, assertions on the next character and
    # lookbehinds that pass conditions on (a path's match counts if they hold)
    r"x(?>ab(?=c))c?", r"(?>a\b)b?", r"(?>a$)\n?", r"(?>a|ab)$", r"(?>a(?=b)|ab)b?c?",
    r"(?>a(?!b)|ab)b?", r"(?>a\b|ab)b?c?", r"(?:a\b)*+b?", r"(?>(?:a|ab)(?=c))c",
    r"(?>a*(?=b))b", r"(?>a*?(?=ab))ab", r"(?>[ab]*\b)[ ab]*", r"(?>a+$|a)\n?a?",
    r"(?>a(?<=a(?=b))|ab)b?", r"(?>(?:a|b)+?(?=c))c+", r"(?>a\Z|a)b?", r"(?>a(?=b)|a)b?",
    r"(?>a(?=bc)|a(?=b)|a)[bc]*", r"(?>(?=a)[ab]|b)+", r"(?>a\B|a)[ab ]?",
    r"(?:(?>a|ab)(?=b))*b?", r"(?>.(?=.$)|.)+\n?", r"(?>x*(?!y))y?", r"(?>(?:a|ab)(?!c))c?",
    r"a(?>(?<=a$))\n?", r"(?>\b[ab]+\b| )+", r"(?>a(?=a)|a(?=b)|ab)*[ab]?",
    # an empty iteration whose threads met the same assertion in the iteration
    # before: the path, not the thread alone, says where it goes (the first
    # three accepted "a", "ab" and " ")
    r"(?:(?:\b\b|a)++|b)", r"(?>(?:\b\b|ab)+)|a+", r"x?(?>(?:\B\B| )+)x?",
    r"(?>(?:\b\b\b|a)*)b", r"(?>(?:(?:\b\b)*|a)+)a?",
    # a possessive count: re commits each iteration once it has matched, so an
    # iteration short of the minimum does not undo the one before (read as
    # (?>x{m,n}), "aba" matched the first four)
    r"(?:a|ab){2}+", r"(?:a|ab){2,3}+b?", r"(?:a.*b){2}+", r"(?:a(?:b|$)??){2}+",
    r"(?:ab|a){2}+b?", r"(?:b|a+){2,}+b?", r"(?:a|b?){3}+a?", r"[ab]{2,3}+b",
]

# an atomic body with a star under an unbounded lookahead: each character read
# added a waiting match like the ones before it, so no two states were the same
# and these ran out of the 30 s budget (max_states 200 ran out at once)
ATOMIC_LOOKAHEADS = [
    r"(?>(?=a+b)a*)b", r"(?>(?=\d+px)\d*)px", r"(?>a*(?=a*b))b", r"(?>(?!a*c)a*)b",
    r"(?:(?=a+b)a)*+b", r"(?>(?=a*b)(?:a|ab)*)b?", r"(?>(?=.*c)[ab]*)c", r"(?>(?:a(?=a*b))*)b",
    r"(?>(?=a+b)a*|b)+b?",
]
CASES += ATOMIC_LOOKAHEADS


@pytest.mark.parametrize("pattern", ATOMIC_LOOKAHEADS)
def test_atomic_bodies_under_unbounded_lookaheads_stay_small(pattern):
    assert byte_dfa(pattern, max_states=200).transitions.shape[0] < 100


@pytest.mark.parametrize("pattern", CASES)
def test_lookaround_cases_agree_with_re(pattern):
    dfa = byte_dfa(pattern)
    rx = re.compile(pattern)
    for s in _samples(pattern, "abcxy\\\"\n é"):
        assert dfa.matches(s.encode()) == bool(rx.fullmatch(s)), (pattern, s)


def _common_lark_terminals() -> dict[str, str]:
    """Every terminal of lark's ``common.lark``, as the regex lark builds for it."""
    lark = pytest.importorskip("lark")
    from pathlib import Path

    from lark.load_grammar import load_grammar

    text = (Path(lark.__file__).parent / "grammars" / "common.lark").read_text()
    names = re.findall(r"^([A-Z][A-Z_]*)\s*:", text, re.M)
    grammar = "\n".join(f"%import common.{n}" for n in names)
    grammar += "\nstart: " + " | ".join(names) + "\n"
    g, _ = load_grammar(grammar, "<common>", [], False)
    terms, _, _ = g.compile(["start"], set(names))
    return {t.name: t.pattern.to_regexp() for t in terms if t.name in names}


_COMMON_ALPHABET = "0123456789abefxzAEZ_.+-\"\\ \t\f\r\n#/*"


def test_every_common_lark_terminal_agrees_with_re():
    terminals = _common_lark_terminals()
    assert {"ESCAPED_STRING", "C_COMMENT", "SIGNED_NUMBER", "CNAME", "NEWLINE"} <= set(terminals)
    for name, pattern in terminals.items():
        dfa = byte_dfa(pattern)
        rx = re.compile(pattern)
        samples = _samples(pattern, _COMMON_ALPHABET, exhaustive=2, n=4000)
        # strings of the language, then near it
        rnd = random.Random(name)
        seeds = ['"a\\"b"', '"\\\\"', '""', "/* x */", "1.5e-3", "-.5", "_a1", "\r\n\n", "# c",
                 "// c", "-- c", "0x", "  \t"]
        for s in seeds:
            for _ in range(20):
                i = rnd.randint(0, len(s))
                samples.add(s[:i] + rnd.choice(_COMMON_ALPHABET) + s[i:])
                samples.add(s[:i] + s[i + 1:])
            samples.add(s)
        accepted = 0
        for s in samples:
            expected = bool(rx.fullmatch(s))
            accepted += expected
            assert dfa.matches(s.encode()) == expected, (name, pattern, s)
        assert accepted, name


def test_escaped_string_compiles_to_its_exact_language(vocab):
    g = compile_regex(_common_lark_terminals()["ESCAPED_STRING"], vocab)
    assert g.matches('"a\\"b"') and g.matches('""') and g.matches('"\\\\"')
    assert not g.matches('"a\\"') and not g.matches('"\\\\\\"')
    assert g.matches('"a"b"')  # re.fullmatch: the lazy .*? may run past a quote


@pytest.mark.parametrize("pattern", [r"(?a)(?u:\w)", r"(?a)(?u:\D)", r"(?a)(?u:\W)",
                                     r"(?a)(?u:\S)", r"(?a)(?u:\b).", r"(?a:\w)", r"(?a:\d)x",
                                     r"(?a)(?i:(?u:k))", r"(?i)(?a:k)", r"(?a)(?u:\B)."])
def test_scoped_type_flags_follow_re(vocab, pattern):
    g = compile_regex(pattern, vocab)
    for c in ["é", "١", "\u00a0", "a", " ", "k", "K", "\u212a", "ß", "_", "\u2028", "1"]:
        for s in (c, c + "x"):
            assert g.matches(s) == bool(re.fullmatch(pattern, s)), (pattern, s)


@pytest.mark.parametrize("shape", ["({})", "(?:b|{})", "(?i:{})", "(?:{})*", "(?={})a", "({}|\\d)"])
def test_deep_nesting_is_refused_with_an_offset(vocab, shape):
    inner = "a"
    for _ in range(MAX_DEPTH):
        inner = shape.format(inner)
    try:
        compile_regex(inner, vocab)
    except UnsupportedRegexError:
        pass  # lookahead nested in lookahead past the size of an automaton: fine
    except GrammarTooComplexError:
        pass
    deep = shape.format(inner)
    t = time.perf_counter()
    with pytest.raises(RegexTooLargeError, match="nested") as info:
        compile_regex(deep * 3, vocab)
    assert time.perf_counter() - t < 1.0
    opens = [i for i, c in enumerate(deep) if c == "("]
    assert info.value.offset == opens[MAX_DEPTH]


def test_parentheses_in_verbose_comments_are_not_groups(vocab):
    # a comment's parentheses are text Python's parser skips: they used to
    # count toward the nesting limit and refuse a valid pattern
    comment = "# (" + "(" * (MAX_DEPTH + 50) + "\n"
    pattern = "a " + comment + "b [#(] c"
    for p, flags in ((pattern, re.X), ("(?x)" + pattern, 0), ("(?ix)" + pattern, 0)):
        g = compile_regex(p, vocab, flags=flags) if flags else compile_regex(p, vocab)
        for s in ("ab#c", "ab(c", "abc", "a b#c"):
            assert g.matches(s) == bool(re.fullmatch(p, s, flags)), (p, s)
    # outside verbose mode a "#" starts no comment: those are groups (unclosed)
    with pytest.raises(RegexTooLargeError, match="nested"):
        compile_regex(pattern, vocab)
    # and real nesting past the limit is refused in verbose mode too, where it is
    deep = "(" * (MAX_DEPTH + 1) + "a" + ")" * (MAX_DEPTH + 1)
    with pytest.raises(RegexTooLargeError, match="nested") as info:
        compile_regex("(?x) # (((\n" + deep, vocab)
    assert info.value.offset == len("(?x) # (((\n") + MAX_DEPTH


def test_size_limit_covers_the_whole_pattern(vocab):
    t = time.perf_counter()
    with pytest.raises(RegexTooLargeError, match="expands to more than") as info:
        compile_regex("a{10000}" * 60, vocab)
    assert time.perf_counter() - t < 1.0
    assert info.value.offset == 81  # the eleventh repetition passes 100,000
    with pytest.raises(RegexTooLargeError, match="expands to more than"):
        compile_regex("(?:b|a{10000})" * 11, vocab)
    parse_regex("a{10000}" * 10)  # exactly the limit
