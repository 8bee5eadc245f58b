"""The JSON lexemes written down state by state (constrain.cfg.lexemes) accept
exactly what the regex pipeline builds from the same patterns, over full and
restricted alphabets."""

from __future__ import annotations

import numpy as np
import pytest

from automata_testing import same_language
from constrain.automata.json_encoding import (CANON_ANY, JSON_CHAR_ANY, JSON_CODEPOINT, JSON_INTEGER,
                                          JSON_NUMBER)
from constrain.cfg.lexemes import builtin_dfa
from constrain.cfg.lexer import _regex_literal
from constrain.regular.regex import regex_byte_dfa

PATTERNS = [JSON_NUMBER, JSON_INTEGER] + [
    '"' + char + quant + '"' + tail
    for char in (JSON_CHAR_ANY, CANON_ANY) for quant in "*+" for tail in ("", ":", r"\:", ",", "é")
] + [
    # length-bounded strings, as json_schema writes them ({lo}, {lo,hi}, {lo,})
    '"' + JSON_CODEPOINT + bounds + '"' + tail
    for bounds in ("{0}", "{1}", "{0,1}", "{0,3}", "{2,5}", "{3,}", "{0,}") for tail in ("", ":")
]


def _alphabets():
    rng = np.random.default_rng(7)
    out = [np.ones(256, dtype=np.bool_)]
    ascii_only = np.zeros(256, dtype=np.bool_)
    ascii_only[:128] = True
    out.append(ascii_only)
    for _ in range(3):
        a = np.ones(256, dtype=np.bool_)
        a[rng.choice(256, 48, replace=False)] = False
        out.append(a)
    # SmolLM2's: no C0, C1, F1-FF and a few controls (every state stays live,
    # so the tables are only restricted, not trimmed)
    byte_bpe = np.ones(256, dtype=np.bool_)
    byte_bpe[[4, 6, 19, 20, 22, 29, 0xC0, 0xC1]] = False
    byte_bpe[0xF1:] = False
    out.append(byte_bpe)
    no_quote = np.ones(256, dtype=np.bool_)
    no_quote[ord('"')] = False
    out.append(no_quote)
    return out


@pytest.mark.parametrize("pattern", PATTERNS)
def test_builtin_equals_regex_pipeline(pattern):
    for alphabet in _alphabets():
        fast = builtin_dfa(pattern, alphabet, _regex_literal)
        assert fast is not None, pattern
        try:
            slow = regex_byte_dfa(pattern, alphabet)
        except Exception:  # the alphabet spells nothing: the builtin is empty too
            assert not fast.accepting.any()
            continue
        assert same_language(fast, slow), (pattern, int(alphabet.sum()))


@pytest.mark.parametrize("pattern", [
    r'"(?:[^"\\\x00-\x1f]|\\["\\/bfnrt]|\\u[0-9a-fA-F]{4}){0,20}"',
    '"' + JSON_CHAR_ANY + '*"' + r"\s*:", JSON_NUMBER + "x", "-?[0-9]+", '"' + JSON_CHAR_ANY,
])
def test_other_patterns_take_the_pipeline(pattern):
    assert builtin_dfa(pattern, np.ones(256, dtype=np.bool_), _regex_literal) is None


def test_key_terminal_walks():
    dfa = builtin_dfa('"' + CANON_ANY + '*":', np.ones(256, dtype=np.bool_), _regex_literal)
    for good in ['"":', '"a\\u001f":', '"\\n\\"":', '"é€😀":']:
        assert dfa.matches(good.encode()), good
    for bad in ['"\\/":', '"\\u0041":', '"\\u001F":', '"a"', '"\x01":', '"\\ud800":']:
        assert not dfa.matches(bad.encode()), bad
    assert not dfa.matches(b'"\xed\xa0\x80":')  # a surrogate in UTF-8


@pytest.mark.parametrize("pattern", PATTERNS)
def test_terminal_automata_write_builtins_in_place(pattern):
    # TerminalAutomata writes a JSON lexeme's table straight into its stacked
    # table (builtin_template): the rows must spell what builtin_dfa builds
    from constrain.automata.byte_dfa import ByteDFA
    from constrain.cfg.lexemes import builtin_template
    from constrain.cfg.ir import GrammarIR, Terminal
    from constrain.cfg.lexer import TerminalAutomata

    terminals = [Terminal("A", "a"), Terminal("X", pattern), Terminal("B", "b")]
    ir = GrammarIR(terminals, ["start"], [(0, (0, 1, 2))], 0)
    for alphabet in _alphabets():
        ta = TerminalAutomata(ir, alphabet, max_states=100_000, deadline=None)
        lo, hi = int(ta.offsets[1]), int(ta.offsets[2])
        # read through the virtual rows (a bounded string writes two layers)
        mine = ByteDFA(ta.rows_of(1), ta.accepting[lo:hi].copy())
        want = builtin_dfa(pattern, alphabet, _regex_literal)
        if builtin_template(pattern, alphabet, _regex_literal) is not None:
            assert np.array_equal(mine.transitions, want.transitions), int(alphabet.sum())
            assert np.array_equal(mine.accepting, want.accepting)
        if want.accepting.any():
            assert ta.usable[1] and same_language(mine, want), (pattern, int(alphabet.sum()))
        # the literals around it are untouched by the column zeroing
        if alphabet[ord("a")] and alphabet[ord("b")]:
            assert ta.rows_of(0)[1, ord("a")] == 2
            assert ta.rows_of(2)[1, ord("b")] == 2
