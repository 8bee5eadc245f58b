"""Length-bounded strings (``maxLength``): compile, first walk and worst fill,
Trellis beside xgrammar and llguidance.

A JSON Schema object with one ``{"type": "string", "maxLength": N}`` member,
for several ``N``, walked along one valid instance (a 200-character ASCII text,
or shorter where N is), right after its compile: the *request* of
``bench_maskbench.py`` for one schema shape that real schemas use a lot
(Snowplow: 180 of 403 schemas have a ``maxLength`` of 64 or more). Trellis caps
``maxLength`` at ``max_string_length`` (2,048; larger bounds are lowered to it,
the strict side); its automaton counts 20 states per character, written as two
template layers (``terminal_kernels.write_bounded``), and its lexer expands
them as walks reach them (``LexerTables.chunk``). Round 1 is
reported apart: a fresh process meets the tables' first growth on new pages,
later rounds reuse freed memory; "peak RSS growth" is how much the process's
peak resident memory grew over the compile and walk (first time a size is met).

    python tests/benchmarks/bench_length_bounds.py [--vocab smollm2|o200k]
        [--engines trellis,xgrammar,llguidance] [--rounds 3] [--lengths 32,255,512,2048,5000]

``--lengths`` takes ``minLength:maxLength`` pairs too (``3:3,5:40,60:100``):
the string then has a ``minLength`` (its instance is as long as above).
``--pattern`` gives the string a ``pattern`` too (the instance's text, lowercase
words and spaces, must match it): Trellis folds the length into the pattern's
automaton, one state per count, instead of its bounded-string terminal, e.g.
``--pattern '^.*$'`` or ``--pattern '^[a-z ]+$'``.

Process CPU time, one process, the garbage collector off while timing,
engines warmed up as in bench_maskbench
(``TrellisJSON`` empties its caches before each compile, as there); medians over
the rounds.
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import harness  # noqa: E402
import maskbench_peers as mp  # noqa: E402
from harness import log  # noqa: E402


def peak_rss() -> int:
    """This process's peak resident memory so far, bytes (Linux: VmHWM)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return 0


def schema_of(n: int, lo: int = 0, pattern: str = "") -> dict:
    text = {"type": "string", "maxLength": n}
    if lo:
        text["minLength"] = lo
    if pattern:
        text["pattern"] = pattern
    return {"type": "object", "properties": {"text": text},
            "required": ["text"], "additionalProperties": False}


def bounds_of(spec: str) -> tuple[int, int]:
    """``(minLength, maxLength)`` of a ``--lengths`` entry: ``N`` or ``LO:N``."""
    lo, _, n = spec.rpartition(":")
    return int(lo or 0), int(n)


def instance_of(n: int) -> str:
    words = "the quick brown fox jumps over the lazy dog and keeps on running "
    text = (words * 4)[:min(n, 200)]
    return json.dumps({"text": text}, separators=(",", ":"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--vocab", default="smollm2", choices=["smollm2", "o200k"])
    ap.add_argument("--engines", default="trellis,xgrammar,llguidance")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--lengths", default="32,255,512,2048,5000",
                    help="maxLength values, or minLength:maxLength pairs (e.g. 3:3,5:40,60:100)")
    ap.add_argument("--pattern", default="",
                    help="a pattern the string must match too (the instance's lowercase words and spaces must)")
    args = ap.parse_args()
    if args.pattern:
        import re

        text = json.loads(instance_of(200))["text"]
        if not re.search(args.pattern, text):
            ap.error(f"the instance's text does not match --pattern {args.pattern!r}")
    harness.one_thread()
    spec = mp.load_vocab(args.vocab)
    engines, missing = mp.make_engines(args.engines.split(","))
    for name, why in missing.items():
        log(f"{name}: not available ({why})")
    for eng in engines.values():
        eng.prepare(spec)
        eng.warm_up()
    lengths = [bounds_of(x) for x in args.lengths.split(",")]
    rows: dict = {(n, e): {"compile": [], "walk": [], "worst": [], "ok": True, "rss": 0}
                  for n in lengths for e in engines}
    for r in range(args.rounds):
        for lo, n in lengths:
            ids = [int(t) for t in spec.encode(instance_of(n))]
            for name, eng in engines.items():
                rss0 = peak_rss()
                # as bench_maskbench: no collection pauses inside the timings
                gc.collect()
                gc.disable()
                try:
                    g, _, cpu = eng.compile_timed(schema_of(n, lo, args.pattern))
                    mask = eng.new_mask()
                    ns, cpus = [], []
                    res = eng.walk(g, ids, mask, ns, cpus)
                finally:
                    gc.enable()
                row = rows[((lo, n), name)]
                row["rss"] = max(row["rss"], peak_rss() - rss0)
                del g
                row["compile"].append(cpu / 1e6)
                row["walk"].append(sum(cpus) / 1e6)
                row["worst"].append(max(cpus) / 1e6)
                row["ok"] = row["ok"] and res[0] is None and bool(res[1])
        log(f"round {r + 1} done")
    shape = f"maxLength with pattern {args.pattern!r}" if args.pattern else "maxLength"
    print(f"\n{args.vocab}, {shape}, {args.rounds} rounds, process CPU ms (median); first walk: "
          f"{len(spec.encode(instance_of(max(n for _, n in lengths))))} fills at most\n")
    print("| minLength:maxLength | engine | compile | first walk | worst fill | request | round 1: request, worst fill "
          "| peak RSS growth MiB | instance accepted |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    med = statistics.median
    for lo, n in lengths:
        for name in engines:
            row = rows[((lo, n), name)]
            c, w = med(row["compile"]), med(row["walk"])
            first = f"{row['compile'][0] + row['walk'][0]:.2f}, {row['worst'][0]:.2f}"
            print(f"| {f'{lo}:' if lo else ''}{n} | {name} | {c:.2f} | {w:.2f} | {med(row['worst']):.2f} | {c + w:.2f} | {first} | "
                  f"{row['rss'] / 2 ** 20:.1f} | {'yes' if row['ok'] else 'NO'} |")
    print("\nenvironment: " + json.dumps(harness.environment(engines)))


if __name__ == "__main__":
    main()
