"""Context-free constraints: the grammar IR, the Earley recogniser, the lexer tables and ``GrammarConstraint``."""
