"""The official JSON-Schema-Test-Suite (draft 2020-12) through Trellis's compiler.

Prints, per suite file (each is named after a keyword): groups compiled, valid
instances accepted, invalid instances accepted (must be 0); then the refusals
grouped by the keyword their JSON pointer ends in, and every wrong instance.
Instances are serialised compactly, keys in the grammar's order.

Usage::

    python tests/benchmarks/check_json_schema_suite.py [--vocab bytes|smollm2]
        [--files ref,allOf] [--json out.json] [--wrong]

``--vocab bytes`` (default) compiles over a 256-byte vocabulary: the byte-level
language is the same over every vocabulary, and it is fast; ``smollm2`` uses the
default model's tokenizer.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import Counter

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from constrain import Vocabulary  # noqa: E402
from byte_vocab import byte_vocabulary  # noqa: E402
from json_schema_suite import keyword_table, run_suite, totals  # noqa: E402

_KEYWORDS = {
    "$ref", "$dynamicRef", "$anchor", "$dynamicAnchor", "$id", "$defs", "allOf", "anyOf",
    "oneOf", "not", "if", "then", "else", "dependentSchemas", "dependentRequired",
    "prefixItems", "items", "contains", "minContains", "maxContains", "properties",
    "patternProperties", "additionalProperties", "propertyNames", "unevaluatedItems",
    "unevaluatedProperties", "uniqueItems", "format", "pattern", "multipleOf", "enum",
    "const", "type", "required", "minimum", "maximum", "exclusiveMinimum",
    "exclusiveMaximum", "minLength", "maxLength", "minItems", "maxItems",
    "minProperties", "maxProperties", "$vocabulary", "$schema", "contentMediaType",
}


def smollm2_vocab() -> Vocabulary:
    from search.models.smollm2 import load_tokenizer

    return Vocabulary.from_huggingface(load_tokenizer(), name="SmolLM2-135M-Instruct")


def refusal_keyword(r) -> str:
    """The keyword a refusal is about: the last keyword token of its pointer, else
    its error class."""
    if r.refusal and r.refusal.startswith("timeout"):
        return "(timeout)"
    for tok in reversed((r.pointer or "").split("/")):
        if tok in _KEYWORDS:
            return tok
    return "(" + (r.refusal or "?").split(":")[0] + ")"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--vocab", choices=("bytes", "smollm2"), default="bytes")
    ap.add_argument("--files", default="", help="comma-separated suite files (stems)")
    ap.add_argument("--timeout", type=float, default=60.0)
    ap.add_argument("--formats", choices=("annotation", "assert"), default="annotation",
                    help="format keywords: annotations (the suite's default) or asserted")
    ap.add_argument("--json", default="", help="write every group's result here")
    ap.add_argument("--wrong", action="store_true", help="print every wrong instance")
    ap.add_argument("--refusals", action="store_true", help="print every refusal")
    args = ap.parse_args(argv)

    vocab = byte_vocabulary() if args.vocab == "bytes" else smollm2_vocab()
    files = set(filter(None, args.files.split(",")))
    t0 = time.perf_counter()
    results = run_suite(vocab, files or None, args.timeout, formats=args.formats)
    elapsed = time.perf_counter() - t0

    print(f"JSON-Schema-Test-Suite draft 2020-12, vocabulary {vocab.name!r} "
          f"({len(vocab)} tokens), formats as {args.formats}s, {elapsed:.1f} s\n")
    print(f"{'file':<24}{'groups':>7}{'compiled':>9}{'valid ok':>10}{'valid':>7}"
          f"{'inv. ok':>9}{'invalid':>8}")
    for row in keyword_table(results):
        f, g, c, va, vt, ia, it = row
        flag = "  <-- UNSOUND" if ia else ""
        print(f"{f:<24}{g:>7}{c:>9}{va:>10}{vt:>7}{ia:>9}{it:>8}{flag}")
    t = totals(results)
    print(f"{'TOTAL':<24}{t['groups']:>7}{t['compiled']:>9}{t['valid_accepted']:>10}"
          f"{t['valid_total']:>7}{t['invalid_accepted']:>9}{t['invalid_total']:>8}")
    vt = t["valid_total"] or 1
    print(f"\ngroups compiled {t['compiled']}/{t['groups']} "
          f"({100 * t['compiled'] / t['groups']:.1f}%), valid instances of compiled groups "
          f"accepted {t['valid_accepted']}/{t['valid_total']} "
          f"({100 * t['valid_accepted'] / vt:.1f}%), invalid accepted "
          f"{t['invalid_accepted']}/{t['invalid_total']}")

    refusals = Counter(refusal_keyword(r) for r in results if not r.compiled)
    print("\nrefused groups by keyword: " + ", ".join(
        f"{k} {n}" for k, n in refusals.most_common()))
    wrong_kinds = Counter()
    for r in results:
        for kind, desc, text in r.wrong:
            wrong_kinds[(kind, r.file)] += 1
    if wrong_kinds:
        print("wrong instances by file: " + ", ".join(
            f"{f} {n} {kind}" for (kind, f), n in wrong_kinds.most_common()))
    if args.refusals:
        print()
        for r in results:
            if not r.compiled:
                print(f"REFUSED {r.file}: {r.description}: {r.pointer!r}: {r.refusal[:200]}")
    if args.wrong:
        print()
        for r in results:
            for kind, desc, text in r.wrong:
                print(f"{kind.upper()} {r.file}: {r.description} / {desc}: {text[:120]}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump([r.__dict__ for r in results], fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
