"""``Limits``: every budget a compile takes, in one frozen value.

A :class:`~constrain.Compiler` holds one; each ``compile_*`` call may override
single fields (``compiler.compile_regex(p, max_states=10_000)``), and the
module-level ``constrain.compile_*`` functions pass their keyword arguments as
such overrides. Which compile reads which field:

=====================  ==========  ==============================================
field                  read by     bounds
=====================  ==========  ==============================================
``max_repeat``         all         a counted repetition ``{m,n}``'s bound
``max_positions``      all         a regex's size, repetitions expanded (a
                                   grammar terminal's)
``max_states``         all         one automaton (a regex's character DFA, a
                                   grammar terminal's); a grammar's lexer
                                   automata together get eight times as many
``time_budget``        all         seconds of CPU time one compile may take (its thread's)
``max_mask_bytes``     regexes     precomputed token masks (past it: an LRU)
``max_contexts``       grammars    distinct parser chart columns
``max_width``          grammars    ways one token may split between terminals
``mask_cache_bytes``   grammars    cached masks of one grammar (and as many
                                   remembered ``advance`` results)
``max_items``          grammars    parse items one output position keeps (past
                                   it a subset: sound masks, see
                                   :func:`constrain.compile_grammar`)
=====================  ==========  ==============================================

Every budget is also checked where a constructor takes it without a
:class:`Limits` (``DFAConstraint``, ``GrammarConstraint``, ``TokenAutomaton``,
``EarleyRecognizer``, ``Matcher``, ``BatchMatcher``): the same
:class:`~constrain.errors.InvalidLimitError` naming the field.
"""

from __future__ import annotations

import dataclasses

from constrain.automata.char_dfa import DEFAULT_MAX_STATES
from constrain.automata.regex_syntax import MAX_POSITIONS, MAX_REPEAT
from constrain.cache import check_budget
from constrain.cfg.earley import DEFAULT_MAX_ITEMS
from constrain.regular.token_automaton import DEFAULT_MAX_MASK_BYTES

#: the fields that hold seconds (any positive real, ``inf`` for none); the
#: others are counts of states, positions or bytes (positive integers)
_SECONDS = frozenset({"time_budget"})


@dataclasses.dataclass(frozen=True)
class Limits:
    """The budgets of a compile (see the module docstring for which compile reads
    which). Every field is positive: an integer count, except ``time_budget``
    (seconds, ``math.inf`` for none). Invalid values raise
    :class:`~constrain.errors.InvalidLimitError` naming the field."""

    max_repeat: int = MAX_REPEAT
    max_positions: int = MAX_POSITIONS
    max_states: int = DEFAULT_MAX_STATES
    time_budget: float = 30.0
    max_mask_bytes: int = DEFAULT_MAX_MASK_BYTES
    max_contexts: int = 2_000_000
    max_width: int = 256
    mask_cache_bytes: int = 256 * 1024 * 1024
    max_items: int = DEFAULT_MAX_ITEMS

    def __post_init__(self):
        for f in dataclasses.fields(self):
            # normalised (numpy integers to int): the kernels type their
            # arguments, and a second type would compile a second specialisation
            object.__setattr__(self, f.name, check_budget(f.name, getattr(self, f.name),
                                                          seconds=f.name in _SECONDS))

    def replace(self, **overrides) -> "Limits":
        """These limits with the fields in ``overrides`` changed; ``self`` when
        none changes (the module-level compile functions pass every budget on
        each call). An unknown field raises ``TypeError``."""
        for name, value in overrides.items():
            if name not in _FIELDS:
                break
            current = getattr(self, name)
            # the type too: True == 1, and a bool is no budget
            if value.__class__ is not current.__class__ or value != current:
                break
        else:
            return self
        unknown = set(overrides) - _FIELDS
        if unknown:
            raise TypeError(f"Limits has no field {sorted(unknown)[0]!r} "
                            f"(the fields: {', '.join(sorted(_FIELDS))})")
        return dataclasses.replace(self, **overrides)


_FIELDS = frozenset(f.name for f in dataclasses.fields(Limits))

__all__ = ["Limits"]
