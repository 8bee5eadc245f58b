"""The ``GrammarIR`` back end: the pruned grammar as a :class:`GrammarIR`, without
the detour through Lark text."""

from __future__ import annotations

from constrain.cfg.ir import GrammarIR, Terminal
from constrain.errors import GrammarTooComplexError
from constrain.frontends.json_schema.diagnostics import Diagnostics
from constrain.frontends.json_schema.options import MAX_GRAMMAR_CHARS
from constrain.frontends.json_schema.prune import prune
from constrain.frontends.json_schema.rules import GrammarBuilder


def to_ir(g: GrammarBuilder, start: str, diag: Diagnostics) -> GrammarIR:
    """The grammar as :class:`GrammarIR`: the same language as loading
    :func:`~constrain.frontends.json_schema.lark_text.render`'s text (``x?`` and
    ``(...)*`` become helper rules as the loader makes them), ~0.6 ms less on a
    median MaskBench schema. Terminal patterns are the regexes as written, not as
    read back from Lark's escaping (the same regular languages); the IR carries
    ``g.exclusions``.

    Raises:
        GrammarTooComplexError: the grammar would exceed :data:`MAX_GRAMMAR_CHARS`
            as text.
    """
    cleaned, used_terms = prune(g, start, diag)
    literal_of = g.literal_of
    terminals = [Terminal(name, rx, 0, literal_of.get(name))
                 for name, rx in g.terminal_defs.items() if name in used_terms]
    n_t = len(terminals)
    t_index = {t.name: i for i, t in enumerate(terminals)}
    names = [start] + [n for n in cleaned if n != start]
    index = {n: n_t + i for i, n in enumerate(names)}
    rules: list = []
    size = sum(len(t.pattern) for t in terminals)

    def sym(x: str) -> int:
        return t_index[x] if x in t_index else index[x]

    def aux(kind: str) -> int:
        names.append(f"__{kind}_{len(names)}")
        return n_t + len(names) - 1

    for name in names[:len(index)]:
        lhs = index[name] - n_t
        for alt in cleaned[name]:
            seq = []
            for kind, x in alt:
                if kind == "sym":
                    seq.append(sym(x))
                elif kind == "opt":
                    h = aux("opt")
                    rules += [(h - n_t, (sym(x),)), (h - n_t, ())]
                    seq.append(h)
                else:
                    h = aux("star")
                    rules += [(h - n_t, ()), (h - n_t, (h,) + tuple(sym(y) for y in x))]
                    seq.append(h)
            size += 8 * len(seq) + 4
            rules.append((lhs, tuple(seq)))
    if size > MAX_GRAMMAR_CHARS:
        raise GrammarTooComplexError(
            f"the grammar would be about {size} characters as text (limit {MAX_GRAMMAR_CHARS})")
    # every rule kept by prune is productive, and so are the helpers
    return GrammarIR(terminals, names, rules, 0, exclusions=g.exclusions or {}, productive=True)
