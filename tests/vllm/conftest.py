"""The real-engine tests of Trellis inside vLLM (run them with the vLLM
environment: ``bash .ci/setup-vllm && .venv-vllm/bin/python -m pytest -q
tests/vllm``; ``.ci/run`` does).

Where vLLM is not installed (Trellis's own ``.venv``) nothing here is
collected, so the default suite neither needs vLLM nor spends time on it.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from vllm_testing import vllm_importable  # noqa: E402

if not vllm_importable():
    collect_ignore_glob = ["*.py"]
