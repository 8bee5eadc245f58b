"""PRM adapters (``search.reasoning.prm``): the step-tag HF PRM on tiny random transformers
models built from a config (nothing downloaded), the LM as its own judge (a tiny
CallableLM, and one call of the default model), callables, and the arithmetic checker.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from search.lm.protocol import CallableLM
from search.reasoning.prm import ArithmeticCheckerPRM, CallablePRM, HFStepPRM, LMJudgePRM, check_arithmetic
from search.reasoning.steps import aggregate_scores, prm_score_last

# -- arithmetic checker -------------------------------------------------------------------

CASES = [
    ("12 * 3 = 36", (1, 0)),
    ("12 * 3 = 35", (0, 1)),
    ("<<12*3=36>>36 apples", (1, 0)),
    ("<<12*3=37>>37 apples", (0, 1)),
    ("6 inches/remora * 2 remoras = <<6*2=12>>12 inches.", (1, 0)),
    ("10/3 = 3.33", (1, 0)),  # written rounded to its decimals
    ("10/3 = 3.4", (0, 1)),
    ("$1,200 + $300 = $1,500", (1, 0)),
    ("20% * 50 = 10", (1, 0)),
    ("3 x 4 = 12 and 3 × 5 = 15 and 8 ÷ 2 = 4", (3, 0)),
    ("(2 + 3) * 4 = 20", (1, 0)),
    ("2 + 3 * 4 = 20", (0, 1)),  # precedence
    ("2+2=4 and 3+3=7", (1, 1)),
    ("1.5 + 1.5 = 3.0", (1, 0)),
    ("5 - 8 = -3", (1, 0)),
    ("She has 12 apples and x = 5, 5 = 5.", (0, 0)),  # no operator: not a claim
    ("In 2020 there were 3 cats.", (0, 0)),
    ("1/0 = 3", (0, 0)),  # does not evaluate: ignored
]


@pytest.mark.parametrize("text,expected", CASES)
def test_check_arithmetic(text, expected):
    assert check_arithmetic(text) == expected


def test_check_arithmetic_on_degenerate_output():
    """A model that repeats ``1+`` wrote claims whose scan was quadratic (16,000
    terms: 28 s) and whose evaluation recursed past Python's limit (1,000
    terms: RecursionError out of the PRM, ending the search). A left side of
    more than MAX_CLAIM_CHARS is no claim; the claims around it still count."""
    from search.reasoning.prm import MAX_CLAIM_CHARS

    chain = "+".join(["1"] * 16_000)
    assert check_arithmetic(chain + " is a lot") == (0, 0)
    assert check_arithmetic("2 + 2 = 4, " + chain + " = 16000, 3 * 3 = 10") == (1, 1)
    assert check_arithmetic("<<" + "+".join(["1"] * 5000) + "=5000>>") == (0, 0)
    short = "+".join(["1"] * (MAX_CLAIM_CHARS // 2 - 1))
    assert check_arithmetic(short + f" = {MAX_CLAIM_CHARS // 2 - 1}") == (1, 0)


def test_arithmetic_prm_is_cumulative():
    prm = ArithmeticCheckerPRM(wrong_score=0.05, neutral_score=0.5)
    steps = ["Let's think.", "4 * 5 = 20", "20 + 1 = 22", "So the answer is 22.", "#### 22"]
    assert prm.score("q", steps) == [0.5, 1.0, 0.05, 0.05, 0.05]
    assert prm.score("q", ["<<2*3=6>>6", "ok"]) == [1.0, 1.0]
    assert prm.score_last("q", steps) == 0.05 and prm.score_last("q", []) == 1.0
    assert prm.calls == 3  # scoring no steps calls nothing
    with pytest.raises(ValueError):
        ArithmeticCheckerPRM(wrong_score=1.5)


# -- callables and helpers -------------------------------------------------------------------


def test_callable_prm():
    prm = CallablePRM(lambda p, s: len(s) / 2)  # 0.5, 1.0, 1.5 -> clipped
    assert prm.score("q", ["a", "b", "c"]) == [0.5, 1.0, 1.0]
    assert prm.score_last("q", ["a"]) == 0.5 and prm.calls == 2
    whole = CallablePRM(lambda p, s: [0.1] * len(s), per_prefix=False)
    assert whole.score("q", ["a", "b"]) == [0.1, 0.1]
    with pytest.raises(ValueError):
        CallablePRM(lambda p, s: [0.1], per_prefix=False).score("q", ["a", "b"])
    with pytest.raises(ValueError):
        CallablePRM(lambda p, s: math.nan).score("q", ["a"])
    assert aggregate_scores([0.9, 0.2, 0.8], "min") == 0.2
    assert math.isclose(aggregate_scores([0.5, 0.5], "prod"), 0.25)
    assert prm_score_last(CallablePRM(lambda p, s: 0.3), "q", ["a", "b"], "last") == 0.3


# -- Hugging Face step-tag PRM on tiny random models --------------------------------------

WORDS = ["[UNK]", "ки", "+", "-", "=", "What", "is", "2", "3", "5", "6", "?", "So", "answer", "####", "\n"]


@pytest.fixture(scope="module")
def tiny_hf():
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from tokenizers import Tokenizer, models, pre_tokenizers

    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(WORDS)}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer = transformers.PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]")
    cfg = dict(vocab_size=len(WORDS), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
               num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128)
    torch.manual_seed(0)
    causal = transformers.LlamaForCausalLM(transformers.LlamaConfig(**cfg)).eval()
    classifier = transformers.LlamaForTokenClassification(transformers.LlamaConfig(num_labels=2, **cfg)).eval()
    return tokenizer, causal, classifier


STEPS = ["2 + 3 = 5", "5 + 1 = 6", "So answer is 6 ки", "#### 6"]


def test_hf_prm_matches_a_direct_computation(tiny_hf):
    import torch

    tokenizer, causal, _ = tiny_hf
    prm = HFStepPRM(causal, tokenizer, step_tag="ки", good_token="+", bad_token="-")
    scores = prm.score("What is 2 + 3 ?", STEPS)
    assert len(scores) == 4 and all(0 <= s <= 1 for s in scores) and prm.calls == 1
    # the tag inside step 3 was removed: exactly one tag per step
    text = prm.build_input("What is 2 + 3 ?", STEPS)
    assert text.count("ки") == 4
    ids = tokenizer.encode(text, add_special_tokens=False)
    with torch.no_grad():
        logits = causal(input_ids=torch.tensor([ids])).logits[0]
    tag, good, bad = (WORDS.index(w) for w in ("ки", "+", "-"))
    want = [float(torch.softmax(logits[i, [good, bad]], -1)[0]) for i, t in enumerate(ids) if t == tag]
    np.testing.assert_allclose(scores, want, rtol=1e-5)
    # causal: a prefix's scores are the first scores of the whole
    np.testing.assert_allclose(prm.score("What is 2 + 3 ?", STEPS[:2]), scores[:2], rtol=1e-4)
    assert math.isclose(prm.score_last("What is 2 + 3 ?", STEPS), scores[-1], rel_tol=1e-5)
    # a prompt holding the tag's text ("ки" is a Russian syllable) keeps it, and
    # its tags are not read as steps' (every call raised "found 5 step tags")
    quoted = prm.score("What is 2 + 3 ? ки", STEPS)
    ids = tokenizer.encode(prm.build_input("What is 2 + 3 ? ки", STEPS), add_special_tokens=False)
    with torch.no_grad():
        logits = causal(input_ids=torch.tensor([ids])).logits[0]
    at = [i for i, t in enumerate(ids) if t == tag][1:]
    want = [float(torch.softmax(logits[i, [good, bad]], -1)[0]) for i in at]
    np.testing.assert_allclose(quoted, want, rtol=1e-5)
    assert len(quoted) == 4


def test_hf_prm_reads_the_positive_label(tiny_hf):
    import copy

    import torch

    tokenizer, causal, classifier = tiny_hf
    model = copy.deepcopy(causal)
    good, bad = WORDS.index("+"), WORDS.index("-")
    with torch.no_grad():
        model.lm_head.weight[bad] = model.lm_head.weight[good]
    np.testing.assert_allclose(HFStepPRM(model, tokenizer).score("q", STEPS), 0.5, atol=1e-6)
    # classification head: softmax over the two labels, the positive one (index 1 by default)
    cls = HFStepPRM(classifier, tokenizer)
    s1 = cls.score("What is 2 + 3 ?", STEPS)
    s0 = HFStepPRM(classifier, tokenizer, positive_label=0).score("What is 2 + 3 ?", STEPS)
    np.testing.assert_allclose(np.array(s1) + np.array(s0), 1.0, rtol=1e-6)
    with pytest.raises(ValueError):
        HFStepPRM(causal, tokenizer, step_tag="2 +")  # two tokens


# -- the LM as its own judge --------------------------------------------------------------

CHARS = list("YNyn0123456789+=? abcdefghijklmnopqrstuvwxyzPS:\n.") + ["<eos>"]


def judge_lm():
    """Next-token law after a verification prompt: "N" likely when the prompt holds a
    wrong-looking "7", else "Y"."""
    y, n = CHARS.index("Y"), CHARS.index("N")

    def row(prefix):
        p = np.full(len(CHARS), 0.01)
        if CHARS.index("7") in prefix:
            p[n], p[y] = 0.6, 0.2
        else:
            p[y], p[n] = 0.7, 0.1
        return np.log(p / p.sum())

    return CallableLM(row, vocab_size=len(CHARS), eos_token_id=len(CHARS) - 1)


def test_lm_judge_on_a_tiny_model():
    lm = judge_lm()
    enc = lambda s: [CHARS.index(c) for c in s]  # noqa: E731
    prm = LMJudgePRM(lm, encode=enc, yes_words=("Yes",), no_words=("No",),
                     template="P: {prompt}\nS: {steps}\nok?")
    scores = prm.score("1+1=?", ["1+1=2", "2+5=7", "so 2"])
    np.testing.assert_allclose(scores, [0.7 / 0.8, 0.2 / 0.8, 0.2 / 0.8])
    assert lm.calls == 3 and prm.calls == 1
    assert math.isclose(prm.score_last("1+1=?", ["1+1=2"]), 0.7 / 0.8) and lm.calls == 4
    with pytest.raises(ValueError):  # " Yes" and " No" share their first (space) token
        LMJudgePRM(lm, encode=enc)


def test_lm_judge_default_model(default_lm):
    prm = LMJudgePRM(default_lm)
    calls0 = default_lm.calls
    scores = prm.score("What is 2 + 3?", ["2 + 3 = 5", "#### 5"])
    assert len(scores) == 2 and all(0.0 <= s <= 1.0 for s in scores)
    assert default_lm.calls - calls0 == 2


# -- the batched KV-cache sampling path (a tiny random model, same fixture) ------------------


def test_batched_sampling_path_matches_logprobs(tiny_hf):
    """The step sampler's batched path over a ``TransformersLM`` (cache repeated over
    the streams, rows selected as streams end) gives the rows ``logprobs`` gives."""
    from search.lm.protocol import LogprobStreams, as_lm, open_streams
    from search.lm.transformers import KVStreams, TransformersLM

    tokenizer, causal, _ = tiny_hf
    tokenizer.eos_token = "####"
    tlm = TransformersLM(causal, tokenizer, eos_token_ids=[WORDS.index("####")])
    head = (5, 6, 7, 2, 8)
    streams, rows = open_streams(as_lm(tlm), head, 3)  # the adapter hands over to the model
    assert isinstance(streams, KVStreams)
    want = tlm.logprobs([head])
    np.testing.assert_allclose(rows, np.repeat(want, 3, axis=0), atol=1e-4)
    got = streams.advance([0, 1, 2], [9, 10, 11])
    np.testing.assert_allclose(got, tlm.logprobs([head + (t,) for t in (9, 10, 11)]), atol=1e-4)
    got = streams.advance([0, 2], [4, 12])  # stream 1 ended
    np.testing.assert_allclose(got, tlm.logprobs([head + (9, 4), head + (11, 12)]), atol=1e-4)
    assert tlm.calls == 1 + 3 + 2 + (1 + 3 + 2)  # rows scored by the streams, then by logprobs
    # any other model of the protocol: one logprobs batch per position
    plain, rows = open_streams(judge_lm(), (1, 2), 2)
    assert isinstance(plain, LogprobStreams) and rows.shape == (2, len(CHARS))
    assert plain.advance([1], [3]).shape == (1, len(CHARS)) and plain.prefixes == [(1, 2), (1, 2, 3)]
