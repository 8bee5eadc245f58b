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
rules so that advancing the dot is ``+ 1``.

The recognizer's work runs in numba kernels (:mod:`constrain.cfg.earley_kernels`)
over flat arrays this class owns: a new column is made inside a mask's first
computation, where the Python version cost ~14 us per column and was a quarter
of the slowest masks on MaskBench; the kernel takes ~2 us.

Reference: J. Earley, "An efficient context-free parsing algorithm", CACM 1970;
J. Aycock and R. N. Horspool, "Practical Earley parsing", Computer Journal 2002.
"""

from __future__ import annotations

import operator
import sys
import warnings
from array import array
from itertools import accumulate

import numpy as np

from constrain.cache import check_budget
from constrain.cfg import earley_kernels as ek
from constrain.errors import GrammarError, GrammarTooComplexError, IncompleteParseWarning
from constrain.cfg.lexer import symbol_position
from constrain.automata.hash_table import probes_end, table_rehash
from constrain.automata.table_views import TableViews
from constrain.cfg.ir import GrammarIR

_LITTLE = sys.byteorder == "little"

#: the default ``max_items``: the largest column of the grammars and schemas in
#: tests/data has 31 items (SQL over Spider's dev queries), a very ambiguous
#: grammar's grow with the input
DEFAULT_MAX_ITEMS = 1024

_NBYTES = operator.attrgetter("nbytes")


def _tables(ir: GrammarIR, usable, max_contexts: int, max_items: int) -> tuple:
    """:func:`~constrain.cfg.earley_kernels.earley_tables` for ``ir`` (its
    rules as one flat array: left-hand sides, offsets, right-hand sides, the
    augmented start rule S' -> start last), with ``usable`` the terminals the
    vocabulary can spell (``None``: all)."""
    n_t = ir.n_terminals
    lhs: list[int] = []
    off = [0]
    flat: list[int] = []
    for left, rhs in ir.rules:
        lhs.append(left)
        flat += rhs
        off.append(len(flat))
    lhs.append(len(ir.nonterminals))
    flat.append(n_t + ir.start)
    off.append(len(flat))
    n_r = len(lhs)
    flat_rules = np.array(lhs + off + flat, dtype=np.int64)
    if usable is None:
        spelled = np.ones(max(n_t, 1), dtype=np.bool_)
    elif isinstance(usable, np.ndarray) and usable.dtype == np.bool_:
        spelled = usable
    else:
        spelled = np.asarray(usable, dtype=np.bool_)
    # bytes, not spelled.all(): the ufunc reduction's first call costs ~20 us
    # on a cold compile
    check = not (ir.productive and (usable is None or 0 not in spelled.tobytes()))
    return ek.earley_tables(flat_rules[:n_r], flat_rules[n_r:2 * n_r + 1], flat_rules[2 * n_r + 1:],
                            n_t, spelled, check, max_contexts, max_items)


class EarleyRecognizer:
    """Earley recognition over the terminal ids of a :class:`GrammarIR`.

    Contexts are ints from 0 (the start); ``next(c, t)`` is the context after
    terminal ``t`` or -1, ``expected(c)`` the terminals allowed next,
    ``accepts(c)`` whether the terminals so far form a sentence.

    ``max_contexts`` bounds the columns made (past it:
    :class:`~constrain.errors.GrammarTooComplexError`); ``max_items`` the items
    one column keeps, and so the work of making one: a column of a very
    ambiguous grammar past it keeps a subset of its items, which recognises a
    subset of the language (see :func:`~constrain.cfg.earley_kernels.earley_next`
    and :attr:`truncated_columns`).
    """

    def __init__(self, ir: GrammarIR, usable=None, *, max_contexts: int = 2_000_000,
                 max_items: int = DEFAULT_MAX_ITEMS):
        max_contexts = check_budget("max_contexts", max_contexts)
        max_items = check_budget("max_items", max_items)
        self.ir = ir
        self.n_t = ir.n_terminals
        self.max_contexts = max_contexts
        tables = _tables(ir, usable, max_contexts, max_items)
        if not tables[0]:
            name = ir.nonterminals[ir.start]
            raise GrammarError(f"the start symbol {name!r} derives no "
                               f"string the vocabulary can spell", *symbol_position(ir.source, name))
        self._meta, self._grammar = tables[1], tables[2]
        self._pred, self._ctx = list(tables[3]), list(tables[4])
        self._bind_tables()
        self._expected: dict[int, frozenset] = {}
        self._next: dict = {}
        self._unions: dict = {}
        self._max_items = max_items
        self._warned = False

    # -- saving (constrain.persist) ---------------------------------------------------

    # (name, dtype, dimensions, fill past the rows used) of each array, in the
    # order of the tuples of constrain.cfg.earley_kernels; a fill of None:
    # rows written before they are read, not initialised
    _GRAMMAR = (("rd_next", np.int64, 1, 0), ("nullable", np.bool_, 1, 0),
                ("lhs_off", np.int64, 1, 0), ("lhs_rd", np.int64, 1, 0))
    _PRED = (("pred_off", np.int64, 1, 0), ("pred_len", np.int64, 1, 0),
             ("pred_sym", np.int64, 1, None), ("pred_rd", np.int64, 1, None),
             ("pexp", np.uint64, 2, 0))
    _CHART = (("c_ioff", np.int64, 1, 0), ("items", np.int64, 1, None),
              ("c_roff", np.int64, 1, 0), ("roots", np.int64, 1, None),
              ("c_exp", np.uint64, 2, 0), ("c_acc", np.uint8, 1, 0),
              ("c_hash", np.uint64, 1, 0), ("htab", np.int64, 1, 0))

    def snapshot(self, payload) -> None:
        """Write the recognizer's tables, contexts so far included, into
        ``payload`` (a :class:`constrain.persist.Payload`): of the arrays
        that grow by appending, the part used, with their capacity."""
        n = self.num_contexts
        c_ioff, c_roff = self._ctx[0], self._ctx[2]
        used_pred = int(self._meta[ek.M_PRED])
        used = {"pred_sym": used_pred, "pred_rd": used_pred, "items": int(c_ioff[n]),
                "roots": int(c_roff[n])}
        payload.set("max_contexts", self.max_contexts)
        payload.put("meta", self._meta)
        for specs, arrays in ((self._GRAMMAR, self._grammar), (self._PRED, self._pred),
                              (self._CHART, self._ctx)):
            for (name, *_), a in zip(specs, arrays):
                payload.put(name, a, used.get(name))
        nxt = np.array([(c, t, v) for (c, t), v in self._next.items()], dtype=np.int64)
        payload.put("next", nxt.reshape(-1, 3))
        keys = list(self._unions)
        payload.put("union_len", np.array([len(k) for k in keys], dtype=np.int64))
        payload.put("union_ctx", np.array([c for k in keys for c in k], dtype=np.int64))
        payload.put("union_out", np.array([self._unions[k] for k in keys], dtype=np.int64))

    @classmethod
    def restore(cls, payload, ir: GrammarIR, usable=None) -> "EarleyRecognizer":
        """The recognizer :meth:`snapshot` wrote, for ``ir`` (``usable``: the
        terminals the vocabulary can spell, as the constructor takes them).
        Every index the kernels follow is checked (they trust them): the
        grammar's tables against those ``ir`` makes, the predictions and
        columns to be in range. A table that fails raises ``ValueError``."""
        def arrays(specs):
            return [payload.get(name, dtype, ndim, fill=fill) for name, dtype, ndim, fill in specs]

        self = cls.__new__(cls)
        self.ir = ir
        self.n_t = ir.n_terminals
        self.max_contexts = check_budget("max_contexts", payload.value("max_contexts"))
        self._meta = payload.get("meta", np.int64)
        if self._meta.shape[0] != ek.META_SIZE or self._meta[ek.M_N_T] != self.n_t:
            raise ValueError("the recognizer is for another grammar")
        self._grammar = tuple(arrays(self._GRAMMAR))
        self._pred, self._ctx = arrays(self._PRED), arrays(self._CHART)
        self._bind_tables()
        self._expected = {}
        self._max_items = int(self._meta[ek.M_MAX_ITEMS])
        self._warned = False
        nxt = payload.get("next", np.int64, 2, width=3).tolist()
        self._next = {(c, t): v for c, t, v in nxt}
        lengths = payload.get("union_len", np.int64).tolist()
        flat = payload.get("union_ctx", np.int64).tolist()
        outs = payload.get("union_out", np.int64).tolist()
        if sum(lengths) != len(flat) or len(lengths) != len(outs):
            raise ValueError("the recognizer's unions do not fit")
        self._unions, k = {}, 0
        for m, out in zip(lengths, outs):
            self._unions[tuple(flat[k:k + m])] = out
            k += m
        n = self.num_contexts
        if not 0 < n <= self._ctx[5].shape[0] or \
                not all(0 <= c < n and 0 <= t < self.n_t and -1 <= v < n for c, t, v in nxt):
            raise ValueError("the recognizer's contexts do not fit")
        self._check_tables(_tables(ir, usable, self.max_contexts, self._max_items))
        return self

    def _check_tables(self, fresh) -> None:
        """Raise ``ValueError`` unless the loaded tables are the grammar's
        (``fresh``: what :func:`_tables` makes for it) and every index in the
        predictions and columns is in range (a file that passed its digest
        but was written wrong would send the kernels out of their arrays)."""
        meta, grammar = self._meta, self._grammar
        for name, a, b in zip(("rd_next", "nullable", "lhs_off", "lhs_rd"), grammar, fresh[2]):
            if a.shape != b.shape or not np.array_equal(a, b):
                raise ValueError(f"the recognizer's {name} is not the grammar's")
        for m in (ek.M_N_T, ek.M_N_RD, ek.M_ACCEPT_ITEM):
            if meta[m] != fresh[1][m]:
                raise ValueError("the recognizer's counters are not the grammar's")
        n_t, n_rd = self.n_t, int(meta[ek.M_N_RD])
        n_sym = grammar[2].shape[0] - 1
        words = max(1, (n_t + 63) // 64)
        pred_off, pred_len, pred_sym, pred_rd, pexp = self._pred
        used = int(meta[ek.M_PRED])

        def within(a, lo, hi) -> bool:
            return a.size == 0 or (int(a.min()) >= lo and int(a.max()) < hi)

        if not (pred_off.shape == pred_len.shape == (n_sym,) and pexp.shape == (n_sym, words)
                and 0 <= used <= pred_sym.shape[0] == pred_rd.shape[0]
                and within(pred_len, 0, used + 1) and within(pred_off, -1, used)
                and bool(np.all((pred_off < 0) | (pred_off + pred_len <= used)))
                and within(pred_sym[:used], 0, n_t + n_sym) and within(pred_rd[:used], 0, n_rd)):
            raise ValueError("the recognizer's predictions do not fit")
        c_ioff, items, c_roff, roots, c_exp, c_acc, c_hash, htab = self._ctx
        n, cap = self.num_contexts, c_acc.shape[0]
        if not (c_ioff.shape == c_roff.shape == (cap + 1,) and c_hash.shape == (cap,)
                and c_exp.shape == (cap, words) and n <= cap):
            raise ValueError("the recognizer's columns do not fit")
        for off, data, lo, hi in ((c_ioff, items, 0, n_rd * (n + 1)),
                                  (c_roff, roots, n_t, n_t + n_sym)):
            bounds = off[:n + 1]
            if bounds[0] != 0 or bool(np.any(np.diff(bounds) < 0)) or bounds[n] > data.shape[0] \
                    or not within(data[:bounds[n]], lo, hi):
                raise ValueError("the recognizer's columns do not fit")
        if not within(htab, -1, n) or not probes_end(htab, n, cap):
            raise ValueError("the recognizer's column table does not fit")

    # -- grammar analysis ---------------------------------------------------------

    @staticmethod
    def _fixpoint(rules, n_t, n_nt, base_ok) -> list[bool]:
        """The nonterminals with a rule whose every symbol is ok, where a terminal
        is ok when ``base_ok(t)`` and a nonterminal when it is in the result (the
        analysis :func:`earley_kernels.derives` runs, from Python rules)."""
        off = array("q", accumulate((len(rhs) for _, rhs in rules), initial=0))
        term_ok = np.array([bool(base_ok(t)) for t in range(n_t)] or [False], dtype=np.bool_)
        done = ek.derives(np.array([lhs for lhs, _ in rules], dtype=np.int64),
                          np.frombuffer(off, dtype=np.int64),
                          np.array([x for _, rhs in rules for x in rhs], dtype=np.int64),
                          n_t, n_nt, term_ok, np.ones(len(rules), dtype=np.bool_))
        return done.tolist()

    def _bind_tables(self) -> None:
        """The tables as :func:`~constrain.cfg.earley_kernels.earley_next`
        takes them, bound again whenever an array grows: one descriptor array
        (:class:`~constrain.automata.table_views.TableViews`, slots
        ``earley_kernels.SLOTS``) of ``meta``, the int64 counters (``M_*``),
        then the fields of three structures (see
        :mod:`constrain.cfg.earley_kernels`):

        - ``grammar``: ``(rd_next, nullable, lhs_off, lhs_rd)``, fixed;
        - ``pred``: ``(pred_off, pred_len, pred_sym, pred_rd, pexp)``, the
          predictions per nonterminal (``_pred``);
        - ``chart``: ``(c_ioff, items, c_roff, roots, c_exp, c_acc, c_hash,
          htab)``, the interned columns (``_ctx``).

        Every array the kernels read is bound here, and only here: the
        descriptors are addresses, valid while the arrays they name live
        (the views keep them alive). One descriptor array for the
        recognizer's life, rebound in place."""
        views = self.__dict__.get("_views")
        if views is None:
            views = self._views = TableViews(ek.LAYOUT)
        views.bind_all((self._meta, *self._grammar, *self._pred, *self._ctx))

    def _run(self, kernel, *args) -> int:
        """Call an Earley kernel, growing its arrays until it has room."""
        while True:
            status, value = kernel(*args, self._views.desc)
            if status == ek.DONE:
                if self._meta[ek.M_TRUNCATED] and not self._warned:
                    self.warn_truncated()
                return int(value)
            if status == ek.TOO_MANY_CONTEXTS:
                raise GrammarTooComplexError(
                    f"the parser created more than {self.max_contexts} chart columns "
                    f"(pass max_contexts= to raise the limit)")
            self._grow(status, int(value))

    def warn_truncated(self) -> None:
        """Warn once that a column was cut at ``max_items``, if one was (its
        kernels set the counter; a kernel that called ``next_column`` itself,
        such as a boundary walk, calls this after)."""
        if self._meta[ek.M_TRUNCATED] and not self._warned:
            self._warned = True
            warnings.warn(IncompleteParseWarning(
                f"the grammar's parser kept {self._max_items} of the items of a chart "
                f"column (max_items): the masks stay sound, but some valid "
                f"continuations may be refused from here on (pass max_items= to "
                f"raise the cap)"))

    @property
    def desc(self) -> np.ndarray:
        """The recognizer's tables as one descriptor array (``earley_kernels.SLOTS``),
        for kernels that step the parser themselves; read it again after
        anything that may grow the tables."""
        return self._views.desc

    def _grow(self, status: int, need: int) -> None:
        def bigger(a, size):
            out = np.zeros((size,) + a.shape[1:], dtype=a.dtype)
            out[:a.shape[0]] = a
            return out

        if status == ek.GROW_PRED:
            size = max(2 * self._pred[2].shape[0], need)
            self._pred[2] = bigger(self._pred[2], size)
            self._pred[3] = bigger(self._pred[3], size)
        elif status == ek.GROW_ITEMS:
            self._ctx[1] = bigger(self._ctx[1], max(2 * self._ctx[1].shape[0], need))
        elif status == ek.GROW_ROOTS:
            self._ctx[3] = bigger(self._ctx[3], max(2 * self._ctx[3].shape[0], need))
        else:
            c_ioff, items, c_roff, roots, c_exp, c_acc, c_hash, _ = self._ctx
            cap = max(2 * c_acc.shape[0], need)
            n = int(self._meta[ek.M_CONTEXTS])
            self._ctx = [bigger(c_ioff, cap + 1), items, bigger(c_roff, cap + 1), roots,
                         bigger(c_exp, cap), bigger(c_acc, cap), bigger(c_hash, cap),
                         # context 0 is not interned
                         table_rehash(c_hash, n, 4 * cap, 1)]
        self._bind_tables()

    # -- public ---------------------------------------------------------------------------

    def memory_bytes(self) -> int:
        """The bytes of the recognizer's tables (its chart columns grow with
        the contexts it makes)."""
        views = self.__dict__.get("_views")
        # every slot is bound once the views exist (_bind_tables binds all)
        return 0 if views is None else sum(map(_NBYTES, views.tables))

    @property
    def num_contexts(self) -> int:
        """Number of distinct chart columns created so far."""
        return int(self._meta[ek.M_CONTEXTS])

    @property
    def truncated_columns(self) -> int:
        """How many columns were made with a subset of their items (``max_items``):
        0 unless the grammar is very ambiguous. Masks stay sound; past the first,
        some valid continuations may be refused."""
        return int(self._meta[ek.M_TRUNCATED])

    def expected(self, c: int) -> frozenset:
        """The terminals the parser accepts next in context ``c``."""
        hit = self._expected.get(c)
        if hit is None:
            # the bitset as one int, not .tolist(): one numpy path fewer on a
            # cold compile (words in order, each little-endian: bit k is terminal k)
            words = self._ctx[4][c]
            x = int.from_bytes((words if _LITTLE else words.byteswap()).tobytes(), "little")
            out = []
            while x:
                low = x & -x
                out.append(low.bit_length() - 1)
                x ^= low
            hit = self._expected[c] = frozenset(out)
        return hit

    def expected_key(self, c: int) -> bytes:
        """The terminals the parser accepts next in context ``c``, as the bytes of
        their bitset: a dict key as good as :meth:`expected`, without building
        the set (contexts with one expected set are many)."""
        return self._ctx[4][c].tobytes()

    def expected_bits(self, c: int) -> np.ndarray:
        """The terminals the parser accepts next in context ``c``, as a bitset:
        uint64 words, terminal ``t`` bit ``t & 63`` of word ``t >> 6`` (a view:
        do not modify)."""
        return self._ctx[4][c]

    def accepts(self, c: int) -> bool:
        """Whether the terminals read to reach ``c`` form a sentence."""
        return bool(self._ctx[5][c])

    def next(self, c: int, t: int) -> int:
        """The context after terminal ``t`` in context ``c``, or -1."""
        key = (c, t)
        hit = self._next.get(key)
        if hit is None:
            # the kernel trusts its indices: a bad one must not reach it
            if not (0 <= c < self._meta[ek.M_CONTEXTS] and 0 <= t < self.n_t):
                raise IndexError(f"no context {c} or terminal {t} in this recognizer "
                                 f"({self.num_contexts} contexts, {self.n_t} terminals)")
            hit = self._next[key] = self._run(ek.earley_next, c, t)
        return hit

    def union(self, contexts) -> int:
        """The context whose items are those of all of ``contexts`` (distinct,
        none of them 0): what follows it is what follows any of them
        (:func:`~constrain.cfg.earley_kernels.earley_union`). Cached."""
        key = tuple(sorted(contexts))
        hit = self._unions.get(key)
        if hit is None:
            n = self._meta[ek.M_CONTEXTS]
            if not (len(key) > 1 and 0 < key[0] and key[-1] < n):
                raise IndexError(f"no union of the contexts {key} in this recognizer "
                                 f"({self.num_contexts} contexts; context 0 has none)")
            hit = self._unions[key] = self._run(ek.earley_union, np.array(key, dtype=np.int64))
        return hit

    def recognize(self, terminals) -> bool:
        """Whether a sequence of terminal ids is a sentence (for tests)."""
        c = 0
        for t in terminals:
            c = self.next(c, t)
            if c < 0:
                return False
        return self.accepts(c)
