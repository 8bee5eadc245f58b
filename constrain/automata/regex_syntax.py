"""Python regex syntax → the regex IR.

The language of a pattern is what ``re.fullmatch(pattern, text)`` accepts. To keep
that exact, parsing is done by Python's own parser (``re._parser``, the one
``re.compile`` uses), and the character classes by Python's own matcher (see
:func:`constrain.automata.charset.oracle_charset`). This module turns that parse tree into
a small IR of character sets, concatenation, alternation, counted repetition and
zero-width assertions (anchors, word boundaries, lookahead and lookbehind) and
atomic groups, and rejects what no finite automaton can recognise (backreferences,
conditionals) with an error that names the offset in the pattern.

Limits (each raises :class:`~constrain.errors.RegexTooLargeError`):

* groups nested more than :data:`MAX_DEPTH` (100) deep, checked on the source
  before any parser runs (Python's own parser, and every pass after it, recurse
  once per level);
* a repetition bound ``{m,n}`` above :data:`MAX_REPEAT` (10,000 by default);
* an expanded pattern of more than :data:`MAX_POSITIONS` character positions
  (100,000), counting every copy a counted repetition makes, over the whole
  pattern.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

try:  # Python 3.11+
    import re._constants as sre_c
    import re._parser as sre_parse
except ImportError:  # pragma: no cover - Python 3.10
    import sre_constants as sre_c  # type: ignore
    import sre_parse  # type: ignore

import _sre

import numpy as np

from constrain.automata.charset import (SRE_CATEGORY_PATTERNS, CharSet, sre_category,
                                        sre_class_intervals)
from constrain.cache import registry
from constrain.errors import RegexSyntaxError, RegexTooLargeError, UnsupportedRegexError

MAX_REPEAT = 10_000
MAX_POSITIONS = 100_000
MAX_DEPTH = 100

# -- IR ---------------------------------------------------------------------------


@dataclass(slots=True)
class Chars:
    """One character from a set."""

    charset: CharSet


def _one_way(node) -> bool:
    """Whether ``node`` matches a text in at most one way, consuming a fixed
    count of characters (a class, or classes in a row): then committing to an
    iteration's match changes nothing."""
    if isinstance(node, Chars):
        return True
    return isinstance(node, Concat) and all(isinstance(x, Chars) for x in node.items)


@dataclass(slots=True)
class Concat:
    items: tuple


@dataclass(slots=True)
class Alt:
    items: tuple


@dataclass(slots=True)
class Repeat:
    """``item`` repeated ``lo`` to ``hi`` times (``hi`` None: unbounded);
    ``lazy`` for ``*? +? ?? {m,n}?``, which denote the same language but are tried
    in the other order (it matters inside an :class:`Atomic` group)."""

    item: object
    lo: int
    hi: int | None
    lazy: bool = False


@dataclass(slots=True)
class Look:
    """A lookaround: ``body`` must match (``negate``: must not match) the text
    after this position (lookahead) or the ``width`` characters before it
    (lookbehind: Python requires a fixed width). The body sees the whole string:
    its own assertions look past its ends. ``offset``: where it starts in the
    source."""

    body: object
    behind: bool
    negate: bool
    width: int
    offset: int | None


@dataclass(slots=True)
class Atomic:
    """``(?>body)`` (and a possessive quantifier, ``X*+`` being ``(?>X*)``): the
    first match of ``body`` that Python's backtracking order finds at this
    position, given the whole rest of the string, and no other. ``offset``:
    where it starts in the source."""

    body: object
    offset: int | None


@dataclass(frozen=True, slots=True)
class Assert:
    """A zero-width assertion. ``kind`` is one of ``begin`` (``\\A``, ``^``),
    ``begin_line`` (``^`` under MULTILINE), ``end`` (``$``: end, or before a final
    newline), ``end_line`` (``$`` under MULTILINE), ``end_string`` (``\\Z``),
    ``boundary``/``non_boundary`` (``\\b``/``\\B``) with ``ascii`` telling which
    word characters count."""

    kind: str
    ascii: bool = False


EMPTY = Concat(())

# -- entry point ---------------------------------------------------------------------

_I, _M, _S, _A, _X, _L, _U = (
    sre_c.SRE_FLAG_IGNORECASE, sre_c.SRE_FLAG_MULTILINE, sre_c.SRE_FLAG_DOTALL,
    sre_c.SRE_FLAG_ASCII, sre_c.SRE_FLAG_VERBOSE, sre_c.SRE_FLAG_LOCALE,
    sre_c.SRE_FLAG_UNICODE,
)
_TYPE_FLAGS = _A | _L | _U


def _scoped_flags(flags: int, add: int, delete: int) -> int:
    """The flags inside ``(?add-delete:...)``: ``re``'s own rule
    (``re._compiler._combine_flags``), under which a scoped ``a``, ``u`` or
    ``L`` replaces the enclosing one (``(?u:\\w)`` inside ``(?a)`` is
    Unicode-wide)."""
    if add & _TYPE_FLAGS:
        flags &= ~_TYPE_FLAGS
    return (flags | add) & ~delete


def _class_flags(flags: int) -> int:
    """The flags a one-character class is evaluated under: case folding, and
    ASCII exactly when the Unicode flag is off (``re`` itself tests
    ``SRE_FLAG_UNICODE``, which the parser sets for every str pattern not marked
    ASCII)."""
    return (flags & _I) | (0 if flags & _U else _A)


#: the ``re`` flags a regex may be compiled with (``re.LOCALE`` is refused by
#: ``re`` itself for a str pattern)
SUPPORTED_FLAGS = re.IGNORECASE | re.MULTILINE | re.DOTALL | re.VERBOSE | re.ASCII | re.UNICODE


def check_flags(flags) -> int:
    """``flags`` as an ``int`` of :data:`SUPPORTED_FLAGS`, else
    :class:`~constrain.errors.UnsupportedRegexError` (``re.DEBUG`` printed the
    parse tree, ``re.TEMPLATE`` is a flag under which ``re`` refuses ``a*``,
    and an unknown bit or ``True`` was taken silently)."""
    if isinstance(flags, bool) or not isinstance(flags, int):  # (a RegexFlag is an int)
        raise UnsupportedRegexError(f"flags are re flags (re.I | re.A ...), not {flags!r}", "")
    other = int(flags) & ~int(SUPPORTED_FLAGS)  # (a negative value has such bits)
    if other:
        shown = re.RegexFlag(other) if 0 < other < (1 << 10) else int(flags)
        raise UnsupportedRegexError(
            f"the flags {shown!r} are not supported (re.I, re.M, re.S, re.X, re.A and re.U are)",
            "")
    return int(flags)


def parse_regex(pattern: str, *, flags: int = 0, max_repeat: int = MAX_REPEAT,
                max_positions: int = MAX_POSITIONS):
    """Parse ``pattern`` (Python ``re`` syntax, with ``re`` ``flags`` such as
    ``re.ASCII | re.IGNORECASE``) into the regex IR.

    Raises:
        RegexSyntaxError: the pattern is not valid Python regex syntax.
        UnsupportedRegexError: backreferences and conditionals (no finite
            automaton recognises them); nested atomic groups (or possessive
            quantifiers) inside an atomic group (regular, but not supported).
        RegexTooLargeError: a size limit was exceeded.
    """
    if not isinstance(pattern, str):
        raise RegexSyntaxError(
            f"a regex must be a str, not {type(pattern).__name__}", str(pattern))
    if len(pattern) >= _CACHED_LENGTH:
        # a long pattern is parsed more than once (a Lark terminal: checked when
        # the grammar is loaded, compiled after); re's parser is slow on them
        # (~0.1 s for SQL's 12k-character name regex). IR nodes are never mutated
        return _parse_long(pattern, int(flags), max_repeat, max_positions)
    return _parse(pattern, flags, max_repeat, max_positions)


_CACHED_LENGTH = 256


@registry.register
@functools.lru_cache(maxsize=32)
def _parse_long(pattern: str, flags: int, max_repeat: int, max_positions: int):
    return _parse(pattern, flags, max_repeat, max_positions)


def _parse(pattern: str, flags: int, max_repeat: int, max_positions: int):
    _check_depth(pattern, bool(flags & _X) or _LEADING_X.match(pattern) is not None)
    if not flags:
        node = _parse_simple(pattern, max_repeat, max_positions)
        if node is not None:
            return node
    try:
        # Python's own parser: the same tree and syntax errors as re.compile
        # (the checks re.compile adds, on lookbehind widths, are made below)
        tree = sre_parse.parse(pattern, int(flags))
    except re.error as e:
        raise RegexSyntaxError(e.msg, pattern, e.pos) from None
    except OverflowError as e:
        # a count past re's own (2**32 - 1): past max_repeat too, so told as
        # any other count past it, at its quantifier
        big = next((c for c in _scan(pattern, bool(flags & _X)) if c[0] == "repeat"
                    and max(c[2], c[3] or 0) > max_repeat), None)
        if big is None:
            raise RegexSyntaxError(str(e), pattern, None) from None
        raise RegexTooLargeError(
            f"repetition bound {max(big[2], big[3] or 0)} exceeds the limit of {max_repeat} "
            f"(pass max_repeat= to raise it)", pattern, big[1]) from None
    except (RecursionError, ValueError, TypeError) as e:
        raise RegexSyntaxError(str(e), pattern, None) from None
    flags = tree.state.flags
    # source offsets are only needed for error messages: scanned on demand
    constructs = _LazyScan(pattern, bool(flags & _X))
    conv = _Converter(pattern, constructs, max_repeat)
    node = conv.subpattern(tree, flags)
    if "{" in pattern or 2 * len(pattern) > max_positions:
        # without counted repetition the expansion is at most twice the source
        _positions(node, pattern, constructs, max_positions)
    return node


#: global inline flags at the start of a pattern (where Python takes them)
#: that turn on verbose mode, ``(?x)``, ``(?ix)``...
_LEADING_X = re.compile(r"\(\?[aiLmsux]*x[aiLmsux]*\)")


def _check_depth(p: str, verbose: bool = False) -> None:
    """Refuse groups nested deeper than :data:`MAX_DEPTH`, at the offset of the
    first one too deep: Python's parser recurses twice per level and would
    raise ``RecursionError`` somewhere past 450 levels, as would the passes
    after it. Escapes and classes are skipped, and with ``verbose`` (``re.X``,
    or ``(?x)`` at the start) the comments from ``#`` to the end of the line,
    as Python's parser skips them. A verbose group that turns the mode on
    for part of the pattern only (``(?x:...)``) has its comments counted,
    which can only refuse early, never let a deep pattern through."""
    if p.count("(") <= MAX_DEPTH:
        return
    depth = 0
    i, n = 0, len(p)
    while i < n:
        c = p[i]
        if c == "\\":
            i += 2
            continue
        if c == "[":
            i = _class_end(p, i)
        elif c == "#" and verbose:
            end = p.find("\n", i)
            i = n if end < 0 else end
        elif c == "(":
            depth += 1
            if depth > MAX_DEPTH:
                raise RegexTooLargeError(
                    f"groups are nested more than {MAX_DEPTH} deep", p, i)
        elif c == ")":
            depth = max(depth - 1, 0)
        i += 1


def _class_end(p: str, i: int) -> int:
    """The index of the ``]`` that closes the class opening at ``p[i]`` (past
    the end if none): a ``]`` first in the class, or escaped, is a member."""
    n = len(p)
    i += 1
    if i < n and p[i] == "^":
        i += 1
    if i < n and p[i] == "]":
        i += 1
    while i < n and p[i] != "]":
        i += 2 if p[i] == "\\" else 1
    return i


# -- fast path for the common syntax ---------------------------------------------------

_SIMPLE_QUANT = re.compile(r"\{([0-9]+)(?:(,)([0-9]*))?\}")
_PUNCT = frozenset("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~ ")
_NOT_LITERAL = frozenset(".^$[](){}|*+?\\")
_QUANTIFIERS = frozenset("*+?{")
_DOUBLED_WARN = frozenset("-&~|")  # doubled in a class, re warns of set operations


def _parse_simple(p: str, max_repeat: int, max_positions: int):
    """The IR of ``p`` (no flags) when it uses only literals, escaped
    punctuation, code escapes (``\\x``, ``\\u``, ``\\U``, ``\\n`` ...), ``[...]`` classes of literals and ranges, groups ``(...)`` and
    ``(?:...)``, ``|`` and the quantifiers ``* + ? {m} {m,} {m,n}`` (lazy or not)
    within the limits; else ``None`` and :func:`parse_regex` uses ``re``'s parser,
    which then also reports any error. For short patterns ``re``'s parser and the
    tree conversion were the largest fixed cost of a compilation.

    Any construct whose meaning in ``re`` is not plain (``.``, anchors, ``\\d`` and
    other letter escapes, stray ``] } )``, a ``{`` that is not a quantifier,
    ``[]...]``, nested ``[``, doubled ``-&~|`` in a class) gives ``None``, as does
    any syntax error, so the result equals the ``re``-parsed IR's language."""
    n = len(p)
    i = 0
    memo = {}      # source text of a literal or class -> its node (repeats are common)
    outer = []     # enclosing groups: (branches, seq)
    branches = []  # finished alternatives of the current group: (node, size)
    seq = []       # items of the current alternative: [node, size, quantified]
    while i < n:
        c = p[i]
        if c not in _NOT_LITERAL:
            node = memo.get(c)
            if node is None:
                node = memo[c] = _literal_node(ord(c), 0)
            seq.append([node, 1, False])
            i += 1
        elif c == "\\":
            if i + 1 >= n:
                return None
            if p[i + 1] in _PUNCT:
                code, i = ord(p[i + 1]), i + 2
            else:
                code, i = _code_escape(p, i)
                if code < 0:
                    return None
            c = chr(code)
            node = memo.get(c)
            if node is None:
                node = memo[c] = _literal_node(code, 0)
            seq.append([node, 1, False])
        elif c == "[":
            end = p.find("]", i + 2)
            node = memo.get(p[i:end + 1]) if end > 0 else None
            if node is not None:
                seq.append([node, 1, False])
                i = end + 1
                continue
            j = i + 1
            negate = j < n and p[j] == "^"
            if negate:
                j += 1
            if j >= n or p[j] == "]":
                return None
            intervals = []
            while True:
                if j >= n:
                    return None
                ch = p[j]
                if ch == "]":
                    break
                if ch == "[" or (ch in _DOUBLED_WARN and j + 1 < n and p[j + 1] == ch):
                    return None
                if ch == "\\":
                    if j + 1 >= n:
                        return None
                    if p[j + 1] in _PUNCT:
                        lo = ord(p[j + 1])
                        j += 2
                    else:
                        lo, j = _code_escape(p, j)
                        if lo < 0:
                            return None
                else:
                    lo = ord(ch)
                    j += 1
                if j + 1 < n and p[j] == "-" and p[j + 1] != "]":
                    ch = p[j + 1]
                    if ch in "[-":
                        return None
                    if ch == "\\":
                        if j + 2 >= n:
                            return None
                        if p[j + 2] in _PUNCT:
                            hi = ord(p[j + 2])
                            j += 3
                        else:
                            hi, j = _code_escape(p, j + 1)
                            if hi < 0:
                                return None
                    else:
                        hi = ord(ch)
                        j += 2
                    if hi < lo:
                        return None
                    intervals.append((lo, hi))
                else:
                    intervals.append((lo, lo))
            cs = CharSet(intervals)
            node = memo[p[i:j + 1]] = Chars(cs.complement() if negate else cs)
            seq.append([node, 1, False])
            i = j + 1
        elif c == "(":
            if p.startswith("?", i + 1):
                if not p.startswith(":", i + 2):
                    return None
                i += 3
            else:
                i += 1
            outer.append((branches, seq))
            branches, seq = [], []
        elif c == "|":
            branches.append(_simple_seq(seq))
            seq = []
            i += 1
        elif c == ")":
            if not outer:
                return None
            branches.append(_simple_seq(seq))
            node, size = _simple_alt(branches)
            branches, seq = outer.pop()
            seq.append([node, size, False])
            i += 1
        elif c in _QUANTIFIERS:
            if not seq or seq[-1][2]:
                return None  # nothing to repeat, or a repeated repetition
            if c == "{":
                m = _SIMPLE_QUANT.match(p, i)
                if m is None:
                    return None
                lo = int(m.group(1))
                hi = lo if m.group(2) is None else (int(m.group(3)) if m.group(3) else None)
                if lo > max_repeat or (hi is not None and (hi < lo or hi > max_repeat)):
                    return None
                i = m.end()
            else:
                lo, hi = (0, None) if c == "*" else (1, None) if c == "+" else (0, 1)
                i += 1
            lazy = i < n and p[i] == "?"
            if lazy:
                i += 1
            elif i < n and p[i] == "+":
                return None
            last = seq[-1]
            size = last[1] * (hi if hi is not None else max(lo, 1))
            if size > max_positions:
                return None
            seq[-1] = [Repeat(last[0], lo, hi, lazy), size, True]
        else:
            return None
    if outer:
        return None
    branches.append(_simple_seq(seq))
    node, size = _simple_alt(branches)
    # the whole pattern's size, not only each repetition's: past the limit
    # re's parser and _positions report it with an offset
    return node if size <= max_positions else None


_HEX = frozenset("0123456789abcdefABCDEF")
_CODE_WIDTH = {"x": 2, "u": 4, "U": 8}
_CONTROL_ESCAPES = {"n": 10, "t": 9, "r": 13, "f": 12, "v": 11}


def _code_escape(p: str, i: int) -> tuple[int, int]:
    """The code point of the escape at ``p[i]`` (a backslash) when it is one whose
    meaning is the same inside and outside a class (``\\xHH``, ``\\uHHHH``,
    ``\\UHHHHHHHH``, ``\\n \\t \\r \\f \\v``), and the index after it;
    ``(-1, i)`` otherwise (the caller falls back to ``re``'s parser). Generated
    patterns (JSON strings, a schema's key exclusions) are full of these."""
    k = p[i + 1] if i + 1 < len(p) else ""
    width = _CODE_WIDTH.get(k)
    if width is None:
        code = _CONTROL_ESCAPES.get(k)
        return (code, i + 2) if code is not None else (-1, i)
    digits = p[i + 2:i + 2 + width]
    if len(digits) != width or not _HEX.issuperset(digits):
        return -1, i
    code = int(digits, 16)
    if code > 0x10FFFF:
        return -1, i
    return code, i + 2 + width


def _simple_seq(seq: list) -> tuple:
    items = [it[0] for it in seq if not (type(it[0]) is Concat and not it[0].items)]
    size = sum(it[1] for it in seq)
    return (items[0] if len(items) == 1 else Concat(tuple(items))), size


def _simple_alt(branches: list) -> tuple:
    if len(branches) == 1:
        return branches[0]
    return Alt(tuple(b[0] for b in branches)), sum(b[1] for b in branches)


class _LazyScan:
    def __init__(self, pattern: str, verbose: bool):
        self.pattern, self.verbose, self._items = pattern, verbose, None

    def __iter__(self):
        if self._items is None:
            self._items = _scan(self.pattern, self.verbose)
        return iter(self._items)


# -- conversion -------------------------------------------------------------------

_NEWLINE = CharSet.of(10)


def _u(cp: int) -> str:
    return f"\\U{cp:08x}"


class _Converter:
    """The IR of a parse tree of ``re._parser``. Where a construct needs its
    source offset (an error, a lookaround's place), the k-th construct of a kind
    met in the tree is the k-th one of that kind the scan of the source found:
    the tree keeps the source order."""

    def __init__(self, pattern: str, constructs, max_repeat: int):
        self.pattern = pattern
        self.constructs = constructs
        self.max_repeat = max_repeat
        self._seen: dict[str, int] = {}
        #: the lookarounds and atomic groups being converted, innermost last:
        #: what they contain is restricted (see parse_regex)
        self._inside: list[str] = []

    def offset_of(self, kind: str, pred=lambda c: True) -> int | None:
        for c in self.constructs:
            if c[0] == kind and pred(c):
                return c[1]
        return None

    def next_offset(self, kind: str) -> int | None:
        """The source offset of the next construct of ``kind`` in tree order."""
        k = self._seen.get(kind, 0)
        self._seen[kind] = k + 1
        for c in self.constructs:
            if c[0] == kind:
                if k == 0:
                    return c[1]
                k -= 1
        return None

    def unsupported(self, kind: str, what: str):
        raise UnsupportedRegexError(
            f"{what} cannot be recognised by a finite automaton and is not supported",
            self.pattern, self.offset_of(kind))

    def subpattern(self, sub, flags: int):
        items = [self.item(op, av, flags) for op, av in sub]
        items = [i for i in items if not (type(i) is Concat and not i.items)]
        if len(items) == 1:
            return items[0]
        return Concat(tuple(items))

    def item(self, op, av, flags: int):
        if op is sre_c.LITERAL:
            return _literal_node(av, _class_flags(flags))
        if op is sre_c.NOT_LITERAL:
            return Chars(_literal_set(av, _class_flags(flags)).complement())
        if op is sre_c.ANY:
            full = CharSet.full()
            return Chars(full if flags & _S else full.difference(_NEWLINE))
        if op is sre_c.IN:
            return Chars(_class_set(av, _class_flags(flags)))
        if op is sre_c.BRANCH:
            return Alt(tuple(self.subpattern(s, flags) for s in av[1]))
        if op is sre_c.SUBPATTERN:
            _group, add, delete, sub = av
            return self.subpattern(sub, _scoped_flags(flags, add, delete))
        if op in (sre_c.MAX_REPEAT, sre_c.MIN_REPEAT):
            return self.repeat(av, flags, op is sre_c.MIN_REPEAT)
        if getattr(sre_c, "POSSESSIVE_REPEAT", None) is op:
            offset = self.next_offset("possessive")
            self.enter("atomic", "a possessive quantifier", offset)
            node = self.repeat(av, flags, False)
            self._inside.pop()
            if node.lo >= 2 and not _one_way(node.item):
                # re commits each iteration once it has matched: an iteration
                # that fails before the minimum is not retried by undoing the
                # one before ((?:a|ab){2}+ does not match "aba", though
                # (?>(?:a|ab){2}) does); past the minimum a failed iteration
                # ends the loop, as (?>x{0,n}) does
                rest = Repeat(node.item, 0, None if node.hi is None else node.hi - node.lo)
                return Concat((Atomic(node.item, offset),) * node.lo + (Atomic(rest, offset),))
            return Atomic(node, offset)
        if op is sre_c.AT:
            return self.at(av, flags)
        if op is sre_c.GROUPREF:
            self.unsupported("backref", "a backreference")
        if op is sre_c.GROUPREF_EXISTS:
            self.unsupported("conditional", "a conditional group (?(id)yes|no)")
        if op in (sre_c.ASSERT, sre_c.ASSERT_NOT):
            return self.look(av, flags, op is sre_c.ASSERT_NOT)
        if getattr(sre_c, "ATOMIC_GROUP", None) is op:
            offset = self.next_offset("atomic")
            self.enter("atomic", "an atomic group", offset)
            body = self.subpattern(av, flags)
            self._inside.pop()
            return Atomic(body, offset)
        raise UnsupportedRegexError(f"regex construct {op} is not supported", self.pattern)

    def enter(self, kind: str, what: str, offset: int | None) -> None:
        """Start converting the body of a lookaround or atomic group (``kind``
        ``ahead``, ``behind`` or ``atomic``), refusing the nestings no automaton
        here follows: an atomic group inside an atomic group."""
        if kind == "atomic" and "atomic" in self._inside:
            raise UnsupportedRegexError(
                f"{what} inside an atomic group (or possessive quantifier) is not supported",
                self.pattern, offset)
        self._inside.append(kind)

    def repeat(self, av, flags: int, lazy: bool) -> Repeat:
        lo, hi, sub = av
        hi = None if hi is sre_c.MAXREPEAT else int(hi)
        for bound in (lo, hi):
            if bound is not None and bound > self.max_repeat:
                raise RegexTooLargeError(
                    f"repetition bound {bound} exceeds the limit of {self.max_repeat} "
                    f"(pass max_repeat= to raise it)",
                    self.pattern,
                    self.offset_of("repeat", lambda c: bound in (c[2], c[3])))
        item = self.subpattern(sub, flags)
        # after the item: quantifiers follow what they repeat, so the source
        # order of quantifiers is the tree's postorder
        self.next_offset("repeat")
        return Repeat(item, int(lo), hi, lazy)

    def look(self, av, flags: int, negate: bool) -> Look:
        direction, sub = av
        behind = direction < 0
        offset = self.next_offset("lookbehind" if behind else "lookahead")
        width = 0
        if behind:
            lo, hi = sub.getwidth()
            if lo >= sre_c.MAXREPEAT:
                raise RegexSyntaxError("looks too much behind", self.pattern, offset)
            if lo != hi:  # re.compile's own check, which the parser leaves to it
                raise RegexSyntaxError("look-behind requires fixed-width pattern",
                                       self.pattern, offset)
            width = int(lo)
        self.enter("behind" if behind else "ahead",
                   "a lookbehind" if behind else "a lookahead", offset)
        body = self.subpattern(sub, flags)
        self._inside.pop()
        return Look(body, behind, negate, width, offset)

    def at(self, code, flags: int):
        ascii_words = not flags & _U
        if code is sre_c.AT_BEGINNING:
            return Assert("begin_line" if flags & _M else "begin")
        if code is sre_c.AT_BEGINNING_STRING:
            return Assert("begin")
        if code is sre_c.AT_END:
            return Assert("end_line" if flags & _M else "end")
        if code is sre_c.AT_END_STRING:
            return Assert("end_string")
        if code is sre_c.AT_BOUNDARY:
            return Assert("boundary", ascii_words)
        if code is sre_c.AT_NON_BOUNDARY:
            return Assert("non_boundary", ascii_words)
        raise UnsupportedRegexError(f"assertion {code} is not supported", self.pattern)


def nullable(node) -> bool:
    """Whether the IR ``node`` may match the empty string (assertions counted
    as satisfiable)."""
    t = type(node)
    if t is Chars:
        return False
    if t is Concat:
        return all(nullable(i) for i in node.items)
    if t is Alt:
        return any(nullable(i) for i in node.items)
    if t is Repeat:
        return node.lo == 0 or nullable(node.item)
    if t is Atomic:
        return nullable(node.body)
    return True  # Assert, Look


@registry.register
@functools.lru_cache(maxsize=1 << 16)
def _literal_node(cp: int, flags: int) -> Chars:
    # IR nodes are never mutated, so one node per literal can be shared
    return Chars(_literal_set(cp, flags))


def _literal_set(cp: int, flags: int) -> CharSet:
    if flags & _I:
        iscased = _sre.ascii_iscased if flags & _A else _sre.unicode_iscased
        if iscased(cp):
            # only cased characters can match a cased literal case-insensitively
            rx = re.compile(re.escape(chr(cp)), flags & (_I | _A))
            cased, _ = _cased(bool(flags & _A))
            return CharSet((c, c) for c in cased if rx.fullmatch(chr(c)))
    return CharSet.of(cp)


def _class_set(items, flags: int) -> CharSet:
    return _class_set_cached(tuple(items), flags)


@registry.register
@functools.lru_cache(maxsize=1 << 14)
def _class_set_cached(items: tuple, flags: int) -> CharSet:
    ascii_only = bool(flags & _A)
    intervals, negate = sre_class_intervals(
        items, lambda cat, _negated: sre_category(cat, ascii_only).intervals)
    cs = CharSet(intervals)
    if negate:
        cs = cs.complement()
    if flags & _I:
        # case-insensitivity changes the answer only for cased characters: an
        # uncased one matches iff it is in the class as written. The cased ones
        # (a few thousand) are asked of re itself, so the result stays exact.
        cased, cased_set = _cased(ascii_only)
        rx = re.compile(_class_text(items), flags & (_I | _A))
        hits = [c for c in cased if rx.fullmatch(chr(c))]
        cs = cs.difference(cased_set).union(CharSet((c, c) for c in hits))
    return cs


def _class_text(items) -> str:
    parts = []
    for op, av in items:
        if op is sre_c.NEGATE:
            parts.append("^")
        elif op is sre_c.LITERAL:
            parts.append(_u(av))
        elif op is sre_c.RANGE:
            parts.append(f"{_u(av[0])}-{_u(av[1])}")
        elif op is sre_c.CATEGORY:
            parts.append(SRE_CATEGORY_PATTERNS[av])
    return "[" + "".join(parts) + "]"


# two constants of this Python's Unicode database, so not a cache clear_caches()
# empties
@functools.lru_cache(maxsize=2)
def _cased(ascii_only: bool) -> tuple[list[int], CharSet]:
    """The scalar values that have case (per ``re``'s own test), as a list and a set."""
    if ascii_only:
        cps = [c for c in range(128) if _sre.ascii_iscased(c)]
    else:
        cps = _unicode_cased()
    return cps, CharSet((c, c) for c in cps)


def _unicode_cased() -> list[int]:
    """``[c for c in scalars if _sre.unicode_iscased(c)]`` (``c`` differs from
    its simple lower or upper case mapping), in ~18 ms instead of ~60-90: a
    block of code points whose ``str.lower()`` and ``str.upper()`` keep its
    length maps each character to one, the simple mapping but for final sigma's
    context (which still differs from the character), so numpy compares the
    block with them; a block where some character expands (``"ß".upper()`` is
    ``"SS"``) and the surrogates' block are asked character by character.
    ``tests/test_regex_language.py`` checks it against the plain scan."""
    iscased = _sre.unicode_iscased
    out: list[int] = []
    block = 4096
    for lo in range(0, 0x110000, block):
        hi = lo + block
        if lo <= 0xDFFF and hi > 0xD800:
            out += [c for c in range(lo, hi) if not 0xD800 <= c <= 0xDFFF and iscased(c)]
            continue
        cps = np.arange(lo, hi, dtype=np.uint32)
        text = cps.tobytes().decode("utf-32-le")
        lower, upper = text.lower(), text.upper()
        if len(lower) != block or len(upper) != block:
            out += [c for c in range(lo, hi) if iscased(c)]
            continue
        differs = ((np.frombuffer(lower.encode("utf-32-le"), dtype=np.uint32) != cps)
                   | (np.frombuffer(upper.encode("utf-32-le"), dtype=np.uint32) != cps))
        out += cps[differs].tolist()
    return out


# -- size ---------------------------------------------------------------------------


def _positions(node, pattern: str, constructs, limit: int) -> int:
    """Character positions of the fully expanded pattern; raises past ``limit``,
    for one repetition or for the whole pattern.

    Repetitions are visited in postorder, the order of their quantifiers in the
    source, so the k-th one visited is the k-th quantifier scanned."""
    return _PositionCount(pattern, constructs, limit).size(node)


class _PositionCount:
    """:func:`_positions`' walk. (A class, not nested functions: a recursive
    closure is a reference cycle, and it held each pattern's tree until the
    cyclic collector ran.)"""

    __slots__ = ("pattern", "constructs", "limit", "seen", "last", "repeats")

    def __init__(self, pattern: str, constructs, limit: int):
        self.pattern = pattern
        self.constructs = constructs
        self.limit = limit
        self.seen = 0
        self.last = None  # the last repetition visited: (its index, its node)
        self.repeats = None

    def offset(self, k: int, n) -> int | None:
        if self.repeats is None:
            self.repeats = [c for c in self.constructs if c[0] == "repeat"]
        repeats = self.repeats
        if k < len(repeats) and (repeats[k][2], repeats[k][3]) == (n.lo, n.hi):
            return repeats[k][1]
        for c in repeats:
            if (c[2], c[3]) == (n.lo, n.hi):
                return c[1]
        return None

    def size(self, n) -> int:
        t = type(n)
        if t is Chars:
            return 1
        if t is Assert:
            return 0
        limit = self.limit
        if t is Concat or t is Alt:
            total = 0
            for i in n.items:
                total += self.size(i)
                if total > limit:
                    raise RegexTooLargeError(
                        f"the pattern expands to more than {limit} character positions "
                        f"(pass max_positions= to raise the limit)", self.pattern,
                        self.offset(*self.last) if self.last else None)
            return total
        if t is Look or t is Atomic:
            return self.size(n.body)
        inner = self.size(n.item)
        k = self.seen
        self.seen += 1
        self.last = (k, n)
        copies = n.hi if n.hi is not None else max(n.lo, 1)
        total = inner * copies
        if total > limit:
            raise RegexTooLargeError(
                f"the pattern expands to more than {limit} character positions "
                f"(a repetition of {copies} copies of a {inner}-position item; "
                f"pass max_positions= to raise the limit)", self.pattern, self.offset(k, n))
        return total


# -- locating constructs in the source ---------------------------------------------

_QUANT = re.compile(r"\{(\d*)(,?)(\d*)\}")


#: ``?flags:`` or ``?flags-flags:`` after a group's parenthesis
_SCOPED_FLAGS = re.compile(r"\?([aiLmsux]*)(?:-([imsx]*))?:")


def _scan(p: str, verbose: bool) -> list:
    """Source offsets of the constructs error messages point at, in order:
    ``(kind, offset)``, and ``("repeat", offset, lo, hi)`` for every quantifier
    (``*`` is ``(0, None)``). ``verbose``: the pattern's global ``re.X``; a
    scoped ``(?x:...)`` (or ``(?-x:...)``) turns comments on (off) inside it."""
    out: list = []
    n = len(p)
    i = 0
    outer: list[bool] = []  # the verbose flag outside each open group
    while i < n:
        c = p[i]
        if c == "(" and not p.startswith("?#", i + 1):
            outer.append(verbose)
            m = _SCOPED_FLAGS.match(p, i + 1)
            if m is not None:
                if "x" in m.group(1):
                    verbose = True
                if m.group(2) and "x" in m.group(2):
                    verbose = False
        elif c == ")" and outer:
            verbose = outer.pop()
        if c == "\\":
            if i + 1 < n and p[i + 1] in "123456789":
                out.append(("backref", i))
            elif i + 1 < n and p[i + 1] in "AZbB":
                out.append(("at", i))
            i += 2
            continue
        if c == "[":
            i = _class_end(p, i) + 1
            continue
        if verbose and c == "#":
            while i < n and p[i] != "\n":
                i += 1
            continue
        if c in "^$":
            out.append(("at", i))
            i += 1
            continue
        if c == "(" and p.startswith("?", i + 1):
            rest = p[i + 2:i + 5]
            if rest.startswith(("=", "!")):
                out.append(("lookahead", i))
            elif rest.startswith(("<=", "<!")):
                out.append(("lookbehind", i))
            elif rest.startswith(">"):
                out.append(("atomic", i))
            elif rest.startswith("("):
                out.append(("conditional", i))
            elif rest.startswith("P="):
                out.append(("backref", i))
            elif rest.startswith("#"):
                while i < n and p[i] != ")":
                    i += 1
            # past "(?": its "?" is no quantifier
            i += 2
            continue
        if c in "*+?":
            lo, hi = (0, None) if c == "*" else (1, None) if c == "+" else (0, 1)
            out.append(("repeat", i, lo, hi))
            i += 1
            if i < n and p[i] == "?":
                i += 1
            elif i < n and p[i] == "+":
                out.append(("possessive", i))
                i += 1
            continue
        if c == "{":
            m = _QUANT.match(p, i)
            if m and (m.group(1) or m.group(3)):
                lo = int(m.group(1)) if m.group(1) else 0
                if m.group(2):
                    hi = int(m.group(3)) if m.group(3) else None
                else:
                    hi = lo
                out.append(("repeat", i, lo, hi))
                j = m.end()
                if j < n and p[j] == "?":
                    j += 1
                elif j < n and p[j] == "+":
                    out.append(("possessive", j))
                    j += 1
                i = j
                continue
        i += 1
    return out
