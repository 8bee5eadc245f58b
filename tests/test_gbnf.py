"""GBNF grammars (constrain/frontends/gbnf.py) against an oracle of their own.

The oracle here shares no code with the front end: it reads GBNF with a regex
tokenizer (a rule is the tokens from one ``name ::=`` to the next), makes a
character-level CFG (every literal character and class one terminal, every
group and repetition a rule) and recognises strings with a plain Earley
parser over code points. On the llama.cpp grammar files (tests/data/gbnf) and
hand-written ones, strings it derives, strings the constraint's own sampler
derives and mutations of both, it and the constraint must agree on whether a
string is in the language and on the longest prefix that some string of the
language continues.
"""

from __future__ import annotations

import random
import re
from pathlib import Path

import numpy as np
import pytest

import constrain
from byte_vocab import accepts, byte_vocabulary
from constrain.errors import GrammarError, GrammarSyntaxError, GrammarTooComplexError
from constrain.frontends.gbnf import load_gbnf_grammar, looks_like_gbnf
from grammar_sampling import GrammarSampler, mutate

DATA = Path(__file__).parent / "data" / "gbnf"
FILES = sorted(p.stem for p in DATA.glob("*.gbnf"))
MAX_CP = 0x10FFFF

# -- the oracle -----------------------------------------------------------------------------

_TOKEN = re.compile(r"""
    (?P<skip>[ \t\r\n]+|\#[^\r\n]*)
  | (?P<string>"(?:\\.|[^"\\])*")
  | (?P<cls>\[(?:\\.|[^\]\\])*\])
  | (?P<defn>::=)
  | (?P<rep>\{\s*\d+\s*(?:,\s*\d*\s*)?\})
  | (?P<name>[A-Za-z0-9_-]+)
  | (?P<op>[|()*+?.])
""", re.VERBOSE | re.DOTALL)
_CHAR = re.compile(r'\\x([0-9a-fA-F]{2})|\\u([0-9a-fA-F]{4})|\\U([0-9a-fA-F]{8})|\\(.)|(.)',
                   re.DOTALL)
_SIMPLE = {"t": "\t", "n": "\n", "r": "\r", "\\": "\\", '"': '"', "[": "[", "]": "]"}


def _chars(body: str) -> list[int]:
    out = []
    for m in _CHAR.finditer(body):
        x, u, big, esc, plain = m.groups()
        hexa = x or u or big
        out.append(int(hexa, 16) if hexa else ord(_SIMPLE[esc] if esc else plain))
    return out


class Oracle:
    """A GBNF grammar as a character-level CFG, with an Earley recogniser."""

    def __init__(self, text: str, start: str = "root"):
        toks = []
        pos = 0
        while pos < len(text):
            m = _TOKEN.match(text, pos)
            assert m, text[pos:pos + 20]
            if m.lastgroup != "skip":
                toks.append((m.lastgroup, m.group()))
            pos = m.end()
        # terminals: ("set", frozenset of (lo, hi), negated); rules: lhs -> [rhs]
        self.rules: dict[str, list[list]] = {}
        heads = [i for i in range(len(toks) - 1) if toks[i][0] == "name" and toks[i + 1][0] == "defn"]
        self.n_aux = 0
        for k, i in enumerate(heads):
            end = heads[k + 1] if k + 1 < len(heads) else len(toks)
            self.toks, self.pos = toks[i + 2:end], 0
            self.rules[toks[i][1]] = self.alts()
            assert self.pos == len(self.toks)
        self.start = start
        self._nullable()
        self._min_len()

    # parsing
    def new(self, alts) -> str:
        self.n_aux += 1
        name = f"@{self.n_aux}"
        self.rules[name] = alts
        return name

    def alts(self) -> list[list]:
        out = [self.seq()]
        while self.pos < len(self.toks) and self.toks[self.pos] == ("op", "|"):
            self.pos += 1
            out.append(self.seq())
        return out

    def seq(self) -> list:
        items = []
        while self.pos < len(self.toks):
            kind, val = self.toks[self.pos]
            if kind == "string":
                self.pos += 1
                cps = _chars(val[1:-1])
                items.append(self.new([[("set", frozenset([(c, c)]), False) for c in cps]]))
            elif kind == "cls":
                self.pos += 1
                body = val[1:-1]
                neg = body.startswith("^")
                cps, ivs = _chars(body[1:] if neg else body), []
                # a range is "x-y" with y not the closing bracket
                raw = body[1:] if neg else body
                pieces = [m.group(0) for m in _CHAR.finditer(raw)]
                j = 0
                while j < len(cps):
                    if j + 2 < len(cps) and pieces[j + 1] == "-":
                        if cps[j] <= cps[j + 2]:  # a reversed range matches nothing
                            ivs.append((cps[j], cps[j + 2]))
                        j += 3
                    else:
                        ivs.append((cps[j], cps[j]))
                        j += 1
                items.append(("set", frozenset(ivs), neg))
            elif kind == "name":
                self.pos += 1
                items.append(val)
            elif val == ".":
                self.pos += 1
                items.append(("set", frozenset([(1, MAX_CP)]), False))  # llama.cpp: never NUL
            elif val == "(":
                self.pos += 1
                inner = self.alts()
                assert self.toks[self.pos] == ("op", ")")
                self.pos += 1
                items.append(self.new(inner))
            elif val in "*+?" or kind == "rep":
                self.pos += 1
                if kind == "rep":
                    nums = re.findall(r"\d+|,", val)
                    lo = int(nums[0])
                    hi = lo if len(nums) == 1 else (int(nums[2]) if len(nums) == 3 else None)
                else:
                    lo, hi = {"*": (0, None), "+": (1, None), "?": (0, 1)}[val]
                x = items.pop()
                if hi is None:
                    star = self.new([[]])
                    self.rules[star].append([x, star])
                    items.append(self.new([[x] * lo + [star]]))
                else:
                    tail = None
                    for _ in range(hi - lo):
                        tail = self.new([[], [x] + ([tail] if tail else [])])
                    items.append(self.new([[x] * lo + ([tail] if tail else [])]))
            else:
                break
        return items

    def _nullable(self):
        self.nullable = set()
        changed = True
        while changed:
            changed = False
            for lhs, alts in self.rules.items():
                if lhs not in self.nullable and any(all(isinstance(s, str) and s in self.nullable
                                                        for s in a) for a in alts):
                    self.nullable.add(lhs)
                    changed = True

    def _min_len(self):
        inf = float("inf")
        self.min_len = {n: inf for n in self.rules}
        changed = True
        while changed:
            changed = False
            for lhs, alts in self.rules.items():
                for a in alts:
                    v = self.cost(a)
                    if v < self.min_len[lhs]:
                        self.min_len[lhs] = v
                        changed = True

    def cost(self, alt) -> float:
        """The shortest string of a sequence (infinite if it has none)."""
        return sum(self.min_len[s] if isinstance(s, str) else
                   (1 if self.spells(s) else float("inf")) for s in alt)

    @staticmethod
    def spells(term) -> bool:
        """Whether some character of text matches ``term``: UTF-8 text holds
        no surrogate, and llama.cpp never matches NUL (a literal that is a
        lone surrogate matches nothing; sampling one looped for ever)."""
        _, ivs, neg = term
        return neg or any(hi >= 1 and not (0xD800 <= max(lo, 1) and hi <= 0xDFFF) for lo, hi in ivs)

    @staticmethod
    def matches(term, cp: int) -> bool:
        _, ivs, neg = term
        inside = any(lo <= cp <= hi for lo, hi in ivs)
        return cp != 0 and inside != neg  # llama.cpp never matches NUL

    # recognising
    def longest_viable(self, text: str) -> tuple[int, bool]:
        """The length of the longest prefix of ``text`` some string of the
        language starts with, and whether ``text`` is in the language."""
        rules = self.rules
        chart = [set()]
        top = ("@top", (self.start,), 0, 0)

        def close(col: int):
            items = chart[col]
            work = list(items)
            while work:
                lhs, rhs, dot, origin = work.pop()
                if dot < len(rhs):
                    s = rhs[dot]
                    if isinstance(s, str):
                        for alt in rules[s]:
                            new = (s, tuple(alt), 0, col)
                            if new not in items:
                                items.add(new)
                                work.append(new)
                        if s in self.nullable:
                            new = (lhs, rhs, dot + 1, origin)
                            if new not in items:
                                items.add(new)
                                work.append(new)
                else:
                    for l2, r2, d2, o2 in list(chart[origin]):
                        if d2 < len(r2) and r2[d2] == lhs:
                            new = (l2, r2, d2 + 1, o2)
                            if new not in items:
                                items.add(new)
                                work.append(new)

        chart[0].add(top)
        close(0)
        for i, ch in enumerate(text):
            cp = ord(ch)
            nxt = set()
            for lhs, rhs, dot, origin in chart[i]:
                if dot < len(rhs) and not isinstance(rhs[dot], str) and self.matches(rhs[dot], cp):
                    nxt.add((lhs, rhs, dot + 1, origin))
            chart.append(nxt)
            close(i + 1)
            if not nxt:
                return i, False
        return len(text), ("@top", (self.start,), 1, 0) in chart[-1]

    # sampling
    def sample(self, rng: random.Random, max_depth: int = 10) -> str:
        out: list[str] = []

        def char(term) -> str:
            _, ivs, neg = term
            if not neg:
                # the term's intervals less NUL and the surrogates
                pieces = [(max(a, 1), b) for lo, hi in sorted(ivs)
                          for a, b in ((lo, min(hi, 0xD7FF)), (max(lo, 0xE000), hi)) if max(a, 1) <= b]
                lo, hi = rng.choice(pieces)
                return chr(rng.randint(lo, min(hi, lo + 300)))
            while True:
                cp = rng.choice([rng.randint(32, 126), rng.randint(0, 0x3000), 0x1F600])
                if self.matches(term, cp) and not 0xD800 <= cp <= 0xDFFF:
                    return chr(cp)

        def expand(sym, depth):
            if not isinstance(sym, str):
                out.append(char(sym))
                return
            alts = [a for a in self.rules[sym] if self.cost(a) < float("inf")]
            if depth > max_depth:
                best = min(self.cost(a) for a in alts)
                alts = [a for a in alts if self.cost(a) == best]
            for s in rng.choice(alts):
                expand(s, depth + 1)

        expand(self.start, 0)
        return "".join(out)

    def alphabet(self) -> str:
        chars = set(" \n\t\"\\{}[]()az09,.:-+*/=#")
        for alts in self.rules.values():
            for a in alts:
                for s in a:
                    if not isinstance(s, str):
                        for lo, hi in s[1]:
                            chars.update(map(chr, {lo, hi, min(lo + 1, hi)} - set(range(0xD800, 0xE000))))
        return "".join(sorted(chars))


# -- helpers -------------------------------------------------------------------------------


def ours_longest(g, text: str) -> tuple[int, bool]:
    """The same two facts from the constraint, walked one character at a time."""
    state = g.initial_state()
    for i, ch in enumerate(text):
        nxt = g.advance_bytes(state, ch.encode("utf-8"))
        if nxt is None:
            return i, False
        state = nxt
    return len(text), g.is_accepting(state)


def source(name: str) -> str:
    return (DATA / f"{name}.gbnf").read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def vocab():
    return byte_vocabulary()


def agree(text: str, vocab, n_samples: int = 40, seed: int = 0, start: str = "root"):
    """Compare the constraint with the oracle on derived strings and mutations."""
    g = constrain.compile_grammar(text, vocab, start, format="gbnf")
    oracle = Oracle(text, start)
    rng = random.Random(seed)
    strings = [oracle.sample(rng) for _ in range(n_samples)]
    sampler = GrammarSampler(g, seed)
    for _ in range(n_samples):
        try:
            strings.append(sampler.sentence(8).decode("utf-8"))
        except UnicodeDecodeError:  # a walk may end inside a character: the oracle reads code points
            continue
    alphabet = oracle.alphabet()
    strings += [mutate(mutate(s, rng, alphabet), rng, alphabet) for s in strings]
    strings += [mutate(s, rng, alphabet) for s in strings[:n_samples]]
    accepted = 0
    for s in strings:
        expected = oracle.longest_viable(s)
        assert ours_longest(g, s) == expected, (s, expected)
        accepted += expected[1]
    return accepted, len(strings)


# -- the llama.cpp files -------------------------------------------------------------------


@pytest.mark.parametrize("name", FILES)
def test_llama_cpp_files_agree_with_the_oracle(name, vocab):
    accepted, total = agree(source(name), vocab)
    # the derived strings are accepted, most mutations are not: both sides are tried
    assert 40 <= accepted < total


def test_all_files_vendored():
    assert FILES == sorted(["arithmetic", "c", "chess", "english", "japanese", "json",
                            "json_arr", "list"])


@pytest.mark.parametrize("name", FILES)
def test_llama_cpp_files_compile_over_smollm2(name, smollm2_vocab):
    """Each file compiles over a real vocabulary, and along random token walks
    every allowed token (and a sample of refused ones) is what the oracle says."""
    text = source(name)
    g = constrain.compile_grammar(DATA / f"{name}.gbnf", smollm2_vocab)
    oracle = Oracle(text)
    rng = random.Random(1)
    tokens = smollm2_vocab.tokens
    grammar_token = smollm2_vocab.grammar_token_list
    for _walk in range(2):
        state, prefix = g.initial_state(), b""
        for _step in range(10):
            allowed = set(g.allowed_token_ids(state).tolist()) - set(smollm2_vocab.eos_token_ids)
            assert allowed or g.is_accepting(state)
            if not allowed:
                break
            refused = rng.sample(range(len(smollm2_vocab)), 40)
            for t in list(rng.sample(sorted(allowed), min(30, len(allowed)))) + refused:
                data = prefix + tokens[t]
                if not grammar_token[t]:  # special tokens: only EOS, when accepting
                    continue
                try:
                    text_t = data.decode("utf-8")
                except UnicodeDecodeError:
                    continue
                viable = oracle.longest_viable(text_t)[0] == len(text_t)
                assert (t in allowed) == viable, (name, prefix, tokens[t])
            t = rng.choice(sorted(allowed))
            state = g.advance(state, t)
            prefix += tokens[t]
        assert g.is_accepting(state) == oracle.longest_viable(prefix.decode("utf-8", "replace"))[1] \
            or not _decodes(prefix)


def _decodes(data: bytes) -> bool:
    try:
        data.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False


# -- hand-written grammars -------------------------------------------------------------------

HAND = {
    "escapes": r'''root ::= "\x41\u00e9\U0001F600" [\t\n\r\\\"\[\]] "\"" [^\x00-\x40]''',
    "counts": r'''root ::= ("ab"){2} "x"{1,} [0-9]{0,3} ("c" | "d"){2,4}''',
    "recursive counts": r'''root ::= p{2,3}
p ::= "(" p* ")" | "."''',
    "nullable everywhere": r'''root ::= a? b* (c | "") d{0,2}
a ::= "" | "a"
b ::= "b"?
c ::= | "c"
d ::= a b''',
    "left recursion": r'''root ::= root "+" n | n
n ::= [0-9]+''',
    "any": r'''root ::= "<" .* ">" | . "!"''',
    "comments and lines": r'''# a comment
root ::= # after the head
  "a" (  # inside a group
    "b" |
    "c"   # more
  ) |
  "d" e
e ::= "e" # trailing
''',
    "ranges": r'''root ::= [a-cx-z0-2-] [-a] [a-] [^-z] [z-a]? "end"''',
    "deep": r'''root ::= v
v ::= "[" (v ("," v)*)? "]" | [0-9]{1,3}''',
    "crlf": 'root ::= "a" b\r\nb ::= "b"\r\n',
    "literal star": r'''root ::= "ab"* "c"+''',
    "stacked": r'''root ::= "a"*? "b"+? "c"?*''',
}


@pytest.mark.parametrize("name", sorted(HAND))
def test_hand_written_grammars_agree_with_the_oracle(name, vocab):
    accepted, total = agree(HAND[name], vocab, n_samples=30, seed=3)
    assert accepted >= 30


@pytest.mark.parametrize("text, yes, no", [
    (HAND["escapes"], ["Aé😀\t\"A", "Aé😀]\"é"], ["Aé😀\t\"@", "Aé😀x\"A"]),
    (HAND["counts"], ["ababxcd", "ababxx012cdcd"], ["abxcd", "ababx0123cd", "ababxc"]),
    (HAND["ranges"], ["a-a?end", "-aaxend", "2-ayend"], ["a-a-end", "a--zend", "a-azaend"]),
    (HAND["any"], ["<>", "<a\nb>", "x!", "\n!", "😀!"], ["<", "!"]),
    (HAND["left recursion"], ["1+22+3"], ["1+", "+1"]),
    (HAND["comments and lines"], ["ab", "ac", "de"], ["a", "abc", "d"]),
    (HAND["literal star"], ["c", "ababcc"], ["abac", "a"]),
])
def test_hand_written_strings(text, yes, no, vocab):
    g = constrain.compile_grammar(text, vocab)
    for s in yes:
        assert accepts(g, s), s
    for s in no:
        assert not accepts(g, s), s


def test_regular_grammars_are_one_terminal():
    ir = load_gbnf_grammar(source("chess"))
    assert len(ir.terminals) == 1 and len(ir.rules) == 1
    ir = load_gbnf_grammar(source("json"))
    # value, object, array are recursive: rules; strings, numbers, ws runs: terminals
    assert {"root", "value", "object", "array"} <= set(ir.nonterminals)
    assert "string" not in ir.nonterminals and "ws" not in ir.nonterminals
    assert all(t.pattern for t in ir.terminals)


# -- the entry points ------------------------------------------------------------------------


def test_format_detection(vocab, tmp_path):
    assert looks_like_gbnf("root ::= \"a\"") and looks_like_gbnf("# c\n  x-y ::= z")
    assert not looks_like_gbnf('start: "a"\n// x ::= y')
    lark = constrain.compile_grammar('start: "a" "b"', vocab)
    gbnf = constrain.compile_grammar('root ::= "a" "b"', vocab)
    assert accepts(lark, "ab") and accepts(gbnf, "ab")
    assert "Terminal" not in repr(gbnf)  # plain GrammarConstraint either way
    path = tmp_path / "g.gbnf"
    path.write_text('root ::= [xy]+\n')
    assert accepts(constrain.compile_grammar(path, vocab), "xyx")
    assert accepts(constrain.compile_grammar(str(path), vocab), "xyx")
    other = constrain.compile_grammar('root ::= "r"\nother ::= "o"', vocab, "other")
    assert accepts(other, "o") and not accepts(other, "r")
    # format= overrides detection both ways
    with pytest.raises(GrammarError):
        constrain.compile_grammar('root ::= "a"', vocab, format="lark")
    with pytest.raises(GrammarSyntaxError):
        constrain.compile_grammar('start: "a"', vocab, format="gbnf")
    with pytest.raises(constrain.ConstraintError, match="format"):
        constrain.compile_grammar('root ::= "a"', vocab, format="ebnf")
    c = constrain.Compiler(vocab)
    assert accepts(c.compile_grammar('root ::= "q"'), "q")
    assert accepts(c.compile_grammar('start: "q"'), "q")


@pytest.mark.parametrize("text, line, column, kind, message", [
    ('root ::= "a\n', 1, 10, GrammarSyntaxError, "unterminated string"),
    ('root ::= [a-', 1, 10, GrammarSyntaxError, "unterminated character class"),
    ('root ::= "a"\nx ::= (\n "b"\n', 4, 1, GrammarSyntaxError, "expected ')'"),
    ('root ::= "a"\n  | "b"', 2, 3, GrammarSyntaxError, "expected a rule name"),
    ('root = "a"', 1, 6, GrammarSyntaxError, "expected '::='"),
    ('root ::= "a" )', 1, 14, GrammarSyntaxError, "expected the end of the line"),
    ('root ::= * "a"', 1, 10, GrammarSyntaxError, "no item before it"),
    ('root ::= "a"{2,1}', 1, 13, GrammarSyntaxError, "below the minimum"),
    ('root ::= "a"{x}', 1, 14, GrammarSyntaxError, "repetition count"),
    ('root ::= "\\q"', 1, 11, GrammarSyntaxError, "unknown escape"),
    ('root ::= "\\x4"', 1, 11, GrammarSyntaxError, "hex digits"),
    ('root ::= [\\U00110000]', 1, 11, GrammarSyntaxError, "past U+10FFFF"),
    ('root ::= []', 1, 10, GrammarSyntaxError, "empty character class"),
    ('root ::= "a" b\n\nb ::= c', 3, 7, GrammarError, "undefined rule 'c'"),
    ('root ::= "a"\nroot ::= "b"', 2, 1, GrammarError, "defined twice"),
    ('a ::= "a"', 1, 1, GrammarError, "no 'root' rule"),
    ('root ::= x\nx ::= "a" x', 1, 1, GrammarError, "matches no string"),
    ('root ::= "a" <[12345]>', 1, 14, GrammarError, "outside the vocabulary"),
    ('root ::= !<|im_end|>*', 1, 10, GrammarError, "is no token of the vocabulary"),
    ('root ::= <think> "x"', 1, 10, GrammarError, "is no token of the vocabulary"),
    ('root ::= "a"\nx ::= <[3-1]>', 2, 7, GrammarSyntaxError, "below the start"),
    ('root ::= "a" <[1,x]>', 1, 14, GrammarSyntaxError, "expected token ids"),
    ('root ::= !<[^1]>', 1, 10, GrammarSyntaxError, "negated twice"),
    ('root ::= "a" <[1]', 1, 14, GrammarSyntaxError, "expected ']>'"),
    # a lone CR ends a line for the parser, and now for the position too
    ('root ::= "a"\rfoo ::= "b" $', 2, 13, GrammarSyntaxError, "expected the end of the line"),
    ('root ::= "a\x00b"', 1, 12, GrammarError, "a NUL in a literal"),
    # the automaton of a budgeted rule (one terminal, never built as rules),
    # at the rule: it named BUDGETED__my-rule
    ('x ::= "q"\nmy-rule[max_tokens=50] ::= [a-z]* "a" [a-z]{16}\nroot ::= my-rule "!"',
     2, 1, GrammarTooComplexError, "rule 'my-rule': the regex"),
])
def test_errors_name_the_place(text, line, column, kind, message, vocab):
    with pytest.raises(kind, match=re.escape(message)) as info:
        constrain.compile_grammar(text, vocab, format="gbnf")
    assert (info.value.line, info.value.column) == (line, column)


def test_what_llama_cpp_reads(vocab):
    """From a review against llama.cpp's parser (src/llama-grammar.cpp): ``\\-``
    is one of its escapes (refused as unknown), it never matches NUL (``[^a]``
    and ``.`` took it), and a text with a rule that ends in ``.gbnf`` is text
    (it was read as a file name)."""
    g = constrain.compile_grammar(r'root ::= [a-z0-9\-]+ "\-"', vocab)
    assert accepts(g, "a-9-") and not accepts(g, "a-9")
    for text in ("root ::= [^a]", "root ::= .", "root ::= [\\x00-\\x7f]"):
        g = constrain.compile_grammar(text, vocab)
        assert accepts(g, "b") and not accepts(g, "\x00"), text
    g = constrain.compile_grammar('root ::= "yes" | "no"  # adapted from json.gbnf', vocab)
    assert accepts(g, "yes")


def test_long_runs_of_optional_items_compile(vocab):
    """A run of nullable items wrote one alternative per item with the rest's
    full regex after it: quadratic (500 items: 751K characters, and a compile
    that ran past its time budget). Halving is O(n log n)."""
    for n in (500, 3000):
        g = constrain.compile_grammar("root ::= " + " ".join(['"a"?'] * n) + ' "b"', vocab,
                                      time_budget=20)
        assert accepts(g, "a" * 7 + "b") and accepts(g, "a" * n + "b")
        assert not accepts(g, "a" * (n + 1) + "b")
    g = constrain.compile_grammar('root ::= "x" ("a"? [bc]* "d"{0,2} ("e" "f")?) "z"', vocab)
    for text, ok in (("xz", True), ("xacdz", True), ("xbbddefz", True), ("xaaz", False),
                     ("xddd z", False), ("xefez", False)):
        assert accepts(g, text) == ok, text


def test_a_literal_with_a_lone_surrogate_matches_nothing(vocab):
    """As in Lark: no UTF-8 output holds one (it raised UnicodeEncodeError)."""
    with pytest.raises(GrammarError, match="derives no string"):
        constrain.compile_grammar('root ::= "\\ud800"\n', vocab)
    g = constrain.compile_grammar('root ::= "a" | "\\ud800" "b"\n', vocab)
    assert accepts(g, "a") and not accepts(g, "b")
    # and to the oracle, whose sampler looped for ever on the second branch
    oracle, rng = Oracle('root ::= "a" | "\\ud800" "b" | [\\ud800-\\ue001] "c"\n'), random.Random(0)
    assert {oracle.sample(rng) for _ in range(60)} <= {"a", "\ue000c", "\ue001c"}


def test_long_chains_of_rules_compile():
    """Regular rules are inlined bottom-up, without a Python frame per rule
    down the chain (150 rules each using the next overflowed the stack)."""
    for n in (150, 3000):
        text = "".join(f'r{i} ::= r{i + 1} "a"\n' for i in range(n)) + f'r{n} ::= "b"\nroot ::= r0\n'
        g = constrain.compile_grammar(text, constrain.Vocabulary.from_tokens(
            [bytes([b]) for b in range(256)] + [b"</s>"], eos_token_ids=[256]))
        assert g.matches("b" + "a" * n) and not g.matches("b" + "a" * (n - 1))
        text = "".join(f"r{i} ::= r{i + 1}\n" for i in range(n)) + f'r{n} ::= "b" | ""\nroot ::= r0 "x"\n'
        assert load_gbnf_grammar(text).nonterminals


def test_limits(vocab):
    # 170 levels raised a RecursionError in a pass after the parser's check at 200
    for depth in (170, 300):
        deep = "root ::= " + "(" * depth + '"a"' + ")" * depth
        with pytest.raises(GrammarTooComplexError, match="nested"):
            load_gbnf_grammar(deep)
    assert accepts(constrain.compile_grammar("root ::= " + "(" * 95 + '"a"' + ")*" * 95, vocab),
                   "aa")
    # the size of a regular run's regex is a budget the grammar path takes (it
    # advised max_positions=, which compile_grammar did not accept)
    # (a budgeted rule's: any other run past a budget is built as rules)
    big = 'root ::= r\nr[max_tokens=100000] ::= ([a-z]{10} "\\n"){10001}'
    with pytest.raises(GrammarTooComplexError, match="rule 'r'.*max_positions="):
        constrain.compile_grammar(big, vocab, max_repeat=20_000)
    with pytest.raises(GrammarTooComplexError, match="rule 'r'.*max_states="):
        constrain.compile_grammar(big, vocab, max_repeat=20_000, max_positions=10**6)
    g = constrain.compile_grammar('root ::= ([a-z]{10} "\\n"){10001}', vocab, max_repeat=20_000)
    assert accepts(g, "abcdefghij\n" * 10001) and not accepts(g, "abcdefghij\n" * 10000)
    with pytest.raises(GrammarTooComplexError, match="expand"):
        load_gbnf_grammar("root ::= " + " ".join(["x{0,9000}"] * 30) + '\nx ::= "(" x ")" | ""')
    # a count past max_repeat, named where it is written (it named the generated
    # terminal's regex, and advised an option grammars did not take)
    for text, col in (('root ::= "a"{100000}', 14), ('root ::= x{0,300000}\nx ::= "(" x ")" | ""', 14)):
        with pytest.raises(GrammarTooComplexError, match="repetition count .* limit of 10000") as e:
            load_gbnf_grammar(text)
        assert (e.value.line, e.value.column) == (1, col)
    g = constrain.compile_grammar('root ::= "a"{12000}', vocab, max_repeat=20_000)
    assert accepts(g, "a" * 12000) and not accepts(g, "a" * 11999)
    # a regular rule too large to inline everywhere stays a rule, same language
    text = "root ::= " + " ".join(["w"] * 8) + '\nw ::= "' + "x" * 20000 + '" | "y"'
    ir = load_gbnf_grammar(text)
    assert "w" in ir.nonterminals
    g = constrain.compile_grammar(text, vocab)
    assert accepts(g, "y" * 8) and not accepts(g, "y" * 7)


@pytest.mark.parametrize("text", [
    'root ::= [a-z]* "a" [a-z]{16}',
    'root ::= x "a" y "."\nx ::= [ab]*\ny ::= z z\nz ::= [ab]{9}',
    'root ::= ("b" | [ab]* "a" [ab]{16}) "!"',
    'root ::= w\nw ::= [ab]* "a" [ab]{16} | "c"',
])
def test_runs_too_large_for_one_automaton_are_rules(text, vocab):
    """A run whose one automaton needs 2^16 states or more (llama.cpp's matcher
    takes it) was a GrammarTooComplexError; it is built again as rules, the
    same language."""
    g = constrain.compile_grammar(text, vocab)
    assert g.ir.n_terminals <= 6  # classes and literals, not the runs
    agree(text, vocab, n_samples=60)
    oracle, rng = Oracle(text), random.Random(3)
    for _ in range(200):  # long members and near misses, which samples rarely reach
        s = "".join(rng.choice("ab") for _ in range(rng.randint(0, 6))) + "a" + \
            "".join(rng.choice("ab") for _ in range(rng.randint(15, 19)))
        for tail in ("", ".", "!"):
            assert ours_longest(g, s + tail) == oracle.longest_viable(s + tail), s + tail


@pytest.mark.parametrize("names", [("A", "a"), ("a-b", "a_b")])
def test_a_run_too_large_is_found_by_its_rule_not_its_name(names, vocab):
    """Terminal names alone collide (rules "a" and "A" both give A_1): the
    split went to the first rule of that name, a no-op, and the grammar was
    refused at the wrong rule."""
    small, big = names
    text = f'root ::= {small} "-" {big}\n{small} ::= "x"\n{big} ::= [ab]* "a" [ab]{{16}}'
    g = constrain.compile_grammar(text, vocab)
    assert accepts(g, "x-" + "a" * 17) and not accepts(g, "x-" + "b" * 17)


def _split_run_viable(text: str) -> bool:
    """Whether ``text`` starts some string of ``[a-z]*a[a-z]{16}\\.``."""
    if text.endswith("."):
        return re.fullmatch(r"[a-z]*a[a-z]{16}\.", text) is not None
    return re.fullmatch(r"[a-z]*", text) is not None


def test_a_split_run_over_smollm2(smollm2_vocab):
    """Over a real vocabulary a token spans many of the split run's terminals:
    along random walks every allowed token keeps the text viable and a sample
    of refused ones does not; what ends accepting is in the language."""
    g = constrain.compile_grammar('root ::= [a-z]* "a" [a-z]{16} "."', smollm2_vocab)
    rng = random.Random(2)
    tokens, eos = smollm2_vocab.tokens, set(smollm2_vocab.eos_token_ids)
    text_token = smollm2_vocab.grammar_token_list
    for _walk in range(3):
        state, prefix = g.initial_state(), b""
        for _step in range(30):
            allowed = set(g.allowed_token_ids(state).tolist()) - eos
            for t in rng.sample(sorted(allowed), min(25, len(allowed))) + \
                    rng.sample(range(len(smollm2_vocab)), 25):
                if t not in eos and text_token[t]:
                    data = (prefix + tokens[t]).decode("latin-1")
                    assert (t in allowed) == _split_run_viable(data), (prefix, tokens[t])
            if not allowed:
                break
            t = rng.choice(sorted(allowed))
            state, prefix = g.advance(state, t), prefix + tokens[t]
        assert g.is_accepting(state) == (re.fullmatch(
            r"[a-z]*a[a-z]{16}\.", prefix.decode("latin-1")) is not None)


def test_generation_with_the_default_model(default_lm):
    """The json file constrains the model's output to JSON objects."""
    import json

    import search

    g = constrain.compile_grammar(DATA / "json.gbnf", default_lm.vocab)
    result = search.generate(default_lm, "Describe a cat as a JSON object.", constraint=g,
                             max_new_tokens=24)
    if result.accepted:
        assert isinstance(json.loads(result.text), dict)
    else:  # cut off: still a prefix of the language
        assert g.advance_bytes(g.initial_state(), result.text.encode()) is not None
    assert np.all(np.asarray(result.token_ids) >= 0)
