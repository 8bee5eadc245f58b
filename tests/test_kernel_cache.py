"""numba's on-disk cache of Trellis's kernels follows edits of the kernels they
call in other modules (``constrain.kernel_loading``).

numba compiles the kernels a kernel calls into its machine code, but checks a
cache entry against the caller's own source file only: with its own locator,
an edited callee in another module leaves its callers' cached code stale (in
the package below, ``g`` kept returning 10 after ``f`` changed to return 2).
Trellis's locator checks every kernel against the sources of all its kernel
modules."""

from __future__ import annotations

import ast
import importlib
import re
import subprocess
import sys
from pathlib import Path

from numba.core.registry import CPUDispatcher

from constrain import kernel_loading

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "constrain"

#: a kernel and the kernel it calls, in two modules of a package of their own
_CALLEE = "from numba import njit\n\n\n@njit(cache=True)\ndef f():\n    return {}\n"
_CALLER = ("from numba import njit\n\nfrom tpkg.a import f\n\n\n@njit(cache=True)\n"
           "def g():\n    return 10 * f()\n")
#: Trellis's locator for that package: run g, print its value and cache hits
_RUN = r"""
import sys
from constrain import kernel_loading

class Locator(kernel_loading._KernelLocator):
    package = "tpkg."

    @classmethod
    def sources_stamp(cls):
        return kernel_loading.sources_stamp(sys.argv[1] + "/tpkg", ("a.py", "b.py"))

kernel_loading._IMPL._locator_classes.insert(0, Locator)
sys.path.insert(0, sys.argv[1])
from tpkg.b import g
print(g(), sum(g.stats.cache_hits.values()))
"""


def test_kernel_modules_lists_every_module_with_kernels():
    """KERNEL_MODULES is every module with a numba decorator, and those import
    from constrain only each other: what numba compiles into a kernel (callees,
    global constants) lies in the files its stamp covers."""
    decorated = re.compile(r"^\s*@(numba\.)?n?jit\b", re.M)
    found = {p.relative_to(PACKAGE).as_posix() for p in PACKAGE.rglob("*.py")
             if decorated.search(p.read_text(encoding="utf-8"))}
    assert sorted(found) == sorted(kernel_loading.KERNEL_MODULES)
    for m in found:
        for node in ast.walk(ast.parse((PACKAGE / m).read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("constrain."):
                path = node.module[len("constrain."):].replace(".", "/") + ".py"
                assert path in found, (m, node.module)


def test_every_cached_kernel_is_checked_against_all_kernel_sources():
    kernels = []
    for m in kernel_loading.KERNEL_MODULES:
        module = importlib.import_module("constrain." + m[:-3].replace("/", "."))
        kernels += [v for v in vars(module).values()
                    if isinstance(v, CPUDispatcher) and v.__module__ == module.__name__]
    assert len(kernels) > 40
    for k in kernels:
        locator = k._cache._impl.locator
        assert type(locator) is kernel_loading._KernelLocator, k
        assert locator.get_source_stamp()[1] == kernel_loading.kernel_sources_stamp()


def test_an_edited_callee_in_another_module_recompiles_its_callers(tmp_path):
    pkg = tmp_path / "tpkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text(_CALLEE.format(1))
    (pkg / "b.py").write_text(_CALLER)

    def run():
        out = subprocess.run([sys.executable, "-c", _RUN, str(tmp_path)], cwd=ROOT,
                             capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stderr[-3000:]
        value, hits = out.stdout.split()
        return int(value), int(hits)

    assert run() == (10, 0)  # compiled, cached
    assert run() == (10, 1)  # loaded from the cache
    (pkg / "a.py").write_text(_CALLEE.format(2))
    assert run() == (20, 0)  # numba's own locator: (10, 1), the stale code
    assert run() == (20, 1)


def test_no_writable_cache_location_compiles_into_a_temporary_folder(monkeypatch):
    """numba refuses cache=True when no folder can hold the cache (a read-only
    install and home: the usual read-only container), and `import constrain`
    died with its RuntimeError."""
    import os
    import warnings

    from numba.core import config

    class NoLocators:
        _locator_classes = []

    monkeypatch.setattr(kernel_loading, "_IMPL", NoLocators)
    monkeypatch.setattr(config, "CACHE_DIR", config.CACHE_DIR)
    monkeypatch.setenv("NUMBA_CACHE_DIR", "unchanged")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        folder = kernel_loading.ensure_cache_location()
    assert folder and os.path.isdir(folder) and config.CACHE_DIR == folder
    assert os.environ["NUMBA_CACHE_DIR"] == folder
    assert any("NUMBA_CACHE_DIR" in str(w.message) for w in caught)
    os.rmdir(folder)
    monkeypatch.undo()
    assert kernel_loading.ensure_cache_location() is None  # this machine has a place


def test_a_kernel_numba_cannot_cache_warns_instead_of_failing():
    """numba warns, naming the kernel's file, when a compile result cannot be
    cached (lifted loops, dynamic globals) and runs it uncached; it reads the
    file from the locator, which Trellis's wrapped without passing it on, so
    such a compile died with an AttributeError (seen with NUMBA_OPT=0)."""
    import types
    import warnings

    from numba.core.errors import NumbaWarning

    from constrain.cfg import lexer_kernels

    impl = lexer_kernels.boundary_walk._cache._impl
    assert type(impl.locator) is kernel_loading._KernelLocator
    assert impl.locator._py_file == lexer_kernels.__file__
    cres = types.SimpleNamespace(lifted=[types.SimpleNamespace(can_cache=False)],
                                 fndesc=types.SimpleNamespace(qualname="boundary_walk"))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert impl.check_cachable(cres) is False
    assert any(issubclass(w.category, NumbaWarning) and "boundary_walk" in str(w.message)
               for w in caught)
