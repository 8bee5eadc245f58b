"""PNG pictures of the benchmarks and of search runs, for docs/ (matplotlib, the
``plots`` extra: ``pip install -e '.[plots]'``).

Every function takes the data a script already has (a benchmark's JSON report, a
:class:`search.Lattice`'s DOT text, an :class:`search.SMCResult`) and writes one
small PNG (about 100 dpi, well under 150 kB); the machine's load average is
written on every timing figure, since timings on a shared machine are noisy.

* :func:`maskbench_mask_time`, :func:`maskbench_compile_vs_size`: from a
  ``bench_maskbench.py --json`` report (``--plot DIR`` writes both);
* :func:`tokens_per_second`: from ``bench_generate_batch.py`` (``--plot DIR``);
* :func:`dot_picture`: a DOT graph (``Lattice.to_dot()``) drawn in layers, left to
  right, with no graphviz needed (``examples/lattice_picture.py``);
* :func:`smc_weights`: every particle's normalised weight per step
  (``examples/smc_weights.py``).
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np

#: the engines' colours, the same in every figure
COLORS = {"trellis": "#1b6ca8", "xgrammar": "#e07b39", "llguidance": "#4f9a4f", "outlines": "#a05195"}
DPI = 100


def _pyplot():
    """matplotlib's pyplot on the file-only Agg backend; a clear error without it."""
    try:
        import matplotlib
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise SystemExit("the pictures need matplotlib: pip install -e '.[plots]'") from exc
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig, path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=DPI, bbox_inches="tight", metadata={"Software": None})
    import matplotlib.pyplot as plt

    plt.close(fig)
    return path


def load_note(env: dict) -> str:
    """``"load 2.4 → 4.1 on 2 cores"``: the 1-minute load average at the start and
    end of a run, from a report's ``environment``."""
    start = (env.get("loadavg_start") or [None])[0]
    end = (env.get("loadavg_end") or [None])[0]
    load = f"load {start}" + (f" → {end}" if end is not None else "")
    return f"{load} on {env.get('cores', '?')} cores, one thread per engine"


# ----------------------------------------------------------------------------------
# MaskBench
# ----------------------------------------------------------------------------------


def _engines(vres: dict) -> list[str]:
    order = list(COLORS)
    found = {e for r in vres["results"] for e in r["engines"]}
    return [e for e in order if e in found] + sorted(found - set(order))


def maskbench_mask_time(report: dict, path, vocab: str | None = None, clock: str = "wall") -> Path:
    """Per split, each engine's per-token mask time (p50 bar, p99 tick), log scale:
    every timed fill of the valid instances it walked."""
    plt = _pyplot()
    vname = vocab or next(iter(report["vocabs"]))
    vres = report["vocabs"][vname]
    key = "mask_us" if clock == "wall" else "mask_cpu_us"
    engines = _engines(vres)
    splits = list(dict.fromkeys(r["split"] for r in vres["results"]))
    fig, ax = plt.subplots(figsize=(9, 3.6))
    width = 0.8 / len(engines)
    for k, eng in enumerate(engines):
        p50, p99 = [], []
        for split in splits:
            fills = [x for r in vres["results"] if r["split"] == split
                     for inst in r["engines"].get(eng, {}).get("instances", ()) for x in inst[key]]
            p50.append(float(np.percentile(fills, 50)) if fills else np.nan)
            p99.append(float(np.percentile(fills, 99)) if fills else np.nan)
        x = np.arange(len(splits)) + (k - (len(engines) - 1) / 2) * width
        ax.bar(x, p50, width, color=COLORS.get(eng), label=f"{eng} p50")
        ax.scatter(x, p99, marker="_", s=120, color=COLORS.get(eng), linewidths=2)
    ax.scatter([], [], marker="_", color="k", label="p99 (tick)")
    ax.set_yscale("log")
    ax.set_ylabel(f"mask time per token, µs ({clock})")
    ax.set_xticks(np.arange(len(splits)), splits, rotation=35, ha="right", fontsize=8)
    n = len(vres["results"])
    ax.set_title(f"MaskBench, {vname}: {n} schemas, {load_note(report.get('environment', {}))}", fontsize=9)
    ax.legend(fontsize=7, ncol=len(engines) + 1, loc="upper center", bbox_to_anchor=(0.5, -0.3), frameon=False)
    ax.grid(axis="y", alpha=0.3)
    return _save(fig, path)


def maskbench_compile_vs_size(report: dict, path, vocab: str | None = None, clock: str = "wall") -> Path:
    """Each schema's compile time against its size (compact JSON bytes), per
    engine, log-log; schemas an engine did not compile are left out."""
    plt = _pyplot()
    vname = vocab or next(iter(report["vocabs"]))
    vres = report["vocabs"][vname]
    key = "compile_ms" if clock == "wall" else "compile_cpu_ms"
    fig, ax = plt.subplots(figsize=(6, 3.8))
    for eng in _engines(vres):
        pts = [(r["schema_bytes"], r["engines"][eng][key]) for r in vres["results"]
               if "schema_bytes" in r and r["engines"].get(eng, {}).get("status") == "ok"]
        if pts:
            x, y = zip(*pts)
            ax.scatter(x, y, s=14, alpha=0.75, color=COLORS.get(eng), label=f"{eng} ({len(pts)} compiled)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("schema size, bytes of compact JSON")
    ax.set_ylabel(f"compile time, ms ({clock})")
    ax.set_title(f"MaskBench, {vname}: {load_note(report.get('environment', {}))}", fontsize=9)
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    return _save(fig, path)


# ----------------------------------------------------------------------------------
# Generation speed
# ----------------------------------------------------------------------------------


def tokens_per_second(rows: list[tuple[str, float]], path, title: str) -> Path:
    """Bars of decoding tokens/s (prefill excluded) of ``search.generate`` per
    constraint kind: ``rows`` is ``[(kind, tokens/s)]``; the kind ``"none"`` is the
    unconstrained baseline, drawn in grey."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(5.5, 3.0))
    x = np.arange(len(rows))
    colors = ["#999999" if k == "none" else "#1b6ca8" for k, _ in rows]
    ax.bar(x, [r for _, r in rows], 0.6, color=colors)
    for i, (_, r) in enumerate(rows):
        ax.text(x[i], r, f"{r:.1f}", ha="center", va="bottom", fontsize=8)
    ax.set_xticks(x, [k if k != "none" else "none (unconstrained)" for k, _ in rows], fontsize=8)
    ax.set_ylabel("tokens / s (prefill excluded)")
    ax.set_title(title, fontsize=9)
    ax.grid(axis="y", alpha=0.3)
    return _save(fig, path)


# ----------------------------------------------------------------------------------
# DOT graphs (Lattice.to_dot)
# ----------------------------------------------------------------------------------

_NODE = re.compile(r'^\s*(\w+)\s*\[label="((?:[^"\\]|\\.)*)",\s*shape=(\w+)\];\s*$')
_EDGE = re.compile(r'^\s*(\w+)\s*->\s*(\w+)\s*\[label="((?:[^"\\]|\\.)*)"(,\s*style=dashed)?\];\s*$')


def parse_dot(text: str) -> tuple[dict, list]:
    """The nodes ``{name: (label, shape)}`` and edges ``[(u, v, label, dashed)]`` of
    DOT text in the form :meth:`search.Lattice.to_dot` writes."""
    def unescape(s: str) -> str:
        return re.sub(r"\\(.)", lambda m: "\n" if m.group(1) == "n" else m.group(1), s)

    nodes, edges = {}, []
    for line in text.split("\n"):
        m = _NODE.match(line)
        if m:
            nodes[m.group(1)] = (unescape(m.group(2)), m.group(3))
            continue
        m = _EDGE.match(line)
        if m:
            edges.append((m.group(1), m.group(2), unescape(m.group(3)), bool(m.group(4))))
    return nodes, edges


def dot_picture(text: str, path, title: str = "") -> Path:
    """Draw DOT text (:meth:`search.Lattice.to_dot`) left to right: each node in the
    column of its longest path from a source, edges labelled, dashed ones (merges)
    dashed, end nodes as double circles."""
    import networkx as nx

    plt = _pyplot()
    nodes, edges = parse_dot(text)
    g = nx.DiGraph()
    g.add_nodes_from(nodes)
    g.add_edges_from((u, v) for u, v, _, _ in edges)
    layer = {}
    for u in nx.topological_sort(g):
        layer[u] = max((layer[p] + 1 for p in g.predecessors(u)), default=0)
    ends = [u for u in nodes if nodes[u][1] == "doublecircle"]
    last = max(layer.values(), default=0) + 1
    for u in ends:  # every end in the last column, so complete paths read to the right edge
        layer[u] = last
    columns: dict = {}
    for u in sorted(nodes, key=lambda u: (layer[u], int(re.sub(r"\D", "", u) or 0))):
        columns.setdefault(layer[u], []).append(u)
    pos = {}
    for c, members in columns.items():
        for i, u in enumerate(members):
            pos[u] = (c, -(i - (len(members) - 1) / 2))
    height = max(len(m) for m in columns.values())
    fig, ax = plt.subplots(figsize=(min(2.0 + 1.6 * (last + 1), 15), min(1.2 + 1.0 * height, 9)))
    for u, v, label, dashed in edges:
        (x0, y0), (x1, y1) = pos[u], pos[v]
        rad = 0.0 if abs(y1 - y0) > 1e-9 or x1 - x0 <= 1 else 0.25
        ax.annotate("", xy=(x1, y1), xytext=(x0, y0),
                    arrowprops=dict(arrowstyle="-|>", color="#555", lw=0.9, shrinkA=9, shrinkB=9,
                                    linestyle="--" if dashed else "-",
                                    connectionstyle=f"arc3,rad={rad}"))
        # labels at 40% of the way from the source: edges into one node keep theirs apart
        ax.text(x0 + 0.4 * (x1 - x0), y0 + 0.4 * (y1 - y0) + 0.06, label, fontsize=6, ha="center", va="bottom",
                color="#a33" if dashed else "#222",
                bbox=dict(boxstyle="round,pad=0.1", fc="white", ec="none", alpha=0.8))
    for u, (x, y) in pos.items():
        label, shape = nodes[u]
        marker = {"box": "s", "doublecircle": "o"}.get(shape, "o")
        ax.scatter([x], [y], s=260, marker=marker, color="#dbe9f6", edgecolors="#1b6ca8", zorder=3)
        if shape == "doublecircle":
            ax.scatter([x], [y], s=130, marker="o", color="none", edgecolors="#1b6ca8", zorder=4)
        ax.text(x, y, label, fontsize=6, ha="center", va="center", zorder=5)
    ax.set_axis_off()
    ax.margins(0.08)
    if title:
        ax.set_title(title, fontsize=9)
    return _save(fig, path)


# ----------------------------------------------------------------------------------
# SMC
# ----------------------------------------------------------------------------------


def smc_weights(result, path, title: str = "") -> Path:
    """Every particle's normalised weight after each step of an SMC run
    (``SMCResult.log_weight_history``), with the effective sample size on a
    second axis and the resampling steps marked."""
    plt = _pyplot()
    hist = np.asarray(result.log_weight_history, dtype=np.float64)  # (steps, particles)
    steps, n = hist.shape
    fig, ax = plt.subplots(figsize=(7, 3.6))
    norm = np.zeros_like(hist)
    for t in range(steps):
        row = hist[t]
        m = np.max(row)
        if m > -math.inf:
            w = np.exp(row - m)
            norm[t] = w / w.sum()
    cmap = plt.get_cmap("viridis")
    bottom = np.zeros(steps)
    x = np.arange(1, steps + 1)
    for i in range(n):
        ax.bar(x, norm[:, i], 0.8, bottom=bottom, color=cmap(i / max(n - 1, 1)), edgecolor="white", lw=0.3)
        bottom += norm[:, i]
    for s in result.resampled_at:
        ax.axvline(s + 0.5, color="#c00", lw=1, ls=":")
    ax.set_xlabel("step (token)")
    ax.set_ylabel(f"normalised weight, {n} particles stacked")
    ax.set_xticks(x)
    ax.set_ylim(0, 1)
    ax2 = ax.twinx()
    ax2.plot(x, result.ess_history, color="k", marker="o", ms=3, lw=1.2, label="effective sample size")
    ax2.set_ylim(0, n * 1.05)
    ax2.set_ylabel("effective sample size")
    ax2.plot([], [], color="#c00", ls=":", label="resampled after this step")
    ax2.legend(fontsize=7, loc="upper right", bbox_to_anchor=(1.0, -0.13), ncol=2, frameon=False)
    if title:
        ax.set_title(title, fontsize=9)
    return _save(fig, path)
