"""vLLM as the model of the search drivers: ``search.lm.vllm.VLLMLM`` beside
``search.TransformersLM`` on the default model (SmolLM2-135M-Instruct, float32).

    .venv-vllm/bin/python tests/benchmarks/bench_vllm_lm.py [--prompts 8] [--beam 5]
        [--max-new-tokens 16] [--threads 2]

(run it in the vLLM environment: ``bash .ci/setup-vllm``). It prints

* **same output**: for each prompt, greedy decoding (``search.generate`` on the
  transformers model vs ``VLLMLM.generate`` inside the engine) and
  ``search.beam_search`` on both models (``VLLMLM`` with whole rows and with
  the top ``beam`` log-probabilities per row): whether the tokens agree, and the
  largest score difference;
* **throughput at batch 32**: rows per second of ``logprobs`` over 32 children of
  a cached prompt (median of 5 calls), whole rows and top-20 rows on vLLM, the
  transformers model's batched KV-prefix-tree path beside them, and the time of
  each beam search.

The engine: float32, eager, prefix caching by blocks of 32, ``max_logprobs=-1``.
Torch in this process runs on ``--threads`` threads; the engine process takes
its own (vLLM's CPU build binds its OpenMP threads to the cores).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "vllm"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import harness  # noqa: E402  (the standard library only)

PROMPTS = harness.BEAM_PROMPTS[:8]



def rows_per_second(lm, ids, repeats=5, batch=32) -> float:
    """Median rows/s of ``lm.logprobs`` over ``batch`` children of ``ids``."""
    lm.logprobs([ids])
    times = []
    for r in range(repeats):
        pre = [ids + (r, t) for t in range(100, 100 + batch)]
        t0 = time.perf_counter()
        lm.logprobs(pre)
        times.append(time.perf_counter() - t0)
    return batch / statistics.median(times)


def main() -> None:
    """Start the engine, compare outputs, measure throughput, print both tables."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--beam", type=int, default=5)
    ap.add_argument("--max-new-tokens", type=int, default=16)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()

    from vllm_testing import ENGINE_KWARGS, engine_environment, model_dir

    engine_environment()
    import torch

    import search
    from search.lm.vllm import VLLMLM

    torch.set_num_threads(args.threads)
    t0 = time.perf_counter()
    kwargs = {k: v for k, v in ENGINE_KWARGS.items() if k != "seed"}
    whole = VLLMLM.from_model(str(model_dir()), **kwargs)
    start = time.perf_counter() - t0
    top = VLLMLM(whole.llm, top_logprobs=max(20, args.beam))
    hf = search.load_default_model()
    print(f"# {hf.name}, vLLM engine started in {start:.0f} s; beam {args.beam}, "
          f"{args.max_new_tokens} new tokens, torch {args.threads} thread(s)", flush=True)

    rows = [["prompt", "greedy same", "beam same (whole)", "beam same (top-k)", "max |d score|",
             "beam s (hf)", "beam s (vllm whole)", "beam s (vllm top-k)"]]
    T, k = args.max_new_tokens, args.beam
    for i, prompt in enumerate(PROMPTS[: args.prompts]):
        ids = hf.prompt_ids(prompt)
        greedy = search.generate(hf, ids, max_new_tokens=T).token_ids
        [[(gv, _)]] = whole.generate([ids], max_new_tokens=T)
        res = {}
        for name, m in (("hf", hf), ("whole", whole), ("top", top)):
            t0 = time.perf_counter()
            out = search.beam_search(m, ids, beam_size=k, max_new_tokens=T)
            res[name] = (out[0], time.perf_counter() - t0)
        ref = res["hf"][0]
        dscore = max(abs(res[n][0].score - ref.score) for n in ("whole", "top"))
        rows.append([f"#{i}", str(list(gv[: len(greedy)]) == list(greedy)),
                     str(res["whole"][0].tokens == ref.tokens), str(res["top"][0].tokens == ref.tokens),
                     f"{dscore:.1e}", f"{res['hf'][1]:.2f}", f"{res['whole'][1]:.2f}", f"{res['top'][1]:.2f}"])
        print(" ".join(rows[-1]), flush=True)

    ids = tuple(hf.prompt_ids(PROMPTS[0]))
    thr = [["model", "rows/s at batch 32"],
           ["vLLM, whole rows", f"{rows_per_second(whole, ids):.1f}"],
           ["vLLM, top-20 rows", f"{rows_per_second(top, ids):.1f}"],
           ["TransformersLM (KV prefix tree)", f"{rows_per_second(hf, ids):.1f}"]]
    print()
    print(harness.fmt_table(rows, False))
    print()
    print(harness.fmt_table(thr, False))
    whole.close()


if __name__ == "__main__":
    main()
