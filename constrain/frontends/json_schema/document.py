"""One schema document: loading it, the schema a node reference stands for,
``$id``/``$anchor`` and ``$ref`` resolution, and checking values against nodes
(by the keywords where that is cheap, else by ``jsonschema``)."""

from __future__ import annotations

import json
import re
from urllib.parse import unquote

from constrain.errors import SchemaError
from constrain.frontends.json_schema.diagnostics import Diagnostics
from constrain.frontends.json_schema.keywords import COMBINATORS, COMBINED_ASSERTIONS, has_type, json_equal
from constrain.frontends.json_schema.nodes import NodeRef, NotAll, Pointer

# keywords whose values are data, not schemas: no $id inside them counts
_NOT_SCHEMAS = frozenset(("enum", "const", "default", "examples", "example"))
_MISSING = object()


def load_schema(schema):
    """The schema as a JSON value (``dict`` or ``bool``), from a dict, a bool, JSON
    text or a Pydantic model class.

    Raises:
        SchemaError: not JSON, or none of those.
    """
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


def escape_token(tok: str) -> str:
    """A key as one JSON pointer token (``~`` and ``/`` escaped)."""
    return tok.replace("~", "~0").replace("/", "~1")


def _unescape_token(tok: str) -> str:
    return tok.replace("~1", "/").replace("~0", "~")


def _short(text: str, limit: int = 60) -> str:
    """``text`` cut to ``limit`` characters, for error messages."""
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _json_text(value) -> str:
    try:
        return json.dumps(value)
    except (TypeError, ValueError):
        return repr(value)


class Document:
    """A loaded schema document (``root``), and what is known about its nodes.

    ``diag`` receives what cannot be decided (a node ``jsonschema`` fails on)."""

    def __init__(self, root, diag: Diagnostics):
        self.root = root
        self.diag = diag
        self._nodes: dict = {}
        self._ids: dict[str, str] | None = None  # see _index_ids
        self._resources: list[str] = []
        schema_uri = str(root.get("$schema", "")) if isinstance(root, dict) else ""
        #: drafts 3 to 7: "all other properties in a $ref object MUST be ignored"
        self.ref_ignores_siblings = any(f"draft-0{k}" in schema_uri for k in (3, 4, 6, 7))
        self._validator = None
        self._validator_errors: tuple = ()

    def node(self, ref: NodeRef):
        """The schema a reference stands for (a ``dict`` or a ``bool``).

        Raises:
            SchemaError: a pointer to nothing, or to a value that is no schema.
        """
        hit = self._nodes.get(ref, _MISSING)
        if hit is not _MISSING:
            return hit
        if type(ref) is not str:
            hit = self._nodes[ref] = ref.schema
            return hit
        cur = self.root
        for tok in ref.split("/")[1:]:
            tok = _unescape_token(tok)
            if isinstance(cur, list):
                try:
                    cur = cur[int(tok)]
                except (ValueError, IndexError):
                    raise SchemaError("no such schema", ref) from None
            elif isinstance(cur, dict) and tok in cur:
                cur = cur[tok]
            else:
                raise SchemaError("no such schema", ref)
        if not isinstance(cur, (dict, bool)):
            raise SchemaError(f"a schema must be an object or a boolean, not {type(cur).__name__}",
                              ref)
        self._nodes[ref] = cur
        return cur

    def _index_ids(self) -> None:
        """``_ids``: ``$id``/``$anchor`` values → JSON pointers, for non-pointer
        ``$ref``; ``_resources``: the pointers of nested resources (a schema with
        its own base URI: "#/..." inside them is relative to them). Made on the
        first ``$ref``."""
        ids: dict[str, str] = {}
        resources: list[str] = []
        root = self.root
        schema_uri = str(root.get("$schema", "")) if isinstance(root, dict) else ""
        id_keys = ("$id", "id") if ("draft-04" in schema_uri or "draft-03" in schema_uri) else ("$id",)
        path: list[str] = []  # the pointer is spelled only where an id is found

        def walk(node):
            if isinstance(node, dict):
                if "$id" in node or "id" in node or "$anchor" in node:
                    ptr = "".join("/" + escape_token(k) for k in path)
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

        if isinstance(root, (dict, list)):
            walk(root)
        self._ids, self._resources = ids, resources

    def resolve_ref(self, ref, at: Pointer) -> Pointer:
        """The JSON pointer the ``$ref`` value ``ref`` (found at ``at``) points to.

        Raises:
            SchemaError: not a string, or it resolves to no schema.
        """
        if not isinstance(ref, str):
            raise SchemaError("$ref must be a string", at)
        if self._ids is None:
            self._index_ids()
        ids = self._ids
        target = None
        if ref.startswith("#"):
            frag = unquote(ref[1:])
            base = max((r for r in self._resources if at == r or at.startswith(r + "/")),
                       key=len, default="")
            if frag == "" or frag.startswith("/"):
                target = base + frag
            elif ref in ids:
                target = ids[ref]
        else:
            base, _, frag = ref.partition("#")
            root = self.root
            root_id = root.get("$id", root.get("id")) if isinstance(root, dict) else None
            if isinstance(root_id, str) and base and root_id.rstrip("#").endswith(base):
                target = unquote(frag)
            elif base in ids and (frag == "" or frag.startswith("/")):
                target = ids[base] + unquote(frag)
            elif ref in ids:
                target = ids[ref]
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
            from referencing.exceptions import Unresolvable

            root = self.root
            cls = jsonschema.validators.validator_for(root if isinstance(root, dict) else {},
                                                      default=jsonschema.Draft202012Validator)
            self._validator = cls(root)
            # what jsonschema raises checking a value against a malformed node (it
            # trusts the meta-schema): a keyword value of the wrong JSON type
            # (TypeError, AttributeError, ValueError: multipleOf NaN), a pattern
            # Python cannot compile, an unknown type name, a $ref it cannot
            # resolve, a $ref cycle it follows forever
            self._validator_errors = (TypeError, AttributeError, ValueError, re.error,
                                      jsonschema.exceptions.UnknownType, Unresolvable,
                                      RecursionError)
        return self._validator

    def valid(self, value, ref: NodeRef) -> bool:
        """Whether ``jsonschema`` accepts ``value`` against the schema at ``ref``
        (refs resolved in the whole document).

        When ``jsonschema`` itself fails (a ``pattern`` Python's ``re`` cannot
        compile, a ``$ref`` it cannot resolve), which values the node admits is
        unknown: that is ``diag.unsupported`` at ``ref`` (strict: an
        :class:`UnsupportedSchemaError` that says why; else the value is taken
        as rejected, which can only narrow the language)."""
        if type(ref) is NotAll:
            return ref.admits(value)
        node = self.node(ref)
        if isinstance(node, bool):
            return node
        validator = self.validator
        try:
            return validator.evolve(schema=node).is_valid(value)
        except self._validator_errors as e:
            self.diag.unsupported(ref, f"jsonschema cannot check the value "
                                       f"{_short(_json_text(value))} against this schema "
                                       f"({type(e).__name__}: {_short(str(e))}), so which enum/const "
                                       f"values it admits is unknown")
            return False

    def accepts(self, value, ref: NodeRef) -> bool:
        """:meth:`valid`, decided here for a node that asserts only ``enum``,
        ``const``, ``type`` and ``allOf``/``anyOf``/``oneOf``/``not`` of such
        nodes (jsonschema's validation of an enum value is a scan of the enum,
        and each call evolves a validator); anything else is asked of it."""
        n = self.node(ref)
        if not isinstance(n, dict) or not COMBINED_ASSERTIONS.isdisjoint(n):
            return self.valid(value, ref)
        parts = {}
        for k in COMBINATORS:
            if k in n:
                sub = n[k]
                if k == "not" and not isinstance(sub, (dict, bool)) or (
                        k != "not" and not (isinstance(sub, list) and sub)):
                    return self.valid(value, ref)  # malformed: as jsonschema reads it
                parts[k] = sub
        if "const" in n and not json_equal(value, n["const"]):
            return False
        if "enum" in n:
            if not isinstance(n["enum"], list):
                return self.valid(value, ref)
            if not any(json_equal(value, w) for w in n["enum"]):
                return False
        if "type" in n and not has_type(value, n["type"], self, ref):
            return False
        if "allOf" in parts and not all(
                self.accepts(value, f"{ref}/allOf/{i}") for i in range(len(parts["allOf"]))):
            return False
        if "anyOf" in parts and not any(
                self.accepts(value, f"{ref}/anyOf/{i}") for i in range(len(parts["anyOf"]))):
            return False
        if "oneOf" in parts and sum(
                self.accepts(value, f"{ref}/oneOf/{i}") for i in range(len(parts["oneOf"]))) != 1:
            return False
        return "not" not in parts or not self.accepts(value, f"{ref}/not")
