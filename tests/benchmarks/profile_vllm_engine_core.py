"""Where a vLLM decoding step's structured-output time goes, per backend.

    .venv-vllm/bin/python tests/benchmarks/profile_vllm_engine_core.py
        [--engines trellis,xgrammar] [--max-tokens 128] [--rounds 2]

One engine per backend (``trellis``: the Trellis backend route; ``xgrammar``,
``guidance``: vLLM's own), each in a child process that runs vLLM's engine core
in-process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``), so that the scheduler's and
the grammar's methods can be timed where they run: the grammar's
``fill_bitmask``, ``accept_tokens`` and ``is_terminated``, the
``StructuredOutputManager``'s ``grammar_bitmask`` (every row's mask of a step)
and ``accept_tokens``, the scheduler's ``schedule`` and ``update_from_output``,
and the model runner's ``apply_grammar_bitmask``. The workload is
``bench_vllm.py``'s: 32 prompts over 13 schemas at once, greedy, the flexible
JSON style, every schema compiled by a one-token run first. Round 1 walks
every request's states for the first time (first visits); later rounds repeat
the same greedy outputs, so their masks are warm.

Printed per round: tokens, wall seconds and decode tokens/s (as
``bench_vllm.py`` computes it), then each timed method's calls, total and
time per call. Compare a row's total with the round's wall time: that share is
what the constraint costs the step, whatever the decode rate (which moves with
the load of the machine).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import bench_vllm  # noqa: E402  (puts the repository and tests/vllm on sys.path)
from vllm_testing import ENGINE_KWARGS, engine_environment, model_dir  # noqa: E402

#: the grammar class of each backend, as (module, class)
GRAMMARS = {"trellis": ("constrain.engines.vllm.backend", "TrellisGrammar"),
            "xgrammar": ("vllm.v1.structured_output.backend_xgrammar", "XgrammarGrammar"),
            "guidance": ("vllm.v1.structured_output.backend_guidance", "GuidanceGrammar")}


def _timed(owner, name: str, label: str, acc: dict) -> None:
    """Replace ``owner.name`` by a wrapper adding its calls and seconds to ``acc[label]``."""
    f = getattr(owner, name)

    def wrapper(*args, **kwargs):
        t = time.perf_counter()
        try:
            return f(*args, **kwargs)
        finally:
            entry = acc.setdefault(label, [0, 0.0])
            entry[0] += 1
            entry[1] += time.perf_counter() - t

    setattr(owner, name, wrapper)


def child(engine: str, max_tokens: int, rounds: int) -> list[dict]:
    """One engine: the rounds' figures."""
    import importlib

    engine_environment()
    import constrain.engines.vllm as trellis_vllm

    trellis_vllm.configure(json_whitespace="flexible")
    trellis_vllm.register()
    import vllm.v1.structured_output as so
    import vllm.v1.worker.gpu_model_runner as runner
    from vllm import LLM
    from vllm.v1.core.sched.scheduler import Scheduler

    acc: dict = {}
    _timed(so.StructuredOutputManager, "grammar_bitmask", "manager.grammar_bitmask", acc)
    _timed(so.StructuredOutputManager, "accept_tokens", "manager.accept_tokens", acc)
    _timed(Scheduler, "schedule", "scheduler.schedule", acc)
    _timed(Scheduler, "update_from_output", "scheduler.update_from_output", acc)
    if hasattr(runner, "apply_grammar_bitmask"):
        _timed(runner, "apply_grammar_bitmask", "runner.apply_grammar_bitmask", acc)
    module, name = GRAMMARS[engine]
    grammar = getattr(importlib.import_module(module), name)
    for method in ("fill_bitmask", "accept_tokens", "is_terminated"):
        _timed(grammar, method, f"grammar.{method}", acc)
    llm = LLM(model=str(model_dir()), structured_outputs_config={"backend": engine},
              disable_log_stats=False, **ENGINE_KWARGS)
    tok = llm.get_tokenizer()
    pairs = bench_vllm.workload()
    prompts = [tok.apply_chat_template([{"role": "user", "content": p}], tokenize=False,
                                       add_generation_prompt=True) for p, _ in pairs]
    row = "trellis-backend" if engine == "trellis" else engine
    params = [bench_vllm._params(row, s, max_tokens) for _, s in pairs]
    bench_vllm._run(llm, prompts, [bench_vllm._params(row, s, 1) for _, s in pairs])
    out = []
    for _ in range(rounds):
        acc.clear()
        tokens, seconds, outs = bench_vllm._run(llm, prompts, params)
        dec_tokens, dec_s, _ = bench_vllm._decode(outs)
        out.append({"tokens": tokens, "wall_s": seconds, "decode_tok_s": dec_tokens / dec_s,
                    "calls": {k: {"n": n, "s": s} for k, (n, s) in sorted(acc.items())}})
    llm.llm_engine.engine_core.shutdown(timeout=30)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--engines", default="trellis,xgrammar")
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
        print(json.dumps(child(args.child, args.max_tokens, args.rounds)), flush=True)
        return
    for engine in args.engines.split(","):
        if engine not in GRAMMARS:
            ap.error(f"unknown engine {engine!r} (one of {', '.join(GRAMMARS)})")
        env = dict(os.environ, VLLM_ENABLE_V1_MULTIPROCESSING="0")
        res = subprocess.run([sys.executable, __file__, "--child", engine, "--max-tokens",
                              str(args.max_tokens), "--rounds", str(args.rounds)],
                             env=env, stdout=subprocess.PIPE, text=True, check=True)
        for k, r in enumerate(json.loads(res.stdout.strip().splitlines()[-1]), 1):
            print(f"{engine} round {k}: {r['tokens']} tokens in {r['wall_s']:.1f} s, "
                  f"decode {r['decode_tok_s']:.1f} tok/s")
            for name, c in r["calls"].items():
                print(f"  {name:30s} {c['n']:6d} calls  {c['s'] * 1e3:9.1f} ms  "
                      f"{c['s'] / c['n'] * 1e6:8.1f} us/call  "
                      f"{100 * c['s'] / r['wall_s']:5.2f} % of the round")


if __name__ == "__main__":
    main()
