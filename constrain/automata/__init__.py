"""Finite automata: character sets, regex syntax to IR, NFA and determinisation to a character DFA, UTF-8 expansion to a byte DFA, trimming and minimisation, each with its numba kernels."""
