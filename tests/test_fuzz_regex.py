"""Fuzzing the regex front end (hypothesis; ``TRELLIS_FUZZ=long`` draws
:data:`fuzz_settings.LONG_FACTOR` times as many examples):

* random regexes, lookaround and atomic groups included, against
  ``re.fullmatch`` token by token over a small vocabulary: the mask equals the
  tokens ``advance`` takes, every allowed token leads to a state that can still
  finish (no unsound mask), acceptance is ``re.fullmatch``'s;
* malformed patterns, flags and budgets raise nothing but ``ConstraintError``;
* no case takes more than a second.

The counts (inputs, refusals, crashes, slow cases, unsound masks) print at the
end of the module (``pytest -s``) and go to ``$TRELLIS_FUZZ_REPORT``."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from constrain import ConstraintError, GrammarTooComplexError, UnsupportedRegexError, \
    Vocabulary, compile_regex
from constrain.automata.liveness import coreachable_dense
from fuzz_settings import FuzzLog, case_clock, fuzz
from regex_strategies import (OracleTimeout, fullmatch_oracle, lookaround_regex_and_string,
                              regex_and_string)

LOG = FuzzLog("fuzz_regex")
#: a case may take this long (seconds), compile and walk together; compiles
#: get half of it as their time budget
CASE_SECONDS = 1.0
BUDGET = CASE_SECONDS / 2

_PIECES = [b"ab", b"abc", b"12", b" a", "é".encode(), "😀".encode(), "中文".encode(), b"\\n"]
VOCAB = Vocabulary.from_tokens([bytes([b]) for b in range(256)] + _PIECES + [b"</s>"],
                               [256 + len(_PIECES)])
EOS = VOCAB.eos_token_ids[0]
_BY_LENGTH = sorted(range(len(VOCAB.tokens) - 1), key=lambda t: -len(VOCAB.tokens[t]))


@pytest.fixture(scope="module", autouse=True)
def _report():
    compile_regex(r"(?=a)a[ab]*(?>b+)\b", VOCAB)  # kernels compiled before any case is timed
    yield
    LOG.flush()


def _tokens(data: bytes) -> list[int]:
    """``data`` as tokens, longest first at each position."""
    out, i = [], 0
    while i < len(data):
        for t in _BY_LENGTH:
            tok = VOCAB.tokens[t]
            if data.startswith(tok, i):
                out.append(t)
                i += len(tok)
                break
    return out


def _check(pattern: str, text: str, front_end: str) -> None:
    t0 = case_clock()
    try:
        g = compile_regex(pattern, VOCAB, max_states=3000, time_budget=BUDGET)
    except (UnsupportedRegexError, GrammarTooComplexError):
        LOG.add(front_end, "refused (typed)")
        assume(False)
    except ConstraintError:
        LOG.add(front_end, "refused (typed)")
        assume(False)
    except Exception:
        LOG.add(front_end, "crash")
        raise
    try:
        expected = fullmatch_oracle(pattern, text)
    except OracleTimeout:
        LOG.add(front_end, "oracle timeout")
        assume(False)
    live = coreachable_dense(g.dfa.transitions, g.dfa.accepting)
    state = g.initial_state()
    for tok in _tokens(text.encode("utf-8")) + [None]:
        allowed = set(g.allowed_token_ids(state).tolist())
        takes = {t for t in range(len(VOCAB)) if t != EOS and g.advance(state, t) is not None}
        if g.is_accepting(state):
            takes.add(EOS)
        if allowed != takes:
            LOG.add(front_end, "mask != advance")
        assert allowed == takes, (pattern, text)
        dead = [t for t in allowed if t != EOS and not live[g.advance(state, t)]]
        if dead:
            LOG.add(front_end, "unsound mask")
        assert not dead, (pattern, text, dead)
        if tok is None:
            break
        nxt = g.advance(state, tok)
        if nxt is None:
            break
        state = nxt
    else:
        state = None
    accepted = state is not None and tok is None and g.is_accepting(state)
    if accepted != expected or g.matches(text) != expected:
        LOG.add(front_end, "disagrees with re")
    assert accepted == expected == g.matches(text), (pattern, text)
    elapsed = case_clock() - t0
    if elapsed > CASE_SECONDS:
        LOG.add(front_end, "over 1 s")
    assert elapsed <= CASE_SECONDS, (pattern, elapsed)
    LOG.add(front_end, "agrees with re")


@fuzz(80)
@given(regex_and_string())
def test_regexes_agree_with_re_token_by_token(case):
    _check(*case, "regex")


@fuzz(70)
@given(lookaround_regex_and_string())
def test_lookaround_regexes_agree_with_re_token_by_token(case):
    _check(*case, "regex (lookaround, atomic)")


_META = list("()[]{}?*+|^$\\.-:=!<>,#0123456789aAbBdDsSwWzZPxuUN ") + ["(?", "(?<", "(?P", "\\1",
                                                                     "{2,", "}", "é", "\n"]


def _expect_typed(front_end: str, call) -> None:
    t0 = case_clock()
    try:
        call()
        LOG.add(front_end, "compiled")
    except ConstraintError:
        LOG.add(front_end, "refused (typed)")
    except Exception:
        LOG.add(front_end, "non-ConstraintError exception")
        raise
    elapsed = case_clock() - t0
    if elapsed > CASE_SECONDS:
        LOG.add(front_end, "over 1 s")
    assert elapsed <= CASE_SECONDS, elapsed


@fuzz(150)
@given(st.lists(st.sampled_from(_META), max_size=24).map("".join),
       st.sampled_from([0, re.I, re.A, re.M, re.S, re.X, re.I | re.A, re.U, re.L, 1 << 20]))
def test_malformed_regexes_raise_only_typed_errors(pattern, flags):
    _expect_typed("regex (malformed)",
                  lambda: compile_regex(pattern, VOCAB, flags=flags, time_budget=BUDGET))


@fuzz(40)
@given(st.sampled_from(["(", "(?:", "(?=", "(?>", "(?<=a", "[", "a{", "(a|"]),
       st.integers(0, 3000), st.integers(0, 40))
def test_deep_and_huge_patterns_raise_only_typed_errors(opener, depth, repeat):
    closer = {"[": "]", "a{": "}"}.get(opener, ")")
    pattern = opener * depth + "a" + closer * depth + (f"{{{repeat * 997}}}" if repeat else "")
    _expect_typed("regex (deep, huge)",
                  lambda: compile_regex(pattern, VOCAB, time_budget=BUDGET))


@pytest.mark.parametrize("name", ["time_budget", "max_states", "max_repeat", "max_positions",
                                  "max_mask_bytes"])
@pytest.mark.parametrize("value", [0, -1, math.nan, math.inf, -math.inf, True, "1", None, 1e-12,
                                   2 ** 70, np.int64(5), 1.5], ids=repr)
def test_budget_arguments_raise_only_typed_errors(name, value):
    _expect_typed("regex (budgets)", lambda: compile_regex("ab*", VOCAB, **{name: value}))
