"""The default model: conversion cache, reload equality, the TransformersLM wrapper."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("gguf")

from search.models import smollm2  # noqa: E402

IDS = [1, 9690, 198, 2683, 359, 253, 5356, 5646, 2, 198, 1, 4093, 198, 26843]




def _logits(model, ids=IDS):
    with torch.no_grad():
        return model(torch.tensor([ids])).logits[0].float()


def test_cache_dir_honours_env(monkeypatch, tmp_path):
    monkeypatch.setenv("TRELLIS_CACHE_DIR", str(tmp_path / "c"))
    assert smollm2.cache_dir() == tmp_path / "c"
    assert (tmp_path / "c").is_dir()
    monkeypatch.delenv("TRELLIS_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "x"))
    assert smollm2.cache_dir() == tmp_path / "x" / "trellis"


def test_a_cache_folder_that_cannot_be_made_is_named(monkeypatch, tmp_path):
    """A file in its place was a raw FileExistsError (a traceback and exit 1
    from the CLI); with HOME unset and no passwd entry the cache went into a
    folder named "~" under the working directory."""
    (tmp_path / "file").write_text("x")
    monkeypatch.setenv("TRELLIS_CACHE_DIR", str(tmp_path / "file"))
    with pytest.raises(smollm2.ModelCacheError, match="TRELLIS_CACHE_DIR"):
        smollm2.cache_dir()
    monkeypatch.delenv("TRELLIS_CACHE_DIR")
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setattr(smollm2.os.path, "expanduser", lambda p: p)
    with pytest.raises(smollm2.ModelCacheError, match="no home folder"):
        smollm2.cache_dir()


def test_installed_cache_folders_follow_the_umask(tmp_path):
    """mkdtemp makes 0700: a cache built by root was unreadable to every other
    user of the machine."""
    tmp = tmp_path / "t.tmp-1"
    (tmp / "sub").mkdir(parents=True)
    (tmp / "sub" / "f").write_text("x")
    tmp.chmod(0o700)
    (tmp / "sub" / "f").chmod(0o600)
    old = os.umask(0o022)
    try:
        smollm2._install_dir(tmp, tmp_path / "t")
    finally:
        os.umask(old)
    assert (tmp_path / "t").stat().st_mode & 0o777 == 0o755
    assert (tmp_path / "t" / "sub" / "f").stat().st_mode & 0o777 == 0o644


def test_default_cache_layout(lm):
    path = smollm2.converted_model_dir()
    assert path.name == f"model-f32-v{smollm2.CACHE_FORMAT}"
    meta = json.loads((path / "trellis.json").read_text())
    assert meta["gguf_file"] == smollm2.GGUF_NAME
    config = json.loads((path / "config.json").read_text())
    assert "quantization_config" not in config
    assert (path / "model.safetensors").stat().st_size > 400e6
    assert not list(path.parent.glob("*.tmp-*")), "a temporary directory was left behind"


def test_conversion_is_atomic_and_reload_is_identical(lm, monkeypatch, tmp_path, capsys):
    """Convert into a fresh cache with debris from an aborted run in it: the debris
    goes, the conversion's own bit-for-bit check passes (and says on stderr that
    it is converting), the reloaded model equals the session's model, and a
    second call reuses the cache, silently."""
    monkeypatch.setenv("TRELLIS_CACHE_DIR", str(tmp_path))
    root = tmp_path / smollm2.MODEL_NAME
    stale_tmp = root / f"model-f32-v{smollm2.CACHE_FORMAT}.tmp-deadbeef"
    stale_tmp.mkdir(parents=True)
    (stale_tmp / "model.safetensors").write_bytes(b"truncated")
    broken = root / f"model-f32-v{smollm2.CACHE_FORMAT}"
    broken.mkdir()
    (broken / "config.json").write_text("{}")  # no trellis.json: an unfinished cache

    path = smollm2.converted_model_dir()
    assert path == broken
    assert "converting the default model once" in capsys.readouterr().err
    assert (path / "trellis.json").is_file()
    assert not stale_tmp.exists()
    assert sorted(p.name for p in root.iterdir() if not p.name.startswith(".")) == [path.name]

    def boom(*a, **k):
        raise AssertionError("converted again although the cache is valid")

    monkeypatch.setattr(smollm2, "load_gguf_model", boom)
    assert smollm2.converted_model_dir() == path
    assert "converting" not in capsys.readouterr().err
    reloaded = smollm2.load_model()
    assert torch.equal(_logits(reloaded), _logits(lm.model))


def test_unreadable_cache_is_converted_again(monkeypatch, tmp_path):
    """A cache that passes the cheap check but fails to load is rebuilt, once."""
    calls = []

    def fake_dir(rebuild=False, verbose=False):
        calls.append(rebuild)
        return tmp_path / ("new" if rebuild else "old")

    def fake_load(path, device, dtype):
        if path.name == "old":
            raise OSError("truncated safetensors file")
        return "model"

    monkeypatch.setattr(smollm2, "converted_model_dir", fake_dir)
    monkeypatch.setattr(smollm2, "_load_dir", fake_load)
    assert smollm2.load_model() == "model"
    assert calls == [False, True]


def test_load_default_model_is_memoised(lm):
    assert smollm2.load_default_model() is lm
    assert lm.device.type == "cpu" and lm.dtype == torch.float32


def test_wrapper_basics(lm):
    assert lm.vocab_size == 49152 == len(lm.vocab)
    assert 2 in lm.eos_token_ids and lm.vocab.eos_token_ids == lm.eos_token_ids
    # the protocol's single id (the model had none: AttributeError)
    assert lm.eos_token_id == lm.eos_token_ids[0] == min(lm.eos_token_ids)
    assert lm.is_chat
    ids = lm.apply_chat_template("Hi")
    text = lm.tokenizer.decode(ids)
    assert text.startswith("<|im_start|>system\n") and text.endswith("<|im_start|>assistant\n")
    assert "You are terse." in lm.tokenizer.decode(lm.apply_chat_template("Hi", system="You are terse."))
    assert lm.prompt_ids("Hi") == ids
    assert lm.prompt_ids("Hi", chat_template=False) == lm.encode("Hi")
    assert lm.prompt_ids([5, 6]) == [5, 6]
    assert lm.decode(lm.encode("héllo wörld")) == "héllo wörld"


def test_logprobs_reuse_the_kv_cache_and_match_a_full_forward(lm):
    lm.clear_cache()
    p = tuple(IDS[:10])
    calls, passes, tokens = lm.calls, lm.forward_passes, lm.tokens_computed
    lp = lm.logprobs([p, p + (IDS[10],), p + (IDS[10], IDS[11]), p])
    assert lp.shape == (4, 49152) and lp.dtype == np.float32
    assert lm.calls == calls + 4
    # one pass over the longest prefix: the others are its starts, the repeat is the same row
    assert (lm.forward_passes - passes, lm.tokens_computed - tokens) == (1, 12)
    # the children of a cached prefix: one token each, in one pass
    kids = lm.logprobs([p + (IDS[10], IDS[11], t) for t in (IDS[12], IDS[13], 100)])
    assert (lm.forward_passes - passes, lm.tokens_computed - tokens) == (2, 15)
    full = torch.log_softmax(_logits(lm.model, IDS[:12] + IDS[13:14]), dim=-1).numpy()
    np.testing.assert_allclose(kids[1], full[12], atol=2e-4)
    np.testing.assert_allclose(np.exp(lp).sum(axis=1), 1.0, rtol=1e-4)
    np.testing.assert_array_equal(lp[0], lp[3])
    full = torch.log_softmax(_logits(lm.model, IDS[:12]), dim=-1).numpy()
    np.testing.assert_allclose(lp[0], full[9], atol=2e-4)
    np.testing.assert_allclose(lp[2], full[11], atol=2e-4)
    assert lm.logprobs([]).shape == (0, 49152)
    with pytest.raises(ValueError):
        lm.logprobs([()])


def test_clear_caches_lets_go_of_unused_models_but_never_loads_one_twice():
    """``constrain.clear_caches()`` empties the loaded-model cache (registered
    with constrain's registry; constrain imports no search): a model no one
    holds is freed, one still held is handed out again rather than loaded a
    second time beside it. Stand-in objects under keys of their own, so no
    model is loaded here."""
    import gc
    import weakref

    import constrain

    class Model:
        pass

    built = []

    def build():
        built.append(Model())
        return built[-1]

    loaded = smollm2._loaded()
    used = loaded.get_or_build(("test", "used"), build)
    unused = weakref.ref(loaded.get_or_build(("test", "unused"), build))
    assert loaded.get_or_build(("test", "used"), build) is used and len(built) == 2
    built.clear()
    constrain.clear_caches()
    gc.collect()
    assert unused() is None
    assert loaded.get_or_build(("test", "used"), build) is used and built == []
    assert loaded.get_or_build(("test", "unused"), build) is built[0]
