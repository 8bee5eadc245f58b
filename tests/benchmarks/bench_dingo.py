"""DINGO benchmark: time of one block's dynamic programme on the SmolLM2 vocabulary.

    python tests/benchmarks/bench_dingo.py [--d 32] [--repeat 50] [--regex PATTERN]

One thread. The vocabulary (49,152 ids) and the grammar are built first, untimed;
the first call, which compiles the numba kernel (or loads it from the disk cache)
and builds the grammar's grouped transition tables (cached), is reported apart,
and each setting gets one untimed warm-up call. Each
timed call is then a whole ``search.dingo(block, grammar, state)`` call (input
checks, the kernel, rebuilding the result) on random log-softmax rows of shape
``d × V`` (float32 and float64) and ``d × (V+1)`` (with a mask column); the
median and the minimum over ``--repeat`` calls are printed, in milliseconds.
"""

from __future__ import annotations

import harness  # the standard library only: the thread settings come before numpy and numba

harness.one_thread()

import argparse  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

import constrain  # noqa: E402
import search  # noqa: E402
from search.models.smollm2 import load_tokenizer  # noqa: E402

JSON_REGEX = r'\{"name": "[a-zA-Z ]{1,20}", "age": [0-9]{1,3}, "zip": "[0-9]{5}"\}'


def log_softmax(x: np.ndarray) -> np.ndarray:
    """Row-wise log-softmax."""
    m = x.max(axis=1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(axis=1, keepdims=True))


def time_calls(lp, grammar, state, repeat):
    """Median and minimum milliseconds of ``repeat`` calls, and the last result."""
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        r = search.dingo(lp, grammar, state)
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times), min(times), r


def main() -> None:
    """Build the vocabulary and grammar, time the DP, print one line per setting."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--d", type=int, default=32, help="block length (positions)")
    ap.add_argument("--repeat", type=int, default=50)
    ap.add_argument("--regex", default=JSON_REGEX)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    vocab = constrain.Vocabulary.from_huggingface(load_tokenizer(), name="SmolLM2-135M-Instruct")
    grammar = constrain.compile_regex(args.regex, vocab)
    ta = grammar.tokens
    print(f"vocab {vocab.name}: {len(vocab)} ids; regex {args.regex}")
    print(f"grammar: {grammar.num_states} states, {len(ta._toks)} token transitions "
          f"(eager tables: {ta.eager}); d = {args.d}; one thread")
    rng = np.random.default_rng(args.seed)
    # peaked rows, like a model's: a few tokens carry most of the mass
    raw = rng.standard_normal((args.d, len(vocab) + 1)) * 3.0
    lp_mask = log_softmax(raw)
    lp = log_softmax(raw[:, :-1])
    # a state in the middle of the name string
    mid = grammar.advance_many(1, vocab_ids(vocab, '{"name": "Jo'))
    settings = [
        ("float32, from the start", lp.astype(np.float32), 1),
        ("float64, from the start", lp, 1),
        ("float32, mask column", lp_mask.astype(np.float32), 1),
        ("float32, mid-string state", lp.astype(np.float32), mid),
    ]
    t0 = time.perf_counter()
    search.dingo(settings[0][1], grammar, 1)
    print(f"first call (grouped tables built for this grammar, kernel compiled or loaded "
          f"from numba's cache): {(time.perf_counter() - t0) * 1e3:.0f} ms")
    for name, block, state in settings:
        search.dingo(block, grammar, state)  # warm-up (a dtype's first call compiles)
        med, best, r = time_calls(block, grammar, state, args.repeat)
        print(f"{name:28s} median {med:7.2f} ms   min {best:7.2f} ms   "
              f"logprob {r.logprob:9.2f}   end state {r.state}")


def vocab_ids(vocab, text: str) -> list[int]:
    """One id per byte of ``text`` (SmolLM2 has a token for every ASCII byte)."""
    index = {t: i for i, t in enumerate(vocab.tokens) if vocab.grammar_token_mask[i]}
    return [index[bytes([b])] for b in text.encode()]


if __name__ == "__main__":
    main()
