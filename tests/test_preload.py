"""The background load of the first compile's kernels (constrain.kernel_loading.PRELOADER).

Each check runs in a fresh process: what it tests is what a new process does
between ``import constrain`` and its first compile."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from constrain.kernel_loading import PRELOAD

ROOT = Path(__file__).resolve().parents[1]

# records every kernel numba loads from its cache on this thread from now on
_RECORD = textwrap.dedent('''
    import json, sys, threading, time
    import constrain
    from constrain.kernel_loading import PRELOAD, PRELOADER
    from numba.core import caching
    main = threading.get_ident()
    loads = []
    _load = caching.Cache.load_overload
    def load_overload(self, sig, ctx):
        if threading.get_ident() == main:
            loads.append(self._py_func.__name__)
        return _load(self, sig, ctx)
    caching.Cache.load_overload = load_overload
''')

# compiles the person schema and a regex over a small vocabulary, walks both
_WORK = textwrap.dedent('''
    tokens = [bytes([b]) for b in range(256)] + [b'{"', b'":', b'",', b"<eos>"]
    vocab = constrain.Vocabulary.from_tokens(tokens, eos_token_ids=[len(tokens) - 1])
    schema = json.load(open("examples/person.schema.json"))
    bm = constrain.allocate_bitmask(1, len(vocab), backend="numpy")
    def walk(c, text):
        s = c.initial_state()
        for b in text:
            c.fill_bitmask(s, bm, 0)
            s = c.advance(s, b)
        c.fill_bitmask(s, bm, 0)
        return c.is_accepting(s)
    ok = walk(constrain.compile_json_schema(schema, vocab),
              b'{"name":"Ada","age":36,"languages":["en"]}')
    ok = ok and walk(constrain.compile_regex(r"[a-z]+@[a-z]+\\.org", vocab), b"ada@b.org")
''')


def _run(script: str, env: dict | None = None, timeout: float = 600) -> dict:
    out = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True,
                         text=True, timeout=timeout, env=dict(os.environ, **(env or {})))
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module", autouse=True)
def compiled_kernels():
    """The preloader loads nothing before ``trellis warm-up`` has compiled the
    kernels (a cold cache): warm them up first where that is still to come."""
    _run("import json, constrain\n"
         "from constrain.warmup import kernels_compiled\n"
         "kernels_compiled() or constrain.warm_up()\n"
         "print(json.dumps(kernels_compiled()))")


def test_the_first_compile_finds_its_kernels_loaded():
    res = _run(_RECORD + "PRELOADER.join()\n" + _WORK + textwrap.dedent('''
        listed = {name for _, name in PRELOAD}
        print(json.dumps({"ok": ok, "loaded": PRELOADER.loaded, "loads": loads,
                          "listed_loads": sorted(listed & set(loads))}))
    '''))
    assert res["ok"]
    assert res["loaded"] >= len(PRELOAD)  # every kernel of PRELOAD
    # none of them on the caller's thread: the first compile's are all listed
    assert res["listed_loads"] == [] and res["loads"] == [], res["loads"]


def test_turned_off_it_loads_nothing():
    res = _run(_RECORD + "time.sleep(0.5)\n" + _WORK +
               "print(json.dumps({'ok': ok, 'loaded': PRELOADER.loaded, 'loads': loads}))",
               env={"TRELLIS_PRELOAD": "0"})
    assert res["ok"] and res["loaded"] == 0
    # without it, the caller's thread loads what the preloader would have (the
    # schema's strings are length-bounded: their walks are bounded_needs's)
    assert {"build_trie", "bounded_needs", "earley_next", "token_transitions"} <= \
        set(res["loads"])


@pytest.mark.parametrize("delay", [0.06, 0.12, 0.2])
def test_fork_while_it_loads(delay):
    # a fork mid-preload waits for the kernel being loaded: the child can
    # compile (no compiler lock or LLVM state left held) and so can the parent
    res = _run(_RECORD + f"time.sleep({delay})\n" + textwrap.dedent('''
        import os
        pid = os.fork()
        if pid == 0:
            import signal
            signal.alarm(120)  # a child that deadlocks dies rather than outlive the test
            ok = False
            try:
    ''') + textwrap.indent(_WORK, "        ") + textwrap.dedent('''
            finally:
                os._exit(0 if ok else 3)
        _, status = os.waitpid(pid, 0)
    ''') + _WORK + "print(json.dumps({'ok': ok, 'child': os.waitstatus_to_exitcode(status)}))",
        timeout=300)
    assert res == {"ok": True, "child": 0}


@pytest.mark.parametrize("delay", [0.0, 0.07, 0.15])
def test_exit_while_it_loads(delay):
    # the interpreter exits cleanly at any point of the preload (it stops after
    # the kernel in hand)
    res = _run(f"import json, time, constrain\ntime.sleep({delay})\n"
               "print(json.dumps(constrain.kernel_loading.PRELOADER.running() or 'done'))")
    assert res in (True, "done")


def test_a_compile_links_against_a_loaded_kernel():
    # constrain's kernels load without parsing the bitcode numba keeps for
    # linking (their symbols come from the object code's symbol table): a
    # later compile that calls one parses it then, and runs
    res = _run(textwrap.dedent('''
        import json
        import numpy as np
        from numba import njit
        from constrain.automata.bits import bits_to_ids
        from constrain.kernel_loading import elf_defined_symbols

        ids = bits_to_ids(np.array([5, 1 << 31], dtype=np.uint32), 64).tolist()
        library = bits_to_ids.overloads[bits_to_ids.signatures[0]].library
        unparsed = library._shared_module is None
        cache = bits_to_ids._cache
        key = cache._index_key(bits_to_ids.signatures[0], bits_to_ids.targetctx.codegen())
        names = elf_defined_symbols(cache._cache_file.load(key)[0][2][0])

        @njit(cache=False)
        def count(row, n):
            return bits_to_ids(row, n).shape[0] * 10

        linked = count(np.array([5, 1 << 31], dtype=np.uint32), 64)
        module = library._shared_module
        defined = {f.name for f in module.functions if not f.is_declaration}
        print(json.dumps({"ids": ids, "hits": sum(bits_to_ids.stats.cache_hits.values()),
                          "unparsed": unparsed, "linked": int(linked),
                          "parsed": module is not None,
                          "missing": sorted(defined - names), "extra": sorted(names - defined
                              - {g.name for g in module.global_variables})}))
    '''), env={"TRELLIS_PRELOAD": "0"})
    assert res["ids"] == [0, 2, 63] and res["hits"] == 1  # loaded from the cache
    assert res["unparsed"] and res["parsed"] and res["linked"] == 30
    assert res["missing"] == [] and res["extra"] == []


def test_warm_up_compiles_what_a_grown_parser_calls():
    # every signature a kernel is called with from Python must be one warm_up
    # calls it with: the parser's context table, grown past its capacity,
    # rehashed with table_rehash(..., first=1) while the lexer's growth (the
    # one warm_up meets) left ``first`` out, a second signature that compiled
    # (~0.2-0.5 s) inside the first request whose parser grew
    res = _run(textwrap.dedent('''
        import json
        from constrain import compile_grammar, warm_up
        from constrain.automata.hash_table import table_rehash
        from constrain.warmup import _default_vocab

        warm_up()
        before = sorted(map(str, table_rehash.signatures))
        g = compile_grammar('start: v\\nv: "[" (v ("," v)*)? "]" | "1"\\n', _default_vocab())
        cap = g.parser._ctx[5].shape[0]
        g.advance_bytes(g.initial_state(), b"[" * (cap + 8))
        print(json.dumps({"grown": g.parser._ctx[5].shape[0] > cap, "before": before,
                          "after": sorted(map(str, table_rehash.signatures))}))
    '''), env={"TRELLIS_PRELOAD": "0"})
    assert res["grown"]
    assert res["after"] == res["before"], res


def test_warm_up_compiles_what_a_wide_vocabularys_walks_call():
    # warm_up's small vocabulary keeps no loop exits (too many for its trie),
    # so it never walks a route into text; a vocabulary wide enough to keep
    # them (a real tokenizer's) walks one at the first object key or string,
    # and a route made writable there compiled a second signature of the
    # lexer's walk kernels (~2 s) inside the first request. Every kernel a
    # JSON Schema's first walk calls over such a vocabulary must have been
    # compiled by warm_up
    res = _run(textwrap.dedent('''
        import json, random, sys
        from numba.core.registry import CPUDispatcher
        from constrain import Vocabulary, allocate_bitmask, compile_json_schema, warm_up

        warm_up()
        rng = random.Random(7)
        words = {"".join(rng.choice("abcdefghij") for _ in range(rng.randint(2, 7))).encode()
                 for _ in range(6000)}
        tokens = [bytes([b]) for b in range(256)] + sorted(words) + [b'":"', b'","', b'"}', b"<eos>"]
        vocab = Vocabulary.from_tokens(tokens, eos_token_ids=[len(tokens) - 1])
        kernels = {v for m in list(sys.modules.values()) if m and m.__name__.startswith("constrain.")
                   for v in vars(m).values() if isinstance(v, CPUDispatcher)}
        before = {k.py_func.__qualname__: sorted(map(str, k.signatures)) for k in kernels}
        g = compile_json_schema({"type": "object", "properties": {
            "name": {"type": "string"}, "nick": {"type": "string", "maxLength": 8}},
            "additionalProperties": {"type": "integer"}}, vocab)
        routes = []
        walk = g.lexer._text_route
        g.lexer._text_route = lambda s: routes.append(walk(s)) or routes[-1]
        bitmask = allocate_bitmask(1, len(vocab), backend="numpy")
        state = g.initial_state()
        for t in b'{"name":"abc","nick":"ab","other":1}':  # (token b is byte b)
            g.fill_bitmask(state, bitmask, 0)
            state = g.advance(state, t)
        g.fill_bitmask(state, bitmask, 0)
        after = {k.py_func.__qualname__: sorted(map(str, k.signatures)) for k in kernels}
        print(json.dumps({"routes": sum(len(r[0]) > 0 for r in routes),
                          "new": {k: v for k, v in after.items() if v != before.get(k)}}))
    '''), env={"TRELLIS_PRELOAD": "0"})
    assert res["routes"] > 0  # the walks did take routes
    assert res["new"] == {}
