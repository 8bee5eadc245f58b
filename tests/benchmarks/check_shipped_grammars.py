"""Issue 3's checks of the shipped grammars, on the full data sets.

* ``grammars/json.lark`` must accept every JSON value in the MaskBench instances
  (compact and ``json.dumps`` default style);
* ``grammars/sql.lark`` must accept at least 99% of Spider's dev gold queries;

both as text (``grammar.matches``) and token-walked as the SmolLM2 tokenizer
encodes them (``advance`` token by token, then ``is_accepting``).

    python tests/benchmarks/check_shipped_grammars.py [--maskbench DIR] [--spider FILE]
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


def walk(g, ids) -> bool:
    state = g.advance_many(g.initial_state(), ids)
    return state is not None and g.is_accepting(state)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--maskbench", default=str(ROOT.parent / "shared" / "data" / "maskbench"))
    ap.add_argument("--spider", default=str(ROOT / "tests" / "data" / "spider" / "dev_gold.jsonl"))
    ap.add_argument("--limit", type=int, default=0, help="instances per file (0: all)")
    args = ap.parse_args(argv)

    import constrain
    from search.models.smollm2 import load_tokenizer

    tok = load_tokenizer()
    vocab = constrain.Vocabulary.from_huggingface(tok)
    ok = True

    g = constrain.compile_grammar(constrain.grammar_path("json.lark"), vocab)
    n = text_ok = tok_ok = 0
    failures = []
    t0 = time.perf_counter()
    for path in sorted(Path(args.maskbench).glob("*.jsonl.gz")):
        with gzip.open(path, "rt") as f:
            for k, line in enumerate(f):
                if args.limit and k >= args.limit:
                    break
                for test in json.loads(line)["tests"]:
                    for text in (json.dumps(test["data"], separators=(",", ":"), ensure_ascii=False),
                                 json.dumps(test["data"])):
                        n += 1
                        a = g.matches(text)
                        b = walk(g, tok.encode(text, add_special_tokens=False))
                        text_ok += a
                        tok_ok += b
                        if not (a and b) and len(failures) < 10:
                            failures.append(text[:200])
    print(f"json.lark: {n} MaskBench JSON values (compact and default style): "
          f"{text_ok} accepted as text, {tok_ok} token-walked ({time.perf_counter() - t0:.0f} s)")
    for f_ in failures:
        print("  REFUSED", f_)
    ok &= text_ok == n and tok_ok == n

    g = constrain.compile_grammar(constrain.grammar_path("sql.lark"), vocab)
    rows = [json.loads(line) for line in open(args.spider)]
    if args.limit:
        rows = rows[:args.limit]
    t0 = time.perf_counter()
    text_ok = tok_ok = 0
    for r in rows:
        q = r["query"]
        a = g.matches(q)
        b = walk(g, tok.encode(q, add_special_tokens=False))
        text_ok += a
        tok_ok += b
        if not (a and b):
            print("  REFUSED", q)
    print(f"sql.lark: {len(rows)} Spider dev gold queries: {text_ok} ({100 * text_ok / len(rows):.1f}%) "
          f"as text, {tok_ok} ({100 * tok_ok / len(rows):.1f}%) token-walked "
          f"({time.perf_counter() - t0:.0f} s)")
    ok &= text_ok >= 0.99 * len(rows) and tok_ok >= 0.99 * len(rows)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
