"""Trellis inside a real vLLM engine, offline (``LLM``), through both routes:
every constraint kind on 32 prompts with every output checked independently,
a malformed spec refused with its error while the other requests of the batch
complete, and constrained rows that move when vLLM condenses its batch.

One engine serves the whole module (a start takes minutes on 2 cores): it is
started with the trellis backend, and the logits processor, installed by entry
point, runs in it too.
"""

from __future__ import annotations

import pytest

from cases import CASES, CASES_BY_KIND, PERSON_SCHEMA, chat_prompts
from vllm_testing import ENGINE_KWARGS, engine_environment, model_dir

MAX_TOKENS = 160


@pytest.fixture(scope="module")
def llm():
    engine_environment()
    import constrain.engines.vllm as trellis_vllm

    trellis_vllm.register()  # before LLM(): it checks its config before loading plugins
    from vllm import LLM

    engine = LLM(model=str(model_dir()), structured_outputs_config={"backend": "trellis"},
                 **ENGINE_KWARGS)
    yield engine
    engine.llm_engine.engine_core.shutdown(timeout=30)


def _params(route: str, case, max_tokens: int = MAX_TOKENS):
    from vllm import SamplingParams
    from vllm.sampling_params import StructuredOutputsParams

    # greedy: fast on the CPU build, and the prompts differ
    common = dict(max_tokens=max_tokens, temperature=0.0)
    if route == "logits_processor":
        return SamplingParams(extra_args={"trellis": case.spec}, **common)
    return SamplingParams(structured_outputs=StructuredOutputsParams(**case.structured), **common)


def _check_all(case, outputs) -> None:
    for out in outputs:
        completion = out.outputs[0]
        assert completion.finish_reason == "stop", (case.kind, completion.text)
        case.check(completion.text)


@pytest.mark.parametrize("route", ["logits_processor", "backend"])
@pytest.mark.parametrize("kind", [c.kind for c in CASES])
def test_every_output_valid(llm, kind, route):
    case = CASES_BY_KIND[kind]
    prompts = chat_prompts(llm.get_tokenizer(), case.prompts)
    params = [_params(route, case) for _ in prompts]
    outputs = llm.generate(prompts, params, use_tqdm=False)
    assert len(outputs) == 32
    _check_all(case, outputs)


#: malformed specs for both routes, and what their error must name
MALFORMED = [
    ({"json_schema": {"type": "object", "properties": {"a": {"$ref": "#/nope"}}}},
     {"json": {"type": "object", "properties": {"a": {"$ref": "#/nope"}}}}, "/properties/a"),
    ({"regex": "[0-9"}, {"regex": "[0-9"}, "offset 0"),
    ({"grammar": "start: ("}, {"grammar": "start: ("}, "line 1, column 9"),
]


@pytest.mark.parametrize("route", ["logits_processor", "backend"])
def test_malformed_spec_fails_only_its_request(llm, route):
    """Three malformed specs among 29 good requests in one batch: each is
    refused with its error, the others complete."""
    from vllm import SamplingParams
    from vllm.exceptions import VLLMValidationError
    from vllm.sampling_params import StructuredOutputsParams

    case = CASES_BY_KIND["json_schema"]
    prompts = chat_prompts(llm.get_tokenizer(), case.prompts)
    bad_at = {5: MALFORMED[0], 16: MALFORMED[1], 27: MALFORMED[2]}
    for i, prompt in enumerate(prompts):
        if i not in bad_at:
            llm.enqueue([prompt], _params(route, case), use_tqdm=False)
            continue
        spec, structured, place = bad_at[i]
        if route == "logits_processor":
            bad = SamplingParams(max_tokens=8, extra_args={"trellis": spec})
        else:
            bad = SamplingParams(max_tokens=8,
                                 structured_outputs=StructuredOutputsParams(**structured))
        with pytest.raises(VLLMValidationError) as info:
            llm.enqueue([prompt], bad, use_tqdm=False)
        assert place in str(info.value), str(info.value)
    outputs = llm.wait_for_completion(use_tqdm=False)
    assert len(outputs) == 29
    _check_all(case, outputs)


def test_malformed_spec_shape_is_refused(llm):
    from vllm import SamplingParams
    from vllm.exceptions import VLLMValidationError

    for spec, words in [({"regex": "a", "grammar": "start: A"}, "exactly one"),
                        ({"json_schema": {}, "colour": 1}, "unknown key 'colour'"),
                        ({"choice": []}, "non-empty list"),
                        ("{not json", "not valid JSON")]:
        with pytest.raises(VLLMValidationError, match=words):
            llm.generate(["x"], SamplingParams(max_tokens=4, extra_args={"trellis": spec}),
                         use_tqdm=False)


def test_rows_move_when_the_batch_condenses(llm):
    """Unconstrained requests of many lengths around constrained ones: as the
    short ones finish, vLLM moves the remaining rows down (and swaps), and every
    constrained row keeps its own matcher."""
    from vllm import SamplingParams

    case = CASES_BY_KIND["json_schema"]
    tok = llm.get_tokenizer()
    prompts = chat_prompts(tok, case.prompts)
    params = []
    for i in range(32):
        if i % 3 == 1:
            params.append(_params("logits_processor", case))
        elif i % 3 == 2:
            params.append(_params("backend", case))
        else:
            params.append(SamplingParams(max_tokens=1 + 5 * (i % 7), temperature=0.0,
                                         ignore_eos=True))
    outputs = llm.generate(prompts, params, use_tqdm=False)
    constrained = [o for i, o in enumerate(outputs) if i % 3]
    _check_all(case, constrained)
    for i, o in enumerate(outputs):
        if i % 3 == 0:
            assert len(o.outputs[0].token_ids) == 1 + 5 * (i % 7)


def test_user_stop_token_ends_only_a_complete_output(llm):
    """A stop token id (beside EOS) is masked until the JSON is complete."""
    from vllm import SamplingParams
    from vllm.sampling_params import StructuredOutputsParams

    tok = llm.get_tokenizer()
    newline = tok.encode("\n", add_special_tokens=False)[-1]
    prompts = chat_prompts(tok, CASES_BY_KIND["json_schema"].prompts[:8])
    params = SamplingParams(max_tokens=MAX_TOKENS, temperature=0.0,
                            stop_token_ids=[newline],
                            structured_outputs=StructuredOutputsParams(json=PERSON_SCHEMA))
    outputs = llm.generate(prompts, params, use_tqdm=False)
    _check_all(CASES_BY_KIND["json_schema"], outputs)


BUDGETED_GRAMMAR = r"""
start: "Summary: " summary "\nMood: " MOOD
summary[max_tokens=10]: /[^\n]+/
MOOD: "calm" | "tense"
"""


@pytest.mark.parametrize("route", ["logits_processor", "backend"])
def test_a_rule_budget_closes_the_field(llm, route):
    """``summary[max_tokens=10]``: the model would write on, the budget
    makes the field end within 10 tokens and the output still completes."""
    import re

    from vllm import SamplingParams
    from vllm.sampling_params import StructuredOutputsParams

    tok = llm.get_tokenizer()
    prompts = chat_prompts(tok, [f"Summarise the story of {n} in two long paragraphs."
                                 for n in ("Ada", "Grace", "Alan", "Edsger")])
    common = dict(max_tokens=MAX_TOKENS, temperature=0.0)
    params = SamplingParams(extra_args={"trellis": {"grammar": BUDGETED_GRAMMAR}}, **common) \
        if route == "logits_processor" else \
        SamplingParams(structured_outputs=StructuredOutputsParams(grammar=BUDGETED_GRAMMAR),
                       **common)
    outputs = llm.generate(prompts, params, use_tqdm=False)
    from constrain import Vocabulary

    vocab = Vocabulary.from_huggingface(tok)
    for out in outputs:
        completion = out.outputs[0]
        assert completion.finish_reason == "stop", completion.text
        pieces = [vocab.token_bytes(t) for t in completion.token_ids
                  if t not in vocab.eos_token_set]
        raw = b"".join(pieces)
        m = re.fullmatch(rb"Summary: ([^\n]+)\nMood: (calm|tense)", raw)
        assert m, raw
        a, b = m.span(1)
        at, used = 0, 0
        for p in pieces:
            used += at < b and a < at + len(p)
            at += len(p)
        assert used <= 10, (used, raw)


def test_eos_ids_come_from_the_model_config_without_a_tokenizer():
    """With skip_tokenizer_init the processor has no tokenizer to name EOS, and
    a row that may only end masked every token (a row of -inf for the
    sampler); the model's config names it."""
    engine_environment()
    from transformers import AutoTokenizer
    from vllm.config import ModelConfig

    from constrain.engines.vllm.logits_processor import config_eos_ids

    config = ModelConfig(model=str(model_dir()), skip_tokenizer_init=True)
    expected = AutoTokenizer.from_pretrained(str(model_dir())).eos_token_id
    assert config_eos_ids(config, config.get_vocab_size()) == [expected]
