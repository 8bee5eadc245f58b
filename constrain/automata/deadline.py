"""A compile's time budget, shared by its phases and its numba kernels.

``time_budget`` bounds a compile's own work. Loading a kernel from numba's disk
cache, or compiling it (the first time on a machine: tens of seconds), is no
part of that work: while any thread is inside numba's compiler (waiting for its
lock included) the clock of every :class:`Deadline` stands still
(:func:`compile_seconds`). One :class:`Deadline` object is passed through every
phase of a compile (regex → character DFA → byte DFA → token automaton; every
terminal of a grammar). It compares with floats as the ``time.perf_counter()``
value it stands for now, so ``time.perf_counter() > deadline`` reads as before.

Kernels whose loops can run long take the deadline as a float and look at the
clock every few thousand iterations through :func:`clock` (on Linux a direct
``clock_gettime`` call, elsewhere ``objmode``: a Python call from compiled
code, ~1 µs, so never in an inner loop). That float
is read when the call starts, before numba compiles the kernel for it:
:func:`ready` compiles it first, so that the float already leaves that time out.
"""

from __future__ import annotations

import math
import sys
import threading
import time
import warnings

import numba
import numba.core.event as _event
from llvmlite import ir
from numba.core import cgutils
from numba.core.errors import NumbaWarning
from numba.extending import intrinsic


class _CompileClock(_event.Listener):
    """Seconds during which some thread was inside numba's compiler lock (the
    union of those intervals: two threads compiling at once count once)."""

    def __init__(self):
        self._lock = threading.Lock()
        self._depth: dict[int, int] = {}  # thread -> nested acquisitions
        self._inside = 0  # threads inside
        self._since = 0.0
        self._total = 0.0

    def on_start(self, event) -> None:
        tid = threading.get_ident()
        with self._lock:
            depth = self._depth.get(tid, 0)
            self._depth[tid] = depth + 1
            if depth == 0:
                if self._inside == 0:
                    self._since = time.perf_counter()
                self._inside += 1

    def on_end(self, event) -> None:
        tid = threading.get_ident()
        with self._lock:
            if tid not in self._depth:  # it entered before this module was imported
                return
            depth = self._depth.pop(tid) - 1
            if depth:
                self._depth[tid] = depth
                return
            # the total first: a reader that sees no thread inside (seconds,
            # without the lock) sees the interval that just ended
            if self._inside == 1:
                self._total += time.perf_counter() - self._since
            self._inside -= 1

    def seconds(self) -> float:
        # no thread inside (nearly always): the total, without the lock (a
        # with-lock block cost ~10 us of a cold compile, which reads this
        # several times)
        if not self._inside:
            return self._total
        with self._lock:
            if self._inside:
                return self._total + time.perf_counter() - self._since
            return self._total


_COMPILE_CLOCK = _CompileClock()
# the lock's event starts before it is acquired: a thread waiting for another's
# compile is paused too
_event.register("numba:compiler_lock", _COMPILE_CLOCK)


def compile_seconds() -> float:
    """Seconds this process has spent in numba's compiler so far (compiling
    kernels or loading them from the disk cache; the clock of every
    :class:`Deadline` stops meanwhile)."""
    return _COMPILE_CLOCK.seconds()


#: CPython's perf_counter is CLOCK_MONOTONIC on Linux (1 there; a 64-bit
#: timespec on 64-bit builds)
_LINUX_MONOTONIC = sys.platform.startswith("linux") and sys.maxsize > 2 ** 32


@intrinsic
def _monotonic(typingctx):
    """``clock_gettime(CLOCK_MONOTONIC)`` in seconds, called straight from
    compiled code (the symbol is resolved when the kernel is loaded, so the
    kernel stays cacheable)."""
    def codegen(context, builder, signature, args):
        i32, i64, f64 = ir.IntType(32), ir.IntType(64), ir.DoubleType()
        timespec = ir.LiteralStructType([i64, i64])
        fn = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(i32, [i32, timespec.as_pointer()]), "clock_gettime")
        ts = cgutils.alloca_once(builder, timespec)
        builder.call(fn, [ir.Constant(i32, 1), ts])
        sec = builder.sitofp(builder.load(cgutils.gep_inbounds(builder, ts, 0, 0)), f64)
        nsec = builder.sitofp(builder.load(cgutils.gep_inbounds(builder, ts, 0, 1)), f64)
        return builder.fadd(sec, builder.fmul(nsec, ir.Constant(f64, 1e-9)))

    return numba.types.float64(), codegen


if _LINUX_MONOTONIC:
    @numba.njit(cache=True, nogil=True)
    def clock() -> float:
        """``time.perf_counter()``, callable from a numba kernel (~30 ns)."""
        return _monotonic()
else:
    @numba.njit(cache=True, nogil=True)
    def clock() -> float:
        """``time.perf_counter()``, callable from a numba kernel (``objmode``:
        ~1 µs, and numba compiles the block in every process that first runs
        it, ~30 ms: Linux has the direct call instead)."""
        with numba.objmode(t="float64"):
            t = time.perf_counter()
        return t


class Deadline:
    """A point on ``time.perf_counter()``'s clock past which a compile stops
    (``at``), moved later by the time numba spends compiling or loading
    kernels from the moment the deadline is made."""

    __slots__ = ("_at", "_paused")

    def __init__(self, at: float):
        self._at = float(at)
        self._paused = compile_seconds()

    @property
    def at(self) -> float:
        """The ``time.perf_counter()`` value past which the deadline has passed,
        as of now."""
        return self._at + (compile_seconds() - self._paused)

    @classmethod
    def of(cls, deadline) -> "Deadline | None":
        """``deadline`` as a :class:`Deadline` (``None`` stays ``None``; a
        :class:`Deadline` is shared, not copied; a float is a
        ``time.perf_counter()`` value, kernel time counted from now)."""
        if deadline is None or isinstance(deadline, Deadline):
            return deadline
        return cls(deadline)

    @classmethod
    def after(cls, seconds: float) -> "Deadline":
        """The deadline ``seconds`` from now (``inf``: none)."""
        return cls(time.perf_counter() + seconds)

    def expired(self) -> bool:
        """Whether the deadline has passed."""
        return time.perf_counter() > self.at

    def remaining(self) -> float:
        """Seconds left (0 once passed)."""
        return max(self.at - time.perf_counter(), 0.0)

    def ready(self, kernel, *args) -> None:
        """Make sure ``kernel`` is compiled (or loaded from numba's cache) for
        ``args``, the arguments of the call about to be made (the time it takes
        does not count). A kernel that has a signature already is taken as
        ready (each is called with one set of types)."""
        ready(kernel, args, self, "Deadline.ready")

    def __float__(self) -> float:
        return self.at

    # ``at`` is never before ``_at`` (kernel time only adds): a deadline not yet
    # at ``_at`` has not passed, without reading the compile clock (its lock; a
    # JSON Schema's translation compares at every node it visits)
    def __lt__(self, other) -> bool:
        other = float(other)
        return self._at < other and self.at < other

    def __le__(self, other) -> bool:
        other = float(other)
        return self._at <= other and self.at <= other

    def __gt__(self, other) -> bool:
        return self.at > float(other)

    def __ge__(self, other) -> bool:
        return self.at >= float(other)

    def __repr__(self) -> str:
        return f"Deadline(in {self.at - time.perf_counter():.3f} s)"


#: (kernel, call site) pairs whose signature is known to be compiled
_READY: set = set()


def ready(kernel, args: tuple, deadline: "Deadline | None" = None, site: str = "",
          warm=None) -> None:
    """Compile (or load) ``kernel`` for the types of ``args``, the arguments of
    the call about to be made, unless done already for this call ``site`` (a
    site passes the same types every time: the check runs once per process).
    Needed before a kernel that takes a deadline as a float: the float is read
    before the call compiles the kernel. A kernel called from another kernel
    may hold a signature of other array layouts: the exact one is checked, not
    any. ``deadline``, the compile's, need not be moved: no :class:`Deadline`
    counts the time numba takes (the call sites that pass it predate that).

    ``warm``: a function of ``args`` giving arguments of the same types for
    a call that reads the :func:`clock` at once (a trivial input, a deadline
    already past; made only on the site's first call): where
    the clock is an objmode block (not on Linux), numba compiles it when it
    first runs, not with the kernel, and that is numba's time too."""
    key = (kernel, site)
    if key in _READY:
        return
    with warnings.catch_warnings():
        # objmode reacquires the GIL for the clock call only; numba warns that
        # such a kernel cannot run in parallel, which none of these do
        warnings.filterwarnings("ignore", message="Code running in object mode",
                                category=NumbaWarning)
        sig = tuple(kernel.typeof_pyval(a) for a in args)
        if sig not in kernel.overloads:
            kernel.compile(sig)
        if warm is not None:
            kernel(*warm(args))
    _READY.add(key)


def kernel_deadline(deadline) -> float:
    """The float a kernel's deadline argument takes: ``inf`` for none."""
    return math.inf if deadline is None else float(deadline)


__all__ = ["Deadline", "clock", "compile_seconds", "kernel_deadline", "ready"]
