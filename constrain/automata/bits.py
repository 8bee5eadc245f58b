"""numba helpers for bitsets stored as uint32 words (the bitmask layout).

Kernels are compiled once and cached on disk (``cache=True``) and release the GIL
(``nogil=True``); they work on flat numpy arrays only.
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True, nogil=True, inline="always")
def bit_index(low):
    """The index of the one set bit of ``low`` (a uint64 power of two)."""
    t = 0
    while low > np.uint64(1):
        low >>= np.uint64(1)
        t += 1
    return t


@njit(cache=True, nogil=True)
def bits_to_ids(row, n):
    """Ids of the set bits of a uint32 bitmask row, below ``n``."""
    out = np.empty(n, np.int64)
    k = 0
    for w in range(row.shape[0]):
        x = row[w]
        if x == 0:
            continue
        for b in range(32):
            if (x >> np.uint32(b)) & np.uint32(1):
                t = w * 32 + b
                if t < n:
                    out[k] = t
                    k += 1
    return out[:k]
