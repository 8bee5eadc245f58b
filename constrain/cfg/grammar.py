"""``compile_grammar``: a Lark grammar → a token-level constraint.

The language
------------
A grammar denotes what ``lark.Lark(text, parser="earley",
lexer="dynamic_complete", start=start)`` accepts: every terminal stands for its
regular language, a string is in the language when it splits into terminal
strings — *any* split, no longest-match lexing — that form a sentence of the
context-free grammar, with ``%ignore`` terminals allowed between any two
terminals. Overlapping terminals (``1`` vs ``1.5``, a keyword vs an identifier)
therefore never make a valid string unreachable: every way of splitting stays
alive until the bytes decide. See ``docs/grammars.md``.

The runtime
-----------
A state is a small set of *configurations* ``(context, lexer state)``: the Earley
chart column reached (:mod:`~constrain.cfg.earley`) and the terminals in progress
since the last boundary (:mod:`~constrain.cfg.lexer`). The mask of a configuration is

* the tokens that stay inside the current terminals — one bitset per lexer state,
  independent of the parse stack, computed once per grammar;
* for a terminal that may end right now, the mask of the configuration that
  starts the next terminal (cached);
* the tokens that cross a terminal boundary inside them: a numba walk below only
  the trie nodes where a boundary can occur, consulting the parser's cached
  transition table there;
* where no bytes follow the last boundary, the ids of the token references
  (``<[id]>``, ``<|name|>``) the parser can take there: a reference matches a
  whole token, no bytes (:mod:`~constrain.cfg.token_refs`).

Masks are cached per state. Every step is bounded: a mask is at most one walk of
the token trie per configuration (and per pair alive at a trie node, at most
``max_width`` of them) plus one Earley step per (context, terminal) pair met.
"""

from __future__ import annotations

import itertools
import threading
from collections import OrderedDict
from numbers import Real
from typing import TYPE_CHECKING

import numpy as np

from constrain.cfg import lexer_kernels as gk
from constrain.runtime.bitmask import _PACK_MIN_BYTES, check_bitmask, write_row
from constrain.automata.deadline import Deadline
from constrain.cache import check_budget
from constrain.cfg.budgets import TokenBudgets
from constrain.cfg.token_refs import TokenTerminals
from constrain.cfg.earley import EarleyRecognizer
from constrain.errors import (ConstraintError, GrammarTooComplexError, InvalidLimitError,
                              InvalidStateError)
from constrain.cfg.ir import GrammarIR, Terminal, TokenRef
from constrain.cfg.lexer import LexerTables, TerminalAutomata
from constrain.regular.token_automaton import mask_writer
from constrain.limits import Limits
from constrain.protocol import Constraint, as_bytes, check_token_id, text_bytes
from constrain.vocab.trie import TokenTrie
from constrain.vocab.vocabulary import Vocabulary

if TYPE_CHECKING:
    from constrain.compiler import Compiler

TERMINATED = -1
#: what one entry of the advance or writer memos holds, roughly (a state tuple,
#: a dictionary slot, a writer)
_MEMO_BYTES = 160
#: advance's memo of a refused token (None there would read as a miss)
_REFUSED = object()
#: the spans of a row known to be dense (token_automaton.mask_writer: a copy)
_DENSE = (-1,)
_DEFAULT = Limits()


class GrammarConstraint(Constraint):
    """A context-free grammar over a vocabulary. Build it with
    :func:`compile_grammar`, :func:`constrain.compile_json_schema` or a
    :class:`constrain.Compiler`.

    States are hashable tuples ``(fresh, ((context, lexer_state), ...))``, or
    ``-1`` after EOS; they are immutable, so search can fork them freely.

    The budgets are the grammar fields of :class:`constrain.Limits`.
    ``compiler``: the :class:`constrain.Compiler` whose caches of terminal
    automata and lexer walks the grammar uses (it keeps it); by default the
    vocabulary's default compiler (:func:`constrain.compiler.default_compiler`).

    Thread safety: any number of threads may share one grammar and call every
    method at once; results are those of a single thread. The tables grow
    under one reentrant lock per grammar (its numba kernels release the GIL
    while they run, so other grammars' work goes on meanwhile); a state whose
    mask is cached is filled without taking it.
    """

    def __init__(self, ir: GrammarIR, vocab: Vocabulary, *, source: str = "",
                 max_states: int = _DEFAULT.max_states, time_budget: float = _DEFAULT.time_budget,
                 max_contexts: int = _DEFAULT.max_contexts, max_width: int = _DEFAULT.max_width,
                 mask_cache_bytes: int = _DEFAULT.mask_cache_bytes,
                 max_items: int = _DEFAULT.max_items,
                 compiler: Compiler | None = None, max_repeat: int = _DEFAULT.max_repeat,
                 max_positions: int = _DEFAULT.max_positions):
        if not isinstance(vocab, Vocabulary):
            raise ConstraintError(f"vocab must be a constrain.Vocabulary, not {type(vocab).__name__}")
        # checked here whoever calls (a Limits is free when nothing differs
        # from the defaults). time_budget apart: a front end passes what its
        # translation left, which may be nothing (the first deadline check
        # then fails), so 0 is allowed, not a negative number or NaN
        # (the defaults' own objects, as a compiler with default limits passes
        # them, need no check: Limits.replace and the ABC test were ~5 us of a
        # small schema's cold compile)
        if not (max_states is _DEFAULT.max_states and max_contexts is _DEFAULT.max_contexts
                and max_width is _DEFAULT.max_width and max_items is _DEFAULT.max_items
                and mask_cache_bytes is _DEFAULT.mask_cache_bytes
                and max_repeat is _DEFAULT.max_repeat and max_positions is _DEFAULT.max_positions):
            _DEFAULT.replace(max_states=max_states, max_contexts=max_contexts,
                             max_width=max_width, mask_cache_bytes=mask_cache_bytes,
                             max_items=max_items, max_repeat=max_repeat,
                             max_positions=max_positions)
        if time_budget.__class__ is not float and (
                isinstance(time_budget, bool) or not isinstance(time_budget, Real)) \
                or not time_budget >= 0:
            raise InvalidLimitError(f"time_budget must be a number of seconds >= 0, "
                                    f"not {time_budget!r}", "time_budget")
        compiler = _compiler_for(vocab, compiler)
        deadline = Deadline.after(time_budget)  # kernel loading does not count
        trie = TokenTrie.of(vocab)
        words = (len(vocab) + 31) // 32
        terms = TerminalAutomata(ir, trie.alphabet, max_states=max_states, max_repeat=max_repeat,
                                 max_positions=max_positions, deadline=deadline,
                                 compiler=compiler)
        parser = EarleyRecognizer(ir, terms.usable, max_contexts=max_contexts,
                                  max_items=max_items)
        lexer = LexerTables(terms, ir.n_terminals, trie, words32=words,
                            max_states=8 * max_states, max_rows_bytes=mask_cache_bytes // 2,
                            complete=bool(ir.budgets))
        self._setup(ir, vocab, source, compiler, terms, parser, lexer, max_width,
                    max(2, mask_cache_bytes // 2 // (4 * words)))
        # np.empty and fill, not np.full (a Python-level wrapper): this runs
        # once per compile, on a cold cache
        self._ctx_next = np.empty((256, max(ir.n_terminals, 1)), dtype=np.int32)
        self._ctx_next.fill(-2)
        # the lexer state that starts the terminals of an expected set, keyed
        # by the parser's bitset of it
        self._start_of: dict[bytes, int] = {}
        self._ctx_start = np.empty(256, dtype=np.int32)
        self._ctx_start.fill(-2)
        self._ctx_cap = 256
        self._masks: OrderedDict = OrderedDict()
        self._config_masks: OrderedDict = OrderedDict()
        #: (context, LexerTables.near_boundary_key) -> the tokens that close a
        #: bounded string near its bound there (_config_row); at most 64
        self._near_boundaries: dict = {}
        # the terminals' automata are what the time budget bounds (their
        # construction checks it); the rest is linear in the grammar's size
        self._begin()
        self._prepare_first_fill()

    def _setup(self, ir: GrammarIR, vocab: Vocabulary, source: str, compiler: Compiler,
               terms: TerminalAutomata, parser: EarleyRecognizer, lexer: LexerTables,
               max_width: int, max_masks: int) -> None:
        """The attributes that follow from the tables (a compile's or a
        loaded file's), less the parser's tables and the mask caches."""
        self.vocab = vocab
        self.ir = ir
        self.source = source
        self.compiler = compiler
        self.trie = lexer.trie
        self.words = (len(vocab) + 31) // 32
        self.terms = terms
        self.parser = parser
        self.lexer = lexer
        self.max_width = max_width
        self._ignore = frozenset(ir.ignore)
        self._ignore_bits = np.zeros(self.lexer.words64, dtype=np.uint64)
        for t in ir.ignore:
            self._ignore_bits[t >> 6] |= np.uint64(1) << np.uint64(t & 63)
        self._eos = vocab.eos_token_array
        self._eos_set = vocab.eos_token_set
        self._v = len(vocab)
        self._grammar_token = vocab.grammar_token_list
        self._token_bytes = vocab.tokens
        # per state, how fill_bitmask writes its row (token_automaton.mask_writer); as many
        # as the mask cache holds, dropped together when full
        self._writers: dict = {}
        #: ``(state, token id) -> advance's result`` (``None`` kept as
        #: ``_REFUSED``), as many as the mask cache holds, dropped together when
        #: full: a warm step was ~4.5 us of Python (``_step`` per byte), now a
        #: look-up
        self._advances: dict = {}
        # the last CPU bitmask, its row views and a tensor's data_ptr (None for
        # a numpy array): see fill_bitmask
        self._last_fill = (None, None, None)
        self._max_masks = max_masks
        # held wherever the tables grow: the parser's and lexer's tables, the
        # context arrays, the mask caches (see the class docstring)
        self._lock = threading.RLock()
        #: the token budgets' tables (constrain.cfg.budgets), None without any;
        #: configurations are then (context, lexer state, tokens) triples
        self._budgets = TokenBudgets(ir, terms, lexer, self.trie) if ir.budgets else None
        #: the token references' tables (constrain.cfg.token_refs), None without any
        self._tokens = TokenTerminals(ir, vocab, lexer, self._ignore_bits) if ir.tokens else None
        # what a start state adds to the parser's expected terminals
        self._start_extra = self._ignore_bits if self._tokens is None \
            else self._tokens.start_extra

    def _begin(self) -> None:
        """The initial state, once the tables are there."""
        first = (0, self._start(0)) if self._budgets is None else (0, self._start(0), 0)
        self._initial = (True, (first,))
        # the state advance returned last (see there); parser contexts known to
        # exist (check_state)
        self._last_out = self._initial
        self._n_ctx = self.parser.num_contexts
        # boundary_walk's scratch, made on its first call
        self._pair_scratch = None
        # no token budgets or references: a state's configurations are pairs,
        # and one inside its terminals may take its walk's row (_new_mask_row)
        self._plain = self._budgets is None and self._tokens is None

    def __repr__(self) -> str:
        return (f"GrammarConstraint(terminals={self.ir.n_terminals}, "
                f"rules={len(self.ir.rules)}, vocab={self.vocab.name})")

    # -- saving (constrain.persist) ---------------------------------------------------

    def __reduce__(self):
        # the file's bytes: the lock and the compiler do not travel (the
        # unpickled grammar has its vocabulary's default compiler)
        from constrain.persist import reduce_constraint

        return reduce_constraint(self, _OWN_ATTRIBUTES)

    def _prepare_first_fill(self) -> None:
        """Make the initial state's mask and its row writer, as the first fill
        would, at the end of the compile: its tables are still in the CPU's
        caches here, while a server fills the first mask after the prefill's
        forward pass has swept them (as the ``gc.collect()`` between a
        MaskBench compile and its first walk does). There a first fill cost
        220-280 us over o200k and ~215 over SmolLM2 (the 99th percentile of
        first-walk fills was mostly these); now it is ~55-75, and the compile
        ~70-130 more. A mask past a budget is left to the first fill, which
        reports it."""
        try:
            self._writer(self._initial)
        except ConstraintError:
            pass

    def _prepare_for_cache(self) -> None:
        """Nothing left to do: a cache entry saves the initial state's mask
        (a loaded grammar's first fill is then a copy, without the kernels a
        walk needs loaded), which the compile has made
        (:meth:`_prepare_first_fill`); one a budget refused there would be
        refused again."""

    def _persist(self, payload) -> str:
        with self._lock:
            payload.set("ir", _ir_to_json(self.ir))
            payload.set("source", self.source)
            payload.set("max_width", self.max_width)
            payload.set("max_masks", self._max_masks)
            self.terms.snapshot(payload.part("terms"))
            self.parser.snapshot(payload.part("parser"))
            self.lexer.snapshot(payload.part("lexer"))
            n_ctx = self.parser.num_contexts
            payload.set("ctx_cap", self._ctx_cap)
            payload.put("ctx_next", self._ctx_next, n_ctx)
            payload.put("ctx_start", self._ctx_start, n_ctx)
            keys = list(self._start_of)
            width = len(self.parser.expected_key(0))
            payload.put("start_key", np.frombuffer(b"".join(keys), dtype=np.uint8)
                        .reshape(len(keys), width))
            payload.put("start_state", np.array([self._start_of[k] for k in keys], dtype=np.int64))
            # a counted grammar's states and near-budget masks are triples: not
            # kept (they are made again on first use)
            masks = list(self._masks.items()) if self._budgets is None else []
            # (context, lexer state) pairs; not (context, (terminal, layer
            # state)), a bounded string's shared positions (_config_mask)
            config_masks = [(k, r) for k, r in self._config_masks.items()
                            if len(k) == 2 and k[1].__class__ is int]
        # rows are shared between the two caches: each is written once
        slot: dict = {}
        rows = []
        for _, row in masks + config_masks:
            if slot.setdefault(id(row), len(rows)) == len(rows):
                rows.append(row)
        payload.put("rows", np.array(rows, dtype=np.uint32).reshape(len(rows), self.words))
        payload.put("mask_fresh", np.array([st[0] for st, _ in masks], dtype=np.bool_))
        payload.put("mask_len", np.array([len(st[1]) for st, _ in masks], dtype=np.int64))
        payload.put("mask_configs", np.array([cfg for st, _ in masks for cfg in st[1]],
                                             dtype=np.int64).reshape(-1, 2))
        payload.put("mask_row", np.array([slot[id(r)] for _, r in masks], dtype=np.int64))
        payload.put("config_keys", np.array([k for k, _ in config_masks],
                                            dtype=np.int64).reshape(-1, 2))
        payload.put("config_row", np.array([slot[id(r)] for _, r in config_masks],
                                           dtype=np.int64))
        return "grammar"

    @classmethod
    def _restore(cls, payload, vocab: Vocabulary, compiler=None) -> "GrammarConstraint":
        compiler = _compiler_for(vocab, compiler)
        ir = _ir_from_json(payload.value("ir", dict))
        trie = TokenTrie.of(vocab)
        words = (len(vocab) + 31) // 32
        terms = TerminalAutomata.restore(payload.part("terms"), ir, trie.alphabet, compiler)
        parser = EarleyRecognizer.restore(payload.part("parser"), ir, terms.usable)
        lexer = LexerTables.restore(payload.part("lexer"), terms, ir.n_terminals, trie,
                                    words32=words)
        self = cls.__new__(cls)
        self._setup(ir, vocab, payload.value("source", str), compiler, terms, parser, lexer,
                    check_budget("max_width", payload.value("max_width")),
                    check_budget("max_masks", payload.value("max_masks")))
        n_ctx, n_lex, cap = parser.num_contexts, lexer.n, payload.value("ctx_cap")
        self._ctx_cap = cap
        self._ctx_next = payload.get("ctx_next", np.int32, 2, fill=-2, width=max(ir.n_terminals, 1))
        self._ctx_start = payload.get("ctx_start", np.int32, fill=-2)
        if not (n_ctx <= cap == self._ctx_next.shape[0] == self._ctx_start.shape[0]) \
                or self._ctx_next.min() < -2 or self._ctx_next.max() >= n_ctx \
                or self._ctx_start.min() < -2 or self._ctx_start.max() >= n_lex \
                or self._ctx_start[0] < 0:
            raise ValueError("the context tables do not fit the parser")
        keys = payload.get("start_key", np.uint8, 2)
        values = payload.get("start_state", np.int64).tolist()
        if len(keys) != len(values) or not all(0 <= v < n_lex for v in values):
            raise ValueError("the start states do not fit the lexer")
        self._start_of = {k.tobytes(): v for k, v in zip(keys, values)}
        rows = payload.get("rows", np.uint32, 2, width=words)
        rows.flags.writeable = False
        fresh = payload.get("mask_fresh", np.bool_).tolist()
        lengths = payload.get("mask_len", np.int64).tolist()
        configs = payload.get("mask_configs", np.int64, 2, width=2).tolist()
        which = payload.get("mask_row", np.int64).tolist()
        keys = payload.get("config_keys", np.int64, 2, width=2).tolist()
        config_which = payload.get("config_row", np.int64).tolist()
        if not (len(fresh) == len(lengths) == len(which) and sum(lengths) == len(configs)
                and len(keys) == len(config_which)
                and all(0 <= c < n_ctx and 0 <= s < n_lex for c, s in configs + keys)
                and all(0 <= r < len(rows) for r in which + config_which)
                and all(m > 0 for m in lengths)):
            raise ValueError("the cached masks do not fit the tables")
        self._masks = OrderedDict()
        k = 0
        for f, m, r in zip(fresh, lengths, which):
            self._masks[(f, tuple(tuple(cfg) for cfg in configs[k:k + m]))] = rows[r]
            k += m
        self._config_masks = OrderedDict((tuple(key), rows[r])
                                         for key, r in zip(keys, config_which))
        self._near_boundaries = {}
        self._begin()
        return self

    # -- parser tables, filled on demand ----------------------------------------------

    def _ensure_ctx(self, c: int) -> None:
        cap = self._ctx_cap
        if c < cap:
            return
        while cap <= c:
            cap *= 2
        nn = np.full((cap, self._ctx_next.shape[1]), -2, dtype=np.int32)
        nn[:self._ctx_next.shape[0]] = self._ctx_next
        ns = np.full(cap, -2, dtype=np.int32)
        ns[:self._ctx_start.shape[0]] = self._ctx_start
        self._ctx_next, self._ctx_start, self._ctx_cap = nn, ns, cap

    # _next and _start run a few times in each new state's first mask: the
    # capacity test inline and .item (a Python int, no numpy scalar) made them
    # ~2x cheaper
    def _next(self, c: int, t: int) -> int:
        if t in self._ignore:
            return c
        if c >= self._ctx_cap:
            self._ensure_ctx(c)
        v = self._ctx_next.item(c, t)
        if v == -2:
            v = self.parser.next(c, t)
            if v >= self._ctx_cap:
                self._ensure_ctx(v)
            self._ctx_next[c, t] = v
        return v

    def _start(self, c: int) -> int:
        if c >= self._ctx_cap:
            self._ensure_ctx(c)
        v = self._ctx_start.item(c)
        if v == -2:
            key = self.parser.expected_key(c)
            v = self._start_of.get(key)
            if v is None:
                v = self._start_of[key] = self.lexer.start_state_bits(
                    self.parser.expected_bits(c), self._start_extra)
            self._ctx_start[c] = v
        return v

    # -- stepping over bytes ------------------------------------------------------------

    def _step(self, configs, data: bytes):
        """The configurations after ``data``; empty when refused. (A fresh lexer
        state accepts nothing, so no terminal ends before the first byte.)"""
        if self._budgets is not None:
            return self._counted_step(configs, data, True)
        lex = self.lexer
        if len(configs) == 1:
            # most steps: one configuration, no terminal ending inside the
            # token, so one lexer state per byte and no sets
            c, s = configs[0]
            # the walk flag is 1 (F_ENDS) where has_acc is. A state not expanded
            # yet (flag 0: a long length bound's far positions) has a dead row
            # and no ending terminal, so this loop need not look for one: it
            # ends refused, and is checked again below
            trans, flags = lex.trans, lex.walk_flags
            for b in data:
                if flags.item(s) == 1:
                    break  # a terminal may end here: the general loop below
                s = trans.item(s, b)
                if not s:
                    # through a state not expanded yet: again, expanding
                    return self._step_general(configs, data) if lex.left_pending else ()
            else:
                if not flags.item(s):
                    lex.ensure(s)
                return ((c, s),)
        return self._step_general(configs, data)

    def _step_general(self, configs, data: bytes):
        """:meth:`_step` where terminals may end inside the token, or from
        several configurations, expanding the lexer states it reaches."""
        lex = self.lexer
        for b in data:
            trans, flags = lex.trans, lex.walk_flags
            new = set()
            for (c, s) in configs:
                s2 = trans.item(s, b)
                if s2:
                    if not flags.item(s2):
                        lex.ensure(s2)
                        trans, flags = lex.trans, lex.walk_flags
                    new.add((c, s2))
                if flags.item(s) == 1:  # F_ENDS: a terminal may end here
                    for t in lex.accepting_terminals(s):
                        c2 = self._next(c, t)
                        if c2 < 0:
                            continue
                        l0 = self._start(c2)
                        # a new lexer automaton may have been appended
                        trans, flags = lex.trans, lex.walk_flags
                        s3 = trans.item(l0, b)
                        if s3:
                            if not flags.item(s3):
                                lex.ensure(s3)
                                trans, flags = lex.trans, lex.walk_flags
                            new.add((c2, s3))
            if not new:
                return ()
            if len(new) > 1:
                new = self._merged(new)
            configs = new
        return tuple(sorted(configs))

    def _merged(self, configs: set) -> set:
        """``configs`` with the configurations that share a lexer state made one,
        whose context is the union of theirs (:meth:`EarleyRecognizer.union`):
        the same language, and as many configurations as lexer states. Without
        it an ambiguous grammar (``a: a a | "x" | "xx"``) kept one per way of
        splitting the output so far, and each token cost more than the last."""
        by_lexer: dict = {}
        for c, s in configs:
            by_lexer.setdefault(s, []).append(c)
        if len(by_lexer) == len(configs):
            return configs
        out = set()
        for s, cs in by_lexer.items():
            if len(cs) > 1 and 0 in cs:
                # context 0 predicts the start symbol without an item for it: it
                # keeps its own configuration
                out.add((0, s))
                cs = [c for c in cs if c]
            if len(cs) > 1:
                out.add((self.parser.union(cs), s))
            else:
                out.update((c, s) for c in cs)
        return out

    def _counted_step(self, configs, data: bytes, count: bool):
        """:meth:`_step` of a grammar with token budgets (``configs`` are
        triples, see :mod:`constrain.cfg.budgets`): ``data`` is one token's
        bytes; without ``count`` no budget applies (the language of bytes) and
        every count is 0."""
        lex = self.lexer
        budgets = self._budgets
        # (context, lexer state, tokens so far, began in this token)
        cur = {(c, s, k, False) for c, s, k in configs}
        for j, b in enumerate(data):
            trans = lex.trans
            new = set()
            for (c, s, k, born) in cur:
                s2 = int(trans[s, b])
                if s2:
                    new.add((c, s2, k, born))
                if lex.has_acc[s]:
                    for t in lex.accepting_terminals(s):
                        if count and j and not born and budgets.over(t, k + 1):
                            continue  # it took bytes of this token: one too many
                        c2 = self._next(c, t)
                        if c2 < 0:
                            continue
                        l0 = self._start(c2)
                        trans = lex.trans
                        s3 = int(trans[l0, b])
                        if s3:
                            new.add((c2, s3, 0, True))
            if not new:
                return ()
            cur = self._merged_counted(new) if len(new) > 1 else new
        out = set()
        for (c, s, k, born) in cur:
            if count and budgets.counted(s):
                used = 1 if born else k + 1
                s = budgets.keep(s, used)
                if not s:
                    continue
                out.add((c, s, used if budgets.counted(s) else 0, False))
            else:
                out.add((c, s, 0, False))
        if len(out) > 1:
            out = self._merged_counted(out)
        return tuple(sorted((c, s, k) for c, s, k, _ in out))

    def _merged_counted(self, configs: set) -> set:
        """:meth:`_merged` of counted configurations: those that share a lexer
        state, a count and where they began are made one."""
        by_key: dict = {}
        for c, s, k, born in configs:
            by_key.setdefault((s, k, born), []).append(c)
        if len(by_key) == len(configs):
            return configs
        out = set()
        for (s, k, born), cs in by_key.items():
            if len(cs) > 1 and 0 in cs:
                out.add((0, s, k, born))
                cs = [c for c in cs if c]
            if len(cs) > 1:
                out.add((self.parser.union(cs), s, k, born))
            else:
                out.update((c, s, k, born) for c in cs)
        return out

    def _accepting(self, fresh: bool, configs) -> bool:
        lex = self.lexer
        tokens = self._tokens
        for cfg in configs:
            c, s = cfg[0], cfg[1]
            if (fresh or (tokens is not None and tokens.in_state(s))) and self.parser.accepts(c):
                return True
            if lex.has_acc[s]:
                for t in lex.accepting_terminals(s):
                    c2 = self._next(c, t)
                    if c2 >= 0 and self.parser.accepts(c2):
                        return True
        return False

    # -- protocol -----------------------------------------------------------------------

    def initial_state(self):
        """The state before any token."""
        return self._initial

    def check_state(self, state):
        """``state``, checked to be a state of this grammar: :data:`TERMINATED`,
        or ``(fresh, configs)`` with ``fresh`` a bool (``True`` only for the
        initial state) and ``configs`` a non-empty tuple of ``(context, lexer
        state)`` int pairs, each a context of this grammar's parser and a state
        of its lexer. Else :class:`~constrain.errors.InvalidStateError`.

        (A state of another grammar passes only if its numbers all exist here
        too: contexts and lexer states are numbered as they are made, so this
        catches what would index past the tables, not every foreign state.)"""
        width = 2 if self._budgets is None else 3
        if state.__class__ is tuple and len(state) == 2:
            fresh, configs = state
            if (fresh is False or fresh is True) and configs.__class__ is tuple and configs:
                n_lex = self.lexer.n
                n_ctx = self._n_ctx
                for cfg in configs:
                    if cfg.__class__ is tuple and len(cfg) == width:
                        if width == 3:
                            k = cfg[2]
                            if k.__class__ is not int:
                                break  # perhaps equal to an int: see below
                            if not 0 <= k <= self._budgets.largest:
                                raise self._refusal(state)
                        c, s = cfg[0], cfg[1]
                        if c.__class__ is not int or s.__class__ is not int:
                            break  # perhaps equal to ints: see below
                        if 0 <= s < n_lex:
                            if s and not self.lexer.walk_flags.item(s):
                                # made, not expanded: no step returns such a
                                # state, but a stored or forged one may name it
                                with self._lock:
                                    self.lexer.ensure(s)
                            if 0 <= c < n_ctx:
                                continue
                            # contexts only grow: count them again before refusing
                            n_ctx = self._n_ctx = self.parser.num_contexts
                            if 0 <= c < n_ctx:
                                continue
                        raise self._refusal(state)
                    break
                else:
                    # fresh is True only in the initial state
                    if fresh is False or state == self._initial:
                        return state
                    raise self._refusal(state)
            # a state equal to one of plain ints and bools (numpy integers, 1
            # for True) is that state: mask caches find it by equality
            canonical = _canonical(fresh, configs, width)
            if canonical is not None:
                return self.check_state(canonical)
        elif isinstance(state, (int, np.integer)) and not isinstance(state, (bool, np.bool_)) \
                and state == TERMINATED:
            return TERMINATED
        raise self._refusal(state)

    def _refusal(self, state) -> InvalidStateError:
        config = "(context, lexer state)" if self._budgets is None \
            else "(context, lexer state, tokens)"
        return InvalidStateError(
            f"{state!r} is not a state of {self!r} (states come from initial_state() and "
            f"advance(), and are (fresh, ({config}, ...)) or {TERMINATED})")

    def advance(self, state, token_id: int):
        """The state after ``token_id``, or ``None`` if it is not allowed."""
        if token_id.__class__ is not int or not 0 <= token_id < self._v:
            token_id = check_token_id(token_id, self._v)
        key = (state, token_id)
        try:
            out = self._advances.get(key)
        except TypeError:  # unhashable: check_state says why
            out = None
        if out is not None:
            # a state equal to a key is that state: no check needed
            if out is _REFUSED:
                return None
            if out.__class__ is tuple:
                self._last_out = out
            return out
        # the state the last call returned needs no check (a serving loop
        # advances that one); any other is checked
        if state is not self._last_out:
            state = self.check_state(state)
            if state == TERMINATED:
                return None
            key = (state, token_id)
        fresh, configs = state
        with self._lock:
            if self._tokens is not None:
                out = self._advance_with_refs(fresh, configs, token_id)
            elif not self._grammar_token[token_id]:
                out = TERMINATED if token_id in self._eos_set and \
                    self._accepting(fresh, configs) else None
            else:
                out = self._step(configs, self._token_bytes[token_id])
                out = (False, out) if out else None
        advances = self._advances
        if len(advances) >= self._max_masks:
            advances.clear()
        advances[key] = _REFUSED if out is None else out
        if out.__class__ is tuple:
            self._last_out = out
        return out

    def _advance_with_refs(self, fresh: bool, configs, token_id: int):
        """:meth:`advance` of a grammar with token references (under the lock):
        the configurations of the token's bytes and those after each reference
        that matches it whole (:mod:`constrain.cfg.token_refs`)."""
        eos = token_id in self._eos_set
        if eos and self._accepting(fresh, configs):
            return TERMINATED
        out = self._token_step(configs, token_id)
        if self._grammar_token[token_id]:
            out.update(self._step(configs, self._token_bytes[token_id]))
        if not out:
            return None
        if len(out) > 1:
            if self._budgets is None:
                out = self._merged(out)
            else:
                out = {cfg[:3] for cfg in self._merged_counted({(*cfg, False) for cfg in out})}
        out = tuple(sorted(out))
        if eos and self._accepting(False, out):
            return TERMINATED
        return (False, out)

    def _token_step(self, configs, token_id: int) -> set:
        """The configurations after the token references that match ``token_id``
        (a count of 0 with token budgets: nothing is in progress)."""
        admits = self._tokens.admits
        tail = () if self._budgets is None else (0,)
        return {(c3, self._start(c3), *tail) for ref, c3 in self._shiftable_refs(configs)
                if admits(ref, token_id)}

    def _shiftable_refs(self, configs) -> list:
        """``(reference, context after it)`` for each token reference the next
        token may match: from a configuration with no bytes yet, or after a
        terminal that ended with the token before (under the lock)."""
        tokens = self._tokens
        lex = self.lexer
        out = []
        for cfg in configs:
            c, s = cfg[0], cfg[1]
            heads = [(c, s)]
            if lex.has_acc[s]:
                for t in lex.accepting_terminals(s):
                    c2 = self._next(c, t)
                    if c2 >= 0:
                        heads.append((c2, self._start(c2)))
            for c1, s1 in heads:
                for ref in tokens.in_state(s1):
                    c3 = self._next(c1, ref)
                    if c3 >= 0:
                        out.append((ref, c3))
        return out

    def advance_bytes(self, state, data: bytes):
        """The state after the bytes ``data`` (not necessarily a token's), or
        ``None`` when no string of the language continues with them. Bytes
        never match a token reference (``<[id]>``), whose token only
        :meth:`advance` takes."""
        state = self.check_state(state)
        data = as_bytes(data)
        if state == TERMINATED:
            return None
        if not data:
            return state
        with self._lock:
            out = self._step(state[1], data)
        return (False, out) if out else None

    @property
    def byte_steps_are_tokens(self) -> bool:
        """Whether :meth:`advance_bytes` counts each call as one token: with
        ``rule[max_tokens=N]`` budgets (see :class:`~constrain.Constraint`)."""
        return self._budgets is not None

    def allowed_bytes(self, state) -> np.ndarray:
        """``[256]`` bool: the bytes that may come next -- those that continue a
        terminal in progress, or start the next one where a terminal may end
        (the same steps as :meth:`advance_bytes`; a token reference that may
        come next adds none: see :meth:`allows_token_reference`)."""
        state = self.check_state(state)
        out = np.zeros(256, dtype=np.bool_)
        if state == TERMINATED:
            return out
        lex = self.lexer
        with self._lock:
            for cfg in state[1]:
                c, s = cfg[0], cfg[1]
                out |= lex.trans[s] != 0
                if lex.has_acc[s]:
                    for t in lex.accepting_terminals(s):
                        c2 = self._next(c, t)
                        if c2 >= 0:
                            l0 = self._start(c2)
                            out |= lex.trans[l0] != 0
        return out

    def allows_token_reference(self, state) -> bool:
        """Whether a token reference (``<[id]>``, ``<|name|>``) may match the
        next token: then the bytes of :meth:`allowed_bytes` are not all that
        may follow (jump-forward stops there)."""
        state = self.check_state(state)
        if state == TERMINATED or self._tokens is None:
            return False
        with self._lock:
            return bool(self._shiftable_refs(state[1]))

    def is_accepting(self, state) -> bool:
        """Whether the bytes so far form a complete string of the language."""
        if state is not self._last_out:
            state = self.check_state(state)
            if state == TERMINATED:
                return False
        with self._lock:
            return self._accepting(*state)

    def is_terminated(self, state) -> bool:
        """Whether EOS has been generated."""
        if state is self._last_out:
            return False
        # a tuple state with a row writer was checked when the writer was made
        # (TERMINATED, an int, may have one too: it is never taken for one): a
        # serving engine asks before each fill of each request, and
        # check_state was ~1 us of every such call
        if state.__class__ is tuple:
            try:
                if state in self._writers:
                    return False
            except TypeError:  # unhashable items: check_state says why
                pass
        return self.check_state(state) == TERMINATED

    def matches(self, text) -> bool:
        """Whether ``text`` (str or UTF-8 bytes) is a complete string of the language."""
        data = text_bytes(text)
        if data is None:  # a lone surrogate: no UTF-8 text, in no language
            return False
        fresh, configs = self._initial
        with self._lock:
            if data:
                configs = self._step(configs, data) if self._budgets is None \
                    else self._counted_step(configs, data, False)
                fresh = False
                if not configs:
                    return False
            return self._accepting(fresh, configs)

    def memory_bytes(self) -> int:
        """The bytes this constraint holds, roughly: its parser's and lexer's
        tables and the mask rows it keeps, which grow as its states are
        visited (each cache bounded by ``mask_cache_bytes``), plus its
        advance and writer memos. An estimate that errs high where rows are
        shared between its caches; what its :class:`~constrain.Compiler`'s
        caches hold is theirs (:meth:`~constrain.Compiler.cache_stats`).
        Caches of compiled constraints charge it (see
        :meth:`constrain.cache.BoundedCache.remeasure`)."""
        lex = self.lexer
        rows = len(self._masks) + len(self._config_masks) + len(self._near_boundaries)
        return (lex.tables_bytes() + lex.rows_bytes(rows) + self.parser.memory_bytes()
                + self._ctx_next.nbytes + self._ctx_start.nbytes + self.terms.table.nbytes
                + _MEMO_BYTES * (len(self._advances) + len(self._writers)))

    def has_cached_mask(self, state) -> bool:
        """Whether ``state``'s mask is cached (its fill is a copy)."""
        try:
            if state in self._masks:
                return True
        except TypeError:  # unhashable: no state
            pass
        return self.check_state(state) == TERMINATED

    def fill_cached_bitmask(self, state, bitmask, row: int = 0) -> bool:
        """:meth:`fill_bitmask` when ``state``'s mask is cached; else ``False``
        and nothing written."""
        # a batch's cached row: fill_bitmask's fast path, with one writer
        # look-up (a state's hash is not cached: ~0.1 us each) and one call
        try:
            w = self._writers.get(state)
        except TypeError:  # unhashable: check_state says why
            w = None
        if w is None:
            # the state advance returned last is a tuple state, not TERMINATED
            if state is self._last_out or self.check_state(state) != TERMINATED:
                if state not in self._masks:
                    return False
        else:
            last = self._last_fill
            if bitmask is last[0] and (last[2] is None or bitmask.data_ptr() == last[2]):
                try:
                    if row.__class__ is int and row >= 0:
                        if w.__class__ is tuple:
                            w[0](last[1][row], 0, *w[1])
                        elif w.__class__ is list:  # (_fill_copying, inline)
                            last[1][row][:] = w[0]
                            if next(w[1]) == SPAN_WRITER_AFTER:
                                self._buy_span_writer(w)
                        else:
                            last[1][row][:] = w
                        return True
                except (TypeError, IndexError):
                    pass  # fill_bitmask's checks say what is wrong
        self.fill_bitmask(state, bitmask, row)
        return True

    def mask_row(self, state) -> np.ndarray:
        """The allowed tokens of ``state`` as uint32 words (cached; do not modify)."""
        masks = self._masks
        try:
            row = masks.get(state)
        except TypeError:  # unhashable: check_state says why
            row = None
        if row is not None:
            try:
                masks.move_to_end(state)
            except KeyError:  # evicted since by another thread: the row stays valid
                pass
            return row
        # the state advance returned last is one (a walk's every first visit)
        if state is not self._last_out:
            state = self.check_state(state)
            if state == TERMINATED:
                return np.zeros(self.words, dtype=np.uint32)
        return self._made_row(state)

    def _made_row(self, state) -> np.ndarray:
        """The mask of the checked ``state`` not found cached: made under the
        lock, unless another thread made it meanwhile."""
        with self._lock:
            row = self._masks.get(state)
            if row is not None:
                return row
            return self._new_mask_row(state)

    def _new_mask_row(self, state) -> np.ndarray:
        """The mask of ``state``, not cached yet (under the lock), cached.

        A state whose one configuration is inside its terminals (none ends
        there; not fresh, no token budgets or references, so no EOS) takes
        :meth:`_narrow_row` where its walk is narrow: inside a literal (no
        terminal ends inside a token either) the walk's row is its mask (kept
        in the lexer's LRU of walks, which every context shares), at a
        literal's end the boundary walk goes into that row; either way with
        none of :meth:`_config_row`'s steps between. Most first visits of a
        tool-calling schema's walk are such positions (a key's or an enum
        value's letters), so that test is inline (a call cost ~0.3 us of a
        ~7 us fill)."""
        fresh, configs = state
        row = None
        if not fresh and len(configs) == 1 and self._plain:
            c, s = configs[0]
            lex = self.lexer
            # (a bounded string's far positions share masks: _config_mask)
            if not lex.has_acc.item(s) and not (lex.terms.bounded and lex._near_bound(s) is not None):
                row = self._narrow_row(c, s)
        if row is None:
            row = self._combined_row(fresh, configs)
        self._masks[state] = row
        if len(self._masks) > self._max_masks:
            self._masks.popitem(last=False)
        return row

    def _narrow_row(self, c: int, s: int):
        """The mask of configuration ``(c, s)``, ``s`` a lexer state where no
        terminal ends, when its walk is narrow (:meth:`LexerTables.narrow_walk`),
        else ``None`` (the general path): a literal's inside is the lexer's
        walk; at a literal's end the boundary walk below the narrow walk's
        nodes goes into the same row, kept as the configuration's mask."""
        row, nodes, states = self.lexer.narrow_walk(s)
        if row is None or not len(nodes):
            return row
        self._boundaries(c, nodes, states, row)
        row.setflags(write=False)
        self._config_masks[(c, s)] = row
        while len(self._config_masks) > self._max_masks:
            self._config_masks.popitem(last=False)
        return row

    def _combined_row(self, fresh: bool, configs) -> np.ndarray:
        """The mask of a state: the OR of its configurations' masks, with EOS
        where it accepts (read-only; not cached here)."""
        accepting = self._accepting(fresh, configs)
        if self._budgets is not None:
            row = self._counted_mask(configs[0])
            if len(configs) > 1 or accepting:
                row = row.copy()
            for cfg in configs[1:]:
                row |= self._counted_mask(cfg)
        elif len(configs) == 1:
            row = self._config_mask(*configs[0])
            if accepting:
                row = self._copy(row)
        else:
            row = np.bitwise_or(self._config_mask(*configs[0]), self._config_mask(*configs[1]),
                                out=self._new_row())
            for c, s in configs[2:]:
                row |= self._config_mask(c, s)
        if accepting:
            for e in self._eos:
                row[e >> 5] |= np.uint32(1 << (int(e) & 31))
        # rows are shared between the caches (a state's row is often its one
        # configuration's): copying each cost ~1 us per first visit. A row of
        # _config_mask is read-only already (setflags: 0.13 us, half of
        # flags.writeable = False)
        if len(configs) > 1 or accepting:
            row.setflags(write=False)
        return row

    def _new_row(self) -> np.ndarray:
        """A mask row to write (not cleared), from the lexer's slabs
        (:meth:`LexerTables._new_row`: a first visit's rows were malloc's
        slow path)."""
        return self.lexer._new_row()[:self.words]

    def _copy(self, row) -> np.ndarray:
        """A writable copy of the mask row ``row`` (see :meth:`_new_row`)."""
        out = self._new_row()
        out[:] = row
        return out

    def _counted_mask(self, cfg) -> np.ndarray:
        """The mask of a counted configuration ``(c, s, k)``: the ordinary one
        far from every budget, else a budget walk's (cached)."""
        c, s, k = cfg
        if self._budgets.plain(s, k):
            return self._config_mask(c, s)
        row = self._config_masks.get(cfg)
        if row is None:
            row = self._budgets.mask(self, c, s, k)
            if self._tokens is not None:
                # the walk sees bytes: the references that may take the token whole
                for ref, _ in self._shiftable_refs((cfg,)):
                    row |= self._tokens.rows[ref]
            row.flags.writeable = False
            self._config_masks[cfg] = row
            if len(self._config_masks) > self._max_masks:
                self._config_masks.popitem(last=False)
        return row

    def _config_mask(self, c: int, s: int) -> np.ndarray:
        lex = self.lexer
        key = (c, s)
        row = self._config_masks.get(key)
        if row is not None:
            return row
        period = lex._periodic(s) if lex.terms.bounded else None
        if period is not None:
            # a bounded string's positions far from both bounds walk alike
            # (LexerTables._periodic): their masks in one context are one
            pkey = (c, period)
            row = self._config_masks.get(pkey)
            if row is None:
                row = self._config_masks[pkey] = self._config_row(c, s)
        else:
            row = self._config_row(c, s)
        self._config_masks[key] = row
        while len(self._config_masks) > self._max_masks:
            self._config_masks.popitem(last=False)
        return row

    def _config_row(self, c: int, s: int) -> np.ndarray:
        """The mask of configuration ``(c, s)`` (not cached here)."""
        lex = self.lexer
        cont, nodes, states = lex.walk(s)
        row = cont
        if self._tokens is not None:
            for ref in self._tokens.in_state(s):
                if self._next(c, ref) >= 0:
                    other = self._tokens.rows[ref]
                    if row is cont:
                        row = np.bitwise_or(cont, other, out=self._new_row())
                    else:
                        row |= other
        if lex.has_acc[s]:
            for t in lex.accepting_terminals(s):
                c2 = self._next(c, t)
                if c2 >= 0:
                    other = self._config_mask(c2, self._start(c2))
                    if row is cont:
                        row = np.bitwise_or(cont, other, out=self._new_row())
                    else:
                        row |= other
        if len(nodes):
            key = lex.near_boundary_key(s) if lex.terms.bounded else None
            if key is None:
                spare = None
                if row is cont:
                    row = spare = lex.take_spare(cont)
                    if row is None:
                        row = self._copy(cont)
                self._boundaries(c, nodes, states, row)
                if spare is not None and row.nbytes >= _PACK_MIN_BYTES:
                    # a broad walk's row (a string's body, any key), dense:
                    # its writer is a copy, with no scan for spans (6.5 us of
                    # an o200k first visit; all 194 such rows of MaskBench's
                    # 42-schema sample were dense, and one that is not is
                    # copied whole all the same, ~0.3 us slower a fill)
                    lex.walk_spans = (row, _DENSE)
            else:
                # a bounded string near its bound: one boundary walk per set of
                # nodes kept, not per position
                key = (c, *key)
                other = self._near_boundaries.get(key)
                if other is None:
                    other = self._new_row()
                    other[:] = 0
                    self._boundaries(c, nodes, states, other)
                    if len(self._near_boundaries) >= 64:
                        self._near_boundaries.clear()
                    self._near_boundaries[key] = other
                if row is cont:
                    row = np.bitwise_or(cont, other, out=self._new_row())
                else:
                    row |= other
        if row is not cont:  # a walk's row is read-only (LexerTables.walk)
            row.setflags(write=False)
        return row

    def _boundaries(self, c: int, nodes, states, row) -> None:
        lex = self.lexer
        parser = self.parser
        pairs = self._pair_scratch
        if pairs is None:
            # the walk's pairs per depth (under the lock: one walk at a time)
            shape = (self.trie.max_depth + 2, self.max_width)
            pairs = self._pair_scratch = (np.empty(shape, np.int32), np.empty(shape, np.int32))
        j = 0
        while True:
            # the walk makes the contexts and start states it meets (what
            # _next and _start would); it returns for what needs a table grown
            counts = lex.expansion_counts()
            status, a, b, j = gk.boundary_walk(
                lex.desc, parser.desc, self._ctx_next, self._ctx_start, self._ignore_bits,
                self._start_extra, counts, nodes, states, c, j, *pairs, row)
            lex.took_counts(counts)
            parser.warn_truncated()
            if status == gk.NEED_NONE:
                return
            if status == gk.NEED_EXPAND:
                lex.ensure(int(a))
                continue
            if status == gk.NEED_NEXT:
                # the walk would ask for the new context's start state next
                c2 = self._next(int(a), int(b))
                if c2 >= 0:
                    self._start(c2)
            elif status == gk.NEED_START:
                self._start(int(a))
            else:
                raise GrammarTooComplexError(
                    f"more than {self.max_width} ways to split one token between terminals "
                    f"(the grammar is very ambiguous here; pass max_width= to raise the limit)")

    def fill_bitmask(self, state, bitmask, row: int = 0) -> None:
        """Write the allowed tokens of ``state`` into row ``row`` of ``bitmask``."""
        # as DFAConstraint.fill_bitmask: the bitmask of the last call (the same
        # object, with the same memory for a tensor), a state whose writer exists
        # (it was checked when the writer was made) and a row its views have
        last = self._last_fill
        if bitmask is last[0] and (last[2] is None or bitmask.data_ptr() == last[2]):
            try:
                if row.__class__ is int and row >= 0:
                    dst = last[1][row]
                    w = self._writers.get(state)
                    if w is None:
                        # a first visit: bitmask and row are known good, so
                        # check_bitmask is skipped; mask_row checks the state
                        w = self._writer(state)
                    if w.__class__ is tuple:
                        w[0](dst, 0, *w[1])
                    elif w.__class__ is list:  # (_fill_copying, inline)
                        dst[:] = w[0]
                        if next(w[1]) == SPAN_WRITER_AFTER:
                            self._buy_span_writer(w)
                    else:
                        dst[:] = w
                    return
            except (TypeError, IndexError):
                pass  # the checks below say what is wrong
        self._fill_other(state, bitmask, row)

    def _writer(self, state):
        if len(self._writers) >= self._max_masks:
            self._writers.clear()
        # a walk's first visit to the state advance returned (checked there)
        # needs none of mask_row's look-ups before the lock: ~0.15 of a ~6 us
        # fill inside a literal
        row = self._made_row(state) if state is self._last_out else self.mask_row(state)
        # a narrow walk's row, which is the mask of a state inside a literal,
        # comes with its spans (LexerTables.walk_spans; read without the
        # lock: a tuple read whole, and spans of another row are not taken)
        hint = self.lexer.walk_spans
        spans = hint[1] if hint[0] is row else None
        if row.nbytes >= _PACK_MIN_BYTES and (spans is None or spans[0] >= 0):
            # a wide row's first fills copy it (_fill_copying)
            w = [memoryview(row).cast("B"), itertools.count(1), row, spans, state]
        else:
            w = mask_writer(row, spans)
        self._writers[state] = w
        return w

    def _fill_copying(self, w: list, dst) -> None:
        """Fill ``dst`` with a wide row's first writer ``w``, ``[row as bytes,
        fills counter, row, its spans or None, state]``: a copy of the row
        and, on its :data:`SPAN_WRITER_AFTER`-th fill, the state's span writer
        (:func:`~constrain.regular.token_automaton.mask_writer`) put in its
        place.

        A span writer fills a 25 KB o200k row in ~0.3 us against ~0.55 for a
        copy, but making it (a scan of the row for its spans, a ``struct``
        format) cost ~5 us of a first visit's ~15 at the first-walk median
        (MaskBench, o200k), and most states of a first walk are filled once
        or twice: it is bought once the copies have cost about as much as
        making it (ski rental: at most twice the better choice made in
        hindsight). Concurrent fills may both make it (either is kept); one
        made after the writers were cleared is not put back."""
        dst[:] = w[0]
        if next(w[1]) == SPAN_WRITER_AFTER:
            self._buy_span_writer(w)

    def _buy_span_writer(self, w: list) -> None:
        """Put the span writer of :meth:`_fill_copying`'s ``w`` in its place."""
        writers = self._writers
        if writers.get(w[4]) is w:
            writers[w[4]] = mask_writer(w[2], w[3])

    def _fill_other(self, state, bitmask, row) -> None:
        state = self.check_state(state)
        target, row = check_bitmask(bitmask, self.words, row)
        rows = target[2]
        if rows is not None and target.width == self.words:
            w = self._writers.get(state)
            if w is None:
                w = self._writer(state)
            self._last_fill = (bitmask, rows, target[3])
            if w.__class__ is tuple:
                w[0](rows[row], 0, *w[1])
            elif w.__class__ is list:
                self._fill_copying(w, rows[row])
            else:
                rows[row][:] = w
            return
        # a wider bitmask, a tensor on a GPU
        write_row(target, row, self.mask_row(state))

    def allowed_token_ids(self, state) -> np.ndarray:
        """The allowed token ids of ``state`` (EOS included when accepting), sorted."""
        from constrain.automata.bits import bits_to_ids

        return bits_to_ids(self.mask_row(state), len(self.vocab))


#: the attributes a GrammarConstraint sets itself (pickling keeps the others)
_OWN_ATTRIBUTES = frozenset({
    "vocab", "ir", "source", "compiler", "trie", "words", "terms", "parser", "lexer",
    "max_width", "_ignore", "_ignore_bits", "_eos", "_eos_set", "_v", "_grammar_token",
    "_token_bytes", "_writers", "_advances", "_last_fill", "_max_masks", "_lock", "_ctx_next", "_start_of",
    "_ctx_start", "_ctx_cap", "_masks", "_config_masks", "_near_boundaries", "_initial",
    "_last_out", "_n_ctx", "_plain", "_pair_scratch",
    "_budgets", "_tokens", "_start_extra"})


#: the fill on which a wide row's first writer makes its span writer
#: (:meth:`GrammarConstraint._fill_copying`)
SPAN_WRITER_AFTER = 16


def _ir_to_json(ir: GrammarIR) -> dict:
    """``ir`` as JSON values (exclusion prefixes in hex)."""
    return {"terminals": [[t.name, t.pattern, t.flags, t.literal] for t in ir.terminals],
            "nonterminals": list(ir.nonterminals),
            "rules": [[lhs, list(rhs)] for lhs, rhs in ir.rules],
            "start": ir.start, "ignore": list(ir.ignore), "source": ir.source,
            "exclusions": {name: [pattern, [p.hex() for p in prefixes]]
                           for name, (pattern, prefixes) in ir.exclusions.items()},
            "productive": ir.productive,
            "budgets": [[t, n] for t, n in sorted(ir.budgets.items())],
            "tokens": [[t, [list(r) for r in ref.ids], list(ref.names), ref.negated, ref.line,
                        ref.column] for t, ref in sorted(ir.tokens.items())]}


def _ir_from_json(d: dict) -> GrammarIR:
    """The :class:`GrammarIR` of :func:`_ir_to_json`'s ``d``; ``ValueError``
    (or ``TypeError``) when it is not one."""
    n_t = len(d["terminals"])
    terminals = []
    for name, pattern, flags, literal in d["terminals"]:
        if not (isinstance(name, str) and isinstance(pattern, str) and type(flags) is int
                and (literal is None or isinstance(literal, str))):
            raise ValueError("a terminal is malformed")
        terminals.append(Terminal(name, pattern, flags, literal))
    nonterminals = tuple(d["nonterminals"])
    n_sym = n_t + len(nonterminals)
    rules = tuple((lhs, tuple(rhs)) for lhs, rhs in d["rules"])
    start, ignore = d["start"], tuple(d["ignore"])
    if not (all(isinstance(x, str) for x in nonterminals)
            and all(type(lhs) is int and 0 <= lhs < len(nonterminals)
                    and all(type(x) is int and 0 <= x < n_sym for x in rhs) for lhs, rhs in rules)
            and type(start) is int and 0 <= start < len(nonterminals)
            and all(type(t) is int and 0 <= t < n_t for t in ignore)
            and isinstance(d["source"], str) and type(d["productive"]) is bool):
        raise ValueError("the grammar is malformed")
    exclusions = {name: (pattern, tuple(bytes.fromhex(p) for p in prefixes))
                  for name, (pattern, prefixes) in d["exclusions"].items()}
    budgets = {}
    for t, n in d.get("budgets", ()):
        if not (type(t) is int and 0 <= t < n_t and type(n) is int and n >= 1):
            raise ValueError("a token budget is malformed")
        budgets[t] = n
    tokens = {}
    for t, ids, names, negated, line, column in d.get("tokens", ()):
        if not (type(t) is int and 0 <= t < n_t and type(negated) is bool
                and all(len(r) == 2 and all(type(x) is int for x in r) for r in ids)
                and all(isinstance(x, str) for x in names)
                and all(x is None or type(x) is int for x in (line, column))):
            raise ValueError("a token reference is malformed")
        tokens[t] = TokenRef(tuple(map(tuple, ids)), tuple(names), negated, line, column)
    return GrammarIR(tuple(terminals), nonterminals, rules, start, ignore, d["source"],
                     exclusions, d["productive"], budgets, tokens)


def _compiler_for(vocab: Vocabulary, compiler: Compiler | None) -> Compiler:
    """``compiler``, checked to be for ``vocab``; by default the vocabulary's
    default compiler."""
    if compiler is None:
        # here, not at the top: the compiler module builds on this one
        from constrain.compiler import default_compiler

        return default_compiler(vocab)
    if compiler.vocab is not vocab and compiler.vocab != vocab:
        raise ConstraintError(f"the compiler is for the vocabulary {compiler.vocab.name}, "
                              f"not {vocab.name}")
    return compiler


def _canonical(fresh, configs, width: int):
    """``(fresh, configs)`` rebuilt of plain bools and ints when every value
    equals one (``1.0``, ``np.int64(3)``, ``1`` for ``True``) and every
    configuration has ``width`` of them, else ``None``."""
    if configs.__class__ is not tuple or not configs:
        return None
    try:
        if fresh.__hash__ is None or not (fresh == True or fresh == False):  # noqa: E712
            return None
        out = []
        for cfg in configs:
            if cfg.__class__ is not tuple or len(cfg) != width:
                return None
            pair = []
            for x in cfg:
                if x.__hash__ is None or isinstance(x, (str, bytes)):
                    return None
                i = int(x)
                if not i == x:
                    return None
                pair.append(i)
            out.append(tuple(pair))
    except (TypeError, ValueError, OverflowError):
        return None
    return (bool(fresh == True), tuple(out))  # noqa: E712


def compile_grammar(source, vocab: Vocabulary, start: str | None = None, *,
                    format: str | None = None,
                    max_states: int = _DEFAULT.max_states,
                    time_budget: float = _DEFAULT.time_budget,
                    max_contexts: int = _DEFAULT.max_contexts, max_width: int = _DEFAULT.max_width,
                    mask_cache_bytes: int = _DEFAULT.mask_cache_bytes,
                    max_items: int = _DEFAULT.max_items,
                    max_repeat: int = _DEFAULT.max_repeat,
                    max_positions: int = _DEFAULT.max_positions) -> GrammarConstraint:
    """Compile a context-free grammar in Lark (or GBNF) syntax into a token-level
    constraint.

    The language is what ``lark.Lark(text, parser="earley",
    lexer="dynamic_complete", start=start)`` accepts (see the module docstring and
    ``docs/grammars.md``). Any context-free grammar works: ambiguous and
    left-recursive ones included. A GBNF grammar (llama.cpp's format) denotes
    what llama.cpp's grammar sampler accepts (``docs/gbnf.md``).

    Args:
        source: the grammar text, or a path to a ``.lark`` file (``%import`` of
            files next to it works; ``%import common.X`` always does) or a
            ``.gbnf`` file.
        vocab: the tokenizer's vocabulary.
        start: the start rule (default ``start`` for Lark, ``root`` for GBNF).
        format: ``"lark"``, ``"gbnf"``, or ``None``: GBNF when the text has a
            ``name ::=`` rule head or the path ends in ``.gbnf``, else Lark.
        max_states: size limit of one terminal's automaton (the lexer automata
            together may use eight times as many states).
        time_budget: seconds compilation may take.
        max_contexts: limit on distinct parser chart columns (memory bound of a
            long-running server).
        max_width: limit on the ways one token may be split between terminals.
        mask_cache_bytes: memory for cached masks.
        max_items: the parse items (partial parses) one position of the output
            keeps, which bounds the work of a token. Only very ambiguous
            grammars reach it (``a: a a | "x"``, whose items grow with the
            output); there a position keeps a subset of its items: every token
            allowed is still allowed by the grammar (sound), but some valid
            continuations may be refused (``grammar.parser.truncated_columns``
            counts the positions cut).
        max_repeat: the largest count of a counted repetition ``{m,n}`` in a
            terminal's regex (Lark) or a rule (GBNF).
        max_positions: the most character positions a terminal's regex may
            expand to, its counted repetitions unrolled (a GBNF rule's regular
            parts are such regexes).

    The budgets override those of the vocabulary's default compiler
    (:func:`constrain.compiler.default_compiler`), whose caches the grammar
    shares; :meth:`constrain.Compiler.compile_grammar` is the same with a
    compiler of your own.

    Raises:
        GrammarError: bad grammar, with line and column where lark gives them
            (:class:`~constrain.errors.GrammarSyntaxError` for GBNF syntax).
        GrammarTooComplexError: a limit was exceeded.
        InvalidLimitError: a budget is not a positive number.
        ConstraintError: ``format`` is none of the above.
    """
    # here, not at the top: the compiler module builds on this one
    from constrain.compiler import default_compiler

    return default_compiler(vocab).compile_grammar(
        source, start, format=format, max_states=max_states, time_budget=time_budget,
        max_contexts=max_contexts, max_width=max_width, mask_cache_bytes=mask_cache_bytes,
        max_items=max_items, max_repeat=max_repeat, max_positions=max_positions)


__all__ = ["GrammarConstraint", "compile_grammar", "TERMINATED"]
