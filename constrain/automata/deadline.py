"""A compile's time budget, shared by its phases and its numba kernels.

``time_budget`` bounds a compile's own work, measured on the compiling
thread's CPU clock (:func:`now`, ``time.thread_time()``): what other threads
and processes run meanwhile does not count, so a compile that fits its budget
on a quiet machine fits it on a loaded one (on the wall clock, SQL compiles of
2-5 s ran past a 30 s budget at a load of 4). Loading a kernel from numba's
disk cache, or compiling it (the first time on a machine: tens of seconds), is
no part of that work either: the CPU time a thread spends inside numba's
compiler is left out of its deadlines (:func:`compile_seconds`), and a thread
waiting for another's compile spends none. One :class:`Deadline` object is
passed through every phase of a compile, all on one thread (regex → character
DFA → byte DFA → token automaton; every terminal of a grammar). It compares
with floats as the :func:`now` value it stands for, so ``now() > deadline``
reads as the check.

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


def now() -> float:
    """The clock of every :class:`Deadline`: the CPU seconds of the calling
    thread (``time.thread_time()``)."""
    return time.thread_time()


def passed(deadline) -> bool:
    """Whether ``deadline`` (a :class:`Deadline`, or a :func:`now` value; not
    ``None``) has passed: :meth:`Deadline.expired`, which mostly reads the
    cheaper wall clock."""
    if deadline.__class__ is Deadline:
        return deadline.expired()
    return now() > deadline


class _CompileClock(_event.Listener):
    """CPU seconds each thread has spent inside numba's compiler lock (its own
    count, kept thread-local: only the thread itself reads or moves it)."""

    def __init__(self):
        self._local = threading.local()

    def _mine(self):
        mine = self._local
        if not hasattr(mine, "depth"):
            mine.depth, mine.since, mine.total = 0, 0.0, 0.0
        return mine

    def on_start(self, event) -> None:
        mine = self._mine()
        if mine.depth == 0:
            mine.since = time.thread_time()
        mine.depth += 1

    def on_end(self, event) -> None:
        mine = self._mine()
        if mine.depth == 0:  # it entered before this module was imported
            return
        mine.depth -= 1
        if mine.depth == 0:
            mine.total += time.thread_time() - mine.since

    def seconds(self) -> float:
        mine = self._mine()
        if mine.depth:
            return mine.total + time.thread_time() - mine.since
        return mine.total


_COMPILE_CLOCK = _CompileClock()
_event.register("numba:compiler_lock", _COMPILE_CLOCK)


def compile_seconds() -> float:
    """CPU seconds the calling thread has spent in numba's compiler so far
    (compiling kernels or loading them from the disk cache; its deadlines
    leave them out)."""
    return _COMPILE_CLOCK.seconds()


#: CPython's thread_time is CLOCK_THREAD_CPUTIME_ID on Linux (3 there; a 64-bit
#: timespec on 64-bit builds)
_LINUX_THREAD_CLOCK = sys.platform.startswith("linux") and sys.maxsize > 2 ** 32


@intrinsic
def _thread_cpu_time(typingctx):
    """``clock_gettime(CLOCK_THREAD_CPUTIME_ID)`` in seconds, called straight
    from compiled code (the symbol is resolved when the kernel is loaded, so the
    kernel stays cacheable)."""
    def codegen(context, builder, signature, args):
        i32, i64, f64 = ir.IntType(32), ir.IntType(64), ir.DoubleType()
        timespec = ir.LiteralStructType([i64, i64])
        fn = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(i32, [i32, timespec.as_pointer()]), "clock_gettime")
        ts = cgutils.alloca_once(builder, timespec)
        builder.call(fn, [ir.Constant(i32, 3), ts])
        sec = builder.sitofp(builder.load(cgutils.gep_inbounds(builder, ts, 0, 0)), f64)
        nsec = builder.sitofp(builder.load(cgutils.gep_inbounds(builder, ts, 0, 1)), f64)
        return builder.fadd(sec, builder.fmul(nsec, ir.Constant(f64, 1e-9)))

    return numba.types.float64(), codegen


if _LINUX_THREAD_CLOCK:
    @numba.njit(cache=True, nogil=True)
    def clock() -> float:
        """:func:`now`, callable from a numba kernel (a system call: ~0.3 µs)."""
        return _thread_cpu_time()
else:
    @numba.njit(cache=True, nogil=True)
    def clock() -> float:
        """:func:`now`, callable from a numba kernel (``objmode``: ~1 µs, and
        numba compiles the block in every process that first runs it, ~30 ms:
        Linux has the direct call instead)."""
        with numba.objmode(t="float64"):
            t = time.thread_time()
        return t


class Deadline:
    """A point on the clock of :func:`now` (the thread's CPU seconds) past
    which a compile stops (``at``), moved later by the time the thread spends
    compiling or loading numba kernels from the moment the deadline is made.
    A deadline belongs to the thread that made it: another thread's clock
    reads another count."""

    __slots__ = ("_at", "_paused", "_wall")

    def __init__(self, at: float, _now: float | None = None):
        self._at = float(at)
        self._paused = compile_seconds()
        # a thread's CPU clock runs no faster than the wall clock: until the
        # wall clock has gone this far, the deadline cannot have passed, and
        # expired() reads perf_counter (~0.05 us) instead of the thread's CPU
        # time (~0.6 us, a system call; ~200 reads a JSON Schema compile)
        self._wall = time.perf_counter() + (self._at - (now() if _now is None else _now))

    @property
    def at(self) -> float:
        """The ``now()`` value past which the deadline has passed,
        as of now."""
        return self._at + (compile_seconds() - self._paused)

    @classmethod
    def of(cls, deadline) -> "Deadline | None":
        """``deadline`` as a :class:`Deadline` (``None`` stays ``None``; a
        :class:`Deadline` is shared, not copied; a float is a
        ``now()`` value, kernel time counted from now)."""
        if deadline is None or isinstance(deadline, Deadline):
            return deadline
        return cls(deadline)

    @classmethod
    def after(cls, seconds: float) -> "Deadline":
        """The deadline ``seconds`` from now (``inf``: none)."""
        t = now()  # read once: a system call
        return cls(t + seconds, t)

    def expired(self) -> bool:
        """Whether the deadline has passed."""
        if time.perf_counter() < self._wall:
            return False
        return now() > self.at

    def remaining(self) -> float:
        """Seconds left (0 once passed)."""
        return max(self.at - now(), 0.0)

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
        return f"Deadline(in {self.at - now():.3f} s)"


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
