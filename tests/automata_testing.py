"""Test helpers for byte automata."""

from __future__ import annotations


def same_language(a, b) -> bool:
    """Whether two trimmed byte DFAs (``constrain.automata.byte_dfa.ByteDFA``: 0 dead,
    1 start) accept the same strings: a walk of their product from the start
    states, comparing acceptance and which bytes lead to a live state."""
    seen, todo = {(1, 1)}, [(1, 1)]
    while todo:
        x, y = todo.pop()
        if bool(a.accepting[x]) != bool(b.accepting[y]):
            return False
        for c in range(256):
            nx, ny = int(a.transitions[x, c]), int(b.transitions[y, c])
            if (nx == 0) != (ny == 0):
                return False
            if nx and (nx, ny) not in seen:
                seen.add((nx, ny))
                todo.append((nx, ny))
    return True
