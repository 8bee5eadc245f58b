"""``warm_up``: load the compiled kernels before the first real request.

Trellis's hot loops are numba kernels cached on disk (``cache=True``). A kernel
is loaded from that cache the first time it is called in a process, which takes
~30 ms per kernel module: a server's first schema that needs, say,
``automata/determinize_kernels`` or ``cfg/lexer_kernels`` pays it inside its
compile or its first mask.
Likewise the first schema whose translation asks ``jsonschema`` whether a value
is valid (an enum next to a keyword such as ``maxLength``) imports it: about a
second.
``warm_up`` makes those first calls up front, on a small vocabulary of its own
(or on yours, which also builds its token trie), so that the first request's
latency is the steady-state one.

The very first run on a machine (or after an upgrade of numba or of Trellis's
kernel sources) compiles the kernels instead: about 150 s of CPU time. A
finished ``warm_up`` leaves a stamp in numba's cache directory, so that
:func:`kernels_compiled` can tell cheaply whether that is still to come; the
set-up step runs ``trellis warm-up``, and ``trellis generate`` and ``trellis
search`` warm up first (saying so on stderr) when it is.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time
from pathlib import Path

from constrain.vocab.vocabulary import Vocabulary

# what the calls below exercise: every JSON lexeme, key exclusion, enums,
# bounded and non-ASCII strings and integer ranges (the kernels of
# constrain/automata/ and frontends/json_schema/number_kernels), a format, a
# pattern, nesting, and a Lark grammar with %ignore (constrain/cfg/'s kernels)
_SCHEMA = {
    "type": "object",
    "properties": {
        "s": {"type": "string", "minLength": 1, "maxLength": 8},
        "n": {"type": "number"},
        "i": {"type": "integer", "minimum": 1, "maximum": 900},
        "e": {"enum": ["red", "green", 3]},
        "p": {"type": "string", "pattern": "^[a-z]{2,4}$"},
        # a pattern over non-ASCII characters: the general regex pipeline
        "q": {"type": "string", "pattern": "^[^,]{1,3}$"},
        "d": {"type": "string", "format": "date-time"},
        "a": {"type": "array", "items": {"anyOf": [{"type": "null"}, {"type": "boolean"}]},
              "maxItems": 3},
        "o": {"type": "object", "additionalProperties": {"type": "string"}},
        # a lexer of more than its initial 1024 states, expanded as the walk
        # reaches them (past the first chunk), and a float multipleOf
        "l": {"type": "string", "maxLength": 300},
        "m": {"type": "number", "multipleOf": 0.25},
        # enum values checked against a length bound: imports jsonschema (~1 s)
        "k": {"enum": ["on", "off", "maybe"], "maxLength": 3},
    },
    "required": ["s"],
}
_INSTANCE = {"s": "héllo", "n": -1.5e3, "i": 7, "e": "green", "p": "abc",
             "d": "2024-01-02T03:04:05Z", "a": [None, True], "o": {"k": "v"}, "l": "x" * 200,
             "m": 2.75, "k": "off", "q": "é!"}
_GRAMMAR = r"""
start: expr
expr: expr "+" term | term
term: NUMBER | NAME | "(" expr ")"
NAME: /[a-z_][a-z0-9_]*/
%import common.NUMBER
%import common.WS
%ignore WS
"""
_TEXT = "(a1 + 22) + x_y"
_REGEX = r"[0-9]{1,3}(\.[0-9]+)?|[A-Z][a-z]*"


def _default_vocab() -> Vocabulary:
    """Every byte, and multi-byte tokens that straddle JSON's terminals."""
    extra = [b'{"', b'":', b'",', b'"}', b"},", b"[1", b"],", b"true", b"null", b"00", b"red",
             b"ab", b" +", b"(a", b"ll", b"\xc3\xa9"]
    tokens = [bytes([b]) for b in range(256)] + extra + [b"<eos>"]
    return Vocabulary.from_tokens(tokens, eos_token_ids=[len(tokens) - 1], name="warm-up")


def _encode(vocab: Vocabulary, data: bytes) -> list[int]:
    """``data`` as single-byte tokens (every byte a vocabulary of the default
    kind has; a real vocabulary's byte tokens are looked up)."""
    single = {}
    for i, t in enumerate(vocab.tokens):
        if t is not None and len(t) == 1 and t not in single:
            single[t] = i
    out = []
    for b in data:
        tok = single.get(bytes([b]))
        if tok is None:
            return out  # a vocabulary that cannot spell it: the walk stops here
        out.append(tok)
    return out


def _walk(constraint, vocab: Vocabulary, data: bytes, bitmask) -> None:
    state = constraint.initial_state()
    for tok in _encode(vocab, data):
        constraint.fill_bitmask(state, bitmask, 0)
        state = constraint.advance(state, tok)
        if state is None:
            return
    constraint.fill_bitmask(state, bitmask, 0)


def warm_up(vocab: Vocabulary | None = None) -> float:
    """Load Trellis's compiled kernels now rather than on first use; returns the
    seconds it took (about 0.1-1 s; most of it numba loading its on-disk cache,
    or compiling it the very first time on a machine).

    It compiles a JSON Schema, a regex and a Lark grammar that between them use
    every kernel of compilation and of mask filling (and ``jsonschema``, which
    the JSON Schema translator imports on first use), fills masks along a valid
    string of each, and applies one to float32 logits. With ``vocab`` (the vocabulary you will serve), its
    token trie is built too; otherwise a small vocabulary of its own is used.
    Nothing it compiles is kept beyond the caches a first real compile fills.

    Its compiles have no time budget: on a cold numba cache, compiling the
    kernels themselves takes a minute or more on a small machine, and that is
    what warming up is for.
    """
    import math

    import numpy as np

    from constrain.runtime.bitmask import allocate_bitmask, apply_bitmask
    from constrain.cfg.grammar import compile_grammar
    from constrain.compiler import compile_json_schema
    from constrain.regular.regex import compile_regex
    from constrain.regular.token_automaton import mask_writer
    from constrain.runtime.bitmask import _PACK_MIN_BYTES

    t0 = time.perf_counter()
    vocab = _default_vocab() if vocab is None else vocab
    bitmask = allocate_bitmask(1, len(vocab), backend="numpy")
    schema = compile_json_schema(_SCHEMA, vocab, time_budget=math.inf)
    _walk(schema, vocab, json.dumps(_INSTANCE, ensure_ascii=False,
                                    separators=(",", ":")).encode(), bitmask)
    first = compile_grammar(_GRAMMAR, vocab, time_budget=math.inf)
    _walk(first, vocab, _TEXT.encode(), bitmask)
    grammar = compile_grammar(_GRAMMAR, vocab, time_budget=math.inf)  # reuses the first's lexer walks
    _walk(grammar, vocab, _TEXT.encode(), bitmask)
    grammar.allowed_token_ids(grammar.initial_state())
    regex = compile_regex(_REGEX, vocab, time_budget=math.inf)
    _walk(regex, vocab, b"12.5", bitmask)
    apply_bitmask(np.zeros((1, len(vocab)), dtype=np.float32), bitmask)
    # the needs of a length-bounded string's text kept per vocabulary
    # (TokenTrie.text_needs), which a small vocabulary never makes: its exits
    # are too many for TokenTrie.loop_exits to keep
    from constrain.vocab.trie import TokenTrie
    from constrain.vocab.trie_kernels import EXIT_COLUMNS, text_chars

    trie = TokenTrie.of(vocab)
    trie.packed()  # (its order array a view of the packed trie, as text_needs finds it)
    no_exits = np.zeros((0, EXIT_COLUMNS), dtype=np.int32)
    no_exits.setflags(write=False)
    text_chars(no_exits, trie.order, *vocab.flat, np.zeros(trie.no_token + 1, dtype=np.int16),
               int(np.iinfo(np.int16).max), np.zeros(0, dtype=np.int32))
    # the spans kernel of the row writers of a wide vocabulary's rows (14 KB
    # or more: o200k's), which a small vocabulary's never call; grammar rows
    # are read-only, a regex's eager ones not
    wide = np.zeros(_PACK_MIN_BYTES // 4, dtype=np.uint32)
    wide[-1] = 1
    mask_writer(wide)
    wide.setflags(write=False)
    mask_writer(wide)
    _write_stamp()
    return time.perf_counter() - t0


#: what a cold warm-up costs, for the message that announces one (seconds on
#: one core of the CI machine: 147-161 s on 2026-12-07, up from ~40 s on
#: 2026-12-03 as kernels were added; a busy machine takes longer)
COLD_SECONDS = 150


def _stamp_path() -> Path:
    """The stamp's file: in the directory numba caches constrain's kernels in
    (``__pycache__`` next to the sources, or under ``NUMBA_CACHE_DIR``), which
    numba has checked to be writable."""
    from constrain.automata.deadline import clock

    return Path(clock._cache._cache_path) / "trellis-kernels.stamp"


def _kernels_key() -> str:
    """What numba's cached kernels depend on: numba, Python, the CPU it
    compiles for, and the sources of every kernel module (the stamp each
    cache entry is checked against: :mod:`constrain.kernel_loading`)."""
    import llvmlite.binding as llvm
    import numba

    from constrain.kernel_loading import kernel_sources_stamp

    return hashlib.sha256(f"{numba.__version__}|{sys.version}|{llvm.get_host_cpu_name()}|"
                          f"{os.environ.get('NUMBA_CPU_NAME', '')}|"
                          f"{kernel_sources_stamp()}".encode()).hexdigest()


def _write_stamp() -> None:
    try:
        path = _stamp_path()
        tmp = path.with_name(f"{path.name}.{os.getpid()}")
        tmp.write_text(_kernels_key())
        tmp.replace(path)
    except OSError:  # a read-only cache: kernels_compiled() stays False, nothing worse
        pass


def kernels_compiled() -> bool:
    """Whether :func:`warm_up` has run since numba's cache of Trellis's kernels
    was last invalidated (first install, an upgrade of numba or of a kernel
    module); if not, the next warm-up or first compile compiles the kernels
    (about :data:`COLD_SECONDS` s of CPU). A file read (the kernel modules'
    stamps are taken once per process, on import)."""
    try:
        return _stamp_path().read_text() == _kernels_key()
    except OSError:
        return False


__all__ = ["COLD_SECONDS", "kernels_compiled", "warm_up"]
