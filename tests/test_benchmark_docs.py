"""Every script of ``tests/benchmarks/`` has an entry in its README (its name in
backquotes: a section, or a row of one of its tables), so that none is added
undocumented."""

from __future__ import annotations

from pathlib import Path

BENCH = Path(__file__).resolve().parent / "benchmarks"


def test_every_benchmark_script_has_a_readme_entry():
    readme = (BENCH / "README.md").read_text(encoding="utf-8")
    scripts = {p.name for p in BENCH.glob("*.py")}
    assert sorted(name for name in scripts if f"`{name}" not in readme) == []
