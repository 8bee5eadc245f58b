"""References to schema nodes, as the passes hand them to one another.

A reference is a :data:`Pointer` into the schema document, or one of the frozen
node types below for a schema the translator makes up (a type restriction, a
forced member, "an object missing one of these names", the ``false`` schema).
Every reference is hashable: conjunctions are tuples of references, and rules
are memoised by them. :meth:`Document.node <constrain.frontends.json_schema.document.Document.node>`
gives the schema a reference stands for.
"""

from __future__ import annotations

from dataclasses import dataclass

#: A JSON pointer into the document (``""`` is the root). A plain ``str``, not a
#: wrapper: pointers are the hot keys of every cache here and are extended by
#: string concatenation (``f"{ptr}/items"``) on every step of the walk.
Pointer = str


@dataclass(frozen=True, slots=True)
class BooleanSchema:
    """The schema ``true`` (every value) or ``false`` (none) where no pointer
    spells it (e.g. ``unevaluatedItems: false`` standing for the items after the
    prefix)."""

    value: bool

    @property
    def schema(self) -> bool:
        """The schema itself."""
        return self.value


FALSE = BooleanSchema(False)


@dataclass(frozen=True, slots=True)
class Synthetic:
    """A one-keyword schema made up by the translator: ``{keyword: value}``, e.g.
    ``{"type": "object"}``, ``{"required": [name]}`` (``value`` a string, or a
    tuple standing for a JSON array)."""

    keyword: str
    value: str | tuple

    @property
    def schema(self) -> dict:
        """The schema as a JSON value."""
        v = self.value
        return {self.keyword: list(v) if isinstance(v, tuple) else v}


@dataclass(frozen=True, slots=True)
class NotAll:
    """The presence constraint "an object missing at least one of ``names``"
    (``not: {required: names}``, and the exclusive branches of a ``oneOf``). As a
    schema node it asserts nothing; the object emitter enforces it."""

    names: tuple[str, ...]

    @classmethod
    def of(cls, names) -> NotAll:
        """The constraint for a collection of names (sorted: equal sets, equal
        references)."""
        return cls(tuple(sorted(names)))

    @property
    def schema(self) -> dict:
        """The schema as a JSON value: nothing beyond the presence constraint."""
        return {}

    def admits(self, value) -> bool:
        """Whether ``value`` satisfies the constraint (non-objects do)."""
        return not isinstance(value, dict) or not all(k in value for k in self.names)


#: any reference
NodeRef = Pointer | BooleanSchema | Synthetic | NotAll
