"""Regular constraints: a byte DFA walked over the vocabulary trie into a token automaton, and its runtime, ``DFAConstraint``."""
