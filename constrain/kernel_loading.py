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

The cache entries of this package's kernels are also checked against the
sources of every kernel module, not only the kernel's own: numba compiles the
kernels a kernel calls (``bits.bit_index``, ``hash_table.hash_ints``,
``deadline.clock``...) into its machine code, but tests a cache entry's
freshness by the stamp of the caller's own source file, so an edit of a callee
in another module would leave its callers running the old code. Every kernel's
stamp is numba's own stamp of its file together with those of
:data:`KERNEL_MODULES` (taken once per process: numba stamps most of these
files on import anyway), so any change to a kernel module recompiles the
kernels (about 40 s of CPU, as on a first run).

Both are installed when ``constrain`` is imported, on numba versions that have
what they rely on (else numba's own path is kept).
"""

from __future__ import annotations

import functools
import hashlib
import os

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


#: every module of constrain that defines numba kernels (paths in the package;
#: tests/test_kernel_cache.py checks it against the sources)
KERNEL_MODULES = (
    "automata/bits.py", "automata/deadline.py", "automata/determinize_kernels.py",
    "automata/hash_table.py", "automata/liveness.py", "automata/minimize_kernels.py",
    "cfg/budget_kernels.py", "cfg/earley_kernels.py", "cfg/lexer_kernels.py",
    "cfg/terminal_kernels.py", "frontends/json_schema/number_kernels.py",
    "regular/token_kernels.py", "runtime/bitmask_kernels.py", "runtime/reasoning_kernels.py",
    "vocab/trie_kernels.py",
)

# numba 0.59 named it _CacheImpl
_IMPL = getattr(caching, "CacheImpl", None) or getattr(caching, "_CacheImpl", None)
_LOCATOR = getattr(caching, "_CacheLocator", None)
_FILE_MIXIN = getattr(caching, "_SourceFileBackedLocatorMixin", None)


class _FileStamp(_FILE_MIXIN or object):
    """numba's freshness stamp of one source file (a hash of its bytes, memoised
    by size and mtime, in numba 0.68; size and mtime in older ones)."""

    def __init__(self, path: str):
        self._py_file = path


def sources_stamp(root: str, modules) -> str:
    """A digest of numba's stamps of the files ``modules`` under ``root``."""
    stamps = [_FileStamp(os.path.join(root, m)).get_source_stamp() for m in modules]
    return hashlib.sha256(repr(stamps).encode()).hexdigest()


@functools.lru_cache(maxsize=1)
def kernel_sources_stamp() -> str:
    """:func:`sources_stamp` of :data:`KERNEL_MODULES`, taken once per process:
    what every cached kernel of this package is checked against."""
    return sources_stamp(os.path.dirname(os.path.abspath(__file__)), KERNEL_MODULES)


class _KernelLocator(_LOCATOR or object):
    """numba's own cache locator for a kernel of ``package`` (the same
    directory and file names), whose source stamp also covers every kernel
    module (:meth:`sources_stamp`): see the module docstring."""

    package = "constrain."

    def __init__(self, inner):
        self._inner = inner

    @classmethod
    def sources_stamp(cls) -> str:
        return kernel_sources_stamp()

    def ensure_cache_path(self):
        self._inner.ensure_cache_path()

    def get_cache_path(self):
        return self._inner.get_cache_path()

    def get_source_stamp(self):
        return self._inner.get_source_stamp(), self.sources_stamp()

    def get_disambiguator(self):
        return self._inner.get_disambiguator()

    @classmethod
    def from_function(cls, py_func, py_file):
        """The locator numba would choose, wrapped, for a kernel of ``package``."""
        if not (getattr(py_func, "__module__", None) or "").startswith(cls.package):
            return None
        try:
            cls.sources_stamp()
        except OSError:  # a kernel module is no plain file (a zip): numba's own stamps
            return None
        for other in _IMPL._locator_classes:
            if not issubclass(other, _KernelLocator):
                inner = other.from_function(py_func, py_file)
                if inner is not None:
                    return cls(inner)
        return None


def install() -> bool:
    """Put the loader and the locator in place; whether both could be (each
    needs parts of numba that another version may lack: without them, numba's
    own path)."""
    loader = rtsys is not None and all(hasattr(caching.Cache, n) for n in
                                       ("_guard_against_spurious_io_errors", "_load_overload"))
    if loader:
        caching.Cache.load_overload = _load_overload
    locator = None not in (_IMPL, _LOCATOR, _FILE_MIXIN)
    if locator and _KernelLocator not in _IMPL._locator_classes:
        _IMPL._locator_classes.insert(0, _KernelLocator)
    return loader and locator

install()
