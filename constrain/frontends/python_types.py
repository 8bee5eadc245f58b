"""Python types as constraints, and the objects they produce.

A Pydantic model class, a dataclass, a ``TypedDict``, ``Literal[...]``, an
``Enum``, ``list[int]``, ``Optional[...]``, a discriminated union -- any type
Pydantic's ``TypeAdapter`` takes -- becomes a JSON Schema (Pydantic writes it),
which compiles like any other (:func:`constrain.compile_json_schema`); the
compiled constraint carries an :class:`OutputType` that turns the generated
text back into a validated object (:func:`parse_output`).

Closed by default: a Pydantic model ignores unknown fields unless configured
otherwise (``extra="ignore"``), and its JSON Schema then says nothing about
additional properties, so a grammar would let a model write invented keys
until it runs out of tokens. With ``closed=True`` every object schema that
does not say (no ``additionalProperties``, no ``unevaluatedProperties``, no
``patternProperties``) is closed: only the declared fields may appear.
``extra="allow"`` (``additionalProperties: true``) and ``extra="forbid"`` say
what they want and are kept; ``closed=False`` keeps every object open.

Pydantic is needed only here (``pip install trellis-decoding[pydantic]``).
"""

from __future__ import annotations

import copy
import threading
import typing
import warnings

from constrain.cache import BoundedCache, registry
from constrain.errors import SchemaError

__all__ = ["OutputType", "type_schema", "compile_type", "parse_output", "is_python_type",
           "unenforced"]

#: (type, closed, options, vocabulary) -> compiled constraint; shared by serving
#: threads (BoundedCache locks itself), cleared by constrain.clear_caches();
#: each charged what it holds (memory_bytes), which grows as it is used
_COMPILED = registry.register(BoundedCache("python_types.compiled", 512 << 20, max_entries=64,
                                           growing=True))


def _type_adapter(tp):
    try:
        from pydantic import TypeAdapter
    except ImportError as e:  # pragma: no cover - pydantic is a test dependency
        raise SchemaError("Python types as constraints need pydantic "
                          "(pip install trellis-decoding[pydantic])", "") from e
    try:
        return TypeAdapter(tp)
    except Exception as e:  # pydantic raises its own errors for unsupported types
        raise SchemaError(f"{_name(tp)} is not a type Pydantic can validate: {e}", "") from e


def _name(tp) -> str:
    return getattr(tp, "__qualname__", None) or repr(tp)


def is_python_type(obj) -> bool:
    """Whether ``obj`` is a Python type (a class, or a typing form such as
    ``list[int]``, ``Literal["a"]``, ``Optional[X]``) rather than a schema
    (``dict``/``bool``/JSON text) or a compiled constraint."""
    if isinstance(obj, (dict, bool, str, bytes)):
        return False
    if isinstance(obj, type):
        from constrain.protocol import Constraint

        return not issubclass(obj, Constraint)
    # NewType("UserId", int) and TypeAliasType objects have no origin
    return typing.get_origin(obj) is not None or isinstance(obj, typing.NewType) \
        or type(obj).__name__ == "TypeAliasType"


def type_schema(tp, *, closed: bool = True) -> dict:
    """The JSON Schema of ``tp`` as Pydantic writes it for validation, with
    objects closed where they do not say (``closed=True``; see the module).

    Raises:
        SchemaError: pydantic is missing, or ``tp`` is not a type it takes.
    """
    adapter = _type_adapter(tp)
    try:
        schema = adapter.json_schema(mode="validation")
    except Exception as e:
        raise SchemaError(f"Pydantic cannot write a JSON Schema for {_name(tp)}: {e}", "") from e
    schema = copy.deepcopy(schema)
    for node in _subschemas(schema):
        _require_tags(node)
        if closed:
            _close_object(node)
    return schema


def _subschemas(schema):
    """Every schema object in ``schema``, itself included, by the keywords
    that hold schemas (:func:`~constrain.frontends.json_schema.wellformed.subschemas`)."""
    from constrain.frontends.json_schema.wellformed import subschemas

    stack = [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            yield node
            stack.extend(subschemas(node))


def _close_object(node: dict) -> None:
    """``additionalProperties: false`` on ``node`` when it declares properties
    and says nothing about other members."""
    if ("properties" in node and node.get("type", "object") == "object"
            and not {"additionalProperties", "unevaluatedProperties",
                     "patternProperties"} & node.keys()):
        node["additionalProperties"] = False


def _require_tags(node: dict) -> None:
    """A discriminated union's tag required in each branch: Pydantic reads the
    tag before it picks a branch, so a branch whose tag has a default (left
    out of its ``required``) still needs it written."""
    tag = node.get("discriminator")
    branches = node.get("oneOf", node.get("anyOf"))
    if not isinstance(tag, dict) or not isinstance(tag.get("propertyName"), str) \
            or not isinstance(branches, list):
        return
    for i, branch in enumerate(branches):
        if isinstance(branch, dict):
            # a branch of its own: the model it refers to may be used
            # elsewhere, where its tag may be left out
            branches[i] = {"allOf": [branch], "required": [tag["propertyName"]]}


class OutputType:
    """The Python type a constraint's output is validated as.

    ``parse(text)`` returns the validated object (a model instance, a
    dataclass, a ``dict`` for a ``TypedDict``, an ``Enum`` member...). Pickles
    (the Pydantic adapter is rebuilt on first use after unpickling)."""

    def __init__(self, tp, closed: bool = True):
        self.type = tp
        self.closed = closed
        self._adapter = None
        self._lock = threading.Lock()

    @property
    def adapter(self):
        """Pydantic's ``TypeAdapter`` of the type (made on first use)."""
        if self._adapter is None:
            with self._lock:
                if self._adapter is None:
                    self._adapter = _type_adapter(self.type)
        return self._adapter

    def parse(self, text: str | bytes):
        """The validated object the JSON ``text`` stands for.

        Raises:
            pydantic.ValidationError: the text is not valid JSON for the type.
                A complete output of the type's constraint always is, unless the
                type has validators no JSON Schema can state (a
                ``field_validator``, say), which the constraint cannot enforce.
        """
        return self.adapter.validate_json(text)

    def __repr__(self) -> str:
        return f"OutputType({_name(self.type)}, closed={self.closed})"

    def __getstate__(self):
        return {"type": self.type, "closed": self.closed}

    def __setstate__(self, state):
        self.__init__(state["type"], state["closed"])


def compile_type(tp, vocab, *, closed: bool = True, **options):
    """A constraint for the JSON texts of values of the Python type ``tp`` over
    ``vocab``, whose ``output_type`` parses its outputs back into objects.

    ``closed`` as for :func:`type_schema`; ``options`` are those of
    :func:`constrain.compile_json_schema`. Compiled constraints are cached per
    (type, options, vocabulary), at most 64 of them and 512 MiB in all: each
    is charged what it holds (its ``memory_bytes()``: its mask caches grow
    as it is used, each bounded by ``mask_cache_bytes``), all of them
    measured again at each compile.

    Raises:
        SchemaError: pydantic is missing or ``tp`` is no type it takes; and
            whatever :func:`constrain.compile_json_schema` raises for its schema.
    """
    from constrain.compiler import compile_json_schema

    def build():
        constraint = _compile_merging_sets(type_schema(tp, closed=closed), vocab, options)
        constraint.output_type = OutputType(tp, closed)
        gaps = unenforced(tp)
        if gaps:
            warnings.warn(f"compile_type({_name(tp)}): Pydantic checks what its JSON Schema "
                          f"does not state, so a complete output may still fail to parse: "
                          f"{'; '.join(gaps)}", UserWarning, stacklevel=4)
        return constraint

    key = (tp, closed, tuple(sorted(options.items(), key=lambda kv: kv[0])), vocab.fingerprint)
    try:
        hash(key)
    except TypeError:  # an unhashable type or option value: not cached
        return build()
    return _COMPILED.get_or_build(key, build)


def unenforced(tp) -> list[str]:
    """What Pydantic validates in ``tp`` beyond the JSON Schema it writes for
    it (so beyond what :func:`compile_type` enforces), one description each:
    read off its core schema. User validators (``field_validator``) are not
    listed: the docs of :meth:`OutputType.parse` say so once."""
    from collections import deque

    gaps: list[str] = []
    queue = deque([_type_adapter(tp).core_schema])  # breadth first: fields in order
    seen: set[int] = set()
    while queue:
        node = queue.popleft()
        if isinstance(node, list):
            queue.extend(node)
            continue
        if not isinstance(node, dict) or id(node) in seen:
            continue
        seen.add(id(node))
        gap = _gap(node)
        if gap is not None and gap not in gaps:
            gaps.append(gap)
        queue.extend(v for v in node.values() if isinstance(v, (dict, list)))
    return gaps


def _gap(node: dict) -> str | None:
    """The check of core-schema node ``node`` that its JSON Schema leaves out."""
    kind = node.get("type")
    if kind == "dict":
        keys = node.get("keys_schema", {}).get("type", "any")
        if keys not in ("str", "any"):
            return f"dict keys of type {keys} (any string key is written)"
    elif kind in ("datetime", "time") and node.get("tz_constraint") == "naive":
        return (f"a naive {kind} (the schema's format requires an offset, which Pydantic "
                f"refuses: no output parses)")
    elif kind == "decimal":
        return "a Decimal's string form, digits and places (any string is written)"
    elif kind == "json":
        return "the value inside a Json[...] string"
    elif kind == "complex":
        return "a complex number's string form"
    elif kind in ("url", "multi-host-url") and node.get("allowed_schemes"):
        return f"URL schemes ({', '.join(node['allowed_schemes'])})"
    elif kind == "bytes" and ("max_length" in node or "min_length" in node):
        return "bytes lengths (counted in characters, not bytes)"
    return None


def _compile_merging_sets(schema: dict, vocab, options: dict):
    """:func:`constrain.compile_json_schema` of a type's ``schema``, less each
    ``uniqueItems`` it cannot enforce. Pydantic writes ``uniqueItems: true``
    for ``set`` and ``frozenset`` but does not validate it: it merges the
    duplicates (``[1, 1]`` is ``{1}``, strict mode too). Trellis enforces it
    over items from a few values only, and refused every type with a
    ``set[str]`` field; without it, each output still validates as the type."""
    from constrain.compiler import compile_json_schema
    from constrain.errors import UnsupportedSchemaError
    from constrain.frontends.json_schema.document import _unescape_token

    copied = False
    while True:
        try:
            return compile_json_schema(schema, vocab, **options)
        except UnsupportedSchemaError as e:
            if not e.pointer.endswith("/uniqueItems"):
                raise
            if not copied:
                schema, copied = copy.deepcopy(schema), True
            node = schema
            try:
                for tok in e.pointer.split("/")[1:-1]:
                    tok = _unescape_token(tok)
                    node = node[int(tok)] if isinstance(node, list) else node[tok]
            except (KeyError, IndexError, ValueError, TypeError):
                raise e from None
            if not isinstance(node, dict) or node.pop("uniqueItems", None) is not True:
                raise


def parse_output(constraint, text: str | bytes):
    """The validated object of ``text``, an output of a constraint made by
    :func:`compile_type` (or by passing a type to ``search.generate``); for
    texts generated through the Hugging Face logits processor, say.

    Raises:
        ValueError: the constraint has no output type.
        pydantic.ValidationError: see :meth:`OutputType.parse`.
    """
    output = getattr(constraint, "output_type", None)
    if output is None:
        raise ValueError("this constraint was not compiled from a Python type "
                         "(use constrain.compile_type)")
    return output.parse(text)

