"""Normalisation: a schema node as a disjunction of conjunctions of node
references (``anyOf``/``oneOf`` distribute, ``allOf``, ``$ref`` siblings,
``not: {required}`` and schema-valued dependencies conjoin), each conjunction
then compiled per JSON type with its keywords merged."""

from __future__ import annotations

import contextlib

from constrain.errors import (GrammarTooComplexError, SchemaError, SchemaTooComplexError,
                              UnsupportedSchemaError)
from constrain.frontends.json_schema.disjointness import resolve_one_of
from constrain.frontends.json_schema.document import Document, escape_token
from constrain.frontends.json_schema.keywords import IGNORABLE, not_required_sets
from constrain.frontends.json_schema.negation import Negator
from constrain.frontends.json_schema.nodes import NodeRef, NotAll, Pointer, Synthetic
from constrain.frontends.json_schema.options import MAX_CONJUNCTIONS
from constrain.frontends.json_schema.rules import Budget

#: an anyOf of up to this many branches is split by which branches match, where
#: unevaluated* needs to know (see Normaliser._any_of_subsets)
_MAX_SPLIT_ANY_OF = 4
#: the objects (a conjunct of ``not: {required}``)
_OBJECT = Synthetic("type", "object")
#: the keywords :meth:`Normaliser._expand` reads: a node with none of them is
#: its own form (most nodes: a property's ``{"type": ...}``), with no step to take
_APPLICATORS = frozenset(("$ref", "$dynamicRef", "not", "if", "dependencies", "dependentSchemas",
                          "allOf", "anyOf", "oneOf"))


class Normaliser:
    """Disjunctive normal forms of the nodes of one document, memoised.

    While a ``oneOf`` disjointness proof runs (:meth:`proving`), nested ``oneOf``
    are not checked, and their forms are memoised apart."""

    def __init__(self, doc: Document, budget: Budget, formats_asserted: bool = True):
        self.doc = doc
        self.budget = budget
        self.negator = Negator(doc, formats_asserted)
        #: the nodes whose ``not`` is expanded here (into its complement), which
        #: the per-type emitters then leave alone
        self.negated: set = set()
        #: ``.../not`` or ``.../if`` pointers whose complement cannot be stated
        self.unnegated: dict = {}
        self._cache: dict[bool, dict] = {False: {}, True: {}}
        self._checking = False
        #: the nodes being flattened right now, per mode
        self._active: dict[bool, set] = {False: set(), True: set()}

    @contextlib.contextmanager
    def proving(self):
        """The context of a disjointness proof."""
        before, self._checking = self._checking, True
        try:
            yield
        finally:
            self._checking = before

    def flatten(self, ref: NodeRef, stack: tuple = ()) -> list[tuple]:
        """The schema at ``ref`` as a disjunction of conjunctions of node
        references (combinators and ``$ref`` expanded).

        Raises:
            UnsupportedSchemaError: a node refers to itself with no object or
                array in between (or, strict, overlapping ``oneOf`` branches).
            SchemaError: a malformed combinator or a dangling ``$ref``.
            GrammarTooComplexError: too many conjunctions, or the time budget.
        """
        cache = self._cache[self._checking]
        hit = cache.get(ref)
        if hit is not None:
            return hit
        self.budget.tick(ref)
        node = self.doc.node(ref)
        if node is True:
            return [()]
        if node is False:
            return []
        active = self._active[self._checking]
        if ref in stack or ref in active:
            # normalisation takes no structural step: meeting a node again while
            # expanding it is a cycle with no object or array in between
            raise UnsupportedSchemaError(
                "a schema that refers to itself without an object or array in between", ref)
        active.add(ref)
        try:
            dnf = self._expand(ref, node, stack + (ref,))
        finally:
            active.discard(ref)
        cache[ref] = dnf
        return dnf

    def _expand(self, ref: NodeRef, node: dict, stack: tuple) -> list[tuple]:
        """:meth:`flatten` of a node that is an object, not yet memoised."""
        dnf = [(ref,)]
        if _APPLICATORS.isdisjoint(node):
            return dnf
        if "$ref" in node:
            target = self.doc.resolve_ref(node["$ref"], ref + "/$ref")
            if self.doc.ref_ignores_siblings:
                # drafts 3 to 7: "all other properties in a $ref object MUST be
                # ignored" (jsonschema does so too)
                return self.flatten(target, stack)
            dnf = self.product(dnf, self.flatten(target, stack), ref)
        if "$dynamicRef" in node:
            target = self.doc.resolve_dynamic_ref(node["$dynamicRef"], ref + "/$dynamicRef")
            dnf = self.product(dnf, self.flatten(target, stack), ref)
        sets = not_required_sets(node.get("not"))
        if sets is not None:
            # not {required: S} (or an anyOf of such): an object missing some name of
            # each S
            dnf = self.product(dnf, [(_OBJECT,) + tuple(NotAll.of(x) for x in sets)], ref)
        elif "not" in node and not _simple_not(node["not"]):
            # any other not but those the emitters apply (types, enum values): its
            # complement, as a schema
            neg = self._negate(f"{ref}/not")
            form = None if neg is None else self._deferred(f"{ref}/not", lambda: self.flatten(neg, stack))
            if form is not None:
                self.negated.add(ref)
                dnf = self.product(dnf, form, ref)
        if "if" in node and "then" not in node and "else" not in node and self.doc.has_unevaluated:
            # an if alone changes only the annotations unevaluated* see: the
            # values it matches with its annotations, or any value with none of
            # them (a value that matches takes that one with fewer evaluated
            # members, the strict side) -- no complement needed
            dnf = self.product(dnf, self.flatten(f"{ref}/if", stack) + [()], ref)
        elif "if" in node and ("then" in node or "else" in node or self.doc.has_unevaluated):
            neg = self._negate(f"{ref}/if")
            form = None if neg is None else self._deferred(
                f"{ref}/if", lambda: self._if_then_else(ref, node, neg, stack))
            if form is not None:
                dnf = self.product(dnf, form, ref)
        dnf = self._dependencies(node, ref, dnf, stack)
        for i, _ in enumerate(_list(node, "allOf", ref)):
            dnf = self.product(dnf, self.flatten(f"{ref}/allOf/{i}", stack), ref)
        for key in ("anyOf", "oneOf"):
            branches = _list(node, key, ref)
            if not branches and key in node:
                return []
            if not branches:
                continue
            flat = [self.flatten(f"{ref}/{key}/{i}", stack) for i in range(len(branches))]
            if key == "oneOf" and len(flat) > 1 and not self._checking:
                flat = self._one_of(flat, ref)
            elif key == "anyOf" and 1 < len(flat) <= _MAX_SPLIT_ANY_OF and not self._checking \
                    and self.doc.has_unevaluated and not ref.startswith("@n"):
                # (a complement's anyOf is never split: a failed schema
                # annotates nothing, and its branches' complements would nest)
                flat = self._any_of_subsets(flat, ref)
            dnf = self.product(dnf, [c for f in flat for c in f], ref)
        return dnf

    def _if_then_else(self, ref, node, neg, stack) -> list[tuple]:
        """(if and then) or (not if and else); an if alone changes nothing but
        the annotations unevaluated* see, so it splits only then."""
        yes = self.flatten(f"{ref}/if", stack)
        if "then" in node:
            yes = self.product(yes, self.flatten(f"{ref}/then", stack), ref)
        no = self.flatten(neg, stack)
        if "else" in node:
            no = self.product(no, self.flatten(f"{ref}/else", stack), ref)
        return yes + no

    def _deferred(self, ref, make):
        """``make()``, or ``None`` when it is refused (kept in ``unnegated[ref]``,
        raised only if an emitter needs the keyword, as for :meth:`_negate`)."""
        try:
            return make()
        except UnsupportedSchemaError as e:
            # without its traceback: its frames hold this object (a cycle that
            # kept the whole translation until the cyclic collector ran)
            self.unnegated[ref] = e.with_traceback(None)
            return None

    def _any_of_subsets(self, flat, ref) -> list:
        """The ``anyOf`` at ``ref`` as one alternative per set of branches that
        match (those branches and the complements of the others), so that an
        ``unevaluatedProperties``/``unevaluatedItems`` sees the annotations of
        every branch that matches, not of one (a value matching two branches is
        evaluated by both). Where a complement cannot be stated: the branches
        as they are (each alternative then sees one branch: fewer evaluated
        members, the strict side)."""
        negs = [self._negate(f"{ref}/anyOf/{j}") for j in range(len(flat))]
        if any(neg is None for neg in negs):
            return flat
        out = []
        for mask in range(1, 1 << len(flat)):
            alts = [()]
            for j, branch in enumerate(flat):
                alts = self.product(alts, branch if mask >> j & 1 else self.flatten(negs[j]), ref)
            out.append(alts)
        return out

    def _negate(self, ref) -> Pointer | None:
        """The complement of the schema at ``ref`` (see :mod:`.negation`), or
        ``None`` where it cannot be stated: the error is kept in
        ``unnegated[ref]`` and raised (or, not strict, the keyword ignored) only
        if an emitter needs the keyword -- a conjunction with an ``enum`` or
        ``const`` is exact without it (each value is checked whole)."""
        try:
            return self.negator.negate(ref)
        except UnsupportedSchemaError as e:
            self.unnegated[ref] = e.with_traceback(None)  # as in _deferred
            return None

    def _one_of(self, flat, ref) -> list:
        """The branches of the ``oneOf`` at ``ref``, made disjoint where that is
        proven (see :mod:`~constrain.frontends.json_schema.disjointness`)."""
        resolved, fallback = resolve_one_of(self, flat, (ref,))
        if resolved is not None:
            return resolved
        # exactly one branch: branch i and the complement of every other one
        negs = [self._negate(f"{ref}/oneOf/{j}") for j in range(len(flat))]
        if any(neg is None for neg in negs):
            if fallback is not None:
                return fallback
            self.doc.diag.unsupported(f"{ref}/oneOf", "oneOf branches may overlap (a value "
                                      "matching two is invalid, no rule excludes it, and a "
                                      "branch has no complement)")
            return flat
        out = []
        try:
            for i, branch in enumerate(flat):
                alts = branch
                for j, neg in enumerate(negs):
                    if j != i:
                        alts = self.product(alts, self.flatten(neg), ref)
                out.append(alts)
        except SchemaTooComplexError:
            if fallback is None:
                raise
            return fallback
        return out

    def _dependencies(self, node, ref, dnf, stack):
        """Schema-valued ``dependencies``/``dependentSchemas`` of an object schema:
        (trigger absent) or (trigger present and the dependent schema)."""
        for key in ("dependencies", "dependentSchemas"):
            deps = node.get(key)
            if not isinstance(deps, dict):
                continue
            for trig, dep in deps.items():
                if isinstance(dep, list):
                    continue  # dependentRequired form: see objects.object_symbol
                where = f"{ref}/{key}/{escape_token(trig)}"
                # non-objects take the first branch (NotAll admits them)
                absent = (NotAll.of([trig]),)
                present = (_OBJECT, Synthetic("required", (trig,)))
                alts = [absent] + [present + c for c in self.flatten(where, stack)]
                dnf = self.product(dnf, alts, ref)
        return dnf

    def product(self, a, b, where) -> list[tuple]:
        """The conjunctions of ``a`` and ``b`` pairwise (the ``allOf`` of two
        disjunctions), each without repeated references.

        Raises:
            SchemaTooComplexError: more than :data:`MAX_CONJUNCTIONS`.
        """
        out = []
        for x in a:
            for y in b:
                # x empty (the first factor of flatten_pieces): y as it is
                out.append(x + tuple(p for p in y if p not in x) if x else tuple(y))
                if len(out) > MAX_CONJUNCTIONS:
                    raise SchemaTooComplexError(
                        f"more than {MAX_CONJUNCTIONS} alternatives after distributing "
                        f"anyOf/oneOf over allOf", where if isinstance(where, str) else "")
        return out

    def evaluators(self, ref: NodeRef, conj) -> tuple:
        """The nodes whose annotations ``unevaluatedProperties``/``unevaluatedItems``
        at ``ref`` see, for a value matched against the conjunction ``conj``
        (which holds ``ref``): ``ref`` and the subschemas it applies in place
        (``allOf``, the ``anyOf``/``oneOf`` branches taken, ``$ref`` targets,
        dependent schemas), i.e. the union of the disjuncts of ``ref``'s own
        normal form that ``conj`` contains -- not the schemas that merely apply
        beside ``ref`` (a parent's other ``allOf`` branches: "cousins")."""
        have = set(conj)
        out: dict = {}
        # the form as a proof sees it (oneOf branches as written): a branch in
        # conj is that branch and what made it exclusive, so it contains the
        # branch's own conjunction; and it can be asked while ref's final form is
        # still being made (a oneOf's proof or complements looking at objects)
        with self.proving():
            form = self.flatten(ref)
        for c in form:
            if have.issuperset(c):
                out.update(dict.fromkeys(c))
        # a complement stands for a failed schema, which evaluates nothing: its
        # nodes and every node it reaches are dropped (a node also reached
        # another way is dropped too -- fewer evaluators only apply
        # unevaluated* to more members, the strict side)
        failed = set()
        for e in out:
            if type(e) is str and e.startswith("@n"):
                with self.proving():
                    for c in self.flatten(e):
                        failed.update(c)
        return tuple(e for e in out if e not in failed)

    def flatten_pieces(self, pieces) -> list[tuple]:
        """The conjunction of the schemas at ``pieces``, normalised."""
        if len(pieces) == 1:
            # (most values are one node: its form as it is, without a product)
            return list(self.flatten(pieces[0]))
        dnf = [()]
        for p in pieces:
            dnf = self.product(dnf, self.flatten(p), p)
        return dnf

    def try_flatten_pieces(self, pieces) -> list[tuple] | None:
        """:meth:`flatten_pieces`, or ``None`` where the schemas cannot be
        normalised: a dangling ``$ref`` or malformed combinator
        (:class:`SchemaError`), a self-reference with nothing in between
        (:class:`UnsupportedSchemaError`), too many alternatives or the time
        budget (:class:`GrammarTooComplexError`). For questions that have a safe
        answer without the form (disjointness proofs, member order)."""
        try:
            return self.flatten_pieces(pieces)
        except (UnsupportedSchemaError, SchemaError, GrammarTooComplexError):
            return None


def _simple_not(neg) -> bool:
    """Whether the emitters apply ``not: neg`` themselves (see
    :meth:`Translation._apply_not`): booleans, ``{}``, and a ``type``, ``enum``
    or ``const`` alone."""
    if not isinstance(neg, dict) or not neg:
        return True
    keys = set(neg) - IGNORABLE
    return not keys or keys <= {"enum", "const", "type"}


def _list(node, key, ref):
    v = node.get(key, [])
    if not isinstance(v, list):
        raise SchemaError(f"{key} must be an array", f"{ref}/{key}")
    return v
