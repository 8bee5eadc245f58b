"""Where a grammar's mask rows come from (``LexerTables._new_row``): slabs
that grow from 4 rows to 32 and stop at a per-grammar cap, after which rows
are allocated alone; a broad walk's row, kept in the compiler's cache across
grammars, owns its memory instead of holding a grammar's slab; and the masks
are the same with slabs as without (rows are handed out once, never two
states one row)."""

from __future__ import annotations

import random

import numpy as np

from constrain import Compiler, allocate_bitmask
from constrain.cfg import lexer as lexer_module

TOOL = {"type": "object",
        "properties": {"function_name": {"enum": ["get_weather", "get_time", "geocode"]},
                       "location": {"type": "string"},
                       "unit": {"enum": ["celsius", "fahrenheit"]},
                       "days": {"type": "integer", "minimum": 1},
                       "note": {"type": "string", "maxLength": 12}},
        "required": ["function_name", "location"]}


def _slab_of(row):
    """The 2-D slab ``row`` is a view of, else ``None``."""
    base = row.base
    while base is not None and base.ndim == 1 and base.base is not None:
        base = base.base
    return base if base is not None and base.ndim == 2 else None


def test_slabs_grow_then_stop_at_the_cap(smollm2_vocab, monkeypatch):
    lex = Compiler(smollm2_vocab).compile_json_schema(TOOL).lexer
    row_bytes = 4 * lex._row_len
    monkeypatch.setattr(lexer_module, "_SLAB_BYTES", 64 * row_bytes)
    lex._slab, lex._slab_next, lex._slab_bytes = None, 0, 0
    rows = [lex._new_row() for _ in range(100)]
    sizes, last = [], None
    for r in rows:
        slab = _slab_of(r)
        if slab is not None and slab is not last:
            sizes.append(slab.shape[0])
            last = slab
    assert sizes == [4, 4, 8, 16, 32], sizes
    # past the cap (64 rows' bytes), one allocation per row
    assert all(_slab_of(r) is None and r.shape == (lex._row_len,) for r in rows[64:])
    # every row its own memory: none handed out twice
    starts = {r.__array_interface__["data"][0] for r in rows}
    assert len(starts) == len(rows)


def _walk_masks(g, vocab, seed, steps):
    """The rows ``fill_bitmask`` writes along a random walk, and the states."""
    rng = random.Random(seed)
    bm = allocate_bitmask(1, len(vocab), backend="numpy")
    state, out = g.initial_state(), []
    for _ in range(steps):
        bm[0] = -1  # every byte of the row written
        g.fill_bitmask(state, bm, 0)
        out.append((state, bm[0].view(np.uint32).copy()))
        ids = [t for t in g.allowed_token_ids(state).tolist() if t not in vocab.eos_token_set]
        if not ids:
            break
        short = [t for t in ids if len(vocab.tokens[t]) <= 2]
        state = g.advance(state, rng.choice(short if short and rng.random() < 0.5 else ids))
    return out


def test_masks_with_and_without_slabs(smollm2_vocab):
    slabbed = Compiler(smollm2_vocab).compile_json_schema(TOOL)
    alone = Compiler(smollm2_vocab).compile_json_schema(TOOL)
    alone.lexer._slab = None
    alone.lexer._slab_bytes = lexer_module._SLAB_BYTES  # at the cap: rows alone
    # the compile made the initial state's mask from a slab: made again alone
    alone.lexer._rows.clear()
    for cache in (alone._masks, alone._config_masks, alone._writers):
        cache.clear()
    for seed in range(4):
        got = _walk_masks(slabbed, smollm2_vocab, seed, 60)
        want = _walk_masks(alone, smollm2_vocab, seed, 60)
        assert [s for s, _ in got] == [s for s, _ in want]
        for (state, a), (_, b) in zip(got, want):
            assert np.array_equal(a, b), state
            assert np.array_equal(slabbed.mask_row(state), alone.mask_row(state)), state
    # not vacuous: the slabbed grammar's walk rows are slab views, the other's not
    assert any(_slab_of(hit[0]) is not None for hit in slabbed.lexer._rows.values())
    assert all(_slab_of(hit[0]) is None for hit in alone.lexer._rows.values())


def test_shared_walk_rows_own_their_memory(smollm2_vocab):
    compiler = Compiler(smollm2_vocab)
    g = compiler.compile_json_schema(TOOL)
    for seed in range(3):
        _walk_masks(g, smollm2_vocab, seed, 40)
    shared = [value for value, _ in compiler.lexer_walks._items.values()]
    assert shared, "no broad walk was shared"
    for row, *_ in shared:
        assert _slab_of(row) is None, row.base.shape
    # a second grammar of the compiler takes them (and still gets its masks right)
    h = compiler.compile_json_schema(TOOL)
    for (state, a), (_, b) in zip(_walk_masks(h, smollm2_vocab, 0, 40),
                                  _walk_masks(g, smollm2_vocab, 0, 40)):
        assert np.array_equal(a, b), state
