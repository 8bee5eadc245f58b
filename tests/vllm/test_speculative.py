"""Speculative decoding (vLLM's n-gram drafter, which needs no second model)
with the trellis backend: drafts are validated against the constraint, accepted
and rolled back, and every output is valid. The logits-processor route is
refused in such an engine (vLLM runs no custom logits processor there)."""

from __future__ import annotations

import json

import pytest

from cases import CASES_BY_KIND, PERSON_SCHEMA, chat_prompts
from vllm_testing import ENGINE_KWARGS, engine_environment, model_dir

SPECULATIVE = {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4,
               "prompt_lookup_min": 2}


@pytest.fixture(scope="module")
def llm():
    engine_environment()
    import constrain.engines.vllm as trellis_vllm

    trellis_vllm.register()
    from vllm import LLM

    engine = LLM(model=str(model_dir()), structured_outputs_config={"backend": "trellis"},
                 speculative_config=SPECULATIVE, disable_log_stats=False, **ENGINE_KWARGS)
    yield engine
    engine.llm_engine.engine_core.shutdown(timeout=30)


def _counter(llm, name: str) -> float:
    return sum(m.value for m in llm.get_metrics() if m.name == name)


def test_drafts_checked_and_outputs_valid(llm):
    from vllm import SamplingParams
    from vllm.sampling_params import StructuredOutputsParams

    case = CASES_BY_KIND["json_schema"]
    # a JSON answer to copy gives the n-gram drafter something to propose
    examples = [json.dumps({"name": n, "age": 30 + i, "city": "Paris"})
                for i, n in enumerate(["Ada", "Alan", "Grace", "Edsger"] * 8)]
    prompts = chat_prompts(llm.get_tokenizer(),
                           [f"Repeat this JSON exactly: {e}" for e in examples])
    params = SamplingParams(max_tokens=160, temperature=0.0,
                            structured_outputs=StructuredOutputsParams(json=PERSON_SCHEMA))
    drafted = _counter(llm, "vllm:spec_decode_num_draft_tokens")
    outputs = llm.generate(prompts, params, use_tqdm=False)
    for out in outputs:
        assert out.outputs[0].finish_reason == "stop", out.outputs[0].text
        case.check(out.outputs[0].text)
    assert _counter(llm, "vllm:spec_decode_num_draft_tokens") > drafted
    assert _counter(llm, "vllm:spec_decode_num_accepted_tokens") > 0


def test_other_kinds_with_drafts(llm):
    from vllm import SamplingParams
    from vllm.sampling_params import StructuredOutputsParams

    for kind in ("regex", "grammar", "choice"):
        case = CASES_BY_KIND[kind]
        prompts = chat_prompts(llm.get_tokenizer(), case.prompts)
        params = SamplingParams(max_tokens=160, temperature=0.0,
                                structured_outputs=StructuredOutputsParams(**case.structured))
        for out in llm.generate(prompts, params, use_tqdm=False):
            assert out.outputs[0].finish_reason == "stop", (kind, out.outputs[0].text)
            case.check(out.outputs[0].text)


def test_logits_processor_route_refused(llm):
    from vllm import SamplingParams
    from vllm.exceptions import VLLMValidationError

    with pytest.raises(VLLMValidationError, match="speculatively"):
        llm.generate(["x"], SamplingParams(max_tokens=4, extra_args={"trellis": {"regex": "a"}}),
                     use_tqdm=False)
