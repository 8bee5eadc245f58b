"""Helpers for testing the SQL grammars against SQLite: the vendored Spider data,
in-memory databases with Spider's schemas, SQLite's verdict on a query, a random
derivation sampler over a Lark grammar, random one-character mutations, and
random walks over a compiled grammar's tokens.

Used by ``tests/test_sql_grammar.py`` and ``tests/benchmarks/check_sql_grammar.py``.
"""

from __future__ import annotations

import functools
import json
import random
import re
import sqlite3
from pathlib import Path

import lark
import numpy as np

from constrain import Vocabulary

SPIDER_DIR = Path(__file__).resolve().parent / "data" / "spider"
SQL_LARK = Path(__file__).resolve().parent.parent / "grammars" / "sql.lark"

# Rules (by alias) that are not SQLite: sampled queries avoid them, and a mutant
# that uses one is not held against SQLite's verdict.
ANSI_ALIASES = frozenset({"ansi_typed_literal", "ansi_interval", "ansi_extract"})


def load_gold() -> list[dict]:
    """The 1,034 Spider dev examples ``{id, db_id, question, query}``."""
    with open(SPIDER_DIR / "dev_gold.jsonl", encoding="utf-8") as f:
        return [json.loads(line) for line in f]


@functools.cache
def load_schemas() -> dict[str, dict[str, list[str]]]:
    """``{db_id: {table: [columns]}}`` for the 20 databases of Spider dev."""
    with open(SPIDER_DIR / "dev_schemas.json", encoding="utf-8") as f:
        return json.load(f)


def lark_parser(text: str | None = None, **options) -> lark.Lark:
    """A Lark parser for ``text`` (default: ``grammars/sql.lark``) in the
    configuration whose language Trellis compiles."""
    if text is None:
        text = SQL_LARK.read_text(encoding="utf-8")
    return lark.Lark(text, parser="earley", lexer="dynamic_complete", **options)


def accepts(parser: lark.Lark, text: str) -> lark.Tree | None:
    """The parse tree of ``text``, or ``None`` when the grammar rejects it."""
    try:
        return parser.parse(text)
    except lark.exceptions.LarkError:
        return None


def uses_ansi(tree: lark.Tree) -> bool:
    """Whether a parse tree uses one of the non-SQLite ANSI forms."""
    return any(t.data in ANSI_ALIASES for t in tree.iter_subtrees())


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def memory_database(schema: dict[str, list[str]]) -> sqlite3.Connection:
    """An empty in-memory database with the tables of ``schema`` (untyped
    columns), so that SQLite can resolve names when it prepares a query."""
    con = sqlite3.connect(":memory:")
    for table, columns in schema.items():
        con.execute(f"CREATE TABLE {_quote(table)} ({', '.join(map(_quote, columns))})")
    return con


_SYNTAX_MARKERS = ("syntax error", "unrecognized token", "incomplete input")


def sqlite_verdict(con: sqlite3.Connection, query: str) -> str | None:
    """SQLite's error preparing ``query`` (``EXPLAIN``, nothing runs), or ``None``.

    A syntax error is one whose message says so (``near "x": syntax error``,
    ``unrecognized token``, ``incomplete input``); anything else (no such
    table, column or function, wrong number of arguments...) is semantic.
    """
    factory = con.text_factory
    # EXPLAIN's rows carry the query's constants, which need not be UTF-8 text
    con.text_factory = bytes
    try:
        con.execute("EXPLAIN " + query).fetchall()
    except (sqlite3.Error, sqlite3.Warning) as exc:
        return str(exc)
    finally:
        con.text_factory = factory
    return None


def is_syntax_error(message: str | None) -> bool:
    """Whether a :func:`sqlite_verdict` message is a syntax error."""
    return message is not None and any(m in message for m in _SYNTAX_MARKERS)


# -- derivation sampler -----------------------------------------------------------

# Example strings for every regex terminal of sql.lark. Names include SQLite
# keywords that are *not* reserved (key, end, desc...): the sampler then checks
# that leaving them out of RESERVED_WORDS is right in every place a name goes.
GENERIC_EXAMPLES: dict[str, list[str]] = {
    "_WS": [" ", " ", " ", "  ", "\n", " \t"],
    "COMPOUND_OP": ["UNION", "union all", "INTERSECT", "EXCEPT", "UNION\n  ALL"],
    "SET_QUANTIFIER": ["DISTINCT", "all"],
    "JOIN_OP": ["JOIN", "join", "LEFT JOIN", "left outer join", "INNER JOIN", "CROSS JOIN",
                "NATURAL JOIN", "natural left outer join", "RIGHT JOIN", "FULL OUTER JOIN"],
    "GROUP_BY": ["GROUP BY", "group  by"],
    "ORDER_BY": ["ORDER BY", "order\nby"],
    "PARTITION_BY": ["PARTITION BY"],
    "SORT_ORDER": ["ASC", "desc"],
    "NULLS_ORDER": ["NULLS FIRST", "nulls last"],
    "IS_OP": ["IS", "is not", "IS DISTINCT FROM", "IS NOT DISTINCT FROM"],
    "LIKE_OP": ["LIKE", "NOT LIKE", "glob", "NOT GLOB", "REGEXP", "MATCH", "not match"],
    "BETWEEN_OP": ["BETWEEN", "NOT BETWEEN"],
    "IN_OP": ["IN", "not in"],
    "NULL_TEST": ["ISNULL", "notnull", "NOT NULL"],
    "BOOL_OP": ["AND", "or"],
    "BINARY_OP": ["||", "->", "->>", "*", "/", "%", "+", "&", "|", "<<", ">>",
                  "<", "<=", ">", ">=", "=", "==", "!=", "<>"],
    "TIGHT_OP": ["||", "->", "->>", "*", "/", "%", "+", "&", "|", "<<", ">>",
                 "<", "<=", ">", ">="],
    "UNARY_OP": ["+", "~"],
    "KEYWORD_LITERAL": ["NULL", "true", "FALSE", "CURRENT_DATE", "current_time",
                        "CURRENT_TIMESTAMP"],
    "ANSI_DATETIME": ["DATE", "timestamp"],
    "INTERVAL_UNIT": ["YEAR", "day"],
    "NUMBER": ["0", "1", "42", "3.14", ".5", "1.", "1e10", "2.5E-3", "0x1F", "0XfF"],
    "SIGNED_NUMBER": ["10", "-1", "+2.5", "3"],
    "STRING": ["''", "'a'", "'it''s'", "'%x%'", "'2020-01-01'", "'--x'"],
    "BLOB": ["x''", "X'0aFF'"],
    "IDENT": ["a", "b", "t", "T1", "_x", "col9", '"quoted name"', '"a""b"', "[br acket]",
              "`tick`", "key", "end", "desc", "asc", "offset", "replace", "over", "filter",
              "window", "first", "last", "nulls", "date", "interval", "extract", "do", "if",
              "no", "row", "rows", "range", "current", "partition", "action", "temp",
              "selected", "fromage", "order_id", "nullable", "isnt"],
    "DQ_STRING": ['""', '"text"', '"it""s"'],
    "FRAME_UNIT": ["ROWS", "range", "GROUPS"],
    "FRAME_START": ["UNBOUNDED PRECEDING", "current row"],
    "FRAME_END": ["UNBOUNDED FOLLOWING", "CURRENT  ROW"],
    "FRAME_DIRECTION": ["PRECEDING", "following"],
    "FRAME_EXCLUDE": ["EXCLUDE NO OTHERS", "exclude current row", "EXCLUDE GROUP",
                      "EXCLUDE TIES"],
}
GENERIC_EXAMPLES["ALIAS_NOT_OVER"] = [n for n in GENERIC_EXAMPLES["IDENT"] if n != "over"]


def terminal_examples(parser: lark.Lark, extra: dict[str, list[str]] | None = None
                      ) -> dict[str, list[str]]:
    """Examples for every terminal of ``parser``: ``GENERIC_EXAMPLES`` (and
    ``extra``) for regex terminals, the literal for string terminals. Each
    example is checked against its terminal's pattern.

    Raises:
        KeyError: a regex terminal without examples.
        ValueError: an example its terminal does not match.
    """
    table = dict(GENERIC_EXAMPLES)
    table.update(extra or {})
    out = {}
    for term in parser.terminals:
        pattern = term.pattern
        if isinstance(pattern, lark.lexer.PatternStr):
            word = pattern.value
            if "i" in pattern.flags and word.isalpha():
                out[term.name] = [word.upper(), word.lower(), word.capitalize()]
            else:
                out[term.name] = [word]
            continue
        if term.name not in table:
            raise KeyError(f"no example strings for terminal {term.name}")
        regex = re.compile(pattern.to_regexp())
        for example in table[term.name]:
            if not regex.fullmatch(example):
                raise ValueError(f"{example!r} does not match terminal {term.name}")
        out[term.name] = table[term.name]
    return out


class DerivationSampler:
    """Random sentences of a Lark grammar: from the start symbol, expand each
    nonterminal by a uniformly chosen rule while the depth is below
    ``max_depth``, then by a rule of least height; every terminal becomes one of
    its example strings. Rules whose alias is in ``skip_aliases`` are never used.
    """

    def __init__(self, parser: lark.Lark, examples: dict[str, list[str]], *,
                 max_depth: int = 12, skip_aliases=ANSI_ALIASES, start: str = "start"):
        self.examples = examples
        self.max_depth = max_depth
        self.start = start
        self.rules: dict[str, list[tuple]] = {}
        for rule in parser.rules:
            if rule.alias in skip_aliases:
                continue
            expansion = tuple((s.name, s.is_term) for s in rule.expansion)
            self.rules.setdefault(rule.origin.name, []).append(expansion)
        for name in self.rules:
            self.rules[name].sort()  # deterministic whatever Lark's rule order
        self.height = self._heights()

    def _heights(self) -> dict[str, int]:
        """Least derivation height of each nonterminal (terminals have 0)."""
        height: dict[str, int] = {}
        changed = True
        while changed:
            changed = False
            for name, expansions in self.rules.items():
                for exp in expansions:
                    hs = [0 if term else height.get(sym) for sym, term in exp]
                    if None in hs:
                        continue
                    h = 1 + max(hs, default=0)
                    if h < height.get(name, 1 << 30):
                        height[name] = h
                        changed = True
        return height

    def _expansion_height(self, exp) -> int:
        return 1 + max((0 if term else self.height[sym] for sym, term in exp), default=0)

    def sample(self, rng: random.Random) -> str:
        """One random sentence."""
        out: list[str] = []
        stack = [(self.start, False, 0)]
        while stack:
            sym, term, depth = stack.pop()
            if term:
                out.append(rng.choice(self.examples[sym]))
                continue
            expansions = self.rules[sym]
            if depth >= self.max_depth:
                least = min(self._expansion_height(e) for e in expansions)
                expansions = [e for e in expansions if self._expansion_height(e) == least]
            exp = rng.choice(expansions)
            stack.extend((s, t, depth + 1) for s, t in reversed(exp))
        return "".join(out)


# -- mutations --------------------------------------------------------------------

MUTATION_CHARS = "aeituxT1. '\"(),*=<>-+;|_0\n"


def mutate(text: str, rng: random.Random) -> str:
    """``text`` with one random edit: a character deleted, inserted (from
    ``MUTATION_CHARS``) or replaced, or a run of blanks collapsed or removed."""
    kind = rng.randrange(4)
    i = rng.randrange(len(text))
    if kind == 0:
        return text[:i] + text[i + 1:]
    if kind == 1:
        return text[:i] + rng.choice(MUTATION_CHARS) + text[i:]
    if kind == 2:
        return text[:i] + rng.choice(MUTATION_CHARS) + text[i + 1:]
    blanks = [m.span() for m in re.finditer(r"\s+", text)]
    if not blanks:
        return text[:i] + text[i + 1:]
    a, b = rng.choice(blanks)
    return text[:a] + rng.choice(["", " "]) + text[b:]


# -- random walks -------------------------------------------------------------------

# Words of SQL a walk vocabulary has as tokens of their own (with and without a
# leading blank, as BPE vocabularies have them), besides every byte.
WALK_WORDS = """SELECT FROM WHERE JOIN ON AS AND OR NOT IN IS NULL LIKE BETWEEN GROUP BY ORDER
HAVING LIMIT OFFSET DISTINCT UNION INTERSECT EXCEPT ALL ASC DESC EXISTS CASE WHEN THEN ELSE
END CAST LEFT INNER CROSS count avg sum min max total group_concat abs length lower upper round
substr coalesce ifnull date strftime T1 T2 T3 T4 <= >= != <> || 'a' 10""".split()


def byte_vocabulary() -> Vocabulary:
    """The 256 bytes and an EOS token (id 256)."""
    return Vocabulary.from_tokens([bytes([i]) for i in range(256)] + [b"</s>"],
                                  eos_token_ids=[256], special_token_ids=[256])


def walk_vocabulary(schema: dict[str, list[str]]) -> Vocabulary:
    """The 256 bytes, :data:`WALK_WORDS` and the schema's table and column names
    as tokens (each also with a leading blank), and EOS (the last id)."""
    words = set(WALK_WORDS) | set(schema) | {c for cols in schema.values() for c in cols}
    words = sorted(w for w in words if len(w.encode("utf-8")) > 1)
    tokens = [bytes([i]) for i in range(256)] + [w.encode("utf-8") for w in words]
    tokens += [b" " + w.encode("utf-8") for w in words] + [b"</s>"]
    return Vocabulary.from_tokens(tokens, eos_token_ids=[len(tokens) - 1],
                                  special_token_ids=[len(tokens) - 1])


@functools.cache
def _token_kinds(vocab: Vocabulary) -> tuple:
    """Per token id of ``vocab``: whether it is EOS, longer than one byte, and
    longer than one byte starting with a blank."""
    eos = np.zeros(len(vocab), dtype=bool)
    eos[list(vocab.eos_token_ids)] = True
    long = np.zeros(len(vocab), dtype=bool)
    spaced = np.zeros(len(vocab), dtype=bool)
    for i in range(len(vocab)):
        b = vocab.token_bytes(i)
        long[i] = len(b) > 1 and not eos[i]
        spaced[i] = long[i] and b[:1] == b" "
    return eos, long, spaced


def random_walk(g, vocab: Vocabulary, rng: random.Random, *, max_tokens: int = 150,
                p_stop: float = 0.35, p_word: float = 0.85) -> str | None:
    """One random walk over the tokens ``g`` allows: where EOS is allowed it
    stops with probability ``p_stop``; otherwise it draws uniformly from the
    allowed tokens of more than one byte that start with a blank (with
    probability 0.6), of more than one byte (up to ``p_word``), or all of them.
    Returns the text, or ``None`` if ``max_tokens`` pass first."""
    eos, long, spaced = _token_kinds(vocab)
    state, out = g.initial_state(), bytearray()
    for _ in range(max_tokens):
        ids = np.asarray(g.allowed_token_ids(state))
        ends = eos[ids]
        if ends.any() and rng.random() < p_stop:
            return out.decode("utf-8")
        ids = ids[~ends]
        if not len(ids):
            return out.decode("utf-8")
        r = rng.random()
        for kind, limit in ((spaced, 0.6), (long, p_word)):
            pool = ids[kind[ids]]
            if len(pool) and r < limit:
                break
        else:
            pool = ids
        token = int(pool[rng.randrange(len(pool))])
        out += vocab.token_bytes(token)
        state = g.advance(state, token)
    return None
