"""Every phase of a regex compile stays within ``time_budget`` (the numba
kernels included, their own compilation not counted) and within memory bounds
that follow from the documented limits."""

from __future__ import annotations

import time

import numpy as np
import pytest
from numba import njit

from constrain import GrammarTooComplexError, compile_regex
from constrain.automata.deadline import Deadline, now
from constrain.automata.bits import bits_to_ids
from constrain.automata.determinize_kernels import OUT_OF_TIME, determinize
from constrain.regular.token_automaton import TokenAutomaton
from byte_vocab import byte_vocabulary


@pytest.fixture(scope="module")
def vocab():
    return byte_vocabulary()


@pytest.mark.parametrize("pattern", [
    r"(?:(?:a{0,3}){2,5}){1000}",   # the plain subset construction's closures
    r"(?:(?:a{0,3}){2,5}){300}",    # the numba kernel's closures
    r"[ab]*a[ab]{16}",              # many states, the kernel's main loop
    r"(?:(?=a)[ab]|b)*a[ab]{9}",    # the engine with assertions
])
def test_time_budget_bounds_every_phase(vocab, pattern):
    for _ in range(2):  # the first call may compile the kernels: not counted, but slow
        t = time.thread_time()  # the budget's clock: a loaded machine does not stretch it
        try:
            compile_regex(pattern, vocab, time_budget=0.2, max_states=10 ** 6)
        except GrammarTooComplexError as e:
            assert "time budget" in str(e)
    assert time.thread_time() - t < 1.5


def test_token_masks_are_under_the_deadline_and_fall_back_to_lazy_rows(vocab):
    # asked to walk every state: the rows fit the budget, with their
    # transitions (8 bytes per token) they do not
    lazy = compile_regex(r"[a-z]*a[a-z]{6}", vocab, max_mask_bytes=20_000)
    eager = TokenAutomaton(lazy.dfa, vocab, eager=True)
    assert eager.eager and not lazy.tokens.eager
    assert not TokenAutomaton(lazy.dfa, vocab, eager=True, max_mask_bytes=20_000).eager
    for s in range(1, lazy.num_states):
        assert (bits_to_ids(eager.row(s), len(vocab)) == lazy.allowed_token_ids(s)).all()
        a, b = eager.transitions(s), lazy.token_transitions(s)
        assert sorted(zip(*map(list, a))) == sorted(zip(*map(list, b)))


def test_smollm2_wide_regex_stays_within_budget(smollm2_vocab):
    t = time.thread_time()
    g = compile_regex(r"[a-z]*a[a-z]{14}", smollm2_vocab, time_budget=1.0)
    assert time.thread_time() - t < 3.0
    s = g.initial_state()
    for tok in (smollm2_vocab.tokens.index(b"hello"), smollm2_vocab.tokens.index(b"a")):
        s = g.advance(s, tok)
        assert s is not None


def test_kernels_read_the_clock():
    one = np.zeros(2, dtype=np.int64)
    args = (1, one, np.zeros(0, np.int64), one, np.zeros(0, np.int64), np.zeros(0, np.int64),
            0, 0, 10)
    assert determinize(*args, np.inf)[2] == 1
    # a long chain of epsilon edges: the closures alone pass the deadline
    n = 6000
    eps_ptr = np.arange(n + 1, dtype=np.int64)
    eps_ptr[-1] = n - 1
    eps_dst = np.arange(1, n, dtype=np.int64)
    edge_ptr = np.zeros(n + 1, dtype=np.int64)
    out = determinize(1, eps_ptr, eps_dst, edge_ptr, np.zeros(0, np.int64),
                      np.zeros(0, np.int64), 0, n - 1, 10, now() - 1.0)
    assert out[2] == OUT_OF_TIME


def test_kernel_compilation_does_not_count():
    @njit(cache=False)
    def kernel(x):
        s = 0.0
        for i in range(x.shape[0]):
            s += np.sin(x[i]) * np.cos(x[i]) + np.sqrt(abs(x[i]))
        return s

    deadline = Deadline.after(0.0)
    before = deadline.at
    t = time.thread_time()
    deadline.ready(kernel, np.ones(3))
    spent = time.thread_time() - t
    assert kernel.signatures and spent > 0.01
    assert deadline.at - before >= spent * 0.9
    deadline.ready(kernel, np.ones(3))  # compiled: nothing moves
    assert deadline.at - before < spent * 1.1
    assert now() > Deadline(now() - 1)
    assert Deadline.of(None) is None and Deadline.of(deadline) is deadline


def test_compile_regex_defaults_are_the_default_compilers_limits(vocab):
    # compile_regex passes only the budgets it is given: its defaults must be
    # what the default compiler's Limits() holds, and a budget given (even one
    # equal to the default) still overrides, through Limits.replace
    import inspect

    from constrain import Limits
    from constrain.errors import InvalidLimitError

    limits = Limits()
    for name, param in inspect.signature(compile_regex).parameters.items():
        if hasattr(limits, name):
            assert param.default == getattr(limits, name), name
    with pytest.raises(InvalidLimitError, match="max_states"):
        compile_regex("ab", vocab, max_states=0)
    with pytest.raises(InvalidLimitError, match="time_budget"):
        compile_regex("ab", vocab, time_budget=float("nan"))
    with pytest.raises(GrammarTooComplexError):
        compile_regex("[ab]{4}", vocab, max_states=3)
