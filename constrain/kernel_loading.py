"""Loading Trellis's cached kernels without numba's compiler set-up.

Numba loads a kernel from its on-disk cache through ``Cache.load_overload``,
which first calls ``target_context.refresh()``: the set-up that *compiling*
needs (importing and installing numba's typing and lowering registries). In a
new process that is ~80 ms of CPU, the largest single cost of the first compile
and mask after ``import constrain``. Loading machine code needs only numba's
runtime (NRT) initialised. For kernels defined in this package the loader below
does just that; every other function takes numba's own path, and a kernel that
does have to be compiled still gets the full set-up (numba's compiler pipeline
refreshes the contexts itself).

Installed when ``constrain`` is imported, on numba versions that have the
methods it relies on (else numba's own path is kept).
"""

from __future__ import annotations

from numba.core import caching

try:
    from numba.core.runtime.nrt import rtsys
except ImportError:  # another numba layout: keep numba's loader
    rtsys = None

_numba_load_overload = caching.Cache.load_overload


def _load_overload(self, sig, target_context):
    """``Cache.load_overload`` for constrain's kernels: NRT only, no refresh."""
    module = getattr(getattr(self, "_py_func", None), "__module__", None) or ""
    if not module.startswith("constrain."):
        return _numba_load_overload(self, sig, target_context)
    rtsys.initialize(target_context)
    with self._guard_against_spurious_io_errors():
        return self._load_overload(sig, target_context)


def install() -> bool:
    """Put the loader in place; whether it could be."""
    if rtsys is None or not all(hasattr(caching.Cache, n) for n in
                                ("_guard_against_spurious_io_errors", "_load_overload")):
        return False
    caching.Cache.load_overload = _load_overload
    return True


install()
