"""Lark grammars mean what lark's Earley parser with ``lexer="dynamic_complete"``
accepts, down to how its dynamic lexer matches terminals: leftmost-first
(``re.match``) and its prefixes, ``%ignore`` terminals greedily; what cannot be
enforced is refused with the line and column, and so is what lark's loader
would never finish expanding."""

from __future__ import annotations

import itertools
import random
import re
import time

import pytest

lark = pytest.importorskip("lark")

from constrain import GrammarError, GrammarTooComplexError, compile_grammar  # noqa: E402
from constrain.frontends.lark import (IGNORED, MAX_GRAMMAR_DEPTH,  # noqa: E402
                                      load_lark_grammar)
from byte_vocab import byte_vocabulary  # noqa: E402


@pytest.fixture(scope="module")
def vocab():
    return byte_vocabulary()


def _lark(grammar: str):
    return lark.Lark(grammar, parser="earley", lexer="dynamic_complete")


def _lark_accepts(parser, text: str) -> bool:
    try:
        parser.parse(text)
        return True
    except lark.exceptions.LarkError:
        return False


def _agree(grammar: str, vocab, alphabet: str, max_len: int = 5, extra=()):
    """Trellis and lark agree on every string over ``alphabet`` up to ``max_len``
    characters, and on ``extra``."""
    parser, g = _lark(grammar), compile_grammar(grammar, vocab)
    strings = itertools.chain((
        "".join(t) for k in range(max_len + 1) for t in itertools.product(alphabet, repeat=k)),
        extra)
    for s in strings:
        assert g.matches(s) == _lark_accepts(parser, s), (grammar, s)
    return g


IGNORE_CASES = [
    # a comment runs to the end of its line: "x#a" is not a comment then "x"
    ('start: "x"\nCOMMENT: /#[^\\n]*/\n%ignore COMMENT\n', "x#a\n "),
    ('start: "x" "\\n" "y"\nCOMMENT: /#[^\\n]*/\n%ignore COMMENT\n', "xy#a\n"),
    # blanks run to the next non-blank: " x" cannot start after an ignored " "
    ('start: X+\nX: / x/\nWS: / +/\n%ignore WS\n', " x"),
    ('start: "a" WS "b"\nWS: /[ ]+/\n%ignore WS\n', "ab "),    # ignored and used
    ('start: "a" WS "b"\nWS: " "\n%ignore WS\n', "ab "),
    ('start: "a" "b"\n%ignore /\\s+/\n', "ab \t\u00a0\u0085"),
    ('%import common.C_COMMENT\n%import common.CPP_COMMENT\nstart: "x"*\n'
     '%ignore C_COMMENT\n%ignore CPP_COMMENT\n', "x/*/\n"),
    ('%import common.ESCAPED_STRING\n%import common.WS\n'
     'start: ESCAPED_STRING ("," ESCAPED_STRING)*\n%ignore WS\n', '"a\\, '),
]


@pytest.mark.parametrize("grammar,alphabet", IGNORE_CASES)
def test_ignored_terminals_are_matched_greedily(grammar, alphabet, vocab):
    _agree(grammar, vocab, alphabet)


@pytest.mark.parametrize("grammar,alphabet", [
    ('start: A+\nA: /a|ab/\n', "ab"),
    ('start: A B?\nA: /a+?/\nB: "b"\n', "ab"),
    ('start: A\nA: /12|120/\n', "012"),
    ('start: A+\nA: /(a?){2,5}b/i\n', "aAb"),
    ('start: A+\nA: /a(?<=a)b?/\n', "ab"),
    ('%import common.SIGNED_NUMBER\n%import common.WS\nstart: SIGNED_NUMBER*\n%ignore WS\n',
     "1.-e5 "),
    ('%import common.CNAME\n%import common.INT\nstart: (CNAME|INT)*\n', "a1_"),
])
def test_terminals_are_matched_leftmost_first(grammar, alphabet, vocab):
    _agree(grammar, vocab, alphabet)


def test_escaped_string_agrees_with_lark(vocab):
    grammar = ('%import common.ESCAPED_STRING\n%import common.WS\n'
               'start: "[" [ESCAPED_STRING ("," ESCAPED_STRING)*] "]"\n%ignore WS\n')
    rng = random.Random(7)
    extra = ['["a\\"b", "c"]', '["a"b"]', '[""]', '["\\\\"]', '["\\\\\\""]', '["a\\"]',
             '[ "x" , "y\\\\" ]']
    for _ in range(3000):
        extra.append("".join(rng.choice('[]",\\ ab') for _ in range(rng.randint(0, 12))))
    _agree(grammar, vocab, '[]",\\ a', max_len=5, extra=extra)


def test_every_common_lark_terminal_agrees_with_lark(vocab):
    from pathlib import Path
    import re

    text = (Path(lark.__file__).parent / "grammars" / "common.lark").read_text()
    names = [n for n in re.findall(r"^([A-Z][A-Z_]*)\s*:", text, re.M)]
    rng = random.Random(0)
    alphabet = "09aeEx_.+-\"\\ \t\r\n#/*"
    for name in names:
        grammar = f"%import common.{name}\nstart: {name}+\n"
        extra = ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, 9)))
                 for _ in range(400)]
        _agree(grammar, vocab, alphabet[:8], max_len=3, extra=extra)


def test_a_terminal_both_ignored_and_used_can_finish(vocab):
    g = compile_grammar('start: "a" WS "b"\nWS: " "\n%ignore WS\n', vocab)
    state = g.initial_state()
    for b in b"a b":
        state = g.advance(state, b)
        assert state is not None
    assert g.is_accepting(state) and 256 in g.allowed_token_ids(state)
    ir = load_lark_grammar('start: "a"\n%ignore " "\n')
    assert not ir.ignore and ir.terminals[-1].name == IGNORED


@pytest.mark.parametrize("grammar,line,column,words", [
    ('start: A\nA: /a(?=b)/\n', 2, 4, "lookahead"),
    ('start: A "x"\nA: /a\\b/\n', 2, 4, "next character"),
    ('start: A\nA: /a$/\n', 2, 4, "next character"),
    ('start: "x" A\nA: /(?<=x)a/\n', 2, 4, "before"),
    ('start: "x" A\nA: /^a/\n', 2, 4, "before"),
    ('start: "x" /(?!y)z/\n', 1, 12, "lookahead"),
    ('start: A\nA: /a(b/\n', 2, 4, "missing )"),
    ('start: A\nA: /a*/\n', 2, 4, "empty string"),
    ('start: "a"\n%ignore /a(bc)*/\n', 2, 9, "next character"),
    ('start: foo\n', 1, 8, "foo"),
    ('rule: "a"\n', 1, 1, "start"),
    ('start: "d".."a"\n', 1, 8, "range"),
    ('start: "a" "\n', 1, 12, "Unexpected input"),
])
def test_refusals_name_line_and_column(grammar, line, column, words):
    with pytest.raises(GrammarError) as info:
        load_lark_grammar(grammar)
    e = info.value
    assert words in str(e), str(e)
    assert (e.line, e.column) == (line, column), str(e)


def test_a_terminal_that_matches_nowhere_is_unusable_not_refused(vocab):
    with pytest.raises(GrammarError, match="derives no string") as info:
        compile_grammar('start: A\nA: /a^b$c/i\n', vocab)
    assert info.value.line == 1


@pytest.mark.parametrize("literal", ['"\\ud800"', '"x\\udc00"', '"\\ud800"i', '"ab\\udfff" "c"'])
def test_a_literal_with_a_lone_surrogate_matches_nothing(vocab, literal):
    """No UTF-8 output holds a lone surrogate, so a literal with one matches
    nothing, as the regex ``\\ud800`` does (it raised UnicodeEncodeError)."""
    with pytest.raises(GrammarError, match="derives no string") as info:
        compile_grammar(f"start: {literal}\n", vocab)
    assert info.value.line == 1
    g = compile_grammar(f'start: "a" | {literal}\n', vocab)
    assert g.matches("a") and not g.matches("x") and not g.matches("ab")


@pytest.mark.parametrize("grammar", [
    'start: ("a"~0..30)~0..30\n',
    'start: ("a" | "b")~20\n',
    'start: x\nx: ("a"? "b"?)~0..40\n',
    '%import common.WS\nstart: ' + " ".join('("a" | "b")' for _ in range(16)) + "\n",
])
def test_rule_expansion_is_bounded_before_lark_loads(grammar):
    t = time.perf_counter()
    with pytest.raises(GrammarTooComplexError, match="alternatives") as info:
        load_lark_grammar(grammar)
    assert time.perf_counter() - t < 1.0
    assert info.value.line is not None


def test_plain_grammars_are_not_expanded(vocab):
    # read without lark: a group is a rule of its own, not distributed
    g = compile_grammar('start: ' + " ".join('("a" | "b")' for _ in range(16)) + "\n", vocab)
    assert g.matches("ab" * 8) and not g.matches("ab" * 7)


def test_nesting_is_bounded(vocab):
    deep = 'start: ' + "(" * (MAX_GRAMMAR_DEPTH + 1) + '"a"' + ")" * (MAX_GRAMMAR_DEPTH + 1)
    with pytest.raises(GrammarTooComplexError, match="nested") as info:
        load_lark_grammar(deep + "\n")
    assert (info.value.line, info.value.column) == (1, 8 + MAX_GRAMMAR_DEPTH)
    ok = 'start: ' + "[" * MAX_GRAMMAR_DEPTH + '"a"' + "]" * MAX_GRAMMAR_DEPTH + "\n"
    assert compile_grammar(ok, vocab).matches("a")
    # strings, regexes and comments do not count
    quoted = 'start: "' + "(" * 80 + '" /[(]{1}/ // ' + "(" * 80 + "\n"
    assert compile_grammar(quoted, vocab).matches("(" * 81)


def test_loading_is_under_the_time_budget(vocab):
    grammar = 'start: ("a" | "b")~13\n'  # 8,192 alternatives: lark takes ~0.4 s
    with pytest.raises(GrammarTooComplexError, match="time budget"):
        compile_grammar(grammar, vocab, time_budget=0.05)


@pytest.mark.parametrize("n, body", [(300, 'T{p} "b"'), (40, "T{p} T{p}")])
def test_terminals_lark_would_write_out_too_large_are_refused(n, body):
    """lark's loader writes every terminal a terminal uses into it, with no
    time budget checked: a chain of 300 took 8.5 s, 17 doubling terminals 25 s
    (40: hours). Refused before lark runs, at the largest terminal's line."""
    from constrain.frontends.lark import load_lark_grammar

    def chain(n):
        return "\n".join([f"start: T{n - 1}", 'T0: "a"']
                         + [f"T{i}: " + body.format(p=i - 1) for i in range(1, n)])

    with pytest.raises(GrammarTooComplexError, match="written out by lark's loader") as e:
        load_lark_grammar(chain(n))
    assert e.value.line is not None and e.value.line > 2
    assert load_lark_grammar(chain(40 if n == 300 else 10)) is not None
    # recursive terminals (lark refuses them) must not loop the count
    with pytest.raises(GrammarError, match="Recursion in terminal"):
        load_lark_grammar('start: A\nA: B "x"\nB: A | "y"')


def test_max_repeat_reaches_the_terminals(vocab):
    """A terminal's ``{m,n}`` past ``max_repeat`` is a limit (too complex, at
    the terminal's line), which ``max_repeat=`` raises: it was "a pattern
    Trellis cannot compile exactly", and no grammar option raised the limit."""
    grammar = "start: A\nA: /a{12000}/\n"
    with pytest.raises(GrammarTooComplexError, match="limit of 10000") as e:
        compile_grammar(grammar, vocab)
    assert (e.value.line, e.value.column) == (2, 4)
    g = compile_grammar(grammar, vocab, max_repeat=20_000)
    assert g.matches("a" * 12000) and not g.matches("a" * 11999)


def test_syntax_errors_are_grammar_syntax_errors():
    import constrain
    from byte_vocab import byte_vocabulary

    with pytest.raises(constrain.errors.GrammarSyntaxError) as e:
        constrain.compile_grammar('start: "a" )', byte_vocabulary())
    assert isinstance(e.value, constrain.GrammarError) and e.value.line == 1 and e.value.column
    # lark words most syntax errors as its own GrammarError: they were told as a
    # plain GrammarError, which `except GrammarSyntaxError` missed
    for text, where, words in [("start: (", (1, 9), "Unclosed parenthesis ("),
                               ('start: "a', (1, 8), "Unexpected input"),
                               ('start "a"', (1, 7), "missing colon")]:
        with pytest.raises(constrain.errors.GrammarSyntaxError, match=re.escape(words)) as e:
            constrain.compile_grammar(text, byte_vocabulary())
        assert (e.value.line, e.value.column) == where, text
    # what parses but means nothing stays a GrammarError
    with pytest.raises(constrain.GrammarError) as e:
        constrain.compile_grammar("start: a\na: b", byte_vocabulary())
    assert not isinstance(e.value, constrain.errors.GrammarSyntaxError)
