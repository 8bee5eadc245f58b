"""The grammar constraint accepts exactly what lark accepts (``parser="earley",
lexer="dynamic_complete"``), on the peers' test grammars and on ours: listed
strings, sampled derivations, and mutations of both — at the byte level
(``matches``) and token by token with the SmolLM2 tokenizer's encoding, where the
mask must agree with ``advance`` at every step."""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

import numpy as np
import pytest

lark = pytest.importorskip("lark")

from constrain import GrammarError, GrammarTooComplexError, grammar_path  # noqa: E402
from constrain.cfg.grammar import compile_grammar  # noqa: E402
from grammar_sampling import GrammarSampler, mutate  # noqa: E402

DATA = Path(__file__).parent / "data" / "grammar_cases"


def _cases():
    out = []
    for line in (DATA / "xgrammar_lark_accept_reject.jsonl").read_text().splitlines():
        r = json.loads(line)
        out.append((f"xgrammar-{len(out)}", r["grammar"], r["accepted"] + r["rejected"]))
    for line in (DATA / "llguidance_lark_cases.jsonl").read_text().splitlines():
        r = json.loads(line)
        if r["kind"] != "lark_str_test_many":
            continue
        strings = [s.removeprefix("FINAL_REJECT:") for s in r["accept"] + r["reject"]]
        out.append((f"llguidance-{len(out)}", r["grammar"], strings))
    return out


CASES = _cases()


def _lark_parser(grammar: str):
    try:
        return lark.Lark(grammar, parser="earley", lexer="dynamic_complete", start="start")
    except Exception:
        return None


def _lark_accepts(parser, text: str) -> bool:
    try:
        parser.parse(text)
        return True
    except lark.exceptions.LarkError:
        return False


def _token_walk(g, tokenizer, text: str, masks: bool = True) -> bool:
    """Walk the tokenizer's encoding of ``text``; check mask == advance at each step."""
    ids = tokenizer.encode(text, add_special_tokens=False) if text else []
    state = g.initial_state()
    for k, t in enumerate(ids):
        nxt = g.advance(state, t)
        if masks and k < 60:
            row = g.mask_row(state)
            allowed = bool((int(row[t >> 5]) >> (t & 31)) & 1)
            assert allowed == (nxt is not None), (text, t)
        if nxt is None:
            return False
        state = nxt
    eos = g.vocab.eos_token_ids[0]
    row = g.mask_row(state)
    assert bool((int(row[eos >> 5]) >> (eos & 31)) & 1) == g.is_accepting(state)
    return g.is_accepting(state)


@pytest.mark.parametrize("name,grammar,strings", CASES, ids=[c[0] for c in CASES])
def test_agrees_with_lark(name, grammar, strings, smollm2_vocab, smollm2_tokenizer):
    parser = _lark_parser(grammar)
    if parser is None:
        pytest.skip("standard lark cannot load this grammar (llguidance dialect)")
    try:
        g = compile_grammar(grammar, smollm2_vocab)
    except (GrammarError, GrammarTooComplexError) as e:
        if "derives no string" in str(e):  # an empty language: lark accepts nothing either
            assert not any(_lark_accepts(parser, t) for t in strings)
            return
        # a typed refusal is allowed only for what no finite automaton can do, or
        # past a documented size limit
        assert ("lookahead" in str(e).lower() or "lookbehind" in str(e).lower()
                or "cannot compile" in str(e) or "exceeds the limit" in str(e)), e
        return
    rng = random.Random(hash(name) & 0xFFFF)
    sampler = GrammarSampler(g, seed=rng.randrange(1 << 30))
    texts = list(strings)
    for _ in range(15):
        try:
            texts.append(sampler.sentence().decode("utf-8"))
        except (ValueError, IndexError):
            break
    alphabet = "".join(sorted(set("".join(texts)))) or "a"
    texts += [mutate(t, rng, alphabet) for t in texts for _ in range(2)]
    for k, text in enumerate(texts):
        want = _lark_accepts(parser, text)
        assert g.matches(text) == want, (text, want)
        # masks on a fifth of the walks: SQL masks at fresh states are the slow part
        assert _token_walk(g, smollm2_tokenizer, text, masks=k % 5 == 0) == want, (text, want)


@pytest.mark.parametrize("name,n,depth,alphabet", [
    ("json.lark", 40, 8, "{}[],:\"0123456789.eE-+ntrufals \\"),
    ("sql.lark", 12, 6, "abcxyz_,.()*'\" =<>!+-0123456789\n"),
])
def test_shipped_grammars_agree_with_lark(name, n, depth, alphabet, smollm2_vocab, smollm2_tokenizer):
    text = Path(grammar_path(name)).read_text()
    parser = _lark_parser(text)
    g = compile_grammar(grammar_path(name), smollm2_vocab)
    rng = random.Random(7)
    sampler = GrammarSampler(g, seed=7)
    texts = [sampler.sentence(max_depth=depth).decode("utf-8") for _ in range(n)]
    texts += [mutate(t, rng, alphabet) for t in texts for _ in range(2)]
    for k, text in enumerate(texts):
        want = _lark_accepts(parser, text)
        assert g.matches(text) == want, (text, want)
        # masks on a fifth of the walks: SQL masks at fresh states are the slow part
        assert _token_walk(g, smollm2_tokenizer, text, masks=k % 5 == 0) == want, (text, want)


def test_random_walks_are_sentences(smollm2_vocab):
    """Uniform random walks over the allowed tokens end in strings lark accepts."""
    text = Path(grammar_path("json.lark")).read_text()
    parser = _lark_parser(text)
    g = compile_grammar(text, smollm2_vocab)
    rng = np.random.default_rng(0)
    eos = set(smollm2_vocab.eos_token_ids)
    for _ in range(10):
        state, out = g.initial_state(), bytearray()
        for _ in range(60):
            ids = g.allowed_token_ids(state)
            t = int(rng.choice(ids))
            if t in eos:
                break
            out += smollm2_vocab.token_bytes(t)
            state = g.advance(state, t)
            assert state is not None
        else:
            continue
        assert _lark_accepts(parser, out.decode("utf-8")), out


def _refused_by_lark():
    out = []
    for f in ("xgrammar_lark_accept_reject.jsonl", "llguidance_lark_cases.jsonl"):
        for line in (DATA / f).read_text().splitlines():
            r = json.loads(line)
            if _lark_parser(r["grammar"]) is None:
                out.append(r["grammar"])
    return out


def test_bad_grammars_raise_typed_errors(smollm2_vocab):
    """Every grammar lark refuses gets a GrammarError (never a crash), with a line
    and column when the problem is a syntax error."""
    # llguidance's %json items and special-token terminals are Trellis's too
    # (tests/test_lark_extensions.py, tests/test_token_refs.py)
    bad = [text for text in _refused_by_lark()
           if "%json" not in text and not re.search(r"<\[|<\|", text)]
    assert len(bad) > 40
    for text in bad:
        with pytest.raises(GrammarError) as info:
            compile_grammar(text, smollm2_vocab)
        if "Unexpected" in str(info.value) or "Expecting" in str(info.value):
            assert info.value.line is not None, text


def test_error_positions(smollm2_vocab):
    with pytest.raises(GrammarError) as info:
        compile_grammar('start: "a"\n  | "b" ))\n', smollm2_vocab)
    assert info.value.line == 2
    with pytest.raises(GrammarError) as info:
        compile_grammar('start: a b\na: "x"\n', smollm2_vocab)
    assert "'b'" in str(info.value) and info.value.line == 1
    with pytest.raises(GrammarError, match="empty string"):
        compile_grammar('start: A\nA: /x*/\n', smollm2_vocab)
    with pytest.raises(GrammarError, match="not found"):
        compile_grammar("no/such/file.lark", smollm2_vocab)


def test_eval_escaping_matches_lark():
    """Our regex-based reading of a literal's body equals lark's loop, errors too."""
    import random

    from lark.exceptions import GrammarError as LarkGrammarError
    from lark.load_grammar import eval_escaping as lark_eval

    from constrain.frontends.lark import eval_escaping

    rng = random.Random(0)
    alphabet = ['\\', '\\', '\\', 'n', 't', 'x', '4', '1', 'u', 'U', '0', '"', "'", 'a', '/', 'é', '[', ']']
    for _ in range(5000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 12)))
        try:
            want = ("ok", lark_eval(text))
        except (LarkGrammarError, SyntaxError, ValueError):
            want = ("error",)
        try:
            got = ("ok", eval_escaping(text))
        except (LarkGrammarError, SyntaxError, ValueError):
            got = ("error",)
        assert got == want, text
