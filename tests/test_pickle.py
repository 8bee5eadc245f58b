"""Every compiled constraint pickles (``pickle``, ``copy.deepcopy``,
``multiprocessing``): the unpickled one gives the same masks, and the states
of the pickled one are its states. A vocabulary pickles as its tokens and,
unpickled where one with its fingerprint lives, is that one."""

from __future__ import annotations

import copy
import multiprocessing
import pickle
import threading

import numpy as np
import pytest

import constrain
from constrain import Vocabulary
import persist_testing as pt

NAMES = ["regex", "choice", "lark", "json_schema", "response_format", "reasoning"]


@pytest.fixture(scope="module")
def kinds():
    return pt.constraints()


@pytest.mark.parametrize("name", NAMES)
def test_pickle_round_trip(kinds, name):
    c, _ = kinds[name]
    masks, states = pt.walk(c, 2, 20)
    out = pickle.loads(pickle.dumps(c))
    assert type(out) is type(c) and out.vocab is c.vocab
    assert pt.same_walks(c, out)
    for m, s in zip(masks, states):  # the pickled constraint's states
        assert np.array_equal(out.allowed_token_ids(s), m)
    assert pt.same_walks(c, copy.deepcopy(c), seeds=[9])


def test_pickled_grammar_has_its_own_lock_and_the_default_compiler(kinds):
    g, _ = kinds["json_schema"]
    out = pickle.loads(pickle.dumps(g))
    assert out._lock is not g._lock and out.compiler is constrain.default_compiler(g.vocab)


try:
    from pydantic import BaseModel
except ImportError:  # pragma: no cover - a test dependency
    BaseModel = None

if BaseModel is not None:
    class Point(BaseModel):
        """A type pickled by reference: defined at module level."""

        x: int
        y: int


@pytest.mark.skipif(BaseModel is None, reason="pydantic is not installed")
def test_python_type_keeps_its_output_type():
    c = constrain.compile_type(Point, pt.vocab())
    out = pickle.loads(pickle.dumps(c))
    assert pt.same_walks(c, out, seeds=[0])
    assert constrain.parse_output(out, '{"x":1,"y":2}').y == 2


def test_vocabulary_pickles_and_is_interned():
    v = pt.vocab()
    assert pickle.loads(pickle.dumps(v)) is v
    tokens = [b"a", b"b", b"ab", b"<eos>"]
    data = pickle.dumps(Vocabulary.from_tokens(tokens, [3], name="tiny"))
    # no live vocabulary of that fingerprint now: a new one, equal to it
    out = pickle.loads(data)
    assert out == Vocabulary.from_tokens(tokens, [3]) and out.name == "tiny"
    assert out.eos_token_ids == (3,) and out.encoder is None


def test_pickling_while_threads_fill(kinds):
    """A snapshot is taken under the grammar's lock: pickling while other
    threads compute masks gives a grammar whose masks are right."""
    g = constrain.compile_json_schema(pt.SCHEMA, pt.vocab())
    stop = threading.Event()
    errors = []

    def fill(seed):
        try:
            while not stop.is_set():
                pt.walk(g, seed, 30)
                seed += 2
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=fill, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    try:
        copies = [pickle.loads(pickle.dumps(g)) for _ in range(15)]
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert not errors
    fresh = constrain.Compiler(pt.vocab()).compile_json_schema(pt.SCHEMA)
    assert all(pt.same_walks(fresh, c, seeds=[100], steps=30) for c in copies)


def _masks_in_worker(constraint, seed):
    masks, _ = pt.walk(constraint, seed, 25)
    return np.concatenate(masks).tolist()


def test_spawned_workers_give_the_same_masks(kinds):
    """Constraints shipped to worker processes (spawn: nothing inherited)."""
    from concurrent.futures import ProcessPoolExecutor

    ctx = multiprocessing.get_context("spawn")
    names = ["regex", "json_schema", "reasoning"]
    # (not multiprocessing.Pool: a worker that fails to unpickle its task loses
    # it, and Pool then waits for it forever; an executor raises
    # BrokenProcessPool, and the timeout bounds a worker that hangs)
    with ProcessPoolExecutor(1, mp_context=ctx) as pool:
        got = list(pool.map(_masks_in_worker, [kinds[n][0] for n in names], [3] * len(names),
                            timeout=600))
    for name, masks in zip(names, got):
        assert masks == _masks_in_worker(kinds[name][0], 3), name
