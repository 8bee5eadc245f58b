"""Strings: one terminal for the strings of a conjunction (a whole string with
its pattern, format and length bounds), less the values of a ``not: {enum}``.

Patterns accept canonical escapes only, and ``maxLength`` above the cap is
lowered to it: the strict side, where exactness would be costly."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from constrain.errors import SchemaTooComplexError
from constrain.automata.json_encoding import JSON_CHAR_ANY, JSON_CODEPOINT
from constrain.frontends.json_schema.exclusions import exclusion_terminal
from constrain.frontends.json_schema.formats import FORMATS, format_admits
from constrain.frontends.json_schema.keywords import len_bounds, lower_bound_pointer
from constrain.frontends.json_schema.patterns import PatternUnsupported, translate_pattern

if TYPE_CHECKING:
    from constrain.frontends.json_schema.translation import Translation


def pattern_content(t: Translation, pattern: str, where: str, lo: int = 0,
                    hi: int | None = None) -> tuple[bool, str | None]:
    """``(ok, content)``: the regex of the string contents that match ``pattern``
    with ``lo <= length <= hi`` (``None``: no string does); ``ok`` is false when
    the pattern cannot be translated (then :meth:`~Diagnostics.unsupported` at
    ``where`` has been told why)."""
    try:
        return True, translate_pattern(pattern, lo, hi)
    except PatternUnsupported as e:
        t.diag.unsupported(where, f"pattern {pattern!r}: {e}")
    except re.error as e:
        t.diag.unsupported(where, f"pattern {pattern!r} is not a Python regex: {e}")
    return False, None


def _asserts_on_strings(t: Translation, n) -> bool:
    """Whether the node ``n`` has a ``pattern`` or an enforced ``format``."""
    if not isinstance(n, dict):
        return False
    f = n.get("format")
    return "pattern" in n or (isinstance(f, str) and f in FORMATS and t.options.formats == "assert")


def _format_admits(t: Translation, n, v) -> bool:
    """Whether the enforced ``format`` of the node ``n`` (if any) admits ``v``."""
    f = n.get("format") if isinstance(n, dict) else None
    if not (isinstance(f, str) and f in FORMATS and t.options.formats == "assert"):
        return True
    return format_admits(f, v)


def string_symbol(t: Translation, conj, excluded=()) -> str | None:
    """One terminal for the strings of the conjunction (less the ``excluded``
    ones)."""
    doc, cap = t.doc, t.options.max_string_length
    lo, hi = len_bounds(doc, conj, "minLength", "maxLength")
    if excluded:
        # only the values the rest of the conjunction admits need cutting out
        # (an enforced format's regex included: it is the terminal's language)
        excluded = [v for v in excluded
                    if all(doc.valid_local(v, p) and _format_admits(t, doc.node(p), v) for p in conj)]
    if excluded:
        if lo > 0 or hi is not None or any(_asserts_on_strings(t, doc.node(p)) for p in conj):
            t.diag.unsupported("", "not: {enum} together with string constraints")
        else:
            return exclusion_terminal(t.grammar, excluded, "", "STRING")
    if hi is not None and hi > cap:
        hi = max(cap, lo)
    if lo > cap:
        where = lower_bound_pointer(doc, conj, "minLength", lo)
        raise SchemaTooComplexError(f"minLength {lo} exceeds the supported {cap} "
                                    f"(pass max_string_length= to raise it)", where)
    if hi is not None and lo > hi:
        return None
    patterns, formats = [], []
    for p in conj:
        n = doc.node(p)
        if not isinstance(n, dict):
            continue
        if isinstance(n.get("pattern"), str) and n["pattern"] not in [x for x, _ in patterns]:
            patterns.append((n["pattern"], f"{p}/pattern"))
        if isinstance(n.get("format"), str) and t.options.formats == "assert":
            formats.append((n["format"], f"{p}/format"))
    content = None
    if patterns:
        for _, where in patterns[1:]:
            t.diag.unsupported(where, "two different patterns on one string")
        ok, content = pattern_content(t, *patterns[0], lo, hi)
        if ok and content is None:
            return None
    enforced = None
    if content is None and lo == 0 and hi is None:
        enforced = next((f for f, _ in formats if f in FORMATS), None)
        content = FORMATS.get(enforced)
    for f, where in formats:
        if f != enforced:
            t.diag.format_not_enforced(where, f, "not one of the enforced formats"
                                       if f not in FORMATS else "beside a pattern, a length "
                                       "bound or another format")
    if content is None:
        if lo == 0 and hi is None:
            content = JSON_CHAR_ANY + "*"
        else:
            rng = "{%d,}" % lo if hi is None else ("{%d}" % lo if lo == hi else "{%d,%d}" % (lo, hi))
            content = JSON_CODEPOINT + rng
    name = t.grammar.terminal('"' + content + '"', "STRING")
    if patterns:
        t.grammar.note_pattern(name, patterns[0][1], patterns[0][0])
    return name
