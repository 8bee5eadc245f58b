"""Trellis as SGLang's grammar backend, driven by SGLang's own code: its plugin
loader and argument parser, its backend registry and the grammar cache of
``BaseGrammarBackend`` (what ``GrammarManager`` calls), and the batch's mask
building and application of ``SamplingBatchInfo`` (what the scheduler calls
every step), and SGLang's reasoning backend around Trellis's. The logits are seeded noise with EOS favoured, so each request
walks a random path through its language and stops once the constraint allows
EOS; every output is checked against its spec by an outside oracle (``json``
and ``jsonschema``, ``re.fullmatch``).

Not covered here, and why (docs/serving.md): a whole SGLang server or
``Engine`` does not start on these CPUs (its kernels package is CUDA-only), and
SGLang's speculative-decoding module imports torchvision, whose PyPI build
does not load against the CPU torch.
"""

from __future__ import annotations

import json
import re

import jsonschema
import numpy as np
import pytest
import torch

from constrain.engines import sglang as trellis_sglang

from sglang.srt.constrained.base_grammar_backend import (  # noqa: E402
    GRAMMAR_BACKEND_REGISTRY,
    GrammarRow,
    InvalidGrammarObject,
)
from sglang.srt.sampling.sampling_batch_info import SamplingBatchInfo  # noqa: E402

V = 49152  # SmolLM2's logits
EOS = 2  # <|im_end|>

PERSON = {"type": "object",
          "properties": {"name": {"type": "string", "maxLength": 12},
                         "age": {"type": "integer", "minimum": 0, "maximum": 120},
                         "role": {"enum": ["admin", "user", "guest"]}},
          "required": ["name", "age", "role"], "additionalProperties": False}
PHONE = r"\(\d{3}\) \d{3}-\d{4}"
GBNF = 'root ::= "SELECT " col ("," col)* " FROM t"\ncol ::= [a-z]{1,6}\n'
GBNF_REGEX = r"SELECT [a-z]{1,6}(,[a-z]{1,6})* FROM t"
TAG = {"type": "structural_tag",
       "format": {"type": "tag", "begin": "<call>",
                  "content": {"type": "json_schema",
                              "json_schema": {"type": "object",
                                              "properties": {"n": {"type": "integer",
                                                                   "minimum": 1,
                                                                   "maximum": 9}},
                                              "required": ["n"],
                                              "additionalProperties": False}},
                  "end": "</call>"}}


@pytest.fixture(scope="module")
def backend(smollm2_tokenizer):
    """The backend as SGLang builds it: the plugin loaded by SGLang's own
    loader, then the registry's function called as ``create_grammar_backend``
    calls a registered backend."""
    from sglang.srt.plugins import load_plugins

    load_plugins()
    assert trellis_sglang.BACKEND_NAME in GRAMMAR_BACKEND_REGISTRY
    from sglang.srt.server_args import ServerArgs

    server_args = ServerArgs(model_path="unused", grammar_backend="trellis", device="cpu")
    return GRAMMAR_BACKEND_REGISTRY["trellis"](server_args, smollm2_tokenizer, V, {EOS})


def _grammar(backend, key):
    """A request's grammar as ``GrammarManager`` gets it: the cache or a
    compile on the backend's executor; a compiled one is cached as a copy."""
    value, hit = backend.get_cached_or_future_value(key, False)
    if not hit:
        value = value.result()
        backend.set_cache(key, value.copy())
    return value


def _info(grammars) -> SamplingBatchInfo:
    n = len(grammars)
    return SamplingBatchInfo(
        temperatures=torch.ones(n, 1), top_ps=torch.ones(n), top_ks=torch.ones(n, dtype=torch.int32),
        min_ps=torch.zeros(n), is_all_greedy=True, is_any_greedy=True,
        need_top_p_sampling=False, need_top_k_sampling=False, need_min_p_sampling=False,
        vocab_size=V, grammars=grammars, device="cpu")


def _decode(grammars, seed: int, steps: int = 160) -> list[list[int]]:
    """Greedy decoding of seeded noise through SGLang's mask building and
    application, as the scheduler runs a batch: each step's masks from
    ``update_regex_vocab_mask``, applied by ``apply_logits_bias``, then each
    live request's token accepted by its grammar."""
    rng = np.random.default_rng(seed)
    outputs: list[list[int]] = [[] for _ in grammars]
    live = list(range(len(grammars)))
    for _ in range(steps):
        if not live:
            break
        info = _info([grammars[i] for i in live])
        info.update_regex_vocab_mask()
        logits = torch.from_numpy(rng.standard_normal((len(live), V)).astype(np.float32))
        logits[:, EOS] += 3.0  # end as soon as the constraint allows it
        info.apply_logits_bias(logits)
        tokens = logits.argmax(dim=1).tolist()
        for row, i in enumerate(live):
            assert torch.isfinite(logits[row, tokens[row]])
            grammars[i].accept_token(tokens[row])
            outputs[i].append(tokens[row])
        live = [i for i in live if not grammars[i].is_terminated()]
    assert not live, "a request did not finish"
    return outputs


def _text(tokenizer, ids) -> str:
    assert ids[-1] == EOS
    return tokenizer.decode(ids[:-1])


def test_sglang_loads_the_plugin_and_parses_the_backend_name(backend):
    import argparse

    from sglang.srt.arg_groups.choices import GRAMMAR_BACKEND_CHOICES
    from sglang.srt.server_args import ServerArgs

    assert "trellis" in GRAMMAR_BACKEND_CHOICES
    parser = argparse.ArgumentParser()
    ServerArgs.add_cli_args(parser)
    args = parser.parse_args(["--model-path", "m", "--grammar-backend", "trellis"])
    assert args.grammar_backend == "trellis"
    assert isinstance(backend, trellis_sglang.TrellisSGLangBackend)
    trellis_sglang.register()  # again: no second name
    assert GRAMMAR_BACKEND_CHOICES.count("trellis") == 1


def test_a_batch_of_every_kind_decodes_valid_outputs(backend, smollm2_tokenizer):
    keys = [("json", json.dumps(PERSON)), ("regex", PHONE), ("ebnf", GBNF),
            ("structural_tag", json.dumps(TAG))]
    for seed in range(4):
        grammars = [_grammar(backend, k) for k in keys]
        texts = [_text(smollm2_tokenizer, ids) for ids in _decode(grammars, seed)]
        jsonschema.validate(json.loads(texts[0]), PERSON)
        assert re.fullmatch(PHONE, texts[1]), texts[1]
        assert re.fullmatch(GBNF_REGEX, texts[2]), texts[2]
        m = re.fullmatch(r"<call>(.*)</call>", texts[3], re.S)
        assert m, texts[3]
        jsonschema.validate(json.loads(m.group(1)), TAG["format"]["content"]["json_schema"])
    # the cache served the later rounds (each a copy at the start)
    hit, was_hit = backend.get_cached_or_future_value(keys[0], False)
    assert was_hit and hit.matcher.num_accepted == 0 and hit.grammar_stats.is_cache_hit


def test_any_json_is_any_json_value(backend, smollm2_tokenizer):
    """``$$ANY$$``: any JSON value, an array or a scalar at the top too."""
    for text, ok in (('[1, {"a": null}, "x"]', True), ("true", True), ('{"a": 1', False),
                     ("[1,]", False)):
        g = _grammar(backend, ("json", "$$ANY$$"))
        try:
            for t in smollm2_tokenizer.encode(text, add_special_tokens=False) + [EOS]:
                g.accept_token(t)
        except ValueError:
            assert not ok, text
        else:
            assert ok and g.is_terminated(), text


def test_a_bad_spec_fails_its_own_request_with_the_place(backend):
    cases = [(("json", '{"type": "object", "properties": {"a": {"type": "strin"}}}'),
              "/properties/a"),
             (("json", '{"type": "object",'), "line 1"),
             (("regex", "x{2,1}"), "offset 2"),
             (("ebnf", 'root ::= "a" missing\n'), "line 1, column 14")]
    for key, where in cases:
        bad = _grammar(backend, key)
        assert isinstance(bad, InvalidGrammarObject)
        assert where in bad.error_message, bad.error_message
        again, hit = backend.get_cached_or_future_value(key, False)
        assert hit and isinstance(again, InvalidGrammarObject)
    good = _grammar(backend, ("regex", "[0-9]{3}"))
    assert not isinstance(good, InvalidGrammarObject)


def test_batched_fills_equal_single_fills_and_leave_other_rows(backend, smollm2_tokenizer):
    grammars = [_grammar(backend, ("json", json.dumps(PERSON))) for _ in range(3)]
    grammars.append(_grammar(backend, ("regex", PHONE)))
    for g, text in zip(grammars, ['{"name": "A', '{', "", "(55"]):
        for t in smollm2_tokenizer.encode(text, add_special_tokens=False):
            g.accept_token(t)
    cls = type(grammars[0])
    mask = grammars[0].allocate_vocab_mask(V, 6, "cpu")
    assert mask.dtype == torch.int32 and mask.shape == (6, (V + 31) // 32)
    assert (mask == -1).all()
    cls.fill_vocab_mask_batched([GrammarRow(row=r, grammar=g)
                                 for r, g in zip((0, 2, 3, 5), grammars)], mask)
    alone = grammars[0].allocate_vocab_mask(V, 6, "cpu")
    for r, g in zip((0, 2, 3, 5), grammars):
        g.fill_vocab_mask(alone, r)
    assert torch.equal(mask, alone)
    assert (mask[1] == -1).all() and (mask[4] == -1).all()
    cls.reset_vocab_mask(mask)
    assert (mask == -1).all()


def test_refused_tokens_raise_and_tokens_after_eos_are_ignored(backend, smollm2_tokenizer):
    g = _grammar(backend, ("regex", "[0-9]{2}"))
    (letter,) = smollm2_tokenizer.encode("x", add_special_tokens=False)
    with pytest.raises(ValueError, match="not allowed"):
        g.accept_token(letter)
    for t in smollm2_tokenizer.encode("42", add_special_tokens=False) + [EOS]:
        g.accept_token(t)
    assert g.is_terminated()
    g.accept_token(letter)  # as SGLang's other backends: nothing after the end
    g.rollback(1)
    assert not g.is_terminated()


def test_draft_tokens_roll_back(backend, smollm2_tokenizer):
    """What SGLang's speculative decoding does with a grammar (a draft tree
    walked depth first: fill the row before each draft token, accept it,
    recurse, roll back one): every row equals a fresh walk's, and the state
    is the one before the draft."""
    g = _grammar(backend, ("json", json.dumps(PERSON)))
    prefix = smollm2_tokenizer.encode('{"name": "Bo", "age": ', add_special_tokens=False)
    for t in prefix:
        g.accept_token(t)
    draft = smollm2_tokenizer.encode('42, "role": "user"}', add_special_tokens=False) + [EOS]
    mask = g.allocate_vocab_mask(V, len(draft) + 1, "cpu")
    depth = 0
    for t in draft:
        g.fill_vocab_mask(mask, depth)
        g.accept_token(t)
        depth += 1
    assert g.is_terminated()
    g.rollback(depth)
    assert g.matcher.num_accepted == len(prefix)
    fresh = g.copy()
    want = g.allocate_vocab_mask(V, len(draft) + 1, "cpu")
    for t in prefix:
        fresh.accept_token(t)
    for i, t in enumerate(draft):
        fresh.fill_vocab_mask(want, i)
        fresh.accept_token(t)
    assert torch.equal(mask, want)


def test_jump_forward_and_retokenization(backend, smollm2_tokenizer):
    key_schema = {"type": "object",
                  "properties": {"a_rather_long_property_name": {"type": "integer"}},
                  "required": ["a_rather_long_property_name"]}
    g = _grammar(backend, ("json", json.dumps(key_schema)))
    old = smollm2_tokenizer.encode('{"', add_special_tokens=False)
    for t in old:
        g.accept_token(t)
    helper = g.try_jump_forward(smollm2_tokenizer)
    assert helper is not None
    text, state = g.jump_forward_str_state(helper)
    assert text.startswith('a_rather_long_property_name"') and state == -1
    # the engine retokenizes the output with the forced text: the ids differ
    # from the old ones at the end
    new = smollm2_tokenizer.encode('{"' + text, add_special_tokens=False)
    g.jump_and_retokenize(old, new, state)
    assert g.matcher.num_accepted == len(new)
    value = smollm2_tokenizer.encode(": 7", add_special_tokens=False)
    for t in value:
        g.accept_token(t)
    wrong = smollm2_tokenizer.encode(": x", add_special_tokens=False)
    with pytest.raises(ValueError, match="not allowed"):
        g.jump_and_retokenize(new + value, new + wrong, -1)


def test_logits_are_masked_on_cpu_in_place(backend, smollm2_tokenizer):
    g = _grammar(backend, ("regex", "[0-9]"))
    mask = g.allocate_vocab_mask(V, 1, "cpu")
    g.fill_vocab_mask(mask, 0)
    logits = torch.zeros(1, V)
    type(g).apply_vocab_mask(logits, type(g).move_vocab_mask(mask, "cpu"))
    allowed = torch.isfinite(logits[0]).nonzero().flatten().tolist()
    digits = sorted(smollm2_tokenizer.convert_tokens_to_ids(list("0123456789")))
    assert allowed == digits


def test_versions_outside_the_range_are_refused():
    assert trellis_sglang.check_version("0.5.23") == "0.5.23"
    for bad in ("0.5.19", "0.6.0", "1.0.0", "nonsense"):
        with pytest.raises(trellis_sglang.UnsupportedSGLangError, match="0.5.20"):
            trellis_sglang.check_version(bad)


def test_a_cache_flush_forgets_the_compiled_constraints(backend):
    """SGLang's flush (``reset``) empties its grammar cache and Trellis's
    compiled constraints: the next request compiles again."""
    key = ("regex", "[a-c]{2}")
    first = _grammar(backend, key)
    assert len(backend.source) >= 1
    backend.reset()
    assert len(backend.source) == 0 and not backend.cache
    again = _grammar(backend, key)
    assert again.constraint is not first.constraint
    assert _grammar(backend, key).constraint is again.constraint  # cached again


def test_with_a_reasoning_parser_the_grammar_starts_after_the_reasoning(smollm2_tokenizer):
    """``--reasoning-parser``: the backend comes wrapped in SGLang's own
    reasoning backend, as SGLang's built-in ones do: masks allow everything
    until the parser's end marker, then the grammar's."""
    from sglang.srt.constrained.reasoner_grammar_backend import ReasonerGrammarBackend
    from sglang.srt.server_args import ServerArgs

    args = ServerArgs(model_path="unused", grammar_backend="trellis", device="cpu",
                      reasoning_parser="deepseek-r1")
    wrapped = trellis_sglang.make_backend(args, smollm2_tokenizer, V, {EOS})
    assert isinstance(wrapped, ReasonerGrammarBackend)
    value, hit = wrapped.get_cached_or_future_value(("regex", "[0-9]{2}"), True)
    g = value if hit else value.result()
    thinking = smollm2_tokenizer.encode("so, x</think>", add_special_tokens=False)
    answer = smollm2_tokenizer.encode("42", add_special_tokens=False) + [EOS]
    (letter,) = smollm2_tokenizer.encode("x", add_special_tokens=False)
    for i, t in enumerate(thinking + answer):
        mask = g.allocate_vocab_mask(V, 1, "cpu")
        g.fill_vocab_mask(mask, 0)
        free = bool((mask[0] == -1).all())
        assert free == (i < len(thinking)), i
        assert (mask[0, t // 32] >> (t % 32)) & 1, i
        if i == len(thinking):
            assert not (mask[0, letter // 32] >> (letter % 32)) & 1
        g.accept_token(t)
    assert g.is_terminated()
    plain = trellis_sglang.make_backend(
        ServerArgs(model_path="unused", grammar_backend="trellis", device="cpu"),
        smollm2_tokenizer, V, {EOS})
    assert isinstance(plain, trellis_sglang.TrellisSGLangBackend)


def test_strict_thinking_with_a_budget_forces_the_end_marker(smollm2_tokenizer, monkeypatch):
    """``--enable-strict-thinking`` with a thinking budget
    (``SGLANG_MAX_THINK_TOKENS``): SGLang's reasoning backend filters tokens
    through Trellis's backend; past the budget only the end marker's next
    token is allowed, then the grammar's masks."""
    from sglang.srt.server_args import ServerArgs

    monkeypatch.setenv("SGLANG_MAX_THINK_TOKENS", "3")
    args = ServerArgs(model_path="unused", grammar_backend="trellis", device="cpu",
                      reasoning_parser="deepseek-r1", enable_strict_thinking=True)
    wrapped = trellis_sglang.make_backend(args, smollm2_tokenizer, V, {EOS})
    value, hit = wrapped.get_cached_or_future_value(("regex", "[0-9]"), True)
    g = value if hit else value.result()
    end = smollm2_tokenizer.encode("</think>", add_special_tokens=False)
    for t in smollm2_tokenizer.encode("a b c", add_special_tokens=False)[:3]:
        g.accept_token(t)
    for t in end:  # over budget: the marker, one token at a time
        mask = g.allocate_vocab_mask(V, 1, "cpu")
        g.fill_vocab_mask(mask, 0)
        allowed = torch.nonzero(torch.tensor(
            [(int(mask[0, i // 32]) >> (i % 32)) & 1 for i in range(V)])).flatten().tolist()
        assert allowed == [t]
        g.accept_token(t)
    mask = g.allocate_vocab_mask(V, 1, "cpu")
    g.fill_vocab_mask(mask, 0)
    (seven,) = smollm2_tokenizer.encode("7", add_special_tokens=False)
    (letter,) = smollm2_tokenizer.encode("x", add_special_tokens=False)
    assert (mask[0, seven // 32] >> (seven % 32)) & 1
    assert not (mask[0, letter // 32] >> (letter % 32)) & 1
