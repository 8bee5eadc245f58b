"""Jump-forward decoding on JSON Schemas: how many tokens the constraint forces
and how many model calls that saves.

    python tests/benchmarks/bench_jump_forward.py [--limit N] [--json OUT]

Per schema of the vendored MaskBench subset (tests/data/maskbench), its first
valid instance (properties in the grammar's order, compact) is decoded as a
model that writes exactly that text would: at each step, when
``Matcher.jump_forward_tokens`` offers tokens, they are appended without a
model call; otherwise the model's token is the first token of the
tokenizer's encoding of the text still to write (SmolLM2's tokenizer). The
forced tokens must spell a prefix of that text and be the tokenizer's own
encoding of their bytes (checked on every jump), and each output's tokens
are compared with the tokenizer's encoding of the whole output (a forced
split it would not make). Printed per split: outputs,
tokens per output, forced tokens per output, model calls saved, and the time
the look-ups cost per output.
"""

from __future__ import annotations

import harness  # first: puts the repository root on sys.path

import argparse  # noqa: E402
import gzip  # noqa: E402
import json  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from collections import defaultdict  # noqa: E402
from pathlib import Path  # noqa: E402

import constrain  # noqa: E402
from harness import log  # noqa: E402

SUBSET = harness.ROOT / "tests" / "data" / "maskbench" / "subset.jsonl.gz"


def decode(matcher: constrain.Matcher, text: str, tok, vocab) -> dict:
    """Jump-forward decoding of ``text``: counts and checks (see the module
    docstring)."""
    data = text.encode()
    at = 0
    calls = forced = jumps = 0
    lookup_ns = 0
    tokens: list[int] = []
    while at < len(data):
        t0 = time.perf_counter_ns()
        jump = matcher.jump_forward_tokens(tok)
        lookup_ns += time.perf_counter_ns() - t0
        if jump:
            spelled = b"".join(vocab.token_bytes(i) for i in jump)
            if not data.startswith(spelled, at):
                raise AssertionError(f"forced {spelled!r} where the text has {data[at:at + 40]!r}")
            if tok.encode(spelled.decode(), add_special_tokens=False) != jump:
                raise AssertionError(f"forced tokens {jump} are not the tokenizer's for {spelled!r}")
            assert matcher.accept_tokens(jump)
            tokens += jump
            at += len(spelled)
            forced += len(jump)
            jumps += 1
            continue
        rest = data[at:].decode()
        t = tok.encode(rest, add_special_tokens=False, split_special_tokens=True)[0]
        if not matcher.accept_token(t):
            raise AssertionError(f"the model's token {vocab.token_bytes(t)!r} was refused "
                                 f"at {data[:at][-40:]!r}")
        tokens.append(t)
        at += len(vocab.token_bytes(t))
        calls += 1
    assert matcher.is_accepting()
    canonical = tokens == tok.encode(text, add_special_tokens=False, split_special_tokens=True)
    return {"calls": calls + 1, "forced": forced, "jumps": jumps, "lookup_ns": lookup_ns,
            "canonical": canonical}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--limit", type=int, default=0, help="schemas per split (0: all)")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    import jsonschema

    from search.models.smollm2 import load_tokenizer

    tok = load_tokenizer()
    vocab = constrain.Vocabulary.from_huggingface(tok, name="SmolLM2-135M-Instruct")
    compiler = constrain.Compiler(vocab)
    by_split: dict = defaultdict(list)
    with gzip.open(SUBSET, "rt", encoding="utf-8") as f:
        recs = [json.loads(line) for line in f]
    for rec in recs:
        if args.limit and len(by_split[rec["split"]]) >= args.limit:
            continue
        validator = jsonschema.Draft202012Validator(rec["schema"])
        data = next((t["data"] for t in rec["tests"] if validator.is_valid(t["data"])), None)
        if data is None:
            continue
        try:
            g = compiler.compile_json_schema(rec["schema"])
        except constrain.ConstraintError:
            continue
        text = json.dumps(constrain.order_instance(rec["schema"], data), separators=(",", ":"),
                          ensure_ascii=False)
        plain = len(tok.encode(text, add_special_tokens=False, split_special_tokens=True)) + 1
        r = decode(constrain.Matcher(g), text, tok, vocab)
        r["plain"] = plain
        by_split[rec["split"]].append(r)
    log(f"{sum(map(len, by_split.values()))} outputs")
    print(f"{'split':16} | {'outputs':>7} | {'tokens/output':>13} | {'forced/output':>13} | "
          f"{'model calls saved':>17} | {'look-ups ms/output':>18}")
    print("-" * 100)
    summary = {}
    total = defaultdict(float)
    for split, rs in by_split.items():
        if not rs:
            continue
        plain = sum(r["plain"] for r in rs)
        calls = sum(r["calls"] for r in rs)
        forced = sum(r["forced"] for r in rs)
        look = statistics.mean(r["lookup_ns"] for r in rs) / 1e6
        summary[split] = {"outputs": len(rs), "tokens_per_output": plain / len(rs),
                          "forced_per_output": forced / len(rs),
                          "calls_saved": 1 - calls / plain, "lookup_ms_per_output": look}
        for k, v in (("outputs", len(rs)), ("plain", plain), ("calls", calls), ("forced", forced),
                     ("look", look * len(rs))):
            total[k] += v
        s = summary[split]
        print(f"{split:16} | {len(rs):7} | {s['tokens_per_output']:13.1f} | "
              f"{s['forced_per_output']:13.1f} | {100 * s['calls_saved']:16.1f}% | {look:18.2f}")
    n = total["outputs"]
    print(f"{'total':16} | {int(n):7} | {total['plain'] / n:13.1f} | {total['forced'] / n:13.1f} | "
          f"{100 * (1 - total['calls'] / total['plain']):16.1f}% | {total['look'] / n:18.2f}")
    print("\nmodel calls: one per token the model chooses, plus the one that chooses EOS; "
          "without jump-forward, one per token of the output (tokens/output, EOS included)")
    odd = sum(not r["canonical"] for rs in by_split.values() for r in rs)
    print(f"outputs whose tokens are not the tokenizer's own encoding of the whole output: {odd}")
    if args.json:
        Path(args.json).write_text(json.dumps({"summary": summary,
                                               "environment": harness.environment({})}, indent=1))


if __name__ == "__main__":
    sys.exit(main())
