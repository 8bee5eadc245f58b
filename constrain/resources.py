"""Files shipped with Trellis."""

from __future__ import annotations

import importlib.resources
from pathlib import Path

from constrain.errors import ConstraintError


def grammar_path(name: str) -> str:
    """The filesystem path of a grammar shipped in ``grammars/`` (e.g.
    ``grammar_path("json.lark")``), in a source checkout or an installed package."""
    candidates = []
    try:
        candidates.append(Path(str(importlib.resources.files("constrain.grammars") / name)))
    except ModuleNotFoundError:
        pass
    candidates.append(Path(__file__).resolve().parent.parent / "grammars" / name)
    for path in candidates:
        if path.is_file():
            return str(path)
    raise ConstraintError(f"no grammar named {name!r} ships with Trellis")
