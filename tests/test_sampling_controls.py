"""top-k, top-p, min-p, repetition penalty and stop strings in search.generate,
search.stream and the CLI."""

from __future__ import annotations

import pytest
import torch

import search
from search.autoregressive.logits_controls import SamplingControls, StopStrings


def kept(controls, logits, temperature=1.0):
    probs = controls.probabilities(torch.tensor(logits, dtype=torch.float32), temperature)
    assert abs(float(probs.sum()) - 1) < 1e-5
    return [i for i, p in enumerate(probs.tolist()) if p > 0]


def test_filters_keep_what_they_say():
    logits = [4.0, 3.0, 2.0, 1.0, float("-inf")]  # the last one masked by a constraint
    assert kept(SamplingControls(), logits) == [0, 1, 2, 3]
    assert kept(SamplingControls(top_k=2), logits) == [0, 1]
    assert kept(SamplingControls(top_k=10), logits) == [0, 1, 2, 3]
    p = torch.softmax(torch.tensor(logits[:4]), 0).tolist()  # .64 .24 .09 .03
    assert kept(SamplingControls(top_p=p[0] - 0.01), logits) == [0]
    assert kept(SamplingControls(top_p=p[0] + 0.01), logits) == [0, 1]
    assert kept(SamplingControls(top_p=1.0), logits) == [0, 1, 2, 3]
    assert kept(SamplingControls(min_p=0.3), logits) == [0, 1]
    assert kept(SamplingControls(top_k=3, min_p=0.3, top_p=0.5), logits) == [0]
    # a filter never leaves nothing, and never brings back a masked token
    assert kept(SamplingControls(top_p=1e-9), [float("-inf"), 1.0]) == [1]
    # a temperature so small that logits / T overflow: the argmax (softmax of
    # +-inf was NaN, which the sampler refused)
    for t in (1e-310, 1e-45):
        assert kept(SamplingControls(), logits, temperature=t) == [0]
        assert kept(SamplingControls(top_k=2), [-3.0, -1.0, float("-inf")], temperature=t) == [1]


def test_repetition_penalty_and_validation():
    s = torch.tensor([2.0, -2.0, 1.0])
    SamplingControls(repetition_penalty=2.0).penalize(s, torch.tensor([0, 1]))
    assert s.tolist() == [1.0, -4.0, 1.0]
    for bad in (dict(top_k=0), dict(top_k=1.5), dict(top_p=0), dict(top_p=1.5), dict(min_p=1),
                dict(min_p=-0.1), dict(repetition_penalty=0), dict(top_p=float("nan"))):
        with pytest.raises(ValueError):
            SamplingControls(**bad)
    with pytest.raises(ValueError):
        StopStrings([""])
    st = StopStrings(["\n\n", "END"])
    assert st.find("abc\n\nEND") == 3 and st.find("abc") is None and st.holdback == 2


def test_generate_and_stream_with_controls(lm):
    # top_k=1 sampling is greedy decoding
    greedy = search.generate(lm, "Name three colours.", max_new_tokens=10)
    assert search.generate(lm, "Name three colours.", max_new_tokens=10, temperature=1.5,
                           top_k=1, seed=3).text == greedy.text
    # stop strings cut the text before them; the stream agrees, holding back
    # what might start one
    base = search.generate(lm, "Count from 1 to 10, one number per line.", max_new_tokens=30)
    assert "\n" in base.text
    stopped = search.generate(lm, "Count from 1 to 10, one number per line.", max_new_tokens=30,
                              stop=["\n"])
    assert stopped.stop_reason == "stop" and stopped.text == base.text[:base.text.index("\n")]
    pieces = []
    gen = search.stream(lm, "Count from 1 to 10, one number per line.", max_new_tokens=30,
                        stop=["\n", "3"])
    while True:
        try:
            pieces.append(next(gen))
        except StopIteration as done:
            result = done.value
            break
    assert "".join(pieces) == result.text and "\n" not in result.text and "3" not in result.text
    # a huge repetition penalty: no token of the prompt or the output comes again
    r = search.generate(lm, "la la la la la la", max_new_tokens=12, repetition_penalty=1e4,
                        chat_template=False)
    assert len(set(r.token_ids)) == len(r.token_ids)
    assert not set(r.token_ids) & set(r.prompt_token_ids)
    plain = search.generate(lm, "la la la la la la", max_new_tokens=12, chat_template=False)
    assert len(set(plain.token_ids)) < len(plain.token_ids)  # without it, repeats
    with pytest.raises(ValueError):
        search.generate(lm, "x", top_p=2)


def test_cli_flags(lm, capsys):
    from search.cli import app as cli

    assert cli.main(["generate", "-q", "--stop", "\n", "--max-new-tokens", "30",
                     "Count from 1 to 10, one number per line."]) == 0
    assert "\n" not in capsys.readouterr().out.rstrip("\n")
    assert cli.main(["generate", "-q", "--temperature", "0.9", "--top-k", "5", "--top-p", "0.9",
                     "--min-p", "0.05", "--repetition-penalty", "1.2", "--seed", "1",
                     "--max-new-tokens", "5", "Hi"]) == 0
    assert cli.main(["generate", "-q", "--top-p", "1.5", "Hi"]) == 2
