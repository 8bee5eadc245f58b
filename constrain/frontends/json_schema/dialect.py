"""Which JSON Schema draft a document is read under: the one ``jsonschema``
picks for it (``jsonschema.validators.validator_for`` with 2020-12 as the
default), found without importing ``jsonschema`` (its import costs up to
seconds).

``jsonschema`` recognises a ``$schema`` only when it is one of the six
meta-schema URIs, compared after ``urlsplit(...).geturl()`` (which lowercases
the scheme and drops an empty fragment: ``...schema#`` is ``...schema``). Any
other value -- ``https://json-schema.org/draft-07/schema#``, a custom URI that
mentions ``draft-07`` -- is validated as 2020-12, so reading it as draft 7
(a substring test did) dropped the siblings of ``$ref`` that jsonschema
applies.
"""

from __future__ import annotations

from urllib.parse import urlsplit

#: the meta-schema URIs jsonschema knows, normalised, and their drafts
_DRAFTS = {
    "http://json-schema.org/draft-03/schema": 3,
    "http://json-schema.org/draft-04/schema": 4,
    "http://json-schema.org/draft-06/schema": 6,
    "http://json-schema.org/draft-07/schema": 7,
    "https://json-schema.org/draft/2019-09/schema": 2019,
    "https://json-schema.org/draft/2020-12/schema": 2020,
}


#: per declared draft, the keywords Trellis would enforce that the draft does not
#: have, which jsonschema (and the draft) ignore there: enforcing them is
#: stricter where they assert, but under ``not`` or ``oneOf`` a stricter branch
#: is a looser whole (draft 4's ``oneOf: [{type: integer}, {const: 2.0}]``
#: admits every non-integer: its ``const`` asserts nothing)
_NEWER = frozenset({"dependentRequired", "dependentSchemas", "prefixItems", "unevaluatedItems",
                    "unevaluatedProperties", "minContains", "maxContains", "$dynamicRef",
                    "$dynamicAnchor"})
_MISSING = {
    4: _NEWER | {"const", "contains", "propertyNames", "if", "then", "else"},
    6: _NEWER | {"if", "then", "else"},
    7: _NEWER,
    2019: frozenset({"prefixItems", "dependencies", "$dynamicRef", "$dynamicAnchor"}),
    2020: frozenset({"additionalItems", "dependencies"}),
}


def draft_of(document) -> int:
    """The draft ``document`` (a schema document's root) is validated under:
    3, 4, 6, 7, 2019 or 2020 (the default, for no or an unknown ``$schema``)."""
    return declared_draft(document) or 2020


def integers_are_exact(draft: int) -> bool:
    """Whether a number with a zero fractional part (``1.0``) is an integer
    (drafts 6 on), so that ``1`` and ``1.0`` are interchangeable under every
    keyword; drafts 3 and 4 count only numbers written without one."""
    return draft not in (3, 4)


def boolean_exclusive_bounds(draft: int) -> bool:
    """Whether ``exclusiveMinimum``/``exclusiveMaximum`` are booleans that
    modify ``minimum``/``maximum`` (drafts 3 and 4) rather than numbers."""
    return draft in (3, 4)


def declared_draft(document) -> int | None:
    """The draft ``document``'s ``$schema`` names, when it is one jsonschema
    knows (see :func:`draft_of`); ``None`` for no ``$schema`` or another one."""
    uri = document.get("$schema") if isinstance(document, dict) else None
    if not isinstance(uri, str):
        return None
    try:
        return _DRAFTS.get(urlsplit(uri).geturl())
    except ValueError:  # not a URI urlsplit can read
        return None


def keywords_not_in(declared: int | None) -> frozenset:
    """The keywords that assert nothing in a document whose ``$schema``
    declares the draft ``declared`` (:func:`declared_draft`): those that draft
    lacks; none without a declared draft (Trellis then reads 2020-12 together
    with the older drafts' forms, ``dependencies`` and array ``items`` with
    ``additionalItems``). Draft 3 is not read as such."""
    return _MISSING.get(declared, frozenset())

