"""Token vocabularies as byte strings.

A :class:`Vocabulary` maps every token id of a model to the bytes it stands for.
Grammars are compiled against those bytes, so a vocabulary must be exact: the
bytes of the tokens of any encoding, joined, are the UTF-8 bytes of the text.

Three kinds of ids match no grammar text and are never allowed by a constraint
(except EOS ids, which a constraint allows exactly when its input is complete):

* EOS ids (``eos_token_ids``; a model may have several);
* special and added control tokens (``<|im_start|>``, ``<pad>``…);
* padding ids between the tokenizer's size and a larger model ``vocab_size``.
"""

from __future__ import annotations

import hashlib
from typing import Iterable, Sequence

import numpy as np

from .errors import VocabularyError

__all__ = ["Vocabulary"]


class Vocabulary:
    """The byte string of every token id of a tokenizer.

    Build one with :meth:`from_huggingface`, :meth:`from_tokens` or
    :meth:`from_tiktoken`. A vocabulary is immutable; compiled grammars and the
    token trie built from it are cached on it.

    Args:
        tokens: ``tokens[i]`` is the byte string of token ``i``. ``None`` marks an
            id with no text (padding).
        eos_token_ids: ids that end generation.
        special_token_ids: ids of control tokens that match no grammar text.
            ``token_bytes`` still returns their literal text, for display.
        name: a label used in messages and benchmark output.
    """

    def __init__(
        self,
        tokens: Sequence[bytes | None],
        eos_token_ids: Iterable[int],
        special_token_ids: Iterable[int] = (),
        name: str | None = None,
    ):
        n = len(tokens)
        if n == 0:
            raise VocabularyError("a vocabulary needs at least one token")
        eos = tuple(sorted({int(i) for i in eos_token_ids}))
        if not eos:
            raise VocabularyError("a vocabulary needs at least one EOS token id")
        for i in eos:
            if not 0 <= i < n:
                raise VocabularyError(f"EOS id {i} is outside the vocabulary of {n} tokens")
        special = {int(i) for i in special_token_ids}
        for i in special:
            if not 0 <= i < n:
                raise VocabularyError(f"special token id {i} is outside the vocabulary of {n} tokens")

        self._tokens: list[bytes] = []
        # grammar[i]: token i carries grammar text (not EOS, special, padding or empty).
        grammar = np.zeros(n, dtype=np.bool_)
        for i, tok in enumerate(tokens):
            if tok is None:
                self._tokens.append(b"")
                continue
            if not isinstance(tok, (bytes, bytearray)):
                raise VocabularyError(f"token {i} is {type(tok).__name__}, expected bytes")
            tok = bytes(tok)
            self._tokens.append(tok)
            grammar[i] = bool(tok) and i not in special
        grammar[list(eos)] = False
        self._grammar = grammar
        self._grammar.setflags(write=False)
        self._eos = eos
        self._special = frozenset(special) - frozenset(eos)
        self.name = name or f"vocab{n}"

        lengths = np.fromiter((len(t) for t in self._tokens), dtype=np.int64, count=n)
        offsets = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        self._offsets = offsets
        self._data = np.frombuffer(b"".join(self._tokens), dtype=np.uint8)
        self._offsets.setflags(write=False)
        h = hashlib.sha256()
        h.update(self._offsets.tobytes())
        h.update(self._data.tobytes())
        h.update(np.asarray(eos, dtype=np.int64).tobytes())
        h.update(self._grammar.tobytes())
        self.fingerprint = h.hexdigest()[:24]
        self._cache: dict = {}

    # -- construction -----------------------------------------------------------

    @classmethod
    def from_tokens(
        cls,
        tokens: list[bytes],
        eos_token_ids: list[int],
        special_token_ids: Iterable[int] = (),
        name: str | None = None,
    ) -> "Vocabulary":
        """A vocabulary given directly as byte strings (``None`` for padding ids)."""
        return cls(tokens, eos_token_ids, special_token_ids, name=name)

    # -- queries ----------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._tokens)

    def __repr__(self) -> str:
        return f"Vocabulary({self.name!r}, size={len(self)}, eos={list(self._eos)})"

    @property
    def eos_token_ids(self) -> tuple[int, ...]:
        """The ids that end generation, sorted."""
        return self._eos

    @property
    def special_token_ids(self) -> frozenset[int]:
        """Control tokens (not EOS) that a constraint never allows."""
        return self._special

    def token_bytes(self, token_id: int) -> bytes:
        """The bytes of ``token_id`` (the literal text for special tokens, ``b""``
        for padding)."""
        return self._tokens[token_id]

    @property
    def tokens(self) -> list[bytes]:
        """All token byte strings, indexed by id (do not mutate)."""
        return self._tokens

    @property
    def grammar_token_mask(self) -> np.ndarray:
        """Boolean array: ``True`` where a token carries grammar text (not EOS,
        special, padding or empty)."""
        return self._grammar

    @property
    def flat(self) -> tuple[np.ndarray, np.ndarray]:
        """``(data, offsets)``: token ``i`` is ``data[offsets[i]:offsets[i+1]]``, for
        numba kernels."""
        return self._data, self._offsets

    def decode(self, token_ids: Iterable[int], skip_special: bool = True) -> bytes:
        """The bytes of a token sequence; EOS, special and padding ids are skipped
        unless ``skip_special`` is false."""
        if skip_special:
            g = self._grammar
            return b"".join(self._tokens[i] for i in token_ids if g[i])
        return b"".join(self._tokens[i] for i in token_ids)

    def __eq__(self, other) -> bool:
        return isinstance(other, Vocabulary) and other.fingerprint == self.fingerprint

    def __hash__(self) -> int:
        return hash(self.fingerprint)
