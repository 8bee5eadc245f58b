"""Completability for regular constraints: reachability over the token transition
graph of a :class:`constrain.DFAConstraint`, through its public protocol."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from constrain.analysis.partial_output import Hole, bad_segment, text_bytes
from constrain.automata.byte_dfa import DEAD
from constrain.errors import GrammarTooComplexError


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
    from constrain.regular.regex import DFAConstraint

    if not isinstance(grammar, DFAConstraint):
        raise TypeError(f"can_complete_regex takes a DFAConstraint (a compiled regex), not "
                        f"{type(grammar).__name__}: use can_complete for grammars")
    # (int() took 1.7 and '1' for state 1)
    start = grammar.initial_state() if state is None else grammar.check_state(state)
    for k, seg in enumerate(segments):
        if not isinstance(seg, (str, bytes, bytearray, Hole, list, tuple, np.ndarray)):
            raise bad_segment(k, seg)
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
        if not cur:
            return False
        if isinstance(seg, (str, bytes, bytearray)):
            data = text_bytes(k, seg) if isinstance(seg, str) else bytes(seg)
            cur = {q for q in (dfa.walk(data, q) for q in cur) if q != DEAD}
        elif isinstance(seg, Hole):
            cur = _steps(step, cur, seg.min_tokens)
            # then up to max - min more: breadth first from cur, each state once
            # (a state within m steps is one whose distance is at most m), so at
            # most one layer per state (Hole(0, 10**9) stepped 10**9 times)
            total = set(cur)
            layer = set(cur)
            left = None if seg.max_tokens is None else seg.max_tokens - seg.min_tokens
            while layer and (left is None or left > 0):
                layer = step(layer) - total
                total |= layer
                if left is not None:
                    left -= 1
            cur = total
        else:
            # a run through EOS is dropped: the segments are text of the language, EOS is not
            cur = {q for q in (grammar.advance_many(q, seg) for q in cur)
                   if q is not None and not grammar.is_terminated(q)}
    return any(grammar.is_accepting(q) for q in cur)


#: the most steps :func:`_steps` walks looking for its sets to repeat (their
#: period can be the product of the DFA's cycle lengths: time and memory grew
#: with a hole's minimum)
MAX_HOLE_STEPS = 10_000


def _steps(step, cur: set, n: int) -> set:
    """``step`` applied ``n`` times to ``cur``: the sets repeat with a period
    (``step`` is a function of the set), so once one comes back the rest of
    the ``n`` steps is that many steps of the cycle.

    Raises:
        GrammarTooComplexError: no set came back within :data:`MAX_HOLE_STEPS`
            steps of a longer hole."""
    seen: dict[frozenset, int] = {}
    i = 0
    while i < n:
        if i == MAX_HOLE_STEPS:
            raise GrammarTooComplexError(
                f"a hole of at least {n:,} tokens: the states it reaches do not repeat within "
                f"{MAX_HOLE_STEPS:,} steps")
        key = frozenset(cur)
        if key in seen:
            period = i - seen[key]
            for _ in range((n - i) % period):
                cur = step(cur)
            return cur
        seen[key] = i
        cur = step(cur)
        i += 1
        if not cur:
            return cur
    return cur


__all__ = ["can_complete_regex"]
