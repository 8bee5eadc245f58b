"""Misuse of the constraint protocol at run time, over every kind of compiled
constraint: states that are not the constraint's, token ids outside the
vocabulary, bitmasks that cannot take a mask. Each must raise its typed error
(``InvalidStateError``, ``BitmaskError``) -- never crash the process, never
answer with another state's mask, never write into memory the caller does not
read -- and leave the constraint working."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import constrain
from constrain import (
    BatchMatcher,
    ConstraintError,
    InvalidLimitError,
    InvalidStateError,
    Matcher,
    allocate_bitmask,
    bitmask_to_ids,
)
from constrain.errors import BitmaskError
from byte_vocab import byte_vocabulary

BYTES = byte_vocabulary()
V = len(BYTES)
WORDS = (V + 31) // 32
SCHEMA = {"type": "object", "properties": {"name": {"type": "string"}, "n": {"type": "integer"}},
          "required": ["name"]}


def _kinds():
    """Every kind of compiled constraint, with a text that walks it through a
    few states: eager regex rows, lazy regex rows (an LRU smaller than the
    states: rows computed on first visit, which the segfault needed), a Lark
    grammar and a JSON Schema."""
    return {
        "regex eager": (lambda: constrain.compile_regex(r"[a-z]+(-[0-9]{1,3})?", BYTES), b"ab-12"),
        "regex lazy": (lambda: constrain.compile_regex(r"[a-z]+(-[0-9]{1,3})?", BYTES,
                                                       max_mask_bytes=2 * 4 * WORDS), b"ab-12"),
        "grammar": (lambda: constrain.compile_grammar('start: "(" start ")" | "x"+', BYTES), b"((xx"),
        "json schema": (lambda: constrain.compile_json_schema(SCHEMA, BYTES), b'{"name":"a'),
    }


KINDS = _kinds()


@pytest.fixture(scope="module", params=sorted(KINDS))
def kind(request):
    make, text = KINDS[request.param]
    g = make()
    states = [g.initial_state()]
    for b in text:
        states.append(g.advance(states[-1], b))
        assert states[-1] is not None
    return request.param, g, states


def _foreign_states(g):
    """Values that are no state of ``g``: other types, out of range, negative,
    shapes a grammar state never has, states of a bigger constraint."""
    bad = [None, "x", 1.5, 1.0, [1], {1: 2}, np.array([1, 2]), object(), -2, -161, 10 ** 6,
           2 ** 70, np.float64(1.0), np.bool_(True)]
    if isinstance(g, constrain.DFAConstraint):
        bad += [g.num_states, g.num_states + 1, (1, 2)]
        # a state of a larger regex, outside this one's range
        big = constrain.compile_regex("[a-z]{40}", BYTES)
        bad.append(big.advance_many(big.initial_state(), b"a" * 30))
    else:
        fresh, configs = g.initial_state()
        c, s = configs[0]
        bad += [(False, ()), (False, ((c, -1),)), (False, ((-1, s),)),
                (False, ((c, 10 ** 6),)), (False, ((10 ** 6, s),)), (False, ((c, s, 0),)),
                (False, ((c + 0.5, s),)), (False, ((c, s + 0.5),)), (False, [(c, s)]),
                (False, ((str(c), s),)), (False, ((np.array([c]), s),)), (0.5, configs),
                (False, ([c, s],)), (None, configs), ("", configs), (True, ((c, s), (c, s))),
                (False, configs, 0), (False,), 5, (np.array([True, False]), configs),
                (np.array(True), configs)]
        # a state of another grammar with more contexts than this one has made
        other = constrain.compile_grammar('start: "(" start ")" | "x"', BYTES)
        deep = other.advance_many(other.initial_state(), b"(" * 300)
        bad.append(deep)
    return bad


STATE_METHODS = [
    ("advance", lambda g, s: g.advance(s, 97)),
    ("advance_bytes", lambda g, s: g.advance_bytes(s, b"a")),
    ("allowed_bytes", lambda g, s: g.allowed_bytes(s)),
    ("is_accepting", lambda g, s: g.is_accepting(s)),
    ("is_terminated", lambda g, s: g.is_terminated(s)),
    ("has_cached_mask", lambda g, s: g.has_cached_mask(s)),
    ("fill_cached_bitmask", lambda g, s: g.fill_cached_bitmask(s, np.zeros((1, WORDS), np.int32))),
    ("fill_bitmask", lambda g, s: g.fill_bitmask(s, np.zeros((1, WORDS), np.int32))),
    ("allowed_token_ids", lambda g, s: g.allowed_token_ids(s)),
    ("check_state", lambda g, s: g.check_state(s)),
    ("advance_many", lambda g, s: g.advance_many(s, [97])),
]


def _check_still_works(g, states):
    bm = np.full((2, WORDS), -1, np.int32)
    for s in states:
        g.fill_bitmask(s, bm, 1)
        want = g.allowed_token_ids(s).tolist()
        assert bitmask_to_ids(bm[1], V).tolist() == want
        assert all(g.advance(s, t) is not None for t in want)


def test_foreign_states_are_refused_everywhere(kind):
    name, g, states = kind
    methods = list(STATE_METHODS)
    if isinstance(g, constrain.DFAConstraint):
        methods.append(("token_transitions", lambda g, s: g.token_transitions(s)))
    else:
        methods.append(("mask_row", lambda g, s: g.mask_row(s)))
    for warm in (False, True):
        if warm:  # the fast paths too: every state's mask written once before
            _check_still_works(g, states)
        for bad in _foreign_states(g):
            for meth, call in methods:
                with pytest.raises(InvalidStateError):
                    call(g, bad)
                    pytest.fail(f"{name}: {meth}({bad!r}) was accepted")
    _check_still_works(g, states)


def test_valid_states_of_every_form_are_accepted(kind):
    name, g, states = kind
    for s in states + [-1]:
        assert g.check_state(s) == s
    assert g.check_state(np.int64(-1)) == -1 and g.is_terminated(np.int64(-1))
    if not isinstance(g, constrain.DFAConstraint):
        # values equal to a state's are that state (the mask caches find states
        # by equality), made plain ints and bools
        fresh, configs = states[2]
        same = (np.bool_(fresh), tuple((np.int64(c), float(s)) for c, s in configs))
        assert g.check_state(same) == states[2]
        assert type(g.check_state(same)[1][0][1]) is int
        assert g.allowed_token_ids(same).tolist() == g.allowed_token_ids(states[2]).tolist()
        assert g.advance(same, 97) == g.advance(states[2], 97)
        assert g.check_state((1, states[0][1])) == states[0]
    if isinstance(g, constrain.DFAConstraint):
        # numpy integers are states (token_transitions gives next states as int32)
        toks, nexts = g.token_transitions(states[1])
        s = nexts[0]
        assert isinstance(s, np.int32)
        assert g.allowed_token_ids(s).tolist() == g.allowed_token_ids(int(s)).tolist()
        assert g.advance(s, int(toks[0])) == g.advance(int(s), int(toks[0]))
        assert g.allowed_token_ids(0).size == 0  # the dead state allows nothing


@pytest.mark.parametrize("token", [-1, -161, -V, V, V + 5, 2 ** 40, 1.0, 97.0, True, "a", None,
                                   np.float32(97), np.array([97, 98])])
def test_bad_token_ids_are_refused(kind, token):
    name, g, states = kind
    for s in (states[0], states[-1], -1):
        with pytest.raises(InvalidStateError):
            g.advance(s, token)
    ok = int(g.allowed_token_ids(states[0])[0])  # refused only for the bad token
    with pytest.raises(InvalidStateError):
        g.advance_many(states[0], [ok, token])
    m = Matcher(g)
    for call in (lambda: m.accept_token(token), lambda: m.accept_tokens([ok, token]),
                 lambda: m.validate_tokens([ok, token])):
        with pytest.raises(InvalidStateError):
            call()
        assert m.num_accepted == 0


def test_negative_token_ids_do_not_count_from_the_end(kind):
    name, g, states = kind
    with pytest.raises(InvalidStateError, match="outside the vocabulary"):
        g.advance(states[0], 97 - V)


def test_integer_token_ids_of_other_types(kind):
    name, g, states = kind
    s = states[0]
    want = g.advance(s, 97)
    for t in (np.int64(97), np.int32(97), np.uint16(97), torch.tensor(97)):
        assert g.advance(s, t) == want


def test_terminated_state_refuses_bad_tokens_too():
    g = constrain.compile_regex("a", BYTES)
    end = g.advance(g.advance(g.initial_state(), 97), 256)
    assert g.is_terminated(end)
    assert g.advance(end, 97) is None
    with pytest.raises(InvalidStateError):
        g.advance(end, -1)
    with pytest.raises(InvalidStateError):
        g.advance(end, V)


def test_lazy_rows_out_of_range_state_is_refused_not_a_crash(smollm2_vocab):
    """The reported crash: lazily computed rows (masks bigger than
    max_mask_bytes), a state past the DFA's end walked the trie from garbage."""
    words = (len(smollm2_vocab) + 31) // 32
    g = constrain.compile_regex(r"[a-z]{2,6}(-[0-9]{1,3})?", smollm2_vocab,
                                max_mask_bytes=3 * 4 * words)
    assert not g.tokens.eager
    bm = allocate_bitmask(1, len(smollm2_vocab), backend="numpy")
    for bad in (g.num_states, g.num_states + 3, 10 ** 6, 10 ** 9, -5):
        with pytest.raises(InvalidStateError):
            g.fill_bitmask(bad, bm, 0)
        with pytest.raises(InvalidStateError):
            g.allowed_token_ids(bad)
        with pytest.raises(InvalidStateError):
            g.token_transitions(bad)
        with pytest.raises(InvalidStateError):
            g.tokens.row(bad)
    assert g.allowed_token_ids(g.initial_state()).size > 0


# -- bitmasks -----------------------------------------------------------------------------

def _bad_bitmasks():
    ro = np.zeros((2, WORDS), np.int32)
    ro.flags.writeable = False
    return {
        "uint8": np.zeros((2, 4 * WORDS), np.uint8),
        "int64": np.zeros((2, WORDS), np.int64),
        "uint32": np.zeros((2, WORDS), np.uint32),
        "int16": np.zeros((2, 2 * WORDS), np.int16),
        "float32": np.zeros((2, WORDS), np.float32),
        "big-endian int32": np.zeros((2, WORDS), ">i4"),
        "1-D": np.zeros(WORDS, np.int32),
        "3-D": np.zeros((1, 2, WORDS), np.int32),
        "narrow": np.zeros((2, WORDS - 1), np.int32),
        "no words": np.zeros((2, 0), np.int32),
        "strided": np.zeros((2, 2 * WORDS), np.int32)[:, ::2],
        "Fortran order": np.asfortranarray(np.zeros((2, WORDS), np.int32)),
        "read-only": ro,
        "list": [[0] * WORDS] * 2,
        "torch int64": torch.zeros((2, WORDS), dtype=torch.int64),
        "torch float32": torch.zeros((2, WORDS), dtype=torch.float32),
        "torch 1-D": torch.zeros(WORDS, dtype=torch.int32),
        "torch transposed": torch.zeros((WORDS, 2), dtype=torch.int32).t(),
        "torch narrow": torch.zeros((2, WORDS - 1), dtype=torch.int32),
        "meta int64": torch.zeros((2, WORDS), dtype=torch.int64, device="meta"),
        "meta 1-D": torch.zeros(WORDS, dtype=torch.int32, device="meta"),
    }


def _snapshot(bm):
    if isinstance(bm, list) or (isinstance(bm, torch.Tensor) and bm.device.type == "meta"):
        return None
    return bm.numpy().copy() if isinstance(bm, torch.Tensor) else np.array(bm, copy=True)


def test_bad_bitmasks_are_refused_and_left_untouched(kind):
    name, g, states = kind
    for warm in (False, True):
        if warm:
            _check_still_works(g, states)
        for what, bm in _bad_bitmasks().items():
            before = _snapshot(bm)
            for s in states:
                with pytest.raises(BitmaskError):
                    g.fill_bitmask(s, bm, 0)
                    pytest.fail(f"{name}: a {what} bitmask was accepted")
                assert isinstance(BitmaskError("x"), ConstraintError)
            if before is not None:
                assert np.array_equal(_snapshot(bm), before, equal_nan=True), what


@pytest.mark.parametrize("backend", ["numpy", "torch"])
def test_bad_rows_are_refused(kind, backend):
    name, g, states = kind
    bm = allocate_bitmask(3, V, backend=backend)
    for warm in (False, True):
        if warm:  # the fast path: this bitmask and these states were filled before
            for s in states:
                g.fill_bitmask(s, bm, 2)
        before = _snapshot(bm)
        for row in (-1, -3, 3, 10 ** 6, 1.0, "0", None, [0], np.float64(0), np.bool_(False),
                    True, False):  # a bool indexed the fast path's rows as 1 or 0
            for s in states:
                with pytest.raises(BitmaskError):
                    g.fill_bitmask(s, bm, row)
                    pytest.fail(f"{name}: row {row!r} was accepted")
        assert np.array_equal(_snapshot(bm), before)
    g.fill_bitmask(states[-1], bm, np.int64(1))
    assert bitmask_to_ids(bm[1], V).tolist() == g.allowed_token_ids(states[-1]).tolist()


@pytest.mark.parametrize("swap", ["set_", "data", "set_ same shape"])
def test_swapped_tensor_storage_receives_the_fill(kind, swap):
    """A tensor whose memory was replaced in place is the same Python object:
    a fill must land in the new memory (the old one is no longer the tensor's,
    and a new one left all ones would be an unconstrained row)."""
    name, g, states = kind
    for s in states:
        bm = allocate_bitmask(2, V, backend="torch")
        g.fill_bitmask(s, bm, 0)
        g.fill_bitmask(s, bm, 0)  # warm: the fast path holds this tensor's views
        if swap == "set_":
            bm.set_(torch.full((3, WORDS), -1, dtype=torch.int32))
        elif swap == "data":
            bm.data = torch.full((2, WORDS), -1, dtype=torch.int32)
        else:
            bm.set_(torch.full((2, WORDS), -1, dtype=torch.int32))
        g.fill_bitmask(s, bm, 1)
        assert bitmask_to_ids(bm[1], V).tolist() == g.allowed_token_ids(s).tolist()
        assert bitmask_to_ids(bm[0], V).tolist() == list(range(V))  # untouched


def test_swapped_to_a_bad_layout_is_refused(kind):
    name, g, states = kind
    bm = allocate_bitmask(2, V, backend="torch")
    g.fill_bitmask(states[0], bm, 0)
    bm.data = torch.zeros((2, WORDS), dtype=torch.int64)
    with pytest.raises(BitmaskError):
        g.fill_bitmask(states[0], bm, 0)
    bm.data = torch.zeros(WORDS, dtype=torch.int32)
    with pytest.raises(BitmaskError):
        g.fill_bitmask(states[0], bm, 0)


def test_wide_and_device_bitmasks_still_work(kind):
    name, g, states = kind
    wide = np.full((2, WORDS + 3), -1, np.int32)
    meta = torch.zeros((2, WORDS), dtype=torch.int32, device="meta")
    for s in states:
        g.fill_bitmask(s, wide, 1)
        assert bitmask_to_ids(wide[1, :WORDS], V).tolist() == g.allowed_token_ids(s).tolist()
        assert not wide[1, WORDS:].any()
        g.fill_bitmask(s, meta, 1)  # another device: checked, then copied


def test_matchers_pass_the_errors_on(kind):
    name, g, states = kind
    m = Matcher(g)
    with pytest.raises(BitmaskError):
        m.fill_next_token_bitmask(np.zeros((1, WORDS), np.int64))
    with pytest.raises(BitmaskError):
        m.fill_draft_bitmasks([97], np.zeros(WORDS, np.int32))
    with pytest.raises(InvalidStateError):
        m.accept_token(-1)
    assert m.num_accepted == 0
    with BatchMatcher(threads=2) as bmx:
        with pytest.raises(BitmaskError):
            bmx.fill_next_token_bitmask([m, m.fork()], np.zeros((2, WORDS), np.float32))
        with pytest.raises(BitmaskError):
            bmx.fill_next_token_bitmask([m], allocate_bitmask(1, V, backend="numpy"), indices=[1])
        with pytest.raises(InvalidStateError):
            bmx.accept_token([m], [V])


def test_apply_bitmask_refuses_other_dtypes():
    logits = np.zeros((1, V), np.float32)
    for bm in (np.zeros((1, WORDS), np.float32), np.zeros((1, WORDS), np.int64),
               np.zeros((1, WORDS), np.uint32), torch.zeros((1, WORDS), dtype=torch.float32),
               torch.zeros((1, WORDS), dtype=torch.int64), [[0] * WORDS]):
        with pytest.raises(BitmaskError):
            constrain.apply_bitmask(logits, bm)
        with pytest.raises(BitmaskError):
            constrain.apply_bitmask(torch.from_numpy(logits), bm)
    constrain.apply_bitmask(logits, np.zeros((1, WORDS), np.int32))
    assert np.isinf(logits).all()


def test_apply_bitmask_refuses_what_it_cannot_mask():
    """Typed errors, not numba's or torch's: logits of 3 dimensions, of
    integers, read-only; float16 numpy logits are masked (numba has no
    float16 kernel)."""
    bm = np.zeros((1, WORDS), np.int32)
    bm[0, 0] = 0b101
    for logits in (np.zeros((1, 2, V), np.float32), torch.zeros((1, 2, V)),
                   np.zeros((1, V), np.int64), torch.zeros((1, V), dtype=torch.int64)):
        with pytest.raises(ConstraintError):
            constrain.apply_bitmask(logits, bm)
    ro = np.zeros((1, V), np.float32)
    ro.flags.writeable = False
    with pytest.raises(ConstraintError, match="read-only"):
        constrain.apply_bitmask(ro, bm)
    for dtype in (np.float16, np.float32, np.float64):
        logits = np.zeros(V, dtype)
        constrain.apply_bitmask(logits, bm[0])
        assert np.flatnonzero(np.isfinite(logits)).tolist() == [0, 2]


@pytest.mark.parametrize("batch, vocab_size", [(-1, 10), (1.5, 10), ("2", 10), (True, 10),
                                               (1, -5), (1, 0), (1, 2.0)])
def test_allocate_bitmask_takes_counts(batch, vocab_size):
    with pytest.raises(BitmaskError):
        allocate_bitmask(batch, vocab_size)


def test_bitmask_to_ids_takes_one_int32_row():
    for row in (np.array([1, 2], np.int64), np.full((1, 4), -1, np.int32), [1, 2]):
        with pytest.raises(BitmaskError):
            bitmask_to_ids(row, 64)
    assert bitmask_to_ids(np.array([5, 1], np.int32), 64).tolist() == [0, 2, 32]
    assert bitmask_to_ids(torch.tensor([5, 1], dtype=torch.int32), 33).tolist() == [0, 2, 32]


# -- budgets taken without a Limits ----------------------------------------------------------

def _budget_takers():
    """Every constructor or call that takes a budget directly (not through a
    Limits), with the values it may legitimately take besides positive ones."""
    from constrain.cfg.earley import EarleyRecognizer
    from constrain.cfg.grammar import GrammarConstraint
    from constrain.frontends.lark import load_lark_grammar
    from constrain.regular.regex import DFAConstraint, regex_byte_dfa
    from constrain.regular.token_automaton import TokenAutomaton
    from constrain.vocab.trie import TokenTrie

    dfa = regex_byte_dfa("ab+", TokenTrie.of(BYTES).alphabet)
    ir = load_lark_grammar('start: "a"+')
    compiler = constrain.default_compiler(BYTES)
    takers = {
        "DFAConstraint max_mask_bytes": lambda v: DFAConstraint(dfa, BYTES, max_mask_bytes=v),
        "TokenAutomaton max_mask_bytes": lambda v: TokenAutomaton(dfa, BYTES, max_mask_bytes=v),
        "EarleyRecognizer max_contexts": lambda v: EarleyRecognizer(ir, max_contexts=v),
        "EarleyRecognizer max_items": lambda v: EarleyRecognizer(ir, max_items=v),
        "Matcher max_rollback": lambda v: Matcher(constrain.compile_regex("a", BYTES), max_rollback=v),
        "BatchMatcher threads": lambda v: BatchMatcher(threads=v),
        "find_jump_forward_bytes max_bytes":
            lambda v: Matcher(constrain.compile_regex("abc", BYTES)).find_jump_forward_bytes(v),
    }
    for field in ("max_states", "max_contexts", "max_width", "mask_cache_bytes", "max_items"):
        for comp in (None, compiler):
            takers[f"GrammarConstraint {field} compiler={comp is not None}"] = \
                lambda v, field=field, comp=comp: GrammarConstraint(ir, BYTES, compiler=comp,
                                                                    **{field: v})
    for comp in (None, compiler):
        takers[f"GrammarConstraint time_budget compiler={comp is not None}"] = \
            lambda v, comp=comp: GrammarConstraint(ir, BYTES, compiler=comp, time_budget=v)
    # zero is a legitimate value here: keep no history, jump by nothing, no
    # time left (a front end passes what its translation left)
    zero_ok = {"Matcher max_rollback", "find_jump_forward_bytes max_bytes",
               "GrammarConstraint time_budget compiler=False",
               "GrammarConstraint time_budget compiler=True"}
    return takers, zero_ok


@pytest.mark.parametrize("bad", [0, -1, -0.5, float("nan"), True, "5", None, [3]])
def test_budgets_are_checked_wherever_they_are_taken(bad):
    """Before, a budget passed past Limits (DFAConstraint(max_mask_bytes=0),
    GrammarConstraint(..., compiler=c, max_contexts=0): a numba MemoryError)
    was accepted or failed deep inside."""
    takers, zero_ok = _budget_takers()
    for name, take in takers.items():
        if bad == 0 and not isinstance(bad, bool) and name in zero_ok:
            take(bad)
            continue
        if bad is None and name in ("Matcher max_rollback", "BatchMatcher threads"):
            continue  # None: keep every state; the default thread count
        with pytest.raises(InvalidLimitError):
            take(bad)
            pytest.fail(f"{name}={bad!r} was accepted")


@pytest.mark.parametrize("huge", [1 << 57, 2 ** 63 - 1, 10 ** 30])
def test_counts_past_their_cap_are_refused(huge):
    """``sys.maxsize`` as "no limit" overflowed the kernels: ``max_items`` from
    2**57 on gave a constraint that refused valid text, others an
    OverflowError or numpy's "array is too big" at the first mask."""
    import dataclasses

    for f in dataclasses.fields(constrain.Limits):
        if f.name == "time_budget":
            continue  # seconds: any positive number, inf included
        with pytest.raises(InvalidLimitError, match=f.name) as e:
            constrain.Limits(**{f.name: huge})
        assert e.value.field == f.name
    with pytest.raises(InvalidLimitError):
        constrain.Limits(max_width=4097)
    assert constrain.Limits(time_budget=1e30).time_budget == 1e30
    limits = constrain.Limits(max_items=1 << 40, max_states=1 << 40, max_width=4096)
    g = constrain.Compiler(BYTES, limits=limits).compile_json_schema(
        {"type": "object", "properties": {"a": {"type": "array", "items": {"type": "integer"}}}})
    assert g.matches('{"a":[1,2]}')
