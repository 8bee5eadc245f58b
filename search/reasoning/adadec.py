"""AdaDec: uncertainty-guided adaptive decoding (greedy that pauses to look ahead).

Greedy decoding, except where the model is unsure: at each step the Shannon
entropy ``H`` (nats) of the next-token distribution (under ``constraint``: the
allowed tokens, renormalised) is compared with a threshold fitted per model. If
``H <= threshold`` the argmax token is committed, as in greedy. If ``H >
threshold`` the decoder *pauses*: each of the ``top_k`` most probable allowed
tokens is rolled out greedily for ``lookahead`` more tokens (the ``top_k``
roll-outs advance together, one ``lm.logprobs`` batch per position), each
candidate is scored by the sum of the log-probabilities of its token and its
roll-out (``score="sum"``) or by their mean (``score="mean"``), and only the best
candidate's *first token* is committed; decoding then resumes. Committing one
token follows the paper (the lookahead only reranks; a later step may pause
again). Rows scored for the chosen candidate's roll-out are reused by the steps
that follow it, so no prefix is scored twice.

The threshold is model-specific and learned (:func:`fit_adadec_threshold`): with
reference continuations (teacher forcing), a one-feature logistic regression of
"greedy's token differs from the reference" on the entropy, the threshold being
the entropy where that probability is 1/2 (the paper's recipe); without
references, the ``quantile`` of greedy's per-step entropies on the calibration
prompts (so about ``1 - quantile`` of the steps pause). Thresholds are kept per
model name in :class:`AdaDecThresholds` and saved as JSON.

Reference: He et al., "Towards Better Code Generation: Adaptive Decoding with
Uncertainty Guidance" (AdaDec, 2025): entropy-triggered pauses, a learned
per-model threshold, lookahead reranking of the top candidates.

Cost: one row per greedy step, plus ``top_k * lookahead`` rows (at most) per
pause, less the rows reused after it: ``calls <= n_steps + pauses * top_k *
lookahead``.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from search.lm.protocol import as_lm, constraint_eos_ids, decoder, prompt_token_ids
from search.results import SearchResult

__all__ = ["AdaDecResult", "AdaDecThresholds", "adadec_generate", "fit_adadec_threshold", "model_name",
           "next_token_entropy"]

SCORES = ("sum", "mean")


def model_name(lm) -> str:
    """The name thresholds are stored under: ``lm.name`` (a ``TransformersLM``),
    the wrapped model's name (an adapter), else the type's name."""
    for obj in (lm, getattr(lm, "model", None)):
        name = getattr(obj, "name", None)
        if isinstance(name, str) and name:
            return name
    return type(lm).__name__


def next_token_entropy(row: np.ndarray, allowed: np.ndarray | None = None) -> float:
    """The Shannon entropy (nats) of ``softmax(row)`` restricted to ``allowed``
    ids (all ids when ``None``) and renormalised; ``0.0`` when no id is possible."""
    x = np.asarray(row, dtype=np.float64)
    if allowed is not None:
        x = x[allowed]
    x = x[x > -np.inf]
    if len(x) == 0:
        return 0.0
    x = x - x.max()
    p = np.exp(x)
    z = p.sum()
    p = p / z
    nz = p > 0
    return float(-(p[nz] * np.log(p[nz])).sum())


@dataclass
class AdaDecThresholds:
    """Entropy thresholds (nats) per model name, saved and loaded as JSON.

    Attributes:
        thresholds: ``{model name: threshold}``.
        info: ``{model name: {...}}`` how each was fitted (method, sizes).
    """

    thresholds: dict = field(default_factory=dict)
    info: dict = field(default_factory=dict)

    def for_model(self, lm) -> float:
        """The threshold of ``lm`` (by :func:`model_name`); ``KeyError`` naming the
        model and the names present when there is none."""
        name = model_name(lm)
        if name not in self.thresholds:
            raise KeyError(f"no AdaDec threshold for model {name!r}; have {sorted(self.thresholds)}")
        return float(self.thresholds[name])

    def save(self, path) -> None:
        """Write the thresholds to ``path`` (JSON; replaced atomically)."""
        tmp = f"{path}.tmp{os.getpid()}"
        with open(tmp, "w") as f:
            json.dump({"adadec_thresholds": 1, "thresholds": self.thresholds, "info": self.info}, f, indent=1,
                      sort_keys=True)
        os.replace(tmp, path)

    @classmethod
    def load(cls, path) -> "AdaDecThresholds":
        """Read thresholds written by :meth:`save`; ``ValueError`` naming the file
        when it is not such a file."""
        with open(path) as f:
            try:
                data = json.load(f)
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}: not an AdaDec thresholds file ({e})") from None
        if not isinstance(data, dict) or data.get("adadec_thresholds") != 1:
            raise ValueError(f"{path}: not an AdaDec thresholds file (no 'adadec_thresholds': 1)")
        th = data.get("thresholds")
        if not isinstance(th, dict) or not all(isinstance(v, (int, float)) for v in th.values()):
            raise ValueError(f"{path}: 'thresholds' must map model names to numbers")
        return cls({str(k): float(v) for k, v in th.items()}, dict(data.get("info") or {}))


@dataclass(frozen=True)
class AdaDecResult(SearchResult):
    """What :func:`adadec_generate` returns.

    Attributes:
        token_ids: the generated ids (EOS excluded).
        text: their text (``None`` without a decoder).
        finished: whether generation ended with EOS (else ``max_new_tokens`` or
            no allowed token).
        logprob: the sum of the model's log-probabilities of the committed tokens
            (EOS included).
        entropies: the entropy at each step (one per committed token).
        paused_at: the steps (0-based positions in ``token_ids``; ``len(token_ids)``
            for the EOS step) where the entropy exceeded the threshold.
        changed_at: the pauses where the lookahead chose another token than greedy.
        lm_calls: prefixes the model scored.
        threshold: the threshold used (``inf``: plain greedy).
    """

    token_ids: tuple[int, ...]
    text: str | None
    finished: bool
    logprob: float
    entropies: tuple[float, ...]
    paused_at: tuple[int, ...]
    changed_at: tuple[int, ...]
    lm_calls: int
    threshold: float


def _resolve_threshold(lm, threshold) -> float:
    if threshold is None:
        return math.inf
    if isinstance(threshold, AdaDecThresholds):
        return threshold.for_model(lm)
    t = float(threshold)
    if math.isnan(t):
        raise ValueError("adadec_generate: threshold is NaN")
    return t


class _Decoder:
    """The masked next-token rows and constraint states shared by the greedy
    steps and the lookahead roll-outs."""

    def __init__(self, lm, prompt, constraint):
        self.lm = lm
        self.prompt = prompt_token_ids(lm, prompt)
        self.c = constraint
        self.eos = constraint_eos_ids(lm, constraint)
        self.V = lm.vocab_size

    def allowed(self, state) -> np.ndarray | None:
        if self.c is None:
            return None
        ids = np.asarray(self.c.allowed_token_ids(state), dtype=np.int64)
        return ids[ids < self.V]

    def masked(self, row: np.ndarray, state) -> np.ndarray:
        """``row`` with the ids the constraint refuses at ``state`` set to ``-inf``."""
        row = np.asarray(row, dtype=np.float64)
        if self.c is None:
            return row
        out = np.full(self.V, -np.inf)
        ids = self.allowed(state)
        out[ids] = row[ids]
        return out

    def advance(self, state, t: int):
        if self.c is None:
            return None
        nxt = self.c.advance(state, t)
        if nxt is None:  # the mask allowed it: a constraint bug
            raise RuntimeError(f"constraint refused token {t} that its bitmask allowed")
        return nxt

    def rollouts(self, gen: tuple[int, ...], state, cands: Sequence[int], row: np.ndarray, lookahead: int,
                 cache: dict):
        """For each candidate token after ``gen``: ``(logprobs, rows)``, the
        log-probabilities of the candidate and of its greedy roll-out of up to
        ``lookahead`` tokens (ending at EOS or a dead end), and the rows scored
        along it keyed by generated prefix (for reuse). Roll-outs advance in
        lock-step, one batch per position; rows already in ``cache`` (the last
        pause's chosen roll-out) are not scored again."""
        lps = [[float(row[t])] for t in cands]
        rows: list[dict] = [{} for _ in cands]
        seqs = [gen + (t,) for t in cands]
        states = [None if t in self.eos else self.advance(state, t) for t in cands]
        live = [i for i, t in enumerate(cands) if t not in self.eos]
        for _ in range(lookahead):
            if not live:
                break
            need = [i for i in live if seqs[i] not in cache]
            got = dict(zip(need, np.asarray(self.lm.logprobs([self.prompt + seqs[i] for i in need]),
                                            dtype=np.float64)))
            nxt = []
            for i in live:
                r = got[i] if i in got else cache[seqs[i]]
                rows[i][seqs[i]] = r
                m = self.masked(r, states[i])
                t = int(np.argmax(m))
                if m[t] == -np.inf:
                    continue
                lps[i].append(float(r[t]))
                if t in self.eos:
                    continue
                states[i] = self.advance(states[i], t)
                seqs[i] = seqs[i] + (t,)
                nxt.append(i)
            live = nxt
        return lps, rows


def adadec_generate(lm, prompt, *, constraint=None, threshold=None, lookahead: int = 5, top_k: int = 3,
                    max_new_tokens: int = 64, score: str = "sum") -> AdaDecResult:
    """Greedy decoding that pauses where the next-token entropy exceeds ``threshold``
    and reranks the ``top_k`` candidates by a greedy lookahead (module docstring).

    Args:
        lm: a model of the LM protocol (:mod:`search.lm.protocol`) or a ``TransformersLM``.
        prompt: token ids, or a text (``lm.prompt_ids``: the chat template for chat models).
        constraint: a compiled constraint; tokens are chosen among those it allows
            (EOS where it accepts) and the entropy is that of the allowed tokens'
            renormalised distribution.
        threshold: ``None`` (never pause: plain greedy), an entropy in nats, or
            :class:`AdaDecThresholds` (the threshold of ``lm``'s name).
        lookahead: roll-out length after each candidate (0: rerank by the
            candidate's own log-probability, i.e. greedy).
        top_k: candidates reranked at a pause.
        max_new_tokens: the most tokens generated (EOS included).
        score: ``"sum"`` (candidate + roll-out log-probabilities) or ``"mean"``
            (their mean, which does not favour a roll-out that ends early).

    Returns:
        :class:`AdaDecResult`. Guarantee: at every step whose entropy is at most
        the threshold the committed token is greedy's (the argmax of the masked
        row; ties: the smaller id); every step whose entropy exceeds it is in
        ``paused_at``, and there the committed token is the best-scored of the
        ``top_k`` candidates (ties: the more probable candidate).
    """
    if int(lookahead) != lookahead or lookahead < 0:
        raise ValueError(f"adadec_generate: lookahead must be a non-negative integer, got {lookahead!r}")
    if int(top_k) != top_k or top_k < 1:
        raise ValueError(f"adadec_generate: top_k must be a positive integer, got {top_k!r}")
    if int(max_new_tokens) != max_new_tokens or max_new_tokens < 0:
        raise ValueError(f"adadec_generate: max_new_tokens must be a non-negative integer, got {max_new_tokens!r}")
    if score not in SCORES:
        raise ValueError(f"adadec_generate: unknown score {score!r}; expected one of {SCORES}")
    lm = as_lm(lm)
    thr = _resolve_threshold(lm, threshold)
    d = _Decoder(lm, prompt, constraint)
    calls0 = lm.calls
    state = None if constraint is None else constraint.initial_state()
    gen: tuple[int, ...] = ()
    cache: dict = {}
    lp_total, ents, paused, changed = 0.0, [], [], []
    finished = False
    for _ in range(int(max_new_tokens)):
        row = cache.pop(gen, None)
        if row is None:
            row = np.asarray(lm.logprobs([d.prompt + gen])[0], dtype=np.float64)
        cache = {k: v for k, v in cache.items() if k[:len(gen)] == gen}
        m = d.masked(row, state)
        ok = np.flatnonzero(m > -np.inf)
        if len(ok) == 0:
            break
        h = next_token_entropy(m)
        ents.append(h)
        # ids by log-probability desc, id asc: the argmax first
        order = ok[np.lexsort((ok, -m[ok]))]
        t = int(order[0])
        if h > thr:
            paused.append(len(gen))
            cands = [int(c) for c in order[:top_k]]
            lps, rows = d.rollouts(gen, state, cands, m, int(lookahead), cache)
            vals = [sum(x) if score == "sum" else sum(x) / len(x) for x in lps]
            best = max(range(len(cands)), key=lambda i: (vals[i], -i))
            if best != 0:
                changed.append(len(gen))
            t = cands[best]
            cache = rows[best]
        lp_total += float(row[t])
        if t in d.eos:
            finished = True
            break
        state = d.advance(state, t)
        gen = gen + (t,)
    decode = decoder(lm)
    return AdaDecResult(token_ids=gen, text=None if decode is None else decode(gen), finished=finished,
                        logprob=lp_total, entropies=tuple(ents), paused_at=tuple(paused),
                        changed_at=tuple(changed), lm_calls=int(lm.calls - calls0), threshold=thr)


def _logistic_threshold(h: np.ndarray, y: np.ndarray) -> float | None:
    """The entropy where a one-feature logistic regression ``P(y=1 | h)`` is 1/2
    (Newton's method on standardised entropies, a tiny ridge for separable
    data); ``None`` when the labels are all equal, the slope is not positive, or
    the boundary lies outside the entropies observed (an extrapolation: below
    the smallest it would pause at every step, a negative entropy included)."""
    if y.min() == y.max():
        return None
    mu, sd = h.mean(), h.std() or 1.0
    X = np.stack([np.ones_like(h), (h - mu) / sd], axis=1)
    w = np.zeros(2)
    for _ in range(50):
        p = 1.0 / (1.0 + np.exp(-np.clip(X @ w, -30, 30)))
        g = X.T @ (p - y) + 1e-3 * w
        H = (X * (p * (1 - p))[:, None]).T @ X + 1e-3 * np.eye(2)
        step = np.linalg.solve(H, g)
        w -= step
        if np.abs(step).max() < 1e-9:
            break
    if w[1] <= 0:
        return None
    thr = float(mu - sd * w[0] / w[1])
    return thr if h.min() <= thr <= h.max() else None


def fit_adadec_threshold(lm, prompts: Sequence, *, references: Sequence | None = None, constraint=None,
                         quantile: float = 0.9, max_new_tokens: int = 32,
                         thresholds: AdaDecThresholds | None = None) -> AdaDecThresholds:
    """Learn ``lm``'s entropy threshold on calibration prompts (module docstring).

    Args:
        lm: the model; the threshold is stored under :func:`model_name` ``(lm)``.
        prompts: calibration prompts (texts or token ids).
        references: optional reference continuations, one per prompt (texts,
            encoded with ``lm.encode``, or token ids). With them the model is
            teacher-forced along each reference (one batch per prompt) and the
            threshold is the logistic-regression boundary of "greedy's token is
            not the reference's" on the entropy; without them (or when that
            regression is degenerate) it is the ``quantile`` of the per-step
            entropies of plain greedy decoding (``max_new_tokens`` per prompt).
        constraint: as for :func:`adadec_generate` (entropies of the masked rows).
        quantile: in (0, 1).
        thresholds: an existing table to add the result to (else a new one).

    Returns:
        the :class:`AdaDecThresholds` holding the fitted threshold;
        ``info[name]`` records the method, the number of steps and of mismatches.
    """
    if not 0.0 < quantile < 1.0:
        raise ValueError(f"fit_adadec_threshold: quantile must be in (0, 1), got {quantile!r}")
    if len(prompts) == 0:
        raise ValueError("fit_adadec_threshold: no calibration prompts")
    if references is not None and len(references) != len(prompts):
        raise ValueError(f"fit_adadec_threshold: {len(references)} references for {len(prompts)} prompts")
    lm = as_lm(lm)
    table = thresholds if thresholds is not None else AdaDecThresholds()
    name = model_name(lm)
    ents: list[float] = []
    miss: list[float] = []
    calls0 = lm.calls
    if references is not None:
        for p, ref in zip(prompts, references):
            d = _Decoder(lm, p, constraint)
            if isinstance(ref, str):
                enc = getattr(lm, "encode", None)
                if enc is None:
                    raise TypeError(f"fit_adadec_threshold: {type(lm).__name__} has no encode() for text "
                                    f"references; pass token ids")
                ref = enc(ref)
            ref = tuple(int(t) for t in ref)
            rows = np.asarray(lm.logprobs([d.prompt + ref[:i] for i in range(len(ref))]), dtype=np.float64)
            state = None if constraint is None else constraint.initial_state()
            for i, r in enumerate(rows):
                m = d.masked(r, state)
                ents.append(next_token_entropy(m))
                miss.append(float(int(np.argmax(m)) != ref[i]))
                if constraint is not None:
                    state = constraint.advance(state, ref[i])
                    if state is None:
                        raise ValueError(f"fit_adadec_threshold: reference {ref!r} leaves the constraint at "
                                         f"position {i}")
        thr = _logistic_threshold(np.asarray(ents), np.asarray(miss))
        method = "logistic"
    else:
        thr = None
        method = "quantile"
        for p in prompts:
            ents.extend(adadec_generate(lm, p, constraint=constraint, threshold=None,
                                        max_new_tokens=max_new_tokens).entropies)
    if thr is None:
        if not ents:
            raise ValueError("fit_adadec_threshold: the calibration prompts gave no decoding steps")
        thr = float(np.quantile(np.asarray(ents), quantile))
        method = "quantile" if references is None else "quantile (degenerate logistic fit)"
    table.thresholds[name] = float(thr)
    table.info[name] = {"method": method, "quantile": quantile, "steps": len(ents),
                        "mismatches": int(sum(miss)), "prompts": len(prompts),
                        "lm_calls": int(lm.calls - calls0)}
    return table
