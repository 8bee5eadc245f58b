"""The official JSON-Schema-Test-Suite (draft 2020-12, vendored) through
:func:`constrain.compile_json_schema`: no invalid instance may be accepted, and
coverage may not fall below what it is now (see
``tests/benchmarks/check_json_schema_suite.py`` for the table by keyword)."""

from __future__ import annotations

import pytest

from byte_vocab import byte_vocabulary
from json_schema_suite import run_suite, totals

#: floors at the time of writing (2026-12-03): groups compiled, valid instances
#: of compiled groups refused at most
MIN_COMPILED = 349
MAX_VALID_REFUSED = 0


@pytest.fixture(scope="module")
def suite_results():
    return run_suite(byte_vocabulary(), formats="annotation")


def test_no_invalid_instance_is_accepted(suite_results):
    wrong = [(r.file, r.description, desc, text) for r in suite_results
             for kind, desc, text in r.wrong if kind == "invalid accepted"]
    assert wrong == []


def test_coverage_does_not_fall(suite_results):
    t = totals(suite_results)
    assert t["compiled"] >= MIN_COMPILED, t
    assert t["valid_total"] - t["valid_accepted"] <= MAX_VALID_REFUSED, [
        (r.file, r.description, desc) for r in suite_results
        for kind, desc, _ in r.wrong if kind == "valid refused"]


def test_refusals_are_typed_and_name_a_pointer(suite_results):
    for r in suite_results:
        if not r.compiled:
            assert r.refusal.split(":")[0] in (
                "UnsupportedSchemaError", "EmptySchemaError", "SchemaError"), r.refusal
            assert r.pointer is not None, r.refusal
