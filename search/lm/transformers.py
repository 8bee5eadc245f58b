"""Language-model wrappers used by :func:`search.generate` and the search drivers.

:class:`TransformersLM` wraps a transformers causal LM and its tokenizer and gives
what decoding needs:

* ``lm.vocab`` — the :class:`constrain.Vocabulary` to compile constraints against
  (sized to the model's ``config.vocab_size``, so bitmasks cover every logit);
* ``lm.eos_token_ids`` — the tokenizer's EOS plus the generation config's;
* ``lm.prompt_ids(prompt)`` / ``lm.apply_chat_template(prompt)`` — prompt token ids;
* ``lm.logprobs(prefixes)`` / ``lm.logits(prefixes)`` — next-token scores of a batch
  of token prefixes, as a numpy array ``(n, V)``, reusing the KV cache of earlier
  prefixes that share a start with them;
* ``lm.open_streams(head, n)`` — ``n`` token streams after a shared ``head``,
  advanced in lock-step by one batched forward pass per position (the reasoning
  samplers' path, see :func:`search.lm.protocol.open_streams`);
* ``lm.calls`` — how many prefixes have been scored (each row of ``logprobs``, each
  stream row and each step of :func:`search.generate` counts one).

Every forward pass goes through :meth:`TransformersLM.forward_batch`; the
transformers version differences it needs (the name of the cache argument, whether
the model can compute the last position's logits only) are resolved once, in
:func:`_forward_options`.

Example::

    import search
    lm = search.load_default_model()
    ids = lm.apply_chat_template("Say hi")
    lp = lm.logprobs([tuple(ids)])        # (1, 49152) float32 log-probabilities
"""

from __future__ import annotations

import copy
import inspect
import os
from collections import OrderedDict
from typing import Iterable, Sequence

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np  # noqa: E402

__all__ = ["TransformersLM", "KVStreams"]


def _forward_options(model) -> tuple[str, dict]:
    """``(cache_kw, extra)`` for ``model.forward`` in the installed transformers:
    the name of the KV-cache argument (5.x renamed ``past_key_values`` to
    ``cache``) and the keyword that limits the logits to the last position, when
    the model has one (only the next token's logits are ever used)."""
    params = inspect.signature(model.forward).parameters
    cache_kw = "cache" if "cache" in params else "past_key_values"
    for kw in ("logits_to_keep", "num_logits_to_keep"):
        if kw in params:
            return cache_kw, {kw: 1}
    return cache_kw, {}


def _as_id_list(ids) -> list[int]:
    if ids is None:
        return []
    if isinstance(ids, int):
        return [ids]
    return [int(i) for i in ids]


class TransformersLM:
    """A transformers causal language model with its tokenizer.

    Args:
        model: a ``transformers`` ``PreTrainedModel`` with a causal-LM head.
        tokenizer: its tokenizer.
        eos_token_ids: ids that end generation; default: the tokenizer's
            ``eos_token_id`` plus the model's ``generation_config.eos_token_id``.
        name: a label for messages.
        kv_cache_size: how many scored prefixes keep their KV cache for reuse by
            :meth:`logits` / :meth:`logprobs` (the attribute of the same name may
            be raised later; :func:`search.as_lm` raises it to 64).
    """

    def __init__(
        self,
        model,
        tokenizer,
        eos_token_ids: Iterable[int] | None = None,
        name: str | None = None,
        kv_cache_size: int = 16,
    ):
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.name = name or getattr(model.config, "name_or_path", None) or type(model).__name__
        self.vocab_size = int(model.config.vocab_size)
        if eos_token_ids is None:
            eos = set(_as_id_list(getattr(tokenizer, "eos_token_id", None)))
            gen = getattr(model, "generation_config", None)
            if gen is not None:
                eos |= set(_as_id_list(getattr(gen, "eos_token_id", None)))
            eos_token_ids = eos
        self.eos_token_ids: tuple[int, ...] = tuple(sorted({int(i) for i in eos_token_ids}))
        if not self.eos_token_ids:
            raise ValueError(f"{self.name}: no EOS token id found; pass eos_token_ids=")
        #: number of prefixes scored so far (see the module docstring)
        self.calls = 0
        self._vocab = None
        self._kv: OrderedDict = OrderedDict()
        #: how many scored prefixes keep their KV cache (see :meth:`logits`)
        self.kv_cache_size = int(kv_cache_size)
        self._cache_kw, self._extra = _forward_options(model)

    def __repr__(self) -> str:
        return f"TransformersLM({self.name!r}, vocab_size={self.vocab_size}, device={self.device})"

    # -- properties -------------------------------------------------------------

    @property
    def device(self):
        """The torch device the model's weights are on."""
        return self.model.device

    @property
    def dtype(self):
        """The torch dtype of the model's weights."""
        return self.model.dtype

    @property
    def vocab(self):
        """The :class:`constrain.Vocabulary` of the tokenizer, sized to the model's
        ``config.vocab_size`` (built on first use, then kept)."""
        if self._vocab is None:
            from constrain import Vocabulary

            self._vocab = Vocabulary.from_huggingface(
                self.tokenizer, vocab_size=self.vocab_size, eos_token_ids=list(self.eos_token_ids),
                name=self.name,
            )
        return self._vocab

    @property
    def is_chat(self) -> bool:
        """Whether the tokenizer has a chat template (prompts are then wrapped in it
        by default)."""
        return bool(getattr(self.tokenizer, "chat_template", None))

    # -- text <-> ids -------------------------------------------------------------

    def encode(self, text: str) -> list[int]:
        """The token ids of ``text``, without any added special tokens."""
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def decode(self, token_ids: Iterable[int]) -> str:
        """The text of ``token_ids``: the exact bytes of the tokens (EOS, special and
        padding ids skipped) decoded as UTF-8, an incomplete trailing character
        shown as U+FFFD."""
        return self.vocab.decode([int(t) for t in token_ids]).decode("utf-8", errors="replace")

    def apply_chat_template(self, prompt: str, system: str | None = None) -> list[int]:
        """The token ids of a one-turn chat: an optional ``system`` message, the user
        ``prompt`` and the assistant header, so that the model answers next."""
        if not self.is_chat:
            raise ValueError(f"{self.name} has no chat template")
        messages = []
        if system is not None:
            messages.append({"role": "system", "content": system})
        messages.append({"role": "user", "content": prompt})
        text = self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        return self.encode(text)

    def prompt_ids(self, prompt, chat_template: bool | None = None, system: str | None = None) -> list[int]:
        """The token ids to condition on: ``prompt`` itself if it is a sequence of
        ids; else the chat template applied to it when ``chat_template`` is true, or
        is ``None`` and the model is a chat model; else the plain encoding (with the
        tokenizer's BOS, if it adds one)."""
        if not isinstance(prompt, str):
            return _as_id_list(prompt)
        if chat_template is None:
            chat_template = self.is_chat
        if chat_template:
            return self.apply_chat_template(prompt, system=system)
        if system is not None:
            raise ValueError("a system prompt needs the chat template")
        return list(self.tokenizer.encode(prompt, add_special_tokens=True))

    # -- scoring ----------------------------------------------------------------

    def forward_batch(self, ids: Sequence[Sequence[int]], past=None, *, attention_mask=None,
                      position_ids=None):
        """One forward pass over a batch of equally long rows of ids after the KV
        cache ``past`` (``None`` for the start of the sequences; else a cache of
        ``len(ids)`` rows, extended in place). Returns ``(logits, cache)``: the
        next-token logits after each row's last id, ``(len(ids), V)`` in the
        model's dtype on its device, and the extended cache. Counts ``len(ids)``
        calls. The transformers version differences are handled here, once.

        Rows of different lengths are left-padded by the caller, which passes
        ``attention_mask`` (long ``(len(ids), past + new)``, 0 at padding) and
        ``position_ids`` (long ``(len(ids), new)``, each row counted from its
        first real id): see :func:`search.generate_batch`."""
        import torch

        x = torch.tensor([[int(t) for t in row] for row in ids], dtype=torch.long, device=self.device)
        padding = {}
        if attention_mask is not None:
            padding["attention_mask"] = attention_mask.to(self.device)
        if position_ids is not None:
            padding["position_ids"] = position_ids.to(self.device)
        with torch.inference_mode():
            out = self.model(input_ids=x, use_cache=True, **{self._cache_kw: past}, **padding,
                             **self._extra)
        cache = getattr(out, "cache", None)
        if cache is None:
            cache = out.past_key_values
        self.calls += len(ids)
        return out.logits[:, -1], cache

    def forward(self, token_ids: Sequence[int], past=None):
        """Run the model on ``token_ids`` after the KV cache ``past`` (``None`` for
        the start of a sequence; it is extended in place). Returns ``(logits,
        past)``: the float32 next-token logits ``(V,)`` after the last id, on the
        model's device, and the extended cache. Counts one call."""
        if len(token_ids) == 0:
            raise ValueError("cannot score an empty prefix")
        logits, cache = self.forward_batch([token_ids], past)
        return logits[0].float(), cache

    def _next_logits(self, prefix: tuple[int, ...]):
        hit = self._kv.get(prefix)
        if hit is not None:
            self._kv.move_to_end(prefix)
            self.calls += 1
            return hit[1]
        best: tuple[int, ...] = ()
        for key in self._kv:
            if len(best) < len(key) < len(prefix) and prefix[: len(key)] == key:
                best = key
        past = copy.deepcopy(self._kv[best][0]) if best else None
        logits, past = self.forward(prefix[len(best):], past)
        self._kv[prefix] = (past, logits)
        while len(self._kv) > self.kv_cache_size:
            self._kv.popitem(last=False)
        return logits

    def logits(self, prefixes: Sequence[Sequence[int]]) -> np.ndarray:
        """Next-token logits after each prefix: a float32 array ``(len(prefixes), V)``.

        Each prefix is scored on its own; the KV cache of the longest recently
        scored prefix it extends is copied and reused, so scoring ``p`` and then
        ``p + (t,)`` costs one token. Every prefix counts one in :attr:`calls`."""
        rows = [self._next_logits(tuple(int(t) for t in p)).cpu().numpy() for p in prefixes]
        if not rows:
            return np.zeros((0, self.vocab_size), dtype=np.float32)
        return np.stack(rows).astype(np.float32, copy=False)

    def logprobs(self, prefixes: Sequence[Sequence[int]]) -> np.ndarray:
        """Next-token log-probabilities after each prefix: a float32 array
        ``(len(prefixes), V)`` (log-softmax of :meth:`logits`)."""
        x = self.logits(prefixes).astype(np.float64)
        x -= x.max(axis=1, keepdims=True)
        x -= np.log(np.exp(x).sum(axis=1, keepdims=True))
        return x.astype(np.float32)

    def clear_cache(self) -> None:
        """Forget the KV caches kept for :meth:`logits`."""
        self._kv.clear()

    def open_streams(self, head: Sequence[int], n: int) -> tuple["KVStreams", np.ndarray]:
        """``n`` token streams after ``head``: ``(streams, rows)``, ``rows`` the
        float64 next-token log-probabilities ``(n, V)`` after ``head``. ``head`` is
        run once and its KV cache repeated over the streams; see
        :class:`KVStreams`. Counts one call."""
        if len(head) == 0:
            raise ValueError("cannot score an empty prefix")
        logits, cache = self.forward_batch([head])
        if n > 1:
            cache.batch_repeat_interleave(n)
        return KVStreams(self, cache, n), np.tile(_log_softmax64(logits)[0], (n, 1))


def _log_softmax64(logits) -> np.ndarray:
    """Row-wise log-softmax of a ``(B, V)`` logits tensor, computed in float32 by
    torch, as a float64 numpy array."""
    import torch

    with torch.inference_mode():
        return torch.log_softmax(logits.float(), dim=-1).cpu().numpy().astype(np.float64)


class KVStreams:
    """Token streams over a :class:`TransformersLM` that share one batched KV
    cache: each :meth:`advance` is one forward pass over the streams still live,
    and no cache is ever copied (streams that end are dropped from the batch).
    Made by :meth:`TransformersLM.open_streams`; ``lm.calls`` grows by the number
    of rows scored, as with :meth:`TransformersLM.logprobs`."""

    def __init__(self, lm: TransformersLM, cache, n: int):
        self.lm = lm
        self._cache = cache
        self._rows = list(range(n))  # the stream behind each batch row of the cache

    def advance(self, idx: Sequence[int], toks: Sequence[int]) -> np.ndarray:
        """Extend streams ``idx`` (a sub-sequence of the live ones, in order) by
        ``toks``: their float64 next-token log-probabilities ``(len(idx), V)``.
        The other streams end."""
        import torch

        idx = list(idx)
        if idx != self._rows:
            keep = [self._rows.index(i) for i in idx]
            self._cache.batch_select_indices(torch.tensor(keep, dtype=torch.long))
            self._rows = idx
        logits, self._cache = self.lm.forward_batch([[t] for t in toks], self._cache)
        return _log_softmax64(logits)
