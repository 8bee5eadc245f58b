"""The regime aggregation of ``tests/benchmarks/bench_maskbench.py`` (request,
first-walk and warm masks per split, geometric mean over splits, Trellis's ratios
to its peers) on hand-made results whose figures are known, and
``harness.geomean``. No engine runs here."""

from __future__ import annotations

import math
import os
import sys

import pytest

BENCH = os.path.join(os.path.dirname(__file__), "benchmarks")
ENGINES = ["trellis", "xgrammar", "llguidance"]


@pytest.fixture(scope="module")
def bm():
    # importing the benchmark sets every thread variable to 1 for the engines it
    # loads; this process keeps its own
    saved = dict(os.environ)
    sys.path.insert(0, BENCH)
    try:
        import bench_maskbench
    finally:
        sys.path.remove(BENCH)
        os.environ.clear()
        os.environ.update(saved)
    return bench_maskbench


def engine_result(compile_ms, first, warm, accepted=True, warm_accepted=True, status="ok"):
    """One engine's result for a schema: CPU figures are twice the wall ones, so
    that the clock a figure came from shows."""
    if status != "ok":
        return {"status": status, "error": "unsupported"}
    walk = {"accepted": accepted, "refused_at": None if accepted else 0, "inconsistent": 0,
            "mask_us": list(first), "mask_cpu_us": [2 * x for x in first],
            "advance_us": [1.0] * (len(first) - 1), "advance_cpu_us": [2.0] * (len(first) - 1)}
    return {"status": "ok", "compile_ms": compile_ms, "compile_cpu_ms": 2 * compile_ms, "instances": [walk],
            "warm": {"accepted": warm_accepted, "error": None, "mask_us": list(warm),
                     "mask_cpu_us": [2 * x for x in warm]}}


def result(split, engines):
    return {"id": f"{split}-{len(engines)}", "split": split, "valid": 1, "engines": engines}


def two_splits():
    """Split A: T first fills 4 µs (X 2, L 8); split B: T 9 (X 1, L 3); one schema
    each that every engine shares, and one each that some engine does not."""
    a = result("A", {"trellis": engine_result(1.0, [4, 4, 4], [1, 1]), "xgrammar": engine_result(10.0, [2, 2, 2], [2]),
                     "llguidance": engine_result(2.0, [8, 8, 8], [4, 4])})
    a_x_refused = result("A", {"trellis": engine_result(1.0, [100], [100]),
                               "xgrammar": engine_result(1.0, [100], [100], accepted=False),
                               "llguidance": engine_result(1.0, [100], [100])})
    b = result("B", {"trellis": engine_result(3.0, [9, 9], [1]), "xgrammar": engine_result(30.0, [1, 1], [2]),
                     "llguidance": engine_result(4.0, [3, 3], [4])})
    b_l_error = result("B", {"trellis": engine_result(1.0, [100], [100]), "xgrammar": engine_result(1.0, [100], [100]),
                             "llguidance": engine_result(0, [], [], status="error")})
    return {"A": [a, a_x_refused], "B": [b, b_l_error]}


def test_geomean(bm):
    g = bm.harness.geomean
    assert g([2.0, 8.0]) == pytest.approx(4.0)
    assert g([None, 3.0, None]) == pytest.approx(3.0)
    assert g([]) is None and g([None]) is None
    assert g([0.0, 5.0]) == 0.0


def test_common_schemas(bm):
    by_split = two_splits()
    assert [r["id"] for r in bm.regime_common(by_split["A"], ENGINES)] == [by_split["A"][0]["id"]]
    assert len(bm.regime_common(by_split["A"], ["trellis", "llguidance"])) == 2
    assert len(bm.regime_common(by_split["B"], ENGINES)) == 1
    no_warm = result("A", {e: dict(engine_result(1.0, [1], [1]), warm={"accepted": False, "mask_us": [], "mask_cpu_us": []})
                           for e in ENGINES})
    assert bm.regime_common([no_warm], ENGINES) == []


def test_summary_figures_and_ratios(bm):
    s = bm.regime_summary(two_splits(), ENGINES, "wall")
    assert s["schemas"] == {"A": 1, "B": 1}
    t = s["splits"]["A"]["trellis"]
    assert t["request_p50_ms"] == pytest.approx(1.0 + 12 / 1e3)
    assert (t["first_p50_us"], t["warm_p50_us"], t["advance_p50_us"]) == (4, 1, 1)
    geo = s["geomean"]
    assert geo["trellis"]["first_p50_us"] == pytest.approx(6.0)  # sqrt(4 * 9)
    assert geo["xgrammar"]["first_p50_us"] == pytest.approx(math.sqrt(2))
    r = s["ratios"]
    assert r["first_p50_vs_xgrammar"] == pytest.approx(6.0 / math.sqrt(2))
    assert r["first_p50_vs_xgrammar_worst"] == ["B", pytest.approx(9.0)]
    # requests: T sqrt(1.012 * 3.018), X ~17, L sqrt(2.024 * 4.006): llguidance is the faster peer
    peer, x = r["request_vs_faster_peer"]
    assert peer == "llguidance"
    assert x == pytest.approx(math.sqrt(1.012 * 3.018) / math.sqrt(2.024 * 4.006))
    # pooled over both splits' first-walk fills: T [4, 4, 4, 9, 9] (p99 9), L [8, 8, 8, 3, 3] (p99 8);
    # per split, T's p99 is below L's in A and 3x L's in B
    assert r["pooled_first_p99_vs_llguidance"] == pytest.approx(9 / 8)
    assert r["warm_p50_vs_xgrammar"] == pytest.approx(1 / 2)
    cpu = bm.regime_summary(two_splits(), ENGINES, "cpu")
    assert cpu["geomean"]["trellis"]["first_p50_us"] == pytest.approx(12.0)
    assert cpu["splits"]["B"]["llguidance"]["request_p50_ms"] == pytest.approx(8.0 + 12 / 1e3)


def test_ratios_without_peers(bm):
    s = bm.regime_summary(two_splits(), ["trellis"], "wall")
    assert set(s["ratios"].values()) == {None}
    s = bm.regime_summary(two_splits(), ["trellis", "xgrammar"], "wall")
    assert s["ratios"]["request_vs_faster_peer"][0] == "xgrammar"
    assert s["ratios"]["pooled_first_p99_vs_llguidance"] is None


def test_table_and_old_reports(bm):
    by_split = two_splits()
    by_split["C"] = [by_split["A"][1]]  # no schema every engine shares
    text = bm.format_regimes(bm.regime_summary(by_split, ENGINES, "wall"), markdown=True)
    rows = {line.split(" | ")[0].strip("| "): line for line in text.splitlines() if line.startswith("| ")}
    assert "4.00 / 2.00 / 8.00" in rows["A"] and rows["C"].count(" - ") == 5
    assert "geomean (2 splits)" in rows and "pooled" in rows
    assert "worst split B 9.00" in text
    assert bm.has_regimes(by_split["A"])
    old = [{**r, "engines": {e: {k: v for k, v in x.items() if k != "warm"} for e, x in r["engines"].items()}}
           for r in by_split["A"]]
    assert not bm.has_regimes(old)


class FakeEngine:
    """An engine whose fill of token ``t`` takes ``t`` µs wall (``t / 2`` CPU), whose
    advance takes 3 µs, and which records the walks it is asked for."""

    name = "trellis"

    def __init__(self):
        self.walks = []

    def compile_timed(self, schema):
        return "grammar", 2_000_000, 1_000_000

    def new_mask(self):
        return None

    def walk(self, g, ids, mask, mask_ns, mask_cpu, adv_ns=None, adv_cpu=None):
        self.walks.append((tuple(ids), adv_ns is not None))
        for t in [*ids, 0]:
            mask_ns.append(1000 * t)
            mask_cpu.append(500 * t)
        if adv_ns is not None:
            adv_ns.extend([3000] * len(ids))
            adv_cpu.extend([3000] * len(ids))
        return None, True, 0


class FakeWorker:
    """``bench_maskbench.Worker``'s ``run``, in this process."""

    def __init__(self, bm, engine):
        self.bm, self.engine = bm, engine

    def run(self, payload, timeouts):
        msgs = []
        self.bm.bench_job(self.engine, payload, msgs.append)
        return msgs


def test_worker_walks_first_then_warm(bm):
    """The first walk comes right after the compile with its advance calls timed;
    the warm pass walks the first instance again after the others."""
    eng = FakeEngine()
    case = bm.SchemaCase("s", "A", {"type": "integer"})
    case.valid = [bm.Instance(0, "12", [4, 2], True), bm.Instance(1, "7", [6], True)]
    args = type("Args", (), {"timeout": 30.0, "walk_timeout": 120.0})()
    res = bm.run_case(case, {"trellis": FakeWorker(bm, eng)}, args, 0, 0, spec=None)
    assert eng.walks == [((4, 2), True), ((6,), False), ((4, 2), False)]
    e = res["engines"]["trellis"]
    first, second = e["instances"]
    assert first["mask_us"] == [4, 2, 0] and first["advance_us"] == [3, 3] and "advance_us" not in second
    assert e["warm"] == {"accepted": True, "error": None, "mask_us": [4, 2, 0], "mask_cpu_us": [2, 1, 0]}
    s = bm.regime_summary({"A": [res]}, ["trellis"], "cpu")
    assert s["splits"]["A"]["trellis"]["request_p50_ms"] == pytest.approx(1.0 + 3 / 1e3)
