"""Test helpers for the lexer's tables and walks (``constrain.cfg.lexer``)."""

from __future__ import annotations

import numpy as np

from constrain import Compiler
from constrain.cfg import lexer as lexer_module


def compile_expanding(kind, source, vocab, chunk, monkeypatch):
    """A grammar (``kind`` ``"schema"`` or ``"grammar"``) compiled by a fresh
    compiler whose lexer expands at most ``chunk`` states per call."""
    monkeypatch.setattr(lexer_module, "EXPAND_CHUNK", chunk)
    monkeypatch.setattr(lexer_module, "EXPAND_PER_BYTE", 0)
    c = Compiler(vocab)
    return c.compile_json_schema(source) if kind == "schema" else c.compile_grammar(source)


def plain_walk(lex, s, route):
    """``(row, nodes, states)`` of ``lexer_walk_rows`` from lexer state ``s``
    with ``route`` (``lexer._NO_ROUTE``: the walk finds its own way), with room
    for every boundary node and no shared walk."""
    t = lex.trie
    row = np.zeros(t.row_words + 1, dtype=np.uint32)
    out = np.empty((2, t.num_nodes), dtype=np.int32)
    n = lex._walk_expanding(s, row, out, None, -1, route)
    return row[:lex.words32], out[0, :n].copy(), out[1, :n].copy()


def keep_every_exit(monkeypatch, trie):
    """Make ``trie`` keep every loop set's exits, past the share above which
    ``TokenTrie.loop_exits`` keeps none (small vocabularies, such as the
    multilingual one, are full of quotes and escapes)."""
    from constrain.vocab.trie_kernels import loop_exits

    monkeypatch.setattr(trie, "loop_exits", lambda loops: loop_exits(
        loops, *trie.packed(), trie.num_nodes)[0])


def is_text(data: bytes, loops) -> bool:
    """Whether ``data`` is text for a state with loop set ``loops`` (``[4]``
    uint64): ASCII bytes in the set at character boundaries, UTF-8 that is
    valid so far."""
    from constrain.vocab.trie_kernels import utf8_next

    u = 0
    for b in data:
        v = utf8_next(u, b)
        if v < 0 or (u == 0 and b < 0x80 and not (int(loops[b >> 6]) >> (b & 63)) & 1):
            return False
        u = v
    return True


def greedy_token_ids(vocab, text: bytes) -> list[int]:
    """Greedy longest-match token ids spelling ``text`` in ``vocab``."""
    by_bytes = {tok: i for i, tok in enumerate(vocab.tokens) if tok}
    out, i = [], 0
    while i < len(text):
        for j in range(len(text), i, -1):
            t = by_bytes.get(text[i:j])
            if t is not None:
                out.append(t)
                i = j
                break
        else:
            raise AssertionError(f"no token for {text[i:]!r}")
    return out
