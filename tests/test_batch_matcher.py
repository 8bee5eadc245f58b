"""constrain.BatchMatcher: one call fills, advances or rolls back a batch of
matchers; every row is exactly what the matcher's own call gives, whatever the
threads, the mix of constraints, the rows' order and the bitmask's type."""

from __future__ import annotations

import numpy as np
import pytest

import constrain
from constrain import (BatchMatcher, ConstraintError, GrammarTooComplexError, Matcher,
                       allocate_bitmask, compile_grammar, compile_json_schema, compile_regex)
from constrain.runtime.batch import default_threads

SCHEMA = {"type": "object",
          "properties": {"id": {"type": "integer"}, "name": {"type": "string"},
                         "tags": {"type": "array", "items": {"type": "string"}}},
          "required": ["id", "name"]}
TEXTS = ['{"id":12,"name":"Ada","tags":["x","y"]}', '{"id":7,"name":"Bo"}',
         '{"id":-3,"name":"Cy","tags":[]}']


@pytest.fixture(scope="module")
def cases(smollm2_vocab):
    """(constraint factory, token ids): JSON Schema walks, a Lark grammar, a
    regex with lazy rows; each factory compiles afresh (cold masks)."""
    enc = smollm2_vocab.encoder
    out = [(lambda: compile_json_schema(SCHEMA, smollm2_vocab, mask_cache_bytes=1 << 20), enc(t))
           for t in TEXTS]
    out.append((lambda: compile_grammar('start: "SELECT " NAME ("," NAME)*\nNAME: /[a-z]+/',
                                        smollm2_vocab), enc("SELECT ab,cd,ef")))
    out.append((lambda: compile_regex(r"[0-9]{3}-[0-9]{4}", smollm2_vocab,
                                      max_mask_bytes=4 * 4 * 1536), enc("555-1234")))
    return out


def _single(matchers, vocab) -> np.ndarray:
    bm = allocate_bitmask(len(matchers), len(vocab), backend="numpy")
    for i, m in enumerate(matchers):
        m.fill_next_token_bitmask(bm, i)
    return bm


@pytest.mark.parametrize("threads, adaptive", [(1, True), (2, False), (4, False), (4, True)])
def test_batch_fill_equals_single_fills_along_walks(cases, smollm2_vocab, threads, adaptive):
    """Rows for several matchers of one constraint (sharing its lock) and of
    different ones, filled first-visit and warm, along whole walks, on the
    pool (``adaptive=False``) or at whatever size the timing picks."""
    constraints = [make() for make, _ in cases]
    # two matchers per JSON case (one constraint each), one per other case
    plan = [(constraints[i], ids) for i, (_, ids) in enumerate(cases)]
    plan += [(constraints[i], ids) for i, (_, ids) in enumerate(cases[:3])]
    eos = smollm2_vocab.eos_token_ids[0]
    with BatchMatcher(threads=threads, adaptive=adaptive) as batch:
        for _pass in range(2):  # first walk, then warm
            batched = [Matcher(g) for g, _ in plan]
            alone = [Matcher(g) for g, _ in plan]
            tokens = [ids + [eos] for _, ids in plan]
            for step in range(max(map(len, tokens)) + 1):
                bm = allocate_bitmask(len(plan), len(smollm2_vocab), backend="numpy")
                batch.fill_next_token_bitmask(batched, bm)
                assert (bm == _single(alone, smollm2_vocab)).all(), step
                toks = [t[step] if step < len(t) else eos for t in tokens]
                ok = batch.accept_token(batched, toks)
                assert ok.tolist() == [a.accept_token(t) for a, t in zip(alone, toks)]


def test_indices_place_rows_and_leave_others(cases, smollm2_vocab):
    constraints = [make() for make, _ in cases]
    matchers = [Matcher(g) for g in constraints]
    for m, (_, ids) in zip(matchers, cases):
        m.accept_tokens(ids[:2])
    rows = [7, 0, 5, 2, 3]
    bm = allocate_bitmask(8, len(smollm2_vocab), backend="numpy")
    BatchMatcher(threads=2).fill_next_token_bitmask(matchers, bm, indices=rows)
    want = _single(matchers, smollm2_vocab)
    for i, r in enumerate(rows):
        assert (bm[r] == want[i]).all()
    for r in {1, 4, 6}:
        assert (bm[r] == -1).all()
    with pytest.raises(ConstraintError, match="indices"):
        BatchMatcher().fill_next_token_bitmask(matchers, bm, indices=[0, 1])


def test_torch_bitmask(cases, smollm2_vocab):
    torch = pytest.importorskip("torch")
    matchers = [Matcher(make()) for make, _ in cases]
    bm = allocate_bitmask(len(matchers), len(smollm2_vocab), backend="torch")
    assert isinstance(bm, torch.Tensor)
    BatchMatcher(threads=2).fill_next_token_bitmask(matchers, bm)
    assert (bm.numpy() == _single(matchers, smollm2_vocab)).all()


def test_an_error_in_one_row_is_raised_after_the_others(smollm2_vocab):
    """A grammar whose mask needs more parser columns than its max_contexts
    fails its own row; the call raises that error once the other rows are
    filled."""
    hard = compile_grammar('start: "(" start ")" | "x"', smollm2_vocab, max_contexts=3)
    easy = compile_regex("[a-z]+", smollm2_vocab)
    m_hard, m_easy = Matcher(hard), Matcher(easy)
    assert m_hard.accept_tokens(smollm2_vocab.encoder("(("))
    bm = allocate_bitmask(3, len(smollm2_vocab), backend="numpy")
    bm[:] = 0
    with pytest.raises(GrammarTooComplexError):
        BatchMatcher(threads=2, adaptive=False).fill_next_token_bitmask(
            [m_easy, m_hard, Matcher(easy)], bm)
    want = _single([m_easy], smollm2_vocab)[0]
    assert (bm[0] == want).all() and (bm[2] == want).all()


def test_a_batch_names_each_row_and_matcher_once(cases, smollm2_vocab):
    """A row named twice would get whichever fill came last (cached rows go
    first), a matcher advanced or rolled back twice has no all-or-nothing
    meaning: both are refused, with nothing changed."""
    from constrain import BitmaskError

    first = Matcher(cases[0][0]())
    first.accept_tokens(cases[0][1][:2])  # its row is a first visit
    cached = Matcher(cases[0][0]())
    cached.fill_next_token_bitmask(allocate_bitmask(1, len(smollm2_vocab), backend="numpy"))
    batch = BatchMatcher(threads=1)
    bm = allocate_bitmask(1, len(smollm2_vocab), backend="numpy")
    with pytest.raises(BitmaskError, match="twice"):
        batch.fill_next_token_bitmask([first, cached], bm, indices=[0, 0])
    m = Matcher(cases[0][0]())
    m.accept_tokens(cases[0][1][:2])
    with pytest.raises(ConstraintError, match="twice"):
        batch.rollback([m, m], [1, 1])
    with pytest.raises(ConstraintError, match="twice"):
        batch.accept_token([m, m], cases[0][1][2:4])
    assert m.num_accepted == 2


def test_accept_token_is_all_or_nothing(cases, smollm2_vocab):
    """A bad id anywhere in the batch raises before any matcher moves."""
    from constrain import InvalidStateError

    a, b = (Matcher(cases[0][0]()) for _ in range(2))
    batch = BatchMatcher(threads=1)
    with pytest.raises(InvalidStateError):
        batch.accept_token([a, b], [cases[0][1][0], len(smollm2_vocab)])
    assert a.num_accepted == b.num_accepted == 0
    refused = smollm2_vocab.encoder("}")[0]
    assert batch.accept_token([a, b], [cases[0][1][0], refused]).tolist() == [True, False]
    assert (a.num_accepted, b.num_accepted) == (1, 0)


@pytest.mark.parametrize("ids", [[0, True], [True, 0], [0, 1.5], [0, 2 ** 63], [0, None],
                                 np.array([0, 1.5]), np.array([True, False])])
def test_each_token_id_is_checked_as_given(cases, ids):
    """np.asarray read [0, True] as ids 0 and 1 (the bool accepted) and blamed
    the 0 of [0, 1.5]: each id is checked as it came."""
    from constrain import InvalidStateError

    a, b = (Matcher(cases[0][0]()) for _ in range(2))
    with pytest.raises(InvalidStateError) as e:
        BatchMatcher(threads=1).accept_token([a, b], ids)
    if isinstance(ids, list):  # the message names the bad id, not its neighbour
        bad = next(x for x in ids if type(x) is not int or x >= 2 ** 32)
        assert str(bad) in str(e.value)
    assert a.num_accepted == b.num_accepted == 0


def test_torch_counts_and_misused_arguments(cases, smollm2_vocab):
    torch = pytest.importorskip("torch")
    matchers = [Matcher(cases[0][0]()) for _ in range(2)]
    for m in matchers:
        m.accept_tokens(cases[0][1][:3])
    batch = BatchMatcher(threads=1)
    batch.rollback(matchers, torch.tensor([1, 2]))
    batch.rollback(matchers, torch.tensor(1))
    matchers[0].rollback(torch.tensor(1))
    assert [m.num_accepted for m in matchers] == [0, 0]
    with pytest.raises(ConstraintError, match="integer"):
        batch.rollback(matchers, torch.tensor([True, False]))
    batch.rollback(matchers, (c for c in [0, 0]))  # a generator: one count per matcher
    with pytest.raises(ConstraintError, match="counts"):
        batch.rollback(matchers, (c for c in [0]))
    assert batch.accept_token(matchers, torch.tensor(cases[0][1][:1] * 2)).all()
    bm = allocate_bitmask(2, len(smollm2_vocab), backend="numpy")
    with pytest.raises(ConstraintError, match="indices"):
        batch.fill_next_token_bitmask(matchers[:1], bm, 1)
    with pytest.raises(ConstraintError, match="flat sequence"):
        matchers[0].accept_tokens(None)
    with pytest.raises(ConstraintError, match="flat sequence"):
        matchers[0].validate_tokens(5)


@pytest.mark.parametrize("counts", [[0.9], [1.7], [True], "1", 1.0, True, None, [None]])
def test_rollback_counts_are_integers(cases, counts):
    """``int()`` took 1.7 for 1, 0.9 for 0 and True for 1: refused as a
    matcher's own rollback refuses them."""
    m = Matcher(cases[0][0]())
    m.accept_tokens(cases[0][1][:2])
    with pytest.raises(ConstraintError):
        BatchMatcher(threads=1).rollback([m], counts)
    assert m.num_accepted == 2
    BatchMatcher(threads=1).rollback([m], [np.int64(1)])
    assert m.num_accepted == 1


def test_rollback_checks_every_count_first(cases):
    matchers = [Matcher(make()) for make, _ in cases[:3]]
    for m, (_, ids) in zip(matchers, cases):
        m.accept_tokens(ids[:3])
    batch = BatchMatcher(threads=1)
    with pytest.raises(ConstraintError, match="matcher 1"):
        batch.rollback(matchers, [1, 4, 1])
    assert [m.num_accepted for m in matchers] == [3, 3, 3]
    batch.rollback(matchers, [1, 2, 3])
    assert [m.num_accepted for m in matchers] == [2, 1, 0]
    batch.rollback(matchers, 0)
    with pytest.raises(ConstraintError, match="counts"):
        batch.rollback(matchers, [1])
    with pytest.raises(ConstraintError, match="tokens"):
        batch.accept_token(matchers, [1, 2])


def test_threads_are_checked_and_pool_restarts(cases, smollm2_vocab):
    assert default_threads() >= 1 and BatchMatcher().threads == default_threads()
    for bad in (0, -1, 1.5, True, "2"):
        with pytest.raises(ConstraintError, match="threads"):
            BatchMatcher(threads=bad)
    batch = BatchMatcher(threads=3, adaptive=False)
    matchers = [Matcher(make()) for make, _ in cases]
    bm = allocate_bitmask(len(matchers), len(smollm2_vocab), backend="numpy")
    batch.fill_next_token_bitmask(matchers, bm)
    batch.close()
    for m, (_, ids) in zip(matchers, cases):
        m.accept_token(ids[0])
    batch.fill_next_token_bitmask(matchers, bm)  # a new pool
    assert (bm == _single(matchers, smollm2_vocab)).all()
    batch.close()
    with pytest.raises(ConstraintError, match="Matcher"):
        batch.fill_next_token_bitmask([object()], bm)


def test_fill_cached_bitmask_fills_only_what_is_cached(cases, smollm2_vocab):
    """The batch's per-row call: a first visit is left alone (False, row
    untouched), a cached state is filled exactly as fill_bitmask fills it."""
    first_visits = 0
    for make, ids in cases[2:]:  # a JSON Schema, the Lark grammar, the lazy regex
        g = make()
        state = g.advance_many(g.initial_state(), ids[:2])
        bm = allocate_bitmask(2, len(smollm2_vocab), backend="numpy")
        if not g.has_cached_mask(state):
            first_visits += 1
            assert not g.fill_cached_bitmask(state, bm, 0) and (bm[0] == -1).all()
        g.fill_bitmask(state, bm, 1)
        assert g.has_cached_mask(state)
        assert g.fill_cached_bitmask(state, bm, 0) and (bm[0] == bm[1]).all()
    assert first_visits == 3


def test_fill_cached_bitmask_checks_as_fill_bitmask(cases, smollm2_vocab):
    """The cached fast path refuses what fill_bitmask refuses (a row outside
    the bitmask, a foreign state), fills TERMINATED (all zeros), and leaves a
    first visit alone whether or not advance returned that state last."""
    from constrain.errors import BitmaskError, InvalidStateError
    from constrain.cfg.grammar import TERMINATED

    g = cases[0][0]()
    ids = cases[0][1]
    bm = allocate_bitmask(2, len(smollm2_vocab), backend="numpy")
    g.fill_bitmask(g.initial_state(), bm, 0)  # cached, and bm is the last bitmask
    with pytest.raises(BitmaskError):
        g.fill_cached_bitmask(g.initial_state(), bm, 2)
    with pytest.raises(InvalidStateError):
        g.fill_cached_bitmask((False, ((10 ** 6, 1),)), bm, 0)
    with pytest.raises(InvalidStateError):
        g.fill_cached_bitmask([1, 2], bm, 0)
    assert g.fill_cached_bitmask(TERMINATED, bm, 1) and (bm[1] == 0).all()
    older = g.advance(g.initial_state(), ids[0])
    newer = g.advance(older, ids[1])  # advance's last state: no check_state
    for state in (older, newer):
        bm[1] = -1
        assert not g.fill_cached_bitmask(state, bm, 1) and (bm[1] == -1).all()
        g.fill_bitmask(state, bm, 0)
        assert g.fill_cached_bitmask(state, bm, 1) and (bm[1] == bm[0]).all()


def test_close_from_another_thread_never_fails_a_fill(smollm2_vocab):
    """close() on another thread between a fill's pool look-up and its submit
    raised 'cannot schedule new futures after shutdown', the caller's own rows
    unfilled (a stress test saw it in 8 of 10 runs of ~10 s). Here the pool
    the fill finds is already shut down, as close() leaves it."""
    # each regex keeps one row: alternating two states makes every fill a
    # first visit, which uses the pool
    grammars = [compile_regex(r"[a-z]{1,8}@[a-z]{2,10}\.(com|org)", smollm2_vocab,
                              max_mask_bytes=1),
                compile_regex(r"(\w+ ){0,6}\w+[.!?]", smollm2_vocab, max_mask_bytes=1)]
    (a,) = smollm2_vocab.encoder("a")
    batch = BatchMatcher(threads=2, adaptive=False)
    bm = allocate_bitmask(2, len(smollm2_vocab), backend="numpy")
    for first in (0, 1):
        matchers = [Matcher(g) for g in grammars]
        matchers[first].accept_token(a)
        batch._executor().shutdown()  # closed by another thread after this fill found it
        bm[:] = 0
        batch.fill_next_token_bitmask(matchers, bm)
        assert (bm == _single(matchers, smollm2_vocab)).all()
    batch.close()


def test_a_row_named_twice_in_a_tensor_of_indices_is_refused():
    """list(tensor) gives 0-d tensors, which hash by identity: the check for a
    row named twice passed, and the row got the first visit's mask, not the
    last matcher's."""
    torch = pytest.importorskip("torch")
    v = constrain.Vocabulary.from_tokens([bytes([b]) for b in range(256)] + [b"</s>"], [256])
    matchers = [constrain.Matcher(constrain.compile_regex("a+", v)),
                constrain.Matcher(constrain.compile_regex("b+", v))]
    bm = constrain.allocate_bitmask(2, len(v), backend="torch")
    with pytest.raises(constrain.BitmaskError, match="named twice"):
        constrain.BatchMatcher(threads=1).fill_next_token_bitmask(matchers, bm, torch.tensor([0, 0]))
    constrain.BatchMatcher(threads=1).fill_next_token_bitmask(matchers, bm, torch.tensor([1, 0]))
    assert set(constrain.bitmask_to_ids(bm[0], len(v)).tolist()) == {ord("b")}


def test_logits_with_autograd_history_are_masked():
    torch = pytest.importorskip("torch")
    v = constrain.Vocabulary.from_tokens([bytes([b]) for b in range(256)] + [b"</s>"], [256])
    m = constrain.Matcher(constrain.compile_regex("a+", v))
    bm = constrain.allocate_bitmask(1, len(v), backend="torch")
    m.fill_next_token_bitmask(bm)
    leaf = torch.zeros(1, len(v), requires_grad=True)
    logits = leaf * 2  # numpy() refused a tensor with history: torch's RuntimeError
    constrain.apply_bitmask(logits, bm)
    assert torch.isfinite(logits[0]).nonzero().flatten().tolist() == [ord("a")]
    logits.sum().backward()  # (what is masked has no gradient)
    with pytest.raises(constrain.ConstraintError, match="leaf"):
        constrain.apply_bitmask(leaf, bm)
    # a sparse bitmask was torch's raw RuntimeError
    with pytest.raises(constrain.BitmaskError, match="dense tensor"):
        m.fill_next_token_bitmask(bm.to_sparse())
    # Python's bools are no states (np.True_ was refused, True read as state 1)
    with pytest.raises(constrain.InvalidStateError):
        constrain.compile_regex("a+", v).fill_bitmask(True, bm)
