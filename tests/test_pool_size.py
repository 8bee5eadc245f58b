"""constrain.runtime.pool_size.PoolSizer: the thread count a BatchMatcher's
calls use settles where the calls are fastest, and trials of counts that do
not pay grow rare. Costs here are synthetic (a function of the size), so the
tests are deterministic; BatchMatcher's own tests check the rows."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from constrain import BatchMatcher, ConstraintError, Matcher, allocate_bitmask, compile_regex
from constrain.runtime.pool_size import PoolSizer


def _run(sizer: PoolSizer, cost_of, calls: int, rows: int = 10) -> list[int]:
    """``calls`` calls, each at the size the sizer says, costing ``cost_of(size)``
    ns a row; the sizes used, in order."""
    used = []
    for _ in range(calls):
        size = sizer.size()
        used.append(size)
        sizer.record(size, int(cost_of(size) * rows), rows)
    return used


@pytest.mark.parametrize("threads, sizes", [(1, (1,)), (2, (1, 2)), (3, (1, 2, 3)),
                                            (8, (1, 2, 4, 8)), (15, (1, 2, 4, 8, 15))])
def test_sizes_double_up_to_the_threads(threads, sizes):
    assert PoolSizer(threads).sizes == sizes


def test_threads_that_cost_more_are_tried_ever_more_rarely():
    """As measured on a 2-core machine: every pool slower than one thread.
    The sizer stays at one; its trials of two back off to one in MAX_GAP."""
    sizer = PoolSizer(8)
    used = _run(sizer, lambda n: 20_000 * (1 + 0.3 * (n - 1)), 5000)
    assert sizer.current == 1 and set(used) == {1, 2}  # never past the first neighbour
    trials = sum(1 for a, b in zip(used, used[1:]) if a == 1 and b == 2)
    # gaps 8, 16, ..., 1024 calls: eight trials in the first ~2,050 calls, then
    # one every 1,024
    assert 8 <= trials <= 12
    assert used.count(2) == PoolSizer.TRIAL * trials
    assert used[-1000:].count(2) <= 2 * PoolSizer.TRIAL


def test_threads_that_pay_are_taken_up_to_the_best_count():
    sizer = PoolSizer(15)
    _run(sizer, lambda n: 30_000 / n, 400)
    assert sizer.current == 15
    sizer = PoolSizer(15)  # best at 4: 2 and 8 both cost more
    cost = {1: 40_000, 2: 25_000, 4: 15_000, 8: 22_000, 15: 40_000}
    used = _run(sizer, cost.__getitem__, 3000)
    assert sizer.current == 4 and 15 not in used
    assert used[-1000:].count(4) >= 1000 - 4 * PoolSizer.TRIAL


def test_a_gain_under_the_margin_keeps_the_fewer_threads():
    sizer = PoolSizer(2)
    _run(sizer, {1: 10_000, 2: 9_500}.__getitem__, 500)  # 0.95 > GAIN
    assert sizer.current == 1


def test_when_the_machine_changes_the_sizer_follows():
    """Threads paid, then another process took the cores: back to one."""
    sizer = PoolSizer(4)
    _run(sizer, lambda n: 30_000 / n, 200)
    assert sizer.current == 4
    _run(sizer, lambda n: 10_000 * n, 200)
    assert sizer.current == 1


def test_calls_at_another_size_or_with_no_rows_are_not_counted():
    sizer = PoolSizer(4)
    for _ in range(100):
        sizer.record(4, 1, 10)  # not the current size, and no trial of it
        sizer.record(1, 10**9, 0)
    assert sizer.current == 1 and sizer.size() == 1
    assert repr(sizer) == "PoolSizer(sizes=(1, 2, 4), size=1)"


def test_concurrent_calls_keep_the_sizer_consistent():
    """Eight threads sizing and recording at once (as serving threads sharing
    one BatchMatcher): every size said is one of the sizes, and the sizer
    still finds the fastest."""
    sizer = PoolSizer(8)
    seen: set = set()
    errors: list = []

    def work():
        try:
            seen.update(_run(sizer, lambda n: 40_000 / n, 300))
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and seen <= set(sizer.sizes)
    assert sizer.current == 8


def test_batch_matcher_sizes_its_calls(smollm2_vocab):
    """A BatchMatcher with ``adaptive`` (the default) times its calls of two
    constraints or more; ``adaptive=False`` or one thread has no sizer."""
    assert BatchMatcher(threads=1).sizer is None
    assert BatchMatcher(threads=4, adaptive=False).sizer is None
    batch = BatchMatcher(threads=4)
    assert batch.sizer.sizes == (1, 2, 4) and batch.adaptive
    assert repr(batch) == "BatchMatcher(threads=4, adaptive=True, now=1)"
    for bad in (None, 1, "yes"):
        with pytest.raises(ConstraintError, match="adaptive"):
            BatchMatcher(threads=2, adaptive=bad)
    seen = []
    record = batch.sizer.record
    batch.sizer.record = lambda size, ns, rows: (seen.append((size, rows)), record(size, ns, rows))
    # lazy rows, one kept: alternating two states makes every fill a first visit
    grammars = [compile_regex(r"[a-z]{1,8}@[a-z]{2,10}\.(com|org)", smollm2_vocab,
                              max_mask_bytes=1),
                compile_regex(r"(\w+ ){0,6}\w+[.!?]", smollm2_vocab, max_mask_bytes=1)]
    (a,) = smollm2_vocab.encoder("a")
    bm = allocate_bitmask(2, len(smollm2_vocab), backend="numpy")
    with batch:
        for step in range(12):
            ms = [Matcher(g) for g in grammars]
            if step % 2:
                for m in ms:
                    m.accept_token(a)
            batch.fill_next_token_bitmask(ms, bm)
            want = allocate_bitmask(2, len(smollm2_vocab), backend="numpy")
            for i, m in enumerate(ms):
                m.fill_next_token_bitmask(want, i)
            assert np.array_equal(bm, want)
        batch.fill_next_token_bitmask([Matcher(grammars[0])], bm[:1])  # one constraint: not timed
    assert [rows for _, rows in seen] == [2] * 12
    # four calls at one thread, then a trial of two, whatever it finds
    assert [size for size, _ in seen[:8]] == [1] * 4 + [2] * 4
