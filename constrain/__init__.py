"""Trellis constraints: regexes, JSON Schemas and grammars compiled to token-level
automata over a real tokenizer's vocabulary, with precomputed token masks.

Every compiled grammar follows one protocol (see :mod:`constrain.protocol`)::

    state = grammar.initial_state()            # immutable, hashable
    grammar.fill_bitmask(state, bitmask, row)   # int32 (batch, ceil(V/32))
    state = grammar.advance(state, token_id)    # None if not allowed
    grammar.is_accepting(state); grammar.is_terminated(state)
"""

from . import kernel_loading  # noqa: F401  (before any kernel loads)
from .errors import (
    BitmaskError,
    CacheFileError,
    ConstraintError,
    EmptySchemaError,
    GrammarError,
    GrammarSyntaxError,
    GrammarTooComplexError,
    IncompleteParseWarning,
    UnenforcedFormatWarning,
    InvalidLimitError,
    InvalidStateError,
    RegexError,
    RegexSyntaxError,
    RegexTooLargeError,
    SchemaError,
    SchemaTooComplexError,
    UnsupportedRegexError,
    UnsupportedSchemaError,
    VocabularyError,
)
from .runtime.bitmask import allocate_bitmask, apply_bitmask, bitmask_to_ids
from .runtime.matcher import Matcher
from .runtime.batch import BatchMatcher
from .runtime.reasoning import ReasoningConstraint, with_reasoning
from .protocol import Constraint
from .regular.regex import DFAConstraint, EmptyLanguageError, compile_regex
from .cfg.grammar import GrammarConstraint, compile_grammar
from .compiler import Compiler, compile_json_schema, default_compiler
from .frontends.json_schema import json_schema_to_lark, order_instance
from .frontends.python_types import OutputType, compile_type, parse_output
from .frontends.response_format import compile_choice, from_response_format
from .frontends.structural_tag import (StructuralTagError, UnsupportedStructuralTagError,
                                       compile_structural_tag)
from .limits import Limits
from .frontends.sql import SqlSchemaError, load_schema, sql_grammar
from .resources import grammar_path
from .vocab.vocabulary import Vocabulary
from .warmup import warm_up
from .persist import load
from .cache import registry

__all__ = [
    "Compiler",
    "Limits",
    "default_compiler",
    "clear_caches",
    "allocate_bitmask",
    "apply_bitmask",
    "bitmask_to_ids",
    "compile_regex",
    "compile_grammar",
    "compile_json_schema",
    "compile_type",
    "compile_choice",
    "from_response_format",
    "compile_structural_tag",
    "StructuralTagError",
    "UnsupportedStructuralTagError",
    "parse_output",
    "OutputType",
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
    "BatchMatcher",
    "ReasoningConstraint",
    "with_reasoning",
    "BitmaskError",
    "CacheFileError",
    "load",
    "ConstraintError",
    "EmptySchemaError",
    "GrammarError",
    "GrammarSyntaxError",
    "GrammarTooComplexError",
    "IncompleteParseWarning",
    "UnenforcedFormatWarning",
    "InvalidLimitError",
    "InvalidStateError",
    "RegexError",
    "RegexSyntaxError",
    "RegexTooLargeError",
    "SchemaError",
    "SchemaTooComplexError",
    "UnsupportedRegexError",
    "UnsupportedSchemaError",
    "VocabularyError",
    "Vocabulary",
    "warm_up",
]


def clear_caches() -> None:
    """Empty every cache that outlives a compile: those of every live
    :class:`Compiler` (the default compiler of each vocabulary included:
    terminal automata, terminal ids, lexer walks, JSON Schema exclusion ids and
    ``multipleOf`` tables) and the process-wide ones of
    :data:`constrain.cache.registry` (character classes, regex literals, bitmask
    row views, the JSON Schema front end's encodings, and the exclusion ids and
    tables of translations outside any compile), among them those other
    packages register there (``search``'s loaded default models and
    tokenizers: one still in use is not loaded again, ``load_default_model``
    hands out the same object). Compiled constraints keep working: they hold
    what they use. A vocabulary keeps its own tables (its token trie, with the
    trie's summaries and loop exits: ``TokenTrie.loop_exits``, bounded), as
    it keeps its tokens. Benchmarks call it to time each compile cold; a server may
    call it to release memory."""
    registry.clear()


# the kernels a first compile loads, read from numba's cache while the caller
# reads its tokenizer (constrain.kernel_loading; last, once every module is in)
kernel_loading.PRELOADER.start()


def __getattr__(name):
    # constrain.engines.hf needs torch and transformers: imported on first use only
    if name == "hf":
        import importlib

        return importlib.import_module(".engines.hf", __name__)
    raise AttributeError(f"module 'constrain' has no attribute {name!r}")
