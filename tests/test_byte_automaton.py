"""The UTF-8 expansion's shortcut for "any non-ASCII character" builds exactly the
automaton the general construction builds."""

from __future__ import annotations

import numpy as np
import pytest

import constrain.byte_automaton as ba
from constrain.regex import regex_byte_dfa

PATTERNS = [
    r'"(?:[^"\\\x00-\x1f]|\\["\\/bfnrt]|\\u[0-9a-fA-F]{4}){0,20}"',
    r".{0,5}x", r"[^a]+", r"(?s).", r"[^\x00-\x7f]{2,3}", r"a[\u0080-\U0010ffff]b",
    r'[^"]{3,7}"', r"[^b-z]*", r'(?:[^"]|"[^"]){0,40}',
]


@pytest.mark.parametrize("pattern", PATTERNS)
def test_any_multibyte_shortcut_is_exact(pattern, monkeypatch):
    alphabet = np.ones(256, dtype=np.bool_)
    fast = regex_byte_dfa(pattern, alphabet)

    def general(b, state, t):  # the same set of code points, split so the shortcut is not taken
        ba._multibyte(b, state, [(0x80, 0x7FF, t), (0x800, 0xD7FF, t), (0xE000, 0x10FFFF, t)])

    monkeypatch.setattr(ba, "_any_multibyte", general)
    slow = regex_byte_dfa(pattern, alphabet)
    assert np.array_equal(fast.transitions, slow.transitions)
    assert np.array_equal(fast.accepting, slow.accepting)


@pytest.mark.parametrize("pattern", [
    "true|false", r'"IAB1"|"IAB1\-1"|"IAB1\-2"|"IAB2"', r"a\|b|c", "abc|ab|a", "é|€x|😀",
    r'"a\"b"|"\\\\"', "x|x|y",
])
def test_literal_alternation_terminal_equals_regex(pattern):
    """A terminal that is an alternation of literals is built as the trie of its
    strings; it accepts what the regex accepts, also over an alphabet missing a
    byte some alternatives need."""
    from automata_testing import same_language
    from constrain.lark_loader import Terminal
    from constrain.lexer import _regex_alternatives, terminal_dfa

    assert _regex_alternatives(pattern) is not None
    for alphabet in (np.ones(256, dtype=np.bool_), np.arange(256) != ord("1")):
        fast = terminal_dfa(Terminal("T", pattern), alphabet, max_states=1000, deadline=None)
        assert same_language(fast, regex_byte_dfa(pattern, alphabet))


def test_literal_alternation_edge_cases():
    from constrain.lexer import _regex_alternatives

    assert _regex_alternatives("abc") is None and _regex_alternatives("a|b*") is None
    assert _regex_alternatives("a|(b)") is None and _regex_alternatives(r"a\|b") is None
    assert _regex_alternatives("a|") == ["a", ""]


@pytest.mark.parametrize("base, prefixes, expected", [
    (r'"[ab]+"', [b'"a', b'"b'], None),  # every string excluded: the product trims to nothing
    (r'"[ab]{1,2}"', [b'"a"', b'"ab', b'"b'], r'"aa"'),  # dead trie nodes trimmed
    (r'"[a-z]*":', [b'"ab":', b'"cb":'], r'"(?:[a-z]*)":'),
])
def test_minus_prefixes_trims_dead_trie_nodes(base, prefixes, expected):
    from automata_testing import same_language
    alphabet = np.ones(256, dtype=np.bool_)
    out = ba.minus_prefixes(regex_byte_dfa(base, alphabet), prefixes)
    live = [s for s in range(1, out.num_states) if out.transitions[s].any() or out.accepting[s]]
    if expected is None:
        assert not out.transitions.any() and not out.accepting.any()  # empty: unusable
        return
    for s in live:  # every state with a way out can still accept
        assert out.accepting[s] or out.transitions[s].any()
    if expected == r'"aa"':
        assert same_language(out, regex_byte_dfa(expected, alphabet))
    else:
        for good in [b'"":', b'"a":', b'"abc":', b'"cc":']:
            assert out.matches(good)
        for bad in [b'"ab":', b'"cb":']:
            assert not out.matches(bad)
