"""JSON Schema → Lark grammar text, and :func:`compile_json_schema`.

The grammar's language (Earley, scannerless: what ``lark.Lark(text,
parser="earley", lexer="dynamic_complete")`` accepts) is a set of JSON texts every
one of which ``jsonschema`` validates against the schema (format checking off).
It is *sound* by construction and close to *complete* for the usual serialisation
(``json.dumps(x, separators=(",", ":"), ensure_ascii=False)`` with object members
in schema order, see :func:`order_instance`).

Design:

* Schemas are normalised to a disjunction of conjunctions of schema nodes
  (``anyOf``/``oneOf`` distribute, ``allOf`` and ``$ref`` siblings conjoin); each
  conjunction is compiled per JSON type with the keywords merged (intersected).
* Scalars are single terminals (a whole string with its pattern, format and
  length; a whole number with its bounds; a whole enum), structure is rules.
  Recursive ``$ref`` become recursive rules.
* A keyword that cannot be enforced exactly raises :class:`UnsupportedSchemaError`
  naming its JSON pointer; with ``strict=False`` it is ignored, and one warning
  lists everything ignored.
* Everything emitted errs on the strict side where exactness would be costly:
  integers never carry a fraction or exponent, bounded numbers no exponent,
  patterns accept canonical escapes only, ``maxLength``/``maxItems`` above the
  caps are lowered to the caps (documented in ``docs/json_schema.md``).
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import json
import json.encoder
import math
import re
import time
import warnings
from decimal import Decimal
from fractions import Fraction
from urllib.parse import unquote

from constrain.errors import GrammarTooComplexError, SchemaError, UnsupportedSchemaError
# at module level: an import statement inside compile_json_schema cost ~30 us
# of every compile on a cold cache (constrain imports the grammar engine anyway)
from constrain.cfg.grammar import GrammarConstraint
from constrain.cfg.ir import GrammarIR, Terminal
from constrain.frontends.json_schema.formats import (
    _NEEDS_ESCAPE,
    _RAW_OK,
    CANON_ANY,
    FORMATS,
    JSON_CHAR_ANY,
    JSON_CODEPOINT,
    JSON_INTEGER,
    JSON_NUMBER,
    PatternUnsupported,
    encoded_class,
    matches_everything,
    pattern_class_star,
    patterns_disjoint,
    escape_lark_regex,
    class_re,
    iv_complement,
    iv_intersect,
    iv_norm,
    translate_pattern,
)
from constrain.frontends.json_schema.number_ranges import (
    _trie_alt,
    decimal_range_regex,
    float_multiple_regex,
    int_range_regex,
    integer_bounds,
    multiple_digits,
    nat_multiple_regex,
)

__all__ = ["json_schema_to_lark", "compile_json_schema", "order_instance",
           "DEFAULT_MAX_WHITESPACE", "MAX_STRING_LENGTH", "MAX_ARRAY_LENGTH"]

#: default cap on consecutive whitespace characters in "flexible" style
DEFAULT_MAX_WHITESPACE = 4
#: ``maxLength`` above this is lowered to it (a counted repetition that large
#: would not fit one terminal automaton); unbounded strings stay unbounded
MAX_STRING_LENGTH = 2048
#: ``maxItems`` above this is lowered to it (one rule per possible index)
MAX_ARRAY_LENGTH = 1024
#: limits of the produced grammar
MAX_RULES = 50_000
MAX_GRAMMAR_CHARS = 8_000_000
MAX_CONJUNCTIONS = 256

_TYPES = ("null", "boolean", "integer", "number", "string", "array", "object")
_NUMBER_KW = {"multipleOf", "maximum", "exclusiveMaximum", "minimum", "exclusiveMinimum"}
_STRING_KW = {"maxLength", "minLength", "pattern", "format"}
_ARRAY_KW = {"items", "prefixItems", "additionalItems", "maxItems", "minItems", "uniqueItems",
             "contains", "maxContains", "minContains", "unevaluatedItems"}
_OBJECT_KW = {"properties", "patternProperties", "additionalProperties", "required",
              "maxProperties", "minProperties", "dependentRequired", "dependentSchemas",
              "dependencies", "propertyNames", "unevaluatedProperties"}
# keywords the per-type compilers handle; any other *validation* keyword is refused
_HANDLED = (_NUMBER_KW | _STRING_KW | _OBJECT_KW
            | {"items", "prefixItems", "additionalItems", "maxItems", "minItems",
               "uniqueItems", "unevaluatedItems", "type", "enum", "const", "allOf",
               "anyOf", "oneOf", "$ref", "not"})
_REFUSED = {"contains", "maxContains", "minContains", "if", "then", "else",
            "$dynamicRef", "$recursiveRef", "dependentSchemas"}
_STRING_ANY = '"' + JSON_CHAR_ANY + '*"'


def _escape_token(tok: str) -> str:
    return tok.replace("~", "~0").replace("/", "~1")


def _unescape_token(tok: str) -> str:
    return tok.replace("~1", "/").replace("~0", "~")


def _json_equal(a, b) -> bool:
    """Equality as JSON Schema's ``enum``/``const`` see it (``1 == 1.0``, but
    ``True != 1``)."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_json_equal(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_json_equal(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b


# the keywords jsonschema asserts, besides type/enum/const (every draft; it
# ignores the others, and format without a format checker, as in
# _Compiler.validator)
_OTHER_ASSERTIONS = frozenset({
    "multipleOf", "maximum", "exclusiveMaximum", "minimum", "exclusiveMinimum", "maxLength",
    "minLength", "pattern", "maxItems", "minItems", "uniqueItems", "maxContains",
    "minContains", "maxProperties", "minProperties", "required", "dependentRequired",
    "dependencies", "allOf", "anyOf", "oneOf", "not", "if", "then", "else",
    "dependentSchemas", "prefixItems", "items", "additionalItems", "contains", "properties",
    "patternProperties", "additionalProperties", "propertyNames", "unevaluatedItems",
    "unevaluatedProperties", "$ref", "$dynamicRef", "$recursiveRef", "extends", "disallow",
    "divisibleBy"})


_COMBINATORS = ("allOf", "anyOf", "oneOf", "not")
# what _Compiler._accepts leaves to jsonschema
_COMBINED_ASSERTIONS = _OTHER_ASSERTIONS - frozenset(_COMBINATORS)


def _simple(node) -> bool:
    """Whether a schema node asserts nothing beyond ``enum``, ``const`` and
    ``type``."""
    return isinstance(node, dict) and _OTHER_ASSERTIONS.isdisjoint(node)


_PY_TYPES = {bool: "boolean", type(None): "null", str: "string", list: "array",
             dict: "object", int: "integer"}


def _short(text: str, limit: int = 60) -> str:
    """``text`` cut to ``limit`` characters, for error messages."""
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _json_text(value) -> str:
    try:
        return json.dumps(value)
    except (TypeError, ValueError):
        return repr(value)


def _has_type(value, types, comp, ptr: str) -> bool:
    """Whether ``value`` has one of the JSON ``types`` (a name or a list of
    them); an integral float, whose type depends on the draft, or an unusual
    ``type`` is left to ``jsonschema`` (``comp.valid``)."""
    name = _PY_TYPES.get(type(value))
    if name is None or not (isinstance(types, str) or (
            isinstance(types, list) and all(isinstance(t, str) for t in types))):
        return comp.valid(value, ptr)
    names = (types,) if isinstance(types, str) else types
    return name in names or (name == "integer" and "number" in names)


def _type_set(t) -> set:
    if isinstance(t, str):
        t = [t]
    out = set(t)
    if "number" in out:
        out.add("integer")
    return out


def _node_types(node) -> set | None:
    if isinstance(node, dict) and "type" in node:
        return _type_set(node["type"])
    return None


def _number_text(v) -> list[str]:
    """JSON spellings of a number for enum literals."""
    if isinstance(v, float):
        if v != v or v in (math.inf, -math.inf):
            return []
        out = [repr(v)]  # json.dumps of a finite float
        if v.is_integer():
            out.append(str(int(v)))
        return out
    out = [str(v)]
    return out


class _Alt(list):
    """One alternative of a rule: a list of items ``(kind, payload)``, kind
    ``"sym"`` (a symbol), ``"opt"`` (an optional symbol) or ``"star"`` (a tuple of
    symbols repeated zero or more times)."""


# keywords whose values are data, not schemas: no $id inside them counts
_NOT_SCHEMAS = frozenset(("enum", "const", "default", "examples", "example"))


class _Compiler:
    """Builds the rules and terminals for one schema document."""

    def __init__(self, root, *, strict: bool, whitespace: str, max_whitespace: int,
                 max_string_length: int, max_array_length: int, deadline: float | None = None,
                 exclusions: dict | None = None):
        self.root = root
        #: None: write "any string but these" as a regex (grammar text for lark);
        #: a dict: as a stand-in terminal, its definition kept here for
        #: GrammarIR.exclusions (the compile path; see exclusion_terminal)
        self.exclusions = exclusions
        self.deadline = deadline
        self.strict = strict
        self.max_string_length = max_string_length
        self.max_array_length = max_array_length
        if whitespace == "compact":
            ws = ""
        elif whitespace == "flexible":
            if max_whitespace < 1:
                raise ValueError("max_whitespace must be >= 1")
            ws = r"[ \t\n\r]{0,%d}" % max_whitespace
        else:
            raise ValueError(f"whitespace must be 'compact' or 'flexible', not {whitespace!r}")
        self.ws = ws
        self.ignored: list[str] = []
        self.rules: dict[str, list[_Alt]] = {}
        self.terminals: dict[str, str] = {}  # regex -> name
        self.terminal_defs: dict[str, str] = {}  # name -> regex
        self.memo: dict[tuple, str] = {}
        self.counter = 0
        self.node_cache: dict[str, object] = {}
        # DNF per pointer; a second cache while proving oneOf disjointness, where
        # nested oneOf are not checked
        self.flat_cache: dict[bool, dict[str, list]] = {False: {}, True: {}}
        self.checking = False  # inside a oneOf disjointness proof
        self.synthetic_ptrs: dict[str, str] = {}
        self.ids: dict[str, str] | None = None  # see _index_ids
        self.resources: list[str] = []
        schema_uri = str(root.get("$schema", "")) if isinstance(root, dict) else ""
        self.ref_ignores_siblings = any(f"draft-0{k}" in schema_uri for k in (3, 4, 6, 7))
        self._validator = None
        self.literal_of: dict[str, str] = {}  # terminal name -> its one string

        def bare(text: str) -> str | None:  # compact: punctuation is literal text
            return None if ws else text

        self.punct = {
            "LBRACE": self.terminal(r"\{" + ws, "LBRACE", bare("{")),
            "RBRACE": self.terminal(ws + r"\}", "RBRACE", bare("}")),
            "LBRACK": self.terminal(r"\[" + ws, "LBRACK", bare("[")),
            "RBRACK": self.terminal(ws + r"\]", "RBRACK", bare("]")),
            "COMMA": self.terminal(ws + "," + ws, "COMMA", bare(",")),
            "EMPTY_OBJ": self.terminal(r"\{" + ws + r"\}", "EMPTY_OBJ", bare("{}")),
            "EMPTY_ARR": self.terminal(r"\[" + ws + r"\]", "EMPTY_ARR", bare("[]")),
        }
        self._any_value = None

    # -- bookkeeping ---------------------------------------------------------------

    def unsupported(self, pointer: str, message: str):
        """Refuse (strict) or record an ignored keyword."""
        if self.strict:
            raise UnsupportedSchemaError(message, pointer)
        if pointer not in self.ignored:
            self.ignored.append(pointer)

    def terminal(self, regex: str, kind: str, literal: str | None = None) -> str:
        """The name of the terminal for ``regex`` (one per distinct regex);
        ``literal``: the one string it matches, when the caller knows it (the
        compile path then writes its chain without reading the regex back)."""
        name = self.terminals.get(regex)
        if name is None:
            if kind in ("LBRACE", "RBRACE", "LBRACK", "RBRACK", "COMMA", "EMPTY_OBJ",
                        "EMPTY_ARR"):
                name = kind
            else:
                name = f"{kind}_{len(self.terminal_defs)}"
            self.terminals[regex] = name
            self.terminal_defs[name] = regex
            if literal is not None and (literal.isascii() or _encodable(literal)):
                self.literal_of[name] = literal
        return name

    def exclusion_terminal(self, names, tail: str, kind: str, alphabet=None,
                           min_len: int = 0) -> str | None:
        """The terminal of ``"s"`` + ``tail`` for every JSON string ``s`` over
        ``alphabet`` (code-point intervals; default all), canonically encoded, of at
        least ``min_len`` (0 or 1) characters and not in ``names``; ``None`` when
        there is no such string or the set is too large to exclude (then nothing
        is allowed, which is sound).

        For grammar text the set difference is a regex (``_not_in_set``). On the
        compile path the terminal is the plain string regex less the prefixes
        ``"name"``, built as an automaton product (byte_automaton.minus_prefixes):
        ~0.2 ms where compiling the regex took 1-3 ms on a typical object schema,
        and 10-45 ms with hundreds of names."""
        if self.exclusions is None:
            content = _not_in_set(names, alphabet, min_len)
            return None if content is None else self.terminal('"' + content + '"' + tail, kind)
        any_char = CANON_ANY if alphabet is None else encoded_class(alphabet)
        if any_char is None:
            return None
        if sum(map(len, names)) > _MAX_TRIE and _trie_size(names) > _MAX_TRIE:
            return None
        base = '"' + any_char + ("+" if min_len else "*") + '"' + tail
        prefixes = tuple(sorted({p for p in map(_json_bytes, names) if p is not None}))
        if not prefixes:
            return self.terminal(base, kind)
        # matches nothing as a regex: see GrammarIR.exclusions
        name = self.terminal(r"[^\x00-\U0010ffff]trellis_exclusion_" + _exclusion_id(base, prefixes),
                             kind)
        self.exclusions[name] = (base, prefixes)
        return name

    def new_rule(self, hint: str) -> str:
        self.counter += 1
        if self.counter > MAX_RULES:
            raise GrammarTooComplexError(
                f"the grammar for this schema needs more than {MAX_RULES} rules")
        return f"{hint}_{self.counter}"

    # -- documents -----------------------------------------------------------------

    def _index_ids(self) -> None:
        """``self.ids``: ``$id``/``$anchor`` values → JSON pointers, for
        non-pointer ``$ref``; ``self.resources``: the pointers of nested
        resources (a schema with its own base URI: "#/..." inside them is
        relative to them). Made on the first ``$ref``."""
        ids: dict[str, str] = {}
        resources: list[str] = []
        schema_uri = str(self.root.get("$schema", "")) if isinstance(self.root, dict) else ""
        id_keys = ("$id", "id") if ("draft-04" in schema_uri or "draft-03" in schema_uri) else ("$id",)
        path: list[str] = []  # the pointer is spelled only where an id is found

        def walk(node):
            if isinstance(node, dict):
                if "$id" in node or "id" in node or "$anchor" in node:
                    ptr = "".join("/" + _escape_token(k) for k in path)
                    for key in id_keys:
                        v = node.get(key)
                        if isinstance(v, str) and ptr and not v.startswith("#"):
                            resources.append(ptr)
                    for key in ("$id", "id"):
                        v = node.get(key)
                        if isinstance(v, str) and ptr:
                            ids.setdefault(v, ptr)
                            ids.setdefault(v.rstrip("#"), ptr)
                    v = node.get("$anchor")
                    if isinstance(v, str):
                        ids.setdefault("#" + v, ptr)
                for k, v in node.items():
                    if isinstance(v, (dict, list)) and k not in _NOT_SCHEMAS:
                        path.append(k)
                        walk(v)
                        path.pop()
            else:
                for i, v in enumerate(node):
                    if isinstance(v, (dict, list)):
                        path.append(str(i))
                        walk(v)
                        path.pop()

        if isinstance(self.root, (dict, list)):
            walk(self.root)
        self.ids, self.resources = ids, resources

    def node(self, ptr: str):
        """The schema at a JSON pointer of the document."""
        if ptr == "<true>":
            return True
        if ptr == "<false>":
            return False
        if ptr.startswith("<notall:"):
            return {}
        hit = self.node_cache.get(ptr, self)
        if hit is not self:
            return hit
        cur = self.root
        for tok in ptr.split("/")[1:]:
            tok = _unescape_token(tok)
            if isinstance(cur, list):
                try:
                    cur = cur[int(tok)]
                except (ValueError, IndexError):
                    raise SchemaError("no such schema", ptr) from None
            elif isinstance(cur, dict) and tok in cur:
                cur = cur[tok]
            else:
                raise SchemaError("no such schema", ptr)
        if not isinstance(cur, (dict, bool)):
            raise SchemaError(f"a schema must be an object or a boolean, not {type(cur).__name__}",
                              ptr)
        self.node_cache[ptr] = cur
        return cur

    def resolve_ref(self, ref: str, at: str) -> str:
        """The JSON pointer a ``$ref`` points to."""
        if not isinstance(ref, str):
            raise SchemaError("$ref must be a string", at)
        if self.ids is None:
            self._index_ids()
        target = None
        if ref.startswith("#"):
            frag = unquote(ref[1:])
            base = max((r for r in self.resources if at == r or at.startswith(r + "/")),
                       key=len, default="")
            if frag == "" or frag.startswith("/"):
                target = base + frag
            elif ref in self.ids:
                target = self.ids[ref]
        else:
            base, _, frag = ref.partition("#")
            root_id = self.root.get("$id", self.root.get("id")) if isinstance(self.root, dict) else None
            if isinstance(root_id, str) and base and root_id.rstrip("#").endswith(base):
                target = unquote(frag)
            elif base in self.ids and (frag == "" or frag.startswith("/")):
                target = self.ids[base] + unquote(frag)
            elif ref in self.ids:
                target = self.ids[ref]
        if target is None:
            raise SchemaError(f"cannot resolve $ref {ref!r}", at)
        try:
            self.node(target)
        except SchemaError:
            raise SchemaError(f"$ref {ref!r} points to no schema", at) from None
        return target

    @property
    def validator(self):
        """A ``jsonschema`` validator of the whole document (for refs), made on
        first use: only enums and consts filtered by sibling keywords need it, and
        importing jsonschema costs up to seconds (its format extras build lark
        parsers at import)."""
        if self._validator is None:
            import jsonschema

            root = self.root
            cls = jsonschema.validators.validator_for(root if isinstance(root, dict) else {},
                                                      default=jsonschema.Draft202012Validator)
            try:
                self._validator = cls(root)
            except Exception as e:  # pragma: no cover - defensive
                raise SchemaError(f"jsonschema cannot load the schema: {e}", "") from e
        return self._validator

    def valid(self, value, ptr: str) -> bool:
        """Whether ``jsonschema`` accepts ``value`` against the schema at ``ptr``
        (refs resolved in the whole document).

        When ``jsonschema`` itself fails (a ``pattern`` Python's ``re`` cannot
        compile, a ``$ref`` it cannot resolve), which values the node admits is
        unknown: that is :meth:`unsupported` at ``ptr`` (strict: an
        :class:`UnsupportedSchemaError` that says why; else the value is taken
        as rejected, which can only narrow the language)."""
        if ptr.startswith("<notall:"):
            return not isinstance(value, dict) or not all(k in value for k in _marker_names(ptr))
        node = self.node(ptr)
        if isinstance(node, bool):
            return node
        try:
            return self.validator.evolve(schema=node).is_valid(value)
        except Exception as e:
            self.unsupported(ptr, f"jsonschema cannot check the value "
                                  f"{_short(_json_text(value))} against this schema "
                                  f"({type(e).__name__}: {_short(str(e))}), so which enum/const "
                                  f"values it admits is unknown")
            return False

    # -- normalisation -------------------------------------------------------------

    def flatten(self, ptr: str, stack: tuple = ()) -> list[tuple]:
        """The schema at ``ptr`` as a disjunction of conjunctions of node pointers
        (combinators and ``$ref`` expanded)."""
        self.tick(ptr)
        cache = self.flat_cache[self.checking]
        hit = cache.get(ptr)
        if hit is not None:
            return hit
        node = self.node(ptr)
        if node is True:
            return [()]
        if node is False:
            return []
        if ptr in stack:
            raise UnsupportedSchemaError(
                "a schema that refers to itself without an object or array in between", ptr)
        stack = stack + (ptr,)
        dnf = [(ptr,)]
        if "$ref" in node:
            target = self.resolve_ref(node["$ref"], ptr + "/$ref")
            if self.ref_ignores_siblings:
                # drafts 3 to 7: "all other properties in a $ref object MUST be
                # ignored" (jsonschema does so too)
                dnf = self.flatten(target, stack)
                cache[ptr] = dnf
                return dnf
            dnf = self._product(dnf, self.flatten(target, stack), ptr)
        sets = _not_required_sets(node.get("not"))
        if sets is not None:
            # not {required: S} (or an anyOf of such): an object missing some name of
            # each S
            conj = (self.synthetic({"type": "object"}),) + tuple(_marker(x) for x in sets)
            dnf = self._product(dnf, [conj], ptr)
        dnf = self._dependencies(node, ptr, dnf, stack)
        for i, _ in enumerate(self._list(node, "allOf", ptr)):
            dnf = self._product(dnf, self.flatten(f"{ptr}/allOf/{i}", stack), ptr)
        for key in ("anyOf", "oneOf"):
            branches = self._list(node, key, ptr)
            if not branches and key in node:
                return []
            if not branches:
                continue
            flat = [self.flatten(f"{ptr}/{key}/{i}", stack) for i in range(len(branches))]
            if key == "oneOf" and len(flat) > 1 and not self.checking:
                resolved = self._resolve_one_of(flat, (ptr,))
                if resolved is None:
                    self.unsupported(f"{ptr}/oneOf", "oneOf branches may overlap (a value "
                                     "matching two is invalid, and no rule excludes it)")
                else:
                    flat = resolved
            union = [c for f in flat for c in f]
            dnf = self._product(dnf, union, ptr)
        cache[ptr] = dnf
        return dnf

    def _list(self, node, key, ptr):
        v = node.get(key, [])
        if not isinstance(v, list):
            raise SchemaError(f"{key} must be an array", f"{ptr}/{key}")
        return v

    def _product(self, a, b, ptr):
        out = []
        for x in a:
            for y in b:
                merged = x + tuple(p for p in y if p not in x)
                out.append(merged)
                if len(out) > MAX_CONJUNCTIONS:
                    raise GrammarTooComplexError(
                        f"more than {MAX_CONJUNCTIONS} alternatives after distributing "
                        f"anyOf/oneOf over allOf at {ptr or '/'}")
        return out

    # -- oneOf disjointness --------------------------------------------------------

    def synthetic(self, node: dict) -> str:
        """A pseudo-pointer for a schema made up here (type restrictions, forced
        members)."""
        key = json.dumps(node, sort_keys=True)
        ptr = self.synthetic_ptrs.get(key)
        if ptr is None:
            ptr = f"<syn:{len(self.synthetic_ptrs)}>"
            self.synthetic_ptrs[key] = ptr
            self.node_cache[ptr] = node
        return ptr

    def _dependencies(self, node, ptr, dnf, stack):
        """Schema-valued ``dependencies``/``dependentSchemas`` of an object schema:
        (trigger absent) or (trigger present and the dependent schema)."""
        for key in ("dependencies", "dependentSchemas"):
            deps = node.get(key)
            if not isinstance(deps, dict):
                continue
            for trig, dep in deps.items():
                if isinstance(dep, list):
                    continue  # dependentRequired form: see object_symbol
                if _node_types(node) != {"object"}:
                    continue  # refused by check_keywords
                where = f"{ptr}/{key}/{_escape_token(trig)}"
                absent = (_marker([trig]),)
                present = (self.synthetic({"required": [trig]}),)
                alts = [absent] + [present + c for c in self.flatten(where, stack)]
                dnf = self._product(dnf, alts, ptr)
        return dnf

    def _resolve_one_of(self, flat, context):
        """The ``oneOf`` branches (DNFs) made pairwise disjoint, or ``None``.

        Per JSON type shared by two branches: nothing to do where disjointness is
        proven; a type neither branch names (``{"required": [...]}`` also admits
        strings) is dropped from both, which is exact since such values match
        both; objects are separated by required sets or a forced discriminator."""
        n = len(flat)
        drop = [set() for _ in range(n)]
        objects_overlap = False
        self.checking = True
        try:
            for i in range(n):
                for j in range(i + 1, n):
                    for ci in flat[i]:
                        for cj in flat[j]:
                            a, b = context + ci, context + cj
                            e1, e2 = self.enum_values(a), self.enum_values(b)
                            if e1 is not None or e2 is not None:
                                if self.disjoint(a, b, 3):
                                    continue
                                return None
                            shared = self.conj_types(a) & self.conj_types(b)
                            explicit = self._explicit_types(a) or self._explicit_types(b)
                            for t in ("null", "boolean", "integer", "string", "array", "object"):
                                if t not in shared:
                                    continue
                                tt = "number" if t == "integer" else t
                                if self._disjoint_in(tt, a, b, 3):
                                    continue
                                if t == "object":
                                    objects_overlap = True
                                elif not explicit:
                                    drop[i].add(t)
                                    drop[j].add(t)
                                else:
                                    return None
        finally:
            self.checking = False
        if objects_overlap:
            flat = (self._exclusive_required(flat, context)
                    or self._forced_discriminator(flat, context))
            if flat is None:
                return None
        out = []
        for i, branch in enumerate(flat):
            if not drop[i]:
                out.append(branch)
                continue
            if "integer" in drop[i]:
                drop[i].add("number")
            new = []
            for conj in branch:
                keep = self.conj_types(context + conj) - drop[i]
                new.append(conj + (self.synthetic({"type": sorted(keep)}),))
            out.append(new)
        return out

    def _explicit_types(self, conj) -> bool:
        return any(isinstance(self.node(p), dict) and "type" in self.node(p) for p in conj)

    def _forced_discriminator(self, flat, context):
        """Branches made disjoint by requiring one member whose schemas differ
        pairwise between branches (every output then carries it)."""
        views = [[self._object_view(context + c, quiet=True) for c in branch
                  if "object" in self.conj_types(context + c)] for branch in flat]
        if any(v is None for vs in views for v in vs):
            return None
        candidates = None
        for vs in views:
            for v in vs:
                names = set(v.pieces)
                candidates = names if candidates is None else candidates & names
        for name in sorted(candidates or ()):
            ok = True
            self.checking = True
            try:
                for i in range(len(flat)):
                    for j in range(i + 1, len(flat)):
                        for vi in views[i]:
                            for vj in views[j]:
                                if not self._pieces_disjoint(vi.pieces[name], vj.pieces[name], 2):
                                    ok = False
            finally:
                self.checking = False
            if ok:
                req = self.synthetic({"required": [name]})
                return [[c + (req,) for c in branch] for branch in flat]
        return None

    def _exclusive_required(self, flat, context=()):
        """``oneOf`` branches made disjoint through their ``required`` sets: each
        conjunction also demands that, for every conjunction of another branch,
        some name it requires is missing. ``None`` if a conjunction that admits
        objects requires nothing."""
        req = []
        for branch in flat:
            sets = []
            for conj in branch:
                if "object" not in self.conj_types(context + conj):
                    continue  # no objects to tell apart
                names = set()
                for p in conj:
                    n = self.node(p)
                    if isinstance(n, dict) and isinstance(n.get("required"), list):
                        names.update(x for x in n["required"] if isinstance(x, str))
                if not names:
                    return None
                sets.append(names)
            req.append(sets)
        out = []
        for i, branch in enumerate(flat):
            others = [_marker(sorted(sj)) for j, sets in enumerate(req) if j != i for sj in sets]
            out.append([conj + tuple(dict.fromkeys(m for m in others if m not in conj))
                        for conj in branch])
        return out

    def conj_types(self, conj) -> set:
        types = set(_TYPES)
        for p in conj:
            t = _node_types(self.node(p))
            if t is not None:
                types &= t
        return types

    def enum_values(self, conj):
        """The values an ``enum``/``const`` in the conjunction allows (each
        validated against every node), or ``None`` when there is none."""
        cands = None
        for p in conj:
            n = self.node(p)
            if not isinstance(n, dict):
                continue
            if "const" in n:
                vals = [n["const"]]
            elif "enum" in n and isinstance(n["enum"], list):
                vals = list(n["enum"])
            else:
                continue
            if cands is None:
                cands = vals
            else:
                cands = [v for v in cands if any(_json_equal(v, w) for w in vals)]
        if cands is None:
            return None
        # every candidate is in each enum/const of the conjunction already;
        # against a node that asserts nothing else, jsonschema's check only
        # repeated that scan (quadratic in the enum: 8.8 ms of a Github_hard
        # schema's compile), and a type is checked here
        checks, typed = [], []
        for p in conj:
            n = self.node(p)
            if not _simple(n):
                checks.append(p)
            elif "type" in n:
                typed.append(p)
        return [v for v in cands
                if all(self._accepts(v, p) for p in checks)
                and all(_has_type(v, self.node(p)["type"], self, p) for p in typed)]

    def _accepts(self, value, ptr: str) -> bool:
        """:meth:`valid`, decided here for a node that asserts only ``enum``,
        ``const``, ``type`` and ``allOf``/``anyOf``/``oneOf``/``not`` of such
        nodes (jsonschema's validation of an enum value is a scan of the enum,
        and each call evolves a validator); anything else is asked of it."""
        n = self.node(ptr)
        if not isinstance(n, dict) or not _COMBINED_ASSERTIONS.isdisjoint(n):
            return self.valid(value, ptr)
        parts = {}
        for k in _COMBINATORS:
            if k in n:
                sub = n[k]
                if k == "not" and not isinstance(sub, (dict, bool)) or (
                        k != "not" and not (isinstance(sub, list) and sub)):
                    return self.valid(value, ptr)  # malformed: as jsonschema reads it
                parts[k] = sub
        if "const" in n and not _json_equal(value, n["const"]):
            return False
        if "enum" in n:
            if not isinstance(n["enum"], list):
                return self.valid(value, ptr)
            if not any(_json_equal(value, w) for w in n["enum"]):
                return False
        if "type" in n and not _has_type(value, n["type"], self, ptr):
            return False
        if "allOf" in parts and not all(
                self._accepts(value, f"{ptr}/allOf/{i}") for i in range(len(parts["allOf"]))):
            return False
        if "anyOf" in parts and not any(
                self._accepts(value, f"{ptr}/anyOf/{i}") for i in range(len(parts["anyOf"]))):
            return False
        if "oneOf" in parts and sum(
                self._accepts(value, f"{ptr}/oneOf/{i}") for i in range(len(parts["oneOf"]))) != 1:
            return False
        return "not" not in parts or not self._accepts(value, f"{ptr}/not")

    def disjoint(self, c1, c2, depth) -> bool:
        """Whether no JSON value satisfies both conjunctions (a sufficient test)."""
        e1, e2 = self.enum_values(c1), self.enum_values(c2)
        if e1 is not None and not any(all(self._accepts(v, p) for p in c2) for v in e1):
            return True
        if e2 is not None and not any(all(self._accepts(v, p) for p in c1) for v in e2):
            return True
        shared = self.conj_types(c1) & self.conj_types(c2)
        if e1 is not None or e2 is not None:
            return False
        for t in ("null", "boolean", "string", "array", "object"):
            if t in shared and not self._disjoint_in(t, c1, c2, depth):
                return False
        if "integer" in shared and not self._disjoint_in("number", c1, c2, depth):
            return False
        return True

    def _disjoint_in(self, t, c1, c2, depth) -> bool:
        if t == "number":
            a, b = self._num_bounds(c1, quiet=True), self._num_bounds(c2, quiet=True)
            return _ranges_disjoint(a, b)
        if t == "string":
            a, b = self._len_bounds(c1, "minLength", "maxLength"), self._len_bounds(c2, "minLength", "maxLength")
            return a[1] is not None and a[1] < b[0] or b[1] is not None and b[1] < a[0]
        if t == "array":
            a, b = self._len_bounds(c1, "minItems", "maxItems"), self._len_bounds(c2, "minItems", "maxItems")
            return a[1] is not None and a[1] < b[0] or b[1] is not None and b[1] < a[0]
        if t == "object" and depth > 0:
            o1, o2 = self._object_view(c1, quiet=True), self._object_view(c2, quiet=True)
            if o1 is None or o2 is None:
                return True
            for x, y in ((o1, o2), (o2, o1)):
                if any(names <= y.required for names in x.notall):
                    return True
                for name in x.required:
                    if name not in y.pieces and not y.extra_allowed_for(name):
                        return True
                    if name in y.pieces:
                        px, py = x.pieces.get(name), y.pieces[name]
                        if px is None:
                            continue
                        if self._pieces_disjoint(px, py, depth - 1):
                            return True
            return False
        return False

    def _pieces_disjoint(self, p1, p2, depth) -> bool:
        try:
            f1 = self._flatten_pieces(p1)
            f2 = self._flatten_pieces(p2)
        except (UnsupportedSchemaError, SchemaError, GrammarTooComplexError):
            return False
        return all(self.disjoint(a, b, depth) for a in f1 for b in f2)

    def _flatten_pieces(self, pieces) -> list[tuple]:
        dnf = [()]
        for p in pieces:
            dnf = self._product(dnf, self.flatten(p), p)
        return dnf

    # -- values ----------------------------------------------------------------------

    def tick(self, ptr: str) -> None:
        """Refuse to go on past the time budget (no schema may hang a server)."""
        if self.deadline is not None and time.perf_counter() > self.deadline:
            raise GrammarTooComplexError(
                f"translating the schema exceeded its time budget at {ptr or '/'} "
                f"(pass time_budget= to raise it)")

    def value_symbol(self, pieces: tuple) -> str:
        """A rule for the values satisfying every schema in ``pieces``."""
        self.tick(pieces[0] if pieces and isinstance(pieces[0], str) else "")
        pieces = tuple(dict.fromkeys(p for p in pieces if p != "<true>"))
        if not pieces:
            return self.any_value()
        name = self.memo.get(pieces)
        if name is not None:
            return name
        name = self.new_rule("value")
        self.memo[pieces] = name
        dnf = self._flatten_pieces(pieces)
        if any(all(self._unconstrained(p) for p in conj) for conj in dnf):
            # one disjunct admits every value ({}, a description, a $ref to
            # one): the shared any-value rules, not a copy of them per type
            self.rules[name] = [_Alt([("sym", self.any_value())])]
            return name
        alts: list[_Alt] = []
        for conj in dnf:
            for sym in self.compile_conjunction(conj):
                alts.append(_Alt([("sym", sym)]))
        self.rules[name] = alts
        return name

    def _unconstrained(self, ptr: str) -> bool:
        """Whether the node at ``ptr`` adds nothing to a conjunction it is in:
        only annotations, and combinators and ``$ref`` (which flattening has
        already expanded into the conjunction)."""
        if ptr.startswith("<notall:"):
            return False
        node = self.node(ptr)
        return node is True or (isinstance(node, dict) and _UNCONSTRAINED_KEYS.issuperset(node))

    def _is_any(self, sym: str) -> bool:
        """Whether ``sym`` is the any-value rule or a unit rule to it."""
        if sym == "any_value":
            return True
        alts = self.rules.get(sym)
        return alts is not None and len(alts) == 1 and list(alts[0]) == [("sym", "any_value")]

    def any_value(self) -> str:
        """Rules for any JSON value."""
        if self._any_value is not None:
            return self._any_value
        P = self.punct
        self._any_value = "any_value"
        # strings, numbers and keys through the terminals typed values use (one
        # string automaton per schema, not three: a union "scalar" terminal and a
        # key-with-colon terminal each paid the JSON string's regex pipeline again,
        # ~0.7 ms of a median schema's cold compile)
        string = self.terminal(_STRING_ANY, "STRING")
        scalars = [string, self.terminal(JSON_NUMBER, "NUMBER"), self.terminal("true|false", "BOOL"),
                   self.terminal("null", "NULL", "null")]
        colon = self.terminal(self.ws + ":" + self.ws, "COLON", None if self.ws else ":")
        self.rules["any_value"] = ([_Alt([("sym", t)]) for t in scalars]
                                   + [_Alt([("sym", "any_object")]), _Alt([("sym", "any_array")])])
        self.rules["any_object"] = [
            _Alt([("sym", P["LBRACE"]), ("sym", string), ("sym", colon), ("sym", "any_value"),
                  ("star", (P["COMMA"], string, colon, "any_value")), ("sym", P["RBRACE"])]),
            _Alt([("sym", P["EMPTY_OBJ"])])]
        self.rules["any_array"] = [
            _Alt([("sym", P["LBRACK"]), ("sym", "any_value"),
                  ("star", (P["COMMA"], "any_value")), ("sym", P["RBRACK"])]),
            _Alt([("sym", P["EMPTY_ARR"])])]
        return self._any_value

    def check_keywords(self, conj, types):
        """Refuse validation keywords that no per-type compiler enforces."""
        for p in conj:
            n = self.node(p)
            if not isinstance(n, dict):
                continue
            for k, v in n.items():
                if k in _REFUSED:
                    if k in ("contains", "maxContains", "minContains") and "array" not in types:
                        continue
                    if k == "dependentSchemas" and ("object" not in types
                                                    or _node_types(n) == {"object"}):
                        continue
                    if k in ("then", "else"):
                        continue  # refused with "if"; without it they do nothing
                    self.unsupported(f"{p}/{k}", f"the keyword {k!r} is not supported")

    def compile_conjunction(self, conj) -> list[str]:
        """Symbols (one per JSON type allowed) for the values satisfying all nodes of
        the conjunction."""
        types = self.conj_types(conj)
        values = self.enum_values(conj)
        if values is not None:
            # every candidate was validated against the full nodes: exact
            return [self.literal_symbol(values)] if values else []
        self.check_keywords(conj, types)
        self.excluded = []
        types = self.apply_not(conj, types)
        excluded = self.excluded
        out = []
        if "null" in types and not any(v is None for v in excluded):
            out.append(self.terminal("null", "NULL", "null"))
        if "boolean" in types:
            bools = [b for b in ("true", "false")
                     if not any(isinstance(v, bool) and json.dumps(v) == b for v in excluded)]
            if bools:
                out.append(self.terminal("|".join(bools), "BOOL"))
        if "integer" in types:
            sym = self.number_symbol(conj, integer="number" not in types,
                                     excluded=[v for v in excluded if _is_number(v)])
            if sym:
                out.append(sym)
        if "string" in types:
            sym = self.string_symbol(conj, excluded=[v for v in excluded if isinstance(v, str)])
            if sym:
                out.append(sym)
        if "array" in types:
            sym = self.array_symbol(conj)
            if sym:
                out.append(sym)
        if "object" in types:
            sym = self.object_symbol(conj)
            if sym:
                out.append(sym)
        return out

    def apply_not(self, conj, types):
        """``not``: exact for ``not: {}``/``true`` and ``not: {"type": ...}``."""
        for p in conj:
            n = self.node(p)
            if not isinstance(n, dict) or "not" not in n:
                continue
            neg = n["not"]
            if neg is True or neg == {}:
                return set()
            if neg is False:
                continue
            if _not_required_sets(neg) is not None:
                continue  # presence constraints, see flatten()
            keys = set(neg) - _IGNORABLE if isinstance(neg, dict) else set()
            if keys and keys <= {"enum", "const", "type"} and keys & {"enum", "const"}:
                # not {enum}: those values are left out of the terminals
                vals = [neg["const"]] if "const" in neg else neg.get("enum")
                if isinstance(vals, list):
                    vals = [v for v in vals if self._accepts(v, f"{p}/not")]
                    if any(isinstance(v, (dict, list)) for v in vals) and types & {"object", "array"}:
                        self.unsupported(f"{p}/not", "not: {enum} of objects or arrays")
                    self.excluded.extend(vals)
                    continue
            if isinstance(neg, dict) and set(neg) - _IGNORABLE == {"type"}:
                nt = _type_set(neg["type"])
                if "integer" in nt and "number" not in nt and "number" in types:
                    self.unsupported(f"{p}/not", "not: {type: integer} of a number")
                    continue
                types = types - nt
                continue
            self.unsupported(f"{p}/not", "the keyword 'not' is not supported here")
        return types

    def literal_symbol(self, values) -> str:
        """One terminal for a finite set of JSON values."""
        texts = []
        for v in values:
            if isinstance(v, bool) or v is None:
                texts.append("null" if v is None else "true" if v else "false")
            elif isinstance(v, (int, float)):
                texts.extend(_number_text(v))
            elif isinstance(v, str):
                texts.append(_json_str(v))
            else:
                texts.append(json.dumps(v, ensure_ascii=False, separators=(",", ":")))
        texts = list(dict.fromkeys(texts))
        regex = "|".join(_lit(t) for t in texts)
        return self.terminal(regex, "CONST", texts[0] if len(texts) == 1 else None)

    # -- numbers ---------------------------------------------------------------------

    def _num_bounds(self, conj, quiet=False):
        """(lo, lo_exclusive, hi, hi_exclusive) from every node (tightest)."""
        lo = hi = None
        lo_x = hi_x = False

        def tighter_lo(v, x):
            nonlocal lo, lo_x
            if lo is None or Fraction(v) > Fraction(lo) or (Fraction(v) == Fraction(lo) and x):
                lo, lo_x = v, x

        def tighter_hi(v, x):
            nonlocal hi, hi_x
            if hi is None or Fraction(v) < Fraction(hi) or (Fraction(v) == Fraction(hi) and x):
                hi, hi_x = v, x

        for p in conj:
            n = self.node(p)
            if not isinstance(n, dict):
                continue
            for key in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
                v = n.get(key)
                if v is None or isinstance(v, bool):
                    continue
                if not isinstance(v, (int, float)) or (isinstance(v, float) and not math.isfinite(v)):
                    if not quiet:
                        raise SchemaError(f"{key} must be a number", f"{p}/{key}")
                    continue
                if key == "minimum":
                    tighter_lo(v, n.get("exclusiveMinimum") is True)
                elif key == "maximum":
                    tighter_hi(v, n.get("exclusiveMaximum") is True)
                elif key == "exclusiveMinimum":
                    tighter_lo(v, True)
                else:
                    tighter_hi(v, True)
        return lo, lo_x, hi, hi_x

    def number_symbol(self, conj, integer: bool, excluded=()) -> str | None:
        """One terminal for the numbers (``integer``: integers) within the bounds
        and ``multipleOf`` of the conjunction."""
        lo, lo_x, hi, hi_x = self._num_bounds(conj)
        if excluded:
            return self._number_excluding(conj, integer, excluded, (lo, lo_x, hi, hi_x))
        mult = 1
        float_cap = None
        float_ms = []  # (pointer, m, whether integer texts are exact up to float_cap)
        for p in conj:
            n = self.node(p)
            if not isinstance(n, dict) or "multipleOf" not in n:
                continue
            m = n["multipleOf"]
            if isinstance(m, bool) or not isinstance(m, (int, float)) or m <= 0:
                raise SchemaError("multipleOf must be a positive number", f"{p}/multipleOf")
            if isinstance(m, float) and not m.is_integer():
                # jsonschema tests int(x / m) == x / m in floating point. For m
                # within 2^-54 (relative) of 1/M and an integer x with |x*M| < 2^53,
                # x / m rounds to x*M exactly: integer texts in that range are valid
                big_m = round(1 / m)
                exact = big_m >= 1 and abs(Fraction(m) - Fraction(1, big_m)) * big_m < Fraction(1, 2 ** 54)
                if exact:
                    cap = (2 ** 53 - 1) // big_m
                    float_cap = cap if float_cap is None else min(float_cap, cap)
                float_ms.append((p, m, exact))
                continue
            mult = mult * int(m) // math.gcd(mult, int(m))
        ilo, ihi = integer_bounds(lo, lo_x, hi, hi_x)
        if float_cap is not None:
            ilo = -float_cap if ilo is None else max(ilo, -float_cap)
            ihi = float_cap if ihi is None else min(ihi, float_cap)
        if float_ms:
            # texts with a fraction (and integer texts where the argument above does
            # not hold) are decided value by value as jsonschema decides them, up to
            # a magnitude cap
            ms = tuple(m for _, m, _ in float_ms)
            exact = all(e for _, _, e in float_ms)
            if mult == 1 and all(multiple_digits(m) is not None for m in ms) \
                    and (not exact or not integer):
                rx, _ = float_multiple_regex(ms, lo, lo_x, hi, hi_x, integers=not exact,
                                             fractions=not integer)
                parts = [rx] if rx is not None else []
                if exact:
                    irx = int_range_regex(ilo, ihi)
                    if irx is not None:
                        # "N.0" reads as the same float as "N": as exact, and past
                        # the cap it keeps amounts such as 150000.0
                        if not integer:
                            zeros = max(multiple_digits(m) for m in ms)
                            irx = f"(?:{irx})(?:\\.0{{1,{zeros}}})?"
                        parts.insert(0, irx)
                if not parts:
                    return None
                return self.terminal("|".join(parts), "INT" if integer else "NUMBER")
            for p, m, exact in float_ms:
                if not exact:
                    self.unsupported(f"{p}/multipleOf",
                                     "a non-integer multipleOf (jsonschema decides it in floating point)")
            # texts with a fraction are not decided by their digits: left out
            integer = True
        if float_cap is not None:
            lo = ilo if lo is None else lo
            hi = ihi if hi is None else hi
        parts = []
        if mult > 1:
            rx = self._multiples(ilo, ihi, mult, conj)
            if rx is None:
                return None
            return self.terminal(rx, "INT")
        if integer or lo is not None or hi is not None:
            rx = int_range_regex(ilo, ihi) if (lo is not None or hi is not None) else JSON_INTEGER
            if rx is not None:
                parts.append(rx)
        if integer:
            return self.terminal(parts[0], "INT") if parts else None
        if lo is None and hi is None:
            return self.terminal(JSON_NUMBER, "NUMBER")
        if any(isinstance(v, int) and abs(v) > 2 ** 53 for v in (lo, hi) if v is not None):
            # an integer bound a float cannot hold: only integer texts compare exactly
            return self.terminal("|".join(parts), "NUMBER") if parts else None
        dlo, dlo_x = _decimal_bound(lo, lo_x, +1)
        dhi, dhi_x = _decimal_bound(hi, hi_x, -1)
        frac = decimal_range_regex(dlo, dlo_x, dhi, dhi_x, fraction_required=True)
        if frac is not None:
            parts.append(frac)
        if not parts:
            return None
        return self.terminal("|".join(parts) if len(parts) > 1 else parts[0], "NUMBER")

    def _number_excluding(self, conj, integer, excluded, bounds) -> str | None:
        """Numbers within bounds except some values: the range split around them
        (integers exactly; texts with a fraction stay clear of each point by one
        float step)."""
        if any(isinstance(self.node(p), dict) and "multipleOf" in self.node(p) for p in conj):
            where = next(f"{p}/multipleOf" for p in conj
                         if isinstance(self.node(p), dict) and "multipleOf" in self.node(p))
            self.unsupported(where, "multipleOf together with not: {enum}")
        lo, lo_x, hi, hi_x = bounds
        points = sorted({Fraction(v) for v in excluded if not (isinstance(v, float) and not math.isfinite(v))})
        if len(points) > 200:
            self.unsupported("", "not: {enum} with more than 200 numbers")
            points = []
        cuts = [(lo, lo_x)] + [(float(x) if x.denominator != 1 else int(x), True) for x in points]
        ends = [(float(x) if x.denominator != 1 else int(x), True) for x in points] + [(hi, hi_x)]
        parts = []
        for (a, ax), (b, bx) in zip(cuts, ends):
            if a is not None and b is not None and Fraction(a) > Fraction(b):
                continue
            if lo is not None and a is not None and Fraction(a) < Fraction(lo):
                continue
            if hi is not None and b is not None and Fraction(b) > Fraction(hi):
                continue
            ilo, ihi = integer_bounds(a, ax, b, bx)
            if a is None and b is None:
                rx = JSON_INTEGER
            else:
                rx = int_range_regex(ilo, ihi)
            if rx is not None:
                parts.append(rx)
            if not integer:
                if a is None and b is None:
                    parts.append(JSON_NUMBER)
                    continue
                dlo, dlo_x = _decimal_bound(a, ax, +1)
                dhi, dhi_x = _decimal_bound(b, bx, -1)
                if dlo is not None and dhi is not None and dlo > dhi:
                    continue
                frac = decimal_range_regex(dlo, dlo_x, dhi, dhi_x, fraction_required=True)
                if frac is not None:
                    parts.append(frac)
        if not parts:
            return None
        return self.terminal("|".join(parts), "NUMBER")

    def _multiples(self, ilo, ihi, m, conj) -> str | None:
        if ilo is not None and ihi is not None and (ihi - ilo) // m <= 2000:
            first = -(-ilo // m) * m
            vals = list(range(first, ihi + 1, m))
            if not vals:
                return None
            pos = [str(v) for v in vals if v >= 0]
            neg = [str(-v) for v in vals if v < 0]
            parts = []
            if pos:
                parts.append(_trie_alt(pos))
            if neg:
                parts.append("-" + _trie_alt(neg) if len(neg) == 1 else "-(?:" + _trie_alt(neg) + ")")
            return "|".join(parts)
        nat = nat_multiple_regex(m)
        if nat is not None and ihi is None and (ilo is None or ilo <= m):
            parts = [nat]
            if ilo is None or ilo <= 0:
                parts.append("0")
            if ilo is None:
                parts.append("-" + f"(?:{nat})")
            return "|".join(parts)
        where = next((f"{p}/multipleOf" for p in conj
                      if isinstance(self.node(p), dict) and "multipleOf" in self.node(p)), "")
        self.unsupported(where, f"multipleOf {m} with these bounds")
        return int_range_regex(ilo, ihi) if (ilo is not None or ihi is not None) else JSON_INTEGER

    # -- strings ---------------------------------------------------------------------

    def _len_bounds(self, conj, kmin, kmax):
        lo, hi = 0, None
        for p in conj:
            n = self.node(p)
            if not isinstance(n, dict):
                continue
            v = n.get(kmin)
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                lo = max(lo, math.ceil(v))
            v = n.get(kmax)
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                hi = math.floor(v) if hi is None else min(hi, math.floor(v))
        return lo, hi

    def string_symbol(self, conj, excluded=()) -> str | None:
        """One terminal for the strings of the conjunction (less the ``excluded``
        ones)."""
        lo, hi = self._len_bounds(conj, "minLength", "maxLength")
        if excluded:
            constrained = any(isinstance(self.node(p), dict) and _STRING_KW & set(self.node(p))
                              for p in conj)
            if constrained:
                self.unsupported("", "not: {enum} together with string constraints")
            else:
                return self.exclusion_terminal(excluded, "", "STRING")
        if hi is not None and hi > self.max_string_length:
            hi = max(self.max_string_length, lo)
        if lo > self.max_string_length:
            raise GrammarTooComplexError(
                f"minLength {lo} exceeds the supported {self.max_string_length}")
        if hi is not None and lo > hi:
            return None
        patterns, formats = [], []
        for p in conj:
            n = self.node(p)
            if not isinstance(n, dict):
                continue
            if isinstance(n.get("pattern"), str) and n["pattern"] not in [x for x, _ in patterns]:
                patterns.append((n["pattern"], f"{p}/pattern"))
            if isinstance(n.get("format"), str):
                formats.append(n["format"])
        content = None
        if patterns:
            for pat, where in patterns[1:]:
                self.unsupported(where, "two different patterns on one string")
            pat, where = patterns[0]
            try:
                content = translate_pattern(pat, lo, hi)
            except PatternUnsupported as e:
                self.unsupported(where, f"pattern {pat!r}: {e}")
            except re.error as e:
                self.unsupported(where, f"pattern {pat!r} is not a Python regex: {e}")
            else:
                if content is None:
                    return None
        if content is None and lo == 0 and hi is None:
            for f in formats:
                if f in FORMATS:
                    content = FORMATS[f]
                    break
        if content is None:
            if lo == 0 and hi is None:
                content = JSON_CHAR_ANY + "*"
            else:
                rng = "{%d,}" % lo if hi is None else ("{%d}" % lo if lo == hi else "{%d,%d}" % (lo, hi))
                content = JSON_CODEPOINT + rng
        return self.terminal('"' + content + '"', "STRING")

    # -- arrays ------------------------------------------------------------------------

    def array_symbol(self, conj) -> str | None:
        """A rule for the arrays of the conjunction."""
        P = self.punct
        prefixes, rests = [], []
        max_len = None
        unique = False
        for p in conj:
            n = self.node(p)
            if not isinstance(n, dict):
                continue
            items = n.get("items")
            if isinstance(items, list):
                prefix = [f"{p}/items/{i}" for i in range(len(items))]
                rest = f"{p}/additionalItems" if "additionalItems" in n else None
            else:
                prefix = [f"{p}/prefixItems/{i}" for i in range(len(n.get("prefixItems", [])))]
                rest = f"{p}/items" if "items" in n else None
            if rest is None and n.get("unevaluatedItems") is False:
                rest = "<false>"
            elif rest is None and "unevaluatedItems" in n and n["unevaluatedItems"] is not True:
                rest = f"{p}/unevaluatedItems"
            if rest is not None and self.node(rest) is False:
                max_len = len(prefix) if max_len is None else min(max_len, len(prefix))
            prefixes.append(prefix)
            rests.append(rest)
            if n.get("uniqueItems") is True:
                unique = f"{p}/uniqueItems"
        lo, hi = self._len_bounds(conj, "minItems", "maxItems")
        if max_len is not None:
            hi = max_len if hi is None else min(hi, max_len)
        if hi is not None and hi > self.max_array_length:
            hi = max(self.max_array_length, lo)
        if hi is not None and lo > hi:
            return None
        if unique and (hi is None or hi > 1):
            self.unsupported(unique, "uniqueItems: true")
        if lo > self.max_array_length:
            raise GrammarTooComplexError(f"minItems {lo} exceeds the supported {self.max_array_length}")
        k = max((len(x) for x in prefixes), default=0)

        def elem(i):
            pcs = []
            for prefix, rest in zip(prefixes, rests):
                if i < len(prefix):
                    pcs.append(prefix[i])
                elif rest is not None:
                    pcs.append(rest)
            return self.value_symbol(tuple(pcs))

        if k == 0 and lo == 0 and hi is None and self._is_any(elem(0)):
            self.any_value()
            return "any_array"  # {"type": "array"}: the shared any-array rule

        name = self.new_rule("array")
        # tails[i]: the elements from index i on, each after a comma; past
        # ``steady`` (unbounded arrays) every element has the same schema
        steady = max(k, lo, 1)
        tails: dict[int, str] = {}

        def tail_item(i):
            if hi is not None and i >= hi:
                return []
            if hi is None and i >= steady:
                return [("star", (P["COMMA"], elem(i)))]
            return [("sym" if i < lo else "opt", tails[i])]

        top = (steady if hi is None else hi) - 1
        for i in range(top, 0, -1):
            t = self.new_rule(f"{name}_t{i}")
            self.rules[t] = [_Alt([("sym", P["COMMA"]), ("sym", elem(i))] + tail_item(i + 1))]
            tails[i] = t
        limit = hi
        alts = []
        if limit is None or limit > 0:
            body = [("sym", P["LBRACK"]), ("sym", elem(0))] + tail_item(1)
            body.append(("sym", P["RBRACK"]))
            alts.append(_Alt(body))
        if lo == 0:
            alts.append(_Alt([("sym", P["EMPTY_ARR"])]))
        self.rules[name] = alts
        return name

    # -- objects -----------------------------------------------------------------------

    def _object_view(self, conj, quiet=False):
        """The merged object constraints of a conjunction, or ``None`` when no object
        satisfies them."""
        view = _ObjectView()
        view.notall = [frozenset(_marker_names(p)) for p in conj if p.startswith("<notall:")]
        nodes = [(p, self.node(p)) for p in conj
                 if isinstance(self.node(p), dict) and not p.startswith("<notall:")]
        names: dict[str, None] = {}
        for p, n in nodes:
            for k in n.get("properties", {}) or {}:
                names.setdefault(k, None)
        for p, n in nodes:
            req = n.get("required", [])
            if isinstance(req, list):
                for k in req:
                    if isinstance(k, str):
                        names.setdefault(k, None)
                        view.required.add(k)
        for name in names:
            pcs = []
            for p, n in nodes:
                props = n.get("properties", {}) or {}
                pats = n.get("patternProperties", {}) or {}
                matched = []
                for pat in pats:
                    if _search(pat, name):
                        matched.append(f"{p}/patternProperties/{_escape_token(pat)}")
                if name in props:
                    pcs.append(f"{p}/properties/{_escape_token(name)}")
                    pcs.extend(matched)
                elif matched:
                    pcs.extend(matched)
                elif "additionalProperties" in n:
                    pcs.append(f"{p}/additionalProperties")
                elif "unevaluatedProperties" in n:
                    pcs.append(f"{p}/unevaluatedProperties")
            if any(self.node(x) is False for x in pcs):
                if name in view.required:
                    return None
                continue
            view.pieces[name] = tuple(pcs)
        view.order = list(view.pieces)
        # extra members
        pat_nodes = [(p, n) for p, n in nodes if n.get("patternProperties")]
        view.extra_pieces = []
        closed = False
        for p, n in nodes:
            for key in ("additionalProperties", "unevaluatedProperties"):
                if key in n:
                    if self.node(f"{p}/{key}") is False:
                        if not n.get("patternProperties"):
                            closed = True
                    elif key == "additionalProperties" or "additionalProperties" not in n:
                        view.extra_pieces.append(f"{p}/{key}")
                    break
        if closed:
            view.extra = None
        elif not pat_nodes:
            view.extra = "any"
        elif len(pat_nodes) == 1:
            p, n = pat_nodes[0]
            view.extra = "patterns"
            view.patterns = [(pat, f"{p}/patternProperties/{_escape_token(pat)}")
                             for pat in n["patternProperties"]]
            view.pattern_pieces = [x for _, x in view.patterns]
            view.extra_pieces = [x for x in view.extra_pieces
                                 if not x.startswith(p + "/")]
        else:
            if not quiet:
                self.unsupported(f"{pat_nodes[1][0]}/patternProperties",
                                 "patternProperties in two merged schemas")
            view.extra = None
        return view

    def object_symbol(self, conj) -> str | None:
        """A rule for the objects of the conjunction."""
        view = self._object_view(conj)
        if view is None:
            return None
        # presence constraints between optional members: ("notall", names) from
        # ``not: {required}`` and exclusive oneOf branches, ("implies", name, names)
        # from dependencies
        cons = [("notall", frozenset(names)) for names in view.notall]
        for p in conj:
            n = self.node(p)
            if not isinstance(n, dict):
                continue
            if "propertyNames" in n and n["propertyNames"] not in (True, {}):
                for name in list(view.pieces):
                    if not self._accepts(name, f"{p}/propertyNames"):
                        if name in view.required:
                            return None
                        del view.pieces[name]
                view.order = [x for x in view.order if x in view.pieces]
                if view.extra is not None:
                    self.unsupported(f"{p}/propertyNames",
                                     "propertyNames with additional properties allowed")
            for key in ("dependentRequired", "dependencies"):
                deps = n.get(key)
                if not isinstance(deps, dict):
                    continue
                for trig, need in deps.items():
                    if not isinstance(need, list):
                        if _node_types(n) == {"object"}:
                            continue  # see flatten()
                        if trig in view.pieces or view.extra is not None:
                            self.unsupported(f"{p}/{key}/{_escape_token(trig)}",
                                             f"a schema-valued {key}")
                        continue
                    for x in need:
                        if x not in view.pieces and view.extra == "any":
                            view.pieces[x] = tuple(view.extra_pieces)
                            view.order.append(x)
                    cons.append(("implies", trig, frozenset(need)))
        order = view.order
        names_in_cons = set()
        for c in cons:
            names_in_cons |= c[1] if c[0] == "notall" else {c[1]} | c[2]
        # a constrained name that is not declared is kept out of extra keys
        hidden = sorted(x for x in names_in_cons if x not in view.pieces)
        involved = [x for x in order if x in names_in_cons and x not in view.required]
        min_p, max_p = self._len_bounds(conj, "minProperties", "maxProperties")
        if (not order and not hidden and not cons and view.extra == "any" and min_p == 0
                and max_p is None and self._is_any(self.value_symbol(tuple(view.extra_pieces)))):
            # {"type": "object"}: the shared any-object rule (its keys are any
            # JSON string, escapes included: no name needs excluding)
            self.any_value()
            return "any_object"
        # min/maxProperties that the required members do not settle, on an object
        # without additional members: every subset of the optional members is an
        # alternative with an exact count, kept when the count is within bounds
        optional = [x for x in order if x not in view.required]
        counted = (view.extra is None and len(optional) <= 8
                   and (min_p > len(set(view.required) & set(order))
                        or (max_p is not None and max_p < len(order))))
        if counted:
            involved = optional
        if len(involved) > 8:
            self.unsupported("", "presence constraints over more than 8 optional properties")
            cons, involved = [], []
        members = {name: (self.key_terminal(name), self.value_symbol(view.pieces[name]))
                   for name in order}
        extra = self.extra_member(view, list(order) + hidden)
        name = self.new_rule("object")
        alts = []
        for mask in range(1 << len(involved)):
            present = {x for i, x in enumerate(involved) if mask >> i & 1}
            absent = set(involved) - present
            have = (set(view.required) & set(order)) | present
            ok = True
            for c in cons:
                if c[0] == "notall" and c[1] <= have:
                    ok = False
                if c[0] == "implies" and c[1] in have and not c[2] <= have:
                    ok = False
            if not ok:
                continue
            sub_order = [x for x in order if x not in absent]
            required = (set(view.required) | present) & set(sub_order)
            if any(x in view.required for x in absent):
                continue
            if counted:
                if len(sub_order) < min_p or (max_p is not None and len(sub_order) > max_p):
                    continue
                alts.extend(self._object_chain(name, sub_order, required, members, extra,
                                               0, None, conj, view))
                continue
            alts.extend(self._object_chain(name, sub_order, required, members, extra,
                                           min_p, max_p, conj, view))
        self.rules[name] = alts
        return name

    def _object_chain(self, name, order, required, members, extra, min_p, max_p, conj,
                      view) -> list[_Alt]:
        """Alternatives for objects with the members of ``order`` (in that order,
        those in ``required`` mandatory) then any number of extra members."""
        P = self.punct
        n_req = sum(1 for x in order if x in required)
        allow_empty = n_req == 0
        if min_p > n_req:
            if min_p == 1:
                allow_empty = False
            else:
                where = next(f"{p}/minProperties" for p in conj
                             if isinstance(self.node(p), dict) and "minProperties" in self.node(p))
                self.unsupported(where, f"minProperties {min_p} above the required count")
        if max_p is not None:
            if max_p < n_req:
                return []
            if extra is not None or max_p < len(order):
                where = next(f"{p}/maxProperties" for p in conj
                             if isinstance(self.node(p), dict) and "maxProperties" in self.node(p))
                self.unsupported(where, f"maxProperties {max_p} with optional members")
        n = len(order)
        can_empty = [False] * (n + 1)
        can_empty[n] = True
        for i in range(n - 1, -1, -1):
            can_empty[i] = can_empty[i + 1] and order[i] not in required
        rest: dict[int, str | None] = {}
        first: dict[int, str | None] = {}
        if extra is not None:
            r = self.new_rule(f"{name}_r")
            self.rules[r] = [_Alt([("sym", P["COMMA"]), ("sym", extra),
                                   ("star", (P["COMMA"], extra))])]
            f = self.new_rule(f"{name}_f")
            self.rules[f] = [_Alt([("sym", extra), ("star", (P["COMMA"], extra))])]
            rest[n], first[n] = r, f
        else:
            rest[n] = first[n] = None

        def tail(i):
            if rest[i] is None:
                return []
            return [("opt" if can_empty[i] else "sym", rest[i])]

        for i in range(n - 1, -1, -1):
            key, val = members[order[i]]
            req = order[i] in required
            r = self.new_rule(f"{name}_r")
            alts = [_Alt([("sym", P["COMMA"]), ("sym", key), ("sym", val)] + tail(i + 1))]
            if not req and rest[i + 1] is not None:
                alts.append(_Alt([("sym", rest[i + 1])]))
            self.rules[r] = alts
            rest[i] = r
            f = self.new_rule(f"{name}_f")
            alts = [_Alt([("sym", key), ("sym", val)] + tail(i + 1))]
            if not req and first[i + 1] is not None:
                alts.append(_Alt([("sym", first[i + 1])]))
            self.rules[f] = alts
            first[i] = f
        alts = []
        if first[0] is not None:
            alts.append(_Alt([("sym", P["LBRACE"]), ("sym", first[0]), ("sym", P["RBRACE"])]))
        if can_empty[0] and allow_empty:
            alts.append(_Alt([("sym", P["EMPTY_OBJ"])]))
        return alts

    def key_terminal(self, name: str) -> str:
        """The terminal for one member name with its colon."""
        text = _json_str(name)
        return self.terminal(_lit(text) + self.ws + ":" + self.ws, "KEY",
                             None if self.ws else text + ":")

    def extra_member(self, view, declared) -> str | None:
        """A rule for one additional member (key and value), or ``None``."""
        if view.extra is None:
            return None
        if view.extra == "any":
            key = self.exclusion_terminal(declared, self.ws + ":" + self.ws, "KEY")
            if key is None:
                return None
            val = self.value_symbol(tuple(view.extra_pieces))
            r = self.new_rule("member")
            self.rules[r] = [_Alt([("sym", key), ("sym", val)])]
            return r
        alts = []
        # a name matching several patterns gets all their schemas: each member value
        # satisfies every pattern schema not proven disjoint from its own pattern
        for pat, where in view.patterns:
            pcs = [w for p2, w in view.patterns if w == where or not patterns_disjoint(pat, p2)]
            val = self.value_symbol(tuple(pcs) + tuple(view.extra_pieces))
            bad = [d for d in declared if _search(pat, d)]
            star = pattern_class_star(pat) if bad else None
            if bad and (matches_everything(pat) or star is not None):
                # the pattern's names but the declared ones: a trie over the alphabet
                tail = self.ws + ":" + self.ws
                if star is None:
                    key = self.exclusion_terminal(declared, tail, "KEY")
                else:
                    key = self.exclusion_terminal(bad, tail, "KEY", star[0], star[1])
                if key is not None:
                    alts.append(_Alt([("sym", key), ("sym", val)]))
                continue
            if bad:
                self.unsupported(where, f"patternProperties {pat!r} also matches the "
                                 f"declared property {bad[0]!r}")
                continue
            try:
                content = translate_pattern(pat)
            except PatternUnsupported as e:
                self.unsupported(where, f"pattern {pat!r}: {e}")
                continue
            except re.error as e:
                self.unsupported(where, f"pattern {pat!r} is not a Python regex: {e}")
                continue
            if content is None:
                continue
            key = self.terminal('"' + content + '"' + self.ws + ":" + self.ws, "KEY")
            alts.append(_Alt([("sym", key), ("sym", val)]))
        if not alts:
            return None
        r = self.new_rule("member")
        self.rules[r] = alts
        return r

    # -- output --------------------------------------------------------------------------

    def _pruned(self, start: str):
        """``(rules, terminals used)`` with unproductive and unreachable rules
        removed (rules in the order they were made). Linear in the grammar's
        size."""
        rules, terms = self.rules, self.terminal_defs
        productive, every = self._productive()
        if start not in productive:
            why = ""
            if self.ignored:
                why = (" that Trellis can enforce (strict=False set aside what it could not, "
                       "at " + ", ".join(p or "/" for p in self.ignored) + ")")
            raise UnsupportedSchemaError("the schema admits no JSON value" + why, "")
        if every:
            return self._reachable(start, rules)
        # drop the alternatives that need an unproductive symbol (and the
        # optional or repeated parts made of them), keeping what is reachable
        found: dict[str, list] = {}
        todo = [start]
        while todo:
            x = todo.pop()
            if x in found:
                continue
            out = found[x] = []
            for alt in rules[x]:
                new = []
                for kind, sym in alt:
                    if kind == "star":
                        if all(s in productive for s in sym):
                            new.append((kind, sym))
                    elif sym in productive:
                        new.append((kind, sym))
                    elif kind == "sym":
                        break
                else:
                    out.append(new)
                    for kind, sym in new:
                        for y in (sym if kind == "star" else (sym,)):
                            if y not in terms and y not in found:
                                todo.append(y)
        return self._reachable(start, found)

    def _reachable(self, start: str, rules: dict):
        """The rules of ``rules`` (all productive) reachable from ``start``, in
        the order they were made, each read through unit rules: a rule that is
        one symbol (a property's value_N -> NUMBER, chains of them through $ref
        and allOf) is replaced by that symbol, for fewer Earley items at every
        step and less to build. One walk; when every rule is productive,
        ``rules`` is the translator's own."""
        terms = self.terminal_defs

        def resolve(x: str) -> str:
            # a unit rule (one alternative of one symbol) is its symbol
            while x != start:
                alts = rules.get(x)
                if alts is None or len(alts) != 1:
                    break
                alt = alts[0]
                if len(alt) != 1 or alt[0][0] != "sym":
                    break
                x = alt[0][1]
            return x

        kept: dict[str, list] = {}
        used_terms: set[str] = set()
        todo = [start]
        while todo:
            x = todo.pop()
            if x in kept:
                continue
            out = kept[x] = []
            for alt in rules[x]:
                new = []
                for kind, sym in alt:
                    if kind == "star":
                        sym = tuple(y if y in terms else resolve(y) for y in sym)
                        for y in sym:
                            if y in terms:
                                used_terms.add(y)
                            elif y not in kept:
                                todo.append(y)
                    elif sym in terms:
                        used_terms.add(sym)
                    else:
                        sym = resolve(sym)
                        if sym in terms:
                            used_terms.add(sym)
                        elif sym not in kept:
                            todo.append(sym)
                    new.append((kind, sym))
                out.append(new)
        cleaned = {name: kept[name] for name in self.rules if name in kept}
        return cleaned, used_terms

    def _productive(self) -> tuple[set, bool]:
        """The productive symbols (those deriving some terminal string), and
        whether every rule is."""
        rules, terms = self.rules, self.terminal_defs
        productive: set[str] = set(terms)
        # rules are mostly made after the rules they use: one pass in that order
        # settles every rule of a typical schema, without the worklist's
        # bookkeeping (~40 us cold on a median MaskBench schema)
        for name, alts in rules.items():
            for alt in alts:
                for kind, sym in alt:
                    if kind == "sym" and sym not in productive:
                        break
                else:
                    productive.add(name)
                    break
            else:
                break
        else:
            return productive, True
        productive = set(terms)
        waiting: dict[str, list] = {}  # symbol -> counters of the alternatives needing it
        todo = []
        for name, alts in rules.items():
            for alt in alts:
                missing = [sym for kind, sym in alt if kind == "sym" and sym not in terms]
                if not missing:
                    todo.append(name)
                    break
                counter = [len(missing), name]
                for m in missing:
                    waiting.setdefault(m, []).append(counter)
        while todo:
            x = todo.pop()
            if x in productive:
                continue
            productive.add(x)
            for counter in waiting.pop(x, ()):
                counter[0] -= 1
                if counter[0] == 0:
                    todo.append(counter[1])
        return productive, len(productive) == len(terms) + len(rules)

    def render(self, start: str) -> str:
        """The grammar text, unproductive and unreachable rules removed."""
        cleaned, used_terms = self._pruned(start)
        lines = [f"start: {start}" if start != "start" else ""]
        for name, alts in cleaned.items():
            texts = []
            for alt in alts:
                parts = []
                for kind, sym in alt:
                    if kind == "sym":
                        parts.append(sym)
                    elif kind == "opt":
                        parts.append(sym + "?")
                    else:
                        parts.append("(" + " ".join(sym) + ")*")
                texts.append(" ".join(parts))
            lines.append(f"{name}: " + "\n    | ".join(texts))
        for tname, rx in self.terminal_defs.items():
            if tname in used_terms:
                lines.append(f"{tname}: /{escape_lark_regex(rx)}/")
        text = "\n".join(x for x in lines if x) + "\n"
        if len(text) > MAX_GRAMMAR_CHARS:
            raise GrammarTooComplexError(
                f"the grammar text would be {len(text)} characters (limit {MAX_GRAMMAR_CHARS})")
        return text

    def warn_ignored(self, caller: str) -> None:
        """One warning (blamed on ``caller``'s caller) listing the keywords a
        ``strict=False`` translation ignored."""
        if self.ignored:
            warnings.warn(f"{caller} ignored keywords it cannot enforce at: "
                          + ", ".join(p or "/" for p in self.ignored), stacklevel=3)

    def to_ir(self, start: str) -> GrammarIR:
        """The grammar as :class:`GrammarIR`, without the detour through text:
        the same language as loading :meth:`render`'s text (``x?`` and ``(...)*``
        become helper rules as the loader makes them), ~0.6 ms less on a median
        MaskBench schema. Terminal patterns are the regexes as written, not as
        read back from Lark's escaping (the same regular languages)."""
        cleaned, used_terms = self._pruned(start)
        literal_of = self.literal_of
        terminals = [Terminal(name, rx, 0, literal_of.get(name))
                     for name, rx in self.terminal_defs.items() if name in used_terms]
        n_t = len(terminals)
        t_index = {t.name: i for i, t in enumerate(terminals)}
        names = [start] + [n for n in cleaned if n != start]
        index = {n: n_t + i for i, n in enumerate(names)}
        rules: list = []
        size = sum(len(t.pattern) for t in terminals)

        def sym(x: str) -> int:
            return t_index[x] if x in t_index else index[x]

        def aux(kind: str) -> int:
            names.append(f"__{kind}_{len(names)}")
            return n_t + len(names) - 1

        for name in names[:len(index)]:
            lhs = index[name] - n_t
            for alt in cleaned[name]:
                seq = []
                for kind, x in alt:
                    if kind == "sym":
                        seq.append(sym(x))
                    elif kind == "opt":
                        h = aux("opt")
                        rules += [(h - n_t, (sym(x),)), (h - n_t, ())]
                        seq.append(h)
                    else:
                        h = aux("star")
                        rules += [(h - n_t, ()), (h - n_t, (h,) + tuple(sym(y) for y in x))]
                        seq.append(h)
                size += 8 * len(seq) + 4
                rules.append((lhs, tuple(seq)))
        if size > MAX_GRAMMAR_CHARS:
            raise GrammarTooComplexError(
                f"the grammar would be about {size} characters as text (limit {MAX_GRAMMAR_CHARS})")
        # every rule kept by _pruned is productive, and so are the helpers
        return GrammarIR(terminals, names, rules, 0, productive=True)


class _ObjectView:
    """Merged object keywords of a conjunction: declared members in order, their
    schemas, required names, and what additional members may be."""

    def __init__(self):
        self.pieces: dict[str, tuple] = {}
        self.order: list[str] = []
        self.required: set[str] = set()
        self.extra = "any"  # "any" | "patterns" | None
        self.extra_pieces: list[str] = []
        self.patterns: list = []
        self.pattern_pieces: list[str] = []
        self.notall: list[frozenset] = []

    def extra_allowed_for(self, name: str) -> bool:
        if self.extra == "any":
            return True
        if self.extra == "patterns":
            return any(_search(p, name) for p, _ in self.patterns)
        return False


_IGNORABLE = {"title", "description", "examples", "example", "default", "$schema", "$id",
              "id", "$comment", "deprecated", "readOnly", "writeOnly", "$defs",
              "definitions", "$anchor", "contentEncoding", "contentMediaType", "nullable"}


#: keys of a node that constrain nothing once flattened (see _Compiler._unconstrained)
_UNCONSTRAINED_KEYS = frozenset(_IGNORABLE | {"$ref", "allOf", "anyOf", "oneOf"})


def _is_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _not_required_sets(neg):
    """The name sets of ``not: {required: S}`` or ``not: {anyOf: [{required: S},
    ...]}``, else ``None``."""
    if not isinstance(neg, dict):
        return None
    keys = set(neg) - _IGNORABLE
    if keys == {"required"} and isinstance(neg["required"], list) and neg["required"]:
        return [neg["required"]]
    if keys == {"allOf"} and isinstance(neg["allOf"], list) and neg["allOf"]:
        names = []
        for b in neg["allOf"]:
            sub = _not_required_sets(b)
            if sub is None or len(sub) != 1:
                return None
            names.extend(sub[0])
        return [names]
    if keys == {"anyOf"} and isinstance(neg["anyOf"], list) and neg["anyOf"]:
        out = []
        for b in neg["anyOf"]:
            sub = _not_required_sets(b)
            if sub is None or len(sub) != 1:
                return None
            out.extend(sub)
        return out
    return None


def _marker(names) -> str:
    """A pseudo-pointer standing for "an object missing one of ``names``"."""
    return "<notall:" + json.dumps(sorted(names), ensure_ascii=False) + ">"


def _marker_names(ptr: str) -> list[str]:
    return json.loads(ptr[len("<notall:"):-1])


def _search(pattern: str, text: str) -> bool:
    """``re.search`` as jsonschema runs it (an invalid pattern counts as a match,
    the cautious answer everywhere this is used)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return re.search(pattern, text) is not None
    except re.error:
        return True


def _encodable(text: str) -> bool:
    """Whether ``text`` has a UTF-8 encoding (no lone surrogate)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _lit_char(o: int) -> str:
    c = chr(o)
    if c.isascii() and c.isalnum():
        return c
    if c == " ":
        return "\\x20"
    if 0x20 < o < 0x7F:
        return "\\" + c
    if o < 0x100:
        return "\\x%02x" % o
    if o < 0x10000:
        return "\\u%04x" % o
    return "\\U%08x" % o


_LIT_ASCII = {o: _lit_char(o) for o in range(128)}


def _lit(text: str) -> str:
    """A literal string as a regex that survives Lark's escaping."""
    if text.isascii():  # member names, mostly: one translate, not a loop
        return text.translate(_LIT_ASCII)
    return "".join(map(_lit_char, map(ord, text)))


_MAX_TRIE = 20000


@functools.lru_cache(maxsize=4096)
def _encoded_char(c: str) -> str:
    return encoded_class([(ord(c), ord(c))])


@functools.lru_cache(maxsize=4096)
def _deviation_class(alphabet: tuple, kids: tuple, raw_only: bool) -> str | None:
    """The characters of ``alphabet`` but ``kids`` (code points), canonically
    encoded; ``raw_only``: only those written as themselves (no escape)."""
    rest = iv_intersect(list(alphabet), iv_complement([(k, k) for k in kids]))
    if not raw_only:
        return encoded_class(rest)
    raw = iv_intersect(rest, _RAW_OK)
    return class_re(raw) if raw else None


_EXCLUSION_IDS: dict[tuple, str] = {}
_EXCLUSION_COUNTER = itertools.count()


def _exclusion_id(base: str, prefixes: tuple) -> str:
    """A process-wide id of the language "``base`` less ``prefixes``": the stand-in
    terminal's pattern, which keys the terminal automata cached across grammars.
    Ids are never reused (forgetting a set only costs a cache miss), so no two
    sets share one; a dict, not a digest of the set (hashlib's first call cost
    ~17 us of a cold compile)."""
    key = (base, prefixes)
    hit = _EXCLUSION_IDS.get(key)
    if hit is None:
        if len(_EXCLUSION_IDS) >= 4096:
            _EXCLUSION_IDS.clear()
        hit = _EXCLUSION_IDS[key] = str(next(_EXCLUSION_COUNTER))
    return hit


#: ``json.dumps(s, ensure_ascii=False)`` for a string ``s``: the C encoder json.dumps
#: itself ends in, without building a JSONEncoder per call (a compile writes one
#: per member name; the cold first json.dumps cost ~25 us of a median compile)
_json_str = json.encoder.encode_basestring


def _json_bytes(name: str) -> bytes | None:
    """``name`` as a canonical JSON string with its quotes, in UTF-8 (the encoding
    ``encoded_class`` allows); ``None`` for a lone surrogate, which no canonical
    encoding spells."""
    try:
        return _json_str(name).encode("utf-8")
    except UnicodeEncodeError:
        return None


def _trie_size(names) -> int:
    """Number of nodes in the trie of ``names`` (without the root)."""
    return len({n[:i] for n in names for i in range(1, len(n) + 1)})


def _not_in_set(names, alphabet=None, min_len: int = 0) -> str | None:
    """A regex for the canonical encodings of every string not in ``names``
    (``alphabet``: only strings over these code-point intervals, which must hold
    every name; at least ``min_len`` (0 or 1) characters); ``None`` when the set
    is too large to exclude (then no extra key is allowed, which is sound).

    A string not in the set either spells a trie path that ends at no name
    (``exact``), or leaves the trie with a character that no name continues with
    and then goes on freely (``deviate`` + any*). The free tail is written once,
    not once per trie node, and so are the escaped characters a deviation may
    start with when no name contains one: the regex was ~6x longer, and parsing
    it was most of the compile time of a typical object schema."""
    if alphabet is None:
        alphabet = [(0, 0x10FFFF)]
    any_char = encoded_class(alphabet)
    if any_char is None:
        return None
    trie: dict = {}
    count = 0
    for name in names:
        node = trie
        for c in name:
            if c not in node:
                node[c] = {}
                count += 1
            node = node[c]
        node[None] = {}
    if count > _MAX_TRIE:
        return None
    if not trie:
        return any_char + ("+" if min_len else "*")
    escaped = iv_intersect(iv_norm(alphabet), _NEEDS_ESCAPE)
    # deviations by an escaped character are the same at every node unless some
    # name has such a character (then each node's deviations are written in full)
    plain_names = not any(iv_intersect([(ord(c), ord(c)) for c in set("".join(names))], _NEEDS_ESCAPE))
    esc_dev = encoded_class(escaped) if escaped and plain_names else None

    def group(alts, optional=False) -> str | None:
        if not alts:
            return "" if optional else None
        body = alts[0] if len(alts) == 1 and not optional else "(?:" + "|".join(alts) + ")"
        return body + "?" if optional else body

    def exact(node, root=False) -> str | None:
        alts = []
        for c in node:
            if c is not None:
                sub = exact(node[c])
                if sub is not None:
                    alts.append(_encoded_char(c) + sub)
        ends_here = None not in node and not (root and min_len > 0)
        if not alts:
            return "" if ends_here else None
        return group(alts, optional=ends_here)

    akey = tuple(map(tuple, iv_norm(alphabet)))

    def deviate(node) -> str | None:
        kids = tuple(sorted(ord(c) for c in node if c is not None))
        other = _deviation_class(akey, kids, esc_dev is not None)
        alts = [other] if other else []
        for c in node:
            if c is not None:
                sub = deviate(node[c])
                if sub is not None:
                    alts.append(_encoded_char(c) + sub)
        return group(alts)

    def paths(node) -> str:
        alts = [_encoded_char(c) + paths(node[c]) for c in node if c is not None]
        return group(alts, optional=True)

    dev = deviate(trie)
    if esc_dev is not None:
        dev = "(?:" + "|".join(x for x in (dev, paths(trie) + esc_dev) if x) + ")"
    free = dev + any_char + "*" if dev else None
    e = exact(trie, root=True)
    if free is None:
        return e
    if e is None:
        return free
    if e == "":  # only the empty string besides the free part
        return "(?:" + free + ")?"
    return "(?:" + e + "|" + free + ")"


def _ranges_disjoint(a, b) -> bool:
    lo1, lx1, hi1, hx1 = a
    lo2, lx2, hi2, hx2 = b

    def below(hi, hx, lo, lx):
        if hi is None or lo is None:
            return False
        return Fraction(hi) < Fraction(lo) or (Fraction(hi) == Fraction(lo) and (hx or lx))

    return below(hi1, hx1, lo2, lx2) or below(hi2, hx2, lo1, lx1)


def _decimal_bound(v, exclusive: bool, direction: int):
    """A decimal bound for texts with a fraction (parsed by Python as floats): an
    inclusive bound ``d`` such that every decimal on the allowed side of ``d``
    parses to a float on the allowed side of ``v`` (rounding is monotone).
    ``direction`` is +1 for a lower bound, -1 for an upper one."""
    if v is None:
        return None, False
    if not exclusive:
        if isinstance(v, int):
            return Decimal(v), False
        return Decimal(repr(float(v))), False
    if v == 0:
        # below 1e-30 nothing is lost in practice, and no underflow to 0.0 occurs
        return Decimal("1e-30") * direction, False
    return Decimal(repr(math.nextafter(float(v), math.inf * direction))), False


def _load_schema(schema):
    if isinstance(schema, (str, bytes)):
        try:
            return json.loads(schema)
        except json.JSONDecodeError as e:
            raise SchemaError(f"the schema is not valid JSON: {e}", "") from e
    if isinstance(schema, type) and hasattr(schema, "model_json_schema"):
        return schema.model_json_schema()
    if isinstance(schema, (dict, bool)):
        return schema
    raise SchemaError(f"a schema must be a dict, a bool, a JSON string or a Pydantic model "
                      f"class, not {type(schema).__name__}", "")


def json_schema_to_lark(schema, *, whitespace: str = "compact",
                        max_whitespace: int = DEFAULT_MAX_WHITESPACE, strict: bool = True,
                        max_string_length: int = MAX_STRING_LENGTH,
                        max_array_length: int = MAX_ARRAY_LENGTH,
                        time_budget: float | None = 30.0) -> str:
    """Translate a JSON Schema (draft 2020-12, 2019-09, 7, 6 or 4) into Lark grammar
    text whose start rule is ``start``.

    Every string the grammar accepts (Earley, scannerless) is a JSON text that
    ``jsonschema`` validates against ``schema`` (format checking off).

    Args:
        schema: a dict (or ``True``/``False``), a JSON string, or a Pydantic model
            class.
        whitespace: ``"compact"`` (no whitespace at all) or ``"flexible"``
            (whitespace around ``{ } [ ] , :``, at most ``max_whitespace``
            characters in a row).
        max_whitespace: the cap for ``"flexible"``.
        strict: refuse keywords that cannot be enforced exactly; with ``False`` they
            are ignored and one warning lists their JSON pointers.
        max_string_length, max_array_length: ``maxLength``/``maxItems`` above these
            are lowered to them (stricter, hence still sound).
        time_budget: seconds the translation may take (``None``: unbounded).

    Raises:
        UnsupportedSchemaError: a keyword cannot be enforced (strict).
        SchemaError: the schema is malformed or a ``$ref`` dangles.
        GrammarTooComplexError: the grammar would exceed a size limit or the
            translation its time budget.
    """
    comp = _translated(schema, None, whitespace=whitespace, max_whitespace=max_whitespace,
                       strict=strict, max_string_length=max_string_length,
                       max_array_length=max_array_length, time_budget=time_budget)
    text = comp.render("start")
    comp.warn_ignored("json_schema_to_lark")
    return text


def _translated(schema, exclusions: dict | None, *, whitespace: str = "compact",
                max_whitespace: int = DEFAULT_MAX_WHITESPACE, strict: bool = True,
                max_string_length: int = MAX_STRING_LENGTH,
                max_array_length: int = MAX_ARRAY_LENGTH,
                time_budget: float | None = 30.0) -> "_Compiler":
    """The translator after it has built the rules of ``schema`` from ``start``;
    ``exclusions`` as for :class:`_Compiler` (``None`` for grammar text)."""
    root = _load_schema(schema)
    deadline = None if time_budget is None else time.perf_counter() + time_budget
    comp = _Compiler(root, strict=strict, whitespace=whitespace, max_whitespace=max_whitespace,
                     max_string_length=max_string_length, max_array_length=max_array_length,
                     deadline=deadline, exclusions=exclusions)
    if root is False:
        raise UnsupportedSchemaError("the schema admits no JSON value", "")
    top = comp.value_symbol(("",))
    comp.rules.setdefault("start", [_Alt([("sym", top)])])
    return comp


_SCHEMA_OPTIONS = ("whitespace", "max_whitespace", "strict", "max_string_length",
                   "max_array_length")


def compile_json_schema(schema, vocab, **options):
    """Compile a JSON Schema into a token-level constraint over ``vocab``.

    ``options`` may hold ``whitespace``, ``max_whitespace``, ``strict``,
    ``max_string_length`` and ``max_array_length`` (see
    :func:`json_schema_to_lark`); the rest are the budgets
    :func:`constrain.cfg.grammar.compile_grammar` takes. ``time_budget`` (seconds,
    default 30) bounds the translation and the grammar compilation together.

    The constraint accepts the language of ``json_schema_to_lark``'s text, built
    without the text: the translator's rules go straight to a ``GrammarIR``, and
    "any key but the declared ones" is an automaton (``GrammarIR.exclusions``).
    """
    schema_opts = {k: options.pop(k) for k in _SCHEMA_OPTIONS if k in options}
    budget = options.pop("time_budget", 30.0)
    t0 = time.perf_counter()
    exclusions: dict = {}
    comp = _translated(schema, exclusions, time_budget=budget, **schema_opts)
    ir = dataclasses.replace(comp.to_ir("start"), exclusions=exclusions)
    comp.warn_ignored("compile_json_schema")
    left = max(0.0, budget - (time.perf_counter() - t0))
    return GrammarConstraint(ir, vocab, source="", time_budget=left, **options)


def order_instance(schema, instance):
    """``instance`` with object members reordered the way the grammar of
    ``schema`` emits them: declared properties in schema order, then the others
    in their original order. Useful to serialise reference outputs (tests,
    benchmarks) in the grammar's order."""
    root = _load_schema(schema)
    comp = _Compiler(root, strict=False, whitespace="compact", max_whitespace=1,
                     max_string_length=MAX_STRING_LENGTH, max_array_length=MAX_ARRAY_LENGTH)

    def reorder(pieces, value, depth=0):
        if depth > 200 or not isinstance(value, (dict, list)):
            return value
        try:
            conjs = comp._flatten_pieces(tuple(p for p in pieces if p != "<true>"))
        except Exception:
            return value
        conj = None
        for c in conjs:
            if all(comp.valid(value, p) for p in c):
                conj = c
                break
        if conj is None:
            conj = conjs[0] if conjs else ()
        if isinstance(value, dict):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                view = comp._object_view(conj, quiet=True)
            if view is None:
                return value
            out = {}
            for name in view.order:
                if name in value:
                    out[name] = reorder(view.pieces[name], value[name], depth + 1)
            for k, v in value.items():
                if k not in out:
                    pcs = []
                    if view.extra == "patterns":
                        pcs = view.pattern_pieces + view.extra_pieces
                    elif view.extra == "any":
                        pcs = view.extra_pieces
                    out[k] = reorder(tuple(pcs), v, depth + 1)
            return out
        # arrays
        out = []
        for i, v in enumerate(value):
            pcs = []
            for p in conj:
                n = comp.node(p)
                if not isinstance(n, dict):
                    continue
                items = n.get("items")
                if isinstance(items, list):
                    if i < len(items):
                        pcs.append(f"{p}/items/{i}")
                    elif "additionalItems" in n:
                        pcs.append(f"{p}/additionalItems")
                else:
                    pre = n.get("prefixItems", [])
                    if i < len(pre):
                        pcs.append(f"{p}/prefixItems/{i}")
                    elif "items" in n:
                        pcs.append(f"{p}/items")
            out.append(reorder(tuple(pcs), v, depth + 1))
        return out

    comp.strict = False
    return reorder(("",), instance)
