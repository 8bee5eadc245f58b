"""Lark grammar text → :class:`GrammarIR`, the compiler's context-free grammar.

lark's own grammar loader reads the file (so ``%import common.X``, ``%ignore``,
``?rule`` inlining, ``[]`` ``*`` ``+`` ``?`` ``~n`` ``~n..m`` and templates mean
exactly what they mean in lark); what comes out is a flat CFG whose terminals are
regular expressions. Everything after this module is ours.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from .errors import GrammarError


@dataclass(frozen=True)
class Terminal:
    """A terminal: its lark name and the Python ``re`` pattern it matches."""

    name: str
    pattern: str
    flags: int = 0
    #: the literal text of a string terminal (``"if"``, ``"select"i``), else None
    literal: str | None = None


@dataclass
class GrammarIR:
    """A context-free grammar over regular terminals.

    Symbols are ints: terminal ``t`` is ``t`` (``0 <= t < len(terminals)``),
    nonterminal ``n`` is ``len(terminals) + n``. ``rules[i] = (lhs, rhs)`` with
    ``lhs`` a nonterminal index (not offset) and ``rhs`` a tuple of symbols.
    ``ignore`` lists the terminals that may appear between any two terminals.
    """

    terminals: list[Terminal]
    nonterminals: list[str]
    rules: list[tuple[int, tuple[int, ...]]]
    start: int
    ignore: list[int] = field(default_factory=list)
    source: str = ""

    @property
    def n_terminals(self) -> int:
        """Number of terminals."""
        return len(self.terminals)

    def symbol_name(self, sym: int) -> str:
        """The lark name of a symbol."""
        if sym < len(self.terminals):
            return self.terminals[sym].name
        return self.nonterminals[sym - len(self.terminals)]


_FLAG_BITS = {"i": re.IGNORECASE, "m": re.MULTILINE, "s": re.DOTALL, "u": 0, "x": re.VERBOSE,
              "l": re.LOCALE}


def read_grammar_source(source) -> tuple[str, str | None]:
    """The grammar text of ``source`` (text, or a path to a ``.lark`` file) and the
    file's directory (for relative ``%import``), if any."""
    if isinstance(source, Path) or (isinstance(source, str) and "\n" not in source
                                    and source.endswith(".lark")):
        path = Path(source)
        if not path.is_file():
            raise GrammarError(f"grammar file {str(path)!r} not found")
        return path.read_text(encoding="utf-8"), str(path.parent)
    if not isinstance(source, str):
        raise GrammarError(f"a grammar is Lark text or a path to a .lark file, not {type(source).__name__}")
    return source, None


def load_lark_grammar(source, start: str = "start") -> GrammarIR:
    """Load a Lark grammar (text, or a path to a ``.lark`` file) into a :class:`GrammarIR`.

    Raises:
        GrammarError: bad syntax (with line and column), an undefined or unusable
            symbol, an unknown start symbol, a ``%declare``-d terminal (it has no
            pattern to enforce).
    """
    from lark.exceptions import LarkError, UnexpectedInput
    from lark.load_grammar import load_grammar

    text, directory = read_grammar_source(source)
    import_paths = [directory] if directory else []
    try:
        grammar, _ = load_grammar(text, "<grammar>", import_paths, False)
        terms, rules, ignore = grammar.compile([start], set())
    except UnexpectedInput as e:
        raise GrammarError(f"syntax error in grammar: {_first_line(e)}",
                           getattr(e, "line", None), getattr(e, "column", None)) from None
    except LarkError as e:
        m = re.search(r"at line (\d+) column (\d+)", str(e))
        line, col = (int(m.group(1)), int(m.group(2))) if m else _locate(str(e), text)
        raise GrammarError(f"invalid grammar: {_first_line(e)}", line, col) from None
    except (OSError, ImportError) as e:
        raise GrammarError(f"invalid grammar: {e}") from None

    term_index = {}
    terminals = []
    for t in terms:
        if t.pattern is None:
            raise GrammarError(f"terminal {t.name} is %declare-d: it has no pattern to enforce",
                               *_locate_name(t.name, text))
        flags = 0
        for f in t.pattern.flags:
            flags |= _FLAG_BITS.get(f, 0)
        term_index[t.name] = len(terminals)
        literal = t.pattern.value if type(t.pattern).__name__ == "PatternStr" else None
        terminals.append(Terminal(t.name, t.pattern.to_regexp(), flags, literal))
    nt_index: dict[str, int] = {}
    nonterminals: list[str] = []

    def nt(name: str) -> int:
        if name not in nt_index:
            nt_index[name] = len(nonterminals)
            nonterminals.append(name)
        return nt_index[name]

    nt(start)
    n_t = len(terminals)
    out_rules = []
    for r in rules:
        rhs = []
        for s in r.expansion:
            if s.is_term:
                if s.name not in term_index:
                    raise GrammarError(f"terminal {s.name} is used but not defined",
                                       *_locate_name(s.name, text))
                rhs.append(term_index[s.name])
            else:
                rhs.append(n_t + nt(s.name))
        out_rules.append((nt(r.origin.name), tuple(rhs)))
    if not any(lhs == 0 for lhs, _ in out_rules):
        raise GrammarError(f"the start symbol {start!r} has no rule")
    ignore_ids = [term_index[name] for name in ignore if name in term_index]
    return GrammarIR(terminals, nonterminals, out_rules, 0, ignore_ids, text)


def _first_line(e: Exception) -> str:
    return str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__


def _locate(message: str, text: str) -> tuple[int | None, int | None]:
    """Best-effort line and column for a lark error message naming a symbol."""
    m = re.search(r"'([A-Za-z_][A-Za-z_0-9]*)'", message) or re.search(r"\b([A-Z_][A-Z_0-9]+)\b", message)
    if m:
        return _locate_name(m.group(1), text)
    return None, None


def _locate_name(name: str, text: str) -> tuple[int | None, int | None]:
    m = re.search(r"(?<![A-Za-z_0-9])" + re.escape(name.lstrip("_?!")) + r"(?![A-Za-z_0-9])", text)
    if not m:
        return None, None
    line = text.count("\n", 0, m.start()) + 1
    col = m.start() - (text.rfind("\n", 0, m.start()) + 1) + 1
    return line, col


def grammar_fingerprint(ir: GrammarIR) -> str:
    """A stable digest of a grammar's terminals and rules (for caches)."""
    import hashlib

    h = hashlib.sha256()
    for t in ir.terminals:
        h.update(f"{t.name}\0{t.pattern}\0{t.flags}\n".encode("utf-8", "surrogatepass"))
    for lhs, rhs in ir.rules:
        h.update(f"{lhs}:{','.join(map(str, rhs))}\n".encode())
    h.update(f"start={ir.start} ignore={ir.ignore}".encode())
    return h.hexdigest()


__all__ = ["GrammarIR", "Terminal", "load_lark_grammar", "read_grammar_source", "grammar_fingerprint"]
