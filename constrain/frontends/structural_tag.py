"""Structural tags: XGrammar's JSON format for outputs that mix free text with
structured parts (tool calls, reasoning sections), compiled to one grammar.

``compile_structural_tag(spec, vocab)`` takes ``{"type": "structural_tag",
"format": {...}}`` (what vLLM forwards for a ``structural_tag``
``response_format``), the bare format object, or the older ``{"type":
"structural_tag", "structures": [{"begin", "schema", "end"}], "triggers":
[...]}`` form. The formats and what they mean (as XGrammar defines them):

* ``const_string`` (``value``): exactly that text;
* ``json_schema`` (``json_schema``; ``style`` ``"json"`` only): a JSON text
  valid under the schema, compiled as :func:`constrain.compile_json_schema`
  does (the call's schema options apply);
* ``grammar`` (``grammar``): a GBNF grammar (``root ::= ...``, XGrammar's
  EBNF) or a Lark one (start rule ``start``);
* ``regex`` (``pattern``): a full match of the pattern;
* ``any_text`` (``excludes``, ``max_chars``, ``max_tokens``): any text
  containing none of the excluded strings, nor the end string(s) of the
  nearest enclosing ``tag``; with ``max_tokens``, carried by at most that many
  tokens (a token budget, :attr:`GrammarIR.budgets`: once it runs low only the
  tokens that close the text remain, and what follows it comes next);
* ``sequence``, ``or`` (``elements``), ``optional``, ``star``, ``plus``
  (``content``), ``repeat`` (``min``, ``max``: -1 unbounded, ``content``);
* ``tag`` (``begin``, ``content``, ``end``: a string or a list of strings):
  begin, content, end; an unbounded content needs a non-empty end;
* ``triggered_tags`` (``triggers``, ``tags``, ``at_least_one``,
  ``stop_after_first``, ``excludes``): free text in which a trigger may only
  appear as the start of one of the tags (each tag's begin starts with exactly
  one trigger); after a tag, free text again unless ``stop_after_first``;
  ``at_least_one`` makes the output start with a tag;
* ``tags_with_separator`` (``tags``, ``separator``, ``at_least_one``,
  ``stop_after_first``): tags separated by the separator, nothing else;
* ``dispatch`` (``rules``: ``[[pattern, format], ...]``, ``loop``,
  ``excludes``): free text in which a pattern is followed by its format.

The free text of ``any_text``, ``triggered_tags`` and ``dispatch`` never
contains the end string of its enclosing tag: the tag ends at the first one.
The token-level formats (``token``, ``exclude_token``, ``any_tokens``,
``token_triggered_tags``, ``token_dispatch``) and the
non-JSON ``style`` values are refused (:class:`UnsupportedStructuralTagError`):
the grammar is over bytes, and a constraint never pretends to enforce what it
does not.

Errors name the place in the spec as a JSON pointer (``/format/tags/0/end``);
errors of an embedded schema or grammar are re-raised with the pointer of the
format they are in.
"""

from __future__ import annotations

import re

from constrain.cfg.compose import IRBuilder, Sym
from constrain.errors import (GrammarError, GrammarTooComplexError, SchemaError, SchemaTooComplexError,
                              UnsupportedSchemaError)
from constrain.frontends.json_schema.document import read_json_text

__all__ = ["StructuralTagError", "UnsupportedStructuralTagError", "compile_structural_tag",
           "structural_tag_ir"]

#: the most copies a ``repeat`` may expand to (its ``min`` and a finite ``max``)
MAX_REPEAT = 1000
#: the largest ``any_text`` ``max_chars`` compiled (XGrammar's own example
#: uses 4096); past it the text's automaton grows past what is worth building
MAX_CHARS = 10_000
#: how deeply formats may nest
MAX_DEPTH = 64

_TOKEN_LEVEL = ("token", "exclude_token", "any_tokens", "token_triggered_tags", "token_dispatch")

#: the fields of each text format (XGrammar 0.2.9's models): another one is a
#: StructuralTagError, as a typo (``stop_after_frist``) asserted nothing before
_FIELDS = {
    "const_string": {"value"},
    "json_schema": {"json_schema", "style", "any_order", "max_whitespace_cnt", "excludes"},
    "any_text": {"excludes", "max_tokens", "max_chars"},
    "grammar": {"grammar", "syntax"},
    "regex": {"pattern"},
    "sequence": {"elements"}, "or": {"elements"},
    "tag": {"begin", "content", "end"},
    "triggered_tags": {"triggers", "tags", "at_least_one", "stop_after_first", "excludes"},
    "tags_with_separator": {"tags", "separator", "at_least_one", "stop_after_first"},
    "optional": {"content"}, "plus": {"content"}, "star": {"content"},
    "repeat": {"min", "max", "content"},
    "dispatch": {"rules", "loop", "excludes"},
}
#: the largest ``max_tokens`` (a token budget's count) and ``max_chars``
MAX_COUNT = 2**31 - 1


class StructuralTagError(SchemaError):
    """A structural tag is malformed (an unknown format type, a missing or
    ill-typed field, a tag that matches no trigger...); ``pointer`` is the
    JSON pointer of the problem in the spec."""


class UnsupportedStructuralTagError(UnsupportedSchemaError):
    """A structural tag asks for what Trellis cannot enforce (token-level
    formats, a non-JSON ``style``); ``pointer`` names it."""


def _ptr(path: tuple) -> str:
    return "".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in path)


class _Translator:
    """Walks a format tree into an :class:`IRBuilder`."""

    def __init__(self, schema_options: dict, deadline, alphabet=None):
        self.g = IRBuilder()
        self.alphabet = alphabet
        self.schema_options = schema_options
        self.deadline = deadline
        #: terminal name -> (pointer in the spec, pattern) of an embedded
        #: schema's ``pattern`` terminals (see compile_structural_tag)
        self.pattern_at: dict[str, tuple[str, str]] = {}
        #: pointers of the formats that match no text (dropped as alternatives,
        #: named if the whole tag then matches nothing)
        self.empty_at: list[str] = []

    # -- fields ---------------------------------------------------------------------

    def _obj(self, node, path) -> dict:
        if not isinstance(node, dict):
            raise StructuralTagError(f"a format is a JSON object, not {type(node).__name__}",
                                     _ptr(path))
        return node

    def _field(self, node: dict, name: str, path, kind, default=...):
        if name not in node:
            if default is ...:
                raise StructuralTagError(f"{node.get('type', 'the format')!s} needs {name!r}",
                                         _ptr(path))
            return default
        value = node[name]
        ok = isinstance(value, kind) and not (kind is int and isinstance(value, bool))
        if not ok:
            want = {str: "a string", bool: "a boolean", int: "an integer", list: "a list",
                    dict: "an object"}.get(kind, str(kind))
            raise StructuralTagError(f"{name} must be {want}, not {type(value).__name__}",
                                     _ptr(path + (name,)))
        return value

    def _strings(self, node: dict, name: str, path, default=...) -> list[str]:
        values = self._field(node, name, path, list, default)
        for i, v in enumerate(values):
            if not isinstance(v, str):
                raise StructuralTagError(f"{name}[{i}] must be a string", _ptr(path + (name, i)))
        return list(values)

    def _excludes(self, node: dict, path) -> list[str]:
        excludes = self._strings(node, "excludes", path, [])
        if "" in excludes:  # it was dropped: excluding nothing, silently
            raise StructuralTagError("an excludes string is empty",
                                     _ptr(path + ("excludes", excludes.index(""))))
        return excludes

    # -- the formats --------------------------------------------------------------

    def format(self, node, path: tuple, ends: tuple) -> Sym:
        """The nonterminal of the format ``node`` at ``path``; ``ends``: the
        string ends of the nearest enclosing tag."""
        if len(path) > 2 * MAX_DEPTH:
            raise StructuralTagError(f"formats nest more than {MAX_DEPTH} deep", _ptr(path))
        if self.deadline is not None and self.deadline.expired():
            raise GrammarTooComplexError("the structural tag's translation ran past its "
                                         "time_budget; pass a larger time_budget=")
        node = self._obj(node, path)
        kind = node.get("type")
        if not isinstance(kind, str):
            raise StructuralTagError("a format needs a string 'type'", _ptr(path))
        if kind in _TOKEN_LEVEL:
            raise UnsupportedStructuralTagError(
                f"the token-level format {kind!r} is not supported: Trellis compiles structural "
                f"tags over text; write the token's text (a string tag or const_string) instead",
                _ptr(path + ("type",)))
        visit = getattr(self, "_" + kind, None)
        if visit is None:
            raise StructuralTagError(f"unknown format type {kind!r}", _ptr(path + ("type",)))
        _check_fields(node, kind, path)
        return visit(node, path, ends)

    def _const_string(self, node, path, ends) -> Sym:
        value = self._field(node, "value", path, str)
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate: no bytes spell it
            self.empty_at.append(_ptr(path + ("value",)))
            return self.g.choice("const", [])
        return self.g.choice("const", [self.g.literal(value)])

    def _json_schema(self, node, path, ends) -> Sym:
        from constrain.frontends.json_schema.compiler import json_schema_ir

        style = self._field(node, "style", path, str, "json")
        if style != "json":
            raise UnsupportedStructuralTagError(f"json_schema style {style!r} is not supported "
                                                f"(only 'json')", _ptr(path + ("style",)))
        if self._field(node, "any_order", path, bool, False):
            raise UnsupportedStructuralTagError("json_schema any_order is not supported: "
                                                "properties come in their declared order",
                                                _ptr(path + ("any_order",)))
        if self._excludes(node, path):
            raise UnsupportedStructuralTagError("json_schema excludes (texts no string value may "
                                                "hold) is not supported",
                                                _ptr(path + ("excludes",)))
        options = self.schema_options
        cap = node.get("max_whitespace_cnt")
        if cap is not None:
            cap = self._field(node, "max_whitespace_cnt", path, int)
            if cap < 0:
                raise StructuralTagError("max_whitespace_cnt must be >= 0",
                                         _ptr(path + ("max_whitespace_cnt",)))
            # at most that much whitespace around the punctuation (none at 0)
            options = {**options, "whitespace": "flexible" if cap else "compact",
                       "max_whitespace": max(cap, 1)}
        if "json_schema" not in node:
            raise StructuralTagError("json_schema needs 'json_schema'", _ptr(path))
        schema = node["json_schema"]
        where = _ptr(path + ("json_schema",))
        if isinstance(schema, str):  # JSON text is taken too (XGrammar's older API took it)
            schema = read_json_text(schema, "json_schema", StructuralTagError, where)
        patterns: dict = {}
        try:
            ir = json_schema_ir(schema, patterns=patterns, **options)
        except (SchemaError, UnsupportedSchemaError, SchemaTooComplexError) as e:
            raise type(e)(e.msg, where + e.pointer) from e
        names: dict = {}
        sym = self.g.embed(ir, "json", names)
        for name, (pointer, pattern) in patterns.items():
            self.pattern_at[names[name]] = (where + pointer, pattern)
        return sym

    def _grammar(self, node, path, ends) -> Sym:
        text = self._field(node, "grammar", path, str)
        syntax = self._field(node, "syntax", path, str, None)
        if syntax not in (None, "ebnf", "lark"):
            raise StructuralTagError(f"grammar syntax must be 'ebnf' or 'lark', not {syntax!r}",
                                     _ptr(path + ("syntax",)))
        where = _ptr(path + ("grammar",))
        try:
            ir = _load_grammar(text, syntax)
        except GrammarError as e:
            place = f" (line {e.line}, column {e.column})" if e.line else ""
            raise StructuralTagError(f"{e.msg}{place}", where) from e
        return self.g.embed(ir, "grammar")

    def _regex(self, node, path, ends) -> Sym:
        from constrain.errors import RegexError
        from constrain.regular.regex import EmptyLanguageError, regex_byte_dfa

        pattern = self._field(node, "pattern", path, str)
        nullable = False
        if self.alphabet is not None:  # compiled here too, so that errors name the format
            try:
                nullable = regex_byte_dfa(pattern, self.alphabet).matches(b"")
            except EmptyLanguageError:
                # no text: this alternative is gone, the others of an "or" stay
                # (as in a grammar); a format left with none is refused whole
                self.empty_at.append(_ptr(path + ("pattern",)))
                return self.g.choice("regex", [])
            except RegexError as e:
                raise StructuralTagError(str(e), _ptr(path + ("pattern",))) from e
        if not nullable:
            return self.g.choice("regex", [[self.g.terminal(pattern)]])
        # a terminal never matches the empty string: ε, or the non-empty matches
        return self.g.choice("regex", [[], [self.g.terminal(f"(?=[\\s\\S])(?:{pattern})")]])

    def _free_text(self, hint: str, avoid, max_chars=None, max_tokens=None) -> Sym:
        """ε or a non-empty text that contains none of ``avoid`` (at most
        ``max_chars`` characters, carried by at most ``max_tokens`` tokens)."""
        avoid = sorted({a for a in avoid if a}, key=lambda s: (-len(s), s))
        char = "[\\s\\S]" if not avoid else \
            "(?:(?!" + "|".join(re.escape(a) for a in avoid) + ")[\\s\\S])"
        if max_chars == 0 or max_tokens == 0:
            return self.g.choice(hint, [[]])
        reps = "+" if max_chars is None else "{1,%d}" % max_chars
        return self.g.choice(hint, [[], [self.g.terminal(char + reps, max_tokens=max_tokens)]])

    def _any_text(self, node, path, ends) -> Sym:
        excludes = self._excludes(node, path)
        max_tokens = node.get("max_tokens")
        if max_tokens is not None:
            max_tokens = self._field(node, "max_tokens", path, int)
            if not 0 <= max_tokens <= MAX_COUNT:  # (2**31 overflowed an int32 table)
                raise StructuralTagError(f"any_text max_tokens must be between 0 and {MAX_COUNT}",
                                         _ptr(path + ("max_tokens",)))
        max_chars = node.get("max_chars")
        if max_chars is not None:
            max_chars = self._field(node, "max_chars", path, int)
            if not 0 <= max_chars <= MAX_COUNT:
                raise StructuralTagError(f"any_text max_chars must be between 0 and {MAX_COUNT}",
                                         _ptr(path + ("max_chars",)))
            if max_chars > MAX_CHARS:
                raise UnsupportedStructuralTagError(
                    f"any_text max_chars above {MAX_CHARS} is not supported (write a "
                    f"max_tokens budget, or leave the text unbounded)", _ptr(path + ("max_chars",)))
        return self._free_text("any_text", excludes + list(ends), max_chars, max_tokens)

    def _elements(self, node, path) -> list:
        elements = self._field(node, "elements", path, list)
        if not elements:
            raise StructuralTagError(f"{node['type']} needs at least one element",
                                     _ptr(path + ("elements",)))
        return elements

    def _sequence(self, node, path, ends) -> Sym:
        elements = self._elements(node, path)
        parts = [self.format(e, path + ("elements", i), ends) for i, e in enumerate(elements)]
        return self.g.choice("sequence", [parts])

    def _or(self, node, path, ends) -> Sym:
        elements = self._elements(node, path)
        return self.g.choice("or", [[self.format(e, path + ("elements", i), ends)]
                                    for i, e in enumerate(elements)])

    def _content(self, node, path, ends) -> Sym:
        if "content" not in node:
            raise StructuralTagError(f"{node['type']} needs 'content'", _ptr(path))
        return self.format(node["content"], path + ("content",), ends)

    def _optional(self, node, path, ends) -> Sym:
        return self.g.choice("optional", [[], [self._content(node, path, ends)]])

    def _star(self, node, path, ends) -> Sym:
        return self.g.star("star", [self._content(node, path, ends)])

    def _plus(self, node, path, ends) -> Sym:
        body = self._content(node, path, ends)
        return self.g.choice("plus", [[body, self.g.star("plus_rest", [body])]])

    def _repeat(self, node, path, ends) -> Sym:
        lo = self._field(node, "min", path, int)
        hi = self._field(node, "max", path, int)
        if lo < 0 or (hi != -1 and hi < lo):
            raise StructuralTagError(f"repeat needs 0 <= min <= max (or max -1), got {lo}, {hi}",
                                     _ptr(path + ("min" if lo < 0 else "max",)))
        if max(lo, hi) > MAX_REPEAT:
            raise UnsupportedStructuralTagError(f"repeat bounds above {MAX_REPEAT} are not "
                                                f"supported",
                                                _ptr(path + ("min" if lo > MAX_REPEAT else "max",)))
        body = self._content(node, path, ends)
        parts = [body] * lo
        if hi == -1:
            parts.append(self.g.star("repeat_rest", [body]))
        else:
            tail = self.g.choice("repeat_tail", [[]])
            for _ in range(hi - lo):  # at most hi - lo more: nested optionals
                tail = self.g.choice("repeat_tail", [[], [body, tail]])
            parts.append(tail)
        return self.g.choice("repeat", [parts])

    def _tag_ends(self, node, path) -> list[str]:
        if "end" not in node:
            raise StructuralTagError("tag needs 'end'", _ptr(path))
        end = node["end"]
        if isinstance(end, str):
            return [end]
        if isinstance(end, list) and end and all(isinstance(e, str) for e in end):
            return list(end)
        if isinstance(end, dict):
            raise UnsupportedStructuralTagError("a token end is not supported: write the "
                                                "token's text", _ptr(path + ("end",)))
        raise StructuralTagError("end must be a string or a non-empty list of strings",
                                 _ptr(path + ("end",)))

    def _tag_begin(self, node, path) -> str:
        if "begin" not in node:
            raise StructuralTagError("tag needs 'begin'", _ptr(path))
        begin = node["begin"]
        if isinstance(begin, dict):
            raise UnsupportedStructuralTagError("a token begin is not supported: write the "
                                                "token's text", _ptr(path + ("begin",)))
        if not isinstance(begin, str):
            raise StructuralTagError("begin must be a string", _ptr(path + ("begin",)))
        return begin

    def _tag(self, node, path, ends) -> Sym:
        node = self._obj(node, path)
        if node.get("type", "tag") != "tag":
            raise StructuralTagError(f"expected a tag, not {node.get('type')!r}",
                                     _ptr(path + ("type",)))
        _check_fields(node, "tag", path)
        begin = self._tag_begin(node, path)
        tag_ends = self._tag_ends(node, path)
        inner = tuple(e for e in tag_ends if e)
        content = self._content(node, path, inner)
        if not inner and _unbounded(node.get("content")):
            raise StructuralTagError("a tag whose content is unbounded needs a non-empty end",
                                     _ptr(path + ("end",)))
        end = self.g.choice("tag_end", [self.g.literal(e) for e in tag_ends])
        return self.g.choice("tag", [[*self.g.literal(begin), content, end]])

    def _tags(self, node, path, ends) -> tuple[list, list[Sym]]:
        tags = self._field(node, "tags", path, list)
        if not tags:
            raise StructuralTagError(f"{node['type']} needs at least one tag",
                                     _ptr(path + ("tags",)))
        return tags, [self._tag(t, path + ("tags", i), ends) for i, t in enumerate(tags)]

    def _dispatch_text(self, hint, units: list[Sym], free: Sym, *, at_least_one: bool,
                       stop_after_first: bool) -> Sym:
        """Free text with ``units`` (alternatives) dispatched in it: the
        combinations of the two flags as XGrammar defines them."""
        unit = self.g.choice(hint + "_unit", [[u] for u in units])
        if at_least_one and stop_after_first:
            return self.g.choice(hint, [[unit]])
        if stop_after_first:
            return self.g.choice(hint, [[free], [free, unit]])
        more = self.g.star(hint + "_more", [unit, free])
        if at_least_one:
            return self.g.choice(hint, [[unit, free, more]])
        return self.g.choice(hint, [[free, more]])

    def _triggered_tags(self, node, path, ends) -> Sym:
        triggers = self._strings(node, "triggers", path)
        if not triggers or any(not t for t in triggers):
            raise StructuralTagError("triggers must be a non-empty list of non-empty strings",
                                     _ptr(path + ("triggers",)))
        excludes = self._excludes(node, path)
        at_least_one = self._field(node, "at_least_one", path, bool, False)
        stop = self._field(node, "stop_after_first", path, bool, False)
        tags, units = self._tags(node, path, ends)
        for i, tag in enumerate(tags):
            begin = self._tag_begin(tag, path + ("tags", i))
            hits = [t for t in triggers if begin.startswith(t)]
            if len(hits) != 1:
                raise StructuralTagError(
                    f"tag begin {begin!r} starts with {len(hits)} triggers; it must start with "
                    f"exactly one of {triggers}", _ptr(path + ("tags", i, "begin")))
        free = self._free_text("free_text", triggers + excludes + list(ends))
        return self._dispatch_text("triggered_tags", units, free, at_least_one=at_least_one,
                                   stop_after_first=stop)

    def _tags_with_separator(self, node, path, ends) -> Sym:
        separator = self._field(node, "separator", path, str)
        at_least_one = self._field(node, "at_least_one", path, bool, False)
        stop = self._field(node, "stop_after_first", path, bool, False)
        _, units = self._tags(node, path, ends)
        unit = self.g.choice("tags_unit", [[u] for u in units])
        if stop:
            alts = [[unit]]
        else:
            rest = self.g.star("tags_rest", [*self.g.literal(separator), unit])
            alts = [[unit, rest]]
        if not at_least_one:
            alts.append([])
        return self.g.choice("tags_with_separator", alts)

    def _dispatch(self, node, path, ends) -> Sym:
        rules = self._field(node, "rules", path, list)
        if not rules:
            raise StructuralTagError("dispatch needs at least one rule", _ptr(path + ("rules",)))
        loop = self._field(node, "loop", path, bool, True)
        excludes = self._excludes(node, path)
        patterns, units = [], []
        for i, r in enumerate(rules):
            if not (isinstance(r, list) and len(r) == 2 and isinstance(r[0], str) and r[0]):
                raise StructuralTagError("a dispatch rule is [pattern, format] with a non-empty "
                                         "pattern string", _ptr(path + ("rules", i)))
            patterns.append(r[0])
            body = self.format(r[1], path + ("rules", i, 1), ends)
            units.append(self.g.choice("dispatch_rule", [[*self.g.literal(r[0]), body]]))
        free = self._free_text("free_text", patterns + excludes + list(ends))
        return self._dispatch_text("dispatch", units, free, at_least_one=False,
                                   stop_after_first=not loop)


def _unbounded(node) -> bool:
    """Whether a format's text can be arbitrarily long by itself (free text, or a
    repetition), as XGrammar decides when a tag needs an end."""
    if not isinstance(node, dict):
        return False
    kind = node.get("type")
    if kind in ("any_text", "triggered_tags", "dispatch"):
        return not node.get("excludes")  # excludes bound the text, as XGrammar counts it
    if kind in ("tags_with_separator", "star", "plus"):
        return True
    if kind in ("sequence", "or"):
        return any(_unbounded(e) for e in node.get("elements") or ())
    if kind == "optional":
        return _unbounded(node.get("content"))
    if kind == "repeat":
        return node.get("max") == -1 or (node.get("max") != 0 and _unbounded(node.get("content")))
    return False


def _check_fields(node: dict, kind: str, path: tuple) -> None:
    """Refuse a field that format ``kind`` does not have."""
    known = _FIELDS.get(kind)
    if known is None:
        return
    extra = sorted(k for k in node if k != "type" and k not in known)
    if extra:
        raise StructuralTagError(f"unknown field {extra[0]!r} of a {kind} format (its fields: "
                                 f"{', '.join(sorted(known))})", _ptr(path + (extra[0],)))


def _load_grammar(text: str, syntax: str | None = None):
    """A grammar format's IR: ``syntax`` ``"ebnf"``: GBNF (llama.cpp's, as
    XGrammar's EBNF is, less its lookahead ``(= ...)``); ``"lark"``: Lark
    (start rule ``start``); ``None``: GBNF when its rules are written
    ``name ::= ...``, else Lark."""
    from constrain.frontends.gbnf import load_gbnf_grammar, looks_like_gbnf
    from constrain.frontends.lark import load_lark_grammar

    if syntax is None:
        syntax = "ebnf" if looks_like_gbnf(text) else "lark"
    return load_gbnf_grammar(text) if syntax == "ebnf" else load_lark_grammar(text)


def _format_of(spec) -> tuple[object, tuple, bool]:
    """The format object of a spec, its path, and whether the spec is the
    legacy ``structures``/``triggers`` form (read as the ``triggered_tags`` it
    stands for); else ``{"type": "structural_tag", "format": ...}`` or a bare
    format."""
    from constrain.frontends.response_format import load_request

    spec = load_request(spec, "structural tag", StructuralTagError)
    if not isinstance(spec, dict):
        raise StructuralTagError(f"a structural tag is a JSON object, not {type(spec).__name__}",
                                 "")
    if spec.get("type") != "structural_tag":
        return spec, (), False
    if "format" in spec:
        return spec["format"], ("format",), False
    if "structures" in spec:
        structures, triggers = spec.get("structures"), spec.get("triggers")
        if not isinstance(structures, list) or not isinstance(triggers, list):
            raise StructuralTagError("the legacy form needs 'structures' and 'triggers' lists", "")
        tags = []
        for i, s in enumerate(structures):
            if not isinstance(s, dict) or not {"begin", "schema", "end"} <= set(s):
                raise StructuralTagError("a structure needs begin, schema and end",
                                         _ptr(("structures", i)))
            tags.append({"type": "tag", "begin": s["begin"], "end": s["end"],
                         "content": {"type": "json_schema", "json_schema": s["schema"]}})
        return {"type": "triggered_tags", "triggers": triggers, "tags": tags}, (), True
    raise StructuralTagError("a structural_tag needs 'format'", "")


def structural_tag_ir(spec, *, time_budget: float | None = 30.0, alphabet=None,
                      patterns: dict | None = None, empty: list | None = None, **schema_options):
    """The :class:`~constrain.cfg.ir.GrammarIR` of a structural tag (see the
    module docstring); ``schema_options`` go to every ``json_schema`` format
    (``whitespace``, ``strict``, ...). With ``alphabet`` (a token trie's), each
    ``regex`` is compiled on the way, so that its errors name its format.
    ``patterns``, when given, receives ``terminal name -> (pointer, pattern)``
    of the embedded schemas' ``pattern`` terminals (see
    :func:`~constrain.frontends.json_schema.compiler.json_schema_ir`), and
    ``empty`` the pointers of the formats that match no text (a ``regex``
    with no match the alphabet spells, a ``const_string`` no UTF-8 spells)."""
    from constrain.automata.deadline import Deadline

    node, path, legacy = _format_of(spec)
    t = _Translator(schema_options, Deadline.after(time_budget) if time_budget else None,
                    alphabet)
    try:
        ir = t.g.build(t.format(node, path, ()))
        if patterns is not None:
            patterns.update({name: (_legacy_pointer(where) if legacy else where, pattern)
                             for name, (where, pattern) in t.pattern_at.items()})
        if empty is not None:
            empty.extend(_legacy_pointer(where) if legacy else where for where in t.empty_at)
        return ir
    except (SchemaError, UnsupportedSchemaError, SchemaTooComplexError) as e:
        # the legacy form is read as the triggered_tags it stands for: its
        # errors name the user's structures
        where = _legacy_pointer(e.pointer) if legacy else e.pointer
        if where == e.pointer:
            raise
        raise type(e)(e.msg, where) from None


#: a pointer into the triggered_tags the legacy form stands for -> the user's
_LEGACY_PLACES = ((re.compile(r"^/tags/(\d+)/content(?:/json_schema)?(?=/|$)"), r"/structures/\1/schema"),
                  (re.compile(r"^/tags(?=/|$)"), "/structures"))


def _legacy_pointer(pointer: str) -> str:
    """The place in a legacy ``structures``/``triggers`` spec that ``pointer``
    (into the ``triggered_tags`` it stands for) names."""
    for pattern, repl in _LEGACY_PLACES:
        new = pattern.sub(repl, pointer, count=1)
        if new != pointer:
            return new
    return pointer


def compile_structural_tag(spec, vocab, *, compiler=None, **options):
    """Compile a structural tag into a token-level constraint over ``vocab``.

    Args:
        spec: ``{"type": "structural_tag", "format": {...}}``, a bare format,
            the legacy ``structures``/``triggers`` form, or the JSON text of one.
        vocab: the :class:`~constrain.Vocabulary`.
        compiler: the :class:`~constrain.Compiler` whose caches and limits the
            compile uses (default: the vocabulary's default compiler).
        options: the JSON Schema options of :func:`constrain.compile_json_schema`
            (``whitespace``, ``max_whitespace``, ``strict``, ``formats``...),
            applied to every ``json_schema`` format, and fields of
            :class:`~constrain.Limits`.

    Returns:
        a :class:`~constrain.GrammarConstraint` whose language is the format's.

    Raises:
        StructuralTagError: the spec is malformed (JSON pointer named).
        UnsupportedStructuralTagError: it asks for a token-level format or a
            non-JSON style.
        SchemaError, UnsupportedSchemaError: an embedded JSON Schema's (the
            pointer runs through the spec).
        GrammarTooComplexError: a budget ran out.
    """
    from constrain.cfg.grammar import GrammarConstraint
    from constrain.compiler import _LIMIT_FIELDS, _grammar_budgets, default_compiler

    if compiler is None:
        compiler = default_compiler(vocab)
    elif compiler.vocab != vocab:
        from constrain.errors import VocabularyError

        raise VocabularyError("the compiler was made for another vocabulary")
    limits = compiler.limits.replace(**{k: options.pop(k) for k in list(options)
                                         if k in _LIMIT_FIELDS})
    from constrain.frontends.json_schema.compiler import _SCHEMA_OPTIONS
    from constrain.frontends.json_schema.options import Options

    unknown = sorted(set(options) - set(_SCHEMA_OPTIONS))
    if unknown:
        raise TypeError(f"unknown structural tag options: {', '.join(unknown)} (the JSON Schema "
                        f"options {', '.join(_SCHEMA_OPTIONS)} and the fields of Limits)")
    # checked even where no json_schema format reads them (whitespace="banana")
    Options(**options)
    patterns: dict = {}
    empty: list = []
    ir = compiler.schema_caches.run(lambda: structural_tag_ir(
        spec, time_budget=limits.time_budget, alphabet=compiler.trie.alphabet,
        patterns=patterns, empty=empty, **options))
    try:
        return GrammarConstraint(ir, vocab, source="", compiler=compiler,
                                 **_grammar_budgets(limits))
    except GrammarTooComplexError as e:
        from constrain.frontends.json_schema.compiler import at_pattern

        # an embedded schema's pattern past a budget, told where it is written
        raise at_pattern(patterns, e) from None
    except GrammarError as e:
        if "derives no string" not in str(e):
            raise
        # named by its generated rule before: the format as a whole
        from constrain.regular.regex import EmptyLanguageError

        named = f" (formats that match none: {', '.join(empty[:5])})" if empty else ""
        raise EmptyLanguageError("the structural tag matches no text the vocabulary can "
                                 f"spell{named}") from None

