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
kernels (about 150 s of CPU, as on a first run).

Both are installed when ``constrain`` is imported, on numba versions that have
what they rely on (else numba's own path is kept).

The bitcode numba keeps beside a cached kernel's object code, for linking it
into a later compile, is parsed only when one does (:func:`_unserialize_library`;
numba parsed it on every load). Loading still costs ~1-3 ms of CPU a kernel
(unpickling, LLVM loading the object code; the first load ~35 ms more: NRT,
and the numba modules the kernels' environments import), ~55 ms for the
kernels of a first JSON Schema compile and mask, and in a process that holds
many objects (a tokenizer's) it sets off a full garbage collection. ``import constrain``
therefore starts :data:`PRELOADER`: a daemon thread that loads
:data:`PRELOAD` from the disk cache while the process goes on to read its
tokenizer. It never compiles (nothing is loaded unless ``trellis warm-up`` has
compiled the kernels: :func:`constrain.warmup.kernels_compiled`), stops at
exit and lets a fork wait for the kernel it is loading (so no child inherits
numba's compiler lock or LLVM half-way), and a thread that wants a kernel
meanwhile takes it from numba as usual (numba's lock serialises the two).
``TRELLIS_PRELOAD=0`` turns it off.
"""

from __future__ import annotations

import atexit
import functools
import hashlib
import importlib
import os
import struct
import threading

import llvmlite.binding as ll
from numba.core import caching, codegen, config, sigutils
from numba.core.compiler_lock import global_compiler_lock

try:
    from numba.core.runtime.nrt import rtsys
except ImportError:  # another numba layout: keep numba's loader
    rtsys = None

_numba_load_overload = caching.Cache.load_overload


class _Loading:
    """Whether the thread in numba's compiler lock is loading one of
    constrain's kernels (set and read under that lock only: every cache load
    runs in it)."""

    kernel = False


def _load_overload(self, sig, target_context):
    """``Cache.load_overload`` for constrain's kernels: NRT only, no refresh,
    the linking bitcode left unparsed (:func:`_unserialize_library`)."""
    module = getattr(getattr(self, "_py_func", None), "__module__", None) or ""
    if not module.startswith("constrain."):
        return _numba_load_overload(self, sig, target_context)
    rtsys.initialize(target_context)
    _Loading.kernel = True
    try:
        with self._guard_against_spurious_io_errors():
            return self._load_overload(sig, target_context)
    finally:
        _Loading.kernel = False


def elf_defined_symbols(obj: bytes) -> set[str] | None:
    """The names an ELF64 little-endian object file defines (functions and
    data, any binding), or ``None`` for another format."""
    if obj[:4] != b"\x7fELF" or obj[4:6] != b"\x02\x01":
        return None
    shoff, = struct.unpack_from("<Q", obj, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", obj, 0x3A)
    names = set()
    for k in range(shnum):
        header = shoff + k * shentsize
        if struct.unpack_from("<I", obj, header + 4)[0] != 2:  # SHT_SYMTAB
            continue
        offset, size, link, _, _, entsize = struct.unpack_from("<QQIIQQ", obj, header + 0x18)
        strtab, = struct.unpack_from("<Q", obj, shoff + link * shentsize + 0x18)
        for i in range(size // entsize):
            name, info, _, section = struct.unpack_from("<IBBH", obj, offset + i * entsize)
            # undefined, nameless, and section or file symbols (STT_SECTION, STT_FILE)
            if section == 0 or name == 0 or info & 0xF in (3, 4):
                continue
            start = strtab + name
            names.add(obj[start:obj.index(b"\0", start)].decode())
    return names


_numba_unserialize_library = codegen.JITCPUCodegen.unserialize_library


def _unserialize_library(self, serialized):
    """``unserialize_library`` for constrain's kernels.

    A cached kernel is its object code and the bitcode of its module, kept for
    linking into a later compile that calls it. numba parses that bitcode on
    every load, only to list the symbols the library defines (its engine must
    not look up a name nobody defines): ~4 ms a kernel, 1.4 MB for the first
    compile's. Here the names come from the object code's symbol table (the
    same names but private constants no one looks up: checked for the first
    compile's 14 libraries), and the bitcode is parsed when a compile first
    links against the library."""
    name, kind, data = serialized
    names = elf_defined_symbols(data[0]) if _Loading.kernel and kind == "object" else None
    if names is None:
        return _numba_unserialize_library(self, serialized)
    library = self.create_library(name)
    library.enable_object_caching()
    library._set_compiled_object(data[0])
    library._finalize_final_module()
    self._engine._defined_symbols |= names
    bitcode = data[1]

    def module_for_linking():
        if library._shared_module is None:
            library._shared_module = ll.parse_bitcode(bitcode)
        return library._shared_module

    library._get_module_for_linking = module_for_linking
    return library


#: every module of constrain that defines numba kernels (paths in the package;
#: tests/test_kernel_cache.py checks it against the sources)
KERNEL_MODULES = (
    "automata/bits.py", "automata/deadline.py", "automata/determinize_kernels.py",
    "automata/hash_table.py", "automata/liveness.py", "automata/minimize_kernels.py",
    "automata/table_views.py",
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

    def __getattr__(self, name):
        # what numba reads of a locator beyond its methods (``_py_file``, for the
        # warning of a kernel it cannot cache: without it, that kernel's compile
        # died with an AttributeError instead of running uncached)
        if name == "_inner":
            raise AttributeError(name)
        return getattr(self._inner, name)

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
    lazy = loader and all(hasattr(codegen.CPUCodeLibrary, n) for n in (
        "_get_module_for_linking", "_set_compiled_object", "_finalize_final_module",
        "enable_object_caching")) and hasattr(codegen, "JitEngine")
    if lazy:
        codegen.JITCPUCodegen.unserialize_library = _unserialize_library
    locator = None not in (_IMPL, _LOCATOR, _FILE_MIXIN)
    if locator and _KernelLocator not in _IMPL._locator_classes:
        _IMPL._locator_classes.insert(0, _KernelLocator)
    return loader and locator


def _probe_kernel():  # a function of a kernel module's folder, for ensure_cache_location
    pass


def ensure_cache_location() -> str | None:
    """Where no folder can hold the kernels' cache (a read-only install, a
    read-only home, ``NUMBA_CACHE_DIR`` unset or a file: the usual read-only
    container), numba refuses ``cache=True`` when the kernels are defined, and
    ``import constrain`` died with its ``RuntimeError``. Then the kernels
    compile into a new temporary folder (``NUMBA_CACHE_DIR`` set to it, for
    child processes too), with one warning naming the variable that keeps
    them; the folder, or ``None`` when numba has a place of its own."""
    if _IMPL is None:
        return None
    probe = os.path.join(os.path.dirname(os.path.abspath(__file__)), "automata", "bits.py")
    for cls in _IMPL._locator_classes:
        if cls is _KernelLocator:
            continue
        try:
            found = cls.from_function(_probe_kernel, probe)
        except Exception:  # a locator that cannot tell: the next one
            continue
        if found is not None:
            return None
    import tempfile
    import warnings

    folder = tempfile.mkdtemp(prefix="trellis-numba-")
    config.CACHE_DIR = os.environ["NUMBA_CACHE_DIR"] = folder
    owner = os.getpid()

    def remove() -> None:  # by this process only (a forked child inherits the hook)
        if os.getpid() == owner:
            import shutil

            shutil.rmtree(folder, ignore_errors=True)

    atexit.register(remove)
    warnings.warn(f"no folder can keep Trellis's compiled kernels (the install and the home "
                  f"folder are read-only, NUMBA_CACHE_DIR is unset or not a folder): they "
                  f"compile into {folder} for this process (about 150 s of CPU); set "
                  f"NUMBA_CACHE_DIR to a writable folder to keep them", RuntimeWarning,
                  stacklevel=2)
    return folder


install()
ensure_cache_location()


#: the kernels that reading a vocabulary, compiling a first JSON Schema,
#: filling and advancing its masks and compiling a first regex load, in the
#: order they are needed (modules in the package, dispatcher names)
PRELOAD = (
    ("vocab.trie_kernels", "build_trie"),
    ("automata.determinize_kernels", "ascii_byte_dfa"),
    # a grammar's lexer and parser tables, described for their kernels
    ("automata.table_views", "_describe"),
    ("cfg.terminal_kernels", "write_terminal_table"),
    ("cfg.earley_kernels", "earley_tables"),
    ("vocab.trie_kernels", "subtree_bytes"),
    ("vocab.trie_kernels", "subtree_height"),
    ("vocab.trie_kernels", "utf8_below"),
    ("cfg.lexer_kernels", "expand_start"),
    # a state met unexpanded (a long length bound) or named by a shared walk
    ("cfg.lexer_kernels", "expand_states"),
    ("cfg.lexer_kernels", "settle_reads_utf8"),
    # a lexer state's walk: the narrow one first (a literal's positions), then
    # the general one
    ("cfg.lexer_kernels", "lexer_walk_narrow"),
    ("cfg.lexer_kernels", "lexer_walk_rows"),
    # a walk into a string body's text (TokenTrie.loop_exits): the body's,
    # and an object's keys'
    ("cfg.lexer_kernels", "text_route"),
    ("vocab.trie_kernels", "loop_exits"),
    ("cfg.lexer_kernels", "lexer_walk_exits"),
    ("cfg.earley_kernels", "earley_next"),
    ("cfg.lexer_kernels", "boundary_walk"),
    # a length-bounded string's positions (LexerTables._near_walk): its text's
    # needs, kept per vocabulary (TokenTrie.text_needs), then the exits' walk
    ("cfg.lexer_kernels", "bounded_text"),
    ("vocab.trie_kernels", "text_chars"),
    ("cfg.lexer_kernels", "bounded_needs"),
    ("automata.hash_table", "table_rehash"),
    ("regular.token_kernels", "token_transitions"),
    # a wide vocabulary's grammar rows (o200k's 25 KB) and every regex state's
    ("regular.token_kernels", "row_spans"),
)


def load_cached(kernel) -> int:
    """Load every overload of the numba dispatcher ``kernel`` that numba's disk
    cache holds (fresh: its own and the kernel modules' sources unchanged, this
    CPU) and the process does not have yet; never compiles. Returns how many
    it loaded. What ``Dispatcher.compile`` does on a cache hit, one overload
    per hold of numba's compiler lock."""
    cache = kernel._cache
    cache_file = getattr(cache, "_cache_file", None)
    if cache_file is None:  # numba's NullCache: a kernel without cache=True
        return 0
    loaded = 0
    for sig in dict.fromkeys(key[0] for key in cache_file._load_index()):
        with global_compiler_lock:
            if tuple(sigutils.normalize_signature(sig)[0]) in kernel.overloads:
                continue
            cres = cache.load_overload(sig, kernel.targetctx)
            if cres is None:  # stale, or compiled for another CPU
                continue
            kernel._cache_hits[sig] += 1
            if not cres.objectmode:
                kernel.targetctx.insert_user_function(cres.entry_point, cres.fndesc,
                                                      [cres.library])
            kernel.add_overload(cres)
            loaded += 1
    return loaded


class Preloader:
    """The background load of :data:`PRELOAD` (see the module docstring):
    one thread per process at most, stopped by :meth:`stop`."""

    #: seconds after the start that the loading begins
    DELAY = 0.05

    def __init__(self):
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._held = False  # the compiler lock, taken for a fork
        self.loaded = 0  # overloads loaded so far

    def start(self) -> bool:
        """Start the thread unless it ran already, numba's JIT is off or
        ``TRELLIS_PRELOAD=0``; whether it started."""
        if config.DISABLE_JIT or os.environ.get("TRELLIS_PRELOAD", "1") == "0":
            return False
        with self._lock:
            if self._thread is not None:
                return False
            self._thread = threading.Thread(target=self._run, name="trellis-preload",
                                            daemon=True)
            self._thread.start()
        return True

    def _run(self) -> None:
        from constrain.warmup import kernels_compiled

        # a process that exits right after importing (a CLI's --help, a probe of
        # what is installed) loads nothing, and waits for nothing at exit
        if self._stopping.wait(self.DELAY):
            return
        try:
            if not kernels_compiled():  # they would compile: warm-up's job, not ours
                return
            for module, name in PRELOAD:
                if self._stopping.is_set():
                    return
                kernel = getattr(importlib.import_module(f"constrain.{module}"), name)
                self.loaded += load_cached(kernel)
        except Exception:  # noqa: BLE001  (another numba's internals: kernels load on use)
            return

    def running(self) -> bool:
        """Whether the thread is still loading."""
        thread = self._thread
        return thread is not None and thread.is_alive()

    def join(self, timeout: float | None = None) -> None:
        """Wait for the thread to finish (at once if it never started)."""
        thread = self._thread
        if thread is not None:
            thread.join(timeout)

    def stop(self) -> None:
        """Stop after the kernel being loaded, and wait for it (at exit: a
        daemon thread inside LLVM while the interpreter finalises may crash it)."""
        self._stopping.set()
        self.join()

    def _before_fork(self) -> None:
        if self.running():
            global_compiler_lock.acquire()
            self._held = True

    def _after_fork(self) -> None:
        if self._held:
            self._held = False
            global_compiler_lock.release()


#: this process's :class:`Preloader`, started by ``import constrain``
PRELOADER = Preloader()
atexit.register(PRELOADER.stop)
if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=PRELOADER._before_fork, after_in_parent=PRELOADER._after_fork,
                        after_in_child=PRELOADER._after_fork)
