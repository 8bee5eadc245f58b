"""One schema's translation: the state the passes share, and the rule for the
values satisfying a set of schema nodes (normalised to conjunctions, each
split per JSON type over the emitters)."""

from __future__ import annotations

import json

from constrain.automata.deadline import Deadline
from constrain.frontends.json_schema.arrays import array_symbol
from constrain.frontends.json_schema.diagnostics import Diagnostics
from constrain.frontends.json_schema.dialect import integers_are_exact
from constrain.frontends.json_schema.document import Document
from constrain.frontends.json_schema.keywords import (IGNORABLE, REFUSED, UNCONSTRAINED_KEYS, conj_types,
                                                     is_number, not_required_sets, type_set)
from constrain.frontends.json_schema.literals import enum_values, literal_symbol
from constrain.frontends.json_schema.nodes import NotAll
from constrain.frontends.json_schema.normalise import Normaliser
from constrain.frontends.json_schema.numbers import fractional_symbol, number_symbol
from constrain.frontends.json_schema.objects import object_symbol
from constrain.frontends.json_schema.options import Options
from constrain.frontends.json_schema.rules import Alt, Budget, GrammarBuilder
from constrain.frontends.json_schema.strings import string_symbol


class Translation:
    """The passes over one document, wired: ``doc`` (nodes and ``$ref``),
    ``norm`` (normal forms), ``grammar`` (the rules being built), ``diag``
    (what cannot be enforced), under ``options``. The emitters take it as
    their one argument besides the conjunction, and build member and item
    values through :meth:`value`.

    ``exclusions`` as for :class:`GrammarBuilder` (``None`` for grammar text).
    ``deadline``: the translation's (a compile's, shared with its later
    phases); by default one ``options.time_budget`` from now."""

    def __init__(self, root, options: Options, exclusions: dict | None = None, *,
                 deadline: Deadline | None = None):
        self.options = options
        self.diag = Diagnostics(options.strict)
        self.doc = Document(root, self.diag, options.resources, options.formats == "assert")
        self.diag.locate_with(self.doc.user_pointer)
        if self.doc.draft == 3:
            # its required: true, disallow, extends, divisibleBy and schemas in
            # type are read by no part of the translation: refused, not
            # silently looser
            self.diag.unsupported("/$schema", "draft 3 (declare draft 4 or later)")
        self.budget = Budget(options.deadline() if deadline is None else deadline)
        self.norm = Normaliser(self.doc, self.budget, options.formats == "assert")
        self.grammar = GrammarBuilder(options.ws, exclusions)
        #: patternProperties' translations and automata (see key_regions)
        self.key_patterns: dict = {}
        #: member name -> its key terminal (see objects.key_terminal)
        self.key_terminals: dict[str, str] = {}
        self._memo: dict[tuple, str] = {}

    def value(self, pieces: tuple) -> str:
        """A rule for the values satisfying every schema in ``pieces`` (node
        references), memoised by them."""
        if len(pieces) > 1:
            pieces = tuple(dict.fromkeys(pieces))
        g = self.grammar
        if not pieces:
            return g.any_value()
        name = self._memo.get(pieces)
        if name is not None:
            return name
        # (past the memo: a rule made before costs nothing to hand out again)
        self.budget.tick(pieces[0])
        name = g.new_rule("value")
        self._memo[pieces] = name
        dnf = self.norm.flatten_pieces(pieces)
        if any(self._unconstrained(conj) for conj in dnf):
            # one disjunct admits every value ({}, a description, a $ref to
            # one): the shared any-value rules, not a copy of them per type
            g.rules[name] = [Alt([("sym", g.any_value())])]
            return name
        g.rules[name] = [Alt([("sym", sym)]) for conj in dnf for sym in self.conjunction(conj)]
        return name

    def _unconstrained(self, conj) -> bool:
        """Whether every node of the conjunction adds nothing to it: only
        annotations, and combinators and ``$ref`` (which flattening has
        already expanded into the conjunction)."""
        node = self.doc.node
        for ref in conj:
            if type(ref) is NotAll:
                return False  # an object constraint, whatever its node says
            n = node(ref)
            if not (n is True or (isinstance(n, dict) and UNCONSTRAINED_KEYS.issuperset(n))):
                return False
        return True

    def conjunction(self, conj) -> list[str]:
        """Symbols (one per JSON type allowed) for the values satisfying all nodes of
        the conjunction."""
        types = conj_types(self.doc, conj)
        values = enum_values(self.doc, conj)
        if values is not None:
            # every candidate was validated against the full nodes: exact
            return [literal_symbol(self.grammar, values, integers_are_exact(self.doc.draft))] \
                if values else []
        self._check_keywords(conj, types)
        types, excluded = self._apply_not(conj, types)
        g = self.grammar
        out = []
        if "null" in types and not any(v is None for v in excluded):
            out.append(g.terminal("null", "NULL", "null"))
        if "boolean" in types:
            bools = [b for b in ("true", "false")
                     if not any(isinstance(v, bool) and json.dumps(v) == b for v in excluded)]
            if bools:
                out.append(g.terminal("|".join(bools), "BOOL"))
        if "integer" in types:
            out.append(number_symbol(self, conj, integer="number" not in types,
                                     excluded=[v for v in excluded if is_number(v)]))
        if "fractional" in types:
            out.append(fractional_symbol(self, conj, [v for v in excluded if is_number(v)]))
        if "string" in types:
            out.append(string_symbol(self, conj, excluded=[v for v in excluded if isinstance(v, str)]))
        if "array" in types:
            out.append(array_symbol(self, conj))
        if "object" in types:
            out.append(object_symbol(self, conj))
        return [sym for sym in out if sym]

    def _check_keywords(self, conj, types) -> None:
        """Refuse validation keywords that no per-type emitter enforces."""
        unnegated = self.norm.unnegated
        for p in conj:
            n = self.doc.node(p)
            if not isinstance(n, dict):
                continue
            if unnegated and ("not" in n or "if" in n):
                for k in ("not", "if"):
                    e = unnegated.get(f"{p}/{k}")
                    if e is not None:
                        self.diag.unsupported(e.pointer, e.msg)
            if not REFUSED.isdisjoint(n):
                for k in n:
                    if k in REFUSED:
                        self.diag.unsupported(f"{p}/{k}", f"the keyword {k!r} is not supported")

    def _apply_not(self, conj, types) -> tuple[set, list]:
        """``not``, where it is exact: ``(types, excluded)`` after ``not: {}``/``true``
        (no type), ``not: {"type": ...}`` (fewer types) and ``not: {enum}`` (values
        to leave out of the terminals); any other ``not`` is unsupported
        (``not: {required}`` was normalised)."""
        excluded: list = []
        for p in conj:
            n = self.doc.node(p)
            if (not isinstance(n, dict) or "not" not in n or p in self.norm.negated
                    or f"{p}/not" in self.norm.unnegated):
                continue  # expanded by normalisation, or refused by _check_keywords
            neg = n["not"]
            if neg is True or neg == {}:
                return set(), excluded
            if neg is False or not_required_sets(neg) is not None:
                continue
            keys = set(neg) - IGNORABLE if isinstance(neg, dict) else set()
            if keys and keys <= {"enum", "const", "type"} and keys & {"enum", "const"}:
                vals = [neg["const"]] if "const" in neg else neg.get("enum")
                if isinstance(vals, list):
                    vals = [v for v in vals if self.doc.accepts(v, f"{p}/not")]
                    if any(isinstance(v, (dict, list)) for v in vals) and types & {"object", "array"}:
                        self.diag.unsupported(f"{p}/not", "not: {enum} of objects or arrays")
                    excluded.extend(vals)
                    continue
            if keys == {"type"}:
                nt = type_set(neg["type"])
                if "integer" in nt and "number" not in nt and "number" in types:
                    # the numbers whose value is not integral (a subset of them:
                    # see fractional_symbol)
                    types = (types - nt - {"number"}) | {"fractional"}
                    continue
                types = types - nt - ({"fractional"} if "number" in nt else set())
                continue
            self.diag.unsupported(f"{p}/not", "the keyword 'not' is not supported here")
        return types, excluded
