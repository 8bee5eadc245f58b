"""Issue 26's must-show for GBNF: every llama.cpp grammar file compiles, and on
strings from random walks and their mutations the constraint agrees with
XGrammar's reading of the same file (``Grammar.from_ebnf`` and a string
``GrammarMatcher``), on full acceptance and on the longest prefix either side
can continue.

The walks are the constraint's own (derivations of its grammar IR, with a
random string for every terminal: tests/grammar_sampling.py), cut at random
points and mutated (a character deleted, inserted, replaced or two swapped, one
to three times). XGrammar's EBNF refuses an empty alternative (``ws ::= | " "``,
which llama.cpp reads as the empty string), so it is given ``""`` there: the
one rewrite, printed per file.

    python tests/benchmarks/check_gbnf.py [--walks N] [--seed S] [--show K]

Needs xgrammar (the ``bench`` extra).
"""

from __future__ import annotations

import argparse
import random
import re
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

DATA = ROOT / "tests" / "data" / "gbnf"


def for_xgrammar(text: str) -> tuple[str, int]:
    """``text`` without comments and with each empty alternative (one that
    ``|`` or ``)`` follows, or the next rule, or the end) written ``""``, and
    how many there were."""
    code = "\n".join(_split_comment(line)[0] for line in text.split("\n"))
    empty = (r'"(?:\\.|[^"\\])*"|\[(?:\\.|[^\]\\])*\]'  # literals and classes stay
             r"|(::=|\||\()(?=[ \t]*(?:\||\)|\s*\Z|(?:\n[ \t]*)+[A-Za-z0-9_-]+[ \t]*::=))")
    rewritten = []

    def fill(m):
        if m.group(1) is None:
            return m.group(0)
        rewritten.append(m.start())
        return m.group(1) + ' ""'

    return re.sub(empty, fill, code), len(rewritten)


def _split_comment(line: str) -> tuple[str, str, str]:
    """A line cut at its first ``#`` outside a literal or class."""
    i, quote, cls = 0, False, False
    while i < len(line):
        c = line[i]
        if c == "\\":
            i += 2
            continue
        if quote:
            quote = c != '"'
        elif cls:
            cls = c != "]"
        elif c == '"':
            quote = True
        elif c == "[":
            cls = True
        elif c == "#":
            return line[:i], "#", line[i + 1:]
        i += 1
    return line, "", ""


def xgrammar_longest(matcher_factory, text: str) -> tuple[int, bool]:
    """XGrammar's longest viable prefix of ``text`` (in characters) and
    whether it accepts ``text``."""
    m = matcher_factory()
    for i, ch in enumerate(text):
        if not m.accept_string(ch):
            return i, False
    return len(text), m.is_terminated()


def ours_longest(g, text: str) -> tuple[int, bool]:
    """The same from the Trellis constraint."""
    state = g.initial_state()
    for i, ch in enumerate(text):
        nxt = g.advance_bytes(state, ch.encode("utf-8"))
        if nxt is None:
            return i, False
        state = nxt
    return len(text), g.is_accepting(state)


def strings_for(g, rng: random.Random, walks: int, alphabet: str) -> list[str]:
    """Walks of ``g``'s grammar, prefixes of them and mutations of both."""
    from grammar_sampling import GrammarSampler, mutate

    sampler = GrammarSampler(g, rng.randrange(1 << 30))
    out = []
    while len(out) < walks:
        s = sampler.sentence(rng.choice([4, 8, 12])).decode("utf-8", "ignore")
        out.append(s)
    cut = [s[:rng.randrange(len(s) + 1)] for s in out]
    mutated = []
    for s in out + cut:
        m = s
        for _ in range(rng.choice([1, 1, 2, 3])):
            m = mutate(m, rng, alphabet)
        mutated.append(m)
    return out + cut + mutated


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--walks", type=int, default=300, help="walks per file")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--show", type=int, default=3, help="disagreements shown per file")
    ap.add_argument("--smollm2", action="store_true",
                    help="also compile every file over SmolLM2's vocabulary")
    args = ap.parse_args(argv)

    import xgrammar as xgr
    from xgrammar.testing import _get_matcher_from_grammar

    import constrain
    from byte_vocab import byte_vocabulary

    vocab = byte_vocabulary()
    big = None
    if args.smollm2:
        from search.models.smollm2 import load_tokenizer

        big = constrain.Vocabulary.from_huggingface(load_tokenizer(), name="SmolLM2")
    rows = []
    total_bad = 0
    for path in sorted(DATA.glob("*.gbnf")):
        text = path.read_text(encoding="utf-8")
        t0 = time.perf_counter()
        g = constrain.compile_grammar(path, vocab)
        compile_ms = (time.perf_counter() - t0) * 1e3
        big_ms = ""
        if big is not None:
            t0 = time.perf_counter()
            gb = constrain.compile_grammar(path, big)
            gb.allowed_token_ids(gb.initial_state())
            big_ms = f"{(time.perf_counter() - t0) * 1e3:.0f}"
        xtext, rewrites = for_xgrammar(text)
        xg = xgr.Grammar.from_ebnf(xtext)

        def factory(xg=xg):
            return _get_matcher_from_grammar(xg)

        rng = random.Random(f"{args.seed}:{path.stem}")
        alphabet = "".join(sorted(set(text) - {"\r"})) + "é😀\x7f"
        strings = strings_for(g, rng, args.walks, alphabet)
        full = prefix = accepted = 0
        bad = []
        for s in strings:
            ours = ours_longest(g, s)
            theirs = xgrammar_longest(factory, s)
            accepted += ours[1]
            full += ours[1] == theirs[1]
            prefix += ours[0] == theirs[0]
            if ours != theirs:
                bad.append((s, ours, theirs))
        total_bad += len(bad)
        rows.append((path.name, len(strings), accepted, full, prefix, rewrites,
                     f"{compile_ms:.0f}", big_ms))
        for s, ours, theirs in bad[:args.show]:
            print(f"  {path.name}: {s!r}: trellis (viable {ours[0]}, accepts {ours[1]}), "
                  f"xgrammar (viable {theirs[0]}, accepts {theirs[1]})")
    head = ("file", "strings", "accepted", "same accept", "same longest prefix",
            "'\"\"' rewrites", "compile ms (bytes)", "compile+mask ms (SmolLM2)")
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for r in rows:
        print("| " + " | ".join(str(x) for x in r) + " |")
    print(f"disagreements: {total_bad}")
    return 1 if total_bad else 0


if __name__ == "__main__":
    sys.exit(main())
