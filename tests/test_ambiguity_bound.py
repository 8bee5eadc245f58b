"""Per-token work of ambiguous grammars: configurations that share a lexer
state are merged (one chart column, the union of theirs), and a column keeps
at most ``max_items`` items. Past the cap the masks must stay sound: every
allowed token continues a string of the grammar, and no state is a dead end."""

from __future__ import annotations

import itertools
import math
import warnings

import lark
import numpy as np
import pytest

import constrain
from constrain import InvalidLimitError, Vocabulary, bitmask_to_ids

EOS = 256
# bytes, and a few longer tokens that cross terminal boundaries
EXTRA = [b"xx", b"xxx", b"1+", b"+1", b"()", b"((", b"))", b"ab", b"ba", b" a"]
VOCAB = Vocabulary.from_tokens([bytes([b]) for b in range(256)] + [b"</s>"] + EXTRA, [EOS],
                               name="bytes+")

AMBIGUOUS = {
    "aa": 'start: a\na: a a | "x" | "xx"\n',
    "expr": 'start: e\ne: e "+" e | e "*" e | "(" e ")" | "1" | "12"\n',
    "parens": 'start: s\ns: s s | "(" s ")" | "()" | "a"\n',
    "ignored": 'start: e\ne: e e | "ab" | "a" | "b"\n%ignore " "\n',
}


def _column_sizes(g, state):
    c_ioff = g.parser._ctx[0]
    return [int(c_ioff[c + 1] - c_ioff[c]) for c, _ in state[1]]


def test_one_configuration_per_lexer_state():
    """Before the merge, the state after n x's held n configurations (one per
    way of splitting the x's so far) and each token cost more than the last."""
    g = constrain.compile_grammar(AMBIGUOUS["aa"], VOCAB)
    s = g.initial_state()
    with warnings.catch_warnings():
        warnings.simplefilter("error", constrain.IncompleteParseWarning)
        for i in range(300):
            s = g.advance(s, ord("x"))
            assert len(s[1]) == len({lex for _, lex in s[1]}) <= 2
            assert g.is_accepting(s)
            assert set(g.allowed_token_ids(s).tolist()) == {ord("x"), EOS, 257, 258}  # x, xx, xxx
    assert g.parser.truncated_columns == 0  # 300 x's are below the default cap


def test_columns_are_capped_and_the_parse_goes_on():
    g = constrain.compile_grammar(AMBIGUOUS["aa"], VOCAB, max_items=16)
    s = g.initial_state()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for i in range(600):
            s = g.advance(s, ord("x"))
            assert max(_column_sizes(g, s)) <= 16
            # the parses kept are the earliest-begun: acceptance is among them
            assert g.is_accepting(s), i
    assert g.parser.truncated_columns > 0
    # the cut is reported, once per parser
    cut = [w for w in caught if issubclass(w.category, constrain.IncompleteParseWarning)]
    assert len(cut) == 1 and "max_items" in str(cut[0].message)
    # cut columns meet columns made before: the chart stops growing
    assert g.parser.num_contexts < 100


def _walk_checked(g, oracle, rng, steps):
    """A random walk through ``g``'s masks; every allowed token, at every
    step, must keep the text a prefix of the oracle's language, EOS only on a
    sentence of it, and some token must always be allowed. Returns the text
    and whether the walk ended with EOS."""
    s, text = g.initial_state(), b""
    for _ in range(steps):
        allowed = g.allowed_token_ids(s)
        assert len(allowed), f"dead end after {text!r}"
        for t in allowed.tolist():
            if t == EOS:
                assert oracle.matches(text), text
            else:
                after = text + VOCAB.token_bytes(t)
                assert oracle.advance_bytes(oracle.initial_state(), after) is not None, after
                assert g.advance(s, t) is not None
        t = int(rng.choice(allowed))
        if t == EOS:
            return text, True
        s = g.advance(s, t)
        text += VOCAB.token_bytes(t)
    return text, False


@pytest.mark.parametrize("name", sorted(AMBIGUOUS))
@pytest.mark.parametrize("max_items", [3, 8])
def test_capped_masks_are_sound(name, max_items):
    source = AMBIGUOUS[name]
    g = constrain.compile_grammar(source, VOCAB, max_items=max_items)
    oracle = constrain.compile_grammar(source, VOCAB, max_items=10 ** 6)
    parser = lark.Lark(source, parser="earley", lexer="dynamic_complete")
    rng = np.random.default_rng(max_items)
    for _ in range(6):
        text, finished = _walk_checked(g, oracle, rng, 40)
        if finished:
            parser.parse(text.decode())  # lark agrees: a sentence
    assert g.parser.truncated_columns > 0  # the walks went past the cap
    assert oracle.parser.truncated_columns == 0


@pytest.mark.parametrize("name", sorted(AMBIGUOUS))
def test_merged_masks_equal_the_unmerged_language(name):
    """With no cut (a large cap), merging is exact: the masks match lark on
    every short string over the grammar's alphabet."""
    source = AMBIGUOUS[name]
    g = constrain.compile_grammar(source, VOCAB, max_items=10 ** 6)
    parser = lark.Lark(source, parser="earley", lexer="dynamic_complete")
    alphabet = sorted({ch for ch in source.split('"')[1::2] for ch in ch})

    def lark_accepts(text):
        try:
            parser.parse(text)
            return True
        except lark.exceptions.LarkError:
            return False

    strings = []
    for n in range(8):
        if len(strings) + len(alphabet) ** n > 3000:
            break
        strings += ["".join(p) for p in itertools.product(alphabet, repeat=n)]
    for text in strings:
        assert g.matches(text) == lark_accepts(text), text
    assert g.parser.truncated_columns == 0


def test_mask_of_a_cut_column_is_what_advance_allows():
    g = constrain.compile_grammar(AMBIGUOUS["expr"], VOCAB, max_items=4)
    rng = np.random.default_rng(1)
    bm = constrain.allocate_bitmask(1, len(VOCAB), backend="numpy")
    s = g.initial_state()
    for _ in range(80):
        g.fill_bitmask(s, bm, 0)
        allowed = bitmask_to_ids(bm[0], len(VOCAB)).tolist()
        for t in range(len(VOCAB)):
            assert (g.advance(s, t) is not None) == (t in allowed), t
        choices = [t for t in allowed if t != EOS]
        s = g.advance(s, int(rng.choice(choices)))
    assert g.parser.truncated_columns > 0


@pytest.mark.parametrize("bad", [0, -1, math.nan, math.inf, True, 2.5, "8"])
def test_max_items_is_a_checked_budget(bad):
    with pytest.raises(InvalidLimitError) as e:
        constrain.compile_grammar(AMBIGUOUS["aa"], VOCAB, max_items=bad)
    assert e.value.field == "max_items"
    with pytest.raises(InvalidLimitError):
        constrain.Limits(max_items=bad)
    with pytest.raises(InvalidLimitError):
        constrain.compile_json_schema({"type": "string"}, VOCAB, max_items=bad)
    from constrain.cfg.earley import EarleyRecognizer
    from constrain.frontends.lark import load_lark_grammar

    ir = load_lark_grammar(AMBIGUOUS["aa"])
    with pytest.raises(InvalidLimitError):
        EarleyRecognizer(ir, max_items=bad)
    with pytest.raises(InvalidLimitError):
        constrain.GrammarConstraint(ir, VOCAB, max_items=bad)
