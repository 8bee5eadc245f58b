"""Sequential Monte Carlo with AWRS proposals (Lipkin et al., COLM 2025).

:func:`smc` targets the model's distribution *restricted to complete valid
strings*::

    pi(x) = p(x) * 1{x is a complete string of the constraint's language} / Z,
    Z     = sum over such x of p(x)         (x ends with EOS)

Token-by-token masking (renormalising the allowed tokens at each step) samples
from a different distribution: it over-weights prefixes after which the model
puts little mass on valid continuations. SMC corrects this: every particle
proposes its next token with AWRS (:mod:`search.autoregressive.awrs`), whose importance weight
estimates the allowed mass at that step; the weights accumulate, and particles
are resampled when the effective sample size falls below
``ess_threshold * n_particles``. ``result.log_z`` is the standard SMC estimate of
``log Z``: ``exp(log_z)`` is unbiased for ``Z`` (through every resampling), and
the weighted particles converge to ``pi`` as the number of particles grows.

Example::

    import constrain, search
    res = search.smc(lm, prompt_ids, constraint=constrain.compile_regex(r"[0-9]{3}", vocab),
                     n_particles=20, max_new_tokens=8, seed=0)
    res.log_z, res.best(), res.text

See ``docs/smc.md`` for the weight derivation and the guarantees.
"""

from __future__ import annotations

import dataclasses
import math
import sys
from dataclasses import dataclass, field
from numbers import Integral, Real
from typing import Callable, Sequence

import numpy as np

from search.arguments import count, finite
from search.autoregressive.awrs import AWRS
from search.legacy import accepts_old_call_forms
from search.lm.protocol import as_lm, check_constraint_vocabulary, decoder, prompt_token_ids
from search.results import SearchResult

__all__ = ["SMCParticle", "SMCResult", "smc", "resample", "RESAMPLING_SCHEMES"]

RESAMPLING_SCHEMES = ("stratified", "systematic", "multinomial")


@dataclass(frozen=True)
class SMCParticle:
    """One particle of :func:`smc`.

    Attributes:
        tokens: the generated ids (prompt excluded), the final EOS included when the
            particle finished.
        log_weight: its log weight; ``logmeanexp`` over the particles is ``log_z``
            (the factors taken out at resampling are included). ``-inf`` for a
            particle that died (no allowed token, a critic of ``-inf``) or that was
            cut off by ``max_new_tokens`` before EOS.
        finished: whether it ended with EOS.
        state: its constraint state.
    """

    tokens: tuple[int, ...]
    log_weight: float
    finished: bool = False
    state: object = field(default=None, repr=False)

    @property
    def alive(self) -> bool:
        """Whether it can still be extended (not finished, weight above zero)."""
        return not self.finished and self.log_weight > -math.inf


@dataclass(frozen=True)
class SMCResult(SearchResult):
    """What :func:`smc` returns.

    Attributes:
        particles: the final particles (see :class:`SMCParticle`).
        log_z: the SMC estimate of ``log Z``, the log of the mass the model puts on
            complete valid strings (of at most ``max_new_tokens`` tokens, EOS
            included); ``exp(log_z)`` is unbiased for ``Z``. ``-inf`` when every
            particle died.
        posterior: complete outputs (token tuples, EOS included) to their normalised
            weights; empty when ``log_z`` is ``-inf``.
        n_resamples: how many times the particles were resampled.
        ess_history: the effective sample size before each step's resampling test.
        log_weight_history: per step, every particle's log weight before that
            step's resampling test (a tuple of ``n_particles`` floats, ``-inf`` for
            a dead particle; since the last resampling, which resets them to 0):
            the trace behind ``ess_history``, e.g. to plot how the weights
            degenerate (``examples/smc_weights.py``).
        resampled_at: the steps (1-based) after which the particles were resampled.
        lm_calls: prefixes the model scored (one batched call per step, each distinct
            live prefix once).
        checks: constraint checks made by AWRS.
        steps: the number of steps run.
        text: the text of :attr:`token_ids` (the output of largest posterior
            weight) when the model can decode, else ``None``.
    """

    particles: list[SMCParticle]
    log_z: float
    posterior: dict[tuple[int, ...], float]
    n_resamples: int = 0
    ess_history: list[float] = field(default_factory=list, repr=False)
    log_weight_history: list[tuple[float, ...]] = field(default_factory=list, repr=False)
    resampled_at: list[int] = field(default_factory=list, repr=False)
    lm_calls: int = 0
    checks: int = 0
    steps: int = 0
    text: str | None = None

    @property
    def token_ids(self) -> tuple[int, ...]:
        """:meth:`best` without its EOS (``()`` when every particle died)."""
        best = self.best()
        return () if best is None else best[:-1]

    @property
    def z(self) -> float:
        """``exp(log_z)``: the (unbiased) estimate of ``Z``."""
        return math.exp(self.log_z) if self.log_z > -math.inf else 0.0

    def best(self) -> tuple[int, ...] | None:
        """The output with the largest posterior weight (``None`` if there is none)."""
        if not self.posterior:
            return None
        return max(self.posterior.items(), key=lambda kv: kv[1])[0]


def _logsumexp(x: np.ndarray) -> float:
    m = float(np.max(x)) if x.size else -math.inf
    if m == -math.inf:
        return -math.inf
    return m + math.log(float(np.sum(np.exp(x - m))))


def _ess(log_w: np.ndarray) -> float:
    """Effective sample size ``(sum w)^2 / sum w^2`` (0 when every weight is 0)."""
    m = float(np.max(log_w))
    if m == -math.inf:
        return 0.0
    w = np.exp(log_w - m)
    return float(w.sum() ** 2 / np.sum(w * w))


def resample(weights: np.ndarray, n: int, rng: np.random.Generator, scheme: str = "stratified") -> np.ndarray:
    """``n`` ancestor indices drawn from the normalised ``weights`` by ``scheme``.

    All three schemes are unbiased (each index ``i`` is expected ``n * weights[i]``
    times), which keeps the SMC estimate of ``Z`` unbiased:

    * ``"multinomial"``: ``n`` independent draws;
    * ``"stratified"``: one uniform in each of the strata ``[k/n, (k+1)/n)``;
    * ``"systematic"``: the same single uniform offset in every stratum.
    """
    w = np.asarray(weights, dtype=np.float64)
    w = w / w.sum()
    if scheme == "multinomial":
        return rng.choice(w.shape[0], size=n, p=w)
    if scheme == "stratified":
        u = (np.arange(n) + rng.random(n)) / n
    elif scheme == "systematic":
        u = (np.arange(n) + rng.random()) / n
    else:
        raise ValueError(f"unknown resampling scheme {scheme!r}; expected one of {RESAMPLING_SCHEMES}")
    cum = np.cumsum(w)
    cum[-1] = 1.0
    idx = np.searchsorted(cum, u, side="right")
    idx = np.minimum(idx, w.shape[0] - 1)
    # never pick a zero-weight index (possible only through rounding at the edges)
    zero = w[idx] == 0
    if zero.any():
        nz = np.flatnonzero(w)
        for k in np.flatnonzero(zero):
            j = np.searchsorted(nz, idx[k])
            idx[k] = nz[min(j, nz.shape[0] - 1)]
    return idx


@accepts_old_call_forms(("prompt", "constraint"), renamed={"prompt_ids": "prompt"})
def smc(lm, prompt: str | Sequence[int], *, constraint, n_particles: int, ess_threshold: float = 0.5,
        max_new_tokens: int, resampling: str = "stratified", seed=None,
        critic: Callable[[tuple[int, ...]], float] | None = None, progress: bool = False) -> SMCResult:
    """Sequential Monte Carlo over constrained continuations, with AWRS proposals.

    Args:
        lm: a model of the LM protocol (:mod:`search.lm.protocol`).
        prompt: the prompt's token ids (prepended to every prefix scored), or a
            text, turned into ids by ``lm.prompt_ids`` (the chat template for
            chat models).
        constraint: a :class:`constrain.Constraint` (required: the target is the
            model restricted to its language); EOS (the model's EOS ids) is
            allowed iff the constraint state is accepting. (Passed positionally,
            as before, it still works for one release, with a
            ``DeprecationWarning``.)
        n_particles: the number of particles.
        ess_threshold: resample when the effective sample size divided by
            ``n_particles`` falls below this (0: never, 1: every step).
        max_new_tokens: the most tokens a particle generates, EOS included; a
            particle without EOS by then gets weight ``-inf`` (it is not complete).
        resampling: ``"stratified"``, ``"systematic"`` or ``"multinomial"``.
        seed: seed (or ``numpy.random.Generator``) for every random choice.
        critic: optional ``critic(generated_ids) -> log-potential`` of a partial
            output (prompt excluded; called once per distinct prefix). The particles
            are twisted by it: each step adds ``critic(new) - critic(old)``, and
            finishing removes the last value, so the target and ``Z`` do not change.
            A critic of ``-inf`` kills the particle; for an unbiased ``Z`` it must be
            finite on every prefix that has valid completions.
        progress: print one line per step on stderr (particles alive and
            finished, effective sample size, whether it resampled).

    Returns:
        An :class:`SMCResult` with ``particles``, ``log_z`` and ``posterior``.

    One ``lm.logprobs`` call per step scores the distinct prefixes of the live
    particles (finished and dead ones are not extended).
    """
    if isinstance(n_particles, bool) or not isinstance(n_particles, Integral) or n_particles < 1:
        raise ValueError(f"n_particles must be an integer >= 1, got {n_particles!r}")
    max_new_tokens = count("max_new_tokens", max_new_tokens)
    if not 0.0 <= finite("ess_threshold", ess_threshold) <= 1.0:
        raise ValueError(f"ess_threshold must be in [0, 1], got {ess_threshold}")
    if resampling not in RESAMPLING_SCHEMES:
        raise ValueError(f"unknown resampling scheme {resampling!r}; expected one of {RESAMPLING_SCHEMES}")
    if constraint is None:
        raise TypeError("smc() needs a constraint: its target is the model restricted to the constraint's language")
    lm = as_lm(lm)
    check_constraint_vocabulary(lm, constraint)
    rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
    sampler = AWRS(None, constraint, rng, eos_token_ids=lm.eos_token_ids)
    prompt = prompt_token_ids(lm, prompt)
    calls0 = lm.calls
    n = int(n_particles)

    critic_cache: dict[tuple[int, ...], float] = {}

    def phi(tokens: tuple[int, ...]) -> float:
        if critic is None:
            return 0.0
        try:
            return critic_cache[tokens]
        except KeyError:
            v = critic(tokens)
            if isinstance(v, bool) or not isinstance(v, Real) or math.isnan(v) or v == math.inf:
                raise ValueError(f"critic returned {v!r} for {tokens}: a log-potential is a "
                                 f"number below +inf")
            v = float(v)
            critic_cache[tokens] = v
            return v

    s0 = constraint.initial_state()
    phi0 = phi(())
    tokens = [()] * n
    states = [s0] * n
    finished = np.zeros(n, dtype=bool)
    log_w = np.full(n, phi0 if phi0 > -math.inf else -math.inf)
    log_z_acc = 0.0  # log of the product of the mean weights taken out at resampling
    n_resamples = 0
    ess_history: list[float] = []
    log_weight_history: list[tuple[float, ...]] = []
    resampled_at: list[int] = []
    steps = 0

    for _ in range(max_new_tokens):
        live = [i for i in range(n) if not finished[i] and log_w[i] > -math.inf]
        if not live:
            break
        steps += 1
        # one batched model call over the distinct live prefixes
        uniq: dict[tuple[int, ...], int] = {}
        for i in live:
            uniq.setdefault(tokens[i], len(uniq))
        rows = lm.logprobs([prompt + t for t in uniq])
        for i in live:
            old = tokens[i]
            step = sampler.step(rows[uniq[old]], states[i])
            if step.token is None or step.log_weight == -math.inf:
                log_w[i] = -math.inf
                continue
            new = old + (step.token,)
            tokens[i] = new
            states[i] = step.state
            if step.token in sampler.eos_token_ids:
                finished[i] = True
                log_w[i] += step.log_weight - phi(old)
            else:
                log_w[i] += step.log_weight + phi(new) - phi(old)
        # resample when the weights degenerate (and something is left to extend)
        ess = _ess(log_w)
        ess_history.append(ess)
        log_weight_history.append(tuple(float(x) for x in log_w))
        still_live = any(not finished[i] and log_w[i] > -math.inf for i in range(n))
        # (1 resamples every step: equal weights have ess == n exactly)
        resample_now = ess > 0.0 and still_live and (ess_threshold >= 1.0 or ess < ess_threshold * n)
        if progress:
            alive = sum(1 for i in range(n) if not finished[i] and log_w[i] > -math.inf)
            print(f"smc: step {steps}/{max_new_tokens}: {alive} alive, {int(finished.sum())} finished, "
                  f"ESS {ess:.1f}/{n}{', resampled' if resample_now else ''}", file=sys.stderr, flush=True)
        if ess == 0.0:
            break
        if resample_now:
            lse = _logsumexp(log_w)
            log_z_acc += lse - math.log(n)
            w = np.exp(log_w - lse)
            idx = resample(w, n, rng, resampling)
            tokens = [tokens[j] for j in idx]
            states = [states[j] for j in idx]
            finished = finished[idx].copy()
            log_w = np.zeros(n)
            n_resamples += 1
            resampled_at.append(steps)

    # particles cut off before EOS are not complete strings
    log_w = np.where(finished, log_w, -math.inf)
    total = log_w + log_z_acc
    lse = _logsumexp(log_w)
    log_z = lse - math.log(n) + log_z_acc if lse > -math.inf else -math.inf
    particles = [SMCParticle(tokens[i], float(total[i]), bool(finished[i]), states[i]) for i in range(n)]
    posterior: dict[tuple[int, ...], float] = {}
    if lse > -math.inf:
        w = np.exp(log_w - lse)
        for i in range(n):
            if w[i] > 0:
                posterior[tokens[i]] = posterior.get(tokens[i], 0.0) + float(w[i])
    result = SMCResult(particles=particles, log_z=float(log_z), posterior=posterior, n_resamples=n_resamples,
                       ess_history=ess_history, log_weight_history=log_weight_history,
                       resampled_at=resampled_at, lm_calls=lm.calls - calls0, checks=sampler.checks, steps=steps)
    decode = decoder(lm)
    return result if decode is None else dataclasses.replace(result, text=decode(result.token_ids))

