"""Fill-in-the-middle for an autoregressive model: which next tokens keep
``prefix + token + middle + suffix`` completable."""

from __future__ import annotations

from typing import Sequence

from constrain.analysis.emptiness import can_complete
from constrain.analysis.partial_output import Hole
from constrain.analysis.regular import can_complete_regex
from constrain.regular.regex import DFAConstraint


def fim_allowed(grammar, prefix: Sequence[int], suffix: Sequence, *, vocab,
                candidates: Sequence[int] | None = None,
                max_middle_tokens: int | None = None, **budgets) -> list[int]:
    """The candidate next tokens after ``prefix`` (token ids) for which ``prefix +
    token + middle + suffix`` can still be a string of the language, for some
    middle of at most ``max_middle_tokens - 1`` further tokens (unbounded by
    default). EOS ids are allowed when ``prefix + suffix`` is itself complete.

    Guarantee: exact (one :func:`can_complete` per candidate, so cost grows with
    the number of candidates: pass the model's top few). Reference: Mündler et al.
    2025, applied left to right; the same check as the diffusion driver.

    Args:
        grammar: as for :func:`can_complete` (Lark text, a ``GrammarIR``, a
            ``GrammarConstraint``) or a :class:`constrain.DFAConstraint` (then
            token-level reachability, :func:`can_complete_regex`).
        prefix: the token ids generated so far.
        suffix: segments after the middle (``str``, ``bytes``, token-id lists).
        vocab: the vocabulary; candidates default to all its grammar tokens.
        candidates: the token ids to check.
        max_middle_tokens: the longest middle, the candidate included.
        budgets: ``max_states`` / ``max_work``, passed to :func:`can_complete`.

    Raises:
        constrain.GrammarError: the grammar has token budgets
            (``rule[max_tokens=N]``), which this check cannot see.
    """
    regular = isinstance(grammar, DFAConstraint)
    if not regular:
        from constrain.analysis.prepared import refuse_budgets

        refuse_budgets(grammar, "fim_allowed")
    if candidates is None:
        candidates = [i for i in range(len(vocab)) if vocab.grammar_token_list[i]]
    rest = None if max_middle_tokens is None else max(0, max_middle_tokens - 1)
    middle = Hole(0, rest)
    out = []
    for t in candidates:
        t = int(t)
        if t in vocab.eos_token_set:
            segs = [list(prefix), *suffix]
        elif not vocab.grammar_token_list[t]:
            continue
        else:
            segs = [list(prefix) + [t], middle, *suffix]
        if regular:
            ok = can_complete_regex(grammar, segs)
        else:
            ok = can_complete(grammar, segs, vocab=vocab, **budgets)
        if ok:
            out.append(t)
    return out


__all__ = ["fim_allowed"]
