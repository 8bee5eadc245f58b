"""Fill-in-the-middle for an autoregressive model: which next tokens keep
``prefix + token + middle + suffix`` completable."""

from __future__ import annotations

from typing import Sequence

from constrain.analysis.emptiness import can_complete
from constrain.analysis.partial_output import Hole
from constrain.analysis.regular import can_complete_regex
from constrain.errors import as_index
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
        max_middle_tokens: the longest middle, the candidate included (0: none,
            so only EOS can be allowed).
        budgets: ``max_states`` / ``max_work``, passed to :func:`can_complete`.

    Raises:
        constrain.GrammarError: the grammar has token budgets
            (``rule[max_tokens=N]``), which this check cannot see.
    """
    regular = isinstance(grammar, DFAConstraint)
    if not regular:
        from constrain.analysis.prepared import refuse_budgets

        refuse_budgets(grammar, "fim_allowed")
    n = len(vocab)
    if candidates is None:
        # EOS too: it is allowed when prefix + suffix is complete
        candidates = [i for i in range(n) if vocab.grammar_token_list[i]
                      or i in vocab.eos_token_set]
    if max_middle_tokens is not None:
        max_middle_tokens = as_index(max_middle_tokens, lambda: ValueError(
            f"max_middle_tokens must be a count, not {max_middle_tokens!r}"))
        if max_middle_tokens < 0:
            raise ValueError(f"max_middle_tokens must be >= 0, got {max_middle_tokens}")
    # (0 left no room for the candidate itself: only EOS fits)
    rest = None if not max_middle_tokens else max_middle_tokens - 1
    middle = Hole(0, rest)
    out = []
    for t in candidates:
        # (an id past the vocabulary was an IndexError, -1 read it from the end,
        # 1.9 was token 1)
        t = as_index(t, lambda: ValueError(f"candidate {t!r} is not a token id"))
        if not 0 <= t < n:
            raise ValueError(f"candidate {t} is not one of the vocabulary's 0..{n - 1}")
        if t in vocab.eos_token_set:
            segs = [list(prefix), *suffix]
        elif not vocab.grammar_token_list[t] or max_middle_tokens == 0:
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
