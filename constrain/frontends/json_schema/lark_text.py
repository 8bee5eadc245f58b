"""The Lark back end: the pruned grammar as Lark grammar text (start rule
``start``; terminals as ``/regex/`` literals)."""

from __future__ import annotations

from constrain.errors import GrammarTooComplexError
from constrain.frontends.json_schema.diagnostics import Diagnostics
from constrain.automata.json_encoding import escape_lark_regex
from constrain.frontends.json_schema.options import MAX_GRAMMAR_CHARS
from constrain.frontends.json_schema.prune import prune
from constrain.frontends.json_schema.rules import GrammarBuilder


def _alternative(alt) -> str:
    parts = []
    for kind, sym in alt:
        if kind == "sym":
            parts.append(sym)
        elif kind == "opt":
            parts.append(sym + "?")
        else:
            parts.append("(" + " ".join(sym) + ")*")
    return " ".join(parts)


def render(g: GrammarBuilder, start: str, diag: Diagnostics) -> str:
    """The grammar text, unproductive and unreachable rules removed.

    Raises:
        GrammarTooComplexError: the text would exceed :data:`MAX_GRAMMAR_CHARS`.
    """
    cleaned, used_terms = prune(g, start, diag)
    lines = [f"start: {start}" if start != "start" else ""]
    for name, alts in cleaned.items():
        lines.append(f"{name}: " + "\n    | ".join(map(_alternative, alts)))
    for tname, rx in g.terminal_defs.items():
        if tname in used_terms:
            lines.append(f"{tname}: /{escape_lark_regex(rx)}/")
    text = "\n".join(x for x in lines if x) + "\n"
    if len(text) > MAX_GRAMMAR_CHARS:
        raise GrammarTooComplexError(
            f"the grammar text would be {len(text)} characters (limit {MAX_GRAMMAR_CHARS})")
    return text
