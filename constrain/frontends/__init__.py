"""Front ends: each grammar format (Lark, JSON Schema, SQL) is a module here that produces a ``GrammarIR`` (or grammar text for one)."""
