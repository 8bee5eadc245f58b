"""Cold start: what a new process pays before its first mask, Trellis vs XGrammar.

    python tests/benchmarks/bench_cold_start.py [--runs N] [--engines trellis,xgrammar]
        [--generate N] [--cold-generate] [--markdown] [--json out.json]

Each run is a fresh Python process (runs alternate between the engines, so that
load on a shared machine falls on both alike) with the numba cache warm, the way
a server or a script starts on a machine that has run Trellis before:

* ``import``: a process that only imports the engine (``import constrain``,
  ``import xgrammar``);
* ``script``: a process that imports it, reads the SmolLM2 tokenizer from its
  on-disk cache (the directory ``search.models.smollm2.load_tokenizer()``
  fills, read with ``AutoTokenizer.from_pretrained``: the same transformers
  tokenizer for both), builds the engine's vocabulary from it
  (``Vocabulary.from_huggingface`` / ``TokenizerInfo.from_huggingface``),
  compiles ``examples/person.schema.json`` (``compile_json_schema`` /
  ``GrammarCompiler.compile_json_schema``) and fills the first mask (a numpy
  bitmask / ``GrammarMatcher.fill_next_token_bitmask``).

Whole-process wall and CPU time (children's ``getrusage``, what ``/usr/bin/time``
reports) of both, and the script's phases timed inside it; medians of ``--runs``.
"beyond import" is what the vocabulary, the compile and the mask cost inside the
script (the tokenizer apart: both engines read the same one).

``--generate N``: whole-process timings of ``trellis generate --schema
examples/person.schema.json PROMPT --max-new-tokens 40``, N runs (kernels
compiled: what the first generate after ``.ci/setup`` costs).
``--cold-generate``: one such run on an empty numba cache (``NUMBA_CACHE_DIR`` in
a temporary directory): what the first generate costs without the set-up's
warm-up (it warms up first, saying so on stderr).

An engine that is not importable is skipped.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

import harness

ROOT = harness.ROOT
SCHEMA = ROOT / "examples" / "person.schema.json"
PROMPT = "Describe a software engineer called Ada as JSON."

_TIMER = """
import json, sys, time
_t = [("start", time.perf_counter(), time.process_time())]
def mark(name):
    _t.append((name, time.perf_counter(), time.process_time()))
def done():
    print(json.dumps({n: [(t - p) * 1000, (c - q) * 1000]
                      for (_, p, q), (n, t, c) in zip(_t, _t[1:])}))
"""

SCRIPTS = {
    "trellis": {
        "import": "import constrain",
        "script": _TIMER + """
import constrain
mark("import")
from transformers import AutoTokenizer
tok = AutoTokenizer.from_pretrained(sys.argv[2], local_files_only=True)
mark("tokenizer")
vocab = constrain.Vocabulary.from_huggingface(tok)
mark("vocab")
c = constrain.compile_json_schema(open(sys.argv[1]).read(), vocab)
mark("compile")
bitmask = constrain.allocate_bitmask(1, len(vocab), backend="numpy")
c.fill_bitmask(c.initial_state(), bitmask, 0)
mark("mask")
done()
""",
    },
    "xgrammar": {
        "import": "import xgrammar",
        "script": _TIMER + """
import xgrammar as xgr
mark("import")
from transformers import AutoTokenizer
tok = AutoTokenizer.from_pretrained(sys.argv[2], local_files_only=True)
mark("tokenizer")
info = xgr.TokenizerInfo.from_huggingface(tok)
mark("vocab")
compiled = xgr.GrammarCompiler(info).compile_json_schema(open(sys.argv[1]).read())
mark("compile")
matcher = xgr.GrammarMatcher(compiled)
bitmask = xgr.allocate_token_bitmask(1, info.vocab_size)
matcher.fill_next_token_bitmask(bitmask)
mark("mask")
done()
""",
    },
}


def run_process(argv: list[str], env: dict | None = None) -> dict:
    """Wall and CPU seconds of one child process, and what it printed last."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    out = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, env=env, timeout=1200)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if out.returncode != 0:
        raise RuntimeError(f"{argv[:3]} failed: {out.stderr[-2000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    lines = out.stdout.strip().splitlines()
    return {"wall_s": wall, "cpu_s": cpu, "last": lines[-1] if lines else "",
            "stderr": out.stderr}


def importable(engine: str) -> bool:
    mod = {"trellis": "constrain", "xgrammar": "xgrammar"}[engine]
    return subprocess.run([sys.executable, "-c", f"import {mod}"], cwd=ROOT,
                          capture_output=True).returncode == 0


def tokenizer_dir() -> str:
    """The SmolLM2 tokenizer's cache directory, filled if need be."""
    from search.models import smollm2

    smollm2.load_tokenizer()
    return str(smollm2._model_root() / "tokenizer")


def bench_engines(engines: list[str], runs: int) -> dict:
    """Per engine: lists of the import-only and the script processes' figures."""
    tok_dir = tokenizer_dir()
    res = {e: {"import": [], "script": []} for e in engines}
    for i in range(runs):
        for e in engines if i % 2 == 0 else reversed(engines):
            for kind in ("import", "script"):
                r = run_process([sys.executable, "-c", SCRIPTS[e][kind], str(SCHEMA), tok_dir])
                if kind == "script":
                    r["phases_ms"] = json.loads(r["last"])
                res[e][kind].append(r)
                harness.log(f"{e} {kind} {i + 1}/{runs}: wall {r['wall_s']:.2f} s, "
                            f"cpu {r['cpu_s']:.2f} s")
    return res


_BEYOND = ("vocab", "compile", "mask")


def summary(res: dict) -> dict:
    """Medians of each engine's figures (seconds and milliseconds)."""
    med = statistics.median
    out = {}
    for e, r in res.items():
        # (wall, CPU) per phase
        phases = {k: tuple(med(p["phases_ms"][k][i] for p in r["script"]) for i in (0, 1))
                  for k in r["script"][0]["phases_ms"]}
        out[e] = {
            "import_wall_s": med(x["wall_s"] for x in r["import"]),
            "import_cpu_s": med(x["cpu_s"] for x in r["import"]),
            "script_wall_s": med(x["wall_s"] for x in r["script"]),
            "script_cpu_s": med(x["cpu_s"] for x in r["script"]),
            "phases_ms": phases,
            "beyond_import_ms": tuple(med(sum(p["phases_ms"][k][i] for k in _BEYOND)
                                          for p in r["script"]) for i in (0, 1)),
        }
    return out


def table(summ: dict, markdown: bool) -> str:
    f = harness.fmt
    def both(x):  # wall / CPU milliseconds
        return f"{x[0]:.0f} / {x[1]:.0f}"

    rows = [["engine", "import: wall s", "CPU s", "script: wall s", "CPU s",
             "in the script (wall / CPU ms): import", "tokenizer", "vocabulary", "compile",
             "first mask", "beyond import"]]
    for e, s in summ.items():
        p = s["phases_ms"]
        rows.append([e, f(s["import_wall_s"]), f(s["import_cpu_s"]), f(s["script_wall_s"]),
                     f(s["script_cpu_s"]), both(p["import"]), both(p["tokenizer"]),
                     both(p["vocab"]), both(p["compile"]), both(p["mask"]),
                     both(s["beyond_import_ms"])])
    return harness.fmt_table(rows, markdown)


def bench_generate(runs: int, cold: bool) -> list[dict]:
    """Whole-process figures of ``trellis generate`` with the schema (an empty
    numba cache when ``cold``)."""
    trellis = os.path.join(os.path.dirname(sys.executable), "trellis")
    argv = [trellis, "generate", "--schema", str(SCHEMA), PROMPT, "--max-new-tokens", "40"]
    out = []
    for i in range(runs):
        with tempfile.TemporaryDirectory(prefix="numba-cold-") as d:
            env = dict(os.environ, NUMBA_CACHE_DIR=d) if cold else None
            r = run_process(argv, env)
        r["stderr_lines"] = [ln for ln in r.pop("stderr").splitlines() if ln.startswith("trellis:")]
        harness.log(f"generate{' (cold)' if cold else ''} {i + 1}/{runs}: wall {r['wall_s']:.2f} s, "
                    f"cpu {r['cpu_s']:.2f} s")
        for ln in r["stderr_lines"]:
            harness.log(f"  {ln}")
        out.append(r)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=5, help="fresh processes per engine and kind")
    ap.add_argument("--engines", default="trellis,xgrammar")
    ap.add_argument("--generate", type=int, default=0, metavar="N",
                    help="also time N warm `trellis generate` processes")
    ap.add_argument("--cold-generate", action="store_true",
                    help="also time one `trellis generate` on an empty numba cache")
    ap.add_argument("--markdown", action="store_true")
    ap.add_argument("--json", help="write the raw figures here")
    args = ap.parse_args()

    engines = []
    for e in args.engines.split(","):
        if importable(e):
            engines.append(e)
        else:
            harness.log(f"{e} is not importable: skipped")
    report = {"environment": harness.environment({}), "rev": harness.git_rev()}
    if engines:
        raw = bench_engines(engines, args.runs)
        report["engines"] = summ = summary(raw)
        print(f"Cold start, warm numba cache: medians of {args.runs} fresh processes "
              f"(rev {report['rev']})")
        print(table(summ, args.markdown))
    for label, n, cold in (("generate", args.generate, False),
                           ("cold_generate", int(args.cold_generate), True)):
        if n:
            runs = bench_generate(n, cold)
            report[label] = runs
            walls = [r["wall_s"] for r in runs]
            cpus = [r["cpu_s"] for r in runs]
            print(f"trellis generate{' (empty numba cache)' if cold else ''}: wall "
                  f"{statistics.median(walls):.2f} s, CPU {statistics.median(cpus):.2f} s "
                  f"(median of {n}); its stderr: " + " | ".join(runs[0]["stderr_lines"]))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(report, fh, indent=1, default=str)


if __name__ == "__main__":
    main()
