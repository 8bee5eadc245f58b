"""The JSON Schema front end: a schema to Lark grammar text or to a compiled
token-level constraint (see :mod:`.compiler` for the design, one module per pass)."""

__all__ = ["compile_json_schema", "json_schema_to_lark", "order_instance"]


def __getattr__(name):
    # on first use: constrain.cfg.lexemes imports this package's JSON lexemes
    # (.encoding) while constrain.cfg.grammar, which .compiler needs, is loading
    if name in __all__:
        from constrain.frontends.json_schema import compiler

        value = globals()[name] = getattr(compiler, name)
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
