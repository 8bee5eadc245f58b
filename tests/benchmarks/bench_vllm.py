"""Throughput of vLLM (CPU build) with and without a constraint: unconstrained,
vLLM's own backends (xgrammar, guidance) and Trellis through both routes (its
logits processor, its backend), on the same 32 prompts and schemas.

Run it with the vLLM environment (``bash .ci/setup-vllm``)::

    .venv-vllm/bin/python tests/benchmarks/bench_vllm.py [--json out.json]
        [--engines xgrammar,guidance,trellis] [--max-tokens 128] [--batch1 8]
        [--rounds 1]

The schemas are MaskBench's 12 BFCL tool schemas (the vendored subset in
``tests/data/maskbench/``) and one nested Pydantic model; prompt ``i`` asks for
the arguments of schema ``i % 13``, showing one valid instance. Decoding is
greedy with at most ``--max-tokens`` tokens per request. Two throughputs:

* wall: the generated tokens of all requests over the wall time of the
  ``generate`` call (prefill of the prompts included);
* decode: tokens of the decoding steps only, from vLLM's per-request
  timestamps (``RequestOutput.metrics``, a ``RequestStateStats`` when the engine
  logs stats: ``first_token_ts`` and ``last_token_ts`` are the engine core's
  monotonic times of the steps that produced the request's first and last
  token). Batch 1: the sum of (tokens - 1) over the sum of (last - first);
  batch 32: the tokens generated after the last prefill step over the span
  from that step to the latest last token. The 32 prompts' prefill takes
  ``prefill_steps`` steps (2 here: ~2,900 prompt tokens), and the requests
  prefilled first decode during the later ones; those mixed steps are left
  out, their tokens counted from the step each request's first token came in.

Constrained outputs stop at the end of their JSON while unconstrained ones run
on, so a constrained batch empties out sooner and decodes more of its steps at
a smaller batch. Each constrained row is therefore also compared with
``matched``: the same prompts unconstrained in the same engine, each request
forced (``ignore_eos``) to generate exactly as many tokens as it did under the
constraint, so that both runs have the same batch occupancy step by step.
With ``--rounds R`` each batch-32 run (and its matched run, right after it) is
repeated R times and the best decode figure kept: on a shared machine the
fastest round is the least disturbed one.

* batch 32: the 32 requests submitted at once (``max_num_seqs=32``);
* batch 1: the first ``--batch1`` prompts, one ``generate`` call each.

vLLM selects one structured-output backend per engine, so each backend has an
engine of its own, started in a child process: ``xgrammar`` also runs the
unconstrained and the Trellis logits-processor rows (the processor is loaded by
every engine), ``trellis`` the Trellis backend row. Before timing, each
configuration runs the 32 requests once for one token, so that every schema is
compiled (and cached) first: the figures are steady-state decoding. Both Trellis
routes use the flexible JSON style, as vLLM's backends do by default
(whitespace allowed between tokens).
"""

from __future__ import annotations

import argparse
import gzip
import ast
import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "vllm"))
sys.path.insert(0, str(REPO))

from vllm_testing import ENGINE_KWARGS, engine_environment, model_dir  # noqa: E402

MASKBENCH = REPO / "tests" / "data" / "maskbench" / "subset.jsonl.gz"
#: which rows each engine's child process measures
ROWS = {"xgrammar": ["unconstrained", "xgrammar", "trellis-lp"],
        "guidance": ["guidance"],
        "trellis": ["trellis-backend"]}


def nested_model_schema() -> dict:
    """The nested Pydantic model of the benchmark (an order with a customer,
    an address and line items), as its JSON Schema."""
    from typing import Literal

    from pydantic import BaseModel, Field

    class Address(BaseModel):
        street: str
        city: str
        postcode: str = Field(pattern=r"^[0-9]{5}$")
        country: Literal["FR", "GB", "JP", "PE", "US"]

    class Customer(BaseModel):
        name: str
        email: str
        address: Address

    class Item(BaseModel):
        sku: str
        quantity: int = Field(ge=1, le=99)
        unit_price: float = Field(ge=0)

    class Order(BaseModel):
        order_id: int
        customer: Customer
        items: list[Item] = Field(min_length=1, max_length=4)
        gift: bool

    return Order.model_json_schema()


def workload() -> list[tuple[str, dict]]:
    """The 32 (prompt, schema) pairs."""
    rows = [json.loads(line) for line in gzip.open(MASKBENCH, "rt")]
    schemas = []
    for r in rows:
        if r["split"] != "BFCL":
            continue
        schema = r["schema"]
        if isinstance(schema, str):
            try:
                schema = json.loads(schema)
            except json.JSONDecodeError:
                schema = ast.literal_eval(schema)
        example = next(t["data"] for t in r["tests"] if t.get("valid"))
        schemas.append((r["id"], schema, example))
    order = {"order_id": 1042, "customer": {"name": "Ada Lovelace", "email": "ada@example.org",
             "address": {"street": "12 Analytical Row", "city": "London", "postcode": "10001",
                         "country": "GB"}},
             "items": [{"sku": "NB-7", "quantity": 2, "unit_price": 9.5}], "gift": False}
    schemas.append(("pydantic_order", nested_model_schema(), order))
    out = []
    for i in range(32):
        name, schema, example = schemas[i % len(schemas)]
        prompt = (f"Fill in the arguments of the function {name} as one JSON object. An example "
                  f"of valid arguments: {json.dumps(example)}. Now give other valid arguments "
                  f"(variant {i}).")
        out.append((prompt, schema))
    return out


def _params(row: str, schema: dict, max_tokens: int):
    from vllm import SamplingParams
    from vllm.sampling_params import StructuredOutputsParams

    common = dict(max_tokens=max_tokens, temperature=0.0)
    if row == "unconstrained":
        return SamplingParams(**common)
    if row == "trellis-lp":
        return SamplingParams(extra_args={"trellis": {"json_schema": schema,
                                                      "whitespace": "flexible"}}, **common)
    return SamplingParams(structured_outputs=StructuredOutputsParams(json=schema), **common)


def _run(llm, prompts, params):
    """(generated tokens, seconds, the outputs)."""
    t0 = time.perf_counter()
    outs = llm.generate(prompts, params, use_tqdm=False)
    dt = time.perf_counter() - t0
    return sum(len(o.outputs[0].token_ids) for o in outs), dt, outs


def _decode(outs) -> tuple[int, float, int]:
    """Decoding steps of a batch from vLLM's per-request timestamps: (tokens
    generated after the last step that produced a first token, seconds from that
    step to the latest last token, how many steps produced a first token).

    When the prompts' prefill takes K steps, a request whose first token came
    at prefill step k (0-based) got one more token at each of the K - 1 - k
    later prefill steps (every running request gains one token per step: no
    preemption, no speculative decoding here), so n - (K - k) of its n tokens
    come after them."""
    stats = [o.metrics for o in outs]
    if any(m is None or m.first_token_ts == 0.0 for m in stats):
        raise RuntimeError("vLLM returned no per-request timestamps (disable_log_stats?)")
    steps = sorted({m.first_token_ts for m in stats})
    k_of = {t: k for k, t in enumerate(steps)}
    tokens = sum(max(0, len(o.outputs[0].token_ids) - (len(steps) - k_of[m.first_token_ts]))
                 for o, m in zip(outs, stats))
    span = max(m.last_token_ts for m in stats) - steps[-1]
    return tokens, span, len(steps)


def _matched(outs):
    """Unconstrained parameters that make each request generate as many tokens
    as it did in ``outs``."""
    from vllm import SamplingParams

    return [SamplingParams(max_tokens=len(o.outputs[0].token_ids), ignore_eos=True,
                           temperature=0.0) for o in outs]


def _batch32(llm, prompts, params) -> tuple[dict, list]:
    """The 32 requests at once: the row's figures and the outputs."""
    tokens, seconds, outs = _run(llm, prompts, params)
    dec_tokens, dec_s, prefill_steps = _decode(outs)
    return {"batch32_tok_s": tokens / seconds, "batch32_tokens": tokens, "batch32_s": seconds,
            "batch32_decode_tok_s": dec_tokens / dec_s, "batch32_decode_tokens": dec_tokens,
            "batch32_decode_s": dec_s, "prefill_steps": prefill_steps,
            "mean_len": tokens / len(outs)}, outs


def _rounds(llm, prompts, params, rounds: int, match: bool):
    """``rounds`` batch-32 runs of a row, each followed by its matched
    unconstrained run when ``match``: (the row's best round, the best matched
    round or None, the outputs). Best = highest decode tok/s, the round least
    disturbed by other work on the machine; every round's figure is kept in
    ``decode_rounds``."""
    best = best_m = outs = None
    seen, seen_m = [], []
    for _ in range(rounds):
        f, outs = _batch32(llm, prompts, params)
        seen.append(round(f["batch32_decode_tok_s"], 2))
        if best is None or f["batch32_decode_tok_s"] > best["batch32_decode_tok_s"]:
            best = f
        if match:
            m, _ = _batch32(llm, prompts, _matched(outs))
            seen_m.append(round(m["batch32_decode_tok_s"], 2))
            if best_m is None or m["batch32_decode_tok_s"] > best_m["batch32_decode_tok_s"]:
                best_m = m
    best["decode_rounds"] = seen
    if best_m is not None:
        best_m["decode_rounds"] = seen_m
    return best, best_m, outs


def _valid(outs, schemas) -> int:
    """How many outputs are JSON valid under their schema (``jsonschema``)."""
    import jsonschema

    n = 0
    for o, schema in zip(outs, schemas):
        try:
            jsonschema.validate(json.loads(o.outputs[0].text), schema)
            n += 1
        except (ValueError, jsonschema.ValidationError):
            pass
    return n


def child(engine: str, args) -> dict:
    """Start one engine and measure its rows."""
    engine_environment()
    import constrain.engines.vllm as trellis_vllm

    trellis_vllm.configure(json_whitespace="flexible")
    trellis_vllm.register()
    from vllm import LLM

    t0 = time.perf_counter()
    # stats on: RequestOutput.metrics then carries the per-request timestamps
    llm = LLM(model=str(model_dir()), structured_outputs_config={"backend": engine},
              disable_log_stats=False, **ENGINE_KWARGS)
    start = time.perf_counter() - t0
    tok = llm.get_tokenizer()
    pairs = workload()
    prompts = [tok.apply_chat_template([{"role": "user", "content": p}], tokenize=False,
                                       add_generation_prompt=True) for p, _ in pairs]
    schemas = [s for _, s in pairs]
    result = {"engine": engine, "start_s": round(start, 1), "rows": {}}
    for row in ROWS[engine]:
        params = [_params(row, s, args.max_tokens) for s in schemas]
        warm = [_params(row, s, 1) for s in schemas]
        _run(llm, prompts, warm)  # every schema compiled (and cached) before timing
        figures, matched, outs = _rounds(llm, prompts, params, args.rounds,
                                         row != "unconstrained")
        one_tokens, one_seconds, one_dec_tokens, one_dec_s = 0, 0.0, 0, 0.0
        for p, sp in list(zip(prompts, params))[:args.batch1]:
            t, s, one = _run(llm, [p], [sp])
            dec_t, dec_s, _ = _decode(one)
            one_tokens += t
            one_seconds += s
            one_dec_tokens += dec_t
            one_dec_s += dec_s
        figures.update(stopped=sum(o.outputs[0].finish_reason == "stop" for o in outs),
                       valid=None if row == "unconstrained" else _valid(outs, schemas),
                       batch1_tok_s=one_tokens / one_seconds, batch1_tokens=one_tokens,
                       batch1_s=one_seconds, batch1_decode_tok_s=one_dec_tokens / one_dec_s)
        if matched is not None:
            figures["matched"] = matched
        result["rows"][row] = figures
        print(f"# {engine}/{row}: {figures}", file=sys.stderr, flush=True)
    llm.llm_engine.engine_core.shutdown(timeout=30)
    return result


def _ratio(a: float, b: dict | None, key: str) -> str:
    return "-" if b is None else f"{100 * a / b[key]:.1f} %"


def table(rows: dict) -> str:
    """The Markdown table of the rows (the JSON's ``rows`` of all engines)."""
    base, xgr = rows.get("unconstrained"), rows.get("xgrammar")
    lines = ["| configuration | mean output tokens | batch 1 decode tok/s | batch 1 wall tok/s "
             "| batch 32 decode tok/s | batch 32 wall tok/s | decode vs unconstrained "
             "| decode vs matched unconstrained (its tok/s) | decode vs xgrammar "
             "| stopped | valid |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for name in ["unconstrained", "xgrammar", "guidance", "trellis-lp", "trellis-backend"]:
        r = rows.get(name)
        if r is None:
            continue
        dec = r["batch32_decode_tok_s"]
        m = r.get("matched")
        matched = "-" if m is None else f"{_ratio(dec, m, 'batch32_decode_tok_s')} " \
                                        f"({m['batch32_decode_tok_s']:.1f})"
        valid = "-" if r["valid"] is None else f"{r['valid']}/32"
        lines.append(f"| {name} | {r['mean_len']:.1f} | {r['batch1_decode_tok_s']:.1f} "
                     f"| {r['batch1_tok_s']:.1f} | {dec:.1f} | {r['batch32_tok_s']:.1f} "
                     f"| {_ratio(dec, base, 'batch32_decode_tok_s')} | {matched} "
                     f"| {_ratio(dec, xgr, 'batch32_decode_tok_s')} "
                     f"| {r['stopped']}/32 | {valid} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--engines", default="xgrammar,guidance,trellis")
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--batch1", type=int, default=8, help="prompts of the batch-1 run")
    ap.add_argument("--rounds", type=int, default=1,
                    help="batch-32 runs per row (and per matched row); the best is kept")
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--child-out", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        res = child(args.child, args)
        Path(args.child_out).write_text(json.dumps(res))
        os._exit(0)  # the engine is shut down; skip vLLM's slow interpreter teardown
    results = []
    for engine in args.engines.split(","):
        out = Path(f"/tmp/bench_vllm_{os.getpid()}_{engine}.json")
        cmd = [sys.executable, __file__, "--child", engine, "--child-out", str(out),
               "--max-tokens", str(args.max_tokens), "--batch1", str(args.batch1),
               "--rounds", str(args.rounds)]
        rc = subprocess.call(cmd, cwd=REPO)
        if rc != 0 or not out.exists():
            print(f"# {engine}: the engine's run failed (exit {rc}); its rows are missing",
                  file=sys.stderr)
            continue
        results.append(json.loads(out.read_text()))
        out.unlink()
    rows = {name: r for res in results for name, r in res["rows"].items()}
    print(table(rows))
    print("engine starts (s): " + ", ".join(f"{r['engine']} {r['start_s']}" for r in results))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
