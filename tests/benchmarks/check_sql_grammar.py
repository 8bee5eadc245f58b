"""SQL grammar figures: Spider dev parse rate and time, and agreement with SQLite.

    python tests/benchmarks/check_sql_grammar.py [--samples N] [--mutants N] [--depth D]
        [--walks N] [--derivations N] [--databases PATH] [--ambiguity] [--json out.json]

The generic grammar (``grammars/sql.lark``) goes through Lark's Earley parser with
``lexer="dynamic_complete"`` (the language Trellis compiles); the schema grammars
(``sql_grammar(db)``) through Trellis itself, compiled over the SmolLM2 tokenizer
(or, without it, a byte vocabulary with SQL words):

* generic grammar: how many of the 1,034 Spider dev gold queries parse, the
  failures, and the CPU time per query;
* ``sql_grammar`` of each query's own database (the 20 Spider dev databases):
  how many gold queries it accepts as text and token by token (the tokenizer's
  encoding, then EOS), and the compile times;
* ``--walks`` random walks per database over the tokens each state allows
  (:func:`sql_testing.random_walk`) and ``--derivations`` derivations of the
  grammar with random terminal strings: how many finish, and how many SQLite
  refuses to prepare (``EXPLAIN``; should be 0), on the database files under
  ``--databases`` (the Spider ``databases/`` folder or the
  ``spider_databases.tar.gz`` of the shared data) or, without it, empty
  in-memory databases with the same tables;
* ``--samples`` random derivations of the generic grammar prepared by SQLite:
  how many it calls a syntax error (should be 0);
* ``--mutants`` one-edit mutants of gold queries: how many Lark accepts with the
  generic grammar, and of those how many SQLite calls a syntax error (should be
  0; the ANSI forms DATE/INTERVAL/EXTRACT are counted apart); then as many under
  the grammar of the query's database, where every accepted one must prepare;
* ``--ambiguity``: how many gold queries have more than one parse (generic).
"""

from __future__ import annotations

import argparse
import json
import random
import sqlite3
import statistics
import sys
import tarfile
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import constrain  # noqa: E402
from constrain.frontends.sql import sql_grammar  # noqa: E402
from grammar_sampling import GrammarSampler  # noqa: E402
from sql_testing import (  # noqa: E402
    DerivationSampler,
    accepts,
    is_syntax_error,
    lark_parser,
    load_gold,
    load_schemas,
    memory_database,
    mutate,
    random_walk,
    sqlite_verdict,
    terminal_examples,
    uses_ansi,
    walk_vocabulary,
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


class Databases:
    """The 20 Spider dev databases: their schema grammars compiled over one
    vocabulary (cached), and connections SQLite prepares queries on."""

    def __init__(self, files: Path | None, tokenizer):
        self.schemas = load_schemas()
        self.files = files
        self.tokenizer = tokenizer
        self.vocab = (constrain.Vocabulary.from_huggingface(tokenizer) if tokenizer is not None
                      else None)
        self._grammars: dict[str, tuple] = {}
        self._connections: dict[str, sqlite3.Connection] = {}
        self.compile_s: dict[str, float] = {}

    def grammar(self, db: str):
        """``(constraint, vocabulary)`` for ``sql_grammar`` of ``db``."""
        if db not in self._grammars:
            vocab = self.vocab or walk_vocabulary(self.schemas[db])
            start = time.perf_counter()
            g = constrain.compile_grammar(sql_grammar(self.schemas[db]), vocab)
            self.compile_s[db] = time.perf_counter() - start
            self._grammars[db] = (g, vocab)
        return self._grammars[db]

    def close(self) -> None:
        """Close the database connections."""
        for con in self._connections.values():
            con.close()
        self._connections.clear()

    def connection(self, db: str) -> sqlite3.Connection:
        """The database file (read-only) if there are files, else an empty
        in-memory database with its tables."""
        if db not in self._connections:
            if self.files is not None:
                path = self.files / db / f"{db}.sqlite"
                con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
            else:
                con = memory_database(self.schemas[db])
            self._connections[db] = con
        return self._connections[db]


def database_files(path: Path | None, scratch: str) -> Path | None:
    """The folder holding ``<db>/<db>.sqlite``: ``path`` itself, or the
    ``databases/`` folder of a Spider tarball extracted into ``scratch``."""
    if path is None or path.is_dir():
        return path
    with tarfile.open(path) as tar:
        tar.extractall(scratch, filter="data")
    return Path(scratch) / "databases"


def schema_gold(gold, dbs: Databases) -> dict:
    """Every gold query under the grammar of its own database, as text and token
    by token (the tokenizer's encoding, then EOS)."""
    text_fail, token_fail, walked = [], [], 0
    for example in gold:
        g, _ = dbs.grammar(example["db_id"])
        query = example["query"]
        if not g.matches(query):
            text_fail.append((example["db_id"], query))
        if dbs.tokenizer is None:
            continue
        walked += 1
        state = g.initial_state()
        for token in dbs.tokenizer.encode(query, add_special_tokens=False):
            state = g.advance(state, token)
            if state is None:
                break
        if state is None or not g.is_accepting(state):
            token_fail.append((example["db_id"], query))
    return {"queries": len(gold), "text": len(gold) - len(text_fail),
            "tokens": walked - len(token_fail), "token_walked": walked,
            "text_failures": text_fail, "token_failures": token_fail,
            "databases": len(dbs.compile_s), "compile_s": dict(dbs.compile_s)}


def walks(dbs: Databases, n: int, seed: int) -> dict:
    """``n`` random walks per database; SQLite's verdict on those that finish."""
    finished, refused, per_db = 0, [], {}
    for k, db in enumerate(sorted(dbs.schemas)):
        g, vocab = dbs.grammar(db)
        rng = random.Random(seed + k)
        done = [q for q in (random_walk(g, vocab, rng) for _ in range(n)) if q is not None]
        bad = [(db, q, v) for q in done if (v := sqlite_verdict(dbs.connection(db), q))]
        finished += len(done)
        refused += bad
        per_db[db] = len(done)
    return {"walks": n * len(dbs.schemas), "finished": finished, "refused": len(refused),
            "examples": refused[:20], "per_database": per_db}


def derivations(dbs: Databases, n: int, depth: int, seed: int) -> dict:
    """``n`` derivations per database (half at ``depth``, half at twice it);
    SQLite's verdict on each."""
    refused, chars = [], []
    for k, db in enumerate(sorted(dbs.schemas)):
        g, _ = dbs.grammar(db)
        sampler = GrammarSampler(g, seed=seed + k)
        for i in range(n):
            query = sampler.sentence(max_depth=depth * (1 + i % 2)).decode("utf-8")
            chars.append(len(query))
            verdict = sqlite_verdict(dbs.connection(db), query)
            if verdict is not None:
                refused.append((db, query, verdict))
    return {"derivations": n * len(dbs.schemas), "refused": len(refused),
            "examples": refused[:20], "chars_mean": _mean(chars)}


def _mean(values) -> float:
    """The mean of ``values``, 0 for none (a count of 0 runs nothing)."""
    return statistics.mean(values) if values else 0


def sampled(n: int, depth: int, seed: int) -> dict:
    """SQLite's verdict on random derivations of the generic grammar."""
    parser = lark_parser()
    con = memory_database({"t": ["a", "b"], "u": ["a", "c"]})
    sampler = DerivationSampler(parser, terminal_examples(parser), max_depth=depth)
    rng = random.Random(seed)
    errors, lengths = [], []
    for _ in range(n):
        query = sampler.sample(rng)
        lengths.append(len(query))
        verdict = sqlite_verdict(con, query)
        if is_syntax_error(verdict):
            errors.append((query, verdict))
    return {"samples": n, "sqlite_syntax_errors": len(errors), "errors": errors[:20],
            "chars_mean": _mean(lengths)}


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


def schema_mutants(gold, dbs: Databases, n: int, seed: int) -> dict:
    """Mutants judged by the grammar of their own database: every accepted one
    must be a query SQLite prepares."""
    pairs = distinct_mutants(gold, n, seed)
    accepted = 0
    errors = []
    for example, mutant in pairs:
        db = example["db_id"]
        g, _ = dbs.grammar(db)
        if not g.matches(mutant):
            continue
        accepted += 1
        verdict = sqlite_verdict(dbs.connection(db), mutant)
        if verdict is not None:
            errors.append((mutant, verdict))
    return {"mutants": len(pairs), "accepted": accepted, "errors_count": len(errors),
            "errors": errors[:20]}


def ambiguity(gold) -> dict:
    """How many gold queries have more than one parse."""
    explicit = lark_parser(ambiguity="explicit")
    ambiguous = [g["query"] for g in gold
                 if list(explicit.parse(g["query"]).find_data("_ambig"))]
    return {"queries": len(gold), "ambiguous": len(ambiguous), "examples": ambiguous[:10]}


def _tokenizer():
    """The SmolLM2 tokenizer, or ``None`` where its package is missing."""
    try:
        from search.models.smollm2 import load_tokenizer

        return load_tokenizer()
    except Exception as exc:  # the package or transformers is not installed
        print(f"(no SmolLM2 tokenizer: {exc}; walks use bytes and SQL words, gold "
              f"queries are not token-walked)")
        return None


def count(text: str) -> int:
    """An argparse type: a number of runs, 0 or more."""
    n = int(text)
    if n < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {n}")
    return n


count.__name__ = "int"  # argparse names the type in "invalid int value: 'x'"


def parse_args(argv=None) -> argparse.Namespace:
    """The command line (``argv``, default ``sys.argv[1:]``); counts must be >= 0."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--samples", type=count, default=1000)
    ap.add_argument("--mutants", type=count, default=3000)
    ap.add_argument("--depth", type=int, default=6)
    ap.add_argument("--walks", type=count, default=100, help="random walks per database")
    ap.add_argument("--derivations", type=count, default=100, help="derivations per database")
    ap.add_argument("--databases", type=Path,
                    help="Spider's databases/ folder or spider_databases.tar.gz")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--ambiguity", action="store_true")
    ap.add_argument("--json", type=Path)
    return ap.parse_args(argv)


def main() -> int:
    """Run the checks, print a summary (and the full results as JSON); exit 1
    when a schema grammar refuses a gold query or SQLite refuses a query one
    accepts."""
    args = parse_args()

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

    with tempfile.TemporaryDirectory(prefix="spider-") as scratch:
        dbs = Databases(database_files(args.databases, scratch), _tokenizer())
        try:
            return _schema_checks(args, gold, results, dbs)
        finally:
            dbs.close()


def _schema_checks(args, gold, results: dict, dbs: Databases) -> int:
    """The checks of the schema grammars and the rest of the report."""
    where = f"files under {dbs.files}" if dbs.files else "in-memory copies of their schemas"
    results["schema"] = s = schema_gold(gold, dbs)
    times = sorted(s["compile_s"].values())
    print(f"sql_grammar(own database), {s['databases']} databases (compile {sum(times):.0f} s "
          f"in all, max {times[-1]:.1f} s): {s['text']}/{s['queries']} gold queries accepted "
          f"as text, {s['tokens']}/{s['token_walked']} token-walked")
    for db, query in s["text_failures"] + s["token_failures"]:
        print(f"  refused [{db}]:", query)
    results["walks"] = w = walks(dbs, args.walks, args.seed)
    print(f"random walks: {w['walks']} on {len(w['per_database'])} databases ({where}), "
          f"{w['finished']} finished, SQLite refuses {w['refused']}; finished per database "
          f"min {min(w['per_database'].values())}, max {max(w['per_database'].values())}")
    for db, query, verdict in w["examples"]:
        print(f"   [{db}]", repr(query), "->", verdict)
    results["derivations"] = d = derivations(dbs, args.derivations, 2 * args.depth, args.seed)
    print(f"derivations of the schema grammars: {d['derivations']} (mean {d['chars_mean']:.0f} "
          f"chars), SQLite refuses {d['refused']}")
    for db, query, verdict in d["examples"]:
        print(f"   [{db}]", repr(query), "->", verdict)

    results["samples"] = sm = sampled(args.samples, args.depth, args.seed)
    print(f"sampled derivations (generic, depth {args.depth}): "
          f"{sm['sqlite_syntax_errors']}/{sm['samples']} SQLite syntax errors "
          f"(mean {sm['chars_mean']:.0f} chars)")
    for query, verdict in sm["errors"]:
        print("  ", repr(query), "->", verdict)
    results["mutants"] = m = mutants(gold, args.mutants, args.seed)
    print(f"mutants: {m['mutants']} distinct, Lark accepts {m['lark_accepted']} "
          f"({m['ansi']} ANSI); SQLite syntax errors among them: "
          f"{m['sqlite_syntax_errors']}")
    for query, verdict in m["errors"]:
        print("  ", repr(query), "->", verdict)
    results["schema_mutants"] = sm = schema_mutants(gold, dbs, args.mutants, args.seed + 1)
    print(f"mutants under sql_grammar(own database): {sm['mutants']} distinct, "
          f"accepted {sm['accepted']}; SQLite refuses {sm['errors_count']} of them")
    for query, verdict in sm["errors"]:
        print("  ", repr(query), "->", verdict)
    if args.ambiguity:
        results["ambiguity"] = a = ambiguity(gold)
        print(f"ambiguous parses: {a['ambiguous']}/{a['queries']}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    bad = (s["text"] < s["queries"] or s["tokens"] < s["token_walked"] or w["refused"]
           or d["refused"] or sm["errors_count"])
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
