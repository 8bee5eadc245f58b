"""constrain.automata.table_views: a kernel's tables behind one descriptor
array. The views must be exactly the arrays bound (never wider), follow a
rebinding, and a copy must describe its own arrays, not the original's."""

from __future__ import annotations

import copy
import pickle

import numpy as np
import pytest
from numba import njit

from constrain.automata.table_views import VIEWS, TableViews, i64_1d, u8_1d, u64_2d
from constrain.cfg.earley import EarleyRecognizer
from constrain.cfg.ir import GrammarIR, Terminal


@njit(cache=True)
def _touch(desc):
    """Sum slot 0, write its first element, and mark a cell of slot 1."""
    a = i64_1d(desc, 0)
    b = u64_2d(desc, 1)
    total = 0
    for x in a:
        total += x
    a[0] = -1
    b[b.shape[0] - 1, b.shape[1] - 1] = 7
    return total, b.shape[0], b.shape[1]


def test_views_read_and_write_the_bound_arrays_in_their_shapes():
    views = TableViews([(np.int64, 1), (np.uint64, 2)])
    a = np.arange(6, dtype=np.int64)
    b = np.zeros((3, 5), dtype=np.uint64)
    views.bind_all([a, b])
    assert _touch(views.desc) == (15, 3, 5)
    assert a[0] == -1 and b[2, 4] == 7 and b.sum() == 7
    # rebound in place: the same descriptor array describes the new tables
    desc = views.desc
    a2 = np.arange(10, dtype=np.int64)
    b2 = np.zeros((4, 2), dtype=np.uint64)
    views.bind(0, a2)
    views.bind(1, b2)
    assert views.desc is desc and _touch(desc) == (45, 4, 2) and b2[3, 1] == 7
    assert a[1:].tolist() == [1, 2, 3, 4, 5]  # the old tables are no longer written


@pytest.mark.parametrize("bad", [
    np.zeros(4, dtype=np.int32),            # another dtype
    np.zeros((2, 2), dtype=np.int64),       # another dimension
    np.zeros(8, dtype=np.int64)[::2],       # not contiguous
    np.zeros((3, 4), dtype=np.int64).T[0],  # a column
    [1, 2, 3],                              # no array
    np.frombuffer(bytes(32), dtype=np.int64),  # read-only: the kernels write
])
def test_bind_refuses_what_a_view_would_misread(bad):
    views = TableViews([(np.int64, 1)])
    with pytest.raises(TypeError, match="slot 0"):
        views.bind(0, bad)
    assert views.desc[0].tolist() == [0, 0, 0]


def test_a_refused_rebinding_leaves_the_descriptors_as_they_were():
    views = TableViews([(np.int64, 1), (np.uint64, 2)])
    views.bind_all([np.arange(3, dtype=np.int64), np.zeros((2, 2), dtype=np.uint64)])
    before = views.desc.copy()
    with pytest.raises(TypeError, match="slot 1"):
        views.bind_all([np.arange(9, dtype=np.int64), np.zeros((2, 2), dtype=np.int64)])
    # slot 0 still names the array the views keep, not the one just refused with it
    assert (views.desc == before).all() and views.tables[0].tolist() == [0, 1, 2]


def test_a_refused_binding_keeps_a_table_bound_alone():
    """A slot bound by itself (bind) before any bind_all is kept when a later
    bind_all is refused: the views are not fresh any more."""
    views = TableViews([(np.int64, 1), (np.uint64, 2)])
    b = np.zeros((2, 2), dtype=np.uint64)
    views.bind(1, b)
    before = views.desc.copy()
    with pytest.raises(TypeError, match="slot 1"):
        views.bind_all([np.arange(9, dtype=np.int64), np.zeros((2, 2), dtype=np.int64)])
    assert (views.desc == before).all() and views.tables[1] is b and views.tables[0] is None


def test_every_slot_kind_has_a_view():
    assert {np.dtype(d) for d in (np.int8, np.int16, np.uint8, np.bool_, np.int32, np.uint32,
                                  np.int64, np.uint64)} <= set(VIEWS)
    with pytest.raises(TypeError):
        TableViews([(np.float64, 1)])
    with pytest.raises(TypeError):
        TableViews([(np.int64, 3)])


def test_copies_describe_their_own_arrays():
    views = TableViews([(np.int64, 1), (np.uint64, 2)])
    views.bind_all([np.arange(4, dtype=np.int64), np.zeros((2, 2), dtype=np.uint64)])
    for other in (copy.deepcopy(views), pickle.loads(pickle.dumps(views))):
        assert other.desc is not views.desc
        assert other.desc[0, 0] != views.desc[0, 0] and other.desc[1, 0] != views.desc[1, 0]
        _touch(other.desc)
        assert views.tables[0][0] == 0 and other.tables[0][0] == -1
    assert u8_1d is VIEWS[np.dtype(np.uint8)][0]


def test_a_copied_recognizer_steps_on_its_own_tables():
    """The recognizer's kernels take its tables through descriptors: a deep
    copy (which a user may make of a grammar's parts) must step on its own
    arrays, growing them apart from the original's."""
    # start: L start R start | (empty): balanced brackets
    ir = GrammarIR(terminals=(Terminal("L", "l", 0, None), Terminal("R", "r", 0, None)),
                   nonterminals=("start",), rules=((0, (0, 2, 1, 2)), (0, ())), start=0)
    parser = EarleyRecognizer(ir)
    lp, rp = 0, 1
    twin = copy.deepcopy(parser)
    assert twin._views.desc[0, 0] != parser._views.desc[0, 0]
    c = 0
    for _ in range(300):  # nesting makes new columns: the tables grow
        c = twin.next(c, lp)
    for _ in range(300):
        c = twin.next(c, rp)
    assert twin.accepts(c) and twin.num_contexts > 300
    assert parser.num_contexts < 10
    assert parser.recognize([lp, rp, lp, rp]) and not parser.recognize([rp])
