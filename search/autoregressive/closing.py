"""Closing an output before the token budget runs out: when the tokens left
are about to be fewer than a shortest completion needs, the rest of the output
is that completion (then EOS), so a constrained output ends complete instead
of cut off -- a JSON object gets its closing quotes and braces. Before that,
a token after which the completion would no longer fit (one that lengthens it
by two or more) is replaced by the completion's first token
(:meth:`search.autoregressive.decoding.Row.closing_guard`).

A shortest completion is found breadth-first over bytes through the
constraint protocol (``allowed_bytes`` / ``advance_bytes``; states are
hashable, so each is visited once), then spelled with the model's tokenizer
(or byte by byte where that spelling is not one the constraint allows).
"""

from __future__ import annotations

from collections import deque

import numpy as np

#: how many tokens before the end of the budget the completion is first looked for
CLOSING_WINDOW = 64
#: the most constraint states a search for a completion visits
MAX_CLOSING_STATES = 20_000


def shortest_completion(constraint, state, *, max_states: int = MAX_CLOSING_STATES) -> bytes | None:
    """The shortest byte string after which ``constraint`` accepts from
    ``state`` (the first in byte order among the shortest); ``b""`` when it
    accepts already, ``None`` when none is found within ``max_states``
    states (or the constraint cannot walk bytes)."""
    if constraint.is_accepting(state):
        return b""
    try:
        constraint.allowed_bytes(state)
    except NotImplementedError:
        return None
    parent = {state: None}
    queue = deque([state])
    while queue:
        s = queue.popleft()
        for b in np.flatnonzero(constraint.allowed_bytes(s)).tolist():
            nxt = constraint.advance_bytes(s, bytes((b,)))
            if nxt is None or nxt in parent:
                continue
            parent[nxt] = (s, b)
            if constraint.is_accepting(nxt):
                out = []
                while parent[nxt] is not None:
                    nxt, byte = parent[nxt]
                    out.append(byte)
                return bytes(reversed(out))
            if len(parent) > max_states:
                return None
            queue.append(nxt)
    return None


def completion_tokens(lm, constraint, state, completion: bytes) -> list[int] | None:
    """Token ids that spell ``completion`` from ``state`` and that the
    constraint allows: the tokenizer's spelling, else one token per byte
    (``None`` when neither is allowed)."""
    vocab = constraint.vocab
    try:
        ids = lm.encode(completion.decode("utf-8"))
    except UnicodeDecodeError:
        ids = None
    if ids and vocab.decode(ids) == completion and constraint.advance_many(state, ids) is not None:
        return list(ids)
    by_byte = getattr(vocab, "derived")("closing.byte_tokens", lambda: {
        vocab.token_bytes(t): t for t in range(len(vocab))
        if vocab.grammar_token_list[t] and len(vocab.token_bytes(t)) == 1})
    ids = [by_byte.get(bytes((b,))) for b in completion]
    if None in ids or constraint.advance_many(state, ids) is None:
        return None
    return ids
