"""Completability for regular constraints: reachability over the token transition
graph of a :class:`constrain.DFAConstraint`, through its public protocol."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from constrain.analysis.partial_output import Hole, bad_segment, text_bytes
from constrain.automata.byte_dfa import DEAD


def can_complete_regex(grammar, segments: Sequence, state: int | None = None) -> bool:
    """Whether the token-level partial output ``segments`` can be completed from
    ``state`` to a string that ``grammar`` (a :class:`constrain.DFAConstraint`)
    accepts.

    Guarantee: exact at the token level: fixed runs (token-id lists) must be
    allowed token by token (``grammar.advance``), a ``Hole(k, m)`` is any ``k`` to
    ``m`` grammar tokens allowed in sequence (``grammar.token_transitions``),
    ``str``/``bytes`` segments are walked byte by byte through the constraint's
    byte DFA; the answer is whether some filling ends in an accepting state.
    Reachability over the token transition graph (the DFA view of Mündler et al.
    2025's check; DINGO, Suresh et al. 2025, uses the same graph).
    """
    start = grammar.initial_state() if state is None else int(state)
    if grammar.is_terminated(start):
        # after EOS only the empty continuation remains
        return all((isinstance(s, Hole) and s.min_tokens == 0)
                   or (not isinstance(s, Hole) and len(s) == 0) for s in segments)
    cur = {start}
    dfa = grammar.dfa

    def step(states):
        nxt = set()
        for q in states:
            _, nexts = grammar.token_transitions(q)
            nxt.update(np.unique(nexts).tolist())
        return nxt

    for k, seg in enumerate(segments):
        if not isinstance(seg, (str, bytes, bytearray, Hole, list, tuple, np.ndarray)):
            raise bad_segment(k, seg)
        if not cur:
            return False
        if isinstance(seg, (str, bytes, bytearray)):
            data = text_bytes(k, seg) if isinstance(seg, str) else bytes(seg)
            cur = {q for q in (dfa.walk(data, q) for q in cur) if q != DEAD}
        elif isinstance(seg, Hole):
            for _ in range(seg.min_tokens):
                cur = step(cur)
            total = set(cur)
            layer = set(cur)
            if seg.max_tokens is None:
                while layer:
                    layer = step(layer) - total
                    total |= layer
            else:
                for _ in range(seg.max_tokens - seg.min_tokens):
                    if not layer:
                        break
                    layer = step(layer)
                    total |= layer
            cur = total
        else:
            # a run through EOS is dropped: the segments are text of the language, EOS is not
            cur = {q for q in (grammar.advance_many(q, seg) for q in cur)
                   if q is not None and not grammar.is_terminated(q)}
    return any(grammar.is_accepting(q) for q in cur)


__all__ = ["can_complete_regex"]
