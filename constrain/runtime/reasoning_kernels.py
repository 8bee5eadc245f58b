"""The numba kernel of :mod:`constrain.runtime.reasoning`: every token walked
from one position of the reasoning section's marker automaton."""

from __future__ import annotations

import numba
import numpy as np


@numba.njit(cache=True, nogil=True)
def walk_section(data, offsets, grammar, start, kmp, state):
    """Walk every token from section position ``state``.

    Positions: ``0 <= p < len(start)`` is inside the start marker (``p``
    bytes of it written); ``len(start) + m`` is in the free text with ``m``
    bytes of the end marker matched (``kmp[m, b]``: the match after byte
    ``b``; ``len(end)``: the end marker complete).

    Returns ``(after, split)`` over the tokens: ``after[t]`` the position
    after ``t`` (-1: refused; -2: the end marker completed inside ``t``),
    ``split[t]`` where in ``t`` it completed (its bytes from there on belong
    to the answer).
    """
    n = offsets.shape[0] - 1
    ls = start.shape[0]
    le = kmp.shape[0] - 1
    after = np.full(n, -1, np.int64)
    split = np.zeros(n, np.int64)
    for t in range(n):
        if not grammar[t]:
            continue
        p = state
        ok = True
        done = False
        for i in range(offsets[t], offsets[t + 1]):
            b = data[i]
            if p < ls:
                if b != start[p]:
                    ok = False
                    break
                p += 1
                continue
            m = kmp[p - ls, b]
            if m == le:
                done = True
                split[t] = i + 1 - offsets[t]
                break
            p = ls + m
        if not ok:
            continue
        if done:
            after[t] = -2
        elif offsets[t + 1] > offsets[t]:
            after[t] = p
    return after, split
