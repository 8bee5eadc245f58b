"""JSON Schema → Lark grammar text (:func:`json_schema_to_lark`), a token-level
constraint (:func:`compile_json_schema`), and :func:`order_instance`: the entry
points, wiring the passes.

The grammar's language (Earley, scannerless: what ``lark.Lark(text,
parser="earley", lexer="dynamic_complete")`` accepts) is a set of JSON texts every
one of which ``jsonschema`` validates against the schema (format checking off).
It is *sound* by construction and close to *complete* for the usual serialisation
(``json.dumps(x, separators=(",", ":"), ensure_ascii=False)`` with object members
in schema order, see :func:`order_instance`).

Design (one module per pass):

* :mod:`.document` loads the schema and resolves ``$ref``; :mod:`.nodes` are the
  references to schema nodes the passes exchange.
* :mod:`.normalise` turns a node into a disjunction of conjunctions of nodes
  (``anyOf``/``oneOf`` distribute, ``allOf`` and ``$ref`` siblings conjoin), with
  :mod:`.disjointness` proving ``oneOf`` branches apart; :mod:`.translation`
  compiles each conjunction per JSON type with the keywords merged.
* Scalars are single terminals (:mod:`.literals`, :mod:`.numbers`,
  :mod:`.strings`: a whole string with its pattern, format and length; a whole
  number with its bounds; a whole enum), structure is rules (:mod:`.arrays`,
  :mod:`.objects`), written into :mod:`.rules`' builder. Recursive ``$ref``
  become recursive rules.
* A keyword that cannot be enforced exactly raises :class:`UnsupportedSchemaError`
  naming its JSON pointer; with ``strict=False`` it is ignored, and one warning
  lists everything ignored (:mod:`.diagnostics`).
* Everything emitted errs on the strict side where exactness would be costly:
  integers never carry a fraction or exponent, bounded numbers no exponent,
  patterns accept canonical escapes only, ``maxLength``/``maxItems`` above the
  caps are lowered to the caps (documented in ``docs/json_schema.md``).
* :mod:`.prune` trims the rules; :mod:`.lark_text` and :mod:`.ir` write them out.
"""

from __future__ import annotations

from constrain.automata.deadline import Deadline
from constrain.errors import (EmptySchemaError, GrammarTooComplexError, SchemaError,
                              SchemaTooComplexError, UnsupportedSchemaError)
# at module level: an import statement inside compile_json_schema cost ~30 us
# of every compile on a cold cache (constrain imports the grammar engine anyway)
from constrain.cfg.grammar import GrammarConstraint
from constrain.cfg.ir import GrammarIR
from constrain.frontends.json_schema.document import load_schema
from constrain.frontends.json_schema.ir import to_ir
from constrain.frontends.json_schema.lark_text import render
from constrain.frontends.json_schema.options import (DEFAULT_MAX_WHITESPACE, MAX_ARRAY_LENGTH,
                                                    MAX_STRING_LENGTH, Options)
from constrain.frontends.json_schema.ordering import reorder
from constrain.frontends.json_schema.rules import Alt
from constrain.frontends.json_schema.translation import Translation

__all__ = ["json_schema_to_lark", "compile_json_schema", "order_instance",
           "DEFAULT_MAX_WHITESPACE", "MAX_STRING_LENGTH", "MAX_ARRAY_LENGTH"]

_SCHEMA_OPTIONS = ("whitespace", "max_whitespace", "strict", "max_string_length",
                   "max_array_length", "formats", "resources")
_DEFAULT_OPTIONS = Options()
#: what compile_json_schema passes on to GrammarConstraint: its compiler, budgets
_GRAMMAR_OPTIONS = frozenset({"compiler", "max_states", "max_repeat", "max_positions", "max_contexts",
                              "max_width", "mask_cache_bytes", "max_items"})


def translate(schema, options: Options, exclusions: dict | None = None, *,
              deadline: Deadline | None = None) -> Translation:
    """The translation of ``schema`` with its rules built from ``start``;
    ``exclusions`` as for :class:`~constrain.frontends.json_schema.rules.GrammarBuilder`
    (``None`` for grammar text); ``deadline`` as :class:`Translation` takes it."""
    root = load_schema(schema)
    t = Translation(root, options, exclusions, deadline=deadline)
    if root is False:
        raise EmptySchemaError("the schema admits no JSON value", "")
    try:
        try:
            top = t.value(("",))
        except RecursionError:
            # the document's nesting is bounded (wellformed.MAX_SCHEMA_DEPTH);
            # a chain of $refs, each a level deeper, is not
            raise SchemaTooComplexError("the schema's subschemas and references nest too deeply "
                                        "to translate", "") from None
    except (SchemaError, UnsupportedSchemaError, SchemaTooComplexError) as e:
        if e.pointer.startswith("@"):
            # a node reached in a dynamic scope, or a part of a complement:
            # named where the user wrote it
            pointer = t.doc.user_pointer(e.pointer)
            if pointer != e.pointer:
                e.pointer = pointer
                e.args = (f"{e.msg} at {e.pointer or '/'} (JSON pointer)",)
        raise
    t.grammar.rules.setdefault("start", [Alt([("sym", top)])])
    return t


def json_schema_to_lark(schema, *, whitespace: str = "compact",
                        max_whitespace: int = DEFAULT_MAX_WHITESPACE, strict: bool = True,
                        max_string_length: int = MAX_STRING_LENGTH,
                        max_array_length: int = MAX_ARRAY_LENGTH,
                        time_budget: float | None = 30.0, formats: str = "assert",
                        resources=None) -> str:
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
        formats: ``"assert"`` (enforce the formats listed in ``docs/json_schema.md``)
            or ``"annotation"`` (``format`` asserts nothing: draft 2020-12's
            default for validators, and what its test suite expects).
        resources: the other schema documents a ``$ref`` may point into, as a
            mapping of URI to schema (``{"https://example.com/address.json":
            {...}}``); a relative ``$ref`` resolves against the base URI of the
            schema it is in (RFC 3986), as in ``jsonschema``. Nothing is fetched.

    Raises:
        UnsupportedSchemaError: a keyword cannot be enforced (strict);
            :class:`~constrain.errors.EmptySchemaError` (a subclass): the schema
            admits no JSON value.
        SchemaError: the schema is malformed or a ``$ref`` dangles.
        GrammarTooComplexError: the grammar would exceed a size limit or the
            translation its time budget.
        ValueError: ``whitespace`` or ``max_whitespace`` is out of range.
    """
    options = Options(whitespace=whitespace, max_whitespace=max_whitespace, strict=strict,
                      max_string_length=max_string_length, max_array_length=max_array_length,
                      time_budget=time_budget, formats=formats, resources=resources)
    t = translate(schema, options)
    text = render(t.grammar, "start", t.diag)
    t.diag.warn("json_schema_to_lark")
    return text


def json_schema_ir(schema, *, patterns: dict | None = None, **options) -> GrammarIR:
    """The :class:`~constrain.cfg.ir.GrammarIR` of ``schema``: what
    :func:`compile_json_schema` compiles, for front ends that embed a schema in
    a larger grammar (structural tags). ``options``: the schema options of
    :func:`json_schema_to_lark` (``time_budget`` included). ``patterns``, when
    given, receives ``terminal name -> (JSON pointer, pattern)`` of the
    terminals that spell a user's ``pattern`` (for telling a budget their
    automaton passes at that pointer)."""
    opts = Options(**{k: options.pop(k) for k in (*_SCHEMA_OPTIONS, "time_budget") if k in options})
    if options:
        raise TypeError(f"unknown JSON Schema options: {', '.join(sorted(options))}")
    t = translate(schema, opts, exclusions={})
    ir = to_ir(t.grammar, "start", t.diag)
    t.diag.warn("compile_json_schema")
    if patterns is not None:
        patterns.update(t.grammar.pattern_at)
    return ir


def compile_json_schema(schema, vocab, **options):
    """Compile a JSON Schema into a token-level constraint over ``vocab``.

    ``options`` may hold ``whitespace``, ``max_whitespace``, ``strict``,
    ``max_string_length``, ``max_array_length``, ``formats`` and ``resources`` (see
    :func:`json_schema_to_lark`); the rest are the budgets
    :func:`constrain.cfg.grammar.compile_grammar` takes. ``time_budget`` (seconds,
    default 30) bounds the translation and the grammar compilation together.

    The constraint accepts the language of ``json_schema_to_lark``'s text, built
    without the text: the translator's rules go straight to a ``GrammarIR``, and
    "any key but the declared ones" is an automaton (``GrammarIR.exclusions``).
    """
    budget = options.pop("time_budget", 30.0)
    chosen = {k: options.pop(k) for k in _SCHEMA_OPTIONS if k in options}
    # the defaults' Options (frozen) is shared: building one is ~10 us cold
    opts = _DEFAULT_OPTIONS if not chosen and budget == _DEFAULT_OPTIONS.time_budget \
        and budget.__class__ is float else Options(**chosen, time_budget=budget)
    if options and not _GRAMMAR_OPTIONS.issuperset(options):
        # said here: GrammarConstraint's own TypeError named an argument of its __init__
        raise TypeError(f"unknown JSON Schema options: "
                        f"{', '.join(sorted(set(options) - _GRAMMAR_OPTIONS))} (the options are "
                        f"{', '.join(sorted({*_SCHEMA_OPTIONS, 'time_budget', *_GRAMMAR_OPTIONS}))})")
    deadline = Deadline.after(budget)  # what the translation leaves goes on
    t = translate(schema, opts, exclusions={}, deadline=deadline)
    ir = to_ir(t.grammar, "start", t.diag)
    t.diag.warn("compile_json_schema")
    left = deadline.remaining()
    try:
        return GrammarConstraint(ir, vocab, source="", time_budget=left, **options)
    except GrammarTooComplexError as e:
        raise at_pattern(t.grammar.pattern_at, e) from None


def at_pattern(pattern_at: dict, e: GrammarTooComplexError) -> GrammarTooComplexError:
    """``e`` told at the user's ``pattern`` whose terminal passed a budget
    (``max_repeat``: ``a{12000}``), where ``pattern_at`` (terminal name ->
    ``(pointer, pattern)``, see ``GrammarBuilder.note_pattern``) knows it;
    else ``e``."""
    at = pattern_at.get(getattr(e, "terminal", None))
    if at is None:
        return e
    where, pattern = at
    return SchemaTooComplexError(f"pattern {pattern!r}: {e.detail}", where)


def order_instance(schema, instance, *, resources=None):
    """``instance`` with object members reordered the way the grammar of
    ``schema`` emits them: declared properties in schema order, then the others
    in their original order. Useful to serialise reference outputs (tests,
    benchmarks) in the grammar's order.

    Keywords that cannot be enforced are set aside as with ``strict=False``
    (silently); a part of the schema that cannot be normalised leaves its values
    in their order.

    Raises:
        SchemaError: ``schema`` is not a schema (not JSON, not a dict or bool).
    """
    t = Translation(load_schema(schema), Options(strict=False, time_budget=None,
                                                 resources=resources))
    return reorder(t, ("",), instance)
