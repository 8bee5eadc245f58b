"""Trellis as SGLang's grammar backend, against SGLang's own code (run them
with the SGLang environment: ``bash .ci/setup-sglang && .venv-sglang/bin/python
-m pytest -q tests/sglang``; ``.ci/run`` does where the disk allows).

Where SGLang is not installed (Trellis's own ``.venv``) nothing here is
collected, so the default suite neither needs SGLang nor spends time on it.
"""

from __future__ import annotations

import importlib.util


def _sglang_installed() -> bool:
    """Whether the real SGLang package is installed here (this folder, named
    ``sglang`` and on ``sys.path`` under pytest, makes a namespace package of
    that name, which does not count)."""
    spec = importlib.util.find_spec("sglang")
    return spec is not None and spec.origin is not None


if not _sglang_installed():
    collect_ignore_glob = ["*.py"]
