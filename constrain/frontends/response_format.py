"""The request shapes users already write: a choice among strings, and
OpenAI's ``response_format``.

``compile_choice(["yes", "no"], vocab)`` is exactly one of the strings (a regex
of their escaped alternation, so a trie of them). ``from_response_format(rf,
vocab)`` reads the ``response_format`` of OpenAI's chat completions API (also
what vLLM's OpenAI-compatible server takes):

* ``{"type": "json_schema", "json_schema": {"name": ..., "schema": {...},
  "strict": true}}``: the schema, compiled strictly (a keyword Trellis cannot
  enforce is an error); with ``"strict": false`` (OpenAI's "best effort") such
  keywords are ignored with one warning instead, as ``strict=False`` does;
* ``{"type": "json_object"}``: any JSON object;
* ``{"type": "text"}``: no constraint (``None``);
* ``{"type": "structural_tag", "format": {...}}`` (or the older
  ``structures``/``triggers`` form): the structural tag, compiled by
  :func:`constrain.compile_structural_tag`.

Errors and warnings name the place in the ``response_format``
(``/json_schema/schema/...``).
"""

from __future__ import annotations

import json
import re

from constrain.errors import ConstraintError, SchemaError, SchemaTooComplexError, UnsupportedSchemaError
from constrain.frontends.json_schema.diagnostics import warnings_within
from constrain.frontends.json_schema.document import read_json_text

__all__ = ["compile_choice", "from_response_format"]


def compile_choice(choices, vocab, **options):
    """A constraint whose language is exactly the strings ``choices``.

    ``options`` are those of :func:`constrain.compile_regex`. The output is the
    chosen string itself.

    Raises:
        ConstraintError: ``choices`` is empty, or holds something not a string
            (its index is named).
    """
    from constrain.regular.regex import compile_regex

    if isinstance(choices, (str, bytes)) or not hasattr(choices, "__iter__"):
        raise ConstraintError(f"choices must be a list of strings, not {type(choices).__name__}")
    items = list(choices)
    if not items:
        raise ConstraintError("choices is empty: no output could satisfy it")
    for i, c in enumerate(items):
        if not isinstance(c, str):
            raise ConstraintError(f"choices[{i}] is {type(c).__name__}, not a string")
    # longest first: the alternation's order does not change its language, but
    # keeps the pattern readable in error messages
    unique = sorted(set(items), key=lambda s: (-len(s), s))
    return compile_regex("(?:" + "|".join(re.escape(c) for c in unique) + ")", vocab, **options)


def load_request(value, what: str, error=SchemaError):
    """``value`` itself, or the object its JSON text (``str`` or ``bytes``)
    holds; text that is not JSON (bytes not UTF-8 among it) raises ``error``
    naming ``what``, text nested too deeply for Python's parser (~100,000
    levels) :class:`SchemaTooComplexError`."""
    if isinstance(value, (str, bytes)):
        return read_json_text(value, what, error)
    return value


def read_response_format(rf) -> tuple[object, bool]:
    """``(schema, strict)`` of an OpenAI ``response_format`` (a dict or its JSON
    text): ``schema`` is ``None`` for ``{"type": "text"}`` (no constraint); a
    ``structural_tag`` has none (:class:`UnsupportedSchemaError`).
    Reads the request only: nothing is compiled.

    Raises:
        SchemaError, UnsupportedSchemaError: as :func:`from_response_format`.
    """
    rf = load_request(rf, "response_format")
    if not isinstance(rf, dict):
        raise SchemaError(f"a response_format is an object, not {type(rf).__name__}", "")
    kind = rf.get("type")
    if kind == "text":
        return None, True
    if kind == "json_object":
        return {"type": "object"}, True
    if kind == "structural_tag":
        raise UnsupportedSchemaError("a structural_tag response format holds no schema: compile "
                                     "it with from_response_format or compile_structural_tag",
                                     "/type")
    if kind != "json_schema":
        raise SchemaError(f"unknown response_format type {kind!r} (text, json_object, "
                          f"json_schema)", "/type")
    spec = rf.get("json_schema")
    if not isinstance(spec, dict) or "schema" not in spec:
        raise SchemaError("a json_schema response_format needs json_schema.schema",
                          "/json_schema")
    strict = spec.get("strict", False)
    if not isinstance(strict, bool):
        raise SchemaError("json_schema.strict must be a boolean", "/json_schema/strict")
    for key in ("name", "description"):
        # (OpenAI's own field types; neither changes the constraint)
        if key in spec and not isinstance(spec[key], str):
            raise SchemaError(f"json_schema.{key} must be a string, not "
                              f"{type(spec[key]).__name__}", f"/json_schema/{key}")
    schema = spec["schema"]
    if not isinstance(schema, (dict, bool, str, bytes)):
        # (None here would read as {"type": "text"}: no constraint at all)
        raise SchemaError(f"json_schema.schema must be a JSON Schema (an object or a boolean), "
                          f"not {'null' if schema is None else type(schema).__name__}",
                          "/json_schema/schema")
    return schema, strict


def within_response_format(error: ConstraintError, schema_pointer: str = "/json_schema/schema"):
    """``error`` (a schema error) with its pointer made relative to the
    ``response_format`` it came from; other errors as they are."""
    if isinstance(error, (SchemaError, UnsupportedSchemaError, SchemaTooComplexError)):
        return type(error)(error.msg, schema_pointer + error.pointer)
    return error


def from_response_format(rf, vocab, **options):
    """The constraint an OpenAI ``response_format`` asks for (``None`` for
    ``{"type": "text"}``); ``rf`` is a dict or its JSON text. ``options`` go to
    :func:`constrain.compile_json_schema` (``strict`` is set from the request)
    or, for a ``structural_tag``, to :func:`constrain.compile_structural_tag`.

    Raises:
        SchemaError: ``rf`` is not a response format (no or an unknown
            ``type``, a ``json_schema`` without ``schema``), or its schema is
            malformed; the pointer is within ``rf``.
        UnsupportedSchemaError: a strict schema uses what Trellis cannot
            enforce (for a structural tag: see ``compile_structural_tag``).
    """
    from constrain.compiler import compile_json_schema

    rf = load_request(rf, "response_format")
    if isinstance(rf, dict) and rf.get("type") == "structural_tag":
        from constrain.frontends.structural_tag import compile_structural_tag

        return compile_structural_tag(rf, vocab, **options)
    schema, strict = read_response_format(rf)
    if schema is None:
        return None
    options.setdefault("strict", strict)
    try:
        with warnings_within("/json_schema/schema"):
            return compile_json_schema(schema, vocab, **options)
    except (SchemaError, UnsupportedSchemaError, SchemaTooComplexError) as e:
        raise within_response_format(e) from e
