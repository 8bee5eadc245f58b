"""Lark as an exact oracle for the grammars of :mod:`constrain.frontends.json_schema.compiler`.

Lark's ``dynamic_complete`` lexer tries every prefix of a terminal's match, but
with Python's ``re`` the match is the *first* alternative's (``1|1[0-9]`` matches
``1`` in ``15``), so longer matches behind an earlier alternative are missed.
With the ``regex`` module in POSIX mode (``(?p)``: leftmost-longest) every match
length is tried, so Lark accepts exactly the language where each terminal is the
regular language of its regex.
"""

from __future__ import annotations

import re

import lark

_TERMINAL_LINE = re.compile(r"^([A-Z][A-Z0-9_]*): /", re.M)


def lark_parser(grammar: str, start: str = "start") -> lark.Lark:
    """An Earley parser (scannerless, POSIX terminal matching) for ``grammar``."""
    text = _TERMINAL_LINE.sub(r"\1: /(?p)", grammar)
    return lark.Lark(text, parser="earley", lexer="dynamic_complete", start=start, regex=True)


def accepts(parser: lark.Lark, text: str) -> bool:
    """Whether the parser accepts the whole text."""
    try:
        parser.parse(text)
        return True
    except lark.exceptions.LarkError:
        return False
