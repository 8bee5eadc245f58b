"""``constrain.analysis``: the infilling check agrees with bounded brute force.

For three small grammars (balanced brackets, arithmetic, JSON) and a small
vocabulary each, random partial outputs (fixed token runs and holes of a known
number of tokens) are decided by :func:`constrain.analysis.can_complete` and by trying
every filling of the holes with Lark's own Earley parser (the reference
semantics). With holes of known length the enumeration is exhaustive, so the two
must agree exactly. Holes of unknown length are checked both ways: a witness
must parse and fill the partial output, and a negative answer must survive a
bounded search.
"""

from __future__ import annotations

import dataclasses
import itertools
import random
import re
import zlib

import lark
import numpy as np
import pytest

from constrain import (
    GrammarError,
    InvalidStateError,
    GrammarTooComplexError,
    Vocabulary,
    clear_caches,
    compile_grammar,
    compile_json_schema,
    compile_regex,
    grammar_path,
    json_schema_to_lark,
)
from constrain.analysis import (
    Hole,
    can_complete,
    can_complete_regex,
    find_completion,
    fim_allowed,
    load_grammar,
    partial_output,
)
from constrain.analysis.prepared import prepare
from constrain.frontends.lark import load_lark_grammar

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


def test_grammar_forms_agree():
    """Lark text, its GrammarIR and the compiled GrammarConstraint are one grammar
    to the check; a regular constraint is pointed to can_complete_regex."""
    pieces = ["1", "2", "+", "*", "(", ")", "-", " "]
    vocab = make_vocab(pieces)
    forms = [ARITH, load_lark_grammar(ARITH), compile_grammar(ARITH, vocab)]
    cases = [["1+", Hole(0, None)], ["(", Hole(1, 1), "*2"], ["1+", Hole(0, 2), "))"],
             ["-", Hole(0, None), "+"], [[4, 0, 2], Hole(2, 2), [5]]]
    for segs in cases:
        answers = {can_complete(g, segs, vocab=vocab) for g in forms}
        assert len(answers) == 1, segs
    assert [can_complete(ARITH, s, vocab=vocab) for s in cases] == [True, False, False, False, True]
    with pytest.raises(TypeError, match="can_complete_regex"):
        can_complete(compile_regex("[0-9]+", vocab), ["1"])


def test_grammars_are_cached_by_content():
    """Two IRs with the same content share their prepared grammar, until
    ``constrain.clear_caches()``; IRs that differ only in their key exclusions
    (which the fingerprint leaves out) do not."""
    a, b = load_lark_grammar(BRACKETS), load_lark_grammar(BRACKETS)
    assert a is not b and prepare(a) is prepare(b)
    kept = prepare(BRACKETS)
    assert prepare(BRACKETS) is kept
    clear_caches()
    assert prepare(BRACKETS) is not kept
    ir = compile_json_schema(SCHEMA, make_vocab(SCHEMA_PIECES)).ir
    assert ir.exclusions
    assert prepare(ir) is not prepare(dataclasses.replace(ir, exclusions={}))


def test_load_grammar_is_deprecated():
    """``load_grammar`` still loads, into the compiler's GrammarIR, and warns."""
    with pytest.warns(DeprecationWarning, match="load_lark_grammar"):
        g = load_grammar(BRACKETS)
    # %ignore runs are written into the terminals (lark matches them greedily)
    assert g == load_lark_grammar(BRACKETS) and g.terminals[-1].name == "__IGNORED"
    assert can_complete(g, ["(", Hole(0, None)])


SCHEMA = {"type": "object", "properties": {"a": {"type": "integer"}},
          "additionalProperties": {"type": "string"}}
SCHEMA_PIECES = ['{', '}', '"', 'a', 'b', ':', ',', '1', ' ']


def test_json_schema_key_exclusions():
    """A compiled JSON Schema's "any key but the declared ones" terminals
    (GrammarIR.exclusions) mean what they mean to the compiler: the check agrees
    with the schema's Lark text, whose key is a plain regex, and with the
    compiled constraint on complete outputs."""
    vocab = make_vocab(SCHEMA_PIECES)
    g = compile_json_schema(SCHEMA, vocab)
    assert g.ir.exclusions
    text = json_schema_to_lark(SCHEMA)
    cases = [['{"a":1}'], ['{"b":"a"}'], ['{"a":"a"}'], ['{"b":1'], ['{"b":', Hole(0, None)],
             ['{"', Hole(1, 1), '":1}'], ['{"', Hole(0, None), '":1}'], ['{"a":1,"b', Hole(0, None)],
             ['{"ab":1}'], ['{"ab":"1"}']]
    for segs in cases:
        got = can_complete(g, segs)
        assert got == can_complete(text, segs), segs
        if all(isinstance(s, str) for s in segs):
            ids = greedy_tokenize("".join(segs), SCHEMA_PIECES)
            assert got == g.accepts_tokens(ids), segs
    assert [can_complete(g, s) for s in cases] == [True, True, False, False, True, True, True,
                                                   True, False, True]


def test_terminal_flags():
    """Case-insensitive literals and ``%ignore`` terminals with flags are honoured,
    as Lark honours them."""
    source = r"""
start: "select"i WORD ("," WORD)*
WORD: /[a-z]+/
SP: /\s+/
NOTE: /rem/i
%ignore SP
%ignore NOTE
"""
    oracle = Oracle(source)
    for text in ["SeLeCt foo", "SELECT REM foo", "select rEm foo,bar", "select Foo", "selec foo",
                 "select foo REMX", "REM select x"]:
        assert can_complete(source, [text]) == oracle(text), text
    w = find_completion(source, ["SELECT", Hole(0, None), "Rem"])
    assert w is not None and oracle(w.decode())


def test_minimized_partial_output():
    """``minimize=True`` gives a deterministic automaton of the same language
    (for an unbounded character hole, the four states of "a UTF-8 character
    needs 0 to 3 more bytes")."""
    rng = random.Random(5)
    for segs in (["a", Hole(0, 3), "b"], [Hole(2, 2), "ab", Hole(0, None)], ["é", Hole(1, 2)]):
        p, m = partial_output(segs), partial_output(segs, minimize=True)
        assert all(len({b for b, _ in edges}) == len(edges) for edges in m.out)
        for _ in range(300):
            data = bytes(rng.choice(b"ab\xc3\xa9") for _ in range(rng.randint(0, 6)))
            assert p.accepts(data) == m.accepts(data), (segs, data)
    assert partial_output([Hole(0, None)], minimize=True).n == 4


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
    # "(" "[" … ")": only "([])"; and EOS, a default candidate: "()" is complete
    assert fim_allowed(g, [0], [")"], vocab=vocab) == [2, 6]


def test_grammar_errors():
    """Lark's rejections become constrain.GrammarError; a terminal no automaton
    can match is refused, not approximated, and so is one that matches the empty
    string (Lark's dynamic Earley refuses it too)."""
    with pytest.raises(GrammarError, match="foo"):
        can_complete("start: foo", ["a"])
    with pytest.raises(GrammarError):
        can_complete('start: "a" "', ["a"])
    with pytest.raises(GrammarError, match="cannot compile"):
        can_complete("start: A\nA: /a(?=b)/", ["a"])
    with pytest.raises(GrammarError, match="empty string"):
        can_complete("start: A \"b\"\nA: /a*/", ["b"])


def test_bad_segments_and_holes_are_typed_errors():
    """Hole(None) was a bare TypeError from a comparison and Hole(1.5) built a
    hole; a token id past the vocabulary was an IndexError and a negative one
    read the vocabulary from its end; a lone surrogate was UnicodeEncodeError;
    an int segment said a token run needs vocab=."""
    vocab = Vocabulary.from_tokens([b"a", b"b", b"c", b"<eos>"], eos_token_ids=[3])
    g = 'start: "a" B "c"\nB: /b+/'
    for bounds in ((None,), (1.5,), (True,), (-1,), (2, 1)):
        with pytest.raises(ValueError, match="hole"):
            Hole(*bounds)
    assert Hole(np.int64(1), np.int64(2)).max_tokens == 2
    for check in (lambda segs: can_complete(g, segs, vocab=vocab),
                  lambda segs: can_complete_regex(compile_regex("ab+c", vocab), segs)):
        with pytest.raises(TypeError, match="segment 1: .* not int"):
            check(["a", 5])
        with pytest.raises(ValueError, match="lone surrogate"):
            check(["a\ud800"])
        for ids in ([99], [-1]):
            with pytest.raises(ValueError):
                check([ids])
        assert check([[0], Hole(1), [2]]) and not check([[0], [2]])


def test_terminals_are_what_lark_matches():
    """A terminal is what Lark's Earley dynamic lexer matches: ``re.match``'s
    leftmost-first match and its prefixes, so ``/12|120/`` never matches
    ``120``, for Lark and for the infilling check alike; ``/120|12/`` does."""
    assert not can_complete("start: A\nA: /12|120/", ["120"])
    parser = lark.Lark("start: A\nA: /12|120/", parser="earley", lexer="dynamic_complete")
    with pytest.raises(lark.exceptions.LarkError):
        parser.parse("120")
    assert can_complete("start: A\nA: /120|12/", ["120"])
    assert Oracle("start: A\nA: /120|12/")("120")


# -- budgets, hangs and inputs (a review against brute force found each) -------------------


def test_long_regex_holes_end():
    """Hole(0, N) stepped N times over a DFA with a cycle (Hole(0, 10**9): hours);
    Hole(N, ...) stepped N times too."""
    v = Vocabulary.from_tokens([b"a", b"b", b"</s>"], eos_token_ids=[2])
    c = compile_regex("(ab)*a?", v)
    for hole in (Hole(0, 10**9), Hole(10**9), Hole(10**9 + 1, 10**9 + 5), Hole(10**9, 10**9)):
        assert can_complete_regex(c, ["a", hole, "b"])
    assert not can_complete_regex(c, ["a", Hole(10**9, 10**9), "a"])  # only ...ab(ab)*: even
    # exact against a walk of every filling for small bounds
    for lo, hi in itertools.product(range(5), range(5)):
        if hi < lo:
            continue
        for text in ("", "a", "b", "ab", "ba"):
            expected = any(re.fullmatch("(ab)*a?", "a" + "".join(m) + text)
                           for n in range(lo, hi + 1) for m in itertools.product("ab", repeat=n))
            assert can_complete_regex(c, ["a", Hole(lo, hi), text]) == expected, (lo, hi, text)


def test_the_infilling_check_budgets_its_tables_and_witness():
    """_fixpoint wrote two n x n tables per symbol before any step (4.9 GB and a
    bare MemoryError for 60 symbols over 3,000 states); a witness may be
    exponentially long (n_i: n_{i+1} n_{i+1}) and was built leaf by leaf."""
    rules = "".join(f"n{i}: n{i + 1} n{i + 1}\n" for i in range(30)) + 'n30: "a"\nstart: n0\n'
    assert can_complete(rules, [Hole()])
    # a 2**30-byte witness: its length is counted before any byte is built
    # (built leaf by leaf, the default budget took 10-14 s to run out)
    with pytest.raises(GrammarTooComplexError, match="max_work"):
        find_completion(rules, [Hole()])
    # each distinct expansion is made once: 2**18 bytes from 19 expansions (leaf
    # by leaf, 2**19 expansions ran out of this budget after ~4 s)
    rules = "".join(f"n{i}: n{i + 1} n{i + 1}\n" for i in range(18)) + 'n18: "a"\nstart: n0\n'
    assert find_completion(rules, [Hole()], max_work=20_000_000) == b"a" * 2 ** 18
    assert find_completion(rules, ["aa", Hole(), "a"], max_work=20_000_000) == b"a" * 2 ** 18
    many = "start: " + " ".join(f"r{i}" for i in range(60)) + "\n" + \
        "".join(f'r{i}: "a" | "b"\n' for i in range(60))
    with pytest.raises(GrammarTooComplexError, match="max_work"):
        can_complete(many, [Hole(0, 750)], vocab=Vocabulary.from_tokens(
            [b"a", b"b", b"ab", b"ba", b"</s>"], eos_token_ids=[4]))


def test_runs_through_eos_special_and_padding_ids_fill_nothing():
    """The grammar path spelled EOS as the text '</s>', a special token as its
    text and a padding id as nothing; the regex path dropped such runs, and the
    compiled grammar refuses them."""
    v = Vocabulary.from_tokens([b"a", b"</s>", b"<sp>", None, b"<", b"/", b"s", b">", b"p"],
                               eos_token_ids=[1], special_token_ids=[2])
    for text, run in (("a</s>", [0, 1]), ("a<sp>", [0, 2]), ("a", [0, 3])):
        grammar = "start: /" + text.replace("/", "\\/") + "/"
        assert not can_complete(grammar, [run], vocab=v)
        assert can_complete(grammar, [text], vocab=v)


def test_fim_candidates_and_bounds():
    v = Vocabulary.from_tokens([b"a", b"b", b"</s>"], eos_token_ids=[2])
    g = 'start: "a" "b"?'
    # EOS is a default candidate: "a" is complete (it was never offered)
    assert fim_allowed(g, [0], [], vocab=v) == [1, 2]
    # no room for a candidate (0 returned [0], -3 too)
    assert fim_allowed(g, [], [], vocab=v, max_middle_tokens=0) == []
    assert fim_allowed(g, [0], [], vocab=v, max_middle_tokens=0) == [2]
    for bad in (-3, 1.5, "2"):
        with pytest.raises(ValueError, match="max_middle_tokens"):
            fim_allowed(g, [], [], vocab=v, max_middle_tokens=bad)
    # an id past the vocabulary was an IndexError, -1 read it from the end, 1.9 was 1
    for bad in ([3], [-1], [1.9]):
        with pytest.raises(ValueError, match="candidate"):
            fim_allowed(g, [0], [], vocab=v, candidates=bad)


def test_analysis_inputs_are_checked():
    v = Vocabulary.from_tokens([b"a", b"</s>"], eos_token_ids=[1])
    c = compile_regex("a+", v)
    for state in (1.7, "1"):  # int() took both for state 1
        with pytest.raises(InvalidStateError):
            can_complete_regex(c, [Hole()], state=state)
    with pytest.raises(TypeError, match="segment 0"):
        can_complete_regex(c, [5], state=-1)  # (TERMINATED: len(5) was the error)
    with pytest.raises(TypeError, match="DFAConstraint"):
        can_complete_regex(compile_grammar('start: "a"', v), ["a"])
    for name in ("max_states", "max_work"):
        with pytest.raises(ValueError, match=name):
            can_complete('start: "a"', ["a"], **{name: None})
    with pytest.raises(TypeError, match="Vocabulary"):
        can_complete('start: "a"', [Hole(1, 1)], vocab="x")
    # a check of the text cannot see token budgets: refused, as fim_allowed does
    with pytest.raises(GrammarError, match="token budgets"):
        can_complete('start[max_tokens=1]: "a"+', ["aaa"])


def test_a_long_hole_whose_states_do_not_repeat_soon_is_refused(monkeypatch):
    """The sets a hole's minimum walks through repeat with a period that can be
    the product of the DFA's cycle lengths; past MAX_HOLE_STEPS without a
    repeat the check says so, where time and memory grew with the minimum."""
    import constrain.analysis.regular as regular

    v = Vocabulary.from_tokens([b"a", b"</s>"], eos_token_ids=[1])
    c = compile_regex("(?:aa)+|(?:aaa)+|(?:aaaaa)+|(?:aaaaaaa)+", v)  # period 210
    assert can_complete_regex(c, [Hole(10**9)])
    monkeypatch.setattr(regular, "MAX_HOLE_STEPS", 100)
    with pytest.raises(GrammarTooComplexError, match="do not repeat"):
        can_complete_regex(c, [Hole(10**9)])
    assert can_complete_regex(c, [Hole(99)])
