"""What a translation cannot enforce: refused when strict, else recorded and
reported in one warning."""

from __future__ import annotations

import warnings
import weakref
from contextlib import contextmanager
from contextvars import ContextVar

from constrain.errors import UnenforcedFormatWarning, UnsupportedSchemaError


def _as_written(pointer: str) -> str:
    return pointer


# where the schema sits in what the user wrote (from_response_format's
# "/json_schema/schema"), for the pointers the warnings name: per thread and
# asyncio task, as the translation caches are (caches._IN_USE)
_WARNING_BASE: ContextVar[str] = ContextVar("json_schema_warning_base", default="")


@contextmanager
def warnings_within(base: str):
    """In this block (this thread or task), the translations' warnings name
    their pointers within a document that holds the schema at the JSON
    pointer ``base`` (errors are re-pointed by their caller:
    ``response_format.within_response_format``)."""
    token = _WARNING_BASE.set(base)
    try:
        yield
    finally:
        _WARNING_BASE.reset(token)


class Diagnostics:
    """The keywords a translation could not enforce, by JSON pointer."""

    def __init__(self, strict: bool):
        self.strict = strict
        self.ignored: list[str] = []
        #: the ``format`` keywords left as annotations under ``formats="assert"``:
        #: the user's pointer -> what the warning says of it
        self.formats: dict[str, str] = {}
        #: where the language is left stricter than the schema without a
        #: refusal (the documented strict side): the user's pointer -> what
        self.narrowed: dict[str, str] = {}
        #: the user's JSON pointer of a translation's pointer (the document's
        #: ``user_pointer``, set once it exists: generated schemas such as
        #: complements have pointers ``@n<k>/...`` of their own)
        self.locate = _as_written
        #: the warnings' pointer prefix (:func:`warnings_within`)
        self.base = _WARNING_BASE.get()

    def locate_with(self, method) -> None:
        """Name pointers by ``method`` (a bound method: the document's
        ``user_pointer``), held weakly: the document holds this object, and a
        strong reference back made every translation a reference cycle, freed
        only by the cyclic collector."""
        ref = weakref.WeakMethod(method)

        def locate(pointer: str) -> str:
            m = ref()
            return pointer if m is None else m(pointer)

        self.locate = locate

    def unsupported(self, pointer: str, message: str) -> None:
        """Refuse (strict: :class:`UnsupportedSchemaError`) or record an ignored
        keyword, named by its pointer in the user's schema."""
        pointer = self.locate(pointer)
        if self.strict:
            raise UnsupportedSchemaError(message, pointer)
        if pointer not in self.ignored:
            self.ignored.append(pointer)

    def format_not_enforced(self, pointer: str, name: str, why: str) -> None:
        """Record a ``format`` that ``formats="assert"`` leaves as an
        annotation (``why``: unknown, beside a pattern or length bound, or on a
        number), once per pointer."""
        where = self.locate(pointer)
        self.formats.setdefault(where, f"{name!r} at {self.base + where} ({why})")

    def narrow(self, pointer: str, what: str) -> None:
        """Record that the language leaves out part of what the schema at
        ``pointer`` allows (``what``), once per pointer: the strict side,
        which refuses nothing, but the user is told."""
        where = self.locate(pointer)
        self.narrowed.setdefault(where, f"{what} at {self.base + where or '/'}")

    def where_ignored(self) -> str:
        """The ignored pointers, comma-separated (the root as ``/``), within
        the document of :func:`warnings_within`."""
        return ", ".join(self.base + p or "/" for p in self.ignored)

    def warn(self, caller: str) -> None:
        """One warning (blamed on ``caller``'s caller) listing the keywords a
        ``strict=False`` translation ignored, one listing where the language
        was left stricter (:meth:`narrow`), and one
        (:class:`~constrain.errors.UnenforcedFormatWarning`) listing the formats
        left as annotations."""
        if self.ignored:
            warnings.warn(f"{caller} ignored keywords it cannot enforce at: " + self.where_ignored(),
                          stacklevel=3)
        if self.narrowed:
            warnings.warn(f"{caller} admits only part of what the schema allows: "
                          + "; ".join(self.narrowed.values()), stacklevel=3)
        if self.formats:
            warnings.warn(UnenforcedFormatWarning(
                f"{caller} leaves these formats as annotations (values are not checked "
                f"against them): " + "; ".join(self.formats.values())), stacklevel=3)
