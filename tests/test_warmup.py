"""constrain.warm_up loads every kernel that compiling and filling masks use, so
a server's first request does not pay numba's cache loading."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

_SCRIPT = textwrap.dedent(r'''
    import json, sys
    import numpy as np
    from numba.core.registry import CPUDispatcher
    import constrain

    def loaded():
        out = set()
        for name, mod in list(sys.modules.items()):
            if name.startswith("constrain"):
                for k, v in vars(mod).items():
                    if isinstance(v, CPUDispatcher) and v.signatures:
                        out.add(f"{name}.{k}")
        return out

    before = loaded()
    assert "jsonschema" not in sys.modules
    seconds = constrain.warm_up()
    assert "jsonschema" in sys.modules
    after_warm = loaded()
    # a different vocabulary (byte tokens and a few merges), schema and grammar
    tokens = [bytes([b]) for b in range(256)] + [b'{"', b'":"', b'"}', b"SELECT", b"12"]
    vocab = constrain.Vocabulary.from_tokens(tokens + [b"</s>"], eos_token_ids=[len(tokens)])
    schema = {"type": "object", "properties": {
        "id": {"type": "integer", "minimum": 0, "maximum": 99},
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 40}},
        "kind": {"enum": ["a", "b"]}, "x": {"type": "number"},
        "when": {"type": "string", "format": "date"}}, "additionalProperties": False}
    g = constrain.compile_json_schema(schema, vocab)
    bm = constrain.allocate_bitmask(1, len(vocab), backend="numpy")
    text = json.dumps({"id": 12, "tags": ["x", "yé"], "kind": "b", "x": -0.5e2,
                       "when": "2024-02-29"}, ensure_ascii=False, separators=(",", ":"))
    state = g.initial_state()
    for b in text.encode():
        g.fill_bitmask(state, bm, 0)
        state = g.advance(state, b)
    g.fill_bitmask(state, bm, 0)
    assert g.is_accepting(state)
    r = constrain.compile_regex(r"[a-z]+@[a-z]+\.(com|org)", vocab)
    s = r.initial_state()
    for b in b"ada@trellis.org":
        r.fill_bitmask(s, bm, 0)
        s = r.advance(s, b)
    constrain.apply_bitmask(np.zeros((1, len(vocab)), dtype=np.float32), bm)
    print(json.dumps({"seconds": seconds, "before": sorted(before),
                      "warm": sorted(after_warm), "new": sorted(loaded() - after_warm)}))
''')


def test_warm_up_loads_every_kernel_later_work_needs():
    # without the background load of import constrain (constrain.kernel_loading)
    out = subprocess.run([sys.executable, "-c", _SCRIPT], cwd=ROOT, capture_output=True,
                         text=True, timeout=600, env=dict(os.environ, TRELLIS_PRELOAD="0"))
    assert out.returncode == 0, out.stderr[-2000:]
    res = json.loads(out.stdout.strip().splitlines()[-1])
    assert res["seconds"] > 0
    assert not res["before"]  # nothing was loaded at import
    assert "constrain.cfg.lexer_kernels.lexer_walk_rows" in res["warm"]
    assert "constrain.cfg.earley_kernels.earley_next" in res["warm"]
    assert "constrain.cfg.lexer_kernels.boundary_walk" in res["warm"]
    assert "constrain.automata.determinize_kernels.determinize" in res["warm"]
    assert res["new"] == [], f"kernels loaded after warm_up: {res['new']}"
