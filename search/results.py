"""The base type of what the search drivers return."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["SearchResult"]


@dataclass(frozen=True)
class SearchResult:
    """What every driver's result is: :class:`search.GenerationResult`,
    :class:`search.Hypothesis` (beam drivers), :class:`search.SMCResult`,
    :class:`search.DiffusionResult` and :class:`search.ReasoningResult`.

    Each has

    * ``token_ids``: the generated ids of the output it chose (the prompt and the
      final EOS excluded);
    * ``text``: their text, or ``None`` where the driver's model has no decoder
      (a :class:`search.CallableLM`); a ``bytes`` string for
      :class:`search.DiffusionResult`, whose vocabularies need not spell UTF-8.

    Results are frozen: a driver's result is a record of one run.
    """
