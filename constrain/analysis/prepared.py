"""The grammar as the emptiness check reads it.

Any of the compiler's grammar forms — Lark text (or a ``.lark`` path), a
:class:`~constrain.cfg.ir.GrammarIR`, a compiled
:class:`~constrain.GrammarConstraint` — becomes its IR through the compiler's own
front end (:func:`constrain.frontends.lark.load_lark_grammar`); each terminal's
byte DFA is the lexer's (:func:`constrain.cfg.lexer.terminal_dfa`), so a terminal
means here exactly what it means to :func:`constrain.compile_grammar` (flags,
string literals, JSON Schema key exclusions). The rules are then rewritten so that
``%ignore`` terminals may sit at both ends and between any two terminals.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np

from constrain.automata.char_dfa import DEFAULT_MAX_STATES as TERMINAL_MAX_STATES
from constrain.cache import BoundedCache, nbytes, registry
from constrain.cfg.grammar import GrammarConstraint
from constrain.cfg.ir import GrammarIR, grammar_fingerprint
from constrain.cfg.lexer import terminal_dfa
from constrain.frontends.lark import load_lark_grammar, read_grammar_source


class PreparedGrammar:
    """A grammar ready for the Bar-Hillel fixpoint.

    Symbols are ints as in :class:`GrammarIR` (terminals first), extended past the
    IR's nonterminals when the grammar ignores terminals: ``IGN → ε | IGN x`` for
    every ignored ``x``, each terminal ``t`` of a rule becomes ``⟨t⟩ → t IGN`` and
    the top symbol is ``TOP → IGN S``. Without ``%ignore`` the rules are the IR's
    and the top symbol is its start.

    Attributes:
        rules: ``(lhs, rhs)`` pairs over symbols, lhs already offset.
        by_lhs: the right-hand sides of each left-hand side, in rule order.
        top: the symbol whose spans decide completability.
        nonterminals: every nonterminal symbol the rules mention.
        n_symbols: one past the largest symbol.
        dfas: terminal → ``(transitions, accepting)`` of its byte DFA as nested
            lists (the product walk indexes them per byte), or ``None`` when it
            matches no string; only the terminals the rules or ``%ignore`` use.
        nbytes: roughly the memory it holds.
    """

    def __init__(self, ir: GrammarIR):
        #: the grammar's token budgets: no analysis here sees them (they are
        #: no property of text), so the drivers that enforce with one refuse
        #: a budgeted grammar (:func:`refuse_budgets`)
        self.budgets = dict(ir.budgets)
        if ir.tokens:
            # a token reference matches a token, not text: the analyses here,
            # which decide text, would read it as matching nothing
            from constrain.errors import GrammarError

            ref = ir.tokens[min(ir.tokens)]
            raise GrammarError(f"the analysis of a grammar (completability, infilling) does "
                               f"not support token references such as {ref.shown}: they "
                               f"match a token, not text", ref.line, ref.column)
        n_t = ir.n_terminals
        rules = [(n_t + lhs, rhs) for lhs, rhs in ir.rules]
        top = n_t + ir.start
        n_symbols = n_t + len(ir.nonterminals)
        in_rules = sorted({s for _, rhs in ir.rules for s in rhs if s < n_t})
        if ir.ignore:
            ign = n_symbols
            wrap = {t: ign + 1 + k for k, t in enumerate(in_rules)}
            rules = ([(ign, ())] + [(ign, (ign, x)) for x in ir.ignore]
                     + [(w, (t, ign)) for t, w in wrap.items()]
                     + [(lhs, tuple(wrap.get(s, s) for s in rhs)) for lhs, rhs in rules])
            top = ign + 1 + len(wrap)
            rules.append((top, (ign, n_t + ir.start)))
            n_symbols = top + 1
        self.rules = tuple(rules)
        self.top = top
        self.n_symbols = n_symbols
        self.nonterminals = tuple(sorted({lhs for lhs, _ in self.rules}
                                         | {s for _, rhs in self.rules for s in rhs if s >= n_t}))
        by_lhs: dict[int, list] = {}
        for lhs, rhs in self.rules:
            by_lhs.setdefault(lhs, []).append(rhs)
        self.by_lhs = by_lhs
        # every byte: a partial output's fixed text may hold bytes no vocabulary spells
        alphabet = np.ones(256, dtype=np.bool_)
        self.dfas = {}
        for t in sorted(set(in_rules) | set(ir.ignore)):
            term = ir.terminals[t]
            dfa = terminal_dfa(term, alphabet, max_states=TERMINAL_MAX_STATES, deadline=None,
                               exclusion=ir.exclusions.get(term.name))
            self.dfas[t] = None if dfa is None else (dfa.transitions.tolist(),
                                                     dfa.accepting.tolist())
        # what the cache charges: the DFA rows as lists of 256 pointers, and the rules
        self.nbytes = (sum(2112 * len(d[0]) for d in self.dfas.values() if d is not None)
                       + sum(120 + 8 * len(rhs) for _, rhs in self.rules))


# keyed by content (the Lark text, or the IR's fingerprint), never
# by id(): an id is reused once its object is collected
_PREPARED = registry.register(BoundedCache(
    "analysis grammars", 64 << 20, max_entries=64,
    sizeof=lambda key, value: nbytes(key) + value.nbytes))


def prepare(grammar) -> PreparedGrammar:
    """The :class:`PreparedGrammar` of ``grammar`` (Lark text or a path to a
    ``.lark`` file, a :class:`GrammarIR`, or a :class:`constrain.GrammarConstraint`),
    from a bounded cache keyed by the grammar's content (registered with
    :data:`constrain.cache.registry`, so ``constrain.clear_caches()`` empties it).

    Raises:
        constrain.GrammarError: the grammar is rejected (bad Lark, a terminal
            that matches the empty string or uses a construct no automaton
            matches).
        TypeError: ``grammar`` is none of those (a regular constraint goes to
            :func:`constrain.analysis.can_complete_regex`).
    """
    if isinstance(grammar, (str, Path)):
        text, directory = read_grammar_source(grammar)
        key = ("lark", text, directory)
        return _PREPARED.get_or_build(key, lambda: PreparedGrammar(load_lark_grammar(grammar)))
    if isinstance(grammar, GrammarConstraint):
        grammar = grammar.ir
    if not isinstance(grammar, GrammarIR):
        raise TypeError(f"a grammar is Lark text, a GrammarIR or a GrammarConstraint, not "
                        f"{type(grammar).__name__} (for a DFAConstraint: can_complete_regex)")
    key = ("ir", grammar_fingerprint(grammar))
    return _PREPARED.get_or_build(key, lambda: PreparedGrammar(grammar))


def refuse_budgets(grammar, what: str) -> None:
    """A :class:`constrain.GrammarError` when ``grammar`` (as :func:`prepare`
    takes it) has token budgets: ``what`` (infilling, diffusion) decides the
    grammar's text, not its tokens, and would let a budget through."""
    from constrain.errors import GrammarError

    if prepare(grammar).budgets:
        raise GrammarError(f"{what} does not enforce token budgets (rule[max_tokens=N]): it "
                           f"decides the grammar's text, not its tokens; drop the budgets, or "
                           f"decode left to right")


def load_grammar(source, start: str | None = None) -> GrammarIR:
    """Deprecated: :func:`constrain.frontends.lark.load_lark_grammar`, which this
    now calls. It returned an ``InfillGrammar`` (rules and terminals named by
    strings); that type is gone, and every analysis function takes the
    compiler's :class:`GrammarIR` (or Lark text, or a compiled grammar) instead."""
    warnings.warn("constrain.analysis.load_grammar is deprecated and returns a GrammarIR "
                  "(InfillGrammar is gone): call constrain.frontends.lark.load_lark_grammar",
                  DeprecationWarning, stacklevel=2)
    return load_lark_grammar(source, "start" if start is None else start)


__all__ = ["PreparedGrammar", "prepare", "load_grammar"]
