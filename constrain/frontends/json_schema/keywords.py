"""JSON Schema's keywords as the translator sorts them (asserted, refused,
annotations), and what a node or a conjunction of nodes says about types,
lengths and equality, read off the keywords without building any grammar."""

from __future__ import annotations

import math

TYPES = ("null", "boolean", "integer", "number", "string", "array", "object")
STRING_KEYWORDS = frozenset({"maxLength", "minLength", "pattern", "format"})
#: validation keywords no per-type emitter enforces (``if``/``then``/``else`` and
#: ``not`` are expanded by normalisation)
REFUSED = frozenset({"$recursiveRef"})

#: the keywords jsonschema asserts, besides type/enum/const (every draft; it
#: ignores the others, and format without a format checker, as in
#: Document.validator)
OTHER_ASSERTIONS = frozenset({
    "multipleOf", "maximum", "exclusiveMaximum", "minimum", "exclusiveMinimum", "maxLength",
    "minLength", "pattern", "maxItems", "minItems", "uniqueItems", "maxContains",
    "minContains", "maxProperties", "minProperties", "required", "dependentRequired",
    "dependencies", "allOf", "anyOf", "oneOf", "not", "if", "then", "else",
    "dependentSchemas", "prefixItems", "items", "additionalItems", "contains", "properties",
    "patternProperties", "additionalProperties", "propertyNames", "unevaluatedItems",
    "unevaluatedProperties", "$ref", "$dynamicRef", "$recursiveRef", "extends", "disallow",
    "divisibleBy"})
COMBINATORS = ("allOf", "anyOf", "oneOf", "not")
#: keywords whose values are JSON data, not schemas (no $id or subschema inside)
DATA_KEYWORDS = frozenset(("enum", "const", "default", "examples", "example"))
#: what Document.accepts leaves to jsonschema
COMBINED_ASSERTIONS = OTHER_ASSERTIONS - frozenset(COMBINATORS)

#: keys that assert nothing
IGNORABLE = frozenset({"title", "description", "examples", "example", "default", "$schema", "$id",
                       "id", "$comment", "deprecated", "readOnly", "writeOnly", "$defs",
                       "definitions", "$anchor", "contentEncoding", "contentMediaType", "nullable"})
#: keys of a node that constrain nothing once flattened (combinators and $ref
#: are expanded into the conjunction by normalisation)
UNCONSTRAINED_KEYS = IGNORABLE | {"$ref", "$dynamicRef", "allOf", "anyOf", "oneOf"}

_PY_TYPES = {bool: "boolean", type(None): "null", str: "string", list: "array",
             dict: "object", int: "integer"}


def json_equal(a, b) -> bool:
    """Equality as JSON Schema's ``enum``/``const`` see it (``1 == 1.0``, but
    ``True != 1``)."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(json_equal(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(json_equal(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b


def is_number(v) -> bool:
    """Whether ``v`` is a JSON number (``bool`` is not)."""
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def simple(node) -> bool:
    """Whether a schema node asserts nothing beyond ``enum``, ``const`` and
    ``type``."""
    return isinstance(node, dict) and OTHER_ASSERTIONS.isdisjoint(node)


def type_set(t) -> set:
    """The JSON types a ``type`` value names (``number`` includes ``integer``)."""
    if isinstance(t, str):
        t = [t]
    out = set(t)
    if "number" in out:
        out.add("integer")
    return out


def has_type(value, types, doc, ref) -> bool:
    """Whether ``value`` has one of the JSON ``types`` (a name or a list of
    them); an integral float, whose type depends on the draft, or an unusual
    ``type`` is left to ``jsonschema`` (``doc.valid`` at ``ref``)."""
    name = _PY_TYPES.get(type(value))
    if name is None or not (isinstance(types, str) or (
            isinstance(types, list) and all(isinstance(t, str) for t in types))):
        return doc.valid(value, ref)
    names = (types,) if isinstance(types, str) else types
    return name in names or (name == "integer" and "number" in names)


#: ``type_set`` of each single type name (the usual ``type`` value)
_ONE_TYPE = {t: frozenset(type_set(t)) for t in TYPES}


def conj_types(doc, conj) -> set:
    """The JSON types every node of the conjunction allows."""
    types = set(TYPES)
    for p in conj:
        n = doc.node(p)
        if isinstance(n, dict) and "type" in n:
            t = n["type"]
            types &= _ONE_TYPE[t] if isinstance(t, str) and t in _ONE_TYPE else type_set(t)
    return types


def len_bounds(doc, conj, kmin: str, kmax: str) -> tuple[int, int | None]:
    """``(lo, hi)``: the tightest ``kmin``/``kmax`` (``minLength``/``maxLength``,
    ``minItems``/...) of the conjunction (``hi=None``: unbounded)."""
    lo, hi = 0, None
    for p in conj:
        n = doc.node(p)
        if not isinstance(n, dict):
            continue
        v = n.get(kmin)
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            lo = max(lo, math.ceil(v))
        v = n.get(kmax)
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            hi = math.floor(v) if hi is None else min(hi, math.floor(v))
    return lo, hi


def lower_bound_pointer(doc, conj, key: str, value: int) -> str:
    """The user's JSON pointer (:meth:`Document.user_pointer`) of the ``key``
    keyword (``minLength``, ``minItems``...) of the conjunction that sets the
    lower bound ``value`` of :func:`len_bounds`; ``""`` if none does."""
    for p in conj:
        n = doc.node(p)
        v = n.get(key) if type(p) is str and isinstance(n, dict) else None
        if isinstance(v, (int, float)) and not isinstance(v, bool) and math.ceil(v) == value:
            return doc.user_pointer(f"{p}/{key}")
    return ""


def not_required_sets(neg):
    """The name sets of ``not: {required: S}`` or ``not: {anyOf: [{required: S},
    ...]}``, else ``None``."""
    if not isinstance(neg, dict):
        return None
    keys = set(neg) - IGNORABLE
    if keys == {"required"} and isinstance(neg["required"], list) and neg["required"]:
        return [neg["required"]]
    if keys == {"allOf"} and isinstance(neg["allOf"], list) and neg["allOf"]:
        names = []
        for b in neg["allOf"]:
            sub = not_required_sets(b)
            if sub is None or len(sub) != 1:
                return None
            names.extend(sub[0])
        return [names]
    if keys == {"anyOf"} and isinstance(neg["anyOf"], list) and neg["anyOf"]:
        out = []
        for b in neg["anyOf"]:
            sub = not_required_sets(b)
            if sub is None or len(sub) != 1:
                return None
            out.extend(sub)
        return out
    return None
