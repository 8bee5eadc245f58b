"""Trellis as SGLang's grammar backend, against SGLang's own code (run them
with the SGLang environment: ``bash .ci/setup-sglang && .venv-sglang/bin/python
-m pytest -q tests/sglang``; ``.ci/run`` does where the disk allows).

Where SGLang is not installed (Trellis's own ``.venv``) nothing here is
collected, so the default suite neither needs SGLang nor spends time on it.
"""

from __future__ import annotations

import importlib.util

if importlib.util.find_spec("sglang") is None:
    collect_ignore_glob = ["*.py"]
