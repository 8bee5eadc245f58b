"""``const`` and ``enum``: the values a conjunction allows when one of its nodes
lists them, and the one terminal that spells them."""

from __future__ import annotations

import json
import math

from constrain.automata.json_encoding import json_str, lit
from constrain.frontends.json_schema.dialect import integers_are_exact
from constrain.frontends.json_schema.formats import FORMATS, format_admits
from constrain.frontends.json_schema.keywords import has_type, json_equal, simple
from constrain.frontends.json_schema.rules import GrammarBuilder


def enum_values(doc, conj) -> list | None:
    """The values an ``enum``/``const`` in the conjunction allows (each
    validated against every node), or ``None`` when there is none."""
    cands = None
    for p in conj:
        n = doc.node(p)
        if not isinstance(n, dict):
            continue
        if "const" in n:
            vals = [n["const"]]
        elif "enum" in n and isinstance(n["enum"], list):
            vals = list(n["enum"])
        else:
            continue
        if cands is None:
            cands = vals
        else:
            cands = [v for v in cands if any(json_equal(v, w) for w in vals)]
    if cands is None:
        return None
    if not integers_are_exact(doc.draft):
        # drafts 3/4: 1 and 1.0 are one value to enum (equality) and two to
        # type (only 1 is an integer): each is checked, and spelled, alone
        # ({"enum": [1], "not": {"type": "integer"}} admits 1.0 there)
        cands = [w for v in cands for w in number_twins(v)]
    # every candidate is in each enum/const of the conjunction already;
    # against a node that asserts nothing else, jsonschema's check only
    # repeated that scan (quadratic in the enum: 8.8 ms of a Github_hard
    # schema's compile), and a type is checked here
    checks, typed = [], []
    for p in conj:
        n = doc.node(p)
        if not simple(n):
            checks.append(p)
        elif "type" in n:
            typed.append(p)
    values = [v for v in cands
              if all(doc.accepts(v, p) for p in checks)
              and all(has_type(v, doc.node(p)["type"], doc, p) for p in typed)]
    return _formats_checked(doc, conj, values) if doc.formats_asserted else values


def _formats_checked(doc, conj, values: list) -> list:
    """``values`` less the strings a ``format`` of the conjunction rejects
    (jsonschema's validation above asserts no format); a format Trellis does
    not enforce is named in the compile's ``UnenforcedFormatWarning`` when a
    string value is left for it to judge (``{"enum": ["abc"], "format":
    "date"}`` admitted ``"abc"`` before)."""
    for p in conj:
        n = doc.node(p)
        f = n.get("format") if isinstance(n, dict) else None
        if not isinstance(f, str) or not any(isinstance(v, str) for v in values):
            continue
        if f in FORMATS:
            values = [v for v in values if format_admits(f, v)]
        else:
            doc.diag.format_not_enforced(f"{p}/format", f, "not one of the enforced formats")
    return values


def number_twins(v) -> list:
    """``v``, and for an integral number the same value as the other type
    (``1`` and ``1.0``; an integer past 2**53 has no exact float)."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return [v]
    if isinstance(v, float):
        return [v, int(v)] if v.is_integer() else [v]
    return [v, float(v)] if abs(v) < 2 ** 53 else [v]


def number_texts(v, integral_floats: bool = True) -> list[str]:
    """JSON spellings of a number for enum literals (an integral float both
    ways where ``integral_floats``, drafts 6 on, in which ``1`` and ``1.0`` are
    the same integer; else only as written: in draft 4, ``1.0`` is no integer
    and ``1`` is, so a value checked as ``1.0`` does not vouch for ``1``; none
    for NaN and infinities, which JSON cannot spell)."""
    if isinstance(v, float):
        if v != v or v in (math.inf, -math.inf):
            return []
        out = [repr(v)]  # json.dumps of a finite float
        if integral_floats and v.is_integer():
            out.append(str(int(v)))
        return out
    return [str(v)]


def literal_symbol(g: GrammarBuilder, values, integral_floats: bool = True) -> str:
    """One terminal for a finite set of JSON values (``integral_floats``: see
    :func:`number_texts`)."""
    texts = []
    for v in values:
        if isinstance(v, bool) or v is None:
            texts.append("null" if v is None else "true" if v else "false")
        elif isinstance(v, (int, float)):
            texts.extend(number_texts(v, integral_floats))
        elif isinstance(v, str):
            texts.append(json_str(v))
        else:
            texts.append(json.dumps(v, ensure_ascii=False, separators=(",", ":")))
    texts = list(dict.fromkeys(texts))
    regex = "|".join(lit(t) for t in texts)
    return g.terminal(regex, "CONST", texts[0] if len(texts) == 1 else None)
