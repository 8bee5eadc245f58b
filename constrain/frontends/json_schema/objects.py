"""Objects: the merged object keywords of a conjunction (:class:`ObjectView`), and
a rule for its objects: declared members in schema order, presence constraints
between optional members, then additional members (any other key, or keys
matching ``patternProperties``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable

from constrain.automata.json_encoding import CANON_ANY, encodable, json_str, lit
from constrain.frontends.json_schema.exclusions import exclusion_terminal
from constrain.frontends.json_schema.keywords import len_bounds
from constrain.frontends.json_schema.literals import enum_values
from constrain.frontends.json_schema.nodes import NotAll, Synthetic
from constrain.frontends.json_schema.key_regions import KeyRegions, search
from constrain.frontends.json_schema.rules import Alt

if TYPE_CHECKING:
    from constrain.frontends.json_schema.translation import Translation

#: optional members whose presence is constrained are expanded into every subset
#: (one alternative each): at most this many
_MAX_INVOLVED = 8
#: the widest range of counts of additional members min/maxProperties may leave
#: (each count above the least is one more rule)
_MAX_EXTRA_RUN = 64


@dataclass
class ObjectView:
    """Merged object keywords of a conjunction: declared members in order, their
    schemas, required names, and what additional members may be."""

    #: member name -> the references of the schemas its value must satisfy
    pieces: dict[str, tuple] = field(default_factory=dict)
    order: list[str] = field(default_factory=list)
    required: set[str] = field(default_factory=set)
    #: the patterns of ``patternProperties`` (in the conjunction and in the
    #: evaluators of an ``unevaluatedProperties``): (pattern, pointer), distinct
    patterns: list = field(default_factory=list)
    #: the references of the schemas an additional member's value satisfies,
    #: given the set of patterns its key matches (``None``: no such member)
    region_pieces: Callable[[frozenset], tuple | None] = lambda matched: ()

    @property
    def extra(self) -> str | None:
        """Additional members: ``"any"`` key, keys split by ``"patterns"``, or
        ``None`` (closed)."""
        if self.patterns:
            return "patterns"
        return None if self.region_pieces(frozenset()) is None else "any"

    @property
    def extra_pieces(self) -> tuple:
        """The schemas an additional member matching no pattern satisfies."""
        return self.region_pieces(frozenset()) or ()

    #: name sets of which an object must miss one each
    notall: list[frozenset] = field(default_factory=list)
    #: members that only a ``notall`` set names (not declared, required or a
    #: dependency's): optional, with the schemas an additional member of that
    #: name has, so that the set is enforced exactly (see :func:`object_symbol`)
    notall_only: set = field(default_factory=set)
    #: names that may not appear at all (their value's schema is ``false``): kept
    #: out of the additional members' keys too
    forbidden: list[str] = field(default_factory=list)
    #: the ``propertyNames`` schemas additional members' names must satisfy
    key_schemas: list = field(default_factory=list)

    def extra_of(self, name: str) -> tuple | None:
        """The schemas an undeclared member ``name`` satisfies (``None``: it
        may not appear)."""
        return self.region_pieces(frozenset(p for p, _ in self.patterns if search(p, name)))

    def extra_allowed_for(self, name: str) -> bool:
        """Whether an undeclared member ``name`` may appear."""
        return self.extra_of(name) is not None


def _evaluated_by(doc, others, name: str | None, matched=frozenset()) -> bool:
    """Whether one of the nodes ``others`` evaluates the member ``name``
    (``None``: an additional member whose key matches the patterns ``matched``)
    -- so that an ``unevaluatedProperties`` beside them does not apply to it."""
    for e in others:
        m = doc.node(e)
        if not isinstance(m, dict):
            continue
        if "additionalProperties" in m or "unevaluatedProperties" in m:
            return True
        pats = m.get("patternProperties") or {}
        if name is None and any(pat in matched for pat in pats):
            return True
        if name is not None and (name in (m.get("properties") or {}) or any(
                search(pat, name) for pat in pats)):
            return True
    return False


def _member_pieces(doc, entries, others: dict, name: str | None,
                   matched=frozenset()) -> tuple | None:
    """The references of the schemas a member ``name`` (``None``: an additional
    member whose key matches the patterns ``matched``) satisfies in each node
    (``entries``: see :func:`_entries`): its property and matching patterns,
    else the node's additional members (``unevaluatedProperties`` only where
    none of ``others[p]``, the node's evaluators, has evaluated it). ``None``
    when one of them is ``false`` (no such member)."""
    pcs = []
    for p, n, props, pats in entries:
        if pats:
            hits = [doc.child(p, "patternProperties", pat, v) for pat, v in pats.items()
                    if (pat in matched if name is None else search(pat, name))]
        else:
            hits = ()
        if name is not None and name in props:
            pcs.append(doc.child(p, "properties", name, props[name]))
            pcs.extend(hits)
        elif hits:
            pcs.extend(hits)
        elif "additionalProperties" in n:
            pcs.append(f"{p}/additionalProperties")
        elif p in others and not _evaluated_by(doc, others[p], name, matched):
            pcs.append(f"{p}/unevaluatedProperties")
    for x in pcs:
        if doc.node(x) is False:
            return None
    return tuple(pcs)


def _entries(nodes) -> list:
    """``(ref, node, properties, patternProperties)`` of each object node, the
    two keywords' values read once (``{}`` where absent or null)."""
    return [(p, n, n.get("properties") or {}, n.get("patternProperties") or {}) for p, n in nodes]


def object_view(norm, conj, proof: bool = False) -> ObjectView | None:
    """The merged object constraints of a conjunction (``norm``: the document's
    :class:`~constrain.frontends.json_schema.normalise.Normaliser`), or ``None``
    when no object satisfies them.

    ``proof``: ``unevaluatedProperties`` is left out (a superset of the
    objects), for proofs that two conjunctions are disjoint: an
    ``unevaluatedProperties`` beside a ``oneOf`` sees the annotations of every
    branch a value matches, so with one branch's alone it would close an object
    the other branch also matches."""
    doc = norm.doc
    view = ObjectView()
    nodes = []
    for p in conj:
        if type(p) is NotAll:
            view.notall.append(frozenset(p.names))
            continue
        n = doc.node(p)
        if isinstance(n, dict):
            nodes.append((p, n))
    # the evaluators of each unevaluatedProperties (but the node itself)
    others = {} if proof else {
        p: tuple(e for e in norm.evaluators(p, conj) if e != p)
        for p, n in nodes if "unevaluatedProperties" in n and "additionalProperties" not in n}
    entries = _entries(nodes)
    names: dict[str, None] = {}
    for e in entries:
        names.update(dict.fromkeys(e[2]))
    for _, n in nodes:
        req = n.get("required")
        if isinstance(req, list):
            for k in req:
                if isinstance(k, str):
                    names.setdefault(k, None)
                    view.required.add(k)
    for _, n in nodes:
        # the names of list-valued dependencies are members like declared ones
        # (each with the schemas additional members of that name have), so that
        # their presence constraints can be enforced (see _presence_constraints)
        for key in ("dependentRequired", "dependencies"):
            deps = n.get(key)
            if isinstance(deps, dict):
                for trig, need in deps.items():
                    if isinstance(need, list):
                        names.setdefault(trig, None)
                        for x in need:
                            if isinstance(x, str):
                                names.setdefault(x, None)
    # the names of not-all sets are members too, as dependencies' are: "not
    # both body and bodyValue" kept both out of the additional keys (W3C Web
    # Annotation's schema refused {"body": ...})
    for ns in view.notall:
        for x in sorted(ns):
            if x not in names:
                names[x] = None
                view.notall_only.add(x)
    for name in names:
        pcs = _member_pieces(doc, entries, others, name)
        if pcs is None:
            if name in view.required:
                return None
            view.forbidden.append(name)
            continue
        view.pieces[name] = pcs
    view.order = list(view.pieces)
    _extra_members(doc, entries, view, others)
    return view


def _extra_members(doc, entries, view: ObjectView, others: dict) -> None:
    """What ``view``'s additional members may be: their patterns, and the
    schemas of a member by the patterns its key matches."""
    seen: dict[str, str] = {}
    for p, _, _, pats in entries:
        for pat, v in pats.items():
            seen.setdefault(pat, doc.child(p, "patternProperties", pat, v))
    for p in others:
        for e in others[p]:
            n = doc.node(e)
            if isinstance(n, dict):
                for pat, v in (n.get("patternProperties") or {}).items():
                    seen.setdefault(pat, doc.child(e, "patternProperties", pat, v))
    view.patterns = list(seen.items())
    memo: dict[frozenset, tuple | None] = {}

    def region_pieces(matched: frozenset) -> tuple | None:
        if matched not in memo:
            memo[matched] = _member_pieces(doc, entries, others, None, matched)
        return memo[matched]

    view.region_pieces = region_pieces


def _presence_constraints(t: Translation, conj, view: ObjectView) -> list | None:
    """The presence constraints between members: ``("notall", names)`` from
    ``not: {required}`` and exclusive ``oneOf`` branches, ``("implies", name,
    names)`` from dependencies; ``propertyNames`` applied to ``view``. ``None``
    when no object is left."""
    cons = [("notall", names) for names in view.notall]
    for p in conj:
        n = t.doc.node(p)
        if not isinstance(n, dict):
            continue
        if "propertyNames" in n and n["propertyNames"] not in (True, {}):
            for name in list(view.pieces):
                if not t.doc.accepts(name, f"{p}/propertyNames"):
                    if name in view.required:
                        return None
                    del view.pieces[name]
            view.order = [x for x in view.order if x in view.pieces]
            if view.extra is not None:
                view.key_schemas.append(f"{p}/propertyNames")
        for key in ("dependentRequired", "dependencies"):
            deps = n.get(key)
            if not isinstance(deps, dict):
                continue
            for trig, need in deps.items():
                if not isinstance(need, list):
                    continue  # a schema: see Normaliser._dependencies
                cons.append(("implies", trig, frozenset(need)))
    return cons


def _satisfied(cons, have: set) -> bool:
    for c in cons:
        if c[0] == "notall" and c[1] <= have:
            return False
        if c[0] == "implies" and c[1] in have and not c[2] <= have:
            return False
    return True


def object_symbol(t: Translation, conj) -> str | None:
    """A rule for the objects of the conjunction."""
    g = t.grammar
    view = object_view(t.norm, conj)
    if view is None:
        return None
    cons = _presence_constraints(t, conj, view)
    if cons is None:
        return None
    names_in_cons = set()
    for c in cons:
        names_in_cons |= c[1] if c[0] == "notall" else {c[1]} | c[2]
    if view.notall_only and len([x for x in view.order if x in names_in_cons
                                 and x not in view.required]) > _MAX_INVOLVED:
        # too many optional members to enumerate their subsets: the names only
        # a not-all set brings are kept out of the object (strict)
        for x in view.notall_only:
            view.pieces.pop(x, None)
        view.order = [x for x in view.order if x not in view.notall_only]
    order = view.order
    # a constrained name that is not declared is kept out of extra keys
    hidden = sorted({x for x in names_in_cons if x not in view.pieces} | set(view.forbidden))
    involved = [x for x in order if x in names_in_cons and x not in view.required]
    min_p, max_p = len_bounds(t.doc, conj, "minProperties", "maxProperties")
    if (not order and not hidden and not cons and view.extra == "any" and not view.key_schemas
            and min_p == 0
            and max_p is None and g.is_any(t.value(tuple(view.extra_pieces)))):
        # {"type": "object"}: the shared any-object rule (its keys are any
        # JSON string, escapes included: no name needs excluding)
        g.any_value()
        return "any_object"
    # min/maxProperties that the required members do not settle, on an object
    # without additional members: every subset of the optional members is an
    # alternative with an exact count, kept when the count is within bounds
    optional = [x for x in order if x not in view.required]
    # with additional members too: each subset fixes the declared count, and
    # the additional members take the rest of the bounds (a bounded run)
    # (minProperties 1 alone is settled without: no empty object)
    n_required = len(set(view.required) & set(order))
    counted = (len(optional) <= _MAX_INVOLVED
               and ((min_p > n_required and (min_p > 1 or view.extra is None))
                    or (max_p is not None and (max_p < len(order) or view.extra is not None))))
    if counted:
        involved = optional
    if len(involved) > _MAX_INVOLVED:
        t.diag.unsupported("", f"presence constraints over more than {_MAX_INVOLVED} optional properties")
        cons, involved = [], []
    members = {name: (key_terminal(t, name), t.value(view.pieces[name])) for name in order}
    extra = extra_member(t, view, list(order) + hidden)
    name = g.new_rule("object")
    chain = _Chain(t, conj, name, members, extra)
    alts = []
    for mask in range(1 << len(involved)):
        present = {x for i, x in enumerate(involved) if mask >> i & 1}
        absent = set(involved) - present
        if not _satisfied(cons, (set(view.required) & set(order)) | present):
            continue
        sub_order = [x for x in order if x not in absent]
        required = (set(view.required) | present) & set(sub_order)
        if any(x in view.required for x in absent):
            continue
        if counted:
            d = len(sub_order)
            if max_p is not None and d > max_p:
                continue
            if extra is None:
                if d < min_p:
                    continue
                alts.extend(chain.alternatives(sub_order, required, 0, None))
            else:
                hi = None if max_p is None else max_p - d
                alts.extend(chain.alternatives(sub_order, set(sub_order), 0, None,
                                               extras=(max(0, min_p - d), hi)))
        else:
            alts.extend(chain.alternatives(sub_order, required, min_p, max_p))
    g.rules[name] = alts
    return name


class _Chain:
    """The alternatives of the object rule ``name``: for a subset of the declared
    members, those members in order, then any number of ``extra`` members."""

    def __init__(self, t: Translation, conj, name: str, members: dict, extra: str | None):
        self.t, self.conj, self.name = t, conj, name
        self.members, self.extra = members, extra
        #: the runs of extra members made so far, by (lo, hi, after a comma)
        self._runs: dict = {}

    def _pointer(self, keyword: str) -> str:
        doc = self.t.doc
        return next(f"{p}/{keyword}" for p in self.conj
                    if isinstance(doc.node(p), dict) and keyword in doc.node(p))

    def alternatives(self, order, required, min_p: int, max_p: int | None,
                     extras: tuple | None = None) -> list[Alt]:
        """Alternatives for objects with the members of ``order`` (in that order,
        those in ``required`` mandatory) then any number of extra members, with
        ``min_p``/``max_p`` members (refused where they are not settled); with
        ``extras = (lo, hi)``, between ``lo`` and ``hi`` (``None``: no bound)
        extra members."""
        t, extra = self.t, self.extra
        g = t.grammar
        P = g.punct
        n_req = sum(1 for x in order if x in required)
        allow_empty = n_req == 0
        if min_p > n_req:
            if min_p == 1:
                allow_empty = False
            else:
                t.diag.unsupported(self._pointer("minProperties"),
                                   f"minProperties {min_p} above the required count")
        if max_p is not None:
            if max_p < n_req:
                return []
            if extra is not None or max_p < len(order):
                t.diag.unsupported(self._pointer("maxProperties"),
                                   f"maxProperties {max_p} with optional members")
        n = len(order)
        can_empty = [False] * (n + 1)
        can_empty[n] = extras is None or extras[0] == 0
        for i in range(n - 1, -1, -1):
            can_empty[i] = can_empty[i + 1] and order[i] not in required
        # rest[i]: members from i on, after a comma; first[i]: the same, first
        rest: dict[int, str | None] = {}
        first: dict[int, str | None] = {}
        if extra is not None and extras is not None:
            lo, hi = extras
            if hi is not None and (hi < lo or hi - lo > _MAX_EXTRA_RUN):
                if hi >= lo:
                    t.diag.unsupported(self._pointer("maxProperties"),
                                       f"maxProperties leaves {hi - lo + 1} counts of additional "
                                       f"members open (at most {_MAX_EXTRA_RUN + 1})")
                return []
            if hi == 0:
                rest[n] = first[n] = None
            else:
                rest[n] = self._extra_run(max(lo, 1), hi, True)
                first[n] = self._extra_run(max(lo, 1), hi, False)
        elif extra is not None:
            r = g.new_rule(f"{self.name}_r")
            g.rules[r] = [Alt([("sym", P["COMMA"]), ("sym", extra), ("star", (P["COMMA"], extra))])]
            f = g.new_rule(f"{self.name}_f")
            g.rules[f] = [Alt([("sym", extra), ("star", (P["COMMA"], extra))])]
            rest[n], first[n] = r, f
        else:
            rest[n] = first[n] = None

        def tail(i):
            if rest[i] is None:
                return []
            return [("opt" if can_empty[i] else "sym", rest[i])]

        for i in range(n - 1, -1, -1):
            key, val = self.members[order[i]]
            req = order[i] in required
            r = g.new_rule(f"{self.name}_r")
            alts = [Alt([("sym", P["COMMA"]), ("sym", key), ("sym", val)] + tail(i + 1))]
            if not req and rest[i + 1] is not None:
                alts.append(Alt([("sym", rest[i + 1])]))
            g.rules[r] = alts
            rest[i] = r
            f = g.new_rule(f"{self.name}_f")
            alts = [Alt([("sym", key), ("sym", val)] + tail(i + 1))]
            if not req and first[i + 1] is not None:
                alts.append(Alt([("sym", first[i + 1])]))
            g.rules[f] = alts
            first[i] = f
        alts = []
        if first[0] is not None:
            alts.append(Alt([("sym", P["LBRACE"]), ("sym", first[0]), ("sym", P["RBRACE"])]))
        if can_empty[0] and allow_empty:
            alts.append(Alt([("sym", P["EMPTY_OBJ"])]))
        return alts

    def _extra_run(self, lo: int, hi: int | None, after_comma: bool) -> str:
        """A rule for ``lo`` to ``hi`` (``None``: any number of) extra members
        in a row, comma-separated (``lo >= 1``), after a comma when
        ``after_comma``."""
        key = (lo, hi, after_comma)
        hit = self._runs.get(key)
        if hit is not None:
            return hit
        g = self.t.grammar
        comma, extra = g.punct["COMMA"], self.extra
        items = [] if after_comma else [("sym", extra)]
        items += [("sym", comma), ("sym", extra)] * (lo if after_comma else lo - 1)
        if hi is None:
            items.append(("star", (comma, extra)))
        else:
            more = None  # up to hi - lo more: more_k -> "," extra more_{k-1}?
            for _ in range(hi - lo):
                r = g.new_rule(f"{self.name}_x")
                g.rules[r] = [Alt([("sym", comma), ("sym", extra)]
                                  + ([("opt", more)] if more is not None else []))]
                more = r
            if more is not None:
                items.append(("opt", more))
        r = self._runs[key] = g.new_rule(f"{self.name}_x")
        g.rules[r] = [Alt(items)]
        return r


def key_terminal(t: Translation, name: str) -> str:
    """The terminal for one member name with its colon."""
    sym = t.key_terminals.get(name)
    if sym is None:
        g = t.grammar
        text = json_str(name)
        sym = t.key_terminals[name] = g.terminal(lit(text) + g.key_colon(), "KEY",
                                                 None if g.ws else text + ":")
    return sym


def extra_member(t: Translation, view: ObjectView, declared) -> str | None:
    """A rule for one additional member (key and value), or ``None``."""
    g = t.grammar
    if view.extra is None:
        return None
    names_regex = None
    if len(view.key_schemas) > 1:
        t.diag.unsupported(view.key_schemas[-1], "propertyNames in two merged schemas")
        return None
    if view.key_schemas and view.extra != "any":
        # every region's keys are also strings of the propertyNames schema
        names_regex = _names_regex(t, view.key_schemas[0])
        if names_regex is None:
            return None
    elif view.key_schemas:
        key = _named_key(t, view.key_schemas[0], declared)
        if key is None:
            return None
        val = t.value(tuple(view.extra_pieces))
        r = g.new_rule("member")
        g.rules[r] = [Alt([("sym", key), ("sym", val)])]
        return r
    if view.extra == "any":
        key = exclusion_terminal(g, declared, g.key_colon(), "KEY")
        if key is None:
            return None
        val = t.value(tuple(view.extra_pieces))
        r = g.new_rule("member")
        g.rules[r] = [Alt([("sym", key), ("sym", val)])]
        return r
    # keys split by the patterns they match: a region's value satisfies the
    # schemas of all its patterns (and no additionalProperties), see key_regions
    regions = KeyRegions(t, view.patterns, names_regex)
    alts = []
    for matched in regions.regions(lambda s: view.region_pieces(_names(view, s)) is not None):
        key = regions.key(matched, declared)
        if key is not None:
            val = t.value(view.region_pieces(_names(view, matched)))
            alts.append(Alt([("sym", key), ("sym", val)]))
    if not alts:
        return None
    r = g.new_rule("member")
    g.rules[r] = alts
    return r


def _names(view: ObjectView, matched: frozenset) -> frozenset:
    """The patterns of the pattern indices ``matched``."""
    return frozenset(view.patterns[i][0] for i in matched)


def _key_strings(t: Translation, where: str):
    """What the ``propertyNames`` schema at ``where`` admits: ``("any",)``,
    ``("names", values)`` (an enum: its strings), ``("regex", content, conj,
    name)`` (its one string terminal's content regex, its conjunction and the
    terminal's name), or
    ``None`` (no string, or it cannot be enforced, which has been reported)."""
    g = t.grammar
    dnf = t.norm.flatten(where)
    if dnf == [()]:
        return ("any",)
    if not dnf:
        return None
    if len(dnf) > 1:
        t.diag.unsupported(where, "propertyNames with alternatives (anyOf/oneOf)")
        return None
    conj = dnf[0] + (Synthetic("type", "string"),)
    values = enum_values(t.doc, conj)
    if values is not None:
        return ("names", [v for v in values if isinstance(v, str)])
    syms = t.conjunction(conj)
    if not syms:
        return None
    regex = g.terminal_defs.get(syms[0])
    if len(syms) != 1 or regex is None or syms[0] in (g.exclusions or {}) \
            or not (regex.startswith('"') and regex.endswith('"')):
        t.diag.unsupported(where, "propertyNames that is not one string terminal")
        return None
    return ("regex", regex[1:-1], dnf[0], syms[0])


def _names_regex(t: Translation, where: str) -> str | None:
    """The regex of the key contents (canonical JSON string contents) the
    ``propertyNames`` schema at ``where`` admits (``None``: none, or it cannot
    be enforced, which has been reported)."""
    form = _key_strings(t, where)
    if form is None:
        return None
    if form[0] == "any":
        return CANON_ANY + "*"
    if form[0] == "names":
        names = [lit(json_str(v)[1:-1]) for v in form[1] if encodable(v)]
        return "(?:" + "|".join(names) + ")" if names else None
    return form[1]


def _named_key(t: Translation, where: str, declared) -> str | None:
    """The key terminal of additional members whose names satisfy the
    ``propertyNames`` schema at ``where`` (``None``: no name does, or it cannot
    be enforced): the terminal of the strings of that schema, with the colon.
    A declared name the schema also admits would need cutting out of it:
    refused, unless the schema is a finite set of names (then it is left out)."""
    g = t.grammar
    form = _key_strings(t, where)
    if form is None:
        return None
    if form[0] == "any":
        return exclusion_terminal(g, declared, g.key_colon(), "KEY")
    if form[0] == "names":
        names = [v for v in form[1] if v not in declared]
        if not names:
            return None
        return g.terminal("(?:" + "|".join(lit(json_str(v)) for v in names) + ")" + g.key_colon(),
                          "KEY")
    clash = next((d for d in declared if all(t.doc.valid(d, p) for p in form[2])), None)
    if clash is not None:
        t.diag.unsupported(where, f"propertyNames admits the declared property {clash!r}")
        return None
    name = g.terminal('"' + form[1] + '"' + g.key_colon(), "KEY")
    at = g.pattern_at.get(form[3])
    return name if at is None else g.note_pattern(name, *at)
