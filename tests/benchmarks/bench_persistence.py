"""Persisted grammars: loading a cached JSON Schema in a fresh process against
compiling it there, on 20 MaskBench schemas over the SmolLM2 vocabulary.

    python tests/benchmarks/bench_persistence.py [DATA_DIR] [--schemas 20]
        [--repeat 5] [--seed 0] [--json OUT]

``DATA_DIR``: the MaskBench data (one ``<split>.jsonl.gz`` per split; default
``/work/shared/data/maskbench``). The schemas are taken round-robin over the
splits (a seeded shuffle of each), keeping those that compile.

Every measurement runs in a new Python process (``subprocess``), so that
nothing is warm but the disk: the process imports ``constrain``, builds the
vocabulary from its token bytes and its token trie (reported apart: a cost
of the vocabulary, paid once per process whatever it compiles) and
:func:`constrain.persist.trellis_version` (the digest of the source that
cache keys and files carry, ~2-7 ms once per process; reported apart too),
then times
one of

* ``compile``: ``Compiler(vocab).compile_json_schema(schema)``;
* ``load``: ``Compiler(vocab, cache_dir=...).compile_json_schema(schema)``
  with the entry present (the key, the read, the checksum and the rebuild),

and then the first mask (``fill_bitmask`` of the initial state) and the
next :data:`WALK` (a seeded walk, each token drawn from the mask just
filled: the same tokens in both modes, checked). Each is run
in two settings: ``cold``, as above (numba's kernels are loaded from its disk
cache when first called, inside the timed call), and ``warm``, after
``constrain.warm_up(vocab)`` (a server's start-up: kernels loaded, jsonschema
imported), which isolates the grammar's own work. Figures are the process's
CPU time (``time.process_time``: on a shared machine a preempted process's
wall clock runs on; the summary gives wall-clock medians too), medians over
``--repeat`` processes; the ratio is compile / load.
"""

from __future__ import annotations

import argparse
import gc
import gzip
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import harness  # noqa: F401 - the repository root on sys.path

DEFAULT_DATA = Path("/work/shared/data/maskbench")
#: tokens walked after the first mask (each a mask fill and an advance)
WALK = 30
SPLITS = ("Glaiveai2K", "Github_trivial", "Github_easy", "Github_medium", "Github_hard",
          "Github_ultra", "Snowplow", "Kubernetes", "WashingtonPost", "JsonSchemaStore", "BFCL",
          "JME", "Handwritten", "Synthesized", "MCPspec")


# -- the child: one measurement per process ------------------------------------------


def child(mode: str, setting: str, tokens_file: str, schema_file: str, cache_dir: str) -> None:
    """Time one compile or load (and its first mask) in this fresh process;
    print the figures as JSON."""
    harness.one_thread()
    t0 = time.perf_counter()
    import numpy as np

    import constrain
    from constrain.persist import trellis_version
    from constrain.vocab.trie import TokenTrie

    t1 = time.perf_counter()
    with np.load(tokens_file, allow_pickle=False) as z:
        data, offsets = z["data"].tobytes(), z["offsets"].tolist()
        eos, special = z["eos"].tolist(), z["special"].tolist()
    vocab = constrain.Vocabulary([data[offsets[i]:offsets[i + 1]] for i in range(len(offsets) - 1)],
                                 eos, special, name="SmolLM2-135M-Instruct")
    t2 = time.perf_counter()
    TokenTrie.of(vocab)
    t3 = time.perf_counter()
    if setting == "warm":
        constrain.warm_up(vocab)
    t_v = time.perf_counter()
    trellis_version()
    version_s = time.perf_counter() - t_v
    schema = json.loads(Path(schema_file).read_text(encoding="utf-8"))
    bitmask = constrain.allocate_bitmask(1, len(vocab), backend="numpy")
    if mode == "compile":
        compiler = constrain.Compiler(vocab)
    else:
        compiler = constrain.Compiler(vocab, cache_dir=cache_dir)
    gc.collect()  # as harness does before every timed call: no collection inside it
    c4, t4 = time.process_time(), time.perf_counter()
    g = compiler.compile_json_schema(schema)
    c5, t5 = time.process_time(), time.perf_counter()
    state = g.initial_state()
    g.fill_bitmask(state, bitmask, 0)
    c6, t6 = time.process_time(), time.perf_counter()
    first_sum = int(bitmask.astype(np.int64).sum())
    # then a walk: WALK tokens, each drawn (seeded) from the mask just filled
    rng = random.Random(0)
    eos = vocab.eos_token_set
    walk = []
    for _ in range(WALK):
        ids = [t for t in constrain.bitmask_to_ids(bitmask[0], len(vocab)).tolist()
               if t not in eos]
        if not ids:
            break
        walk.append(rng.choice(ids))
        state = g.advance(state, walk[-1])
        g.fill_bitmask(state, bitmask, 0)
    c7, t7 = time.process_time(), time.perf_counter()
    hit = mode == "compile" or compiler.disk_cache.stats().hits == 1
    print(json.dumps({"import_s": t1 - t0, "vocab_s": t2 - t1, "trie_s": t3 - t2,
                      "version_s": version_s, "op_s": t5 - t4, "first_mask_s": t6 - t5,
                      "walk_s": t7 - t6, "op_cpu": c5 - c4, "first_mask_cpu": c6 - c5,
                      "walk_cpu": c7 - c6, "hit": hit, "mask_sum": first_sum, "walk": walk}))


def _run_child(args: list[str]) -> dict:
    out = subprocess.run([sys.executable, __file__, "--child", *args], capture_output=True,
                         text=True, env={**os.environ, "PYTHONHASHSEED": "0"})
    if out.returncode:
        raise RuntimeError(f"child {args[:2]} failed:\n{out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


# -- the parent -------------------------------------------------------------------


def pick_schemas(data_dir: Path, n: int, seed: int, vocab) -> list[dict]:
    """``n`` schemas, round-robin over the splits (each shuffled with
    ``seed``), that compile over ``vocab``."""
    import constrain

    queues = []
    for split in SPLITS:
        path = data_dir / f"{split}.jsonl.gz"
        if not path.exists():
            continue
        with gzip.open(path, "rt", encoding="utf-8") as f:
            recs = [json.loads(line) for line in f if line.strip()]
        random.Random(f"{seed}:{split}").shuffle(recs)
        queues.append((split, recs))
    picked = []
    while len(picked) < n and any(q for _, q in queues):
        for split, recs in queues:
            while recs and len(picked) < n:
                rec = recs.pop()
                try:
                    constrain.Compiler(vocab).compile_json_schema(rec["schema"], time_budget=20.0)
                except constrain.ConstraintError:
                    continue
                picked.append({"split": split, "id": rec.get("id", "?"), "schema": rec["schema"]})
                break
    return picked


def write_entry(vocab, schema, cache_dir: Path) -> Path:
    """The cache entry of ``schema``, written as a server's first compile
    writes it (in this process: the children must load it as it is)."""
    import constrain
    from constrain.persist import trellis_version

    trellis_version.cache_clear()
    for old in cache_dir.glob("*.trellis"):
        old.unlink()
    constrain.Compiler(vocab, cache_dir=cache_dir).compile_json_schema(schema)
    (entry,) = cache_dir.glob("*.trellis")
    return entry


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("data", nargs="?", type=Path, default=DEFAULT_DATA)
    ap.add_argument("--schemas", type=int, default=20)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    harness.one_thread()

    import numpy as np

    import constrain
    from search.models.smollm2 import load_tokenizer

    vocab = constrain.Vocabulary.from_huggingface(load_tokenizer(), name="SmolLM2-135M-Instruct")
    work = Path(tempfile.mkdtemp(prefix="bench-persistence-"))
    tokens_file = work / "tokens.npz"
    lengths = [len(t) for t in vocab.tokens]
    np.savez(tokens_file, data=np.frombuffer(b"".join(vocab.tokens), dtype=np.uint8),
             offsets=np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64),
             eos=np.array(vocab.eos_token_ids, dtype=np.int64),
             special=np.array(sorted(vocab.special_token_ids), dtype=np.int64))
    schemas = pick_schemas(args.data, args.schemas, args.seed, vocab)
    print(f"{len(schemas)} schemas from {args.data}; {args.repeat} fresh processes per figure; "
          f"cache in {work}", file=sys.stderr)
    rows, setup = [], []
    for i, s in enumerate(schemas):
        schema_file = work / f"schema{i}.json"
        schema_file.write_text(json.dumps(s["schema"]), encoding="utf-8")
        cache_dir = work / f"cache{i}"
        entry = write_entry(vocab, s["schema"], cache_dir)
        row = {"split": s["split"], "id": s["id"], "file_kb": entry.stat().st_size / 1024}
        for setting in ("cold", "warm"):
            for mode in ("compile", "load"):
                runs = []
                while len(runs) < args.repeat:
                    r = _run_child([mode, setting, str(tokens_file), str(schema_file),
                                    str(cache_dir)])
                    if r["hit"]:
                        runs.append(r)
                    else:  # constrain's source changed meanwhile: a new Trellis version
                        write_entry(vocab, s["schema"], cache_dir)
                if len({(r["mask_sum"], tuple(r["walk"])) for r in runs}) != 1:
                    raise RuntimeError(f"{s['id']}: the masks differ between runs")
                for key, name in (("op_cpu", "ms"), ("first_mask_cpu", "mask_ms"),
                                  ("walk_cpu", "walk_ms"), ("op_s", "wall_ms")):
                    row[f"{setting}_{mode}_{name}"] = 1e3 * statistics.median(r[key] for r in runs)
                row[f"{setting}_{mode}_masks"] = (runs[0]["mask_sum"], runs[0]["walk"])
                setup += runs
            if row[f"{setting}_compile_masks"] != row[f"{setting}_load_masks"]:
                raise RuntimeError(f"{s['id']}: the loaded grammar's masks differ")
        rows.append(row)
        print(f"  {i + 1}/{len(schemas)} {s['id']}", file=sys.stderr)
    report(rows, setup)
    if args.json:
        args.json.write_text(json.dumps({"rows": rows}, indent=1))


def report(rows: list[dict], setup: list[dict]) -> None:
    """The table (process CPU time: the machine may be shared, and a
    preempted process's wall clock runs on), then the medians."""
    head = ("| split | schema | file kB | setting | compile ms | load ms | ratio | first mask "
            f"ms (compiled / loaded) | {WALK} more masks ms (compiled / loaded) |")
    print(head)
    print("|" + " --- |" * (head.count("|") - 1))
    for r in rows:
        for setting in ("cold", "warm"):
            c, l = r[f"{setting}_compile_ms"], r[f"{setting}_load_ms"]
            print(f"| {r['split']} | {r['id'][-30:]} | {r['file_kb']:.0f} | {setting} | "
                  f"{c:.2f} | {l:.2f} | {c / l:.1f}x | "
                  f"{r[f'{setting}_compile_mask_ms']:.2f} / {r[f'{setting}_load_mask_ms']:.3f} | "
                  f"{r[f'{setting}_compile_walk_ms']:.1f} / {r[f'{setting}_load_walk_ms']:.1f} |")

    def med(key):
        return statistics.median(r[key] for r in rows)

    print()
    for setting in ("cold", "warm"):
        ratio = statistics.median(r[f"{setting}_compile_ms"] / r[f"{setting}_load_ms"]
                                  for r in rows)
        first = [statistics.median(r[f"{setting}_{m}_ms"] + r[f"{setting}_{m}_mask_ms"]
                                   for r in rows) for m in ("compile", "load")]
        total = [statistics.median(r[f"{setting}_{m}_ms"] + r[f"{setting}_{m}_mask_ms"]
                                   + r[f"{setting}_{m}_walk_ms"] for r in rows)
                 for m in ("compile", "load")]
        print(f"{setting}: compile median {med(f'{setting}_compile_ms'):.2f} ms, load median "
              f"{med(f'{setting}_load_ms'):.2f} ms (wall: {med(f'{setting}_compile_wall_ms'):.2f} "
              f"and {med(f'{setting}_load_wall_ms'):.2f}), median ratio {ratio:.1f}x; to the first "
              f"mask {first[0]:.2f} vs {first[1]:.2f} ms; to the first {WALK + 1} masks "
              f"{total[0]:.1f} vs {total[1]:.1f} ms (medians over the schemas)")
    print("per process, not counted above: " + ", ".join(
        f"{label} {1e3 * statistics.median(s[key] for s in setup):.1f} ms"
        for label, key in (("import constrain", "import_s"), ("vocabulary", "vocab_s"),
                           ("token trie", "trie_s"), ("Trellis version digest", "version_s"))))


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(*sys.argv[2:7])
    else:
        main()
