"""Byte DFAs of the lexemes every JSON Schema uses, built directly.

Nearly every compiled schema has a JSON string terminal, a key terminal (any
canonical string but the declared names, then ``:``) and a number or integer
terminal. Through the general regex pipeline (parse, character DFA, UTF-8
expansion, minimisation) each took 0.1-0.4 ms, cold: together about a third of
the compile time of a typical MaskBench schema. Here their automata are written
down state by state once, at import; per compile only the restriction to the
vocabulary's alphabet remains: zeroing the other columns when the alphabet has
the bytes that keep every state live (``_witness_bytes``, the usual case: every
state still reaches acceptance, so nothing needs trimming), else the pipeline's
trim-and-minimise kernel. 13-36 us each, cold.

:func:`builtin_dfa` recognises the exact patterns :mod:`constrain.frontends.json_schema.compiler`
emits for these lexemes and returns ``None`` for anything else, which then takes
the regex pipeline; the tests check every builder against that pipeline
(``same_language``), so the fast path cannot change a language.
"""

from __future__ import annotations

import re

import numpy as np

from constrain.cfg.terminal_kernels import TERMINAL_LEXEME, write_terminal_table
from constrain.automata.byte_dfa import ByteDFA, trim_and_minimize
from constrain.automata.json_encoding import (CANON_ANY, JSON_CHAR_ANY, JSON_CODEPOINT, JSON_INTEGER,
                                  JSON_NUMBER)

_HEX = b"0123456789abcdefABCDEF"
_DIGITS = b"0123456789"


class _Table:
    """A byte DFA being written: state 0 dead, 1 start."""

    def __init__(self, n: int):
        self.t = np.zeros((n, 256), dtype=np.int32)
        self.acc = np.zeros(n, dtype=np.bool_)

    def span(self, s: int, lo: int, hi: int, to: int) -> None:
        self.t[s, lo:hi + 1] = to

    def on(self, s: int, chars: bytes, to: int) -> None:
        self.t[s, list(chars)] = to

    def utf8(self, s: int, first: int, back: int) -> None:
        """From ``s``, any non-ASCII character of valid UTF-8 (no surrogates, at
        most U+10FFFF) back to ``back``, through states ``first``..``first + 6``."""
        c1, c2, c3, e0, ed, f0, f4 = range(first, first + 7)
        self.span(s, 0xC2, 0xDF, c1)
        self.span(s, 0xE0, 0xE0, e0)
        self.span(s, 0xE1, 0xEC, c2)
        self.span(s, 0xED, 0xED, ed)
        self.span(s, 0xEE, 0xEF, c2)
        self.span(s, 0xF0, 0xF0, f0)
        self.span(s, 0xF1, 0xF3, c3)
        self.span(s, 0xF4, 0xF4, f4)
        self.span(c1, 0x80, 0xBF, back)
        self.span(c2, 0x80, 0xBF, c1)
        self.span(c3, 0x80, 0xBF, c2)
        self.span(e0, 0xA0, 0xBF, c1)
        self.span(ed, 0x80, 0x9F, c1)
        self.span(f0, 0x90, 0xBF, c2)
        self.span(f4, 0x80, 0x8F, c2)


def _u_escape(on, bs: int, states, done: int) -> None:
    """Write, with ``on(state, bytes, target)``, the ``\\u`` escape of
    ``json_encoding._U_ESCAPE`` from ``bs`` (after the backslash) to ``done``
    through the 11 ``states``: after ``u``; one, two, three hex digits read;
    after ``d``; a high surrogate's third and fourth digits; then the low one's
    backslash, ``u``, ``d`` and ``[c-f]``, before its last two digits."""
    u, hex1, hex2, hex3, d1, hi2, hi3, pair0, pair1, pair2, pair3 = states
    on(bs, b"u", u)
    on(u, b"0123456789abcABCefEF", hex1)
    on(u, b"dD", d1)
    on(hex1, _HEX, hex2)
    on(hex2, _HEX, hex3)
    on(hex3, _HEX, done)
    on(d1, b"01234567", hex2)
    on(d1, b"89abAB", hi2)
    on(hi2, _HEX, hi3)
    on(hi3, _HEX, pair0)
    on(pair0, b"\\", pair1)
    on(pair1, b"u", pair2)
    on(pair2, b"dD", pair3)
    on(pair3, b"cdefCDEF", hex2)


def _string_table(canonical: bool, at_least_one: bool) -> _Table:
    """``"`` + a character class star (plus) + ``"``: the closing quote is the
    last state, where a tail goes on."""
    # 1 start, 2 body, 3 body before the first character (``+`` only), 4 after
    # "\\", then the states inside \u escapes, the UTF-8 states, the closing quote
    # and the tail
    body, first, bs, esc = 2, (3 if at_least_one else 2), 4, 5
    utf0 = esc + (5 if canonical else 11)
    close = utf0 + 7
    tb = _Table(close + 1)
    tb.on(1, b'"', first)
    tb.span(body, 0x20, 0x7F, body)
    tb.on(body, b"\\", bs)
    tb.on(body, b'"', close)
    tb.utf8(body, utf0, body)
    if canonical:
        # \u00 then 0[0-7bef] | 1[0-9a-f]: the controls with no short escape
        u, u0, u00, u000, u001 = range(esc, esc + 5)
        tb.on(bs, b'bfnrt"\\', body)
        tb.on(bs, b"u", u)
        tb.on(u, b"0", u0)
        tb.on(u0, b"0", u00)
        tb.on(u00, b"0", u000)
        tb.on(u00, b"1", u001)
        tb.on(u000, b"01234567bef", body)
        tb.on(u001, b"0123456789abcdef", body)
    else:
        tb.on(bs, b'"\\/bfnrt', body)
        _u_escape(tb.on, bs, range(esc, esc + 11), body)
    if at_least_one:
        tb.t[first] = tb.t[body]
        tb.t[first, ord('"')] = 0
    return tb


def _number_table(integer: bool) -> _Table:
    """A JSON number, or its integer part."""
    # 1 start, 2 after "-", 3 "0", 4 [1-9][0-9]*, 5 after ".", 6 fraction digits,
    # 7 after "e", 8 after the exponent's sign, 9 exponent digits
    tb = _Table(10)
    for s in (1, 2):
        tb.on(s, b"0", 3)
        tb.on(s, b"123456789", 4)
    tb.on(1, b"-", 2)
    tb.on(4, _DIGITS, 4)
    tb.acc[[3, 4]] = True
    if not integer:
        for s in (3, 4):
            tb.on(s, b".", 5)
        tb.on(5, _DIGITS, 6)
        tb.on(6, _DIGITS, 6)
        for s in (3, 4, 6):
            tb.on(s, b"eE", 7)
        tb.on(7, b"+-", 8)
        tb.on(7, _DIGITS, 9)
        tb.on(8, _DIGITS, 9)
        tb.on(9, _DIGITS, 9)
        tb.acc[[6, 9]] = True
    return tb


# a length-bounded string ('"' + JSON_CODEPOINT{lo,hi} + '"'): one layer of 20
# states per character read -- B (between characters), then the states inside a
# backslash escape (a surrogate pair's two escapes are one character, as Python's
# json counts it) and inside a multi-byte UTF-8 character; NEXT is the next
# layer's B. Through the regex pipeline, maxLength 2048 took 1.5 s.
(_B, _BS, _U, _D, _H1, _H2, _H3, _C1, _C2, _C3, _E0, _ED, _F0, _F4,
 _HI2, _HI3, _P0, _P1, _P2, _P3) = range(20)
_LAYER = 20
#: the states of one character counted in a length-bounded string (its layer)
LAYER = _LAYER
_NEXT = _LAYER


def _codepoint_layer() -> np.ndarray:
    """``[14, 256]`` local targets of one layer (-1 dead; B's ``"`` is dead
    here: the caller closes the string where the length allows it)."""
    blk = np.full((_LAYER, 256), -1, dtype=np.int32)

    def span(s, lo, hi, to):
        blk[s, lo:hi + 1] = to

    def on(s, chars, to):
        blk[s, list(chars)] = to

    span(_B, 0x20, 0x7F, _NEXT)
    on(_B, b'"', -1)
    on(_B, b"\\", _BS)
    for lo, hi, to in ((0xC2, 0xDF, _C1), (0xE0, 0xE0, _E0), (0xE1, 0xEC, _C2),
                       (0xED, 0xED, _ED), (0xEE, 0xEF, _C2), (0xF0, 0xF0, _F0),
                       (0xF1, 0xF3, _C3), (0xF4, 0xF4, _F4)):
        span(_B, lo, hi, to)
    span(_C1, 0x80, 0xBF, _NEXT)
    span(_C2, 0x80, 0xBF, _C1)
    span(_C3, 0x80, 0xBF, _C2)
    span(_E0, 0xA0, 0xBF, _C1)
    span(_ED, 0x80, 0x9F, _C1)  # no surrogates
    span(_F0, 0x90, 0xBF, _C2)
    span(_F4, 0x80, 0x8F, _C2)
    on(_BS, b'"\\/bfnrt', _NEXT)
    _u_escape(on, _BS, (_U, _H1, _H2, _H3, _D, _HI2, _HI3, _P0, _P1, _P2, _P3), _NEXT)
    return blk


_CP_LAYER = _codepoint_layer()
#: one character's layer, as ``terminal_kernels.write_bounded`` takes it
CP_LAYER = _CP_LAYER


_CP_LIVE = np.nonzero(_CP_LAYER >= 0)  # (state, byte) of the live entries
_CP_TARGET = _CP_LAYER[_CP_LIVE]


def bounded_string_size(lo: int, hi: int | None, tail: bytes) -> int:
    """The number of states :func:`write_bounded_string` writes."""
    layers = lo if hi is None else hi
    return 2 + _LAYER * layers + (_LAYER if hi is None else 1) + 1 + len(tail)


def bounded_template_size(lo: int, hi: int, tail: bytes) -> int:
    """The rows ``terminal_kernels.write_bounded`` writes for the same string
    (``hi`` not None): the dead and start rows, one layer for the characters
    before ``lo`` (if any), one for those from ``lo`` on (if any), the
    position at the bound, the closing quote and the tail."""
    return 2 + _LAYER * ((1 if lo > 0 else 0) + (1 if hi > lo else 0)) + 2 + len(tail)


def write_bounded_string(t: np.ndarray, acc: np.ndarray, lo: int, hi: int | None,
                         tail: bytes) -> None:
    """Write ``"`` + ``JSON_CODEPOINT{lo,hi}`` + ``"`` + ``tail`` (``hi`` None: no
    upper bound), over every byte, into the zeroed ``t`` and ``acc`` of
    :func:`bounded_string_size` rows. Only the live entries are written (~300
    of a layer's 3,584): tables of thousands of layers are mostly zeros."""
    layers = lo if hi is None else hi
    last = 2 + _LAYER * layers  # the B after the last full layer
    close = last + (_LAYER if hi is None else 1)
    t[1, ord('"')] = 2
    k, b = _CP_LIVE
    if layers:
        base = 2 + _LAYER * np.arange(layers, dtype=np.int32)[:, None]
        t[base + k, b] = base + _CP_TARGET
    if hi is None:  # the last B loops: NEXT is itself
        t[last + k, b] = last + np.where(_CP_TARGET == _NEXT, 0, _CP_TARGET)
    t[2 + _LAYER * np.arange(lo, layers), ord('"')] = close
    t[last, ord('"')] = close
    for i, c in enumerate(tail):
        t[close + i, c] = close + i + 1
    acc[close + len(tail)] = True


def bounded_string_table(lo: int, hi: int | None, tail: bytes) -> tuple[np.ndarray, np.ndarray]:
    """``(transitions, accepting)`` of :func:`write_bounded_string`."""
    n = bounded_string_size(lo, hi, tail)
    t = np.zeros((n, 256), dtype=np.int32)
    acc = np.zeros(n, dtype=np.bool_)
    write_bounded_string(t, acc, lo, hi, tail)
    return t, acc


def _witness_bytes(t: np.ndarray, acc: np.ndarray) -> np.ndarray:
    """Bytes such that, when the alphabet has all of them, every state keeps a
    path to acceptance: the union of one shortest such path per state."""
    n = t.shape[0]
    done = acc.copy()
    done[0] = False
    need: set[int] = set()
    while True:
        grown = []
        for s in range(1, n):
            if not done[s]:
                hit = np.flatnonzero(done[t[s]])
                if hit.size:
                    need.add(int(hit[0]))
                    grown.append(s)
        if not grown:
            break
        done[grown] = True
    return np.asarray(sorted(need), dtype=np.int64)


# written once, at import, with the bytes that keep every state alive: over an
# alphabet holding them, restricting a table is zeroing the other columns (one
# numpy operation); only other alphabets pay for trim_and_minimize (10-50 us cold)
_STRINGS = {(char, plus): _string_table(char == CANON_ANY, plus)
            for char in (JSON_CHAR_ANY, CANON_ANY) for plus in (False, True)}
_NUMBERS = {integer: _number_table(integer) for integer in (False, True)}
for _tb in (*_STRINGS.values(), *_NUMBERS.values()):
    _acc = _tb.acc.copy()
    if not _acc.any():  # a string table: its closing quote is where the tail starts
        _acc[-1] = True
    _tb.witness = _witness_bytes(_tb.t, _acc).astype(np.uint8).tobytes()
# every kind of state of a bounded string: before the minimum length, between it
# and the maximum, and in an unbounded tail
_BOUNDED_WITNESS = np.union1d(_witness_bytes(*bounded_string_table(1, 2, b"")),
                              _witness_bytes(*bounded_string_table(1, None, b""))
                              ).astype(np.uint8).tobytes()
_BOUNDED_HEAD = '"' + JSON_CODEPOINT + "{"
_BOUNDS = re.compile(r"\{(\d+)(?:(,)(\d*))?\}")


def _bounded(pattern: str, literal_tail, max_states: int):
    """``(lo, hi, tail bytes)`` of a length-bounded string terminal, or None."""
    if not pattern.startswith(_BOUNDED_HEAD):
        return None
    m = _BOUNDS.match(pattern, len(_BOUNDED_HEAD) - 1)
    if m is None or pattern[m.end():m.end() + 1] != '"':
        return None
    lo = int(m.group(1))
    hi = lo if m.group(2) is None else (int(m.group(3)) if m.group(3) else None)
    if hi is not None and hi < lo:
        return None
    rest = pattern[m.end() + 1:]
    tail = literal_tail(rest) if rest else ""
    if tail is None or _LAYER * max(lo, hi or 0) + 20 > max_states:
        return None  # the regex pipeline reports what is too large
    return lo, hi, tail.encode("utf-8")


_STRING_HEADS = tuple(('"' + char + ("+" if plus else "*") + '"', char, plus)
                      for char, plus in _STRINGS)


# the string and number tables, stacked: a lexeme is rows of it (and a tail),
# so that TerminalAutomata can write every lexeme of a grammar in one kernel
LEXEME_ROWS = np.concatenate([tb.t for tb in (*_STRINGS.values(), *_NUMBERS.values())])
LEXEME_ACCEPTING = np.concatenate([tb.acc for tb in (*_STRINGS.values(), *_NUMBERS.values())])
_row = 0
for _tb in (*_STRINGS.values(), *_NUMBERS.values()):
    _tb.row0 = _row
    _row += _tb.t.shape[0]
LEXEME_ROWS.flags.writeable = False
LEXEME_ACCEPTING.flags.writeable = False
_EVERY_BYTE = np.ones(256, dtype=np.bool_)


class LexemeTable:
    """A JSON lexeme's automaton over every byte, ready to be written into
    ``rows`` zeroed rows of a table. Either rows ``row0:row0 + k`` of
    :data:`LEXEME_ROWS` then a chain spelling ``tail`` from the last of them
    (``string``: that last row is a closing quote, and the chain's end
    accepts; else the rows' own accepting states do), or, when ``bounded`` is
    ``(lo, hi)``, a length-bounded string (:func:`write_bounded_string`).
    :class:`~constrain.cfg.lexer.TerminalAutomata` writes the former straight into
    its stacked table, all of a grammar's at once; :func:`builtin_dfa` into a
    table of its own."""

    __slots__ = ("rows", "_need", "tail", "row0", "k", "string", "bounded")

    def __init__(self, rows: int, need: np.ndarray, tail: bytes, *, row0: int = 0, k: int = 0,
                 string: bool = False, bounded: tuple | None = None):
        self.rows, self._need, self.tail = rows, need, tail
        self.row0, self.k, self.string, self.bounded = row0, k, string, bounded

    def lives_on(self, alphabet: np.ndarray | bytes) -> bool:
        """Whether every state stays live over ``alphabet`` (256 booleans, or
        their ``tobytes()``): it has the lexeme's witness bytes and its tail's,
        so that restricting the table to it is zeroing the other bytes'
        columns."""
        key = alphabet if isinstance(alphabet, bytes) else alphabet.tobytes()
        # each byte read through the alphabet: a 0 is a byte it lacks (bytes
        # operations, not numpy's: this runs on a cold cache once per lexeme)
        return 0 not in self._need.translate(key) and 0 not in self.tail.translate(key)

    def write(self, t: np.ndarray, acc: np.ndarray) -> None:
        """Fill the zeroed ``t[:rows]`` and ``acc[:rows]`` (local states: 0 dead,
        1 start)."""
        if self.bounded is not None:
            write_bounded_string(t, acc, *self.bounded, self.tail)
            return
        # the one operation of TerminalAutomata's kernel, over every byte
        op = np.array([[TERMINAL_LEXEME, 0, self.rows, self.row0, self.k, 0,
                        len(self.tail), int(self.string), 0, 0, 0]], dtype=np.int64)
        write_terminal_table(t, acc, np.empty((self.rows, 3), dtype=np.int32),
                             np.array([0, self.rows], dtype=np.int64), np.ones(1, dtype=np.bool_),
                             op, np.frombuffer(self.tail, dtype=np.uint8),
                             np.zeros(0, dtype=np.int64), LEXEME_ROWS, LEXEME_ACCEPTING,
                             _EVERY_BYTE, CP_LAYER)


def _with_tail(tb: _Table, tail: bytes) -> LexemeTable:
    """A string table followed by a chain spelling ``tail`` from its closing
    quote, accepting at the end."""
    k = tb.t.shape[0]
    return LexemeTable(k + len(tail), tb.witness, tail, row0=tb.row0, k=k, string=True)


def _number(tb: _Table) -> LexemeTable:
    k = tb.t.shape[0]
    return LexemeTable(k, tb.witness, b"", row0=tb.row0, k=k)


def _bounded_string(lo: int, hi: int | None, tail: bytes) -> LexemeTable:
    return LexemeTable(bounded_string_size(lo, hi, tail), _BOUNDED_WITNESS, tail, bounded=(lo, hi))


def _lexeme(pattern: str, literal_tail, max_states: int) -> LexemeTable | None:
    """The :class:`LexemeTable` of ``pattern`` when it is one of the JSON lexemes
    above (``literal_tail(text)`` reads a string terminal's tail: the one
    string a regex matches, or ``None``); else ``None``."""
    if pattern == JSON_NUMBER or pattern == JSON_INTEGER:
        return _number(_NUMBERS[pattern == JSON_INTEGER])
    if not pattern.startswith('"(?:'):
        return None
    bounded = _bounded(pattern, literal_tail, max_states)
    if bounded is not None:
        return _bounded_string(*bounded)
    for head, char, plus in _STRING_HEADS:
        if pattern.startswith(head):
            rest = pattern[len(head):]
            tail = literal_tail(rest) if rest else ""
            return None if tail is None else _with_tail(_STRINGS[char, plus], tail.encode("utf-8"))
    return None


def builtin_template(pattern: str, alphabet: np.ndarray | bytes, literal_tail,
                     max_states: int = 50_000) -> LexemeTable | None:
    """The :class:`LexemeTable` of ``pattern`` when it is one of the JSON
    lexemes above and ``alphabet`` (256 booleans, or their ``tobytes()``)
    keeps every state of it live; else ``None``. Restricted to ``alphabet``,
    the automaton is the table with the other bytes' columns zeroed: the
    caller writes it where it wants it (``TerminalAutomata``: all of a
    grammar's lexemes in one kernel, restricted as they are copied)."""
    lex = _lexeme(pattern, literal_tail, max_states)
    return lex if lex is not None and lex.lives_on(alphabet) else None


def builtin_dfa(pattern: str, alphabet: np.ndarray, literal_tail,
                max_states: int = 50_000) -> ByteDFA | None:
    """The byte DFA of ``pattern`` over ``alphabet`` when it is one of the JSON
    lexemes above; else ``None``. Every state is live; states the alphabet
    cannot reach may remain (an alphabet on which some state dies gets the
    pipeline's trim-and-minimise)."""
    lex = _lexeme(pattern, literal_tail, max_states)
    if lex is None:
        return None
    trans = np.zeros((lex.rows, 256), dtype=np.int32)
    acc = np.zeros(lex.rows, dtype=np.bool_)
    lex.write(trans, acc)
    if lex.lives_on(alphabet):
        trans[:, ~alphabet] = 0
        return ByteDFA(trans, acc)
    return trim_and_minimize(ByteDFA(trans, acc), alphabet=alphabet)
