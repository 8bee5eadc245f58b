"""A JSON value's object members reordered the way a schema's grammar emits
them: declared properties in schema order, then the others in their original
order (for serialising reference outputs in the grammar's order)."""

from __future__ import annotations

import warnings

from constrain.frontends.json_schema.arrays import item_layout, pieces_at
from constrain.frontends.json_schema.keywords import json_equal
from constrain.frontends.json_schema.literals import enum_values
from constrain.frontends.json_schema.objects import object_view
from constrain.frontends.json_schema.translation import Translation

#: nesting below this is left as it is
_MAX_DEPTH = 200


def reorder(t: Translation, pieces: tuple, value, depth: int = 0):
    """``value`` with its members (at every depth) in the order of the grammar
    for the schemas at ``pieces``.

    A part of the schema that cannot be normalised (see
    :meth:`Normaliser.try_flatten_pieces`; such a schema does not compile
    either) leaves its values as they are: the order is then unknown, and
    reordering is a convenience, not a check."""
    if depth > _MAX_DEPTH or not isinstance(value, (dict, list)):
        return value
    conjs = t.norm.try_flatten_pieces(pieces)
    if conjs is None:
        return value
    # the conjunction the value is valid against, as the grammar would pick it
    conj = next((c for c in conjs if all(t.doc.valid(value, p) for p in c)), conjs[0] if conjs else ())
    values = enum_values(t.doc, conj)
    if values is not None:
        # a literal is written as the schema spells it: its own member order
        return next((v for v in values if json_equal(v, value)), value)
    if isinstance(value, list):
        layout = item_layout(t.norm, conj)
        return [reorder(t, pieces_at(layout, i), v, depth + 1) for i, v in enumerate(value)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        view = object_view(t.norm, conj)
    if view is None:
        return value
    out = {}
    for name in view.order:
        if name in value:
            out[name] = reorder(t, view.pieces[name], value[name], depth + 1)
    for k, v in value.items():
        if k not in out:
            out[k] = reorder(t, view.extra_of(k) or (), v, depth + 1)
    return out
