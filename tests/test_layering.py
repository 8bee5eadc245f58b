"""The one-way layering: ``search/`` uses only the public names of ``constrain``.

An AST scan of every module under ``search/`` (no module is imported or run). It
reports:

1. **private constrain imports**: ``import constrain.x._y``, ``from constrain._x
   import y``, ``from constrain.x import _y`` — a leading underscore in any part of
   the dotted module path or in an imported name (``constrain`` itself, its
   top-level names, ``constrain.protocol`` and every non-underscore module and
   name are public);
2. **private constrain paths in strings**: a string constant spelling a
   ``constrain.`` dotted path with such a part (lazy imports through
   ``importlib.import_module``);
3. **private attributes of other modules' objects**: ``obj._name`` (read or
   written; not a dunder) where ``obj`` is not ``self``/``cls`` and the scanned
   module does not itself define ``_name`` (as ``self._name = ...``, a function,
   class or class attribute, or a module global); the same for
   ``getattr``/``setattr``/``hasattr``/``delattr`` with a constant ``"_name"``.
   Static analysis cannot tell a constrain object from any other, so this
   heuristic flags every private access across modules: a private name is
   knowledge of the module that defines it. The namedtuple API
   (``_replace``, ``_asdict``, ``_fields``, ``_make``) is public despite its
   underscore.

The last test runs the scanner on synthetic sources with one violation of each
kind (and on allowed code), so the check can fail.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

SEARCH = Path(__file__).resolve().parent.parent / "search"
NAMEDTUPLE_API = frozenset({"_replace", "_asdict", "_fields", "_make", "_field_defaults"})
_CONSTRAIN_PATH = re.compile(r"constrain(\.[A-Za-z_][A-Za-z0-9_]*)+")


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _defined_privates(tree: ast.AST) -> set[str]:
    """The private names the module itself defines: functions, classes, globals,
    class attributes and ``self._x`` / ``cls._x`` assignments."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)  # globals, locals and class attributes alike
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store) \
                and isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
            names.add(node.attr)
        elif isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__slots__"
                                                  for t in node.targets):
            names.update(c.value for c in ast.walk(node.value)
                         if isinstance(c, ast.Constant) and isinstance(c.value, str))
    return {n for n in names if _private(n)}


def _private_constrain_path(dotted: str) -> bool:
    parts = dotted.split(".")
    return parts[0] == "constrain" and any(_private(p) for p in parts[1:])


def violations(source: str, filename: str = "<snippet>") -> list[str]:
    """Every layering violation in ``source`` (see the module docstring), as
    ``"file:line: what"`` strings."""
    tree = ast.parse(source, filename)
    local = _defined_privates(tree)
    out: list[str] = []

    def report(node, what):
        out.append(f"{filename}:{node.lineno}: {what}")

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if _private_constrain_path(alias.name):
                    report(node, f"imports the private module {alias.name}")
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module \
                and node.module.split(".")[0] == "constrain":
            if _private_constrain_path(node.module):
                report(node, f"imports from the private module {node.module}")
            for alias in node.names:
                if _private(alias.name):
                    report(node, f"imports the private name {node.module}.{alias.name}")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            if _CONSTRAIN_PATH.fullmatch(node.value) and _private_constrain_path(node.value):
                report(node, f"names the private path {node.value!r}")
        elif isinstance(node, ast.Attribute) and _private(node.attr) and node.attr not in NAMEDTUPLE_API:
            owner = node.value
            if isinstance(owner, ast.Name) and owner.id in ("self", "cls"):
                continue
            if node.attr not in local:
                report(node, f"uses the private attribute .{node.attr} of another module's object")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                and node.func.id in ("getattr", "setattr", "hasattr", "delattr") and len(node.args) >= 2:
            key = node.args[1]
            if isinstance(key, ast.Constant) and isinstance(key.value, str) and _private(key.value) \
                    and key.value not in local and key.value not in NAMEDTUPLE_API:
                report(node, f"{node.func.id}() of the private attribute {key.value!r}")
    return out


def _modules() -> list[Path]:
    return sorted(p for p in SEARCH.rglob("*.py") if "__pycache__" not in p.parts)


def test_search_uses_only_public_constrain_names():
    files = _modules()
    assert len(files) > 20  # the scan sees the package
    found = [v for p in files for v in violations(p.read_text(encoding="utf-8"), str(p.relative_to(SEARCH.parent)))]
    assert not found, "\n".join(found)


@pytest.mark.parametrize("snippet, what", [
    ("import constrain.regular._kernels\n", "private module constrain.regular._kernels"),
    ("from constrain._internal import thing\n", "private module constrain._internal"),
    ("from constrain.regular.token_automaton import _aligned_rows\n", "private name"),
    ("from constrain import _LAZY\n", "private name constrain._LAZY"),
    ("import importlib\nimportlib.import_module('constrain.cfg._tables')\n", "private path"),
    ("def f(grammar):\n    return grammar.tokens._indptr\n", "private attribute ._indptr"),
    ("def f(model):\n    model._kv_size = 64\n", "private attribute ._kv_size"),
    ("def f(sampler):\n    return sampler._answer_line()\n", "private attribute ._answer_line"),
    ("def f(ta):\n    return getattr(ta, '_toks')\n", "getattr() of the private attribute '_toks'"),
])
def test_the_scan_finds_each_kind_of_violation(snippet, what):
    found = violations(snippet)
    assert len(found) == 1 and what in found[0], found


def test_the_scan_allows_public_names_and_module_local_privates():
    ok = '''
import constrain
from constrain import DFAConstraint, compile_regex
from constrain.analysis import can_complete
import constrain.protocol
from search.lm.protocol import as_lm

_CACHE = {}


class Walker:
    __slots__ = ("_seen",)

    def __init__(self, other):
        self._state = 0
        self._seen = set()
        other._state = self._state          # another Walker: this module defines _state

    def _step(self):
        return self._state


def f(w, row):
    w._step()
    _CACHE.clear()
    return row._replace(token=1), getattr(w, "_seen"), "constrain.analysis"
'''
    assert violations(ok) == []
