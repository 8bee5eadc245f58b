"""What the real-engine tests and the vLLM benchmark share: the default model
as a directory vLLM can load, the engine settings that keep a 2-core machine's
starts short, and the environment every engine process needs.

Standard library only at import (vLLM is imported by the callers), so that
collecting tests/vllm without vLLM skips cleanly.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

#: engine settings of the tests: float32 (the converted model's dtype; vLLM's
#: CPU build would cast it to bfloat16, which this machine's CPUs, without
#: AVX-512, multiply ~40x slower), eager (no graph compilation at start-up), a
#: short context and a small KV cache (GiB)
ENGINE_KWARGS = dict(dtype="float32", enforce_eager=True, max_model_len=1024, max_num_seqs=32,
                     seed=0, gpu_memory_utilization=0.5)
KV_CACHE_GIB = "1"


def vllm_importable() -> bool:
    """Whether the real vLLM package is installed here (a namespace package
    named ``vllm`` made by a folder on ``sys.path`` does not count)."""
    spec = importlib.util.find_spec("vllm")
    return spec is not None and spec.origin is not None


def engine_environment() -> dict[str, str]:
    """The variables every engine process of the tests needs, set in
    ``os.environ`` (spawned engine processes inherit them) and returned.

    * ``VLLM_CPU_KVCACHE_SPACE``: a small KV cache;
    * ``VLLM_USE_AOT_COMPILE=0``: warm starts reuse the compile cache;
    * ``NUMBA_CACHE_DIR``: numba 0.65's kernel cache apart from the default
      suite's (numba keeps one version's kernels per cache file, so two numba
      versions sharing one would recompile every kernel in turn);
    * ``TOKENIZERS_PARALLELISM=false``: no fork warnings from tokenizers.
    """
    env = {
        "VLLM_CPU_KVCACHE_SPACE": KV_CACHE_GIB,
        "VLLM_USE_AOT_COMPILE": "0",
        "NUMBA_CACHE_DIR": str(REPO / ".venv-vllm" / "numba-cache"),
        "TOKENIZERS_PARALLELISM": "false",
    }
    for k, v in env.items():
        os.environ.setdefault(k, v)
    return {k: os.environ[k] for k in env}


def model_dir() -> Path:
    """The default model (SmolLM2-135M-Instruct, float32) as a directory vLLM
    loads: the converted model of :func:`search.models.smollm2.converted_model_dir`
    with the tokenizer of :func:`~search.models.smollm2.load_tokenizer` beside
    it (vLLM reads both from one place). Links to both caches, made once under
    the Trellis cache directory; nothing is downloaded."""
    from search.models import smollm2

    model = smollm2.converted_model_dir()
    smollm2.load_tokenizer()
    tokenizer = model.parent / "tokenizer"
    target = model.parent / "vllm-model"
    target.mkdir(exist_ok=True)
    for src in list(model.iterdir()) + list(tokenizer.iterdir()):
        link = target / src.name
        if link.is_symlink() and link.resolve() == src.resolve():
            continue
        if link.exists() or link.is_symlink():
            link.unlink()
        link.symlink_to(src)
    return target
