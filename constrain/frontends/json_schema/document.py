"""One schema document: loading it, the schema a node reference stands for,
``$id``/``$anchor`` and ``$ref`` resolution, and checking values against nodes
(by the keywords where that is cheap, else by ``jsonschema``)."""

from __future__ import annotations

import json
import re
from urllib.parse import quote, unquote, urljoin

from constrain.errors import SchemaError, SchemaTooComplexError, UnsupportedSchemaError
from constrain.frontends.json_schema.diagnostics import Diagnostics
from constrain.frontends.json_schema.dialect import declared_draft, draft_of, keywords_not_in
from constrain.frontends.json_schema.keywords import COMBINATORS, COMBINED_ASSERTIONS, DATA_KEYWORDS, \
    has_type, json_equal
from constrain.frontends.json_schema.legacy import LEGACY, documents_entered_below_root, excluding_holders
from constrain.frontends.json_schema.nodes import NodeRef, NotAll, Pointer
from constrain.frontends.json_schema.wellformed import check_json_value, check_schema, without_keywords

_MISSING = object()
#: the base URI of a document without ``$id`` (RFC 3986 needs one to resolve
#: relative references against; nothing is ever fetched from it)
_DEFAULT_BASE = "https://trellis.invalid/root.json"
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")
#: the URI of the dynamic view ``@d<k>`` (see Document.resolve_dynamic_ref)
_VIEW_URI = "urn:trellis:dynamic-scope:%d"
#: the most dynamic views one document may have (each is translated apart)
MAX_DYNAMIC_VIEWS = 256


def _split_fragment(uri: str) -> tuple[str, str]:
    base, _, frag = uri.partition("#")
    return base, frag


def _strip_fragment(uri: str) -> str:
    return uri.partition("#")[0]


def join_uri(base: str, ref: str) -> str:
    """``ref`` resolved against ``base`` (RFC 3986), URNs included: a reference
    with a scheme is absolute, a bare fragment keeps ``base``'s document."""
    if _SCHEME.match(ref):
        return ref
    if ref.startswith("#") or ref == "":
        return _strip_fragment(base) + ref
    if base.startswith("urn:"):
        return ref  # a URN has no path to resolve against: only absolute refs find it
    return urljoin(base, ref)


def load_schema(schema):
    """The schema as a JSON value (``dict`` or ``bool``), from a dict, a bool, JSON
    text or a Pydantic model class (its objects closed where the model ignores
    unknown fields, its default: see :mod:`constrain.frontends.python_types`).

    Raises:
        SchemaError: not JSON, or none of those.
    """
    if isinstance(schema, (str, bytes)):
        return read_json_text(schema, "schema")
    if isinstance(schema, type) and hasattr(schema, "model_json_schema"):
        # closed where the model ignores unknown fields (see python_types)
        from constrain.frontends.python_types import type_schema

        return type_schema(schema, closed=True)
    if isinstance(schema, (dict, bool)):
        # a Python object may hold what JSON text cannot: sharing, cycles,
        # sets, NaN (found here, before a pass reads it)
        check_json_value(schema)
        return schema
    raise SchemaError(f"a schema must be a dict, a bool, a JSON string or a Pydantic model "
                      f"class, not {type(schema).__name__}", "")


def read_json_text(text, what: str, error=SchemaError, pointer: str = ""):
    """The JSON value of ``text`` (``str`` or ``bytes``), its ``NaN`` and
    ``Infinity`` refused (no JSON). Raises ``error`` (at ``pointer``) for text
    that is not JSON, :class:`SchemaTooComplexError` for nesting Python's
    parser cannot read."""
    try:
        return json.loads(text, parse_constant=_no_constant)
    except json.JSONDecodeError as e:
        raise error(f"the {what} is not valid JSON: {e}", pointer) from None
    except UnicodeDecodeError as e:
        raise error(f"the {what} is not UTF-8 text ({e.reason} at byte {e.start})",
                    pointer) from None
    except ValueError as e:  # _no_constant's
        raise error(f"the {what} is not valid JSON: {e}", pointer) from None
    except RecursionError:  # json's own parser, on arrays or objects ~100,000 deep
        raise SchemaTooComplexError(f"the {what}'s JSON text nests too deeply to read",
                                    pointer) from None


def _no_constant(name: str):
    # json.loads reads NaN and Infinity, which are no JSON: ``const: NaN``
    # equals no value, and was compiled to a terminal matching the empty text
    raise ValueError(f"{name} is no JSON number")


def _load_resources(resources) -> tuple:
    """``resources`` (a mapping of URI to schema, each as :func:`load_schema`
    takes it) as ``((uri, schema), ...)``.

    Raises:
        SchemaError: not a mapping, a URI that is not a string, or a schema that
            is not one.
    """
    if resources is None:
        return ()
    if not hasattr(resources, "items"):
        raise SchemaError(f"resources must map URIs to schemas, not {type(resources).__name__}", "")
    out = []
    for uri, schema in resources.items():
        if not isinstance(uri, str) or not uri:
            raise SchemaError(f"a resource URI must be a non-empty string, not {uri!r}", "")
        try:
            out.append((uri, load_schema(schema)))
        except (SchemaError, SchemaTooComplexError) as e:  # (its pointer is inside that document)
            raise type(e)(f"resource {uri!r}: {e.msg}", e.pointer) from None
    return tuple(out)


#: the applicators normalisation expands into conjunctions (see valid_local)
_EXPANDED = frozenset({"allOf", "anyOf", "oneOf", "not", "if", "then", "else", "$ref",
                       "dependentSchemas"})
_VALIDATION_VOCABULARY = "https://json-schema.org/draft/2020-12/vocab/validation"
#: the keywords of draft 2020-12's validation vocabulary
_VALIDATION_KEYWORDS = frozenset({
    "type", "enum", "const", "multipleOf", "maximum", "exclusiveMaximum", "minimum",
    "exclusiveMinimum", "maxLength", "minLength", "pattern", "maxItems", "minItems",
    "uniqueItems", "maxContains", "minContains", "maxProperties", "minProperties", "required",
    "dependentRequired"})


def _unasserted_keywords(root, externals) -> frozenset:
    """The validation keywords that assert nothing in ``root``: those of the
    validation vocabulary when ``root``'s ``$schema`` is a meta-schema given in
    ``resources`` whose ``$vocabulary`` does not include it (draft 2020-12)."""
    uri = root.get("$schema") if isinstance(root, dict) else None
    if not isinstance(uri, str):
        return frozenset()
    for u, doc in externals:
        if _strip_fragment(u) == _strip_fragment(uri) and isinstance(doc, dict):
            vocab = doc.get("$vocabulary")
            if isinstance(vocab, dict) and _VALIDATION_VOCABULARY not in vocab:
                return _VALIDATION_KEYWORDS
    return frozenset()


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

    def __init__(self, root, diag: Diagnostics, resources=None, formats_asserted: bool = True):
        self.root = root
        self.diag = diag
        #: whether ``format`` asserts (``Options.formats == "assert"``): the
        #: enum and const values a format rejects are then left out
        #: (:func:`~constrain.frontends.json_schema.literals.enum_values`)
        self.formats_asserted = formats_asserted
        #: ``(uri, schema)`` of the other documents ``$ref`` may point into; the
        #: pointer ``@i/...`` is inside the ``i``-th (see :meth:`node`)
        self.externals: tuple = _load_resources(resources)
        declared = declared_draft(root)
        #: the draft jsonschema reads the root under (see :mod:`.dialect`)
        self.draft = declared or 2020
        missing = keywords_not_in(declared)
        # without a declared draft, the older drafts' keywords are read where
        # that is stricter than jsonschema (see .legacy)
        noted = LEGACY if declared is None else frozenset()
        holders = check_schema(root, draft=self.draft, strip=missing, note=noted)
        if holders and missing:
            # keywords its declared draft lacks assert nothing there: gone from
            # a copy, so that no part of the translation reads them
            root = self.root = without_keywords(root, holders, missing)
        #: ids of the dicts whose LEGACY keywords assert nothing (see .legacy)
        self._legacy_hidden: frozenset = frozenset()
        #: keywords the root document's meta-schema does not assert (a custom
        #: meta-schema in resources whose $vocabulary leaves out validation)
        self._unasserted = _unasserted_keywords(root, self.externals)
        #: per document of resources: the keywords its declared draft lacks and
        #: the schemas that hold one (see _strip_externals)
        lacking = []
        for i, (_, doc) in enumerate(self.externals):
            lacks = keywords_not_in(declared_draft(doc))
            lacking.append((lacks, check_schema(doc, f"@{i}", draft=draft_of(doc), strip=lacks)))
        #: schemas the translator wrote (complements, see :mod:`.negation`), at
        #: the pointers ``@n<k>``
        self.generated: list = []
        #: per generated schema, where its parts come from in the user's
        #: documents: path inside it -> JSON pointer (see :meth:`user_pointer`)
        self._origins: list[dict[str, Pointer]] = []
        self._nodes: dict = {}
        self._ids: bool | None = None  # see _index_ids
        #: drafts 3 to 7: "all other properties in a $ref object MUST be ignored"
        self.ref_ignores_siblings = self.draft in (3, 4, 6, 7)
        self._validator = None
        self._validator_errors: tuple = ()
        if any(held for _, held in lacking):
            self._strip_externals(lacking)
        if holders and noted or any(declared_draft(d) is None for _, d in self.externals):
            hidden = excluding_holders(self, everywhere=self.has_unevaluated)
            # the nodes read on the way (resolving $ref) are read again, now
            # without the keywords hidden there
            self._nodes.clear()
            self._legacy_hidden = hidden

    def _strip_externals(self, lacking: list) -> None:
        """Remove from each document of ``resources`` the keywords its declared
        draft lacks (``lacking``: per document, those keywords and the schemas
        holding one), where ``jsonschema`` never reads them: it reads a
        document entered at its root under the document's own ``$schema``,
        but one entered below its root (``other.json#/$defs/a``) under the
        draft of the document the reference is in. A document some other
        document enters below its root keeps them, as the root's draft reads
        them (they are checked then, as everything else)."""
        entered_below = documents_entered_below_root(self)
        externals = list(self.externals)
        for i, (lacks, held) in enumerate(lacking):
            if not held:
                continue
            uri, doc = externals[i]
            if i in entered_below:
                check_schema(doc, f"@{i}", draft=draft_of(doc))
            else:
                externals[i] = (uri, without_keywords(doc, held, lacks))
        self.externals = tuple(externals)
        # resolving the references read nodes and indexed the documents
        self._nodes.clear()
        self._ids = None

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
        if ref.startswith("@d"):  # a dynamic scope's view of a document
            hit = self._nodes[ref] = self.node(self.real_pointer(ref))
            return hit
        cur = self.raw_node(ref)
        if not isinstance(cur, (dict, bool)):
            raise SchemaError(f"a schema must be an object or a boolean, not {type(cur).__name__}",
                              ref)
        if self._unasserted and isinstance(cur, dict) and not ref.startswith("@") \
                and not self._unasserted.isdisjoint(cur):
            cur = {k: v for k, v in cur.items() if k not in self._unasserted}
        if self._legacy_hidden and id(cur) in self._legacy_hidden:
            cur = {k: v for k, v in cur.items() if k not in LEGACY}
        self._nodes[ref] = cur
        return cur

    def raw_node(self, ref: Pointer):
        """The value at the pointer ``ref`` (not in a dynamic view) as the
        document has it: no keyword left out (see :meth:`node`).

        Raises:
            SchemaError: a pointer to nothing.
        """
        cur = self.root
        toks = ref.split("/")
        if toks[0]:  # "@i": the i-th document of resources; "@n<k>": generated
            head = toks[0]
            cur = (self.generated[int(head[2:])] if head.startswith("@n")
                   else self.externals[int(head[1:])][1])
        for tok in toks[1:]:
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
        return cur

    def child(self, ref: NodeRef, keyword: str, name: str, value) -> Pointer:
        """The pointer of ``value``, the member ``name`` of the object of
        subschemas at ``keyword`` (``properties``, ``patternProperties``) of the
        node at ``ref``. The node is remembered as it is, so that :meth:`node`
        does not walk to it again from the root (one walk per member of every
        object otherwise)."""
        ptr = f"{ref}/{keyword}/{name.replace('~', '~0').replace('/', '~1')}"
        if not self._unasserted and type(ref) is str and isinstance(value, (dict, bool)) \
                and id(value) not in self._legacy_hidden:
            self._nodes.setdefault(ptr, value)
        return ptr

    def _index_ids(self) -> None:
        """The URI index, made on the first ``$ref``: every schema resource's
        absolute URI (``$id`` resolved against its parent's base URI, RFC 3986)
        → its pointer; ``(resource URI, name)`` of every ``$anchor`` and
        ``$dynamicAnchor`` (and drafts 4–7's ``"$id": "#name"``) → its pointer;
        and the base URI in force at each resource root, for relative ``$ref``.
        The documents of ``resources`` are indexed the same way, each under the
        URI it was given (and its own ``$id``, if it has one)."""
        self._resources: dict[str, str] = {}
        self._anchors: dict[tuple[str, str], str] = {}
        self._dynamic: dict[tuple[str, str], str] = {}
        self._bases: dict[str, str] = {}
        #: per dynamic view "@d<k>": (the document's head, its entry pointer,
        #: the dynamic scope there), and the view of each such triple
        self._views: list[tuple[str, str, tuple]] = []
        self._view_of: dict[tuple[str, str, tuple], int] = {}
        self._index_document(self.root, "", _DEFAULT_BASE)
        for i, (uri, doc) in enumerate(self.externals):
            self._index_document(doc, f"@{i}", _strip_fragment(uri))
        self._anchor_names: dict[str, tuple] = {}
        self._ids = True

    def _index_document(self, root, prefix: str, base: str) -> None:
        old_ids = draft_of(root) in (3, 4)
        self._resources.setdefault(base, prefix)
        self._bases[prefix] = base
        # an explicit stack, not recursion: a deep schema must not overflow it
        stack = [(root, base, prefix)]
        while stack:
            node, base, ptr = stack.pop()
            if isinstance(node, dict):
                ident = node.get("id" if old_ids else "$id")
                if isinstance(ident, str):
                    if ident.startswith("#"):
                        if len(ident) > 1:
                            self._anchors.setdefault((base, ident[1:]), ptr)
                    else:
                        base = _strip_fragment(join_uri(base, ident))
                        self._resources.setdefault(base, ptr)
                        self._bases[ptr] = base
                for key in ("$anchor", "$dynamicAnchor"):
                    v = node.get(key)
                    if isinstance(v, str):
                        self._anchors.setdefault((base, v), ptr)
                        if key == "$dynamicAnchor":
                            self._dynamic.setdefault((base, v), ptr)
                for k, v in node.items():
                    if isinstance(v, (dict, list)) and k not in DATA_KEYWORDS:
                        stack.append((v, base, f"{ptr}/{escape_token(k)}"))
            elif isinstance(node, list):
                for i, v in enumerate(node):
                    if isinstance(v, (dict, list)):
                        stack.append((v, base, f"{ptr}/{i}"))

    @property
    def has_unevaluated(self) -> bool:
        """Whether ``unevaluatedProperties``/``unevaluatedItems`` occur anywhere
        in the documents (then annotations matter; see :mod:`.normalise`)."""
        hit = self._nodes.get("#has_unevaluated")
        if hit is None:
            text = json.dumps([self.root] + [d for _, d in self.externals])
            hit = self._nodes["#has_unevaluated"] = ('"unevaluatedProperties"' in text
                                                     or '"unevaluatedItems"' in text)
        return hit

    def add_generated(self, schema, base: str, origins: dict[str, Pointer]) -> Pointer:
        """The pointer of a new generated document ``schema``, whose relative
        ``$ref`` resolve against ``base``. ``origins`` maps paths inside it
        (``""`` for its root, which it must hold; ``"/anyOf/1"``...) to the
        pointers of the user's keywords those parts stand for."""
        if self._ids is None:
            self._index_ids()
        ptr = f"@n{len(self.generated)}"
        self.generated.append(schema)
        self._origins.append(origins)
        self._bases[ptr] = base
        return ptr

    def user_pointer(self, at: Pointer) -> Pointer:
        """The JSON pointer of the user's schema that the pointer ``at`` of a
        translation stands for: a dynamic view's node where it is written (see
        :meth:`real_pointer`), a generated schema's part (a complement's
        ``@n<k>/anyOf/1/...``) at the keyword it was made from (its innermost
        part whose origin is known). What errors and warnings name."""
        at = self.real_pointer(at)
        if not at.startswith("@n"):
            return at
        head, sep, rest = at.partition("/")
        origins = self._origins[int(head[2:])]
        path = sep + rest
        while path not in origins:
            path = path[:path.rfind("/")]
        return origins[path]

    def uri_of(self, at: Pointer) -> str:
        """A ``$ref`` value that resolves to the pointer ``at`` from any document
        (its document's URI and the pointer as fragment)."""
        if self._ids is None:
            self._index_ids()
        head, sep, rest = at.partition("/")
        if head.startswith("@d"):
            return _VIEW_URI % int(head[2:]) + "#" + quote(sep + rest, safe="/~!$&'()*+,;=:@")
        if head.startswith("@n"):
            raise ValueError("generated documents are not referred to")
        if head.startswith("@"):
            base, frag = _strip_fragment(self.externals[int(head[1:])][0]), sep + rest
        else:
            base, frag = self._bases[""], at
        return base + "#" + quote(frag, safe="/~!$&'()*+,;=:@")

    def base_uri(self, at: Pointer) -> str:
        """The base URI in force at the pointer ``at`` (its innermost resource's)."""
        if self._ids is None:
            self._index_ids()
        at = self.real_pointer(at)
        best = None
        for r in self._bases:
            if (at == r or at.startswith(r + "/")) and (best is None or len(r) > len(best)):
                best = r
        return self._bases.get(best, _DEFAULT_BASE)

    def resolve_ref(self, ref, at: Pointer) -> Pointer:
        """The pointer the ``$ref`` value ``ref`` (found at ``at``) points to:
        ``ref`` resolved against the base URI at ``at``, then its fragment read
        as a JSON pointer (empty or starting with ``/``) within that resource, or
        as an anchor name.

        Raises:
            SchemaError: not a string, or it resolves to no schema (a document not
                given in ``resources``, an unknown anchor, a pointer to nothing).
        """
        if not isinstance(ref, str):
            raise SchemaError("$ref must be a string", at)
        if self._ids is None:
            self._index_ids()
        target = self._resolve(ref, at)
        if not self._dynamic or target.startswith("@d"):
            return target
        # the dynamic scope goes on: the target's resource enters it
        return self._view(target, self._extended(self.scope(at), self._resource_uri(target)))

    def resolve_dynamic_ref(self, ref, at: Pointer) -> Pointer:
        """The pointer the ``$dynamicRef`` value ``ref`` (found at ``at``) points
        to (draft 2020-12, 8.2.3.2): resolved as a ``$ref``; when that lands on
        a ``$dynamicAnchor`` of the fragment's name, the same-named
        ``$dynamicAnchor`` of the outermost resource in the dynamic scope at
        ``at`` that has one instead.

        The pointer is in a *dynamic view* of its document (``@d<k>/...``): the
        same schema, under the scope it is reached in, so that the nodes below
        it are translated once per scope (a finite number: a scope keeps the
        first resource of each anchor name)."""
        if not isinstance(ref, str):
            raise SchemaError("$dynamicRef must be a string", at)
        if self._ids is None:
            self._index_ids()
        scope = self.scope(at)
        target = self.real_pointer(self._resolve(ref, at))
        name = unquote(_split_fragment(ref)[1])
        if name and not name.startswith("/"):
            node = self.node(target)
            if isinstance(node, dict) and node.get("$dynamicAnchor") == name:
                outer = dict(scope).get(name)
                if outer is not None:
                    target = self._dynamic[(outer, name)]
        return self._view(target, self._extended(scope, self._resource_uri(target)))

    # -- dynamic scopes ---------------------------------------------------------

    def real_pointer(self, at: Pointer) -> Pointer:
        """The pointer in its own document that the pointer ``at`` of a dynamic
        view stands for (``at`` itself when it is in no view)."""
        if not at.startswith("@d"):
            return at
        head = at.partition("/")[0]
        doc, entry, _ = self._views[int(head[2:])]
        return doc + at[len(head):]

    def scope(self, at: Pointer) -> tuple:
        """The dynamic scope at the pointer ``at``, as the ``$dynamicAnchor``
        names it decides: sorted ``(name, resource URI)`` pairs, the outermost
        resource in scope that declares each name. A view's scope, with the
        resources entered on the way down from its entry; in no view, those on
        the way down from its document's root."""
        head = at.partition("/")[0]
        if head.startswith("@d"):
            _, entry, scope = self._views[int(head[2:])]
        else:
            entry, scope = head, ()
        real = self.real_pointer(at)
        for r in sorted((r for r in self._bases
                         if (real == r or real.startswith(r + "/"))
                         and (r == entry or r.startswith(entry + "/") or entry == "")),
                        key=len):
            if r.startswith("@n"):
                continue
            scope = self._extended(scope, self._bases[r])
        return scope

    def _extended(self, scope: tuple, uri: str) -> tuple:
        """``scope`` with the resource ``uri`` entered: its dynamic anchor names
        that the scope does not have yet."""
        names = self._anchor_names.get(uri)
        if names is None:
            names = self._anchor_names[uri] = tuple(sorted(
                n for (u, n) in self._dynamic if u == uri))
        have = dict(scope)
        new = [(n, uri) for n in names if n not in have]
        return tuple(sorted(scope + tuple(new))) if new else scope

    def _resource_uri(self, at: Pointer) -> str:
        """The URI of the innermost resource holding the pointer ``at``."""
        return self.base_uri(at)

    def _view(self, target: Pointer, scope: tuple) -> Pointer:
        """``target`` (a pointer in its own document) in the dynamic view
        entered there with ``scope``."""
        target = self.real_pointer(target)
        if scope == self.scope(target):
            return target  # the scope its own document gives it: no view needed
        head = target.partition("/")[0]
        key = (head, target, scope)
        k = self._view_of.get(key)
        if k is None:
            k = self._view_of[key] = len(self._views)
            self._views.append(key)
            self._resources[_VIEW_URI % k] = f"@d{k}"
            if len(self._views) > MAX_DYNAMIC_VIEWS:
                raise UnsupportedSchemaError(
                    f"more than {MAX_DYNAMIC_VIEWS} dynamic scopes reach $ref targets", target)
        return f"@d{k}" + target[len(head):]

    def _resolve(self, ref: str, at: Pointer) -> Pointer:
        """:meth:`resolve_ref` without dynamic scopes."""
        uri, frag = _split_fragment(join_uri(self.base_uri(at), ref))
        frag = unquote(frag)
        resource = self._resources.get(uri)
        target = None
        if resource is not None:
            if frag == "" or frag.startswith("/"):
                target = resource + frag
            else:
                target = self._anchors.get((uri, frag))
        if target is None:
            where = "" if resource is not None else (
                " (no document has that URI: pass it in resources=)")
            raise SchemaError(f"cannot resolve $ref {ref!r}{where}", at)
        try:
            self.node(target)
        except SchemaError:
            raise SchemaError(f"$ref {ref!r} points to no schema", at) from None
        return target

    def dynamic_anchor(self, uri: str, name: str) -> Pointer | None:
        """The pointer of the ``$dynamicAnchor`` ``name`` of the resource ``uri``."""
        if self._ids is None:
            self._index_ids()
        return self._dynamic.get((uri, name))

    def dynamic_anchors(self) -> list:
        """The pointers of every ``$dynamicAnchor`` of the documents."""
        if self._ids is None:
            self._index_ids()
        return list(self._dynamic.values())

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
            from referencing import Registry, Resource
            from referencing.exceptions import NoSuchResource
            from referencing.jsonschema import DRAFT202012

            def never_fetch(uri):
                # an unknown URI is an unresolvable $ref, never a download
                raise NoSuchResource(ref=uri)

            # the root under the base URI complements refer to it by (see
            # uri_of), and the documents of resources under theirs
            docs = [(_DEFAULT_BASE, root)] + list(self.externals)
            registry = Registry(retrieve=never_fetch).with_resources(
                (uri, Resource.from_contents(doc, default_specification=DRAFT202012))
                for uri, doc in docs)
            self._validator = cls(root, registry=registry)
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

    def valid_local(self, value, ref: NodeRef) -> bool:
        """:meth:`valid` against the node's own keywords only, without the
        in-place applicators normalisation expands into a conjunction
        (``allOf``, ``anyOf``, ``oneOf``, ``not``, ``if``, ``$ref``, dependent
        schemas): what a conjunction's member asserts by itself. (The full node
        would also test a ``oneOf`` being compiled, which every value two
        branches share fails.)"""
        if type(ref) is not str:
            return self.valid(value, ref)
        node = self.node(ref)
        if not isinstance(node, dict) or _EXPANDED.isdisjoint(node):
            return self.valid(value, ref)
        local = self._nodes.get(("local", ref))
        if local is None:
            local = self._nodes[("local", ref)] = self.add_generated(
                {k: v for k, v in node.items() if k not in _EXPANDED}, self.base_uri(ref),
                {"": self.user_pointer(ref)})
        return self.valid(value, local)

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
