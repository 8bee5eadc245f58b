"""Complements of schemas: ``not`` and the ``else`` side of ``if`` need the
values a schema rejects, written as a schema the other passes compile.

A node's keywords are a conjunction of assertions, each of which fails only on
values of its own type, so the values the node rejects are the union over its
keywords of the values each one rejects (``minimum: m`` rejects the numbers below
``m``, ``required: [a]`` the objects without ``a``, ``properties: {k: S}`` the
objects whose ``k`` is a value ``S`` rejects, ...), plus the values of a type its
``type`` leaves out. :func:`negate` writes that union as a new schema document
(an ``anyOf`` of one branch per failure), which refers to the original
subschemas it keeps by ``$ref``. A keyword whose failures no schema can state
with what the compiler enforces (``pattern``, ``multipleOf``, ``uniqueItems``,
``propertyNames``, ``additionalProperties``, ``oneOf``, ...) makes the
complement unsupported: :class:`UnsupportedSchemaError` at its pointer.

Failed schemas produce no annotations, so nothing in a complement may count as
evaluating a member for ``unevaluatedProperties``/``unevaluatedItems``
(:meth:`Normaliser.evaluators` refuses such a combination).
"""

from __future__ import annotations

import copy

from constrain.errors import UnsupportedSchemaError
from constrain.frontends.json_schema.document import escape_token
from constrain.frontends.json_schema.keywords import IGNORABLE, OTHER_ASSERTIONS, TYPES, type_set

#: how deep complements may nest (a complement of a complement of ...)
_MAX_DEPTH = 32

_FLIP_BOUND = {"minimum": "exclusiveMaximum", "exclusiveMinimum": "maximum",
               "maximum": "exclusiveMinimum", "exclusiveMaximum": "minimum"}
#: length keyword -> (its type, the keyword that states its failures, offset)
_FLIP_LENGTH = {"minLength": ("string", "maxLength", -1), "maxLength": ("string", "minLength", 1),
                "minItems": ("array", "maxItems", -1), "maxItems": ("array", "minItems", 1),
                "minProperties": ("object", "maxProperties", -1),
                "maxProperties": ("object", "minProperties", 1)}
#: keywords whose values are JSON values, not schemas
_VALUES = frozenset({"enum", "const"})
#: keywords whose values are objects of subschemas by member name
_NAMED = frozenset({"properties", "patternProperties", "dependentSchemas", "dependencies",
                    "$defs", "definitions"})
_ANNOTATIONS = IGNORABLE | {"contentSchema", "$vocabulary", "$dynamicAnchor", "then", "else",
                            "minContains", "maxContains"}


class Negator:
    """Complements of the nodes of one document, memoised by pointer; each is a
    generated document of ``doc`` (a pointer ``@n<k>``)."""

    def __init__(self, doc, formats_asserted: bool):
        self.doc = doc
        self.formats_asserted = formats_asserted
        self._memo: dict[str, str] = {}
        #: while a complement is built: id of a part -> (the part, the
        #: user's pointer of the keyword it was made from)
        self._made_from: dict[int, tuple] = {}

    def negate(self, ref: str) -> str:
        """The pointer of a schema for exactly the values the schema at ``ref``
        rejects.

        Raises:
            UnsupportedSchemaError: the complement cannot be stated (at the
                pointer of the keyword that prevents it).
        """
        hit = self._memo.get(ref)
        if hit is None:
            try:
                schema = self._complement(ref, 0, ())
                origins = self._origins(schema, self.doc.user_pointer(ref))
            finally:
                self._made_from.clear()
            hit = self._memo[ref] = self.doc.add_generated(schema, self.doc.base_uri(ref), origins)
        return hit

    def _made(self, part, at: str):
        """``part``, noted as made from the keyword at ``at``."""
        if isinstance(part, dict):
            self._made_from[id(part)] = (part, self.doc.user_pointer(at))
        return part

    def _origins(self, schema, root: str) -> dict[str, str]:
        """Path inside the complement ``schema`` -> the user's pointer of the
        keyword each noted part was made from (``root`` for the whole)."""
        origins = {"": root}
        made_from = self._made_from
        stack = [("", schema, False)]
        while stack:  # complements nest up to _MAX_DEPTH deep: no recursion
            path, part, names = stack.pop()
            hit = made_from.get(id(part))  # (made_from keeps its parts alive: ids are theirs)
            if hit is not None:
                origins[path] = hit[1]
            items = (part.items() if isinstance(part, dict)
                     else enumerate(part) if isinstance(part, list) else ())
            for k, v in items:
                # enum and const values are JSON data, not schemas (unless
                # they name the members of properties and the like)
                if isinstance(v, (dict, list)) and (names or k not in _VALUES):
                    stack.append((f"{path}/{escape_token(str(k))}", v, k in _NAMED))
        return origins

    # -- the complement as JSON ------------------------------------------------

    def _ref(self, ref: str):
        """The schema at ``ref`` itself, inside a complement: a ``$ref`` to it, or
        for a node of a generated document (whose ``$ref`` are all absolute) a
        copy of it."""
        if ref.startswith("@n"):
            return copy.deepcopy(self.doc.node(ref))
        return {"$ref": self.doc.uri_of(ref)}

    def _complement(self, ref: str, depth: int, stack: tuple):
        if depth > _MAX_DEPTH or ref in stack:
            raise UnsupportedSchemaError("the complement of a schema that refers to itself "
                                         "(or nests negations too deeply)", ref)
        stack = stack + (ref,)
        node = self.doc.node(ref)
        if node is True:
            return False
        if node is False:
            return True
        out: list = []
        for key, value in node.items():
            if key in _ANNOTATIONS or (key not in OTHER_ASSERTIONS and key not in (
                    "type", "enum", "const", "format")):
                continue  # annotations and unknown keywords reject nothing
            at = f"{ref}/{key}"
            out.extend(self._made(f, at) for f in self._failures(ref, key, value, depth, stack))
        if not out:
            return False
        return out[0] if len(out) == 1 else self._made({"anyOf": out}, ref)

    def _sub(self, ref: str, depth: int, stack: tuple):
        return self._complement(ref, depth + 1, stack)

    def _failures(self, ref: str, key: str, value, depth: int, stack: tuple) -> list:
        """Schemas for the values the keyword ``key`` of the node at ``ref``
        rejects."""
        at = f"{ref}/{key}"
        if key == "type":
            allowed = type_set(value)
            integral = "integer" in allowed and "number" not in allowed
            rest = [t for t in TYPES if t not in allowed and t != "integer" and not (integral and t == "number")]
            out = [{"type": rest}] if rest else []
            if integral:
                # the numbers with a non-integral value (a subset: see
                # numbers.fractional_symbol)
                out.append({"type": "number", "not": {"type": "integer"}})
            return out
        if key in ("enum", "const"):
            return [{"not": {key: value}}]
        if key == "format":
            if self.formats_asserted:
                raise UnsupportedSchemaError("the complement of an asserted format", at)
            return []
        if key in _FLIP_BOUND:
            return [{"type": "number", _FLIP_BOUND[key]: value}]
        if key in _FLIP_LENGTH:
            typ, other, delta = _FLIP_LENGTH[key]
            bound = int(value) + delta if isinstance(value, (int, float)) else value
            if delta < 0 and isinstance(value, (int, float)) and value != int(value):
                bound = int(value)  # minItems 1.5: fewer than 2, i.e. at most 1
            if delta < 0 and bound < 0:
                return []  # minLength 0 rejects nothing
            return [{"type": typ, other: bound}]
        if key == "required":
            return [{"type": "object", "not": {"required": [r]}} for r in value]
        if key in ("dependentRequired", "dependencies"):
            out = []
            for trig, need in value.items():
                if isinstance(need, list):
                    out.extend({"type": "object", "required": [trig], "not": {"required": [x]}}
                               for x in need)
                else:
                    out.append({"type": "object", "required": [trig],
                                "allOf": [self._sub(f"{at}/{escape_token(trig)}", depth, stack)]})
            return out
        if key == "dependentSchemas":
            return [{"type": "object", "required": [trig],
                     "allOf": [self._sub(f"{at}/{escape_token(trig)}", depth, stack)]}
                    for trig in value]
        if key == "properties":
            return [{"type": "object", "required": [k],
                     "properties": {k: self._sub(f"{at}/{escape_token(k)}", depth, stack)}}
                    for k in value]
        if key == "prefixItems":
            return [{"type": "array", "minItems": i + 1,
                     "prefixItems": [True] * i + [self._sub(f"{at}/{i}", depth, stack)]}
                    for i in range(len(value))]
        if key == "items" and isinstance(value, (dict, bool)) and "prefixItems" not in self.doc.node(ref):
            return [{"type": "array", "contains": self._sub(at, depth, stack)}]
        if key == "contains":
            node = self.doc.node(ref)
            if "minContains" in node or "maxContains" in node:
                raise UnsupportedSchemaError("the complement of minContains/maxContains", at)
            return [{"type": "array", "items": self._sub(at, depth, stack)}]
        if key == "allOf":
            return [self._sub(f"{at}/{i}", depth, stack) for i in range(len(value))]
        if key == "anyOf":
            return [{"allOf": [self._sub(f"{at}/{i}", depth, stack) for i in range(len(value))]}]
        if key == "not":
            return [self._ref(at)]
        if key == "$ref":
            return [self._sub(self.doc.resolve_ref(value, at), depth, stack)]
        if key == "$dynamicRef":
            return [self._sub(self.doc.resolve_dynamic_ref(value, at), depth, stack)]
        if key == "if":
            node = self.doc.node(ref)
            out = []
            if "then" in node:
                out.append({"allOf": [self._ref(at), self._sub(f"{ref}/then", depth, stack)]})
            if "else" in node:
                out.append({"allOf": [self._sub(at, depth, stack), self._sub(f"{ref}/else", depth, stack)]})
            return out
        raise UnsupportedSchemaError(f"the complement of {key!r} (needed by not/if) is not supported", at)
