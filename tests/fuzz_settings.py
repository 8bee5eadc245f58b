"""How many examples the fuzz tests draw: the default suite's few hundred, or
many more under ``TRELLIS_FUZZ=long`` (``TRELLIS_FUZZ=long pytest
tests/test_fuzz_regex.py tests/test_fuzz_lark.py tests/test_lookaround.py``)."""

from __future__ import annotations

import os

#: how many times more examples a long run draws
LONG_FACTOR = 40


def long_run() -> bool:
    """Whether ``TRELLIS_FUZZ=long`` asks for the long run."""
    return os.environ.get("TRELLIS_FUZZ", "").lower() == "long"


def examples(default: int) -> int:
    """``default`` examples, or :data:`LONG_FACTOR` times as many in a long run."""
    return default * LONG_FACTOR if long_run() else default
