"""What every generation API has besides temperature: a repetition penalty,
top-k, top-p (nucleus) and min-p filtering of the next-token distribution, and
stop strings. Applied after the constraint's mask, so they only ever choose
among allowed tokens (a filter that would leave none keeps the likeliest)."""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["SamplingControls", "StopStrings"]


@dataclass(frozen=True)
class SamplingControls:
    """The controls of one call, validated.

    Attributes:
        top_k: keep the ``k`` likeliest tokens (``None``: all).
        top_p: keep the smallest set of likeliest tokens whose probability
            reaches ``p`` (``None`` or 1: all).
        min_p: keep the tokens at least ``min_p`` times as likely as the
            likeliest (``None`` or 0: all).
        repetition_penalty: divide the positive logits (multiply the negative
            ones) of every token already in the prompt or the output by it
            (CTRL's penalty; 1: none). Applies to greedy decoding too.

    Raises:
        ValueError: a control out of range (named).
    """

    top_k: int | None = None
    top_p: float | None = None
    min_p: float | None = None
    repetition_penalty: float = 1.0

    def __post_init__(self):
        if self.top_k is not None and (isinstance(self.top_k, bool) or not isinstance(self.top_k, int)
                                       or self.top_k < 1):
            raise ValueError(f"top_k must be a positive integer, got {self.top_k!r}")
        if self.top_p is not None and not (_finite(self.top_p) and 0 < self.top_p <= 1):
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p!r}")
        if self.min_p is not None and not (_finite(self.min_p) and 0 <= self.min_p < 1):
            raise ValueError(f"min_p must be in [0, 1), got {self.min_p!r}")
        if not (_finite(self.repetition_penalty) and self.repetition_penalty > 0):
            raise ValueError(f"repetition_penalty must be above 0, got {self.repetition_penalty!r}")

    @property
    def filters(self) -> bool:
        """Whether sampling is filtered (top-k, top-p or min-p)."""
        return (self.top_k is not None or (self.top_p is not None and self.top_p < 1)
                or bool(self.min_p))

    def penalize(self, scores, seen) -> None:
        """Apply the repetition penalty in place to ``scores`` (1-D logits) for
        the token ids ``seen`` (a 1-D long tensor)."""
        if self.repetition_penalty == 1.0 or seen.numel() == 0:
            return
        import torch

        # the model's logits are inference tensors: written in place only in that mode
        with torch.inference_mode(scores.is_inference()):
            s = scores[seen]
            scores[seen] = torch.where(s > 0, s / self.repetition_penalty,
                                       s * self.repetition_penalty)

    def probabilities(self, scores, temperature: float):
        """The sampling distribution: softmax of ``scores / temperature`` with
        the filters applied and renormalised (1-D)."""
        import torch

        scaled = scores / temperature
        if not bool(torch.isfinite(scaled.max())):
            # a temperature so small that scores / T overflows: softmax's limit
            # (softmax of +-inf is NaN, which the sampler refuses)
            probs = torch.zeros_like(scores)
            probs[int(torch.argmax(scores))] = 1.0
        else:
            probs = torch.softmax(scaled, dim=-1)
        if not self.filters:
            return probs
        keep = probs > 0
        if self.min_p:
            keep &= probs >= self.min_p * probs.max()
        if self.top_k is not None and self.top_k < int(keep.sum()):
            kth = torch.topk(probs, self.top_k).values[-1]
            keep &= probs >= kth
        if self.top_p is not None and self.top_p < 1:
            p_sorted, order = torch.sort(torch.where(keep, probs, 0.0), descending=True)
            before = torch.cumsum(p_sorted, 0) - p_sorted  # mass of the likelier tokens
            drop = order[before >= self.top_p * p_sorted.sum()]
            keep[drop] = False
        if not bool(keep.any()):  # never leave nothing: the likeliest token stays
            keep[int(torch.argmax(probs))] = True
        probs = torch.where(keep, probs, 0.0)
        return probs / probs.sum()


def _finite(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


class StopStrings:
    """Stop strings: generation ends where the text first contains one of them;
    the text is cut before it.

    Raises:
        ValueError: not a list of non-empty strings.
    """

    def __init__(self, stop):
        if stop is None:
            stop = ()
        elif isinstance(stop, str):
            stop = (stop,)
        elif not isinstance(stop, (list, tuple)):
            raise ValueError(f"stop must be a string or a list of strings, got {stop!r}")
        stop = tuple(stop)
        for s in stop:
            if not isinstance(s, str) or not s:
                raise ValueError(f"stop strings must be non-empty strings, got {s!r}")
        self.strings = stop
        #: the most characters of a stop string that can end a text without the
        #: whole string being in it (a stream holds that many back)
        self.holdback = max((len(s) for s in stop), default=1) - 1

    def __bool__(self) -> bool:
        return bool(self.strings)

    def find(self, text: str, start: int = 0) -> int | None:
        """Where the first stop string in ``text`` (from ``start`` on) starts
        (``None``: none)."""
        hits = [i for i in (text.find(s, start) for s in self.strings) if i >= 0]
        return min(hits) if hits else None
