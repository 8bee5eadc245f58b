"""What a compile and a walk make is freed by reference counting.

A serving engine compiles a new schema per request and drops it after the
request. An object of Trellis's in a reference cycle outlives that: it waits
for the cyclic collector, and a compile's objects, promoted to the oldest
generation while the compile runs, wait for a full collection, which a large
heap (a vocabulary's) makes rare. Each test runs its work with the collector
off and saves what a collection then finds (``gc.DEBUG_SAVEALL``): nothing
made by ``constrain`` or ``search`` may be there. Found and fixed: the schema
document and its diagnostics (a bound method each way), refused complements
kept with their tracebacks (frames holding the whole translation), recursive
nested functions (a closure holding itself: decimal bounds, regex sizes,
Lark rule expansion).

The search drivers are held to the same, and no tensor may be left in a
cycle (a KV cache's memory). Cycles of other packages' making are left out:
``ast.literal_eval`` (lark's own literal reading) nests recursive helpers in
every call, and networkx's graph views (``lattice_search``'s lattice) refer
back to their graph.
"""

from __future__ import annotations

import gc
import gzip
import json
from pathlib import Path

import pytest

import constrain

ROOT = Path(__file__).resolve().parent.parent
SUBSET = ROOT / "tests" / "data" / "maskbench" / "subset.jsonl.gz"
OURS = ("constrain", "search")


def _ours(obj) -> bool:
    """Whether ``obj`` is Trellis's: an instance of one of its classes, or a
    function, frame or traceback of its code."""
    if type(obj).__module__.split(".")[0] in OURS:
        return True
    code = getattr(obj, "__code__", None) or getattr(obj, "f_code", None)
    if code is None and hasattr(obj, "tb_frame"):
        code = obj.tb_frame.f_code
    return code is not None and any(code.co_filename.startswith(str(ROOT / p)) for p in OURS)


def _cyclic_garbage(work, keep=_ours) -> list:
    """The objects ``keep`` picks (Trellis's) that ``work()`` left in reference
    cycles."""
    gc.collect()
    enabled = gc.isenabled()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        work()
        gc.collect()
        return [o for o in gc.garbage if keep(o)]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        if enabled:
            gc.enable()


def _describe(found: list) -> str:
    from collections import Counter

    return ", ".join(f"{n} x {k}" for k, n in Counter(
        getattr(o, "__qualname__", None) or type(o).__qualname__ for o in found).most_common(8))


def _schemas() -> list:
    with gzip.open(SUBSET, "rt", encoding="utf-8") as f:
        return [json.loads(line)["schema"] for line in f]


#: every construct whose translation once made a cycle, in one schema
NEGATIONS = {
    "type": "object",
    "properties": {
        "n": {"type": "number", "minimum": 0.25, "exclusiveMaximum": 7.125},
        "e": {"enum": ["a", "2024-01-01"], "format": "date"},
        "o": {"oneOf": [{"type": "string"}, {"type": "null"}]},
        "x": {"not": {"type": "string", "maxLength": 3}},
        # a complement that cannot be stated: refused only if an emitter needs it
        "p": {"anyOf": [{"type": "integer"}, {"not": {"pattern": "^a"}}], "const": 3},
    },
}


def test_schema_compiles_leave_no_cycles(smollm2_vocab):
    schemas = _schemas()[:60] + [NEGATIONS]

    def work():
        compiler = constrain.Compiler(smollm2_vocab)
        for schema in schemas:
            try:
                compiler.compile_json_schema(schema)
            except constrain.ConstraintError:
                pass
        # a refused schema: its error and what it was raised through
        with pytest.raises(constrain.ConstraintError):
            compiler.compile_json_schema({"not": {"pattern": "^a"}})

    found = _cyclic_garbage(work)
    assert not found, f"left in reference cycles: {_describe(found)}"


def test_walks_of_every_front_end_leave_no_cycles(smollm2_vocab, smollm2_tokenizer):
    tok = smollm2_tokenizer

    def walk(g, text: str) -> None:
        m = constrain.Matcher(g)
        bitmask = constrain.allocate_bitmask(1, len(smollm2_vocab), backend="numpy")
        for t in tok.encode(text, add_special_tokens=False):
            m.fill_next_token_bitmask(bitmask, 0)
            assert m.accept_token(t)
        fork = m.fork()
        fork.rollback(1)
        m.find_jump_forward_string()

    def work():
        compiler = constrain.Compiler(smollm2_vocab)
        walk(compiler.compile_regex(r"\d{3}-[a-z]{1,8}@(x|y)\.com"), "123-abc@x.com")
        walk(compiler.compile_grammar((ROOT / "grammars" / "json.lark").read_text()),
             '{"a": [1, 2.5, "x"]}')
        walk(compiler.compile_grammar((ROOT / "grammars" / "sql.lark").read_text()),
             "SELECT name FROM singer WHERE age > 3")
        walk(compiler.compile_json_schema(NEGATIONS), '{"n":1.5,"e":"2024-01-01","o":null,"p":3}')
        with constrain.BatchMatcher(threads=2) as batch:
            g = compiler.compile_json_schema({"type": "array", "items": {"type": "integer"}})
            ms = [constrain.Matcher(g) for _ in range(4)]
            bitmask = constrain.allocate_bitmask(4, len(smollm2_vocab), backend="numpy")
            batch.fill_next_token_bitmask(ms, bitmask)
        compiler.clear()

    found = _cyclic_garbage(work)
    assert not found, f"left in reference cycles: {_describe(found)}"


def test_search_drivers_leave_no_cycles(lm):
    """The drivers' hypotheses, particles and the model's KV caches: a tensor
    left in a cycle holds a KV cache's memory until a full collection."""
    import search

    g = constrain.compile_json_schema(
        {"type": "object", "properties": {"name": {"type": "string", "maxLength": 8}},
         "required": ["name"]}, lm.vocab)
    prompt = "Give a person as JSON."

    def work():
        search.generate(lm, prompt, constraint=g, max_new_tokens=6)
        search.beam_search(lm, prompt, constraint=g, beam_size=2, max_new_tokens=4)
        search.best_first_beam_search(lm, prompt, constraint=g, beam_size=2, max_new_tokens=4)
        search.smc(lm, prompt, constraint=g, n_particles=2, max_new_tokens=4)

    import torch

    work()  # first calls: kernels and the model's lazy state
    found = _cyclic_garbage(work, lambda o: _ours(o) or isinstance(o, torch.Tensor))
    assert not found, f"left in reference cycles: {_describe(found)}"
