"""Token-level soundness and completeness of compiled regexes with real
vocabularies (SmolLM2, o200k), against ``re.fullmatch`` as the oracle.

For hypothesis-generated (regex, string) pairs:
* walking the tokenizer's encoding of the string through ``advance`` ends in an
  accepting state iff ``re.fullmatch`` matches;
* every token on the path of a matching string is set in ``fill_bitmask``, and the
  mask agrees with ``advance`` on sampled tokens;
* random walks over allowed tokens only build prefixes of matching strings (each
  prefix, completed by the shortest continuation the automaton knows, is checked
  with ``re.fullmatch``), and every walk ending in EOS spells a matching string.
"""

from __future__ import annotations

import random

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings

from constrain import GrammarTooComplexError, allocate_bitmask, bitmask_to_ids, compile_regex
from regex_strategies import OracleTimeout, fullmatch_oracle, regex_and_string

EXAMPLES = 500
_SETTINGS = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck),
                     database=None, derandomize=True)


class Checker:
    def __init__(self, vocab, encode):
        self.vocab = vocab
        self.encode = encode
        self.cache = {}
        self.bitmask = allocate_bitmask(1, len(vocab), backend="numpy")
        self.eos = vocab.eos_token_ids[0]

    def grammar(self, pattern):
        """The compiled pattern, or None when it exceeds the (small) test budget:
        refusing with GrammarTooComplexError is the documented behaviour, and the
        exploded automata would only slow the suite down."""
        if pattern not in self.cache:
            if len(self.cache) > 64:
                self.cache.clear()
            try:
                self.cache[pattern] = compile_regex(pattern, self.vocab, max_states=2000)
            except GrammarTooComplexError:
                self.cache[pattern] = None
        return self.cache[pattern]

    def bit(self, t):
        return bool((int(self.bitmask[0, t >> 5]) >> (t & 31)) & 1)

    def check(self, pattern, text, rnd):
        """Check one pair; False when the tokenizer cannot encode ``text`` exactly
        (it holds a byte no token has), so the pair says nothing."""
        ids = self.encode(text)
        if self.vocab.decode(ids) != text.encode():
            return False
        g = self.grammar(pattern)
        if g is None:
            return False
        try:
            expected = fullmatch_oracle(pattern, text)
        except OracleTimeout:
            return False
        state = g.initial_state()
        path_ok = True
        for t in ids:
            g.fill_bitmask(state, self.bitmask, 0)
            nxt = g.advance(state, t)
            assert self.bit(t) == (nxt is not None), (pattern, text, t)
            self._check_sample(g, state, rnd)
            if nxt is None:
                path_ok = False
                break
            state = nxt
        accepted = path_ok and g.is_accepting(state)
        assert accepted == expected, (pattern, text, ids)
        if expected:
            g.fill_bitmask(state, self.bitmask, 0)
            assert self.bit(self.eos)
            end = g.advance(state, self.eos)
            assert g.is_terminated(end)
            assert g.allowed_token_ids(end).size == 0
        self.random_walks(g, pattern, rnd)
        return True

    def _check_sample(self, g, state, rnd):
        """The mask agrees with advance on a sample of tokens."""
        ids = g.allowed_token_ids(state)
        assert np.array_equal(ids, bitmask_to_ids(self.bitmask[0], len(self.vocab)))
        for t in rnd.sample(range(len(self.vocab)), 8):
            assert self.bit(t) == (g.advance(state, t) is not None)
        for t in ids[:: max(1, len(ids) // 8)]:
            assert g.advance(state, int(t)) is not None

    def random_walks(self, g, pattern, rnd, walks=2, steps=10):
        for _ in range(walks):
            state, out = g.initial_state(), b""
            for _ in range(steps):
                ids = g.allowed_token_ids(state)
                assert ids.size, (pattern, out)  # never a dead end
                if g.is_accepting(state) and rnd.random() < 0.3:
                    t = self.eos
                else:
                    t = int(rnd.choice(ids))
                state = g.advance(state, t)
                assert state is not None
                if g.is_terminated(state):
                    assert _matches_or_timeout(pattern, out.decode()), (pattern, out)
                    break
                out += self.vocab.token_bytes(t)
                witness = out + shortest_completion(g.dfa, state)
                assert _matches_or_timeout(pattern, witness.decode("utf-8")), (pattern, out, witness)


def _matches_or_timeout(pattern: str, text: str) -> bool:
    """True when ``re`` matches or gives up backtracking (inconclusive)."""
    try:
        return fullmatch_oracle(pattern, text)
    except OracleTimeout:
        return True


def shortest_completion(dfa, state: int) -> bytes:
    """The shortest bytes that take the byte DFA from ``state`` to acceptance
    (breadth-first search), so ``re`` can judge whether the prefix was live."""
    if dfa.accepting[state]:
        return b""
    parent = {state: None}
    frontier = [state]
    while frontier:
        nxt = []
        for s in frontier:
            for b in range(256):
                t = int(dfa.transitions[s, b])
                if t == 0 or t in parent:
                    continue
                parent[t] = (s, b)
                if dfa.accepting[t]:
                    path = []
                    while parent[t] is not None:
                        s0, b0 = parent[t]
                        path.append(b0)
                        t = s0
                    return bytes(reversed(path))
                nxt.append(t)
        frontier = nxt
    raise AssertionError(f"state {state} is live but cannot reach acceptance")


@pytest.fixture(scope="module")
def smollm2_checker(smollm2_vocab, smollm2_tokenizer):
    return Checker(smollm2_vocab, lambda s: smollm2_tokenizer.encode(s, add_special_tokens=False))


@pytest.fixture(scope="module")
def o200k_checker(o200k_vocab, o200k_encode):
    return Checker(o200k_vocab, o200k_encode)


def test_smollm2_tokens_agree_with_re(smollm2_checker):
    rnd = random.Random(0)

    @_SETTINGS
    @given(regex_and_string())
    def run(case):
        assume(smollm2_checker.check(*case, rnd))

    run()


def test_o200k_tokens_agree_with_re(o200k_checker):
    rnd = random.Random(1)

    @_SETTINGS
    @given(regex_and_string())
    def run(case):
        assume(o200k_checker.check(*case, rnd))

    run()


@pytest.mark.parametrize("pattern,good,bad", [
    (r"\d{3}-\d{4}", ["555-1234"], ["555-123", "5555-1234"]),
    (r"[a-z]{3,40}", ["abc", "hello"], ["ab", "Hello"]),
    (r"(é|😀)+", ["é😀é", "😀"], ["e"]),
    (r'"([^"\\\x00-\x1f]|\\["\\/bfnrt]|\\u[0-9a-fA-F]{4})*"', ['"a b"', '"\\n"', '"中文"'], ['"a', '"\\x"']),
])
def test_examples_smollm2(smollm2_checker, pattern, good, bad):
    rnd = random.Random(2)
    for s in good + bad:
        assert smollm2_checker.check(pattern, s, rnd)
