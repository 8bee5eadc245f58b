"""``search.diffusion`` and ``search.testing.tiny_diffusion``: the synthetic denoiser's
marginals are exact, per-position masks equal enumeration, DINGO decoding never
leaves the language while per-position masking does, the infilling method keeps
grammar outputs valid, and the transformers adapter follows the protocol."""

from __future__ import annotations

import itertools
import json
import random

import numpy as np
import pytest

from constrain import Vocabulary, compile_regex
from search.diffusion.driver import DiffusionResult, dingo_proposal, diffusion_generate, position_masks
from search.lm.diffusion import MaskedDiffusionLM, TransformersDiffusionLM
from search.testing.tiny_diffusion import (
    JSON_NAME_AGE_REGEX,
    SyntheticDiffusionLM,
    tiny_json_model,
    tokenize_greedy,
)


@pytest.fixture(scope="module")
def json_model():
    return tiny_json_model()


@pytest.fixture(scope="module")
def json_regex(json_model):
    return compile_regex(JSON_NAME_AGE_REGEX, json_model.vocab)


# -- the synthetic model -------------------------------------------------------------------


def small_model(eps=0.1):
    vocab = Vocabulary.from_tokens([b"<m>", b"<e>", b"a", b"b"], eos_token_ids=[1],
                                   special_token_ids=[0])
    support = np.array([[2, 3, 1], [3, 3, 2], [2, 2, 2]])
    return SyntheticDiffusionLM(vocab, support, 0, weights=[0.5, 0.3, 0.2], eps=eps)


def test_marginals_are_exact():
    """Every position's log-probabilities equal the conditional of ``p`` given the
    other observed positions, computed by enumerating all sequences."""
    m = small_model()
    ids = [1, 2, 3]
    seqs = list(itertools.product(ids, repeat=3))
    p = {x: np.exp(m.sequence_logprob(x)) for x in seqs}
    assert sum(p.values()) == pytest.approx(1.0)
    for canvas in itertools.product([0] + ids, repeat=3):
        lp = m.logprobs(np.array([canvas]))[0]
        for i in range(3):
            cond = np.zeros(4)
            for x in seqs:
                if all(canvas[j] in (0, x[j]) for j in range(3) if j != i):
                    cond[x[i]] += p[x]
            cond /= cond.sum()
            assert np.allclose(np.exp(lp[i]), cond), (canvas, i)
            assert lp[i, 0] == -np.inf


def test_protocol_and_tokenizer(json_model):
    assert isinstance(json_model, MaskedDiffusionLM)
    v = json_model.vocab
    ids = tokenize_greedy(b'{"name": "Al", "age": 7}', v)
    assert b"".join(v.tokens[i] for i in ids) == b'{"name": "Al", "age": 7}'
    assert len(ids) < len(b'{"name": "Al", "age": 7}')  # multi-character tokens are used
    with pytest.raises(ValueError):
        json_model.logprobs(np.zeros((1, 5), dtype=int))


# -- per-position masks --------------------------------------------------------------------


def test_position_masks_match_enumeration():
    """Completability and each masked position's allowed ids equal enumeration of
    every filling (EOS only as a suffix, and only where the regex accepts)."""
    vocab = Vocabulary.from_tokens([b"<m>", b"<e>", b"a", b"b", b"ab", b"c"], eos_token_ids=[1],
                                   special_token_ids=[0])
    g = compile_regex(r"(ab|c)+", vocab)
    rng = random.Random(5)
    for _ in range(300):
        L = rng.randint(1, 5)
        gen = [rng.choice([0, 0, 1, 2, 3, 4, 5]) for _ in range(L)]
        masked = [i for i in range(L) if gen[i] == 0]
        ok, masks = position_masks(g, gen, 0)
        valid_fillings = []
        for fill in itertools.product([1, 2, 3, 4, 5], repeat=len(masked)):
            x = list(gen)
            for i, t in zip(masked, fill):
                x[i] = t
            end = next((k for k, t in enumerate(x) if t == 1), L)
            if any(t != 1 for t in x[end:]):
                continue
            text = b"".join(vocab.tokens[t] for t in x[:end])
            if g.matches(text) and all(t != 1 for t in x[:end]):
                valid_fillings.append(x)
        assert ok == bool(valid_fillings), gen
        for i in masked:
            want = sorted({x[i] for x in valid_fillings})
            assert masks[i].tolist() == want, (gen, i)


# -- the driver ---------------------------------------------------------------------------


def test_dingo_never_leaves_the_language_naive_does(json_model, json_regex):
    """Same seeds, same noise: DINGO's outputs are all valid and its canvas never
    becomes uncompletable; per-position masking fails on some seeds."""
    naive_bad = 0
    for seed in range(40):
        for remasking in ("low_confidence", "random"):
            kw = dict(gen_length=24, block_length=8, steps=12, temperature=1.0, seed=seed,
                      remasking=remasking)
            d = diffusion_generate(json_model, constraint=json_regex, method="dingo", **kw)
            assert d.valid and d.stuck_step is None, (seed, d.text)
            assert json_regex.matches(d.text)
            n = diffusion_generate(json_model, constraint=json_regex, method="naive", **kw)
            naive_bad += not n.valid
            assert n.valid == (n.stuck_step is None)
    assert naive_bad >= 5


def test_dingo_step_is_the_best_completable_block(json_model, json_regex):
    """On the same canvas and scores, the DINGO block scores at least as much as
    any completable per-position proposal (equal when that one is completable)."""
    rng = np.random.default_rng(0)
    mask = json_model.mask_token_id
    for seed in range(15):
        r = diffusion_generate(json_model, constraint=json_regex, method="dingo", gen_length=24,
                               block_length=8, steps=12, temperature=1.0, seed=seed)
        gen = [mask] * 24
        for kept in r.history[:6]:
            lp = json_model.logprobs(np.array([gen]))[0]
            scores = lp + rng.gumbel(size=lp.shape)
            s = (kept[0][0] // 8) * 8
            masked = [i for i in range(s, s + 8) if gen[i] == mask]
            _, masks = position_masks(json_regex, gen, mask, masked)
            naive = {i: int(masks[i][np.argmax(scores[i, masks[i]])]) for i in masked}
            din = dingo_proposal(json_regex, gen, scores, s, s + 8, mask,
                               np.array(json_regex.vocab.eos_token_ids), json_model.vocab_size)
            full_d, full_n = list(gen), list(gen)
            for i in masked:
                full_d[i], full_n[i] = din[i], naive[i]
            assert position_masks(json_regex, full_d, mask, [])[0]
            sd = sum(scores[i, din[i]] for i in masked)
            sn = sum(scores[i, naive[i]] for i in masked)
            if position_masks(json_regex, full_n, mask, [])[0]:
                assert sn == pytest.approx(sd)
            else:
                assert sn >= sd - 1e-9
            for i, t in kept:
                gen[i] = t


def test_schedule_and_blocks(json_model, json_regex):
    """Blocks are decoded left to right, each step keeps its share of the block,
    greedy decoding is deterministic."""
    r = diffusion_generate(json_model, constraint=json_regex, gen_length=24, block_length=8, steps=12)
    assert isinstance(r, DiffusionResult) and r.steps == 12 and r.calls == 12
    assert [len(k) for k in r.history] == [2] * 12
    blocks = [max(i for i, _ in k) // 8 for k in r.history]
    assert blocks == sorted(blocks)
    assert r.valid and len(r.tokens) == 24
    again = diffusion_generate(json_model, constraint=json_regex, gen_length=24, block_length=8, steps=12)
    assert again.tokens == r.tokens
    with pytest.raises(ValueError):
        diffusion_generate(json_model, constraint=json_regex, gen_length=24, block_length=7)
    with pytest.raises(TypeError):
        diffusion_generate(json_model, constraint="start: \"a\"", gen_length=24, method="dingo")
    with pytest.raises(TypeError):
        diffusion_generate(json_model, constraint=json_regex, gen_length=24, method="infill")


def test_result_prompt_and_the_old_call_form(json_model, json_regex):
    """The result is a search result (``token_ids``: the ids before the first EOS,
    ``text`` their bytes); the prompt is the second argument; the old form, the
    constraint second and the prompt as ``prompt=``, still works with a
    DeprecationWarning."""
    import search

    kw = dict(gen_length=24, block_length=8, steps=12)
    r = diffusion_generate(json_model, constraint=json_regex, **kw)
    assert isinstance(r, search.SearchResult)
    eos = set(json_model.vocab.eos_token_ids)
    assert r.token_ids == tuple(r.tokens[: next(i for i, t in enumerate(r.tokens + [1]) if t in eos)])
    assert r.text == b"".join(json_model.vocab.tokens[t] for t in r.token_ids)
    prompt = [int(t) for t in json_model.support[0][:8]]  # the model's canvases are 24 long
    short = dict(gen_length=16, block_length=8, steps=8)
    new = diffusion_generate(json_model, prompt, constraint=json_regex, **short)
    assert len(new.tokens) == 16
    assert new.tokens == diffusion_generate(json_model, prompt=prompt, constraint=json_regex, **short).tokens
    with pytest.warns(DeprecationWarning, match="pass constraint by keyword"):
        assert diffusion_generate(json_model, json_regex, prompt=prompt, **short).tokens == new.tokens
    with pytest.warns(DeprecationWarning, match="pass constraint by keyword"):
        assert diffusion_generate(json_model, None, **kw).tokens == diffusion_generate(json_model, **kw).tokens
    with pytest.warns(DeprecationWarning, match="write lm= for model="):
        assert diffusion_generate(model=json_model, constraint=json_regex, **kw).tokens == r.tokens
    # this model takes no text prompt: a text second argument is a prompt it
    # refuses, unless it is Lark text in the old form's place (it was read as a
    # grammar whatever it said: a Lark syntax error, or "multiple values")
    for call in (lambda: diffusion_generate(json_model, "a text", constraint=json_regex, **kw),
                 lambda: diffusion_generate(json_model, "Write a JSON object:", **kw)):
        with pytest.raises(TypeError, match="no prompt_ids"):
            call()
    with pytest.warns(DeprecationWarning, match="pass constraint by keyword"):
        r2 = diffusion_generate(json_model, 'start: "{" /[^}]+/ "}"', **kw)
    assert r2.valid


def test_test_helpers_left_the_top_level():
    """``search.tiny_json_model`` / ``search.SyntheticDiffusionLM`` still resolve,
    with a DeprecationWarning that names their module."""
    import search

    for name in ("tiny_json_model", "SyntheticDiffusionLM"):
        with pytest.warns(DeprecationWarning, match="search.testing.tiny_diffusion"):
            assert getattr(search, name) is globals()[name]


# -- grammars: the infilling method ----------------------------------------------------------

ARITH = r"""
?start: sum
?sum: product | sum "+" product
?product: atom | product "*" atom
?atom: NUMBER | "(" sum ")"
NUMBER: /[0-9]+/
"""


@pytest.fixture(scope="module")
def arith_model():
    pieces = [b"1", b"2", b"+", b"*", b"(", b")", b"12", b"+("]
    vocab = Vocabulary.from_tokens([b"<mask>", b"<eos>"] + pieces, eos_token_ids=[1],
                                   special_token_ids=[0])
    rng = random.Random(0)

    def expr(d=0):
        r = rng.random()
        if d > 2 or r < 0.3:
            return rng.choice(["1", "2", "12", "21"])
        if r < 0.45:
            return "(" + expr(d + 1) + ")"
        return expr(d + 1) + rng.choice("+*") + expr(d + 1)

    rows = []
    while len(rows) < 200:
        ids = tokenize_greedy(expr().encode(), vocab)
        if 5 <= len(ids) <= 12:
            rows.append(ids + [1] * (12 - len(ids)))
    return SyntheticDiffusionLM(vocab, np.array(rows), 0, eps=0.05)


def test_infill_method_keeps_grammar_outputs_valid(arith_model):
    """With the infilling check every output parses (Lark), unconstrained
    decoding of the same seeds does not always."""
    import lark

    parser = lark.Lark(ARITH, parser="earley", lexer="dynamic_complete")
    bad_none = 0
    for seed in range(12):
        kw = dict(gen_length=12, block_length=4, steps=6, temperature=1.0, seed=seed)
        r = diffusion_generate(arith_model, constraint=ARITH, method="infill", **kw)
        assert r.valid and r.stuck_step is None, (seed, r.text)
        parser.parse(r.text.decode())
        n = diffusion_generate(arith_model, constraint=ARITH, method="none", **kw)
        bad_none += not n.valid
    assert bad_none >= 1


def test_infill_json_schema_grammar(json_model):
    """The colleague's JSON Schema → Lark compiler, when present."""
    js = pytest.importorskip("constrain.frontends.json_schema.compiler")
    if not hasattr(js, "json_schema_to_lark"):
        pytest.skip("constrain.frontends.json_schema.compiler.json_schema_to_lark is not there yet")
    schema = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 8},
                                               "age": {"type": "integer", "minimum": 0,
                                                       "maximum": 120}},
              "required": ["name", "age"], "additionalProperties": False}
    grammar = js.json_schema_to_lark(schema)
    # the model wants spaces the compact grammar forbids: hundreds of resamples, so
    # the cheaper check (exact only for the last 8 masked positions) keeps it quick
    r = diffusion_generate(json_model, constraint=grammar, gen_length=24, block_length=8, steps=12,
                           method="infill", seed=0, trailing_exact=8)
    assert r.valid and json_model.mask_token_id not in r.tokens
    obj = json.loads(r.text)
    assert set(obj) == {"name", "age"} and len(obj["name"]) <= 8 and 0 <= obj["age"] <= 120


# -- the transformers adapter ----------------------------------------------------------------


def test_transformers_adapter(json_model, json_regex):
    """A torch module with the LLaDA interface (``model(ids).logits``): the adapter
    returns log-softmaxed columns of the requested vocabulary, shifts for Dream,
    and drives DINGO decoding to a valid output."""
    torch = pytest.importorskip("torch")

    class Out:
        def __init__(self, logits):
            self.logits = logits

    class Fake(torch.nn.Module):
        """Logits from the synthetic model, plus 5 padding columns."""

        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.zeros(1))

        def forward(self, ids):
            lp = json_model.logprobs(ids.numpy())
            lp = np.where(np.isfinite(lp), lp, -1e9)
            pad = np.full(lp.shape[:2] + (5,), -1e9)
            return Out(torch.tensor(np.concatenate([lp, pad], axis=2)))

    lm = TransformersDiffusionLM(Fake(), mask_token_id=0, vocab_size=json_model.vocab_size)
    canvas = np.zeros((1, 24), dtype=int)
    got = lm.logprobs(canvas)
    want = json_model.logprobs(canvas)
    assert got.shape == want.shape and lm.calls == 1
    assert np.allclose(np.exp(got), np.exp(want), atol=1e-6)
    shifted = TransformersDiffusionLM(Fake(), 0, json_model.vocab_size, shift=True)
    s = shifted.logprobs(canvas)
    assert np.allclose(s[0, 1:], got[0, :-1]) and np.allclose(s[0, 0], got[0, 0])
    wide = TransformersDiffusionLM(Fake(), 0, json_model.vocab_size + 10).logprobs(canvas)
    assert wide.shape[2] == json_model.vocab_size + 10 and np.isneginf(wide[0, 0, -3:]).all()
    r = diffusion_generate(lm, constraint=json_regex, gen_length=24, block_length=8, steps=12,
                           temperature=1.0, seed=3)
    assert r.valid
