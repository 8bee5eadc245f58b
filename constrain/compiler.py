"""``Compiler``: compiles constraints over one vocabulary, and owns every cache
its compiles share.

Like xgrammar's ``GrammarCompiler``: one per vocabulary (or several, to keep
two workloads' caches apart), safe to share between threads, each of its caches
a :class:`~constrain.cache.BoundedCache` with a share of ``cache_bytes``:

* ``terminal_automata``: the byte DFA of each grammar terminal, by pattern and
  alphabet (JSON Schemas reuse the same few: strings, numbers, punctuation);
* ``terminal_ids``: an id per terminal automaton, which names lexer states
  across grammars; ids are never reused, not even after :meth:`Compiler.clear`,
  so a grammar compiled before a clear never meets a newer one's states;
* ``lexer_walks``: the walk of the token trie of each lexer state (a mask row
  and its boundary nodes), shared by the grammars that have that state;
* ``schema_caches`` (a :class:`~constrain.frontends.json_schema.caches.SchemaCaches`):
  the JSON Schema translator's exclusion ids (the stand-in names of "any key
  but these") and ``multipleOf`` tables (up to 10 MB each), in use during
  this compiler's compiles.

The vocabulary's token trie is the vocabulary's own (built once, kept on it).
Compiled constraints keep what they use: they stay correct, and keep working,
after :meth:`Compiler.clear` and ``constrain.clear_caches()``.

With ``cache_dir``, compiled constraints also outlive the process: each
compile is looked up in that folder first (a :class:`~constrain.persist.DiskCache`,
keyed by the inputs, the vocabulary and the Trellis version) and written there
after a miss; see ``docs/persistence.md``.

The module-level ``constrain.compile_regex``, ``compile_grammar`` and
``compile_json_schema`` compile with :func:`default_compiler`, one per
vocabulary, made on first use.
"""

from __future__ import annotations

import itertools
from pathlib import Path

from constrain.cache import BoundedCache, CacheStats, check_budget, registry
from constrain.cfg.grammar import GrammarConstraint
from constrain.cfg.lexer import automaton_bytes, terminal_id_bytes, walk_bytes
from constrain.errors import ConstraintError, GrammarTooComplexError, too_complex_at
from constrain.frontends.json_schema import compile_json_schema as _json_schema_front_end
from constrain.frontends.json_schema.caches import SchemaCaches
from constrain.frontends.gbnf import load_gbnf_grammar_located, looks_like_gbnf
from constrain.frontends.lark import load_lark_grammar
from constrain.limits import Limits
from constrain.automata.deadline import Deadline, passed
from constrain.persist import DiskCache, grammar_spec, regex_spec, schema_spec
from constrain.automata.regex_syntax import check_flags
from constrain.regular.regex import DFAConstraint, regex_byte_dfa
from constrain.vocab.trie import TokenTrie
from constrain.vocab.vocabulary import Vocabulary

#: the default ``cache_bytes`` of a compiler
DEFAULT_CACHE_BYTES = 640 * 1024 * 1024
# the share of cache_bytes of each cache: a walk holds a mask row (V/8 bytes:
# 6 kB for SmolLM2, 25 kB for o200k) per lexer state, and a server meets
# thousands of states; an automaton is a few kB, an id a few hundred bytes; a
# float multipleOf table up to 10 MB (32 MiB of the default: three of them)
_WALKS, _AUTOMATA, _IDS, _EXCLUSION_IDS, _TABLES = 0.75, 0.15, 0.04, 0.01, 0.05
_LIMIT_FIELDS = frozenset(Limits.__dataclass_fields__)


def _grammar_budgets(limits: Limits) -> dict:
    """The fields of ``limits`` a grammar reads, as :class:`GrammarConstraint`
    takes them."""
    return {"max_states": limits.max_states, "max_repeat": limits.max_repeat,
            "max_positions": limits.max_positions,
            "time_budget": limits.time_budget,
            "max_contexts": limits.max_contexts, "max_width": limits.max_width,
            "mask_cache_bytes": limits.mask_cache_bytes, "max_items": limits.max_items}


def _budgets_left(limits: Limits, deadline) -> dict:
    """:func:`_grammar_budgets` with the time ``deadline`` leaves (loading
    the grammar took the rest)."""
    budgets = _grammar_budgets(limits)
    budgets["time_budget"] = max(deadline.remaining(), 1e-9)
    return budgets


class Compiler:
    """Compiles regexes, Lark grammars and JSON Schemas over ``vocab``, with the
    budgets ``limits`` (default :class:`~constrain.Limits`) and the caches
    described in :mod:`constrain.compiler`, ``cache_bytes`` in all.

    Each ``compile_*`` method takes the same arguments as the module-level
    function of its name (less the vocabulary); budgets given there override
    the compiler's ``limits`` for that call.

    ``cache_dir``: a folder (made if missing) where compiled constraints are
    kept across processes (``disk_cache``, a :class:`~constrain.persist.DiskCache`):
    a compile loads its entry when there is a valid one, else compiles and
    writes it. Entries that are corrupt or stale are ignored and rewritten;
    threads and processes may share the folder.
    """

    def __init__(self, vocab: Vocabulary, *, limits: Limits | None = None,
                 cache_bytes: int = DEFAULT_CACHE_BYTES, cache_dir=None):
        if not isinstance(vocab, Vocabulary):
            raise ConstraintError(f"vocab must be a constrain.Vocabulary, not {type(vocab).__name__}")
        if limits is None:
            limits = Limits()
        elif not isinstance(limits, Limits):
            raise ConstraintError(f"limits must be a constrain.Limits, not {type(limits).__name__}")
        cache_bytes = check_budget("cache_bytes", cache_bytes)
        self.vocab = vocab
        self.limits = limits
        self.cache_bytes = cache_bytes
        self.terminal_automata = BoundedCache("terminal automata", max(1, int(cache_bytes * _AUTOMATA)),
                                              sizeof=automaton_bytes)
        self.terminal_ids = BoundedCache("terminal ids", max(1, int(cache_bytes * _IDS)),
                                         sizeof=terminal_id_bytes)
        self.lexer_walks = BoundedCache("lexer walks", max(1, int(cache_bytes * _WALKS)),
                                        sizeof=walk_bytes)
        self.schema_caches = SchemaCaches(max(1, int(cache_bytes * _EXCLUSION_IDS)),
                                          max(1, int(cache_bytes * _TABLES)))
        self._next_id = itertools.count().__next__
        # (limits, the grammar budgets of those limits): made once, not per compile
        self._budgets = (limits, _grammar_budgets(limits))
        #: the on-disk cache of ``cache_dir``, or ``None``
        self.disk_cache = None if cache_dir is None else DiskCache(cache_dir)
        registry.add_compiler(self)

    def __repr__(self) -> str:
        disk = "" if self.disk_cache is None else f", cache_dir={str(self.disk_cache.directory)!r}"
        return f"Compiler(vocab={self.vocab.name}, cache_bytes={self.cache_bytes}{disk})"

    def _cached(self, kind: str, spec, build, *, schemas: bool = True):
        """``build()`` with this compiler's :attr:`schema_caches` in use (unless
        not ``schemas``), through the disk cache when there is one (``spec``: a
        function of no arguments that gives the key's inputs)."""
        run = (lambda: self.schema_caches.run(build)) if schemas else build
        if self.disk_cache is None:
            return run()
        return self.disk_cache.get_or_compile(kind, spec, self.vocab, self, run)

    @property
    def trie(self) -> TokenTrie:
        """The vocabulary's token trie (built on first use, kept by the vocabulary)."""
        return TokenTrie.of(self.vocab)

    def terminal_id(self, key: tuple) -> int:
        """The id of the terminal automaton ``key``
        (:func:`constrain.cfg.lexer.terminal_key`): the same while the key is
        cached, and never one given to another key."""
        return self.terminal_ids.get_or_make_each((key,), self._next_id)[0]

    def terminal_ids_of(self, keys) -> list[int]:
        """:meth:`terminal_id` of each of ``keys`` (one pass over the cache)."""
        return self.terminal_ids.get_or_make_each(keys, self._next_id)

    def _limits(self, overrides: dict) -> Limits:
        return self.limits.replace(**overrides) if overrides else self.limits

    def compile_regex(self, pattern: str, *, flags: int = 0, **overrides) -> DFAConstraint:
        """:func:`constrain.compile_regex` over this compiler's vocabulary;
        ``overrides``: fields of :class:`~constrain.Limits`."""
        flags = check_flags(flags)
        limits = self._limits(overrides)

        def build():
            # one deadline for both phases: the automaton and the token masks
            deadline = Deadline.after(limits.time_budget)
            dfa = regex_byte_dfa(pattern, self.trie.alphabet, flags=flags,
                                 max_repeat=limits.max_repeat, max_positions=limits.max_positions,
                                 max_states=limits.max_states, deadline=deadline)
            return DFAConstraint(dfa, self.vocab, source=pattern,
                                 max_mask_bytes=limits.max_mask_bytes, deadline=deadline)

        # a regex translates no schema (entering their context costs ~15 us cold)
        return self._cached("regex", lambda: regex_spec(pattern, flags, limits), build,
                            schemas=False)

    def compile_grammar(self, source, start: str | None = None, *, format: str | None = None,
                        **overrides) -> GrammarConstraint:
        """:func:`constrain.compile_grammar` over this compiler's vocabulary;
        ``overrides``: fields of :class:`~constrain.Limits`."""
        limits = self._limits(overrides)
        fmt = grammar_format(source, format)

        def build():
            # loading is under the same time budget: what it leaves goes on
            deadline = Deadline.after(limits.time_budget)
            if fmt != "gbnf":
                ir = load_lark_grammar(source, start="start" if start is None else start,
                                       deadline=deadline, max_repeat=limits.max_repeat,
                                       max_positions=limits.max_positions)
                return GrammarConstraint(ir, self.vocab, source=ir.source, compiler=self,
                                         **_budgets_left(limits, deadline))
            split: frozenset = frozenset()
            while True:
                ir, located = load_gbnf_grammar_located(
                    source, start="root" if start is None else start, deadline=deadline,
                    max_repeat=limits.max_repeat, split_rules=split)
                try:
                    return GrammarConstraint(ir, self.vocab, source=ir.source, compiler=self,
                                             **_budgets_left(limits, deadline))
                except GrammarTooComplexError as e:
                    terminal = getattr(e, "terminal", None)
                    at = located.get(terminal) if terminal else None
                    if at is None:
                        raise
                    budgeted = any(ir.terminals[t].name == terminal for t in ir.budgets)
                    if at[0] not in split and not budgeted and not passed(deadline):
                        # a GBNF author wrote no lexer: a run too large as one
                        # automaton is the same language as rules (a budgeted
                        # rule is one terminal)
                        split |= {at[0]}
                        continue
                    # told at the rule, not by the generated terminal's regex
                    raise too_complex_at(f"rule {at[0]!r}: {e.detail}", at[1], at[2]) from None

        return self._cached("grammar", lambda: grammar_spec(source, start, fmt, limits), build)

    def compile_json_schema(self, schema, **options) -> GrammarConstraint:
        """:func:`constrain.compile_json_schema` over this compiler's vocabulary;
        ``options``: the schema options (``whitespace``, ``strict``, ...) and
        fields of :class:`~constrain.Limits`."""
        overrides = {k: options.pop(k) for k in list(options) if k in _LIMIT_FIELDS} \
            if options else None
        limits = self.limits.replace(**overrides) if overrides else self.limits
        budgets = self._budgets
        if budgets[0] is not limits:
            budgets = (limits, _grammar_budgets(limits))
            if not overrides:
                self._budgets = budgets
        if self.disk_cache is None:
            # no closures on this path: each new function object and frame
            # was ~1 us of a small schema's cold compile
            return self.schema_caches.run(_json_schema_front_end, schema, self.vocab,
                                          compiler=self, **budgets[1], **options)

        def build():
            return _json_schema_front_end(schema, self.vocab, compiler=self, **budgets[1],
                                          **options)

        return self._cached("json_schema", lambda: schema_spec(schema, options, limits), build)

    def clear(self) -> None:
        """Empty this compiler's caches. What it compiled keeps working; ids
        given before are not given again."""
        for cache in self._caches():
            cache.clear()

    def cache_stats(self) -> dict[str, CacheStats]:
        """The :class:`~constrain.cache.CacheStats` of each cache, by name."""
        return {cache.name: cache.stats() for cache in self._caches()}

    def _caches(self) -> tuple[BoundedCache, ...]:
        return (self.terminal_automata, self.terminal_ids, self.lexer_walks,
                *self.schema_caches.caches())


def grammar_format(source, format: str | None) -> str:
    """``"lark"`` or ``"gbnf"``: ``format`` checked, or (``None``) told from
    ``source``: a ``.gbnf`` path, or text with a ``name ::=`` rule head, is GBNF."""
    if format is not None:
        if format not in ("lark", "gbnf"):
            raise ConstraintError(f"format must be 'lark', 'gbnf' or None, not {format!r}")
        return format
    if isinstance(source, Path):
        return "gbnf" if source.suffix == ".gbnf" else "lark"
    if isinstance(source, str):
        if "\n" not in source and source.endswith(".gbnf"):
            return "gbnf"
        if looks_like_gbnf(source):
            return "gbnf"
    return "lark"


def default_compiler(vocab: Vocabulary) -> Compiler:
    """The compiler of the module-level ``compile_*`` functions for ``vocab``:
    default :class:`~constrain.Limits` and ``cache_bytes``, made on first use
    and kept by the vocabulary (one per vocabulary object, gone with it; two
    threads asking at once get the same one)."""
    if not isinstance(vocab, Vocabulary):
        raise ConstraintError(f"vocab must be a constrain.Vocabulary, not {type(vocab).__name__}")
    return vocab.derived("compiler", lambda: Compiler(vocab))


def compile_json_schema(schema, vocab: Vocabulary, **options) -> GrammarConstraint:
    """Compile a JSON Schema (a dict, JSON text or a Pydantic model class) into a
    token-level constraint over ``vocab``, with its :func:`default_compiler`.

    ``options`` may hold ``whitespace``, ``max_whitespace``, ``strict``,
    ``max_string_length`` and ``max_array_length`` (see
    :func:`constrain.json_schema_to_lark`) and the budgets
    :func:`constrain.compile_grammar` takes; ``time_budget`` (seconds, default
    30) bounds the translation and the grammar compilation together. See
    ``docs/json_schema.md`` for the language.
    """
    return default_compiler(vocab).compile_json_schema(schema, **options)


__all__ = ["Compiler", "default_compiler", "compile_json_schema", "grammar_format",
           "DEFAULT_CACHE_BYTES"]
