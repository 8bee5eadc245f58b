"""numba kernel that applies bitmask rows to logits.

Kernels are compiled once and cached on disk (``cache=True``) and release the GIL
(``nogil=True``); they work on flat numpy arrays only.
"""

from __future__ import annotations

from numba import njit


@njit(cache=True, nogil=True)
def apply_bitmask_rows(logits, bitmask, fill):
    """Set ``logits[i, t] = fill`` where bit ``t`` of row ``i`` is clear (and for
    every ``t`` past the bitmask's width)."""
    batch, v = logits.shape
    words = bitmask.shape[1]
    for i in range(batch):
        for t in range(v):
            w = t >> 5
            if w >= words or not ((bitmask[i, w] >> (t & 31)) & 1):
                logits[i, t] = fill
