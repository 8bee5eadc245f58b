"""search.generate_batch: one padded batch gives, row by row, what single
generate calls give; rows leave the batch when they end."""

from __future__ import annotations

from typing import Literal

import pytest

import constrain
import search

PERSON = {"type": "object", "additionalProperties": False, "required": ["name", "age"],
          "properties": {"name": {"type": "string", "maxLength": 12}, "age": {"type": "integer"}}}
QUESTIONS = ["Give me a phone number for shop {}.", "Describe person number {} as JSON.",
             "Is the sky blue? Answer for case {}.", "Write a haiku about the number {}."]


@pytest.fixture(scope="module")
def rows(lm):
    """16 prompts of different lengths, under 4 constraints (one free row in 4)."""
    cons = [constrain.compile_regex(r"[0-9]{3}-[0-9]{4}", lm.vocab),
            constrain.compile_json_schema(PERSON, lm.vocab),
            constrain.compile_choice(["yes", "no", "maybe"], lm.vocab), None]
    prompts = [q.format(i) for i in range(4) for q in QUESTIONS]
    return prompts, [cons[j] for _ in range(4) for j in range(4)]


def _same(single, batch):
    assert len(single) == len(batch)
    for a, b in zip(single, batch):
        assert (b.text, b.token_ids, b.stop_reason, b.accepted, b.eos_token_id) == \
               (a.text, a.token_ids, a.stop_reason, a.accepted, a.eos_token_id)
        assert b.prompt_token_ids == a.prompt_token_ids


def test_greedy_batch_equals_single_calls(lm, rows):
    prompts, cons = rows
    single = [search.generate(lm, p, constraint=c, max_new_tokens=16) for p, c in zip(prompts, cons)]
    before = lm.calls
    batch = search.generate_batch(lm, prompts, constraints=cons, max_new_tokens=16)
    _same(single, batch)
    # every row is scored once per step it is still going: ended rows leave the batch
    assert lm.calls - before == sum(len(r.token_ids) + (r.eos_token_id is not None) for r in batch)
    assert lm.calls - before < 16 * 16
    assert {r.stop_reason for r in batch[2::4]} == {"eos"}
    assert all(r.text in ("yes", "no", "maybe") for r in batch[2::4])
    assert all(r.accepted is None for r in batch[3::4])
    # in smaller batches, the same
    _same(single[:6], search.generate_batch(lm, prompts[:6], constraints=cons[:6],
                                            max_new_tokens=16, batch_size=4))


def test_greedy_batch_penalises_every_row(lm):
    """The batch's one argmax ran at its first greedy row, before the later rows
    were penalised: row 1 came out as if repetition_penalty were 1."""
    prompts = ["Say hello hello hello", "List the numbers one one one one one."]
    batch = search.generate_batch(lm, prompts, max_new_tokens=15, repetition_penalty=1.8)
    single = [search.generate(lm, p, max_new_tokens=15, repetition_penalty=1.8) for p in prompts]
    assert [r.text for r in batch] == [r.text for r in single]


def test_sampled_batch_with_controls_equals_single_calls(lm, rows):
    prompts, cons = rows
    prompts, cons = prompts[:8], cons[:8]
    kw = dict(max_new_tokens=12, temperature=0.9, top_p=0.9, repetition_penalty=1.3, stop=["\n"])
    seeds = list(range(8))
    single = [search.generate(lm, p, constraint=c, seed=s, **kw)
              for p, c, s in zip(prompts, cons, seeds)]
    _same(single, search.generate_batch(lm, prompts, constraints=cons, seed=seeds, **kw))
    # one seed for every row: each row's sampler starts from it, as a single call's would
    one = search.generate_batch(lm, prompts[:2], constraints=cons[:2], seed=3, **kw)
    _same([search.generate(lm, p, constraint=c, seed=3, **kw) for p, c in zip(prompts[:2], cons[:2])], one)


def test_python_types_and_one_constraint_for_all(lm):
    answers = search.generate_batch(lm, ["Is water wet?", "Is fire cold? Answer honestly."],
                                    constraints=Literal["yes", "no"], max_new_tokens=4)
    assert [f'"{r.value}"' for r in answers] == [r.text for r in answers]  # JSON strings
    assert all(r.value in ("yes", "no") for r in answers)
    # generate's own name for it (a TypeError before: no such keyword)
    named = search.generate_batch(lm, ["Is water wet?", "Is fire cold? Answer honestly."],
                                  constraint=Literal["yes", "no"], max_new_tokens=4)
    assert [r.text for r in named] == [r.text for r in answers]
    with pytest.raises(TypeError, match="not both"):
        search.generate_batch(lm, ["a"], constraint="a", constraints="a")
    with pytest.raises(TypeError, match="as constraints="):
        search.generate_batch(lm, ["a"], constraint=["a"])


def test_a_batch_matcher_of_the_caller_serves_call_after_call(lm, rows):
    """A caller's BatchMatcher fills every call's masks and is left open: its
    pool (and the thread count it has timed) carries over to the next call."""

    class Counted(constrain.BatchMatcher):
        fills = closes = 0

        def fill_next_token_bitmask(self, *args, **kwargs):
            Counted.fills += 1
            return super().fill_next_token_bitmask(*args, **kwargs)

        def close(self):
            Counted.closes += 1
            super().close()

    prompts, cons = rows
    own = search.generate_batch(lm, prompts[:8], constraints=cons[:8], max_new_tokens=12)
    bm = Counted(2)
    first = search.generate_batch(lm, prompts[:8], constraints=cons[:8], max_new_tokens=12,
                                  batch_matcher=bm)
    fills = Counted.fills
    assert fills >= 12 and Counted.closes == 0
    second = search.generate_batch(lm, prompts[:8], constraints=cons[:8], max_new_tokens=12,
                                   batch_matcher=bm, batch_size=3)
    assert Counted.fills > fills and Counted.closes == 0
    bm.close()
    _same(own, first)
    _same(own, second)
    with pytest.raises(TypeError, match="not both"):
        search.generate_batch(lm, ["a"], threads=2, batch_matcher=constrain.BatchMatcher(1))
    with pytest.raises(TypeError, match="must be a constrain.BatchMatcher"):
        search.generate_batch(lm, ["a"], batch_matcher=2)


def test_bad_calls_are_named(lm):
    with pytest.raises(TypeError, match="list of prompts"):
        search.generate_batch(lm, "one prompt")
    with pytest.raises(ValueError, match="constraints has 1 entries for 2 prompts"):
        search.generate_batch(lm, ["a", "b"], constraints=[None])
    with pytest.raises(ValueError, match="seed has 3 entries"):
        search.generate_batch(lm, ["a", "b"], seed=[1, 2, 3], temperature=1.0)
    with pytest.raises(ValueError, match="index 1 is empty"):
        search.generate_batch(lm, [[1, 2], []])
    with pytest.raises(ValueError, match="batch_size"):
        search.generate_batch(lm, ["a"], batch_size=0)
    assert search.generate_batch(lm, []) == []
    out = search.generate_batch(lm, ["a", "bb cc"], max_new_tokens=0)
    assert [r.text for r in out] == ["", ""] and {r.stop_reason for r in out} == {"max_new_tokens"}


def test_an_unconstrained_row_beside_a_narrower_vocabulary():
    """A model with 60 logits, a constraint over its 20-token tokenizer: the
    unconstrained row lost the columns past the constraint's vocabulary."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from tokenizers import Tokenizer, models

    import constrain

    words = ["[UNK]", "</s>", "<pad>", "a", "b", "c", "ab", "bc", "1", "2", "3", "{", "}", '"',
             ":", ",", "x", "y", "z", " "]
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="[UNK]"))
    # (no pre-tokenizer: one that drops whitespace leaves tokens that stand
    # for no text, which Vocabulary.from_huggingface refuses)
    tokenizer = transformers.PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]",
                                                     eos_token="</s>", pad_token="<pad>")
    config = transformers.LlamaConfig(vocab_size=60, hidden_size=32, intermediate_size=64,
                                      num_hidden_layers=2, num_attention_heads=4,
                                      num_key_value_heads=2, eos_token_id=1, pad_token_id=2)
    torch.manual_seed(1)
    lm = search.TransformersLM(transformers.LlamaForCausalLM(config).eval(), tokenizer)
    g = constrain.compile_regex(r"[abc]+", constrain.Vocabulary.from_huggingface(
        tokenizer, eos_token_ids=[1]))
    single = search.generate(lm, [3, 4, 5], max_new_tokens=8).token_ids
    batch = search.generate_batch(lm, [[3, 4, 5], [5, 4, 3]], constraints=[None, g],
                                  max_new_tokens=8)
    assert batch[0].token_ids == single and any(t >= 20 for t in single)
