"""Every script of ``tests/benchmarks/`` has an entry in its README (its name in
backquotes: a section or a row of a table), except the few listed below that
were written without one: a new script cannot be added undocumented, and a
listed one leaves the list once its entry is written."""

from __future__ import annotations

from pathlib import Path

BENCH = Path(__file__).resolve().parent / "benchmarks"

#: scripts with no README entry yet (documented only in their own docstring)
UNDOCUMENTED = {
    "bench_adaptive.py", "bench_constrained_beam.py", "bench_generate_batch.py",
    "bench_persistence.py", "check_gbnf.py", "check_json_schema_suite.py",
    "check_token_refs.py", "plots.py", "run_tool_calls.py",
}


def test_every_benchmark_script_has_a_readme_entry():
    readme = (BENCH / "README.md").read_text(encoding="utf-8")
    scripts = {p.name for p in BENCH.glob("*.py")}
    documented = {name for name in scripts if f"`{name}" in readme}
    assert sorted(scripts - documented - UNDOCUMENTED) == []
    assert sorted(documented & UNDOCUMENTED) == []
    assert sorted(UNDOCUMENTED - scripts) == []
