"""A small masked-diffusion LM for tests and examples: a synthetic denoiser whose
marginals are known exactly.

:class:`SyntheticDiffusionLM` is the exact denoiser of an explicit distribution
over fixed-length token sequences, a mixture of noisy copies of ``N`` support
sequences ``s_1..s_N`` with weights ``w_n``::

    p(x) = Σ_n w_n Π_i [ (1 - ε) · 1(x_i = s_n,i) + ε · u(x_i) ]

where ``u`` is uniform over the ``V'`` predictable ids (every id but the mask).
Given a canvas whose positions are either observed tokens or the mask, the
posterior over the component ``n`` is ``∝ w_n Π_{i observed} [(1-ε) 1(x_i = s_n,i)
+ ε/V']`` and the marginal of a masked position ``j`` is ``Σ_n post(n) [(1-ε)
1(t = s_n,j) + ε/V']`` — computed exactly, in closed form. So the model is the
Bayes-optimal denoiser of ``p`` (what a masked-diffusion LM trained on samples of
``p`` approximates; Sahoo et al. 2024, Nie et al. 2025 "LLaDA"), ``log p(x)`` of any
sequence is available (:meth:`SyntheticDiffusionLM.sequence_logprob`), and nothing
is trained or downloaded.

:func:`tiny_json_model` builds the one the examples use: the support is generated
(seeded) JSON objects ``{"name": ..., "age": ...}`` over a ~120-token vocabulary of
printable ASCII characters plus multi-character tokens (``{"``, ``name``, ``",`` …),
with some names longer than 8 characters and some ages above 120, so that
unconstrained decoding sometimes leaves the schema.
"""

from __future__ import annotations

import random

import numpy as np

__all__ = ["SyntheticDiffusionLM", "tiny_json_model", "tiny_vocab", "tokenize_greedy",
           "JSON_NAME_AGE_REGEX"]

#: The language of the JSON Schema ``{"name": string, maxLength 8; "age": integer,
#: 0..120}`` (both required, no other keys, this key order, ``", "`` and ``": "``
#: separators), written as a regex: a JSON string of at most 8 characters (an
#: escape counts as one character) and the integers 0..120 without leading zeros.
JSON_NAME_AGE_REGEX = (
    r'\{"name": "([^"\\\x00-\x1f]|\\["\\/bfnrt]|\\u[0-9a-fA-F]{4}){0,8}", '
    r'"age": (0|[1-9][0-9]?|1[01][0-9]|120)\}'
)

_MULTI = [b'{"', b'name', b'":', b' "', b'",', b'age', b'"}', b'an', b'el', b'ia', b'er',
          b'10', b'12', b'": "', b'", "']

_NAMES = ["Al", "Bo", "Ann", "Eve", "Ivan", "Mia", "Noah", "Liam", "Emma", "Olivia", "Ava",
          "Sophia", "Isabel", "Lucas", "Mason", "Ethan", "Amelia", "Harper", "Evelyn", "Elena",
          "Daniel", "Gabriel", "Julia", "Marta", "Pedro", "Yuki", "Chen", "Omar", "Zoe", "Leo",
          "Max", "Ida", "Ines", "Karl", "Lena", "Nils", "Ola", "Rita", "Sven", "Tom",
          # longer than the schema's 8 characters: the model sometimes wants these
          "Alexandra", "Christopher", "Maximilian", "Anastasia", "Elisabeth", "Sebastian"]


def tiny_vocab():
    """The vocabulary of :func:`tiny_json_model` as a :class:`constrain.Vocabulary`:
    id 0 is the mask (a special token, like LLaDA's ``<|mdm_mask|>``), id 1 EOS,
    then the 95 printable ASCII characters, then the multi-character tokens (the
    same list every call)."""
    from constrain import Vocabulary

    tokens = [b"<mask>", b"<eos>"] + [bytes([c]) for c in range(0x20, 0x7F)] + _MULTI
    return Vocabulary.from_tokens(tokens, eos_token_ids=[1], special_token_ids=[0],
                                  name="tiny-json")


def tokenize_greedy(text: bytes, vocab) -> list[int]:
    """Longest-match tokenization of ``text`` over the grammar tokens of ``vocab``
    (maximal munch, as in classic lexers; deterministic: the spelled tokens
    concatenate to ``text``). Raises ``ValueError`` when some byte has no token."""
    index = {}
    for i, t in enumerate(vocab.tokens):
        if vocab.grammar_token_list[i]:
            index.setdefault(bytes(t), i)
    longest = max(len(t) for t in index)
    out, i = [], 0
    while i < len(text):
        for k in range(min(longest, len(text) - i), 0, -1):
            t = index.get(text[i:i + k])
            if t is not None:
                out.append(t)
                i += k
                break
        else:
            raise ValueError(f"no token for {text[i:i + 1]!r}")
    return out


class SyntheticDiffusionLM:
    """The exact denoiser of a mixture of noisy copies of support sequences (see
    the module docstring).

    Args:
        vocab: the vocabulary (a :class:`constrain.Vocabulary`); its size is the
            number of logit columns.
        support: ``N × L`` token ids (each row one support sequence, EOS-padded).
        mask_token_id: the id that marks a masked position (predicted with
            probability 0).
        weights: ``N`` non-negative weights (uniform by default).
        eps: the per-position noise level ``ε`` in ``[0, 1)``.

    Guarantee: :meth:`logprobs` returns, at every masked position, the exact
    posterior marginal of ``p`` given the observed positions (and, at an observed
    position, that position's exact conditional given the *other* observed
    positions); :meth:`sequence_logprob` returns ``log p(x)`` exactly.
    """

    def __init__(self, vocab, support, mask_token_id: int, *, weights=None, eps: float = 0.02):
        self.vocab = vocab
        self.vocab_size = len(vocab)
        self.mask_token_id = int(mask_token_id)
        self.support = np.asarray(support, dtype=np.int64)
        if self.support.ndim != 2:
            raise ValueError("support must be N × L token ids")
        self.length = self.support.shape[1]
        n = self.support.shape[0]
        w = np.ones(n) if weights is None else np.asarray(weights, dtype=np.float64)
        self.log_w = np.log(w / w.sum())
        if not 0.0 <= eps < 1.0:
            raise ValueError("eps must be in [0, 1)")
        self.eps = float(eps)
        self.n_pred = self.vocab_size - 1
        self.noise = self.eps / self.n_pred
        self.calls = 0
        onehot = np.zeros((n, self.length, self.vocab_size), dtype=np.float64)
        np.put_along_axis(onehot, self.support[:, :, None], 1.0, axis=2)
        self._onehot = onehot
        self.eos_token_ids = tuple(vocab.eos_token_ids)

    def _component_loglik(self, canvases: np.ndarray) -> np.ndarray:
        """``(B, N, L)``: log of each position's factor under each component,
        0 at masked positions."""
        hit = self.support[None, :, :] == canvases[:, None, :]
        f = np.log(np.where(hit, 1.0 - self.eps + self.noise, self.noise))
        f[np.broadcast_to((canvases == self.mask_token_id)[:, None, :], f.shape)] = 0.0
        return f

    def logprobs(self, canvases) -> np.ndarray:
        """``(B, L, V)`` log-probabilities of every position given the canvas's
        other observed positions (the mask id gets ``-inf``)."""
        c = np.atleast_2d(np.asarray(canvases, dtype=np.int64))
        if c.shape[1] != self.length:
            raise ValueError(f"this model denoises canvases of {self.length} positions, "
                             f"got {c.shape[1]}")
        self.calls += c.shape[0]
        f = self._component_loglik(c)                      # B, N, L
        total = f.sum(axis=2)                              # B, N
        # leave-one-out: position i's posterior uses the other observed positions
        loo = self.log_w[None, :, None] + total[:, :, None] - f   # B, N, L
        loo -= loo.max(axis=1, keepdims=True)
        post = np.exp(loo)
        post /= post.sum(axis=1, keepdims=True)
        probs = (1.0 - self.eps) * np.einsum("bnl,nlv->blv", post, self._onehot) + self.noise
        probs[:, :, self.mask_token_id] = 0.0
        with np.errstate(divide="ignore"):
            return np.log(probs)

    def sequence_logprob(self, tokens) -> float:
        """``log p(x)`` of a complete sequence (no mask ids), exactly: the
        log-sum-exp over components of the mixture in the module docstring."""
        x = np.asarray(tokens, dtype=np.int64)[None, :]
        f = self._component_loglik(x)[0].sum(axis=1) + self.log_w
        m = f.max()
        return float(m + np.log(np.exp(f - m).sum()))


def tiny_json_model(*, n_support: int = 400, length: int = 24, eps: float = 0.02,
                    seed: int = 0) -> SyntheticDiffusionLM:
    """The shipped test model: a :class:`SyntheticDiffusionLM` over
    :func:`tiny_vocab` whose support is ``n_support`` generated JSON objects
    ``{"name": NAME, "age": AGE}`` (names from a fixed list, about 1 in 8 longer
    than 8 characters; ages 0..150, about 1 in 5 above 120), tokenized by longest
    match and EOS-padded to ``length`` tokens. Deterministic given ``seed``; its
    marginals are exact (see :class:`SyntheticDiffusionLM`; the masked-diffusion
    objective of Sahoo et al. 2024)."""
    vocab = tiny_vocab()
    rng = random.Random(seed)
    rows = []
    while len(rows) < n_support:
        name = rng.choice(_NAMES)
        age = rng.randint(0, 150)
        text = f'{{"name": "{name}", "age": {age}}}'.encode()
        ids = tokenize_greedy(text, vocab)
        if len(ids) > length:
            continue
        rows.append(ids + [1] * (length - len(ids)))
    return SyntheticDiffusionLM(vocab, np.array(rows), mask_token_id=0, eps=eps)
