"""What the benchmark and check scripts share: the one-thread set-up, the timed
call and the clocks' own cost, the run's environment, the geometric mean, number
and table formatting, and the command-line pieces of the scripts that run the default model.

Importing it puts the repository root on ``sys.path`` (the scripts run from a
checkout, which may not be the installed one) and loads nothing outside the
standard library, so that a script can call :func:`one_thread` before numpy,
numba, torch or an engine reads its thread settings.
"""

from __future__ import annotations

import gc
import importlib.metadata
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

perf_ns = time.perf_counter_ns
#: CPU time of the whole process (every thread): immune to the preemption that
#: inflates wall-clock tails on a shared machine
cpu_ns = time.process_time_ns

#: gc.collect() right before each timed call (cold caches); the scripts'
#: --no-gc-flush turns it off
GC_FLUSH = True

THREAD_VARS = (
    "RAYON_NUM_THREADS",
    "NUMBA_NUM_THREADS",
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "TVM_NUM_THREADS",
)


# Mostly requests with short answers, so that hypotheses end within the token
# limit and the stopping rule (and best-first's early exit) matters; a few open
# ones that run to the limit.
#: the prompts of the scripts that run search drivers on the default model
#: (bench_beam.py, bench_vllm_lm.py)
BEAM_PROMPTS = [
    "What is the capital of France? Answer in one word.",
    "How many legs does a spider have?",
    "Name a primary color.",
    "What is 7 times 8?",
    "Who wrote Romeo and Juliet?",
    "Translate 'thank you' into Spanish.",
    "Give me a synonym for 'happy'.",
    "What is the chemical symbol for gold?",
    "Write a haiku about the sea.",
    "Suggest a name for a pet goldfish.",
    "Is the sun a star? Answer yes or no.",
    "What color is the sky on a clear day?",
    "Write one sentence about autumn.",
    "What is the largest planet in our solar system?",
    "Say hello in French.",
    "What is the boiling point of water in Celsius?",
    "Tell me a fun fact about cats.",
    "Complete the sentence: The early bird catches the",
    "What day comes after Monday?",
    "Describe a sunset in five words.",
]


def one_thread(force: bool = True) -> None:
    """Every native thread pool (Rayon, numba, OpenMP, MKL, OpenBLAS, TVM) to one
    thread, and no tokenizer parallelism; effective only before the library that
    reads the variable is imported. ``force=False`` keeps a value the caller's
    environment already sets."""
    for var in THREAD_VARS:
        if force:
            os.environ[var] = "1"
        else:
            os.environ.setdefault(var, "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def torch_one_thread() -> None:
    """``torch.set_num_threads(1)`` where torch is installed."""
    try:
        import torch
    except ImportError:
        return
    torch.set_num_threads(1)


def log(msg: str) -> None:
    """A progress line on stderr (the tables go to stdout)."""
    print(msg, file=sys.stderr, flush=True)


def decode_rate(results) -> float:
    """Decoding steps per second over ``search.GenerationResult``s, prefill excluded."""
    seconds = sum(r.seconds - r.prefill_seconds for r in results)
    return sum(r.num_steps for r in results) / seconds if seconds > 0 else float("nan")


def timed(fn, *args, **kwargs):
    """``fn(*args, **kwargs)`` timed once: ``(result, wall ns, CPU ns)``. The heap is
    collected first (``GC_FLUSH``); the CPU clock is read just outside the wall
    clock, so its own cost (~0.3 µs) is not in the wall time."""
    if GC_FLUSH:
        gc.collect()
    c0 = cpu_ns()
    t0 = perf_ns()
    out = fn(*args, **kwargs)
    t1 = perf_ns()
    c1 = cpu_ns()
    return out, t1 - t0, c1 - c0


def geomean(values) -> float | None:
    """The geometric mean of non-negative figures, ``None`` entries skipped: ``None``
    when none is left, 0 when one is 0."""
    vals = [float(v) for v in values if v is not None]
    if not vals:
        return None
    if min(vals) <= 0:
        return 0.0
    return math.exp(sum(math.log(v) for v in vals) / len(vals))


def timer_overhead_ns(n: int = 20000) -> int:
    """Median wall time of an empty ``perf_counter_ns`` pair, subtracted from every
    timed sample."""
    samples = []
    for _ in range(n):
        t0 = perf_ns()
        t1 = perf_ns()
        samples.append(t1 - t0)
    return int(statistics.median(samples))


def cpu_timer_overhead_ns(n: int = 20000) -> int:
    """Median process-CPU time of an empty timed fill (two CPU clock reads around
    two wall clock reads, as in the timed loops)."""
    samples = []
    for _ in range(n):
        c0 = cpu_ns()
        perf_ns()
        perf_ns()
        c1 = cpu_ns()
        samples.append(c1 - c0)
    return int(statistics.median(samples))


def git_rev() -> str:
    """HEAD's short hash, with "+dirty" when constrain/ has uncommitted changes."""
    try:
        def git(*a):
            return subprocess.run(["git", "-C", str(ROOT), *a], capture_output=True, text=True).stdout.strip()

        rev = git("rev-parse", "--short", "HEAD") or "?"
        if git("status", "--porcelain", "--", "constrain"):
            rev += "+dirty"
        return rev
    except OSError:
        return "?"


#: the load average when the benchmark script started (it imports this module
#: first): scripts that call :func:`environment` at the end reported the load at
#: the end as the start's
_LOAD_AT_START = [round(x, 2) for x in os.getloadavg()] if hasattr(os, "getloadavg") else None


def environment(engines: dict) -> dict:
    """The machine and library versions of a run (CPU, cores, the load average
    when the script started, each engine's ``version``), kept in every report."""
    cpu = "?"
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    versions = {"python": platform.python_version()}
    for dist in ("numpy", "numba", "torch", "transformers", "tokenizers", "bpe-openai", "regex"):
        try:
            versions[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            pass
    for n, e in engines.items():
        versions[n] = e.version
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "loadavg_start": _LOAD_AT_START,
        "platform": platform.platform(),
        "versions": versions,
        "threads": "1 (RAYON/NUMBA/OMP/MKL=1, torch.set_num_threads(1), xgrammar max_threads=1)",
    }


def fmt(x, nd: int = 2) -> str:
    """A table figure: ``-`` for none (or NaN), whole numbers from 1000, one decimal
    from 100 (none when ``nd`` is 1), else ``nd`` decimals."""
    if x is None or x != x:
        return "-"
    if x >= 1000:
        return f"{x:.0f}"
    if x >= 100:
        return f"{x:.1f}" if nd > 1 else f"{x:.0f}"
    return f"{x:.{nd}f}"


def fmt_table(rows, markdown: bool) -> str:
    """Rows of strings as a markdown or right-aligned plain-text table (first row:
    the header)."""
    if markdown:
        lines = ["| " + " | ".join(rows[0]) + " |", "|" + "|".join(" ---: " for _ in rows[0]) + "|"]
        lines += ["| " + " | ".join(r) + " |" for r in rows[1:]]
        return "\n".join(lines)
    w = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.rjust(w[i]) for i, c in enumerate(r)) for r in rows)


# ----------------------------------------------------------------------------------
# Scripts that run the default model on fixed prompts (bench_beam, bench_lattice)
# ----------------------------------------------------------------------------------


def add_model_args(ap, prompts: list, subject: str) -> None:
    """The options of a default-model script: ``--prompts`` / ``--select``,
    ``--max-new-tokens``, ``--threads`` and ``--regex`` | ``--schema`` (which
    constrain ``subject``, e.g. "both drivers")."""
    ap.add_argument("--prompts", type=int, default=len(prompts), help=f"how many of the {len(prompts)} prompts")
    ap.add_argument("--select", help="comma-separated prompt indices (0-based) instead of --prompts")
    ap.add_argument("--max-new-tokens", type=int, default=24)
    ap.add_argument("--threads", type=int, default=1, help="torch threads")
    g = ap.add_mutually_exclusive_group()
    g.add_argument("--regex", help=f"constrain {subject} by this regex")
    g.add_argument("--schema", help=f"constrain {subject} by this JSON Schema file")


def prompt_indices(ap, args, prompts: list) -> list[int]:
    """The indices of the prompts to run: ``--select``, else the first ``--prompts``."""
    if not 1 <= args.prompts <= len(prompts):
        ap.error(f"--prompts must be between 1 and {len(prompts)}")
    return [int(i) for i in args.select.split(",")] if args.select else list(range(args.prompts))


def load_constraint(args, lm):
    """The constraint ``--regex`` / ``--schema`` name, compiled for the model's
    vocabulary, or ``None``."""
    import constrain

    if args.regex:
        return constrain.compile_regex(args.regex, lm.vocab)
    if args.schema:
        with open(args.schema, encoding="utf-8") as f:
            return constrain.compile_json_schema(json.load(f), lm.vocab)
    return None


def constraint_note(args) -> str:
    """``--regex`` / ``--schema`` for a run's header line ("" when unconstrained)."""
    return (f", regex {args.regex!r}" if args.regex else "") + (f", schema {args.schema}" if args.schema else "")
