"""How many examples the fuzz tests draw: the default suite's few hundred, or
many more under ``TRELLIS_FUZZ=long`` (``TRELLIS_FUZZ=long pytest
tests/test_fuzz_regex.py tests/test_fuzz_lark.py tests/test_lookaround.py``)."""

from __future__ import annotations

import gc
import os
import time

#: how many times more examples a long run draws
LONG_FACTOR = 40


#: CPU seconds this process has spent in the cyclic garbage collector
_gc_seconds = 0.0
_gc_started = 0.0


def _time_collections(phase: str, info: dict) -> None:
    global _gc_seconds, _gc_started
    if phase == "start":
        _gc_started = time.process_time()
    else:
        _gc_seconds += time.process_time() - _gc_started


gc.callbacks.append(_time_collections)


def case_clock() -> float:
    """The clock a fuzz case's one-second bound is read on: this process's CPU
    time, so that other processes on a loaded machine's cores do not make a
    case look hung (on a 2-core machine running several suites, wall-clock
    bounds failed on cases that took 0.2 s when replayed), less the time spent
    in the cyclic garbage collector: a full collection walks the whole test
    process's heap (Hypothesis's and lark's objects), 0.3-0.7 s in a long run,
    and charged to whichever case it fell in (a 1 ms malformed grammar was
    timed at 1.04 s, and passed on replay)."""
    return time.process_time() - _gc_seconds


def long_run() -> bool:
    """Whether ``TRELLIS_FUZZ=long`` asks for the long run."""
    return os.environ.get("TRELLIS_FUZZ", "").lower() == "long"


def examples(default: int) -> int:
    """``default`` examples, or :data:`LONG_FACTOR` times as many in a long run."""
    return default * LONG_FACTOR if long_run() else default


class FuzzLog:
    """Counts of one fuzz module's inputs and outcomes, per front end, printed
    when the module's tests end (``pytest -s`` shows them) and appended as a
    JSON line to ``$TRELLIS_FUZZ_REPORT`` when it is set."""

    def __init__(self, name: str):
        import collections

        self.name = name
        self.counts: dict = collections.defaultdict(collections.Counter)

    def add(self, front_end: str, outcome: str, n: int = 1) -> None:
        """Count ``n`` inputs of ``front_end`` with ``outcome``."""
        self.counts[front_end][outcome] += n

    def report(self) -> str:
        """One line per front end: its inputs and outcomes."""
        lines = []
        for front_end, c in sorted(self.counts.items()):
            total = sum(c.values())
            parts = ", ".join(f"{k} {v}" for k, v in sorted(c.items()))
            lines.append(f"{self.name} {front_end}: {total} inputs ({parts})")
        return "\n".join(lines)

    def flush(self) -> None:
        """Print the report and append it to ``$TRELLIS_FUZZ_REPORT``."""
        import json

        text = self.report()
        if text:
            print("\n" + text)
        path = os.environ.get("TRELLIS_FUZZ_REPORT")
        if path:
            with open(path, "a", encoding="utf-8") as f:
                f.write(json.dumps({"module": self.name, "long": long_run(),
                                    "counts": {k: dict(v) for k, v in self.counts.items()}})
                        + "\n")


def fuzz(default: int):
    """The hypothesis settings of a fuzz test drawing :func:`examples` of
    ``default``: derandomized (the same cases on every run), no example
    database, no per-example deadline (each test bounds its own cases' time)."""
    from hypothesis import HealthCheck, settings

    return settings(max_examples=examples(default), deadline=None, database=None,
                    derandomize=True, suppress_health_check=list(HealthCheck))
