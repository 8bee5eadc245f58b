"""SQL (SQLite ``SELECT``) grammars, generic or specialised to a real database.

``grammars/sql.lark`` is the generic grammar: any table or column name that is a
syntactically valid identifier, so what it accepts is SQLite *syntax*.
:func:`sql_grammar` builds a grammar for one database whose every sentence SQLite
also *prepares* there (``EXPLAIN`` succeeds): names resolve, functions exist with
the right number of arguments, aggregates sit where SQLite allows them, subqueries
return the number of columns their place needs. Both are scannerless (see
``docs/sql.md``): whitespace is a terminal of its own, mandatory between two
word-like tokens and optional around punctuation, and a run of it is bounded
(:data:`MAX_BLANKS` blanks per line, :data:`MAX_LINE_BREAKS` line breaks); in
:func:`sql_grammar` so are string literals (:data:`MAX_STRING_CHARS`) and
result aliases (:data:`MAX_ALIAS_CHARS`).

Scoping in a context-free grammar. Whether ``T1.name`` resolves depends on the
``FROM`` clause that *follows* the select list, and the clauses after ``FROM``
depend on what it declared, so the grammar spells out a fixed set of *scopes*:

* no ``FROM`` (no column can be named, no ``*``);
* ``FROM t`` (one table, no alias): its columns, bare or as ``t.c``;
* ``FROM t1 AS T1 JOIN t2 AS T2 ...``: one to four tables whose aliases are
  ``T1``, ``T2``... in order (or starting later, ``T3``, ``T4``); ``Tn.c`` names a
  column of the ``n``-th table; a bare column is one no other table of the
  ``FROM`` clause has; an ``ON`` condition names tables declared before it;
* ``FROM (subquery)``: no column names, ``*`` and expressions without columns.

Each aliased ``FROM`` shape (a table sequence and where its aliases start) is a
*binding*; with ``N`` tables there are ``N**k`` of ``k`` tables, added by
increasing ``k`` while they fit ``max_bindings``. The select list is read first:
each item names the columns of one *entry* (``T2`` as table ``t``, ``FROM t``
without alias, a bare column of ``t``...), and the list carries the set of entries
it named (at most two) to the ``FROM`` clause, which spells the declarations
those entries fix, then goes on one table at a time and ends in the rules of the
binding it declared (``WHERE``, ``GROUP BY``, ``HAVING``, ``ORDER BY``). So the
parser never holds every binding at once. Expressions are compiled once per
(alias, table) and shared: within one parenthesised expression, function
argument or ``CASE`` all column references name the same table; predicates over
different tables are combined at the top level of ``WHERE``, ``ON`` and
``HAVING`` with ``AND``/``OR`` and compared with ``= <> < ...``. Subqueries are
scopes of their own (no outer references).

What else is checked: functions come from :data:`SCALAR_FUNCTIONS` and
:data:`AGGREGATE_FUNCTIONS` (built into SQLite 3.40, with their arities);
aggregates are refused in ``WHERE``, ``ON`` and ``GROUP BY``, inside other
aggregates, and in ``ORDER BY`` without ``GROUP BY``; ``GROUP BY``/``ORDER BY``
items never read as an integer (SQLite takes one for a column position, and
folds ``x IN ()`` and ``x AND 0`` to integers); scalar and ``IN`` subqueries
select one column, the members of a compound select as many columns as each
other (up to :data:`MAX_COMPOUND_COLUMNS`, or ``SELECT *`` of shapes with the
same number of columns); a double-quoted string never spells a column name
(SQLite would read it as that column); keywords are ASCII (Python's ``i`` flag
would also fold ``ſ``, ``ı``, ``İ``); strings hold no NUL; ``LIMIT`` takes
integers; collations are SQLite's three. What is left out is listed in
``docs/sql.md``.
"""

from __future__ import annotations

import itertools
import os
import re
import sqlite3
from collections.abc import Iterable, Mapping

from constrain.errors import ConstraintError

__all__ = [
    "AGGREGATE_FUNCTIONS",
    "MAX_BLANKS",
    "MAX_ALIAS_CHARS",
    "MAX_COMPOUND_COLUMNS",
    "MAX_LINE_BREAKS",
    "MAX_NAME_CHARS",
    "MAX_STRING_CHARS",
    "RESERVED_WORDS",
    "SCALAR_FUNCTIONS",
    "SqlSchemaError",
    "identifier_regex",
    "load_schema",
    "sql_grammar",
]


class SqlSchemaError(ConstraintError):
    """A database schema given to :func:`sql_grammar` could not be read or is
    unusable (missing file, not a SQLite database, no tables, a table without
    columns)."""


# Words SQLite 3.40 rejects as an unquoted name in at least one place this grammar
# puts a name (column, alias with or without AS, table alias, qualifier, function,
# CTE name). Found by preparing `SELECT k FROM t`, `SELECT a k FROM t`,
# `SELECT * FROM t k WHERE 1`... for each of SQLite's 147 keywords. TRUE, FALSE and
# the CURRENT_* words are not reserved by SQLite but are literals here, and keeping
# them out of names keeps `x IS TRUE` unambiguous.
RESERVED_WORDS = tuple(sorted("""
    ADD ALL ALTER AND AS AUTOINCREMENT BETWEEN CASE CAST CHECK COLLATE COMMIT
    CONSTRAINT CREATE CROSS CURRENT_DATE CURRENT_TIME CURRENT_TIMESTAMP DEFAULT
    DEFERRABLE DELETE DISTINCT DROP ELSE ESCAPE EXCEPT EXISTS FALSE FOREIGN FROM
    FULL GLOB GROUP HAVING IN INDEX INDEXED INNER INSERT INTERSECT INTO IS ISNULL
    JOIN LEFT LIKE LIMIT MATCH NATURAL NOT NOTHING NOTNULL NULL ON OR ORDER OUTER
    PRIMARY RAISE RECURSIVE REFERENCES REGEXP RETURNING RIGHT SELECT SET TABLE THEN
    TO TRANSACTION TRUE UNION UNIQUE UPDATE USING VALUES WHEN WHERE
""".split()))

_WORD_CHARS = "0-9A-Z_a-z"
_PLAIN_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _escape(ch: str) -> str:
    """One character as regex text that survives the Lark grammar text it is
    written into: ``re.escape`` leaves a control character itself (a carriage
    return after a backslash was read back as a line feed, a line feed refused
    outside the x flag), so those are ``\\xNN``."""
    return f"\\x{ord(ch):02x}" if ord(ch) < 0x20 or ch == "\x7f" else re.escape(ch)


def _char_class(chars: Iterable[str]) -> str:
    """A regex character class for ``chars`` written with ranges, e.g. ``[0-9A-Z]``."""
    codes = sorted({ord(c) for c in chars})
    parts, i = [], 0
    while i < len(codes):
        j = i
        while j + 1 < len(codes) and codes[j + 1] == codes[j] + 1:
            j += 1
        lo, hi = chr(codes[i]), chr(codes[j])
        if j - i >= 2:
            parts.append(f"{_escape(lo)}-{_escape(hi)}")
        else:
            parts.extend(_escape(chr(c)) for c in codes[i:j + 1])
        i = j + 1
    return "[" + "".join(parts) + "]"


_IDENT_FIRST = set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz_")
_IDENT_REST = _IDENT_FIRST | set("0123456789")


def identifier_regex(reserved: Iterable[str] = RESERVED_WORDS) -> str:
    """A regex (no flags, no lookaround) for the plain identifiers
    ``[A-Za-z_][A-Za-z0-9_]*`` that are not one of ``reserved``, ignoring case.

    Built from a trie of the reserved words: at each trie node a name either ends
    (unless the node spells a whole reserved word), follows a trie edge, or leaves
    the trie with any other character and then takes any word characters. Every
    path is deterministic, so Python's leftmost-first matching returns the longest
    identifier, which is what Lark's dynamic lexer relies on.
    """
    trie: dict = {}
    for word in reserved:
        node = trie
        for ch in word.lower():
            node = node.setdefault(ch, {})
        node[""] = {}

    def walk(node: dict, allowed: set[str]) -> str:
        children = sorted(k for k in node if k)
        alts = []
        for ch in children:
            cls = _char_class({ch, ch.upper()})
            alts.append(cls + walk(node[ch], _IDENT_REST))
        used = {c for ch in children for c in (ch, ch.upper())}
        rest = allowed - used
        if rest:
            alts.append(_char_class(rest) + f"[{_WORD_CHARS}]*")
        if not children:
            # a reserved word with no longer reserved word above it
            return f"[{_WORD_CHARS}]+"
        body = "(?:" + "|".join(alts) + ")"
        # a node that spells a reserved word must be left by one more character
        return body if "" in node else body + "?"

    return walk(trie, _IDENT_FIRST).removesuffix("?")


def _bounded_trie_regex(trie: dict, edge, leave, unit: str, max_units: int,
                        empty: bool) -> str:
    """A regex for the strings of at most ``max_units`` units that spell no word
    of ``trie`` (nested dicts by unit, ``""`` marking a word's end; ``empty``:
    whether the empty string counts). ``edge(key)`` is the regex of the unit a
    trie edge reads; ``leave(node, depth)`` the regex of a unit that leaves the
    trie at ``node`` (``None``: none does); ``unit`` any unit.

    A string either leaves the trie at some depth ``d`` and then takes at most
    ``max_units - d - 1`` units, or ends inside it on a node that is no word.
    The strings leaving at each depth are one alternative each, so every tail
    is written once per depth, not once per trie node. At most one alternative
    reads a given string past its trie part, and tails are greedy: Python's
    leftmost-first match is the longest string, as in :func:`identifier_regex`.
    """
    def depth_of(node: dict) -> int:
        return 1 + max((depth_of(node[k]) for k in node if k), default=-1)

    def leaving(node: dict, here: int, d: int) -> str | None:
        if d == 0:
            return leave(node, here)
        alts = [edge(k) + sub for k in sorted(k for k in node if k)
                if (sub := leaving(node[k], here + 1, d - 1)) is not None]
        return None if not alts else alts[0] if len(alts) == 1 else "(?:" + "|".join(alts) + ")"

    def inside(node: dict, top: bool) -> str | None:
        alts = [edge(k) + sub for k in sorted(k for k in node if k)
                if (sub := inside(node[k], False)) is not None]
        stop = "" not in node and (empty or not top)
        if not alts:
            return "" if stop else None
        body = "(?:" + "|".join(alts) + ")"
        return body + "?" if stop else body

    alts = []
    for d in range(min(depth_of(trie) + 1, max_units)):
        head = leaving(trie, 0, d)
        if head is not None:
            rest = max_units - d - 1
            alts.append(head + (f"(?:{unit}){{0,{rest}}}" if rest else ""))
    tail = inside(trie, True)
    if tail is not None:
        alts.append(tail)
    return "(?:" + "|".join(alts) + ")"


def _bounded_identifier_regex(reserved: Iterable[str], max_length: int) -> str:
    """:func:`identifier_regex` for names of at most ``max_length`` characters."""
    trie: dict = {}
    for word in reserved:
        if len(word) <= max_length:
            node = trie
            for ch in word.lower():
                node = node.setdefault(ch, {})
            node[""] = {}

    def leave(node: dict, depth: int) -> str | None:
        used = {c for ch in node if ch for c in (ch, ch.upper())}
        rest = (_IDENT_REST if depth else _IDENT_FIRST) - used
        return _char_class(rest) if rest else None

    return _bounded_trie_regex(trie, lambda ch: _char_class({ch, ch.upper()}), leave,
                               f"[{_WORD_CHARS}]", max_length, empty=False)


def _ci(text: str) -> str:
    """``text`` as a regex matching it with ASCII letters in either case, the way
    SQLite compares names."""
    out = []
    for ch in text:
        if ch.isascii() and ch.isalpha():
            out.append(f"[{ch.upper()}{ch.lower()}]")
        else:
            out.append(_escape(ch))
    return "".join(out)


def _words_regex(words: Iterable[str]) -> str:
    """A regex matching exactly ``words``, ignoring ASCII case, built as a trie.

    Leftmost-first matching tries every longer word before a shorter one, so the
    first match at a position is the longest name there; Lark's dynamic lexer only
    tries prefixes of that first match, and a plain alternation ``a|ab`` would hide
    ``ab`` from it.
    """
    trie: dict = {}
    for word in words:
        node = trie
        for ch in word:
            key = ch.lower() if ch.isascii() else ch
            node = node.setdefault(key, {})
        node[""] = {}

    def walk(node: dict) -> str:
        children = sorted(k for k in node if k)
        if not children:
            return ""
        alts = [_ci(ch) + walk(node[ch]) for ch in children]
        body = alts[0] if len(alts) == 1 else "(?:" + "|".join(alts) + ")"
        if "" in node:
            body = f"(?:{body})?" if len(alts) == 1 else body + "?"
        return body

    return walk(trie)


def _names_regex(names: Iterable[str]) -> str:
    """A regex for every way SQL may write one of ``names``: bare when it is a
    plain identifier and not a reserved word, and always quoted as ``"n"``, ```n```
    or ``[n]`` (with quote characters doubled), all ignoring ASCII case."""
    names = sorted(set(names))
    plain = [n for n in names
             if _PLAIN_NAME.fullmatch(n) and n.upper() not in RESERVED_WORDS]
    alts = []
    if plain:
        alts.append(_words_regex(plain))
    alts.append('"' + _words_regex(n.replace('"', '""') for n in names) + '"')
    alts.append("`" + _words_regex(n.replace("`", "``") for n in names) + "`")
    bracketed = [n for n in names if "]" not in n]
    if bracketed:
        alts.append(r"\[" + _words_regex(bracketed) + r"\]")
    return "|".join(alts)


def _lark_regex(pattern: str) -> str:
    """``pattern`` as a Lark ``/.../`` literal (slashes escaped)."""
    return "/" + pattern.replace("/", "\\/") + "/"


def load_schema(schema) -> dict[str, list[str]]:
    """The tables of ``schema`` and their columns, as ``{table: [column, ...]}``.

    ``schema`` is the path of a SQLite database file, an open
    :class:`sqlite3.Connection`, or a mapping ``{table: [columns]}``. A database
    contributes its tables and views (not SQLite's own ``sqlite_*`` tables), in
    name order, each with its columns in declaration order (``PRAGMA table_info``).

    Raises:
        SqlSchemaError: the file is missing or not a SQLite database, the mapping
            is malformed, or there is no table with at least one column.
    """
    if isinstance(schema, Mapping):
        tables = {}
        for table, columns in schema.items():
            if not isinstance(table, str) or not table:
                raise SqlSchemaError(f"table names must be non-empty strings, got {table!r}")
            if isinstance(columns, (str, bytes)) or not isinstance(columns, Iterable):
                raise SqlSchemaError(
                    f"the columns of table {table!r} must be a list of names, got {columns!r}")
            columns = list(columns)
            bad = [c for c in columns if not isinstance(c, str) or not c]
            if bad:
                raise SqlSchemaError(
                    f"column names of table {table!r} must be non-empty strings, got {bad[0]!r}")
            # SQLite compares names with ASCII case folded: no database has two
            # such tables, or two such columns in one table, so the grammar's
            # guarantee ("every sentence prepares there") would hold for none
            same = _first_fold_clash(columns)
            if same is not None:
                raise SqlSchemaError(f"table {table!r} names the column {same[0]!r} twice "
                                     f"(as {same[1]!r}; SQLite folds ASCII case)")
            tables[table] = columns
        same = _first_fold_clash(list(tables))
        if same is not None:
            raise SqlSchemaError(f"the table {same[0]!r} is named twice (as {same[1]!r}; "
                                 f"SQLite folds ASCII case)")
    elif isinstance(schema, sqlite3.Connection):
        tables = _read_database(schema, "the given connection")
    elif isinstance(schema, (str, os.PathLike)):
        path = os.fspath(schema)
        if not os.path.exists(path):
            raise SqlSchemaError(f"no SQLite database at {path!r}: the file does not exist")
        if not os.path.isfile(path):
            raise SqlSchemaError(f"no SQLite database at {path!r}: not a file")
        try:
            # read-only: reading a schema must never create or modify a database
            con = sqlite3.connect(f"file:{_uri_path(path)}?mode=ro", uri=True)
        except sqlite3.Error as exc:
            raise SqlSchemaError(f"cannot open {path!r} as a SQLite database: {exc}") from None
        try:
            tables = _read_database(con, repr(path))
        finally:
            con.close()
    else:
        raise SqlSchemaError(
            "schema must be a path to a SQLite file, a sqlite3.Connection or a "
            f"{{table: [columns]}} mapping, got {type(schema).__name__}")
    if not tables:
        raise SqlSchemaError("the schema has no tables")
    empty = [t for t, cols in tables.items() if not cols]
    if empty:
        raise SqlSchemaError(f"table {empty[0]!r} has no columns")
    for table, columns in tables.items():
        _check_name(table, "table")
        for c in columns:
            _check_name(c, f"column of table {table!r}")
    return tables


MAX_NAME_CHARS = 255
"""Longest table, column or CTE name :func:`sql_grammar` writes (longer ones are
refused: the regex builders recurse once per character)."""


def _check_name(name: str, what: str) -> None:
    """Refuse a name SQL text cannot carry or the grammar would not build."""
    if len(name) > MAX_NAME_CHARS:
        raise SqlSchemaError(f"the {what} {name[:40]!r}... is longer than {MAX_NAME_CHARS} "
                             f"characters")
    if "\x00" in name:
        raise SqlSchemaError(f"the {what} {name!r} holds a NUL, which SQL text cannot")
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        raise SqlSchemaError(f"the {what} {name!r} holds a lone surrogate, which UTF-8 SQL "
                             f"text cannot") from None


def _first_fold_clash(names: list[str]) -> tuple[str, str] | None:
    """The first two of ``names`` that SQLite reads as one name, or ``None``."""
    seen: dict[str, str] = {}
    for name in names:
        key = _fold(name)
        if key in seen:
            return seen[key], name
        seen[key] = name
    return None


def _uri_path(path: str) -> str:
    """``path`` escaped for a ``file:`` URI (``?`` and ``#`` would end it)."""
    return path.replace("%", "%25").replace("?", "%3f").replace("#", "%23")


def _read_database(con: sqlite3.Connection, what: str) -> dict[str, list[str]]:
    """Tables and views of an open database with their columns."""
    try:
        names = [row[0] for row in con.execute(
            "SELECT name FROM sqlite_master WHERE type IN ('table', 'view') "
            "AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\' ORDER BY name")]
        tables = {}
        for name in names:
            quoted = '"' + name.replace('"', '""') + '"'
            tables[name] = [row[1] for row in con.execute(f"PRAGMA table_info({quoted})")]
    except sqlite3.Error as exc:
        raise SqlSchemaError(f"cannot read the schema of {what}: {exc}") from None
    return tables


# -- the schema grammar ---------------------------------------------------------------

MAX_BLANKS = 16
"""Most spaces or tabs in a row the schema grammar accepts (per line)."""
MAX_LINE_BREAKS = 2
"""Most line breaks in one run of whitespace the schema grammar accepts."""
MAX_STRING_CHARS = 128
"""Most characters of a string literal (``'...'`` or ``"..."``, a doubled quote
counting as one) the schema grammar accepts, and most hex digits of a blob."""
MAX_ALIAS_CHARS = 64
"""Longest result alias (``SELECT x AS name``) the schema grammar accepts."""
MAX_COMPOUND_COLUMNS = 3
"""Most explicit result columns of a compound select's members (``SELECT *``
members are counted separately)."""
MAX_ALIASES = 4
"""Aliases of a join are ``T1`` ... ``T4``."""
DEFAULT_MAX_BINDINGS = 2000
"""Default budget of aliased ``FROM`` shapes spelt out by :func:`sql_grammar`."""

_SP = f"[ \\t]{{0,{MAX_BLANKS}}}"
_BLANKS = (f"[ \\t]{{1,{MAX_BLANKS}}}(?:\\r?\\n{_SP}){{0,{MAX_LINE_BREAKS}}}"
           f"|(?:\\r?\\n{_SP}){{1,{MAX_LINE_BREAKS}}}")
_B = f"(?:{_BLANKS})"

# SQLite 3.40's built-in functions by the argument counts they take (SQLite checks
# the count when it prepares a call). Left out: what needs a compile option
# (math, soundex, JSON before 3.38), what checks a constant argument
# (likelihood), what reads the database's state or extensions (load_extension,
# sqlite_offset, sqlite_compileoption_*), and like/glob (the operators are there).
SCALAR_FUNCTIONS: dict[str, tuple[int, int | None]] = {
    **dict.fromkeys(("changes", "last_insert_rowid", "random", "sqlite_source_id",
                     "sqlite_version", "total_changes"), (0, 0)),
    **dict.fromkeys(("abs", "hex", "length", "likely", "lower", "quote", "randomblob",
                     "sign", "typeof", "unicode", "unlikely", "upper", "zeroblob"), (1, 1)),
    **dict.fromkeys(("ifnull", "instr", "nullif"), (2, 2)),
    **dict.fromkeys(("iif", "replace"), (3, 3)),
    **dict.fromkeys(("ltrim", "round", "rtrim", "trim"), (1, 2)),
    **dict.fromkeys(("substr", "substring"), (2, 3)),
    **dict.fromkeys(("char", "date", "datetime", "format", "julianday", "printf", "strftime",
                     "time", "unixepoch"), (0, None)),
    **dict.fromkeys(("coalesce", "max", "min"), (2, None)),
}
"""Scalar functions of the schema grammar: name -> (fewest, most arguments;
``None``: any number)."""
AGGREGATE_FUNCTIONS: dict[str, tuple[int, int]] = {
    **dict.fromkeys(("avg", "count", "max", "min", "sum", "total"), (1, 1)),
    "group_concat": (1, 2),
}
"""Aggregate functions of the schema grammar: name -> (fewest, most arguments);
``count(*)`` too, and ``DISTINCT`` with one argument."""

# Terminals shared by every schema grammar. Keywords of several words take
# bounded whitespace inside. No REGEXP/MATCH (they need a user function), no
# ``->`` (JSON) or ``IS DISTINCT FROM``, which older SQLite lacks.
_TERMINALS_I = {
    "COMPOUND_OP": f"/union(?:{_B}all)?|intersect|except/i",
    "SET_QUANTIFIER": "/distinct|all/i",
    "JOIN_OP": f"/(?:inner{_B}|left(?:{_B}outer)?{_B}|cross{_B})?join/i",
    "GROUP_BY": f"/group{_B}by/i",
    "ORDER_BY": f"/order{_B}by/i",
    "SORT_ORDER": "/asc|desc/i",
    "NULLS_ORDER": f"/nulls{_B}(?:first|last)/i",
    "IS_OP": f"/is(?:{_B}not)?/i",
    "LIKE_OP": f"/(?:not{_B})?(?:like|glob)/i",
    "LIKE_KW": f"/(?:not{_B})?like/i",
    "BETWEEN_OP": f"/(?:not{_B})?between/i",
    "IN_OP": f"/(?:not{_B})?in/i",
    "NULL_TEST": f"/isnull|notnull|not{_B}null/i",
    "BOOL_OP": "/and|or/i",
    "BINARY_OP": r"/\|\||[*\/%+&]|<<|>>|\||<=|>=|<>|<|>|==?|!=/",
    "TIGHT_OP": r"/\|\||[*\/%+&]|<<|>>|\||<=|>=|<|>/",
    "CMP_OP": r"/<=|>=|<>|<|>|==?|!=/",
    "MINUS": '"-"',
    "UNARY_OP": "/[+~]/",
    # SQLite refuses a hex literal of more than 16 digits past its leading zeros
    "NUMBER": r"/0[xX]0*[0-9A-Fa-f]{1,16}|(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?/",
    "INT": "/[0-9]+/",
    "STRING": f"/'(?:[^'\\x00]|''){{0,{MAX_STRING_CHARS}}}'/",
    "STRING1": "/'(?:[^'\\x00]|'')'/",
    "BLOB": f"/[xX]'(?:[0-9A-Fa-f][0-9A-Fa-f]){{0,{MAX_STRING_CHARS // 2}}}'/",
    "COLLATION": "/binary|nocase|rtrim/i",
    # (SQLite takes any name and reads an affinity from it: these are the
    # usual ones, with one or two sizes)
    "TYPE_NAME": (r"/(?:integer|int|bigint|smallint|tinyint|mediumint|real|text|blob|numeric"
                  r"|float|double|boolean|varchar|char|nvarchar|nchar|decimal|datetime|date"
                  r"|timestamp)(?:[ \t]{0,4}\([ \t]{0,4}[0-9]{1,4}[ \t]{0,4}"
                  r"(?:,[ \t]{0,4}[0-9]{1,4}[ \t]{0,4})?\))?/i"),
}


def _ascii_case(pattern: str) -> str:
    """``pattern`` (a regex without character classes of letters) with each
    letter outside ``[...]`` and escapes made ``[Xx]``: the ``i`` flag of a
    Python regex also folds ``ſ``, ``ı``, ``İ`` and the Kelvin sign to ASCII
    letters, which SQLite does not."""
    out, i = [], 0
    while i < len(pattern):
        ch = pattern[i]
        if ch == "\\":
            out.append(pattern[i:i + 2])
            i += 2
        elif ch == "[":
            j = pattern.index("]", i + 2)
            out.append(pattern[i:j + 1])
            i = j + 1
        elif ch.isascii() and ch.isalpha():
            out.append(f"[{ch.upper()}{ch.lower()}]")
            i += 1
        else:
            out.append(ch)
            i += 1
    return "".join(out)


_TERMINALS = {"_WS": f"/{_BLANKS}/"}
for _name, _pattern in _TERMINALS_I.items():
    _TERMINALS[_name] = (_lark_regex(_ascii_case(_pattern[1:-2])) if _pattern.endswith("/i")
                         else _pattern)
del _name, _pattern

# Statement-level helpers. "(" and ")" and "," take the blanks SQLite allows
# around them; one shared rule each keeps the Earley parser from predicting every
# `_WS?` twice.
_SHARED_RULES = [
    '_lpar: _WS? "(" _WS?',
    '_open: "(" _WS?',
    '_rpar: _WS? ")"',
    '_comma: _WS? "," _WS?',
    '_not: "NOT"i _WS',
    '_coll: (_WS "COLLATE"i _WS COLLATION)?',
    '_selkw: "SELECT"i (_WS SET_QUANTIFIER)? _WS',
    '_osuf: (_WS SORT_ORDER)? (_WS NULLS_ORDER)?',
    '_ralias: _WS ("AS"i _WS)? ALIAS',
    '_cmp: _WS? CMP_OP _WS?',
    '_jn: _WS JOIN_OP _WS',
    '_limit: _WS "LIMIT"i _WS INT ((_WS "OFFSET"i _WS | _comma) INT)?',
    'lit: NUMBER | STRING | BLOB | KEYWORD_LITERAL | DQ_STRING',
]


def _arity_classes() -> list[tuple[int, int | None]]:
    """The distinct argument-count ranges of :data:`SCALAR_FUNCTIONS`."""
    return sorted(set(SCALAR_FUNCTIONS.values()), key=lambda a: (a[0], 99 if a[1] is None else a[1]))


def _arity_terminal(lo: int, hi: int | None) -> str:
    return f"FN{lo}{'N' if hi is None else hi}"


def _function_terminals() -> dict[str, str]:
    """The function-name terminals: one per argument-count range, and the
    aggregates."""
    out = {}
    for lo, hi in _arity_classes():
        names = [n for n, a in SCALAR_FUNCTIONS.items() if a == (lo, hi)]
        out[_arity_terminal(lo, hi)] = _lark_regex(_words_regex(names))
    out["AGG"] = _lark_regex(_words_regex(AGGREGATE_FUNCTIONS))
    out["AGG2"] = _lark_regex(_words_regex(n for n, (_, hi) in AGGREGATE_FUNCTIONS.items()
                                           if hi >= 2))
    out["COUNT"] = _lark_regex(_words_regex(["count"]))
    return out


def _function_calls(e: str, first: str | None = None) -> list[str]:
    """A call of each function-name terminal with as many arguments as its
    functions take, the arguments being the expressions ``e``; with ``first``,
    only calls with an argument, the first one being ``first``."""
    out = []
    for lo, hi in _arity_classes():
        name = _arity_terminal(lo, hi)
        if first is not None:
            if hi == 0:
                continue
            args = [first] + [e] * (lo - 1)
            lo = max(lo, 1)
        else:
            args = [e] * lo
        tail = f" (_comma {e})*" if hi is None else f" (_comma {e})?" * (hi - lo)
        if lo == 0:
            if hi == 0:
                out.append(f'{name} _lpar ")"')
            else:
                out.append(f'{name} _lpar ({e}{tail} _rpar | ")")')
        else:
            out.append(f"{name} _lpar {' _comma '.join(args)}{tail} _rpar")
    return out


def _dq_string_regex(excluded: Iterable[str], max_chars: int) -> str:
    """A regex for the double-quoted strings ``"..."`` (``""`` inside for a quote)
    of at most ``max_chars`` characters whose content is none of ``excluded``,
    ignoring ASCII case: SQLite reads such a string as a name when a column has
    that name."""
    trie: dict = {}
    for word in excluded:
        if len(word) <= max_chars:  # a longer one cannot be written anyway
            node = trie
            for ch in word:
                node = node.setdefault(_fold(ch), {})
            node[""] = {}

    def spellings(ch: str) -> set[str]:
        return {ch, ch.upper()} if ch.isascii() and ch.isalpha() else {ch}

    def edge(ch: str) -> str:
        return '""' if ch == '"' else _char_class(spellings(ch))

    def leave(node: dict, _depth: int) -> str:
        taken = {c for ch in node if ch and ch != '"' for c in spellings(ch)}
        other = '[^"\\x00' + "".join(_escape(c) for c in sorted(taken)) + "]"
        return other if '"' in node else f'(?:{other}|"")'

    body = _bounded_trie_regex(trie, edge, leave, '[^"\\x00]|""', max_chars, empty=True)
    return '"' + body + '"'


def _fold(name: str) -> str:
    """``name`` as SQLite compares names: ASCII letters in lower case."""
    return "".join(c.lower() if c.isascii() else c for c in name)


_KEYWORD = re.compile(r'"([A-Za-z][A-Za-z0-9_]*)"i')


class _Grammar:
    """Lark text of one schema grammar, in the plain subset (one-line rules,
    one-token terminals) that :mod:`constrain.frontends.lark` reads without
    lark's loader (which would take seconds on the larger databases)."""

    def __init__(self):
        self.rules: list[str] = []
        self.terminals: dict[str, str] = dict(_TERMINALS)
        self.terminals.update(_function_terminals())
        self._names: dict[tuple[str, ...], str] = {}

    def rule(self, name: str, alternatives: Iterable[str]) -> str:
        """Add ``name: alt | alt ...``; return ``name``. A keyword written
        ``"WORD"i`` becomes the terminal ``K_WORD`` (see :func:`_ascii_case`)."""
        self.rules.append(_KEYWORD.sub(self._keyword, f"{name}: " + " | ".join(alternatives)))
        return name

    def _keyword(self, m: re.Match) -> str:
        name = f"K_{m.group(1).upper()}"
        self.terminals.setdefault(name, _lark_regex(_ascii_case(m.group(1))))
        return name

    def names_terminal(self, names: Iterable[str]) -> str:
        """The terminal that spells any of ``names`` (see :func:`_names_regex`),
        one per distinct set of names."""
        key = tuple(sorted(set(names)))
        if key not in self._names:
            self._names[key] = name = f"N_{len(self._names)}"
            self.terminals[name] = _lark_regex(_names_regex(key))
        return self._names[key]

    def text(self, header: list[str]) -> str:
        """The grammar text."""
        shared = [_KEYWORD.sub(self._keyword, r) for r in _SHARED_RULES]
        terms = [f"{name}: {pattern}" for name, pattern in self.terminals.items()]
        return "\n".join(header + shared + self.rules + terms) + "\n"


class _Universe:
    """The statements over one set of tables (``{u}stmt``: any number of result
    columns, ``{u}stmt{c}``: ``c`` of them).

    A select list is read before its ``FROM`` clause, so what it needs of the
    ``FROM`` clause travels as a small *requirement*: the set of *entries* its
    items name (at most two), an entry being ``("n", n, t)`` (columns of table
    ``t`` qualified by ``T{n}``), ``("s", t)`` (``FROM t`` without an alias),
    ``("b", t)`` (bare columns no other table has, in a join of at most two
    tables where ``t`` occurs once) or ``("x", c)`` (a bare column several tables
    have, as a whole item, in such a join where one table has it). The ``FROM``
    clause spells the declarations those entries fix, then continues one table
    at a time (``F{mode}`` rules per binding), and ends with the binding's
    ``WHERE``/``GROUP BY``/``HAVING`` (and ``ORDER BY`` in mode ``o``: a simple
    statement; mode ``n`` is a compound member)."""

    def __init__(self, g: _Grammar, u: str, tables: dict[str, list[str] | None],
                 max_bindings: int, counts: set[int]):
        self.g = g
        self.u = u
        self.names = sorted(tables)
        self.columns = [tables[n] or [] for n in self.names]
        self.counts = counts
        self.blocks: set[str] = set()
        self.owners: dict[str, list[int]] = {}
        for i, cols in enumerate(self.columns):
            for col in cols:
                self.owners.setdefault(_fold(col), []).append(i)
        self.table_term = [g.names_terminal([n]) for n in self.names]
        self.col_term = [g.names_terminal(cols) if cols else None for cols in self.columns]
        # the columns no other table of the universe has: bare wherever their
        # table occurs once
        self.unique_term = []
        for cols in self.columns:
            mine = [c for c in cols if len(self.owners[_fold(c)]) == 1]
            self.unique_term.append(g.names_terminal(mine) if mine else None)
        # the columns several tables have, one spelling each
        self.shared_term = {}
        for f, occ in sorted(self.owners.items()):
            if len(occ) > 1:
                self.shared_term[f] = g.names_terminal(c for c in self.columns[occ[0]]
                                                       if _fold(c) == f)
        self.bindings = self._bindings(max_bindings)

    def _bindings(self, budget: int) -> list[tuple[int, tuple[int, ...]]]:
        """The aliased FROM shapes ``(s, (t1, ..., tk))``, aliases ``T{s+1}`` to
        ``T{s+k}``: whole classes of one ``k`` and ``s``, by increasing ``k`` then
        ``s``, while they fit ``budget``."""
        usable = [i for i, cols in enumerate(self.columns) if cols]
        out: list[tuple[int, tuple[int, ...]]] = []
        for k in range(1, MAX_ALIASES + 1):
            for s in range(MAX_ALIASES - k + 1):
                if len(out) + len(usable) ** k > budget:
                    return out
                out += [(s, seq) for seq in itertools.product(usable, repeat=k)]
        return out

    @staticmethod
    def bid(s: int, seq: tuple[int, ...]) -> str:
        """The rule prefix of a binding."""
        return f"j{s}_" + "_".join(map(str, seq))

    # -- expressions ------------------------------------------------------------------

    def block(self, leaf: str) -> str:
        """Make the expression blocks ``{u}x{leaf}`` (no aggregates) and
        ``{u}y{leaf}`` (aggregates allowed) if they are new; return ``leaf``.

        ``leaf`` names the column references: ``z`` none, ``s{i}`` every column
        of table ``i`` bare or qualified by its name, ``u{i}`` its columns no
        other table has, bare, ``q{n}_{i}`` its columns qualified by ``T{n}``.
        """
        if leaf not in self.blocks:
            self.blocks.add(leaf)
            if leaf == "z":
                refs = []
            elif leaf[0] == "s":
                i = int(leaf[1:])
                refs = [self.col_term[i], f'{self.table_term[i]} "." {self.col_term[i]}']
            elif leaf[0] == "u":
                refs = [self.unique_term[int(leaf[1:])]]
            else:
                n, i = map(int, leaf[1:].split("_"))
                refs = [f'"T{n}"i "." {self.col_term[i]}']
            self._expressions(f"{self.u}x{leaf}", refs, None)
            self._expressions(f"{self.u}y{leaf}", refs, f"{self.u}x{leaf}")
        return leaf

    def _expressions(self, P: str, refs: list[str], plain: str | None) -> None:
        """One expression block: the flat operator chain of ``grammars/sql.lark``
        over primaries whose column references are ``refs``; with ``plain`` (the
        block without aggregates of the same references) the primaries include
        aggregate calls over it. ``{P}se`` starts with no number, ``{P}el`` with
        a column reference (a select item that names columns)."""
        u, R = self.u, self.g.rule
        R(f"{P}e", [f"_not* {P}a {P}t*"])
        R(f"{P}t", [f"_WS {P}q", f"_WS BOOL_OP _WS _not* {P}a"])
        R(f"{P}q", [f"IS_OP _WS {P}a", f"LIKE_OP _WS {P}a",
                    f'LIKE_KW _WS {P}ta _WS "ESCAPE"i _WS STRING1',
                    f'BETWEEN_OP _WS {P}a _WS "AND"i _WS {P}a',
                    f"IN_OP _lpar {P}l _rpar", "NULL_TEST"])
        R(f"{P}l", [f"{u}stmt1", f"{P}e (_comma {P}e)*"])
        # a binary minus is never followed by a unary one (`a--1` opens a comment)
        R(f"{P}a", [f"(MINUS _WS?)? {P}o {P}at*"])
        R(f"{P}at", [f"_WS? (BINARY_OP _WS? (MINUS _WS?)? | MINUS _WS?) {P}o"])
        R(f"{P}ta", [f"(MINUS _WS?)? {P}o {P}tt*"])
        R(f"{P}tt", [f"_WS? (TIGHT_OP _WS? (MINUS _WS?)? | MINUS _WS?) {P}o"])
        R(f"{P}o", [f"(UNARY_OP _WS?)? {P}p _coll"])
        common = refs + [f"{P}f", f"{P}c", f'"EXISTS"i _lpar {u}stmt _rpar',
                         f'"CAST"i _lpar {P}e _WS "AS"i _WS TYPE_NAME _rpar']
        if plain is not None:
            common.append(f"{P}g")
            R(f"{P}g", ['COUNT _lpar "*" _rpar', f'AGG _lpar ("DISTINCT"i _WS)? {plain}e _rpar',
                        f"AGG2 _lpar {plain}e _comma {plain}e _rpar"])
        R(f"{P}p", ["lit", f"_open {P}e _rpar", f"_open {u}stmt1 _rpar"] + common)
        R(f"{P}f", _function_calls(f"{P}e"))
        R(f"{P}c", [f'"CASE"i (_WS {P}e)? {P}w+ (_WS "ELSE"i _WS {P}e)? _WS "END"i'])
        R(f"{P}w", [f'_WS "WHEN"i _WS {P}e _WS "THEN"i _WS {P}e'])
        # GROUP BY and ORDER BY items: SQLite reads one that is an integer when
        # parsed as the position of a result column, so they never start with a
        # number and have no top-level AND/OR (it folds `x AND 0` to 0)
        R(f"{P}se", [f"{P}sp _coll {P}at* (_WS {P}q)*"])
        R(f"{P}sp", ["STRING", "BLOB", "DQ_STRING"] + common)
        if not refs:
            return
        # the leftmost primary is a column reference (or holds one leftmost): a
        # select item typed by its references is never an item without any
        R(f"{P}el", [f"_not* {P}al {P}t*"])
        R(f"{P}al", [f"(MINUS _WS?)? (UNARY_OP _WS?)? {P}pl _coll {P}at*"])
        lefts = refs + [f"_open {P}el _rpar", f'"CAST"i _lpar {P}el _WS "AS"i _WS TYPE_NAME _rpar']
        lefts += _function_calls(f"{P}e", first=f"{P}el")
        if plain is not None:
            lefts += [f'AGG _lpar ("DISTINCT"i _WS)? {plain}el _rpar',
                      f"AGG2 _lpar {plain}el _comma {plain}e _rpar"]
        R(f"{P}pl", lefts)

    # -- bindings ---------------------------------------------------------------------

    def build(self) -> None:
        """Every rule of the universe."""
        self.block("z")
        for i in range(len(self.names)):
            self._table(i)
        done: dict[tuple[int, tuple[int, ...]], str] = {}
        for s, seq in self.bindings:
            done[(s, seq)] = self._binding(s, seq, done.get((s, seq[:-1])))
        self._chains()
        self._select_lists()
        self._statements()

    def _table(self, i: int) -> None:
        """``FROM t`` without an alias: every column of ``t``, bare or ``t.c``
        (none if its columns are not known)."""
        u = self.u
        leaf = self.block(f"s{i}" if self.columns[i] else "z")
        x, y, b = f"{u}x{leaf}", f"{u}y{leaf}", f"{u}s{i}"
        self._rest(b, where=f"{x}e", group=f"{x}se", having=f"{y}e", order=f"{y}se")

    def _rest(self, b: str, *, where: str, group: str, having: str, order: str) -> None:
        """``{b}rw``: WHERE, GROUP BY, HAVING; ``{b}ro``: the same and ORDER BY,
        whose items take aggregates after a GROUP BY only (SQLite refuses them
        in a query that is not an aggregate one)."""
        R = self.g.rule
        R(f"{b}gb", [f"_WS GROUP_BY _WS {group} (_comma {group})* "
                     f'(_WS "HAVING"i _WS {having})?'])
        R(f"{b}rw", [f'(_WS "WHERE"i _WS {where})? {b}gb?'])
        R(f"{b}ro", [f'(_WS "WHERE"i _WS {where})? ({b}gb (_WS ORDER_BY _WS {order} _osuf '
                     f"(_comma {order} _osuf)*)? | (_WS ORDER_BY _WS {group} _osuf "
                     f"(_comma {group} _osuf)*)?)"])

    def _binding(self, s: int, seq: tuple[int, ...], prev: str | None) -> str:
        """The rules of one aliased FROM shape: its declaration ``{b}dj`` (the
        last table), the prefix-shared chain ``{b}fr`` of all of them, and what
        follows the FROM clause. Unions over its tables extend those of the shape
        one table shorter (``prev``), also a binding."""
        u, R = self.u, self.g.rule
        n, t = s + len(seq), seq[-1]
        b = f"{u}{self.bid(s, seq)}"
        q = self.block(f"q{n}_{t}")
        x, y = f"{u}x{q}", f"{u}y{q}"

        def union(name: str, own: list[str]) -> str:
            return R(f"{b}{name}", ([f"{prev}{name}"] if prev else []) + own)

        union("ja", [f"{x}a"])
        union("jp", [f"{x}e"] + ([f"{prev}ja _cmp {x}a", f"{x}a _cmp {prev}ja"] if prev else []))
        union("jy", [f"{y}e"])
        union("jg", [f"{x}se"])
        union("jo", [f"{y}se"])
        declared = f'{self.table_term[t]} _WS ("AS"i _WS)? "T{n}"i'
        if prev:
            R(f"{b}on", [f"{b}jp (_WS BOOL_OP _WS {b}jp)*"])
            R(f"{b}dj", [f'_jn {declared} (_WS "ON"i _WS {b}on)?', f"_comma {declared}"])
            R(f"{b}fr", [f"{prev}fr {b}dj"])
        else:
            R(f"{b}fr", [declared])
        # bare columns: in any expression, those of a table that occurs once here
        # and is the only table of the universe with them; as a whole item, any
        # column exactly one table here has
        bare = [self.block(f"u{i}") for i in sorted(set(seq))
                if seq.count(i) == 1 and self.unique_term[i]]
        items = [self.shared_term[f] for f in self._local_shared(seq)]
        part = {}
        for key, base, kind, suffix in (("p", "jp", "x", "e"), ("y", "jy", "y", "e"),
                                        ("g", "jg", "x", "se"), ("o", "jo", "y", "se")):
            alts = [f"{b}{base}"] + [f"{u}{kind}{leaf}{suffix}" for leaf in bare]
            if key != "p":
                alts += items
            part[key] = R(f"{b}{key}", alts) if len(alts) > 1 else alts[0]
        R(f"{b}w", [f"{part['p']} (_WS BOOL_OP _WS {part['p']})*"])
        R(f"{b}h", [f"{part['y']} (_WS BOOL_OP _WS {part['y']})*"])
        self._rest(b, where=f"{b}w", group=part["g"], having=f"{b}h", order=part["o"])
        return b

    def _local_shared(self, seq: tuple[int, ...]) -> list[str]:
        """The columns several tables of the universe have but exactly one table
        occurrence of ``seq`` has."""
        count: dict[str, int] = {}
        for i in seq:
            for col in self.columns[i]:
                f = _fold(col)
                if len(self.owners[f]) > 1:
                    count[f] = count.get(f, 0) + 1
        return sorted(f for f, c in count.items() if c == 1)

    def _chains(self) -> None:
        """``{b}f{m}``: the rest of a FROM clause after the tables of binding
        ``b`` (more tables, one at a time, then what follows FROM), for both
        modes; ``{u}f{m}``: a FROM clause of aliased tables from its first one."""
        u, R = self.u, self.g.rule
        children: dict[tuple[int, tuple[int, ...]], list[tuple[int, tuple[int, ...]]]] = {}
        for s, seq in self.bindings:
            if len(seq) > 1:
                children.setdefault((s, seq[:-1]), []).append((s, seq))
        for m, end in (("o", "ro"), ("n", "rw")):
            for s, seq in self.bindings:
                b = f"{u}{self.bid(s, seq)}"
                more = [f"{u}{self.bid(*c)}dj {u}{self.bid(*c)}f{m}" for c in children.get((s, seq), [])]
                R(f"{b}f{m}", [f"{b}{end}"] + more)
            if self.bindings:
                R(f"{u}f{m}", [f"{u}{self.bid(s, seq)}fr {u}{self.bid(s, seq)}f{m}"
                               for s, seq in self.bindings if len(seq) == 1])

    # -- select lists -------------------------------------------------------------------

    def _entries(self) -> list[tuple]:
        """Every entry a select item may name, in a fixed order."""
        out: list[tuple] = [("s", i) for i, cols in enumerate(self.columns) if cols]
        seen_n = sorted({(s + p + 1, t) for s, seq in self.bindings for p, t in enumerate(seq)})
        out += [("n", n, t) for n, t in seen_n]
        small = [b for b in self.bindings if len(b[1]) <= 2]
        out += [("b", i) for i in sorted({i for _, seq in small for i in seq
                                          if seq.count(i) == 1 and self.unique_term[i]})]
        out += [("x", f) for f in sorted({f for _, seq in small for f in self._local_shared(seq)})]
        return out

    def _entry_item(self, entry: tuple) -> str:
        """The select item naming ``entry``."""
        u = self.u
        if entry[0] == "x":
            return f"{self.shared_term[entry[1]]} _ralias?"
        leaf = {"s": lambda: f"s{entry[1]}", "b": lambda: f"u{entry[1]}",
                "n": lambda: f"q{entry[1]}_{entry[2]}"}[entry[0]]()
        return f"{u}y{self.block(leaf)}el _ralias?"

    def _select_lists(self) -> None:
        """Items, requirement states and the FROM clauses after each state."""
        u, R = self.u, self.g.rule
        entries = self._entries()
        self.entry_id = {e: k for k, e in enumerate(entries)}
        R(f"{u}i", [f"{u}yze _ralias?"])
        for e, k in self.entry_id.items():
            R(f"{u}i{k}", [self._entry_item(e)])
        # which bindings each entry allows
        allows: dict[tuple, set] = {e: set() for e in entries}
        for s, seq in self.bindings:
            for p, t in enumerate(seq):
                allows[("n", s + p + 1, t)].add((s, seq))
            if len(seq) <= 2:
                for i in set(seq):
                    if seq.count(i) == 1 and self.unique_term[i]:
                        allows[("b", i)].add((s, seq))
                for f in self._local_shared(seq):
                    allows[("x", f)].add((s, seq))
        states: dict[frozenset, set | None] = {frozenset(): None}
        for e in entries:
            states[frozenset([e])] = None if e[0] == "s" else allows[e]
        for a, b in itertools.combinations(entries, 2):
            if a[0] == "s" or b[0] == "s":
                continue
            both = allows[a] & allows[b]
            if both:
                states[frozenset([a, b])] = both
        self.state_id = {S: k for k, S in enumerate(states)}
        for m in ("o", "n"):
            for S, k in self.state_id.items():
                if m == "n" and len(S) > 1:
                    continue
                self._from_rule(f"{u}r{m}{k}", S, states[S], m)
        # mode A: any number of items, at most two entries
        for S, k in self.state_id.items():
            alts = [f"{u}ro{k}", f"_comma {u}i {u}n{k}"]
            for e in entries:
                T = S | {e}
                if T in self.state_id:
                    alts.append(f"_comma {u}i{self.entry_id[e]} {u}n{self.state_id[T]}")
            R(f"{u}n{k}", alts)

    def _from_rule(self, name: str, S: frozenset, allowed: set | None, m: str) -> None:
        """``name``: the FROM clause (or none) after a select list naming the
        entries ``S`` whose bindings are ``allowed``, in mode ``m``."""
        u, R = self.u, self.g.rule
        end = "ro" if m == "o" else "rw"
        if not S:
            # no FROM at all, a subquery, a table, or aliased tables
            alts = [f'_WS "FROM"i _WS _open {u}stmt _rpar']
            alts += [f'_WS "FROM"i _WS {self.table_term[i]} {u}s{i}{end}'
                     for i in range(len(self.names))]
            if self.bindings:
                alts.append(f'_WS "FROM"i _WS {u}f{m}')
            R(name, [f"({' | '.join(alts)})?"])
            return
        if len(S) == 1 and next(iter(S))[0] == "s":
            i = next(iter(S))[1]
            R(name, [f'_WS "FROM"i _WS {self.table_term[i]} {u}s{i}{end}'])
            return
        if any(e[0] in "bx" for e in S):
            # a join of at most two tables, spelt out whole
            R(name, [f'_WS "FROM"i _WS {u}{self.bid(*bnd)}fr {u}{self.bid(*bnd)}{end}'
                     for bnd in sorted(allowed)])
            return
        # the declarations up to the last table an entry fixes, then any more
        prefixes = set()
        for s, seq in allowed:
            last = max(e[1] - s for e in S)
            prefixes.add((s, seq[:last]))
        R(name, [f'_WS "FROM"i _WS {u}{self.bid(*p)}fr {u}{self.bid(*p)}f{m}'
                 for p in sorted(prefixes)])

    def _statements(self) -> None:
        """The select cores of each mode, the compound selects ``{u}comp{c}``
        (members of ``c`` result columns each) and the statements."""
        u, R = self.u, self.g.rule
        star_widths: dict[int, list[str]] = {}
        for i, cols in enumerate(self.columns):
            if cols:
                star_widths.setdefault(len(cols), []).append(
                    f'_WS "FROM"i _WS {self.table_term[i]} {u}s{i}rw')
        for bnd in self.bindings:
            if len(bnd[1]) <= 2:
                width = sum(len(self.columns[i]) for i in bnd[1])
                star_widths.setdefault(width, []).append(
                    f'_WS "FROM"i _WS {u}{self.bid(*bnd)}fr {u}{self.bid(*bnd)}rw')
        singles = [(S, k) for S, k in self.state_id.items() if len(S) == 1]
        zero = self.state_id[frozenset()]
        # mode A: a simple statement with any number of result columns
        R(f"{u}ca", [f"_selkw {u}i {u}n{zero}", f'_selkw "*" {u}star']
          + [f"_selkw {u}i{self.entry_id[next(iter(S))]} {u}n{k}" for S, k in singles])
        R(f"{u}star", ([f'_WS "FROM"i _WS {u}fo'] if self.bindings else [])
          + [f'_WS "FROM"i _WS _open {u}stmt _rpar']
          + [f'_WS "FROM"i _WS {self.table_term[i]} {u}s{i}ro' for i in range(len(self.names))])
        # one result column, ORDER BY allowed (scalar and IN subqueries)
        R(f"{u}c1", [f"_selkw {u}i {u}ro{zero}"]
          + [f"_selkw {u}i{self.entry_id[next(iter(S))]} {u}ro{k}" for S, k in singles])
        widths = sorted(self.counts | set(star_widths))
        for c in widths:
            alts = [f'_selkw "*" {u}w{c}'] if c in star_widths else []
            if star_widths.get(c):
                R(f"{u}w{c}", star_widths[c])
            if c in self.counts:
                alts.append("_selkw " + " _comma ".join([f"{u}i"] * c) + f" {u}rn{zero}")
                for S, k in singles:
                    e = f"{u}i{self.entry_id[next(iter(S))]}"
                    for p in range(c):
                        items = [f"{u}i"] * p + [e] + [f"{u}iu{k}"] * (c - p - 1)
                        alts.append("_selkw " + " _comma ".join(items) + f" {u}rn{k}")
            R(f"{u}m{c}", alts)
            R(f"{u}comp{c}", [f"{u}m{c} (_WS COMPOUND_OP _WS {u}m{c})+"])
        for S, k in singles:
            R(f"{u}iu{k}", [f"{u}i", f"{u}i{self.entry_id[next(iter(S))]}"])
        R(f"{u}stmt1", [f"({u}c1 | {u}comp1) _limit?"])
        for c in sorted(self.counts - {1}):
            R(f"{u}stmt{c}", [f"({u}comp{c} | {u}m{c}) _limit?"])
        R(f"{u}stmt", [f"({u}ca | " + " | ".join(f"{u}comp{c}" for c in widths) + ") _limit?"])


def _check_ctes(cte_names, tables: dict[str, list[str]]) -> dict[str, list[str] | None]:
    """``cte_names`` as ``{name: columns or None}``, validated."""
    if isinstance(cte_names, Mapping):
        items = list(cte_names.items())
    elif isinstance(cte_names, (str, bytes)) or not isinstance(cte_names, Iterable):
        raise SqlSchemaError(f"cte_names must be names or a {{name: [columns]}} mapping, "
                             f"got {cte_names!r}")
    else:
        items = [(name, None) for name in cte_names]
    out: dict[str, list[str] | None] = {}
    tables_folded = {_fold(t) for t in tables}
    folded = set(tables_folded)
    for name, columns in items:
        if not isinstance(name, str) or not name:
            raise SqlSchemaError(f"CTE names must be non-empty strings, got {name!r}")
        _check_name(name, "CTE name")
        if _fold(name) in folded:
            what = "a table of the database" if _fold(name) in tables_folded else "another CTE's"
            raise SqlSchemaError(f"CTE name {name!r} is already {what} (SQLite folds ASCII case)")
        folded.add(_fold(name))
        if columns is not None:
            if isinstance(columns, (str, bytes)) or not isinstance(columns, Iterable):
                raise SqlSchemaError(f"the columns of CTE {name!r} must be a list of names, "
                                     f"got {columns!r}")
            columns = list(columns)
            if not columns or any(not isinstance(c, str) or not c for c in columns):
                raise SqlSchemaError(f"CTE {name!r} needs non-empty column names, got {columns!r}")
            if len({_fold(c) for c in columns}) != len(columns):
                raise SqlSchemaError(f"CTE {name!r} names a column twice: {columns!r}")
            for c in columns:
                _check_name(c, f"column of CTE {name!r}")
        out[name] = columns
    return out


def sql_grammar(schema, *, cte_names=(), max_bindings: int = DEFAULT_MAX_BINDINGS) -> str:
    """Lark grammar text for SQLite ``SELECT`` statements over one database, every
    one of which SQLite prepares in that database.

    Table and column names are those of ``schema`` (see :func:`load_schema`),
    bare (a plain identifier that is not a reserved word) or quoted with
    ``"..."``, ```...``` or ``[...]``, in any ASCII letter case, as SQLite
    resolves names. How far names are checked, and the shape of joins (aliases
    ``T1`` ... ``T4``), is described in the module docstring and ``docs/sql.md``.
    A double-quoted string that spells no column is a string literal, as in
    SQLite.

    Args:
        schema: a SQLite file path, an open ``sqlite3.Connection`` or a
            ``{table: [columns]}`` mapping.
        cte_names: tables a leading ``WITH`` clause defines, all of them, in this
            order, each once: a ``{name: [columns]}`` mapping (written
            ``WITH name(col, ...) AS (select)``, the select having that many
            result columns; the columns are then known) or plain names (written
            ``WITH name AS (select)``; their columns cannot be named). The CTE
            bodies see the database's tables only; the statement after them sees
            both. A statement without ``WITH`` stays accepted.
        max_bindings: how many aliased ``FROM`` shapes (a sequence of tables with
            their aliases) the grammar may spell out; the grammar grows linearly
            with it. Joins of ``k`` tables take ``N**k`` shapes for ``N`` tables.

    Returns:
        Grammar text with start symbol ``start``, for
        ``constrain.compile_grammar`` or ``lark.Lark(text, parser="earley",
        lexer="dynamic_complete")``. The same schema always gives the same text.

    Raises:
        SqlSchemaError: ``schema`` cannot be read or has no tables; bad
            ``cte_names``; ``max_bindings`` is not a non-negative integer.
    """
    tables = load_schema(schema)
    ctes = _check_ctes(cte_names, tables)
    if isinstance(max_bindings, bool) or not isinstance(max_bindings, int) or max_bindings < 0:
        raise SqlSchemaError(f"max_bindings must be a non-negative integer, got {max_bindings!r}")
    counts = set(range(1, MAX_COMPOUND_COLUMNS + 1))
    counts |= {len(cols) for cols in ctes.values() if cols}
    g = _Grammar()
    columns = {c for cols in tables.values() for c in cols}
    columns |= {c for cols in ctes.values() if cols for c in cols}
    folded = {_fold(c) for c in columns}
    # SQLite reads TRUE and FALSE as a column when one has that name
    words = [w for w in ("null", "true", "false") if w == "null" or w not in folded]
    g.terminals["KEYWORD_LITERAL"] = _lark_regex(_ascii_case("|".join(
        words + ["current_timestamp", "current_time", "current_date"])))
    g.terminals["DQ_STRING"] = _lark_regex(_dq_string_regex(
        sorted(columns | {"rowid", "oid", "_rowid_"}), MAX_STRING_CHARS))
    g.terminals["ALIAS"] = _lark_regex(
        f"[Oo][Vv][Ee][Rr][0-9A-Z_a-z]{{0,{MAX_ALIAS_CHARS - 4}}}|"
        + _bounded_identifier_regex(RESERVED_WORDS + ("OVER",), MAX_ALIAS_CHARS))
    base = _Universe(g, "a", dict(tables), max_bindings, counts)
    base.build()
    start = "a" + "stmt"
    if ctes:
        full = _Universe(g, "b", {**tables, **ctes}, max_bindings, counts)
        full.build()
        defs = []
        for name, cols in ctes.items():
            term = g.names_terminal([name])
            if cols:
                names = " _comma ".join(g.names_terminal([c]) for c in cols)
                defs.append(f'{term} _lpar {names} _rpar _WS "AS"i _lpar astmt{len(cols)} _rpar')
            else:
                defs.append(f'{term} _WS "AS"i _lpar astmt _rpar')
        g.rule("_with", ['"WITH"i _WS ' + " _comma ".join(defs) + " _WS"])
        start = "(astmt | _with bstmt)"
    header = [f"// sql_grammar: {len(tables)} tables, {len(columns)} distinct columns, "
              f"{len(base.bindings)} aliased FROM shapes (constrain.frontends.sql)",
              f"start: _WS? {start} (_WS? \";\")? _WS?"]
    return g.text(header)
