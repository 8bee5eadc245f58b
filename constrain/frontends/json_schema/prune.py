"""Pruning the built grammar before either back end writes it: unproductive
rules (and the alternatives needing them) and unreachable rules go, and unit
rules are read through. Linear in the grammar's size."""

from __future__ import annotations

from constrain.errors import EmptySchemaError
from constrain.frontends.json_schema.diagnostics import Diagnostics
from constrain.frontends.json_schema.rules import GrammarBuilder


def prune(g: GrammarBuilder, start: str, diag: Diagnostics) -> tuple[dict, set]:
    """``(rules, terminals used)`` of ``g`` with unproductive and unreachable rules
    removed (rules in the order they were made).

    Raises:
        EmptySchemaError: ``start`` derives nothing: the schema admits no
            value (that Trellis can enforce, when ``diag`` set keywords aside).
    """
    rules, terms = g.rules, g.terminal_defs
    productive, every = _productive(rules, terms)
    if start not in productive:
        why = ""
        if diag.ignored:
            why = (" that Trellis can enforce (strict=False set aside what it could not, "
                   "at " + diag.where_ignored() + ")")
        raise EmptySchemaError("the schema admits no JSON value" + why, "")
    if every:
        return _reachable(start, rules, rules, terms)
    # drop the alternatives that need an unproductive symbol (and the
    # optional or repeated parts made of them), keeping what is reachable
    found: dict[str, list] = {}
    todo = [start]
    while todo:
        x = todo.pop()
        if x in found:
            continue
        out = found[x] = []
        for alt in rules[x]:
            new = []
            for kind, sym in alt:
                if kind == "star":
                    if all(s in productive for s in sym):
                        new.append((kind, sym))
                elif sym in productive:
                    new.append((kind, sym))
                elif kind == "sym":
                    break
            else:
                out.append(new)
                for kind, sym in new:
                    for y in (sym if kind == "star" else (sym,)):
                        if y not in terms and y not in found:
                            todo.append(y)
    return _reachable(start, found, rules, terms)


def _reachable(start: str, rules: dict, order: dict, terms: dict) -> tuple[dict, set]:
    """The rules of ``rules`` (all productive) reachable from ``start``, in the
    order of ``order`` (the order they were made), each read through unit
    rules: a rule that is one symbol (a property's value_N -> NUMBER, chains of
    them through $ref and allOf) is replaced by that symbol, for fewer Earley
    items at every step and less to build. One walk."""

    def resolve(x: str) -> str:
        # a unit rule (one alternative of one symbol) is its symbol
        while x != start:
            alts = rules.get(x)
            if alts is None or len(alts) != 1:
                break
            alt = alts[0]
            if len(alt) != 1 or alt[0][0] != "sym":
                break
            x = alt[0][1]
        return x

    kept: dict[str, list] = {}
    used_terms: set[str] = set()
    todo = [start]
    while todo:
        x = todo.pop()
        if x in kept:
            continue
        out = kept[x] = []
        for alt in rules[x]:
            new = []
            for kind, sym in alt:
                if kind == "star":
                    sym = tuple(y if y in terms else resolve(y) for y in sym)
                    for y in sym:
                        if y in terms:
                            used_terms.add(y)
                        elif y not in kept:
                            todo.append(y)
                elif sym in terms:
                    used_terms.add(sym)
                else:
                    sym = resolve(sym)
                    if sym in terms:
                        used_terms.add(sym)
                    elif sym not in kept:
                        todo.append(sym)
                new.append((kind, sym))
            out.append(new)
    cleaned = {name: kept[name] for name in order if name in kept}
    return cleaned, used_terms


def _productive(rules: dict, terms: dict) -> tuple[set, bool]:
    """The productive symbols (those deriving some terminal string), and
    whether every rule is."""
    productive: set[str] = set(terms)
    # rules are mostly made after the rules they use: one pass in that order
    # settles every rule of a typical schema, without the worklist's
    # bookkeeping (~40 us cold on a median MaskBench schema)
    for name, alts in rules.items():
        for alt in alts:
            for kind, sym in alt:
                if kind == "sym" and sym not in productive:
                    break
            else:
                productive.add(name)
                break
        else:
            break
    else:
        return productive, True
    productive = set(terms)
    waiting: dict[str, list] = {}  # symbol -> counters of the alternatives needing it
    todo = []
    for name, alts in rules.items():
        for alt in alts:
            missing = [sym for kind, sym in alt if kind == "sym" and sym not in terms]
            if not missing:
                todo.append(name)
                break
            counter = [len(missing), name]
            for m in missing:
                waiting.setdefault(m, []).append(counter)
    while todo:
        x = todo.pop()
        if x in productive:
            continue
        productive.add(x)
        for counter in waiting.pop(x, ()):
            counter[0] -= 1
            if counter[0] == 0:
                todo.append(counter[1])
    return productive, len(productive) == len(terms) + len(rules)
