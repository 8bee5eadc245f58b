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
