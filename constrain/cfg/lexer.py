"""The lexer side of a grammar: one byte DFA per terminal, and the lexer automata
that run the terminals the parser expects side by side.

A *lexer state* is the set of terminals that may still be in progress after the
bytes read since the last boundary, with where each is in its own DFA: a set of
(terminal, local state) pairs. The terminals started at a boundary are those the
parser expects there (plus ``%ignore`` terminals). All lexer states of a grammar
live in one global table, so that a kernel can follow a token across terminal
boundaries; a state is added on first use with every state it reaches
(:func:`grammar_kernels.expand_states`), and since it is keyed by its pairs, not by
the expected set that led to it, the expected sets of one grammar share states (a
JSON object's key positions expect different sets, but past a key's first bytes
they meet states seen before).

Per lexer state, one walk of the token trie (built on first use, cached) gives
the tokens that stay inside the current terminals — a mask that does not depend on
the parse stack — and the trie nodes where a terminal may end inside a token, the
only places where the parser is consulted.
"""

from __future__ import annotations

import re
import sys
from collections import OrderedDict
from typing import TYPE_CHECKING

import numpy as np

from constrain.cfg import lexer_kernels as gk
from constrain.automata.hash_table import probes_end, table_rehash
from constrain.automata.table_views import TableViews
from constrain.cfg.terminal_kernels import TERMINAL_BOUNDED, TERMINAL_EXCLUSION, TERMINAL_LEXEME, TERMINAL_LITERAL, TERMINAL_OTHER, TERMINAL_TRIE, write_terminal_table
from constrain.automata.byte_dfa import ByteDFA, minus_prefixes
from constrain.automata.deadline import Deadline
from constrain.automata.regex_syntax import MAX_POSITIONS, MAX_REPEAT
from constrain.cache import BoundedCache, check_budget, nbytes
from constrain.errors import GrammarError, GrammarTooComplexError, RegexError
from constrain.cfg.lexemes import (CP_LAYER, LAYER, LEXEME_ACCEPTING, LEXEME_ROWS, LexemeTable, builtin_dfa,
                             bounded_template_size, builtin_template)
from constrain.cfg.ir import GrammarIR, Terminal
from constrain.vocab.trie_kernels import EXIT_COLUMNS
from constrain.regular.regex import EmptyLanguageError, regex_byte_dfa
from constrain.runtime.bitmask import _MAX_SPANS, _PACK_MIN_BYTES, _SPAN_GAP
from constrain.vocab.trie import TokenTrie

if gk.BOUNDED_LAYER != LAYER:  # the kernels divide by a constant
    raise ImportError("lexer_kernels.BOUNDED_LAYER differs from lexemes.LAYER")

if TYPE_CHECKING:
    from constrain.compiler import Compiler

_IGNORECASE = int(re.IGNORECASE)  # an int: RegexFlag operations run the enum module's Python


def symbol_position(source: str, name: str, raw: str | None = None, *,
                    ignore: bool = False) -> tuple[int | None, int | None]:
    """The 1-based ``(line, column)`` in the grammar text ``source`` that a
    symbol's errors point at: with ``ignore``, the ``%ignore`` naming it; its
    source text ``raw`` (``"if"i``, ``/a+/``: where an anonymous terminal is
    written); its definition (``NAME:``, ``?rule.2:``); the ``%import`` naming
    it; else its first use. ``(None, None)`` when none is found (a grammar
    without source text)."""
    if not source:
        return None, None
    word = re.escape(name.lstrip("?!")) if name else None
    patterns = []
    if ignore:
        patterns.append(r"^[ \t]*%ignore\b[^\n]*?(" + (re.escape(raw) if raw else word) + ")")
    if raw:
        patterns.append("(" + re.escape(raw) + ")")
    if word:
        patterns += [r"^[ \t]*[?!]?_?(" + word + r")(?:\.-?\d+)?(?:\{[^}\n]*\})?[ \t]*:",
                     r"^[ \t]*%import\b[^\n]*?\b(" + word + r")\b",
                     r"(?<![A-Za-z_0-9])(" + word + r")(?![A-Za-z_0-9])"]
    for pat in patterns:
        m = re.search(pat, source, re.M)
        if m:
            i = m.start(1)
            return source.count("\n", 0, i) + 1, i - (source.rfind("\n", 0, i) + 1) + 1
    if name and name.startswith("_"):  # lark's generated names (__ANON_0, _X inlined)
        return symbol_position(source, name.lstrip("_"), ignore=ignore)
    return None, None


def terminal_key(term: Terminal, alphabet_key: bytes, exclusion: tuple | None,
                 states: int | None = None, template: bool = False) -> tuple:
    """What names a terminal's automaton across grammars: its pattern, flags,
    literal and exclusion (an exclusion terminal's pattern is only a stand-in
    name, which two IRs may give different exclusions), the alphabet
    (``alphabet.tobytes()``) it is built over, its number of ``states``, and
    whether it is a length-bounded string's ``template``: one pattern may be
    built two ways (the template, or the regex pipeline's DFA when
    ``max_states`` leaves no room for the template; at maxLength 40 both have
    564 states), numbered apart, and walks are shared by terminal id and state.
    The key of a compiler's terminal ids
    (:meth:`constrain.Compiler.terminal_id`)."""
    return (term.pattern, term.flags, term.literal, alphabet_key, exclusion, states, template)


def automaton_bytes(key, dfa) -> int:
    """What a cached terminal automaton costs: its tables and its key (the
    pattern can be long, an enum of many strings, and so can an exclusion's
    names)."""
    size = nbytes(key)
    return size if dfa is False else size + dfa.transitions.nbytes + dfa.accepting.nbytes


_NONE_BYTES = sys.getsizeof(None)

#: lexer states expanded per call at least (``LexerTables.chunk``), or four
#: per byte of the longest token (``EXPAND_PER_BYTE``), whichever is more: 512
#: for SmolLM2 and o200k. States past it stay pending until a walk or a step
#: reaches them (a walk that meets one expands it and starts over). Most of a
#: larger chunk went to states no walk read: at 2048 and 48 per byte (3,888
#: states for SmolLM2, 6,144 for o200k) a 255-character bounded string's first
#: walk took 1.92-1.98 ms against 1.45-1.47 now (SmolLM2; o200k 4.16-4.30
#: against 3.52-3.69). A smaller chunk pays in restarts where walks go deep:
#: at 256 and 2 per byte that string took 1.33 ms but three SQL queries' first
#: walks (grammars/sql.lark) 446-510 ms against 421-425 at 512 and at 2048; at
#: 16 and none per byte MaskBench-subset first walks took 14 % longer.
EXPAND_CHUNK = 512
EXPAND_PER_BYTE = 4
# the key tuple (7 items), its flags, states and template flag, and the id
# (small ints and a bool)
_ID_FIXED = 112 + 80 + 4 * sys.getsizeof(1)


def terminal_id_bytes(key, uid) -> int:
    """What a cached terminal id costs: its :func:`terminal_key` and the id, as
    :func:`~constrain.cache.nbytes` counts them, without its generic walk (every
    terminal of every cold compile stores one: the walk was ~3 % of a median
    MaskBench schema's compile)."""
    if len(key) != 7 or uid.__class__ is not int:  # sized the generic way
        return nbytes(key) + nbytes(uid)
    pattern, _, literal, alphabet_key, exclusion, _, _ = key
    return (_ID_FIXED + len(pattern) + len(alphabet_key)
            + (_NONE_BYTES if literal is None else len(literal) + 40)
            + (_NONE_BYTES if exclusion is None else nbytes(exclusion)))


def terminal_dfa(term: Terminal, alphabet: np.ndarray, *, max_states: int,
                 deadline: float | None, exclusion: tuple | None = None,
                 cache: BoundedCache | None = None, max_repeat: int = MAX_REPEAT,
                 max_positions: int = MAX_POSITIONS) -> ByteDFA | None:
    """The byte DFA of one terminal over ``alphabet``, or ``None`` when it matches
    no string the alphabet can spell.

    ``exclusion``: ``(pattern, prefixes)`` when the terminal is the language of
    ``pattern`` less the strings starting with one of ``prefixes`` (bytes); its
    own pattern is then only a name for that language (see
    :attr:`GrammarIR.exclusions`).

    ``cache``: where the automata are kept across grammars (a compiler's
    ``terminal_automata``: JSON Schemas reuse the same few terminals), keyed by
    the terminal, its exclusion, the alphabet and the budgets (with
    ``max_repeat``: one compile that raised it would have let the next pass a
    repetition past its own); ``None`` builds it afresh."""
    if cache is not None:
        # an exclusion terminal's pattern is only a stand-in name: two IRs may
        # reuse the name for different exclusions
        key = (term.pattern, term.flags, term.literal, alphabet.tobytes(), max_states, exclusion,
               max_repeat, max_positions)
        hit = cache.get(key)
        if hit is not None:
            return hit or None
    if exclusion is not None:
        base = terminal_dfa(Terminal(term.name, exclusion[0]), alphabet, max_states=max_states,
                            deadline=deadline, cache=cache, max_repeat=max_repeat,
                            max_positions=max_positions)
        dfa = minus_prefixes(base, exclusion[1]) if base is not None else False
    elif term.literal is not None:
        dfa = _literal_dfa(term.literal, term.flags, alphabet)
    else:
        # a regex that spells one string (a JSON Schema's member names, its
        # punctuation: most of its terminals) skips the regex pipeline
        text = _regex_literal(term.pattern) if term.flags == 0 else None
        dfa = _literal_dfa(text, 0, alphabet) if text else None
        if dfa is None and term.flags == 0:
            # JSON strings, keys and numbers: written down, not compiled
            dfa = builtin_dfa(term.pattern, alphabet, _regex_literal, max_states)
        if dfa is None and term.flags == 0:
            # an alternation of literals (an enum, true|false): the trie of its
            # strings is its DFA (an enum of 200 strings took 5.8 ms as a regex)
            alts = _regex_alternatives(term.pattern)
            dfa = _literals_dfa(alts, alphabet) if alts else None
    if dfa is None:
        try:
            dfa = regex_byte_dfa(term.pattern, alphabet, flags=term.flags, max_states=max_states,
                                 max_repeat=max_repeat, max_positions=max_positions,
                                 deadline=deadline)
        except EmptyLanguageError:
            dfa = False
        except GrammarTooComplexError as e:
            err = GrammarTooComplexError(f"terminal {term.name}: {e}")
            # for a front end that knows where the terminal comes from
            err.terminal, err.detail = term.name, getattr(e, "msg", str(e))
            raise err from None
        except RegexError as e:
            raise GrammarError(f"terminal {term.name} has a pattern Trellis cannot compile: "
                               f"{e.msg} (pattern {term.pattern[:80]!r}, offset {e.offset})") from None
    if dfa is not False and (dfa.transitions.shape[0] < 2 or not dfa.accepting.any()):
        dfa = False
    if dfa is not False and dfa.accepting[1]:
        raise GrammarError(f"terminal {term.name} matches the empty string "
                           f"(pattern {term.pattern[:80]!r}); terminals must consume input")
    if cache is not None:
        cache.put(key, dfa or False)  # False: "no DFA", which a miss cannot say
    return dfa or None


_REGEX_SPECIAL = frozenset(".^$[](){}|*+?\\")
_ESCAPABLE = frozenset("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~ ")


def _regex_literal(pattern: str) -> str | None:
    """The one string ``pattern`` matches when it is only literal characters and
    backslash-escaped punctuation; else ``None``."""
    if not pattern:
        return None
    out = []
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        if c == "\\":
            if i + 1 >= n or pattern[i + 1] not in _ESCAPABLE:
                return None
            out.append(pattern[i + 1])
            i += 2
        elif c in _REGEX_SPECIAL:
            return None
        else:
            out.append(c)
            i += 1
    return "".join(out)


def _regex_alternatives(pattern: str) -> list[str] | None:
    """The strings of ``pattern`` when it is two or more literals (as
    :func:`_regex_literal` reads them) joined by ``|``; else ``None``."""
    parts, start, i, n = [], 0, 0, len(pattern)
    while i < n:
        c = pattern[i]
        if c == "\\":
            i += 2
            continue
        if c == "|":
            parts.append(pattern[start:i])
            start = i + 1
        i += 1
    if not parts:
        return None
    parts.append(pattern[start:])
    out = []
    for p in parts:
        text = _regex_literal(p) if p else ""
        if text is None:
            return None
        out.append(text)
    return out


def _utf8(text: str) -> bytes | None:
    """``text`` in UTF-8, or ``None`` when it holds a lone surrogate (``"\\ud800"``
    in a Lark or GBNF literal): no UTF-8 output holds one, so such a literal
    matches nothing, as the regex ``\\ud800`` does."""
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        return None


def _spelled_alternatives(pattern: str, alphabet_key: bytes) -> list[bytes] | None:
    """The UTF-8 strings of ``pattern`` when it is an alternation of literals
    (:func:`_regex_alternatives`) that the alphabet (its ``tobytes()``) can
    spell, without the others and without repeats; ``None`` when it is not such
    an alternation or one of its strings is empty (:func:`terminal_dfa` then
    reports it)."""
    texts = _regex_alternatives(pattern) if "|" in pattern else None
    if texts is None:
        return None
    out: dict[bytes, None] = {}
    for text in texts:
        raw = _utf8(text)
        if raw == b"":
            return None
        if raw is not None and 0 not in raw.translate(alphabet_key):
            out[raw] = None
    return list(out)


def _literals_dfa(texts: list[str], alphabet: np.ndarray) -> ByteDFA | bool:
    """The DFA of a finite set of strings: the trie of their UTF-8 bytes, the
    strings the alphabet cannot spell left out; ``False`` when it spells none."""
    kids: list[dict] = [{}]
    final = [False]
    for text in texts:
        data = _utf8(text)
        if data is None or not all(alphabet[b] for b in data):
            continue
        node = 0
        for b in data:
            k = kids[node].get(b)
            if k is None:
                k = kids[node][b] = len(kids)
                kids.append({})
                final.append(False)
            node = k
        final[node] = True
    if not any(final):
        return False
    # trie node k is state k + 1 (0 is dead)
    table = np.zeros((len(kids) + 1, 256), dtype=np.int32)
    for k, d in enumerate(kids):
        row = table[k + 1]
        for b, c in d.items():
            row[b] = c + 1
    accepting = np.zeros(len(kids) + 1, dtype=np.bool_)
    accepting[1:] = final
    # every node lies on a spellable string: the trie is trimmed as it is, and
    # minimising it (merging the ends of the strings) cost ~80 us cold
    return ByteDFA(table, accepting)


def _literal_dfa(text: str, flags: int, alphabet: np.ndarray) -> ByteDFA | None | bool:
    """A chain DFA for a string terminal; ``None`` to fall back to the regex
    route (case-insensitive non-ASCII text), ``False`` when the alphabet cannot
    spell it."""
    icase = bool(flags & _IGNORECASE)
    if icase and not text.isascii():
        return None
    data = _utf8(text)
    if data is None:
        return False
    if not data:
        raise GrammarError("an empty string terminal (\"\") matches the empty string")
    n = len(data) + 2
    table = np.zeros((n, 256), dtype=np.int32)
    for i, b in enumerate(data):
        choices = {b}
        if icase and 65 <= (b | 32) - 32 <= 90:
            choices = {b | 32, (b | 32) - 32}
        ok = [c for c in choices if alphabet[c]]
        if not ok:
            return False
        for c in ok:
            table[i + 1, c] = i + 2
    accepting = np.zeros(n, dtype=np.bool_)
    accepting[n - 1] = True
    return ByteDFA(table, accepting)


class TerminalAutomata:
    """The byte DFAs of a grammar's terminals, stacked into one table (terminal
    ``t`` owns virtual rows ``offsets[t]:offsets[t+1]``; local state 0 dead, 1
    start). ``usable[t]`` is false for a terminal the vocabulary cannot spell.

    ``kernel_arrays`` is the table as the lexer kernels take it: ``(table,
    offsets, accepting, usable, vmap)`` -- the stacked ``[rows, 256]`` int32
    transitions (local states), the ``[n_terminals + 1]`` int64 virtual row
    offsets, per virtual row whether it accepts, per terminal whether it is
    usable, and per virtual row ``v`` where it is written: row ``vmap[v, 0]``
    of ``table``, whose targets up to ``vmap[v, 2]`` are ``vmap[v, 1]`` more
    (see :func:`~constrain.cfg.terminal_kernels.write_bounded`: a
    length-bounded string writes two layers for all of its counts; every
    other terminal's rows are its own, unshifted). :meth:`rows_of` reads a
    terminal's rows whole.

    With a ``compiler``, the automata come from its cache of them, ``uids``
    are its ids of the terminals, and ``walks`` is its cache of lexer walks,
    whose keys those ids make (:class:`LexerTables`); without one, the ids are
    this grammar's own and ``walks`` is ``None``: nothing is shared."""

    def __init__(self, ir: GrammarIR, alphabet: np.ndarray, *, max_states: int,
                 deadline: float | None, compiler: Compiler | None = None,
                 max_repeat: int = MAX_REPEAT, max_positions: int = MAX_POSITIONS):
        # one Deadline for every terminal: a kernel compiled for the first one
        # moves it later for all
        deadline = Deadline.of(deadline)
        n_t = ir.n_terminals
        self.usable = usable = np.zeros(n_t, dtype=np.bool_)
        #: terminal -> ``(lo, hi)`` of the length-bounded strings written by
        #: ``lexemes.write_bounded_string`` (layers of ``lexemes.LAYER`` states
        #: per character counted), for LexerTables' periodic walks
        self.bounded: dict[int, tuple[int, int]] = {}
        #: terminal -> the bytes after a bounded string's closing quote
        self.bounded_tails: dict[int, bytes] = {}
        alphabet_key = alphabet.tobytes()
        automata = None if compiler is None else compiler.terminal_automata
        # literals (most of a JSON Schema's terminals: member names,
        # punctuation), JSON lexemes and "any key but the declared ones" are
        # operations of one kernel (write_terminal_table), which writes
        # them straight into the stacked table; other terminals are DFAs,
        # copied in after it
        ops: list = []
        data = bytearray()
        starts: list[int] = []
        later: list = []
        offsets = [0]
        total = 0  # virtual rows
        physical = 0  # rows of the table
        for t, term in enumerate(ir.terminals):
            op = part = None
            excl = ir.exclusions.get(term.name) if term.flags == 0 else None
            text = None
            if term.flags == 0 and excl is None:
                text = term.literal if term.literal is not None else _regex_literal(term.pattern)
            if t in ir.tokens:
                # a token reference: a start state no byte leaves, which marks
                # the lexer states where a whole token may match it (see
                # constrain.cfg.token_refs)
                op = (TERMINAL_OTHER, physical, 2, 0, 0, 0, 0, 0, 0, 0, 0)
                size = 2
            elif excl is not None:
                base = builtin_template(excl[0], alphabet_key, _regex_literal, max_states)
                if base is not None and base.string and base.bounded is None:
                    # the key lexeme after a bound on the names' trie
                    m = 1 + sum(len(p) - 1 for p in excl[1])
                    size = m + base.rows
                    first = len(starts)
                    for p in excl[1]:
                        starts.append(len(data))
                        data += p
                    starts.append(len(data))
                    ta = len(data)
                    data += base.tail
                    op = (TERMINAL_EXCLUSION, physical, size, base.row0, base.k, ta, len(data),
                          1, m, first, len(excl[1]))
            elif not text and term.flags == 0 and excl is None and term.literal is None and (
                    alts := _spelled_alternatives(term.pattern, alphabet_key)) is not None:
                # an alternation of literals (true|false, an enum): its trie,
                # written by the kernel (as a DFA built in Python, ~60 us cold
                # per compile, and most schemas have a boolean)
                if alts:
                    first = len(starts)
                    nodes = set()
                    for raw in alts:
                        starts.append(len(data))
                        data += raw
                        nodes.update(raw[:i] for i in range(1, len(raw) + 1))
                    starts.append(len(data))
                    size = len(nodes) + 2
                    op = (TERMINAL_TRIE, physical, size, 0, 0, 0, 0, 0, 0, first, len(alts))
                else:  # no string the vocabulary spells
                    op = (TERMINAL_OTHER, physical, 2, 0, 0, 0, 0, 0, 0, 0, 0)
                    size = 2
            elif text:
                raw = _utf8(text)
                if raw is None or 0 in raw.translate(alphabet_key):  # no token spells it
                    op = (TERMINAL_OTHER, physical, 2, 0, 0, 0, 0, 0, 0, 0, 0)
                    size = 2
                else:
                    size = len(raw) + 2
                    op = (TERMINAL_LITERAL, physical, size, len(data), len(data) + len(raw),
                          0, 0, 0, 0, 0, 0)
                    data += raw
            elif term.flags == 0 and (lex := builtin_template(term.pattern, alphabet_key,
                                                               _regex_literal,
                                                               max_states)) is not None:
                # a JSON string, key or number, or a length-bounded string
                # (one with no upper bound is written after the kernel)
                if lex.bounded is None:
                    size = lex.rows
                    ta = len(data)
                    data += lex.tail
                    op = (TERMINAL_LEXEME, physical, size, lex.row0, lex.k, ta, len(data),
                          int(lex.string), 0, 0, 0)
                elif lex.bounded[1] is not None:
                    # written in the kernel's pass too (write_bounded), as two
                    # template layers for its virtual rows
                    size = lex.rows
                    ta = len(data)
                    data += lex.tail
                    op = (TERMINAL_BOUNDED, physical,
                          bounded_template_size(*lex.bounded, lex.tail),
                          lex.bounded[0], lex.bounded[1], ta, len(data), 0, 0, 0, 0)
                    self.bounded[t] = lex.bounded
                    self.bounded_tails[t] = bytes(lex.tail)
                else:
                    part = lex
            if op is None and part is None:
                try:
                    part = terminal_dfa(term, alphabet, max_states=max_states,
                                        deadline=deadline, exclusion=excl, cache=automata,
                                        max_repeat=max_repeat, max_positions=max_positions)
                except GrammarError as e:
                    if e.line is not None:
                        raise
                    raise GrammarError(e.msg, *symbol_position(ir.source, term.name)) from None
                except GrammarTooComplexError as e:
                    line, col = symbol_position(ir.source, term.name)
                    if line is None or getattr(e, "line", None) is not None:
                        raise
                    e2 = GrammarTooComplexError(f"{e} (line {line}, column {col})")
                    e2.line, e2.column = line, col
                    raise e2 from None
            if op is None:
                size = 2 if part is None else part.rows if isinstance(part, LexemeTable) \
                    else part.transitions.shape[0]
                op = (TERMINAL_OTHER, physical, size, 0, 0, 0, 0, 0, 0, 0, 0)
                if part is not None:
                    later.append((t, part))
            usable[t] = op[0] != TERMINAL_OTHER or part is not None or t in ir.tokens
            ops.append(op)
            total += size
            physical += op[2]
            offsets.append(total)
            if total > 4 * max_states:
                raise GrammarTooComplexError(
                    f"the grammar's terminals need more than {4 * max_states} automaton states "
                    f"(pass max_states= to raise the limit)")
        self.offsets = np.array(offsets, dtype=np.int64)
        self.table = table = np.empty((physical, 256), dtype=np.int32)
        acc = np.empty(physical, dtype=np.bool_)
        self.vmap = vmap = np.empty((total, 3), dtype=np.int32)
        write_terminal_table(
            table, acc, vmap, self.offsets, usable, np.array(ops, dtype=np.int64).reshape(n_t, 11),
            np.frombuffer(bytes(data), dtype=np.uint8), np.array(starts, dtype=np.int64),
            LEXEME_ROWS, LEXEME_ACCEPTING, alphabet, CP_LAYER)
        for t, part in later:
            o, size = ops[t][1], ops[t][2]
            if isinstance(part, ByteDFA):
                table[o:o + size] = part.transitions
                acc[o:o + size] = part.accepting
            else:  # a bounded string: over every byte, then restricted
                part.write(table[o:o + size], acc[o:o + size])
                if 0 in alphabet_key:  # not alphabet.all(): see EarleyRecognizer
                    table[o:o + size, ~alphabet] = 0
        # per virtual row (a bounded string's template rows never accept; as
        # many rows as virtual ones: every terminal is its own rows)
        self.accepting = acc if physical == total else acc[vmap[:, 0]]
        self.kernel_arrays = (table, self.offsets, self.accepting, usable, vmap)
        #: the terminals built as a length-bounded string's template (their
        #: ids are not those of the same pattern's DFA)
        self.templates = frozenset(self.bounded)
        self._share(ir, alphabet_key, compiler)

    def rows_of(self, t: int | None = None) -> np.ndarray:
        """Terminal ``t``'s transitions as ``[rows, 256]`` int32 local states,
        every virtual row written out (a new array); ``None``: the whole
        stacked table so (what a saved grammar stores)."""
        lo, hi = (0, self.vmap.shape[0]) if t is None else (self.offsets[t], self.offsets[t + 1])
        where = self.vmap[lo:hi]
        rows = self.table[where[:, 0]]
        if where[:, 1].any():
            rows += np.where((rows != 0) & (rows <= where[:, 2:3]), where[:, 1:2], 0).astype(np.int32)
        return rows

    def _share(self, ir: GrammarIR, alphabet_key: bytes, compiler: Compiler | None) -> None:
        """``uids`` and ``walks`` (see the class docstring)."""
        if compiler is None:
            self.uids = list(range(ir.n_terminals))
            self.walks = None
        else:
            exclusions = ir.exclusions
            # in Python: np.diff's wrapper was ~5 us of a small schema's cold compile
            off = self.offsets.tolist()
            states = [b - a for a, b in zip(off, off[1:])]
            self.uids = compiler.terminal_ids_of([terminal_key(
                term, alphabet_key, exclusions.get(term.name) if term.flags == 0 else None,
                states[t], t in self.templates) for t, term in enumerate(ir.terminals)])
            self.walks = compiler.lexer_walks

    def snapshot(self, payload) -> None:
        """Write the stacked table into ``payload`` (a
        :class:`constrain.persist.Payload`), every virtual row written out (a
        loaded grammar's rows are checked, not trusted to repeat)."""
        payload.put("table", self.rows_of(), runs=True)
        payload.put("offsets", self.offsets)
        payload.put("accepting", self.accepting)
        payload.put("usable", self.usable)
        payload.put("templates", np.array(sorted(self.templates), dtype=np.int64))

    @classmethod
    def restore(cls, payload, ir: GrammarIR, alphabet: np.ndarray,
                compiler: Compiler | None) -> "TerminalAutomata":
        """The automata :meth:`snapshot` wrote, for ``ir`` over ``alphabet``
        (their ids and shared walks ``compiler``'s)."""
        self = cls.__new__(cls)
        self.table = payload.get("table", np.int32, 2, width=256)
        self.offsets = payload.get("offsets", np.int64)
        self.accepting = payload.get("accepting", np.bool_)
        self.usable = payload.get("usable", np.bool_)
        rows, off = self.table.shape[0], self.offsets
        if off.shape[0] != ir.n_terminals + 1 or self.usable.shape[0] != ir.n_terminals \
                or self.accepting.shape[0] != rows or off[0] != 0 or off[-1] != rows \
                or (np.diff(off) < 2).any():
            raise ValueError("the terminal automata do not fit the grammar")
        # each terminal's transitions stay inside its own rows
        local = np.repeat(np.diff(off), np.diff(off))
        if self.table.min() < 0 or (self.table.max(axis=1) >= local).any():
            raise ValueError("a terminal automaton has transitions outside it")
        self.vmap = np.zeros((rows, 3), dtype=np.int32)
        self.vmap[:, 0] = np.arange(rows, dtype=np.int32)
        self.kernel_arrays = (self.table, self.offsets, self.accepting, self.usable, self.vmap)
        # not stored: a file cannot be trusted to say which rows repeat (walks
        # of a loaded grammar's bounded strings are not shared, only slower)
        self.bounded = {}
        self.bounded_tails = {}
        templates = payload.get("templates", np.int64).tolist()
        if not all(0 <= t < ir.n_terminals for t in templates):
            raise ValueError("the terminal templates do not fit the grammar")
        self.templates = frozenset(templates)
        self._share(ir, alphabet.tobytes(), compiler)
        return self


class LexerTables:
    """All lexer automata of one compiled grammar, in one growing global table.

    Attributes:
        trans: ``[n, 256]`` int32, global lexer states (0 dead).
        acc: ``[n, W]`` uint64 bitsets of the terminals accepting in each state.
        has_acc: ``[n]`` whether some terminal accepts.
        kernel_arrays: the tables as the kernels take them (see :meth:`_pack`).
        walk_spans: ``(row, spans)`` of the last narrow walk of a wide row: its
            ``row_spans`` (as a list), for the grammar's row writer, which
            checks ``row`` is its row (:meth:`walk`); the grammar sets
            ``(row, (-1,))`` for a row it made dense from a broad walk's.
        walk_spare: ``(row, spare)`` of the last broad walk kept for other
            grammars (:meth:`walk`): ``spare``, a writable row with ``row``'s
            bits that nothing else holds, for a grammar that adds its
            boundary bits to ``row`` (:meth:`take_spare`).
    """

    #: (an instance sets its own on its first narrow walk of a wide row)
    walk_spans = (None, None)
    #: (an instance sets its own on its first broad walk)
    walk_spare = (None, None)

    def __init__(self, terms: TerminalAutomata, n_terminals: int, trie: TokenTrie, *,
                 words32: int, max_states: int, max_rows_bytes: int, complete: bool = False):
        self.terms = terms
        self.n_terminals = n_terminals
        self.trie = trie
        self.words64 = max(1, (n_terminals + 63) // 64)
        self.max_states = max_states
        cap = 1024
        # not zeroed (1 MB, ~40 us of a compile): expand_states writes all 256
        # entries of a state's row before any kernel reads it; row 0 is the
        # dead state
        self.trans = np.empty((cap, 256), dtype=np.int32)
        self.trans[0] = 0
        self.acc = np.zeros((cap, self.words64), dtype=np.uint64)
        self.has_acc = np.zeros(cap, dtype=np.bool_)
        #: ``[n, 4]`` uint64: the bytes on which each state stays itself (256 bits)
        self.loops = np.zeros((cap, 4), dtype=np.uint64)
        #: per state, for lexer_walk (``lexer_kernels.F_*``): 0 not expanded yet,
        #: 1 some terminal may end, 2 else some byte loops, else 5, which the
        #: walk turns into 3 (a counted run) or 4 (plain)
        self.walk_flags = np.zeros(cap, dtype=np.uint8)
        # per state, for lexer_walk's counted skip (grammar_kernels.count_run):
        # the run length (-1: not yet known), its bytes, the ASCII bytes taken
        # np.empty and fill, not np.full (a Python-level wrapper, paid cold
        # once per compile)
        self.run = np.empty(cap, dtype=np.int32)
        self.run.fill(gk.RUN_UNKNOWN)
        #: per state, whether it reads valid UTF-8 back to itself (-1: not yet
        #: known; grammar_kernels._reads_utf8)
        self.reads_utf8 = np.empty(cap, dtype=np.int8)
        self.reads_utf8.fill(-1)
        self.good = np.zeros((cap, 2), dtype=np.uint64)
        self.live = np.zeros((cap, 3), dtype=np.uint64)
        self.n = 1
        #: states expanded per call (expand_states' ``limit``); all of them when
        #: ``complete`` (the token budgets' walks read rows without asking)
        self.chunk = max_states if complete else max(EXPAND_CHUNK, EXPAND_PER_BYTE * trie.max_depth)
        #: of those, states of a length-bounded string's layers (expand_states):
        #: the layers a token's bytes reach, and one more (of a maxLength-2048
        #: string, 130 of o200k's instead of 441, 83 of SmolLM2's instead of 277)
        self.layer_chunk = self.chunk if complete else LAYER * (trie.max_depth + 2)
        #: expand_states' breadth-first queue (as long as the tables) and its
        #: head, tail, count, "some state was left unexpanded" and the first
        #: state the current row made, kept across a call that grows the tables
        self._queue = np.empty(cap, dtype=np.int32)
        self._qs = np.zeros(5, dtype=np.int64)
        self._starts: dict[frozenset, int] = {}
        #: per lexer state ``g``, its alive (terminal, local state) pairs, flattened
        #: and sorted by terminal, are ``pairs[poff[g]:poff[g + 1]]``
        self.pairs = np.zeros(16 * cap, dtype=np.int32)
        self.poff = np.zeros(cap + 1, dtype=np.int64)
        self._hashes = np.zeros(cap, dtype=np.uint64)
        self._htab = np.empty(2 * cap, dtype=np.int64)
        self._htab.fill(-1)
        self._single = np.empty(terms.vmap.shape[0], dtype=np.int32)
        self._single.fill(-1)
        self._row_byte = np.empty(terms.vmap.shape[0], dtype=np.int16)
        self._row_byte.fill(-2)
        self._term_of_uid = {u: t for t, u in enumerate(terms.uids)}
        # two terminals with one pattern would make keys ambiguous: keep walks private
        self._shared = terms.walks if len(set(terms.uids)) == len(terms.uids) else None
        self._acc_lists: dict[int, tuple[int, ...]] = {}
        #: names this grammar's states across grammars; a shared walk keeps it
        #: (not this object), so that the walk stays usable after the grammar is gone
        self._names = _StateNames(self.pairs, self.poff, terms.uids)
        self._local_ids: dict[tuple, int] = {}
        self._rows: OrderedDict = OrderedDict()
        #: per (terminal, state in the layer): what _near_walk filters
        self._near_refs: dict = {}
        #: per (tail, state in the layer): the bounded strings' walk it is made of
        self._near_walks: dict = {}
        #: count_run's search stacks, one entry per state (lexer_walk's scratch)
        self._scratch = np.empty((4, cap), dtype=np.int32)
        #: where lexer_walk_rows writes the boundary nodes and their states (the
        #: grammar's lock serialises walks), grown to the trie's size when short
        self._walk_out = np.empty((2, 1024), dtype=np.int32)
        self._below = trie.subtree_bytes()[0]
        self._pack()
        self.words32 = words32
        self._max_rows = max(2, max_rows_bytes // (4 * words32))
        self._slab, self._slab_next, self._slab_bytes = None, 0, 0  # _new_row's

    def start_state(self, expected: frozenset) -> int:
        """The lexer state that starts any of the terminals ``expected`` (a
        frozenset of terminal ids); 0 when none of them is usable."""
        s = self._starts.get(expected)
        if s is None:
            words = np.zeros(self.words64, dtype=np.uint64)
            for t in expected:
                words[t >> 6] |= np.uint64(1) << np.uint64(t & 63)
            # the set once, as both operands of the union
            s = self._starts[expected] = self.start_state_bits(words, words)
        return s

    def start_state_bits(self, expected: np.ndarray, extra: np.ndarray) -> int:
        """:meth:`start_state` of the terminals in the bitset ``expected | extra``
        (uint64 words, bit ``t & 63`` of word ``t >> 6`` for terminal ``t``: a
        parser's expected set and the ``%ignore`` terminals), not cached (the
        caller keys it)."""
        return self._expand(lambda terms, states, index: gk.expand_start(
            self._views.desc, expected, extra, self.n, self.max_states, self.chunk, self.layer_chunk))

    def state_of_pairs(self, flat: np.ndarray) -> int:
        """The lexer state whose alive pairs are ``flat`` (int32 ``(terminal,
        local state)`` pairs, flattened and sorted by terminal, not empty),
        added and expanded (with what it reaches, up to ``chunk`` states) when
        new."""

        def expand(terms, states, index):
            out = gk.expand_states(terms, states, index, flat, self.n, self.max_states,
                                   self._queue, self._qs, self.chunk, self.layer_chunk)
            if out[0] == gk.EXPAND_DONE:
                gk.settle_reads_utf8(states, self._below, self._queue[:self._qs[0]])
            return out

        return self._expand(expand)

    @property
    def desc(self) -> np.ndarray:
        """The lexer's tables as one descriptor array (see :meth:`_pack`),
        for the kernels of :mod:`constrain.cfg.lexer_kernels` that take it;
        read it again after anything that may expand states."""
        return self._views.desc

    @property
    def left_pending(self) -> bool:
        """Whether some lexer state was made and not expanded. Such a state's
        row is all zeros (every byte dead) until it is: a step that runs
        through one ends refused, and must then be checked again."""
        return bool(self._qs[3])

    def ensure(self, s: int) -> None:
        """Expand lexer state ``s`` if it is not yet (with what it reaches, up to
        ``chunk`` states): a state's row, acceptance and flags are read only
        once it is. Walks report such states, steps check them; the caller
        holds the grammar's lock."""
        if s and not self.walk_flags[s]:
            self.state_of_pairs(self.pairs[self.poff[s]:self.poff[s + 1]].copy())
            # loop states met before their UTF-8 successors were expanded
            pending = np.flatnonzero((self.walk_flags[:self.n] == gk.F_LOOP)
                                     & (self.reads_utf8[:self.n] < 0)).astype(np.int32)
            if len(pending):
                gk.settle_reads_utf8(self.kernel_arrays[0], self._below, pending)

    def tables_bytes(self) -> int:
        """The bytes of this grammar's lexer state tables, which grow as
        states are expanded (the tables shared with other grammars, the
        vocabulary's trie and the compiler's caches, are not counted)."""
        # the states in use: the tables' unused capacity is never written (its
        # pages are not the process's until then)
        return self.n * (_STATE_BYTES + 8 * self.words64)

    def rows_bytes(self, kept: int = 0) -> int:
        """The bytes of the rows of this lexer's walks and ``kept`` more of its
        rows that its grammar keeps, at least the slabs they come from
        (:meth:`_new_row`)."""
        return max(self._slab_bytes, (len(self._rows) + kept) * 4 * self._row_len)

    def expansion_counts(self) -> np.ndarray:
        """int64 ``[n, max_states, chunk, layer_chunk]`` (``n`` current), for a
        kernel that makes start states itself (``lexer_kernels.boundary_walk``);
        give it back to :meth:`took_counts` after the call."""
        counts = self.__dict__.get("_counts")
        if counts is None:
            counts = self._counts = np.array(
                [self.n, self.max_states, self.chunk, self.layer_chunk], dtype=np.int64)
        counts[0] = self.n
        return counts

    def took_counts(self, counts: np.ndarray) -> None:
        """The states a kernel made with :meth:`expansion_counts`' ``counts``."""
        n = counts.item(0)
        if n != self.n:
            self.n = self._names.n = n

    def _expand(self, call) -> int:
        """Run the expanding kernel ``call(terms, states, index)`` until it has
        room, growing the tables; the state it returns."""
        terms = self.terms.kernel_arrays
        while True:
            states, index, _ = self.kernel_arrays
            # the kernel leaves qs[1] (the queue's tail) 0 when done
            status, self.n, g = call(terms, states, index)
            if status == gk.EXPAND_DONE:
                self._names.n = self.n
                return int(g)
            if status == gk.EXPAND_OVERFLOW:
                # the queued states are not expanded: expanded when reached
                qs = self._qs
                left = self._queue[qs[0]:qs[1]]
                self.walk_flags[left] = gk.F_PENDING
                self.trans[left] = 0  # a row not expanded reads as dead
                qs[1] = 0
                qs[3] = 1
                raise GrammarTooComplexError(
                    f"the lexer automata need more than {self.max_states} states "
                    f"(pass max_states= to raise the limit)")
            self._grow(self.n + 1)
            if self.poff[self.n] + 2 * self.n_terminals > self.pairs.shape[0]:
                grown = np.zeros(2 * self.pairs.shape[0] + 2 * self.n_terminals, dtype=np.int32)
                grown[:self.pairs.shape[0]] = self.pairs
                self.pairs = self._names.pairs = grown
            self._pack()

    def _grow(self, need: int) -> None:
        cap = self.trans.shape[0]
        if need <= cap:
            return
        while cap < need:
            # 4x: a length-bounded string adds tens of thousands of states in one
            # build, and each growth copies the [cap, 256] table
            cap *= 4
        for name in ("trans", "acc", "has_acc", "loops", "walk_flags", "_hashes", "run", "good",
                     "live", "reads_utf8"):
            old = getattr(self, name)
            new = (np.empty if name == "trans" else np.zeros)((cap,) + old.shape[1:],
                                                              dtype=old.dtype)
            if name == "run":
                new[:] = gk.RUN_UNKNOWN
            elif name == "reads_utf8":
                new[:] = -1
            new[:old.shape[0]] = old
            setattr(self, name, new)
        poff = np.zeros(cap + 1, dtype=np.int64)
        poff[:self.poff.shape[0]] = self.poff
        self.poff = self._names.poff = poff
        # ``first`` given, as the parser's growth gives it: one signature of
        # the kernel from Python, the one warm_up compiles (the parser's, with
        # ``first`` and the default omitted a second, compiled ~0.2-0.5 s
        # inside the first request whose parser table grew)
        self._htab = table_rehash(self._hashes, self.n, 2 * cap, 0)
        self._scratch = np.empty((4, cap), dtype=np.int32)
        queue = np.empty(cap, dtype=np.int32)
        queue[:self._queue.shape[0]] = self._queue
        self._queue = queue

    def _pack(self) -> None:
        """Group the tables into ``kernel_arrays``, the tuples the lexer kernels
        take (:mod:`constrain.cfg.lexer_kernels`), again whenever one of them is
        replaced by a larger one: ``(states, index, memos)``.

        ``states``, per lexer state: ``(trans, acc, has_acc, loops, walk_flags,
        reads_utf8)`` (see the attributes).

        ``index``, the lexer states by their pairs: ``(pairs, poff, hashes,
        htab, single, row_byte)`` -- the pair lists; per state the hash of its
        pairs; the open-addressing table over those hashes (-1 free); per
        terminal row ``offsets[t] + s``, the state where only that pair is
        alive (-1 not yet known), and the row's one live byte (-1 several, -2
        not yet known, -3 none).

        ``memos``, per lexer state, the walk's counted runs
        (:func:`~constrain.cfg.lexer_kernels.count_run`): ``(run, good, live,
        scratch)`` -- the run length (-1 not yet known), its bytes and the ASCII
        bytes the state takes (128 bits each; ``live[s, 2]`` is 1 once known),
        and the ``[4, n]`` int32 stacks of the search.

        ``desc``: the same tables, the terminal automata's, the expansion
        queue's and the trie's as one descriptor array
        (:data:`~constrain.cfg.lexer_kernels.LEX_SLOTS`), what the kernels of a
        first visit take (:mod:`constrain.automata.table_views`: addresses,
        valid while the arrays live, so bound here, after every growth, and
        only here; one array for the lexer's life, rebound in place, so a
        caller holding it reads the current tables)."""
        self.kernel_arrays = (
            (self.trans, self.acc, self.has_acc, self.loops, self.walk_flags, self.reads_utf8),
            (self.pairs, self.poff, self._hashes, self._htab, self._single, self._row_byte),
            (self.run, self.good, self.live, self._scratch))
        tr, sm = self.trie.kernel_arrays()
        views = self.__dict__.get("_views")
        if views is None:
            views = self._views = TableViews(gk.LEX_LAYOUT)
        views.bind_all((*self.kernel_arrays[0], *self.kernel_arrays[1], *self.kernel_arrays[2],
                        *self.terms.kernel_arrays, self._below, self._queue, self._qs,
                        *self.trie.packed(), tr[0], tr[2], sm[0], sm[1]))
        #: the live tokens from which a walk is broad (shared across grammars)
        self._share_min = max(1, self.trie.num_tokens // 8)
        # where it writes a wide row's spans (bitmask.row_writer's): rows of
        # 14 KB and more (o200k's 25 KB) are written by spans, and scanning
        # one for them was 2.1 us of a narrow first fill; none where tokens
        # share bytes (add_duplicates sets more bits after the walk)
        t = self.trie
        # a walk row's length (the kernels' scratch word past the mask included)
        self._row_len = t.row_words + 1
        self._span_buf = np.zeros(
            2 * _MAX_SPANS + 1 if 4 * t.row_words >= _PACK_MIN_BYTES and not t.has_duplicates
            else 0, dtype=np.int64)

    # the per-state tables: (name, dtype, columns (None: one dimension;
    # "terminals": a bitset of them), fill past the states)
    _PER_STATE = (("trans", np.int32, 256, None), ("acc", np.uint64, "terminals", 0),
                  ("has_acc", np.bool_, None, 0), ("loops", np.uint64, 4, 0),
                  ("walk_flags", np.uint8, None, 0), ("run", np.int32, None, gk.RUN_UNKNOWN),
                  ("reads_utf8", np.int8, None, -1), ("good", np.uint64, 2, 0),
                  ("live", np.uint64, 3, 0), ("_hashes", np.uint64, None, 0))

    def snapshot(self, payload) -> None:
        """Write the lexer states so far, their walks and start states into
        ``payload`` (a :class:`constrain.persist.Payload`); the caller holds
        the grammar's lock."""
        n = self.n
        payload.set("n", n)
        payload.set("max_states", self.max_states)
        payload.set("max_rows", self._max_rows)
        pending = self.walk_flags[:n] == gk.F_PENDING
        for name, *_ in self._PER_STATE:
            a = getattr(self, name)
            if name == "trans" and pending.any():
                # rows of states not yet expanded hold nothing yet (np.empty);
                # the copy keeps the capacity, which the file records
                a = a.copy()
                a[:n][pending] = 0
            payload.put(name, a, n, runs=name == "trans")
        payload.put("poff", self.poff, n + 1)
        payload.put("pairs", self.pairs, int(self.poff[n]))
        payload.set("chunk", self.chunk)
        for name in ("_htab", "_single", "_row_byte"):
            payload.put(name, getattr(self, name))
        starts = list(self._starts.items())
        payload.put("start_len", np.array([len(k) for k, _ in starts], dtype=np.int64))
        payload.put("start_terms", np.array([t for k, _ in starts for t in sorted(k)],
                                            dtype=np.int64))
        payload.put("start_state", np.array([v for _, v in starts], dtype=np.int64))
        rows = list(self._rows.items())
        payload.put("walk_state", np.array([s for s, _ in rows], dtype=np.int64))
        payload.put("walk_row", np.array([r for _, (r, _, _) in rows], dtype=np.uint32)
                    .reshape(len(rows), self.words32))
        payload.put("walk_len", np.array([len(nodes) for _, (_, nodes, _) in rows],
                                         dtype=np.int64))
        payload.put("walk_nodes", np.concatenate([nodes for _, (_, nodes, _) in rows] +
                                                 [np.zeros(0, dtype=np.int32)]))
        payload.put("walk_states", np.concatenate([st for _, (_, _, st) in rows] +
                                                  [np.zeros(0, dtype=np.int32)]))

    @classmethod
    def restore(cls, payload, terms: TerminalAutomata, n_terminals: int, trie: TokenTrie, *,
                words32: int) -> "LexerTables":
        """The tables :meth:`snapshot` wrote, over ``terms`` and ``trie``."""
        self = cls.__new__(cls)
        self.terms = terms
        self.n_terminals = n_terminals
        self.trie = trie
        self.words64 = max(1, (n_terminals + 63) // 64)
        self.max_states = check_budget("max_states", payload.value("max_states"))
        self.n = n = payload.value("n")
        self.chunk = check_budget("chunk", payload.value("chunk"))
        # a loaded grammar's terminal rows are written out (no layers to limit)
        self.layer_chunk = self.chunk
        for name, dtype, width, fill in self._PER_STATE:
            if width == "terminals":
                width = self.words64
            setattr(self, name, payload.get(name, dtype, 1 if width is None else 2, fill=fill,
                                            width=width))
        cap = self.trans.shape[0]
        self.poff = payload.get("poff", np.int64)
        self.pairs = payload.get("pairs", np.int32)
        self._htab = payload.get("_htab", np.int64)
        self._single = payload.get("_single", np.int32)
        self._row_byte = payload.get("_row_byte", np.int16)
        rows = terms.vmap.shape[0]
        if not (0 < n <= cap and self.poff.shape[0] == cap + 1
                and all(getattr(self, name).shape[0] == cap for name, *_ in self._PER_STATE)
                and self._htab.shape[0] == 2 * cap and self._single.shape[0] == rows
                and self._row_byte.shape[0] == rows):
            raise ValueError("the lexer tables do not fit together")
        poff = self.poff[:n + 1]
        if poff[0] != 0 or (np.diff(poff) < 0).any() or poff[n] > self.pairs.shape[0] \
                or self.trans[:n].min() < 0 or self.trans[:n].max() >= n \
                or self._htab.min() < -1 or self._htab.max() >= n \
                or not probes_end(self._htab, n, cap) \
                or self._single.min() < -1 or self._single.max() >= n \
                or self.walk_flags[:n].max() > gk.F_NEW:
            raise ValueError("the lexer tables point outside themselves")
        starts = payload.get("start_state", np.int64).tolist()
        lengths = payload.get("start_len", np.int64).tolist()
        flat = payload.get("start_terms", np.int64).tolist()
        if len(lengths) != len(starts) or sum(lengths) != len(flat) \
                or not all(0 <= g < n for g in starts):
            raise ValueError("the lexer's start states do not fit")
        self._starts, k = {}, 0
        for m, g in zip(lengths, starts):
            self._starts[frozenset(flat[k:k + m])] = g
            k += m
        self._term_of_uid = {u: t for t, u in enumerate(terms.uids)}
        self._shared = terms.walks if len(set(terms.uids)) == len(terms.uids) else None
        self._acc_lists = {}
        self._names = _StateNames(self.pairs, self.poff, terms.uids)
        self._names.n = n
        self._local_ids = {}
        self._rows = OrderedDict()
        self._near_refs = {}
        self._near_walks = {}
        walk_states = payload.get("walk_state", np.int64).tolist()
        walk_rows = payload.get("walk_row", np.uint32, 2, width=words32)
        walk_rows.setflags(write=False)  # as a walk's row (see walk)
        lengths = payload.get("walk_len", np.int64).tolist()
        nodes = payload.get("walk_nodes", np.int32)
        states = payload.get("walk_states", np.int32)
        if not (len(walk_states) == walk_rows.shape[0] == len(lengths)
                and sum(lengths) == len(nodes) == len(states)
                and all(0 <= s < n for s in walk_states)
                and (not len(states) or (states.min() >= 0 and states.max() < n))
                and (not len(nodes) or (nodes.min() >= 0 and nodes.max() < trie.num_nodes))):
            raise ValueError("the lexer's walks do not fit")
        k = 0
        for s, row, m in zip(walk_states, walk_rows, lengths):
            self._rows[s] = (row, nodes[k:k + m], states[k:k + m])
            k += m
        self._scratch = np.empty((4, cap), dtype=np.int32)
        self._queue = np.empty(cap, dtype=np.int32)
        self._qs = np.zeros(5, dtype=np.int64)
        self._qs[3] = (self.walk_flags[1:n] == gk.F_PENDING).any()
        #: where lexer_walk_rows writes the boundary nodes and their states (the
        #: grammar's lock serialises walks), grown to the trie's size when short
        self._walk_out = np.empty((2, 1024), dtype=np.int32)
        self._below = trie.subtree_bytes()[0]
        self._pack()
        self.words32 = words32
        self._max_rows = check_budget("max_rows", payload.value("max_rows"))
        self._slab, self._slab_next, self._slab_bytes = None, 0, 0  # _new_row's
        return self

    def accepting_terminals(self, s: int) -> tuple[int, ...]:
        """The terminals that may end in lexer state ``s``."""
        hit = self._acc_lists.get(s)
        if hit is None:
            out = []
            for w in range(self.words64):
                x = int(self.acc[s, w])
                while x:
                    low = x & -x
                    out.append(w * 64 + low.bit_length() - 1)
                    x ^= low
            hit = self._acc_lists[s] = tuple(out)
        return hit

    def walk(self, s: int):
        """``(row, nodes, states)`` of lexer state ``s``: the tokens that stay
        inside the current terminals (uint32 words, read-only) and the trie nodes where a
        terminal may end inside a token (see :func:`grammar_kernels.lexer_walk`).
        Computed on first use and kept in an LRU; a broad walk (the state's
        first bytes lead to an eighth of the tokens or more: see
        :func:`~constrain.cfg.lexer_kernels.lexer_walk_rows`) is shared, in the
        compiler's cache of walks, by every grammar of the compiler that has
        this lexer state; a narrow one costs less than sharing it.

        A shared walk is ``(row, nodes, states, origin)``: ``states`` in the
        ids of the grammar that walked it, whose :class:`_StateNames` is
        ``origin``, or, once another grammar has used it, ``(which, keys)``
        with ``origin`` ``None`` (see :func:`_named_states`). An entry is
        never changed in place, only replaced, so a thread that read one
        reads it whole. A length-bounded string's positions (one string's
        alone, inside its quotes) are :meth:`_near_walk`'s instead."""
        hit = self._rows.get(s)
        if hit is not None:
            self._rows.move_to_end(s)
            return hit
        near = self._near_bound(s) if self.terms.bounded else None
        if near is not None:
            return self._keep(s, self._near_shared(s, near))
        row = self._new_row()  # (the narrow kernel clears it)
        # most first walks are narrow (inside or at the end of a literal)
        return self._walk_from(s, row, self._narrow(s, row, self._walk_out))

    def _walk_from(self, s: int, row, n: int) -> tuple:
        """:meth:`walk`'s new entry for ``s``, kept, from :meth:`_narrow`'s
        result ``n`` (its row in ``row``, its boundary nodes in ``_walk_out``):
        the general walk's when that one was not narrow."""
        shared = self._shared
        t = self.trie
        out = self._walk_out
        key = entry = None
        narrow = n >= 0
        if not narrow:  # (the narrow kernel left row clear)
            # a walk into text (a string body, an object's keys) is broad: its
            # route is looked for below, once no other grammar's walk serves
            route = _NO_ROUTE
            n = gk.lexer_walk_rows(self._views.desc, s, row, out, self._share_min,
                                   self.trie.multilingual, *route)
            if n <= gk.PENDING_BASE:
                n = self._walk_expanding(s, row, out, n, self._share_min, route)
        if n == gk.WALK_SHARED:
            if shared is not None:
                key = self._names.key(s)
                entry = shared.get(key)
            if entry is None:
                # broad, so its text part is worth a look (a few us); a
                # narrow walk costs about as much as that look
                route = self._text_route(s)
                n = self._walk_expanding(s, row, out, None, -1, route)
        if entry is not None:
            row, nodes, states = self._reuse(key, entry)
        else:
            if n < 0:
                out = self._walk_out = np.empty((2, t.num_nodes), dtype=np.int32)
                row[:] = 0
                n = self._walk_expanding(s, row, out, None, -1, route)
            row = row[:self.words32]
            if t.has_duplicates:
                t.add_duplicates(row)
            if key is not None:
                # a row the compiler's cache keeps past this grammar is its own
                # array, not a view keeping this grammar's slab alive (_new_row);
                # the slab's row is the spare of a grammar that adds boundary
                # bits (a copy of 25 KB saved: 4.5 us of an o200k first visit)
                spare = row
                row = row.copy()
                self.walk_spare = (row, spare)
            if n:
                nodes, states = out[0, :n].copy(), out[1, :n].copy()
            else:
                nodes = states = _NO_NODES
            # shared by every cache above (the grammar's masks): read-only once
            row.setflags(write=False)
            if key is not None:
                shared.setdefault(key, (row, nodes, states, self._names))
            if narrow and len(self._span_buf):
                self.walk_spans = (row, self._span_buf.tolist())
        return self._keep(s, (row, nodes, states))

    def take_spare(self, row):
        """A writable row holding ``row``'s bits that nothing else holds, the
        spare of :attr:`walk_spare`, taken (``None`` when ``row`` has none):
        under the lock of the grammar that owns this lexer, as its walks."""
        kept, spare = self.walk_spare
        if kept is not row:
            return None
        self.walk_spare = (None, None)
        return spare

    def narrow_walk(self, s: int) -> tuple:
        """:meth:`walk` of lexer state ``s`` where it is narrow, for a grammar
        that writes a literal's end into its own mask (``s`` not a bounded
        string's position, :meth:`_near_bound`: the caller checks). ``(row, nodes,
        states)``:

        * a literal's inside (a narrow walk without boundary nodes): the walk's
          row, read-only, kept in the LRU of walks as :meth:`walk` keeps it,
          and no nodes;
        * a literal's end: the narrow walk's row, writable and not kept, with
          its boundary nodes and their states, views of the lexer's scratch
          valid until its next walk;
        * ``(None, None, None)`` where the walk is broad with boundary nodes,
          or kept with them already: the general path's.

        A broad walk without boundary nodes is kept and returned as an
        inside's is. Why a literal's end is not kept here: the general path
        kept its walk, copied the row for its boundary bits and looked in four
        caches between the two kernels (~28 us a first fill over SmolLM2, ~10
        of it in the kernels), and a literal's end is rarely reached again in
        another parser context."""
        hit = self._rows.get(s)
        if hit is None:
            row = self._new_row()
            out = self._walk_out
            n = self._narrow(s, row, out)
            if n == gk.NOT_NARROW:
                hit = self._walk_from(s, row, n)
            else:
                row = row[:self.words32]
                if self.trie.has_duplicates:
                    self.trie.add_duplicates(row)
                if n:
                    return row, out[0, :n], out[1, :n]
                row.setflags(write=False)
                if len(self._span_buf):
                    self.walk_spans = (row, self._span_buf.tolist())
                return self._keep(s, (row, _NO_NODES, _NO_NODES))
        else:
            self._rows.move_to_end(s)
        return (None, None, None) if len(hit[1]) else hit

    def _new_row(self) -> np.ndarray:
        """A walk row (``row_words + 1`` uint32 words, not cleared): the next of
        a slab, while the slabs of this lexer stay under :data:`_SLAB_BYTES`,
        then one allocation each. The first slab holds :data:`_SLAB_FIRST`
        rows, each next one twice as many, up to :data:`_SLAB_ROWS`: a grammar
        that makes few rows (a compiled constraint kept in a cache after one
        short request) leaves at most as many rows unused as it used.

        Why: a first visit's 6 KB (SmolLM2) to 25 KB (o200k) row was malloc's
        slow path on a heap that compiles leave fragmented, ~1.5 us of a
        literal position's ~7.5 us fill (``np.empty`` there; from a slab the
        fill took ~6). A row keeps its slab alive, so a row that outlives its
        neighbours in the caches holds the slab's other rows' bytes: the cap
        bounds that to :data:`_SLAB_BYTES` a grammar, and a long-lived
        grammar's later rows are allocated alone."""
        slab = self._slab
        if slab is not None:
            k = self._slab_next
            self._slab_next = k + 1
            if k + 1 == slab.shape[0]:
                self._slab = None
            return slab[k]
        if self._slab_bytes < _SLAB_BYTES:
            rows = min(_SLAB_ROWS, max(_SLAB_FIRST, self._slab_bytes // (4 * self._row_len)))
            slab = self._slab = np.empty((rows, self._row_len), dtype=np.uint32)
            self._slab_bytes += slab.nbytes
            self._slab_next = 1
            return slab[0]
        return np.empty(self._row_len, dtype=np.uint32)

    def _narrow(self, s: int, row, out) -> int:
        """:func:`~constrain.cfg.lexer_kernels.lexer_walk_narrow` from ``s``,
        expanding the states it reports: the number of boundary nodes, or
        ``NOT_NARROW`` (``row`` clear)."""
        while True:
            # (the kernel clears row first)
            n = gk.lexer_walk_narrow(self._views.desc, s, row, out, self._span_buf, _SPAN_GAP)
            if n > gk.PENDING_BASE:
                return n
            self.ensure(gk.PENDING_BASE - n)  # the tables may grow: new arguments

    def _keep(self, s: int, hit: tuple) -> tuple:
        """``hit``, the walk of ``s``, kept in the LRU of walks."""
        self._rows[s] = hit
        if len(self._rows) > self._max_rows:
            self._rows.popitem(last=False)
        return hit

    def _periodic(self, s: int):
        """A key of the positions that walk alike, when lexer state ``s`` is
        one bounded string's position alone (:meth:`_near_bound`) more than a
        token's bytes from its bound (each character counted is a layer of
        :data:`~constrain.cfg.lexemes.LAYER` states: row ``2 + LAYER * k + r``
        after ``k`` characters) and either past its ``minLength`` or more than
        a token's bytes before it: ``(terminal, state in its layer)``, and
        ``True`` after them below ``minLength``. From every such position the
        walk is the same: the same tokens stay in the string (a token's bytes
        complete fewer characters than are left) and, from ``minLength`` on,
        close it at the same trie nodes into the same states (past the quote
        the states do not count); far below it none closes. So a grammar keeps
        one mask per parser context for them. Else ``None``."""
        near = self._near_bound(s)
        if near is None:
            return None
        far = self.trie.max_depth + 1
        t, r, left, short = near
        if left <= far:
            return None
        if not short:
            return t, r
        return (t, r, True) if short > far else None

    def _near_bound(self, s: int):
        """``(terminal, state in its layer, characters left, characters still
        needed)`` when lexer state ``s`` is one bounded string's position
        alone, inside the string (its opening quote read, its closing one
        not); else ``None``. Such a position's walk is :meth:`_near_walk`'s."""
        poff = self.poff
        base = poff[s]
        if poff[s + 1] - base != 2:
            return None
        t = int(self.pairs[base])
        bound = self.terms.bounded.get(t)
        if bound is None:
            return None
        k, r = divmod(int(self.pairs[base + 1]) - 2, LAYER)
        lo, hi = bound
        # before the opening quote (k < 0), or closed
        if k < 0 or k > hi or (k == hi and r):
            return None
        return t, r, hi - k, lo - k if k < lo else 0

    def _near_shared(self, s: int, near: tuple) -> tuple:
        """:meth:`_near_walk`, shared across grammars as a trie walk is when
        broad (see :meth:`walk`)."""
        shared = self._shared
        if shared is None:
            return self._near_walk(*near)
        self.ensure(s)  # (its row read below)
        if int(self.trie.root_tokens()[self.trans[s] != 0].sum()) < self._share_min:
            return self._near_walk(*near)
        key = self._names.key(s)
        entry = shared.get(key)
        if entry is not None:
            return self._reuse(key, entry)
        row, nodes, states = self._near_walk(*near)
        shared.setdefault(key, (row, nodes, states, self._names))
        return row, nodes, states

    def _near_walk(self, t: int, r: int, left: int, short: int) -> tuple:
        """The walk of a bounded string's position with ``left`` characters
        left and ``short`` still needed (:meth:`_near_bound`): the tokens of
        the string's unbounded walk from the same place ``r`` in a character's
        layer (:func:`~constrain.cfg.lexer_kernels.bounded_needs`) that need at
        most ``left`` characters and, where they close the string, at least
        ``short``; the boundary nodes likewise. A trie walk cannot skip
        subtrees near the bound (they are deeper than the characters left)
        nor below ``minLength`` (the quote may come only so deep), so it
        visited most of the trie at every such position: 1-2 ms a fill on
        o200k, 0.2-0.6 ms on SmolLM2 near the bound, 0.4-5.6 and 0.05-2.4 ms
        below ``minLength``. This is one kernel walk per tail and ``r``
        (:meth:`_bounded_walk`; ~1.1 and ~0.3 ms warm) and a row packed per
        position (5-75 us). The periodic positions too (:meth:`_periodic`,
        ``left`` past every token's need): their trie walk read twice a
        token's depth of layers ahead (``count_run``), and with nothing
        reading so deep the lexer expands a string's layers as steps reach
        them (:attr:`layer_chunk`)."""
        ref = self._near_refs.get((t, r))
        if ref is None:
            if len(self._near_refs) >= 8:
                self._near_refs.clear()  # (the walks they share are kept apart)
            ref = self._near_refs[(t, r)] = self._near_ref(t, r)
        need, nodes, node_needs, states, closers, closer_needs = ref
        allowed = need <= left
        if short:
            # the tokens that would close the string too soon
            allowed[closers[:int(np.searchsorted(closer_needs, short))]] = False
        row = np.packbits(allowed, bitorder="little").view(np.uint32)
        row.setflags(write=False)
        # the nodes by need: those kept are a range (see near_boundary_key)
        a, b = self._node_range(node_needs, left, short)
        if a == b:
            return row, _NO_NODES, _NO_NODES
        return row, nodes[a:b], states[a:b]

    @staticmethod
    def _node_range(node_needs, left: int, short: int) -> tuple[int, int]:
        """The boundary nodes a position with ``left`` characters left and
        ``short`` still needed keeps, of its string's sorted by need."""
        a = int(np.searchsorted(node_needs, short)) if short else 0
        return a, int(np.searchsorted(node_needs, left, side="right"))

    def near_boundary_key(self, s: int):
        """``(terminal, state in its layer, first node, end)`` when lexer
        state ``s`` was walked by :meth:`_near_walk` in this grammar: its
        boundary nodes and their states are that range of its string's, so
        positions with one key pass the same tokens over the closing quote in
        any one parser context (their boundary walks are one: ~50-100 us each
        over o200k, at every position near the bound). Else ``None``."""
        near = self._near_bound(s)
        if near is None:
            return None
        ref = self._near_refs.get(near[:2])
        if ref is None:
            return None
        return (near[0], near[1], *self._node_range(ref[2], near[2], near[3]))

    def _near_ref(self, t: int, r: int) -> tuple:
        """:meth:`_near_walk`'s need per token id (its dtype's largest value for
        a token that leaves the terminal) from terminal ``t``'s place ``r`` in
        a character's layer, the boundary nodes with their need and lexer
        state, and the tokens that close the string too soon for some position
        (need below ``minLength``) with their need, all by need: those of
        :meth:`_bounded_walk`, with ``t``'s own states."""
        walk = self._near_walks.get((self.terms.bounded_tails[t], r))
        if walk is None:
            walk = self._bounded_walk(t, r)
        need, nodes, node_needs, past, closers, closer_needs = walk
        # past the quote a string's states are its own: its bound's, then the tail's
        close = 2 + LAYER * self.terms.bounded[t][1] + 1
        ids = {q: self.state_of_pairs(np.array([t, close + q], dtype=np.int32))
               for q in set(past.tolist())}
        states = np.array([ids[q] for q in past.tolist()], dtype=np.int32)
        states.setflags(write=False)
        return need, nodes, node_needs, states, closers, closer_needs

    def _bounded_walk(self, t: int, r: int) -> tuple:
        """The walk of the bounded strings with ``t``'s tail from place ``r``
        in a character's layer (kept): every such string of the grammar reads
        the same characters (the JSON ones, over one alphabet) and closes into
        the same bytes, so one walk (:func:`~constrain.cfg.lexer_kernels.bounded_needs`,
        over the widest of them) serves them all: two ``maxLength`` strings of
        one object cost one walk, not two (~1-2 ms each over o200k). The need
        per token, the boundary nodes with their need and their state past the
        quote (0 at the quote), and the tokens that close with a need below
        some string's ``minLength``, all by need."""
        bounded, tail = self.terms.bounded, self.terms.bounded_tails[t]
        group = [u for u, other in self.terms.bounded_tails.items() if other == tail]
        t = max(group, key=lambda u: bounded[u][1])
        widest = bounded[t][1]
        tab, offsets, accepting, _, vmap = self.terms.kernel_arrays
        trie = self.trie
        # a need is at most a token's bytes: int16 unless a token is longer
        dtype = np.int16 if trie.max_depth < 16_000 else np.int32
        base = int(offsets[t])
        known = None
        if r == 0:
            # from a character boundary, the text tokens' needs are the
            # vocabulary's (kept with the trie): only the exits are walked
            loops = np.empty(4, dtype=np.uint64)
            if gk.bounded_text(tab, accepting, vmap, base, widest, *trie.packed(), loops):
                known = trie.text_needs(loops, dtype)
        if known is None:
            need = np.full(trie.no_token + 1, np.iinfo(dtype).max, dtype=dtype)
            exits, exit_chars = _NO_EXITS, _NO_NODES
        else:
            need = known[0].copy()
            exits, exit_chars = trie.loop_exits(loops), known[1]
        closes = np.zeros(trie.no_token + 1, dtype=np.bool_)
        nodes, node_needs, local = gk.bounded_needs(
            tab, accepting, vmap, base, r, widest, *trie.packed(), need, closes, exits, exit_chars)
        need = trie.copy_to_duplicates(need[:32 * self.words32])
        lo = max(bounded[u][0] for u in group)
        if lo:
            closes = trie.copy_to_duplicates(closes[:32 * self.words32])
            closers = np.flatnonzero(closes & (need < lo)).astype(np.int32)
            closer_needs = need[closers]
            by_need = np.argsort(closer_needs, kind="stable")
            closers, closer_needs = closers[by_need], closer_needs[by_need]
        else:  # (no position is short of characters)
            closers, closer_needs = _NO_NODES, need[:0]
        by_need = np.argsort(node_needs, kind="stable")
        past = local[by_need] - (2 + LAYER * widest + 1)
        nodes, node_needs = nodes[by_need], node_needs[by_need]
        for a in (need, nodes, node_needs, past, closers, closer_needs):
            a.setflags(write=False)  # walks return views of them
        if len(self._near_walks) >= 8:
            self._near_walks.clear()  # 0.4 MB each on o200k
        walk = self._near_walks[(tail, r)] = (need, nodes, node_needs, past, closers, closer_needs)
        return walk

    def _walk_expanding(self, s: int, row, out, n, share_min: int, route: tuple) -> int:
        """``lexer_walk_rows`` from ``s`` (again, when ``n`` is the pending
        state a first call met), expanding each state it reports until it
        runs to the end; ``route`` is :meth:`_text_route`'s."""
        while True:
            if n is not None:
                if n > gk.PENDING_BASE:
                    return n
                self.ensure(gk.PENDING_BASE - n)
                row[:] = 0
            n = gk.lexer_walk_rows(self._views.desc, s, row, out, share_min, self.trie.multilingual,
                                   *route)

    def _text_route(self, s: int) -> tuple:
        """``(exits, route, target)``: the root children of the trie that
        lexer state ``s`` reads, once their first character is read, into a
        state ``target`` that reads any text back to itself (a JSON string's
        body: ``s`` itself, or "any other key" after an object's ``{"``;
        :func:`~constrain.cfg.lexer_kernels.text_route`), and the trie nodes
        where ``target`` stops reading text (:meth:`TokenTrie.loop_exits
        <constrain.vocab.trie.TokenTrie.loop_exits>`): the walk reads only
        those nodes' subtrees under such children. :data:`_NO_ROUTE` when
        there is no such state, or its loop set has too many exits: the walk
        then reads every live node itself."""
        route = np.empty(256, dtype=np.uint8)
        while True:
            target = int(gk.text_route(self.trans, self.walk_flags, self.reads_utf8, self._below,
                                       s, route))
            if target > gk.PENDING_BASE:
                break
            self.ensure(gk.PENDING_BASE - target)
        if target == 0:
            return _NO_ROUTE
        # read-only as _NO_ROUTE's: one signature of the walk kernels, the one
        # warm_up compiles (its small vocabulary keeps no exits, so it never
        # walks a route; a writable one compiled in the first real walk)
        route.setflags(write=False)
        exits = self.trie.loop_exits(self.loops[target])
        return _NO_ROUTE if exits is None else (exits, route, target)

    def _reuse(self, key: tuple, entry: tuple) -> tuple:
        """``(row, nodes, states)`` of the shared walk ``entry`` (under ``key``),
        its boundary states in this grammar's ids."""
        row, nodes, states, origin = entry
        if origin is not self._names:
            if origin is not None:
                states = _named_states(states, origin)
                self._shared.put(key, (row, nodes, states, None))
            which, keys = states
            local = [self._local_id(k) for k in keys]
            states = np.array(local, dtype=np.int32)[which] if len(which) \
                else np.zeros(0, dtype=np.int32)
        return row, nodes, states

    def __del__(self):
        names = getattr(self, "_names", None)
        if names is not None:
            names.compact()

    def _local_id(self, shared_key: tuple) -> int:
        """This grammar's lexer state with the shared key ``shared_key``."""
        hit = self._local_ids.get(shared_key)
        if hit is None:
            of_uid = self._term_of_uid
            local = sorted(zip([of_uid[u] for u in shared_key[0::2]], shared_key[1::2]))
            buf = np.asarray(local, dtype=np.int32).reshape(-1)
            hit = int(gk.find_state(self.kernel_arrays[1], buf))
            if hit < 0:
                raise AssertionError(f"lexer state {shared_key} is not in this grammar")
            self._local_ids[shared_key] = hit
        return hit


#: a lexer state's bytes in its tables, less its accepting terminals (one
#: uint64 per 64 terminals): a transitions row (256 int32), its loop bytes (4
#: uint64) and three one-byte flags (has_acc, walk_flags, reads_utf8)
_STATE_BYTES = 256 * 4 + 4 * 8 + 3
#: walk rows in a lexer's first slab and at most in one, and the bytes of
#: slabs a lexer allocates before it allocates rows one by one
#: (LexerTables._new_row)
_SLAB_FIRST = 4
_SLAB_ROWS = 32
_SLAB_BYTES = 8 << 20
#: the boundary nodes and states of a walk with none (read-only, shared)
_NO_NODES = np.zeros(0, dtype=np.int32)
_NO_NODES.flags.writeable = False
#: no text route (LexerTables._text_route): the walk finds its own way
#: (read-only, shared)
_NO_ROUTE = (np.zeros((0, EXIT_COLUMNS), dtype=np.int32), np.zeros(256, dtype=np.uint8), 0)
for _a in _NO_ROUTE[:2]:
    _a.flags.writeable = False
del _a
#: no loop exits (a length-bounded string walked over the whole trie)
_NO_EXITS = _NO_ROUTE[0]


class _StateNames:
    """Names the lexer states of one grammar across grammars: a state's key is
    its (terminal uid, local state) pairs, and the same key in two grammars is
    the same automaton state. Holds only the grammar's pair lists, so that the
    walks it names outlive the grammar. Memoised: a walk names the state of
    every boundary node, mostly the same few (Github_hard: ~1 ms of a 1.5 ms
    first visit went here)."""

    __slots__ = ("pairs", "poff", "uids", "memo", "n")

    def __init__(self, pairs: np.ndarray, poff: np.ndarray, uids: list):
        self.pairs, self.poff, self.uids = pairs, poff, uids
        self.memo: dict[int, tuple] = {}
        #: states in use (``poff[:n + 1]`` is meaningful)
        self.n = 1

    def compact(self) -> None:
        """Keep only the pairs of the states in use: called when the grammar is
        gone, whose tables had room to grow (64 kB and more, which its cached
        walks would otherwise keep alive)."""
        n = self.n
        self.poff = self.poff[:n + 1].copy()
        self.pairs = self.pairs[:int(self.poff[n])].copy()
        self.memo = {}

    def key(self, s: int) -> tuple:
        """State ``s``'s pairs with each terminal's uid for its id, flattened:
        ``(uid, local state, uid, local state, ...)``."""
        hit = self.memo.get(s)
        if hit is None:
            poff = self.poff
            p = self.pairs[poff.item(s):poff.item(s + 1)].tolist()
            uids = self.uids
            if len(p) == 2:  # most states: one terminal alive
                p[0] = uids[p[0]]
            else:
                p[0::2] = [uids[t] for t in p[0::2]]
            hit = self.memo[s] = tuple(p)
        return hit


def _named_states(states: np.ndarray, origin: _StateNames) -> tuple[np.ndarray, tuple]:
    """A shared walk's boundary states, ``states`` in the ids of the grammar
    that walked it (named by ``origin``), as ``(which, keys)``: node ``i``'s
    state has the key ``keys[which[i]]``.

    Done on a walk's first use outside that grammar, not when it is walked:
    most walks are never shared, and naming every boundary state cost ~7 us per
    first visit. A walk's hundreds of boundary nodes hold a few distinct
    states, each named once. The names come from the walking grammar's
    :class:`_StateNames`, alive while its walks are cached: with a weak
    reference to the grammar instead, every walk of a grammar dropped before
    the next compile (a server's usual case) was discarded on its first reuse,
    then walked again."""
    if len(states) > 64:  # np.unique: ~5 us, then C speed
        uniq, which = np.unique(states, return_inverse=True)
        uniq, which = uniq.tolist(), which.astype(np.int32)
    else:
        slot: dict = {}
        which = np.array([slot.setdefault(x, len(slot)) for x in states.tolist()],
                         dtype=np.int32)
        uniq = slot
    return which, tuple(origin.key(x) for x in uniq)


def walk_bytes(key: tuple, entry: tuple) -> int:
    """What a shared walk costs (:meth:`LexerTables.walk`): its key, row, nodes
    and states. Its ``origin`` is not counted: one per grammar, shared by all
    of that grammar's walks, and cut to the states in use once the grammar is
    gone (:meth:`_StateNames.compact`)."""
    row, nodes, states, _ = entry
    if isinstance(states, tuple):  # (which, keys)
        states = states[0].nbytes + nbytes(states[1])
    else:
        states = states.nbytes
    return nbytes(key) + row.nbytes + nodes.nbytes + states


__all__ = ["LexerTables", "TerminalAutomata", "terminal_dfa", "terminal_key", "automaton_bytes",
           "terminal_id_bytes", "walk_bytes"]
