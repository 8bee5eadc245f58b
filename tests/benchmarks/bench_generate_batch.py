"""search.generate_batch against one search.generate call per prompt, with the
default model: the same texts, and the tokens/s of each.

    python tests/benchmarks/bench_generate_batch.py [--prompts 16] [--max-new-tokens 24]
        [--temperature 0] [--markdown] [--plot DIR] [--repeat N]

Prompts cycle through four constraints: a phone-number regex, a closed JSON
Schema object, a choice of three words, and none. Every decoding step counts
one token per row (EOS included). Both sides run on the same torch threads;
the single calls go first, so any compile is paid there, not by the batch.
``--plot DIR`` writes ``generate_tokens_per_second.png``: the decoding tokens/s
of the single ``generate`` calls (prefill excluded; summed steps over summed
decoding seconds of the prompts of each kind; with ``--repeat N`` the best of N
runs) for each constraint kind against none (needs matplotlib, the ``plots``
extra).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
from harness import decode_rate, environment, fmt, fmt_table, git_rev, log  # noqa: E402

PERSON = {"type": "object", "additionalProperties": False, "required": ["name", "age"],
          "properties": {"name": {"type": "string", "maxLength": 12}, "age": {"type": "integer"}}}
QUESTIONS = ["Give me a phone number for shop {}.", "Describe person number {} as JSON.",
             "Is the sky blue? Answer for case {}.", "Write a haiku about the number {}."]
KINDS = ["regex", "json schema", "choice", "none"]


def _rate(results, kind: str) -> float:
    """Decoding steps per second of the rows of one constraint kind (rows cycle
    through :data:`KINDS`), prefill excluded."""
    return decode_rate([r for i, r in enumerate(results) if KINDS[i % 4] == kind])


def main(argv=None) -> int:
    """Run the comparison and print its table."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--max-new-tokens", type=int, default=24)
    ap.add_argument("--temperature", type=float, default=0.0)
    ap.add_argument("--markdown", action="store_true")
    ap.add_argument("--plot", default="", metavar="DIR", help="write generate_tokens_per_second.png into DIR")
    ap.add_argument("--repeat", type=int, default=1,
                    help="run the single calls this many times more for the per-kind rates, each kind's "
                         "best run kept (a shared machine's load only ever slows a run down)")
    args = ap.parse_args(argv)

    import constrain
    import search

    log("loading the default model")
    lm = search.load_default_model()
    cons = [constrain.compile_regex(r"[0-9]{3}-[0-9]{4}", lm.vocab),
            constrain.compile_json_schema(PERSON, lm.vocab),
            constrain.compile_choice(["yes", "no", "maybe"], lm.vocab), None]
    prompts = [QUESTIONS[i % 4].format(i // 4) for i in range(args.prompts)]
    rows = [cons[i % 4] for i in range(args.prompts)]
    kw = dict(max_new_tokens=args.max_new_tokens, temperature=args.temperature, seed=0)
    search.generate(lm, "warm up", max_new_tokens=2)

    log(f"{args.prompts} single generate calls")
    t = time.perf_counter()
    single = [search.generate(lm, p, constraint=c, **kw) for p, c in zip(prompts, rows)]
    t_single = time.perf_counter() - t
    log(f"one generate_batch call of {args.prompts} rows")
    t = time.perf_counter()
    batch = search.generate_batch(lm, prompts, constraints=rows, **kw)
    t_batch = time.perf_counter() - t

    same = [a.text == b.text and a.token_ids == b.token_ids for a, b in zip(single, batch)]
    steps = sum(r.num_steps for r in single)
    table = [["call", "rows", "steps", "seconds", "tokens/s", "same texts"],
             [f"{args.prompts} x generate", str(args.prompts), str(steps), fmt(t_single),
              fmt(steps / t_single, 1), "-"],
             ["generate_batch", str(args.prompts), str(sum(r.num_steps for r in batch)),
              fmt(t_batch), fmt(sum(r.num_steps for r in batch) / t_batch, 1),
              f"{sum(same)}/{len(same)}"]]
    env = environment({})
    print(f"# generate_batch vs generate, Trellis {git_rev()}, {env['cpu']}, {env['cores']} cores, "
          f"load {env['loadavg_start']}, temperature {args.temperature}, "
          f"max_new_tokens {args.max_new_tokens}")
    print(fmt_table(table, args.markdown))
    for kind in KINDS:
        n = sum(1 for i, ok in enumerate(same) if ok and KINDS[i % 4] == kind)
        print(f"  {kind}: {n}/{sum(1 for i in range(len(same)) if KINDS[i % 4] == kind)} identical")
    for a, b in zip(single, batch):
        if a.text != b.text:
            print(f"  differs: {a.text!r} vs {b.text!r}")
    reruns = [single]
    for k in range(args.repeat - 1):
        log(f"single generate calls again ({k + 2}/{args.repeat})")
        reruns.append([search.generate(lm, p, constraint=c, **kw) for p, c in zip(prompts, rows)])
    rates = [(kind, max(_rate(run, kind) for run in reruns), _rate(batch, kind)) for kind in KINDS]
    print(fmt_table([["constraint", f"tokens/s, generate (best of {args.repeat})", "tokens/s per row, generate_batch"]]
                    + [[k, fmt(a, 1), fmt(b, 1)] for k, a, b in rates], args.markdown))
    if args.plot:
        import plots

        env["loadavg_end"] = [round(x, 2) for x in os.getloadavg()]
        title = (f"SmolLM2-135M, {args.prompts} prompts, {args.max_new_tokens} new tokens at most, "
                 f"best of {args.repeat}; "
                 f"{plots.load_note(env).split(',')[0]}")
        out = os.path.join(args.plot, "generate_tokens_per_second.png")
        log(f"wrote {plots.tokens_per_second([(k, a) for k, a, _ in rates], out, title)}")
    return 0 if all(same) else 1


if __name__ == "__main__":
    sys.exit(main())
