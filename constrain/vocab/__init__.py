"""Vocabularies: the bytes of every token id, tokenizer adapters, and the token trie with its kernels."""
