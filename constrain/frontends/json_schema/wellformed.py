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


def check_schema(root, prefix: str = "", draft: int = 2020, strip=frozenset(),
                 note=frozenset()) -> list:
    """Raise :class:`SchemaError` at the JSON pointer of the first keyword whose
    value has the wrong JSON type, in ``root`` or any of its subschemas, under
    ``draft`` (see :mod:`.dialect`: ``exclusiveMaximum: true`` is draft 4's
    form; under 2020-12 jsonschema compares with ``True == 1``, which
    read as draft 4 let through every value in ``[1, maximum)``), and
    :class:`SchemaTooComplexError` past :data:`MAX_SCHEMA_DEPTH` levels of
    subschemas. Keywords in ``strip`` (those the draft lacks) are neither
    checked nor entered: returns the paths (lists of tokens) of the schemas
    that hold one, for :func:`without_keywords`, or one of ``note`` (checked
    and entered as any other)."""
    checks = _CHECKS
    if boolean_exclusive_bounds(draft):
        checks = {**_CHECKS, "exclusiveMinimum": _BOOLEAN_EXCLUSIVE,
                  "exclusiveMaximum": _BOOLEAN_EXCLUSIVE}
    # (node, index of its parent entry, its key): pointers are spelled only for
    # an error (spelling one per node was ~40% of this pass); depth per entry
    seen = [(root, -1, prefix)]
    depth = [0]
    holders: list[int] = []
    marks = strip | note
    i = 0
    while i < len(seen):
        node = seen[i][0]
        if depth[i] > MAX_SCHEMA_DEPTH:
            raise SchemaTooComplexError(
                f"subschemas nest more than {MAX_SCHEMA_DEPTH} deep", _pointer(seen, i, ()))
        if isinstance(node, dict):
            if marks and not marks.isdisjoint(node):
                holders.append(i)
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
    return [_tokens(seen, j) for j in holders]


def _tokens(seen, i: int) -> list:
    """The path (tokens) of entry ``i`` of ``seen`` below the root."""
    toks: list = []
    while seen[i][1] >= 0:
        _, parent, k = seen[i]
        toks[:0] = list(k) if isinstance(k, tuple) else [k]
        i = parent
    return toks


def without_keywords(root, paths: list, names) -> dict:
    """``root`` with the keywords ``names`` removed from the schemas at
    ``paths`` (from :func:`check_schema`): the containers on the way are
    copied, the rest shared; the user's document is not changed."""
    copied: set[int] = set()

    def own(container):
        if id(container) in copied:
            return container
        new = dict(container) if isinstance(container, dict) else list(container)
        copied.add(id(new))
        return new

    root = own(root)
    for path in paths:
        cur = root
        for tok in path:
            key = int(tok) if isinstance(cur, list) else tok
            child = own(cur[key])
            cur[key] = child
            cur = child
        for name in names:
            cur.pop(name, None)
    return root


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
