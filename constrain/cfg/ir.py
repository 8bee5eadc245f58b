"""The compiler's one context-free grammar IR: :class:`GrammarIR` over regular
:class:`Terminal` s. Every front end (Lark, JSON Schema, SQL) produces it; the
Earley recogniser, the lexer tables and the analysis passes consume it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Mapping


@dataclass(frozen=True)
class Terminal:
    """A terminal: its lark name and the Python ``re`` pattern it matches."""

    name: str
    pattern: str
    flags: int = 0
    #: the literal text of a string terminal (``"if"``, ``"select"i``), else None
    literal: str | None = None


@dataclass(frozen=True)
class TokenRef:
    """A token-reference terminal (GBNF ``<[id]>``, ``<|name|>``, ``!<[id]>``;
    Lark ``<[1,3,5-7]>``, ``<[^id]>``): it matches one whole token whose id is
    in the set, never the same text spelled by other tokens.

    ``ids`` are inclusive ranges ``(lo, hi)``, ``names`` token texts (each
    must be exactly one token of the vocabulary); ``negated``: every token
    *but* those (EOS and padding ids excepted). Resolved against a vocabulary
    when a grammar is compiled (:mod:`constrain.cfg.token_refs`); ``line`` and
    ``column`` place it in the grammar text for the errors of that step."""

    ids: tuple[tuple[int, int], ...] = ()
    names: tuple[str, ...] = ()
    negated: bool = False
    line: int | None = None
    column: int | None = None

    def __post_init__(self):
        object.__setattr__(self, "ids", tuple((int(lo), int(hi)) for lo, hi in self.ids))
        object.__setattr__(self, "names", tuple(self.names))

    @property
    def shown(self) -> str:
        """The reference as grammar text writes it (``<[1,5-7]>``, ``!<|x|>``)."""
        parts = [str(lo) if lo == hi else f"{lo}-{hi}" for lo, hi in self.ids]
        if not parts and not self.names:
            return "<[*]>"
        text = ", ".join(([f"<[{','.join(parts)}]>"] if parts else []) + list(self.names))
        return ("!" if self.negated else "") + text


#: the pattern of a token-reference terminal: no byte string matches it (a
#: grammar that loses :attr:`GrammarIR.tokens` loses those terminals, never
#: accepts more)
TOKEN_PATTERN = "(?!)"


@dataclass(frozen=True)
class GrammarIR:
    """A context-free grammar over regular terminals.

    Symbols are ints: terminal ``t`` is ``t`` (``0 <= t < len(terminals)``),
    nonterminal ``n`` is ``len(terminals) + n``. ``rules[i] = (lhs, rhs)`` with
    ``lhs`` a nonterminal index (not offset) and ``rhs`` a tuple of symbols.
    ``ignore`` lists the terminals that may appear between any two terminals.

    Frozen: the sequences are stored as tuples and ``exclusions`` as a read-only
    mapping, so one IR can be shared by every constraint compiled from it; a front
    end that needs a variant makes one with :func:`dataclasses.replace`.
    """

    terminals: tuple[Terminal, ...]
    nonterminals: tuple[str, ...]
    rules: tuple[tuple[int, tuple[int, ...]], ...]
    start: int
    ignore: tuple[int, ...] = ()
    source: str = ""
    #: terminals defined as a regular language less some prefixes: terminal name
    #: → ``(pattern, prefixes)`` (byte strings). Their own pattern is a stand-in
    #: matching nothing, so a grammar that loses this map loses those terminals
    #: (never accepts more). JSON Schema's "any key but the declared ones" uses it.
    exclusions: Mapping[str, tuple] = field(default_factory=dict)
    #: whether every nonterminal is known to derive some string of terminals
    #: (the JSON Schema translator prunes its rules so); the recognizer then
    #: checks productivity only when the vocabulary cannot spell some terminal
    productive: bool = False
    #: token budgets: terminal index → the most tokens that may carry bytes of
    #: one match of it (a rule ``name[max_tokens=N]`` of Lark or GBNF becomes
    #: such a terminal; :class:`~constrain.cfg.grammar.GrammarConstraint`
    #: enforces it). Passes that read only the IR's language (emptiness,
    #: infilling) do not see it.
    budgets: Mapping[int, int] = field(default_factory=dict)
    #: token references: terminal index → its :class:`TokenRef` (the
    #: terminal's pattern is :data:`TOKEN_PATTERN`). Passes that read only the
    #: IR's language of bytes (emptiness, infilling) refuse them.
    tokens: Mapping[int, TokenRef] = field(default_factory=dict)

    def __post_init__(self):
        # tuples in, whatever the caller built the IR from
        put = object.__setattr__
        put(self, "terminals", tuple(self.terminals))
        put(self, "nonterminals", tuple(self.nonterminals))
        rules = self.rules
        if type(rules) is not tuple or any(type(rhs) is not tuple for _, rhs in rules):
            put(self, "rules", tuple((lhs, tuple(rhs)) for lhs, rhs in rules))
        put(self, "ignore", tuple(self.ignore))
        put(self, "exclusions", MappingProxyType(dict(self.exclusions)))
        put(self, "budgets", MappingProxyType(dict(self.budgets)))
        put(self, "tokens", MappingProxyType(dict(self.tokens)))

    def __reduce__(self):
        # a mappingproxy does not pickle: the exclusions travel as a dict
        return (GrammarIR, (self.terminals, self.nonterminals, self.rules, self.start,
                            self.ignore, self.source, dict(self.exclusions), self.productive,
                            dict(self.budgets), dict(self.tokens)))

    @property
    def n_terminals(self) -> int:
        """Number of terminals."""
        return len(self.terminals)


def grammar_fingerprint(ir: GrammarIR) -> str:
    """A stable digest of a grammar's terminals and rules (for caches)."""
    import hashlib

    h = hashlib.sha256()
    for t in ir.terminals:
        h.update(f"{t.name}\0{t.pattern}\0{t.flags}\n".encode("utf-8", "surrogatepass"))
    for lhs, rhs in ir.rules:
        h.update(f"{lhs}:{','.join(map(str, rhs))}\n".encode())
    h.update(f"start={ir.start} ignore={ir.ignore}".encode())
    if ir.budgets:  # absent from unbudgeted grammars: their digests stay as they were
        h.update(f" budgets={sorted(ir.budgets.items())}".encode())
    if ir.exclusions:  # an exclusion terminal's own pattern is only a stand-in name
        h.update(f" exclusions={sorted((n, p, tuple(x)) for n, (p, x) in ir.exclusions.items())}"
                 .encode("utf-8", "surrogatepass"))
    if ir.tokens:
        h.update(f" tokens={sorted((t, r.ids, r.names, r.negated) for t, r in ir.tokens.items())}"
                 .encode("utf-8", "surrogatepass"))
    return h.hexdigest()


__all__ = ["GrammarIR", "Terminal", "TokenRef", "TOKEN_PATTERN", "grammar_fingerprint"]
