"""Token references (``<[id]>``, ``<[1,3-5]>``, ``<[^id]>``, ``<|name|>``) against
XGrammar's Lark reading of the same grammars, over SmolLM2's vocabulary: along
random walks (each token drawn from Trellis's mask, accepted by both), every
mask compared whole.

The grammars of ``AGREE`` must agree on every mask (a negated reference
compared less EOS: Trellis's never matches it, as llama.cpp's grammar never
sees end-of-generation tokens, and allows EOS only where the grammar is
complete). ``DIFFER`` lists grammars where the readings differ by design,
printed for the record: a reference naming an EOS id (Trellis allows it there,
XGrammar 0.2.9 only where the grammar is complete), and a text token that runs
from text into a reference's place (``"a" <[^0]>`` after the token ``at``:
XGrammar allows it; for Trellis a reference is one whole token, so ``at`` is
not ``a`` and then a token).

    python tests/benchmarks/check_token_refs.py [--walks N] [--steps N] [--seed S]

Needs xgrammar (the ``bench`` extra) and the default model's tokenizer.
"""

from __future__ import annotations

import argparse
import random
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

AGREE = [
    'start: "<think>" THOUGHT? <[1]> "answer"\nTHOUGHT: /[^<]+/',
    'start: "{" item ("," item)* "}"\nitem: <[1,3-4,17]> | /[a-z]+/',
    'start: (<|im_start|> | "x" <|endoftext|>)+ "y"',
    'start: <[^0,2]>+ "."',
    'start: <[^1]> <[0]>?',
]
DIFFER = [
    'start: "x" <|im_end|> "y"',
    'start: "a" <[^0,2]>+ "."',
]


def _ids(bits: np.ndarray, n: int) -> set:
    flat = np.unpackbits(bits.view(np.uint8), bitorder="little")[:n]
    return set(np.flatnonzero(flat).tolist())


def main(argv=None) -> int:
    """Run the comparison; the exit status is the number of disagreements."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--walks", type=int, default=20, help="walks per grammar")
    ap.add_argument("--steps", type=int, default=24, help="tokens per walk at most")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)

    import xgrammar as xg

    import constrain
    from search.models.smollm2 import load_tokenizer

    tok = load_tokenizer()
    vocab = constrain.Vocabulary.from_huggingface(tok, name="SmolLM2")
    n = len(vocab)
    info = xg.TokenizerInfo.from_huggingface(tok, vocab_size=n)
    compiler = xg.GrammarCompiler(info)
    eos = set(vocab.eos_token_ids)
    bitmask = xg.allocate_token_bitmask(1, n)
    bad = 0
    print("| grammar | walks | masks | same mask | first difference |")
    print("|---|---|---|---|---|")
    for text in AGREE + DIFFER:
        g = constrain.compile_grammar(text, vocab)
        cg = compiler.compile_grammar(xg.Grammar.from_lark(text, tokenizer_info=info))
        rng = random.Random(args.seed)
        masks = same = 0
        first = ""
        for _ in range(args.walks):
            m = xg.GrammarMatcher(cg)
            state = g.initial_state()
            for _ in range(args.steps):
                ours = set(g.allowed_token_ids(state).tolist())
                m.fill_next_token_bitmask(bitmask)
                theirs = _ids(bitmask.numpy()[0], n)
                if "^" in text:  # a negated reference: EOS only where complete
                    theirs = {i for i in theirs if i not in eos} | (ours & eos)
                masks += 1
                if ours == theirs:
                    same += 1
                elif not first:
                    extra, missing = sorted(ours - theirs)[:5], sorted(theirs - ours)[:5]
                    first = f"only Trellis {extra}, only XGrammar {missing}"
                t = rng.choice(sorted(ours))
                if t in eos:
                    break
                state = g.advance(state, t)
                if not m.accept_token(t):
                    first = first or f"XGrammar refused token {t}"
                    break
        if text in AGREE:
            bad += masks - same
        shown = text.replace("\n", " ⏎ ").replace("|", "\\|")
        print(f"| `{shown}` | {args.walks} | {masks} | {same} | {first or '-'} |")
    print(f"disagreements (AGREE grammars): {bad}")
    return min(bad, 255)


if __name__ == "__main__":
    sys.exit(main())
