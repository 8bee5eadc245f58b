"""Paired before/after timing of Trellis's cold JSON Schema compile, interleaved.

    python tests/benchmarks/ab_compile.py TREE_A TREE_B [--limit 10] [--rounds 3] [--no-gc-flush]
        [--data DIR] [--peer-json mb.json]

``TREE_A`` and ``TREE_B`` are two checkouts of this repository (e.g. ``git worktree
add /tmp/before HEAD~1``; a new path compiles its numba kernels once, minutes). One
worker process per tree, each set up as ``bench_maskbench`` sets up Trellis
(``maskbench_peers.TrellisJSON``: caches dropped and ``gc.collect()`` before each
compile, process CPU time), is handed the same schema in turn, A then B, then B then
A in the next round. Why: run to run the machine moves every time by up to ~30%,
more than most changes; two workers timed minutes apart see the same machine. Each
schema's figure is its fastest of ``--rounds`` compiles. Printed: each tree's p50
over the schemas both compile, and the per-schema ratio B/A (median, p10, p90).
``--peer-json``: a ``bench_maskbench --json`` report; the schemas are then those
llguidance compiled there, and its p50 is printed beside (from another run: a
reference, not a paired figure)."""

from __future__ import annotations

import harness  # the standard library only: one thread, also for the workers (they inherit it)

harness.one_thread()

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

# the worker: protocol lines on the original stdout, anything printed goes to stderr
WORKER = r"""
import gc, json, sys
OUT, sys.stdout = sys.stdout, sys.stderr
root, data, limit, flush = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4] == "1"
sys.path[:0] = [root, root + "/tests/benchmarks"]
from pathlib import Path
import bench_maskbench as B, maskbench_peers as P
# the flag lives in harness (older trees: in bench_regex)
for name in ("harness", "bench_regex"):
    if hasattr(sys.modules.get(name), "GC_FLUSH"):
        sys.modules[name].GC_FLUSH = flush
eng = P.TrellisJSON()
eng.prepare(P.load_vocab("smollm2"))
# older harnesses looked for the memos to drop before every compile, which
# evicted the CPU caches the timed compile then refilled: both trees look again
# only after an import
find, seen = eng._find_memo, [len(sys.modules)]
def find_after_imports():
    if len(sys.modules) != seen[0]:
        seen[0] = len(sys.modules)
        find()
eng._find_memo = find_after_imports
recs = []
for split in B.selected_splits(type("Args", (), {"data": data, "splits": ""})()):
    recs += B.load_split(Path(data), split, limit, 0)
want = json.loads(sys.stdin.readline())
by = {r["id"]: r for r in recs if want is None or r["id"] in want}
ok = []
for rid, r in by.items():  # untimed: one-time imports and format tables
    try:
        eng.compile_timed(r["schema"])
        ok.append(rid)
    except Exception:
        pass
print(json.dumps(ok), file=OUT, flush=True)
for line in sys.stdin:
    if flush:
        gc.collect()
    gc.disable()
    try:
        out = eng.compile_timed(by[json.loads(line)]["schema"])[2]
    except Exception:
        out = -1
    gc.enable()
    print(out, file=OUT, flush=True)
"""


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("tree_a")
    ap.add_argument("tree_b")
    ap.add_argument("--limit", type=int, default=10, help="schemas per split (as bench_maskbench)")
    ap.add_argument("--rounds", type=int, default=3, help="compiles per schema and tree (fastest kept)")
    ap.add_argument("--data", default=str(harness.ROOT.parent / "shared" / "data" / "maskbench"))
    ap.add_argument("--peer-json", help="a bench_maskbench --json report: llguidance's schemas and p50")
    ap.add_argument("--no-gc-flush", action="store_true",
                    help="no gc.collect() before each compile: the heap walk evicts the CPU caches, "
                         "so a flushed compile also times first touches of code and data a busy "
                         "server may still have cached")
    args = ap.parse_args(argv)
    import numpy as np

    peer = None
    if args.peer_json:
        rep = json.load(open(args.peer_json))
        vres = rep["vocabs"]["smollm2"]["results"]
        peer = {r["id"]: r["engines"]["llguidance"]["compile_cpu_ms"] for r in vres
                if r["engines"].get("llguidance", {}).get("status") == "ok"}
    trees = [str(Path(t).resolve()) for t in (args.tree_a, args.tree_b)]
    # both workers on one core (they never run at once), this process on another:
    # unpinned, A against A read 4% apart on the development machine's 2 cores
    cores = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    pin = None
    if len(cores) >= 2:
        pin = {cores[-1]}
        os.sched_setaffinity(0, set(cores[:-1]))
    procs = []
    for root in trees:
        p = subprocess.Popen([sys.executable, "-c", WORKER, root, args.data, str(args.limit),
                              "0" if args.no_gc_flush else "1"],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                             preexec_fn=(lambda: os.sched_setaffinity(0, pin)) if pin else None)
        p.stdin.write(json.dumps(None if peer is None else sorted(peer)) + "\n")
        p.stdin.flush()
        procs.append(p)
    compiled = [json.loads(p.stdout.readline()) for p in procs]
    ids = [i for i in compiled[0] if i in set(compiled[1])]
    best: list[dict] = [{}, {}]
    for k in range(args.rounds):
        for i in ids:
            for w in ((0, 1) if k % 2 == 0 else (1, 0)):
                procs[w].stdin.write(json.dumps(i) + "\n")
                procs[w].stdin.flush()
                ns = int(procs[w].stdout.readline())
                if ns >= 0:
                    best[w][i] = min(best[w].get(i, ns), ns)
    for p in procs:
        p.stdin.close()
        p.wait()
    ids = [i for i in ids if i in best[0] and i in best[1]]
    if not ids:
        print("no schema compiled in both trees")
        return 1
    ref = f", llguidance p50 {np.median([peer[i] for i in ids]):.4f} ms in {args.peer_json}" \
        if peer else ""
    flushed = "no gc.collect() before each" if args.no_gc_flush else "gc.collect() before each"
    print(f"{len(ids)} schemas compiled by both trees{ref}; fastest of {args.rounds} "
          f"cold compiles per schema ({flushed}), process CPU time")
    for w, name in ((0, "A"), (1, "B")):
        v = np.array([best[w][i] for i in ids]) / 1e6
        print(f"  {name} {trees[w]}: compile p50 {np.median(v):.4f} ms, mean {v.mean():.4f} ms")
    r = np.array([best[1][i] / best[0][i] for i in ids])
    print(f"  B/A per schema: median {np.median(r):.3f}, p10 {np.percentile(r, 10):.3f}, "
          f"p90 {np.percentile(r, 90):.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
