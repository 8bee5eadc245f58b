"""Token budgets: ``rule[max_tokens=N]`` in Lark and GBNF (GrammarIR.budgets).

The oracle is written here, from the definition alone: a token sequence is
valid when its text is in the grammar's language and, for some way of reading
it, every budgeted rule's match (with the ignored text before it) overlaps at
most its budget of tokens. Over small vocabularies a budget makes the language
of token sequences finite, so every valid sequence is enumerated, and every
mask along every prefix of one is compared with the set the enumeration
allows (nothing more, nothing less; EOS exactly at complete sequences).
"""

from __future__ import annotations

import random
import re
import threading

import numpy as np
import pytest

from constrain import GrammarError, Vocabulary, compile_grammar
from constrain.persist import load

EOS = b"</s>"


def _vocab(tokens):
    tokens = [t.encode() for t in tokens] + [EOS]
    return Vocabulary.from_tokens(tokens, [len(tokens) - 1], name="budget-test")


def _overlapping(offsets, a, b):
    """How many tokens (byte ranges ``offsets``) share bytes with ``[a, b)``."""
    return sum(1 for s, e in offsets if s < b and a < e)


def _offsets(pieces):
    out, at = [], 0
    for p in pieces:
        out.append((at, at + len(p)))
        at += len(p)
    return out


def _enumerate(tokens, viable, valid, longest):
    """Every token sequence (ids) of at most ``longest`` tokens whose text is a
    viable prefix (``viable(text)``), and the valid ones among them
    (``valid(text, offsets)``)."""
    prefixes, complete = set(), set()

    def go(seq, text):
        prefixes.add(seq)
        if valid(text, _offsets([tokens[i] for i in seq])):
            complete.add(seq)
        if len(seq) == longest:
            return
        for i, t in enumerate(tokens):
            if viable(text + t):
                go(seq + (i,), text + t)

    go((), "")
    return prefixes, complete


def _check_against_oracle(grammar, tokens, viable, valid, longest):
    vocab = _vocab(tokens)
    g = compile_grammar(grammar, vocab)
    eos = len(tokens)
    prefixes, complete = _enumerate(tokens, viable, valid, longest)
    # the prefixes that some valid sequence extends
    live = {s[:i] for s in complete for i in range(len(s) + 1)}
    assert complete, "the oracle found no valid sequence"
    checked = 0
    for seq in sorted(live, key=len):
        state = g.initial_state()
        for i in seq:
            state = g.advance(state, i)
            assert state is not None, (seq, i)
        expected = {i for i in range(len(tokens)) if seq + (i,) in live}
        if seq in complete:
            expected.add(eos)
        got = set(g.allowed_token_ids(state).tolist())
        assert got == expected, (
            f"after {[tokens[i] for i in seq]}: mask has extra "
            f"{[tokens[i] if i < eos else 'EOS' for i in sorted(got - expected)]} and lacks "
            f"{[tokens[i] if i < eos else 'EOS' for i in sorted(expected - got)]}")
        # advance agrees with the mask
        for i in range(len(tokens)):
            assert (g.advance(state, i) is not None) == (i in expected), (seq, tokens[i])
        checked += 1
    return checked


# -- exhaustive checks over small vocabularies ---------------------------------------

_AB = ["<", ">", "a", "b", "ab", "ba", "aab", "<a", "b>", "ab>", "bab"]


@pytest.mark.parametrize("n", [1, 2, 3])
def test_one_budgeted_rule(n):
    grammar = f'start: "<" r ">"\nr[max_tokens={n}]: /[ab]+/\n'

    def valid(text, offsets):
        m = re.fullmatch(r"<([ab]+)>", text)
        return bool(m) and _overlapping(offsets, 1, len(text) - 1) <= n

    assert _check_against_oracle(grammar, _AB, lambda t: re.fullmatch(r"(<[ab]*>?)?", t),
                                 valid, n + 2) > 5


def test_budgeted_and_unbudgeted_paths_share_a_lexer_state():
    # after "<" the bytes may be r's (at most 2 tokens) or s's (no budget):
    # a token past r's budget stays allowed while s can take it
    grammar = 'start: "<" r ">" | "<" s ">"\nr[max_tokens=2]: /[ab]+/\ns: /[ab]{1,5}c/\n'
    tokens = _AB + ["c", "c>", "bc"]

    def valid(text, offsets):
        if re.fullmatch(r"<[ab]{1,5}c>", text):
            return True
        return bool(re.fullmatch(r"<[ab]+>", text)) and \
            _overlapping(offsets, 1, len(text) - 1) <= 2

    assert _check_against_oracle(grammar, tokens,
                                 lambda t: re.fullmatch(r"(<([ab]*>?|[ab]{1,5}c>?))?", t),
                                 valid, 8) > 20


def test_a_tight_budget_constrains_the_first_token():
    # "abab" takes two tokens at best: with max_tokens=2 the first token of the
    # match must already be "ab" (or "<a" then "bab"), wherever it begins
    grammar = 'start: "<" r ">"\nr[max_tokens=2]: /abab[ab]*/\n'

    def valid(text, offsets):
        return bool(re.fullmatch(r"<abab[ab]*>", text)) and \
            _overlapping(offsets, 1, len(text) - 1) <= 2

    viable = lambda t: re.fullmatch(r"(<(a(b(a(b[ab]*>?)?)?)?)?)?", t)  # noqa: E731
    assert _check_against_oracle(grammar, _AB, viable, valid, 4) > 3


def test_two_budgets_in_a_row_with_ignored_text():
    # the ignored blanks before a budgeted match are part of it (they are
    # written into its terminal), so their tokens count
    grammar = ('start: r "," r\nr[max_tokens=2]: /[ab]+/\n'
               '%ignore " "\n')
    tokens = ["a", "b", "ab", ",", " ", " a", "b,", ", ", "ba"]

    def valid(text, offsets):
        m = re.fullmatch(r"( *)([ab]+)( *),( *)([ab]+)( *)", text)
        if not m:
            return False
        first = _overlapping(offsets, 0, m.end(2))
        second = _overlapping(offsets, m.start(4), m.end(5))
        return first <= 2 and second <= 2 and len(m.group(3)) + len(m.group(6)) <= 2

    viable = lambda t: re.fullmatch(r"( {0,2}([ab]+( {0,2}(,( {0,2}([ab]+( {0,2})?)?)?)?)?)?)?",  # noqa: E731
                                    t)
    # trailing blanks would make the language infinite: the oracle allows two,
    # and the sequences are compared only where the grammar and it agree
    vocab = _vocab(tokens)
    g = compile_grammar(grammar, vocab)
    prefixes, complete = _enumerate(tokens, viable, valid, 7)
    for seq in complete:
        state = g.initial_state()
        for i in seq:
            state = g.advance(state, i)
            assert state is not None, [tokens[i] for i in seq]
        assert g.is_accepting(state)
    # and nothing past a budget gets through
    for seq in prefixes - {s[:i] for s in complete for i in range(len(s) + 1)}:
        text = "".join(tokens[i] for i in seq)
        if not re.fullmatch(r" *[ab]+ *(, *[ab]*)?", text):
            continue
        state = g.initial_state()
        for i in seq:
            state = state and g.advance(state, i)
        if state is not None and g.is_accepting(state):
            assert valid(text, _offsets([tokens[i] for i in seq])) or \
                re.fullmatch(r".* {3,}", text), text


# -- the default tokenizer's vocabulary ----------------------------------------------

_PROFILE = r'''
start: "Name: " name "\nBio: " bio "\n"
name[max_tokens=4]: /[A-Z][a-z]+( [A-Z][a-z]+)*/
bio[max_tokens=12]: /[^\n]+/
'''


def _random_walk(g, rng, prefer=None, limit=80):
    state, ids = g.initial_state(), []
    for _ in range(limit):
        allowed = g.allowed_token_ids(state)
        assert len(allowed), f"dead end after {ids}"
        if prefer is not None:
            pick = prefer(state, allowed)
        else:
            pick = int(rng.choice(allowed.tolist()))
        if pick in g.vocab.eos_token_set:
            assert g.is_accepting(state)
            return ids, True
        state = g.advance(state, pick)
        assert state is not None
        ids.append(pick)
    return ids, False


def _profile_tokens(vocab, ids):
    """How many tokens carry bytes of the name and of the bio (on bytes: a
    walk may split a character between tokens)."""
    pieces = [vocab.token_bytes(i) for i in ids]
    raw = b"".join(pieces)
    m = re.fullmatch(rb"Name: ([A-Z][a-z]+(?: [A-Z][a-z]+)*)\nBio: ([^\n]+)\n", raw)
    assert m, repr(raw)
    offsets = _offsets(pieces)
    return _overlapping(offsets, *m.span(1)), _overlapping(offsets, *m.span(2))


def test_random_walks_keep_every_budget(smollm2_vocab):
    g = compile_grammar(_PROFILE, smollm2_vocab)
    rng = random.Random(7)
    finished = 0
    for _ in range(12):
        ids, done = _random_walk(g, rng)
        assert done, "every walk must finish: the budgets force the ends"
        name, bio = _profile_tokens(smollm2_vocab, ids)
        assert name <= 4 and bio <= 12
        finished += 1
    assert finished == 12


def test_a_walk_that_never_stops_uses_the_whole_budget(smollm2_vocab):
    g = compile_grammar(_PROFILE, smollm2_vocab)
    newline = {i for i in range(len(smollm2_vocab))
               if b"\n" in (smollm2_vocab.token_bytes(i) or b"")}
    rng = random.Random(3)

    def prefer(state, allowed):
        # go on writing the bio (no newline) while the grammar allows it
        keep = [int(t) for t in allowed if int(t) not in newline
                and int(t) not in smollm2_vocab.eos_token_set]
        return rng.choice(keep) if keep else int(allowed[0])

    ids, done = _random_walk(g, rng, prefer=prefer)
    assert done
    name, bio = _profile_tokens(smollm2_vocab, ids)
    assert (name, bio) == (4, 12)


def test_a_large_budget_changes_no_mask(smollm2_vocab):
    plain = compile_grammar(_PROFILE.replace("[max_tokens=4]", "").replace("[max_tokens=12]", ""),
                            smollm2_vocab)
    roomy = compile_grammar(_PROFILE.replace("=4]", "=500]").replace("=12]", "=500]"),
                            smollm2_vocab)
    rng = random.Random(11)
    for _ in range(4):
        ids, _ = _random_walk(plain, rng, limit=40)
        a, b = plain.initial_state(), roomy.initial_state()
        for i in ids:
            assert np.array_equal(plain.mask_row(a), roomy.mask_row(b))
            a, b = plain.advance(a, i), roomy.advance(b, i)


def test_matches_ignores_budgets(smollm2_vocab):
    g = compile_grammar(_PROFILE, smollm2_vocab)
    long_bio = "Name: Ada Lovelace\nBio: " + "word " * 40 + "\n"
    assert g.matches(long_bio)
    assert not g.matches("Name: ada\nBio: x\n")


def test_budgeted_grammar_persists(tmp_path, smollm2_vocab):
    g = compile_grammar(_PROFILE, smollm2_vocab)
    rng = random.Random(5)
    ids, _ = _random_walk(g, rng)
    path = tmp_path / "profile.trellis"
    from constrain.persist import save

    save(g, path)
    h = load(path, smollm2_vocab)
    assert h.ir.budgets == g.ir.budgets
    a, b = g.initial_state(), h.initial_state()
    for i in ids:
        assert np.array_equal(g.mask_row(a), h.mask_row(b))
        a, b = g.advance(a, i), h.advance(b, i)


def test_threads_share_a_budgeted_grammar(smollm2_vocab):
    g = compile_grammar(_PROFILE, smollm2_vocab)
    walks = [_random_walk(g, random.Random(seed))[0] for seed in range(4)]
    fresh = compile_grammar(_PROFILE + "\n", smollm2_vocab)
    expected = []
    for ids in walks:
        s, rows = fresh.initial_state(), []
        for i in ids:
            rows.append(fresh.mask_row(s).copy())
            s = fresh.advance(s, i)
        expected.append(rows)
    shared = compile_grammar(_PROFILE + "\n\n", smollm2_vocab)
    errors = []

    def run(k):
        try:
            for _ in range(3):
                s = shared.initial_state()
                for i, want in zip(walks[k], expected[k]):
                    assert np.array_equal(shared.mask_row(s), want)
                    s = shared.advance(s, i)
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=run, args=(k % 4,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]


# -- what is refused --------------------------------------------------------------


@pytest.mark.parametrize("grammar, message, line, column", [
    ('start: r\nr[max_tokens=0]: /a+/\n', "whole number >= 1", 2, 3),
    ('start: r\nr[max_tokens=x]: /a+/\n', "whole number >= 1", 2, 3),
    ('start: r\nr[stop="\\n"]: /a+/\n', "'stop' is not supported", 2, 3),
    ('start: r\nr[max_tokens=3, lazy]: /a+/\n', "'lazy' is not supported", 2, 17),
    ('start: r\nr[colour=3]: /a+/\n', "unknown rule attribute 'colour'", 2, 3),
    ('start: r\nr[max_tokens=3]: "a" x\nx: "b"\n', "it uses the rule 'x'", 2, 22),
    ('start: R\nR[max_tokens=3]: /a+/\n', "attributes go on rules", 2, 1),
    ('start: r\nr[max_tokens=3]: "a" -> y\n', "takes no alias", 2, 22),
])
def test_bad_attributes_name_the_place(grammar, message, line, column):
    vocab = _vocab(["a", "b"])
    with pytest.raises(GrammarError) as e:
        compile_grammar(grammar, vocab)
    assert message in str(e.value)
    assert (e.value.line, e.value.column) == (line, column)


def test_a_budget_below_the_shortest_match_is_refused():
    vocab = _vocab(["a", "b", "<", ">"])
    with pytest.raises(GrammarError) as e:
        compile_grammar('start: "<" r ">"\nr[max_tokens=2]: /aba/\n', vocab)
    assert "max_tokens=2 for rule 'r'" in str(e.value) and "at least 3 tokens" in str(e.value)
    assert (e.value.line, e.value.column) == (2, 1)


# -- GBNF ---------------------------------------------------------------------------


def test_gbnf_budget_is_the_same_language_as_lark():
    gbnf = 'root ::= "<" r ">"\nr[max_tokens=2] ::= ab+\nab ::= [ab]\n'

    def valid(text, offsets):
        return bool(re.fullmatch(r"<([ab]+)>", text)) and \
            _overlapping(offsets, 1, len(text) - 1) <= 2

    assert _check_against_oracle(gbnf, _AB, lambda t: re.fullmatch(r"(<[ab]*>?)?", t),
                                 valid, 4) > 5


def test_gbnf_nullable_budgeted_rule():
    gbnf = 'root ::= "<" r ">"\nr[max_tokens=1] ::= [ab]*\n'

    def valid(text, offsets):
        return bool(re.fullmatch(r"<([ab]*)>", text)) and \
            (text == "<>" or _overlapping(offsets, 1, len(text) - 1) <= 1)

    assert _check_against_oracle(gbnf, _AB, lambda t: re.fullmatch(r"(<[ab]*>?)?", t),
                                 valid, 3) > 3


@pytest.mark.parametrize("grammar, message, line, column", [
    ('root ::= r\nr[max_tokens=0] ::= "a"\n', "whole number >= 1", 2, 3),
    ('root ::= r\nr[temperature=0.5] ::= "a"\n', "'temperature' is not supported", 2, 3),
    ('root ::= r\nr[max_tokens=3] ::= "a" r?\n', "must be regular", 2, 1),
    ('root ::= r\nr[max_tokens=3] ::= "a" s\ns[max_tokens=2] ::= "b"\n', "has one too", 2, 1),
    ('root ::= r\nr[max_tokens=3 ::= "a"\n', "expected ']'", 2, 2),
])
def test_gbnf_bad_attributes_name_the_place(grammar, message, line, column):
    vocab = _vocab(["a", "b"])
    with pytest.raises(GrammarError) as e:
        compile_grammar(grammar, vocab)
    assert message in str(e.value)
    assert (e.value.line, e.value.column) == (line, column)


# -- structural tags -------------------------------------------------------------------


def test_structural_tag_any_text_max_tokens(smollm2_vocab):
    import json

    from constrain import compile_structural_tag

    spec = {"type": "sequence", "elements": [
        {"type": "tag", "begin": "<think>", "content": {"type": "any_text", "max_tokens": 8},
         "end": "</think>"},
        {"type": "json_schema", "json_schema": {
            "type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"],
            "additionalProperties": False}}]}
    g = compile_structural_tag(spec, smollm2_vocab)
    rng = random.Random(2)
    for _ in range(6):
        ids, done = _random_walk(g, rng, limit=120)
        assert done
        pieces = [smollm2_vocab.token_bytes(i) for i in ids]
        raw = b"".join(pieces)
        m = re.fullmatch(rb"<think>(.*?)</think>(.*)", raw, re.S)
        assert m, raw
        if m.end(1) > m.start(1):
            assert _overlapping(_offsets(pieces), *m.span(1)) <= 8
        assert json.loads(m.group(2))["ok"] in (True, False)


def test_infilling_refuses_budgets():
    from constrain.analysis import fim_allowed

    vocab = _vocab(["<", ">", "a", "b"])
    grammar = 'start: "<" r ">"\nr[max_tokens=2]: /[ab]+/\n'
    with pytest.raises(GrammarError, match="does not enforce token budgets"):
        fim_allowed(grammar, [0], [">"], vocab=vocab)
    # the same grammar without its budget is fine
    assert fim_allowed(grammar.replace("[max_tokens=2]", ""), [0], [">"], vocab=vocab)


def test_jump_forward_finds_nothing_under_token_budgets():
    """Byte by byte, each advance_bytes call spent a token: r's budget ran out
    after 'ab', and jump-forward forced 'abz' though the token 'abc' (r whole)
    is allowed."""
    from constrain import Matcher, Vocabulary, compile_grammar

    toks = [b"abc", b"abz", b"a", b"b", b"c", b"z", b"</s>"]
    v = Vocabulary.from_tokens(toks, [6])
    g = compile_grammar('start: r | "abz"\nr[max_tokens=1]: "abc"\n', v)
    m = Matcher(g)
    assert g.byte_steps_are_tokens and 0 in m.allowed_token_ids().tolist()
    assert m.find_jump_forward_bytes() == b""
    plain = compile_grammar('start: r | "abz"\nr: "abc"\n', v)
    assert not plain.byte_steps_are_tokens and Matcher(plain).find_jump_forward_bytes() == b"ab"


@pytest.mark.parametrize("source,fmt,words,line,column", [
    # a reference inside a budgeted rule was dropped from its terminal silently
    ('start: r "b"\nr[max_tokens=2]: "a" | <[7]>\n', None, "token reference cannot be part", 2, 24),
    ('start: r\nr[max_tokens=9]: "a" <|sp|>\n', None, "token reference cannot be part", 2, 22),
    # past the int32 tables: an OverflowError before
    ('start: r\nr[max_tokens=2147483648]: "a"\n', None, "at most 2147483647", 2, 3),
    ('root ::= r\nr[max_tokens=99999999999999999999] ::= "a"\n', "gbnf", "at most", 2, 3),
    # given twice: the last won
    ('start: r\nr[max_tokens=3, max_tokens=1]: "a"\n', None, "given twice", 2, 17),
])
def test_budget_and_reference_errors_name_their_place(source, fmt, words, line, column):
    from constrain import GrammarError, Vocabulary, compile_grammar

    toks = [b"a", b"b", b"<", b"[", b"1", b"]", b">", b"<|sp|>", b"</s>"]
    v = Vocabulary.from_tokens(toks, [8], [7])
    with pytest.raises(GrammarError) as e:
        compile_grammar(source, v, format=fmt)
    assert words in str(e.value) and (e.value.line, e.value.column) == (line, column), str(e.value)


def test_gbnf_budget_errors_name_the_rule_of_their_case():
    """x and X are two GBNF rules: the error named x's line for X's budget."""
    from constrain import GrammarError, Vocabulary, compile_grammar

    v = Vocabulary.from_tokens([b"a", b"b", b"-", b"</s>"], [3])
    with pytest.raises(GrammarError) as e:
        compile_grammar('root ::= x "-" X\nx[max_tokens=5] ::= "a"+\nX[max_tokens=1] ::= "bb"\n',
                        v, format="gbnf")
    assert e.value.line == 3 and "'X'" in str(e.value), str(e.value)


def test_a_reference_to_padding_matches_no_token():
    from constrain import GrammarError, Vocabulary, compile_grammar

    v = Vocabulary.from_tokens([b"a", b"b", b"</s>", None, None], [2])
    with pytest.raises(GrammarError, match="matches no token"):
        compile_grammar('start: "a" <[3]>\n', v)
    g = compile_grammar('start: "a" <[1-4]>\n', v)  # a range keeps its tokens, not padding
    assert g.allowed_token_ids(g.advance(g.initial_state(), 0)).tolist() == [1, 2]
