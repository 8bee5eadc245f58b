"""Lark grammar text → :class:`GrammarIR`, the compiler's context-free grammar.

lark's own grammar loader reads the file (so ``%import common.X``, ``%ignore``,
``?rule`` inlining, ``[]`` ``*`` ``+`` ``?`` ``~n`` ``~n..m`` and templates mean
exactly what they mean in lark); what comes out is a flat CFG whose terminals are
regular expressions. Everything after this module is ours.

The language is what ``lark.Lark(text, parser="earley",
lexer="dynamic_complete")`` accepts, including how lark's dynamic lexer matches
a terminal (see docs/grammars.md):

* A terminal may end wherever lark's first match (``re.match``, leftmost-first:
  ``/a|ab/`` is ``a``, a lazy ``.*?`` stops early) of its regex, on the text
  from its start or on a prefix of that text, ends: the strings ``s`` with
  ``re.match(T, s).end() == len(s)``, which is the ``re.fullmatch`` language of
  the atomic group ``(?>T)``. Regex terminals are written so.
* An ``%ignore`` terminal is matched once where it may start, by its first
  match on the text from there, never on a prefix: a comment runs to the end of
  its line, blanks to the next non-blank. Ignored runs are therefore written
  into the terminals that follow them — every terminal ``T`` of the rules
  becomes ``(?:(?>I1)|(?>I2)|...)*T`` — and a run at the end of the text is
  the terminal :data:`IGNORED`, after the start symbol; the IR has no
  ``ignore`` list. The text after an ignored match decides where it ends; when
  that takes more than the one character after it, the grammar is refused.
* Where a terminal's match would look at text outside it — ``^``, ``\\A`` or a
  lookbehind before its start, ``$``, ``\\b`` or a lookahead past its end —
  lark's answer depends on which prefix it tries, so no constraint can follow
  it: such terminals are refused.

Every error is a :class:`GrammarError` naming the line and column (or, for a
size limit, a :class:`GrammarTooComplexError` naming them): syntax errors,
undefined symbols, terminals whose regex cannot be compiled, groups nested more
than :data:`MAX_GRAMMAR_DEPTH` deep (lark's loader recurses per level), and
rules that lark would expand into more than :data:`MAX_RULE_ALTERNATIVES`
alternatives (it distributes every group, optional and repetition: ``("a"~0..30)
~0..30`` is 31^30 of them, and its loader never finished).
"""

from __future__ import annotations

import ast
import dataclasses
import os
import re
from pathlib import Path

from constrain.automata.char_dfa import UndecidedAtomicExit, build_char_dfa
from constrain.automata.deadline import now, passed
from constrain.automata.regex_syntax import MAX_POSITIONS, MAX_REPEAT, Alt, Assert, Atomic, Chars, \
    Concat, Look, Repeat, nullable, parse_regex
from constrain.cfg.ir import GrammarIR, Terminal
from constrain.cfg.lexer import _regex_alternatives, _regex_literal, symbol_position
from constrain.errors import GrammarError, GrammarSyntaxError, GrammarTooComplexError, RegexError, \
    RegexTooLargeError, too_complex_at

_FLAG_BITS = {"i": re.IGNORECASE, "m": re.MULTILINE, "s": re.DOTALL, "u": 0, "x": re.VERBOSE,
              "l": re.LOCALE}

#: groups (``(`` ``[`` ``{``) nested deeper than this are refused
MAX_GRAMMAR_DEPTH = 50
#: the alternatives lark may expand one rule into (before it removes
#: duplicates); its loader takes ~50 µs each
MAX_RULE_ALTERNATIVES = 20_000
#: the symbols lark's expansion of all rules may write
MAX_GRAMMAR_SYMBOLS = 1_000_000
#: the nodes of one file's terminal definitions once lark has written each
#: terminal they use into them (it inlines every use): its loader takes 10-20
#: µs per node, so that 100,000 is 1-2 s; a chain of 300 terminals (``Tk: T(k-1)
#: "b"``) took 8.5 s and one of 17 doubling ones (``Tk: T(k-1) T(k-1)``) 25 s,
#: in lark's own code, where no time budget is checked
MAX_TERMINAL_NODES = 100_000
#: the user grammar files ``%import`` may read while one grammar loads (every
#: read counts: a file importing itself is refused here, not by recursion)
MAX_IMPORTED_FILES = 64
#: the characters of those files together
MAX_IMPORTED_CHARS = 4_000_000
#: the name of the terminal of an ignored run at the end of the text
IGNORED = "__IGNORED"
#: the states a terminal's checks here may build (its automaton is built later,
#: under the grammar's own max_states)
_CHECK_STATES = 50_000


def read_grammar_source(source) -> tuple[str, str | None]:
    """The grammar text of ``source`` (text, or a path to a ``.lark`` file) and the
    file's directory (for relative ``%import``), if any."""
    if isinstance(source, Path) or (isinstance(source, str) and "\n" not in source
                                    and source.endswith(".lark")):
        path = Path(source)
        if not path.is_file():
            raise GrammarError(f"grammar file {str(path)!r} not found")
        return path.read_text(encoding="utf-8"), str(path.parent)
    if not isinstance(source, str):
        raise GrammarError(f"a grammar is Lark text or a path to a .lark file, not {type(source).__name__}")
    return source, None


def load_lark_grammar(source, start: str = "start", *, deadline=None,
                      max_repeat: int = MAX_REPEAT,
                      max_positions: int = MAX_POSITIONS) -> GrammarIR:
    """Load a Lark grammar (text, or a path to a ``.lark`` file) into a :class:`GrammarIR`
    with lark's ``dynamic_complete`` semantics (see the module docstring).

    ``deadline``: a value of :func:`~constrain.automata.deadline.now`, the thread's CPU clock (or a
    :class:`~constrain.automata.deadline.Deadline`) the loading must finish by.
    ``max_repeat``: the largest count of a terminal regex's ``{m,n}``;
    ``max_positions``: the most character positions it may expand to
    (:class:`constrain.Limits`).

    Raises:
        GrammarError: bad syntax, an undefined or unusable symbol, an unknown
            start symbol, a ``%declare``-d terminal (it has no pattern to
            enforce), a terminal that matches the empty string or that Trellis
            cannot enforce exactly; with the line and column.
        GrammarTooComplexError: nesting, rule expansion or time past a limit.
    """
    from lark.exceptions import LarkError, UnexpectedInput
    from lark.load_grammar import load_grammar

    if not isinstance(start, str):
        raise GrammarError(f"the start symbol is a rule name, not {type(start).__name__}")
    text, directory = read_grammar_source(source)
    original = text
    text, schemas, refs = _llguidance_extensions(text)
    text, budgets = _rule_budgets(text)
    _check_nesting(text)
    raw = _load_plain(text, start)
    if raw is None:
        tree = _parse(text)
        _check_terminal_inlining(tree)
        imports = _ImportChecker(directory, deadline, _check_expansion(tree))
        _check_deadline(deadline)
        try:
            grammar, _ = load_grammar(text, "<grammar>", [imports], False)
            terms, rules, ignore = grammar.compile([start], set())
        except UnexpectedInput as e:
            raise GrammarSyntaxError(f"syntax error in grammar: {_first_line(e)}",
                                     getattr(e, "line", None), getattr(e, "column", None)) from None
        except LarkError as e:
            raise GrammarError(f"invalid grammar: {_first_line(e)}",
                               *_locate_error(str(e), text, start)) from None
        except (OSError, ImportError) as e:
            raise GrammarError(f"invalid grammar: {e}", *_locate_error(str(e), text, start)) \
                from None
        except RecursionError:
            raise GrammarTooComplexError("the grammar is nested too deeply for lark's loader") \
                from None
        except (GrammarError, GrammarTooComplexError):
            raise  # an imported file's refusal
        except Exception as e:  # lark's own bugs on malformed input (a TypeError in
            # its error messages, seen on a mutated grammar): still a refusal
            raise _lark_failed(e, text, start) from None
        raw = _raw_from_lark(terms, rules, ignore, text, start)
    _check_deadline(deadline)
    ir = _finish(raw, text, start, deadline,
                 {"max_repeat": max_repeat, "max_positions": max_positions})
    if refs:
        ir = _token_terminals(ir, refs)
    if budgets:
        ir = dataclasses.replace(ir, source=original, budgets={
            i: budgets[t.name] for i, t in enumerate(ir.terminals) if t.name in budgets})
    return _splice_json(ir, schemas, original, deadline) if schemas else ir


def _check_deadline(deadline) -> None:
    if deadline is not None and passed(deadline):
        raise GrammarTooComplexError("loading the grammar exceeded its time budget "
                                     "(pass time_budget= to raise it)")


class _ImportChecker:
    """lark's loader of the user files ``%import`` names (``%import
    dir.file.NAME`` from the grammar's directory, ``%import .file.NAME``
    relative to the importing file): each file goes through the checks the
    grammar text had before lark's loader sees it (nesting, expansion, with the
    symbols counted over all files), and the files read are bounded in number
    (:data:`MAX_IMPORTED_FILES`) and size (:data:`MAX_IMPORTED_CHARS`), so a
    hostile file is refused in bounded time. lark's own grammars
    (``common.lark``) are left to lark's loader."""

    def __init__(self, directory: str | None, deadline, symbols: int):
        self.directory, self.deadline, self.symbols = directory, deadline, symbols
        self.files = self.chars = 0

    def __call__(self, base_path, grammar_path: str):
        if base_path is not None and not isinstance(base_path, str):
            raise OSError(grammar_path)  # inside lark's package: its loader's
        roots = [r for r in (self.directory, base_path) if r is not None]
        for root in roots:
            path = os.path.join(root, grammar_path)
            if not os.path.isfile(path):
                continue
            _check_deadline(self.deadline)
            self.files += 1
            if self.files > MAX_IMPORTED_FILES:
                raise too_complex_at(f"%import read more than {MAX_IMPORTED_FILES} grammar files "
                                   f"(a file that imports itself?)", None, None)
            try:
                with open(path, encoding="utf-8") as f:
                    text = f.read(MAX_IMPORTED_CHARS - self.chars + 1)
            except UnicodeDecodeError as e:
                raise GrammarError(f"imported grammar file {path!r} is not UTF-8: {e.reason}") \
                    from None
            self.chars += len(text)
            if self.chars > MAX_IMPORTED_CHARS:
                raise too_complex_at(f"the grammar files %import read hold more than "
                                   f"{MAX_IMPORTED_CHARS:,} characters", None, None)
            where = f"in imported grammar file {path!r}: "
            try:
                _check_nesting(text)
                tree = _parse(text)
                _check_terminal_inlining(tree)
                self.symbols = _check_expansion(tree, self.symbols)
            except GrammarError as e:
                raise type(e)(where + e.msg, e.line, e.column) from None
            except GrammarTooComplexError as e:
                raise too_complex_at(where + getattr(e, "msg", str(e)), getattr(e, "line", None),
                                   getattr(e, "column", None)) from None
            return path, text
        raise OSError(grammar_path)  # lark then tries its own grammars


# -- what the loaders produce ----------------------------------------------------------


@dataclasses.dataclass
class _RawTerminal:
    """A terminal as lark defines it: ``regexp`` its ``Pattern.to_regexp()``
    (flags scoped inside), ``literal`` the text of a string terminal, ``raw``
    its source text (``"if"i``, ``/a+/``) when it has one."""

    name: str
    regexp: str
    flags: int
    literal: str | None
    raw: str | None


@dataclasses.dataclass
class _Raw:
    """A loaded grammar before :func:`_finish`: rules ``(lhs, rhs)`` over
    terminal ids ``t >= 0`` and nonterminals ``-1 - n`` (``nonterminals[0]`` is
    the start symbol)."""

    terminals: list
    nonterminals: list
    rules: list
    ignore: list


def _raw_from_lark(terms, rules, ignore, text: str, start: str) -> _Raw:
    terminals, index = [], {}
    for t in terms:
        if t.pattern is None:
            raise GrammarError(f"terminal {t.name} is %declare-d: it has no pattern to enforce",
                               *symbol_position(text, t.name))
        flags = 0
        for f in t.pattern.flags:
            flags |= _FLAG_BITS.get(f, 0)
        index[t.name] = len(terminals)
        literal = t.pattern.value if type(t.pattern).__name__ == "PatternStr" else None
        terminals.append(_RawTerminal(t.name, t.pattern.to_regexp(), flags, literal,
                                      getattr(t.pattern, "raw", None)))
    nt_index: dict[str, int] = {start: 0}
    nonterminals = [start]

    def nt(name: str) -> int:
        if name not in nt_index:
            nt_index[name] = len(nonterminals)
            nonterminals.append(name)
        return -1 - nt_index[name]

    out = []
    for r in rules:
        rhs = []
        for s in r.expansion:
            if s.is_term:
                if s.name not in index:
                    raise GrammarError(f"terminal {s.name} is used but not defined",
                                       *symbol_position(text, s.name))
                rhs.append(index[s.name])
            else:
                rhs.append(nt(s.name))
        out.append((-1 - nt(r.origin.name), tuple(rhs)))
    return _Raw(terminals, nonterminals, out, [index[n] for n in ignore if n in index])


# -- terminals as lark's dynamic lexer matches them ------------------------------------------


def _finish(raw: _Raw, text: str, start: str, deadline, limits: dict) -> GrammarIR:
    """The IR of ``raw``: each terminal written as lark matches it, the ignored
    runs written into the terminals (see the module docstring); ``limits``:
    ``max_repeat`` and ``max_positions``, as :func:`parse_regex` takes them."""
    if not any(lhs == 0 for lhs, _ in raw.rules):
        # no rule to point at: where the start symbol is used, else the top
        where = symbol_position(text, start)
        raise GrammarError(f"the start symbol {start!r} has no rule (define it, or pass "
                           f"start=)", *(where if where[0] else (1, 1)))
    used = sorted({s for _, rhs in raw.rules for s in rhs if s >= 0})
    parts = {}
    for t in sorted(set(used) | set(raw.ignore)):
        parts[t] = _terminal_part(raw.terminals[t], text, deadline, limits)
    prefix = ""
    if raw.ignore:
        runs = []
        for t in raw.ignore:
            part = parts[t]
            if part.startswith("(?>"):
                _check_ignore(raw.terminals[t], part, text, deadline, limits)
            if part not in runs:
                runs.append(part)
        prefix = "(?:" + "|".join(runs) + ")*"
    terminals, new_id = [], {}
    for t in used:
        rt = raw.terminals[t]
        new_id[t] = len(terminals)
        part = parts[t]
        if prefix:
            terminals.append(Terminal(rt.name, prefix + part))
        elif part == rt.regexp:
            terminals.append(Terminal(rt.name, part, rt.flags, rt.literal))
        else:  # flags scoped inside the part
            terminals.append(Terminal(rt.name, part))
    nonterminals = list(raw.nonterminals)
    if prefix:
        # an ignored run may also end the text: top -> start | start IGNORED
        ignored = len(terminals)
        terminals.append(Terminal(IGNORED, "(?:" + "|".join(runs) + ")+"))
    n_t = len(terminals)
    rules = [(lhs, tuple(new_id[s] if s >= 0 else n_t - 1 - s for s in rhs))
             for lhs, rhs in raw.rules]
    start_index = 0
    if prefix:
        start_index = len(nonterminals)
        nonterminals.append(start)  # a name to show: the symbol the user knows
        rules += [(start_index, (n_t,)), (start_index, (n_t, ignored))]
    return GrammarIR(terminals, nonterminals, rules, start_index, (), text)


def _scoped(regexp: str) -> str:
    """``regexp`` with its leading global flags (``(?i)abc``) made scoped
    (``(?i:abc)``), so that it can sit inside a larger pattern."""
    m = re.match(r"((?:\(\?[aiLmsux]+\))+)", regexp)
    if not m:
        return regexp
    flags = "".join(re.findall(r"[aiLmsux]", m.group(1)))
    return f"(?{flags}:{regexp[m.end():]})"


def _terminal_part(rt: _RawTerminal, text: str, deadline, limits: dict) -> str:
    """The regex of ``rt`` as lark's dynamic lexer matches it, checked: a
    string as it is, a regex as ``(?>regex)`` (leftmost-first), or without
    the atomic group where that changes nothing (a literal; an alternation of
    literals, less those an earlier one is a prefix of)."""
    where = symbol_position(text, rt.name, rt.raw)
    if where[0] is None:  # lark keeps no source text for a range ("a".."z")
        m = re.fullmatch(r"\[(.)-(.)\]", rt.regexp)
        found = m and re.search(r'"%s"\s*\.\.\s*"%s"' % (re.escape(m.group(1)),
                                                        re.escape(m.group(2))), text)
        where = _position(text, found.start()) if found else (1, 1)
    regexp = rt.regexp
    if rt.literal is not None:
        return regexp
    if not rt.flags and _regex_literal(regexp):
        return regexp
    alts = _regex_alternatives(regexp) if not rt.flags else None
    if alts and all(alts):
        kept = []
        for a in alts:
            if not any(a.startswith(k) for k in kept):
                kept.append(a)
        return "|".join(re.escape(a) for a in kept)
    inner = _scoped(regexp)
    part = f"(?>{inner})"
    try:
        node = parse_regex(part, **limits).body
    except RegexTooLargeError as e:
        # a limit the caller can raise, not a construct Trellis lacks
        raise too_complex_at(f"terminal {rt.name}: {e.msg} (pattern {regexp[:80]!r})", *where) \
            from None
    except RegexError as e:
        try:
            parse_regex(inner, **limits)
        except RegexError as e2:  # an error of the regex itself
            raise _pattern_error(rt, e2.msg, e2.offset, *where) from None
        if _matches_nothing(inner, deadline, limits):
            return inner  # lark never matches it either: an unusable terminal
        offset = None if e.offset is None else max(e.offset - 3, 0)
        msg = e.msg.replace(" inside an atomic group (or possessive quantifier)", "")
        raise _pattern_error(rt, msg.replace(" is not supported", "") + _PAST_END, offset,
                             *where) from None
    past = _looks_past_end(node, False)
    if past is not None and not _matches_nothing(inner, deadline, limits):
        what, offset = past
        raise _pattern_error(rt, what + _PAST_END, None if offset is None else max(offset - 3, 0),
                             *where)
    if _looks_before_start(node, 0) and not _matches_nothing(inner, deadline, limits):
        raise _pattern_error(
            rt, "an assertion on the text before the terminal: lark tests it on the whole "
            "text for its first match and on the terminal alone for the others, which no "
            "constraint can follow", None, *where)
    if nullable(node):
        dfa = build_char_dfa(parse_regex(part, **limits), max_states=_CHECK_STATES,
                             deadline=deadline, pattern=part)
        if dfa.accepting[0]:
            raise GrammarError(f"terminal {rt.name} matches the empty string "
                               f"(pattern {regexp[:80]!r}); terminals must consume input",
                               *where)
    return part


def _pattern_error(rt: _RawTerminal, msg: str, offset: int | None, line, column) -> GrammarError:
    at = f" at offset {offset}" if offset is not None else ""
    return GrammarError(f"terminal {rt.name} has a pattern Trellis cannot compile exactly: "
                        f"{msg} (pattern {rt.regexp[:80]!r}{at})", line, column)


def _matches_nothing(regexp: str, deadline, limits: dict) -> bool:
    """Whether ``regexp`` (which parses) matches nowhere in any text: with any
    text around it, so that its assertions see what they would see in lark's
    (``a(?=b)`` matches ``a`` before a ``b``; ``a^b`` never matches)."""
    anywhere = f"(?s:.)*(?:{regexp})(?s:.)*"
    return not build_char_dfa(parse_regex(anywhere, **limits), max_states=_CHECK_STATES,
                              deadline=deadline, pattern=regexp).accepting.any()


_PAST_END = (": lark matches a terminal leftmost-first, testing it on the text after the "
             "match or on a prefix of it as it tries them, which no constraint can follow")
#: the assertions on the next character
_NEXT_CHAR = ("end", "end_line", "end_string", "boundary", "non_boundary")


def _looks_past_end(node, behind: bool):
    """What in ``node`` (a terminal's regex) may look at the text after the
    terminal's match, as ``(what, offset)``, or ``None``: a lookahead, an
    assertion on the next character (inside a lookbehind: one that may end
    its body; a ``$``, which also looks two characters ahead, anywhere)."""
    t = type(node)
    if t is Chars:
        return None
    if t is Assert:
        if node.kind == "end" or (not behind and node.kind in _NEXT_CHAR):
            return "an assertion on the next character ($, \\Z, \\b, \\B)", None
        return None
    if t is Look:
        if not node.behind:
            return "a lookahead", node.offset
        found = _looks_past_end(node.body, True)
        if found is None and _ends_with_next_char(node.body):
            found = "a lookbehind that ends with an assertion on the next character", node.offset
        return found
    if t is Atomic:
        return _looks_past_end(node.body, behind)
    if t is Repeat:
        return _looks_past_end(node.item, behind)
    for item in node.items:  # Concat, Alt
        found = _looks_past_end(item, behind)
        if found is not None:
            return found
    return None


def _ends_with_next_char(node) -> bool:
    """Whether a match of ``node`` may end with an assertion on the next
    character after its last character."""
    t = type(node)
    if t is Chars:
        return False
    if t is Assert:
        return node.kind in _NEXT_CHAR
    if t is Look:
        return node.behind and _ends_with_next_char(node.body)
    if t is Atomic:
        return _ends_with_next_char(node.body)
    if t is Repeat:
        return node.hi != 0 and _ends_with_next_char(node.item)
    if t is Alt:
        return any(_ends_with_next_char(i) for i in node.items)
    for item in reversed(node.items):  # Concat
        if _ends_with_next_char(item):
            return True
        if not nullable(item):
            return False
    return False


def _looks_before_start(node, offset: int) -> bool:
    """Whether an assertion of ``node``, matched ``offset`` characters (at
    least) after the terminal's start, looks at the character before it."""
    t = type(node)
    if t is Chars:
        return False
    if t is Assert:
        return offset == 0 and node.kind in ("begin", "begin_line", "boundary", "non_boundary")
    if t is Look:
        if node.behind:
            return offset < node.width or _looks_before_start(node.body, offset - node.width)
        return _looks_before_start(node.body, offset)
    if t is Concat:
        for item in node.items:
            if _looks_before_start(item, offset):
                return True
            offset += _min_width(item)
        return False
    if t is Repeat:
        return _looks_before_start(node.item, offset)
    if t is Atomic:
        return _looks_before_start(node.body, offset)
    return any(_looks_before_start(i, offset) for i in node.items)  # Alt


def _min_width(node) -> int:
    t = type(node)
    if t is Chars:
        return 1
    if t is Concat:
        return sum(_min_width(i) for i in node.items)
    if t is Repeat:
        return node.lo * _min_width(node.item)
    if t is Atomic:
        return _min_width(node.body)
    if t is Assert or t is Look:
        return 0
    return min(_min_width(i) for i in node.items)  # Alt


def _check_ignore(rt: _RawTerminal, part: str, text: str, deadline, limits: dict) -> None:
    """Refuse an ignored terminal whose first match lark could only tell from
    more than the one character after it (``/a(bc)*/``: after ``a``, ``bc``
    would extend it): the ignored run is written into the next terminal, which
    may be that one character."""
    try:
        build_char_dfa(parse_regex(part + "(?s:.)", **limits), max_states=_CHECK_STATES,
                       deadline=deadline, pattern=part, strict_atomic_exits=True)
    except UndecidedAtomicExit:
        raise GrammarError(
            f"the ignored terminal {rt.name} ({rt.regexp[:60]!r}) ends where lark's first match "
            f"of it ends, which the text after it decides; here that can take more than the "
            f"next character, and Trellis decides it from one",
            *symbol_position(text, rt.name, rt.raw, ignore=True)) from None


# -- limits on what lark's loader is given ---------------------------------------------


def _check_nesting(text: str) -> None:
    """Refuse groups nested deeper than :data:`MAX_GRAMMAR_DEPTH`: lark's loader,
    and the plain loader here, recurse per level. Strings, regexes and comments
    are skipped."""
    if text.count("(") + text.count("[") + text.count("{") <= MAX_GRAMMAR_DEPTH:
        return
    depth = 0
    line, col0 = 1, 0
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c == "\n":
            line, col0 = line + 1, i + 1
        elif c == '"':
            i += 1
            while i < n and text[i] not in '"\n':
                i += 2 if text[i] == "\\" else 1
        elif c == "/":
            if text.startswith("//", i):
                while i < n and text[i] != "\n":
                    i += 1
                continue
            i += 1
            while i < n and text[i] not in "/\n":
                i += 2 if text[i] == "\\" else 1
        elif c in "([{":
            depth += 1
            if depth > MAX_GRAMMAR_DEPTH:
                raise too_complex_at(f"groups are nested more than {MAX_GRAMMAR_DEPTH} deep",
                                   line, i - col0 + 1)
        elif c in ")]}":
            depth = max(depth - 1, 0)
        i += 1


def _parse(text: str):
    """lark's parse tree of the grammar text (the first step of its loader)."""
    from lark.exceptions import LarkError, UnexpectedInput
    from lark.load_grammar import _parse_grammar

    try:
        return _parse_grammar(text, "<grammar>")
    except UnexpectedInput as e:
        raise GrammarSyntaxError(f"syntax error in grammar: {_first_line(e)}",
                                 getattr(e, "line", None), getattr(e, "column", None)) from None
    except LarkError as e:
        # this stage only parses: lark words its syntax errors as its own
        # GrammarError ("Unclosed parenthesis", "Expecting rule or terminal
        # definition (missing colon)"), and they were told as a plain one
        raise GrammarSyntaxError(f"syntax error in grammar: {_first_line(e)}",
                                 *_locate_error(str(e), text, None)) from None
    except RecursionError:
        raise GrammarTooComplexError("the grammar is nested too deeply for lark's parser") \
            from None
    except Exception as e:  # lark's own bugs on malformed input
        raise _lark_failed(e, text, None) from None


def _lark_failed(e: Exception, text: str, start: str | None) -> GrammarError:
    """The refusal of a grammar on which lark itself failed (not with one of
    its errors)."""
    return GrammarError(f"invalid grammar: lark failed on it ({type(e).__name__}: "
                        f"{_first_line(e)})", *_locate_error(str(e), text, start))


#: saturation of :func:`_check_expansion`'s counts: sizes past it all refuse
_BIG = MAX_RULE_ALTERNATIVES * 100


def _sat(x: int) -> int:
    return x if x < _BIG else _BIG


def _measure(node, side: list) -> tuple[int, int]:
    """``(alternatives, symbols)`` of the expansion ``node`` of a rule once lark
    distributed it; ``side`` gets the alternatives and symbols of the new rules
    it makes. (Module level: a recursive nested function is a reference cycle,
    which held each grammar's tree until the cyclic collector ran.) A leaf is
    a lark ``Token``, a ``str``."""
    big = _BIG
    if isinstance(node, str):
        return 1, 1
    d = node.data
    if d == "expansions":
        a = s = 0
        for c in node.children:
            ca, cs = _measure(c, side)
            a, s = _sat(a + ca), _sat(s + cs)
        return a, s
    if d == "alias":
        return _measure(node.children[0], side)
    if d == "expansion":
        items = [_measure(c, side) for c in node.children]
        a = 1
        for ca, _ in items:
            a = _sat(a * ca)
        s = 0
        for ca, cs in items:
            s = _sat(s + cs * (a // ca if ca else 0))
        return a, s
    if d == "maybe":
        a, s = _measure(node.children[0], side)
        return _sat(a + 1), _sat(2 * s)
    if d == "expr":
        a, s = _measure(node.children[0], side)
        op = node.children[1]
        if op == "?":
            return _sat(a + 1), s
        if op in ("*", "+"):
            side[0], side[1] = _sat(side[0] + 2 * a), _sat(side[1] + 3 * s)
            return (2, 1) if op == "*" else (1, 1)
        nums = [int(c) for c in node.children[2:] if isinstance(c, str)]
        lo, hi = (nums[0], nums[0]) if len(nums) == 1 else (nums[0], nums[-1])
        if hi >= 50:  # lark's factored helper rules: a few, of up to ~a^5 each
            side[0] = _sat(side[0] + 20 * _sat(a ** 5 if a < 50 else big))
            side[1] = _sat(side[1] + 20 * _sat(s * 10))
            return 1, 2
        ra = rs = 0
        for k in range(lo, hi + 1):
            if a > 1 and k > 1 and a ** min(k, 40) >= big:
                return big, big
            ra = _sat(ra + _sat(a ** k))
            rs = _sat(rs + _sat(k * s * _sat(a ** max(k - 1, 0))))
        return ra, rs
    return 1, 1  # a value: a name, a literal, a range, a template use


def _check_terminal_inlining(tree) -> None:
    """Refuse terminal definitions that lark's loader would write out into more
    than :data:`MAX_TERMINAL_NODES` nodes together: it replaces each use of a
    terminal inside another's definition by that definition, so a chain of
    terminals grows quadratically and one that uses the last twice
    exponentially. Named at the terminal whose written-out definition is the
    largest."""
    from lark import Tree

    defs = {}
    for stmt in tree.children:
        if isinstance(stmt, Tree) and stmt.data == "term" and stmt.children:
            defs.setdefault(str(stmt.children[0]), stmt)
    if len(defs) < 2:
        return
    own: dict[str, int] = {}
    uses: dict[str, list] = {}
    for name, stmt in defs.items():
        nodes, used = 0, []
        for sub in stmt.children[-1].iter_subtrees():
            nodes += 1
            for c in sub.children:
                if not isinstance(c, Tree):
                    nodes += 1
                    if type(c).__name__ == "Terminal" and c.name in defs:
                        used.append(c.name)
        own[name], uses[name] = nodes, used
    if not any(uses.values()):
        return
    size: dict[str, int] = {}
    entered: set[str] = set()
    cap = MAX_TERMINAL_NODES + 1
    for name in defs:
        stack = [(name, False)]
        while stack:  # a chain may be thousands long: no recursion
            x, ready = stack.pop()
            if x in size:
                continue
            if ready:
                # a cycle (lark refuses it) counts a terminal not done yet once
                size[x] = min(cap, own[x] + sum(size.get(u, own[u]) for u in uses[x]))
                continue
            if x in entered:
                continue
            entered.add(x)
            stack.append((x, True))
            stack.extend((u, False) for u in uses[x] if u not in entered)
    total = sum(size.values())
    if total > MAX_TERMINAL_NODES:
        name = max(size, key=size.get)
        tok = defs[name].children[0]
        shown = f"more than {MAX_TERMINAL_NODES:,}" if size[name] >= cap else f"{size[name]:,}"
        raise too_complex_at(
            f"terminal {name} would be written out by lark's loader into {shown} nodes (it "
            f"inlines every terminal a terminal uses; at most {MAX_TERMINAL_NODES:,} for a "
            f"grammar's terminals together): make the repeated part a rule",
            getattr(tok, "line", None), getattr(tok, "column", None))


def _check_expansion(tree, total: int = 0) -> int:
    """Refuse a rule that lark's loader would expand into more than
    :data:`MAX_RULE_ALTERNATIVES` alternatives, or a grammar into more than
    :data:`MAX_GRAMMAR_SYMBOLS` symbols (``total``: the symbols of the files
    counted before this one); return the symbols counted so far. lark writes each rule as a list of
    alternatives: a group, ``[x]``, ``x?``, ``x*`` and ``x~m..n`` (``n < 50``)
    inside a sequence multiply the sequence's alternatives (the repetitions
    ``*``, ``+`` and ``~m..n`` past 50 go to new rules, counted apart)."""
    from lark import Tree

    big = _BIG
    sat = _sat

    for stmt in tree.children:
        if not isinstance(stmt, Tree) or stmt.data not in ("rule", "override", "extend"):
            continue
        rule = stmt.children[0] if stmt.data != "rule" else stmt
        if not isinstance(rule, Tree) or rule.data != "rule":
            continue
        name = rule.children[1]
        side = [0, 0]  # the alternatives and symbols of the new rules it makes

        alts, symbols = _measure(rule.children[-1], side)
        alts, symbols = sat(alts + side[0]), sat(symbols + side[1])
        total = sat(total + symbols)
        if alts > MAX_RULE_ALTERNATIVES:
            shown = "more than " + f"{big:,}" if alts >= big else f"{alts:,}"
            raise too_complex_at(
                f"rule {name} would be expanded by lark's loader into {shown} alternatives "
                f"(at most {MAX_RULE_ALTERNATIVES:,}): write its repeated or optional groups as "
                f"rules of their own", getattr(name, "line", None), getattr(name, "column", None))
        if total > MAX_GRAMMAR_SYMBOLS:
            raise too_complex_at(
                f"the grammar would be expanded by lark's loader into more than "
                f"{MAX_GRAMMAR_SYMBOLS:,} symbols", getattr(name, "line", None),
                getattr(name, "column", None))
    return total


# -- places -------------------------------------------------------------------------


def _first_line(e: Exception) -> str:
    """The first line of lark's message, less the position lark writes into it
    ("at line 3, column 7": the GrammarError carries it as its line and column,
    and says it once) and with a token shown as its text (``')'``, not
    ``Token('_RPAR', ')')``)."""
    if not str(e).strip():
        return type(e).__name__
    line = str(e).strip().splitlines()[0]
    line = re.sub(r"Token\('\w+', ('(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\")\)", r"\1", line)
    return re.sub(r",?\s*\bat line \d+,? column \d+(?: in <grammar>)?[.:]?\s*$", "", line) or line


def _locate_error(message: str, text: str, start: str | None) -> tuple[int | None, int | None]:
    """Line and column for a lark error message: its own position when it gives
    one, else the first place it names that is found in the text (a quoted or
    capitalised symbol, the source of a literal)."""
    m = re.search(r"at line (\d+) column (\d+)", message)
    if m:
        return int(m.group(1)), int(m.group(2))
    m = re.search(r"line (\d+)", message)
    if m:
        return int(m.group(1)), 1
    # a literal's own text: lark quotes it in parentheses, backquotes or as repr
    for lit in re.findall(r"\((\"[^\n]*?\"i?|/[^\n]*?/[imslux]*)\)", message) + \
            re.findall(r"`(.*?)`", message):
        pos = symbol_position(text, "", lit)
        if pos[0] is not None:
            return pos
    for q in re.findall(r"\('((?:[^'\\]|\\.)*)'", message):
        try:
            body = _string_literal("'" + q + "'")
        except (SyntaxError, ValueError):
            body = q
        for needle in (body, q):
            i = text.find(needle) if needle else -1
            if i >= 0:
                return _position(text, i)
    names = re.findall(r"'([A-Za-z_][A-Za-z_0-9]*)'", message) + \
        re.findall(r"\b([A-Z_][A-Z_0-9]+)\b", message) + \
        re.findall(r"\"([A-Za-z_][A-Za-z_0-9]*)\"", message)
    for name in names:
        pos = symbol_position(text, name)
        if pos[0] is not None:
            return pos
    return (1, 1) if text.strip() else (None, None)


def _position(text: str, i: int) -> tuple[int, int]:
    line = text.count("\n", 0, i) + 1
    return line, i - (text.rfind("\n", 0, i) + 1) + 1


# -- llguidance's extensions ----------------------------------------------------------
#
# Lark text pasted from llguidance's documentation: ``%json { schema }`` where a
# rule item may stand (the schema's JSON values, compiled by the JSON Schema front
# end, flexible whitespace), ``%import common.*`` (every terminal of lark's
# common.lark that the grammar does not define itself), special-token terminals
# (``<|name|>``, ``<[id]>``, ``<[1,3,5-7]>``, ``<[^id]>``: token references,
# GrammarIR.tokens), each a placeholder terminal of its own in rules.

_JSON_PLACEHOLDER = "JSONSCHEMA__%d"
_TOKEN_PLACEHOLDER = "TOKENREF__%d"
_PLACEHOLDER_NAME = re.compile(r"(?:JSONSCHEMA|TOKENREF)__[0-9]+")
_COMMON_STAR = re.compile(r"(?m)^([ \t]*)%import[ \t]+common\.\*[ \t]*(?=$|//)")
_DEFINITION = re.compile(r"(?m)^[ \t]*[?!]?([_a-zA-Z][_a-zA-Z0-9]*)(?:\{[^}\n]*\})?(?:\.-?\d+)?[ \t]*:")


def _code_spans(text: str):
    """The spans ``(start, end)`` of ``text`` outside string literals, regexes
    and comments."""
    i, n, begin = 0, len(text), 0
    while i < n:
        c = text[i]
        if c == "/" and text.startswith("//", i):
            yield begin, i
            while i < n and text[i] != "\n":
                i += 1
            begin = i
        elif c in '"/':
            yield begin, i
            i += 1
            while i < n and text[i] != c and text[i] != "\n":
                i += 2 if text[i] == "\\" else 1
            i += 1
            begin = i
        else:
            i += 1
    yield begin, n


def _llguidance_extensions(text: str) -> tuple[str, dict, dict]:
    """``text`` with llguidance's extensions rewritten into lark (see above),
    the schemas of its ``%json`` items: placeholder terminal name →
    ``(schema, offset in text)``, and its token references: placeholder
    terminal name → :class:`~constrain.cfg.ir.TokenRef`. Every line stays
    where it was."""
    if "%json" not in text and "<" not in text and "common.*" not in text:
        return text, {}, {}
    import json

    out, schemas, refs, last, pending = [], {}, {}, 0, 0

    def emit(segment: str) -> None:
        nonlocal pending
        if pending and "\n" in segment:  # the lines a schema spanned, after its line
            segment = segment.replace("\n", "\n" * (pending + 1), 1)
            pending = 0
        out.append(segment)

    for begin, end in list(_code_spans(text)):
        for m in re.finditer(r"<\[|<\||%json\b", text[begin:end]):
            at = begin + m.start()
            if at < last:
                continue  # inside a %json value
            head = None
            for d in _DEFINITION.finditer(text, 0, at):
                head = d.group(1)
            what = "%json" if m.group() == "%json" else "a token reference"
            if head is not None and head.lstrip("_").isupper():
                raise GrammarError(f"{what} cannot be used in terminals (here in {head}); "
                                   f"use it in a rule", *_position(text, at))
            if m.group() != "%json":
                from constrain.cfg.token_refs import parse_token_ref

                ref, stop = parse_token_ref(text, at, angle_names=False)
                name = _TOKEN_PLACEHOLDER % len(refs)
                refs[name] = ref
                emit(text[last:at])
                out.append(name)
                last = stop
                continue
            j = at + len("%json")
            while j < len(text) and text[j] in " \t\r\n":
                j += 1
            try:
                schema, stop = json.JSONDecoder().raw_decode(text, j)
            except json.JSONDecodeError as e:
                raise GrammarError(f"%json: invalid JSON ({e.msg})", *_position(text, e.pos)) \
                    from None
            except RecursionError:
                raise too_complex_at("%json: the schema is nested too deeply",
                                   *_position(text, at)) from None
            name = _JSON_PLACEHOLDER % len(schemas)
            schemas[name] = (schema, at)
            emit(text[last:at])
            out.append(name)
            pending += text.count("\n", at, stop)
            last = stop
    emit(text[last:])
    body = "".join(out) + "\n" * pending
    for name in schemas:
        body += f'\n{name}: "%json {name}"'
    for name in refs:
        body += f'\n{name}: "%token {name}"'
    if _COMMON_STAR.search(body):
        body = _COMMON_STAR.sub(lambda m: m.group(1) + _common_import(body), body)
    return body, schemas, refs


def _token_terminals(ir: GrammarIR, refs: dict) -> GrammarIR:
    """``ir`` with the placeholder terminals of ``refs`` made token references.
    A reference has no text to write the ignored runs into: where the grammar
    has them, each use of it becomes ``(IGNORED? reference)``."""
    from constrain.cfg.ir import TOKEN_PATTERN

    terminals, tokens = list(ir.terminals), {}
    for i, t in enumerate(terminals):
        if t.name in refs:
            terminals[i] = Terminal(t.name, TOKEN_PATTERN)
            tokens[i] = refs[t.name]
    ignored = next((i for i, t in enumerate(terminals) if t.name == IGNORED), None)
    if ignored is None:
        return dataclasses.replace(ir, terminals=tuple(terminals), tokens=tokens)
    n_t = len(terminals)
    nonterminals, rules, sym = list(ir.nonterminals), list(ir.rules), {}
    for t in sorted(tokens):
        sym[t] = n_t + len(nonterminals)
        rules += [(len(nonterminals), (t,)), (len(nonterminals), (ignored, t))]
        nonterminals.append(terminals[t].name.lower())
    rules = [(lhs, rhs if lhs >= len(ir.nonterminals) else tuple(sym.get(x, x) for x in rhs))
             for lhs, rhs in rules]
    return dataclasses.replace(ir, terminals=tuple(terminals), nonterminals=tuple(nonterminals),
                               rules=tuple(rules), tokens=tokens)


# -- rule attributes: ``name[max_tokens=N]: body`` ---------------------------------------
#
# llguidance's lexeme options. A rule with attributes must have a body of
# terminals only (strings, regexes, TERMINAL names): it is one terminal, which
# the rule is rewritten into (``BUDGETED__NAME: body`` where the head was, and
# ``name: BUDGETED__NAME`` after the last line, so that every line stays where
# it was), and ``max_tokens`` becomes its token budget (GrammarIR.budgets).

_ATTRIBUTED = re.compile(r"(?m)^([ \t]*)([?!]?)([_a-zA-Z][_a-zA-Z0-9]*)([ \t]*\[([^\]\n]*)\])"
                         r"(?=[ \t]*:)")
_BODY_TOKEN = re.compile(r"""
    (?P<ws>\s+) | (?P<comment>//[^\n]*|\#[^\n]*)
  | (?P<string>"(?:\\.|[^"\\\n])*"i?)
  | (?P<regexp>/(?!/)(?:\\.|[^/\\\n])*/[imslux]*)
  | (?P<name>[_a-zA-Z][_a-zA-Z0-9]*)
  | (?P<arrow>->)
  | (?P<other>.)
""", re.VERBOSE)


def _rule_budgets(text: str) -> tuple[str, dict]:
    """``text`` with every ``name[attributes]:`` rule rewritten into a terminal
    (see above), and the budgets: terminal name → ``max_tokens``."""
    if "[" not in text:
        return text, {}
    from constrain.cfg.budgets import BUDGETED, max_tokens_attribute

    budgets: dict = {}
    out, last, tail = [], 0, []
    code = list(_code_spans(text))
    for m in _ATTRIBUTED.finditer(text):
        at = m.start(3)
        if not any(b <= at < e for b, e in code):
            continue  # inside a string or comment
        name = m.group(3)
        if not (name.lstrip("_")[:1].islower()):
            raise GrammarError(f"attributes go on rules, not on terminals ({name})",
                               *_position(text, at))
        n = max_tokens_attribute(m.group(5), text, m.start(5))
        body_end = _definition_end(text, m.end())
        _check_lexeme_body(text, m.end(), body_end, name)
        terminal = BUDGETED + name.upper()
        if name in {v[1] for v in budgets.values()}:
            raise GrammarError(f"rule {name!r} is defined twice", *_position(text, at))
        budgets[terminal] = (n, name)
        head = m.group(3) + m.group(4)
        out.append(text[last:m.start(2)])
        out.append(terminal + " " * max(0, len(m.group(2)) + len(head) - len(terminal)))
        last = m.end()
        tail.append(f"{name}: {terminal}")
    if not budgets:
        return text, {}
    out.append(text[last:])
    return "".join(out) + "\n" + "\n".join(tail) + "\n", \
        {t: n for t, (n, _) in budgets.items()}


def _definition_end(text: str, i: int) -> int:
    """Where the definition whose body starts at ``i`` ends: before the first
    later line that does not go on with ``|`` (comments and blank lines aside)."""
    j = text.find("\n", i)
    while j >= 0:
        k = text.find("\n", j + 1)
        line = text[j + 1:k if k >= 0 else len(text)].strip()
        if line and not line.startswith(("|", "//", "#")):
            return j
        j = k
    return len(text)


def _check_lexeme_body(text: str, begin: int, end: int, name: str) -> None:
    """A rule with attributes must be made of terminals only."""
    i = text.index(":", begin) + 1
    while i < end:
        m = _BODY_TOKEN.match(text, i)
        kind = m.lastgroup
        if kind == "name" and not m.group().lstrip("_")[:1].isupper():
            raise GrammarError(
                f"rule {name!r} has max_tokens, so it must be made of terminals only "
                f"(strings, /regexes/, TERMINALS); it uses the rule {m.group()!r}",
                *_position(text, i))
        if kind == "arrow":
            raise GrammarError(f"rule {name!r} has max_tokens: it is one terminal, which "
                               f"takes no alias", *_position(text, i))
        if kind == "name" and _PLACEHOLDER_NAME.fullmatch(m.group()):
            # (a reference was dropped from the terminal before: the rule's
            # language silently lost it)
            what = "a token reference" if m.group().startswith("TOKENREF") else "%json"
            raise GrammarError(f"rule {name!r} has max_tokens: it is one terminal, and {what} "
                               f"cannot be part of a terminal; use it in a rule", *_position(text, i))
        i = m.end()


def _common_import(text: str) -> str:
    """``%import common (...)`` of every terminal of lark's common.lark that
    ``text`` neither defines nor imports by name."""
    import lark

    common = (Path(lark.__file__).parent / "grammars" / "common.lark").read_text()
    names = re.findall(r"(?m)^([A-Z][A-Z_0-9]*)\s*(?:\.\d+)?\s*:", common)
    taken = {d.group(1) for d in _DEFINITION.finditer(text)}
    taken |= set(re.findall(r"%import\s+common\.([A-Z_0-9]+)", text))
    for group in re.findall(r"%import\s+common\s*\(([^)]*)\)", text):
        taken |= {x.strip() for x in group.split(",")}
    return "%import common (" + ", ".join(n for n in names if n not in taken) + ")"


def _splice_json(ir: GrammarIR, schemas: dict, text: str, deadline) -> GrammarIR:
    """``ir`` with each ``%json`` placeholder terminal replaced by the
    schema's grammar (ignored runs of the Lark grammar allowed before it, as
    before any of its terminals; none inside it, where JSON's own whitespace
    rules)."""
    from constrain.cfg.compose import IRBuilder
    from constrain.errors import ConstraintError
    from constrain.frontends.json_schema.compiler import json_schema_ir

    b = IRBuilder()
    n_t = ir.n_terminals
    index = {t.name: i for i, t in enumerate(ir.terminals)}
    nts = [b.nonterminal(name) for name in ir.nonterminals]
    ignored = index.get(IGNORED)
    sub = {}
    for name, (schema, at) in schemas.items():
        if name not in index:
            continue  # in a rule the start symbol never reaches
        options = {"whitespace": "flexible", "strict": True}
        if isinstance(schema, dict) and "x-guidance" in schema:
            schema = dict(schema)
            options.update(_guidance_options(schema.pop("x-guidance"), text, at))
        left = None if deadline is None else max(0.0, float(deadline) - now())
        try:
            sub_ir = json_schema_ir(schema, time_budget=left, **options)
        except ConstraintError as e:
            raise GrammarError(f"%json: the schema cannot be compiled: {e}",
                               *_position(text, at)) from e
        start = b.embed(sub_ir, "json")
        if ignored is not None:
            run = ir.terminals[ignored]
            start = b.choice("json", [(start,), (b.terminal(run.pattern), start)])
        sub[index[name]] = start

    def sym(s: int):
        if s >= n_t:
            return nts[s - n_t]
        if s in sub:
            return sub[s]
        if s in ir.tokens:
            return b.token(ir.tokens[s])
        t = ir.terminals[s]
        return b.terminal(t.pattern, literal=t.literal, flags=t.flags,
                          max_tokens=ir.budgets.get(s))

    for lhs, rhs in ir.rules:
        b.rule(nts[lhs], [sym(s) for s in rhs])
    return b.build(nts[ir.start], source=ir.source)


def _guidance_options(options, text: str, at: int) -> dict:
    """The JSON Schema options of an ``x-guidance`` object: ``lenient`` (ignore
    what cannot be enforced: ``strict=False``) and ``whitespace_flexible``;
    any other is refused."""
    if not isinstance(options, dict):
        raise GrammarError("%json: x-guidance must be an object", *_position(text, at))
    out = {}
    for key, value in options.items():
        if key == "lenient" and isinstance(value, bool):
            out["strict"] = not value
        elif key == "whitespace_flexible" and isinstance(value, bool):
            out["whitespace"] = "flexible" if value else "compact"
        else:
            raise GrammarError(f"%json: the x-guidance option {key!r} is not supported "
                               f"(only lenient and whitespace_flexible)", *_position(text, at))
    return out


# -- a fast path for plain grammars ------------------------------------------------
#
# lark's loader parses the grammar file with a LALR parser and a dozen tree
# transformers: about 20 ms for a JSON Schema's grammar, more than the rest of the
# compilation. Grammars that use only plain rules and literal terminals (what
# compile_json_schema and most hand-written grammars produce) are read here
# instead; lark's own function turns each literal into its pattern, so escapes
# mean the same. Anything else — %import, templates, priorities, aliases, terminals
# built from terminals — goes to lark.

_TOKEN = re.compile(r"""
    (?P<ws>\s+)
  | (?P<STRING>"(?:\\"|\\\\|[^"\n])*?"i?)
  | (?P<REGEXP>/(?!/)(?:\\/|\\\\|[^/])*?/[imslux]*)
  | (?P<NAME>[?!]?[_a-zA-Z][_a-zA-Z0-9]*)
  | (?P<op>[|()\[\]*+?])
""", re.VERBOSE)
_DEF = re.compile(r"([?!]?[_a-zA-Z][_a-zA-Z0-9]*)\s*:(.*)$", re.DOTALL)


_ESCAPE_PAIR = re.compile(r"\\(.)", re.S)


def _double_escape(m) -> str:
    c = m.group(1)
    if c == "\\":
        return "\\\\\\\\"
    if c not in "Uuxnftr":
        return "\\\\" + c
    return m.group(0)


def eval_escaping(text: str) -> str:
    """lark's ``load_grammar.eval_escaping`` (how a literal's body is read), with
    its per-character Python loop done by one regex substitution: the long
    regexes JSON Schemas compile to spent more time here than in lark's loop-free
    rest of loading."""
    if text.endswith("\\") and (len(text) - len(text.rstrip("\\"))) % 2:
        from lark.exceptions import GrammarError as LarkGrammarError

        raise LarkGrammarError("Literal ended unexpectedly (bad escaping): `%r`" % text)
    w = _ESCAPE_PAIR.sub(_double_escape, text) if "\\" in text else text
    w = w.replace('\\"', '"').replace("'", "\\'")
    return _string_literal("u'''%s'''" % w)


def _string_literal(source: str) -> str:
    """The value of the Python string literal ``source``, as
    ``ast.literal_eval`` reads it (``SyntaxError`` on a bad escape), without
    its nested recursive helpers: each call of those was a reference cycle,
    one per literal of a grammar, left to the cyclic collector."""
    node = ast.parse(source, mode="eval").body
    if not isinstance(node, ast.Constant) or not isinstance(node.value, str):
        raise ValueError(f"not a string literal: {source!r}")
    return node.value


def _literal_to_pattern(kind: str, value: str):
    """lark's ``load_grammar._literal_to_pattern`` with the fast
    :func:`eval_escaping`."""
    from lark.exceptions import GrammarError as LarkGrammarError
    from lark.lexer import PatternRE, PatternStr

    flag_start = max(value.rfind("/"), value.rfind('"')) + 1
    assert flag_start > 0
    flags = value[flag_start:]
    assert all(f in "imslux" for f in flags), flags
    if kind == "STRING" and "\n" in value:
        raise LarkGrammarError("You cannot put newlines in string literals")
    if kind == "REGEXP" and "\n" in value and "x" not in flags:
        raise LarkGrammarError("You can only use newlines in regular expressions with the `x` flag")
    body = value[:flag_start]
    assert body[0] == body[-1] and body[0] in '"/'
    text = eval_escaping(body[1:-1])
    if text == "":
        raise LarkGrammarError("Empty terminals are not allowed (%s)" % value)
    if kind == "STRING":
        return PatternStr(text.replace("\\\\", "\\"), flags, raw=value)
    return PatternRE(text, flags, raw=value)


class _NotPlain(Exception):
    pass


def _tokens(body: str) -> list[tuple[str, str]]:
    out, pos = [], 0
    while pos < len(body):
        m = _TOKEN.match(body, pos)
        if m is None:
            raise _NotPlain
        pos = m.end()
        if m.lastgroup != "ws":
            out.append((m.lastgroup, m.group()))
    return out


def _load_plain(text: str, start: str) -> _Raw | None:
    """Read a grammar of plain rules and literal terminals, or return ``None``."""
    try:
        return _PlainLoader(text, start).result()
    except _NotPlain:
        return None


class _PlainLoader:
    def __init__(self, text: str, start: str):
        defs: list[list] = []
        ignore_items: list[tuple[str, str]] = []
        for raw in text.split("\n"):
            line = raw.strip()
            if not line or line.startswith("//"):
                continue
            if raw[0] in " \t":
                if not defs or not line.startswith("|"):
                    raise _NotPlain
                defs[-1][1] += " " + line
                continue
            if line.startswith("%ignore"):
                toks = _tokens(line[len("%ignore"):])
                if len(toks) != 1 or toks[0][0] == "op":
                    raise _NotPlain
                ignore_items.append(toks[0])
                continue
            m = _DEF.match(line)
            if m is None or "//" in m.group(2) or "->" in m.group(2):
                raise _NotPlain
            defs.append([m.group(1), m.group(2)])
        self.terminals: list[_RawTerminal] = []
        self.term_index: dict[str, int] = {}
        self.anon: dict[tuple, int] = {}
        self.nonterminals: list[str] = [start]
        self.nt_index: dict[str, int] = {start: 0}
        self.rules: list[tuple[int, tuple]] = []
        self.n_aux = 0
        rule_defs = []
        for name, body in defs:
            if name.lstrip("?!").isupper():
                toks = _tokens(body)
                if len(toks) != 1 or toks[0][0] not in ("STRING", "REGEXP") or name in self.term_index:
                    raise _NotPlain
                self._add_terminal(name, toks[0])
            else:
                rule_defs.append((name.lstrip("?!"), _tokens(body)))
        names = {n for n, _ in rule_defs}
        if len(names) != len(rule_defs) or start not in names:
            raise _NotPlain
        for n, _ in rule_defs:
            self._nt(n)
        self.defined = names
        # symbols are terminals and nonterminals in one space only at the end
        self.pending: list[tuple[int, list]] = []
        for n, toks in rule_defs:
            alts, pos = self._alts(toks, 0)
            if pos != len(toks):
                raise _NotPlain
            for seq in alts:
                self.pending.append((self.nt_index[n], seq))
        self.ignore = [self._symbol(kind, val)[1] for kind, val in ignore_items]

    def _add_terminal(self, name: str, tok: tuple[str, str]) -> int:
        from lark.exceptions import GrammarError as LarkGrammarError

        try:
            pat = _literal_to_pattern(tok[0], tok[1])
        except (LarkGrammarError, AssertionError, ValueError, SyntaxError):
            raise _NotPlain from None
        flags = 0
        for f in pat.flags:
            flags |= _FLAG_BITS.get(f, 0)
        literal = pat.value if tok[0] == "STRING" else None
        self.term_index[name] = len(self.terminals)
        self.terminals.append(_RawTerminal(name, pat.to_regexp(), flags, literal, tok[1]))
        return self.term_index[name]

    def _nt(self, name: str) -> int:
        if name not in self.nt_index:
            self.nt_index[name] = len(self.nonterminals)
            self.nonterminals.append(name)
        return self.nt_index[name]

    def _aux(self, kind: str) -> int:
        self.n_aux += 1
        return self._nt(f"__{kind}_{self.n_aux}")

    def _symbol(self, kind: str, val: str) -> tuple[str, int]:
        if kind == "NAME":
            if val.isupper():
                if val not in self.term_index:
                    raise _NotPlain
                return ("t", self.term_index[val])
            if val not in self.defined:
                raise _NotPlain
            return ("n", self.nt_index[val])
        key = (kind, val)
        if key not in self.anon:
            self.anon[key] = self._add_terminal(f"__ANON_{len(self.anon)}", (kind, val))
        return ("t", self.anon[key])

    def _alts(self, toks, pos):
        alts = [[]]
        while pos < len(toks):
            kind, val = toks[pos]
            if kind == "op" and val == "|":
                alts.append([])
                pos += 1
                continue
            if kind == "op" and val in ")]":
                break
            item, pos = self._item(toks, pos)
            alts[-1].append(item)
        return alts, pos

    def _item(self, toks, pos):
        kind, val = toks[pos]
        if kind == "op" and val in "([":
            inner, pos = self._alts(toks, pos + 1)
            close = ")" if val == "(" else "]"
            if pos >= len(toks) or toks[pos] != ("op", close):
                raise _NotPlain
            pos += 1
            nt = self._aux("group" if val == "(" else "opt")
            for seq in inner:
                self.pending.append((nt, seq))
            if val == "[":
                self.pending.append((nt, []))
            sym = ("n", nt)
        elif kind in ("NAME", "STRING", "REGEXP"):
            if kind == "NAME" and val[0] in "?!":
                raise _NotPlain
            sym = self._symbol(kind, val)
            pos += 1
        else:
            raise _NotPlain
        while pos < len(toks) and toks[pos][0] == "op" and toks[pos][1] in "*+?":
            op = toks[pos][1]
            pos += 1
            if op == "?":
                nt = self._aux("opt")
                self.pending += [(nt, [sym]), (nt, [])]
            elif op == "*":
                nt = self._aux("star")
                self.pending += [(nt, []), (nt, [("n", nt), sym])]
            else:
                nt = self._aux("plus")
                self.pending += [(nt, [sym]), (nt, [("n", nt), sym])]
            sym = ("n", nt)
        return sym, pos

    def result(self) -> _Raw:
        rules = [(lhs, tuple(v if k == "t" else -1 - v for k, v in seq))
                 for lhs, seq in self.pending]
        return _Raw(self.terminals, self.nonterminals, rules, self.ignore)


__all__ = ["load_lark_grammar", "read_grammar_source", "eval_escaping", "IGNORED",
           "MAX_GRAMMAR_DEPTH", "MAX_RULE_ALTERNATIVES", "MAX_GRAMMAR_SYMBOLS"]
