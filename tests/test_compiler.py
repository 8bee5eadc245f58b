"""constrain.Compiler owns every cache compiles share, each bounded; Limits holds
every budget; clear() and clear_caches() empty everything while compiled
constraints stay correct; one compiler is safe to share between threads."""

from __future__ import annotations

import functools
import gc
import itertools
import math
import sys
import threading

import numpy as np
import pytest

import constrain
from constrain import (Compiler, ConstraintError, GrammarTooComplexError, InvalidLimitError,
                       Limits, Vocabulary, allocate_bitmask, default_compiler)
from constrain.automata.char_dfa import DEFAULT_MAX_STATES
from constrain.automata.regex_syntax import MAX_POSITIONS, MAX_REPEAT
from constrain.cache import ENTRY_OVERHEAD, BoundedCache, registry
from constrain.frontends.json_schema.compiler import json_schema_ir
from constrain.regular.token_automaton import DEFAULT_MAX_MASK_BYTES


def _vocab(name: str = "compiler-test") -> Vocabulary:
    """Every byte, every pair of a few JSON and grammar bytes (tokens that
    straddle terminals), and EOS."""
    pairs = [a + b for a, b in itertools.product([bytes([c]) for c in b'ab1"{}:,x'], repeat=2)]
    tokens = [bytes([b]) for b in range(256)] + pairs + [b'{"', b'":"', b'"}', b"<eos>"]
    return Vocabulary.from_tokens(tokens, eos_token_ids=[len(tokens) - 1], name=name)


@pytest.fixture(scope="module")
def vocab() -> Vocabulary:
    return _vocab()


def _encode(vocab: Vocabulary, text: str) -> list[int]:
    """``text`` as the longest tokens first."""
    ids = {vocab.token_bytes(i): i for i in range(len(vocab)) if vocab.grammar_token_mask[i]}
    longest = max(map(len, ids))
    data, out, i = text.encode(), [], 0
    while i < len(data):
        n = next(n for n in range(min(longest, len(data) - i), 0, -1) if data[i:i + n] in ids)
        out.append(ids[data[i:i + n]])
        i += n
    return out


def _masks(constraint, vocab: Vocabulary, text: str, bitmask=None) -> list[bytes]:
    """The mask before each token of ``text`` and after the last, and whether it
    is accepted at the end."""
    bm = allocate_bitmask(1, len(vocab), backend="numpy") if bitmask is None else bitmask
    state, out = constraint.initial_state(), []
    for tok in _encode(vocab, text):
        constraint.fill_bitmask(state, bm, 0)
        out.append(bm[0].tobytes())
        state = constraint.advance(state, tok)
        assert state is not None, (text, tok)
    constraint.fill_bitmask(state, bm, 0)
    out.append(bm[0].tobytes())
    assert constraint.is_accepting(state), text
    return out


def _job(seed: int, k: int):
    """Three constraints to compile and a valid text of each; distinct per
    ``seed``, so that concurrent jobs fill their caches with different entries
    and evict each other's."""
    name = f"k{seed}"
    # "o" has an exclusion terminal (any key but z<seed>); "m" a multipleOf
    # table, only for k == 0 (a table is 10 MB: a tiny cache rebuilds it)
    table = {"m": {"type": "number", "multipleOf": 0.25}} if k == 0 else {}
    schema = {"type": "object", "properties": {name: {"type": "string", "maxLength": 3 + k % 4},
                                               "n": {"type": "integer"},
                                               "b": {"enum": ["ab", "x1"]},
                                               "o": {"type": "object",
                                                     "properties": {f"z{seed}": {"type": "integer"}}},
                                               **table},
              "required": [name, "n"], "additionalProperties": False}
    grammar = (f'start: "{seed % 10}" item ("," item)*\n'
               f'item: NAME | NUM\n'
               f'NAME: /[ab]{{1,{2 + k % 5}}}x?/\n'
               f'NUM: /1[0-9]*/\n')
    return [("regex", rf"(ab|x){{1,{2 + k % 3}}}[0-9]+{seed % 10}", f"abx12{seed % 10}"),
            ("schema", schema, f'{{"{name}":"ab","n":{seed},"b":"x1"}}'),
            ("grammar", grammar, f"{seed % 10}ab,1{k},bbx")]


def _compile(compiler: Compiler, kind: str, source):
    if kind == "regex":
        return compiler.compile_regex(source)
    if kind == "schema":
        return compiler.compile_json_schema(source)
    return compiler.compile_grammar(source)


def _run_jobs(compiler: Compiler, vocab: Vocabulary, seeds) -> dict:
    out = {}
    for seed, k in seeds:
        for kind, source, text in _job(seed, k):
            out[(seed, k, kind)] = _masks(_compile(compiler, kind, source), vocab, text)
    return out


# -- Limits ------------------------------------------------------------------------------

def test_limits_defaults_are_the_compile_functions_defaults():
    limits = Limits()
    assert (limits.max_repeat, limits.max_positions, limits.max_states) == \
        (MAX_REPEAT, MAX_POSITIONS, DEFAULT_MAX_STATES)
    assert limits.max_mask_bytes == DEFAULT_MAX_MASK_BYTES
    assert (limits.time_budget, limits.max_contexts, limits.max_width,
            limits.mask_cache_bytes) == (30.0, 2_000_000, 256, 256 * 1024 * 1024)
    with pytest.raises(AttributeError):
        limits.max_states = 5  # frozen


@pytest.mark.parametrize("field", list(Limits.__dataclass_fields__))
@pytest.mark.parametrize("bad", [0, -1, float("nan"), True, False, "10", None, -math.inf])
def test_limits_refuse_what_is_no_budget(field, bad):
    with pytest.raises(InvalidLimitError) as info:
        Limits(**{field: bad})
    assert info.value.field == field and field in str(info.value)
    assert isinstance(info.value, ConstraintError)


def test_limits_counts_are_integers_and_time_is_seconds():
    with pytest.raises(InvalidLimitError, match="max_states"):
        Limits(max_states=1.5)
    limits = Limits(max_states=np.int64(7), time_budget=2, max_width=np.int32(3))
    assert type(limits.max_states) is int and type(limits.max_width) is int
    assert type(limits.time_budget) is float
    assert Limits(time_budget=math.inf).time_budget == math.inf


def test_limits_replace():
    limits = Limits(max_width=1)
    assert limits.replace() is limits
    assert limits.replace(max_width=1, max_states=DEFAULT_MAX_STATES) is limits
    assert limits.replace(max_width=2).max_width == 2 and limits.max_width == 1
    with pytest.raises(InvalidLimitError, match="max_width"):
        limits.replace(max_width=True)  # equal to 1, but no budget
    with pytest.raises(InvalidLimitError, match="time_budget"):
        limits.replace(time_budget=float("nan"))
    with pytest.raises(TypeError, match="max_stats"):
        limits.replace(max_stats=5)


def test_compile_functions_check_their_budgets(vocab):
    with pytest.raises(InvalidLimitError, match="max_states"):
        constrain.compile_regex("a+", vocab, max_states=0)
    with pytest.raises(InvalidLimitError, match="max_width"):
        constrain.compile_grammar('start: "a"', vocab, max_width=-1)
    with pytest.raises(InvalidLimitError, match="max_contexts"):
        constrain.compile_json_schema({"type": "integer"}, vocab, max_contexts=float("nan"))
    with pytest.raises(InvalidLimitError, match="cache_bytes"):
        Compiler(vocab, cache_bytes=0)
    with pytest.raises(ConstraintError, match="Limits"):
        Compiler(vocab, limits={"max_states": 10})
    with pytest.raises(ConstraintError, match="Vocabulary"):
        Compiler([b"a"])


def test_compiler_limits_and_overrides(vocab):
    small = Compiler(vocab, limits=Limits(max_states=20))
    with pytest.raises(GrammarTooComplexError, match="max_states"):
        small.compile_regex(r"[ab]*a[ab]{6}")
    assert small.compile_regex(r"[ab]*a[ab]{6}", max_states=1000).matches("ba" + "b" * 6)
    with pytest.raises(GrammarTooComplexError, match="max_states"):
        small.compile_grammar(r'start: /[ab]*a[ab]{6}/')
    with pytest.raises(GrammarTooComplexError, match="time budget"):
        Compiler(vocab, limits=Limits(time_budget=1e-9)).compile_regex(r"[ab]*a[ab]{14}")
    g = small.compile_json_schema({"type": "string", "maxLength": 2}, max_states=1000,
                                  whitespace="compact")
    assert g.matches('"ab"') and not g.matches('"abc"')
    with pytest.raises(TypeError):
        small.compile_regex("a", max_stats=10)


# -- BoundedCache ------------------------------------------------------------------------

def _unit_cache(max_bytes: int, max_entries=None) -> BoundedCache:
    return BoundedCache("t", max_bytes, max_entries=max_entries,
                        sizeof=lambda key, value: value - ENTRY_OVERHEAD)


def test_bounded_cache_evicts_least_recently_used_by_bytes_and_entries():
    c = _unit_cache(1000)
    for k in "abc":
        c.put(k, 400)  # each entry costs 400 bytes, overhead included
    assert len(c) == 2 and c.get("a") is None and c.stats().bytes == 800
    assert c.get("b") == 400  # b is now the most recent: c goes next
    c.put("d", 400)
    assert c.get("c") is None and c.get("b") == 400 and c.get("d") == 400
    c.put("huge", 2000)  # more than the whole budget: returned, not kept
    assert c.get("huge") is None and len(c) == 2
    s = c.stats()
    assert (s.entries, s.bytes, s.max_bytes) == (2, 800, 1000) and s.evictions == 3
    by_count = _unit_cache(10 ** 6, max_entries=3)
    for k in range(10):
        by_count.put(k, 200)
    assert sorted(by_count._items) == [7, 8, 9]


def test_bounded_cache_first_writer_wins_and_builds_outside_the_lock():
    c = BoundedCache("t", 10 ** 6)
    assert c.setdefault("k", 1) == 1 and c.setdefault("k", 2) == 1
    assert c.put("k", 3) == 3 and c.get("k") == 3
    calls = []

    def build():
        # the lock is free while building: another thread's get would not wait
        assert c._lock.acquire(blocking=False)
        c._lock.release()
        calls.append(1)
        return "v"

    assert c.get_or_build("new", build) == "v" and c.get_or_build("new", build) == "v"
    assert calls == [1]
    assert c.get("missing", "default") == "default"
    c.put("none", None)  # None is a value like another
    assert c.get("none", "default") is None
    s = c.stats()
    assert s.hits >= 3 and s.misses >= 2
    c.clear()
    assert len(c) == 0 and c.stats().bytes == 0


def test_bounded_cache_get_or_make_each_stores_misses_within_the_bounds():
    # the terminal ids of a grammar: one call for all of its terminals
    made = iter(range(100, 200))
    c = _unit_cache(1000, max_entries=4)
    c.put("a", 300)
    assert c.get_or_make_each(["a", "b", "a", "c"], lambda: next(made) + 200) == [300, 300, 300, 301]
    s = c.stats()
    assert (s.entries, s.bytes, s.hits, s.misses) == (3, 901, 2, 2)
    # past the bounds within one call: every value is still returned, the
    # least recently used entries go once the call is done
    assert c.get_or_make_each(["d", "e", "b"], lambda: next(made) + 200) == [302, 303, 300]
    assert list(c._items) == ["d", "e", "b"] and c.stats().bytes == 905
    assert c.get_or_make_each(["x"], lambda: 5000) == [5000]  # over the budget: not kept
    assert "x" not in c._items and c.stats().evictions == 3 and c.stats().bytes == 905


def test_registry_refuses_unbounded_memos():
    with pytest.raises(ValueError, match="unbounded"):
        registry.register(functools.lru_cache(maxsize=None)(lambda x: x))
    with pytest.raises(TypeError):
        registry.register({})


# -- caches are bounded ------------------------------------------------------------------

@pytest.mark.parametrize("cache_bytes", [3_000, 60_000])
def test_every_cache_stays_within_its_bytes_and_results_stay_right(vocab, cache_bytes):
    tiny = Compiler(vocab, cache_bytes=cache_bytes)
    roomy = Compiler(vocab)
    seeds = [(s, k) for s in range(6) for k in range(3)]
    got = _run_jobs(tiny, vocab, seeds)
    assert got == _run_jobs(roomy, vocab, seeds)
    stats = tiny.cache_stats()
    assert set(stats) == {"terminal automata", "terminal ids", "lexer walks", "exclusion ids",
                          "multipleOf tables"}
    for s in stats.values():
        assert s.bytes <= s.max_bytes, s
    assert sum(s.max_bytes for s in stats.values()) <= cache_bytes
    # only broad walks are shared (LexerTables.walk): the larger budget holds them all
    assert stats["lexer walks"].evictions > 0 or cache_bytes > 10_000
    assert stats["terminal ids"].evictions > 0
    assert all(s.entries > 0 for s in roomy.cache_stats().values())


def test_terminal_ids_are_sized_as_the_generic_count_without_its_walk(vocab, monkeypatch):
    """Every terminal of every cold compile stores a terminal id, so its size is
    counted by one expression (lexer.terminal_id_bytes), not nbytes's walk of
    the key: 9f0f573 gave terminal_key two more fields and the expression
    stopped applying to any key (~50 us of a median cold compile)."""
    from constrain.cache import nbytes
    from constrain.cfg import lexer

    mine = Compiler(vocab)
    schema = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 9},
                                               "kind": {"enum": ["a", "bc"]}},
              "required": ["name"], "additionalProperties": {"type": "integer"}}
    mine.compile_json_schema(schema)
    keys = list(mine.terminal_ids._items.items())
    assert any(k[4] is not None for k, _ in keys) and any(k[4] is None for k, _ in keys)
    for key, entry in keys:
        uid = entry[0] if entry.__class__ is tuple else entry
        want = nbytes(key) + nbytes(uid)
        assert abs(lexer.terminal_id_bytes(key, uid) - want) <= 8, (key, want)
    walked = []
    monkeypatch.setattr(lexer, "nbytes", lambda x: walked.append(x) or nbytes(x))
    for key, entry in keys:
        lexer.terminal_id_bytes(key, entry[0] if entry.__class__ is tuple else entry)
    # only an exclusion's names are walked
    assert len(walked) == sum(k[4] is not None for k, _ in keys)


def test_bitmask_views_are_bounded_and_never_confuse_two_bitmasks(vocab):
    g = constrain.compile_regex("ab|x1", vocab)
    state = g.initial_state()
    want = _masks(g, vocab, "ab")[0]
    for _ in range(40):
        # new bitmasks, often at the address (the id) of one just freed
        bm = allocate_bitmask(2, len(vocab), backend="numpy")
        g.fill_bitmask(state, bm, 1)
        assert bm[1].tobytes() == want and (bm[0] == -1).all()
        del bm
        gc.collect()
        s = registry.stats()["bitmask views"]
        assert s.entries <= s.max_entries == 8


# -- clear() and clear_caches() ----------------------------------------------------------

def _lru_caches_of_constrain():
    """Every functools.lru_cache function defined in a loaded constrain module."""
    for name, module in list(sys.modules.items()):
        if module is None or not (name == "constrain" or name.startswith("constrain.")):
            continue
        for value in list(vars(module).values()):
            if isinstance(value, functools._lru_cache_wrapper) and value.__module__ == name:
                yield value


#: lazily made tables of this Python's Unicode database, the same for every input:
#: constants, not caches, which clear_caches() keeps
#: memos of constants of the process (the source digest that saved files carry
#: is one, the installed version of a dependency another: they do not change
#: while the process runs)
_CONSTANTS = {"constrain.automata.charset._all_scalars", "constrain.automata.regex_syntax._cased",
              "constrain.automata.charset._unicode_digit", "constrain.automata.charset._unicode_space",
              "constrain.automata.charset._unicode_word",
              "constrain.persist.trellis_version", "constrain.kernel_loading.kernel_sources_stamp",
              "constrain.persist.dependency_version"}


def test_clear_and_clear_caches_empty_every_cache(vocab):
    other = _vocab("compiler-test-2")
    mine = Compiler(other, cache_bytes=1 << 20)
    _run_jobs(mine, other, [(1, 0), (2, 1)])
    _run_jobs(default_compiler(vocab), vocab, [(3, 0)])
    # the memos of text: character classes, case folding; multipleOf tables
    # and exclusion ids of translations in a compile (the compiler's) and
    # outside one (the process's)
    constrain.compile_regex(r"(?i)[a-z\w]é{2}", vocab)
    constrain.compile_json_schema({"type": "number", "multipleOf": 0.25}, vocab)
    constrain.json_schema_to_lark({"type": "number", "multipleOf": 0.5})
    json_schema_ir({"type": "object", "properties": {"q": {}}})
    assert all(s.entries for s in mine.cache_stats().values())
    assert default_compiler(vocab).cache_stats()["multipleOf tables"].entries > 0
    filled = {n for n, s in registry.stats().items() if s.entries}
    assert {"bitmask views", "constrain.automata.regex_syntax._class_set_cached",
            "multipleOf tables", "exclusion ids"} <= filled

    mine.clear()
    assert all(s.entries == 0 and s.bytes == 0 for s in mine.cache_stats().values())
    assert default_compiler(vocab).cache_stats()["lexer walks"].entries > 0  # not its own

    constrain.clear_caches()
    assert mine in registry.compilers() and default_compiler(vocab) in registry.compilers()
    for compiler in registry.compilers():
        for s in compiler.cache_stats().values():
            assert s.entries == 0 and not s.bytes, (compiler, s)
    for s in registry.stats().values():
        assert s.entries == 0 and not s.bytes, s
    held = [f"{f.__module__}.{f.__qualname__}" for f in _lru_caches_of_constrain()
            if f.cache_info().currsize and f"{f.__module__}.{f.__qualname__}" not in _CONSTANTS]
    assert held == []
    module_caches = [v for m in list(sys.modules.values()) if m is not None
                     and m.__name__.startswith("constrain") for v in vars(m).values()
                     if isinstance(v, BoundedCache)]
    assert module_caches and all(len(c) == 0 for c in module_caches)


def test_a_reused_exclusion_name_is_another_terminal(vocab):
    """An exclusion terminal's pattern is only a stand-in name: two IRs giving
    one name different exclusions get different automata, ids and walks from
    one compiler, and each mask equals what advance allows."""
    from constrain.cfg.ir import GrammarIR, Terminal

    compiler = Compiler(vocab)
    quote = next(t for t in range(len(vocab)) if vocab.token_bytes(t) == b'"')
    grammars = []
    for excluded in (b'"a', b'"b'):
        ir = GrammarIR((Terminal("KEY", r"[^\x00-\U0010ffff]stand_in"),), ("start",),
                       ((0, (0,)),), 0, exclusions={"KEY": ('"[ab]+"', (excluded,))})
        grammars.append(constrain.GrammarConstraint(ir, vocab, compiler=compiler))
    no_a, no_b = grammars
    assert no_a.matches('"ba"') and not no_a.matches('"ab"')
    assert no_b.matches('"ab"') and not no_b.matches('"ba"')
    assert no_a.terms.uids != no_b.terms.uids
    bm = allocate_bitmask(1, len(vocab), backend="numpy")
    for g in grammars:
        for state in (g.initial_state(), g.advance(g.initial_state(), quote)):
            g.fill_bitmask(state, bm, 0)
            bits = np.unpackbits(bm[0].view(np.uint8), bitorder="little")[:len(vocab)]
            assert bits.astype(bool).tolist() == [g.advance(state, t) is not None
                                                  for t in range(len(vocab))]


def test_one_pattern_built_two_ways_gets_two_terminal_ids(smollm2_vocab):
    """A bounded string's template (max_states 50,000) and its regex DFA
    (max_states 800) both have 804 states, numbered apart: under one terminal
    id the second compile reused the first's walks and failed its fourth fill
    ('lexer state (8, 563) is not in this grammar'). Both orders, against each
    grammar on a compiler of its own; and through a save and load."""
    from constrain import Matcher, persist

    schema = {"type": "object", "required": ["s"],
              "properties": {"s": {"type": "string", "minLength": 2, "maxLength": 40}}}
    ids = smollm2_vocab.encoder('{"s":"' + "abcdefghij" * 3 + '"}')

    def masks(g):
        m, bm, out = Matcher(g), allocate_bitmask(1, len(smollm2_vocab), backend="numpy"), []
        for t in ids:
            m.fill_next_token_bitmask(bm, 0)
            out.append(bm[0].copy())
            assert m.accept_token(t)
        return out

    own = {ms: masks(Compiler(smollm2_vocab).compile_json_schema(schema, max_states=ms))
           for ms in (50_000, 800)}
    for order in ((50_000, 800), (800, 50_000)):
        shared = Compiler(smollm2_vocab)
        for ms in order:
            g = shared.compile_json_schema(schema, max_states=ms)
            assert all((a == b).all() for a, b in zip(masks(g), own[ms])), (order, ms)
            loaded = persist.loads(persist.dumps(g), smollm2_vocab, compiler=shared)
            assert loaded.terms.uids == g.terms.uids
    assert bool(g.terms.templates) != bool(
        Compiler(smollm2_vocab).compile_json_schema(schema, max_states=800).terms.templates)


def test_grammar_fingerprint_tells_exclusions_apart():
    """Two IRs that differ only in an exclusion (the stand-in pattern is the
    same) have different fingerprints, so the content-keyed caches built on it
    (``constrain.analysis.prepare``) never hand one the other's entry."""
    from constrain.analysis.prepared import prepare
    from constrain.cfg.ir import GrammarIR, Terminal, grammar_fingerprint

    def ir(excluded):
        return GrammarIR((Terminal("KEY", r"[^\x00-\U0010ffff]stand_in"),), ("start",),
                         ((0, (0,)),), 0, exclusions={"KEY": ('"[ab]+"', excluded)})

    no_a, no_b, no_a_again = ir((b'"a',)), ir((b'"b',)), ir((b'"a',))
    assert grammar_fingerprint(no_a) != grammar_fingerprint(no_b)
    assert grammar_fingerprint(no_a) == grammar_fingerprint(no_a_again)
    assert prepare(no_a) is not prepare(no_b) and prepare(no_a) is prepare(no_a_again)


def test_json_schema_caches_are_the_translating_compilers(vocab):
    """Exclusion ids and multipleOf tables go to the compiler that translates
    (two compilers in two threads at once keep theirs apart), a translation
    outside any compile to the process's; clear() drops a compiler's, and the
    languages are the same whoever holds the tables."""
    from constrain.frontends.json_schema import caches

    schemas = {name: {"type": "object", "properties": {name: {"type": "number", "multipleOf": m}}}
               for name, m in (("p", 0.5), ("q", 0.2))}
    compilers = {name: Compiler(vocab) for name in schemas}
    process_tables = len(caches.current().tables)
    done = {}

    def work(name):
        done[name] = compilers[name].compile_json_schema(schemas[name])

    threads = [threading.Thread(target=work, args=(name,)) for name in schemas]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert len(caches.current().tables) == process_tables  # not the process's
    for name, c in compilers.items():
        (key, prefixes), = c.schema_caches.exclusion_ids._items  # its own set only
        assert prefixes == (f'"{name}"'.encode(),)
        assert {k[1][0] for k in c.schema_caches.tables._items} == \
            {(schemas[name]["properties"][name]["multipleOf"],)}
    text = '{"p":1.5}'
    assert done["p"].matches(text) and not done["q"].matches('{"q":0.3}')
    assert _masks(done["p"], vocab, text) == _masks(Compiler(vocab).compile_json_schema(
        schemas["p"]), vocab, text)
    compilers["p"].clear()
    assert all(s.entries == 0 for s in compilers["p"].cache_stats().values())
    assert compilers["q"].cache_stats()["multipleOf tables"].entries > 0


def test_constraints_stay_right_after_clear(vocab):
    compiler = Compiler(vocab)
    jobs = [(7, 1), (8, 2)]
    before = {}
    kept = {}
    for seed, k in jobs:
        for kind, source, text in _job(seed, k):
            c = kept[(seed, kind)] = _compile(compiler, kind, source)
            before[(seed, kind)] = _masks(c, vocab, text)
    compiler.clear()
    constrain.clear_caches()
    ids_before = compiler.terminal_id(("x", 0, None, b""))
    for seed, k in jobs:
        for kind, source, text in _job(seed, k):
            # the old constraints, and new ones compiled on emptied caches
            assert _masks(kept[(seed, kind)], vocab, text) == before[(seed, kind)]
            assert _masks(_compile(compiler, kind, source), vocab, text) == before[(seed, kind)]
    # ids are never given twice, not even after a clear
    compiler.clear()
    assert compiler.terminal_id(("x", 0, None, b"")) > ids_before


def test_default_compiler_is_one_per_vocabulary_and_used_by_the_functions(vocab):
    assert default_compiler(vocab) is default_compiler(vocab)
    fresh = _vocab("compiler-test-3")
    assert fresh == vocab and default_compiler(fresh) is not default_compiler(vocab)
    with pytest.raises(ConstraintError, match="Vocabulary"):
        default_compiler("not a vocabulary")
    walks = default_compiler(fresh).cache_stats()["lexer walks"].misses
    g = constrain.compile_grammar('start: NAME\nNAME: /[^x]+x/', fresh)  # a broad walk: shared
    _masks(g, fresh, "abx")
    assert g.compiler is default_compiler(fresh)
    assert default_compiler(fresh).cache_stats()["lexer walks"].misses > walks
    mine = Compiler(fresh)
    with pytest.raises(ConstraintError, match="compiler is for"):
        constrain.GrammarConstraint(g.ir, Vocabulary.from_tokens([b"a", b"<e>"], eos_token_ids=[1]),
                                    compiler=mine)
    # threads asking at once get the same compiler
    late = _vocab("compiler-test-4")
    seen = []
    threads = [threading.Thread(target=lambda: seen.append(default_compiler(late)))
               for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(seen) == 8 and all(c is seen[0] for c in seen)


# -- threads -----------------------------------------------------------------------------

@pytest.mark.parametrize("cache_bytes", [3_000, 120_000])
def test_one_compiler_shared_by_eight_threads(vocab, cache_bytes):
    """8 threads compile their own regexes, JSON Schemas and Lark grammars from one
    compiler whose caches evict on nearly every fill (or, the larger, evict
    walks while sharing automata and ids), and fill masks along valid texts, each
    into a bitmask of its own: every mask equals a single-threaded replay's."""
    shared = Compiler(vocab, cache_bytes=cache_bytes)
    rounds = 40
    plan = {t: [(t * 1000 + r % 7, r) for r in range(rounds)] for t in range(8)}
    results: dict = {}
    errors: list = []
    start = threading.Barrier(8)

    def work(t):
        try:
            start.wait()
            mine = {}
            for seed, k in plan[t]:
                for kind, source, text in _job(seed, k):
                    bm = allocate_bitmask(1, len(vocab), backend="numpy")
                    mine[(t, seed, k, kind)] = _masks(_compile(shared, kind, source), vocab,
                                                      text, bm)
            results.update(mine)
        except BaseException as e:  # reported by the main thread
            errors.append(e)

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)  # switch threads often: inside cache operations too
    try:
        threads = [threading.Thread(target=work, args=(t,)) for t in range(8)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
    finally:
        sys.setswitchinterval(interval)
    if errors:
        raise errors[0]
    replay = Compiler(vocab)
    want = {}
    for t in range(8):
        for (seed, k, kind), masks in _run_jobs(replay, vocab, plan[t]).items():
            want[(t, seed, k, kind)] = masks
    assert len(results) == 8 * rounds * 3
    assert results == want
    stats = shared.cache_stats()
    assert all(s.bytes <= s.max_bytes for s in stats.values())
    assert stats["lexer walks"].evictions > 0
    if cache_bytes > 100_000:
        # (walks are shared when broad, and these evict before they recur)
        assert stats["terminal ids"].hits > 0
