"""``TokenBudgets``: how a grammar enforces :attr:`GrammarIR.budgets`, the most
tokens that may carry bytes of one match of a terminal (``name[max_tokens=N]``
rules of Lark and GBNF).

The count
---------
A configuration ``(context, lexer state, k)`` counts in ``k`` the tokens that
carried bytes of the terminals in progress (all of them began at the same
boundary, so they share it); ``k`` is 0 when none of them has a budget, so
that unbudgeted configurations stay shared. A token used ``k + 1`` of them for
those terminals, and 1 for a terminal that began inside it.

What a budget allows
--------------------
A token may end inside a budgeted terminal only where its budget can still
finish the match: ``finish[q]``, the fewest tokens that take the terminal's
automaton from ``q`` to acceptance (counted on the vocabulary once per
grammar, :func:`~constrain.cfg.budget_kernels.finish_tokens`), is at most the
tokens left. So a match never runs out of budget half-way: once the budget is
low only the tokens that head for its end remain, and the output goes on
with what follows it. A terminal that ends inside a token after taking bytes
of it must have had that token to spend. After each token the pairs that can
no longer finish are dropped from the lexer state.

Where masks come from
---------------------
Far from the budget -- ``k + 1 + max(finish)`` within it -- every path a token
can take passes, so the configuration's mask is the ordinary cached one of
``(context, lexer state)``. Near it, a walk of the token trie with the count
at hand (:func:`~constrain.cfg.budget_kernels.budget_walk`) decides, once per
``(context, lexer state, k)``. A *tight* budget, below ``1 + max(finish)``,
constrains even the first token of a match, which may begin inside any token
of the grammar: such a grammar walks every configuration so.
"""

from __future__ import annotations

import re

import numpy as np

from constrain.cfg import budget_kernels as bk
from constrain.errors import GrammarError, GrammarTooComplexError

#: the name prefix of the terminal a front end makes of a ``rule[max_tokens=N]``
#: (the rest is the rule's name: errors point at its definition)
BUDGETED = "BUDGETED__"

#: the most automaton states x trie nodes counting ``finish`` may walk
MAX_FINISH_WORK = 2_000_000_000


class TokenBudgets:
    """The budget tables of one grammar (see the module docstring): ``budget``
    per terminal (-1: none), ``finish`` per row of the stacked terminal
    automata, ``most`` per terminal (the largest finite ``finish``), and
    whether some budget is ``tight``."""

    def __init__(self, ir, terms, lexer, trie):
        self.lexer = lexer
        n_t = ir.n_terminals
        self.budget = np.full(max(n_t, 1), -1, dtype=np.int32)
        self.finish = np.zeros(terms.vmap.shape[0], dtype=np.int32)
        self.most = np.zeros(max(n_t, 1), dtype=np.int64)
        self.tight = False
        tables = trie.kernel_arrays()[0]
        tbyte, tdepth, tskip, tok_start, tok_end, _, max_depth = tables
        for t, n in ir.budgets.items():
            off = int(terms.offsets[t])
            size = int(terms.offsets[t + 1]) - off
            name = ir.terminals[t].name
            if size * int(tskip[0]) > MAX_FINISH_WORK:
                _, line, column = budget_rule(ir.source, name)
                e = GrammarTooComplexError(
                    f"{_shown(ir.source, name)} has too many automaton states ({size}) for a token budget"
                    + (f" (line {line}, column {column})" if line else ""))
                e.line, e.column = line, column
                raise e
            finish = bk.finish_tokens(terms.rows_of(t), terms.accepting[off:off + size], 0, size,
                                      tbyte, tdepth, tskip, tok_start, tok_end, max_depth)
            self.finish[off:off + size] = finish
            live = finish[1:][finish[1:] < bk.UNREACHABLE]
            first = int(finish[1]) if size > 1 else bk.UNREACHABLE
            if first > n:
                raise GrammarError(
                    f"max_tokens={n} for {_shown(ir.source, name)}: its strings take at least "
                    + (f"{first} tokens of this vocabulary" if first < bk.UNREACHABLE
                       else "tokens this vocabulary does not have"),
                    *budget_rule(ir.source, name)[1:])
            self.budget[t] = n
            # a state no tokens finish (a byte only longer tokens spell) is
            # never passed: every mask of the terminal then checks
            self.most[t] = int(live.max()) if live.size == size - 1 else bk.UNREACHABLE
            if n < 1 + self.most[t]:
                self.tight = True
        #: the largest budget (counts in states are at most it)
        self.largest = int(self.budget.max())
        self._counted: dict[int, bool] = {}
        self._kept: dict[tuple, int] = {}

    def counted(self, s: int) -> bool:
        """Whether lexer state ``s`` has a terminal with a budget in progress."""
        hit = self._counted.get(s)
        if hit is None:
            lex = self.lexer
            terms = lex.pairs[lex.poff[s]:lex.poff[s + 1]:2]
            hit = self._counted[s] = bool((self.budget[terms] >= 0).any())
        return hit

    def plain(self, s: int, k: int) -> bool:
        """Whether the ordinary mask of ``s`` is exact after ``k`` tokens of its
        terminals (far from every budget of them)."""
        if self.tight:
            return False
        lex = self.lexer
        pairs = lex.pairs[lex.poff[s]:lex.poff[s + 1]:2]
        for t in pairs.tolist():
            n = int(self.budget[t])
            if n >= 0 and k + 1 + int(self.most[t]) > n:
                return False
        return True

    def over(self, t: int, used: int) -> bool:
        """Whether ``used`` tokens are past terminal ``t``'s budget."""
        n = int(self.budget[t])
        return 0 <= n < used

    def keep(self, s: int, used: int) -> int:
        """Lexer state ``s`` less the budgeted pairs that cannot finish after
        ``used`` tokens (0: none is left)."""
        key = (s, used)
        hit = self._kept.get(key)
        if hit is not None:
            return hit
        lex = self.lexer
        flat = lex.pairs[lex.poff[s]:lex.poff[s + 1]]
        terms, local = flat[0::2], flat[1::2]
        n = self.budget[terms]
        fin = self.finish[lex.terms.offsets[terms] + local]
        ok = (n < 0) | (fin <= n - used)
        if ok.all():
            hit = s
        elif not ok.any():
            hit = 0
        else:
            kept = np.empty(2 * int(ok.sum()), dtype=np.int32)
            kept[0::2] = terms[ok]
            kept[1::2] = local[ok]
            hit = lex.state_of_pairs(kept)
        self._kept[key] = hit
        return hit

    def mask(self, grammar, c: int, s: int, k: int) -> np.ndarray:
        """The tokens allowed from configuration ``(c, s, k)`` (uint32 words, EOS
        not included), by a walk of the token trie."""
        lex = self.lexer
        trie = grammar.trie
        row = np.zeros(grammar.words, dtype=np.uint32)
        for t in lex.accepting_terminals(s):  # the first boundaries, up front
            c2 = grammar._next(c, t)
            if c2 >= 0:
                grammar._start(c2)
        arrays = trie.kernel_arrays()[0]
        while True:
            status, a, b = bk.budget_walk(
                lex.trans, lex.acc, lex.has_acc, grammar._ctx_next, grammar._ctx_start, grammar._ignore_bits,
                lex.pairs, lex.poff, self.budget, self.finish, lex.terms.offsets, s, c, k,
                *arrays, grammar.max_width, row)
            if status == bk.NEED_NONE:
                break
            if status == bk.NEED_NEXT:
                c2 = grammar._next(int(a), int(b))
                if c2 >= 0:
                    grammar._start(c2)
            elif status == bk.NEED_START:
                grammar._start(int(a))
            else:
                raise GrammarTooComplexError(
                    f"more than {grammar.max_width} ways to split one token between terminals "
                    f"(the grammar is very ambiguous here; pass max_width= to raise the limit)")
        if trie.has_duplicates:
            trie.add_duplicates(row)
        return row


#: llguidance's lexeme options that Trellis does not have (they change what a
#: rule matches, or how it is sampled, not what it may be)
_UNSUPPORTED_ATTRIBUTES = ("lazy", "stop", "suffix", "temperature", "capture")


#: the largest ``max_tokens`` of a rule (the budget tables are int32)
MAX_BUDGET = 2 ** 31 - 1


def max_tokens_attribute(attributes: str, text: str, at: int) -> int:
    """The ``max_tokens`` of a rule's attribute list ``attributes`` (the text
    between ``[`` and ``]``, at offset ``at`` of the grammar ``text``), which
    must have it: a :class:`GrammarError` naming the place otherwise, or for
    an attribute Trellis does not have."""
    n = None
    offset = 0
    for item in attributes.split(","):
        where = at + offset + len(item) - len(item.lstrip())
        offset += len(item) + 1
        key, _, value = (x.strip() for x in item.partition("="))
        if key == "max_tokens":
            if n is not None:
                raise GrammarError("max_tokens is given twice", *_position(text, where))
            if not re.fullmatch(r"[0-9]+", value) or int(value) < 1:
                raise GrammarError(f"max_tokens must be a whole number >= 1, not {value!r}",
                                   *_position(text, where))
            n = int(value)
            if n > MAX_BUDGET:  # the tables count in int32
                raise GrammarError(f"max_tokens must be at most {MAX_BUDGET}, not {value}",
                                   *_position(text, where))
        elif key in _UNSUPPORTED_ATTRIBUTES:
            raise GrammarError(f"the rule attribute {key!r} is not supported (Trellis "
                               f"enforces max_tokens; llguidance's {', '.join(_UNSUPPORTED_ATTRIBUTES)} "
                               f"are not constraints it has)", *_position(text, where))
        else:
            raise GrammarError(f"unknown rule attribute {key or item.strip()!r} (the one "
                               f"supported is max_tokens=N)", *_position(text, where))
    if n is None:
        raise GrammarError("a rule's attributes need max_tokens=N", *_position(text, at))
    return n


def _position(text: str, i: int) -> tuple[int, int]:
    return text.count("\n", 0, i) + 1, i - (text.rfind("\n", 0, i) + 1) + 1


def _shown(source: str, name: str) -> str:
    if not name.startswith(BUDGETED):
        return f"terminal {name}"
    return f"rule {budget_rule(source, name)[0]!r}"


def budget_rule(source: str, name: str) -> tuple[str, int | None, int | None]:
    """The rule that made the budgeted terminal ``name`` (``BUDGETED__`` and
    the rule's name, upper-cased where Lark wants terminals so) in the grammar
    text ``source``, and the 1-based ``(line, column)`` of its ``rule[...]``:
    ``(name, None, None)`` when it is not found."""
    rule = name[len(BUDGETED):]
    if not source or not name.startswith(BUDGETED):
        return rule, None, None
    # as written first (GBNF's names are case-sensitive: x and X are two
    # rules), then in any case (Lark's upper-cased where it wants a terminal)
    head = r"^[ \t]*[?!]?(" + re.escape(rule) + r")[ \t]*\["
    m = re.search(head, source, re.M) or re.search(head, source, re.M | re.I)
    if m is None:
        return rule, None, None
    i = m.start(1)
    return m.group(1), source.count("\n", 0, i) + 1, i - (source.rfind("\n", 0, i) + 1) + 1


__all__ = ["TokenBudgets", "MAX_FINISH_WORK", "MAX_BUDGET", "BUDGETED", "budget_rule",
           "max_tokens_attribute"]
