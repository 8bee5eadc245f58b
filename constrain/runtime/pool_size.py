"""``PoolSizer``: how many threads a :class:`~constrain.BatchMatcher` call
fills first visits with, chosen by timing the calls themselves.

Why: a first visit holds the GIL for about half of its time, in glue between
nogil kernels of a few microseconds each, and a thread that leaves a kernel
waits for the GIL longer than the kernel took. On the 2-core machine of
docs/benchmarks.md, one thread filled a first walk's rows at 26 µs a row,
two threads at 31, four at 42 and eight at 54: a pool sized by the machine's
cores (the default) makes a large machine's batches slower, not faster. Where
kernels are longer or hand-offs cheaper the pool may pay; which is the case
is a property of the machine, the grammars and whatever else the process
runs, so it is measured where it runs.

How: the sizes are 1, 2, 4, ... up to the matcher's ``threads``. Calls run
at the current size; now and then :data:`PoolSizer.TRIAL` consecutive calls
run at a neighbouring size, and the sizer moves there when those calls cost
at most :data:`PoolSizer.GAIN` of the :data:`PoolSizer.TRIAL` calls before
them (wall time per row filled: consecutive steps of a server's batch fill
alike rows). A trial that does not pay waits twice as long before the next
one at that size, up to :data:`PoolSizer.MAX_GAP` calls, so a machine where
threads never pay spends about one call in a thousand finding that out again.
"""

from __future__ import annotations

import threading


class PoolSizer:
    """The thread count of each timed call, from 1 up to ``threads``.

    :meth:`size` says how many threads the next call may use, :meth:`record`
    takes what it cost; both may be called from any number of threads (a
    lock guards the few fields they change). Starts at one thread: the pool
    is used once it has been timed faster."""

    #: calls in a trial, and calls before it that it is compared with
    TRIAL = 4
    #: a trial's size is taken when its calls cost at most this share of the
    #: calls before it (per row): threads cost CPU, so they must pay clearly
    GAIN = 0.9
    #: calls between the first trials of a size, doubled after each trial of
    #: it that did not pay, up to MAX_GAP
    FIRST_GAP = 8
    MAX_GAP = 1024

    def __init__(self, threads: int):
        sizes = [1]
        while sizes[-1] * 2 < threads:
            sizes.append(sizes[-1] * 2)
        if sizes[-1] != threads:
            sizes.append(threads)
        #: the thread counts tried, ascending
        self.sizes: tuple[int, ...] = tuple(sizes)
        self._lock = threading.Lock()
        self._at = 0  # index of the current size
        self._recent: list[float] = []  # cost per row of the last calls at it
        self._trial: int | None = None  # index of the size on trial
        self._trial_costs: list[float] = []
        self._calls = 0  # calls recorded at the current size
        self._gap = [self.FIRST_GAP] * len(sizes)
        self._due = [self.TRIAL] * len(sizes)  # call count from which a size may be tried

    def __repr__(self) -> str:
        return f"PoolSizer(sizes={self.sizes}, size={self.current})"

    @property
    def current(self) -> int:
        """The size calls run at outside trials."""
        return self.sizes[self._at]

    def size(self) -> int:
        """The thread count for the next call."""
        trial = self._trial
        return self.sizes[self._at if trial is None else trial]

    def record(self, size: int, ns: int, rows: int) -> None:
        """A call at ``size`` threads took ``ns`` nanoseconds of wall time to
        fill ``rows`` rows. Calls that were given another size than the one
        now on trial or current (they overlapped a change) are ignored."""
        if rows <= 0:
            return
        cost = ns / rows
        with self._lock:
            trial = self._trial
            if trial is not None:
                if size == self.sizes[trial]:
                    self._trial_costs.append(cost)
                    if len(self._trial_costs) >= self.TRIAL:
                        self._end_trial(trial)
                return
            if size != self.sizes[self._at]:
                return
            recent = self._recent
            recent.append(cost)
            if len(recent) > self.TRIAL:
                del recent[0]
            self._calls += 1
            if len(recent) < self.TRIAL:
                return
            for j in (self._at + 1, self._at - 1):
                if 0 <= j < len(self.sizes) and self._calls >= self._due[j]:
                    self._trial, self._trial_costs = j, []
                    return

    def _end_trial(self, j: int) -> None:
        """Move to size ``j`` if its trial paid, else wait longer before the
        next one (under the lock)."""
        before = sum(self._recent) / len(self._recent)
        after = sum(self._trial_costs) / len(self._trial_costs)
        self._trial = None
        if after <= self.GAIN * before:
            self._at = j
            self._recent = self._trial_costs
            self._calls = 0
            self._gap = [self.FIRST_GAP] * len(self.sizes)
            self._due = [self.FIRST_GAP] * len(self.sizes)
        else:
            self._gap[j] = min(2 * self._gap[j], self.MAX_GAP)
            self._due[j] = self._calls + self._gap[j]
        self._trial_costs = []


__all__ = ["PoolSizer"]
