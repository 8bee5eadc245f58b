"""``constrain.analysis.infill``: the infilling check agrees with bounded brute force.

For three small grammars (balanced brackets, arithmetic, JSON) and a small
vocabulary each, random partial outputs (fixed token runs and holes of a known
number of tokens) are decided by :func:`constrain.analysis.infill.can_complete` and by trying
every filling of the holes with Lark's own Earley parser (the reference
semantics). With holes of known length the enumeration is exhaustive, so the two
must agree exactly. Holes of unknown length are checked both ways: a witness
must parse and fill the partial output, and a negative answer must survive a
bounded search.
"""

from __future__ import annotations

import itertools
import random
import re
import zlib

import lark
import numpy as np
import pytest

from constrain import GrammarTooComplexError, Vocabulary, compile_regex, grammar_path
from constrain.analysis.infill import (
    Hole,
    can_complete,
    can_complete_regex,
    find_completion,
    fim_allowed,
    load_grammar,
    partial_output,
)

BRACKETS = r"""
start: "(" start ")" start | "[" start "]" start |
%ignore " "
"""

ARITH = r"""
?start: sum
?sum: product | sum "+" product | sum "-" product
?product: atom | product "*" atom
?atom: NUMBER | "(" sum ")" | "-" atom
NUMBER: /[0-9]+/
%ignore " "
"""

with open(grammar_path("json.lark"), encoding="utf-8") as _f:
    JSON = _f.read()

GRAMMARS = {
    "brackets": (BRACKETS, ["(", ")", "[", "]", "()", " ", ")("],
                 ["(())[]", "([()])", " () ", "[[]]()", "", "()()()"]),
    "arith": (ARITH, ["1", "2", "+", "*", "(", ")", "-", "12", " ", "+("],
              ["1+2", "(1+2)*12", "-1", "1 * (2-1)", "12", "((1))"]),
    "json": (JSON, ["{", "}", "[", "]", ",", ":", '"', "a", "1", "0", "true", '"a"', " ",
                    "-", ".", ',"'],
             ['{"a":1}', '[1,true]', '"a"', '{"a":[0.1,-1]}', '[]', '{"a":{"a":"a"}}', '-0.1']),
}

N_PER_GRAMMAR = 400
MAX_FILLINGS = 300


def make_vocab(pieces):
    return Vocabulary.from_tokens([p.encode() for p in pieces] + [b"<eos>"],
                                  eos_token_ids=[len(pieces)])


def greedy_tokenize(text, pieces):
    """Longest-match tokenization over ``pieces`` (they include every needed char)."""
    out, i = [], 0
    by_len = sorted(range(len(pieces)), key=lambda k: -len(pieces[k]))
    while i < len(text):
        for k in by_len:
            if pieces[k] and text.startswith(pieces[k], i):
                out.append(k)
                i += len(pieces[k])
                break
        else:
            raise ValueError(text)
    return out


class Oracle:
    """Lark's Earley parser, memoised by string."""

    def __init__(self, source):
        self.parser = lark.Lark(source, parser="earley", lexer="dynamic_complete")
        self.memo = {}

    def __call__(self, text: str) -> bool:
        r = self.memo.get(text)
        if r is None:
            try:
                self.parser.parse(text)
                r = True
            except lark.exceptions.LarkError:
                r = False
            self.memo[text] = r
        return r


def random_partial(rng, pieces, samples):
    """Segments (token-id runs and known-length holes) with at most
    ``MAX_FILLINGS`` fillings: from a valid sample (often completable) or random
    tokens (often not)."""
    v = len(pieces)
    if rng.random() < 0.5:
        toks = greedy_tokenize(rng.choice(samples), pieces)
    else:
        toks = [rng.randrange(v) for _ in range(rng.randint(1, 7))]
    budget = MAX_FILLINGS
    segs, run = [], []
    i = 0
    while i < len(toks) + 1:
        if rng.random() < 0.3 and v <= budget:
            k = 1 if v * v > budget or rng.random() < 0.6 else 2
            k = 0 if rng.random() < 0.1 else k
            budget //= max(1, v ** k)
            if run:
                segs.append(run)
                run = []
            segs.append(Hole(k, k))
            i += rng.choice([0, 1, k])  # the hole replaces tokens, or is inserted
            continue
        if i < len(toks):
            run.append(toks[i])
        i += 1
    if run:
        segs.append(run)
    return segs


def brute_force(segs, pieces, oracle):
    """Whether some filling of the holes parses."""
    choices = []
    for s in segs:
        if isinstance(s, Hole):
            choices.append(["".join(c) for c in itertools.product(pieces, repeat=s.min_tokens)])
        else:
            choices.append(["".join(pieces[t] for t in s)])
    return any(oracle("".join(parts)) for parts in itertools.product(*choices))


@pytest.mark.parametrize("name", sorted(GRAMMARS))
def test_agrees_with_brute_force(name):
    """``N_PER_GRAMMAR`` random partial outputs per grammar (1,200 in all): the
    infilling check equals exhaustive enumeration of the fillings; every witness
    parses and fills the partial output."""
    source, pieces, samples = GRAMMARS[name]
    vocab = make_vocab(pieces)
    oracle = Oracle(source)
    rng = random.Random(zlib.crc32(name.encode()))
    counts = {True: 0, False: 0}
    for _ in range(N_PER_GRAMMAR):
        segs = random_partial(rng, pieces, samples)
        want = brute_force(segs, pieces, oracle)
        got = find_completion(source, segs, vocab=vocab)
        assert (got is not None) == want, (segs, got)
        assert can_complete(source, segs, vocab=vocab) == want
        if got is not None:
            text = got.decode()
            assert oracle(text), (segs, text)
            assert partial_output(segs, vocab).accepts(got)
        counts[want] += 1
    print(f"{name}: {N_PER_GRAMMAR} partial outputs, completable {counts[True]}, "
          f"not {counts[False]}")
    # both answers are well represented
    assert counts[True] >= N_PER_GRAMMAR // 5 and counts[False] >= N_PER_GRAMMAR // 5, counts


@pytest.mark.parametrize("name", sorted(GRAMMARS))
def test_unknown_length_holes(name):
    """Holes of unknown length (and character units, no vocabulary): a witness
    always parses and fills the partial output; a negative answer is confirmed by
    searching fillings of up to 3 vocabulary pieces per hole."""
    source, pieces, samples = GRAMMARS[name]
    oracle = Oracle(source)
    rng = random.Random(11)
    short = [""] + ["".join(c) for k in (1, 2) for c in itertools.product(pieces, repeat=k)]
    for _ in range(40):
        text = rng.choice(samples) if rng.random() < 0.6 else "".join(
            rng.choice(pieces) for _ in range(rng.randint(1, 5)))
        # cut up to two gaps into the text
        cuts = sorted(rng.sample(range(len(text) + 1), min(len(text) + 1, rng.choice([2, 4]))))
        segs, last = [], 0
        for a, b in zip(cuts[::2], cuts[1::2]):
            segs += [text[last:a], Hole(0, None)]
            last = b
        segs.append(text[last:])
        got = find_completion(source, segs)
        if got is not None:
            assert oracle(got.decode()), (segs, got)
            assert partial_output(segs).accepts(got)
        else:
            fixed = [s for s in segs if isinstance(s, str)]
            n_holes = len(segs) - len(fixed)
            for fill in itertools.product(short, repeat=n_holes):
                parts = []
                for s in segs:
                    parts.append(s if isinstance(s, str) else fill[len(parts) // 2])
                assert not oracle("".join(parts)), (segs, fill)


def test_known_length_in_characters():
    """Without a vocabulary a hole counts characters."""
    assert can_complete(BRACKETS, ["(", Hole(2, 2), ")"])
    assert can_complete(BRACKETS, ["(", Hole(1, 1), ")"])  # "( )": the ignored space
    assert not can_complete(BRACKETS, ["(", Hole(1, 1), "]"])
    assert not can_complete(BRACKETS, ["(((", Hole(1, 1), ")"])
    w = find_completion(BRACKETS, ["(", Hole(2, 2), ")"])
    assert len(w) == 4 and Oracle(BRACKETS)(w.decode())


def test_json_examples():
    assert can_complete(JSON, ['{"name": ', Hole(0, None), ', "age": 3', Hole(0, None)])
    assert can_complete(JSON, ['{"name": ', Hole(1, 1), ', "age": 3}'])  # a digit
    assert not can_complete(JSON, ['{"name": ', Hole(0, 0), ', "age": 3}'])
    assert not can_complete(JSON, ['{"name": 1', Hole(0, None), '"age": 3'])  # no closing brace
    w = find_completion(JSON, ['{"a": [', Hole(0, None), '], ', Hole(0, None)])
    assert Oracle(JSON)(w.decode())
    assert not can_complete(JSON, ["[1", Hole(0, None), "2 3]"])


def test_ignore_at_ends_and_between():
    """``%ignore`` terminals at both ends and between terminals, as Lark does."""
    assert can_complete(BRACKETS, [" ( ) "])
    assert can_complete(BRACKETS, ["  "])
    assert not can_complete(BRACKETS, ["(", " ", "]"])


def test_budget():
    with pytest.raises(GrammarTooComplexError):
        can_complete(JSON, ["[", Hole(30, 30), "]"], max_work=10_000)
    with pytest.raises(GrammarTooComplexError):
        can_complete(JSON, ["[", Hole(300, 300), "]"], max_states=100)


def test_loader_is_swappable():
    g = load_grammar(BRACKETS)
    assert g.start == "start" and g.ignore
    assert can_complete(g, ["(", Hole(0, None)])


# -- regular constraints -----------------------------------------------------------------


def test_regex_reachability_matches_brute_force():
    """``can_complete_regex`` equals enumeration over token fillings on random
    partial outputs of a small regex."""
    pieces = ["a", "b", "ab", "c", "ba"]
    vocab = make_vocab(pieces)
    g = compile_regex(r"(ab|c)+b?", vocab)
    rng = random.Random(3)
    agree = 0
    for _ in range(300):
        toks = [rng.randrange(len(pieces)) for _ in range(rng.randint(0, 5))]
        segs, i = [], 0
        while i <= len(toks):
            if rng.random() < 0.3:
                segs.append(Hole(*(lambda k: (k, k))(rng.randint(0, 2))))
            if i < len(toks):
                segs.append([toks[i]])
            i += 1
        choices = []
        for s in segs:
            if isinstance(s, Hole):
                choices.append(["".join(c) for c in itertools.product(pieces, repeat=s.min_tokens)])
            else:
                choices.append([pieces[s[0]]])
        # every prefix of a string of the language is live, so "allowed token by
        # token" adds nothing to "the whole text matches"
        want = any(re.fullmatch(r"(ab|c)+b?", "".join(p)) for p in itertools.product(*choices))
        assert can_complete_regex(g, segs) == want, segs
        agree += 1
    assert agree == 300
    assert can_complete_regex(g, ["a", Hole(0, None)])
    assert not can_complete_regex(g, ["b", Hole(0, None)])
    assert can_complete_regex(g, [Hole(3, 3)])
    assert np.all([can_complete_regex(g, [[0], Hole(k, k)]) for k in (1, 2, 3)])


def test_fim_allowed():
    """Fill-in-the-middle for an autoregressive model: the next tokens after the
    prefix that keep ``prefix + token + middle + suffix`` completable, checked
    against the definition on a small vocabulary, with a grammar and a regex."""
    pieces = ["(", ")", "[", "]", "()", " "]
    vocab = make_vocab(pieces)
    oracle = Oracle(BRACKETS)
    prefix = [0, 2]          # "(["
    suffix = [")"]
    got = fim_allowed(BRACKETS, prefix, suffix, vocab=vocab, max_middle_tokens=3)
    want = []
    for t in range(len(pieces)):
        middles = [""] + ["".join(c) for k in (1, 2) for c in itertools.product(pieces, repeat=k)]
        if any(oracle("([" + pieces[t] + m + ")") for m in middles):
            want.append(t)
    assert got == want and got
    # EOS: allowed only when prefix + suffix is already complete
    assert 6 in fim_allowed(BRACKETS, [4], [], vocab=vocab, candidates=[6])
    assert 6 not in fim_allowed(BRACKETS, [0], [], vocab=vocab, candidates=[6])
    g = compile_regex(r"\(\[\]\)|\(\)", vocab)
    assert fim_allowed(g, [0], [")"], vocab=vocab) == [2]   # "(" "[" … ")": only "([])"


def test_grammar_errors():
    """Lark's rejections become constrain.GrammarError; a terminal no automaton
    can match is refused, not approximated."""
    from constrain import GrammarError, UnsupportedRegexError

    with pytest.raises(GrammarError, match="foo"):
        can_complete("start: foo", ["a"])
    with pytest.raises(GrammarError):
        can_complete('start: "a" "', ["a"])
    with pytest.raises(UnsupportedRegexError):
        can_complete("start: A\nA: /a(?=b)/", ["a"])


def test_terminals_are_regular_languages():
    """A terminal is its regex's whole language. Lark's Earley dynamic lexer
    instead takes ``re.match``'s leftmost-first match and its prefixes, so with
    ``/12|120/`` Lark never sees ``120``; the infilling check does (the intended
    semantics; write alternatives longest first to make Lark agree)."""
    assert can_complete("start: A\nA: /12|120/", ["120"])
    parser = lark.Lark("start: A\nA: /12|120/", parser="earley", lexer="dynamic_complete")
    with pytest.raises(lark.exceptions.LarkError):
        parser.parse("120")
    assert Oracle("start: A\nA: /120|12/")("120")
