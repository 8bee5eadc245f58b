"""The exceptions of :mod:`constrain`.

Every error derives from :class:`ConstraintError`, itself a :class:`ValueError`, so
callers can catch one type. Each error names the place in the user's input it is
about: the offset in a regex, the line and column of a grammar, the JSON pointer of
a schema.
"""

from __future__ import annotations

import operator
from typing import Callable


class ConstraintError(ValueError):
    """Base class of every error raised by :mod:`constrain`."""


class VocabularyError(ConstraintError):
    """A vocabulary could not be built or does not fit the model it is used with."""


class RegexError(ConstraintError):
    """A regular expression was rejected.

    Attributes:
        pattern: the regex as given.
        offset: the 0-based character offset in ``pattern`` the problem is at, or
            ``None`` when it concerns the pattern as a whole.
    """

    def __init__(self, message: str, pattern: str, offset: int | None = None):
        self.pattern = pattern
        self.offset = offset
        self.msg = message
        if offset is not None:
            caret = _caret(pattern, offset)
            message = f"{message} at offset {offset}\n{caret}"
        super().__init__(message)


class RegexSyntaxError(RegexError):
    """The pattern is not valid Python ``re`` syntax."""


class UnsupportedRegexError(RegexError):
    """The pattern uses a construct no finite automaton can recognise
    (backreferences, conditionals), or one of the few nestings of lookaround and
    atomic groups not supported (see docs/regex.md)."""


class GrammarTooComplexError(ConstraintError):
    """Compiling would exceed a size or time budget (automaton states,
    counted-repetition size, compile time). The message says which limit and how to
    raise it."""


def too_complex_at(message: str, line: int | None, column: int | None) -> GrammarTooComplexError:
    """A :class:`GrammarTooComplexError` naming a place in grammar text
    (``line``, ``column`` and ``msg`` attributes, as a :class:`GrammarError`
    has them)."""
    e = GrammarTooComplexError(f"{message} (line {line}, column {column})" if line else message)
    e.line, e.column, e.msg = line, column, message
    return e


class SchemaTooComplexError(GrammarTooComplexError):
    """Translating a JSON Schema would exceed a budget at one of its parts: the
    time budget, ``max_string_length`` / ``max_array_length`` below a
    ``minLength`` / ``minItems``, the cap on alternatives after distributing
    ``anyOf``/``oneOf`` over ``allOf``, or on the key sets of
    ``patternProperties``. ``pointer`` is the JSON pointer of that part in the
    user's schema (``""``: the root, or a part with no place of its own)."""

    def __init__(self, message: str, pointer: str = ""):
        self.pointer = pointer
        self.msg = message
        super().__init__(f"{message} at {pointer or '/'} (JSON pointer)")


class RegexTooLargeError(GrammarTooComplexError, RegexError):
    """A regex exceeds a documented size limit (repetition bound, automaton size)."""

    def __init__(self, message: str, pattern: str, offset: int | None = None):
        RegexError.__init__(self, message, pattern, offset)


class InvalidLimitError(ConstraintError):
    """A budget (a field of :class:`constrain.Limits`, or a cache size) is not a
    positive number: zero, negative, NaN, a bool or not a number at all.

    Attributes:
        field: the name of the budget.
    """

    def __init__(self, message: str, field: str):
        self.field = field
        self.msg = message
        super().__init__(message)


class InvalidStateError(ConstraintError):
    """A state was passed to a grammar it does not belong to, or a terminated state
    was advanced."""


def _caret(text: str, offset: int, width: int = 60) -> str:
    """Two lines: a window of ``text`` around ``offset`` and a caret under it."""
    start = max(0, offset - width // 2)
    window = text[start:start + width]
    shown = window.replace("\n", " ").replace("\t", " ")
    return f"  {shown}\n  {' ' * (offset - start)}^"


class GrammarError(ConstraintError):
    """A Lark grammar was rejected: bad syntax, an undefined symbol, a terminal that
    matches the empty string, a start symbol that derives nothing.

    Attributes:
        line, column: 1-based position in the grammar text, or ``None`` when the
            problem concerns the grammar as a whole.
    """

    def __init__(self, message: str, line: int | None = None, column: int | None = None):
        self.line = line
        self.column = column
        self.msg = message
        if line is not None:
            message = f"{message} (line {line}, column {column})"
        super().__init__(message)


class GrammarSyntaxError(GrammarError):
    """A grammar's text is not valid syntax of its format (Lark or GBNF):
    ``line`` and ``column`` say where reading it stopped."""


class UnsupportedSchemaError(ConstraintError):
    """A JSON Schema uses a keyword (or a value of one) that cannot be enforced
    exactly. ``pointer`` is the JSON pointer of the offending keyword; pass
    ``strict=False`` to ignore such keywords with a warning instead.

    Attributes:
        pointer: JSON pointer (RFC 6901) of the keyword, ``""`` for the root.
    """

    def __init__(self, message: str, pointer: str = ""):
        self.pointer = pointer
        self.msg = message
        super().__init__(f"{message} at {pointer or '/'} (JSON pointer)")


class SchemaError(ConstraintError):
    """A JSON Schema is malformed (not a schema, a dangling ``$ref``...). ``pointer``
    is the JSON pointer of the problem."""

    def __init__(self, message: str, pointer: str = ""):
        self.pointer = pointer
        self.msg = message
        super().__init__(f"{message} at {pointer or '/'} (JSON pointer)")


class EmptySchemaError(UnsupportedSchemaError):
    """A JSON Schema admits no JSON value at all (``false``, ``not: {}``, an
    ``allOf`` of incompatible schemas...): no output could satisfy it, so no
    constraint is built. ``pointer`` is ``""``."""


class BitmaskError(ConstraintError):
    """A bitmask passed to ``fill_bitmask`` (or a row of it) cannot take a mask:
    not a numpy array or torch tensor, not int32, not 2-D, narrower than
    ``ceil(V/32)`` words, not C-contiguous, or the row is not an index of it.
    (Nothing was written.)"""


class CacheFileError(ConstraintError):
    """A saved constraint (``constrain.load``, a ``Compiler(cache_dir=...)``
    entry, a pickle) cannot be used: nothing of it is trusted.

    Attributes:
        reason: ``"missing"`` (no such file, or unreadable), ``"truncated"``,
            ``"corrupt"`` (not a Trellis constraint file, a checksum or a table
            that does not match), ``"format"`` (another file format version),
            ``"version"`` (written by another Trellis), ``"vocabulary"`` (for
            another vocabulary) or ``"key"`` (a cache entry of another key).
    """

    def __init__(self, message: str, reason: str):
        self.reason = reason
        self.msg = message
        super().__init__(message)


class UnenforcedFormatWarning(UserWarning):
    """A JSON Schema ``format`` that ``formats="assert"`` cannot enforce: not
    one of the formats Trellis enforces (``uri-template``, ``regex``, ...),
    beside a ``pattern``, a length bound or another format on the same string,
    or on a number (OpenAPI's ``int32``, ``double``...: none is enforced). (On
    ``enum``/``const`` strings the enforced formats leave out the values they
    reject; an unenforced one is named here.)
    It is left as an annotation, as JSON Schema validators treat formats by
    default, so the generated strings need not satisfy it. The message names
    each such format with its JSON pointer; one warning per compile. Validate
    those strings after generation where they matter, or pass
    ``formats="annotation"`` to say that no format is meant to assert."""


class IncompleteParseWarning(UserWarning):
    """A grammar's parser kept only part of a chart column's items (the
    ``max_items`` cap: a very ambiguous grammar). Masks stay sound — every
    token allowed is allowed by the grammar — but from there on some valid
    continuations may be refused. Issued once per parser;
    ``GrammarConstraint.parser.truncated_columns`` counts the columns cut."""


def as_index(value, error: Callable[[], Exception]) -> int:
    """``value`` as an ``int`` when it is an integer (numpy's and torch's too),
    not a bool; else raises ``error()``. (``int()`` takes ``1.5`` for 1 and
    ``True`` for 1; ``operator.index`` refuses numpy's bools already.)"""
    if value is True or value is False:
        raise error()
    try:
        return operator.index(value)
    except TypeError:
        raise error() from None

