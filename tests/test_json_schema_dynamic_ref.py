"""``$dynamicRef`` / ``$dynamicAnchor`` (draft 2020-12) beyond the official
suite's groups (which ``tests/test_json_schema_suite.py`` runs): the
recursive-extension pattern checked against ``jsonschema`` on instances, and
refusals inside a dynamic scope named by the pointer where the keyword is
written."""

from __future__ import annotations

import json

import jsonschema
import pytest

from byte_vocab import accepts, byte_vocabulary
from constrain import UnsupportedSchemaError, compile_json_schema, order_instance

# a generic tree whose node schema an extension tightens through the dynamic
# anchor: children of a strict tree are strict too
TREE = {"$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "https://example.com/tree", "$dynamicAnchor": "node", "type": "object",
        "properties": {"data": True,
                       "children": {"type": "array", "items": {"$dynamicRef": "#node"},
                                    "maxItems": 2}}}
STRICT = {"$schema": "https://json-schema.org/draft/2020-12/schema",
          "$id": "https://example.com/strict-tree", "$dynamicAnchor": "node",
          "$ref": "tree", "unevaluatedProperties": False}
RESOURCES = {"https://example.com/tree": TREE}


@pytest.mark.parametrize("instance", [
    {"data": 1},
    {"children": [{"data": 2}]},
    {"children": [{"children": [{"data": 3}]}, {"data": 4}]},
    {"children": [{"daat": 1}]},  # a misspelled name deep down: the strict tree refuses it
    {"daat": 1},
    {"children": [{"children": [{"x": 1}]}]},
])
def test_strict_tree_agrees_with_jsonschema(instance):
    g = compile_json_schema(STRICT, byte_vocabulary(), resources=RESOURCES)
    from referencing import Registry, Resource

    registry = Registry().with_resource("https://example.com/tree", Resource.from_contents(TREE))
    valid = jsonschema.Draft202012Validator(STRICT, registry=registry).is_valid(instance)
    text = json.dumps(order_instance(STRICT, instance, resources=RESOURCES),
                      separators=(",", ":"))
    assert accepts(g, text) == valid, (instance, valid)


def test_the_generic_tree_alone_is_open():
    g = compile_json_schema(TREE, byte_vocabulary())
    assert accepts(g, '{"children":[{"daat":1}]}')


def test_a_refusal_in_a_dynamic_scope_names_the_written_place():
    # the generic tree is reached in the strict tree's scope (a view of its
    # document); the refusal names the keyword in the tree's own document
    tree = json.loads(json.dumps(TREE))
    tree["properties"]["children"]["uniqueItems"] = True
    with pytest.raises(UnsupportedSchemaError) as e:
        compile_json_schema(STRICT, byte_vocabulary(),
                            resources={"https://example.com/tree": tree})
    assert e.value.pointer == "@0/properties/children/uniqueItems", e.value.pointer
