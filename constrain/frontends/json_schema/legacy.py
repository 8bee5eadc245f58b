"""Where a document without ``$schema`` may read the older drafts' keywords.

Without a declared draft, ``jsonschema`` validates under 2020-12, which has no
``dependencies`` and no ``additionalItems``; Trellis reads them too (schemas
written for drafts 4-7 often leave ``$schema`` out), which is stricter than
``jsonschema`` wherever the subschema holding them must *match*. Where it must
*not* match, a stricter subschema is a looser whole: ``not: {dependencies: {a:
[b]}}`` read with ``dependencies`` excludes fewer objects, and admitted
``{"a": 1}``, which ``jsonschema`` refuses. The same goes for an ``if`` (its
``else`` side is its complement), the branches of a ``oneOf`` (a value that
matches two fails), a ``contains`` beside ``maxContains`` (fewer items count),
and any annotation an ``unevaluated*`` keyword reads.

:func:`excluding_holders` finds the subschemas holding such keywords that are
reached, through subschemas or ``$ref``, from one of those places: there they
are read as 2020-12 reads them (not at all), so that the language is never
looser than ``jsonschema``'s; elsewhere they still assert.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from constrain.errors import ConstraintError
from constrain.frontends.json_schema.keywords import DATA_KEYWORDS

if TYPE_CHECKING:
    from constrain.frontends.json_schema.document import Document

#: the older drafts' keywords that 2020-12 does not have
LEGACY = frozenset({"dependencies", "additionalItems"})


def _excluding(node: dict, key: str, value) -> bool:
    """Whether the subschemas under ``node``'s ``key`` must, for some value, fail
    to match for the node to match (see the module docstring)."""
    if key in ("not", "if"):
        return True
    if key == "oneOf":
        return isinstance(value, list) and len(value) > 1
    return key == "contains" and "maxContains" in node


def _children(node, ptr: str):
    """``(child, pointer)`` of the dicts and lists inside ``node`` (data
    keywords skipped), with their JSON pointers."""
    from constrain.frontends.json_schema.document import escape_token

    if isinstance(node, dict):
        for k, v in node.items():
            if k not in DATA_KEYWORDS and isinstance(v, (dict, list)):
                yield k, v, f"{ptr}/{escape_token(k)}"
    elif isinstance(node, list):
        for i, v in enumerate(node):
            if isinstance(v, (dict, list)):
                yield None, v, f"{ptr}/{i}"


def excluding_holders(doc: Document, everywhere: bool = False) -> frozenset:
    """The ``id`` of every dict in ``doc``'s documents that holds a
    :data:`LEGACY` keyword and is reached from a place where a subschema must
    not match (``everywhere``: every such dict, for documents with
    ``unevaluated*``). Reached means below it, or through a ``$ref`` (or a
    ``$dynamicRef``, to its static target and every ``$dynamicAnchor``) from
    something below it: an over-approximation, which can only read more of the
    document as ``jsonschema`` does.

    A ``$ref`` that does not resolve (or a view past the dynamic scopes'
    limit) is skipped here: the translation reports it where it reads it."""
    roots = [(doc.root, "")] + [(d, f"@{i}") for i, (_, d) in enumerate(doc.externals)]
    seen: set[int] = set()
    work: list = []

    def reach(node, ptr: str) -> None:
        if id(node) not in seen:
            seen.add(id(node))
            work.append((node, ptr))

    # the places that exclude, found from each document's root (a dict given
    # twice in a Python schema, once: a DAG walked as a tree grows exponentially)
    stack = [(node, ptr) for node, ptr in roots]
    walked: set[int] = set()
    while stack:
        node, ptr = stack.pop()
        if id(node) in walked:
            continue
        walked.add(id(node))
        if everywhere:
            reach(node, ptr)
            continue
        for key, child, cptr in _children(node, ptr):
            if isinstance(node, dict) and _excluding(node, key, child):
                reach(child, cptr)
            else:
                stack.append((child, cptr))
    holders: set[int] = set()
    anchors_done = False
    while work:
        node, ptr = work.pop()
        if isinstance(node, dict):
            if not LEGACY.isdisjoint(node):
                holders.add(id(node))
            for key in ("$ref", "$dynamicRef"):
                ref = node.get(key)
                if not isinstance(ref, str):
                    continue
                try:
                    target = doc.real_pointer(doc.resolve_ref(ref, f"{ptr}/{key}"))
                except (ConstraintError, ValueError):
                    continue  # reported where the translation reads it
                reach(doc.raw_node(target), target)
                if key == "$dynamicRef" and not anchors_done:
                    anchors_done = True
                    for target in doc.dynamic_anchors():
                        reach(doc.raw_node(target), target)
        for _, child, cptr in _children(node, ptr):
            reach(child, cptr)
    return frozenset(holders)


def documents_entered_below_root(doc: Document) -> set[int]:
    """The indices of the documents of ``resources`` that a ``$ref`` in another
    document (the root or another resource) enters below their root (a
    fragment, an anchor, an embedded ``$id``), or that any ``$dynamicRef`` may
    enter (every one that has a ``$dynamicAnchor``): ``jsonschema`` reads such
    a part under the draft of the document the reference is in, not its own."""
    out: set[int] = set()
    stack = [(doc.root, "")] + [(d, f"@{i}") for i, (_, d) in enumerate(doc.externals)]
    dynamic = False
    walked: set[int] = set()  # a dict given twice in a Python schema is walked once
    while stack:
        node, ptr = stack.pop()
        if id(node) in walked:
            continue
        walked.add(id(node))
        if isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str):
                try:
                    target = doc.real_pointer(doc.resolve_ref(ref, f"{ptr}/$ref"))
                except (ConstraintError, ValueError):
                    target = ""  # reported where the translation reads it
                head, sep, _ = target.partition("/")
                if sep and head.startswith("@") and head[1:].isdigit() \
                        and head != ptr.partition("/")[0]:
                    out.add(int(head[1:]))
            dynamic = dynamic or isinstance(node.get("$dynamicRef"), str)
        stack.extend((child, cptr) for _, child, cptr in _children(node, ptr))
    if dynamic:
        out.update(int(p.partition("/")[0][1:]) for p in doc.dynamic_anchors()
                   if p.startswith("@") and p.partition("/")[0][1:].isdigit())
    return out
