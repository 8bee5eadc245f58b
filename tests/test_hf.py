"""constrain.engines.hf.LogitsProcessor with transformers' model.generate: greedy, sampling,
beam search, a padded batch; and its bookkeeping on its own."""

from __future__ import annotations

import re

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("gguf")

import constrain  # noqa: E402
from constrain.engines.hf import LogitsProcessor  # noqa: E402

EOS = 2
PHONE = r"(?a)\d{3}-\d{4}"




def _batch(lm, prompts):
    """Left-padded input ids and attention mask for chat prompts."""
    rows = [lm.apply_chat_template(p) for p in prompts]
    n = max(map(len, rows))
    ids = torch.tensor([[EOS] * (n - len(r)) + r for r in rows])
    mask = torch.tensor([[0] * (n - len(r)) + [1] * len(r) for r in rows])
    return ids, mask


def _texts(lm, out, prompt_len):
    """Generated texts, each cut at its first EOS; asserts every row ended with one."""
    texts = []
    for row in out[:, prompt_len:].tolist():
        assert EOS in row, f"row did not finish: {row}"
        texts.append(lm.decode(row[: row.index(EOS)]))
    return texts


def _generate(lm, grammar, prompts, **kw):
    ids, mask = _batch(lm, prompts)
    out = lm.model.generate(
        input_ids=ids, attention_mask=mask, logits_processor=[LogitsProcessor(grammar)],
        pad_token_id=EOS, eos_token_id=EOS, **kw,
    )
    return _texts(lm, out, ids.shape[1])


def test_greedy(lm):
    g = constrain.compile_regex(PHONE, lm.vocab)
    (text,) = _generate(lm, g, ["Give me a phone number"], max_new_tokens=12, do_sample=False)
    assert re.fullmatch(PHONE, text), text


def test_sampling(lm):
    g = constrain.compile_regex(r"(?a)\d{4}-\d{2}-\d{2}", lm.vocab)
    torch.manual_seed(0)
    texts = _generate(lm, g, ["When was the moon landing?"] * 2, max_new_tokens=14,
                      do_sample=True, temperature=1.0)
    assert all(re.fullmatch(r"[0-9]{4}-[0-9]{2}-[0-9]{2}", t) for t in texts), texts


def test_beam_search(lm):
    g = constrain.compile_regex(r"(yes|no|maybe)", lm.vocab)
    texts = _generate(lm, g, ["Is the sky blue?"], max_new_tokens=5, num_beams=3,
                      num_return_sequences=3, do_sample=False)
    assert len(texts) == 3
    assert all(t in ("yes", "no", "maybe") for t in texts), texts


def test_padded_batch_of_two(lm):
    g = constrain.compile_regex(PHONE, lm.vocab)
    prompts = ["Give me a phone number", "What is the phone number of the pizza place down the street?"]
    ids, _ = _batch(lm, prompts)
    assert (ids[0] == EOS).sum() > 1  # the short prompt really is padded
    texts = _generate(lm, g, prompts, max_new_tokens=12, do_sample=False)
    assert len(texts) == 2 and all(re.fullmatch(PHONE, t) for t in texts), texts


# -- the processor on its own ------------------------------------------------------


def _allowed(scores):
    return set(torch.nonzero(torch.isfinite(scores)).flatten().tolist())


def test_processor_tracks_reordered_rows_and_ends_dead_rows(lm):
    v = lm.vocab
    g = constrain.compile_regex(r"(ab|cd)", v)
    a, b, c = (lm.encode(s) for s in "abx")
    assert len(a) == len(b) == len(c) == 1
    a, b, c = a[0], b[0], c[0]
    proc = LogitsProcessor(g)
    prompt = [1, 2, 3]
    V = lm.vocab_size
    s = proc(torch.tensor([prompt, prompt]), torch.zeros(2, V))
    assert _allowed(s[0]) == set(g.allowed_token_ids(g.initial_state()).tolist())
    # row 0 took "a", row 1 took "x" (refused): row 1 may only end
    s = proc(torch.tensor([prompt + [a], prompt + [c]]), torch.zeros(2, V))
    assert b in _allowed(s[0]) and EOS not in _allowed(s[0])
    assert _allowed(s[1]) == {EOS}
    # rows swapped (as beam search does), then "ab" is complete: EOS allowed
    s = proc(torch.tensor([prompt + [c, EOS], prompt + [a, b]]), torch.zeros(2, V))
    assert _allowed(s[0]) == {EOS}
    assert _allowed(s[1]) == {EOS}
    assert proc.state_of((a, b)) is not None and g.is_accepting(proc.state_of((a, b)))
    assert proc.state_of((c,)) is None
    # a finished row padded with EOS stays finished
    s = proc(torch.tensor([prompt + [a, b, EOS, EOS]]), torch.zeros(1, V))
    assert _allowed(s[0]) == {EOS}


def test_processor_resets_for_a_new_generation(lm):
    g = constrain.compile_regex(r"(ab|cd)", lm.vocab)
    (a,) = lm.encode("a")
    proc = LogitsProcessor(g)
    V = lm.vocab_size
    proc(torch.tensor([[5, 6]]), torch.zeros(1, V))
    proc(torch.tensor([[5, 6, a]]), torch.zeros(1, V))
    # a new prompt one token longer than the last call: must not be read as "generated"
    s = proc(torch.tensor([[7, 8, 9, 10]]), torch.zeros(1, V))
    assert _allowed(s[0]) == set(g.allowed_token_ids(g.initial_state()).tolist())
    assert proc.prompt_len == 4


def test_a_second_turn_resets_where_told_and_prompt_lookup_continues(lm):
    """A second turn whose prompt extends the first is read as a continuation
    (documented: reset() between calls); prompt-lookup decoding, whose steps
    shorten and lengthen the rows, must stay one generation (a rule that reset
    on rows not extending the last step's broke it: '{"name{"{{{...')."""
    g = constrain.compile_regex(PHONE, lm.vocab)
    proc = LogitsProcessor(g)
    kw = dict(logits_processor=[proc], max_new_tokens=12, do_sample=False, pad_token_id=EOS,
              eos_token_id=EOS)
    p1 = lm.apply_chat_template("Give me a phone number")
    lm.model.generate(input_ids=torch.tensor([p1]), **kw)
    p2 = p1 + lm.encode("Sure")
    proc.reset()
    out = lm.model.generate(input_ids=torch.tensor([p2]), **kw)[0, len(p2):].tolist()
    assert re.fullmatch(PHONE, lm.decode([t for t in out if t != EOS]))
    schema = {"type": "object", "properties": {"name": {"type": "string"},
                                               "city": {"type": "string"}},
              "required": ["name", "city"], "additionalProperties": False}
    js = constrain.compile_json_schema(schema, lm.vocab)
    p = lm.apply_chat_template('Repeat exactly: {"name":"Ada Lovelace","city":"London"} and '
                               'again {"name":"Ada Lovelace","city":"London"}')
    texts = []
    for extra in ({}, {"prompt_lookup_num_tokens": 5}):
        out = lm.model.generate(input_ids=torch.tensor([p]), logits_processor=[LogitsProcessor(js)],
                                max_new_tokens=40, do_sample=False, pad_token_id=EOS,
                                eos_token_id=EOS, **extra)[0, len(p):].tolist()
        assert out[-1] == EOS and js.accepts_tokens(out), lm.decode(out)
        texts.append(lm.decode(out[:-1]))
    assert texts[0] == texts[1]


def test_processor_arguments_are_checked(lm):
    """None was an AttributeError, '2' and 1.5 were read as pad ids, and ids past
    the vocabulary were dropped (a finished row then allowed nothing)."""
    g = constrain.compile_regex(PHONE, lm.vocab)
    for kwargs in (dict(pad_token_id="2"), dict(pad_token_id=1.5), dict(pad_token_id=10**6),
                   dict(eos_token_ids=[10**6])):
        with pytest.raises(constrain.ConstraintError):
            LogitsProcessor(g, **kwargs)
    with pytest.raises(constrain.ConstraintError, match="compiled constraint"):
        LogitsProcessor(None)
    assert LogitsProcessor(g, pad_token_id=EOS).end_token_ids == [EOS]


def test_processor_memory_is_linear_in_the_output():
    """Every prefix of every row was a dict key of its own: 2,000 tokens held
    2 million ids (16 MB); the trie holds one entry per token."""
    import tracemalloc

    tokens = [b"a", b"b", b"<eos>"]
    v = constrain.Vocabulary.from_tokens(tokens, eos_token_ids=[2])
    g = constrain.compile_regex("[ab]*", v)
    proc = LogitsProcessor(g)
    row = [2, 2]  # a prompt
    proc(torch.tensor([row]), torch.zeros(1, 3))
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        for i in range(2000):
            row.append(i % 2)
            s = proc(torch.tensor([row]), torch.zeros(1, 3))
        held = tracemalloc.get_traced_memory()[0] - base
    finally:
        tracemalloc.stop()
    assert _allowed(s[0]) == {0, 1, 2}
    assert held < 2_000_000, held
    # a row that came back shorter (candidates rolled back) walks the trie
    assert proc.state_of(tuple(row[2:500])) is not None
