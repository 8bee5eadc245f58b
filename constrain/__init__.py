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
    GrammarError,
    GrammarTooComplexError,
    InvalidStateError,
    RegexError,
    RegexSyntaxError,
    RegexTooLargeError,
    SchemaError,
    UnsupportedRegexError,
    UnsupportedSchemaError,
    VocabularyError,
)
from .bitmask import allocate_bitmask, apply_bitmask, bitmask_to_ids
from .matcher import Matcher
from .protocol import Constraint
from .regex import DFAConstraint, EmptyLanguageError, compile_regex
from .grammar import GrammarConstraint, compile_grammar
from .json_schema import compile_json_schema, json_schema_to_lark, order_instance
from .sql import SqlSchemaError, load_schema, sql_grammar
from .resources import grammar_path
from .vocabulary import Vocabulary
from .warmup import warm_up

__all__ = [
    "clear_caches",
    "allocate_bitmask",
    "apply_bitmask",
    "bitmask_to_ids",
    "compile_regex",
    "compile_grammar",
    "compile_json_schema",
    "json_schema_to_lark",
    "order_instance",
    "sql_grammar",
    "SqlSchemaError",
    "load_schema",
    "GrammarConstraint",
    "grammar_path",
    "Constraint",
    "DFAConstraint",
    "EmptyLanguageError",
    "Matcher",
    "ConstraintError",
    "GrammarError",
    "GrammarTooComplexError",
    "InvalidStateError",
    "RegexError",
    "RegexSyntaxError",
    "RegexTooLargeError",
    "SchemaError",
    "UnsupportedRegexError",
    "UnsupportedSchemaError",
    "VocabularyError",
    "Vocabulary",
    "warm_up",
]


def clear_caches() -> None:
    """Drop every process-wide cache that compiled grammars share: terminal
    automata, lexer products and ``multipleOf`` tables (compiled grammars keep
    what they use). Benchmarks call it to time each compile cold; a server may
    call it to release memory."""
    from . import json_schema, lexer, number_ranges

    lexer.clear_caches()
    number_ranges.clear_caches()
    json_schema._EXCLUSION_IDS.clear()  # ids are never reused: forgetting is safe


def __getattr__(name):
    # constrain.hf needs torch and transformers: imported on first use only
    if name == "hf":
        import importlib

        return importlib.import_module(".hf", __name__)
    raise AttributeError(f"module 'constrain' has no attribute {name!r}")
