"""JSON Schema front end: a schema to a ``GrammarIR`` (or to Lark text)."""
