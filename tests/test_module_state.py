"""Module-level mutable state of ``constrain`` and ``search``, counted by an AST scan.

Issue 22: no module-level mutable state but the cache registry. Every
module-level object made by a mutable constructor (a dict, list or set display
or comprehension, ``dict()``, ``OrderedDict``, a weak dictionary, ``deque``,
``itertools.count``, a ``BoundedCache``, a ``ContextVar``...) and every
``functools.lru_cache``/``cache`` function defined at module level is put in
one of these classes:

* **registered**: a cache handed to ``constrain.cache.registry`` (``x =
  registry.register(...)``, ``@registry.register`` above the memo, or
  ``registry.register(x)`` in the module): owned, bounded, thread-safe,
  emptied by ``constrain.clear_caches()``;
* **lazy constant**: a memo of a function of no arguments (a table computed on
  first use, the same for the whole process);
* **constant**: never changed after the module is loaded (no item assignment or
  deletion, no mutating method such as ``append``/``update``/``setdefault``, no
  ``global`` rebinding): a table written once;
* **mutable**: anything else: module state with no owner.

``ALLOWED`` names the few objects that are mutable by design, each with why;
the test fails on any other mutable one, and on an unregistered memo of
arguments. ``python tests/test_module_state.py`` prints the counts.
"""

from __future__ import annotations

import ast
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("constrain", "search")

#: constructors whose result is a mutable container (by their last dotted name)
MUTABLE_CALLS = frozenset({
    "dict", "list", "set", "bytearray", "OrderedDict", "defaultdict", "Counter", "deque",
    "WeakKeyDictionary", "WeakValueDictionary", "WeakSet", "count", "local", "BoundedCache",
    "Registry", "ContextVar", "SchemaCaches",
})
MUTATING_METHODS = frozenset({
    "append", "extend", "insert", "pop", "popitem", "remove", "clear", "update", "add",
    "discard", "setdefault", "move_to_end", "appendleft", "extendleft", "sort", "reverse",
    "put", "set", "__setitem__",
})
MEMO_DECORATORS = frozenset({"lru_cache", "cache"})

#: mutable by design, or left: ``module:name`` -> why
ALLOWED = {
    "constrain.cache:registry": "the process's registry of caches, the one allowed by issue 22",
    "constrain.vocab.vocabulary:_LIVE":
        "every live vocabulary by fingerprint (weak values, under _LIVE_LOCK), so that an "
        "unpickled vocabulary is the process's own: an identity map, not a cache",
    "constrain.automata.deadline:_READY":
        "the (kernel, call site) pairs known compiled: one entry per call site of the code "
        "(bounded by it), set.add is atomic; numba's own dispatcher state, mirrored",
    "constrain.engines.vllm.sources:_sources":
        "left: the vLLM plugin's constraint source per engine tokenizer (under a lock, one "
        "per engine the process runs); vLLM calls the plugin through module functions",
    "constrain.engines.vllm.sources:_front_end":
        "left: the engine the vLLM front end validates for, rebound per request (vLLM "
        "gives the plugin no object to hold it)",
    "constrain.engines.vllm.logits_processor:_byte_source":
        "left: the 256-byte source of the vLLM front end's validation, made once",
    "constrain.automata.regex_syntax:_cased":
        "two constants of this Python's Unicode database (ASCII or not): a lazy table",
    "constrain.persist:dependency_version":
        "the installed version of a distribution (lark, jsonschema): constant per process",
    "constrain.frontends.json_schema.caches:_IN_USE":
        "a ContextVar: the caches of the compile running in this thread (set and reset "
        "around each compile), not state shared between threads",
    "constrain.frontends.json_schema.diagnostics:_WARNING_BASE":
        "a ContextVar: where the schema sits in the request whose compile is running in "
        "this thread (from_response_format sets and resets it), not state shared between "
        "threads",
    "constrain.regular.regex:_last_target":
        "the bitmask the last checked regex fill wrote into (one tuple, replaced whole, so "
        "threads read a consistent one): a state's first fill into the server's one "
        "bitmask skips the checks; it keeps that one bitmask alive, nothing grows",
    "constrain.frontends.json_schema.caches:_PROCESS":
        "the JSON Schema caches of translations outside a compile; both its caches are "
        "registered with the registry",
}


def _last_name(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def _is_mutable_value(value: ast.AST) -> bool:
    if isinstance(value, (ast.Dict, ast.List, ast.Set, ast.DictComp, ast.ListComp, ast.SetComp)):
        return True
    return isinstance(value, ast.Call) and _last_name(value.func) in MUTABLE_CALLS


def _is_register_call(value: ast.AST) -> bool:
    return (isinstance(value, ast.Call) and _last_name(value.func) == "register"
            and isinstance(value.func, ast.Attribute) and _last_name(value.func.value) == "registry")


def _module_statements(tree: ast.Module):
    """Top-level statements, those inside top-level ``if``/``try``/``with`` included."""
    stack = list(tree.body)
    while stack:
        node = stack.pop(0)
        if isinstance(node, (ast.If, ast.Try, ast.With)):
            for field in ("body", "orelse", "finalbody", "handlers"):
                for child in getattr(node, field, []):
                    stack.extend(child.body if isinstance(child, ast.ExceptHandler) else [child])
        else:
            yield node


def _rebound_globals(tree: ast.Module) -> set[str]:
    """Names a function declares ``global`` (and so may rebind)."""
    return {name for node in ast.walk(tree) if isinstance(node, ast.Global) for name in node.names}


def _mutated_names(tree: ast.Module) -> set[str]:
    """Names changed by a function or class of the module (what module-level
    code does while the module loads is building a table, not state): item
    stores and deletions, mutating methods, augmented assignments."""
    out: set[str] = set()
    bodies = [n for n in _module_statements(tree)
              if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))]
    for node in (n for body in bodies for n in ast.walk(body)):
        if isinstance(node, ast.Subscript) and isinstance(node.ctx, (ast.Store, ast.Del)):
            name = _last_name(node.value)
            if isinstance(node.value, ast.Name) and name:
                out.add(name)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and node.func.attr in MUTATING_METHODS and isinstance(node.func.value, ast.Name):
            out.add(node.func.value.id)
        elif isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name):
            out.add(node.target.id)
    return out


def scan_source(source: str, module: str) -> list[tuple[str, str, str]]:
    """``(module:name, class, line)`` for every module-level mutable object and
    memo of ``source`` (classes: see the module docstring)."""
    tree = ast.parse(source)
    mutated = _mutated_names(tree)
    rebound = _rebound_globals(tree)
    registered = set()
    for node in ast.walk(tree):
        if _is_register_call(node):
            registered.update(a.id for a in node.args if isinstance(a, ast.Name))
            registered.update(a.attr for a in node.args if isinstance(a, ast.Attribute))
    out = []
    for node in _module_statements(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            decorators = [_last_name(d.func if isinstance(d, ast.Call) else d)
                          for d in node.decorator_list]
            if not MEMO_DECORATORS.intersection(decorators):
                continue
            args = node.args
            calls = {_last_name(c.func) for c in ast.walk(node) if isinstance(c, ast.Call)}
            if "register" in decorators or node.name in registered:
                kind = "registered"
            elif f"{module}:{node.name}" in ALLOWED:
                kind = "allowed"
            elif args.args or args.posonlyargs or args.kwonlyargs or args.vararg or args.kwarg:
                kind = "unregistered memo"
            elif "register" in calls:
                kind = "registered"  # a cache made and registered on first use
            elif "BoundedCache" in calls:
                kind = "owned cache"  # made on first use, bounded, not registered
            else:
                kind = "lazy constant"
            out.append((f"{module}:{node.name}", kind, node.lineno))
            continue
        if isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            targets, value = [node.target], node.value
        else:
            continue
        names = [t.id for t in targets if isinstance(t, ast.Name)]
        if _is_register_call(value):
            out.extend((f"{module}:{n}", "registered", node.lineno) for n in names)
            continue
        names = [n for n in names if n in rebound or _is_mutable_value(value)]
        for n in names:
            key = f"{module}:{n}"
            if n in registered:
                kind = "registered"
            elif key in ALLOWED:
                kind = "allowed"
            elif n in mutated or n in rebound or _last_name(getattr(value, "func", None)) in \
                    MUTABLE_CALLS - {"dict", "list", "set"}:
                kind = "mutable"
            else:
                kind = "constant"
            out.append((key, kind, node.lineno))
    return out


def scan() -> list[tuple[str, str, int]]:
    """:func:`scan_source` over every module of :data:`PACKAGES`."""
    out = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            rel = path.relative_to(ROOT).with_suffix("")
            module = ".".join(rel.parts[:-1] if rel.name == "__init__" else rel.parts)
            out.extend(scan_source(path.read_text(encoding="utf-8"), module))
    return out


def test_no_module_state_without_an_owner():
    found = scan()
    bad = [f"{name} (line {line}): {kind}" for name, kind, line in found
           if kind in ("mutable", "unregistered memo")]
    assert bad == [], "module-level mutable state with no owner:\n" + "\n".join(bad)
    kinds = Counter(kind for _, kind, _ in found)
    assert kinds["registered"] >= 10 and kinds["allowed"] == len(ALLOWED)


def test_the_scan_can_fail():
    source = """
import functools
from constrain.cache import BoundedCache, registry
TABLE = {"a": 1}
_SEEN = {}
_HELD = []
_LIVE = BoundedCache("x", 10)
_OWNED = registry.register(BoundedCache("y", 10))
@functools.lru_cache(maxsize=4)
def memo(x):
    return x
@registry.register
@functools.lru_cache(maxsize=4)
def owned(x):
    return x
@functools.lru_cache(maxsize=1)
def table():
    return 1
@functools.lru_cache(maxsize=1)
def lazy_cache():
    return registry.register(BoundedCache("z", 10))
TABLE.update(b=2)
_CURRENT = None
def f(k):
    global _CURRENT
    _SEEN[k] = 1
    _HELD.append(k)
    _CURRENT = k
"""
    got = {name.split(":")[1]: kind for name, kind, _ in scan_source(source, "m")}
    assert got == {"TABLE": "constant", "_SEEN": "mutable", "_HELD": "mutable",
                   "_LIVE": "mutable", "_OWNED": "registered", "memo": "unregistered memo",
                   "owned": "registered", "table": "lazy constant", "lazy_cache": "registered",
                   "_CURRENT": "mutable"}


if __name__ == "__main__":
    found = scan()
    for name, kind, line in sorted(found, key=lambda x: (x[1], x[0])):
        if kind != "constant" or "-v" in sys.argv:
            print(f"{kind:18} {name} (line {line})")
    print(dict(Counter(kind for _, kind, _ in found)))
