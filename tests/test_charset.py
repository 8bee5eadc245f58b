"""``sre_category``'s shortcuts against ``re`` itself.

A negated class escape (``\\D``) is taken as the complement of its positive
form and, under ``re.ASCII``, the positive forms are scanned over ASCII only;
both must give exactly what ``oracle_charset`` gets by running ``re`` over
every scalar value, for this Python's Unicode database.
"""

from __future__ import annotations

import re

import pytest

from constrain.automata.charset import (SRE_CATEGORY_PATTERNS, SRE_CATEGORY_SIGN, CharSet,
                                        oracle_charset, sre_category)


@pytest.mark.parametrize("ascii_only", [False, True], ids=["unicode", "ascii"])
@pytest.mark.parametrize("category", list(SRE_CATEGORY_SIGN), ids=lambda c: str(c))
def test_sre_category_is_what_re_matches(category, ascii_only):
    pattern = SRE_CATEGORY_PATTERNS[category]
    expected = oracle_charset.__wrapped__(pattern, re.ASCII if ascii_only else 0)
    got = sre_category(category, ascii_only)
    assert isinstance(got, CharSet)
    assert got == expected, pattern


def test_negated_escapes_are_complements():
    for category, (positive, negated) in SRE_CATEGORY_SIGN.items():
        if negated:
            for ascii_only in (False, True):
                both = sre_category(category, ascii_only).union(sre_category(positive, ascii_only))
                assert both == CharSet.full()
                assert not sre_category(category, ascii_only).intersection(
                    sre_category(positive, ascii_only))


def test_unicode_classes_outlive_clear_caches():
    """Unicode ``\\d \\w \\s`` are constants of this Python's Unicode database: a
    scan of every scalar value each (13-21 ms), made once a process, not again
    after ``constrain.clear_caches()`` as the memos of other classes are."""
    import constrain
    from constrain.automata import charset

    positives = [c for c, (p, negated) in SRE_CATEGORY_SIGN.items() if not negated]
    before = {c: sre_category(c) for c in positives}
    constrain.clear_caches()
    assert charset.oracle_charset.cache_info().currsize == 0
    for c in positives:
        assert sre_category(c) is before[c]
    assert charset.oracle_charset.cache_info().currsize == 0  # no scan again
