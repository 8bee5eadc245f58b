"""Lexically constrained beam search vs plain beam search on the default model.

    python tests/benchmarks/bench_constrained_beam.py [--prompts 50 | --select 0,5,...] [--beam 4]
        [--max-new-tokens 24] [--mode free|schema|both] [--json out.json] [--threads 1]
    python tests/benchmarks/bench_constrained_beam.py --summarize a.json b.json ... [--markdown]

50 fixed prompts (``CASES``), each with 1-3 phrases that fit it (some with
disjunctive alternatives), wrapped in the model's chat template. For each prompt
``search.constrained_beam_search`` (the phrases) and ``search.beam_search`` (no
phrases) run with the same ``beam_size`` and ``max_new_tokens``, and in

* ``free`` mode with no grammar;
* ``schema`` mode under the JSON Schema ``SCHEMA`` (an object with one string
  ``text`` of at most 80 characters, compiled with
  ``constrain.compile_json_schema``), the prompt asking for that JSON, both
  drivers constrained by it (the phrases then sit inside the string).

Per run it records the best hypothesis (``[0]``): its score (the sum of the
model's log-probabilities of its tokens, EOS included), its length, whether it
ended (EOS), whether its text contains every phrase (one alternative of each;
the constrained driver guarantees it), and in ``schema`` mode whether its text
parses as JSON valid for the schema (``jsonschema``); and the model calls
(prefixes scored), wall seconds (``time.perf_counter``) and CPU seconds
(``time.process_time``) of the call. The model's KV cache is emptied before
every run, the two drivers alternate which runs first, and one untimed warm-up
search of each runs first. Torch runs on ``--threads`` threads (1: per core).

``--json`` is rewritten after every prompt, so an interrupted run keeps what it
measured and several processes (``--select``) can split the prompts;
``--summarize`` joins their tables. Exit status 1 when a constrained output
misses a phrase, or (schema mode) one that ended is not valid.
"""

from __future__ import annotations

import harness  # the standard library only: the thread settings come before numpy and torch

harness.one_thread(force=False)

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

import search  # noqa: E402

#: (prompt, phrases): a phrase is a text or a list of alternatives (one must occur)
CASES = [
    ("Write a sentence about France.", ["Paris"]),
    ("Write a sentence about Italy.", ["Rome", "pasta"]),
    ("Describe a sunny day at the beach.", ["sand"]),
    ("Tell me about your favourite animal.", ["dog", ["loyal", "friendly"]]),
    ("Write a short note to a friend.", ["thank you"]),
    ("Describe a winter morning.", ["snow", "cold"]),
    ("Say something about the ocean.", ["waves"]),
    ("Write a sentence about Japan.", ["Tokyo"]),
    ("Describe a busy city.", [["big city", "metropolis"], "traffic"]),
    ("Write a sentence about coffee.", ["morning"]),
    ("Tell me about the moon.", ["night", "bright"]),
    ("Describe a forest.", ["trees"]),
    ("Write a sentence about music.", ["guitar"]),
    ("Describe your breakfast.", ["eggs", "toast"]),
    ("Tell me about Germany.", ["Berlin"]),
    ("Write a sentence about books.", ["library"]),
    ("Describe a rainy afternoon.", ["umbrella"]),
    ("Tell me about the sun.", ["star", "hot"]),
    ("Write a sentence about a cat.", ["sleeps"]),
    ("Describe a mountain.", ["snow", "peak", "climb"]),
    ("Write a sentence about Spain.", ["Madrid"]),
    ("Tell me about computers.", ["software"]),
    ("Describe a garden in spring.", ["flowers", "bloom"]),
    ("Write a sentence about football.", ["goal"]),
    ("Tell me about London.", ["river", ["rain", "fog"]]),
    ("Describe a birthday party.", ["cake"]),
    ("Write a sentence about the desert.", ["sand", "dry"]),
    ("Tell me about bees.", ["honey"]),
    ("Describe an old house.", ["door", "window"]),
    ("Write a sentence about the sky.", ["blue"]),
    ("Tell me about trains.", ["station"]),
    ("Describe a school classroom.", ["teacher", "students"]),
    ("Write a sentence about Egypt.", ["pyramids"]),
    ("Tell me about the weather today.", ["warm"]),
    ("Describe a kitchen.", ["stove", "knife", "table"]),
    ("Write a sentence about summer.", ["holiday"]),
    ("Tell me about birds.", ["fly", "wings"]),
    ("Describe a river.", ["water"]),
    ("Write a sentence about a doctor.", ["hospital"]),
    ("Tell me about chess.", ["king", ["game", "board"]]),
    ("Describe a painting.", ["colors"]),
    ("Write a sentence about apples.", ["red", "tree"]),
    ("Tell me about space travel.", ["rocket"]),
    ("Describe a night in the city.", ["lights"]),
    ("Write a sentence about a bicycle.", ["ride"]),
    ("Tell me about the sea.", ["fish", "boat", "salt"]),
    ("Describe a farm.", ["cows"]),
    ("Write a sentence about friendship.", ["trust"]),
    ("Tell me about autumn.", ["leaves", ["orange", "golden"]]),
    ("Write a sentence about Canada.", ["Toronto", "maple"]),
]
assert len(CASES) == 50

SCHEMA = {"type": "object", "properties": {"text": {"type": "string", "maxLength": 80}},
          "required": ["text"], "additionalProperties": False}
SCHEMA_SUFFIX = ' Answer in JSON with one key, "text".'
WARMUP_PROMPT = "Say hi."


def contains_all(text: str, phrases) -> bool:
    """Whether ``text`` contains every phrase (one alternative of a list)."""
    return all(any(a in text for a in ([p] if isinstance(p, str) else p)) for p in phrases)


def valid_json(text: str) -> bool:
    """Whether ``text`` is a JSON document valid for :data:`SCHEMA`."""
    import jsonschema

    try:
        jsonschema.validate(json.loads(text), SCHEMA)
    except (ValueError, jsonschema.ValidationError):
        return False
    return True


def run_one(driver, lm, ids, kwargs):
    """One search from an empty KV cache: (best hypothesis or None, calls, wall s, CPU s)."""
    lm.clear_cache()
    c0 = lm.calls
    t0, u0 = time.perf_counter(), time.process_time()
    out = driver(lm, ids, **kwargs)
    wall, cpu = time.perf_counter() - t0, time.process_time() - u0
    return (out[0] if out else None), lm.calls - c0, wall, cpu


def record(h, lm, phrases, calls, wall, cpu, schema: bool) -> dict:
    """The numbers of one run."""
    if h is None:
        return {"output": False, "calls": calls, "wall_s": wall, "cpu_s": cpu}
    text = lm.decode(h.token_ids)
    return {"output": True, "tokens": list(h.tokens), "text": text, "score": h.score, "length": len(h.tokens),
            "finished": h.finished, "contains": contains_all(text, phrases),
            "valid": valid_json(text) if schema else None, "calls": calls, "wall_s": wall, "cpu_s": cpu}


def summary(records, markdown: bool) -> str:
    """One row per mode and driver, totals and means over the prompts."""
    rows = [["mode", "driver", "prompts", "outputs", "contain every phrase", "ended (EOS)", "valid JSON",
             "mean log-prob", "mean log-prob / token", "mean length", "calls", "wall s", "CPU s"]]
    for mode in ("free", "schema"):
        rs = [r for r in records if r["mode"] == mode]
        if not rs:
            continue
        for name in ("constrained", "beam"):
            xs = [r[name] for r in rs]
            out = [x for x in xs if x["output"]]
            n = len(out)
            rows.append([mode, name, str(len(xs)), str(n),
                         f"{sum(x['contains'] for x in out)}/{n}", f"{sum(x['finished'] for x in out)}/{n}",
                         f"{sum(bool(x['valid']) for x in out)}/{n}" if mode == "schema" else "-",
                         f"{sum(x['score'] for x in out) / max(1, n):.2f}",
                         f"{sum(x['score'] / x['length'] for x in out) / max(1, n):.3f}",
                         f"{sum(x['length'] for x in out) / max(1, n):.1f}",
                         str(sum(x["calls"] for x in xs)), f"{sum(x['wall_s'] for x in xs):.1f}",
                         f"{sum(x['cpu_s'] for x in xs):.1f}"])
    return harness.fmt_table(rows, markdown)


def failures(records) -> list[str]:
    """The constrained runs that break the guarantee (a missing phrase, an ended
    schema output that is not valid, no output at all)."""
    bad = []
    for r in records:
        c = r["constrained"]
        if not c["output"]:
            bad.append(f"{r['mode']} #{r['index']}: no output")
        elif not c["contains"]:
            bad.append(f"{r['mode']} #{r['index']}: misses a phrase: {c['text']!r}")
        elif r["mode"] == "schema" and c["finished"] and not c["valid"]:
            bad.append(f"{r['mode']} #{r['index']}: not valid: {c['text']!r}")
    return bad


def main() -> None:
    """Run both drivers on every prompt and mode, print the summary table."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--prompts", type=int, default=len(CASES), help=f"how many of the {len(CASES)} prompts")
    ap.add_argument("--select", help="comma-separated prompt indices (0-based) instead of --prompts")
    ap.add_argument("--beam", type=int, default=4, help="beam size of both drivers")
    ap.add_argument("--max-new-tokens", type=int, default=24)
    ap.add_argument("--mode", choices=("free", "schema", "both"), default="both")
    ap.add_argument("--threads", type=int, default=1, help="torch threads")
    ap.add_argument("--markdown", action="store_true", help="print the summary as a markdown table")
    ap.add_argument("--json", help="write every run's numbers here")
    ap.add_argument("--quiet", "-q", action="store_true", help="no per-prompt lines")
    ap.add_argument("--summarize", nargs="+", metavar="JSON", help="print the table of earlier --json outputs")
    args = ap.parse_args()
    if args.summarize:
        records = [r for path in args.summarize for r in json.load(open(path, encoding="utf-8"))["runs"]]
        print(summary(records, args.markdown))
        bad = failures(records)
        print("\n".join(bad))
        sys.exit(1 if bad else 0)
    if not 1 <= args.prompts <= len(CASES):
        ap.error(f"--prompts must be between 1 and {len(CASES)}")
    idx = [int(i) for i in args.select.split(",")] if args.select else list(range(args.prompts))
    modes = ["free", "schema"] if args.mode == "both" else [args.mode]

    import torch

    import constrain

    torch.set_num_threads(args.threads)
    lm = search.load_default_model()
    grammar = constrain.compile_json_schema(SCHEMA, lm.vocab) if "schema" in modes else None
    k, T = args.beam, args.max_new_tokens
    load0 = os.getloadavg()
    print(f"# {lm.name}, torch {torch.__version__} ({args.threads} thread(s)), {len(idx)} prompts, "
          f"beam {k}, max_new_tokens={T}, modes {modes}; load average at start {load0[0]:.2f}", flush=True)

    wids = lm.apply_chat_template(WARMUP_PROMPT)
    run_one(search.constrained_beam_search, lm, wids, dict(phrases=["hi"], beam_size=2, max_new_tokens=4))
    run_one(search.beam_search, lm, wids, dict(beam_size=2, max_new_tokens=4))

    records = []
    for j, i in enumerate(idx):
        prompt, phrases = CASES[i]
        for mode in modes:
            schema = mode == "schema"
            constraint = grammar if schema else None
            ids = lm.apply_chat_template(prompt + (SCHEMA_SUFFIX if schema else ""))
            runs = {"constrained": (search.constrained_beam_search,
                                    dict(phrases=phrases, beam_size=k, max_new_tokens=T, constraint=constraint)),
                    "beam": (search.beam_search, dict(beam_size=k, max_new_tokens=T, constraint=constraint))}
            order = list(runs) if j % 2 == 0 else list(runs)[::-1]
            rec = {"index": i, "prompt": prompt, "phrases": phrases, "mode": mode}
            for name in order:
                driver, kwargs = runs[name]
                rec[name] = measure(driver, lm, ids, kwargs, phrases, schema)
            records.append(rec)
            if args.json:
                dump(args.json, lm, args, load0, records)
            if not args.quiet:
                c, b = rec["constrained"], rec["beam"]
                print(f"{mode:6} #{i:<2} calls {c['calls']:4d} / {b['calls']:4d}  wall {c['wall_s']:6.2f} / "
                      f"{b['wall_s']:6.2f} s  score {c.get('score', float('nan')):8.3f} / "
                      f"{b.get('score', float('nan')):8.3f}  {c.get('text')!r}  |  {b.get('text')!r}", flush=True)
    load1 = os.getloadavg()
    print()
    print(summary(records, args.markdown))
    print(f"\nload average at end {load1[0]:.2f}")
    bad = failures(records)
    print("\n".join(bad))
    if args.json:
        dump(args.json, lm, args, load0, records, load1)
    sys.exit(1 if bad else 0)


def measure(driver, lm, ids, kwargs, phrases, schema: bool) -> dict:
    """One run of ``driver`` and its :func:`record`."""
    h, calls, wall, cpu = run_one(driver, lm, ids, kwargs)
    return record(h, lm, phrases, calls, wall, cpu, schema)


def dump(path, lm, args, load0, records, load1=None) -> None:
    """Write the runs so far as JSON."""
    with open(path, "w", encoding="utf-8") as f:
        json.dump({"model": lm.name, "beam": args.beam, "max_new_tokens": args.max_new_tokens,
                   "threads": args.threads, "load_start": load0, "load_end": load1,
                   "env": harness.environment({}), "runs": records}, f, indent=1)


if __name__ == "__main__":
    main()
