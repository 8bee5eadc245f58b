"""Token vocabularies as byte strings.

A :class:`Vocabulary` maps every token id of a model to the bytes it stands for.
Grammars are compiled against those bytes, so a vocabulary must be exact: the
bytes of the tokens of any encoding, joined, are the UTF-8 bytes of the text.

Three kinds of ids match no grammar text and are never allowed by a constraint
(except EOS ids, which a constraint allows exactly when its input is complete):

* EOS ids (``eos_token_ids``; a model may have several);
* special and added control tokens (``<|im_start|>``, ``<pad>``…);
* padding ids between the tokenizer's size and a larger model ``vocab_size``.

Build one from a Hugging Face tokenizer (:meth:`Vocabulary.from_huggingface`:
byte-level BPE, SentencePiece with byte fallback, plain-text or raw-bytes
vocabularies), a tiktoken ranks file (:meth:`Vocabulary.from_tiktoken`), or a
list of byte strings (:meth:`Vocabulary.from_tokens`).

A vocabulary need not cover every byte value. SmolLM2's byte-level BPE, for
one, has no token holding any of 21 bytes (six C0 controls, the lead bytes
F1/F2 of U+40000..U+BFFFF, and C0, C1, F5..FF, which UTF-8 never uses): its
tokenizer silently drops them when encoding, and no constraint can make the
model write them.
"""

from __future__ import annotations

import base64
import binascii
import gzip
import hashlib
import json
import os
import re
import sys
import threading
import weakref
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence, TypeVar

import numpy as np

from constrain.errors import VocabularyError, as_index

__all__ = ["Vocabulary"]

_T = TypeVar("_T")

# every live vocabulary by fingerprint, so that an unpickled one is the
# process's own when it has one (its trie, default compiler and encoder)
_LIVE: "weakref.WeakValueDictionary[str, Vocabulary]" = weakref.WeakValueDictionary()
_LIVE_LOCK = threading.Lock()



def _token_ids(what: str, ids) -> set[int]:
    """``ids`` (an iterable of token ids) as a set of ints; a string (``"12"``
    was read as ids 1 and 2), a bool or a float among them is a
    :class:`VocabularyError`."""
    if isinstance(ids, (str, bytes, bytearray)) or not isinstance(ids, Iterable):
        raise VocabularyError(f"{what} ids must be an iterable of token ids, not "
                              f"{type(ids).__name__} {ids!r}"[:200])
    return {as_index(i, lambda: VocabularyError(f"{what} id {i!r} is not an integer token id"))
            for i in ids}

class Vocabulary:
    """The byte string of every token id of a tokenizer.

    Build one with :meth:`from_huggingface`, :meth:`from_tokens` or
    :meth:`from_tiktoken`. A vocabulary is immutable; what is derived from it
    (its token trie, its default compiler) is kept on it (:meth:`derived`).

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
        eos = tuple(sorted(_token_ids("EOS", eos_token_ids)))
        if not eos:
            raise VocabularyError("a vocabulary needs at least one EOS token id")
        for i in eos:
            if not 0 <= i < n:
                raise VocabularyError(f"EOS id {i} is outside the vocabulary of {n} tokens")
        special = _token_ids("special token", special_token_ids)
        for i in special:
            if not 0 <= i < n:
                raise VocabularyError(f"special token id {i} is outside the vocabulary of {n} tokens")

        # padding as b""; one pass in C for the usual list of bytes (~50k tokens)
        self._tokens: list[bytes] = [b"" if tok is None else tok for tok in tokens]
        if not set(map(type, self._tokens)) <= {bytes}:
            for i, tok in enumerate(self._tokens):
                if not isinstance(tok, (bytes, bytearray)):
                    raise VocabularyError(f"token {i} is {type(tok).__name__}, expected bytes")
                self._tokens[i] = bytes(tok)
        lengths = np.fromiter(map(len, self._tokens), dtype=np.int64, count=n)
        # grammar[i]: token i carries grammar text (not EOS, special, padding or empty).
        grammar = lengths > 0
        grammar[list(special)] = False
        grammar[list(eos)] = False
        self._grammar = grammar
        self._grammar.setflags(write=False)
        self._eos = eos
        self._eos_set = frozenset(eos)
        # writable: numba types a read-only array apart (a second specialisation)
        self._eos_array = np.array(eos, dtype=np.int64)
        self._special = frozenset(special) - frozenset(eos)
        self.name = name or f"vocab{n}"

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
        #: a stable digest of what constraints read (the token bytes, EOS ids
        #: and which tokens carry grammar text): equal in every process for
        #: equal vocabularies; saved constraints are keyed by it
        self.fingerprint = h.hexdigest()[:24]
        self._cache: dict = {}
        # reentrant: building one derived object may ask for another
        self._cache_lock = threading.RLock()
        #: the tokenizer's own encoding, ``str -> list[int]`` (no special
        #: tokens added), when the vocabulary was read from a tokenizer
        #: (:meth:`from_huggingface`); ``None`` otherwise. Jump-forward decoding
        #: (:meth:`constrain.Matcher.jump_forward_tokens`) uses it.
        self.encoder: Callable[[str], list[int]] | None = None
        with _LIVE_LOCK:
            _LIVE.setdefault(self.fingerprint, self)

    def __reduce__(self):
        """Pickles as its tokens, EOS and special ids and name; unpickled in a
        process that has a vocabulary of the same :attr:`fingerprint`, it is
        that one (with its token trie, default compiler and ``encoder``), else
        a new one without an ``encoder`` (a tokenizer's does not travel)."""
        return (_unpickle_vocabulary,
                (self._tokens, list(self._eos), sorted(self._special), self.name,
                 self.fingerprint))

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

    @classmethod
    def from_huggingface(
        cls,
        tokenizer: Any,
        vocab_size: int | None = None,
        eos_token_ids: int | Iterable[int] | None = None,
        *,
        name: str | None = None,
        verify: bool = True,
    ) -> "Vocabulary":
        """The vocabulary of a Hugging Face tokenizer.

        ``tokenizer`` is a ``transformers`` tokenizer (fast ones are read through
        their ``backend_tokenizer``), a raw ``tokenizers.Tokenizer``, or a slow
        tokenizer exposing ``get_vocab()`` (whose entries may be ``bytes``, as in
        tiktoken-based tokenizers).

        How token strings map to bytes is read from the tokenizer's own JSON, not
        from its class name:

        * a ``ByteLevel`` decoder or pre-tokenizer (GPT-2, SmolLM2, Llama 3, Qwen):
          GPT-2's byte-to-unicode table is inverted (``Ġ`` is a space);
        * ``Metaspace`` / ``Replace`` decoders (SentencePiece models): ``▁`` is a
          space, and with a ``ByteFallback`` decoder step ``<0xNN>`` is the
          single byte ``NN`` (without one the tokenizer decodes it as the text
          ``<0xNN>``, and so does Trellis);
        * no decoder: token strings are the text as the encoder split it (their
          UTF-8 bytes; ``tokenizers``' own decode would join them with spaces).
          A pre-tokenizer that drops whitespace (``Whitespace``, BERT's) leaves
          no text to stand for: :class:`VocabularyError`.

        A tokenizer without that JSON (a Python "slow" tokenizer) is read from
        ``get_vocab()`` (SentencePiece pieces with an ``sp_model``, byte-level
        strings, ``bytes``, or plain text) and, when it has ``decode``, always
        checked against it: a convention it does not follow (ByT5's one-byte
        ids) is a :class:`VocabularyError`, never wrong bytes.

        A SentencePiece "dummy prefix" is a property of a whole encoding, not of a
        token: ``▁Hello`` is ``b" Hello"`` here even though a decode of that token
        alone drops the space. Likewise a ``BPEDecoder``'s word suffix
        (``</w>``) is a space here, though a decode drops the last one of a text.
        Both differ from a decode at the ends of a text only.

        Added tokens flagged special (``<|im_start|>``, ``<pad>``…) and the
        model's unknown token match no text: they become ``special_token_ids``
        (unless they are EOS) and keep their literal text for display. Added
        tokens that are not special stand for their text's UTF-8 bytes and stay
        ordinary tokens.

        Args:
            tokenizer: the tokenizer.
            vocab_size: the model's vocabulary size (rows of its output layer). Ids
                from the tokenizer's size up to it are padding, never allowed. It
                may not be smaller than the tokenizer.
            eos_token_ids: EOS ids in addition to the tokenizer's
                ``eos_token_id`` (e.g. a model's ``generation_config.eos_token_id``,
                an int or a list). Required when the tokenizer names none.
            name: a label; defaults to the tokenizer's ``name_or_path``.
            verify: decode a sample of tokens with the tokenizer itself and raise
                :class:`VocabularyError` if any disagrees with the derived bytes.

        Raises:
            VocabularyError: unsupported decoder (WordPiece, CTC), no EOS id,
                ``vocab_size`` smaller than the tokenizer, or a failed check.
        """
        return _from_huggingface(cls, tokenizer, vocab_size, eos_token_ids, name, verify)

    @classmethod
    def from_tiktoken(
        cls,
        path: str | os.PathLike,
        eos_token_ids: int | Iterable[int],
        special_tokens: Mapping[str, int] | None = None,
        name: str | None = None,
        vocab_size: int | None = None,
    ) -> "Vocabulary":
        """The vocabulary of a tiktoken ranks file.

        Each line of the file is ``base64(token) rank``; the file may be plain or
        gzip-compressed (``.tiktoken.gz``). A token's id is its rank.

        Args:
            path: the ``.tiktoken`` or ``.tiktoken.gz`` file.
            eos_token_ids: the id or ids that end generation, usually among
                ``special_tokens`` (o200k: ``<|endoftext|>`` = 199999).
            special_tokens: control tokens, name to id (o200k:
                ``{"<|endoftext|>": 199999, "<|endofprompt|>": 200018}``). They
                match no grammar text; their name is kept for display. An id may
                not also be a rank.
            name: a label; defaults to the file name without its suffixes.
            vocab_size: the model's vocabulary size, if larger than the highest
                id + 1. Ids with no token (gaps between the ranks and the special
                tokens, and those up to ``vocab_size``) are padding.

        Raises:
            VocabularyError: unreadable file, malformed line, duplicated rank or
                token, a special id that is also a rank, or a ``vocab_size`` too
                small.
        """
        path = Path(path)
        try:
            raw = path.read_bytes()
        except OSError as exc:
            raise VocabularyError(f"cannot read tiktoken file {str(path)!r}: {exc}") from None
        if raw[:2] == b"\x1f\x8b":
            try:
                raw = gzip.decompress(raw)
            except (OSError, EOFError) as exc:
                raise VocabularyError(f"tiktoken file {str(path)!r} is not valid gzip: {exc}") from None

        by_rank: dict[int, bytes] = {}
        seen: dict[bytes, int] = {}
        a2b = _b64decode
        for lineno, line in enumerate(raw.splitlines(), 1):
            parts = line.split()
            if not parts:
                continue
            try:
                if len(parts) != 2:
                    raise ValueError
                tok = a2b(parts[0])
                rank = int(parts[1])
                if rank < 0:
                    raise ValueError
            except (ValueError, binascii.Error):
                shown = line[:80].decode("latin-1")
                raise VocabularyError(
                    f"{path.name}, line {lineno}: expected 'base64-token rank', got {shown!r}"
                ) from None
            if rank in by_rank:
                raise VocabularyError(f"{path.name}, line {lineno}: rank {rank} appears twice")
            prev = seen.setdefault(tok, rank)
            if prev != rank:
                raise VocabularyError(
                    f"{path.name}, line {lineno}: token {tok!r} appears twice (ranks {prev} and {rank})"
                )
            by_rank[rank] = tok
        if not by_rank:
            raise VocabularyError(f"tiktoken file {str(path)!r} holds no tokens")

        special: dict[int, bytes] = {}
        for tname, tid in (special_tokens or {}).items():
            tid = _as_id(tid, f"special token {tname!r}")
            text = tname if isinstance(tname, bytes) else str(tname).encode("utf-8")
            if tid in by_rank:
                raise VocabularyError(
                    f"special token {tname!r} has id {tid}, which is already the rank of {by_rank[tid]!r}"
                )
            if tid in special:
                raise VocabularyError(f"special tokens {special[tid]!r} and {tname!r} share id {tid}")
            special[tid] = text

        n = max(max(by_rank), max(special, default=-1)) + 1
        n = _check_vocab_size(n, vocab_size, f"the tiktoken file {path.name!r}")
        tokens: list[bytes | None] = [None] * n
        for rank, tok in by_rank.items():
            tokens[rank] = tok
        for tid, text in special.items():
            tokens[tid] = text
        if name is None:
            name = path.name
            for suffix in (".gz", ".tiktoken"):
                if name.endswith(suffix):
                    name = name[: -len(suffix)]
        return cls(tokens, _eos_list(eos_token_ids), special, name=name)

    # -- queries ----------------------------------------------------------------

    def __len__(self) -> int:
        """The number of token ids, padding included."""
        return len(self._tokens)

    def __repr__(self) -> str:
        """``Vocabulary(name, size=…, eos=[…])``."""
        return f"Vocabulary({self.name!r}, size={len(self)}, eos={list(self._eos)})"

    @property
    def eos_token_ids(self) -> tuple[int, ...]:
        """The ids that end generation, sorted."""
        return self._eos

    @property
    def eos_token_set(self) -> frozenset[int]:
        """:attr:`eos_token_ids` as a frozenset."""
        return self._eos_set

    @property
    def eos_token_array(self) -> np.ndarray:
        """:attr:`eos_token_ids` as an int64 array (shared: do not mutate)."""
        return self._eos_array

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
    def grammar_token_list(self) -> list[bool]:
        """:attr:`grammar_token_mask` as a Python list (cached), for per-token
        checks in Python without numpy scalar overhead."""
        lst = self._cache.get("grammar_list")
        if lst is None:
            lst = self._cache["grammar_list"] = self._grammar.tolist()
        return lst

    def derived(self, name: str, build: Callable[[], _T]) -> _T:
        """The object ``name`` derived from this vocabulary (its token trie, its
        default compiler): made by ``build()`` on first use and kept as long as
        the vocabulary; threads asking at once get the one object."""
        hit = self._cache.get(name)
        if hit is None:
            with self._cache_lock:
                hit = self._cache.get(name)
                if hit is None:
                    hit = self._cache[name] = build()
        return hit

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
        """Two vocabularies are equal when their fingerprints are: same token
        bytes, EOS ids and grammar tokens."""
        return isinstance(other, Vocabulary) and other.fingerprint == self.fingerprint

    def __hash__(self) -> int:
        """The hash of the fingerprint."""
        return hash(self.fingerprint)


def _unpickle_vocabulary(tokens, eos, special, name, fingerprint) -> Vocabulary:
    with _LIVE_LOCK:
        live = _LIVE.get(fingerprint)
    if live is not None:
        return live
    vocab = Vocabulary(tokens, eos, special, name=name)
    if vocab.fingerprint != fingerprint:
        raise VocabularyError(f"the pickled vocabulary {name!r} does not rebuild to its "
                              f"fingerprint {fingerprint}")
    with _LIVE_LOCK:  # another thread may have rebuilt it meanwhile: one object
        return _LIVE.setdefault(fingerprint, vocab)


# -- helpers for the constructors ----------------------------------------------


if sys.version_info >= (3, 11):

    def _b64decode(data: bytes) -> bytes:
        """Strict base64 decoding (no stray characters, correct padding)."""
        return binascii.a2b_base64(data, strict_mode=True)

else:  # pragma: no cover - Python 3.10

    def _b64decode(data: bytes) -> bytes:
        """Strict base64 decoding (no stray characters, correct padding)."""
        return base64.b64decode(data, validate=True)


def _as_id(value: Any, what: str) -> int:
    """``value`` as a non-negative token id, or a :class:`VocabularyError`."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise VocabularyError(f"{what}: expected an int token id, got {value!r}")
    if value < 0:
        raise VocabularyError(f"{what}: token id {value} is negative")
    return int(value)


def _eos_list(eos: int | Iterable[int] | None) -> list[int]:
    """EOS ids given as ``None``, one int, or an iterable of ints."""
    if eos is None:
        return []
    if isinstance(eos, (int, np.integer)) and not isinstance(eos, bool):
        return [_as_id(eos, "eos_token_ids")]
    if isinstance(eos, (str, bytes)):
        items = None
    else:
        try:
            items = list(eos)
        except TypeError:
            items = None
    if items is None:
        raise VocabularyError(f"eos_token_ids: expected an int or a list of ints, got {eos!r}")
    return [_as_id(i, "eos_token_ids") for i in items]


def _check_vocab_size(n: int, vocab_size: int | None, what: str) -> int:
    """The final vocabulary size: ``n`` ids from the tokenizer, padded up to the
    model's ``vocab_size``."""
    if vocab_size is None:
        return n
    vocab_size = _as_id(vocab_size, "vocab_size")
    if vocab_size < n:
        raise VocabularyError(
            f"the model's vocab_size {vocab_size} is smaller than {what}, which has {n} token ids"
        )
    return vocab_size


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's table from byte values to the printable characters that stand for
    them in byte-level BPE vocabularies (``0x20`` -> ``Ġ``)."""
    bs = (
        list(range(ord("!"), ord("~") + 1))
        + list(range(ord("¡"), ord("¬") + 1))
        + list(range(ord("®"), ord("ÿ") + 1))
    )
    cs = bs[:]
    extra = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + extra)
            extra += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


_BYTE_ENCODER = _bytes_to_unicode()
# str.translate table from byte-level characters back to chr(byte); every other
# character below 256 goes to one that latin-1 cannot encode, so a token holding
# any character outside the byte-level alphabet is detected by the encode failing.
_BYTE_DECODE_TABLE: dict[int, int] = {c: 0xFFFF for c in range(256)}
_BYTE_DECODE_TABLE.update({ord(ch): b for b, ch in _BYTE_ENCODER.items()})
# Byte-fallback pieces: encoders write "<0x0A>"; the ByteFallback decoder also
# reads lowercase hex.
_BYTE_FALLBACK = {f"<0x{b:02X}>": bytes([b]) for b in range(256)}
_BYTE_FALLBACK.update({f"<0x{b:02x}>": bytes([b]) for b in range(256)})


def _byte_level_all(strings: list[str]) -> list[bytes]:
    """The bytes of byte-level BPE tokens (``Ġ`` -> space…), all at once.

    Like the ``tokenizers`` ByteLevel decoder, a token holding a character
    outside the byte-level alphabet (an added token) stands for its own UTF-8
    text. One ``str.translate`` over the joined strings keeps this fast."""
    if not strings:
        return []
    joined = "".join(strings).translate(_BYTE_DECODE_TABLE)
    codes = np.frombuffer(joined.encode("utf-32-le"), dtype=np.uint32)
    lengths = np.fromiter(map(len, strings), dtype=np.int64, count=len(strings))
    ends = np.cumsum(lengths)
    starts = ends - lengths
    data = codes.astype(np.uint8).tobytes()
    out = [data[i:j] for i, j in zip(starts.tolist(), ends.tolist())]
    if len(codes):
        # reduceat needs in-range indices; empty tokens are never "bad".
        nonempty = lengths > 0
        peak = np.zeros(len(strings), dtype=np.uint32)
        peak[nonempty] = np.maximum.reduceat(codes, starts[nonempty])
        for i in np.flatnonzero(peak > 255).tolist():
            out[i] = strings[i].encode("utf-8")
    return out


def _flatten(node: Any, seq_key: str) -> list[dict]:
    """The components of a normalizer/pre-tokenizer/decoder JSON node, with
    ``Sequence`` nodes expanded in order."""
    if not node:
        return []
    if node.get("type") == "Sequence":
        out: list[dict] = []
        for child in node.get(seq_key) or ():
            out.extend(_flatten(child, seq_key))
        return out
    return [node]


def _pattern(node: dict, where: str):
    """A ``Replace`` node's pattern as ``("str", s)`` or ``("re", compiled)``."""
    pat = node.get("pattern") or {}
    if "String" in pat:
        return ("str", pat["String"])
    if "Regex" in pat:
        try:
            return ("re", re.compile(pat["Regex"]))
        except re.error as exc:
            raise VocabularyError(f"{where} Replace regex {pat['Regex']!r} is not supported: {exc}") from None
    raise VocabularyError(f"{where} Replace node has an unknown pattern {pat!r}")


def _decode_steps(spec: dict) -> list[tuple]:
    """The per-token steps that turn token strings into bytes, from a tokenizer's
    JSON. Sequence-level steps (``Fuse``, ``Strip``: they only remove the
    SentencePiece dummy-prefix space of the first token) are left out."""
    model = spec.get("model") or {}
    decoders = _flatten(spec.get("decoder"), "decoders")
    steps: list[tuple] = []
    if decoders:
        for d in decoders:
            kind = d.get("type")
            if kind == "ByteLevel":
                steps.append(("bytelevel",))
            elif kind == "Metaspace":
                steps.append(("replace", ("str", d.get("replacement", "\u2581")), " "))
            elif kind == "Replace":
                steps.append(("replace", _pattern(d, "decoder"), d.get("content", "")))
            elif kind == "ByteFallback":
                steps.append(("bytefallback",))
            elif kind == "BPEDecoder":
                steps.append(("replace", ("str", d.get("suffix", "</w>")), " "))
            elif kind in ("Fuse", "Strip"):
                continue
            else:
                raise VocabularyError(
                    f"the tokenizer's {kind} decoder is not supported: its tokens do not stand "
                    "for exact bytes of the text (supported: ByteLevel, Metaspace, Replace, "
                    "ByteFallback, Fuse, Strip, BPEDecoder)"
                )
    else:
        # No decoder: infer what the encoding side did to the text.
        for p in _flatten(spec.get("pre_tokenizer"), "pretokenizers"):
            kind = p.get("type")
            if kind == "ByteLevel":
                steps.append(("bytelevel",))
            elif kind == "Metaspace":
                steps.append(("replace", ("str", p.get("replacement", "\u2581")), " "))
            elif kind in _DROPS_WHITESPACE or (kind == "Split" and p.get("behavior") == "Removed"):
                raise VocabularyError(
                    f"the tokenizer has no decoder and its {kind} pre-tokenizer drops the "
                    "text's whitespace: its tokens do not stand for exact bytes of the text")
        for n in _flatten(spec.get("normalizer"), "normalizers"):
            if n.get("type") == "Replace":
                kind, pat = _pattern(n, "normalizer")
                if kind == "str" and pat == " " and n.get("content"):
                    steps.append(("replace", ("str", n["content"]), " "))
        # what the encoder does: a byte it has no piece for becomes <0xNN>
        if model.get("byte_fallback"):
            steps.insert(0, ("bytefallback",))
    # With a decoder, <0xNN> is a byte only if the decoder says so (a ByteFallback
    # step): without one, the tokenizer decodes it as the text "<0xNN>".
    return steps


#: pre-tokenizers that split the text at whitespace and drop it
_DROPS_WHITESPACE = frozenset({"Whitespace", "WhitespaceSplit", "BertPreTokenizer",
                               "CharDelimiterSplit"})


def _apply_steps(strings: list[str], steps: list[tuple]) -> list[bytes]:
    """Run the decode steps over every token string (vectorised per step)."""
    items: list[str | bytes] = list(strings)
    for step in steps:
        kind = step[0]
        if kind == "bytelevel":
            where = [i for i, t in enumerate(items) if isinstance(t, str)]
            for i, t in zip(where, _byte_level_all([items[i] for i in where])):
                items[i] = t
        elif kind == "bytefallback":
            fb = _BYTE_FALLBACK
            items = [fb.get(t, t) if isinstance(t, str) else t for t in items]
        elif kind == "replace":
            (pkind, pat), content = step[1], step[2]
            if pkind == "str":
                if not pat:
                    continue
                items = [t.replace(pat, content) if isinstance(t, str) and pat in t else t for t in items]
            else:
                items = [pat.sub(lambda _m: content, t) if isinstance(t, str) else t for t in items]
    try:
        return [t.encode("utf-8") if isinstance(t, str) else t for t in items]
    except UnicodeEncodeError:
        bad = next(t for t in items if isinstance(t, str) and not _encodable(t))
        raise VocabularyError(
            f"the token {bad!r} is not text that UTF-8 can encode (a lone surrogate): "
            "it stands for no bytes") from None


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _backend_of(tokenizer: Any):
    """The ``tokenizers.Tokenizer`` behind ``tokenizer``, or ``None`` for a slow
    tokenizer."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:
        return backend
    inner = getattr(tokenizer, "_tokenizer", None)  # tokenizers.implementations.BaseTokenizer
    if inner is not None and hasattr(inner, "to_str"):
        return inner
    if hasattr(tokenizer, "to_str") and hasattr(tokenizer, "id_to_token"):
        return tokenizer
    return None


def _from_huggingface(cls, tokenizer, vocab_size, eos_token_ids, name, verify):
    """The body of :meth:`Vocabulary.from_huggingface`."""
    eos = _eos_list(eos_token_ids)
    tok_eos = getattr(tokenizer, "eos_token_id", None)
    if tok_eos is not None:
        eos = _eos_list(tok_eos) + eos
    if name is None:
        name = getattr(tokenizer, "name_or_path", None) or None

    backend = _backend_of(tokenizer)
    if backend is not None:
        tokens, special, regular_check = _fast_tokens(backend)
    else:
        tokens, special, regular_check = _slow_tokens(tokenizer)
    for sid in getattr(tokenizer, "all_special_ids", None) or ():
        if sid is not None and 0 <= sid < len(tokens):
            special.add(int(sid))

    if not eos:
        raise VocabularyError(
            "the tokenizer names no EOS token: pass eos_token_ids (e.g. the model's "
            "generation_config.eos_token_id)"
        )
    n = _check_vocab_size(len(tokens), vocab_size, "the tokenizer")
    for i in eos:
        if i >= n:
            raise VocabularyError(f"EOS id {i} is outside the vocabulary of {n} tokens")
    tokens = tokens + [None] * (n - len(tokens))
    special.difference_update(eos)

    if verify and regular_check is not None:
        regular_check(tokens, special | set(eos))
    vocab = cls(tokens, eos, special, name=name)
    vocab.encoder = tokenizer_encoder(tokenizer)
    return vocab


def tokenizer_encoder(tokenizer) -> Callable[[str], list[int]] | None:
    """``str -> list[int]``: how ``tokenizer`` encodes text, with no special
    tokens added -- a ``transformers`` tokenizer, a raw ``tokenizers.Tokenizer``,
    a tiktoken ``Encoding`` (``encode_ordinary``) or a plain callable; ``None``
    when it is none of these."""
    if hasattr(tokenizer, "encode_ordinary"):  # tiktoken
        return lambda text: list(tokenizer.encode_ordinary(text))
    encode = getattr(tokenizer, "encode", None)
    if encode is None:
        return tokenizer if callable(tokenizer) else None
    if hasattr(tokenizer, "backend_tokenizer") or hasattr(tokenizer, "all_special_ids"):
        return lambda text: list(encode(text, add_special_tokens=False))  # transformers

    def raw(text: str) -> list[int]:
        out = encode(text, add_special_tokens=False)
        return list(getattr(out, "ids", out))  # tokenizers.Tokenizer gives an Encoding

    return raw


def _component_json(obj) -> dict | None:
    """The JSON of one component (normalizer, pre-tokenizer, decoder) of a
    ``tokenizers.Tokenizer``: the same text ``to_str()`` holds for it."""
    if obj is None:
        return None
    return json.loads(obj.__getstate__())


def _tokenizer_spec(backend) -> dict:
    """The parts of a ``tokenizers.Tokenizer``'s JSON that say how its tokens
    map to bytes: ``normalizer``, ``pre_tokenizer``, ``decoder`` and the scalar
    fields of ``model`` (type, byte_fallback, unk_token / unk_id).

    Serialising a whole 200k-token tokenizer (vocabulary and merges) costs more
    than everything else here, so the components are read one by one, with the
    full ``to_str()`` as the fallback."""
    try:
        spec = {
            "normalizer": _component_json(backend.normalizer),
            "pre_tokenizer": _component_json(backend.pre_tokenizer),
            "decoder": _component_json(backend.decoder),
        }
        model = backend.model
        kind = type(model).__name__
        if kind == "Unigram":
            full = json.loads(model.__getstate__())
            spec["model"] = {k: v for k, v in full.items() if k != "vocab"}
        elif kind in ("BPE", "WordPiece", "WordLevel"):
            spec["model"] = {
                "type": kind,
                "byte_fallback": bool(getattr(model, "byte_fallback", False)),
                "unk_token": getattr(model, "unk_token", None),
            }
        else:
            raise AttributeError(kind)
        return spec
    except Exception:  # noqa: BLE001 - older/newer bindings: read the whole JSON
        try:
            full = json.loads(backend.to_str())
        except Exception as exc:  # noqa: BLE001
            raise VocabularyError(f"cannot read the tokenizer's JSON: {exc}") from None
        model = full.get("model") or {}
        full["model"] = {k: v for k, v in model.items() if k not in ("vocab", "merges")}
        return full


def _fast_tokens(backend):
    """Token bytes, special ids and a verifier for a ``tokenizers.Tokenizer``."""
    spec = _tokenizer_spec(backend)
    model = spec.get("model") or {}
    if model.get("type") == "WordPiece":
        raise VocabularyError(_WORDPIECE)
    steps = _decode_steps(spec)

    added = backend.get_added_tokens_decoder()
    # the largest id, not the count of entries: ids may leave gaps
    n = max(backend.get_vocab_size(with_added_tokens=True), max(added, default=-1) + 1,
            max(backend.get_vocab(with_added_tokens=True).values(), default=-1) + 1)
    id_to_token = backend.id_to_token
    while id_to_token(n) is not None:  # ids beyond the reported size (holes below)
        n += 1
    # id_to_token, unlike get_vocab's dict, also sees a piece a Unigram vocabulary
    # holds under several ids.
    strings = [id_to_token(i) for i in range(n)]
    present = [i for i, s in enumerate(strings) if s is not None]
    tokens: list[bytes | None] = [None] * n
    for i, b in zip(present, _apply_steps([strings[i] for i in present], steps)):
        tokens[i] = b

    special: set[int] = set()
    checked_added: list[int] = []
    token_to_id = backend.model.token_to_id
    for i, tok in added.items():
        content = tok.content
        if tok.special:
            special.add(i)
            tokens[i] = content.encode("utf-8")
        else:
            checked_added.append(i)
            # not a piece of the model's own vocabulary, and kept as its content
            # (a normalized one is kept normalized, "▁<tool>": what the decoder sees)
            if token_to_id(content) != i and strings[i] in (None, content):
                tokens[i] = content.encode("utf-8")

    unk = model.get("unk_token")
    if model.get("type") == "Unigram" and model.get("unk_id") is not None:
        special.add(int(model["unk_id"]))
    elif isinstance(unk, str) and token_to_id(unk) is not None:
        special.add(token_to_id(unk))

    if not spec.get("decoder"):
        # decode would join the tokens with spaces, which is no text the encoder
        # read: the tokens stand for the text as the encoder splits it
        return tokens, special, None

    fallback_ids: set[int] = set()
    if ("bytefallback",) in steps:
        fallback_ids = {i for i in map(token_to_id, _BYTE_FALLBACK) if i is not None}

    def check(tokens: list[bytes | None], excluded: set[int]) -> None:
        def decode_batch(seqs):
            return backend.decode_batch(seqs, skip_special_tokens=False)

        _verify(tokens, excluded | fallback_ids, checked_added, decode_batch,
                _fallback_groups(token_to_id) if fallback_ids else ())

    return tokens, special, check


_WORDPIECE = ("WordPiece tokenizers (BERT-style) are not supported: their tokens do not stand "
              "for exact bytes of the text (spaces and '##' prefixes are lost)")

#: characters whose UTF-8 bytes, as byte-fallback pieces, are decoded in
#: context to check that the decoder joins them (1 to 4 bytes)
_FALLBACK_CHECKS = ("A", "\u00e9", "\u65e5", "\U0001f600")


def _fallback_groups(token_to_id) -> list[tuple[str, list[int]]]:
    """``(character, ids of its <0xNN> pieces)`` for :data:`_FALLBACK_CHECKS`."""
    groups = []
    for ch in _FALLBACK_CHECKS:
        ids = [token_to_id(f"<0x{b:02X}>") for b in ch.encode("utf-8")]
        if all(i is not None for i in ids):
            groups.append((ch, ids))
    return groups


def _is_byte_level_alphabet(s: str) -> bool:
    """Whether every character of ``s`` belongs to GPT-2's byte-level alphabet."""
    table = _BYTE_DECODE_TABLE
    return all(table.get(ord(c), 0xFFFF) != 0xFFFF for c in s)


def _slow_tokens(tokenizer):
    """Token bytes, special ids and a verifier for a tokenizer without a
    ``tokenizers`` backend: its ``get_vocab()`` maps ``str`` or ``bytes`` (as
    tiktoken-based tokenizers do) to ids.

    With no JSON to read, ``str`` entries are SentencePiece pieces when the
    tokenizer has an ``sp_model``, byte-level when every regular entry is in the
    byte-level alphabet and some hold ``Ġ``/``Ċ``, and plain text otherwise."""
    get_vocab = getattr(tokenizer, "get_vocab", None)
    if get_vocab is None:
        raise VocabularyError(
            f"{type(tokenizer).__name__} is not a Hugging Face tokenizer: it has neither "
            "backend_tokenizer, to_str() nor get_vocab()"
        )
    if hasattr(tokenizer, "wordpiece_tokenizer"):
        raise VocabularyError(_WORDPIECE)
    vocab = dict(get_vocab())
    added = dict(getattr(tokenizer, "added_tokens_decoder", None) or {})
    if not vocab and not added:
        raise VocabularyError("the tokenizer's vocabulary is empty")
    n = max(max(vocab.values(), default=-1), max(added, default=-1)) + 1
    try:
        n = max(n, len(tokenizer))
    except TypeError:
        pass
    strings: list[str | bytes | None] = [None] * n
    for s, i in vocab.items():
        if not isinstance(s, (str, bytes, bytearray)):
            raise VocabularyError(f"token {i} is {type(s).__name__}, expected str or bytes")
        strings[i] = s

    texts = [s for i, s in enumerate(strings) if isinstance(s, str) and i not in added]
    if hasattr(tokenizer, "sp_model"):
        steps: list[tuple] = [("bytefallback",), ("replace", ("str", "\u2581"), " ")]
    elif (
        texts
        and any("\u0120" in s or "\u010a" in s for s in texts)
        and all(map(_is_byte_level_alphabet, texts))
    ):
        steps = [("bytelevel",)]
    else:
        steps = []
    present = [i for i in range(n) if isinstance(strings[i], str)]
    tokens: list[bytes | None] = [bytes(s) if isinstance(s, (bytes, bytearray)) else None for s in strings]
    for i, b in zip(present, _apply_steps([strings[i] for i in present], steps)):
        tokens[i] = b

    special: set[int] = set()
    checked_added: list[int] = []
    for i, tok in added.items():
        i = _as_id(i, "added token")
        content = getattr(tok, "content", str(tok))
        if getattr(tok, "special", False):
            special.add(i)
            tokens[i] = content.encode("utf-8")
        else:
            checked_added.append(i)
            if vocab.get(content) != i:
                tokens[i] = content.encode("utf-8")

    # plain text is a guess too (ByT5's entries are chr(byte), not text): the
    # tokenizer's decode is checked whatever the guess
    decode = getattr(tokenizer, "decode", None)
    if decode is None:
        return tokens, special, None

    fallback_ids = {vocab[s] for s in _BYTE_FALLBACK if s in vocab} if steps else set()

    def decode_one(ids):
        try:
            return decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False)
        except TypeError:
            return decode(ids)

    def check(tokens: list[bytes | None], excluded: set[int]) -> None:
        _verify(tokens, excluded | fallback_ids, checked_added, lambda seqs: [decode_one(s) for s in seqs],
                _fallback_groups(vocab.get) if fallback_ids else ())

    return tokens, special, check


_VERIFY_SAMPLE = 2048


def _verify(tokens, excluded, extra_ids, decode_batch, groups=()) -> None:
    """Decode ``[anchor, i, anchor]`` for a sample of regular tokens ``i`` with the
    tokenizer itself and compare with the derived bytes. The anchor (a one-letter
    token) keeps ``i`` away from the start and end of the text, where decoders
    strip SentencePiece's dummy-prefix space or a word suffix. ``groups``:
    ``(character, ids)`` whose ids decode together to the character (byte
    fallback pieces, which alone are no UTF-8)."""
    singles: dict[bytes, int] = {}
    for i, t in enumerate(tokens):
        if t is not None and len(t) == 1 and i not in excluded:
            singles.setdefault(t, i)
    anchor = next((singles[bytes([c])] for c in b"aeoxAEOX" if bytes([c]) in singles), None)
    if anchor is None:
        return
    regular = [i for i, t in enumerate(tokens) if t and i not in excluded]
    step = max(1, len(regular) // _VERIFY_SAMPLE)
    sample = sorted(set(regular[::step]) | {i for i in extra_ids if i not in excluded and tokens[i]})
    ab = tokens[anchor]
    cases = []
    for i in sample:
        try:
            cases.append((i, (ab + tokens[i] + ab).decode("utf-8")))
        except UnicodeDecodeError:
            continue  # a partial UTF-8 sequence: the decoder would show U+FFFD
    seqs = [[anchor, i, anchor] for i, _ in cases]
    for ch, ids in groups:
        if all(tokens[i] is not None for i in ids):
            cases.append((ids[0] if len(ids) == 1 else ids, (ab + b"".join(tokens[i] for i in ids) + ab)
                          .decode("utf-8", "replace")))
            seqs.append([anchor, *ids, anchor])
    if not cases:
        return
    got = decode_batch(seqs)
    bad = [(i, exp, g) for (i, exp), g in zip(cases, got) if g != exp]
    if bad:
        shown = "; ".join(
            f"token{'s' if isinstance(i, list) else ''} {i}: decodes to {g[1:-1]!r}, "
            f"derived {e[1:-1]!r}" for i, e, g in bad[:5]
        )
        raise VocabularyError(
            f"the token bytes derived from the tokenizer disagree with its own decode for "
            f"{len(bad)} of {len(cases)} sampled tokens ({shown}); pass verify=False to accept them"
        )
