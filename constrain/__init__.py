"""Trellis constraints: regexes, JSON Schemas and grammars compiled to token-level
automata over a real tokenizer's vocabulary, with precomputed token masks.

Every compiled grammar follows one protocol (see :mod:`constrain.protocol`)::

    state = grammar.initial_state()            # immutable, hashable
    grammar.fill_bitmask(state, bitmask, row)   # int32 (batch, ceil(V/32))
    state = grammar.advance(state, token_id)    # None if not allowed
    grammar.is_accepting(state); grammar.is_terminated(state)
"""

from .errors import (
    ConstraintError,
    GrammarTooComplexError,
    InvalidStateError,
    RegexError,
    RegexSyntaxError,
    RegexTooLargeError,
    UnsupportedRegexError,
    VocabularyError,
)
from .vocabulary import Vocabulary

__all__ = [
    "ConstraintError",
    "GrammarTooComplexError",
    "InvalidStateError",
    "RegexError",
    "RegexSyntaxError",
    "RegexTooLargeError",
    "UnsupportedRegexError",
    "VocabularyError",
    "Vocabulary",
]
