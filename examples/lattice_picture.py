"""Draw a small lattice: ``Lattice.to_dot()`` rendered as a PNG (docs/search.md).

Run from the repository root (needs the ``plots`` extra, matplotlib; graphviz is
not needed):

    .venv/bin/python examples/lattice_picture.py [--out docs/img/lattice.png] [--budget 14]

With the default model (SmolLM2-135M-Instruct) and a regex of three-word
sentences, a best-first lattice search (``search.lattice_search``,
``merge_ngram=1``: prefixes ending in the same token and constraint state merge)
spends ``--budget`` model calls; the script prints the lattice's size, its best
paths and how long it took, writes the DOT text next to the PNG
(``lattice.dot``) and draws it, merge edges dashed. 14 model calls: 14 s on 2
CPU cores at load average 1.3, model load included.
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

PATTERN = r"(The|A) (cat|dog) (sat|ran|slept)\."
PROMPT = "Write a three-word sentence about a pet."


def main(argv=None) -> int:
    """Build the lattice, print it, and write the DOT text and the picture."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=str(ROOT / "docs" / "img" / "lattice.png"))
    ap.add_argument("--budget", type=int, default=14, help="model calls the lattice may spend")
    args = ap.parse_args(argv)
    import plots

    t0 = time.perf_counter()
    lm = search.load_default_model()
    sentence = constrain.compile_regex(PATTERN, lm.vocab)
    lat = search.lattice_search(lm, PROMPT, constraint=sentence, budget=args.budget, merge_ngram=1,
                                max_new_tokens=12)
    print(f"{lat.num_nodes} nodes, {lat.num_edges} edges, {lat.count_paths()} complete paths, "
          f"{lat.calls} model calls, {time.perf_counter() - t0:.1f} s")
    for score, path in lat.k_best(3):
        print(f"  {score:8.3f}{' ' if lat.is_exact(path) else '*'} {lat.text(path)}")
    out = Path(args.out)
    dot = lat.to_dot()
    out.with_suffix(".dot").parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".dot").write_text(dot)
    title = (f"lattice_search(budget={args.budget}, merge_ngram=1) under {PATTERN}: "
             f"{lat.count_paths()} complete paths; dashed: merges")
    print(f"wrote {out.with_suffix('.dot')} and {plots.dot_picture(dot, out, title)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
