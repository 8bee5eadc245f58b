"""``IRBuilder``: a :class:`~constrain.cfg.ir.GrammarIR` assembled from pieces,
other grammars' IRs among them, for front ends that combine languages
(structural tags: free text, JSON Schemas, grammars and regexes in one output).

An embedded IR keeps its language exactly: its terminals and nonterminals are
renamed apart, its exclusions follow its terminals, and its ``%ignore``
terminals -- which a grammar's IR allows between any two of its terminals and
around them -- become explicit: every rule ``A -> X1 ... Xn`` of the embedded
grammar reads ``A -> X1 I X2 I ... Xn`` and its start ``I S I``, where ``I``
derives any run of ignored terminals. So what a grammar ignores is allowed only
inside (and at the edges of) its own part of the output, never elsewhere.
"""

from __future__ import annotations

import re

from constrain.cfg.ir import TOKEN_PATTERN, GrammarIR, Terminal

__all__ = ["IRBuilder", "Sym"]

#: a symbol while building: ``("t", i)`` terminal ``i``, ``("n", j)`` nonterminal ``j``
Sym = tuple


class IRBuilder:
    """Collects terminals, nonterminals and rules; :meth:`build` freezes them
    into a :class:`GrammarIR`. Literal and pattern terminals are shared by
    pattern (two uses of ``"</tool_call>"`` are one terminal)."""

    def __init__(self):
        self._terminals: list[Terminal] = []
        self._shared: dict[tuple, int] = {}
        self._nonterminals: list[str] = []
        self._rules: list[tuple[int, tuple]] = []
        self._exclusions: dict[str, tuple] = {}
        self._budgets: dict[int, int] = {}
        self._tokens: dict = {}

    # -- symbols ------------------------------------------------------------------

    def terminal(self, pattern: str, *, literal: str | None = None, flags: int = 0,
                 max_tokens: int | None = None) -> Sym:
        """The terminal of the Python ``re`` ``pattern`` (which must not match
        the empty string); with ``max_tokens``, one match of it may be carried
        by at most that many tokens (:attr:`GrammarIR.budgets`)."""
        key = (pattern, flags, literal, max_tokens)
        i = self._shared.get(key)
        if i is None:
            i = self._shared[key] = len(self._terminals)
            self._terminals.append(Terminal(f"T{i}", pattern, flags, literal))
            if max_tokens is not None:
                self._budgets[i] = max_tokens
        return ("t", i)

    def token(self, ref) -> Sym:
        """The terminal of the token reference ``ref`` (a
        :class:`~constrain.cfg.ir.TokenRef`; one per distinct set)."""
        key = ("token", ref.ids, ref.names, ref.negated)
        i = self._shared.get(key)
        if i is None:
            i = self._shared[key] = len(self._terminals)
            self._terminals.append(Terminal(f"T{i}", TOKEN_PATTERN))
            self._tokens[i] = ref
        return ("t", i)

    def literal(self, text: str) -> list[Sym]:
        """The symbols that spell ``text`` exactly: one literal terminal, or none
        for the empty string."""
        return [self.terminal(re.escape(text), literal=text)] if text else []

    def nonterminal(self, hint: str) -> Sym:
        """A new nonterminal (``hint`` names it in messages)."""
        j = len(self._nonterminals)
        self._nonterminals.append(f"{hint}_{j}")
        return ("n", j)

    def rule(self, lhs: Sym, rhs) -> None:
        """Add the rule ``lhs -> rhs`` (a sequence of symbols; empty: ε)."""
        if lhs[0] != "n":
            raise ValueError("a rule's left side is a nonterminal")
        self._rules.append((lhs[1], tuple(rhs)))

    def choice(self, hint: str, alternatives) -> Sym:
        """A new nonterminal deriving each of ``alternatives`` (symbol sequences)."""
        n = self.nonterminal(hint)
        for alt in alternatives:
            self.rule(n, alt)
        return n

    def star(self, hint: str, body) -> Sym:
        """A new nonterminal deriving zero or more ``body`` sequences in a row."""
        n = self.nonterminal(hint)
        self.rule(n, ())
        self.rule(n, (n, *body))
        return n

    # -- other grammars -----------------------------------------------------------

    def embed(self, ir: GrammarIR, hint: str, names: dict | None = None) -> Sym:
        """The start of a copy of ``ir`` (with its ignored terminals made
        explicit, see the module docstring); ``names``, when given, receives
        each terminal's name in the copy by its name in ``ir``."""
        base = len(self._terminals)
        nt_base = len(self._nonterminals)
        for k, t in enumerate(ir.terminals):
            name = f"{hint}{nt_base}__{t.name}"
            if names is not None:
                names[t.name] = name
            self._terminals.append(Terminal(name, t.pattern, t.flags, t.literal))
            if t.name in ir.exclusions:
                self._exclusions[name] = ir.exclusions[t.name]
            if k in ir.budgets:
                self._budgets[base + k] = ir.budgets[k]
            if k in ir.tokens:
                self._tokens[base + k] = ir.tokens[k]
        n_t = len(ir.terminals)
        for name in ir.nonterminals:
            self._nonterminals.append(f"{hint}{nt_base}__{name}")

        def sym(s: int) -> Sym:
            return ("t", base + s) if s < n_t else ("n", nt_base + s - n_t)

        ign = None
        if ir.ignore:
            ign = self.nonterminal(f"{hint}_ignored")
            self.rule(ign, ())
            for t in ir.ignore:
                self.rule(ign, (ign, ("t", base + t)))
        for lhs, rhs in ir.rules:
            out = []
            for i, s in enumerate(rhs):
                if i and ign is not None:
                    out.append(ign)
                out.append(sym(s))
            self.rule(("n", nt_base + lhs), out)
        start = ("n", nt_base + ir.start)
        if ign is None:
            return start
        top = self.nonterminal(f"{hint}_start")
        self.rule(top, (ign, start, ign))
        return top

    # -- the result ---------------------------------------------------------------

    def build(self, start: Sym, source: str = "") -> GrammarIR:
        """The frozen IR with start symbol ``start``."""
        n_t = len(self._terminals)

        def index(s: Sym) -> int:
            return s[1] if s[0] == "t" else n_t + s[1]

        if start[0] != "n":
            top = self.nonterminal("start")
            self.rule(top, (start,))
            start = top
        rules = tuple((lhs, tuple(index(s) for s in rhs)) for lhs, rhs in self._rules)
        return GrammarIR(terminals=tuple(self._terminals), nonterminals=tuple(self._nonterminals),
                         rules=rules, start=start[1], source=source,
                         exclusions=dict(self._exclusions), budgets=dict(self._budgets),
                         tokens=dict(self._tokens))
