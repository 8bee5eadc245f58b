"""``search.dingo``: the exact best constrained block, checked against brute force
over every block on random small grammars, vocabularies, start states and
log-probabilities (with and without the mask column)."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from constrain import (
    ConstraintError,
    Constraint,
    EmptyLanguageError,
    GrammarTooComplexError,
    InvalidStateError,
    Vocabulary,
    compile_regex,
)
from search import DingoResult, dingo
from search.diffusion.dingo_dp import MASK

N_CASES = 2000


# -- the oracle ------------------------------------------------------------------------


def brute_force(lp, grammar, state):
    """Every block in lexicographic order (mask = id V, last): the best score and
    the lexicographically smallest block attaining it, and the second best score.
    Blocks with a ``-inf`` entry have probability zero and do not count; a prefix
    the grammar refuses is cut (no extension of it is valid)."""
    d, cols = lp.shape
    v = len(grammar.vocab)
    eos = set(grammar.vocab.eos_token_ids)
    scores = []  # (score, block) of every valid block, in lexicographic order

    def rec(i, q, acc, seq):
        if i == d:
            scores.append((acc, tuple(seq)))
            return
        for t in range(cols):
            x = lp[i, t]
            if x == -np.inf:
                continue
            if t == v:
                nq = q
            elif q == -1:
                if t not in eos:
                    continue
                nq = -1
            else:
                nq = grammar.advance(q, t)
                if nq is None:
                    continue
            seq.append(MASK if t == v else t)
            rec(i + 1, nq, acc + x, seq)
            seq.pop()

    rec(0, state, 0.0, [])
    if not scores:
        return None
    best = max(s for s, _ in scores)
    first = next(b for s, b in scores if s == best)
    others = [s for s, b in scores if b != first]
    second = max(others) if others else -math.inf
    return best, list(first), second


def replay(grammar, state, tokens):
    """The state after ``tokens`` (masks skipped, EOS padding after termination),
    or ``None`` if the block is not valid."""
    eos = set(grammar.vocab.eos_token_ids)
    for t in tokens:
        if t == MASK:
            continue
        if state == -1:
            if t not in eos:
                return None
            continue
        state = grammar.advance(state, t)
        if state is None:
            return None
    return state


# -- random cases ----------------------------------------------------------------------


def random_regex(rng: random.Random, alphabet: str, depth: int = 0) -> str:
    """A small random regex over ``alphabet``."""
    r = rng.random()
    if depth >= 3 or r < 0.3:
        if rng.random() < 0.25 and len(alphabet) > 1:
            chars = "".join(sorted(rng.sample(alphabet, rng.randint(1, len(alphabet)))))
            return f"[{chars}]"
        return rng.choice(alphabet)
    if r < 0.55:
        return "".join(random_regex(rng, alphabet, depth + 1) for _ in range(rng.randint(2, 3)))
    if r < 0.7:
        return "(" + "|".join(random_regex(rng, alphabet, depth + 1)
                              for _ in range(rng.randint(2, 3))) + ")"
    inner = "(" + random_regex(rng, alphabet, depth + 1) + ")"
    q = rng.choice(["*", "+", "?", "{1,3}", "{2}", "{0,2}"])
    return inner + q


def random_vocab(rng: random.Random, alphabet: str) -> Vocabulary:
    """At most 6 ids: short tokens over ``alphabet`` and one or two EOS ids."""
    n_eos = 1 if rng.random() < 0.8 else 2
    n_tok = rng.randint(2, 6 - n_eos)
    toks = set()
    while len(toks) < n_tok:
        length = rng.choice([1, 1, 2, 3])
        toks.add("".join(rng.choice(alphabet) for _ in range(length)).encode())
    tokens = sorted(toks)
    eos_ids = []
    for k in range(n_eos):
        pos = rng.randint(0, len(tokens))
        tokens.insert(pos, f"<e{k}>".encode())
    eos_ids = [i for i, t in enumerate(tokens) if t.startswith(b"<e")]
    return Vocabulary.from_tokens(tokens, eos_token_ids=eos_ids)


def random_state(rng: random.Random, grammar) -> int:
    """A state reached from the start by a few random allowed tokens (EOS
    included: the grammar is trimmed, so some token is always allowed)."""
    state = grammar.initial_state()
    for _ in range(rng.choice([0, 0, 1, 2, 3])):
        if grammar.is_terminated(state):
            break
        allowed = [int(t) for t in grammar.allowed_token_ids(state)]
        words = [t for t in allowed if t not in grammar.vocab.eos_token_ids]
        if words and rng.random() < 0.9:
            allowed = words  # EOS (a terminated start) in about one case in ten
        state = grammar.advance(state, rng.choice(allowed))
    return state


def random_logprobs(rng: random.Random, d: int, cols: int, kind: str) -> np.ndarray:
    """``kind``: ``"float"`` (random normals), ``"int"`` (small integers: many exact
    ties) or ``"sparse"`` (normals with ``-inf`` entries)."""
    np_rng = np.random.default_rng(rng.getrandbits(32))
    if kind == "int":
        return -np_rng.integers(0, 3, size=(d, cols)).astype(np.float64)
    lp = np_rng.normal(size=(d, cols)) * 2.0
    if kind == "sparse":
        lp[np_rng.random(size=(d, cols)) < 0.35] = -np.inf
    return lp


def cases():
    """``N_CASES`` random (grammar, state, logprobs) triples, derandomized."""
    rng = random.Random(20251129)
    made = 0
    while made < N_CASES:
        alphabet = "".join(rng.sample("abc", rng.randint(2, 3)))
        vocab = random_vocab(rng, alphabet)
        pattern = random_regex(rng, alphabet)
        lazy = rng.random() < 0.2
        try:
            try:
                grammar = compile_regex(pattern, vocab, max_mask_bytes=1 if lazy else 1 << 20)
            except GrammarTooComplexError:
                # a vocabulary that cannot spell the alphabet needs exact liveness,
                # hence eager rows and transitions, which count against the budget
                grammar = compile_regex(pattern, vocab, max_mask_bytes=1 << 20)
        except EmptyLanguageError:
            continue
        for _ in range(4):
            state = random_state(rng, grammar)
            d = rng.randint(0, 5) if rng.random() < 0.1 else rng.randint(1, 5)
            cols = len(vocab) + (1 if rng.random() < 0.35 else 0)
            kind = rng.choice(["float", "float", "int", "sparse"])
            yield pattern, grammar, state, random_logprobs(rng, d, cols, kind), kind
            made += 1


# -- the property ----------------------------------------------------------------------


def test_equals_brute_force():
    """On 2,000 random cases DINGO's score equals the best of all blocks, it returns
    ``None`` exactly when no block is valid, its block is valid (replayed through
    ``grammar.advance``) with the reported state and log-probability, and it is the
    lexicographically smallest best block unless the best is within rounding of
    another block's score."""
    stats = {"none": 0, "mask": 0, "lazy": 0, "terminated": 0, "tie": 0}
    for pattern, grammar, state, lp, kind in cases():
        where = f"{pattern!r} vocab={grammar.vocab.tokens} state={state}\n{lp!r}"
        want = brute_force(lp, grammar, state)
        got = dingo(lp, grammar, state)
        stats["mask"] += lp.shape[1] > len(grammar.vocab)
        stats["lazy"] += not grammar.tokens.eager
        stats["terminated"] += state == -1
        if want is None:
            assert got is None, where
            stats["none"] += 1
            continue
        assert got is not None, where
        best, block, second = want
        assert isinstance(got, DingoResult)
        assert len(got.tokens) == lp.shape[0], where
        assert abs(got.logprob - best) <= 1e-9, where
        cols = [len(grammar.vocab) if t == MASK else t for t in got.tokens]
        assert got.logprob == math.fsum(lp[i, c] for i, c in enumerate(cols)), where
        end = replay(grammar, state, got.tokens)
        assert end is not None and end == got.state, where
        if kind == "int" or best - second > 1e-9:
            # integer scores are exact: the tie-break rule is checked too
            assert got.tokens == block, where
        else:
            stats["tie"] += 1
    # the generator covers every kind of case
    assert stats["none"] >= 20 and stats["mask"] >= 300 and stats["lazy"] >= 100
    assert stats["terminated"] >= 20
    print(stats)


# -- details ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def ab():
    vocab = Vocabulary.from_tokens([b"a", b"b", b"ab", b"<eos>"], eos_token_ids=[3])
    return compile_regex(r"(ab)+", vocab)


def test_beats_independent_masking(ab):
    """Masking each position independently would pick ``a a``; the block must be
    ``a b`` (or ``ab`` then EOS)."""
    lp = np.log(np.array([[0.6, 0.1, 0.1, 0.2],
                          [0.7, 0.2, 0.05, 0.05]]))
    r = dingo(lp, ab, ab.initial_state())
    assert r.tokens == [0, 1]
    assert r.logprob == pytest.approx(math.log(0.6 * 0.2))
    assert r.state == ab.advance_many(1, [0, 1])


def test_mask_column(ab):
    """An undecided position costs its log-probability and does not move the state;
    it is reported as ``MASK``."""
    lp = np.log(np.array([[0.5, 0.1, 0.1, 0.1, 0.2],
                          [0.1, 0.1, 0.1, 0.1, 0.6],
                          [0.1, 0.5, 0.1, 0.1, 0.2]]))
    r = dingo(lp, ab, ab.initial_state())
    assert r.tokens == [0, MASK, 1]
    assert DingoResult.MASK == MASK == -1
    assert r.logprob == pytest.approx(math.log(0.5 * 0.6 * 0.5))


def test_terminated_and_eos(ab):
    """EOS only where the grammar accepts, then EOS padding; a terminated state only
    continues with EOS (or the mask)."""
    lp = np.log(np.array([[0.1, 0.1, 0.7, 0.1],
                          [0.1, 0.1, 0.1, 0.7],
                          [0.4, 0.3, 0.2, 0.1]]))
    r = dingo(lp, ab, 1)
    assert r.tokens == [2, 3, 3] and r.state == -1
    t = dingo(lp, ab, -1)
    assert t.tokens == [3, 3, 3] and t.state == -1
    # EOS is refused in a non-accepting state
    lp = np.log(np.array([[0.01, 0.01, 0.02, 0.96]]))
    assert dingo(lp, ab, 1).tokens == [2]


def test_none_and_zero_probability(ab):
    """``None`` when no block is valid or every valid block has probability 0."""
    lp = np.full((2, 4), -np.inf)
    lp[:, 1] = 0.0  # "b" only: never valid at the start
    assert dingo(lp, ab, 1) is None
    assert dingo(np.zeros((1, 4)), ab, -1).tokens == [3]
    only_letters = np.zeros((1, 4))
    only_letters[0, 3] = -np.inf
    assert dingo(only_letters, ab, -1) is None


def test_empty_block(ab):
    r = dingo(np.zeros((0, 4)), ab, 1)
    assert r.tokens == [] and r.logprob == 0.0 and r.state == 1


def test_float32_and_lists(ab):
    lp = np.log(np.array([[0.6, 0.1, 0.1, 0.2], [0.7, 0.2, 0.05, 0.05]]))
    assert dingo(lp.astype(np.float32), ab, 1).tokens == [0, 1]
    assert dingo(lp.tolist(), ab, 1).tokens == [0, 1]


def test_errors(ab):
    lp = np.zeros((2, 4))
    with pytest.raises(ConstraintError, match="expected 4 .*or 5 with a mask column"):
        dingo(np.zeros((2, 6)), ab, 1)
    with pytest.raises(ConstraintError, match="2-D"):
        dingo(np.zeros(4), ab, 1)
    with pytest.raises(ConstraintError, match="NaN"):
        dingo(np.full((2, 4), np.nan), ab, 1)
    with pytest.raises(ConstraintError, match="real numbers"):
        dingo(np.array([["a"] * 4]), ab, 1)
    # a ragged list was numpy's ValueError; scores whose block sum overflows gave
    # None ("no valid block") or fsum's OverflowError
    with pytest.raises(ConstraintError, match="2-D array"):
        dingo([[0.0] * 4, [0.0] * 3], ab, 1)
    for big in (1e308, -1e308):
        with pytest.raises(ConstraintError, match="overflows"):
            dingo(np.full((3, 4), big), ab, 1)
    for bad in (0, 99, -2, "1", None):
        with pytest.raises(InvalidStateError):
            dingo(lp, ab, bad)

    class Other(Constraint):
        vocab = ab.vocab
        initial_state = advance = is_accepting = is_terminated = fill_bitmask = None

    with pytest.raises(TypeError, match="regular constraint"):
        dingo(lp, Other(), 1)


def test_smollm2_block(smollm2_vocab):
    """On the real vocabulary the block is valid and at least as probable as
    constrained greedy decoding of the same block."""
    g = compile_regex(r'\{"name": "[a-zA-Z ]{1,20}", "age": [0-9]{1,3}\}', smollm2_vocab)
    rng = np.random.default_rng(0)
    lp = rng.normal(size=(12, len(smollm2_vocab) + 1)).astype(np.float32)
    r = dingo(lp[:, :-1], g, g.initial_state())
    assert replay(g, 1, r.tokens) == r.state
    state, greedy = 1, 0.0
    for i in range(12):
        if state == -1:
            allowed = np.asarray(smollm2_vocab.eos_token_ids)
        else:
            allowed = g.allowed_token_ids(state)
        t = int(allowed[np.argmax(lp[i, allowed])])
        greedy += float(lp[i, t])
        state = -1 if state == -1 else g.advance(state, t)
    assert r.logprob >= greedy - 1e-6
    m = dingo(lp, g, g.initial_state())
    assert m.logprob >= r.logprob - 1e-6 and replay(g, 1, m.tokens) == m.state
