"""``BatchMatcher``: one call fills, advances or rolls back the matchers of a
whole batch, as a serving engine does once per decoding step.

A row whose mask is cached is a copy of a few kilobytes, done on the calling
thread (well under a microsecond). The other rows -- first visits, which walk
the token trie in numba kernels that release the GIL -- go to a thread pool,
grouped by constraint (one constraint's first visits take its lock in turn,
so a group is one thread's work) and taken from a shared queue, the biggest
groups first, by the pool and by the calling thread. How many threads take
part is timed where it runs (:class:`~constrain.runtime.pool_size.PoolSizer`):
a first visit holds the GIL half of its time, and more threads are often
slower than one.
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor
from time import perf_counter_ns

import numpy as np

from constrain.errors import BitmaskError, ConstraintError, InvalidLimitError
from constrain.runtime.matcher import Matcher, _id_list
from constrain.runtime.pool_size import PoolSizer


def default_threads() -> int:
    """The default :attr:`BatchMatcher.threads`: the cores this process may use
    less one (left to the engine's own loop), at least 1."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not on Linux
        cores = os.cpu_count() or 1
    return max(1, cores - 1)


class BatchMatcher:
    """Batched operations over many :class:`~constrain.Matcher` objects.

    Args:
        threads: the most threads that fill rows at once, the calling thread
            included (``1``: all on the calling thread). Default
            :func:`default_threads`.
        adaptive: whether each call's thread count is chosen by timing the
            calls (default): from 1 up to ``threads``, the count that fills
            this process's first visits fastest (see
            :class:`~constrain.runtime.pool_size.PoolSizer`). A first visit
            holds the GIL about half of its time, and on the 2-core machine
            of docs/benchmarks.md every pool was slower than one thread (8
            threads: 0.49x), so this starts at one and uses the pool once it
            has timed it faster. ``False``: every call with first visits of
            two constraints or more uses up to ``threads`` threads.

    One BatchMatcher may serve any number of batches and threads; its pool is
    made on the first fill that needs it and ends with :meth:`close` (or the
    ``with`` block). Whatever the threads, every row is what the matcher's own
    fill writes.
    """

    def __init__(self, threads: int | None = None, *, adaptive: bool = True):
        if threads is None:
            threads = default_threads()
        if isinstance(threads, bool) or not isinstance(threads, (int, np.integer)) or threads < 1:
            raise InvalidLimitError(f"threads must be a count >= 1, not {threads!r}", "threads")
        if adaptive.__class__ is not bool:
            raise ConstraintError(f"adaptive is True or False, not {adaptive!r}")
        self.threads = int(threads)
        self.adaptive = adaptive
        #: the thread counts' timing (``None`` with one thread or ``adaptive=False``)
        self.sizer = PoolSizer(self.threads) if adaptive and self.threads > 1 else None
        self._pool: ThreadPoolExecutor | None = None
        self._pool_lock = threading.Lock()

    def __repr__(self) -> str:
        if self.sizer is None:
            return f"BatchMatcher(threads={self.threads}, adaptive={self.adaptive})"
        return f"BatchMatcher(threads={self.threads}, adaptive=True, now={self.sizer.current})"

    def __enter__(self) -> "BatchMatcher":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        """Stop the pool's threads (a later fill starts a new pool)."""
        with self._pool_lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True)

    def _executor(self) -> ThreadPoolExecutor:
        pool = self._pool
        if pool is None:
            with self._pool_lock:
                if self._pool is None:
                    self._pool = ThreadPoolExecutor(max_workers=self.threads - 1,
                                                    thread_name_prefix="trellis-fill")
                pool = self._pool
        return pool

    def _submit(self, *args):
        """``submit(*args)`` to the pool, to a new one if another thread
        closed it meanwhile (close() between _executor and submit raised
        'cannot schedule new futures after shutdown', with this call's own rows
        not yet filled)."""
        for _ in range(3):
            pool = self._executor()
            try:
                return pool.submit(*args)
            except RuntimeError:
                with self._pool_lock:
                    if self._pool is pool:
                        self._pool = None
        return self._executor().submit(*args)  # (at interpreter exit: its error)

    # -- filling ----------------------------------------------------------------------

    def fill_next_token_bitmask(self, matchers, bitmask, indices=None) -> None:
        """Write each matcher's allowed next tokens into its row of ``bitmask``:
        row ``indices[i]`` for ``matchers[i]`` (default: row ``i``). The result
        is exactly that of ``matchers[i].fill_next_token_bitmask(bitmask,
        indices[i])`` for every ``i``; rows not named are left as they are.

        An exception raised while filling a row (a grammar's limit) is raised
        here, once every other row is done."""
        if matchers.__class__ is not list:
            matchers = list(matchers)
        # rows as given: fill_bitmask takes any index (int() of each was ~0.2 us
        # a row of a batch step) and refuses what is none
        if indices is None:
            rows = range(len(matchers))
        elif hasattr(indices, "tolist"):
            # a numpy array, or a torch tensor (whose 0-d elements, unlisted,
            # hash by identity: a row named twice passed the check below)
            rows = indices.tolist()
            if rows.__class__ is not list:
                rows = [rows]
        else:
            try:
                rows = list(indices)
            except TypeError:
                raise ConstraintError(
                    f"indices is a sequence of bitmask rows, one per matcher, not {indices!r}") from None
        if len(rows) != len(matchers):
            raise ConstraintError(f"{len(matchers)} matchers but {len(rows)} indices")
        if indices is not None and len(set(rows)) != len(rows):
            # cached rows are written before first visits: a row named twice
            # would get whichever came last in that order, not in the list's
            raise BitmaskError("a bitmask row is named twice in indices")
        groups: dict[int, list] = {}
        for m, row in zip(matchers, rows):
            try:
                g, state = m.grammar, m._history[-1]
            except AttributeError:
                raise ConstraintError(
                    f"BatchMatcher fills Matcher objects, not {type(m).__name__}") from None
            if not g.fill_cached_bitmask(state, bitmask, row):
                groups.setdefault(id(g), []).append((g, state, row))
        if not groups:
            return
        work = sorted(groups.values(), key=len)  # popped from the end: biggest first
        errors: list = []
        sizer = self.sizer
        # timed: rows of one constraint are one thread's work whatever the size,
        # so only calls of two constraints or more say anything about it
        timed = sizer is not None and len(work) > 1
        size = sizer.size() if timed else self.threads  # (one group: one thread anyway)
        if timed:
            filled = sum(map(len, work))
            t0 = perf_counter_ns()
        futures = [self._submit(_fill_groups, work, bitmask, errors)
                   for _ in range(min(size, len(work)) - 1)]
        _fill_groups(work, bitmask, errors)
        for f in futures:
            f.result()
        if timed:
            sizer.record(size, perf_counter_ns() - t0, filled)
        if errors:
            raise errors[0]

    # -- advancing --------------------------------------------------------------------

    def accept_token(self, matchers, token_ids) -> np.ndarray:
        """``matchers[i].accept_token(token_ids[i])`` for every ``i``; returns
        the ``[n]`` bool array of which were accepted (a refused token leaves
        its matcher as it was). All or nothing on an error: every token is
        stepped before any matcher changes, so a bad id (or a grammar's
        limit) leaves the whole batch as it was. A matcher may appear once."""
        matchers = _distinct(matchers)
        # each id as given (np.asarray would read [0, True] as [0, 1] and blame
        # the 0 of [0, 1.5]); Matcher._token refuses what is no token id
        if not isinstance(token_ids, list):
            token_ids = _id_list(token_ids)
        if len(token_ids) != len(matchers):
            raise ConstraintError(f"{len(matchers)} matchers need as many tokens, "
                                  f"not {len(token_ids)}")
        try:
            nexts = [m.grammar.advance(m._history[-1], m._token(t))
                     for m, t in zip(matchers, token_ids)]
        except AttributeError:
            raise ConstraintError("BatchMatcher advances Matcher objects, not "
                                  + ", ".join(sorted({type(m).__name__ for m in matchers
                                                      if not isinstance(m, Matcher)}))) from None
        for m, nxt in zip(matchers, nexts):
            if nxt is not None:
                m._push([nxt])
        return np.fromiter((nxt is not None for nxt in nexts), dtype=np.bool_,
                           count=len(matchers))

    def rollback(self, matchers, counts) -> None:
        """``matchers[i].rollback(counts[i])`` for every ``i`` (``counts`` may be
        one int for all). Checked for every matcher before any changes. A
        matcher may appear once."""
        matchers = _distinct(matchers)
        if isinstance(counts, (str, bytes)):
            raise ConstraintError(f"counts is an int or a sequence of ints, not "
                                  f"{type(counts).__name__}")
        # one value for all (each then checked as a count below): an int, a
        # numpy or torch scalar, or anything not iterable
        if getattr(counts, "ndim", None) == 0 or not hasattr(counts, "__iter__"):
            counts = [counts] * len(matchers)
        else:
            counts = list(counts)
        if len(counts) != len(matchers):
            raise ConstraintError(f"{len(matchers)} matchers but {len(counts)} counts")
        checked = []
        for i, (m, c) in enumerate(zip(matchers, counts)):
            try:
                checked.append(m._rollback_count(c))
            except ConstraintError as e:
                raise ConstraintError(f"matcher {i}: {e}") from None
            except AttributeError:
                raise ConstraintError(f"BatchMatcher rolls back Matcher objects, not "
                                      f"{type(m).__name__}") from None
        for m, c in zip(matchers, checked):
            m.rollback(c)


def _distinct(matchers) -> list:
    """``matchers`` as a list, refused when one appears twice: advancing or
    rolling back one matcher twice in a batch has no all-or-nothing meaning."""
    matchers = list(matchers)
    if len({id(m) for m in matchers}) != len(matchers):
        raise ConstraintError("a matcher appears twice in the batch")
    return matchers


def _fill_groups(work: list, bitmask, errors: list) -> None:
    """Take groups of rows from ``work`` until none is left (``list.pop`` is
    atomic: each group goes to one thread) and fill them; an exception is
    kept in ``errors`` and the thread goes on with the next row."""
    while True:
        try:
            group = work.pop()
        except IndexError:
            return
        for g, state, row in group:
            try:
                g.fill_bitmask(state, bitmask, row)
            except Exception as e:  # the caller raises it once all rows are done
                errors.append(e)


__all__ = ["BatchMatcher", "default_threads"]
