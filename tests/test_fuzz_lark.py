"""Fuzzing the Lark front end (hypothesis; ``TRELLIS_FUZZ=long`` draws
:data:`fuzz_settings.LONG_FACTOR` times as many examples):

* random small grammars (literals, regexes with lazy quantifiers and
  alternations, ``common.lark`` imports, groups, ``[]``, ``?*+``, ``~n..m``,
  ``%ignore`` of blanks and comments) against lark's Earley parser with
  ``lexer="dynamic_complete"`` on random strings, sampled sentences and their
  mutations; token by token, the mask equals the tokens ``advance`` takes and no
  allowed token leads to a dead end;
* malformed grammars (the peers' test grammars, mutated) raise nothing but
  ``ConstraintError``, and every ``GrammarError`` names a line and column;
* no case takes more than a second.

Counts print at the end of the module (``pytest -s``) and go to
``$TRELLIS_FUZZ_REPORT``."""

from __future__ import annotations

import gc
import json
import random
import signal
from pathlib import Path

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

lark = pytest.importorskip("lark")

from constrain import ConstraintError, GrammarError, GrammarTooComplexError, Vocabulary  # noqa: E402
from constrain import compile_grammar  # noqa: E402
from fuzz_settings import FuzzLog, case_clock, fuzz  # noqa: E402
from grammar_sampling import GrammarSampler, mutate  # noqa: E402

LOG = FuzzLog("fuzz_lark")
CASE_SECONDS = 1.0
BUDGET = CASE_SECONDS / 2  # the compile's time budget: the rest is the case's checks
_PIECES = [b"ab", b"a,", b'"a', b"# ", b" (", b"12"]
VOCAB = Vocabulary.from_tokens([bytes([b]) for b in range(256)] + _PIECES + [b"</s>"],
                               [256 + len(_PIECES)])
EOS = VOCAB.eos_token_ids[0]
_BY_LENGTH = sorted(range(len(VOCAB.tokens) - 1), key=lambda t: -len(VOCAB.tokens[t]))


@pytest.fixture(scope="module", autouse=True)
def _report():
    # kernels compiled, lark's loader and its error messages built, before any
    # case is timed
    compile_grammar('%import common.ESCAPED_STRING\nstart: ESCAPED_STRING "a"+\n%ignore " "\n',
                    VOCAB)
    for bad in ('start: "a" | ~ "b"\n', "start: x\nx: (\n", 'start: "a"\n%ignore\n'):
        with pytest.raises(GrammarError):
            compile_grammar(bad, VOCAB)
    yield
    LOG.flush()


# -- random grammars ---------------------------------------------------------------------

_TERMINALS = ['"a"', '"b"', '"ab"', '","', '"("', '")"', '"a"i', "/a+/", "/[ab]*c/", "/a|ab/",
              "/b+?/", "/(?:ab)?a/", "/c{1,2}/", "/[a-c]/i", "/a(?<=a)b?/", "INT", "WORD",
              "ESCAPED_STRING", "NUM"]
_IMPORTS = {"INT": "%import common.INT", "WORD": "%import common.WORD",
            "ESCAPED_STRING": "%import common.ESCAPED_STRING",
            "NUM": "%import common.SIGNED_NUMBER -> NUM"}
_IGNORES = ["", '%ignore " "', 'COMMENT: /#[^\\n]*/\n%ignore COMMENT',
            "%import common.WS_INLINE\n%ignore WS_INLINE",
            '%import common.WS\n%ignore WS\nCOMMENT: /#[^\\n]*/\n%ignore COMMENT']
_ALPHABET = 'abc,()1 #"\\\n.-'


def _expansions(inner):
    alt = st.lists(inner, min_size=1, max_size=3).map(" ".join)
    return st.lists(alt, min_size=1, max_size=3).map(" | ".join)


def _items():
    atom = st.one_of(st.sampled_from(_TERMINALS), st.just("x"))
    op = st.sampled_from(["", "", "?", "*", "+", "~2", "~0..2"])
    base = st.tuples(atom, op).map("".join)
    return st.recursive(base, lambda inner: st.one_of(
        st.tuples(_expansions(inner), st.sampled_from(["", "?", "*", "~1..2"])).map(
            lambda p: f"({p[0]}){p[1]}"),
        _expansions(inner).map(lambda e: f"[{e}]")), max_leaves=6)


@st.composite
def grammars(draw):
    start = draw(_expansions(_items()))
    x = draw(_expansions(st.sampled_from(_TERMINALS)))
    text = f"start: {start}\nx: {x}\n"
    for name, imp in _IMPORTS.items():
        if name in text:
            text += imp + "\n"
    return text + draw(st.sampled_from(_IGNORES)) + "\n"


class _Timeout(Exception):
    pass


def _lark_accepts(parser, text: str, seconds: float = 0.5):
    """lark's answer, or ``None`` past ``seconds`` (Earley on an ambiguous
    grammar can take long)."""
    armed = True

    def on_alarm(signum, frame):
        if armed:
            raise _Timeout

    old = signal.signal(signal.SIGALRM, on_alarm)
    # no collection during the parse: an alarm landing in a collector callback
    # has its exception swallowed there, and pytest's hook for such exceptions,
    # hit by the next alarm, fails the test
    collecting = gc.isenabled()
    gc.disable()
    # repeating: an alarm swallowed all the same (a __del__) and the next one
    # ends the parse
    signal.setitimer(signal.ITIMER_REAL, seconds, 0.05)
    try:
        parser.parse(text)
        return True
    except lark.exceptions.LarkError:
        return False
    except _Timeout:
        return None
    finally:
        armed = False
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
        if collecting:
            gc.enable()


def _tokens(data: bytes) -> list[int]:
    out, i = [], 0
    while i < len(data):
        for t in _BY_LENGTH:
            tok = VOCAB.tokens[t]
            if data.startswith(tok, i):
                out.append(t)
                i += len(tok)
                break
    return out


#: a cap on chart columns no fuzzed grammar reaches on these short strings
_UNCAPPED = 1 << 20


def _walk(g, text: str, rng: random.Random) -> None:
    """Token by token: the mask is what ``advance`` takes, and no allowed token
    (of a sample of eight per step: each costs a mask) leads to a state with
    nothing allowed."""
    state = g.initial_state()
    for tok in _tokens(text.encode("utf-8")) + [None]:
        allowed = g.allowed_token_ids(state).tolist()
        takes = [t for t in range(len(VOCAB)) if t != EOS and g.advance(state, t) is not None]
        if g.is_accepting(state):
            takes.append(EOS)
        if sorted(allowed) != sorted(takes):
            LOG.add("lark", "mask != advance")
        assert sorted(allowed) == sorted(takes), (text, tok)
        for t in rng.sample(allowed, min(8, len(allowed))):
            if t != EOS and not len(g.allowed_token_ids(g.advance(state, t))):
                LOG.add("lark", "unsound mask")
                raise AssertionError(("dead end after", text, t))
        if tok is None:
            return
        state = g.advance(state, tok)
        if state is None:
            return


@fuzz(30)
@given(grammars(), st.integers(0, 1 << 30))
def test_random_grammars_agree_with_lark(grammar, seed):
    try:
        parser = lark.Lark(grammar, parser="earley", lexer="dynamic_complete")
    except lark.exceptions.LarkError:
        LOG.add("lark", "lark refuses")
        assume(False)
    t0 = case_clock()
    try:
        g = compile_grammar(grammar, VOCAB, time_budget=BUDGET)
    except (GrammarError, GrammarTooComplexError) as e:
        LOG.add("lark", f"refused (typed): {getattr(e, 'msg', str(e))[:50]}")
        # the documented refusals (a budget too), a grammar error naming its place
        assert not isinstance(e, GrammarError) or e.line is not None, e
        assume(False)
    compile_seconds = case_clock() - t0
    rng = random.Random(seed)
    texts = ["".join(rng.choice(_ALPHABET) for _ in range(rng.randint(0, 8)))
             for _ in range(25)]
    sampler = GrammarSampler(g, seed=seed)
    for _ in range(6):
        try:
            s = sampler.sentence(max_depth=6).decode("utf-8")
        except (ValueError, IndexError, UnicodeDecodeError):
            break
        texts += [s, mutate(s, rng, _ALPHABET)]
    checked = 0
    for s in texts:
        expected = _lark_accepts(parser, s)
        if expected is None:
            continue
        checked += 1
        got = g.matches(s)
        if got != expected and not got and g.parser.truncated_columns:
            # the documented incompleteness of the max_items cap (never
            # unsound: it only refuses), if without the cap it agrees (or the
            # uncapped grammar exceeds the budget: a documented refusal too)
            try:
                uncapped = compile_grammar(grammar, VOCAB, time_budget=BUDGET,
                                           max_items=_UNCAPPED).matches(s)
            except GrammarTooComplexError:
                uncapped = expected
            if uncapped == expected:
                LOG.add("lark strings", "refused past max_items (documented)")
                continue
        if got != expected:
            LOG.add("lark", "disagrees with lark")
        assert got == expected, (grammar, s)
    for s in texts[-2:]:
        _walk(g, s, rng)
    assert compile_seconds <= CASE_SECONDS, (grammar, compile_seconds)
    LOG.add("lark", "agrees with lark")
    LOG.add("lark strings", "agree with lark", checked)


# -- malformed grammars --------------------------------------------------------------------

_DATA = Path(__file__).parent / "data" / "grammar_cases"
_BASES = [json.loads(line)["grammar"] for name in ("xgrammar_lark_accept_reject.jsonl",
                                                    "llguidance_lark_cases.jsonl")
          for line in (_DATA / name).read_text().splitlines()]
_BASES.append((Path(__file__).parent.parent / "grammars" / "json.lark").read_text())
_INSERTS = ["|", "(", ")", "[", "]", "~", "..", "3", "0..2", "%ignore ", "%import common.", "WS",
            "/", "/a+/", '"', '"x"', "->", "?", "!", "_", "{", "}", ".2", ":", "\n", " ", "*",
            "+", "start", "A", "%declare ", "%override ", "%extend ", "\\", "(?<=a)", "(?=b)",
            "$", "^", "\\b", '""', "//", "#", "a", "=", ",", "~0..30", "(" * 60, "[" * 30]


@fuzz(150)
@given(st.sampled_from(_BASES), st.lists(st.tuples(st.integers(0, 10 ** 6),
                                                   st.sampled_from(_INSERTS), st.booleans()),
                                         min_size=1, max_size=3))
def test_malformed_grammars_raise_only_typed_errors_with_a_place(base, edits):
    text = base
    for pos, piece, insert in edits:
        i = pos % (len(text) + 1)
        text = text[:i] + piece + text[i:] if insert else text[:i] + text[i + 1:]
    t0 = case_clock()
    try:
        compile_grammar(text, VOCAB, time_budget=BUDGET)
        LOG.add("lark (malformed)", "compiled")
    except GrammarError as e:
        if e.line is None:
            LOG.add("lark (malformed)", "GrammarError without a place")
        assert e.line is not None and e.column is not None, (text, str(e))
        LOG.add("lark (malformed)", "refused (typed)")
    except ConstraintError:
        LOG.add("lark (malformed)", "refused (typed)")
    except Exception:
        LOG.add("lark (malformed)", "non-ConstraintError exception")
        raise
    elapsed = case_clock() - t0
    if elapsed > CASE_SECONDS:
        LOG.add("lark (malformed)", "over 1 s")
    assert elapsed <= CASE_SECONDS, (text, elapsed)
