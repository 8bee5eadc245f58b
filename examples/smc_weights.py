"""Picture of an SMC run: every particle's weight over the steps (docs/smc.md).

Run from the repository root (needs the ``plots`` extra, matplotlib):

    .venv/bin/python examples/smc_weights.py [--out docs/img/smc_weights.png] [--particles 12]

With the default model (SmolLM2-135M-Instruct), ``search.smc`` samples phone
numbers under a regex, ``progress=True`` (a line per step on stderr). The picture
stacks the particles' normalised weights after each step (from
``SMCResult.log_weight_history``), with the effective sample size and the steps
after which the particles were resampled (``SMCResult.resampled_at``). About
124 model calls: 60 s on 2 CPU cores at load average 1.3-2.5, model load included.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "benchmarks")]

import constrain  # noqa: E402
import search  # noqa: E402

PATTERN = r"\([0-9]{3}\) [0-9]{3}-[0-9]{4}"
PROMPT = "Give me a US phone number."


def main(argv=None) -> int:
    """Run SMC, print its estimate and best outputs, and draw its weights."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=str(ROOT / "docs" / "img" / "smc_weights.png"))
    ap.add_argument("--particles", type=int, default=12)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    import plots

    t0 = time.perf_counter()
    lm = search.load_default_model()
    phone = constrain.compile_regex(PATTERN, lm.vocab)
    res = search.smc(lm, PROMPT, constraint=phone, n_particles=args.particles, max_new_tokens=16,
                     seed=args.seed, progress=True)
    print(f"log Z {res.log_z:.3f}, {res.steps} steps, {res.n_resamples} resamplings "
          f"(after steps {res.resampled_at}), {res.lm_calls} model calls, {time.perf_counter() - t0:.1f} s")
    for tokens, w in sorted(res.posterior.items(), key=lambda kv: -kv[1])[:3]:
        print(f"  {w:.3f}  {lm.decode(tokens)}")
    title = f"search.smc({args.particles} particles) under {PATTERN}, seed {args.seed}"
    print(f"wrote {plots.smc_weights(res, args.out, title)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
