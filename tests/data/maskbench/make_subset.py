"""Rebuild ``subset.jsonl.gz`` from a MaskBench checkout (see PROVENANCE.md).

    python tests/data/maskbench/make_subset.py /path/to/maskbench [--per-split 12]

Per split, in file order, keeps the first schemas (at most 15 KB of JSON) that
convert under ``strict=True`` and whose instances Lark checks quickly (< 1.5 s
in all); every valid instance must be accepted and every invalid one rejected,
so the subset is a regression test.
"""

from __future__ import annotations

import argparse
import glob
import gzip
import json
import os
import sys
import time
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", ".."))
sys.path.insert(0, os.path.join(HERE, "..", ".."))

import jsonschema  # noqa: E402

from constrain.errors import ConstraintError  # noqa: E402
from constrain.frontends.json_schema import json_schema_to_lark, order_instance  # noqa: E402
from json_schema_oracle import accepts, lark_parser  # noqa: E402
from test_json_schema import _format_checker  # noqa: E402


def usable(row) -> bool:
    schema = row["schema"]
    if len(json.dumps(schema)) > 15_000 or not row["tests"]:
        return False
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            p = lark_parser(json_schema_to_lark(schema))
    except (ConstraintError, RecursionError):
        return False
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    plain, fmt = cls(schema), cls(schema, format_checker=_format_checker())
    t0 = time.time()
    for test in row["tests"]:
        data = test["data"]
        try:
            ok_plain = plain.is_valid(data)
        except Exception:
            return False
        if ok_plain:
            text = json.dumps(order_instance(schema, data), separators=(",", ":"), ensure_ascii=False)
            if fmt.is_valid(data) and not accepts(p, text):
                return False
        else:
            text = json.dumps(data, separators=(",", ":"), ensure_ascii=False)
            if accepts(p, text):
                return False
        if time.time() - t0 > 1.5:
            return False
    return True


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("maskbench")
    ap.add_argument("--per-split", type=int, default=12)
    ap.add_argument("--max-tries", type=int, default=80)
    args = ap.parse_args()
    out = []
    for path in sorted(glob.glob(os.path.join(args.maskbench, "*.jsonl.gz"))):
        kept = tried = 0
        for line in gzip.open(path, "rt"):
            row = json.loads(line)
            tried += 1
            if usable(row):
                out.append({k: row[k] for k in ("id", "split", "schema")}
                           | {"tests": [{"valid": t["valid"], "data": t["data"]} for t in row["tests"]]})
                kept += 1
            if kept >= args.per_split or tried >= args.max_tries:
                break
        print(os.path.basename(path), kept, "of", tried, flush=True)
    with gzip.open(os.path.join(HERE, "subset.jsonl.gz"), "wt") as f:
        for row in out:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    print(len(out), "schemas")


if __name__ == "__main__":
    main()
