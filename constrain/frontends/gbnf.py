"""GBNF grammar text (llama.cpp's grammar format) → :class:`GrammarIR`.

The language is the one llama.cpp's ``grammars/README.md`` documents: rules
``name ::= alternatives`` over Unicode code points, starting at ``root``; no
lexer and no implicit whitespace. Syntax, as llama.cpp's parser reads it:

* names are ``[A-Za-z0-9_-]+`` (llama.cpp's parser: no ``_``); ``"..."``
  literals and ``[...]`` classes (``^`` negates; ``a-z`` ranges) take the
  escapes ``\\xXX``, ``\\uXXXX``, ``\\UXXXXXXXX``, ``\\t``, ``\\n``, ``\\r``,
  ``\\\\``, ``\\"``, ``\\[``, ``\\]``, ``\\-``; ``.`` is any code point but NUL
  (which llama.cpp never matches); ``( )`` groups; ``|`` alternates;
  ``* + ? {m} {m,} {m,n}`` repeat the item before them (a whole literal);
* ``#`` starts a comment that runs to the end of the line; a rule ends at the
  end of its line, except inside parentheses and after ``|`` or ``::=``.

The IR has no lexer either, so the grammar's regular parts become its
terminals: a rule that is not recursive (and refers only to such rules) is a
regular language, and every maximal run of regular items in a sequence is one
terminal, a regex of the run (``"{" ws`` in json.gbnf is one terminal, ``string``
another). Terminals must match a non-empty string, so a run that may be empty is
written as an optional terminal of its non-empty strings. The recursive rest
stays rules; the language is unchanged (a regular language substituted for a
nonterminal). There is no ``%ignore``: the runtime may split the text between
terminals anywhere, as the grammar allows.

Where llama.cpp is looser this is stricter, with a :class:`GrammarError`:
a rule defined twice (llama.cpp keeps the last), an empty class ``[]``/``[^]``
(llama.cpp reads it as the empty string), code points past U+10FFFF. Left recursion,
which llama.cpp refuses, is accepted (the Earley parser handles it). Token
references (``<[id]>``, ``<text>``, ``!<[id]>``; also llguidance's lists and
ranges ``<[1,3-5]>``) match one whole token and are terminals of their own
(:attr:`GrammarIR.tokens`, resolved against the vocabulary when the grammar is
compiled: :mod:`constrain.cfg.token_refs`).
Syntax errors are :class:`GrammarSyntaxError` with the line and column.
"""

from __future__ import annotations

import re

from constrain.automata.json_encoding import MAX_CP, class_re, iv_complement, iv_norm, lit
from constrain.automata.regex_syntax import MAX_REPEAT
from constrain.cfg.ir import GrammarIR, Terminal
from constrain.automata.deadline import passed
from constrain.errors import (GrammarError, GrammarSyntaxError, GrammarTooComplexError,
                              too_complex_at)

#: the characters of a terminal regex beyond which a regular rule is kept as a
#: rule of its own (inlining copies a rule into every place it is used)
MAX_INLINE_CHARS = 50_000
#: the symbols counted repetitions of non-regular items may expand into
MAX_EXPANDED_SYMBOLS = 200_000
#: nesting of groups (the parser and the passes after it recurse per level:
#: 170 overflowed Python's stack in a later pass; a terminal's regex nests as
#: deep, and regexes refuse more than 100 levels)
MAX_DEPTH = 100

_SURROGATES = [(0xD800, 0xDFFF)]
#: never matched: UTF-8 text carries no surrogates, and llama.cpp no NUL (its
#: decoder stops at one, and it refuses a token whose text starts with one)
_NEVER = [(0, 0)] + _SURROGATES
_ALL = iv_complement(_NEVER)
_NAME = re.compile(r"[A-Za-z0-9_-]+")
_INT = re.compile(r"[0-9]+")
_RULE_HEAD = re.compile(r"^[ \t]*[A-Za-z0-9_-]+(?:\[[^\]\n]*\])?[ \t]*::=", re.MULTILINE)


def looks_like_gbnf(text: str) -> bool:
    """Whether grammar text is GBNF rather than Lark: some line starts a rule
    with ``name ::=`` (``::=`` is no Lark syntax)."""
    return _RULE_HEAD.search(text) is not None


# -- the syntax tree: tuples, one per construct ------------------------------------------
#
# ("lit", text) ("cls", intervals) ("ref", name, offset) ("seq", items)
# ("alt", seqs) ("rep", item, lo, hi-or-None) ("tok", TokenRef)


class _Parser:
    """llama.cpp's recursive-descent reading of GBNF, on offsets into ``text``."""

    def __init__(self, text: str, max_repeat: int = MAX_REPEAT):
        self.text = text
        self.max_repeat = max_repeat
        self.rules: dict[str, tuple] = {}
        self.where: dict[str, int] = {}  # rule name -> offset of its head
        self.refs: list[tuple[str, int]] = []
        #: rule name -> its max_tokens (``name[max_tokens=N] ::= ...``)
        self.budgets: dict[str, int] = {}

    def error(self, message: str, pos: int, cls=GrammarSyntaxError):
        line, col = position(self.text, pos)
        if cls is GrammarTooComplexError:
            return too_complex_at(message, line, col)
        return cls(message, line, col)

    def space(self, pos: int, newline_ok: bool) -> int:
        text, n = self.text, len(self.text)
        while pos < n:
            c = text[pos]
            if c == "#":
                while pos < n and text[pos] not in "\r\n":
                    pos += 1
            elif c in " \t" or (newline_ok and c in "\r\n"):
                pos += 1
            else:
                break
        return pos

    def parse(self) -> None:
        text = self.text
        pos = self.space(0, True)
        while pos < len(text):
            pos = self.rule(pos)
        for name, at in self.refs:
            if name not in self.rules:
                raise self.error(f"undefined rule {name!r}", at, GrammarError)

    def rule(self, pos: int) -> int:
        m = _NAME.match(self.text, pos)
        if m is None:
            raise self.error("expected a rule name", pos)
        name = m.group()
        p = self.space(m.end(), False)
        if self.text.startswith("[", p):
            close = self.text.find("]", p)
            if close < 0 or "\n" in self.text[p:close]:
                raise self.error("expected ']' closing the rule's attributes", p)
            from constrain.cfg.budgets import max_tokens_attribute

            self.budgets[name] = max_tokens_attribute(self.text[p + 1:close], self.text, p + 1)
            p = self.space(close + 1, False)
        if not self.text.startswith("::=", p):
            raise self.error(f"expected '::=' after the rule name {name!r}", p)
        if name in self.rules:
            line, _ = position(self.text, self.where[name])
            raise self.error(f"rule {name!r} is defined twice (first on line {line})", pos,
                             GrammarError)
        self.where[name] = pos
        p = self.space(p + 3, True)
        body, p = self.alternates(p, False, 0)
        self.rules[name] = body
        text = self.text
        if text.startswith("\r\n", p):
            p += 2
        elif p < len(text) and text[p] in "\r\n":
            p += 1
        elif p < len(text):
            raise self.error(f"expected the end of the line, not {text[p]!r}", p)
        return self.space(p, True)

    def alternates(self, pos: int, nested: bool, depth: int) -> tuple[tuple, int]:
        if depth > MAX_DEPTH:
            raise self.error(f"groups are nested more than {MAX_DEPTH} deep", pos,
                             GrammarTooComplexError)
        seqs = []
        seq, pos = self.sequence(pos, nested, depth)
        seqs.append(seq)
        while pos < len(self.text) and self.text[pos] == "|":
            pos = self.space(pos + 1, True)
            seq, pos = self.sequence(pos, nested, depth)
            seqs.append(seq)
        return ("alt", tuple(seqs)), pos

    def sequence(self, pos: int, nested: bool, depth: int) -> tuple[tuple, int]:
        text, n = self.text, len(self.text)
        items: list = []
        while pos < n:
            c = text[pos]
            start = pos
            if c == '"':
                chars, pos = [], pos + 1
                while True:
                    if pos >= n:
                        raise self.error("unterminated string literal", start)
                    if text[pos] == '"':
                        break
                    at = pos
                    cp, pos = self.char(pos)
                    if cp == 0:
                        raise self.error("a NUL in a literal, which llama.cpp never matches", at,
                                         GrammarError)
                    chars.append(chr(cp))
                items.append(("lit", "".join(chars)))
                pos = self.space(pos + 1, nested)
            elif c == "[":
                pos += 1
                negated = pos < n and text[pos] == "^"
                if negated:
                    pos += 1
                ivs = []
                while True:
                    if pos >= n:
                        raise self.error("unterminated character class", start)
                    if text[pos] == "]":
                        break
                    lo, pos = self.char(pos)
                    hi = lo
                    if text.startswith("-", pos) and pos + 1 < n and text[pos + 1] != "]":
                        hi, pos = self.char(pos + 1)
                    if lo <= hi:  # llama.cpp: a reversed range matches nothing
                        ivs.append((lo, hi))
                if pos == start + 1 + negated:
                    raise self.error("empty character class", start)
                ivs = iv_norm(ivs)
                ivs = iv_complement(ivs + _NEVER) if negated else \
                    iv_complement(iv_complement(ivs) + _NEVER)
                items.append(("cls", tuple(ivs)))
                pos = self.space(pos + 1, nested)
            elif c == ".":
                items.append(("cls", tuple(_ALL)))
                pos = self.space(pos + 1, nested)
            elif c == "(":
                pos = self.space(pos + 1, True)
                body, pos = self.alternates(pos, True, depth + 1)
                if pos >= n or text[pos] != ")":
                    raise self.error("expected ')'", pos)
                items.append(body)
                pos = self.space(pos + 1, nested)
            elif _NAME.match(text, pos):
                m = _NAME.match(text, pos)
                self.refs.append((m.group(), pos))
                items.append(("ref", m.group(), pos))
                pos = self.space(m.end(), nested)
            elif c in "*+?":
                if not items:
                    raise self.error(f"{c!r} has no item before it to repeat", pos)
                lo, hi = {"*": (0, None), "+": (1, None), "?": (0, 1)}[c]
                items[-1] = ("rep", items[-1], lo, hi)
                pos = self.space(pos + 1, nested)
            elif c == "{":
                if not items:
                    raise self.error("'{' has no item before it to repeat", pos)
                lo, hi, pos = self.counts(pos, nested)
                items[-1] = ("rep", items[-1], lo, hi)
            elif c == "<" or (c == "!" and text.startswith("<", pos + 1)):
                from constrain.cfg.token_refs import parse_token_ref

                ref, pos = parse_token_ref(text, pos, angle_names=True)
                items.append(("tok", ref))
                pos = self.space(pos, nested)
            else:
                break
        return ("seq", tuple(items)), pos

    def _count(self, m) -> int:
        """The repetition count ``m`` matched, within ``max_repeat`` (it was
        refused later, naming the generated terminal's regex and an option
        grammars did not take)."""
        n = int(m.group())
        if n > self.max_repeat:
            raise self.error(f"repetition count {n} exceeds the limit of {self.max_repeat} "
                             f"(pass max_repeat= to raise it)", m.start(), GrammarTooComplexError)
        return n

    def counts(self, pos: int, nested: bool) -> tuple[int, int | None, int]:
        text = self.text
        p = self.space(pos + 1, nested)
        m = _INT.match(text, p)
        if m is None:
            raise self.error("expected a repetition count", p)
        lo = self._count(m)
        p = self.space(m.end(), nested)
        if text.startswith("}", p):
            return lo, lo, self.space(p + 1, nested)
        if not text.startswith(",", p):
            raise self.error("expected ',' or '}' in a repetition count", p)
        p = self.space(p + 1, nested)
        hi = None
        m = _INT.match(text, p)
        if m is not None:
            hi = self._count(m)
            p = self.space(m.end(), nested)
            if hi < lo:
                raise self.error(f"repetition {{{lo},{hi}}}: the maximum is below the minimum",
                                 pos)
        if not text.startswith("}", p):
            raise self.error("expected '}' to close the repetition count", p)
        return lo, hi, self.space(p + 1, nested)

    def char(self, pos: int) -> tuple[int, int]:
        """The code point at ``pos`` (an escape or a character) and the offset after it."""
        text = self.text
        c = text[pos]
        if c != "\\":
            return ord(c), pos + 1
        e = text[pos + 1:pos + 2]
        width = {"x": 2, "u": 4, "U": 8}.get(e)
        if width:
            digits = text[pos + 2:pos + 2 + width]
            if len(digits) != width or not all(d in "0123456789abcdefABCDEF" for d in digits):
                raise self.error(f"\\{e} takes {width} hex digits", pos)
            cp = int(digits, 16)
            if cp > MAX_CP:
                raise self.error(f"code point U+{cp:X} is past U+10FFFF", pos)
            return cp, pos + 2 + width
        simple = {"t": 9, "n": 10, "r": 13, "\\": 92, '"': 34, "[": 91, "]": 93, "-": 45}
        if e in simple:
            return simple[e], pos + 2
        raise self.error(f"unknown escape \\{e}" if e else "a backslash ends the grammar", pos)


def position(text: str, i: int) -> tuple[int, int]:
    """1-based line and column of offset ``i``; a line ends at ``\\n``,
    ``\\r\\n`` or a lone ``\\r``, as the parser reads them."""
    head = text[:i]
    line = head.count("\n") + head.count("\r") - head.count("\r\n") + 1
    return line, i - max(head.rfind("\n"), head.rfind("\r")) - 1 + 1


# -- regular languages as regexes ------------------------------------------------------


class _Regular:
    """Regexes of the regular rules and items: ``full(node)`` the language
    (``None`` when empty), ``nonempty(node)`` its non-empty strings, and
    ``nullable(node)``; regular rules are inlined."""

    def __init__(self, rules: dict[str, tuple], regular: set):
        self.rules = rules
        self.regular = regular
        self._full: dict[str, str | None] = {}
        self._nonempty: dict[str, str | None] = {}
        self._nullable: dict[str, bool] = {}

    def _of_rule(self, name: str, memo: dict, of):
        """``of(body)`` of the regular rule ``name``, memoised in ``memo``: the
        rules it refers to first, each after those it refers to (an iterative
        walk), so that ``of`` finds every reference done and never recurses
        down a chain of rules (150 rules, each using the next, overflowed
        Python's stack)."""
        if name in memo:
            return memo[name]
        rules = self.rules
        stack = [(name, iter(sorted(set(_refs(rules[name])))))]
        on_stack = {name}
        while stack:
            v, it = stack[-1]
            for w in it:
                if w not in memo and w not in on_stack:
                    on_stack.add(w)
                    stack.append((w, iter(sorted(set(_refs(rules[w]))))))
                    break
            else:
                stack.pop()
                memo[v] = of(rules[v])
        return memo[name]

    def is_regular(self, node) -> bool:
        kind = node[0]
        if kind == "tok":
            return False  # a whole token, no bytes: a terminal of its own
        if kind == "ref":
            return node[1] in self.regular
        if kind in ("seq", "alt"):
            return all(self.is_regular(k) for k in node[1])
        if kind == "rep":
            return self.is_regular(node[1])
        return True

    def nullable(self, node) -> bool:
        kind = node[0]
        if kind == "lit":
            return not node[1]
        if kind == "cls":
            return False
        if kind == "ref":
            return self._of_rule(node[1], self._nullable, self.nullable)
        if kind == "seq":
            return all(self.nullable(k) for k in node[1])
        if kind == "alt":
            return any(self.nullable(k) for k in node[1])
        return node[2] == 0 or self.nullable(node[1])  # rep

    def full(self, node) -> str | None:
        kind = node[0]
        if kind == "lit":
            return lit(node[1])
        if kind == "cls":
            return class_re(node[1]) if node[1] else None
        if kind == "ref":
            return self._of_rule(node[1], self._full, self.full)
        if kind == "seq":
            parts = [self.full(k) for k in node[1]]
            return None if None in parts else "".join(parts)
        if kind == "alt":
            parts = [p for p in (self.full(k) for k in node[1]) if p is not None]
            if not parts:
                return None
            return parts[0] if len(parts) == 1 else "(?:" + "|".join(parts) + ")"
        _, item, lo, hi = node
        if hi == 0:
            return ""
        inner = self.full(item)
        if inner is None:
            return "" if lo == 0 else None
        return _repeat(inner, lo, hi)

    def nonempty(self, node) -> str | None:
        """A regex of the non-empty strings of ``node``; ``None`` if there are none."""
        if not self.nullable(node):
            return self.full(node)
        kind = node[0]
        if kind == "lit":
            return None
        if kind == "ref":
            return self._of_rule(node[1], self._nonempty, self.nonempty)
        if kind == "alt":
            parts = [p for p in (self.nonempty(k) for k in node[1]) if p is not None]
            if not parts:
                return None
            return parts[0] if len(parts) == 1 else "(?:" + "|".join(parts) + ")"
        if kind == "seq":
            # every item nullable, so both halves A, B are: a non-empty string
            # of AB is a non-empty one of A then any of B, or a non-empty one of
            # B. Halving keeps the regex O(n log n) and its nesting O(log n);
            # one alternative per item with the rest's full regex after it was
            # quadratic (500 "a"? items: 751K characters, and a compile that
            # ran past its time budget)
            items = node[1]
            if len(items) <= 1:  # (the empty sequence: an empty alternative)
                return self.nonempty(items[0]) if items else None
            mid = len(items) // 2
            first, rest = ("seq", items[:mid]), ("seq", items[mid:])
            parts = []
            head = self.nonempty(first)
            if head is not None:
                parts.append(head + self.full(rest))
            tail = self.nonempty(rest)
            if tail is not None:
                parts.append(tail)
            if not parts:
                return None
            return parts[0] if len(parts) == 1 else "(?:" + "|".join(parts) + ")"
        _, item, lo, hi = node  # rep of a nullable item, or from zero
        inner = self.nonempty(item)
        if inner is None or hi == 0:
            return None
        return _repeat(inner, 1, hi)


def _repeat(inner: str, lo: int, hi: int | None) -> str:
    group = f"(?:{inner})"
    if hi is None:
        return group + ("*" if lo == 0 else "+" if lo == 1 else "{%d,}" % lo)
    if lo == hi:
        return group if lo == 1 else group + "{%d}" % lo
    return group + ("?" if (lo, hi) == (0, 1) else "{%d,%d}" % (lo, hi))


def _regular_rules(rules: dict[str, tuple]) -> set:
    """The rules that denote regular languages: in no cycle of references, and
    referring only to such rules."""
    refs = {name: set(_refs(body)) for name, body in rules.items()}
    # Tarjan's strongly connected components, iteratively (grammars can be deep)
    index, low, on_stack, stack, comps = {}, {}, set(), [], []
    counter = 0
    for root in rules:
        if root in index:
            continue
        work = [(root, iter(sorted(refs[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            v, it = work[-1]
            pushed = False
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(refs[w]))))
                    pushed = True
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            if pushed:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                comps.append(comp)
    regular: set = set()
    for comp in comps:  # Tarjan emits components callees first
        name = comp[0]
        if len(comp) == 1 and name not in refs[name] and refs[name] <= regular \
                and not _has_token_ref(rules[name]):
            regular.add(name)
    return regular


def _has_token_ref(node) -> bool:
    kind = node[0]
    if kind == "tok":
        return True
    if kind in ("seq", "alt"):
        return any(_has_token_ref(k) for k in node[1])
    return kind == "rep" and _has_token_ref(node[1])


def _refs(node):
    kind = node[0]
    if kind == "ref":
        yield node[1]
    elif kind in ("seq", "alt"):
        for k in node[1]:
            yield from _refs(k)
    elif kind == "rep":
        yield from _refs(node[1])


# -- the IR ----------------------------------------------------------------------------------


class _Builder:
    """The IR of the non-regular rules, the regular runs as terminals."""

    def __init__(self, rules: dict[str, tuple], reg: _Regular, text: str, parser: _Parser,
                 deadline, split: frozenset = frozenset()):
        self.rules = rules
        #: rules whose regular runs are built item by item (load_gbnf_grammar)
        self.split = split
        self.reg = reg
        self.text = text
        self.parser = parser
        self.deadline = deadline
        self.terminals: list[Terminal] = []
        self.by_pattern: dict[str, int] = {}
        self.names: list[str] = []
        self.nt_of: dict[str, int] = {}
        self.out: list[tuple[int, list]] = []  # (lhs, [("t"|"n", index)])
        self.expanded = 0
        self.current = ""
        self.budgets: dict[int, int] = {}
        self.tokens: dict = {}
        #: terminal name -> the rule whose run it is
        self.rule_of: dict[str, str] = {}

    def nonterminal(self, name: str) -> int:
        if name not in self.nt_of:
            self.nt_of[name] = len(self.names)
            self.names.append(name)
            self.pending.append(name)
        return self.nt_of[name]

    def aux(self, kind: str) -> int:
        self.names.append(f"{self.current}__{kind}_{len(self.names)}")
        return len(self.names) - 1

    def terminal(self, pattern: str, literal: str | None, max_tokens: int | None = None) -> tuple:
        key = pattern if max_tokens is None else (pattern, max_tokens)
        t = self.by_pattern.get(key)
        if t is None:
            t = self.by_pattern[key] = len(self.terminals)
            if max_tokens is None:
                name = re.sub(r"[^A-Za-z0-9_]", "_", self.current).upper() + f"_{t}"
            else:
                from constrain.cfg.budgets import BUDGETED

                name = BUDGETED + self.current
                self.budgets[t] = max_tokens
            self.terminals.append(Terminal(name, pattern, 0, literal))
            # names alone collide (rules "a" and "A", "a-b" and "a_b")
            self.rule_of[name] = self.current
        return ("t", t)

    def token(self, ref) -> tuple:
        """The terminal of the token reference ``ref`` (one per distinct set)."""
        key = ("token", ref.ids, ref.names, ref.negated)
        t = self.by_pattern.get(key)
        if t is None:
            from constrain.cfg.ir import TOKEN_PATTERN

            t = self.by_pattern[key] = len(self.terminals)
            self.terminals.append(Terminal(f"TOKEN_{t}", TOKEN_PATTERN))
            self.tokens[t] = ref
        return ("t", t)

    def budgeted(self, lhs: int, name: str) -> None:
        """The rules of a ``name[max_tokens=N]``: its body as one terminal."""
        body, n, reg = self.rules[name], self.parser.budgets[name], self.reg
        if reg.nullable(body):
            self.out.append((lhs, []))
            pattern = reg.nonempty(body)
        else:
            pattern = reg.full(body)
        if pattern is not None:
            self.out.append((lhs, [self.terminal(pattern, None, n)]))

    def build(self, start: str) -> GrammarIR:
        self.pending: list[str] = []
        self.nonterminal(start)
        while self.pending:
            name = self.pending.pop()
            self.current = name
            lhs = self.nt_of[name]
            if name in self.parser.budgets:
                self.budgeted(lhs, name)
                continue
            for seq in self.rules[name][1]:
                syms = self.sequence(seq[1])
                if syms is not None:
                    self.out.append((lhs, syms))
            if self.deadline is not None and passed(self.deadline):
                raise GrammarTooComplexError("loading the grammar exceeded its time budget "
                                             "(pass time_budget= to raise it)")
        self._check_productive()
        n_t = len(self.terminals)
        rules = [(lhs, tuple(i if k == "t" else n_t + i for k, i in syms))
                 for lhs, syms in self.out]
        return GrammarIR(self.terminals, self.names, rules, 0, (), self.text,
                         budgets=self.budgets, tokens=self.tokens)

    def _check_productive(self) -> None:
        productive = [False] * len(self.names)
        changed = True
        while changed:
            changed = False
            for lhs, syms in self.out:
                if not productive[lhs] and all(k == "t" or productive[i] for k, i in syms):
                    productive[lhs] = changed = True
        if not productive[0]:
            line, col = position(self.text, self.parser.where[self.names[0]])
            raise GrammarError(f"the start rule {self.names[0]!r} matches no string", line, col)

    def sequence(self, items) -> list | None:
        """The symbols of a sequence; ``None`` if it matches nothing."""
        reg = self.reg
        out: list = []
        run: list = []

        def flush() -> bool:
            if not run:
                return True
            node = ("seq", tuple(run))
            run.clear()
            full = reg.full(node)
            if full is None:
                return False
            if not reg.nullable(node):
                only = node[1][0] if len(node[1]) == 1 else None
                literal = only[1] if only is not None and only[0] == "lit" else None
                out.append(self.terminal(full, literal))
                return True
            ne = reg.nonempty(node)
            if ne is not None:
                opt = self.aux("opt")
                self.out += [(opt, [self.terminal(ne, None)]), (opt, [])]
                out.append(("n", opt))
            return True

        # a rule built item by item: each regular rule it uses is a rule of
        # its own, each class and literal a terminal
        split = self.current in self.split
        for item in items:
            if not split and reg.is_regular(item):
                run.append(item)
                continue
            if not flush():
                return None
            sym = self.item(item)
            if sym is None:
                return None
            out.append(sym)
        return out if flush() else None

    def item(self, node) -> tuple | None:
        """The symbol of a non-regular item, or of a regular one in a rule
        built item by item; ``None`` if it matches nothing."""
        kind = node[0]
        if kind in ("lit", "cls"):
            if self.reg.nullable(node):
                return self._empty()
            full = self.reg.full(node)
            return None if full is None else self.terminal(
                full, node[1] if kind == "lit" else None)
        if kind == "ref":
            return ("n", self.nonterminal(node[1]))
        if kind == "tok":
            return self.token(node[1])
        if kind in ("alt", "seq"):
            seqs = node[1] if kind == "alt" else (node,)
            nt = self.aux("group")
            found = False
            for seq in seqs:
                syms = self.sequence(seq[1])
                if syms is not None:
                    self.out.append((nt, syms))
                    found = True
            return ("n", nt) if found else None
        _, inner, lo, hi = node
        if hi == 0:
            nt = self.aux("empty")
            self.out.append((nt, []))
            return ("n", nt)
        sym = self.item(inner)  # not regular, or the repetition would be
        if sym is None:
            return None if lo > 0 else self._empty()
        self.expanded += lo + (hi - lo if hi is not None else 2)
        if self.expanded > MAX_EXPANDED_SYMBOLS:
            raise GrammarTooComplexError(
                f"counted repetitions in rule {self.current!r} would expand into more than "
                f"{MAX_EXPANDED_SYMBOLS:,} symbols")
        nt = self.aux("rep")
        if hi is None:
            star = self.aux("star")  # star -> star sym | (nothing)
            self.out += [(star, []), (star, [("n", star), sym])]
            self.out.append((nt, [sym] * lo + [("n", star)]))
            return ("n", nt)
        tail = None  # up to hi - lo more: opt_k -> sym opt_{k-1} | (nothing)
        for _ in range(hi - lo):
            opt = self.aux("opt")
            self.out += [(opt, []), (opt, [sym] + ([("n", tail)] if tail is not None else []))]
            tail = opt
        self.out.append((nt, [sym] * lo + ([("n", tail)] if tail is not None else [])))
        return ("n", nt)

    def _empty(self) -> tuple:
        nt = self.aux("empty")
        self.out.append((nt, []))
        return ("n", nt)


def load_gbnf_grammar(source, start: str = "root", *, deadline=None,
                      max_repeat: int = MAX_REPEAT,
                      split_rules: frozenset = frozenset()) -> GrammarIR:
    """Load a GBNF grammar (text, or a path to a ``.gbnf`` file) into a
    :class:`GrammarIR` (see the module docstring for the language).

    ``start``: the rule to start from (GBNF's is ``root``). ``deadline``: a
    :func:`~constrain.automata.deadline.now` value (the thread's CPU clock)
    the loading must finish by. ``max_repeat``:
    the largest repetition count ``{m,n}`` (:class:`constrain.Limits`).
    ``split_rules``: names of rules to build item by item, not as maximal
    regular runs: each regular rule they use becomes a rule of its own, each
    literal and class a terminal, and repetitions rules over those. The
    language is the same; the automata are smaller, since llama.cpp-style
    runs such as ``[a-z]* "a" [a-z]{16}`` need 2^16 states as one automaton
    and a few as rules. :meth:`Compiler.compile_grammar
    <constrain.compiler.Compiler.compile_grammar>` asks for this when a
    run's automaton passes a limit. (A rule with ``max_tokens`` stays one
    terminal.)

    Raises:
        GrammarSyntaxError: the text is not GBNF, with the line and column.
        GrammarError: an undefined rule, a rule defined twice, no ``root`` (or
            ``start``) rule, a start rule that matches nothing.
        GrammarTooComplexError: nesting, expansion or time past a limit.
    """
    return load_gbnf_grammar_located(source, start, deadline=deadline, max_repeat=max_repeat,
                                     split_rules=split_rules)[0]


def load_gbnf_grammar_located(source, start: str = "root", *, deadline=None,
                              max_repeat: int = MAX_REPEAT,
                              split_rules: frozenset = frozenset()):
    """:func:`load_gbnf_grammar`, and where each terminal made of a rule's
    regular run comes from: ``(ir, located)``, ``located`` mapping the
    terminal's name to ``(rule, line, column)`` of the rule's definition (the
    compiler's errors and its splitting of a run too large for one automaton
    name the rule by it: names alone collide, ``a`` and ``A`` both give ``A_1``)."""
    from pathlib import Path

    if isinstance(source, Path) or (isinstance(source, str) and "\n" not in source
                                    and "::=" not in source and source.endswith(".gbnf")):
        path = Path(source)
        if not path.is_file():
            raise GrammarError(f"grammar file {str(path)!r} not found")
        source = path.read_text(encoding="utf-8")
    if not isinstance(source, str):
        raise GrammarError(f"a grammar is GBNF text or a path to a .gbnf file, "
                           f"not {type(source).__name__}")
    if not isinstance(start, str):
        raise GrammarError(f"the start symbol is a rule name, not {type(start).__name__}")
    parser = _Parser(source, max_repeat)
    parser.parse()
    rules = parser.rules
    if start not in rules:
        if start == "root":
            raise GrammarError("the grammar has no 'root' rule (GBNF starts there; pass "
                               "start= for another)", 1, 1)
        raise GrammarError(f"the start rule {start!r} is not defined", 1, 1)
    regular = _regular_rules(rules)
    for name in parser.budgets:
        # one terminal of its own, never copied into the runs around its uses
        if name not in regular:
            raise parser.error(f"rule {name!r} has max_tokens, so it must be regular: not "
                               f"recursive, and using only regular rules",
                               parser.where[name], GrammarError)
        regular.discard(name)
        regular -= _dependents(rules, name, regular)
    reg = _Regular(rules, regular)
    for name in parser.budgets:
        inner = sorted(k for k in _refs(rules[name]) if k in parser.budgets)
        if inner:
            raise parser.error(f"rule {name!r} has max_tokens and uses {inner[0]!r}, which "
                               f"has one too: a budgeted rule is one terminal",
                               parser.where[name], GrammarError)
    _limit_inlining(rules, regular, reg)
    try:
        builder = _Builder(rules, reg, source, parser, deadline, frozenset(split_rules))
        ir = builder.build(start)
        located = {t: (rule, *position(source, parser.where[rule]))
                   for t, rule in builder.rule_of.items() if rule in parser.where}
        return ir, located
    except RecursionError:
        # the passes over the rules recurse per level of nesting too: a deep
        # caller's stack can run out below MAX_DEPTH
        raise GrammarTooComplexError(f"the grammar's groups nest too deeply to compile "
                                     f"(at most {MAX_DEPTH} levels)") from None


def _limit_inlining(rules: dict, regular: set, reg: _Regular) -> None:
    """Keep the regular rules whose copies would make a rule's terminals
    longer than :data:`MAX_INLINE_CHARS` as rules of their own (the largest
    first), and so the rules that refer to them (``regular`` is changed)."""
    for name in _topological(rules, regular) + [n for n in rules if n not in regular]:
        while _inlined_size(rules[name], reg) > MAX_INLINE_CHARS:
            kids = {k for k in _refs(rules[name]) if k in regular}
            if not kids:
                break  # one long literal or class: nothing to share
            big = max(sorted(kids), key=lambda k: len(reg.full(("ref", k, 0)) or ""))
            regular.discard(big)
            regular -= _dependents(rules, big, regular)


def _inlined_size(node, reg: _Regular) -> int:
    """The characters of the terminal regexes written for ``node``."""
    if reg.is_regular(node):
        return len(reg.full(node) or "")
    kind = node[0]
    if kind in ("seq", "alt"):
        return sum(_inlined_size(k, reg) for k in node[1])
    if kind == "rep":
        return _inlined_size(node[1], reg)
    return 0


def _topological(rules: dict, regular: set) -> list:
    """The regular rules, each after the rules it refers to."""
    seen: set = set()
    order: list = []

    def visit(name):
        stack = [(name, iter(sorted(set(_refs(rules[name])))))]
        seen.add(name)
        while stack:
            v, it = stack[-1]
            for w in it:
                if w in regular and w not in seen:
                    seen.add(w)
                    stack.append((w, iter(sorted(set(_refs(rules[w]))))))
                    break
            else:
                stack.pop()
                order.append(v)

    for name in sorted(regular):
        if name not in seen:
            visit(name)
    return order


def _dependents(rules: dict, name: str, regular: set) -> set:
    """The regular rules that refer to ``name``, directly or not."""
    out: set = set()
    frontier = {name}
    while frontier:
        nxt = {r for r in regular if r not in out and set(_refs(rules[r])) & frontier}
        out |= nxt
        frontier = nxt
    return out


__all__ = ["load_gbnf_grammar", "looks_like_gbnf", "MAX_INLINE_CHARS", "MAX_EXPANDED_SYMBOLS",
           "MAX_DEPTH"]
