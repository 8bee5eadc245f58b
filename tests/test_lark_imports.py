"""``%import`` of user grammar files (constrain/frontends/lark.py,
``_ImportChecker``): an imported file goes through the checks the grammar text
has before lark's loader runs (nesting, expansion), and what the imports may
read is bounded, so a hostile file is refused quickly with a typed error that
names it. The oracle of the language is lark itself.
"""

from __future__ import annotations

import random
import time

import lark
import pytest

import constrain
from byte_vocab import accepts, byte_vocabulary
from constrain.errors import GrammarError, GrammarTooComplexError
from constrain.frontends.lark import MAX_IMPORTED_FILES, load_lark_grammar


@pytest.fixture(scope="module")
def vocab():
    return byte_vocabulary()


def _write(tmp_path, main: str, **files) -> str:
    for name, text in files.items():
        (tmp_path / f"{name}.lark").write_text(text)
    path = tmp_path / "main.lark"
    path.write_text(main)
    return str(path)


def test_imported_rules_mean_what_lark_says(tmp_path, vocab):
    path = _write(tmp_path, "%import words.word\n%import .nums.num\nstart: (word | num)+\n",
                  words='word: /[ab]+/ "!"?\n', nums="num: DIGIT+\n%import common.DIGIT\n")
    g = constrain.compile_grammar(path, vocab)
    parser = lark.Lark(open(path).read(), parser="earley", lexer="dynamic_complete",
                       import_paths=[str(tmp_path)])
    rng = random.Random(7)
    agree = 0
    for _ in range(300):
        s = "".join(rng.choice("ab!12") for _ in range(rng.randint(0, 6)))
        try:
            parser.parse(s)
            want = True
        except lark.exceptions.LarkError:
            want = False
        assert accepts(g, s.encode()) == want, s
        agree += want
    assert agree > 20  # both answers were seen


@pytest.mark.parametrize("body, error, words", [
    ('r: ("a"~0..30)~0..30\n', GrammarTooComplexError, "alternatives"),
    ("r: " + "(" * 60 + '"a"' + ")" * 60 + "\n", GrammarTooComplexError, "nested"),
    ("r: : \n", GrammarError, "syntax error in grammar"),
])
def test_a_hostile_imported_file_is_refused_before_lark_loads_it(tmp_path, body, error, words):
    path = _write(tmp_path, "%import bad.r\nstart: r\n", bad="// hostile\n" + body)
    t0 = time.perf_counter()
    with pytest.raises(error) as e:
        load_lark_grammar(path)
    assert time.perf_counter() - t0 < 2.0
    assert "bad.lark" in str(e.value) and words in str(e.value)
    assert e.value.line == 2  # the place in the imported file


def test_the_expansion_limit_counts_the_symbols_of_every_file(tmp_path, monkeypatch):
    import constrain.frontends.lark as lark_frontend
    rule = 'r{k}: "a" "b" "c" "d"\n'
    files = {f"f{k}": rule.format(k=k) for k in range(4)}
    main = "".join(f"%import f{k}.r{k}\n" for k in range(4)) + "start: r0 r1 r2 r3\n"
    path = _write(tmp_path, main, **files)
    assert load_lark_grammar(path).rules
    monkeypatch.setattr(lark_frontend, "MAX_GRAMMAR_SYMBOLS", 14)  # 4 per file, 4 in main
    with pytest.raises(GrammarTooComplexError, match="symbols"):
        load_lark_grammar(path)


def test_a_file_that_imports_itself_is_refused_in_bounded_time(tmp_path):
    path = _write(tmp_path, "%import loop.r\nstart: r\n", loop='%import .loop.r\nr: "a"\n')
    t0 = time.perf_counter()
    with pytest.raises(GrammarTooComplexError, match=f"more than {MAX_IMPORTED_FILES}"):
        load_lark_grammar(path)
    assert time.perf_counter() - t0 < 5.0


def test_a_missing_or_undecodable_file_is_a_grammar_error(tmp_path):
    with pytest.raises(GrammarError):
        load_lark_grammar(_write(tmp_path, "%import nowhere.r\nstart: r\n"))
    (tmp_path / "latin.lark").write_bytes(b'r: "\xe9"\n')
    with pytest.raises(GrammarError, match="UTF-8"):
        load_lark_grammar(_write(tmp_path, "%import latin.r\nstart: r\n"))
