"""An Earley recognizer over terminals whose chart columns are interned.

Any context-free grammar works: ambiguous, left- or right-recursive, with empty
rules (Aycock and Horspool's nullable completion). A parser *context* is a small
int naming one chart column; a column's items refer to earlier columns by their
context ids, so columns are shared between every hypothesis that reached them and
two histories that leave the same items behind get the same id. Scanning a
terminal from a context is computed once and cached (``next``), which makes a
loop such as ``value ("," value)*`` cycle through a handful of contexts however
long it runs: only nesting creates new ones.

A column is stored as its *explicit* items -- those that scanned or completed
into it, which all have an earlier origin -- and not its predicted ones: these
follow from the nonterminals the explicit items wait for, and their closure per
nonterminal is computed once per grammar. Building a column then touches only
the handful of items nesting put there, not the dozens a JSON value position
predicts (new columns were ~16 µs each on MaskBench schema grammars with the
predictions spelled out, and the first mask of a parser state makes several).

An item is one int: ``(origin + 1) * n_rd + rd``, where ``rd`` numbers the dotted
rules so that advancing the dot is ``+ 1``, and origin 0 stands for "predicted in
this very column".

Reference: J. Earley, "An efficient context-free parsing algorithm", CACM 1970;
J. Aycock and R. N. Horspool, "Practical Earley parsing", Computer Journal 2002.
"""

from __future__ import annotations

from .errors import GrammarError, GrammarTooComplexError
from .lark_loader import GrammarIR


class EarleyRecognizer:
    """Earley recognition over the terminal ids of a :class:`GrammarIR`.

    Contexts are ints from 0 (the start); ``next(c, t)`` is the context after
    terminal ``t`` or -1, ``expected(c)`` the terminals allowed next,
    ``accepts(c)`` whether the terminals so far form a sentence.
    """

    def __init__(self, ir: GrammarIR, usable=None, *, max_contexts: int = 2_000_000):
        self.ir = ir
        n_t = ir.n_terminals
        self.n_t = n_t
        n_nt = len(ir.nonterminals)
        rules = list(ir.rules)
        # augmented start rule S' -> start
        self.aug = len(rules)
        rules.append((n_nt, (n_t + ir.start,)))
        # per terminal, whether the vocabulary can spell it
        spelled = [True] * n_t if usable is None else list(map(bool, usable))
        by_lhs: list[list[int]] = [[] for _ in range(n_nt + 1)]
        if ir.productive and all(spelled):
            for r, (lhs, _) in enumerate(rules):
                by_lhs[lhs].append(r)
        else:
            productive = self._fixpoint(rules, n_t, n_nt + 1, spelled.__getitem__)
            if not productive[n_nt]:
                raise GrammarError(f"the start symbol {ir.nonterminals[ir.start]!r} derives no "
                                   f"string the vocabulary can spell")
            ok = spelled + productive  # per symbol: terminals, then nonterminals
            for r, (lhs, rhs) in enumerate(rules):
                if all(ok[s] for s in rhs):
                    by_lhs[lhs].append(r)
        self.by_lhs = by_lhs
        self.nullable = self._nullable(rules, by_lhs, n_t, n_nt + 1)
        self.max_contexts = max_contexts
        # dotted rules: rd = base[r] + d
        base: list[int] = []
        nxt: list[int] = []
        for lhs, rhs in rules:
            base.append(len(nxt))
            nxt += rhs
            nxt.append(-1 - n_t - lhs)
        self._base = base
        self._n_rd = len(nxt)
        #: per dotted rule, the symbol after the dot; ``-1 - lhs`` (the rule's
        #: left-hand symbol) when the dot is at the end
        self._rd_next = nxt
        self._aug_done = base[self.aug] + 1
        #: per nonterminal: {symbol: predicted dotted rules waiting on it}, and the
        #: terminals among those symbols (filled on first use)
        self._pwait: dict[int, dict] = {}
        self._pexp: dict[int, frozenset] = {}
        # context tables
        self._ewait: list[dict] = []   # symbol -> explicit items waiting on it
        self._roots: list[tuple] = []  # the nonterminals predicted in the column
        self._adv: list[dict] = []     # symbol -> items after it is read (cache)
        self._expected: list[frozenset] = []
        self._accepts: list[bool] = []
        self._intern: dict = {}
        self._next: dict = {}
        start = n_t + n_nt
        self._add_context((), (start,), self._aug_done in self._predict(start))

    # -- grammar analysis ---------------------------------------------------------

    @staticmethod
    def _fixpoint(rules, n_t, n_nt, base_ok) -> list[bool]:
        """The nonterminals with a rule whose every symbol is ok, where a terminal
        is ok when ``base_ok(t)`` and a nonterminal when it is in the result: a
        worklist over per-rule counts of symbols not yet known ok (linear; the
        round-robin loop it replaces took ~1 ms on a large JSON Schema grammar)."""
        done = [False] * n_nt
        missing = [0] * len(rules)
        users: list[list[int]] = [[] for _ in range(n_nt)]
        todo = []
        for r, (lhs, rhs) in enumerate(rules):
            if not all(x >= n_t or base_ok(x) for x in rhs):
                continue  # a terminal that is never ok: the rule never counts
            k = 0
            for x in rhs:
                if x >= n_t:
                    users[x - n_t].append(r)
                    k += 1
            missing[r] = k
            if k == 0 and not done[lhs]:
                done[lhs] = True
                todo.append(lhs)
        while todo:
            a = todo.pop()
            for r in users[a]:
                missing[r] -= 1
                if missing[r] == 0:
                    lhs = rules[r][0]
                    if not done[lhs]:
                        done[lhs] = True
                        todo.append(lhs)
        return done

    @staticmethod
    def _nullable(rules, by_lhs, n_t, n_nt):
        kept = [rules[r] for rs in by_lhs for r in rs]
        return EarleyRecognizer._fixpoint(kept, n_t, n_nt, lambda t: False)

    def _predict(self, sym: int) -> list[int]:
        """The dotted rules predicted from nonterminal ``sym`` (all of origin "this
        column"), advanced over nullable symbols."""
        n_t = self.n_t
        base, nxt, nullable = self._base, self._rd_next, self.nullable
        seen: set = set()
        out = []
        todo = [sym]
        done_nt = set()
        while todo:
            x = todo.pop()
            if x in done_nt:
                continue
            done_nt.add(x)
            for r in self.by_lhs[x - n_t]:
                rd = base[r]
                while rd not in seen:
                    seen.add(rd)
                    out.append(rd)
                    y = nxt[rd]
                    if y < n_t:
                        break  # a terminal, or the rule is complete
                    todo.append(y)
                    if not nullable[y - n_t]:
                        break
                    rd += 1
        return out

    def _prediction(self, sym: int) -> dict:
        """``{symbol: dotted rules}`` of the items predicted from ``sym`` that
        wait for that symbol."""
        pw = self._pwait.get(sym)
        if pw is None:
            nxt = self._rd_next
            pw = {}
            for rd in self._predict(sym):
                y = nxt[rd]
                if y >= 0:
                    pw.setdefault(y, []).append(rd)
            pw = self._pwait[sym] = {y: tuple(v) for y, v in pw.items()}
            self._pexp[sym] = frozenset(y for y in pw if y < self.n_t)
        return pw

    # -- columns ----------------------------------------------------------------------

    def _advance(self, c: int, sym: int, cache: bool = True) -> tuple:
        """The items of column ``c`` that wait for ``sym``, with the dot moved past
        it (predicted ones get origin ``c``)."""
        adv = self._adv[c]
        hit = adv.get(sym)
        if hit is not None:
            return hit
        out = [it + 1 for it in self._ewait[c].get(sym, ())]
        roots = self._roots[c]
        off = (c + 1) * self._n_rd + 1
        for x in roots:
            pw = self._pwait.get(x)
            if pw is None:
                pw = self._prediction(x)
            for rd in pw.get(sym, ()):
                out.append(off + rd)
        # two roots may predict the same items (a value and the object it starts)
        hit = tuple(dict.fromkeys(out)) if len(roots) > 1 else tuple(out)
        if cache:
            adv[sym] = hit
        return hit

    def _close(self, agenda) -> int:
        """The context whose column holds ``agenda`` (scanned items) and what they
        complete."""
        n_rd = self._n_rd
        nxt = self._rd_next
        n_t = self.n_t
        nullable = self.nullable
        accept_item = n_rd + self._aug_done  # S' -> start . , from context 0
        advs = self._adv
        seen: set = set()
        add = seen.add
        incomplete = []
        accepts = False
        stack = list(agenda)
        pop, push, extend = stack.pop, stack.append, stack.extend
        while stack:
            it = pop()
            if it in seen:
                continue
            add(it)
            y = nxt[it % n_rd]
            if y < 0:
                if it == accept_item:
                    accepts = True
                o = it // n_rd - 1
                hit = advs[o].get(-1 - y)
                extend(self._advance(o, -1 - y) if hit is None else hit)
            else:
                incomplete.append(it)
                if y >= n_t and nullable[y - n_t]:
                    push(it + 1)
        key = (frozenset(incomplete), accepts)
        c = self._intern.get(key)
        if c is None:
            c = self._intern[key] = self._add_context(incomplete, None, accepts)
        return c

    def _add_context(self, items, roots, accepts: bool) -> int:
        c = len(self._ewait)
        if c >= self.max_contexts:
            raise GrammarTooComplexError(
                f"the parser created more than {self.max_contexts} chart columns "
                f"(pass max_contexts= to raise the limit)")
        n_rd, nxt, n_t = self._n_rd, self._rd_next, self.n_t
        ewait: dict = {}
        for it in items:
            y = nxt[it % n_rd]
            w = ewait.get(y)
            if w is None:
                ewait[y] = [it]
            else:
                w.append(it)
        if roots is None:
            roots = tuple(y for y in ewait if y >= n_t)
        expected = {y for y in ewait if y < n_t}
        for x in roots:
            if x not in self._pexp:
                self._prediction(x)
            expected |= self._pexp[x]
        self._ewait.append(ewait)
        self._roots.append(roots)
        self._adv.append({})
        self._expected.append(frozenset(expected))
        self._accepts.append(accepts)
        return c

    # -- public ---------------------------------------------------------------------------

    @property
    def num_contexts(self) -> int:
        """Number of distinct chart columns created so far."""
        return len(self._ewait)

    def expected(self, c: int) -> frozenset:
        """The terminals the parser accepts next in context ``c``."""
        return self._expected[c]

    def accepts(self, c: int) -> bool:
        """Whether the terminals read to reach ``c`` form a sentence."""
        return self._accepts[c]

    def next(self, c: int, t: int) -> int:
        """The context after terminal ``t`` in context ``c``, or -1."""
        key = (c, t)
        hit = self._next.get(key)
        if hit is not None:
            return hit
        kernel = self._advance(c, t, cache=False) if t in self._expected[c] else ()
        nc = self._close(kernel) if kernel else -1
        self._next[key] = nc
        return nc

    def recognize(self, terminals) -> bool:
        """Whether a sequence of terminal ids is a sentence (for tests)."""
        c = 0
        for t in terminals:
            c = self.next(c, t)
            if c < 0:
                return False
        return self.accepts(c)
