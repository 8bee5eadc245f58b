"""``Matcher``: the stateful wrapper over an immutable constraint, for serving
engines that keep one mutable object per request."""

from __future__ import annotations

from constrain.errors import ConstraintError
from constrain.protocol import Constraint


class Matcher:
    """Tracks one generation's state through a constraint.

    Keeps the history of states, so ``rollback(n)`` undoes the last ``n`` accepted
    tokens (speculative decoding, jump-forward) in O(n).

    Args:
        grammar: any compiled constraint.
        max_rollback: how many past states to keep (``None``: all).
    """

    def __init__(self, grammar: Constraint, max_rollback: int | None = None):
        self.grammar = grammar
        self.max_rollback = max_rollback
        self._history = [grammar.initial_state()]

    @property
    def state(self):
        """The current (immutable) state."""
        return self._history[-1]

    def accept_token(self, token_id: int) -> bool:
        """Advance by ``token_id``; returns ``False`` (and changes nothing) if the
        token is not allowed."""
        nxt = self.grammar.advance(self._history[-1], int(token_id))
        if nxt is None:
            return False
        self._history.append(nxt)
        if self.max_rollback is not None and len(self._history) > self.max_rollback + 1:
            del self._history[0]
        return True

    def accept_tokens(self, token_ids) -> bool:
        """Accept several tokens; all or nothing."""
        n = 0
        for t in token_ids:
            if not self.accept_token(t):
                self.rollback(n)
                return False
            n += 1
        return True

    def fill_next_token_bitmask(self, bitmask, index: int = 0) -> None:
        """Write the allowed next tokens into row ``index`` of ``bitmask``."""
        self.grammar.fill_bitmask(self._history[-1], bitmask, index)

    def allowed_token_ids(self):
        """The allowed next token ids."""
        return self.grammar.allowed_token_ids(self._history[-1])

    def rollback(self, n: int = 1) -> None:
        """Undo the last ``n`` accepted tokens."""
        if n < 0 or n > len(self._history) - 1:
            raise ConstraintError(
                f"cannot roll back {n} tokens: only {len(self._history) - 1} can be undone")
        if n:
            del self._history[-n:]

    def is_terminated(self) -> bool:
        """Whether EOS has been accepted."""
        return self.grammar.is_terminated(self._history[-1])

    def is_accepting(self) -> bool:
        """Whether the output so far is complete (EOS would be accepted)."""
        return self.grammar.is_accepting(self._history[-1])

    def reset(self) -> None:
        """Back to the initial state."""
        self._history = [self.grammar.initial_state()]
