"""Engine adapters for the MaskBench JSON Schema benchmark (``bench_maskbench.py``)
and its Trellis correctness check (``check_maskbench.py``).

The vocabularies come from ``bench_regex`` (one table of token bytes per vocabulary,
shared by every engine), and so do xgrammar's ``TokenizerInfo`` set-up and Trellis's
vocabulary build and per-compile cache clearing. Importing this module (through
``bench_regex``) sets every thread-count variable to 1 before any engine is loaded.

Each adapter exposes:

``prepare(spec)``
    build the engine's vocabulary object (done once, in the parent process, before
    the worker processes are forked);
``warm_up()``
    untimed compilations and walks of a few small schemas (JIT, lazy tables), run
    once in each freshly started worker;
``compile_timed(schema) -> (handle, wall_ns, cpu_ns)``
    one compilation from fresh compiler state; raises on an unsupported schema;
``walk(handle, ids, mask, mask_ns, mask_cpu) -> (refused_at, eos_ok, inconsistent)``
    a fresh walk over ``ids``: before every token and once after the last, the
    mask fill is timed (wall-clock nanoseconds appended to ``mask_ns``, process
    CPU nanoseconds, measured just outside, to ``mask_cpu``); then the token is
    checked against the mask (untimed) and the engine advances with it.
    ``refused_at`` is the index of the first token the engine refused (None if
    none); ``eos_ok`` whether EOS is allowed after the last token; ``inconsistent``
    the number of steps where the mask and the advance call disagreed about the
    token (a bug in the engine).

The timed loops are written out per engine so that no engine pays for a Python
call layer another does not.
"""

from __future__ import annotations

import gc
import importlib.metadata
import json
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
for _p in (str(ROOT), str(HERE)):
    if _p not in sys.path:
        sys.path.insert(0, _p)

import bench_regex  # noqa: E402  (sets the thread variables first)
from bench_regex import VocabSpec, XGrammarEngine, _compare_vocab, _git_rev, _trellis_from_tiktoken  # noqa: E402

import numpy as np  # noqa: E402

perf_ns = time.perf_counter_ns
#: CPU time of the whole process (every thread): immune to the preemption that
#: inflates wall-clock tails on a shared machine
cpu_ns = time.process_time_ns

ENGINES = ("trellis", "xgrammar", "llguidance")
SHORT = {"trellis": "T", "xgrammar": "X", "llguidance": "L"}

#: small schemas compiled and walked untimed in every fresh worker (JIT, lazy tables)
WARMUP = [
    ({"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "integer"}}, "required": ["a"]},
     {"a": "x y", "b": 12}),
    ({"type": "array", "items": {"type": "number"}, "maxItems": 5}, [1.5, -2, 3e5]),
    ({"type": "object", "properties": {"e": {"enum": ["red", "green", 3]}, "p": {"type": "string", "pattern": "^[a-z]{2,4}$"},
                                       "o": {"anyOf": [{"type": "null"}, {"type": "boolean"}]}}},
     {"e": "green", "p": "abc", "o": None}),
    ({"type": "string", "format": "date-time"}, "2024-01-02T03:04:05Z"),
    # a pattern over non-ASCII characters and an integer range: the general regex
    # pipeline's kernels (the JSON lexemes, bounded strings included, are built
    # without it), loaded from numba's cache here rather than in the first timed
    # schema that needs them (~30 ms)
    ({"type": "object", "properties": {"s": {"type": "string", "pattern": "^[^,]{1,8}$"},
                                       "i": {"type": "integer", "minimum": 1}}}, {"s": "héllo", "i": 7}),
    # enum values checked against another keyword: Trellis's translator imports
    # jsonschema (~1 s, once per process, as the peers' imports happen before timing)
    ({"enum": ["on", "off", "maybe"], "maxLength": 3}, "off"),
]


def load_vocab(name: str) -> VocabSpec:
    """A vocabulary from bench_regex, with an encoder that never turns text into
    special tokens (SmolLM2's HF tokenizer reads ``<|im_end|>`` in text as the
    special token otherwise; o200k's ``encode_ordinary`` already does not)."""
    spec = bench_regex.VOCABS[name]()
    if name == "smollm2":
        tok = spec.source
        spec.encode = lambda s: tok.encode(s, add_special_tokens=False, split_special_tokens=True)
    return spec


def _bits(row) -> np.ndarray:
    """uint8 view of one mask row (numpy or torch), for reading single bits."""
    a = row.numpy() if hasattr(row, "numpy") else np.asarray(row)
    return a.view(np.uint8)


def _allowed(bytes_row: np.ndarray, t: int) -> bool:
    return bool((bytes_row[t >> 3] >> (t & 7)) & 1)


# ----------------------------------------------------------------------------------
# xgrammar
# ----------------------------------------------------------------------------------


class XGrammarJSON:
    """xgrammar ``GrammarCompiler.compile_json_schema`` on the shared token table
    (``TokenizerInfo`` built as in bench_regex), compact separators, no free
    whitespace, ``strict_mode`` False by default (JSON Schema semantics: absent
    ``additionalProperties`` allows extra properties)."""

    name = "xgrammar"
    strict_mode = False
    any_whitespace = False

    def __init__(self):
        self._x = XGrammarEngine()
        self.xgr = self._x.xgr
        self.version = self._x.version

    def prepare(self, spec: VocabSpec) -> None:
        self._x.prepare(spec)
        self.spec = spec
        self.info = self._x.info

    def options(self) -> dict:
        return {"any_whitespace": self.any_whitespace, "separators": [",", ":"], "strict_mode": self.strict_mode,
                "max_threads": 1, "cache_enabled": False}

    def compile_timed(self, schema):
        text = schema if isinstance(schema, str) else json.dumps(schema)
        compiler = self.xgr.GrammarCompiler(self.info, max_threads=1, cache_enabled=False)  # untimed
        if bench_regex.GC_FLUSH:
            gc.collect()
        c0 = cpu_ns()
        t0 = perf_ns()
        g = compiler.compile_json_schema(
            text, any_whitespace=self.any_whitespace, separators=(",", ":"), strict_mode=self.strict_mode
        )
        t1 = perf_ns()
        c1 = cpu_ns()
        return g, t1 - t0, c1 - c0

    def new_mask(self):
        return self.xgr.allocate_token_bitmask(1, self.spec.size)

    def walk(self, g, ids, mask, mask_ns, mask_cpu):
        m = self.xgr.GrammarMatcher(g)
        fill = m.fill_next_token_bitmask
        accept = m.accept_token
        row = _bits(mask[0])
        bad = 0
        for j, tok in enumerate(ids):
            c0 = cpu_ns()
            t0 = perf_ns()
            fill(mask, 0)
            t1 = perf_ns()
            c1 = cpu_ns()
            mask_ns.append(t1 - t0)
            mask_cpu.append(c1 - c0)
            in_mask = _allowed(row, tok)
            ok = accept(tok)
            if ok != in_mask:
                bad += 1
            if not ok:
                return j, False, bad
        c0 = cpu_ns()
        t0 = perf_ns()
        fill(mask, 0)
        t1 = perf_ns()
        c1 = cpu_ns()
        mask_ns.append(t1 - t0)
        mask_cpu.append(c1 - c0)
        eos = self.spec.eos_id
        in_mask = _allowed(row, eos)
        ok = bool(m.accept_token(eos)) and m.is_terminated()
        if ok != in_mask:
            bad += 1
        return None, ok, bad

    def warm_up(self):
        _warm(self)


# ----------------------------------------------------------------------------------
# llguidance
# ----------------------------------------------------------------------------------


class _LLGTokenizerSource:
    """The shared token table in the shape ``llguidance.LLTokenizer`` reads (its
    TokenizerWrapper protocol): token bytes, EOS, the ids that are special (control
    tokens and padding: named ``<|special_N|>``, never text), and the real encoder."""

    def __init__(self, spec: VocabSpec):
        self.eos_token_id = spec.eos_id
        self.bos_token_id = None
        self.tokens = [
            t if spec.text_ids[i] else (b"<|eos|>" if i == spec.eos_id else b"<|special_%d|>" % i)
            for i, t in enumerate(spec.tokens)
        ]
        self.special_token_ids = [i for i in range(spec.size) if not spec.text_ids[i]]
        self.is_tokenizer_wrapper = True
        self._encode = spec.encode

    def __call__(self, s):
        if isinstance(s, bytes):
            s = s.decode("utf-8", "surrogateescape")
        return self._encode(s)


class LLGuidanceJSON:
    """llguidance ``LLMatcher`` on a JSON Schema grammar
    (``LLMatcher.grammar_from_json_schema``), compact separators and no free
    whitespace (``whitespace_flexible`` False). Compile time is the grammar text
    plus the matcher construction (grammar and lexer set-up); llguidance builds the
    rest lazily, during mask computation. No thread pool is used (single matcher,
    ``unsafe_compute_mask_ptr``)."""

    name = "llguidance"
    whitespace_flexible = False

    def __init__(self):
        import llguidance

        self.llg = llguidance
        self.version = importlib.metadata.version("llguidance")

    def prepare(self, spec: VocabSpec) -> None:
        self.spec = spec
        self.tok = self.llg.LLTokenizer(_LLGTokenizerSource(spec), n_vocab=spec.size, eos_token=spec.eos_id)

    def options(self) -> dict:
        return {"whitespace_flexible": self.whitespace_flexible, "item_separator": ",", "key_separator": ":"}

    def compile_timed(self, schema):
        M = self.llg.LLMatcher
        if bench_regex.GC_FLUSH:
            gc.collect()
        c0 = cpu_ns()
        t0 = perf_ns()
        grammar = M.grammar_from_json_schema(schema, overrides=self.options())
        m = M(self.tok, grammar, log_level=0)
        t1 = perf_ns()
        c1 = cpu_ns()
        if m.is_error():
            raise ValueError(m.get_error())
        return (grammar, m), t1 - t0, c1 - c0

    def grammar_warnings(self, handle) -> list:
        return list(handle[1].get_grammar_warnings())

    def new_mask(self):
        return np.full((1, (self.spec.size + 31) // 32), -1, dtype=np.int32)

    def walk(self, handle, ids, mask, mask_ns, mask_cpu):
        grammar, m0 = handle
        # the compiled matcher walks the first instance; later ones get a copy
        # (deep_copy of a fresh matcher: no grammar rebuild)
        m = m0.deep_copy()
        row = mask[0]
        ptr = row.ctypes.data
        nbytes = row.nbytes
        fill = m.unsafe_compute_mask_ptr
        consume = m.consume_token
        brow = row.view(np.uint8)
        bad = 0
        for j, tok in enumerate(ids):
            c0 = cpu_ns()
            t0 = perf_ns()
            fill(ptr, nbytes)
            t1 = perf_ns()
            c1 = cpu_ns()
            mask_ns.append(t1 - t0)
            mask_cpu.append(c1 - c0)
            in_mask = _allowed(brow, tok)
            ok = consume(tok)
            if ok != in_mask:
                bad += 1
            if not ok:
                return j, False, bad
        c0 = cpu_ns()
        t0 = perf_ns()
        fill(ptr, nbytes)
        t1 = perf_ns()
        c1 = cpu_ns()
        mask_ns.append(t1 - t0)
        mask_cpu.append(c1 - c0)
        in_mask = _allowed(brow, self.spec.eos_id)
        ok = bool(m.is_accepting()) and not m.is_error()
        if ok != in_mask:
            bad += 1
        return None, ok, bad

    def warm_up(self):
        _warm(self)


# ----------------------------------------------------------------------------------
# Trellis
# ----------------------------------------------------------------------------------


class TrellisJSON(bench_regex.TrellisEngine):
    """Trellis ``constrain.compile_json_schema(schema, vocab)`` (strict=True, the
    default). Vocabulary built as in bench_regex (``Vocabulary.from_huggingface`` /
    ``from_tiktoken``, checked against the shared token table); before each timed
    compile the per-grammar caches are dropped as in bench_regex (vocabulary-level
    tables such as the token trie are kept). Masks: ``grammar.fill_bitmask(state,
    bitmask, 0)`` into ``constrain.allocate_bitmask(1, V, backend=backend)``: a numpy
    int32 array by default, the kind the harness gives llguidance (``"torch"``: a
    torch tensor, constrain's own default)."""

    name = "trellis"
    backend = "numpy"
    #: drop the caches shared across grammars before each compile -- the
    #: vocabulary-wide lexer-state walks (``trie._lexer_rows``) and the
    #: process-wide terminal automata, lexer products and multipleOf tables
    #: (``constrain.clear_caches``): each schema then starts cold, like the
    #: peers; False keeps them (a server's steady state, where the result depends
    #: on the schemas seen before)
    clear_shared = True

    def __init__(self):
        import constrain

        fn = getattr(constrain, "compile_json_schema", None)
        self.source = "constrain.compile_json_schema"
        if fn is None:
            try:
                from constrain.frontends.json_schema.compiler import compile_json_schema as fn
            except ImportError:
                raise ImportError("constrain.compile_json_schema does not exist yet") from None
            self.source = "constrain.frontends.json_schema.compiler.compile_json_schema (not exported by constrain yet)"
        super().__init__()
        self.compile_json_schema = fn
        self.version += f" ({self.source})"

    def options(self) -> dict:
        return {"strict": True, "function": self.source, "clear_shared_caches": self.clear_shared,
                "bitmask": self.backend}

    def _clear(self):
        super()._clear()
        if self.clear_shared:
            # terminal automata and lexer products are cached process-wide: kept,
            # schemas sharing terminals (every JSON string) would compile warm
            import constrain

            constrain.clear_caches()
            for v in list(getattr(self.vocab, "_cache", {}).values()):
                if hasattr(v, "_lexer_rows"):
                    try:
                        delattr(v, "_lexer_rows")
                    except AttributeError:
                        pass

    def prepare(self, spec: VocabSpec) -> None:
        V = self.c.Vocabulary
        t0 = perf_ns()
        if spec.name == "smollm2":
            self.vocab = V.from_huggingface(spec.source)
        else:
            self.vocab = _trellis_from_tiktoken(V, spec.source)
        self.vocab_ms = (perf_ns() - t0) / 1e6
        self.spec = spec
        self.vocab_mismatch = _compare_vocab(self.vocab, spec)
        # Cache keys present after compiling two different trivial schemas (each
        # on an emptied cache) are vocabulary-level and kept between timed
        # compiles (bench_regex's policy); the first compile includes the token
        # trie and numba JIT and is reported apart.
        cache = getattr(self.vocab, "_cache", None)
        t0 = perf_ns()
        self.compile_json_schema({"type": "integer"}, self.vocab)
        self.notes = {"first_compile_ms (trie + JIT, {'type': 'integer'})": (perf_ns() - t0) / 1e6}
        self.vocab_keys = set()
        if isinstance(cache, dict):
            k1 = set(cache)
            cache.clear()
            self.compile_json_schema({"type": "boolean"}, self.vocab)
            self.vocab_keys = k1 & set(cache)
        self._find_memo()

    def compile_timed(self, schema):
        self._clear()
        if bench_regex.GC_FLUSH:
            gc.collect()
        c0 = cpu_ns()
        t0 = perf_ns()
        g = self.compile_json_schema(schema, self.vocab)
        t1 = perf_ns()
        c1 = cpu_ns()
        return g, t1 - t0, c1 - c0

    def walk(self, g, ids, mask, mask_ns, mask_cpu):
        fill = g.fill_bitmask
        advance = g.advance
        state = g.initial_state()
        row = _bits(mask[0])
        bad = 0
        for j, tok in enumerate(ids):
            c0 = cpu_ns()
            t0 = perf_ns()
            fill(state, mask, 0)
            t1 = perf_ns()
            c1 = cpu_ns()
            mask_ns.append(t1 - t0)
            mask_cpu.append(c1 - c0)
            in_mask = _allowed(row, tok)
            state = advance(state, tok)
            ok = state is not None
            if ok != in_mask:
                bad += 1
            if not ok:
                return j, False, bad
        c0 = cpu_ns()
        t0 = perf_ns()
        fill(state, mask, 0)
        t1 = perf_ns()
        c1 = cpu_ns()
        mask_ns.append(t1 - t0)
        mask_cpu.append(c1 - c0)
        in_mask = _allowed(row, self.spec.eos_id)
        ok = bool(g.is_accepting(state))
        if ok != in_mask:
            bad += 1
        return None, ok, bad

    def warm_up(self):
        _warm(self)


def _warm(eng) -> None:
    """Untimed compiles and walks of WARMUP; an unsupported warm-up schema is skipped."""
    mask = eng.new_mask()
    for schema, data in WARMUP:
        try:
            g = eng.compile_timed(schema)[0]
        except Exception:
            continue
        ids = [int(i) for i in eng.spec.encode(json.dumps(data, separators=(",", ":")))]
        try:
            eng.walk(g, ids, mask, [], [])
        except Exception:
            pass


ENGINE_CLASSES = {"trellis": TrellisJSON, "xgrammar": XGrammarJSON, "llguidance": LLGuidanceJSON}


def make_engines(wanted, log=print) -> tuple[dict, dict]:
    """Instantiate the wanted engines; those that are not available are returned
    apart with the reason (Trellis before compile_json_schema exists: "n/a")."""
    engines, skipped = {}, {}
    for name in ENGINES:
        if name not in wanted:
            continue
        try:
            engines[name] = ENGINE_CLASSES[name]()
        except Exception as e:
            skipped[name] = f"{type(e).__name__}: {e}"
            log(f"engine {name} unavailable: {skipped[name]}")
    return engines, skipped


__all__ = [
    "ENGINES", "SHORT", "ENGINE_CLASSES", "WARMUP", "XGrammarJSON", "LLGuidanceJSON", "TrellisJSON",
    "load_vocab", "make_engines", "_git_rev",
]
