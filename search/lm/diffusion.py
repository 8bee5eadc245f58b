"""The masked-diffusion LM protocol and its transformers wrapper.

A masked-diffusion LM (LLaDA, Nie et al. 2025; Dream, Ye et al. 2025) scores a
whole canvas at once: for every position, masked or not, a distribution over the
vocabulary. :func:`search.diffusion.driver.diffusion_generate` needs only
:class:`MaskedDiffusionLM`; :class:`TransformersDiffusionLM` provides it over a
transformers model.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import numpy as np

__all__ = ["MaskedDiffusionLM", "TransformersDiffusionLM"]


@runtime_checkable
class MaskedDiffusionLM(Protocol):
    """What the driver needs from a masked-diffusion LM.

    * ``vocab_size``: the number of logit columns (ids of the constraint's vocabulary);
    * ``mask_token_id``: the id of the mask token;
    * ``logprobs(canvases)``: for a ``(B, L)`` array of ids (masked positions hold
      ``mask_token_id``) the ``(B, L, vocab_size)`` log-probabilities of every
      position (what LLaDA / Dream return as logits, log-softmaxed);
    * ``calls``: canvases scored so far.
    """

    vocab_size: int
    mask_token_id: int
    calls: int

    def logprobs(self, canvases) -> np.ndarray:
        ...


class TransformersDiffusionLM:
    """A transformers masked-diffusion model (LLaDA, Dream, …) as a
    :class:`MaskedDiffusionLM`.

    Args:
        model: a ``torch.nn.Module`` whose ``model(input_ids).logits`` is ``(B, L,
            V_model)`` (LLaDA: ``AutoModel.from_pretrained(..., trust_remote_code=True)``).
        mask_token_id: the model's mask id (LLaDA: 126336; Dream:
            ``tokenizer.mask_token_id``).
        vocab_size: columns to return (the constraint vocabulary's size): extra
            model columns are dropped, missing ones get ``-inf``.
        shift: Dream-style models predict position ``i`` at output ``i - 1``: the
            logits are shifted right by one (as Dream's own sampler does).
        device: where to run (default: the model's).

    Guarantee: ``logprobs`` is ``log_softmax`` of the model's logits over the full
    model vocabulary (float32), sliced or padded to ``vocab_size`` columns; no
    caching (one forward per call; every canvas counts in ``calls``).
    """

    def __init__(self, model, mask_token_id: int, vocab_size: int | None = None, *,
                 shift: bool = False, device=None):
        self.model = model
        self.mask_token_id = int(mask_token_id)
        self.shift = shift
        self.device = device
        cfg = getattr(model, "config", None)
        self.vocab_size = int(vocab_size if vocab_size is not None else cfg.vocab_size)
        self.calls = 0

    def logprobs(self, canvases) -> np.ndarray:
        """``(B, L, vocab_size)`` log-probabilities of every position (see the class
        guarantee; the interface of LLaDA, Nie et al. 2025, and Dream, Ye et al. 2025)."""
        import torch

        ids = torch.as_tensor(np.atleast_2d(np.asarray(canvases, dtype=np.int64)))
        if self.device is not None:
            ids = ids.to(self.device)
        else:
            try:
                ids = ids.to(next(self.model.parameters()).device)
            except (StopIteration, AttributeError):
                pass
        with torch.no_grad():
            logits = self.model(ids).logits
            if self.shift:
                logits = torch.cat([logits[:, :1], logits[:, :-1]], dim=1)
            lp = torch.log_softmax(logits.float(), dim=-1).cpu().numpy()
        self.calls += lp.shape[0]
        v = self.vocab_size
        if lp.shape[2] >= v:
            return np.ascontiguousarray(lp[:, :, :v])
        out = np.full(lp.shape[:2] + (v,), -np.inf, dtype=lp.dtype)
        out[:, :, :lp.shape[2]] = lp
        return out
