"""SQL (SQLite ``SELECT``) grammars, generic or specialised to a real database.

``grammars/sql.lark`` is the generic grammar: any table or column name that is a
syntactically valid identifier. :func:`sql_grammar` rewrites its schema-dependent
rules so that only the tables and columns of one database can be named.

The grammar is scannerless (see ``docs/sql.md``): whitespace is a terminal of its
own, mandatory between two word-like tokens and optional around punctuation, so
that what Lark's ``dynamic_complete`` Earley parser accepts is SQL that SQLite
parses (a subset of it) rather than a superset that glues keywords to names.
"""

from __future__ import annotations

import os
import re
import sqlite3
from collections.abc import Iterable, Mapping

from constrain.errors import ConstraintError
from constrain.resources import grammar_path

__all__ = [
    "RESERVED_WORDS",
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
            parts.append(f"{re.escape(lo)}-{re.escape(hi)}")
        else:
            parts.extend(re.escape(chr(c)) for c in codes[i:j + 1])
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


def _ci(text: str) -> str:
    """``text`` as a regex matching it with ASCII letters in either case, the way
    SQLite compares names."""
    out = []
    for ch in text:
        if ch.isascii() and ch.isalpha():
            out.append(f"[{ch.upper()}{ch.lower()}]")
        else:
            out.append(re.escape(ch))
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
            tables[table] = columns
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
    return tables


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


def _replace_rule(text: str, rule: str, body: str) -> str:
    """``text`` with the one-line definition of ``rule`` replaced by ``body``."""
    pattern = re.compile(rf"^{re.escape(rule)}:.*$", re.MULTILINE)
    new, count = pattern.subn(lambda _: f"{rule}: {body}", text)
    if count != 1:
        raise ConstraintError(f"sql.lark has {count} definitions of {rule!r}, expected 1")
    return new


def sql_grammar(schema, *, cte_names: Iterable[str] = ()) -> str:
    """Lark grammar text for SQLite ``SELECT`` statements over one database.

    The result is ``grammars/sql.lark`` with table and column names restricted to
    those of ``schema`` (see :func:`load_schema` for what it may be): each can be
    written bare (when it is a plain identifier and not a reserved word) or quoted
    with ``"..."``, ```...``` or ``[...]``, in any ASCII letter case, as SQLite
    resolves names. A column may be qualified (``q.column``) by any name, since
    ``q`` may be an alias and aliases are free; only ``column`` is checked. Which
    table a column belongs to is not checked. A double-quoted string that names no
    column is accepted as a string literal, as SQLite does.

    Args:
        schema: a SQLite file path, an open ``sqlite3.Connection`` or a
            ``{table: [columns]}`` mapping.
        cte_names: names a ``WITH`` clause may define; they can then be used as
            tables. Without any, ``WITH`` is not accepted (a context-free grammar
            cannot check that a table name was defined earlier in the query).

    Returns:
        Grammar text with start symbol ``start``, for ``lark.Lark(text,
        parser="earley", lexer="dynamic_complete")`` or
        ``constrain.cfg.grammar.compile_grammar``. The same schema always gives the
        same text.

    Raises:
        SqlSchemaError: ``schema`` cannot be read or has no tables.
    """
    tables = load_schema(schema)
    ctes = list(cte_names)
    for name in ctes:
        if not isinstance(name, str) or not name:
            raise SqlSchemaError(f"CTE names must be non-empty strings, got {name!r}")
    columns = sorted({c for cols in tables.values() for c in cols})
    with open(grammar_path("sql.lark"), encoding="utf-8") as f:
        text = f.read()
    text = _replace_rule(text, "table_name", "TABLE_NAME" + (" | CTE_NAME" if ctes else ""))
    text = _replace_rule(text, "column_name", "COLUMN_NAME")
    text = _replace_rule(text, "literal", "NUMBER | STRING | DQ_STRING | BLOB | KEYWORD_LITERAL")
    if ctes:
        text = _replace_rule(text, "cte_name", "CTE_NAME")
    else:
        text = _replace_rule(text, "select_stmt",
                             "compound (_WS order_by)? (_WS limit)?")
        for rule in ("with_clause", "cte", "cte_name", "name_list"):
            text = re.sub(rf"^{rule}:.*\n", "", text, flags=re.MULTILINE)
    header = ["", f"// ---- schema: {len(tables)} tables, {len(columns)} distinct columns ----",
              f"TABLE_NAME: {_lark_regex(_names_regex(tables))}",
              f"COLUMN_NAME: {_lark_regex(_names_regex(columns))}",
              # SQLite reads a double-quoted word that names no column as a string
              """DQ_STRING: /"(?:[^"]|"")*"/"""]
    if ctes:
        header.append(f"CTE_NAME: {_lark_regex(_names_regex(ctes))}")
    return text + "\n".join(header) + "\n"
