"""The UTF-8 expansion's shortcut for "any non-ASCII character" builds exactly the
automaton the general construction builds."""

from __future__ import annotations

import numpy as np
import pytest

import constrain.automata.byte_dfa as ba
from constrain.regular.regex import regex_byte_dfa

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
    from constrain.cfg.ir import Terminal
    from constrain.cfg.lexer import _regex_alternatives, terminal_dfa

    assert _regex_alternatives(pattern) is not None
    for alphabet in (np.ones(256, dtype=np.bool_), np.arange(256) != ord("1")):
        fast = terminal_dfa(Terminal("T", pattern), alphabet, max_states=1000, deadline=None)
        assert same_language(fast, regex_byte_dfa(pattern, alphabet))


def test_literal_alternation_edge_cases():
    from constrain.cfg.lexer import _regex_alternatives

    assert _regex_alternatives("abc") is None and _regex_alternatives("a|b*") is None
    assert _regex_alternatives("a|(b)") is None and _regex_alternatives(r"a\|b") is None
    assert _regex_alternatives("a|") == ["a", ""]


def _coreachable_from_start(dfa) -> bool:
    """Whether every state reachable from the start can still reach acceptance."""
    seen, todo = {1}, [1]
    while todo:
        s = todo.pop()
        for t in set(dfa.transitions[s].tolist()) - {0} - seen:
            seen.add(t)
            todo.append(t)
    live = {s for s in range(dfa.num_states) if dfa.accepting[s]}
    changed = True
    while changed:
        changed = False
        for s in seen - live:
            if set(dfa.transitions[s].tolist()) & live:
                live.add(s)
                changed = True
    return seen <= live


@pytest.mark.parametrize("base, prefixes, same_as, good, bad", [
    # every string excluded: the product is empty (its terminal unusable)
    (r'"[ab]+"', [b'"a', b'"b'], None, [], [b'"a"', b'"ab"']),
    # the trie node '"a' is dead (both its ways on are excluded): trimmed
    (r'"(?:a[bc]|d)"', [b'"ab', b'"ac'], r'"d"', [b'"d"'], [b'"ab"', b'"ac"']),
    (r'"[a-z]*":', [b'"ab":', b'"cb":'], None, [b'"":', b'"a":', b'"abc":', b'"cc":'],
     [b'"ab":', b'"cb":']),
])
@pytest.mark.parametrize("in_place", [False, True])
def test_minus_prefixes_trims_dead_trie_nodes(base, prefixes, same_as, good, bad, in_place):
    # in_place: the product TerminalAutomata writes into its stacked table
    # (exclusion_product), unused trie rows left zero
    from automata_testing import same_language
    from constrain.cfg.terminal_kernels import exclusion_product
    alphabet = np.ones(256, dtype=np.bool_)
    dfa = regex_byte_dfa(base, alphabet)
    if in_place:
        n = dfa.transitions.shape[0]
        m = 1 + sum(len(p) - 1 for p in prefixes)
        t = np.zeros((m + n, 256), np.int32)
        acc = np.zeros(m + n, np.bool_)
        t[m:], acc[m:] = dfa.transitions, dfa.accepting
        starts = np.cumsum([0] + [len(p) for p in prefixes]).astype(np.int64)
        data = np.frombuffer(b"".join(prefixes), np.uint8)
        assert exclusion_product(t, acc, m, data, starts, alphabet) == bool(good)
        out = ba.ByteDFA(t, acc)
    else:
        out = ba.minus_prefixes(dfa, prefixes)
    if not good:
        assert not out.transitions.any() and not out.accepting.any()  # empty: unusable
    else:
        assert _coreachable_from_start(out)
    if same_as is not None:
        assert same_language(out, regex_byte_dfa(same_as, alphabet))
    for text in good:
        assert out.matches(text), text
    for text in bad:
        assert not out.matches(text), text
