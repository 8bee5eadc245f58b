"""numba open-addressing hash tables over integer rows, used to intern states (determinisation, lexer states, Earley columns).

Kernels are compiled once and cached on disk (``cache=True``) and release the GIL
(``nogil=True``); they work on flat numpy arrays only.
"""

from __future__ import annotations

import numpy as np
from numba import njit


def probes_end(htab, count: int, most: int) -> bool:
    """Whether every probe of the table ``htab`` (int64 ids, -1 free) reaches
    a free slot until its owner grows it: its size a power of two (the probes
    mask, so they visit every slot), more slots than the ``most`` entries it
    holds before it is grown, and at most ``count`` entries now, one per
    row. What a loaded table is checked for: a file whose table was full, or
    had one free slot left, loaded, and the next new row's look-up never
    ended (in a nogil kernel). Not a kernel: once per load."""
    size = htab.shape[0]
    return not size & (size - 1) and size > most and int(np.count_nonzero(htab >= 0)) <= count


@njit(cache=True, nogil=True)
def hash_ints(key, m, seed):
    """The hash of the non-negative integers ``key[:m]`` under which the tables
    here file them: FNV-1a over the values (not their bytes), each step mixed by
    a shift, from the offset basis xor ``seed``."""
    h = np.uint64(1469598103934665603) ^ np.uint64(seed)
    for j in range(m):
        h = (h ^ np.uint64(key[j])) * np.uint64(1099511628211)
        h ^= h >> np.uint64(29)
    return h


@njit(cache=True, nogil=True)
def table_probe(htab, hashes, rows, key, h):
    """Open-addressing lookup of the row ``key`` (hash ``h``) among ``rows``:
    ``(slot, index)``, index -1 when absent (``slot`` is then where it goes)."""
    mask = np.uint64(htab.shape[0] - 1)
    slot = h & mask
    while htab[slot] >= 0:
        c = htab[slot]
        if hashes[c] == h:
            same = True
            for j in range(key.shape[0]):
                if rows[c, j] != key[j]:
                    same = False
                    break
            if same:
                return slot, c
        slot = (slot + np.uint64(1)) & mask
    return slot, -1


@njit(cache=True, nogil=True)
def table_rehash(hashes, count, hcap, first=0):
    """A fresh open-addressing table of size ``hcap`` over hashes ``first:count``
    (ids below ``first`` are left out of the table)."""
    htab = np.full(hcap, -1, np.int64)
    for c in range(first, count):
        sl = hashes[c] & np.uint64(hcap - 1)
        while htab[sl] >= 0:
            sl = (sl + np.uint64(1)) & np.uint64(hcap - 1)
        htab[sl] = c
    return htab


@njit(cache=True, nogil=True)
def grow_rows(a, count, cap, fill):
    """``a`` (2-D) with room for ``cap`` rows, the first ``count`` kept, the rest ``fill``."""
    out = np.full((cap, a.shape[1]), fill, a.dtype)
    out[:count] = a[:count]
    return out
