"""An Earley recognizer over terminals whose chart columns are interned.

Any context-free grammar works: ambiguous, left- or right-recursive, with empty
rules (Aycock and Horspool's nullable completion). A parser *context* is a small
int naming one chart column; a column's items refer to earlier columns by their
context ids, so columns are shared between every hypothesis that reached them and
two histories that leave the same items behind get the same id. Scanning a
terminal from a context is computed once and cached (``next``), which makes a
loop such as ``value ("," value)*`` cycle through a handful of contexts however
long it runs: only nesting creates new ones.

Reference: J. Earley, "An efficient context-free parsing algorithm", CACM 1970;
J. Aycock and R. N. Horspool, "Practical Earley parsing", Computer Journal 2002.
"""

from __future__ import annotations

from .errors import GrammarError, GrammarTooComplexError
from .lark_loader import GrammarIR

SELF = -1  # origin of an item predicted in the column that holds it


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
        self.rules = rules
        self.lhs = [lhs for lhs, _ in rules]
        self.rhs = [rhs for _, rhs in rules]
        productive = self._productive(rules, n_t, n_nt + 1, usable)
        if not productive[n_nt]:
            raise GrammarError(f"the start symbol {ir.nonterminals[ir.start]!r} derives no string "
                               f"the vocabulary can spell")
        by_lhs: list[list[int]] = [[] for _ in range(n_nt + 1)]
        for r, (lhs, rhs) in enumerate(rules):
            if all(self._sym_ok(s, productive, usable) for s in rhs):
                by_lhs[lhs].append(r)
        self.by_lhs = by_lhs
        self.nullable = self._nullable(rules, by_lhs, n_t, n_nt + 1)
        self._closure_cache: dict[int, tuple] = {}
        self.max_contexts = max_contexts
        # context tables
        self._items: list[frozenset] = []       # incomplete items (rule, dot, origin)
        self._waiting: list[dict] = []          # symbol -> ((rule, dot, origin), ...)
        self._expected: list[frozenset] = []
        self._accepts: list[bool] = []
        self._intern: dict = {}
        self._next: dict = {}
        self._rlen = [len(rhs) for rhs in self.rhs]
        #: per nonterminal, its predicted items (origin SELF) as a dict, for update()
        self._predicted_items: dict[int, dict] = {}
        self._new_context(self._close({}, [], self._predict(n_t + n_nt, {})), accept_self=True)

    # -- grammar analysis ---------------------------------------------------------

    def _sym_ok(self, s, productive, usable) -> bool:
        if s < self.n_t:
            return usable is None or bool(usable[s])
        return productive[s - self.n_t]

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

    def _productive(self, rules, n_t, n_nt, usable):
        return self._fixpoint(rules, n_t, n_nt,
                              (lambda t: True) if usable is None else (lambda t: bool(usable[t])))

    @staticmethod
    def _nullable(rules, by_lhs, n_t, n_nt):
        kept = [rules[r] for rs in by_lhs for r in rs]
        return EarleyRecognizer._fixpoint(kept, n_t, n_nt, lambda t: False)

    def _predict(self, sym: int, _unused) -> tuple:
        """Items ``(rule, dot)`` predicted from nonterminal ``sym``, advanced over
        nullable symbols (they all have origin SELF)."""
        hit = self._closure_cache.get(sym)
        if hit is not None:
            return hit
        n_t = self.n_t
        seen = set()
        todo = [sym]
        done_nt = set()
        while todo:
            x = todo.pop()
            if x in done_nt:
                continue
            done_nt.add(x)
            for r in self.by_lhs[x - n_t]:
                rhs = self.rhs[r]
                d = 0
                while True:
                    if (r, d) in seen:
                        break
                    seen.add((r, d))
                    if d == len(rhs):
                        break
                    y = rhs[d]
                    if y < n_t:
                        break
                    todo.append(y)
                    if not self.nullable[y - n_t]:
                        break
                    d += 1
        hit = self._closure_cache[sym] = tuple(sorted(seen))
        return hit

    # -- columns ----------------------------------------------------------------------

    def _close(self, items: dict, agenda: list, predicted: tuple) -> dict:
        """Complete the column whose kernel items are in ``agenda`` (and whose
        predictions ``predicted`` come first). ``items`` maps item -> None."""
        n_t = self.n_t
        rhs_of = self.rhs
        lhs_of = self.lhs
        waiting = self._waiting
        nullable = self.nullable
        predicted_items = self._predicted_items
        for rd in predicted:
            items[(rd[0], rd[1], SELF)] = None
        stack = list(agenda)
        pop = stack.pop
        push = stack.append
        while stack:
            item = pop()
            if item in items:
                continue
            items[item] = None
            r, d, o = item
            rhs = rhs_of[r]
            if d == len(rhs):
                if o == SELF:
                    continue  # an empty derivation: covered by nullable advancing
                for (r2, d2, o2) in waiting[o].get(lhs_of[r] + n_t, ()):
                    push((r2, d2 + 1, o if o2 == SELF else o2))
                continue
            y = rhs[d]
            if y >= n_t:
                pred = predicted_items.get(y)
                if pred is None:
                    pred = predicted_items[y] = dict.fromkeys(
                        (r2, d2, SELF) for (r2, d2) in self._predict(y, None))
                items.update(pred)
                if nullable[y - n_t]:
                    push((r, d + 1, o))
        return items

    def _new_context(self, items: dict, accept_self: bool = False) -> int:
        rlen = self._rlen
        incomplete = [it for it in items if it[1] < rlen[it[0]]]
        aug = self.aug
        accepts = (aug, 1, 0) in items or (accept_self and (aug, 1, SELF) in items)
        key = (frozenset(incomplete), accepts)
        c = self._intern.get(key)
        if c is not None:
            return c
        c = len(self._items)
        if c >= self.max_contexts:
            raise GrammarTooComplexError(
                f"the parser created more than {self.max_contexts} chart columns "
                f"(pass max_contexts= to raise the limit)")
        waiting: dict = {}
        rhs_of = self.rhs
        for it in incomplete:
            y = rhs_of[it[0]][it[1]]
            waiting.setdefault(y, []).append(it)
        n_t = self.n_t
        self._intern[key] = c
        self._items.append(key[0])
        self._waiting.append({k: tuple(v) for k, v in waiting.items()})
        self._expected.append(frozenset(y for y in waiting if y < n_t))
        self._accepts.append(accepts)
        return c

    # -- public ---------------------------------------------------------------------------

    @property
    def num_contexts(self) -> int:
        """Number of distinct chart columns created so far."""
        return len(self._items)

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
        kernel = self._waiting[c].get(t)
        if not kernel:
            self._next[key] = -1
            return -1
        agenda = [(r, d + 1, c if o == SELF else o) for (r, d, o) in kernel]
        items = self._close({}, agenda, ())
        nc = self._new_context(items)
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
