"""The 256-byte vocabulary most constraint tests compile over, and the byte-level
acceptance check they share."""

from __future__ import annotations

from functools import lru_cache

from constrain import Vocabulary


@lru_cache(maxsize=8)
def byte_vocabulary(extra: tuple = ()) -> Vocabulary:
    """Every single byte (ids 0..255), the tokens ``extra``, then EOS ``</s>``."""
    tokens = [bytes([b]) for b in range(256)] + list(extra) + [b"</s>"]
    return Vocabulary.from_tokens(tokens, [len(tokens) - 1], name="bytes")


def accepts(constraint, text) -> bool:
    """Whether ``constraint`` accepts exactly ``text`` (``str`` or ``bytes``), walked
    byte by byte."""
    data = text.encode("utf-8") if isinstance(text, str) else text
    state = constraint.advance_bytes(constraint.initial_state(), data)
    return state is not None and constraint.is_accepting(state)
