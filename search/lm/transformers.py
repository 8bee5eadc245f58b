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

import inspect
import operator
import os
import threading
from typing import Iterable, Sequence

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np  # noqa: E402

from search.arguments import count
from search.lm.kv_tree import KVPrefixTree, common_length  # noqa: E402
from search.lm.text import TokenizerText, eos_ids  # noqa: E402

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


#: run a start shared by several prefixes of a call on its own once it is this
#: many tokens longer than what the tree holds of it (one extra forward pass
#: against running it once per prefix)
_SHARED_MIN = 4


def _cache_layers(cache) -> list:
    """``[(keys, values)]`` per layer of a transformers cache, each ``(B, H, S, D)``."""
    layers = getattr(cache, "layers", None)
    if layers is not None:
        return [(layer.keys, layer.values) for layer in layers]
    return list(zip(cache.key_cache, cache.value_cache))


def _plain_layers(cache) -> bool:
    """Whether every layer of ``cache`` keeps the keys and values of every
    position (no sliding window, no recurrent state): only then can segments of
    it be cut out and put together again."""
    try:
        from transformers.cache_utils import DynamicCache, DynamicLayer
    except ImportError:
        return False
    if type(cache) is not DynamicCache:
        return False
    layers = getattr(cache, "layers", None)
    return layers is not None and all(type(layer) is DynamicLayer for layer in layers)


class TransformersLM(TokenizerText):
    """A transformers causal language model with its tokenizer.

    Args:
        model: a ``transformers`` ``PreTrainedModel`` with a causal-LM head.
        tokenizer: its tokenizer.
        eos_token_ids: ids that end generation; default: the tokenizer's
            ``eos_token_id`` plus the model's ``generation_config.eos_token_id``.
        name: a label for messages.
        kv_cache_bytes: the byte budget of the KV segments (and kept logits)
            that :meth:`logits` shares between prefixes; the least recently used
            leaves are evicted beyond it (the attribute of the same name may be
            changed later).
        max_batch_rows / max_batch_tokens: the most rows, and rows × positions,
            of one forward pass of :meth:`logits`.
    """

    def __init__(
        self,
        model,
        tokenizer,
        eos_token_ids: Iterable[int] | None = None,
        name: str | None = None,
        kv_cache_bytes: int = 256 << 20,
        max_batch_rows: int = 32,
        max_batch_tokens: int = 16384,
    ):
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.name = name or getattr(model.config, "name_or_path", None) or type(model).__name__
        self.vocab_size = int(model.config.vocab_size)
        gen = getattr(model, "generation_config", None)
        self.eos_token_ids: tuple[int, ...] = eos_ids(self.name, tokenizer, eos_token_ids,
                                                      getattr(gen, "eos_token_id", None))
        bad = [i for i in self.eos_token_ids if not 0 <= i < self.vocab_size]
        if bad:
            raise ValueError(f"{self.name}: EOS id {bad[0]} is outside the model's "
                             f"{self.vocab_size} ids")
        #: number of prefixes scored so far (see the module docstring)
        self.calls = 0
        #: tokens run through the model so far (padding not counted)
        self.tokens_computed = 0
        #: forward passes of the model so far
        self.forward_passes = 0
        self._vocab = None
        #: the byte budget of :attr:`kv_tree` (see :meth:`logits`)
        self.kv_cache_bytes = int(kv_cache_bytes)
        self.max_batch_rows = int(max_batch_rows)
        self.max_batch_tokens = int(max_batch_tokens)
        self._kv_tree = KVPrefixTree(self.kv_cache_bytes)
        self._tree_ok: bool | None = None  # whether the model's cache is plain per-layer keys and values
        self._lock = threading.RLock()
        self._count_lock = threading.Lock()
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
    def eos_token_id(self) -> int:
        """The first of :attr:`eos_token_ids` (sorted: the smallest), as the
        LM protocol has it."""
        return self.eos_token_ids[0]

    # -- scoring ----------------------------------------------------------------

    def _run(self, x, past=None, attention_mask=None, position_ids=None, keep: int | None = 1):
        """``model(x)`` after ``past`` in inference mode: ``(logits of the last
        ``keep`` positions (all when ``None``), cache)``. Counts the real tokens
        of ``x`` (not padding) in :attr:`tokens_computed`; no calls."""
        import torch

        extra = dict(self._extra)
        if extra and keep != 1:
            extra = {next(iter(extra)): 0 if keep is None else int(keep)}
        padding = {}
        if attention_mask is not None:
            padding["attention_mask"] = attention_mask.to(self.device)
            real = int(attention_mask[:, -x.shape[1]:].sum())
        else:
            real = int(x.numel())
        if position_ids is not None:
            padding["position_ids"] = position_ids.to(self.device)
        self._count(tokens=real, passes=1)
        with torch.inference_mode():
            out = self.model(input_ids=x.to(self.device), use_cache=True, **{self._cache_kw: past}, **padding,
                             **extra)
        cache = getattr(out, "cache", None)
        if cache is None:
            cache = out.past_key_values
        logits = out.logits
        if keep is not None and logits.shape[1] != keep:  # a model without logits_to_keep
            logits = logits[:, -keep:]
        return logits, cache

    def forward_batch(self, ids: Sequence[Sequence[int]], past=None, *, attention_mask=None,
                      position_ids=None):
        """One forward pass over a batch of equally long rows of ids after the KV
        cache ``past`` (``None`` for the start of the sequences; else a cache of
        ``len(ids)`` rows, extended in place). Returns ``(logits, cache)``: the
        next-token logits after each row's last id, ``(len(ids), V)`` in the
        model's dtype on its device, and the extended cache. Counts ``len(ids)``
        calls and the real ids in :attr:`tokens_computed`. The transformers
        version differences are handled here, once.

        Rows of different lengths are left-padded by the caller, which passes
        ``attention_mask`` (long ``(len(ids), past + new)``, 0 at padding) and
        ``position_ids`` (long ``(len(ids), new)``, each row counted from its
        first real id): see :func:`search.generate_batch`."""
        import torch

        x = torch.tensor([[int(t) for t in row] for row in ids], dtype=torch.long)
        logits, cache = self._run(x, past, attention_mask, position_ids)
        self._count(calls=len(ids))
        return logits[:, -1], cache

    def _count(self, calls: int = 0, tokens: int = 0, passes: int = 0) -> None:
        # generate() and KVStreams run forward passes outside the tree's lock,
        # possibly from several threads: the counters have a lock of their own
        with self._count_lock:
            self.calls += calls
            self.tokens_computed += tokens
            self.forward_passes += passes

    def forward(self, token_ids: Sequence[int], past=None):
        """Run the model on ``token_ids`` after the KV cache ``past`` (``None`` for
        the start of a sequence; it is extended in place). Returns ``(logits,
        past)``: the float32 next-token logits ``(V,)`` after the last id, on the
        model's device, and the extended cache. Counts one call."""
        (token_ids,) = self._checked([token_ids])
        logits, cache = self.forward_batch([token_ids], past)
        return logits[0].float(), cache

    def logits(self, prefixes: Sequence[Sequence[int]]) -> np.ndarray:
        """Next-token logits after each prefix: a float32 array ``(len(prefixes), V)``.

        The prefixes are scored together, in as few batched forward passes as
        :attr:`max_batch_rows` and :attr:`max_batch_tokens` allow, each row
        continuing the longest start of it that :attr:`kv_tree` holds (see
        :mod:`search.lm.kv_tree`: KV segments shared along common prefixes,
        never copied per prefix, within :attr:`kv_cache_bytes`). So scoring ``p``
        and then the children ``p + (t,)`` costs one token per child; a prefix
        that is a start of another one in the same call is read off that one's
        row; a long start shared by several prefixes that the tree does not hold
        yet is run once. Every prefix counts one in :attr:`calls`, a repeated or
        cached one too; :attr:`tokens_computed` counts the tokens actually run.
        Thread-safe (one call at a time)."""
        keys = self._checked(prefixes)
        if not keys:
            return np.zeros((0, self.vocab_size), dtype=np.float32)
        with self._lock:
            self._kv_tree.budget = int(self.kv_cache_bytes)
            rows = self._score(set(keys), want=True)
            self._count(calls=len(keys))
        return np.stack([rows[k] for k in keys]).astype(np.float32, copy=False)

    def _checked(self, prefixes) -> list[tuple[int, ...]]:
        """``prefixes`` as tuples of ids, each non-empty and of integers within
        the model's ids (``int()`` scored 2.9 as id 2, and an id past the
        embeddings was torch's IndexError, a device assert on CUDA)."""
        try:
            keys = [tuple(map(operator.index, p)) for p in prefixes]
        except TypeError:
            raise TypeError("prefixes are sequences of integer token ids") from None
        if keys:
            if not all(keys):
                raise ValueError("cannot score an empty prefix")
            lo, hi = min(map(min, keys)), max(map(max, keys))
            if lo < 0 or hi >= self.vocab_size:
                raise ValueError(f"token id {lo if lo < 0 else hi} is outside the model's "
                                 f"{self.vocab_size} ids")
        return keys

    def logprobs(self, prefixes: Sequence[Sequence[int]]) -> np.ndarray:
        """Next-token log-probabilities after each prefix: a float32 array
        ``(len(prefixes), V)`` (log-softmax of :meth:`logits`)."""
        x = self.logits(prefixes).astype(np.float64)
        x -= x.max(axis=1, keepdims=True)
        x -= np.log(np.exp(x).sum(axis=1, keepdims=True))
        return x.astype(np.float32)

    @property
    def kv_tree(self) -> KVPrefixTree:
        """The :class:`search.lm.kv_tree.KVPrefixTree` behind :meth:`logits`
        (``nbytes``, ``peak_nbytes``, ``evictions``, ``len()``)."""
        return self._kv_tree

    def clear_cache(self) -> None:
        """Forget the KV segments kept for :meth:`logits`."""
        with self._lock:
            self._kv_tree.clear()

    # -- the prefix-sharing scorer ----------------------------------------------

    @property
    def _sharing(self) -> bool:
        """Whether KV segments are shared (unknown before the first pass counts
        as yes; a model whose cache cannot be cut into segments is run whole)."""
        return self._tree_ok is not False

    def _score(self, keys: set, want: bool) -> dict:
        """Run the prefixes ``keys``: ``{key: float32 numpy logits}`` when
        ``want``, else only their KV segments are recorded (helper rows)."""
        tree = self._kv_tree
        out: dict = {}
        rest = []
        for k in keys:
            hit = tree.cached_logits(k) if want and self._sharing else None
            if hit is not None:
                out[k] = hit.numpy()
            else:
                rest.append(k)
        if not rest:
            return out
        rest.sort()
        # a prefix that starts the next one in sorted order starts every later one
        # up to the first that it does not start: it rides on that one's row
        carriers: dict = {}
        ride = None
        for k in reversed(rest):
            if ride is not None and len(k) < len(ride) and ride[:len(k)] == k:
                carriers[ride].append(k)
            else:
                ride = k
                carriers[k] = [k]
        order = sorted(carriers)
        held = {k: tree.match(k)[1] if self._sharing else 0 for k in order}
        if self._sharing and len(order) > 1:
            self._run_shared_starts(order, held)
        # rows with about as many new tokens share a pass (less padding)
        plan = sorted(order, key=lambda k: len(k) - min(held[k], min(len(m) for m in carriers[k]) - 1))
        group: list = []
        width = 0
        for k in plan:
            span = len(k)
            if group and (len(group) >= self.max_batch_rows
                          or (len(group) + 1) * max(width, span) > self.max_batch_tokens):
                self._run_group(group, carriers, out, want)
                group, width = [], 0
            group.append(k)
            width = max(width, span)
        if group:
            self._run_group(group, carriers, out, want)
        return out

    def _run_shared_starts(self, order: list, held: dict) -> None:
        """Run once the starts that several prefixes share beyond what the tree
        holds (``held``: a prompt not yet run, under many continuations)."""
        near = [common_length(a, b) for a, b in zip(order, order[1:])]
        helpers = set()
        for i, k in enumerate(order):
            shared = max(near[i - 1] if i else 0, near[i] if i < len(near) else 0)
            shared = min(shared, len(k) - 1)
            if shared - held[k] >= _SHARED_MIN:
                helpers.add(k[:shared])
        if helpers:
            self._score(helpers, want=False)

    def _new_cache(self, layers: list):
        """A transformers cache holding ``[(keys, values)]`` per layer."""
        from transformers.cache_utils import DynamicCache

        return DynamicCache(ddp_cache_data=layers)

    def _cached_start(self, k: tuple, need: int) -> tuple[list, int]:
        """``(path, c)``: the first ``c`` positions of ``k`` that the tree holds,
        at most ``need`` of them (a position whose logits are wanted is run)."""
        if not self._sharing:
            return [], 0
        path, matched = self._kv_tree.match(k)
        c = min(matched, need)
        return self._kv_tree.cut(path, c), c

    def _gathered_past(self, starts: list, P: int):
        """A cache of ``len(starts)`` rows of ``P`` positions holding each row's
        cached start ``(path, c)`` right-aligned, zeros before it (masked, but
        finite: masked keys still enter the products); ``None`` when ``P`` is 0."""
        import torch

        if not P:
            return None
        ref = next(node.kv for path, _ in starts for node, _ in path)
        L, _, H, _, D = ref.shape
        buf = torch.zeros((L, 2, len(starts), H, P, D), dtype=ref.dtype, device=ref.device)
        for i, (path, c) in enumerate(starts):
            if c:
                self._kv_tree.gather(path, buf, i, P)
        return self._new_cache([(buf[layer, 0], buf[layer, 1]) for layer in range(L)])

    def _record(self, cache, P: int, rows: list) -> None:
        """Put the positions a pass ran (after its ``P`` past ones) into the tree:
        ``rows`` of ``(key, c, n, logits or None)``, row ``i``'s ``n`` new
        positions right-aligned in the cache. The first pass decides whether the
        model's cache can be cut into segments at all."""
        import torch

        if self._tree_ok is None:
            self._tree_ok = _plain_layers(cache)
        if not self._tree_ok:
            return
        new = torch.stack([torch.stack((keys[:, :, P:], values[:, :, P:])) for keys, values in _cache_layers(cache)])
        width = new.shape[4]
        for i, (k, c, n, logits) in enumerate(rows):
            self._kv_tree.insert(k, new[:, :, i, :, width - n:].clone(), c, logits=logits)

    def _run_group(self, group: list, carriers: dict, out: dict, want: bool) -> None:
        """One batched forward pass over the carrier prefixes ``group``."""
        import torch

        rows = []
        for k in group:
            # the first position whose logits are wanted bounds the cached start
            path, c = self._cached_start(k, min(len(m) for m in carriers[k]) - 1)
            rows.append((k, path, c, len(k) - c))
        B = len(rows)
        P = max(r[2] for r in rows)
        N = max(r[3] for r in rows)
        x = torch.zeros((B, N), dtype=torch.long)
        mask = torch.zeros((B, P + N), dtype=torch.long)
        pos = torch.zeros((B, N), dtype=torch.long)
        for i, (k, _, c, n) in enumerate(rows):
            x[i, N - n:] = torch.tensor(k[c:], dtype=torch.long)
            mask[i, P - c:P] = 1
            mask[i, P + N - n:] = 1
            pos[i, N - n:] = torch.arange(c, c + n)
        past = self._gathered_past([(path, c) for _, path, c, _ in rows], P)
        # the riders' logits lie up to ``len(k) - len(m)`` positions before the last
        keep = max(len(k) - len(m) + 1 for k, *_ in rows for m in carriers[k]) if want else 1
        logits, cache = self._run(x, past, mask, pos, keep=keep)
        kept = []
        for i, (k, _, c, n) in enumerate(rows):
            last = None
            if want:
                lg = logits[i].float().cpu()
                for m in carriers[k]:
                    out[m] = lg[keep - 1 - (len(k) - len(m))].numpy().copy()
                last = lg[keep - 1].clone()
            kept.append((k, c, n, last))
        self._record(cache, P, kept)

    def open_streams(self, head: Sequence[int], n: int) -> tuple["KVStreams", np.ndarray]:
        """``n`` token streams after ``head``: ``(streams, rows)``, ``rows`` the
        float64 next-token log-probabilities ``(n, V)`` after ``head``. ``head``
        continues the longest start of it that :attr:`kv_tree` holds, is run
        once, recorded in the tree, and its KV cache repeated over the streams;
        see :class:`KVStreams`. Counts one call."""
        import torch

        (head,) = self._checked([head])
        count("n", n, 1)  # before the pass (-1 was numpy's error after it, counted)
        with self._lock:
            self._kv_tree.budget = int(self.kv_cache_bytes)
            path, c = self._cached_start(head, len(head) - 1)
            logits, cache = self._run(torch.tensor([head[c:]], dtype=torch.long),
                                      self._gathered_past([(path, c)], c))
            self._count(calls=1)
            self._record(cache, c, [(head, c, len(head) - c, logits[0, -1].float().cpu().clone())])
        if n > 1:
            cache.batch_repeat_interleave(n)
        return KVStreams(self, cache, n), np.tile(_log_softmax64(logits[:, -1])[0], (n, 1))


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
