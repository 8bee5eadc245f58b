"""Breadth-first vs best-first beam search on the default model (SmolLM2-135M-Instruct).

    python tests/benchmarks/bench_beam.py [--prompts 20 | --select 0,5,...] [--beams 5,10,20]
        [--max-new-tokens 24] [--memo] [--markdown] [--json out.json] [--threads 1]
        [--regex PATTERN | --schema FILE] [--kv-budget-mib MIB]
    python tests/benchmarks/bench_beam.py --summarize a.json b.json ... [--markdown]

For each beam size and each of the first ``--prompts`` fixed prompts (wrapped in the
model's chat template), ``search.beam_search`` and ``search.best_first_beam_search``
run with the same arguments (default ``patience=1``, no length penalty or reward,
``batch_size=1``). Per run it records

* **calls**: the growth of ``lm.calls``, i.e. prefixes scored (the measure the
  drivers' guarantee is about);
* **forwards**: forward passes of the model (``TransformersLM.forward_passes``), and
  **fed**: the tokens they ran (``TransformersLM.tokens_computed``, padding not
  counted). ``TransformersLM.logits`` runs the prefixes of one call in one batched
  pass, each continuing the longest start of it that its KV prefix tree holds, so
  a step of beam search is one forward pass of one token per hypothesis;
* **wall**: seconds, ``time.perf_counter`` around the call, and **cpu**: the
  process's CPU seconds (``time.process_time``) over the same span. On a shared
  machine wall time swings with the load; with one torch thread the CPU time is
  the steadier measure of the work done.

Fairness: the model's KV cache is emptied before every run (otherwise the second
driver would find the first one's prefixes cached), the two drivers alternate
which runs first from prompt to prompt, and one untimed warm-up search runs first.
Torch runs on ``--threads`` threads (1 by default: the numbers are per core).

**Identical** means the best hypothesis of both (``beam_search(...)[0]`` and the
single answer of the best-first search) has the same tokens and scores within
``1e-4``; any difference is listed. The scores are recomputed through different KV
cache paths in the two runs (a prefix continued from its parent's cache vs from an
older ancestor's), so they agree to float32 rounding, not bit for bit.

``--memo`` computes each distinct prefix once (keeping its 64 best entries) and
shares it between both drivers and all beam sizes (see :class:`MemoLM`): the call
counts and answers are those of the real runs, at a fraction of the compute, but
times mean nothing (the table shows ``-``). ``--json`` is rewritten after every
prompt, so several processes (``--select``) can split the prompts and
``--summarize`` joins their tables.

``--regex`` / ``--schema`` run both drivers under a constraint
(``constrain.compile_regex`` / ``compile_json_schema``). Exit status 1 when a
result differs.
"""

from __future__ import annotations

import harness  # the standard library only: the thread settings come before numpy and torch

harness.one_thread(force=False)

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import platform  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

import search  # noqa: E402

PROMPTS = harness.BEAM_PROMPTS
WARMUP_PROMPT = "Say hi."
SCORE_TOL = 1e-4


class ForwardCounter:
    """Reads the model's own counters: ``forward_passes`` (model invocations) and
    ``tokens_computed`` (the tokens they ran, padding not counted)."""

    def __init__(self, lm):
        self.lm = lm

    @property
    def passes(self) -> int:
        return self.lm.forward_passes

    @property
    def tokens(self) -> int:
        return self.lm.tokens_computed


class MemoLM:
    """The LM protocol over a ``TransformersLM`` that computes each prefix's row
    once per process and keeps only its ``keep`` best entries (the rest ``-inf``).

    Unconstrained, a driver with ``beam_size <= keep`` keeps only the ``beam_size``
    best children of a hypothesis, so it sees the same hypotheses and scores as
    with full rows; both drivers and all beam sizes then share one model
    computation per distinct prefix (the two drivers score mostly the same
    prefixes), and both see bit-identical scores. ``calls`` still counts every
    prefix a driver asks for, as ``TransformersLM.calls`` does; times measured
    through it mean nothing."""

    def __init__(self, lm, keep: int = 64):
        from search.lm.protocol import TransformersLMAdapter

        self.inner = TransformersLMAdapter(lm)
        self.vocab_size = self.inner.vocab_size
        self.eos_token_ids = self.inner.eos_token_ids
        self.keep = keep
        self.calls = 0
        self.memo: dict = {}

    def logprobs(self, prefixes):
        out = np.full((len(prefixes), self.vocab_size), -np.inf, dtype=np.float32)
        for i, p in enumerate(prefixes):
            p = tuple(int(t) for t in p)
            hit = self.memo.get(p)
            if hit is None:
                row = self.inner.logprobs([p])[0]
                top = np.argpartition(-row, self.keep)[: self.keep]
                hit = self.memo[p] = (top, row[top])
            out[i, hit[0]] = hit[1]
        self.calls += len(prefixes)
        return out

    def clear_cache(self):
        """Nothing to forget: the memo is the point."""


def run_one(driver, lm, fc, ids, k, T, constraint):
    """One search from an empty KV cache: (best hypothesis, calls, forwards, tokens
    fed, wall seconds, CPU seconds, the KV tree's peak bytes)."""
    lm.clear_cache()
    c0, p0, f0 = lm.calls, fc.passes, fc.tokens
    t0, u0 = time.perf_counter(), time.process_time()
    out = driver(lm, ids, beam_size=k, max_new_tokens=T, constraint=constraint)
    wall, cpu = time.perf_counter() - t0, time.process_time() - u0
    tree = getattr(fc.lm, "kv_tree", None)
    peak = tree.peak_nbytes if tree is not None else 0
    return out[0], lm.calls - c0, fc.passes - p0, fc.tokens - f0, wall, cpu, peak


def dump(path, lm, T, args, beams, load0, records, load1=None):
    """Write the runs so far as JSON."""
    with open(path, "w", encoding="utf-8") as f:
        json.dump({"model": lm.name, "max_new_tokens": T, "threads": args.threads, "beams": beams,
                   "regex": args.regex, "schema": args.schema, "load_start": load0, "load_end": load1,
                   "runs": records}, f, indent=1)


def summary(records, beams, markdown):
    """The table: one row per beam size, totals over the prompts."""
    rows = [["beam", "calls beam", "calls best-first", "calls ratio", "forwards beam", "forwards best-first",
             "tokens fed beam", "tokens fed best-first", "wall beam (s)", "wall best-first (s)", "wall ratio",
             "cpu beam (s)", "cpu best-first (s)", "cpu ratio", "KV peak MiB", "identical"]]
    for k in beams:
        rs = [r for r in records if r["beam_size"] == k]

        def tot(name, key):
            return sum(r[name][key] for r in rs)

        rows.append([str(k), str(tot("beam", "calls")), str(tot("best-first", "calls")),
                     f"{tot('beam', 'calls') / max(1, tot('best-first', 'calls')):.2f}",
                     str(tot("beam", "forwards")), str(tot("best-first", "forwards")),
                     str(tot("beam", "fed")), str(tot("best-first", "fed")),
                     f"{tot('beam', 'wall_s'):.1f}", f"{tot('best-first', 'wall_s'):.1f}",
                     f"{tot('beam', 'wall_s') / max(1e-9, tot('best-first', 'wall_s')):.2f}",
                     f"{tot('beam', 'cpu_s'):.1f}", f"{tot('best-first', 'cpu_s'):.1f}",
                     f"{tot('beam', 'cpu_s') / max(1e-9, tot('best-first', 'cpu_s')):.2f}",
                     f"{max(r[d].get('kv_peak_bytes', 0) for r in rs for d in ('beam', 'best-first')) / 2**20:.1f}",
                     f"{sum(r['identical'] for r in rs)}/{len(rs)}"])
        if any(r.get("memo") for r in rs):  # shared computation: forwards and times are not per driver
            rows[-1][4:15] = ["-"] * 11
    return harness.fmt_table(rows, markdown)


def main() -> None:
    """Run both drivers on every prompt and beam size, print the summary table."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    harness.add_model_args(ap, PROMPTS, "both drivers")
    ap.add_argument("--beams", default="5,10,20", help="comma-separated beam sizes")
    ap.add_argument("--markdown", action="store_true", help="print the summary as a markdown table")
    ap.add_argument("--json", help="write every run's numbers here")
    ap.add_argument("--kv-budget-mib", type=float, default=None,
                    help="the model's KV prefix tree budget (TransformersLM.kv_cache_bytes), MiB")
    ap.add_argument("--quiet", "-q", action="store_true", help="no per-prompt lines")
    ap.add_argument("--memo", action="store_true",
                    help="score each distinct prefix once for both drivers and all beam sizes (calls and "
                         "identity only; no meaningful times; unconstrained, beam sizes <= 64)")
    ap.add_argument("--summarize", nargs="+", metavar="JSON",
                    help="print the table of earlier --json outputs (e.g. beam sizes run apart) and exit")
    args = ap.parse_args()
    if args.summarize:
        records = [r for path in args.summarize for r in json.load(open(path, encoding="utf-8"))["runs"]]
        beams = sorted({r["beam_size"] for r in records})
        print(summary(records, beams, args.markdown))
        return
    idx = harness.prompt_indices(ap, args, PROMPTS)
    beams = [int(b) for b in args.beams.split(",") if b.strip()]

    import torch

    torch.set_num_threads(args.threads)
    lm = search.load_default_model()
    if args.kv_budget_mib is not None:
        lm.kv_cache_bytes = int(args.kv_budget_mib * 2**20)
    constraint = harness.load_constraint(args, lm)
    fc = ForwardCounter(lm)
    if args.memo:
        if constraint is not None or max(beams) > 64:
            ap.error("--memo needs no constraint and beam sizes <= 64")
        lm_run = MemoLM(lm)
    else:
        lm_run = lm
    drivers = {"beam": search.beam_search, "best-first": search.best_first_beam_search}
    T = args.max_new_tokens
    prompts = [PROMPTS[i] for i in idx]
    load0 = os.getloadavg()
    print(f"# {lm.name}, torch {torch.__version__} ({args.threads} thread(s)), {platform.processor() or platform.machine()}, "
          f"{len(prompts)} prompts, max_new_tokens={T}, beams {beams}{', memo' if args.memo else ''}"
          + harness.constraint_note(args)
          + f"; load average at start {load0[0]:.2f}", flush=True)

    wids = lm.apply_chat_template(WARMUP_PROMPT)
    for d in drivers.values():
        run_one(d, lm_run, fc, wids, 2, 4, constraint)

    records = []
    # prompt-major, so that an interrupted run has every beam size for the prompts it did
    for i, prompt in enumerate(prompts):
        harness.log(f"prompt {i + 1}/{len(prompts)}: {prompt!r}")
        ids = lm.apply_chat_template(prompt)
        for k in beams:
            order = list(drivers) if i % 2 == 0 else list(drivers)[::-1]
            res = {}
            for name in order:
                res[name] = run_one(drivers[name], lm_run, fc, ids, k, T, constraint)
            hb, hf = res["beam"][0], res["best-first"][0]
            same_tokens = hb.tokens == hf.tokens
            dscore = abs(hb.score - hf.score)
            rec = {"beam_size": k, "prompt": prompt, "prompt_tokens": len(ids), "memo": args.memo,
                   "identical": same_tokens and dscore <= SCORE_TOL, "same_tokens": same_tokens,
                   "score_diff": dscore}
            for name, (h, calls, passes, fed, wall, cpu, peak) in res.items():
                rec[name] = {"calls": calls, "forwards": passes, "fed": fed, "wall_s": wall, "cpu_s": cpu,
                             "kv_peak_bytes": peak,
                             "tokens": list(h.tokens), "score": h.score, "finished": h.finished,
                             "text": lm.decode(h.tokens)}
            records.append(rec)
            if args.json:  # after every prompt, so that an interrupted run keeps what it measured
                dump(args.json, lm, T, args, beams, load0, records)
            if not args.quiet:
                b, f = rec["beam"], rec["best-first"]
                print(f"k={k:<3} #{idx[i]:<2} calls {b['calls']:5d} / {f['calls']:5d}  wall {b['wall_s']:6.2f} / "
                      f"{f['wall_s']:6.2f} s  cpu {b['cpu_s']:6.2f} / {f['cpu_s']:6.2f} s  len {len(hb.tokens):2d}{'E' if hb.finished else ' '}  "
                      f"{'same' if rec['identical'] else 'DIFFERENT'}  {hb.score:9.4f}  {lm.decode(hb.tokens)!r}",
                      flush=True)
                if not rec["identical"]:
                    print(f"      best-first: {hf.score:9.4f} {lm.decode(hf.tokens)!r} (|d score| {dscore:.2e})",
                          flush=True)

    load1 = os.getloadavg()
    print()
    print(summary(records, beams, args.markdown))
    print(f"\nratios: beam_search / best_first_beam_search (totals over the prompts); "
          f"load average at end {load1[0]:.2f}")
    diffs = [r for r in records if not r["identical"]]
    for r in diffs:
        print(f"DIFFERENT: k={r['beam_size']} {r['prompt']!r}: beam {r['beam']['score']:.6f} {r['beam']['text']!r} "
              f"vs best-first {r['best-first']['score']:.6f} {r['best-first']['text']!r}")
    if args.json:
        dump(args.json, lm, T, args, beams, load0, records, load1)
    sys.exit(1 if diffs else 0)


if __name__ == "__main__":
    main()
