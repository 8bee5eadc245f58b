"""Lark grammar text → :class:`GrammarIR`, the compiler's context-free grammar.

lark's own grammar loader reads the file (so ``%import common.X``, ``%ignore``,
``?rule`` inlining, ``[]`` ``*`` ``+`` ``?`` ``~n`` ``~n..m`` and templates mean
exactly what they mean in lark); what comes out is a flat CFG whose terminals are
regular expressions. Everything after this module is ours.
"""

from __future__ import annotations

import dataclasses
import re
from ast import literal_eval
from pathlib import Path

from constrain.cfg.ir import GrammarIR, Terminal
from constrain.errors import GrammarError


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
    fast = _load_plain(text, start)
    if fast is not None:
        return dataclasses.replace(fast, source=text)
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


# -- a fast path for plain grammars ------------------------------------------------
#
# lark's loader parses the grammar file with a LALR parser and a dozen tree
# transformers: about 20 ms for a JSON Schema's grammar, more than the rest of the
# compilation. Grammars that use only plain rules and literal terminals (what
# compile_json_schema and most hand-written grammars produce) are read here
# instead; lark's own function turns each literal into its pattern, so escapes
# mean the same. Anything else — %import, templates, priorities, aliases, terminals
# built from terminals — goes to lark.

_TOKEN = re.compile(r"""
    (?P<ws>\s+)
  | (?P<STRING>"(?:\\"|\\\\|[^"\n])*?"i?)
  | (?P<REGEXP>/(?!/)(?:\\/|\\\\|[^/])*?/[imslux]*)
  | (?P<NAME>[?!]?[_a-zA-Z][_a-zA-Z0-9]*)
  | (?P<op>[|()\[\]*+?])
""", re.VERBOSE)
_DEF = re.compile(r"([?!]?[_a-zA-Z][_a-zA-Z0-9]*)\s*:(.*)$", re.DOTALL)


_ESCAPE_PAIR = re.compile(r"\\(.)", re.S)


def _double_escape(m) -> str:
    c = m.group(1)
    if c == "\\":
        return "\\\\\\\\"
    if c not in "Uuxnftr":
        return "\\\\" + c
    return m.group(0)


def eval_escaping(text: str) -> str:
    """lark's ``load_grammar.eval_escaping`` (how a literal's body is read), with
    its per-character Python loop done by one regex substitution: the long
    regexes JSON Schemas compile to spent more time here than in lark's loop-free
    rest of loading."""
    if text.endswith("\\") and (len(text) - len(text.rstrip("\\"))) % 2:
        from lark.exceptions import GrammarError as LarkGrammarError

        raise LarkGrammarError("Literal ended unexpectedly (bad escaping): `%r`" % text)
    w = _ESCAPE_PAIR.sub(_double_escape, text) if "\\" in text else text
    w = w.replace('\\"', '"').replace("'", "\\'")
    return literal_eval("u'''%s'''" % w)


def _literal_to_pattern(kind: str, value: str):
    """lark's ``load_grammar._literal_to_pattern`` with the fast
    :func:`eval_escaping`."""
    from lark.exceptions import GrammarError as LarkGrammarError
    from lark.lexer import PatternRE, PatternStr

    flag_start = max(value.rfind("/"), value.rfind('"')) + 1
    assert flag_start > 0
    flags = value[flag_start:]
    assert all(f in "imslux" for f in flags), flags
    if kind == "STRING" and "\n" in value:
        raise LarkGrammarError("You cannot put newlines in string literals")
    if kind == "REGEXP" and "\n" in value and "x" not in flags:
        raise LarkGrammarError("You can only use newlines in regular expressions with the `x` flag")
    body = value[:flag_start]
    assert body[0] == body[-1] and body[0] in '"/'
    text = eval_escaping(body[1:-1])
    if text == "":
        raise LarkGrammarError("Empty terminals are not allowed (%s)" % value)
    if kind == "STRING":
        return PatternStr(text.replace("\\\\", "\\"), flags, raw=value)
    return PatternRE(text, flags, raw=value)


class _NotPlain(Exception):
    pass


def _tokens(body: str) -> list[tuple[str, str]]:
    out, pos = [], 0
    while pos < len(body):
        m = _TOKEN.match(body, pos)
        if m is None:
            raise _NotPlain
        pos = m.end()
        if m.lastgroup != "ws":
            out.append((m.lastgroup, m.group()))
    return out


def _load_plain(text: str, start: str) -> GrammarIR | None:
    """Read a grammar of plain rules and literal terminals, or return ``None``."""
    try:
        return _PlainLoader(text, start).result()
    except _NotPlain:
        return None


class _PlainLoader:
    def __init__(self, text: str, start: str):
        defs: list[list] = []
        ignore_items: list[tuple[str, str]] = []
        for raw in text.split("\n"):
            line = raw.strip()
            if not line or line.startswith("//"):
                continue
            if raw[0] in " \t":
                if not defs or not line.startswith("|"):
                    raise _NotPlain
                defs[-1][1] += " " + line
                continue
            if line.startswith("%ignore"):
                toks = _tokens(line[len("%ignore"):])
                if len(toks) != 1 or toks[0][0] == "op":
                    raise _NotPlain
                ignore_items.append(toks[0])
                continue
            m = _DEF.match(line)
            if m is None or "//" in m.group(2) or "->" in m.group(2):
                raise _NotPlain
            defs.append([m.group(1), m.group(2)])
        self.terminals: list[Terminal] = []
        self.term_index: dict[str, int] = {}
        self.anon: dict[tuple, int] = {}
        self.nonterminals: list[str] = [start]
        self.nt_index: dict[str, int] = {start: 0}
        self.rules: list[tuple[int, tuple]] = []
        self.n_aux = 0
        rule_defs = []
        for name, body in defs:
            if name.lstrip("?!").isupper():
                toks = _tokens(body)
                if len(toks) != 1 or toks[0][0] not in ("STRING", "REGEXP") or name in self.term_index:
                    raise _NotPlain
                self._add_terminal(name, toks[0])
            else:
                rule_defs.append((name.lstrip("?!"), _tokens(body)))
        names = {n for n, _ in rule_defs}
        if len(names) != len(rule_defs) or start not in names:
            raise _NotPlain
        for n, _ in rule_defs:
            self._nt(n)
        self.defined = names
        # symbols are terminals and nonterminals in one space only at the end
        self.pending: list[tuple[int, list]] = []
        for n, toks in rule_defs:
            alts, pos = self._alts(toks, 0)
            if pos != len(toks):
                raise _NotPlain
            for seq in alts:
                self.pending.append((self.nt_index[n], seq))
        self.ignore = [self._symbol(kind, val)[1] for kind, val in ignore_items]

    def _add_terminal(self, name: str, tok: tuple[str, str]) -> int:
        from lark.exceptions import GrammarError as LarkGrammarError

        try:
            pat = _literal_to_pattern(tok[0], tok[1])
        except (LarkGrammarError, AssertionError, ValueError, SyntaxError):
            raise _NotPlain from None
        flags = 0
        for f in pat.flags:
            flags |= _FLAG_BITS.get(f, 0)
        literal = pat.value if tok[0] == "STRING" else None
        self.term_index[name] = len(self.terminals)
        self.terminals.append(Terminal(name, pat.to_regexp(), flags, literal))
        return self.term_index[name]

    def _nt(self, name: str) -> int:
        if name not in self.nt_index:
            self.nt_index[name] = len(self.nonterminals)
            self.nonterminals.append(name)
        return self.nt_index[name]

    def _aux(self, kind: str) -> int:
        self.n_aux += 1
        return self._nt(f"__{kind}_{self.n_aux}")

    def _symbol(self, kind: str, val: str) -> tuple[str, int]:
        if kind == "NAME":
            if val.isupper():
                if val not in self.term_index:
                    raise _NotPlain
                return ("t", self.term_index[val])
            if val not in self.defined:
                raise _NotPlain
            return ("n", self.nt_index[val])
        key = (kind, val)
        if key not in self.anon:
            self.anon[key] = self._add_terminal(f"__ANON_{len(self.anon)}", (kind, val))
        return ("t", self.anon[key])

    def _alts(self, toks, pos):
        alts = [[]]
        while pos < len(toks):
            kind, val = toks[pos]
            if kind == "op" and val == "|":
                alts.append([])
                pos += 1
                continue
            if kind == "op" and val in ")]":
                break
            item, pos = self._item(toks, pos)
            alts[-1].append(item)
        return alts, pos

    def _item(self, toks, pos):
        kind, val = toks[pos]
        if kind == "op" and val in "([":
            inner, pos = self._alts(toks, pos + 1)
            close = ")" if val == "(" else "]"
            if pos >= len(toks) or toks[pos] != ("op", close):
                raise _NotPlain
            pos += 1
            nt = self._aux("group" if val == "(" else "opt")
            for seq in inner:
                self.pending.append((nt, seq))
            if val == "[":
                self.pending.append((nt, []))
            sym = ("n", nt)
        elif kind in ("NAME", "STRING", "REGEXP"):
            if kind == "NAME" and val[0] in "?!":
                raise _NotPlain
            sym = self._symbol(kind, val)
            pos += 1
        else:
            raise _NotPlain
        while pos < len(toks) and toks[pos][0] == "op" and toks[pos][1] in "*+?":
            op = toks[pos][1]
            pos += 1
            if op == "?":
                nt = self._aux("opt")
                self.pending += [(nt, [sym]), (nt, [])]
            elif op == "*":
                nt = self._aux("star")
                self.pending += [(nt, []), (nt, [("n", nt), sym])]
            else:
                nt = self._aux("plus")
                self.pending += [(nt, [sym]), (nt, [("n", nt), sym])]
            sym = ("n", nt)
        return sym, pos

    def result(self) -> GrammarIR:
        n_t = len(self.terminals)
        rules = [(lhs, tuple(v if k == "t" else n_t + v for k, v in seq)) for lhs, seq in self.pending]
        return GrammarIR(self.terminals, self.nonterminals, rules, 0, self.ignore, "")


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


__all__ = ["load_lark_grammar", "read_grammar_source", "eval_escaping"]
