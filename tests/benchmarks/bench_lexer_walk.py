"""First-visit cost of one lexer state: the trie walk kernel alone.

Compiles a small JSON Schema over the SmolLM2 vocabulary and times
``constrain.cfg.lexer_kernels.lexer_walk`` on lexer states a JSON Schema walk
meets first: the start (one literal), the state after an object's opening ``{"``
(declared keys and "any other key"), a string body, and two counting states of a
``maxLength`` string. This is the figure behind docs/grammars.md ("The
lexer-state walk").

    python tests/benchmarks/bench_lexer_walk.py [--repeat N]
"""

from __future__ import annotations

import harness  # the standard library only: the thread settings come before numpy and numba

harness.one_thread(force=False)

import argparse  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

from maskbench_peers import load_vocab  # noqa: E402

from constrain import Vocabulary, compile_json_schema  # noqa: E402
from constrain.cfg import lexer_kernels as gk  # noqa: E402

SCHEMA = {"type": "object", "properties": {
    "description": {"type": "string"}, "name": {"type": "string"},
    "code": {"type": "string", "maxLength": 64}, "methods": {"type": "array"}}}
CASES = {
    "start (one literal: {)": "",
    'after {" (keys)': '{"',
    "string body": '{"description":"ab',
    "maxLength 64, 2 chars in": '{"description":"a","name":"b","code":"ab',
    "maxLength 64, 60 chars in": '{"description":"a","name":"b","code":"' + "ab" * 30,
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=300)
    args = ap.parse_args()
    spec = load_vocab("smollm2")
    vocab = Vocabulary.from_huggingface(spec.source)
    g = compile_json_schema(SCHEMA, vocab)
    lex, t = g.lexer, g.lexer.trie
    print(f"SmolLM2 trie: {t.num_nodes} nodes, {len(vocab)} ids; kernel time per walk, "
          f"best of 3 runs of {args.repeat}")
    for name, prefix in CASES.items():
        state = g.initial_state()
        for tok in spec.encode(prefix):
            state = g.advance(state, tok)
        s = state[1][0][1]
        row = t.walk_row()
        nodes = np.empty(t.num_nodes, np.int32)
        states = np.empty(t.num_nodes, np.int32)
        (trans, _, _, loops, flags, reads_utf8), _, memos = lex.kernel_arrays
        call = (trans, loops, flags, reads_utf8, memos, *t.kernel_arrays(), s, row, nodes, states)
        # from the exits of the loop set of the text state it reads into,
        # where it has one, as LexerTables.walk walks (lexer_walk_rows)
        route = lex._text_route(s)
        walk = gk.lexer_walk_exits if len(route[0]) else gk.lexer_walk
        if len(route[0]):
            call += route
        walk(*call)
        best = float("inf")
        for _ in range(3):
            t0 = time.perf_counter()
            for _ in range(args.repeat):
                row[:] = 0
                n = walk(*call)
            best = min(best, (time.perf_counter() - t0) / args.repeat * 1e6)
        allowed = int(np.unpackbits(row[:lex.words32].view(np.uint8)).sum())
        print(f"  {name:28s} {best:8.1f} us   tokens inside {allowed:6d}   boundary nodes {n}")


if __name__ == "__main__":
    main()
