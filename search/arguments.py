"""Checks of the counts and numbers the drivers take: a bad one is a
``ValueError`` naming the argument, before any model call (``int(x) != x``
raised OverflowError on an infinity, TypeError on ``None``, and a float count
reached ``range`` as a raw TypeError)."""

from __future__ import annotations

import math
import numbers

__all__ = ["count", "finite"]


def count(name: str, value, minimum: int = 0, *, optional: bool = False) -> int | None:
    """``value`` as an ``int`` of at least ``minimum``: an integer (numpy's
    too) or an integral float; ``None`` when ``optional`` and ``None``.

    Raises:
        ValueError: a bool, a fraction, NaN, an infinity, a non-number, or
            below ``minimum`` (the message names ``name``).
    """
    if value is None and optional:
        return None
    if (isinstance(value, bool) or not isinstance(value, numbers.Real)
            or not math.isfinite(value) or int(value) != value or value < minimum):
        what = ("a non-negative integer" if minimum == 0 else "a positive integer" if minimum == 1
                else f"an integer >= {minimum}")
        raise ValueError(f"{name} must be {what}{' or None' if optional else ''}, got {value!r}")
    return int(value)


def finite(name: str, value, *, above: float | None = None, at_least: float | None = None) -> float:
    """``value`` as a finite ``float``, ``> above`` / ``>= at_least`` when given.

    Raises:
        ValueError: a bool, NaN, an infinity, a non-number, or out of range
            (the message names ``name``).
    """
    ok = (not isinstance(value, bool) and isinstance(value, numbers.Real) and math.isfinite(value)
          and (above is None or value > above) and (at_least is None or value >= at_least))
    if not ok:
        bound = (f" > {above}" if above is not None else "") + \
                (f" >= {at_least}" if at_least is not None else "")
        raise ValueError(f"{name} must be a finite number{bound}, got {value!r}")
    return float(value)
