"""A compile's time budget, shared by its phases and its numba kernels.

``time_budget`` bounds a compile's own work. Loading a kernel from numba's disk
cache (or compiling it, the first time on a machine) is no part of that work:
:meth:`Deadline.ready` compiles a kernel for the call about to be made when it
has no compiled signature yet, and moves the deadline later by the time that
took. One
:class:`Deadline` object is passed through every phase of a compile (regex →
character DFA → byte DFA → token automaton; every terminal of a grammar), so
that time saved there counts for all of them. It compares with floats as the
``time.perf_counter()`` value it holds, so ``time.perf_counter() > deadline``
reads as before.

Kernels whose loops can run long take the deadline as a float and look at the
clock every few thousand iterations through :func:`clock` (``objmode``: a
Python call from compiled code, ~1 µs, so never in an inner loop).
"""

from __future__ import annotations

import math
import time
import warnings

import numba
from numba.core.errors import NumbaWarning

@numba.njit(cache=True, nogil=True)
def clock() -> float:
    """``time.perf_counter()``, callable from a numba kernel."""
    with numba.objmode(t="float64"):
        t = time.perf_counter()
    return t


class Deadline:
    """A point on ``time.perf_counter()``'s clock past which a compile stops
    (``at``), moved later by kernel loading (:meth:`ready`)."""

    __slots__ = ("at",)

    def __init__(self, at: float):
        self.at = float(at)

    @classmethod
    def of(cls, deadline) -> "Deadline | None":
        """``deadline`` as a :class:`Deadline` (``None`` stays ``None``; a
        :class:`Deadline` is shared, not copied)."""
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
        ``args``, the arguments of the call about to be made, and move the
        deadline later by the time that took. A kernel that has a signature
        already is taken as ready (each is called with one set of types)."""
        ready(kernel, args, self, "Deadline.ready")

    def __float__(self) -> float:
        return self.at

    def __lt__(self, other) -> bool:
        return self.at < float(other)

    def __le__(self, other) -> bool:
        return self.at <= float(other)

    def __gt__(self, other) -> bool:
        return self.at > float(other)

    def __ge__(self, other) -> bool:
        return self.at >= float(other)

    def __repr__(self) -> str:
        return f"Deadline(in {self.at - time.perf_counter():.3f} s)"


#: (kernel, call site) pairs whose signature is known to be compiled
_READY: set = set()


def ready(kernel, args: tuple, deadline: "Deadline | None" = None, site: str = "",
          warm: tuple | None = None) -> None:
    """Compile (or load) ``kernel`` for the types of ``args``, the arguments of
    the call about to be made, unless done already for this call ``site`` (a
    site passes the same types every time: the check runs once per process);
    with a ``deadline``, move it later by the time taken. A kernel called from
    another kernel may hold a signature of other array layouts: the exact one is
    checked, not any.

    ``warm``: arguments of the same types for a call that reads the
    :func:`clock` at once (a trivial input, a deadline already past): numba
    compiles the clock's objmode block when it first runs, not with the
    kernel, and that is numba's time too."""
    key = (kernel, site)
    if key in _READY:
        return
    t = time.perf_counter()
    with warnings.catch_warnings():
        # objmode reacquires the GIL for the clock call only; numba warns that
        # such a kernel cannot run in parallel, which none of these do
        warnings.filterwarnings("ignore", message="Code running in object mode",
                                category=NumbaWarning)
        sig = tuple(kernel.typeof_pyval(a) for a in args)
        if sig not in kernel.overloads:
            kernel.compile(sig)
        if warm is not None:
            kernel(*warm)
    if deadline is not None:
        deadline.at += time.perf_counter() - t
    _READY.add(key)


def kernel_deadline(deadline) -> float:
    """The float a kernel's deadline argument takes: ``inf`` for none."""
    return math.inf if deadline is None else float(deadline)


__all__ = ["Deadline", "clock", "kernel_deadline", "ready"]
