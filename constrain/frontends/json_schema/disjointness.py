"""The ``oneOf`` disjointness prover: a value valid against two branches is
invalid against the ``oneOf``, so the branches are compiled as they are only
where no value can match two; where that is not proven, they are made disjoint
(types no branch names dropped, required sets or a discriminating member
demanded) or the ``oneOf`` is refused."""

from __future__ import annotations

from fractions import Fraction
from typing import TYPE_CHECKING

from constrain.frontends.json_schema.keywords import conj_types, json_equal, len_bounds
from constrain.frontends.json_schema.literals import enum_values
from constrain.frontends.json_schema.nodes import NotAll, Synthetic
from constrain.frontends.json_schema.numbers import num_bounds
from constrain.frontends.json_schema.objects import object_view
from constrain.frontends.json_schema.patterns import patterns_disjoint

if TYPE_CHECKING:
    from constrain.frontends.json_schema.normalise import Normaliser

_PROVEN_TYPES = ("null", "boolean", "integer", "string", "array", "object")


def resolve_one_of(norm: Normaliser, flat, context):
    """``(branches, fallback)``: the ``oneOf`` branches (DNFs) made pairwise
    disjoint, or ``None``; and when they are ``None`` for objects that required
    sets cannot tell apart, those branches made disjoint all the same by
    required sets, emptying the conjunctions they cannot tell apart (the
    strict side), for the caller to take where the exact construction (each
    branch beside the complements of the others) cannot be stated.

    Per JSON type shared by two branches: nothing to do where disjointness is
    proven; a type neither branch names (``{"required": [...]}`` also admits
    strings) is dropped from both, which is exact since such values match
    both; objects are separated by required sets or a forced discriminator."""
    doc = norm.doc
    n = len(flat)
    drop = [set() for _ in range(n)]
    #: (branch, conjunction index) -> enum/const values both sides admit, to be
    #: excluded from both (a value matching two branches is invalid)
    overlaps: dict = {}
    #: (branch, conjunction index) -> the conjunctions of other branches it
    #: may share objects with
    objects_overlap: dict = {}
    with norm.proving():
        for i in range(n):
            for j in range(i + 1, n):
                for xi, ci in enumerate(flat[i]):
                    for xj, cj in enumerate(flat[j]):
                        a, b = context + ci, context + cj
                        # the values of a literal branch, checked against the other
                        # branch alone: the context holds this very oneOf, which
                        # every shared value fails (checking it would be circular)
                        e1, e2 = enum_values(doc, ci), enum_values(doc, cj)
                        if e1 is not None or e2 is not None:
                            both = _shared_values(doc, e1, cj) + _shared_values(doc, e2, ci)
                            if both:
                                overlaps.setdefault((i, xi), []).extend(both)
                                overlaps.setdefault((j, xj), []).extend(both)
                            continue
                        shared = conj_types(doc, a) & conj_types(doc, b)
                        explicit = _explicit_types(doc, a) or _explicit_types(doc, b)
                        for t in _PROVEN_TYPES:
                            if t not in shared:
                                continue
                            if _disjoint_in(norm, "number" if t == "integer" else t, a, b, 3):
                                continue
                            if t == "object":
                                objects_overlap.setdefault((i, xi), set()).add((j, xj))
                                objects_overlap.setdefault((j, xj), set()).add((i, xi))
                            elif not explicit:
                                drop[i].add(t)
                                drop[j].add(t)
                            else:
                                return None, None
    if overlaps:
        base = doc.base_uri(context[0]) if context and type(context[0]) is str else None
        # the exclusions stand for the oneOf keyword of the node in context
        origins = {"": doc.user_pointer(context[0]) + "/oneOf" if base is not None else ""}
        flat = [[conj + (doc.add_generated({"not": {"enum": _unique(overlaps[(i, x)])}},
                                           base or doc.base_uri(""), origins),)
                 if (i, x) in overlaps else conj for x, conj in enumerate(branch)]
                for i, branch in enumerate(flat)]
    if objects_overlap:
        made = (_exclusive_required(doc, flat, context, objects_overlap)
                or _forced_discriminator(norm, flat, context))
        if made is None:
            loose = _exclusive_required(doc, flat, context, objects_overlap, emptying=True)
            return None, None if loose is None else _drop_types(doc, loose, drop, context)
        flat = made
    return _drop_types(doc, flat, drop, context), None


def _drop_types(doc, flat, drop, context) -> list:
    """``flat`` with the types in ``drop[i]`` taken out of branch ``i``."""
    out = []
    for i, branch in enumerate(flat):
        if not drop[i]:
            out.append(branch)
            continue
        if "integer" in drop[i]:
            drop[i].add("number")
        new = []
        for conj in branch:
            keep = conj_types(doc, context + conj) - drop[i]
            new.append(conj + (Synthetic("type", tuple(sorted(keep))),))
        out.append(new)
    return out


def _shared_values(doc, values, conj) -> list:
    """The ``values`` (``None``: none) that every node of ``conj`` admits.
    (From :func:`enum_values`, which in drafts 3 and 4 holds both ``1`` and
    ``1.0`` where each passes: ``oneOf: [{type: integer}, {enum: [1.0]}]``
    then finds ``1`` in both.)"""
    if values is None:
        return []
    return [v for v in values if all(doc.accepts(v, p) for p in conj)]


def _unique(values) -> list:
    out = []
    for v in values:
        if not any(json_equal(v, w) for w in out):
            out.append(v)
    return out


def _explicit_types(doc, conj) -> bool:
    return any(isinstance(doc.node(p), dict) and "type" in doc.node(p) for p in conj)


def _forced_discriminator(norm: Normaliser, flat, context):
    """Branches made disjoint by requiring one member whose schemas differ
    pairwise between branches (every output then carries it)."""
    doc = norm.doc
    views = [[object_view(norm, context + c, proof=True) for c in branch
              if "object" in conj_types(doc, context + c)] for branch in flat]
    if any(v is None for vs in views for v in vs):
        return None
    candidates = None
    for vs in views:
        for v in vs:
            names = set(v.pieces)
            candidates = names if candidates is None else candidates & names
    for name in sorted(candidates or ()):
        ok = True
        with norm.proving():
            for i in range(len(flat)):
                for j in range(i + 1, len(flat)):
                    for vi in views[i]:
                        for vj in views[j]:
                            if not _pieces_disjoint(norm, vi.pieces[name], vj.pieces[name], 2):
                                ok = False
        if ok:
            req = Synthetic("required", (name,))
            return [[c + (req,) for c in branch] for branch in flat]
    return None


def _exclusive_required(doc, flat, context, overlapping: dict, emptying: bool = False):
    """``oneOf`` branches made disjoint through their ``required`` sets: each
    conjunction also demands that, for every conjunction of another branch it
    may share objects with (``overlapping``: ``(branch, index)`` -> the
    ``(branch, index)`` pairs of those), some name that one requires is missing. Exact for the
    values that match both, strict for the rest (a value of one branch with
    all the names another requires but not its other keywords is refused).

    ``None`` when required sets cannot tell two such conjunctions apart: one
    that admits objects requires nothing, or (unless ``emptying``) requires
    every name the other requires, so that the demand leaves it no object at
    all -- exact only where each of its objects matches the other too.
    (GeoJSON's Point and LineString, which require the same names and are
    told apart by the enum of ``type``, were emptied so, against each other,
    once a third branch overlapped both.)"""
    names: dict = {}
    for i, branch in enumerate(flat):
        for x, conj in enumerate(branch):
            if "object" not in conj_types(doc, context + conj):
                continue  # no objects to tell apart
            req = set()
            for p in conj:
                n = doc.node(p)
                if isinstance(n, dict) and isinstance(n.get("required"), list):
                    req.update(y for y in n["required"] if isinstance(y, str))
            names[(i, x)] = req
    out = []
    for i, branch in enumerate(flat):
        new = []
        for x, conj in enumerate(branch):
            own = names.get((i, x))
            demands = []
            for k in sorted(k for k in overlapping.get((i, x), ()) if k in names):
                theirs = names[k]
                if not theirs or own is None or (theirs <= own and not emptying):
                    return None
                demands.append(NotAll.of(theirs))
            new.append(conj + tuple(dict.fromkeys(m for m in demands if m not in conj)))
        out.append(new)
    return out


def disjoint(norm: Normaliser, c1, c2, depth: int) -> bool:
    """Whether no JSON value satisfies both conjunctions (a sufficient test,
    looking ``depth`` levels into object members)."""
    doc = norm.doc
    e1, e2 = enum_values(doc, c1), enum_values(doc, c2)
    if e1 is not None and not any(all(doc.accepts(v, p) for p in c2) for v in e1):
        return True
    if e2 is not None and not any(all(doc.accepts(v, p) for p in c1) for v in e2):
        return True
    shared = conj_types(doc, c1) & conj_types(doc, c2)
    if e1 is not None or e2 is not None:
        return False
    for t in ("null", "boolean", "string", "array", "object"):
        if t in shared and not _disjoint_in(norm, t, c1, c2, depth):
            return False
    if "integer" in shared and not _disjoint_in(norm, "number", c1, c2, depth):
        return False
    return True


def _disjoint_in(norm: Normaliser, t: str, c1, c2, depth: int) -> bool:
    """Whether no value of type ``t`` satisfies both conjunctions."""
    doc = norm.doc
    if t == "number":
        return _ranges_disjoint(num_bounds(doc, c1, quiet=True), num_bounds(doc, c2, quiet=True))
    if t in ("string", "array"):
        kmin, kmax = ("minLength", "maxLength") if t == "string" else ("minItems", "maxItems")
        a, b = len_bounds(doc, c1, kmin, kmax), len_bounds(doc, c2, kmin, kmax)
        if a[1] is not None and a[1] < b[0] or b[1] is not None and b[1] < a[0]:
            return True
        # patterns anchored on incompatible literal prefixes (JSend's
        # "^success$" and "^fail$" statuses)
        return t == "string" and any(patterns_disjoint(x, y) for x in _patterns(doc, c1)
                                     for y in _patterns(doc, c2))
    if t == "object" and depth > 0:
        o1, o2 = object_view(norm, c1, proof=True), object_view(norm, c2, proof=True)
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
                    if _pieces_disjoint(norm, px, py, depth - 1):
                        return True
        return False
    return False


def _patterns(doc, conj) -> list[str]:
    """The ``pattern`` keywords of the conjunction's nodes."""
    out = []
    for p in conj:
        n = doc.node(p)
        if isinstance(n, dict) and isinstance(n.get("pattern"), str):
            out.append(n["pattern"])
    return out


def _pieces_disjoint(norm: Normaliser, p1, p2, depth: int) -> bool:
    # a form that cannot be made proves nothing
    f1 = norm.try_flatten_pieces(p1)
    f2 = norm.try_flatten_pieces(p2) if f1 is not None else None
    if f2 is None:
        return False
    return all(disjoint(norm, a, b, depth) for a in f1 for b in f2)


def _ranges_disjoint(a, b) -> bool:
    lo1, lx1, hi1, hx1 = a
    lo2, lx2, hi2, hx2 = b

    def below(hi, hx, lo, lx):
        if hi is None or lo is None:
            return False
        return Fraction(hi) < Fraction(lo) or (Fraction(hi) == Fraction(lo) and (hx or lx))

    return below(hi1, hx1, lo2, lx2) or below(hi2, hx2, lo1, lx1)
