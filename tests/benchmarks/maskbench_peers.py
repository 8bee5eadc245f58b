"""Engine adapters for the MaskBench JSON Schema benchmark (``bench_maskbench.py``)
and its Trellis correctness check (``check_maskbench.py``).

The vocabularies come from ``bench_regex`` (one table of token bytes per vocabulary,
shared by every engine), and so do xgrammar's ``TokenizerInfo`` set-up and Trellis's
vocabulary build and per-compile cache clearing: the xgrammar and Trellis adapters
here are bench_regex's with a JSON Schema compile and walk. Importing this module (through
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
``walk(handle, ids, mask, mask_ns, mask_cpu, adv_ns=None, adv_cpu=None) -> (refused_at, eos_ok, inconsistent)``
    a fresh walk over ``ids``: before every token and once after the last, the
    mask fill is timed (wall-clock nanoseconds appended to ``mask_ns``, process
    CPU nanoseconds, measured just outside, to ``mask_cpu``); then the token is
    checked against the mask (untimed) and the engine advances with it, that
    call timed the same way into ``adv_ns`` / ``adv_cpu`` when given.
    ``refused_at`` is the index of the first token the engine refused (None if
    none); ``eos_ok`` whether EOS is allowed after the last token; ``inconsistent``
    the number of steps where the mask and the advance call disagreed about the
    token (a bug in the engine).

The timed loops are written out per engine so that no engine pays for a Python
call layer another does not.
"""

from __future__ import annotations

import json

import bench_regex  # first: it sets the thread variables before any engine or numpy is loaded
from bench_regex import PeerEngine, TrellisEngine, VocabSpec, XGrammarEngine, _np
from harness import cpu_ns, perf_ns, timed

import numpy as np  # noqa: E402

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


def _allowed(bytes_row: np.ndarray, t: int) -> bool:
    """Whether token ``t``'s bit is set in a mask row viewed as bytes."""
    return bool((bytes_row[t >> 3] >> (t & 7)) & 1)


# ----------------------------------------------------------------------------------
# xgrammar
# ----------------------------------------------------------------------------------


class XGrammarJSON(XGrammarEngine):
    """xgrammar ``GrammarCompiler.compile_json_schema`` on the shared token table
    (``TokenizerInfo`` built as in bench_regex), compact separators, no free
    whitespace, ``strict_mode`` False by default (JSON Schema semantics: absent
    ``additionalProperties`` allows extra properties)."""

    strict_mode = False
    any_whitespace = False

    def options(self) -> dict:
        return {"any_whitespace": self.any_whitespace, "separators": [",", ":"], "strict_mode": self.strict_mode,
                "max_threads": 1, "cache_enabled": False}

    def compile_timed(self, schema):
        text = schema if isinstance(schema, str) else json.dumps(schema)
        return timed(self.fresh_compiler().compile_json_schema, text, any_whitespace=self.any_whitespace,
                     separators=(",", ":"), strict_mode=self.strict_mode)

    def walk(self, g, ids, mask, mask_ns, mask_cpu, adv_ns=None, adv_cpu=None):
        m = self.lib.GrammarMatcher(g)
        fill = m.fill_next_token_bitmask
        accept = m.accept_token
        row = _np(mask[0]).view(np.uint8)
        n = len(ids)
        bad = 0
        if adv_ns is None:
            adv_ns, adv_cpu = [], []
        for j in range(n + 1):
            c0 = cpu_ns()
            t0 = perf_ns()
            fill(mask, 0)
            t1 = perf_ns()
            c1 = cpu_ns()
            mask_ns.append(t1 - t0)
            mask_cpu.append(c1 - c0)
            if j == n:
                break
            in_mask = _allowed(row, ids[j])
            c0 = cpu_ns()
            t0 = perf_ns()
            ok = accept(ids[j])
            t1 = perf_ns()
            c1 = cpu_ns()
            adv_ns.append(t1 - t0)
            adv_cpu.append(c1 - c0)
            bad += ok != in_mask
            if not ok:
                return j, False, bad
        eos = self.spec.eos_id
        ok = bool(accept(eos)) and m.is_terminated()
        return None, ok, bad + (ok != _allowed(row, eos))

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


class LLGuidanceJSON(PeerEngine):
    """llguidance ``LLMatcher`` on a JSON Schema grammar
    (``LLMatcher.grammar_from_json_schema``), compact separators and no free
    whitespace (``whitespace_flexible`` False). Compile time is the grammar text
    plus the matcher construction (grammar and lexer set-up); llguidance builds the
    rest lazily, during mask computation. No thread pool is used (single matcher,
    ``unsafe_compute_mask_ptr``)."""

    name = module = dist = "llguidance"
    whitespace_flexible = False

    def prepare(self, spec: VocabSpec) -> None:
        self.spec = spec
        self.tok = self.lib.LLTokenizer(_LLGTokenizerSource(spec), n_vocab=spec.size, eos_token=spec.eos_id)

    def options(self) -> dict:
        return {"whitespace_flexible": self.whitespace_flexible, "item_separator": ",", "key_separator": ":"}

    def _compile(self, schema):
        M = self.lib.LLMatcher
        grammar = M.grammar_from_json_schema(schema, overrides=self.options())
        return grammar, M(self.tok, grammar, log_level=0)

    def compile_timed(self, schema):
        handle, wall, cpu = timed(self._compile, schema)
        if handle[1].is_error():
            raise ValueError(handle[1].get_error())
        return handle, wall, cpu

    def grammar_warnings(self, handle) -> list:
        return list(handle[1].get_grammar_warnings())

    def new_mask(self):
        return np.full((1, (self.spec.size + 31) // 32), -1, dtype=np.int32)

    def walk(self, handle, ids, mask, mask_ns, mask_cpu, adv_ns=None, adv_cpu=None):
        # the compiled matcher stays fresh: every walk gets a copy of it
        # (deep_copy of a fresh matcher: no grammar rebuild); the copies share
        # the lexer states built lazily, so a walk over states seen before is warm
        m = handle[1].deep_copy()
        row = mask[0]
        ptr = row.ctypes.data
        nbytes = row.nbytes
        fill = m.unsafe_compute_mask_ptr
        consume = m.consume_token
        brow = row.view(np.uint8)
        n = len(ids)
        bad = 0
        if adv_ns is None:
            adv_ns, adv_cpu = [], []
        for j in range(n + 1):
            c0 = cpu_ns()
            t0 = perf_ns()
            fill(ptr, nbytes)
            t1 = perf_ns()
            c1 = cpu_ns()
            mask_ns.append(t1 - t0)
            mask_cpu.append(c1 - c0)
            if j == n:
                break
            in_mask = _allowed(brow, ids[j])
            c0 = cpu_ns()
            t0 = perf_ns()
            ok = consume(ids[j])
            t1 = perf_ns()
            c1 = cpu_ns()
            adv_ns.append(t1 - t0)
            adv_cpu.append(c1 - c0)
            bad += ok != in_mask
            if not ok:
                return j, False, bad
        ok = bool(m.is_accepting()) and not m.is_error()
        return None, ok, bad + (ok != _allowed(brow, self.spec.eos_id))

    def warm_up(self):
        _warm(self)


# ----------------------------------------------------------------------------------
# Trellis
# ----------------------------------------------------------------------------------


class TrellisJSON(TrellisEngine):
    """Trellis ``constrain.compile_json_schema(schema, vocab)`` (strict=True, the
    default). Vocabulary built as in bench_regex (``Vocabulary.from_huggingface`` /
    ``from_tiktoken``, checked against the shared token table); before each timed
    compile the per-grammar caches are dropped as in bench_regex (vocabulary-level
    tables such as the token trie, its summaries and loop exits, are kept). Masks: ``grammar.fill_bitmask(state,
    bitmask, 0)`` into ``constrain.allocate_bitmask(1, V, backend=backend)``: a numpy
    int32 array by default, the kind the harness gives llguidance (``"torch"``: a
    torch tensor, constrain's own default)."""

    backend = "numpy"
    trivial = ({"type": "integer"}, {"type": "boolean"})
    trivial_label = "{'type': 'integer'}"
    #: drop the caches shared across grammars before each compile -- every
    #: compiler's terminal automata, terminal ids and lexer-state walks, and the
    #: process-wide multipleOf tables and exclusion ids
    #: (``constrain.clear_caches``): each schema then starts cold, like the
    #: peers; False keeps them (a server's steady state, where the result depends
    #: on the schemas seen before)
    clear_shared = True

    def __init__(self):
        super().__init__()
        self.compile = self.c.compile_json_schema
        self.version += " (constrain.compile_json_schema)"

    def options(self) -> dict:
        return {"strict": True, "function": "constrain.compile_json_schema", "clear_shared_caches": self.clear_shared,
                "bitmask": self.backend}

    def _clear(self):
        super()._clear()
        if self.clear_shared:
            self.c.clear_caches()

    def walk(self, g, ids, mask, mask_ns, mask_cpu, adv_ns=None, adv_cpu=None):
        fill = g.fill_bitmask
        advance = g.advance
        state = g.initial_state()
        row = _np(mask[0]).view(np.uint8)
        n = len(ids)
        bad = 0
        if adv_ns is None:
            adv_ns, adv_cpu = [], []
        for j in range(n + 1):
            c0 = cpu_ns()
            t0 = perf_ns()
            fill(state, mask, 0)
            t1 = perf_ns()
            c1 = cpu_ns()
            mask_ns.append(t1 - t0)
            mask_cpu.append(c1 - c0)
            if j == n:
                break
            in_mask = _allowed(row, ids[j])
            c0 = cpu_ns()
            t0 = perf_ns()
            state = advance(state, ids[j])
            t1 = perf_ns()
            c1 = cpu_ns()
            adv_ns.append(t1 - t0)
            adv_cpu.append(c1 - c0)
            ok = state is not None
            bad += ok != in_mask
            if not ok:
                return j, False, bad
        ok = bool(g.is_accepting(state))
        return None, ok, bad + (ok != _allowed(row, self.spec.eos_id))

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


def make_engines(wanted) -> tuple[dict, dict]:
    """The wanted engines of this benchmark, instantiated; those that are not
    available are returned apart with the reason."""
    return bench_regex.make_engines(ENGINE_CLASSES, wanted)


__all__ = [
    "ENGINES", "SHORT", "ENGINE_CLASSES", "WARMUP", "XGrammarJSON", "LLGuidanceJSON", "TrellisJSON",
    "load_vocab", "make_engines",
]
