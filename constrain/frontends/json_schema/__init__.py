"""The JSON Schema front end: a schema to Lark grammar text or to a compiled
token-level constraint (see :mod:`.compiler` for the design, one module per pass)."""

from constrain.frontends.json_schema.compiler import compile_json_schema, json_schema_to_lark, order_instance

__all__ = ["compile_json_schema", "json_schema_to_lark", "order_instance"]
