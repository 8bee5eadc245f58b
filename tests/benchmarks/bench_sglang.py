"""SGLang's structured-output work per decoding step, with Trellis's grammar
backend and with XGrammar's, timed in SGLang's own code.

    bash .ci/setup-sglang
    .venv-sglang/bin/pip install --no-deps xgrammar==0.2.7 apache-tvm-ffi==0.1.11
    .venv-sglang/bin/python tests/benchmarks/bench_sglang.py [--batch 32] [--rounds 3]

A batch of ``--batch`` requests, each on its own MaskBench-subset schema
(tests/data/maskbench, round-robin over its splits), walks its valid
instance's SmolLM2 tokens (compact JSON, properties in schema order), as
SGLang's scheduler runs a batch: per step, ``SamplingBatchInfo
.update_regex_vocab_mask()`` builds the masks of the live requests (timed:
``allocate_vocab_mask``, ``fill_vocab_mask_batched``, ``move_vocab_mask``),
then each request's grammar accepts its token (timed apart). Requests leave
the batch when their grammar terminates (EOS).

Per backend and round: the compile of every schema through
``get_cached_or_future_value`` on emptied caches (SGLang's executor, waited
for one at a time); the *first walk* on those fresh grammars; the *warm* walk
on copies from the backend's cache (Trellis's masks are kept in the compiled
constraint; XGrammar's matcher has none to keep). Medians over rounds; the
backends alternate within a round. Both run their JSON with flexible
whitespace (SGLang's default); only schemas whose instance both backends
accept are kept.

What is not measured: a model's forward pass (no SGLang server starts on
these CPUs), the masks' application to logits (``apply_vocab_mask``: XGrammar's
has no CPU path in SGLang 0.5.23's backend).
"""

from __future__ import annotations

import harness  # first: the repository root on sys.path

import argparse  # noqa: E402
import json  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402

import torch  # noqa: E402

from bench_batch import load_cases  # noqa: E402
from harness import log  # noqa: E402

V = 49152
EOS = 2


def _sampling_info(grammars, vocab_size: int):
    from sglang.srt.sampling.sampling_batch_info import SamplingBatchInfo

    n = len(grammars)
    return SamplingBatchInfo(
        temperatures=torch.ones(n, 1), top_ps=torch.ones(n),
        top_ks=torch.ones(n, dtype=torch.int32), min_ps=torch.zeros(n), is_all_greedy=True,
        is_any_greedy=True, need_top_p_sampling=False, need_top_k_sampling=False,
        need_min_p_sampling=False, vocab_size=vocab_size, grammars=grammars, device="cpu")


def make_backends(tokenizer, names):
    """``{name: backend}`` as SGLang builds them (Trellis through its plugin
    and SGLang's registry)."""
    out = {}
    if "trellis" in names:
        from sglang.srt.constrained.base_grammar_backend import GRAMMAR_BACKEND_REGISTRY
        from sglang.srt.plugins import load_plugins
        from sglang.srt.server_args import ServerArgs

        load_plugins()
        args = ServerArgs(model_path="unused", grammar_backend="trellis", device="cpu")
        out["trellis"] = GRAMMAR_BACKEND_REGISTRY["trellis"](args, tokenizer, V, {EOS})
    if "xgrammar" in names:
        from sglang.srt.constrained.xgrammar_backend import XGrammarGrammarBackend

        out["xgrammar"] = XGrammarGrammarBackend(tokenizer, vocab_size=V,
                                                 model_eos_token_ids=[EOS])
    return out


def empty_caches(backend) -> None:
    """The backend's compiled grammars forgotten (SGLang's cache flush, which
    for Trellis also empties its compiled constraints and compiler caches)."""
    backend.reset()


def compile_all(backend, keys) -> tuple[list, float]:
    """Each key's grammar through SGLang's cache path; seconds in all."""
    grammars = []
    t0 = time.perf_counter()
    for key in keys:
        value, hit = backend.get_cached_or_future_value(key, False)
        if not hit:
            value = value.result()
            backend.set_cache(key, value.copy())
        grammars.append(value)
    return grammars, time.perf_counter() - t0


def walk(grammars, tokens) -> dict:
    """The batch's steps as SGLang's scheduler runs them: masks (timed), then
    each live request's token (timed). Returns the times in ns and counts."""
    live = list(range(len(grammars)))
    mask_ns, accept_ns, rows, accepts, steps = 0, 0, 0, 0, 0
    step = 0
    while live:
        info = _sampling_info([grammars[i] for i in live], V)
        t0 = time.perf_counter_ns()
        info.update_regex_vocab_mask()
        mask_ns += time.perf_counter_ns() - t0
        rows += len(live)
        steps += 1
        t0 = time.perf_counter_ns()
        for i in live:
            grammars[i].accept_token(tokens[i][step])
        accept_ns += time.perf_counter_ns() - t0
        accepts += len(live)
        step += 1
        live = [i for i in live if not grammars[i].is_terminated() and step < len(tokens[i])]
    return {"mask_ns": mask_ns, "accept_ns": accept_ns, "rows": rows, "accepts": accepts,
            "steps": steps}


def accepted_by(backend, key, ids) -> bool:
    value, hit = backend.get_cached_or_future_value(key, False)
    g = value if hit else value.result()
    try:
        for t in ids:
            g.accept_token(t)
    except (ValueError, RuntimeError, AttributeError):
        return False
    return g.is_terminated()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--backends", default="trellis,xgrammar")
    args = ap.parse_args()
    import constrain
    from search.models.smollm2 import load_tokenizer

    tok = load_tokenizer()
    vocab = constrain.Vocabulary.from_huggingface(tok, name="SmolLM2-135M-Instruct")

    def encode(s):
        return tok.encode(s, add_special_tokens=False, split_special_tokens=True)

    names = args.backends.split(",")
    log("building the backends")
    backends = make_backends(tok, names)
    log("loading cases")
    cases = load_cases(2 * args.batch, vocab, encode)
    keys, tokens = [], []
    for schema, ids in cases:
        key = ("json", json.dumps(schema))
        if all(accepted_by(b, key, ids + [EOS]) for b in backends.values()):
            keys.append(key)
            tokens.append(ids + [EOS])
        if len(keys) == args.batch:
            break
    log(f"{len(keys)} requests both backends accept ({len(cases)} tried)")
    results = {n: {"compile_s": [], "first": [], "warm": []} for n in backends}
    for r in range(args.rounds):
        for name in (names if r % 2 == 0 else names[::-1]):
            b = backends[name]
            empty_caches(b)
            grammars, secs = compile_all(b, keys)
            first = walk(grammars, tokens)
            warm = walk(compile_all(b, keys)[0], tokens)
            results[name]["compile_s"].append(secs)
            results[name]["first"].append(first)
            results[name]["warm"].append(warm)
            log(f"round {r + 1} {name}: compile {secs * 1e3:.1f} ms, masks first "
                f"{first['mask_ns'] / 1e6:.1f} ms, warm {warm['mask_ns'] / 1e6:.1f} ms")
    print(f"\n{len(keys)} requests, SmolLM2, SGLang's SamplingBatchInfo, median of "
          f"{args.rounds} rounds\n")
    print("| backend | compile, all schemas ms | first walk: masks per step ms | per row µs "
          "| accept per token µs | warm: masks per step ms | per row µs | accept per token µs |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for name, res in results.items():
        def med(walks, key, per):
            return statistics.median(w[key] / w[per] for w in walks) / 1e3

        f, w = res["first"], res["warm"]
        print(f"| {name} | {statistics.median(res['compile_s']) * 1e3:.1f} | "
              f"{med(f, 'mask_ns', 'steps') / 1e3:.3f} | {med(f, 'mask_ns', 'rows'):.2f} | "
              f"{med(f, 'accept_ns', 'accepts'):.2f} | {med(w, 'mask_ns', 'steps') / 1e3:.3f} | "
              f"{med(w, 'mask_ns', 'rows'):.2f} | {med(w, 'accept_ns', 'accepts'):.2f} |")
    env = harness.environment({})
    print(f"\nenvironment: {json.dumps(env)}")


if __name__ == "__main__":
    main()
