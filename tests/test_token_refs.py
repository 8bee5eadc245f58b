"""Token references in grammars: GBNF ``<[id]>``, ``<text>``, ``!<[id]>``;
Lark ``<|name|>``, ``<[1,3-4]>``, ``<[^id]>`` (GrammarIR.tokens).

The oracle is written here from the definition alone. A token sequence is
read by giving each token a role: *text* (a token that carries text: its
bytes) or *token* (a symbol of its own, ``chr(0xE000 + id)``); it is valid
when some reading is in the grammar's language, written a second time, by
hand, as a ``regex`` pattern over bytes (latin-1 characters) and those
symbols. Partial matching (``regex``'s ``partial=True``) says whether a
reading can still be completed, so every mask along every prefix up to the
given length is compared with the set the oracle allows (nothing more,
nothing less; EOS exactly at complete prefixes).
"""

from __future__ import annotations

import itertools
import random
import re
import threading

import numpy as np
import pytest

from constrain import (GrammarError, GrammarSyntaxError, Matcher, Vocabulary, compile_grammar,
                       compile_structural_tag)
from constrain.cfg.grammar import TERMINATED
from constrain.persist import load

regex = pytest.importorskip("regex")

# ids: 0 a, 1 b, 2 <, 3 >, 4 x, 5 ab, 6 b<, 7 <x>, 8 " ", 9 xa,
# 10 <|sp|> (special), 11 <|end|> (special), 12 </s> (EOS)
TOKENS = [b"a", b"b", b"<", b">", b"x", b"ab", b"b<", b"<x>", b" ", b"xa", b"<|sp|>",
          b"<|end|>", b"</s>"]
SP, END, EOS = 10, 11, 12
VOCAB = Vocabulary.from_tokens(TOKENS, [EOS], [SP, END], name="token-refs")


def sym(i: int) -> str:
    """The oracle's symbol of token ``i`` read as a whole token."""
    return chr(0xE000 + i)


def any_but(*ids) -> str:
    """The oracle's class of every token symbol of a negated reference: text
    and special tokens, EOS never."""
    return "[" + "".join(sym(i) for i in range(len(TOKENS)) if i not in ids and i != EOS) + "]"


def _readings(seq):
    options = []
    for i in seq:
        opts = [sym(i)]
        if VOCAB.grammar_token_mask[i]:
            opts.append(TOKENS[i].decode("latin-1"))
        options.append(opts)
    return ["".join(r) for r in itertools.product(*options)]


class Oracle:
    def __init__(self, pattern: str):
        self.pattern = regex.compile(pattern)

    def valid(self, seq) -> bool:
        return any(self.pattern.fullmatch(r) for r in _readings(seq))

    def viable(self, seq) -> bool:
        return any(self.pattern.fullmatch(r, partial=True) for r in _readings(seq))


def check_exhaustively(grammar, oracle: Oracle, depth: int) -> int:
    """Compare every mask on every valid prefix of at most ``depth`` tokens;
    the number of prefixes checked."""
    seen = 0
    stack = [((), grammar.initial_state())]
    while stack:
        seq, state = stack.pop()
        seen += 1
        complete = oracle.valid(seq)
        want = {i for i in range(len(TOKENS)) if i != EOS and oracle.viable(seq + (i,))}
        if complete or oracle.viable(seq + (EOS,)):
            want.add(EOS)
        got = set(grammar.allowed_token_ids(state).tolist())
        assert got == want, (seq, sorted(got), sorted(want))
        assert grammar.is_accepting(state) == complete, seq
        if len(seq) == depth:
            continue
        for i in range(len(TOKENS)):
            nxt = grammar.advance(state, i)
            assert (nxt is not None) == (i in want), (seq, i)
            if nxt is not None and nxt != TERMINATED:
                stack.append((seq + (i,), nxt))
    return seen


CASES = [
    # a reference between text: the token before must end exactly there
    # ("b<" runs past it, "<x>" as a token is no text of [ab]*)
    ('root ::= "<x>" [ab]* <[10]> "a"\n',
     "<x>[ab]*" + sym(SP) + "a", 5),
    # a reference by the token's text; a reference to a text token matches
    # the whole token only ("ab" as one token, not "a" "b")
    ('root ::= ("x" <|sp|> | <[5]>)+ <|end|>?\n',
     "(?:x" + sym(SP) + "|" + sym(5) + ")+" + sym(END) + "?", 5),
    # negation: any token but "a" (special ones in, EOS out), around text
    ('root ::= "a" !<[0]>* "b"\n',
     "a" + any_but(0) + "*b", 4),
    # a reference at the start, inside a recursion, and a complete grammar
    # where one may still follow
    ('root ::= <[4]> inner | "xa"\ninner ::= "a" inner "b" | <[9]>\n',
     sym(4) + "(?<r>a(?&r)b|" + sym(9) + ")|xa", 8),
    # Lark: lists, ranges, ^ and %ignore'd text between terminals
    ('start: "a" <[1,3-4]> (B | <|sp|>)+\nB: "b"\n%ignore " "\n',
     " *a *[" + sym(1) + sym(3) + sym(4) + "](?: *(?:b|" + sym(SP) + "))+ *", 4),
    ('start: <[^0,10]> "a"\n',
     any_but(0, SP) + "a", 4),
]


@pytest.mark.parametrize("grammar, pattern, depth", CASES)
def test_masks_match_the_oracle(grammar, pattern, depth):
    g = compile_grammar(grammar, VOCAB)
    assert check_exhaustively(g, Oracle(pattern), depth) > 20


def test_the_oracle_can_fail():
    """A reference read as text would be caught: the grammar of the text
    ``<x>`` against the oracle of the token ``<x>``."""
    g = compile_grammar('root ::= "a" "<x>"\n', VOCAB)
    with pytest.raises(AssertionError):
        check_exhaustively(g, Oracle("a" + sym(7)), 3)


def test_a_token_reference_to_eos_terminates():
    g = compile_grammar('root ::= "a" <[12]>\n', VOCAB)
    s = g.advance(g.initial_state(), 0)
    assert g.allowed_token_ids(s).tolist() == [EOS]
    assert not g.is_accepting(s)
    assert g.advance(s, EOS) == TERMINATED
    # where the grammar is not complete after it, the state goes on
    g = compile_grammar('root ::= "a" <[12]> "b"\n', VOCAB)
    s = g.advance(g.advance(g.initial_state(), 0), EOS)
    assert s not in (None, TERMINATED) and g.allowed_token_ids(s).tolist() == [1]


def test_text_never_matches_a_reference():
    g = compile_grammar('root ::= "a" <|sp|>\n', VOCAB)
    s = g.advance_bytes(g.initial_state(), b"a")
    assert g.advance_bytes(s, b"<|sp|>") is None
    assert not g.matches("a<|sp|>")
    assert not g.allowed_bytes(s).any() and g.allows_token_reference(s)
    assert g.is_accepting(g.advance(s, SP))


def test_jump_forward_stops_before_a_reference():
    g = compile_grammar('root ::= "ab" ("<x>" | <[10]>) "a"\n', VOCAB)
    m = Matcher(g)
    assert m.find_jump_forward_bytes() == b"ab"
    m.accept_token(5)
    assert m.find_jump_forward_bytes() == b""  # "<x>" or the token <|sp|>
    m.accept_token(SP)
    assert m.find_jump_forward_bytes() == b"a"


def test_matcher_rollback_over_a_reference():
    g = compile_grammar('root ::= "a" <[10]> "b"\n', VOCAB)
    m = Matcher(g)
    assert m.accept_tokens([0, SP])
    assert m.allowed_token_ids().tolist() == [1]
    m.rollback(1)
    assert m.allowed_token_ids().tolist() == [SP]


def test_references_in_a_structural_tag_grammar():
    tag = {"type": "structural_tag", "format": {
        "type": "sequence", "elements": [
            {"type": "const_string", "value": "x"},
            {"type": "grammar", "grammar": 'root ::= "a" <|sp|> "b"'}]}}
    g = compile_structural_tag(tag, VOCAB)
    s = g.initial_state()
    for i in (4, 0, SP, 1):
        assert i in g.allowed_token_ids(s).tolist()
        s = g.advance(s, i)
    assert g.is_accepting(s)


def test_references_around_a_json_item():
    """Lark's %json item and references in one rule (the grammars are spliced)."""
    vocab = Vocabulary.from_tokens([b"1", b"2", b"{", b"}", b"<|sp|>", b"</s>"], [5], [4],
                                   name="json-refs")
    g = compile_grammar('start: <|sp|> %json {"type": "integer"} <[^0]>\n', vocab)
    s = g.initial_state()
    assert g.allowed_token_ids(s).tolist() == [4]
    s = g.advance(g.advance(s, 4), 1)
    # "1" goes on with the integer; "2" too, or is the reference (any but "1")
    assert g.allowed_token_ids(s).tolist() == [0, 1, 2, 3, 4]
    s = g.advance(s, 4)
    assert g.allowed_token_ids(s).tolist() == [5] and g.is_accepting(s)


def test_wildcard_is_every_token_but_eos():
    g = compile_grammar("start: <[*]>\n", VOCAB)
    assert g.allowed_token_ids(g.initial_state()).tolist() == list(range(EOS))


def test_a_reference_persists(tmp_path):
    g = compile_grammar('root ::= "a" (<[10]> | !<[0,1]>) "b"\n', VOCAB)
    walk = [0, SP, 1]
    s = g.initial_state()
    masks = []
    for i in walk:
        masks.append(g.allowed_token_ids(s).tolist())
        s = g.advance(s, i)
    path = tmp_path / "g.trellis"
    g.save(path)
    h = load(path, VOCAB)
    s = h.initial_state()
    for i, mask in zip(walk, masks):
        assert h.allowed_token_ids(s).tolist() == mask
        s = h.advance(s, i)
    assert h.is_accepting(s)


@pytest.mark.parametrize("text, line, column, message", [
    ('root ::= "a" x\nx ::= "b" (\n  <[13]>)', 3, 3, "token id 13"),
    ('root ::= "a" <[5-20]>', 1, 14, "token id 20"),
    ('root ::= "a" <|none|>', 1, 14, "'<|none|>' is no token"),
    ('root ::= "a" <ab>', 1, 14, "'<ab>' is no token"),
    ('start: "a"\n    | <|none|>', 2, 7, "'<|none|>' is no token"),
    ('start: "a" <[^0-12]>', 1, 12, "matches no token"),
])
def test_bad_references_name_the_place(text, line, column, message):
    with pytest.raises(GrammarError, match=re.escape(message)) as info:
        compile_grammar(text, VOCAB)
    assert (info.value.line, info.value.column) == (line, column)


class BudgetOracle(Oracle):
    """:class:`Oracle` with a token budget on every run of text tokens (the
    grammars below: a budgeted rule of text between references)."""

    def __init__(self, pattern: str, budget: int):
        super().__init__(pattern)
        self.budget = budget

    def _fits(self, seq) -> list:
        out = []
        for roles in itertools.product(*[[True, False] if VOCAB.grammar_token_mask[i] else [False]
                                         for i in seq]):
            runs, run = [], 0
            for text in roles:
                run = run + 1 if text else 0
                runs.append(run)
            if max(runs, default=0) <= self.budget:
                out.append("".join(TOKENS[i].decode("latin-1") if text else sym(i)
                                   for i, text in zip(seq, roles)))
        return out

    def valid(self, seq) -> bool:
        return any(self.pattern.fullmatch(r) for r in self._fits(seq))

    def viable(self, seq) -> bool:
        return any(self.pattern.fullmatch(r, partial=True) for r in self._fits(seq))


@pytest.mark.parametrize("grammar, pattern, budget", [
    ('root ::= (x <[10]>)+ x?\nx[max_tokens=2] ::= [ab]+\n',
     "(?:[ab]+" + sym(SP) + ")+(?:[ab]+)?", 2),
    # tight: one token per match
    ('root ::= x (<|end|> x)*\nx[max_tokens=1] ::= [ab]+\n',
     "[ab]+(?:" + sym(END) + "[ab]+)*", 1),
    ('start: x <[^0,1,5]> x\nx[max_tokens=2]: /[ab]+/\n',
     "[ab]+" + any_but(0, 1, 5) + "[ab]+", 2),
])
def test_references_beside_token_budgets(grammar, pattern, budget):
    g = compile_grammar(grammar, VOCAB)
    assert check_exhaustively(g, BudgetOracle(pattern, budget), 5) > 20
    # the budget is what the oracle checks: without it the masks differ
    free = compile_grammar(grammar.replace(f"[max_tokens={budget}]", ""), VOCAB)
    with pytest.raises(AssertionError):
        check_exhaustively(free, BudgetOracle(pattern, budget), 5)


def test_unsupported_places_are_refused():
    from constrain.analysis import can_complete
    g = compile_grammar('root ::= "a" <[10]>\n', VOCAB)
    with pytest.raises(GrammarError, match="token references such as <\\[10\\]>"):
        can_complete(g, ["a"])
    with pytest.raises(GrammarSyntaxError, match="expected ']>'"):
        compile_grammar('start: "a" <[1', VOCAB)


# -- SmolLM2 ------------------------------------------------------------------------------


def _special(vocab, text: bytes) -> int:
    ids = [i for i in sorted(vocab.special_token_ids | vocab.eos_token_set)
           if vocab.token_bytes(i) == text]
    if not ids:
        pytest.skip(f"{text!r} is no special token of this vocabulary")
    return ids[0]


def test_smollm2_think_then_special_token(smollm2_vocab):
    vocab = smollm2_vocab
    sep = _special(vocab, b"<|im_start|>")
    g = compile_grammar(f'root ::= "<think>" [^<]* <[{sep}]> "answer"\n', vocab)
    assert sep not in g.allowed_token_ids(g.initial_state()).tolist()
    rng = random.Random(7)
    ended = 0
    for walk in range(12):
        s, out, rest = g.initial_state(), [], None
        for step in range(60):
            allowed = g.allowed_token_ids(s).tolist()
            assert allowed, out
            if rest is not None:  # after the reference: towards "answer", then EOS
                fits = [i for i in allowed if i in vocab.eos_token_set
                        or rest.startswith(vocab.token_bytes(i))] if rest else \
                    [i for i in allowed if i in vocab.eos_token_set]
                assert fits, (out, rest)
                tok = max(fits, key=lambda i: len(vocab.token_bytes(i)))
            elif step > 2 and sep in allowed and rng.random() < 0.3:
                tok = sep
            else:
                tok = rng.choice(allowed)
            assert tok not in vocab.eos_token_set or rest == b"", out
            s = g.advance(s, tok)
            assert s is not None
            if s == TERMINATED:
                break
            out.append(tok)
            if tok == sep:
                rest = b"answer"
            elif rest:
                rest = rest[len(vocab.token_bytes(tok)):]
        text = b"".join(vocab.token_bytes(i) for i in out if i != sep)
        assert out.count(sep) <= 1
        if s == TERMINATED:
            ended += 1
            k = out.index(sep)
            before = b"".join(vocab.token_bytes(i) for i in out[:k])
            after = b"".join(vocab.token_bytes(i) for i in out[k + 1:])
            assert re.fullmatch(rb"<think>[^<]*", before) and after == b"answer", out
        else:
            assert sep not in out and re.fullmatch(rb"<think>[^<]*", text), out
    assert ended >= 4
    # the reference's token is allowed exactly where "<think>" and text end
    s = g.advance_bytes(g.initial_state(), b"<think>abc")
    assert g.allows_token_reference(s)
    ids = g.allowed_token_ids(s)
    assert sep in ids.tolist()
    texts = [vocab.token_bytes(i) for i in ids.tolist() if i != sep]
    assert texts and all(b"<" not in t for t in texts)


def test_smollm2_budgeted_thought_then_special_token(smollm2_vocab):
    """A budget on the thought and a special token after it: every walk that
    ends has at most 6 tokens carrying thought bytes."""
    vocab = smollm2_vocab
    sep = _special(vocab, b"<|im_start|>")
    g = compile_grammar('root ::= "<think>" think <|im_start|> "ok"\n'
                        'think[max_tokens=6] ::= [^<]+\n', vocab)
    rng = random.Random(3)
    ended = 0
    for _ in range(10):
        s, out = g.initial_state(), []
        while s != TERMINATED and len(out) < 30:
            allowed = g.allowed_token_ids(s).tolist()
            assert allowed, out
            done = sep in out
            tok = (min(allowed, key=lambda i: (i not in vocab.eos_token_set,
                                               -len(vocab.token_bytes(i))))
                   if done else rng.choice(allowed))
            s = g.advance(s, tok)
            out.append(tok)
        if s != TERMINATED:
            continue
        ended += 1
        k = out.index(sep)
        pieces = [vocab.token_bytes(i) for i in out[:k]]
        text = b"".join(pieces)
        assert re.fullmatch(rb"<think>[^<]+", text), out
        at, carrying = 0, 0
        for p in pieces:  # tokens with bytes past "<think>"
            carrying += at + len(p) > 7
            at += len(p)
        assert carrying <= 6, out
    assert ended >= 5


def test_smollm2_named_special_token_and_negation(smollm2_vocab):
    vocab = smollm2_vocab
    end = _special(vocab, b"<|im_end|>")
    g = compile_grammar('start: "Hi" <|im_end|>\n', vocab)
    s = g.advance_bytes(g.initial_state(), b"Hi")
    assert g.allowed_token_ids(s).tolist() == [end]
    # SmolLM2-Instruct's EOS is <|im_end|>: it ends the output where it completes it
    s = g.advance(s, end)
    assert s == TERMINATED if end in vocab.eos_token_set else g.is_accepting(s)
    g = compile_grammar(f'root ::= !<[{end}]> "."\n', vocab)
    first = g.allowed_token_ids(g.initial_state())
    n_text = int(np.count_nonzero(vocab.grammar_token_mask))
    expected = n_text + len(vocab.special_token_ids) - (end in vocab.special_token_ids)
    assert len(first) == expected and end not in first.tolist()


def test_threads_share_a_grammar_with_references():
    g = compile_grammar('root ::= ([ab]+ <[10]>)* "x"\n', VOCAB)
    errors = []

    def work(seed):
        rng = random.Random(seed)
        try:
            for _ in range(50):
                s = g.initial_state()
                for _ in range(8):
                    allowed = g.allowed_token_ids(s).tolist()
                    tok = rng.choice(allowed)
                    s = g.advance(s, tok)
                    if s == TERMINATED:
                        break
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors


# -- the special-token cases of xgrammar's and llguidance's own tests ---------------------

_CASES_DIR = __import__("pathlib").Path(__file__).parent / "data" / "grammar_cases"


def _case_records(name):
    import json

    return [json.loads(line) for line in (_CASES_DIR / name).read_text().splitlines()]


def test_xgrammar_numeric_special_token_sets():
    """xgrammar's accepted and rejected id sequences, over five text tokens and EOS."""
    vocab = Vocabulary.from_tokens([b"a", b"b", b"c", b"d", b"e", b"</s>"], [5], name="five")
    cases = [r for r in _case_records("xgrammar_lark_accept_reject.jsonl")
             if "special_token" in r["src"]]
    assert len(cases) >= 4
    for r in cases:
        g = compile_grammar(r["grammar"], vocab)
        for seq, ok in [(s, True) for s in r["accepted"]] + [(s, False) for s in r["rejected"]]:
            state = g.initial_state()
            for i in seq:
                state = None if state is None else g.advance(state, i)
            assert (state is not None and g.is_accepting(state)) == ok, (r["grammar"], seq)


def test_llguidance_special_token_syntax():
    """llguidance's grammars with special-token terminals compile, or are
    refused, as llguidance's tests say (over a vocabulary of 5,000 ids)."""
    tokens = [bytes([b]) for b in range(256)] + [b"t%d" % i for i in range(256, 4999)] + [b"</s>"]
    vocab = Vocabulary.from_tokens(tokens, [4999], name="5000")
    cases = [r for r in _case_records("llguidance_lark_cases.jsonl")
             if "compiles" in r and re.search(r"<\[|<\|", r["grammar"])]
    assert len(cases) >= 12
    for r in cases:
        if r["compiles"]:
            compile_grammar(r["grammar"], vocab)
        else:
            with pytest.raises(GrammarError) as info:
                compile_grammar(r["grammar"], vocab)
            assert info.value.line is not None, r["grammar"]
