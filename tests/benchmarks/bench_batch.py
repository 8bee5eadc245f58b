"""Batched mask filling: ``constrain.BatchMatcher`` against a loop of single fills.

    python tests/benchmarks/bench_batch.py [--batch 64] [--rounds 3] [--threads 1,2]
        [--auto 8] [--json OUT]

A serving engine's step: ``--batch`` requests, each on its own MaskBench schema
(the vendored subset, tests/data/maskbench, round-robin over its splits), each
walking its valid instance's SmolLM2 tokens. Per step, every row's mask is
filled (timed), then every request accepts its next token (not timed). Three
ways to fill, each on schemas compiled afresh by a new ``constrain.Compiler``
(so every walk is a *first walk*: lexer states visited for the first time):

* ``loop``: ``matcher.fill_next_token_bitmask(bitmask, i)`` for each row;
* ``batch/N``: ``BatchMatcher(threads=N, adaptive=False).fill_next_token_bitmask(...)``,
  every call with first visits of two constraints or more on N threads;
* ``auto/N``: ``BatchMatcher(threads=N)``, the default: each call's thread count
  (1 to N) chosen by timing the calls (``constrain.runtime.pool_size``); one
  matcher for all rounds, as a server keeps one.

Then the same walks again on the same compiled schemas (*warm*: every mask
cached). Rounds are interleaved (loop, batch/1, batch/2, loop, ...) and the
median per configuration is reported: total fill time per walk, per step
(one batch) and per row, and the speed-up of each against ``batch/1``.

Each round also times every row of one more first walk on its own (a loop of
fills) and reports the *bound* of N threads: the walk's time if each step's
rows were spread over N threads (longest first, each to the least loaded)
and nothing else held them back (no GIL, no hand-offs). A step's rows are
filled before any request advances, so a step with one first visit is one
thread's work whatever N is: the bound says how much speed-up the walks'
shape leaves for threads to find.

Before the first round and after the last, the machine's own ceiling: the
speed-up of N threads on a nogil numba loop that holds the GIL little
(:func:`machine_ceiling`). On a shared virtual machine the other core is not
always free, and a two-thread figure means little when that is below ~1.6x.

The start-up's objects are frozen out of the cyclic collector after the
warm-up (``gc.freeze()``, as a server does) and each configuration starts from
a fresh collection; the full collections that still fall inside a timed walk
are counted and printed (a full pass over torch's heap took ~0.2 s of CPU,
which once made one configuration's CPU per row 40 -> 70 us in one round).
"""

from __future__ import annotations

import harness  # first: puts the repository root on sys.path

import argparse  # noqa: E402
import gc  # noqa: E402
import gzip  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

import constrain  # noqa: E402
from harness import log  # noqa: E402

SUBSET = harness.ROOT / "tests" / "data" / "maskbench" / "subset.jsonl.gz"


def load_cases(n: int, vocab, encode) -> list[tuple[dict, list[int]]]:
    """``n`` (schema, token ids) pairs: per schema of the subset (round-robin
    over splits), its first valid instance ordered as the compiler orders
    properties, compact, tokenized; schemas whose instance the constraint does
    not accept whole (or that do not compile) are left out."""
    import jsonschema

    by_split: dict[str, list] = {}
    with gzip.open(SUBSET, "rt", encoding="utf-8") as f:
        for line in f:
            rec = json.loads(line)
            by_split.setdefault(rec["split"], []).append(rec)
    order = []
    queues = [list(v) for v in by_split.values()]
    while any(queues):
        for q in queues:
            if q:
                order.append(q.pop(0))
    compiler = constrain.Compiler(vocab)
    cases = []
    for rec in order:
        if len(cases) == n:
            break
        validator = jsonschema.Draft202012Validator(rec["schema"])
        data = next((t["data"] for t in rec["tests"]
                     if validator.is_valid(t["data"])), None)
        if data is None:
            continue
        try:
            g = compiler.compile_json_schema(rec["schema"])
            text = json.dumps(constrain.order_instance(rec["schema"], data),
                              separators=(",", ":"), ensure_ascii=False)
        except constrain.ConstraintError:
            continue
        ids = encode(text)
        if not g.accepts_tokens(ids):
            continue
        cases.append((rec["schema"], ids))
    return cases


def walk(constraints, cases, fill, bitmask) -> tuple[list[int], int, str]:
    """Every request's walk, a batch step at a time: the fill times (ns) per
    step, the rows filled, and a digest of every filled row (the same for
    every way of filling, or a fill is wrong)."""
    import hashlib

    digest = hashlib.blake2b(digest_size=16)
    vocab = constraints[0].vocab
    eos = vocab.eos_token_ids[0]
    matchers = [constrain.Matcher(g) for g in constraints]
    tokens = [ids + [eos] for _, ids in cases]
    steps, rows = [], 0
    for step in range(max(map(len, tokens))):
        live = [i for i, t in enumerate(tokens) if step < len(t)]
        batch = [matchers[i] for i in live]
        t0 = time.perf_counter_ns()
        fill(batch, bitmask, live)
        steps.append(time.perf_counter_ns() - t0)
        rows += len(live)
        digest.update(bitmask[live].tobytes())
        for i in live:
            if not matchers[i].accept_token(tokens[i][step]):
                raise AssertionError(f"request {i} refused its token at step {step}")
    return steps, rows, digest.hexdigest()


def loop_fill(matchers, bitmask, rows) -> None:
    for m, r in zip(matchers, rows):
        m.fill_next_token_bitmask(bitmask, r)


def row_timer(record: list):
    """A loop of fills that appends each step's per-row fill times (ns) to
    ``record``."""
    def fill(matchers, bitmask, rows) -> None:
        times = []
        for m, r in zip(matchers, rows):
            t0 = time.perf_counter_ns()
            m.fill_next_token_bitmask(bitmask, r)
            times.append(time.perf_counter_ns() - t0)
        record.append(times)
    return fill


def spread_bound(steps: list, threads: int) -> int:
    """The walk's time (ns) if each step's rows (``steps``: per-row times) ran
    on ``threads`` threads, longest first, each to the least loaded one."""
    total = 0
    for times in steps:
        loads = [0] * threads
        for t in sorted(times, reverse=True):
            loads[loads.index(min(loads))] += t
        total += max(loads)
    return total


def machine_ceiling(threads: int, rounds: int = 5) -> float:
    """This machine's own speed-up of ``threads`` threads over one on work
    that holds the GIL little: ~30 us of a nogil numba loop and ~1 us of
    Python per chunk, 2,000 chunks in all (median of ``rounds`` interleaved
    pairs). What the walks' figures are to be read against: on a shared
    virtual machine the second core is not always there (runs of the same
    script here gave 1.6-1.9x, and 1.0-1.2x when the host was busy)."""
    import threading

    import numba

    @numba.njit(nogil=True)
    def spin(n, a):
        s = 0
        for i in range(n):
            s += a[i & 1023] * i
        return s

    a = np.arange(1024)
    spin(10, a)
    chunks, n = 2000, 100_000

    def work(k):
        for _ in range(k):
            spin(n, a)
            sum(range(40))

    def timed(t):
        ths = [threading.Thread(target=work, args=(chunks // t,)) for _ in range(t)]
        t0 = time.perf_counter()
        for th in ths:
            th.start()
        for th in ths:
            th.join()
        return time.perf_counter() - t0

    return statistics.median(timed(1) / timed(threads) for _ in range(rounds))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", default="1,2", help="fixed pool sizes (batch/N)")
    ap.add_argument("--auto", default="8", help="adaptive BatchMatchers' most threads "
                    "(auto/N); empty: none")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    from search.models.smollm2 import load_tokenizer

    tok = load_tokenizer()
    vocab = constrain.Vocabulary.from_huggingface(tok, name="SmolLM2-135M-Instruct")

    def encode(s):
        return tok.encode(s, add_special_tokens=False, split_special_tokens=True)

    log("loading cases")
    cases = load_cases(args.batch, vocab, encode)
    log(f"{len(cases)} cases, {sum(len(c[1]) + 1 for c in cases)} rows per walk")
    bitmask = constrain.allocate_bitmask(len(cases), len(vocab), backend="numpy")
    threads = [int(t) for t in args.threads.split(",")]
    configs = {"loop": loop_fill}
    pools = {}
    for n in threads:
        pools[f"batch/{n}"] = constrain.BatchMatcher(threads=n, adaptive=False)
    for n in (int(t) for t in args.auto.split(",") if t):
        pools[f"auto/{n}"] = constrain.BatchMatcher(threads=n)
    for name, p in pools.items():
        configs[name] = p.fill_next_token_bitmask
    many = max(threads)
    ceiling = [machine_ceiling(many)] if many > 1 else []
    # numba kernels compiled (or loaded) and every engine path taken once
    warm = [constrain.Compiler(vocab).compile_json_schema(s) for s, _ in cases]
    for fill in configs.values():
        walk(warm, cases, fill, bitmask)
    del warm
    # the start-up's objects (torch's, transformers', the tokenizer's: ~380,000)
    # out of the cyclic collector, as vLLM and `trellis generate` do: a full
    # collection of them took ~0.2 s of CPU, ~27 us a row of whichever walk it
    # fell in (the "CPU per row" of one configuration 40 -> 70 us in one round
    # of three). Each configuration's walks then start from a fresh collection
    gc.collect()
    gc.freeze()
    full = [0]

    def count_full(phase, info):
        if phase == "start" and info["generation"] == 2:
            full[0] += 1

    gc.callbacks.append(count_full)
    env = harness.environment({})
    results: dict = {name: {"first": [], "warm": [], "first_cpu": [], "full_gc": []}
                     for name in configs}
    bounds: dict = {n: [] for n in threads}
    largest: list = []  # per round, the costliest single row: (ns, its share of the walk)
    steps_n = rows_n = 0
    digests = set()
    for r in range(args.rounds):
        compiler = constrain.Compiler(vocab)
        record: list = []
        walk([compiler.compile_json_schema(s) for s, _ in cases], cases, row_timer(record),
             bitmask)
        alone = spread_bound(record, 1)
        for n in threads:
            bounds[n].append(alone / spread_bound(record, n))
        top = max(max(times) for times in record)
        largest.append((top, top / alone))
        for name, fill in configs.items():
            gc.collect()
            compiler = constrain.Compiler(vocab)
            constraints = [compiler.compile_json_schema(s) for s, _ in cases]
            c0, f0 = time.process_time_ns(), full[0]
            first, rows_n, d1 = walk(constraints, cases, fill, bitmask)
            results[name]["first_cpu"].append(time.process_time_ns() - c0)
            results[name]["full_gc"].append(full[0] - f0)
            warm_steps, _, d2 = walk(constraints, cases, fill, bitmask)
            digests.update((d1, d2))
            steps_n = len(first)
            results[name]["first"].append(sum(first))
            results[name]["warm"].append(sum(warm_steps))
            log(f"round {r + 1} {name}: first {sum(first) / 1e6:.1f} ms, "
                f"warm {sum(warm_steps) / 1e6:.2f} ms")
    for p in pools.values():
        p.close()
    if len(digests) != 1:
        raise AssertionError(f"the ways of filling disagree: {len(digests)} different mask streams")
    base = f"batch/{threads[0]}"
    print(f"\n{len(cases)} requests (MaskBench subset schemas), {steps_n} steps, "
          f"{rows_n} rows per walk; median of {args.rounds} rounds; cores: {os.cpu_count()}\n")
    print(f"{'fill':10} | {'first walk ms':>13} | {'per step us':>11} | {'per row us':>10} | "
          f"{'speed-up':>8} | {'warm ms':>8} | {'warm row us':>11} | {'speed-up':>8}")
    print("-" * 98)
    summary = {}
    med = {k: (statistics.median(v["first"]), statistics.median(v["warm"]))
           for k, v in results.items()}
    for name, (f, w) in med.items():
        summary[name] = {"first_ms": f / 1e6, "first_step_us": f / steps_n / 1e3,
                         "first_row_us": f / rows_n / 1e3, "warm_ms": w / 1e6,
                         "warm_row_us": w / rows_n / 1e3,
                         "speedup_first": med[base][0] / f, "speedup_warm": med[base][1] / w}
        s = summary[name]
        print(f"{name:10} | {s['first_ms']:13.1f} | {s['first_step_us']:11.1f} | "
              f"{s['first_row_us']:10.2f} | {s['speedup_first']:7.2f}x | {s['warm_ms']:8.2f} | "
              f"{s['warm_row_us']:11.3f} | {s['speedup_warm']:7.2f}x")
    print("\nfirst walk, process CPU per row (all threads; advances included): " + ", ".join(
        f"{k} {statistics.median(v['first_cpu']) / rows_n / 1e3:.2f} us"
        for k, v in results.items()))
    print("full collections of the cyclic collector inside the first walks, all rounds: "
          + ", ".join(f"{k} {sum(v['full_gc'])}" for k, v in results.items()))
    for name, p in pools.items():
        if p.sizer is not None:
            print(f"{name}: thread count at the end {p.sizer.current} (of {p.sizer.sizes})")
    print("bound of the walks' shape, rows spread over N threads with no GIL: " + ", ".join(
        f"{n} threads {statistics.median(b):.2f}x" for n, b in bounds.items()))
    if ceiling:
        ceiling.append(machine_ceiling(many))
        print(f"this machine's own {many}-thread speed-up on a nogil kernel (30 us chunks, "
              f"little GIL): {ceiling[0]:.2f}x before the rounds, {ceiling[1]:.2f}x after")
        summary_ceiling = {"threads": many, "before": ceiling[0], "after": ceiling[1]}
    else:
        summary_ceiling = None
    top_ns, top_share = sorted(largest)[len(largest) // 2]
    print(f"costliest single row (median round): {top_ns / 1e6:.1f} ms, "
          f"{100 * top_share:.0f}% of its walk")
    for name in summary:
        summary[name]["first_cpu_row_us"] = \
            statistics.median(results[name]["first_cpu"]) / rows_n / 1e3
    summary["bound"] = {str(n): statistics.median(b) for n, b in bounds.items()}
    summary["machine_ceiling"] = summary_ceiling
    summary["largest_row"] = {"ms": top_ns / 1e6, "share": top_share}
    env["loadavg_end"] = [round(x, 2) for x in os.getloadavg()]
    env["threads"] = "the BatchMatcher's (numba kernels on one thread each)"
    print(f"\nenvironment: {json.dumps(env)}")
    if args.json:
        Path(args.json).write_text(json.dumps({"environment": env, "summary": summary,
                                               "raw": results}, indent=1))


if __name__ == "__main__":
    sys.exit(main())
