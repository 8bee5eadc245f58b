"""Kernel compilation and loading never count against a compile's ``time_budget``,
nor does what other threads run: a :class:`Deadline` is on its thread's CPU clock.

Numba compiles (or loads from its disk cache) a kernel inside its global
compiler lock; the CPU time a thread spends in there is left out of its
deadlines. The in-process tests stand in for a cold cache by spinning inside
that lock (what numba does while it compiles); the subprocess test compiles on
a truly empty ``NUMBA_CACHE_DIR``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from numba.core.compiler_lock import global_compiler_lock

import constrain
import constrain.cfg.lexer as lexer_module
from constrain.automata.deadline import Deadline, compile_seconds, now
from constrain.errors import GrammarTooComplexError

ROOT = Path(__file__).resolve().parents[1]
PERSON = json.loads((ROOT / "examples" / "person.schema.json").read_text())


def _vocab():
    tokens = [bytes([b]) for b in range(256)] + [b'{"', b'":', b"<eos>"]
    return constrain.Vocabulary.from_tokens(tokens, eos_token_ids=[len(tokens) - 1])


def _spin(seconds: float) -> None:
    """Spend ``seconds`` of this thread's CPU time."""
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


def _as_numba(seconds: float) -> None:
    """Spend ``seconds`` of CPU the way numba does while it compiles: in its lock."""
    with global_compiler_lock:
        _spin(seconds)


def test_deadline_stands_still_while_numba_compiles():
    d = Deadline.after(0.2)
    before = compile_seconds()
    _as_numba(0.4)
    assert compile_seconds() - before >= 0.39
    assert not d.expired() and d.remaining() > 0.1
    assert now() < d  # compares as the now() value it stands for
    _spin(0.25)
    assert d.expired()


def test_other_threads_do_not_count():
    # other threads' compiles and work, and the wait for them: none of it is
    # this thread's CPU time
    d = Deadline.after(0.1)
    before = compile_seconds()
    threads = [threading.Thread(target=_as_numba, args=(0.3,)),
               threading.Thread(target=_spin, args=(0.3,))]
    for t in threads:
        t.start()
    time.sleep(0.05)
    with global_compiler_lock:  # waits for the other thread's "compile"
        pass
    for t in threads:
        t.join()
    assert compile_seconds() - before < 0.05
    assert not d.expired() and d.remaining() > 0.05


def test_a_deadline_is_the_threads_own():
    # a deadline made on one thread reads that thread's clock alone: a second
    # thread's deadline is untouched by the first one's work
    seen = {}

    def worker():
        d = Deadline.after(0.2)
        time.sleep(0.3)
        seen["end"] = d.remaining()

    t = threading.Thread(target=worker)
    t.start()
    _spin(0.3)
    t.join()
    assert seen["end"] > 0.15


@pytest.mark.parametrize("in_lock,passes", [(True, True), (False, False)])
def test_schema_compile_with_kernel_loading_inside(monkeypatch, in_lock, passes):
    """Every terminal's automaton pays 0.2 s of CPU first, under a 0.3 s budget:
    in numba's lock (kernels loading) the compile succeeds; as plain work it
    runs out of time, so the budget still bites."""
    real = lexer_module.regex_byte_dfa

    def slow(*args, **kwargs):
        if in_lock:
            _as_numba(0.2)
        else:
            _spin(0.2)
        return real(*args, **kwargs)

    monkeypatch.setattr(lexer_module, "regex_byte_dfa", slow)
    vocab = _vocab()  # a fresh compiler: no terminal automata cached
    if passes:
        c = constrain.compile_json_schema(PERSON, vocab, time_budget=0.3)
        assert list(c.allowed_token_ids(c.initial_state())) == [ord("{"), 256]  # {"
    else:
        with pytest.raises(GrammarTooComplexError, match="time budget"):
            constrain.compile_json_schema(PERSON, vocab, time_budget=0.3)


def test_sleeping_is_not_work(monkeypatch):
    # the wall clock passing (a loaded machine, a thread descheduled) is not
    # the compile's work: 0.2 s asleep per terminal under a 0.3 s budget passes
    real = lexer_module.regex_byte_dfa

    def asleep(*args, **kwargs):
        time.sleep(0.2)
        return real(*args, **kwargs)

    monkeypatch.setattr(lexer_module, "regex_byte_dfa", asleep)
    c = constrain.compile_json_schema(PERSON, _vocab(), time_budget=0.3)
    assert list(c.allowed_token_ids(c.initial_state())) == [ord("{"), 256]


_COLD = r"""
import json, sys, time
import constrain
from constrain.automata.deadline import compile_seconds
tokens = [bytes([b]) for b in range(256)] + [b"<eos>"]
vocab = constrain.Vocabulary.from_tokens(tokens, eos_token_ids=[256])
t = time.perf_counter()
r = constrain.compile_regex('"[a-z]{2,4}"', vocab, time_budget=0.5)
assert list(r.allowed_token_ids(r.initial_state())) == [ord('"')]
s = constrain.compile_json_schema(json.loads(sys.argv[1]), vocab, time_budget=0.5)
assert list(s.allowed_token_ids(s.initial_state())) == [ord("{")]
print(f"{time.perf_counter() - t:.1f} {compile_seconds():.1f}")
"""


@pytest.mark.skipif(not os.environ.get("TRELLIS_COLD_TEST"),
                    reason="compiles every kernel afresh (70 s on 2 cores): TRELLIS_COLD_TEST=1")
def test_cold_numba_cache_compile_under_small_budget(tmp_path):
    """On an empty numba cache the kernels compile (70 s on a busy 2-core
    machine), yet a regex and a small schema compile under a 0.5 s budget."""
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path))
    schema = {"type": "object", "properties": {"a": {"type": "string", "pattern": "^[a-z]{2,4}$"}},
              "required": ["a"], "additionalProperties": False}
    out = subprocess.run([sys.executable, "-c", _COLD, json.dumps(schema)], env=env, cwd=ROOT,
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    wall, compiling = map(float, out.stdout.split())
    assert compiling > 1.0, "the kernels were not compiled afresh"


def test_kernels_compiled_follows_the_stamp(monkeypatch, tmp_path):
    import constrain.warmup as warmup

    stamp = tmp_path / "trellis-kernels.stamp"
    monkeypatch.setattr(warmup, "_stamp_path", lambda: stamp)
    assert not warmup.kernels_compiled()  # no stamp: a first run
    constrain.warm_up()
    assert warmup.kernels_compiled()
    # a kernel module edited (numba's cache is stale): cold again until a warm-up
    monkeypatch.setattr(warmup, "_kernels_key", lambda: "another")
    assert not warmup.kernels_compiled()


def test_cli_says_when_it_compiles_the_kernels(monkeypatch, capsys):
    import constrain.warmup as warmup
    from search.cli import app

    calls = []
    monkeypatch.setattr(warmup, "warm_up", lambda: calls.append(1) or 0.5)
    monkeypatch.setattr(warmup, "kernels_compiled", lambda: False)
    app._ensure_kernels(app._err)
    assert calls == [1]
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("trellis: compiling Trellis's kernels once")
    monkeypatch.setattr(warmup, "kernels_compiled", lambda: True)
    app._ensure_kernels(app._err)  # warm: nothing said, nothing run
    assert calls == [1] and capsys.readouterr().err == ""
    assert app.main(["warm-up"]) == 0
    assert capsys.readouterr().err == "trellis: Trellis's kernels loaded in 0.5 s\n"


def test_a_compile_under_way_at_import_is_not_miscounted():
    # a thread inside numba's lock when the listener was registered ends
    # without a start: ignored, not counted as leaving
    from constrain.automata.deadline import _COMPILE_CLOCK

    def unmatched_end():
        _COMPILE_CLOCK.on_end(None)

    t = threading.Thread(target=unmatched_end)
    t.start()
    t.join()
    before = compile_seconds()
    _spin(0.05)
    assert compile_seconds() == before
    _as_numba(0.1)
    assert compile_seconds() - before >= 0.09


def test_the_kernel_clock_is_the_threads_cpu_time():
    from constrain.automata.deadline import clock

    for _ in range(3):
        before = time.thread_time()
        _spin(0.01)
        t = clock()
        assert before + 0.01 <= t <= time.thread_time()
    before = clock()
    time.sleep(0.1)
    assert clock() - before < 0.05


_LOADS = r"""
import json
import numba.core.event as ev
from numba.core import base
compiles, refreshes = [], []
class L(ev.Listener):
    def on_start(self, e): compiles.append(e)
    def on_end(self, e): pass
ev.register("numba:compile", L())
refresh = base.BaseContext.refresh
base.BaseContext.refresh = lambda self: refreshes.append(1) or refresh(self)
import constrain
tokens = [bytes([b]) for b in range(256)] + [b"ab", b"<eos>"]
vocab = constrain.Vocabulary.from_tokens(tokens, eos_token_ids=[257])
r = constrain.compile_regex("(ab|c)+", vocab)
bm = constrain.allocate_bitmask(1, len(vocab), backend="numpy")
r.fill_bitmask(r.initial_state(), bm, 0)
print(json.dumps({"ids": [int(i) for i in constrain.bitmask_to_ids(bm[0], len(vocab))],
                  "compiles": len(compiles), "refreshes": len(refreshes)}))
"""


def test_cached_kernels_load_without_numba_compiler_set_up():
    """constrain.kernel_loading: loading constrain's cached kernels skips
    numba's registry refresh (~80 ms of a new process); a compile still gets it."""
    out = subprocess.run([sys.executable, "-c", _LOADS], cwd=ROOT, capture_output=True,
                         text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    res = json.loads(out.stdout.strip().splitlines()[-1])
    assert res["ids"] == [ord("a"), ord("c"), 256]
    if res["compiles"] == 0:  # a warm cache: loads only
        assert res["refreshes"] == 0
    else:
        assert res["refreshes"] > 0


def test_a_deadline_mostly_reads_the_wall_clock(monkeypatch):
    """A thread's CPU clock runs no faster than the wall clock: until the wall
    clock has gone the budget, expired() need not read the CPU clock (~0.6 us,
    about 200 reads a JSON Schema compile; the budget checks were ~7 % of it)."""
    import constrain.automata.deadline as dl

    reads = []
    real = time.thread_time
    monkeypatch.setattr(dl.time, "thread_time", lambda: reads.append(1) or real())
    d = dl.Deadline.after(30.0)
    made = len(reads)
    assert not any(d.expired() for _ in range(1000)) and not any(
        dl.passed(d) for _ in range(1000))
    assert len(reads) == made
    short = dl.Deadline.after(0.05)
    time.sleep(0.1)  # the wall clock passed: the CPU clock is read, and has not
    assert not short.expired() and len(reads) > made
    _spin(0.06)
    assert short.expired()
