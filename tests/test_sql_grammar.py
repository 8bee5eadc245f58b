"""grammars/sql.lark and constrain.frontends.sql.sql_grammar, checked against Spider's
gold queries and SQLite: the generic grammar through Lark's Earley parser
(``lexer="dynamic_complete"``, the language Trellis compiles) and SQLite's
parser, the schema grammars compiled by Trellis (their sentences must be
queries SQLite prepares in the database, names and all).

The full Spider dev run (1,034 queries) and larger SQLite agreement runs are in
``tests/benchmarks/check_sql_grammar.py``; this file checks deterministic samples.
"""

from __future__ import annotations

import functools
import random
import re
import sqlite3

import pytest

from constrain import compile_grammar
from constrain.errors import ConstraintError
from constrain.frontends.lark import _load_plain
from constrain.frontends.sql import _bounded_identifier_regex, _dq_string_regex, _fold
from constrain.frontends.sql import (
    AGGREGATE_FUNCTIONS,
    MAX_ALIAS_CHARS,
    MAX_BLANKS,
    MAX_LINE_BREAKS,
    MAX_STRING_CHARS,
    RESERVED_WORDS,
    SCALAR_FUNCTIONS,
    SqlSchemaError,
    identifier_regex,
    load_schema,
    sql_grammar,
)
from grammar_sampling import GrammarSampler
from sql_testing import (
    SPIDER_DIR,
    SQL_LARK,
    DerivationSampler,
    accepts,
    byte_vocabulary,
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
    ("SELECT count(*) OVER (), row_number() OVER ( ) FROM t", True),
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
def vocab():
    return byte_vocabulary()


@functools.cache
def schema_grammar(db: str):
    """``sql_grammar`` of a vendored or Spider dev database, compiled over its
    walk vocabulary (bytes and SQL words), and the vocabulary."""
    path = SPIDER_DIR / f"{db}.sqlite"
    schema = load_schema(path) if path.exists() else load_schemas()[db]
    vocab = walk_vocabulary(schema)
    return compile_grammar(sql_grammar(schema), vocab), vocab


@pytest.fixture(scope="module")
def concert():
    return schema_grammar("concert_singer")[0]


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


def test_schema_grammar_is_plain_lark():
    # the plain subset is read without lark's loader (seconds on large schemas)
    text = sql_grammar(SPIDER_DIR / "poker_player.sqlite")
    assert _load_plain(text, "start") is not None
    # and lark reads the same language
    small = sql_grammar({"t": ["a", "b"], "u": ["a", "c"]}, max_bindings=2)
    parser = lark_parser(small)
    g = compile_grammar(small, byte_vocabulary())
    sampler = GrammarSampler(g, seed=11)
    rng = random.Random(11)
    texts = [sampler.sentence(max_depth=6).decode("utf-8") for _ in range(6)]
    texts += [mutate(t, rng) for t in texts if t]
    for text in texts:
        assert (accepts(parser, text) is not None) == g.matches(text), text


@pytest.mark.parametrize("db", VENDORED_DBS)
def test_gold_queries_parse_with_their_schema(db, gold):
    g, _ = schema_grammar(db)
    queries = sorted({q["query"] for q in gold if q["db_id"] == db})
    assert [q for q in queries if not g.matches(q)] == []


def test_gold_queries_of_other_databases_parse_with_their_schema(gold):
    # cre_Doc_Template_Mgt: a bare column two tables have, in a join
    for db in ("cre_Doc_Template_Mgt",):
        g, _ = schema_grammar(db)
        queries = sorted({q["query"] for q in gold if q["db_id"] == db})
        assert [q for q in queries if not g.matches(q)] == [], db


def _prepare_all(con, queries):
    """SQLite's errors preparing ``queries`` in ``con`` (EXPLAIN)."""
    return [(q, v) for q in queries if (v := sqlite_verdict(con, q)) is not None]


@pytest.mark.parametrize("db", VENDORED_DBS)
def test_random_walks_are_prepared_by_sqlite(db):
    """Seeded random walks over the tokens of a BPE-like vocabulary (bytes and
    SQL words): every walk that ends is a query SQLite prepares."""
    path = SPIDER_DIR / f"{db}.sqlite"
    g, vocab = schema_grammar(db)
    rng = random.Random(2018)
    queries = [q for q in (random_walk(g, vocab, rng) for _ in range(40)) if q is not None]
    assert len(queries) >= 8  # the check is not vacuous
    assert all(q.strip() for q in queries)
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        assert _prepare_all(con, queries) == []
    finally:
        con.close()


@pytest.mark.parametrize("db", VENDORED_DBS)
def test_sampled_derivations_are_prepared_by_sqlite(db):
    """Derivations of the grammar itself, with random terminal strings (deep
    nesting, every clause), are queries SQLite prepares."""
    path = SPIDER_DIR / f"{db}.sqlite"
    g, _ = schema_grammar(db)
    sampler = GrammarSampler(g, seed=7)
    queries = [sampler.sentence(max_depth=depth).decode("utf-8")
               for depth in (6, 10, 14) for _ in range(40)]
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        assert _prepare_all(con, queries) == []
    finally:
        con.close()
    for query in queries[::10]:
        assert g.matches(query), query


# What SQLite refuses to prepare, and the concert_singer grammar must refuse too.
REFUSED = [
    "SELECT *",                                       # no tables specified
    "SELECT * FROM singer WHERE foo(1)",              # no such function
    "SELECT abs(1, 2)",                               # wrong number of arguments
    "SELECT substr('a')",
    "SELECT name FROM concert",                       # a column of another table
    "SELECT T1.name FROM concert AS T1",
    "SELECT T1.name FROM singer AS T2",               # an alias that is not declared
    "SELECT singer.name FROM singer AS T1",           # a table hidden by its alias
    "SELECT T2.name FROM singer AS T1 JOIN singer AS T2 ON T1.Singer_ID = T3.Singer_ID",
    "SELECT Singer_ID FROM singer AS T1 JOIN singer_in_concert AS T2",  # ambiguous
    "SELECT name FROM singer AS T1 JOIN singer AS T2",                  # ambiguous
    "SELECT count(*) FROM singer WHERE count(*) > 1",  # misuse of aggregate
    "SELECT max(count(*)) FROM singer",
    "SELECT name FROM singer GROUP BY count(*)",
    "SELECT name FROM singer ORDER BY count(*)",       # not an aggregate query
    "SELECT name FROM singer GROUP BY 2",              # a column position
    "SELECT name FROM singer GROUP BY name AND 0",     # folded to the integer 0
    "SELECT name FROM singer ORDER BY -1",
    "SELECT name FROM singer WHERE name IN (SELECT name, age FROM singer)",
    "SELECT name FROM singer UNION SELECT name, age FROM singer",
    "SELECT name FROM singer WHERE (SELECT * FROM concert) > 1",
    "SELECT group_concat(DISTINCT name, ',') FROM singer",
    "SELECT name FROM singer LIMIT age",
    "SELECT name FROM singer ORDER BY name COLLATE foo",
    "SELECT FALſE", "SELECT DıSTINCT name FROM singer",  # not ASCII letters
    "SELECT 'a\x00b'",
    "", "  ", "\n", ";",
    "SELECT name FROM singer WHERE name REGEXP 'a'",
    "SELECT 0x10000000000000000", "SELECT 0x00123456789abcdef01",  # hex literal too big
]


@pytest.mark.parametrize("query", REFUSED, ids=range(len(REFUSED)))
def test_what_sqlite_refuses_is_refused(concert, query):
    assert not concert.matches(query)
    if "\x00" in query or not query.strip(" \n;"):
        return
    con = sqlite3.connect(SPIDER_DIR / "concert_singer.sqlite")
    try:
        assert sqlite_verdict(con, query) is not None, query
    finally:
        con.close()


# What SQLite prepares but the grammar refuses: it accepts a subset (docs/sql.md).
CONSERVATIVE = [
    'SELECT "Name"',                                   # a column's name is never a string
    "SELECT T1.Name || T2.Theme FROM singer AS T1 JOIN concert AS T2",  # two tables, one item
    "SELECT s.name FROM singer AS s",                  # aliases are T1 ... T4
    "SELECT T1.name, T2.name, T3.Theme FROM singer AS T1 JOIN singer AS T2 JOIN concert AS T3",
    "SELECT name FROM singer ORDER BY 1",
    "SELECT * FROM singer WHERE age IN ()",
]


@pytest.mark.parametrize("query", CONSERVATIVE)
def test_conservative_refusals(concert, query):
    assert not concert.matches(query)
    con = sqlite3.connect(SPIDER_DIR / "concert_singer.sqlite")
    try:
        assert sqlite_verdict(con, query) is None
    finally:
        con.close()


ACCEPTED = [
    'SELECT NAME FROM SINGER', 'SELECT "Name" FROM [singer]', "SELECT singer.name FROM singer",
    "SELECT `name` FROM singer AS T1 WHERE T1.age > 20",
    'SELECT name FROM singer WHERE country = "France"',
    "SELECT T2.name FROM singer_in_concert AS T1 JOIN singer AS T2 ON T1.singer_id = T2.singer_id",
    "SELECT T3.Name FROM concert AS T2 JOIN singer AS T3",
    "SELECT Singer_ID FROM singer AS T1 JOIN concert AS T2",  # one table has it
    "SELECT count(*), T1.name FROM singer AS T1 JOIN singer_in_concert AS T2 "
    "ON T1.Singer_ID = T2.Singer_ID GROUP BY T1.name HAVING count(*) > 1 ORDER BY count(*) DESC",
    "SELECT round(avg(age), 2), max(age) - min(age) FROM singer",
    "SELECT coalesce(name, country, 'x'), date(), strftime('%Y', 'now') FROM singer",
    "SELECT name FROM singer WHERE age IN (SELECT age FROM singer ORDER BY age LIMIT 1)",
    "SELECT name, age FROM singer UNION SELECT name, capacity FROM stadium",
    "SELECT * FROM singer EXCEPT SELECT * FROM singer WHERE age > 1",
    "SELECT count(*) FROM (SELECT name FROM singer INTERSECT SELECT name FROM stadium)",
    "SELECT name FROM singer WHERE EXISTS (SELECT * FROM concert) LIMIT 2 OFFSET 1",
    "SELECT name FROM singer\n  WHERE age > 1\n\n  ORDER BY name",
    "SELECT 1;", "SELECT CAST(age AS varchar(10)) FROM singer ORDER BY name COLLATE nocase",
    "SELECT 0xffffffffffffffff, 0x0000ffffffffffffffff",  # 16 digits past the leading zeros
    "SELECT CAST(age AS DECIMAL(10,2)), CAST(age AS bigint), CAST(name AS datetime) FROM singer",
    "SELECT CAST(age AS numeric( 10 , 2 )) FROM singer",
]


@pytest.mark.parametrize("query", ACCEPTED)
def test_valid_queries_are_accepted(concert, query):
    assert concert.matches(query)
    con = sqlite3.connect(SPIDER_DIR / "concert_singer.sqlite")
    try:
        assert sqlite_verdict(con, query) is None
    finally:
        con.close()


def test_whitespace_is_bounded(concert):
    ok = "SELECT name FROM singer"
    assert concert.matches(ok.replace(" ", " " * MAX_BLANKS))
    assert not concert.matches(ok.replace(" ", " " * (MAX_BLANKS + 1), 1))
    assert concert.matches(ok.replace(" ", "\n" * MAX_LINE_BREAKS))
    assert not concert.matches(ok.replace(" ", "\n" * (MAX_LINE_BREAKS + 1), 1))
    assert not concert.matches(ok + " " * (MAX_BLANKS + 1))
    assert not concert.matches("SELECT name FROM singer GROUP" + "\n" * 3 + "BY name")


def test_strings_and_result_aliases_are_bounded(concert):
    n = MAX_STRING_CHARS
    for q in ("'", '"'):
        # a doubled quote is one character of the string
        ok = q + "x" * (n - 2) + q * 2 + "y" + q
        assert concert.matches(f"SELECT {ok}")
        assert not concert.matches(f"SELECT {ok[:-1]}z{q}")
    assert concert.matches("SELECT x'" + "0a" * (n // 2) + "'")
    assert not concert.matches("SELECT x'" + "0a" * (n // 2 + 1) + "'")
    for alias in ("n" * MAX_ALIAS_CHARS, "over" + "_" * (MAX_ALIAS_CHARS - 4)):
        assert concert.matches(f"SELECT name AS {alias} FROM singer")
        assert not concert.matches(f"SELECT name AS {alias}x FROM singer")


def _units(content: str) -> list[str] | None:
    """The characters a double-quoted string's content stands for, or None
    when it is no such content (a lone quote, NUL)."""
    out, i = [], 0
    while i < len(content):
        if content[i] == '"':
            if content[i:i + 2] != '""':
                return None
            i += 1
        elif content[i] == "\x00":
            return None
        out.append(content[i])
        i += 1
    return out


def test_bounded_regexes_are_exact_and_their_first_match_is_the_longest():
    """Brute force over short strings: a double-quoted string of at most 6
    characters spelling none of the excluded names in any letter case, and a
    plain identifier of at most 7 characters that is no reserved word; Python's
    first match of an accepted string is all of it (Lark's dynamic lexer)."""
    excluded = ["id", "Name", "n", 'a"b', "age2"]
    dq = re.compile(_dq_string_regex(excluded, 6))
    banned = {_fold(w) for w in excluded}
    rng = random.Random(3)
    for _ in range(20_000):
        content = "".join(rng.choice('nNaAmMeEid2"b x\x00') for _ in range(rng.randint(0, 9)))
        if rng.random() < 0.2:
            content = rng.choice(excluded).replace('"', '""') + rng.choice(["", "e", '""'])
        s = f'"{content}"'
        units = _units(content)
        want = units is not None and len(units) <= 6 and _fold("".join(units)) not in banned
        assert (dq.fullmatch(s) is not None) == want, s
        assert not want or dq.match(s).end() == len(s), s
    reserved = RESERVED_WORDS + ("OVER",)
    ident = re.compile(_bounded_identifier_regex(reserved, 7))
    words = {w.lower() for w in reserved}
    for _ in range(20_000):
        if rng.random() < 0.5:
            s = rng.choice(sorted(words))[:rng.randint(1, 9)] + rng.choice(["", "e", "_1", "s"])
        else:
            s = "".join(rng.choice("selctfromwhe_1R") for _ in range(rng.randint(0, 9)))
        s = s.upper() if rng.random() < 0.5 else s
        want = (re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", s) is not None
                and s.lower() not in words and len(s) <= 7)
        assert (ident.fullmatch(s) is not None) == want, s
        assert not want or ident.match(s).end() == len(s), s


def test_functions_are_sqlite_builtins_with_their_arities(concert):
    con = sqlite3.connect(":memory:")
    ranges: dict[str, list] = {}
    for name, arity in list(SCALAR_FUNCTIONS.items()) + list(AGGREGATE_FUNCTIONS.items()):
        ranges.setdefault(name, []).append(arity)
    for name, arity in sorted(ranges.items()):
        top = max(lo + 3 if hi is None else hi for lo, hi in arity)
        for n in range(top + 2):
            valid = any(lo <= n and (hi is None or n <= hi) for lo, hi in arity)
            call = f"SELECT {name}({', '.join(['1'] * n)})"
            if name == "count" and n == 0:
                continue  # SQLite takes count() for count(*); the grammar wants the *
            assert (sqlite_verdict(con, call) is None) == valid, call
            assert concert.matches(call) == valid, call
    assert concert.matches("SELECT count(*)") and not concert.matches("SELECT nosuch(1)")
    con.close()


def test_joins_follow_the_budget():
    tables = {f"t{i}": ["a", f"c{i}"] for i in range(6)}
    # one table with any of T1 ... T4, then two with T1, T2
    small = compile_grammar(sql_grammar(tables, max_bindings=4 * 6 + 36), byte_vocabulary())
    two = "SELECT T2.c1 FROM t0 AS T1 JOIN t1 AS T2 ON T1.a = T2.a"
    three = two + " JOIN t2 AS T3 ON T2.a = T3.a"
    assert small.matches(two) and not small.matches(three)
    assert small.matches("SELECT c1 FROM t1")
    with pytest.raises(SqlSchemaError, match="max_bindings"):
        sql_grammar(tables, max_bindings=-1)


def test_cte_names():
    tables = {"t": ["a"]}
    g = compile_grammar(sql_grammar(tables, cte_names={"recent": ["x", "y"]}), byte_vocabulary())
    assert g.matches("WITH recent(x, y) AS (SELECT a, a FROM t) SELECT x, T1.y FROM recent AS T1")
    assert g.matches("SELECT a FROM t")                       # no WITH needed
    assert not g.matches("SELECT x FROM recent")               # not defined
    assert not g.matches("WITH recent(x, y) AS (SELECT a FROM t) SELECT x FROM recent")
    assert not g.matches("WITH recent(x, y) AS (SELECT x, y FROM recent) SELECT x FROM recent")
    names = compile_grammar(sql_grammar(tables, cte_names=["recent"]), byte_vocabulary())
    assert names.matches("WITH recent AS (SELECT a FROM t) SELECT * FROM recent")
    assert names.matches("WITH recent AS (SELECT a FROM t) SELECT count(*) FROM recent")
    assert not names.matches("WITH recent AS (SELECT a FROM t) SELECT a FROM recent")
    con = memory_database(tables)
    for q in ("WITH recent(x, y) AS (SELECT a, a FROM t) SELECT x, T1.y FROM recent AS T1",
              "WITH recent AS (SELECT a FROM t) SELECT count(*) FROM recent"):
        assert sqlite_verdict(con, q) is None, q
    con.close()
    for bad, message in ((["ok", 3], "CTE names"), ({"t": ["x"]}, "already a table"),
                         (["x", "X"], "already another CTE's"), (["x" * 300], "longer than"),
                         ({"c": []}, "column names"), ({"c": ["x", "X"]}, "twice"), ("abc", "names")):
        with pytest.raises(SqlSchemaError, match=message):
            sql_grammar(tables, cte_names=bad)


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
        # no SQLite database has these (it folds ASCII case)
        ({"T": ["a"], "t": ["b"]}, "table 'T' is named twice"),
        ({"t": ["a", "A"]}, "column 'a' twice"),
        ({"t": ["a", "a"]}, "column 'a' twice"),
        # a RecursionError, and generated grammar text that did not compile
        ({"t": ["x" * 496]}, "longer than 255"),
        ({"t": ["a\x00b"]}, "NUL"),
        ({"t": ["a\ud800"]}, "lone surrogate"),
        ({"t\x00": ["a"]}, "NUL"),
    ]
    for schema, message in cases:
        with pytest.raises(SqlSchemaError, match=message):
            sql_grammar(schema)
    assert issubclass(SqlSchemaError, ConstraintError)
    assert not (tmp_path / "missing.sqlite").exists()  # reading never creates a file


def test_names_with_control_characters_are_their_own():
    """``re.escape`` left a carriage return itself after a backslash, which the
    grammar text read back as a line feed: ``[a<LF>b]`` was accepted for the
    column ``a<CR>b`` (SQLite: no such column) and ``[a<CR>b]`` refused; a
    line feed in a name made grammar text that did not compile."""
    vocab = byte_vocabulary()
    for name, other in (("a\rb", "a\nb"), ("a\nb", "a\rb"), ("a\tb\x7f", "a b\x7f")):
        tables = {"t": [name]}
        g = compile_grammar(sql_grammar(tables), vocab)
        con = memory_database(tables)
        for quoted in (f"[{name}]", f"`{name}`", f'"{name}"'):
            assert g.matches(f"SELECT {quoted} FROM t"), repr(name)
            assert sqlite_verdict(con, f"SELECT {quoted} FROM t") is None
        assert not g.matches(f"SELECT [{other}] FROM t"), repr(name)
        assert sqlite_verdict(con, f"SELECT [{other}] FROM t") is not None
        con.close()


def test_check_script_takes_zero_counts_and_refuses_negative_ones(capsys):
    """``check_sql_grammar.py --samples 0`` (and the other counts at 0) runs
    nothing instead of crashing on the mean of no lengths; a negative count is an
    argparse error naming the option."""
    import os
    import sys

    bench = os.path.join(os.path.dirname(__file__), "benchmarks")
    sys.path.insert(0, bench)
    try:
        import check_sql_grammar as check
    finally:
        sys.path.remove(bench)
    args = check.parse_args(["--samples", "0", "--mutants", "0", "--walks", "0",
                             "--derivations", "0"])
    assert (args.samples, args.mutants, args.walks, args.derivations) == (0, 0, 0, 0)
    assert check.sampled(0, args.depth, args.seed) == {
        "samples": 0, "sqlite_syntax_errors": 0, "errors": [], "chars_mean": 0}
    assert check.sampled(2, args.depth, args.seed)["samples"] == 2
    with pytest.raises(SystemExit):
        check.parse_args(["--samples", "-1"])
    assert "--samples: must be >= 0, got -1" in capsys.readouterr().err
