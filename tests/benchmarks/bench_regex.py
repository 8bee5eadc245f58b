"""Regex benchmark: Trellis side by side with outlines-core and xgrammar.

    python tests/benchmarks/bench_regex.py [--vocab smollm2|o200k|all] [--repeat N]
                                           [--json out.json] [--engines ...] [--regex ...]

For every vocabulary and regex (``tests/benchmarks/regexes.py``) it measures, per
engine, on one thread:

* compile time: the median of ``--compile-runs`` compilations, each from fresh
  compiler state (no grammar cache), after one untimed warm-up compilation (reported
  as ``cold``). Building the vocabulary object (Trellis ``Vocabulary``,
  outlines-core ``Vocabulary``, xgrammar ``TokenizerInfo``) is not part of it; it
  is reported separately.
* per-token mask time: the time of one call that fills the next-token bitmask, at
  every step of the example token sequences (before each token, and once after
  the last one, where EOS must be allowed). Each step is timed ``--repeat`` times
  (each time in a fresh walk); a step's time is the median of its repeats; p50, p99
  and mean are then taken over all steps. The advance call (token acceptance) is
  timed the same way but separately.
* compile + first walk (a "request"): a compilation from fresh state, then a
  fresh walk of an example's tokens (every mask filled, every token advanced),
  timed as one; the median of ``--request-runs`` per example, the mean over the
  examples. What a server pays for a regex it has not seen, where lazily built
  masks are paid for.

All engines walk the same token ids (from the vocabulary's real tokenizer) with
vocabularies built from the same token bytes. A separate untimed pass compares the
allowed-token sets of all engines at every step (ignoring EOS, special and
padding ids) and, for each differing token, says which answer is right by
checking the prefix plus the token against the regex with the ``regex`` module's
partial matching.

See tests/benchmarks/README.md for the methodology.
"""

from __future__ import annotations

import harness  # the standard library only: the thread settings come before any engine is loaded

harness.one_thread()

import argparse  # noqa: E402
import gc  # noqa: E402
import importlib  # noqa: E402
import importlib.metadata  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
import traceback  # noqa: E402
from dataclasses import dataclass, field  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

from harness import fmt, log, perf_ns, timed  # noqa: E402
from regexes import CASES, RegexCase  # noqa: E402

ENGINES = ("trellis", "outlines", "xgrammar")
SHORT = {"trellis": "T", "outlines": "O", "xgrammar": "X"}


# ----------------------------------------------------------------------------------
# Vocabularies
# ----------------------------------------------------------------------------------


def _gpt2_byte_decoder() -> dict[str, int]:
    """The inverse of GPT-2's bytes_to_unicode: byte-level BPE token text -> bytes."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) + list(range(0xAE, 0xFF + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs)}


@dataclass
class VocabSpec:
    """One vocabulary, as token bytes, shared by all engines."""

    name: str
    tokens: list  # tokens[i]: bytes, or None for ids that carry no text (special, padding)
    eos_id: int
    special_ids: set  # control/added tokens (not EOS) and padding ids
    encode: object  # str -> list[int], the real tokenizer
    source: object  # the tokenizer object (HF tokenizer or tiktoken Encoding)
    load_s: float
    text_ids: np.ndarray = field(default=None)  # bool[V]: token carries grammar text

    def __post_init__(self):
        v = len(self.tokens)
        mask = np.zeros(v, dtype=bool)
        for i, t in enumerate(self.tokens):
            mask[i] = bool(t) and i != self.eos_id and i not in self.special_ids
        self.text_ids = mask

    @property
    def size(self) -> int:
        return len(self.tokens)


def load_smollm2() -> VocabSpec:
    from search.models.smollm2 import load_tokenizer

    t0 = time.perf_counter()
    tok = load_tokenizer()
    dec = _gpt2_byte_decoder()
    n = len(tok)
    added = set(tok.added_tokens_decoder)
    tokens: list = []
    for i, s in enumerate(tok.convert_ids_to_tokens(list(range(n)))):
        tokens.append(None if i in added else bytes(dec[c] for c in s))
    eos = tok.eos_token_id
    special = added - {eos}
    return VocabSpec(
        "smollm2",
        tokens,
        eos,
        special,
        lambda s: tok.encode(s, add_special_tokens=False),
        tok,
        time.perf_counter() - t0,
    )


def load_o200k() -> VocabSpec:
    import bpe_openai

    t0 = time.perf_counter()
    enc = bpe_openai.get_encoding("o200k_base")
    n = enc.n_vocab
    tokens: list = [None] * n
    for b, r in enc._mergeable_ranks.items():
        tokens[r] = b
    eos = enc.eot_token
    special = {i for i in range(n) if tokens[i] is None} - {eos}
    return VocabSpec("o200k", tokens, eos, special, enc.encode_ordinary, enc, time.perf_counter() - t0)


VOCABS = {"smollm2": load_smollm2, "o200k": load_o200k}


def vocab_names(choice: str) -> list[str]:
    """The vocabularies ``--vocab`` names (``all``: every one)."""
    return list(VOCABS) if choice == "all" else [choice]


# ----------------------------------------------------------------------------------
# Engines. Each adapter exposes:
#   prepare(spec)            build the engine's vocabulary object (timed separately)
#   compile_timed(pattern)   one compilation from fresh compiler state:
#                            (compiled, wall ns, CPU ns), timed by harness.timed
#   new_mask()               a (1, ceil(V/32)) int32 bitmask in the engine's format
#   walk_timed(c, ids, m, n, fill_ns, adv_ns)
#                            a fresh walk over ids, timing n fills and the advances
#                            between them, appending nanoseconds to the two lists
#   walk_check(c, ids, m, n, cb)
#                            a fresh untimed walk calling cb(step, mask_as_numpy)
#                            after each fill; returns the step at which the engine
#                            refused a token, or None
#   request_timed(pattern, ids, m, n)
#                            a "request": a compilation from fresh compiler state,
#                            then a fresh walk filling n masks and advancing
#                            between them, timed as one (wall ns, CPU ns)
# The timed loops are written out per engine (no shared callback) so that none
# pays for an extra Python call layer the others do not.
# ----------------------------------------------------------------------------------


def _np(mask) -> np.ndarray:
    """A numpy view of a bitmask (a torch tensor or a numpy array)."""
    return mask.numpy() if hasattr(mask, "numpy") else np.asarray(mask)


class PeerEngine:
    """An engine from an installed distribution: its module as ``lib`` and the
    distribution's version."""

    module = ""
    dist = ""

    def __init__(self):
        self.lib = importlib.import_module(self.module)
        self.version = importlib.metadata.version(self.dist)


class XGrammarEngine(PeerEngine):
    name = module = dist = "xgrammar"

    def prepare(self, spec: VocabSpec) -> None:
        xgr = self.lib
        # RAW vocabulary: token bytes as they are. Empty strings mark special and
        # padding ids (xgrammar treats empty tokens as special); EOS keeps its text
        # and is the only stop token.
        enc = [t if spec.text_ids[i] else b"" for i, t in enumerate(spec.tokens)]
        enc[spec.eos_id] = b"</eos>"
        self.spec = spec
        self.enc = enc
        self.info = xgr.TokenizerInfo(
            enc, xgr.VocabType.RAW, vocab_size=spec.size, stop_token_ids=[spec.eos_id], add_prefix_space=False
        )

    def fresh_compiler(self):
        """A compiler with no grammar cache; not timed: an empty object around the
        tokenizer info."""
        return self.lib.GrammarCompiler(self.info, max_threads=1, cache_enabled=False)

    def compile_timed(self, pattern: str):
        return timed(self.fresh_compiler().compile_regex, pattern)

    def new_mask(self):
        return self.lib.allocate_token_bitmask(1, self.spec.size)

    def walk_timed(self, compiled, ids, mask, n, fill_ns, adv_ns):
        m = self.lib.GrammarMatcher(compiled)
        fill = m.fill_next_token_bitmask
        accept = m.accept_token
        last = n - 1
        for j in range(n):
            t0 = perf_ns()
            fill(mask, 0)
            t1 = perf_ns()
            fill_ns.append(t1 - t0)
            if j < last:
                tok = ids[j]
                t0 = perf_ns()
                accept(tok)
                t1 = perf_ns()
                adv_ns.append(t1 - t0)

    def request_timed(self, pattern, ids, mask, n):
        compiler = self.fresh_compiler()
        matcher = self.lib.GrammarMatcher

        def request():
            m = matcher(compiler.compile_regex(pattern))
            for j in range(n):
                m.fill_next_token_bitmask(mask, 0)
                if j < n - 1:
                    m.accept_token(ids[j])

        return timed(request)[1:]

    def walk_check(self, compiled, ids, mask, n, cb):
        m = self.lib.GrammarMatcher(compiled)
        for j in range(n):
            m.fill_next_token_bitmask(mask, 0)
            cb(j, _np(mask)[0])
            if j < len(ids) and not m.accept_token(ids[j]):
                return j
        return None


class OutlinesEngine(PeerEngine):
    name = "outlines"
    module = "outlines_core"
    dist = "outlines-core"

    def prepare(self, spec: VocabSpec) -> None:
        # Vocabulary(eos_token_id, {token bytes: [ids]}): bytes keys are taken as
        # they are (str keys would be UTF-8 encoded); special and padding ids are
        # left out, so they are never allowed, as in the other engines.
        m: dict = {}
        for i, t in enumerate(spec.tokens):
            if spec.text_ids[i]:
                m.setdefault(t, []).append(i)
        self.spec = spec
        self.vocab = self.lib.Vocabulary(spec.eos_id, m)

    def compile_timed(self, pattern: str):
        return timed(self.lib.Index, pattern, self.vocab)

    def new_mask(self):
        import torch

        return torch.zeros((1, (self.spec.size + 31) // 32), dtype=torch.int32)

    def walk_timed(self, compiled, ids, mask, n, fill_ns, adv_ns):
        g = self.lib.Guide(compiled)
        write = g.write_mask_into
        advance = g.advance
        ptr = mask.data_ptr()
        numel = mask.numel()
        last = n - 1
        for j in range(n):
            t0 = perf_ns()
            write(ptr, numel, 4)
            t1 = perf_ns()
            fill_ns.append(t1 - t0)
            if j < last:
                tok = ids[j]
                t0 = perf_ns()
                advance(tok, False)
                t1 = perf_ns()
                adv_ns.append(t1 - t0)

    def request_timed(self, pattern, ids, mask, n):
        index, guide, vocab = self.lib.Index, self.lib.Guide, self.vocab
        ptr, numel = mask.data_ptr(), mask.numel()

        def request():
            g = guide(index(pattern, vocab))
            for j in range(n):
                g.write_mask_into(ptr, numel, 4)
                if j < n - 1:
                    g.advance(ids[j], False)

        return timed(request)[1:]

    def walk_check(self, compiled, ids, mask, n, cb):
        g = self.lib.Guide(compiled)
        for j in range(n):
            g.write_mask_into(mask.data_ptr(), mask.numel(), 4)
            cb(j, _np(mask)[0])
            if j < len(ids):
                try:
                    g.advance(ids[j], False)
                except ValueError:
                    return j
        return None


class TrellisEngine:
    """Trellis ``constrain.compile_regex(pattern, vocab)``; the JSON Schema
    benchmark's adapter (``maskbench_peers.TrellisJSON``) is this one with another
    ``compile`` and other ``trivial`` inputs."""

    name = "trellis"
    backend = None  # constrain.allocate_bitmask's default (torch when installed)
    #: two different trivial inputs: the first compile builds the vocabulary-level
    #: tables (token trie...) and JIT-compiles the kernels, and is reported apart;
    #: the cache keys that both leave on an emptied cache do not depend on the
    #: input, so they are kept between timed compiles
    trivial = ("a", "b")
    trivial_label = "regex 'a'"

    def __init__(self):
        import constrain

        self.c = constrain
        self.compile = constrain.compile_regex
        try:
            self.version = importlib.metadata.version("trellis-decoding")
        except importlib.metadata.PackageNotFoundError:
            self.version = "source"
        self.version += " @ " + harness.git_rev()

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
        cache = getattr(self.vocab, "_cache", None)
        t0 = perf_ns()
        self.compile(self.trivial[0], self.vocab)
        self.notes = {f"first_compile_ms (trie + JIT, {self.trivial_label})": (perf_ns() - t0) / 1e6}
        self.vocab_keys: set = set()
        if isinstance(cache, dict):
            k1 = set(cache)
            cache.clear()
            self.compile(self.trivial[1], self.vocab)
            self.vocab_keys = k1 & set(cache)
        self._find_memo()

    def _clear(self):
        """Fresh compiler state before a timed compile.

        Dropped: everything cached on the vocabulary except vocabulary-derived
        tables (the token trie..., built once per vocabulary like xgrammar's
        TokenizerInfo and outlines-core's Vocabulary; found in ``prepare``), the
        UTF-8 expansion's templates and the classes' partitions into atoms, and
        every ``lru_cache`` in ``constrain.*`` that takes arguments (memoized
        compile work, e.g. parsed character classes). Kept: zero-argument
        ``lru_cache`` functions, which are constants (static Unicode tables, the
        peers have theirs in their binary).

        The memos are looked for again only when a module was imported since:
        the search (every ``constrain`` module's names, ``inspect.signature``)
        evicted the CPU caches that the timed compile then refilled, ~40-65 us
        of a small schema's compile, more as the package has more modules.
        """
        if len(sys.modules) != self._memo_modules:
            self._find_memo()
        cache = getattr(self.vocab, "_cache", None)
        if isinstance(cache, dict):
            for k in list(cache):
                if k not in self.vocab_keys:
                    del cache[k]
        for fn in self._memo:
            fn.cache_clear()
        # the UTF-8 expansion's templates, kept by shape for the process (a
        # class's second pattern copies it), and the partitions of a pattern's
        # classes into atoms, kept by their classes (not lru_caches, so not
        # among the memos above): the peers make theirs per regex too
        from constrain.automata import byte_dfa, char_dfa

        byte_dfa._TEMPLATES.clear()
        char_dfa._PARTITIONS.clear()

    def _find_memo(self):
        import inspect

        self._memo, self.memo_names, self.kept_names = [], [], []
        self._memo_modules = len(sys.modules)
        for mname, mod in list(sys.modules.items()):
            if mod is None or not (mname == "constrain" or mname.startswith("constrain.")):
                continue
            for aname, obj in list(vars(mod).items()):
                if not (callable(obj) and hasattr(obj, "cache_clear") and hasattr(obj, "__wrapped__")):
                    continue
                if getattr(obj, "__module__", None) != mname:
                    continue  # imported from another module: handled there
                try:
                    static = not inspect.signature(obj.__wrapped__).parameters
                except (TypeError, ValueError):
                    static = False
                if static:
                    self.kept_names.append(f"{mname}.{aname}")
                else:
                    self.memo_names.append(f"{mname}.{aname}")
                    self._memo.append(obj)

    def compile_timed(self, source):
        self._clear()
        return timed(self.compile, source, self.vocab)

    def new_mask(self):
        return self.c.allocate_bitmask(1, len(self.vocab), backend=self.backend)

    def walk_timed(self, compiled, ids, mask, n, fill_ns, adv_ns):
        fill = compiled.fill_bitmask
        advance = compiled.advance
        state = compiled.initial_state()
        last = n - 1
        for j in range(n):
            t0 = perf_ns()
            fill(state, mask, 0)
            t1 = perf_ns()
            fill_ns.append(t1 - t0)
            if j < last:
                tok = ids[j]
                t0 = perf_ns()
                state = advance(state, tok)
                t1 = perf_ns()
                adv_ns.append(t1 - t0)

    def request_timed(self, source, ids, mask, n):
        self._clear()
        compile, vocab = self.compile, self.vocab

        def request():
            c = compile(source, vocab)
            fill, advance = c.fill_bitmask, c.advance
            state = c.initial_state()
            for j in range(n):
                fill(state, mask, 0)
                if j < n - 1:
                    state = advance(state, ids[j])

        return timed(request)[1:]

    def walk_check(self, compiled, ids, mask, n, cb):
        state = compiled.initial_state()
        for j in range(n):
            compiled.fill_bitmask(state, mask, 0)
            cb(j, _np(mask)[0])
            if j < len(ids):
                state = compiled.advance(state, ids[j])
                if state is None:
                    return j
        return None


def _trellis_from_tiktoken(V, enc):
    """Trellis's vocabulary from the same o200k ranks file bpe-openai reads."""
    import bpe_openai

    path = Path(bpe_openai.__file__).parent / "data" / "o200k_base.tiktoken.gz"
    return V.from_tiktoken(path, eos_token_ids=[enc.eot_token], special_tokens=dict(enc._special_tokens), name="o200k")


def _compare_vocab(vocab, spec: VocabSpec) -> dict:
    """Check that Trellis's vocabulary has the same token bytes, EOS and text-token
    set as the table the peers are built from."""
    out = {"size": [len(vocab), spec.size], "eos": [list(vocab.eos_token_ids), spec.eos_id]}
    n = min(len(vocab), spec.size)
    g = np.asarray(vocab.grammar_token_mask)[:n]
    mine = spec.text_ids[:n]
    diff_set = np.nonzero(g != mine)[0]
    diff_bytes = [
        i for i in range(n) if g[i] and mine[i] and vocab.token_bytes(i) != spec.tokens[i]
    ]
    out["text_set_differs"] = [(int(i), bool(g[i]), bool(mine[i])) for i in diff_set[:10]]
    out["n_text_set_differs"] = int(len(diff_set))
    out["bytes_differ"] = [(i, vocab.token_bytes(i), spec.tokens[i]) for i in diff_bytes[:10]]
    out["n_bytes_differ"] = len(diff_bytes)
    out["ok"] = (
        len(vocab) == spec.size
        and spec.eos_id in vocab.eos_token_ids
        and not len(diff_set)
        and not diff_bytes
    )
    return out


ENGINE_CLASSES = {"trellis": TrellisEngine, "outlines": OutlinesEngine, "xgrammar": XGrammarEngine}


def make_engines(classes: dict, wanted) -> tuple[dict, dict]:
    """The ``wanted`` engines of ``classes`` (in its order), instantiated; those that
    cannot be (not installed...) are returned apart with the reason."""
    engines, skipped = {}, {}
    for name, cls in classes.items():
        if name not in wanted:
            continue
        try:
            engines[name] = cls()
        except Exception as e:  # an engine that cannot load is reported, the others run
            skipped[name] = f"{type(e).__name__}: {e}"
            log(f"engine {name} unavailable: {skipped[name]}")
    return engines, skipped


def prepare_engines(engines: dict, spec: VocabSpec, vres: dict, notes_key: str) -> dict:
    """Build each engine's vocabulary object for ``spec``; the engines that built
    one. Recorded in ``vres``: the build times (``prepare_ms``), the engines' notes
    (under ``notes_key``), Trellis's check of its vocabulary against the shared
    token table (``trellis_vocab_check``) and the failures (``prepare_errors``)."""
    live = {}
    for n, eng in engines.items():
        try:
            t0 = perf_ns()
            eng.prepare(spec)
            vres["prepare_ms"][n] = getattr(eng, "vocab_ms", None) or (perf_ns() - t0) / 1e6
            live[n] = eng
            if getattr(eng, "notes", None):
                vres.setdefault(notes_key, {})[n] = eng.notes
            mism = getattr(eng, "vocab_mismatch", None)
            if mism is not None:
                vres["trellis_vocab_check"] = mism
                if not mism["ok"]:
                    log(f"  WARNING trellis vocabulary differs from the shared token table: {mism}")
        except Exception as e:  # an engine that cannot build this vocabulary is a result
            vres.setdefault("prepare_errors", {})[n] = f"{type(e).__name__}: {e}"
            log(f"  {n}: vocabulary failed: {type(e).__name__}: {e}")
            traceback.print_exc()
    return live


# ----------------------------------------------------------------------------------
# Ground truth for disagreements
# ----------------------------------------------------------------------------------


_CONT = (0x80, 0x8F, 0x90, 0x9F, 0xA0, 0xBF)


def _utf8_completions(tail: bytes) -> list[bytes]:
    """Continuation bytes completing an incomplete UTF-8 tail (a sample spanning
    the lead byte's valid ranges)."""
    out = []
    for k in range(1, 4):
        for c1 in _CONT:
            for c2 in (_CONT if k > 1 else (None,)):
                for c3 in (_CONT if k > 2 else (None,)):
                    comp = bytes(c for c in (c1, c2, c3) if c is not None)
                    try:
                        (tail + comp).decode("utf-8")
                    except UnicodeDecodeError:
                        continue
                    out.append(comp)
        if out:
            return out
    return out


def expected_allowed(pattern: str, prefix: bytes, token: bytes) -> str:
    """Whether prefix+token can be continued to a match of ``pattern``: "yes"/"no",
    from the ``regex`` module's partial matching. An incomplete UTF-8 tail is
    completed with a sample of valid continuation bytes first; the verdict is then
    marked "*" (a sample, not a proof, for "no*")."""
    import regex

    s = prefix + token
    try:
        return "yes" if regex.fullmatch(pattern, s.decode("utf-8"), partial=True) else "no"
    except UnicodeDecodeError as e:
        if e.reason != "unexpected end of data":
            return "no"  # invalid UTF-8: no regex here matches it
        tail_at = e.start
    for comp in _utf8_completions(s[tail_at:]):
        if regex.fullmatch(pattern, (s + comp).decode("utf-8"), partial=True):
            return "yes*"
    return "no*"


# ----------------------------------------------------------------------------------
# Measurement
# ----------------------------------------------------------------------------------


def summarize(per_step_ns: list[float]) -> dict:
    a = np.asarray(per_step_ns, dtype=np.float64) / 1e3
    if not len(a):
        return {"p50": float("nan"), "p99": float("nan"), "mean": float("nan"), "max": float("nan"), "n": 0}
    return {
        "p50": float(np.percentile(a, 50)),
        "p99": float(np.percentile(a, 99)),
        "mean": float(a.mean()),
        "max": float(a.max()),
        "n": int(len(a)),
    }


def bits_to_ids(row: np.ndarray, size: int) -> np.ndarray:
    bits = np.unpackbits(np.ascontiguousarray(row).view(np.uint8), bitorder="little")[:size]
    return bits.astype(bool)


def run_regex(case: RegexCase, spec: VocabSpec, engines: dict, args, overhead: int, log) -> dict:
    res: dict = {"regex": case.name, "pattern": case.pattern, "engines": {}, "errors": {}}
    seqs = []
    for ex in case.examples:
        ids = [int(i) for i in spec.encode(ex)]
        joined = b"".join(spec.tokens[i] or b"" for i in ids)
        if joined != ex.encode("utf-8"):
            raise RuntimeError(f"{spec.name}: tokens of {ex!r} do not spell it: {joined!r}")
        seqs.append((ex, ids))
    res["tokens"] = [len(ids) for _, ids in seqs]

    # -- compile ----------------------------------------------------------------
    compiled = {}
    for name, eng in list(engines.items()):
        try:
            g, cold, _ = eng.compile_timed(case.pattern)  # warm-up (JIT, lazy vocab tables)
            runs = []
            for _ in range(args.compile_runs):
                gc.disable()
                try:
                    g, dt, _ = eng.compile_timed(case.pattern)
                finally:
                    gc.enable()
                runs.append(dt)
            compiled[name] = g
            res["engines"][name] = {
                "compile_ms": statistics.median(runs) / 1e6,
                "compile_min_ms": min(runs) / 1e6,
                "compile_runs_ms": [r / 1e6 for r in runs],
                "compile_cold_ms": cold / 1e6,
            }
        except Exception as e:  # an engine that cannot compile a regex is a result
            res["errors"][name] = f"compile: {type(e).__name__}: {e}"
            log(f"    {name}: compile failed: {type(e).__name__}: {str(e)[:200]}")
    live = [n for n in engines if n in compiled]

    # -- check pass: allowed sets, EOS, refusals; fixes the steps every engine can walk
    masks = {n: engines[n].new_mask() for n in live}
    size = spec.size
    text = spec.text_ids
    disagreements = 0
    eos_disagreements = 0
    partial_writes = {n: 0 for n in live}
    examples = []
    refusals = []
    eos_wrong: dict = {}  # engine -> steps where EOS allowed != re.fullmatch(prefix)
    pair_steps: dict = {}  # "T-X" -> steps where these two engines' sets differ
    wrong_tokens: dict = {}  # engine -> (step, token) pairs where it contradicts the regex
    steps_common = []
    for ex, ids in seqs:
        n_full = len(ids) + 1
        sets: dict = {n: [] for n in live}
        eos_flags: dict = {n: [] for n in live}
        reached = {}
        for n in live:
            eng = engines[n]
            mask = masks[n]

            def cb(j, row, n=n):
                allowed = bits_to_ids(row, size)
                sets[n].append(allowed & text)
                eos_flags[n].append(bool(allowed[spec.eos_id]))

            # Fill a garbage pattern first: an engine must write the whole row.
            _np(mask)[...] = 0x5A5A5A5A
            stop = eng.walk_check(compiled[n], ids, mask, n_full, cb)
            # Same walk with a zeroed mask: rows must agree.
            zsets: list = []

            def zcb(j, row):
                zsets.append(bits_to_ids(row, size))

            _np(mask)[...] = 0
            eng.walk_check(compiled[n], ids, mask, n_full, zcb)
            for a, b in zip(sets[n], zsets):
                if not np.array_equal(a, b & text):
                    partial_writes[n] += 1
            reached[n] = n_full if stop is None else stop + 1
            if stop is not None:
                before = b"".join(spec.tokens[i] for i in ids[:stop])
                refusals.append(
                    {
                        "engine": n,
                        "example": ex,
                        "step": stop,
                        "prefix": before.decode("utf-8", "replace"),
                        "token": repr(spec.tokens[ids[stop]]),
                        "expected": expected_allowed(case.pattern, before, spec.tokens[ids[stop]]),
                    }
                )
        common = min(reached.values()) if reached else 0
        steps_common.append(common)
        for j in range(common):
            prefix = b"".join(spec.tokens[i] for i in ids[:j])
            want_eos = _fullmatch(case.pattern, prefix)
            for n in live:
                if eos_flags[n][j] != want_eos:
                    eos_wrong[n] = eos_wrong.get(n, 0) + 1
            if len({bool(eos_flags[n][j]) for n in live}) > 1:
                eos_disagreements += 1
                if len(examples) < args.show:
                    examples.append(
                        {
                            "example": ex,
                            "step": j,
                            "prefix": prefix.decode("utf-8", "replace"),
                            "eos": {n: eos_flags[n][j] for n in live},
                            "expected_eos": want_eos,
                        }
                    )
            base = sets[live[0]][j]
            if all(np.array_equal(base, sets[n][j]) for n in live[1:]):
                continue
            disagreements += 1
            for a_i, a in enumerate(live):
                for b in live[a_i + 1 :]:
                    if not np.array_equal(sets[a][j], sets[b][j]):
                        key = f"{SHORT[a]}-{SHORT[b]}"
                        pair_steps[key] = pair_steps.get(key, 0) + 1
            # Score every differing token against the regex, per engine.
            union = np.zeros(size, dtype=bool)
            inter = np.ones(size, dtype=bool)
            for n in live:
                union |= sets[n][j]
                inter &= sets[n][j]
            diff = np.nonzero(union & ~inter)[0]
            verdicts = [expected_allowed(case.pattern, prefix, spec.tokens[t]) for t in diff]
            for t, verdict in zip(diff, verdicts):
                ok = verdict.startswith("yes")
                for n in live:
                    if bool(sets[n][j][t]) != ok:
                        wrong_tokens[n] = wrong_tokens.get(n, 0) + 1
            if len(examples) < args.show:
                toks = [
                    {
                        "id": int(t),
                        "bytes": repr(spec.tokens[t]),
                        "allowed_by": [SHORT[n] for n in live if sets[n][j][t]],
                        "expected": verdict,
                    }
                    for t, verdict in zip(diff[:8], verdicts)
                ]
                examples.append(
                    {
                        "example": ex,
                        "step": j,
                        "prefix": prefix.decode("utf-8", "replace"),
                        "n_differing_tokens": int(len(diff)),
                        "counts": {n: int(sets[n][j].sum()) for n in live},
                        "tokens": toks,
                    }
                )
    res["disagreements"] = disagreements
    res["eos_disagreements"] = eos_disagreements
    res["eos_wrong"] = eos_wrong
    res["pair_disagreements"] = pair_steps
    res["wrong_tokens"] = wrong_tokens
    res["partial_writes"] = {n: c for n, c in partial_writes.items() if c}
    res["disagreement_examples"] = examples
    res["refusals"] = refusals
    res["steps"] = int(sum(steps_common))
    res["steps_full"] = int(sum(len(ids) + 1 for _, ids in seqs))

    # -- timing ---------------------------------------------------------------------
    n_seq = len(seqs)
    fill_samples = {n: [[] for _ in range(n_seq)] for n in live}
    adv_samples = {n: [[] for _ in range(n_seq)] for n in live}
    for n in live:  # warm-up walks
        eng = engines[n]
        for _ in range(args.warmup):
            for (ex, ids), common in zip(seqs, steps_common):
                eng.walk_timed(compiled[n], ids, masks[n], common, [], [])
    gc.collect()
    gc.disable()
    try:
        for r in range(args.repeat):
            order = live[r % len(live):] + live[: r % len(live)] if live else []
            for n in order:
                eng = engines[n]
                c = compiled[n]
                mask = masks[n]
                for k, ((ex, ids), common) in enumerate(zip(seqs, steps_common)):
                    f: list = []
                    a: list = []
                    eng.walk_timed(c, ids, mask, common, f, a)
                    fill_samples[n][k].append(f)
                    adv_samples[n][k].append(a)
    finally:
        gc.enable()

    def per_step_median(samples):
        out = []
        for per_seq in samples:
            if not per_seq:
                continue
            arr = np.asarray(per_seq, dtype=np.float64) - overhead  # repeats x steps
            out.extend(np.median(np.maximum(arr, 0.0), axis=0).tolist())
        return out

    for n in live:
        res["engines"][n]["mask_us"] = summarize(per_step_median(fill_samples[n]))
        res["engines"][n]["advance_us"] = summarize(per_step_median(adv_samples[n]))

    # -- requests: compile + first walk, engines interleaved -----------------------------
    req: dict = {n: [[] for _ in range(n_seq)] for n in live}
    for r in range(args.request_runs):
        for n in live[r % len(live):] + live[:r % len(live)]:
            for k, ((ex, ids), common) in enumerate(zip(seqs, steps_common)):
                gc.disable()
                try:
                    req[n][k].append(engines[n].request_timed(case.pattern, ids, masks[n], common))
                finally:
                    gc.enable()
    for n in live:
        # wall and CPU clocks: on a loaded machine a preempted run reads
        # milliseconds more on the wall clock, not on the CPU clock
        for key, clock in (("request", 0), ("request_cpu", 1)):
            per_example = [statistics.median(r[clock] for r in runs) / 1e6 for runs in req[n] if runs]
            res["engines"][n][key + "_examples_ms"] = per_example
            res["engines"][n][key + "_ms"] = statistics.mean(per_example) if per_example else None
    return res


def _fullmatch(pattern: str, prefix: bytes) -> bool:
    import re

    try:
        return re.fullmatch(pattern, prefix.decode("utf-8")) is not None
    except UnicodeDecodeError:
        return False


# ----------------------------------------------------------------------------------
# Reporting
# ----------------------------------------------------------------------------------


def _ratio(a, b) -> str:
    if a is None or b is None or not (a == a) or not (b == b) or b == 0:
        return "-"
    return f"{a / b:.2f}"


def _get(r, eng, *keys):
    d = r["engines"].get(eng)
    if d is None:
        return None
    for k in keys:
        d = d.get(k) if isinstance(d, dict) else None
        if d is None:
            return None
    return d


def format_table(vres: dict, engines: list[str]) -> str:
    lines = []
    hdr = (
        f"{'regex':<13} | {'compile ms (T / O / X)':<26} | {'mask p50 us (T / O / X)':<24} | "
        f"{'mask p99 us (T / O / X)':<24} | {'T/O cmp':>7} {'T/X cmp':>7} {'T/best p50':>10} | {'disagree':>8}"
    )
    lines.append(hdr)
    lines.append("-" * len(hdr))
    for r in vres["results"]:
        c = [_get(r, e, "compile_ms") for e in ENGINES]
        p50 = [_get(r, e, "mask_us", "p50") for e in ENGINES]
        p99 = [_get(r, e, "mask_us", "p99") for e in ENGINES]
        peers = [x for x in p50[1:] if x is not None]
        best = min(peers) if peers else None
        dis = str(r["disagreements"])
        if r.get("eos_disagreements"):
            dis += f"+{r['eos_disagreements']}e"
        if r.get("refusals"):
            dis += f" R{len(r['refusals'])}"
        lines.append(
            f"{r['regex']:<13} | {' / '.join(fmt(x, 1) for x in c):<26} | {' / '.join(fmt(x) for x in p50):<24} | "
            f"{' / '.join(fmt(x) for x in p99):<24} | {_ratio(c[0], c[1]):>7} {_ratio(c[0], c[2]):>7} "
            f"{_ratio(p50[0], best):>10} | {dis:>8}"
        )
    return "\n".join(lines)


def format_details(vres: dict) -> str:
    lines = []
    hdr = (
        f"{'regex':<13} | {'steps':>9} | {'mask mean us (T / O / X)':<25} | {'advance p50 us (T / O / X)':<27} | "
        f"{'advance mean us (T / O / X)':<27} | {'compile min ms (T / O / X)':<27} | {'cold compile ms (T / O / X)':<28}"
    )
    lines.append(hdr)
    lines.append("-" * len(hdr))
    for r in vres["results"]:
        mm = [_get(r, e, "mask_us", "mean") for e in ENGINES]
        ap = [_get(r, e, "advance_us", "p50") for e in ENGINES]
        am = [_get(r, e, "advance_us", "mean") for e in ENGINES]
        cc = [_get(r, e, "compile_cold_ms") for e in ENGINES]
        cm = [_get(r, e, "compile_min_ms") for e in ENGINES]
        steps = f"{r['steps']}/{r['steps_full']}"
        lines.append(
            f"{r['regex']:<13} | {steps:>9} | {' / '.join(fmt(x) for x in mm):<25} | {' / '.join(fmt(x) for x in ap):<27} | "
            f"{' / '.join(fmt(x) for x in am):<27} | {' / '.join(fmt(x, 1) for x in cm):<27} | "
            f"{' / '.join(fmt(x, 1) for x in cc):<28}"
        )
    return "\n".join(lines)


def format_requests(vres: dict) -> str:
    """The "request" regime: compile + first walk per regex, and Trellis's
    ratio to the faster peer (the bar: <= 1 on every regex)."""
    lines = []
    hdr = (f"{'regex':<13} | {'compile + first walk ms (T / O / X)':<36} | {'T/best':>6} | "
           f"{'CPU ms (T / O / X)':<28} | {'T/best':>6} | {'per example CPU ms (T)':<30}")
    lines.append(hdr)
    lines.append("-" * len(hdr))
    for r in vres["results"]:
        cells = []
        for key in ("request_ms", "request_cpu_ms"):
            q = [_get(r, e, key) for e in ENGINES]
            peers = [x for x in q[1:] if x is not None]
            cells.append((" / ".join(fmt(x, 2) for x in q), _ratio(q[0], min(peers) if peers else None)))
        ex = _get(r, "trellis", "request_cpu_examples_ms") or []
        lines.append(f"{r['regex']:<13} | {cells[0][0]:<36} | {cells[0][1]:>6} | {cells[1][0]:<28} | "
                     f"{cells[1][1]:>6} | {' '.join(fmt(x, 2) for x in ex):<30}")
    return "\n".join(lines)


def format_findings(vres: dict) -> str:
    out = []
    for r in vres["results"]:
        for name, err in r["errors"].items():
            out.append(f"[{r['regex']}] {name}: {err}")
        for ref in r["refusals"]:
            out.append(
                f"[{r['regex']}] {ref['engine']} refused token {ref['token']} at step {ref['step']} of "
                f"{ref['example']!r} (after {ref['prefix']!r}); regex says allowed={ref['expected']}"
            )
        if r.get("disagreements"):
            out.append(
                f"[{r['regex']}] {r['disagreements']} steps differ; by pair: {r['pair_disagreements']}; "
                f"(step, token) answers contradicting the regex, per engine: {r['wrong_tokens'] or '{}'}"
            )
        if r.get("eos_wrong"):
            out.append(f"[{r['regex']}] EOS allowed != re.fullmatch(prefix) at steps: {r['eos_wrong']}")
        if r["partial_writes"]:
            out.append(f"[{r['regex']}] masks not fully overwritten: {r['partial_writes']}")
        for ex in r["disagreement_examples"]:
            if "eos" in ex:
                out.append(
                    f"[{r['regex']}] EOS differs after {ex['prefix']!r} (step {ex['step']} of {ex['example']!r}): "
                    f"{ex['eos']}, regex full match={ex['expected_eos']}"
                )
                continue
            toks = ", ".join(
                f"{t['bytes']} by {'+'.join(t['allowed_by']) or 'none'} (regex: {t['expected']})" for t in ex["tokens"]
            )
            out.append(
                f"[{r['regex']}] after {ex['prefix']!r} (step {ex['step']} of {ex['example']!r}): "
                f"{ex['n_differing_tokens']} tokens differ, allowed counts {ex['counts']}; e.g. {toks}"
            )
    return "\n".join(out) if out else "(none)"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--vocab", choices=["smollm2", "o200k", "all"], default="all")
    ap.add_argument("--no-gc-flush", action="store_true",
                    help="do not run gc.collect() right before each timed compile (it evicts the "
                         "CPU caches: compiles are then timed cold); gc stays disabled while timing")
    ap.add_argument("--repeat", type=int, default=20, help="timed walks per sequence and engine")
    ap.add_argument("--warmup", type=int, default=2, help="untimed walks before timing")
    ap.add_argument("--compile-runs", type=int, default=7, help="timed compilations (median)")
    ap.add_argument("--request-runs", type=int, default=5,
                    help="timed requests (compile + first walk) per example (median)")
    ap.add_argument("--engines", default=",".join(ENGINES), help="comma-separated subset of " + ",".join(ENGINES))
    ap.add_argument("--regex", default="", help="comma-separated regex names (default: all)")
    ap.add_argument("--show", type=int, default=3, help="disagreement examples kept per regex")
    ap.add_argument("--json", default="", help="write all results here")
    ap.add_argument(
        "--trellis-bitmask",
        choices=["default", "torch", "numpy"],
        default="default",
        help="bitmask type Trellis fills (default: constrain.allocate_bitmask's default)",
    )
    args = ap.parse_args(argv)
    harness.GC_FLUSH = not args.no_gc_flush
    harness.torch_one_thread()

    engines, skipped = make_engines(ENGINE_CLASSES, [e.strip() for e in args.engines.split(",") if e.strip()])
    if "trellis" in engines and args.trellis_bitmask != "default":
        engines["trellis"].backend = args.trellis_bitmask
    cases = list(CASES)
    if args.regex:
        names = {x.strip() for x in args.regex.split(",")}
        cases = [c for c in cases if c.name in names]

    overhead = harness.timer_overhead_ns()
    env = harness.environment(engines)
    report = {"environment": env, "timer_overhead_ns": overhead, "args": vars(args), "skipped": skipped, "vocabs": {}}
    log(f"timer overhead {overhead} ns (subtracted); engines: {', '.join(engines)}")

    for vname in vocab_names(args.vocab):
        spec = VOCABS[vname]()
        log(f"[{vname}] {spec.size} ids, EOS {spec.eos_id}, {int(spec.text_ids.sum())} text tokens")
        vres: dict = {"size": spec.size, "eos": spec.eos_id, "text_tokens": int(spec.text_ids.sum()), "prepare_ms": {}}
        live = prepare_engines(engines, spec, vres, "prepare_notes")
        vres["results"] = []
        for case in cases:
            log(f"  {case.name}")
            r = run_regex(case, spec, live, args, overhead, log)
            vres["results"].append(r)
        report["vocabs"][vname] = vres
        print(f"\n=== {vname}: {spec.size} ids, {vres['text_tokens']} text tokens; repeat={args.repeat}, "
              f"compile median of {args.compile_runs} ===")
        print("vocabulary build ms (excluded from compile): " +
              ", ".join(f"{n} {ms:.1f}" for n, ms in vres["prepare_ms"].items()))
        for n, notes in vres.get("prepare_notes", {}).items():
            print(f"  {n}: " + ", ".join(f"{k} {v:.1f}" for k, v in notes.items()))
        if "trellis" in live:
            t = live["trellis"]
            kept_vocab = sorted(map(str, t.vocab_keys))
            vres["trellis_cache_policy"] = {
                "cleared_lru": t.memo_names, "kept_lru": t.kept_names, "kept_vocab_cache": kept_vocab
            }
            print(f"  trellis per-compile cache clearing: lru_cache cleared {t.memo_names or '[]'}, "
                  f"kept {t.kept_names or '[]'}; vocabulary cache kept {kept_vocab}, rest dropped")
            chk = vres.get("trellis_vocab_check", {})
            print(f"  trellis vocabulary == shared token table: {chk.get('ok')}")
        print(format_table(vres, list(live)))
        print()
        print(format_details(vres))
        print()
        print(format_requests(vres))
        print("\nfindings:")
        print(format_findings(vres))
        del spec
        gc.collect()

    print("\nT = trellis, O = outlines-core, X = xgrammar. Ratios: T/O and T/X compile time, "
          "T mask p50 / faster peer's. disagree: steps whose allowed sets differ (+Ne: EOS differs; "
          "RN: N sequences refused by some engine, timing stops there for all engines).")
    env["loadavg_end"] = [round(x, 2) for x in os.getloadavg()]
    print("environment: " + json.dumps(env))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())
