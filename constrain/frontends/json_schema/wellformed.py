"""Keyword values of the wrong JSON type, found before anything is compiled.

A malformed keyword (``"enum": "abc"``, ``"required": "a"``, ``"minimum": true``,
``"type": 5``) would otherwise be skipped by the pass that reads it, so that the
schema's author believes a constraint holds that is not enforced. The checks
follow the meta-schemas of drafts 4 to 2020-12 (where drafts differ, what any of
them allows passes: ``exclusiveMinimum`` is a boolean in draft 4, ``items`` an
array before 2020-12), and walk every subschema with an explicit stack."""

from __future__ import annotations

import math

from constrain.errors import SchemaError, SchemaTooComplexError
from constrain.frontends.json_schema.dialect import boolean_exclusive_bounds
from constrain.frontends.json_schema.keywords import TYPES

_SCHEMA = "a schema (an object or a boolean)"


def _is_number(v) -> bool:
    # an int is finite however large (math.isfinite would convert it to a float)
    return ((isinstance(v, int) and not isinstance(v, bool))
            or (isinstance(v, float) and math.isfinite(v)))


def _is_count(v) -> bool:
    return _is_number(v) and v >= 0 and (isinstance(v, int) or v.is_integer())


def _is_schema(v) -> bool:
    return isinstance(v, (dict, bool))


def _is_type(v) -> bool:
    if isinstance(v, str):
        return v in TYPES or v == "any"
    return (isinstance(v, list) and bool(v) and all(isinstance(t, str) and (t in TYPES or t == "any")
                                                  for t in v))


def _is_string_list(v) -> bool:
    return isinstance(v, list) and all(isinstance(x, str) for x in v)


_NUMBER = (_is_number, "a number")
_EXCLUSIVE = ("a number (true and false are draft 4's form, read as such under "
              "\"$schema\": \"http://json-schema.org/draft-04/schema#\")")
_COUNT = (_is_count, "a non-negative integer")
#: keyword -> (check, what it must be)
_CHECKS = {
    "type": (_is_type, "a type name (null, boolean, integer, number, string, array, object) "
                       "or a non-empty array of them"),
    "enum": (lambda v: isinstance(v, list), "an array"),
    "required": (lambda v: _is_string_list(v) or isinstance(v, bool), "an array of strings"),
    "minimum": _NUMBER, "maximum": _NUMBER,
    "exclusiveMinimum": (_is_number, _EXCLUSIVE), "exclusiveMaximum": (_is_number, _EXCLUSIVE),
    "multipleOf": (lambda v: _is_number(v) and v > 0, "a number above 0"),
    "minLength": _COUNT, "maxLength": _COUNT, "minItems": _COUNT, "maxItems": _COUNT,
    "minProperties": _COUNT, "maxProperties": _COUNT, "minContains": _COUNT, "maxContains": _COUNT,
    "pattern": (lambda v: isinstance(v, str), "a string (a regular expression)"),
    "format": (lambda v: isinstance(v, str), "a string"),
    "uniqueItems": (lambda v: isinstance(v, bool), "a boolean"),
    "$ref": (lambda v: isinstance(v, str), "a string (a URI reference)"),
    "$dynamicRef": (lambda v: isinstance(v, str), "a string (a URI reference)"),
    "dependentRequired": (lambda v: isinstance(v, dict) and all(_is_string_list(x) for x in v.values()),
                          "an object of arrays of strings"),
}
#: keywords whose value is one subschema
_ONE = ("not", "if", "then", "else", "contains", "propertyNames", "additionalProperties",
        "unevaluatedProperties", "unevaluatedItems", "additionalItems")
#: keywords whose value is a non-empty array of subschemas
_LIST = ("allOf", "anyOf", "oneOf", "prefixItems")
#: keywords whose value is an object of subschemas
_MAP = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")


_ONE_KIND, _LIST_KIND, _MAP_KIND, _ITEMS_KIND, _DEPS_KIND = 1, 2, 3, 4, 5
#: keyword -> how its value holds subschemas
_KIND = {**{k: _ONE_KIND for k in _ONE}, **{k: _LIST_KIND for k in _LIST},
         **{k: _MAP_KIND for k in _MAP}, "items": _ITEMS_KIND, "dependencies": _DEPS_KIND}


#: drafts 3 and 4: the exclusive bounds are booleans that modify minimum and
#: maximum (see :func:`.dialect.boolean_exclusive_bounds`); a number there is
#: no such flag, and jsonschema reads it by its truth (``exclusiveMaximum: 5``
#: makes ``maximum`` exclusive, ``0`` does not, and neither bounds alone), a
#: reading no author means: refused, as a boolean is under later drafts
_BOOLEAN_EXCLUSIVE = (lambda v: isinstance(v, bool),
                      "a boolean in draft 4 (a number is the form of drafts 6 on: "
                      "declare one of them in $schema, or write minimum/maximum with "
                      "exclusiveMinimum/exclusiveMaximum: true)")


#: subschemas nested deeper than this are refused (SchemaTooComplexError): the
#: translation recurses through them, and 200 levels overflowed Python's stack
#: (a raw RecursionError, which an untrusted schema must not cause)
MAX_SCHEMA_DEPTH = 96


#: a schema spelled out as JSON text holding more values than this is refused
#: (SchemaTooComplexError): every pass over the document reads it so spelled
#: out, and a Python dict held in several places (``{"anyOf": [d, d]}``, 30
#: levels) spells out to billions (MaskBench's largest: 28,520)
MAX_SCHEMA_VALUES = 1_000_000


def subschemas(node: dict):
    """The values directly inside the schema object ``node`` that are
    subschemas, by the keywords that hold them (:data:`_KIND`): a member
    *named* ``properties`` or ``enum`` is a name, ``default`` and ``examples``
    are data."""
    for key, value in node.items():
        kind = _KIND.get(key)
        if kind is None:
            continue
        if kind in (_MAP_KIND, _DEPS_KIND):
            if isinstance(value, dict):
                yield from value.values()  # (a dependency's string array is no dict)
        elif isinstance(value, list):  # _LIST_KIND, items as an array
            yield from value
        else:
            yield value


def check_json_value(root, prefix: str = "") -> None:
    """Raise :class:`SchemaError` at the JSON pointer of the first part of
    ``root`` (a schema given as a Python object) that is no JSON value: a key
    that is not a string, a value that is not a ``dict``, ``list`` (or
    ``tuple``), ``str``, ``int``, ``float``, ``bool`` or ``None``, a float
    that is not finite, or a container inside itself; and
    :class:`SchemaTooComplexError` when, spelled out as JSON text, it holds more
    than :data:`MAX_SCHEMA_VALUES` values. Linear in the containers: one
    held in several places is walked once (its size counts once per place)."""
    if not isinstance(root, (dict, list, tuple)):
        _check_scalar(root, prefix)
        return
    if _plain_tree(root):
        return
    sizes: dict[int, int] = {}  # id of a container walked -> its values spelled out
    # per open container: [container, its (token, child) iterator, size so far, token]
    frames: list = []
    frames.append([root, _items(root, prefix, frames), 1, None])
    open_ids = {id(root)}
    while frames:
        frame = frames[-1]
        for tok, child in frame[1]:
            if isinstance(child, (dict, list, tuple)):
                size = sizes.get(id(child))
                if size is not None:
                    frame[2] += size
                    continue
                if id(child) in open_ids:
                    raise SchemaError("a container holds itself (a Python object, no JSON value)",
                                      _frame_pointer(prefix, frames, tok))
                open_ids.add(id(child))
                frames.append([child, _items(child, prefix, frames), 1, tok])
                break
            _check_scalar(child, prefix, frames, tok)
            frame[2] += 1
        else:
            frames.pop()
            open_ids.discard(id(frame[0]))
            sizes[id(frame[0])] = frame[2]
            if frame[2] > MAX_SCHEMA_VALUES:
                raise SchemaTooComplexError(
                    f"the schema spelled out as JSON holds more than {MAX_SCHEMA_VALUES:,} values "
                    f"(a Python object held in several places counts in each)",
                    _frame_pointer(prefix, frames, frame[3]) if frames else prefix)
            if frames:
                frames[-1][2] += frame[2]


_PLAIN = frozenset({str, int, bool, type(None)})


def _plain_tree(root) -> bool:
    """Whether ``root`` is plainly JSON data (what ``json.loads`` makes): a tree
    with no container held twice, string keys, finite floats and no other
    types, and at most :data:`MAX_SCHEMA_VALUES` values. The common case, told
    in one tight pass (2-3x faster than :func:`check_json_value`'s pointer
    keeping walk, which finds what is wrong when this says no)."""
    seen = {id(root)}
    stack = [root]
    n = 0
    plain = _PLAIN
    while stack:
        node = stack.pop()
        kids = node.values() if type(node) is dict else node
        if type(node) is dict and any(type(k) is not str for k in node):
            return False
        n += len(kids)
        for v in kids:
            t = type(v)
            if t in plain:
                continue
            if t is dict or t is list or t is tuple:
                if id(v) in seen:
                    return False
                seen.add(id(v))
                stack.append(v)
            elif t is not float or not math.isfinite(v):
                return False
    return n < MAX_SCHEMA_VALUES


def _items(container, prefix: str, frames):
    """``(token, child)`` of a container, the innermost of ``frames`` while
    it is read; a key that is not a string raises."""
    if isinstance(container, dict):
        for k, v in container.items():
            if not isinstance(k, str):
                raise SchemaError(f"an object key must be a string, not {_show(k)}",
                                  _frame_pointer(prefix, frames, None))
            yield k, v
    else:
        yield from zip(map(str, range(len(container))), container)


def _check_scalar(value, prefix: str, frames=(), tok=None) -> None:
    if value is None or isinstance(value, (str, bool, int)):
        return
    where = _frame_pointer(prefix, frames, tok) if tok is not None else prefix
    if isinstance(value, float):
        if not math.isfinite(value):
            raise SchemaError(f"{value!r} is no JSON number", where)
        return
    name = type(value).__name__
    raise SchemaError(f"{'an' if name[0] in 'aeiou' else 'a'} {name} is no JSON value (a schema "
                      f"given as a Python object holds dicts, lists, strings, numbers, booleans "
                      f"and None)", where)


def _frame_pointer(prefix: str, frames, tok) -> str:
    """The pointer of ``tok`` inside the innermost open container."""
    toks = [f[3] for f in frames[1:]] + ([tok] if tok is not None else [])
    return prefix + "".join("/" + _escape(t) for t in toks)


def check_schema(root, prefix: str = "", draft: int = 2020, strip=frozenset(),
                 note=frozenset()) -> list:
    """Raise :class:`SchemaError` at the JSON pointer of the first keyword whose
    value has the wrong JSON type, in ``root`` or any of its subschemas, under
    ``draft`` (see :mod:`.dialect`: ``exclusiveMaximum: true`` is draft 4's
    form; under 2020-12 jsonschema compares with ``True == 1``, which
    read as draft 4 let through every value in ``[1, maximum)``), and
    :class:`SchemaTooComplexError` past :data:`MAX_SCHEMA_DEPTH` levels of
    subschemas. Keywords in ``strip`` (those the draft lacks) are neither
    checked nor entered: returns the schemas (dicts) that hold one, for
    :func:`without_keywords`, or one of ``note`` (checked and entered as any
    other).

    A Python schema may hold one dict in several places (a DAG, which JSON
    text cannot spell): each is checked once, and entered again only where it
    is reached deeper than before (for the depth bound), so the walk is
    linear in the dicts, not in the paths through them (30 levels of
    ``{"anyOf": [d, d]}`` ran out of memory)."""
    checks = _CHECKS
    if boolean_exclusive_bounds(draft):
        checks = {**_CHECKS, "exclusiveMinimum": _BOOLEAN_EXCLUSIVE,
                  "exclusiveMaximum": _BOOLEAN_EXCLUSIVE}
    # (node, index of its parent entry, its key): pointers are spelled only for
    # an error (spelling one per node was ~40% of this pass); depth per entry
    seen = [(root, -1, prefix)]
    depth = [0]
    holders: list = []
    marks = strip | note
    # id of each dict entered -> the depth it was entered at
    entered: dict[int, int] = {}
    i = 0
    while i < len(seen):
        node = seen[i][0]
        if depth[i] > MAX_SCHEMA_DEPTH:
            raise SchemaTooComplexError(
                f"subschemas nest more than {MAX_SCHEMA_DEPTH} deep", _pointer(seen, i, ()))
        if isinstance(node, dict):
            at = entered.get(id(node))
            if at is not None and at >= depth[i]:
                i += 1
                continue
            entered[id(node)] = depth[i]
            if at is None and marks and not marks.isdisjoint(node):
                holders.append(node)
            for key, value in node.items():
                if key in strip:
                    continue
                check = checks.get(key)
                if check is not None and not check[0](value):
                    raise SchemaError(f"{key} must be {check[1]}, not {_show(value)}",
                                      _pointer(seen, i, key))
                kind = _KIND.get(key)
                if kind is None:
                    continue
                if kind == _ONE_KIND:
                    if not _is_schema(value):
                        raise SchemaError(f"{key} must be {_SCHEMA}, not {_show(value)}",
                                          _pointer(seen, i, key))
                    seen.append((value, i, key))
                elif kind == _LIST_KIND:
                    if not (isinstance(value, list) and value and all(map(_is_schema, value))):
                        raise SchemaError(f"{key} must be a non-empty array of schemas, "
                                          f"not {_show(value)}", _pointer(seen, i, key))
                    seen.extend((v, i, (key, str(n))) for n, v in enumerate(value))
                elif kind == _MAP_KIND:
                    if not (isinstance(value, dict) and all(map(_is_schema, value.values()))):
                        raise SchemaError(f"{key} must be an object of schemas, not {_show(value)}",
                                          _pointer(seen, i, key))
                    seen.extend((v, i, (key, k)) for k, v in value.items())
                elif kind == _ITEMS_KIND:
                    if isinstance(value, list):
                        if not all(map(_is_schema, value)):
                            raise SchemaError(f"items must be {_SCHEMA} or an array of schemas",
                                              _pointer(seen, i, key))
                        seen.extend((v, i, (key, str(n))) for n, v in enumerate(value))
                    elif _is_schema(value):
                        seen.append((value, i, key))
                    else:
                        raise SchemaError(f"items must be {_SCHEMA}, not {_show(value)}",
                                          _pointer(seen, i, key))
                else:
                    if not isinstance(value, dict):
                        raise SchemaError(f"dependencies must be an object, not {_show(value)}",
                                          _pointer(seen, i, key))
                    for k, v in value.items():
                        if _is_schema(v):
                            seen.append((v, i, (key, k)))
                        elif not _is_string_list(v):
                            raise SchemaError("a dependency must be a schema or an array of strings",
                                              _pointer(seen, i, (key, k)))
        depth.extend([depth[i] + 1] * (len(seen) - len(depth)))
        i += 1
    return holders


def without_keywords(root, holders: list, names) -> dict:
    """``root`` with the keywords ``names`` removed from the schemas
    ``holders`` (dicts, from :func:`check_schema`) wherever they are held: the
    schemas and containers above one are copied, the rest shared (a dict held
    in several places stays one copy); the user's document is not changed."""
    strip = {id(h) for h in holders}
    done: dict[int, object] = {}

    def schema(node):
        # children before parents, each dict once: check_schema has bounded
        # the depth (so no cycle reaches here) and this recursion
        if not isinstance(node, dict):
            return node
        hit = done.get(id(node))
        if hit is not None:
            return hit
        new = None
        for key, value in node.items():
            kind = _KIND.get(key)
            if kind is None or key in names:
                continue
            if kind == _ONE_KIND:
                out = schema(value)
            elif kind == _MAP_KIND:
                out = _rebuilt_map(value, schema, lambda v: True)
            elif kind == _DEPS_KIND:
                out = _rebuilt_map(value, schema, _is_schema)
            elif isinstance(value, list):  # _LIST_KIND, items as an array
                items = [schema(v) for v in value]
                out = value if all(a is b for a, b in zip(items, value)) else items
            else:
                out = schema(value)
            if out is not value:
                if new is None:
                    new = dict(node)
                new[key] = out
        if id(node) in strip:
            if new is None:
                new = dict(node)
            for name in names:
                new.pop(name, None)
        done[id(node)] = out = node if new is None else new
        return out

    return schema(root)


def _rebuilt_map(value: dict, schema, is_schema) -> dict:
    """``value`` (an object of subschemas, or of dependencies) with ``schema``
    applied to the values that ``is_schema``; itself when none changed."""
    out = {k: schema(v) if is_schema(v) else v for k, v in value.items()}
    return value if all(out[k] is v for k, v in value.items()) else out


def _pointer(seen, i: int, key) -> str:
    """The pointer of ``key`` (a token, a pair of them, or ``()`` for the
    entry itself) under entry ``i``."""
    toks = list(key) if isinstance(key, tuple) else [key]
    while seen[i][1] >= 0:
        _, parent, k = seen[i]
        toks[:0] = list(k) if isinstance(k, tuple) else [k]
        i = parent
    return seen[i][2] + "".join("/" + _escape(t) for t in toks)


def _escape(tok: str) -> str:
    return tok.replace("~", "~0").replace("/", "~1")


def _show(value) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."
