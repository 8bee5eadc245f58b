"""Arrays: a rule for the arrays of a conjunction (per-index item schemas, the
schema of the items after them, length bounds), and the item schemas of one
index (also what :func:`~constrain.frontends.json_schema.compiler.order_instance`
reorders array elements by).

``maxItems`` above the cap is lowered to it (one rule per possible index)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import math

from constrain.errors import SchemaError, SchemaTooComplexError
from constrain.frontends.json_schema.keywords import (conj_types, json_equal, len_bounds,
                                                     lower_bound_pointer)
from constrain.frontends.json_schema.dialect import integers_are_exact
from constrain.frontends.json_schema.literals import enum_values, literal_symbol
from constrain.frontends.json_schema.nodes import FALSE
from constrain.frontends.json_schema.rules import Alt

if TYPE_CHECKING:
    from constrain.frontends.json_schema.translation import Translation


def _evaluated_items(n) -> int | None:
    """How many leading items the applicators of the node ``n`` evaluate
    (``None``: all of them)."""
    items = n.get("items")
    if isinstance(items, list):  # drafts up to 2019-09
        return None if "additionalItems" in n else len(items)
    if "items" in n or "unevaluatedItems" in n:
        return None
    prefix = n.get("prefixItems")
    return len(prefix) if isinstance(prefix, list) else 0


def item_schemas(p, n, evaluated: int | None = 0) -> tuple[list, object]:
    """``(prefix, rest)`` of the array node ``n`` at ``p``: the references of the
    schemas of the first items, by index (``None``: unconstrained), and of every
    item after them (``None``: unconstrained). ``unevaluatedItems`` applies past
    the ``evaluated`` leading items its subschemas evaluate (``None``: all)."""
    items = n.get("items")
    if isinstance(items, list):  # drafts up to 2019-09
        prefix = [f"{p}/items/{i}" for i in range(len(items))]
        rest = f"{p}/additionalItems" if "additionalItems" in n else None
    else:
        prefix = [f"{p}/prefixItems/{i}" for i in range(len(n.get("prefixItems", [])))]
        rest = f"{p}/items" if "items" in n else None
    if rest is None and "unevaluatedItems" in n and n["unevaluatedItems"] is not True:
        if evaluated is None:
            return prefix, None
        prefix = prefix + [None] * (evaluated - len(prefix))
        rest = FALSE if n["unevaluatedItems"] is False else f"{p}/unevaluatedItems"
    return prefix, rest


def item_layout(norm, conj) -> list[tuple[list, object]]:
    """:func:`item_schemas` of every array node of the conjunction (``norm``: the
    document's normaliser, which knows what each ``unevaluatedItems`` sees)."""
    doc = norm.doc
    out = []
    for p in conj:
        n = doc.node(p)
        if not isinstance(n, dict):
            continue
        evaluated = 0
        if "unevaluatedItems" in n and "items" not in n:
            for e in norm.evaluators(p, conj):
                m = doc.node(e)
                if e == p or not isinstance(m, dict):
                    continue
                k = _evaluated_items(m)
                if "contains" in m:
                    # contains evaluates the items it matches: which ones is
                    # decided by the value, not by the index
                    norm.doc.diag.unsupported(f"{p}/unevaluatedItems",
                                              "unevaluatedItems beside contains")
                if k is None:
                    evaluated = None
                    break
                evaluated = max(evaluated, k)
        out.append(item_schemas(p, n, evaluated))
    return out


def pieces_at(layout, i: int) -> tuple:
    """The references of the schemas the item at index ``i`` must satisfy."""
    pcs = []
    for prefix, rest in layout:
        if i < len(prefix):
            if prefix[i] is not None:
                pcs.append(prefix[i])
        elif rest is not None:
            pcs.append(rest)
    return tuple(pcs)


def array_symbol(t: Translation, conj) -> str | None:
    """A rule for the arrays of the conjunction."""
    doc, g, cap = t.doc, t.grammar, t.options.max_array_length
    P = g.punct
    layout = item_layout(t.norm, conj)
    k = max((len(prefix) for prefix, _ in layout), default=0)
    max_len = None
    for prefix, rest in layout:
        if rest is not None and doc.node(rest) is False:
            max_len = len(prefix) if max_len is None else min(max_len, len(prefix))
    unique = next((f"{p}/uniqueItems" for p in reversed(conj)
                   if isinstance(doc.node(p), dict) and doc.node(p).get("uniqueItems") is True), None)
    lo, hi = len_bounds(doc, conj, "minItems", "maxItems")
    if max_len is not None:
        hi = max_len if hi is None else min(hi, max_len)
    if hi is not None and hi > cap:
        hi = max(cap, lo)
    if hi is not None and lo > hi:
        return None
    if unique and (hi is None or hi > 1):
        # (contains, minContains, maxContains are counted in its rules: they
        # were dropped, and [false] passed contains: {const: true})
        sym = _unique_symbol(t, layout, k, lo, hi, _contains_bounds(t, conj))
        if sym is not False:
            return sym
        t.diag.unsupported(unique, "uniqueItems: true over items that are not from a finite "
                                   f"set of at most {_MAX_UNIQUE_DOMAIN} values")
    if lo > cap:
        where = lower_bound_pointer(doc, conj, "minItems", lo)
        raise SchemaTooComplexError(f"minItems {lo} exceeds the supported {cap} "
                                    f"(pass max_array_length= to raise it)", where)

    def elem(i):
        return t.value(pieces_at(layout, i))

    contained = _contains_symbol(t, conj, layout, k, lo, hi)
    if contained is not False:
        return contained

    if k == 0 and lo == 0 and hi is None and g.is_any(elem(0)):
        g.any_value()
        return "any_array"  # {"type": "array"}: the shared any-array rule

    name = g.new_rule("array")
    # tails[i]: the elements from index i on, each after a comma; past
    # ``steady`` (unbounded arrays) every element has the same schema
    steady = max(k, lo, 1)
    tails: dict[int, str] = {}

    def tail_item(i):
        if hi is not None and i >= hi:
            return []
        if hi is None and i >= steady:
            return [("star", (P["COMMA"], elem(i)))]
        return [("sym" if i < lo else "opt", tails[i])]

    top = (steady if hi is None else hi) - 1
    for i in range(top, 0, -1):
        tail = g.new_rule(f"{name}_t{i}")
        g.rules[tail] = [Alt([("sym", P["COMMA"]), ("sym", elem(i))] + tail_item(i + 1))]
        tails[i] = tail
    alts = []
    if hi is None or hi > 0:
        alts.append(Alt([("sym", P["LBRACK"]), ("sym", elem(0))] + tail_item(1) + [("sym", P["RBRACK"])]))
    if lo == 0:
        alts.append(Alt([("sym", P["EMPTY_ARR"])]))
    g.rules[name] = alts
    return name


def _contains_symbol(t: Translation, conj, layout, k: int, lo: int, hi: int | None):
    """The rule for arrays of the conjunction under its ``contains`` (between
    ``minContains``, default 1, and ``maxContains`` items match), ``None`` when
    no array satisfies it, or ``False`` when no ``contains`` applies.

    At least ``m`` matches, unbounded: ``S_m = C "," S_{m-1} | I "," S_m`` (and
    ``S_1`` also ``C`` alone)
    over item values ``I`` and matching items ``C`` (ambiguous where an item
    could count or not, with at most ``m + 1`` live alternatives). A
    ``maxContains`` counts exactly, with the items that do not match (the
    complement of ``contains``): ``E_c = C ["," E_{c+1}] | N ["," E_c]``."""
    doc, g = t.doc, t.grammar
    P = g.punct
    bounds = _contains_bounds(t, conj)
    if bounds is None:
        return False
    p, m, top = bounds
    if top is not None and top < m:
        return None
    if m == 0 and top is None:
        return False  # every array has at least 0 matching items
    if k > 0 or lo > max(m, 1) or hi is not None:
        t.diag.unsupported(f"{p}/contains", "contains with prefixItems or length bounds")
        return False
    item = pieces_at(layout, 0)
    c_sym = t.value(item + (f"{p}/contains",)) if doc.node(f"{p}/contains") is not False else None
    name = g.new_rule("contains")
    if top is None:
        if c_sym is None:
            return None
        i_sym = t.value(item)
        rules = {0: g.new_rule(f"{name}_s")}
        g.rules[rules[0]] = [Alt([("sym", i_sym), ("star", (P["COMMA"], i_sym))])]
        for j in range(1, m + 1):
            rules[j] = g.new_rule(f"{name}_s")
        for j in range(1, m + 1):
            g.rules[rules[j]] = ([Alt([("sym", c_sym)])] if j == 1 else []) + [
                Alt([("sym", c_sym), ("sym", P["COMMA"]), ("sym", rules[j - 1])]),
                Alt([("sym", i_sym), ("sym", P["COMMA"]), ("sym", rules[j])])]
        g.rules[name] = [Alt([("sym", P["LBRACK"]), ("sym", rules[m]), ("sym", P["RBRACK"])])]
        return name
    neg = t.norm.negator.negate(f"{p}/contains")
    n_sym = t.value(item + (neg,))
    rules = {c: g.new_rule(f"{name}_e") for c in range(top + 1)}
    for c in range(top + 1):
        alts = []
        if c_sym is not None and c + 1 <= top:
            if c + 1 >= m:
                alts.append(Alt([("sym", c_sym)]))
            alts.append(Alt([("sym", c_sym), ("sym", P["COMMA"]), ("sym", rules[c + 1])]))
        if c >= m:
            alts.append(Alt([("sym", n_sym)]))
        alts.append(Alt([("sym", n_sym), ("sym", P["COMMA"]), ("sym", rules[c])]))
        g.rules[rules[c]] = alts
    g.rules[name] = [Alt([("sym", P["LBRACK"]), ("sym", rules[0]), ("sym", P["RBRACK"])])]
    if m == 0:
        g.rules[name].append(Alt([("sym", P["EMPTY_ARR"])]))
    return name


def _contains_bounds(t: Translation, conj):
    """``(pointer, minContains, maxContains)`` of the conjunction's
    ``contains`` (``maxContains`` ``None``: unbounded), or ``None`` without
    one; a second one is :meth:`~Diagnostics.unsupported`."""
    doc = t.doc
    found = [p for p in conj if isinstance(doc.node(p), dict) and "contains" in doc.node(p)]
    if not found:
        return None
    p = found[0]
    if len(found) > 1:
        t.diag.unsupported(f"{found[1]}/contains", "contains in two merged schemas")
    n = doc.node(p)
    return p, _count(n, "minContains", p, 1, math.ceil), _count(n, "maxContains", p, None,
                                                                  math.floor)


def _count(n, key: str, p: str, default, rounding):
    """A ``minContains``/``maxContains`` value as an int (``default`` when absent).

    Raises:
        SchemaError: not a non-negative number.
    """
    v = n.get(key, default)
    if v is default:
        return v
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
        raise SchemaError(f"{key} must be a non-negative integer", f"{p}/{key}")
    return int(rounding(v))


#: uniqueItems is enforced over item domains of at most this many values (one
#: rule per set of values used: 2^n)
_MAX_UNIQUE_DOMAIN = 8


def _item_domain(t: Translation, item) -> list | None:
    """The finite set of values the item schemas ``item`` admit (JSON-equal
    values once), or ``None`` when it is not finite (or not known to be)."""
    doc = t.doc
    out: list = []
    for conj in t.norm.flatten_pieces(item):
        values = enum_values(doc, conj)
        if values is None:
            if not conj_types(doc, conj) <= {"null", "boolean"}:
                return None
            values = [v for v in (None, True, False) if all(doc.valid(v, p) for p in conj)]
        for v in values:
            if not any(json_equal(v, w) for w in out):
                out.append(v)
    return out


def _unique_symbol(t: Translation, layout, k: int, lo: int, hi: int | None, contains=None):
    """The rule for arrays of distinct items (``uniqueItems``) whose items come
    from finite domains (one per ``prefixItems`` index, one for the rest): one
    rule per (index, set of values already used), each alternative a value of
    that index's domain not in the set (``None``: no array satisfies it;
    ``False``: a domain is not finite and small). ``contains``:
    :func:`_contains_bounds`, whose count of matching items is that of the
    set's values that match it (each value occurs once), checked where an
    array may end and kept at most ``maxContains`` on the way."""
    g = t.grammar
    P = g.punct
    domains = []
    for i in range(k + 1):
        d = _item_domain(t, pieces_at(layout, i))
        if d is None:
            if i == k and hi is not None and hi <= k:
                d = []  # no item past the prefix
            else:
                return False
        domains.append(d)
    union: list = []
    for d in domains:
        for v in d:
            if not any(json_equal(v, w) for w in union):
                union.append(v)
    if len(union) > _MAX_UNIQUE_DOMAIN:
        return False
    index = [[next(j for j, w in enumerate(union) if json_equal(v, w)) for v in d] for d in domains]
    top = len(union) if hi is None else min(hi, len(union))
    if lo > top:
        return None
    at_least, at_most, matching = 0, None, 0
    if contains is not None:
        p, at_least, at_most = contains
        if at_most is not None and at_most < at_least:
            return None
        for j, v in enumerate(union):
            if t.doc.valid(v, f"{p}/contains"):
                matching |= 1 << j

    def counted(used: int) -> int:
        return (used & matching).bit_count()
    lits = [literal_symbol(g, [v], integers_are_exact(t.doc.draft)) for v in union]
    name = g.new_rule("unique")
    rules: dict[tuple, str | None] = {}

    def rest(n: int, used: int) -> str | None:
        # the items from index n on (each after a comma but the first), given
        # the values of ``used`` taken
        key = (min(n, k), used)
        if key in rules:
            return rules[key]
        rules[key] = r = g.new_rule(f"{name}_u")
        alts = []
        for j in index[min(n, k)]:
            if used >> j & 1:
                continue
            c = counted(used | 1 << j)
            if at_most is not None and c > at_most:
                continue
            if n + 1 >= lo and c >= at_least:
                alts.append(Alt([("sym", lits[j])]))
            if n + 1 < top:
                nxt = rest(n + 1, used | 1 << j)
                if nxt is not None:
                    alts.append(Alt([("sym", lits[j]), ("sym", P["COMMA"]), ("sym", nxt)]))
        g.rules[r] = alts
        if not alts:
            rules[key] = None
            del g.rules[r]
        return rules[key]

    first = rest(0, 0) if top else None
    g.rules[name] = [Alt([("sym", P["LBRACK"]), ("sym", first), ("sym", P["RBRACK"])])] if first else []
    if lo == 0 and at_least == 0:
        g.rules[name].append(Alt([("sym", P["EMPTY_ARR"])]))
    if not g.rules[name]:
        del g.rules[name]
        return None
    return name
