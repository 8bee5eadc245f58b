"""MaskBench check of ``constrain.frontends.json_schema.compiler`` with Lark as the parser.

For every split of MaskBench (one ``*.jsonl.gz`` per split), report:

* coverage: schemas that convert under ``strict=True`` (and, for comparison,
  schemas llguidance's JSON-Schema compiler accepts);
* completeness: of the instances ``jsonschema`` accepts, the share the grammar
  accepts, serialised compactly in schema order (:func:`order_instance`);
  ``fcompl%`` counts only instances whose strings also satisfy their ``format``
  (the grammar enforces date-time, date, time, email, uri, uuid, ipv4, ipv6 and
  hostname; jsonschema checks formats only on request), ``compl%`` all;
* soundness: instances ``jsonschema`` rejects (format checking off) that the
  grammar accepts (must be 0).

Lark's Earley parser runs with the ``regex`` module in POSIX (leftmost-longest)
mode: with Python's ``re``, Lark only tries prefixes of the *first* match of a
terminal, which for an alternation like ``1|1[0-9]`` misses ``15``; POSIX mode
makes Lark's dynamic_complete lexer exact (every match length is tried).

Usage::

    nice python tests/benchmarks/check_json_schema_lark.py /path/to/maskbench \\
        [--sample N] [--timeout S] [--splits A,B] [--json out.json]

``--sample N`` parses the instances of at most N schemas per split (evenly
spaced); coverage is always measured on every schema.
"""

from __future__ import annotations

import argparse
import glob
import gzip
import json
import os
import re
import signal
import sys
import time
import warnings

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import jsonschema  # noqa: E402
import lark  # noqa: E402

from constrain.errors import ConstraintError  # noqa: E402
from constrain.frontends.json_schema import json_schema_to_lark, order_instance  # noqa: E402
from constrain.frontends.json_schema.formats import FORMATS  # noqa: E402
from json_schema_oracle import lark_parser  # noqa: E402


class _Timeout(Exception):
    pass


def _alarm(signum, frame):
    raise _Timeout()


def _llg_ok(schema) -> bool:
    try:
        import llguidance
    except ImportError:
        return False
    try:
        g = llguidance.LLMatcher.grammar_from_json_schema(json.dumps(schema))
        return llguidance.LLMatcher.validate_grammar(g) == ""
    except Exception:
        return False


def _format_checker(cls):
    """jsonschema's format checker, with the formats the grammar enforces checked
    by their definitions (jsonschema skips some when optional packages are
    missing)."""
    checker = jsonschema.FormatChecker()
    for name, rx in FORMATS.items():
        compiled = re.compile(rx)
        checker.checks(name)(lambda s, c=compiled: not isinstance(s, str) or c.fullmatch(s) is not None)
    return checker


def _validity(schema, data):
    """(valid without format checking, valid with it), or None if jsonschema
    cannot decide."""
    try:
        cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
        plain = cls(schema).is_valid(data)
        fmt = plain and cls(schema, format_checker=_format_checker(cls)).is_valid(data)
        return plain, fmt
    except Exception:
        return None


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("maskbench", help="folder with the MaskBench *.jsonl.gz files")
    ap.add_argument("--sample", type=int, default=0, help="parse instances of at most N schemas per split")
    ap.add_argument("--timeout", type=float, default=5.0, help="seconds per instance (Lark)")
    ap.add_argument("--splits", default="", help="comma-separated split names")
    ap.add_argument("--no-llguidance", action="store_true")
    ap.add_argument("--json", default="", help="write the figures here")
    ap.add_argument("--show-failures", type=int, default=5)
    args = ap.parse_args(argv)

    signal.signal(signal.SIGALRM, _alarm)
    files = sorted(glob.glob(os.path.join(args.maskbench, "*.jsonl.gz")))
    wanted = set(filter(None, args.splits.split(",")))
    report = {}
    header = (f"{'split':16} {'schemas':>7} {'ours':>6} {'llg':>6} {'parsed':>6} "
              f"{'valid':>6} {'accept':>7} {'compl%':>7} {'fvalid':>6} {'fcompl%':>7} "
              f"{'invalid':>7} {'UNSOUND':>7} {'timeout':>7}")
    print(header, flush=True)
    totals = {}
    for path in files:
        split = os.path.basename(path).split(".")[0]
        if wanted and split not in wanted:
            continue
        rows = [json.loads(line) for line in gzip.open(path, "rt")]
        step = max(1, len(rows) // args.sample) if args.sample else 1
        sampled = set(range(0, len(rows), step)[: args.sample or None])
        st = dict(schemas=len(rows), ours=0, llg=0, parsed=0, valid=0, accept=0, fvalid=0,
                  faccept=0, invalid=0, unsound=0, timeout=0, errors={})
        failures = []
        t0 = time.time()
        for idx, row in enumerate(rows):
            schema = row["schema"]
            if not args.no_llguidance and _llg_ok(schema):
                st["llg"] += 1
            try:
                signal.setitimer(signal.ITIMER_REAL, 30)
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    grammar = json_schema_to_lark(schema, strict=True)
            except ConstraintError as e:
                kind = type(e).__name__ + ": " + getattr(e, "msg", str(e))[:60]
                st["errors"][kind] = st["errors"].get(kind, 0) + 1
                continue
            except _Timeout:
                st["errors"]["conversion timeout"] = st["errors"].get("conversion timeout", 0) + 1
                continue
            except RecursionError:
                st["errors"]["RecursionError"] = st["errors"].get("RecursionError", 0) + 1
                continue
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
            st["ours"] += 1
            if idx not in sampled:
                continue
            try:
                signal.setitimer(signal.ITIMER_REAL, 30)
                parser = lark_parser(grammar)
            except _Timeout:
                st["timeout"] += 1
                continue
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
            st["parsed"] += 1
            for test in row["tests"]:
                data = test["data"]
                v = _validity(schema, data)
                if v is None:
                    continue
                plain, fmt = v
                if plain:
                    try:
                        data = order_instance(schema, data)
                    except Exception:
                        pass
                text = json.dumps(data, separators=(",", ":"), ensure_ascii=False)
                try:
                    signal.setitimer(signal.ITIMER_REAL, args.timeout)
                    parser.parse(text)
                    ok = True
                except _Timeout:
                    st["timeout"] += 1
                    continue
                except lark.exceptions.LarkError:
                    ok = False
                except RecursionError:
                    st["timeout"] += 1
                    continue
                finally:
                    signal.setitimer(signal.ITIMER_REAL, 0)
                if plain:
                    st["valid"] += 1
                    st["accept"] += ok
                    if fmt:
                        st["fvalid"] += 1
                        st["faccept"] += ok
                    if not ok and fmt and len(failures) < args.show_failures:
                        failures.append(("REJECTED VALID", row["id"], text[:300]))
                else:
                    st["invalid"] += 1
                    if ok:
                        st["unsound"] += 1
                        failures.append(("ACCEPTED INVALID", row["id"], text[:300]))
        st["seconds"] = round(time.time() - t0, 1)
        compl = 100.0 * st["accept"] / st["valid"] if st["valid"] else float("nan")
        fcompl = 100.0 * st["faccept"] / st["fvalid"] if st["fvalid"] else float("nan")
        st["completeness"] = compl
        st["format_completeness"] = fcompl
        print(f"{split:16} {st['schemas']:7} {st['ours']:6} {st['llg']:6} {st['parsed']:6} "
              f"{st['valid']:6} {st['accept']:7} {compl:7.2f} {st['fvalid']:6} {fcompl:7.2f} "
              f"{st['invalid']:7} {st['unsound']:7} {st['timeout']:7}", flush=True)
        for f in failures:
            print("   ", *f, flush=True)
        top = sorted(st["errors"].items(), key=lambda kv: -kv[1])[:6]
        for k, c in top:
            print(f"      {c:5}  {k}", flush=True)
        report[split] = st
        for k in ("schemas", "ours", "llg", "parsed", "valid", "accept", "fvalid", "faccept",
                  "invalid", "unsound", "timeout"):
            totals[k] = totals.get(k, 0) + st[k]
    if totals:
        compl = 100.0 * totals["accept"] / max(1, totals["valid"])
        fcompl = 100.0 * totals["faccept"] / max(1, totals["fvalid"])
        print(f"{'TOTAL':16} {totals['schemas']:7} {totals['ours']:6} {totals['llg']:6} "
              f"{totals['parsed']:6} {totals['valid']:6} {totals['accept']:7} {compl:7.2f} "
              f"{totals['fvalid']:6} {fcompl:7.2f} {totals['invalid']:7} {totals['unsound']:7} "
              f"{totals['timeout']:7}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()
