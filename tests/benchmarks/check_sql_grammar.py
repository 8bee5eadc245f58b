"""SQL grammar figures: Spider dev parse rate and time, and agreement with SQLite.

    python tests/benchmarks/check_sql_grammar.py [--samples N] [--mutants N]
                                                 [--depth D] [--ambiguity] [--json out.json]

Everything goes through Lark's Earley parser with ``lexer="dynamic_complete"``
(the language Trellis compiles) on the data vendored in ``tests/data/spider``:

* generic grammar (``grammars/sql.lark``): how many of the 1,034 Spider dev gold
  queries parse, the failures, and the CPU time per query (one thread, no
  warm-up beyond building the parser);
* ``sql_grammar(schema)`` of each query's own database: how many parse;
* ``--samples`` random derivations of the generic grammar (and as many of the
  grammar specialised to concert_singer) prepared by SQLite (``EXPLAIN``):
  how many SQLite reports a syntax error for (should be 0);
* ``--mutants`` one-edit mutants of gold queries: how many Lark accepts, and of
  those how many SQLite calls a syntax error (should be 0; the ANSI forms
  DATE/INTERVAL/EXTRACT are counted apart); then as many under the grammar of
  the query's database, where SQLite should also find every table;
* ``--ambiguity``: how many gold queries have more than one parse.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from constrain.frontends.sql import load_schema, sql_grammar  # noqa: E402
from sql_testing import (  # noqa: E402
    SPIDER_DIR,
    DerivationSampler,
    accepts,
    is_syntax_error,
    lark_parser,
    load_gold,
    load_schemas,
    memory_database,
    mutate,
    sqlite_verdict,
    terminal_examples,
    uses_ansi,
)


def gold_parse(gold) -> dict:
    """Parse every gold query with the generic grammar, timing each."""
    parser = lark_parser()
    times, failures = [], []
    for example in gold:
        start = time.process_time()
        ok = accepts(parser, example["query"]) is not None
        times.append(time.process_time() - start)
        if not ok:
            failures.append(example["query"])
    return {
        "queries": len(gold),
        "parsed": len(gold) - len(failures),
        "rate": 1 - len(failures) / len(gold),
        "failures": failures,
        "cpu_s_total": sum(times),
        "cpu_ms_mean": 1000 * statistics.mean(times),
        "cpu_ms_p50": 1000 * statistics.median(times),
        "cpu_ms_p95": 1000 * sorted(times)[int(0.95 * len(times))],
        "cpu_ms_max": 1000 * max(times),
        "chars_mean": statistics.mean(len(g["query"]) for g in gold),
    }


def schema_parse(gold) -> dict:
    """Parse every gold query with the grammar of its own database."""
    schemas = load_schemas()
    parsers = {}
    failures = []
    for example in gold:
        db = example["db_id"]
        if db not in parsers:
            parsers[db] = lark_parser(sql_grammar(schemas[db]))
        if accepts(parsers[db], example["query"]) is None:
            failures.append((db, example["query"]))
    return {"queries": len(gold), "parsed": len(gold) - len(failures),
            "databases": len(parsers), "failures": failures}


def sampled(n: int, depth: int, seed: int) -> dict:
    """SQLite's verdict on random derivations, generic and specialised."""
    out = {}
    parser = lark_parser()
    con = memory_database({"t": ["a", "b"], "u": ["a", "c"]})
    sampler = DerivationSampler(parser, terminal_examples(parser), max_depth=depth)
    out["generic"] = _judge(sampler, con, n, random.Random(seed))
    path = SPIDER_DIR / "concert_singer.sqlite"
    schema = load_schema(path)
    specialised = lark_parser(sql_grammar(path))
    columns = sorted({c for cols in schema.values() for c in cols})
    examples = terminal_examples(specialised, {"TABLE_NAME": list(schema),
                                               "COLUMN_NAME": columns})
    sampler = DerivationSampler(specialised, examples, max_depth=depth)
    out["concert_singer"] = _judge(sampler, memory_database(schema), n,
                                   random.Random(seed + 1))
    return out


def _judge(sampler, con, n, rng) -> dict:
    errors, lengths = [], []
    for _ in range(n):
        query = sampler.sample(rng)
        lengths.append(len(query))
        verdict = sqlite_verdict(con, query)
        if is_syntax_error(verdict):
            errors.append((query, verdict))
    return {"samples": n, "sqlite_syntax_errors": len(errors), "errors": errors[:20],
            "chars_mean": statistics.mean(lengths)}


def distinct_mutants(gold, n: int, seed: int) -> list:
    """``(gold example, mutant)`` for ``n`` draws of a random gold query and one
    random edit of it, leaving out the draws whose edit changes nothing or repeats
    an earlier mutant."""
    rng = random.Random(seed)
    seen, out = set(), []
    for _ in range(n):
        example = rng.choice(gold)
        mutant = mutate(example["query"], rng)
        if mutant == example["query"] or mutant in seen:
            continue
        seen.add(mutant)
        out.append((example, mutant))
    return out


def mutants(gold, n: int, seed: int) -> dict:
    """Lark's and SQLite's verdicts on one-edit mutants of gold queries."""
    parser = lark_parser()
    schemas = load_schemas()
    pairs = distinct_mutants(gold, n, seed)
    databases = {}
    accepted = ansi = 0
    errors = []
    for example, mutant in pairs:
        tree = accepts(parser, mutant)
        if tree is None:
            continue
        accepted += 1
        if uses_ansi(tree):
            ansi += 1
            continue
        db = example["db_id"]
        if db not in databases:
            databases[db] = memory_database(schemas[db])
        verdict = sqlite_verdict(databases[db], mutant)
        if is_syntax_error(verdict):
            errors.append((mutant, verdict))
    return {"mutants": len(pairs), "lark_accepted": accepted, "ansi": ansi,
            "sqlite_syntax_errors": len(errors), "errors": errors[:20]}


def schema_mutants(gold, n: int, seed: int) -> dict:
    """Mutants judged by the grammar of their own database: an accepted one must
    be SQLite syntax and name no missing table (columns may still be wrong: the
    grammar does not check which table a column belongs to)."""
    schemas = load_schemas()
    pairs = distinct_mutants(gold, n, seed)
    parsers, databases = {}, {}
    accepted = 0
    errors = []
    for example, mutant in pairs:
        db = example["db_id"]
        if db not in parsers:
            parsers[db] = lark_parser(sql_grammar(schemas[db]))
            databases[db] = memory_database(schemas[db])
        tree = accepts(parsers[db], mutant)
        if tree is None or uses_ansi(tree):
            continue
        accepted += 1
        verdict = sqlite_verdict(databases[db], mutant)
        if is_syntax_error(verdict) or "no such table" in (verdict or ""):
            errors.append((mutant, verdict))
    return {"mutants": len(pairs), "accepted": accepted, "errors_count": len(errors),
            "errors": errors[:20]}


def ambiguity(gold) -> dict:
    """How many gold queries have more than one parse."""
    explicit = lark_parser(ambiguity="explicit")
    ambiguous = [g["query"] for g in gold
                 if list(explicit.parse(g["query"]).find_data("_ambig"))]
    return {"queries": len(gold), "ambiguous": len(ambiguous), "examples": ambiguous[:10]}


def main() -> None:
    """Run the checks and print a summary (and the full results as JSON)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--samples", type=int, default=1000)
    ap.add_argument("--mutants", type=int, default=3000)
    ap.add_argument("--depth", type=int, default=6)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--ambiguity", action="store_true")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()

    gold = load_gold()
    results = {"gold": gold_parse(gold)}
    g = results["gold"]
    print(f"generic grammar: {g['parsed']}/{g['queries']} gold queries parse "
          f"({100 * g['rate']:.2f}%); CPU {g['cpu_s_total']:.1f} s in all, per query "
          f"mean {g['cpu_ms_mean']:.0f} ms, p50 {g['cpu_ms_p50']:.0f} ms, "
          f"p95 {g['cpu_ms_p95']:.0f} ms, max {g['cpu_ms_max']:.0f} ms "
          f"(mean {g['chars_mean']:.0f} chars)")
    for query in g["failures"]:
        print("  fails:", query)
    results["schema"] = s = schema_parse(gold)
    print(f"sql_grammar(own database): {s['parsed']}/{s['queries']} parse "
          f"({s['databases']} databases)")
    for db, query in s["failures"]:
        print(f"  fails [{db}]:", query)
    results["samples"] = sm = sampled(args.samples, args.depth, args.seed)
    for name, r in sm.items():
        print(f"sampled derivations ({name}, depth {args.depth}): "
              f"{r['sqlite_syntax_errors']}/{r['samples']} SQLite syntax errors "
              f"(mean {r['chars_mean']:.0f} chars)")
        for query, verdict in r["errors"]:
            print("  ", repr(query), "->", verdict)
    results["mutants"] = m = mutants(gold, args.mutants, args.seed)
    print(f"mutants: {m['mutants']} distinct, Lark accepts {m['lark_accepted']} "
          f"({m['ansi']} ANSI); SQLite syntax errors among them: "
          f"{m['sqlite_syntax_errors']}")
    for query, verdict in m["errors"]:
        print("  ", repr(query), "->", verdict)
    results["schema_mutants"] = sm = schema_mutants(gold, args.mutants, args.seed + 1)
    print(f"mutants under sql_grammar(own database): {sm['mutants']} distinct, "
          f"accepted {sm['accepted']}; SQLite syntax errors or missing tables among "
          f"them: {sm['errors_count']}")
    for query, verdict in sm["errors"]:
        print("  ", repr(query), "->", verdict)
    if args.ambiguity:
        results["ambiguity"] = a = ambiguity(gold)
        print(f"ambiguous parses: {a['ambiguous']}/{a['queries']}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
