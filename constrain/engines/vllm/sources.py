"""One :class:`~constrain.engines.requests.ConstraintSource` per model in a
process, and what the front end knows about the engine it admits requests for.

vLLM runs a request's validation in the front-end process and its masking in
the engine process; each keeps its own source (vocabulary, compiler, compiled
constraints), made on first use from the tokenizer the engine gives it, with the
budgets of the environment (:func:`~constrain.engines.requests.limits_from_env`),
so that both processes compile under the same ones. Nothing here imports vLLM.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass

from constrain.engines.requests import ConstraintSource, limits_from_env
from constrain.vocab.vocabulary import Vocabulary
from constrain.warmup import warm_up

#: the JSON style of the backend route (vLLM's requests do not say): vLLM's own
#: default lets the model put whitespace between JSON tokens
JSON_WHITESPACE_ENV = "TRELLIS_VLLM_JSON_WHITESPACE"

_lock = threading.Lock()
_sources: dict[tuple, ConstraintSource] = {}


def _tokenizer_key(tokenizer) -> tuple:
    return (getattr(tokenizer, "name_or_path", None), type(tokenizer).__qualname__, len(tokenizer))


def source_for(tokenizer, vocab_size: int, *, json_whitespace: str = "compact",
               warm: bool = False) -> ConstraintSource:
    """The process's source for ``tokenizer`` with ``vocab_size`` logits
    (ids past the tokenizer's own are padding), made on first use with the
    budgets of the environment. ``warm`` also loads Trellis's kernels and builds
    the vocabulary's token trie now (:func:`constrain.warm_up`), so that no
    compile's time budget pays for them: engines ask for it at start-up."""
    key = (_tokenizer_key(tokenizer), int(vocab_size), json_whitespace)
    with _lock:
        source = _sources.get(key)
        if source is None:
            limits, cache_bytes = limits_from_env()
            vocab = Vocabulary.from_huggingface(tokenizer, vocab_size=int(vocab_size))
            source = ConstraintSource(vocab, limits=limits, cache_bytes=cache_bytes,
                                      json_whitespace=json_whitespace)
            if warm:
                warm_kernels(vocab)
            _sources[key] = source
    return source


def warm_kernels(vocab: Vocabulary) -> float:
    """Load (or, on a cold numba cache, compile) every kernel Trellis uses,
    and build ``vocab``'s token trie (:func:`constrain.warm_up`, whose
    compiles have no time budget); returns the seconds taken."""
    return warm_up(vocab)


def backend_json_whitespace(disable_any_whitespace: bool = False) -> str:
    """The JSON style of the backend route: ``$TRELLIS_VLLM_JSON_WHITESPACE``
    (``compact`` or ``flexible``) when set, else ``compact`` when vLLM's
    ``structured_outputs_config.disable_any_whitespace`` is (as xgrammar's
    backend reads it), else ``flexible``."""
    value = os.environ.get(JSON_WHITESPACE_ENV) or (
        "compact" if disable_any_whitespace else "flexible")
    if value not in ("compact", "flexible"):
        from constrain.errors import ConstraintError

        raise ConstraintError(f"${JSON_WHITESPACE_ENV} must be 'compact' or 'flexible', "
                              f"not {value!r}")
    return value


@dataclass(frozen=True)
class FrontEnd:
    """What a front end's request validation knows of its engine: the
    tokenizer (``None`` when the engine skips it), the model's vocabulary size,
    and whether the engine decodes speculatively (then vLLM runs no custom
    logits processor)."""

    tokenizer: object
    vocab_size: int
    speculative: bool
    seen_at: float


_front_end: FrontEnd | None = None


def set_front_end(tokenizer, vocab_size: int, speculative: bool) -> None:
    """Record the engine a front end validates requests for (the plugin does it
    on each request's validation, just before the logits processors' own)."""
    global _front_end
    current = _front_end
    if (current is None or current.tokenizer is not tokenizer or current.vocab_size != vocab_size
            or current.speculative != speculative):
        _front_end = FrontEnd(tokenizer, int(vocab_size), bool(speculative), time.time())


def front_end() -> FrontEnd | None:
    """The engine last recorded by :func:`set_front_end` in this process, or
    ``None`` (the plugin is not loaded, or no request was validated yet)."""
    return _front_end


__all__ = ["JSON_WHITESPACE_ENV", "warm_kernels", "source_for", "backend_json_whitespace", "FrontEnd",
           "set_front_end", "front_end"]
