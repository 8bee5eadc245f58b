"""grammars/sql.lark and constrain.frontends.sql.sql_grammar, checked through Lark's Earley
parser (``lexer="dynamic_complete"``, the language Trellis compiles) against
Spider's gold queries and SQLite's own parser.

The full Spider dev run (1,034 queries) and larger SQLite agreement runs are in
``tests/benchmarks/check_sql_grammar.py``; this file checks deterministic samples.
"""

from __future__ import annotations

import random
import re
import sqlite3

import pytest

from constrain.errors import ConstraintError
from constrain.frontends.sql import (
    RESERVED_WORDS,
    SqlSchemaError,
    identifier_regex,
    load_schema,
    sql_grammar,
)
from sql_testing import (
    SPIDER_DIR,
    SQL_LARK,
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

VENDORED_DBS = ("concert_singer", "pets_1", "poker_player")


@pytest.fixture(scope="module")
def parser():
    return lark_parser()


@pytest.fixture(scope="module")
def gold():
    return load_gold()


@pytest.fixture(scope="module")
def scratch_db():
    con = memory_database({"t": ["a", "b"], "u": ["a", "c"]})
    yield con
    con.close()


# -- the identifier terminal --------------------------------------------------------

def test_identifier_terminal_is_the_generated_regex():
    # sql.lark carries the output of identifier_regex(); regenerate it there
    # whenever RESERVED_WORDS changes
    text = SQL_LARK.read_text(encoding="utf-8")
    line = next(ln for ln in text.splitlines() if ln.startswith("PLAIN_NAME_NOT_OVER:"))
    assert line == f"PLAIN_NAME_NOT_OVER: /{identifier_regex(RESERVED_WORDS + ('OVER',))}/"


def test_identifier_regex_is_the_complement_of_the_reserved_words():
    regex = re.compile(identifier_regex())
    rng = random.Random(0)
    letters = "abcdefghijklmnopqrstuvwxyzSELCTNUI_0"
    words = [w for w in RESERVED_WORDS] + [w.lower() for w in RESERVED_WORDS]
    words += [w + "x" for w in RESERVED_WORDS] + [w[:-1] for w in RESERVED_WORDS]
    words += ["".join(rng.choice(letters) for _ in range(rng.randint(1, 8)))
              for _ in range(5000)]
    for word in words:
        expected = bool(re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", word)) and \
            word.upper() not in RESERVED_WORDS
        assert bool(regex.fullmatch(word)) == expected, word
        if expected:
            # the first match is the longest, which Lark's dynamic lexer relies on
            assert regex.match(word + " ").group(0) == word


# SQLite 3.40's keywords; those not in RESERVED_WORDS must work as names
SQLITE_KEYWORDS = """
ABORT ACTION ADD AFTER ALL ALTER ALWAYS ANALYZE AND AS ASC ATTACH AUTOINCREMENT
BEFORE BEGIN BETWEEN BY CASCADE CASE CAST CHECK COLLATE COLUMN COMMIT CONFLICT
CONSTRAINT CREATE CROSS CURRENT CURRENT_DATE CURRENT_TIME CURRENT_TIMESTAMP DATABASE
DEFAULT DEFERRABLE DEFERRED DELETE DESC DETACH DISTINCT DO DROP EACH ELSE END ESCAPE
EXCEPT EXCLUDE EXCLUSIVE EXISTS EXPLAIN FAIL FILTER FIRST FOLLOWING FOR FOREIGN FROM
FULL GENERATED GLOB GROUP GROUPS HAVING IF IGNORE IMMEDIATE IN INDEX INDEXED
INITIALLY INNER INSERT INSTEAD INTERSECT INTO IS ISNULL JOIN KEY LAST LEFT LIKE LIMIT
MATCH MATERIALIZED NATURAL NO NOT NOTHING NOTNULL NULL NULLS OF OFFSET ON OR ORDER
OTHERS OUTER OVER PARTITION PLAN PRAGMA PRECEDING PRIMARY QUERY RAISE RANGE
RECURSIVE REFERENCES REGEXP REINDEX RELEASE RENAME REPLACE RESTRICT RETURNING RIGHT
ROLLBACK ROW ROWS SAVEPOINT SELECT SET TABLE TEMP TEMPORARY THEN TIES TO TRANSACTION
TRIGGER UNBOUNDED UNION UNIQUE UPDATE USING VACUUM VALUES VIEW VIRTUAL WHEN WHERE
WINDOW WITH WITHOUT
""".split()

# every place sql.lark puts a name
NAME_CONTEXTS = [
    "SELECT {k} FROM t", "SELECT a AS {k} FROM t", "SELECT a {k} FROM t",
    "SELECT a {k}, b FROM t", "SELECT * FROM t {k}", "SELECT * FROM t AS {k}",
    "SELECT * FROM t {k} WHERE 1", "SELECT * FROM t {k} JOIN u ON 1",
    "SELECT * FROM t {k} ORDER BY 1", "SELECT {k}.a FROM t AS x", "SELECT x.{k} FROM t AS x",
    "SELECT {k}(a) FROM t", "SELECT * FROM {k}", "SELECT * FROM t JOIN u USING ({k})",
    "WITH {k} AS (SELECT 1) SELECT * FROM {k}", "WITH c({k}) AS (SELECT 1) SELECT * FROM c",
    "SELECT a FROM t ORDER BY {k} DESC", "SELECT a COLLATE {k} FROM t",
    "SELECT * FROM (SELECT 1) AS {k} LEFT JOIN u ON 1", "SELECT * FROM (SELECT 1) {k} JOIN u",
    "SELECT CAST(a AS {k}) FROM t", "SELECT a FROM t WHERE a IN {k}",
    "SELECT count({k}) FROM t GROUP BY {k} HAVING {k} > 1", "SELECT max(a) {k} FROM t",
    "SELECT CASE WHEN a THEN b END {k} FROM t", "SELECT (a) {k}, b FROM t",
]


@pytest.mark.parametrize("word", [k for k in SQLITE_KEYWORDS if k not in RESERVED_WORDS])
def test_unreserved_keywords_are_names_everywhere(word, scratch_db):
    for context in NAME_CONTEXTS:
        query = context.format(k=word.lower())
        assert not is_syntax_error(sqlite_verdict(scratch_db, query)), query


@pytest.mark.parametrize("word", [k for k in RESERVED_WORDS
                                  if k not in ("TRUE", "FALSE") and k in SQLITE_KEYWORDS])
def test_reserved_words_fail_somewhere(word, scratch_db):
    assert any(is_syntax_error(sqlite_verdict(scratch_db, c.format(k=word.lower())))
               for c in NAME_CONTEXTS)


# -- the generic grammar ------------------------------------------------------------

# (query, accepted by sql.lark[, accepted by SQLite when it differs]). sql.lark
# accepts a subset of SQLite; the ANSI forms are not checked against SQLite.
CASES = [
    ("SELECT a FROM t", True),
    ("select a from t;", True),
    ("  SELECT a FROM t ;  ", True),
    ("SELECT\ta\nFROM\r\nt", True),
    ("SELECTa FROM t", False),
    ("SELECT a FROM t WHEREa = 1", False),
    ("SELECT a FROMt", True),  # `FROMt` is an alias of a
    ("SELECT aFROM t", True),  # `aFROM` aliased t
    ("SELECT a FROM t WHERE a=1", True),
    ("SELECT a FROM t WHERE a = 1AND b = 2", False),
    ("SELECT count(*) FROM t", True),
    ("SELECT count ( * ) FROM t", True),
    ("SELECT count(DISTINCT a), max(b) FROM t", True),
    ("SELECT t.* , u.a FROM t, u", True),
    ("SELECT * FROM t AS x LEFT OUTER JOIN u AS y ON x.a = y.a", True),
    ("SELECT * FROM t NATURAL JOIN u", True),
    ("SELECT * FROM t CROSS JOIN u", True),
    ("SELECT * FROM t JOIN u USING (a)", True),
    ("SELECT * FROM t left", False),
    ("SELECT * FROM t where", False),
    ("SELECT a FROM t WHERE a IN (SELECT a FROM u) AND EXISTS (SELECT 1)", True),
    ("SELECT a FROM t WHERE a NOT IN (1, 2, 3)", True),
    ("SELECT a FROM t WHERE a IN ()", True),
    ("SELECT a FROM t WHERE a IN u", True),
    ("SELECT (SELECT max(a) FROM u) FROM t", True),
    ("SELECT x.a FROM (SELECT a FROM t) AS x", True),
    ("SELECT x.a FROM (SELECT a FROM t) x", True),
    ("SELECT * FROM (SELECT a FROM t) over LEFT JOIN u", False),  # OVER, the keyword
    ("SELECT * FROM (SELECT a FROM t) AS over LEFT JOIN u", True),
    ("SELECT * FROM (SELECT a FROM t) overt LEFT JOIN u", True),
    ("SELECT a over, b FROM t AS over", True),
    ("WITH RECURSIVE c(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM c LIMIT 5) SELECT n FROM c", True),
    ("SELECT a, count(*) FROM t GROUP BY a HAVING count(*) > 1", True),
    ("SELECT a FROM t ORDER BY a DESC NULLS LAST, b ASC", True),
    ("SELECT a FROM t ORDER BY a LIMIT 10 OFFSET 5", True),
    ("SELECT a FROM t LIMIT 5, 10", True),
    ("SELECT CASE WHEN a > 1 THEN 'x' ELSE 'y' END FROM t", True),
    ("SELECT CASE a WHEN 1 THEN 2 END FROM t", True),
    ("SELECT a FROM t UNION SELECT a FROM u", True),
    ("SELECT a FROM t INTERSECT SELECT a FROM u EXCEPT SELECT 1", True),
    ("SELECT CAST(a AS INTEGER), CAST(b AS VARCHAR(10)) FROM t", True),
    ("SELECT 1, 1.5, .5, 1., 1e3, 2.5E-3, 0x1F, 'it''s', X'0A', NULL, TRUE, FALSE", True),
    ("SELECT CURRENT_DATE, CURRENT_TIME, CURRENT_TIMESTAMP", True),
    ("SELECT 1e", False),
    ("SELECT 0x", False),
    ("SELECT X'ABC'", False),
    ("SELECT 'abc", False),
    ("SELECT a || b, a -> '$.x', a ->> '$.y', a * b / 2 % 3, a << 1 >> 2, a & b | 1 FROM t", True),
    ("SELECT a IS NOT DISTINCT FROM b, a IS NULL, a ISNULL, a NOTNULL, a NOT NULL FROM t", True),
    ("SELECT a LIKE 'x%' ESCAPE '\\', a NOT GLOB 'x*', a REGEXP 'x', b MATCH 'y' FROM t", True),
    ("SELECT a FROM t WHERE a LIKE b < c ESCAPE 'x'", True),
    ("SELECT a FROM t WHERE a LIKE b = c ESCAPE 'x'", False),
    ("SELECT a FROM t WHERE a LIKE b <> c", True),
    ("SELECT a FROM t WHERE a BETWEEN 1 AND 2 AND NOT b NOT BETWEEN 3 AND 4", True),
    ("SELECT a FROM t WHERE NOT a = 1 OR b <> 2 AND b != 3", True),
    ("SELECT -a, +a, ~a, a - -1 FROM t", False, True),
    ("SELECT -a, +a, ~a, a - (-1) FROM t", True),
    ("SELECT a--1 FROM t", False, True),  # SQLite: `SELECT a` and a comment
    ("SELECT a-1 FROM t", True),
    ("SELECT a FROM t ORDER BY a COLLATE NOCASE", True),
    ("SELECT row_number() OVER (PARTITION BY a ORDER BY b) FROM t", True),
    ("SELECT count(*) FILTER (WHERE a > 1) FROM t", True),
    ("SELECT sum(a) OVER (ORDER BY b ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) FROM t",
     True),
    ("SELECT sum(a) OVER (PARTITION BY a ORDER BY b RANGE 2 PRECEDING EXCLUDE TIES) FROM t",
     True),
    ("SELECT sum(a) OVER (ROWS BETWEEN CURRENT ROW AND UNBOUNDED PRECEDING) FROM t", False),
    ("SELECT sum(a) OVER (ROWS UNBOUNDED FOLLOWING) FROM t", False),
    ('SELECT "a", [b], `a` FROM "t"', True),
    ("SELECT a FROM t WHERE a = \"text\"", True),
    ("SELECT key, end desc, offset FROM t", True),
    ("SELECT select FROM t", False),
    ("SELECT a AS from FROM t", False),
    ("SELECT a FROM t; SELECT b FROM u", False, None),
    # ANSI, not SQLite
    ("SELECT a FROM t WHERE b > DATE '2020-01-01'", True),
    ("SELECT a FROM t WHERE b > CURRENT_DATE - INTERVAL '1' DAY", True),
    ("SELECT a FROM t WHERE b > CURRENT_DATE - INTERVAL 3 month", True),
    ("SELECT EXTRACT(YEAR FROM b) FROM t", True),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_cases(parser, scratch_db, case):
    query, accepted, sqlite_accepts = (case + (case[1],))[:3]
    tree = accepts(parser, query)
    assert (tree is not None) == accepted
    if tree is not None and uses_ansi(tree) or sqlite_accepts is None:
        return
    assert is_syntax_error(sqlite_verdict(scratch_db, query)) != sqlite_accepts


def test_whitespace_and_precedence_leave_one_parse(gold):
    explicit = lark_parser(ambiguity="explicit")
    queries = [g["query"] for g in gold[::40]] + [c[0] for c in CASES if c[1]]
    for query in queries:
        tree = explicit.parse(query)
        assert not list(tree.find_data("_ambig")), query


def gold_sample(gold):
    """Every fifth Spider dev query: 207 of 1,034, all 20 databases."""
    return gold[::5]


def test_spider_dev_gold_sample_parses(parser, gold):
    sample = gold_sample(gold)
    failures = [g["query"] for g in sample if accepts(parser, g["query"]) is None]
    assert 1 - len(failures) / len(sample) >= 0.99, failures


def test_sampled_derivations_are_sqlite_syntax(parser, scratch_db):
    examples = terminal_examples(parser)
    sampler = DerivationSampler(parser, examples, max_depth=5)
    rng = random.Random(20181030)
    queries = [sampler.sample(rng) for _ in range(120)]
    for query in queries:
        verdict = sqlite_verdict(scratch_db, query)
        assert not is_syntax_error(verdict), (query, verdict)
    # and the sampler produces sentences (checks it and its examples)
    for query in queries[:15]:
        assert accepts(parser, query) is not None, query


def test_sampled_window_specs_are_sqlite_syntax(parser, scratch_db):
    # whole-query samples rarely reach a window frame within the depth bound
    sampler = DerivationSampler(parser, terminal_examples(parser), max_depth=3,
                                start="window_spec")
    rng = random.Random(5)
    for _ in range(60):
        query = f"SELECT sum(a) OVER ({sampler.sample(rng)}) FROM t"
        verdict = sqlite_verdict(scratch_db, query)
        assert not is_syntax_error(verdict), (query, verdict)


def test_mutants_lark_accepts_are_sqlite_syntax(parser, gold):
    schemas = load_schemas()
    rng = random.Random(7)
    short = [g for g in gold if len(g["query"]) <= 100]
    databases: dict[str, sqlite3.Connection] = {}
    accepted = 0
    for _ in range(150):
        example = rng.choice(short)
        mutant = mutate(example["query"], rng)
        tree = accepts(parser, mutant)
        if tree is None or uses_ansi(tree):
            continue
        accepted += 1
        db = example["db_id"]
        if db not in databases:
            databases[db] = memory_database(schemas[db])
        verdict = sqlite_verdict(databases[db], mutant)
        assert not is_syntax_error(verdict), (mutant, verdict)
    assert accepted >= 30  # the check is not vacuous


# -- sql_grammar --------------------------------------------------------------------

@pytest.fixture(scope="module")
def concert_parser():
    return lark_parser(sql_grammar(SPIDER_DIR / "concert_singer.sqlite"))


def test_schema_from_file_connection_and_mapping_agree():
    path = SPIDER_DIR / "pets_1.sqlite"
    tables = load_schema(path)
    assert tables == load_schemas()["pets_1"]
    con = sqlite3.connect(path)
    try:
        assert load_schema(con) == tables
        assert sql_grammar(con) == sql_grammar(path) == sql_grammar(str(path))
    finally:
        con.close()
    assert sql_grammar(tables) == sql_grammar(path)
    assert sql_grammar(dict(reversed(list(tables.items())))) == sql_grammar(path)


@pytest.mark.parametrize("db", VENDORED_DBS)
def test_gold_queries_parse_with_their_schema(db, gold):
    specialised = lark_parser(sql_grammar(SPIDER_DIR / f"{db}.sqlite"))
    queries = sorted({g["query"] for g in gold if g["db_id"] == db})
    failures = [q for q in queries if accepts(specialised, q) is None]
    assert not failures


def test_gold_queries_of_other_databases_parse_with_their_schema(gold):
    schemas = load_schemas()
    for db in ("world_1", "car_1", "orchestra"):  # orchestra has a column needing quotes
        specialised = lark_parser(sql_grammar(schemas[db]))
        queries = sorted({g["query"] for g in gold if g["db_id"] == db})[:12]
        assert all(accepts(specialised, q) is not None for q in queries), db


def test_unknown_names_are_rejected(concert_parser, gold):
    con = sqlite3.connect(SPIDER_DIR / "concert_singer.sqlite")
    queries = sorted({g["query"] for g in gold if g["db_id"] == "concert_singer"})
    for query in queries[:10]:
        bad_table = re.sub(r"\b(FROM|JOIN)\s+(\w+)", r"\1 \2x", query, count=1,
                           flags=re.IGNORECASE)
        bad_column = re.sub(r"\bSELECT\s+(DISTINCT\s+)?(T\d\.)?(\w+)\b(?!\s*\()",
                            r"SELECT \1\2\3_nope", query, count=1, flags=re.IGNORECASE)
        for mutant in (bad_table, bad_column):
            if mutant == query:
                continue
            assert accepts(concert_parser, mutant) is None, mutant
            assert "no such" in (sqlite_verdict(con, mutant) or ""), mutant
    con.close()


def test_names_case_quotes_and_qualifiers(concert_parser):
    for query in ['SELECT NAME FROM SINGER', 'SELECT "Name" FROM [singer]',
                  "SELECT `name` FROM singer AS s WHERE s.age > 20",
                  "SELECT anything.name FROM singer",
                  'SELECT name FROM singer WHERE country = "France"',
                  "SELECT s.* FROM singer s JOIN concert c USING (stadium_id)"]:
        assert accepts(concert_parser, query) is not None, query
    for query in ["SELECT nom FROM singer", "SELECT name FROM singers",
                  "SELECT s.nom FROM singer AS s", "SELECT name FROM singer WHERE agee > 1",
                  "SELECT * FROM t JOIN singer USING (nom)",
                  "WITH c AS (SELECT 1) SELECT * FROM c"]:
        assert accepts(concert_parser, query) is None, query


def test_quoted_only_names():
    specialised = lark_parser(sql_grammar({"order": ["from", "a b", 'say "hi"']}))
    for query in ['SELECT "from", [a b], "say ""hi""" FROM "order"',
                  "SELECT `from` FROM [order]"]:
        assert accepts(specialised, query) is not None, query
    for query in ["SELECT from FROM order", "SELECT a b FROM \"order\""]:
        assert accepts(specialised, query) is None, query


def test_cte_names():
    text = sql_grammar({"t": ["a"]}, cte_names=["recent"])
    specialised = lark_parser(text)
    assert accepts(specialised, "WITH recent AS (SELECT a FROM t) SELECT a FROM recent")
    assert accepts(specialised, "WITH other AS (SELECT a FROM t) SELECT a FROM other") is None
    assert accepts(specialised, "SELECT a FROM recent") is not None  # not tracked
    with pytest.raises(SqlSchemaError, match="CTE names"):
        sql_grammar({"t": ["a"]}, cte_names=["ok", 3])


def test_specialised_samples_are_sqlite_syntax():
    path = SPIDER_DIR / "concert_singer.sqlite"
    schema = load_schema(path)
    specialised = lark_parser(sql_grammar(path))
    tables = list(schema)
    columns = sorted({c for cols in schema.values() for c in cols})
    examples = terminal_examples(specialised, {
        "TABLE_NAME": tables + [f'"{t.upper()}"' for t in tables],
        "COLUMN_NAME": columns + [f"[{c}]" for c in columns],
    })
    sampler = DerivationSampler(specialised, examples, max_depth=5)
    rng = random.Random(3)
    con = sqlite3.connect(path)
    for _ in range(60):
        query = sampler.sample(rng)
        verdict = sqlite_verdict(con, query)
        assert not is_syntax_error(verdict), (query, verdict)
        assert "no such table" not in (verdict or ""), (query, verdict)
    con.close()


# -- bad input ----------------------------------------------------------------------

def test_bad_schemas(tmp_path):
    not_a_db = tmp_path / "notes.sqlite"
    not_a_db.write_text("hello, this is not a database" * 100)
    empty_db = tmp_path / "empty.sqlite"
    sqlite3.connect(empty_db).close()
    cases = [
        (tmp_path / "missing.sqlite", "does not exist"),
        (tmp_path, "not a file"),
        (not_a_db, "cannot"),
        (empty_db, "no tables"),
        ({}, "no tables"),
        ({"t": []}, "no columns"),
        ({"t": "abc"}, "list of names"),
        ({"t": ["a", ""]}, "non-empty"),
        ({"": ["a"]}, "non-empty"),
        (42, "schema must be"),
    ]
    for schema, message in cases:
        with pytest.raises(SqlSchemaError, match=message):
            sql_grammar(schema)
    assert issubclass(SqlSchemaError, ConstraintError)
    assert not (tmp_path / "missing.sqlite").exists()  # reading never creates a file
