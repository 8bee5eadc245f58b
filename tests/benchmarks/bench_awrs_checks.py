"""AWRS constraint checks per token vs a full mask, on the default model with
MaskBench JSON Schemas (issue 5's must-show).

A full mask decides every token of the vocabulary: ``V`` token checks per step
(49,152 for SmolLM2; the trie walk shares prefixes, but every token is still
decided). AWRS checks only the tokens it draws until one is allowed, plus one.

    python tests/benchmarks/bench_awrs_checks.py [--data ../shared/data/maskbench]
        [--schemas 3] [--samples 3] [--max-new-tokens 80] [--seed 0]
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

#: small, everyday schemas from the Github_easy split (object, strings, numbers, enums)
DEFAULT_IDS = ("Github_easy---o10010", "Github_easy---o10016", "Github_easy---o10526")


def _schemas(data: Path, ids, n: int):
    out = []
    with gzip.open(data / "Github_easy.jsonl.gz", "rt") as f:
        rows = [json.loads(line) for line in f]
    by_id = {r["id"]: r for r in rows}
    for i in ids:
        if i in by_id:
            out.append(by_id[i])
    for r in rows:
        if len(out) >= n:
            break
        if r not in out:
            out.append(r)
    return out[:n]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=str(ROOT.parent / "shared" / "data" / "maskbench"))
    ap.add_argument("--schemas", type=int, default=3)
    ap.add_argument("--samples", type=int, default=3)
    ap.add_argument("--max-new-tokens", type=int, default=80)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)

    import constrain
    import search
    from search.autoregressive.awrs import AWRS

    lm = search.load_default_model()
    V = len(lm.vocab)
    rows = []
    for r in _schemas(Path(args.data), DEFAULT_IDS, args.schemas):
        try:
            g = constrain.compile_json_schema(r["schema"], lm.vocab)
        except constrain.ConstraintError as e:
            print(f"skip {r['id']}: {e}", file=sys.stderr)
            continue
        prompt = lm.prompt_ids("Reply with one JSON object for this JSON Schema:\n"
                               + json.dumps(r["schema"])[:1500])
        sampler = AWRS(lm, g, rng=args.seed)
        t0 = time.perf_counter()
        done = 0
        for _ in range(args.samples):
            state, out = g.initial_state(), []
            for _ in range(args.max_new_tokens):
                step = sampler.sample(list(prompt) + out, state)
                if step.token is None:
                    break
                out.append(step.token)
                state = step.state
                if g.is_terminated(state):
                    done += 1
                    break
        secs = time.perf_counter() - t0
        rows.append((r["id"], sampler.steps, sampler.checks, done, secs))
    print("| schema | tokens sampled | AWRS checks | checks / token | full-mask token checks / token | ratio |")
    print("|---|---:|---:|---:|---:|---:|")
    tot_steps = tot_checks = 0
    for sid, steps, checks, done, secs in rows:
        tot_steps += steps
        tot_checks += checks
        per = checks / max(steps, 1)
        print(f"| {sid} | {steps} | {checks} | {per:.2f} | {V} | {V / per:,.0f}x |")
    per = tot_checks / max(tot_steps, 1)
    print(f"| all | {tot_steps} | {tot_checks} | {per:.2f} | {V} | {V / per:,.0f}x |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
