"""The options of a JSON Schema translation, validated once in a frozen
:class:`Options`, and the size limits of the grammar it builds."""

from __future__ import annotations

from dataclasses import dataclass, field

from constrain.automata.deadline import Deadline
from constrain.cache import check_budget

#: default cap on consecutive whitespace characters in "flexible" style
DEFAULT_MAX_WHITESPACE = 4
#: ``maxLength`` above this is lowered to it (a counted repetition that large
#: would not fit one terminal automaton); unbounded strings stay unbounded
MAX_STRING_LENGTH = 2048
#: ``maxItems`` above this is lowered to it (one rule per possible index)
MAX_ARRAY_LENGTH = 1024
#: limits of the produced grammar
MAX_RULES = 50_000
MAX_GRAMMAR_CHARS = 8_000_000
MAX_CONJUNCTIONS = 256


@dataclass(frozen=True)
class Options:
    """How a schema is translated (see :func:`json_schema_to_lark` for each).

    Raises:
        ValueError: ``whitespace`` is neither ``"compact"`` nor ``"flexible"``,
            ``formats`` neither ``"assert"`` nor ``"annotation"``, ``strict`` not
            a bool; :class:`~constrain.errors.InvalidLimitError` (a
            ``ValueError``): ``max_whitespace``, ``max_string_length`` or
            ``max_array_length`` not a positive integer.
    """

    whitespace: str = "compact"
    max_whitespace: int = DEFAULT_MAX_WHITESPACE
    strict: bool = True
    max_string_length: int = MAX_STRING_LENGTH
    max_array_length: int = MAX_ARRAY_LENGTH
    #: seconds the translation may take (``None``: unbounded)
    time_budget: float | None = 30.0
    #: ``"assert"``: a known ``format`` (date-time, email, uuid, ...) is enforced,
    #: as structured-output engines do; ``"annotation"``: formats assert nothing,
    #: draft 2020-12's default for validators
    formats: str = "assert"
    #: other schema documents ``$ref`` may point into, by URI (a mapping, as
    #: ``jsonschema``'s registry holds them); nothing is ever fetched
    resources: object = field(default=None, compare=False, hash=False)

    def __post_init__(self):
        if self.formats not in ("assert", "annotation"):
            raise ValueError(f"formats must be 'assert' or 'annotation', not {self.formats!r}")
        if self.whitespace not in ("compact", "flexible"):
            raise ValueError(f"whitespace must be 'compact' or 'flexible', not {self.whitespace!r}")
        if not isinstance(self.strict, bool):
            # strict="no" read as strict, 0 as lenient
            raise ValueError(f"strict must be True or False, not {self.strict!r}")
        # positive integers (InvalidLimitError naming the field): -1 was read
        # as a cap ("minLength 0 exceeds the supported -1"), 2.5 floored, True as 1
        for name in ("max_whitespace", "max_string_length", "max_array_length"):
            check_budget(name, getattr(self, name))

    @property
    def ws(self) -> str:
        """The regex of the whitespace allowed around punctuation ("" when compact)."""
        if self.whitespace == "compact":
            return ""
        return r"[ \t\n\r]{0,%d}" % self.max_whitespace

    def deadline(self) -> Deadline | None:
        """The deadline of a translation started now (kernel loading does not count)."""
        return None if self.time_budget is None else Deadline.after(self.time_budget)
