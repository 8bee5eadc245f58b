"""Constrained against unconstrained generation with the default model: decoding
tokens/s per constraint, from the first request of a process on.

    python tests/benchmarks/bench_generate.py [--runs 3] [--prompts 3] [--max-new-tokens 64]
        [--data DIR] [--only NAME,...] [--markdown] [--json out.json]

Constraints (issue 24, item 1): ``examples/person.schema.json``; a nested Pydantic
model (``$defs``, ``Optional``, a discriminated union, ``additionalProperties`` left
open); five BFCL tool schemas from MaskBench (``--data``, default
``../shared/data/maskbench``; each prompt one tool, round robin); ``grammars/json.lark``;
SQL under a Spider database (``sql_grammar`` of ``concert_singer``'s tables, read from
``../shared/data/sql/spider_tables.json``).

Each constraint runs ``--prompts`` greedy ``search.generate`` calls of at most
``--max-new-tokens`` tokens, ``--runs`` times. Its baseline is the same prompts with no
constraint and ``max_new_tokens`` set to the number of steps the constrained call took,
so both sides decode the same number of steps at the same context lengths, run right
after it (a paired figure: the machine's load moves between minutes, not between two
calls). The rate is decoding steps over decoding seconds (prefill excluded, as
``GenerationResult.prefill_seconds`` reports it); the table's figure is the median
over runs of each run's ratio, with the rates of the median run beside it.

Run 1 of a constraint is its first request in the process: it includes compiling the
constraint (the compile is timed apart, before the call, and reported as ``compile
ms``) and every first visit of the masks. Runs 2.. are warm (the masks are cached), so
the ``first`` and ``warm`` columns tell apart what the first request pays. The numba
kernels are loaded before the first constraint (``constrain.warm_up``), as a server
would at start; ``--cold-kernels`` skips that.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(__file__))
from harness import decode_rate, environment, fmt, fmt_table, git_rev, log  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
SHARED = ROOT.parent / "shared" / "data"

PROMPTS = {
    "person": ["Describe a software engineer called Ada as JSON.",
               "Describe a retired sailor called Bo as JSON.",
               "Describe a young painter called Cy as JSON."],
    "pydantic": ["Record an order for two lamps paid by card, as JSON.",
                 "Record an order for one chair paid in cash, as JSON.",
                 "Record an order for a desk and a shelf paid by card, as JSON."],
    "bfcl": ["Call the tool to answer: what is the weather in Paris?",
             "Call the tool for a user who wants a quick answer.",
             "Call the tool with sensible arguments."],
    "json.lark": ["Write a JSON object about a cat.",
                  "Write a JSON list of three fruits.",
                  "Write a JSON object describing a car."],
    "sql": ["Write a SQL query that counts the singers.",
            "Write a SQL query listing the names of concerts in 2014.",
            "Write a SQL query for the average age of singers from France."],
}


def pydantic_order_schema() -> dict:
    """The nested Pydantic model of the benchmark, as its JSON Schema: ``$defs``,
    ``Optional`` fields, a discriminated union and open objects (Pydantic's default
    ``extra="ignore"`` writes no ``additionalProperties``)."""
    from typing import Literal, Optional, Union

    from pydantic import BaseModel, Field

    class Item(BaseModel):
        name: str = Field(max_length=40)
        quantity: int = Field(ge=1, le=99)
        note: Optional[str] = None

    class Card(BaseModel):
        kind: Literal["card"]
        last4: str = Field(pattern=r"^[0-9]{4}$")

    class Cash(BaseModel):
        kind: Literal["cash"]
        change_due: Optional[float] = None

    class Order(BaseModel):
        customer: str = Field(max_length=40)
        items: list[Item] = Field(min_length=1, max_length=4)
        payment: Union[Card, Cash] = Field(discriminator="kind")
        gift: Optional[bool] = None

    return Order.model_json_schema()


def bfcl_schemas(data: Path, n: int = 5) -> list[dict]:
    """The first ``n`` BFCL schemas of MaskBench that compile (strict), in file order."""
    with gzip.open(data / "BFCL.jsonl.gz", "rt", encoding="utf-8") as f:
        return [json.loads(line)["schema"] for line in f if line.strip()][: 4 * n]


def spider_tables(db_id: str = "concert_singer") -> dict:
    """``{table: [columns]}`` of one Spider database, from ``spider_tables.json``."""
    dbs = json.loads((SHARED / "sql" / "spider_tables.json").read_text())
    db = next(d for d in dbs if d["db_id"] == db_id)
    tables: dict[str, list[str]] = {t: [] for t in db["table_names_original"]}
    for t, col in db["column_names_original"]:
        if t >= 0:
            tables[db["table_names_original"][t]].append(col)
    return tables


def constraints(args, vocab):
    """``name -> (compile function, [constraint per prompt] builder)``: each entry's
    function compiles its constraints (timed by the caller) and returns one per
    prompt."""
    import constrain
    from constrain.frontends.sql import sql_grammar

    def person():
        c = constrain.compile_json_schema(json.loads((ROOT / "examples/person.schema.json").read_text()),
                                          vocab)
        return [c] * args.prompts

    def pydantic():
        c = constrain.compile_json_schema(pydantic_order_schema(), vocab)
        return [c] * args.prompts

    def bfcl():
        tools = []
        for schema in bfcl_schemas(Path(args.data)):
            try:
                tools.append(constrain.compile_json_schema(schema, vocab))
            except constrain.ConstraintError:
                continue
            if len(tools) == 5:
                break
        return [tools[i % len(tools)] for i in range(args.prompts)]

    def json_lark():
        c = constrain.compile_grammar((ROOT / "grammars/json.lark").read_text(), vocab)
        return [c] * args.prompts

    def sql():
        c = constrain.compile_grammar(sql_grammar(spider_tables()), vocab)
        return [c] * args.prompts

    every = {"person": person, "pydantic": pydantic, "bfcl": bfcl, "json.lark": json_lark, "sql": sql}
    only = [s for s in args.only.split(",") if s] or list(every)
    unknown = set(only) - set(every)
    if unknown:
        raise SystemExit(f"unknown constraint(s) {sorted(unknown)}; choose from {sorted(every)}")
    return {k: every[k] for k in only}


def main(argv=None) -> int:
    """Run every constraint against its paired baseline and print the table."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--prompts", type=int, default=3)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--data", default=str(SHARED / "maskbench"))
    ap.add_argument("--only", default="", help="comma-separated constraint names")
    ap.add_argument("--cold-kernels", action="store_true",
                    help="do not load the numba kernels before the first constraint")
    ap.add_argument("--markdown", action="store_true")
    ap.add_argument("--json", default="")
    args = ap.parse_args(argv)
    if not 1 <= args.prompts <= 3:
        ap.error("--prompts is 1 to 3 (the prompts per constraint are fixed)")

    import constrain
    import search

    log("loading the default model")
    lm = search.load_default_model()
    search.generate(lm, "warm up", max_new_tokens=2)
    if not args.cold_kernels:
        t = time.perf_counter()
        constrain.warm_up(lm.vocab)
        log(f"constrain.warm_up: {time.perf_counter() - t:.2f} s")
    makers = constraints(args, lm.vocab)
    greedy = dict(temperature=0.0, seed=0)

    rows, report = [], {"env": environment({}), "rev": git_rev(), "args": vars(args), "constraints": {}}
    for name, make in makers.items():
        t = time.perf_counter()
        cons = make()
        compile_ms = (time.perf_counter() - t) * 1e3
        prompts = PROMPTS[name][: args.prompts]
        runs = []
        for run in range(args.runs):
            con = [search.generate(lm, p, constraint=c, max_new_tokens=args.max_new_tokens, **greedy)
                   for p, c in zip(prompts, cons)]
            base = [search.generate(lm, p, max_new_tokens=max(1, r.num_steps), **greedy)
                    for p, r in zip(prompts, con)]
            rc, rb = decode_rate(con), decode_rate(base)
            runs.append({"constrained": rc, "unconstrained": rb, "ratio": rc / rb,
                         "steps": [r.num_steps for r in con],
                         "valid": [r.accepted for r in con],
                         "texts": [r.text for r in con]})
            log(f"{name} run {run + 1}: {rc:.1f} vs {rb:.1f} tokens/s ({rc / rb:.3f}), "
                f"steps {runs[-1]['steps']}")
        ratios = [r["ratio"] for r in runs]
        med = statistics.median(ratios)
        mid = min(runs, key=lambda r: abs(r["ratio"] - med))
        warm = statistics.median(ratios[1:]) if len(runs) > 1 else float("nan")
        rows.append([name, fmt(compile_ms, 1), str(sum(runs[0]["steps"])),
                     fmt(mid["constrained"], 1), fmt(mid["unconstrained"], 1),
                     f"{med:.3f}", f"{ratios[0]:.3f}", f"{warm:.3f}",
                     f"{sum(all(r['valid']) for r in runs)}/{len(runs)}"])
        report["constraints"][name] = {"compile_ms": compile_ms, "runs": runs, "median_ratio": med}

    print(f"\n{args.prompts} prompts x {args.runs} runs, greedy, at most {args.max_new_tokens} new tokens; "
          f"rates are decoding tokens/s (prefill excluded); baseline: no constraint, same prompts, "
          f"same step counts")
    print(fmt_table([["constraint", "compile ms", "steps/run", "constrained tok/s", "unconstrained tok/s",
                      "ratio (median)", "ratio run 1 (first)", "ratio runs 2+ (warm)", "runs all valid"]]
                    + rows, args.markdown))
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
