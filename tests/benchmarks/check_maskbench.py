"""Correctness check of Trellis's JSON Schema constraints on MaskBench.

    python tests/benchmarks/check_maskbench.py [--data DIR] [--vocab smollm2|o200k|all]
        [--splits A,B] [--limit N] [--walks 10] [--seed 0] [--timeout S] [--json OUT]
        [--where REGEX]

For every schema that ``constrain.compile_json_schema(schema, vocab)`` compiles
(strict=True, the default), with ``jsonschema`` (format checking on) as the oracle:

(a) soundness on the data: every instance that ``jsonschema`` rejects, serialized
    compactly with properties in schema order and tokenized by the vocabulary's
    real tokenizer (as in bench_maskbench), must be rejected by the token walk
    (some token refused, or the end not accepting); where the grammar has
    ``matches(text)``, its byte-level verdict is checked too;
(b) soundness by sampling: ``--walks`` random walks per schema, each token drawn
    uniformly from ``grammar.allowed_token_ids(state)``, until EOS or 2,000 tokens;
    every output that ended with EOS must parse as JSON and validate. A walk that
    reaches a state with no allowed token is "stuck" (a dead end: unsound too); an
    allowed token that ``advance`` refuses, or EOS allowed where ``is_accepting`` is
    false, is an inconsistency;
(c) completeness: the share of ``jsonschema``-valid instances the token walk accepts.

Each schema runs in a worker process (a compile past ``--timeout`` or a check past
``--check-timeout`` is cut off and recorded). A summary per split, then the
failures (schema id, instance) for debugging.
"""

from __future__ import annotations

import bench_maskbench as bm  # first: through bench_regex, one thread everywhere
from maskbench_peers import load_vocab, make_engines

import argparse  # noqa: E402
import gc  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import random  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from collections import Counter  # noqa: E402

import harness  # noqa: E402

MAX_WALK = 2000
# JSON integers have no length limit: a uniform walk writes thousands of digits
# where the schema bounds nothing, and Python's json.loads refuses more than
# 4,300 of them (ValueError) by default, which read as "not JSON"
sys.set_int_max_str_digits(0)


def check_job(eng, payload, send) -> None:
    """In the worker: compile, then (c) valid instances, (a) invalid ones, (b) walks."""
    schema, valid, invalid, walks, seed = payload
    try:
        t0 = time.perf_counter_ns()
        grammar = eng.compile(schema, eng.vocab)
        ns = time.perf_counter_ns() - t0
    except Exception as e:
        send(("compile_error", f"{type(e).__name__}: {e}"))
        return
    send(("compiled", ns))
    eos = set(int(x) for x in eng.vocab.eos_token_ids) | {eng.spec.eos_id}
    matches = getattr(grammar, "matches", None)

    def walk(ids):
        """(verdict, step): accepted / refused at step / not accepting at the end / error."""
        try:
            state = grammar.initial_state()
            for j, t in enumerate(ids):
                state = grammar.advance(state, t)
                if state is None:
                    return "refused", j
            return ("accepted" if grammar.is_accepting(state) else "not_accepting"), len(ids)
        except Exception as e:
            return f"error: {type(e).__name__}: {e}", None

    def bytes_verdict(text):
        if matches is None:
            return None
        try:
            return bool(matches(text))
        except Exception as e:
            return f"error: {type(e).__name__}: {e}"

    out_valid = []
    for ids, text, alt in valid:
        v = walk(ids)
        # rejected: does Trellis accept the same value in its own member order?
        alt_v = walk(alt)[0] if v[0] != "accepted" and alt is not None else None
        out_valid.append((*v, bytes_verdict(text), alt_v))
    out_invalid = [(*walk(ids), bytes_verdict(text)) for ids, text in invalid]
    rng = random.Random(seed)
    out_walks = []
    for _ in range(walks):
        toks: list = []
        status = "truncated"
        detail = ""
        try:
            state = grammar.initial_state()
            while len(toks) < MAX_WALK:
                allowed = grammar.allowed_token_ids(state)
                if len(allowed) == 0:
                    status = "stuck"
                    break
                t = int(allowed[rng.randrange(len(allowed))])
                if t in eos:
                    if not grammar.is_accepting(state):
                        status, detail = "inconsistent", f"EOS {t} allowed but is_accepting is false"
                    else:
                        status = "completed"
                    break
                nxt = grammar.advance(state, t)
                if nxt is None:
                    status, detail = "inconsistent", f"token {t} allowed by the mask, refused by advance"
                    toks.append(t)
                    break
                toks.append(t)
                state = nxt
        except Exception as e:
            status, detail = "error", f"{type(e).__name__}: {e}"
        out_walks.append((status, toks, detail))
    send(("checked", out_valid, out_invalid, out_walks))


def _alt_ids(case, inst, spec):
    """The ids of the instance serialized in Trellis's own member order
    (``constrain.frontends.json_schema.compiler.order_instance``), when that differs from ours."""
    try:
        from constrain.frontends.json_schema import order_instance
    except ImportError:
        return None
    try:
        value = json.loads(inst.text)
        text = json.dumps(order_instance(case.schema, value), separators=(",", ":"), ensure_ascii=False)
    except Exception:
        return None
    if text == inst.text:
        return None
    return [int(x) for x in spec.encode(text)]


def _text(spec, toks) -> bytes:
    return b"".join(spec.tokens[t] or b"" for t in toks)


def run_case(case, worker, spec, args) -> dict:
    res = {"id": case.id, "split": case.split, "valid": len(case.valid), "invalid": len(case.invalid),
           "unknown": case.unknown, "untokenizable": case.untokenizable, "failures": []}
    payload = (
        case.schema,
        [(i.ids, i.text, _alt_ids(case, i, spec)) for i in case.valid],
        [(i.ids, i.text) for i in case.invalid],
        args.walks,
        f"{args.seed}:{case.id}",
    )
    msgs = worker.run(payload, [args.timeout, args.check_timeout])
    kind = msgs[0][0]
    if kind != "compiled":
        res["status"] = "error" if kind == "compile_error" else kind
        res["error"] = str(msgs[0][1])
        return res
    res["status"] = "ok"
    res["compile_ms"] = msgs[0][1] / 1e6
    if len(msgs) < 2 or msgs[1][0] != "checked":
        res["check_error"] = f"{msgs[1][0]}: {msgs[1][1]}" if len(msgs) > 1 else "no result"
        res["failures"].append({"kind": "check_error", "detail": res["check_error"]})
        return res
    _, out_valid, out_invalid, out_walks = msgs[1]
    fails = res["failures"]
    # (c) completeness
    acc = 0
    bytes_disagree = 0
    order_only = 0
    for inst, (verdict, step, bv, alt_v) in zip(case.valid, out_valid):
        ok = verdict == "accepted"
        acc += ok
        if alt_v == "accepted":
            order_only += 1
        if bv is not None and bv is not True:
            bytes_disagree += 1
            fails.append({"kind": "matches() rejects a valid instance", "instance": inst.index, "text": inst.text,
                          "detail": str(bv)})
        if not ok:
            kind = ("valid instance rejected (accepted in order_instance's member order)" if alt_v == "accepted"
                    else "valid instance rejected")
            fmt = (f"; formats jsonschema does not check here: {', '.join(case.unchecked_formats)}"
                   if case.unchecked_formats else "")
            fails.append({"kind": kind, "instance": inst.index, "text": inst.text,
                          "detail": f"{verdict} at token {step} of {len(inst.ids)}{fmt}"
                          + (f" (prefix {_text(spec, inst.ids[:step])[-60:]!r}, token {spec.tokens[inst.ids[step]]!r})"
                             if verdict == "refused" else "")})
    res["accepted"] = acc
    res["accepted_in_trellis_order"] = order_only
    # (a) soundness on invalid instances
    unsound = 0
    nofmt: list = []

    def only_format(value) -> bool:
        # valid with no format checked: what failed is a format, which the
        # compile may have left as an annotation (it warns when it does)
        if not nofmt:
            nofmt.append(bm.make_validator(case.schema, formats=False))
        try:
            return nofmt[0].is_valid(value)
        except Exception:
            return False

    for inst, (verdict, step, bv) in zip(case.invalid, out_invalid):
        if verdict == "accepted":
            unsound += 1
            kind = ("UNSOUND (format only): invalid instance accepted"
                    if only_format(json.loads(inst.text)) else "UNSOUND: invalid instance accepted")
            err = ""
            try:
                err = next(iter(bm.make_validator(case.schema).iter_errors(json.loads(inst.text)))).message[:200]
            except Exception:
                pass
            fails.append({"kind": kind, "instance": inst.index, "text": inst.text, "detail": err})
        elif verdict.startswith("error"):
            fails.append({"kind": "walk error", "instance": inst.index, "text": inst.text, "detail": verdict})
        if bv is True:
            bytes_disagree += 1
            fails.append({"kind": "UNSOUND: matches() accepts an invalid instance", "instance": inst.index,
                          "text": inst.text})
    res["invalid_accepted"] = unsound
    res["matches_disagree"] = bytes_disagree
    # (b) random walks
    validator = bm.make_validator(case.schema)
    wc = Counter()
    for status, toks, detail in out_walks:
        wc[status] += 1
        if status == "completed":
            raw = _text(spec, toks)
            try:
                value = json.loads(raw.decode("utf-8"))
            except (UnicodeDecodeError, ValueError) as e:
                wc["invalid"] += 1
                fails.append({"kind": "UNSOUND: walk output is not JSON", "text": raw.decode("utf-8", "replace"),
                              "detail": f"{type(e).__name__}: {e}"})
                continue
            try:
                errs = list(validator.iter_errors(value))
            except Exception as e:
                wc["undecided"] += 1
                fails.append({"kind": "walk output: jsonschema error", "text": raw.decode("utf-8", "replace"),
                              "detail": f"{type(e).__name__}: {e}"})
                continue
            if errs:
                wc["invalid"] += 1
                fails.append({"kind": "UNSOUND (format only): walk output fails jsonschema"
                              if only_format(value) else "UNSOUND: walk output fails jsonschema",
                              "text": raw.decode("utf-8", "replace"), "detail": errs[0].message[:300]})
            else:
                wc["valid"] += 1
        elif status in ("stuck", "inconsistent", "error"):
            fails.append({"kind": f"walk {status}", "text": _text(spec, toks).decode("utf-8", "replace")[-300:],
                          "detail": detail})
    res["walks"] = dict(wc)
    return res


def summarize(results: list) -> dict:
    s = Counter()
    for r in results:
        s["schemas"] += 1
        s["compiled"] += r["status"] == "ok"
        s[f"status_{r['status']}"] += 1
        if r["status"] != "ok":
            continue
        s["valid"] += r["valid"]
        s["invalid"] += r["invalid"]
        s["accepted"] += r.get("accepted", 0)
        s["accepted_in_trellis_order"] += r.get("accepted_in_trellis_order", 0)
        s["invalid_accepted"] += r.get("invalid_accepted", 0)
        s["matches_disagree"] += r.get("matches_disagree", 0)
        s["check_errors"] += bool(r.get("check_error"))
        for k, v in r.get("walks", {}).items():
            s[f"walks_{k}"] += v
    return dict(s)


def format_summary(by_split: dict, markdown: bool) -> str:
    header = ["split", "compiled/schemas", "(a) invalid rejected", "(b) walks: completed", "valid", "invalid",
              "truncated", "stuck", "inconsistent", "(c) valid accepted", "%", "+ in Trellis order"]
    rows = []
    for split, results in by_split.items():
        s = summarize(results)
        g = lambda k: s.get(k, 0)  # noqa: E731
        rows.append([
            split, f"{g('compiled')}/{g('schemas')}",
            f"{g('invalid') - g('invalid_accepted')}/{g('invalid')}",
            str(g("walks_completed")), str(g("walks_valid")), str(g("walks_invalid")), str(g("walks_truncated")),
            str(g("walks_stuck")), str(g("walks_inconsistent") + g("walks_error")),
            f"{g('accepted')}/{g('valid')}",
            f"{100 * g('accepted') / g('valid'):.1f}" if g("valid") else "-",
            str(g("accepted_in_trellis_order")),
        ])
    return bm._table(header, rows, markdown)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    bm.add_common_args(ap)
    ap.add_argument("--walks", type=int, default=10, help="random walks per compiled schema")
    ap.add_argument("--check-timeout", type=float, default=300.0, help="CPU seconds for all checks of one schema")
    ap.add_argument("--show", type=int, default=40, help="failures listed")
    ap.add_argument("--markdown", action="store_true")
    ap.add_argument("--where", default=None,
                    help="only the schemas whose JSON text matches this regex (searched "
                         "over the whole split; --limit then samples among them), e.g. "
                         "'\"multipleOf\": [0-9]*\\.[0-9]*[1-9]'")
    args = ap.parse_args(argv)
    harness.torch_one_thread()
    splits = bm.selected_splits(args)
    engines, skipped = make_engines(["trellis"])
    if "trellis" not in engines:
        print(f"trellis: n/a ({skipped.get('trellis')})")
        return 2
    eng = engines["trellis"]
    report = {"args": vars(args), "vocabs": {}}
    rc = 0
    for vname in bm.vocab_names(args.vocab):
        spec = load_vocab(vname)
        eng.prepare(spec)
        if not eng.vocab_mismatch["ok"]:
            bm.log(f"WARNING trellis vocabulary differs from the shared token table: {eng.vocab_mismatch}")
        worker = bm.Worker(eng, check_job, int(args.max_mem * 2**30))
        by_split: dict = {split: [] for split in splits}
        try:
            for split, case in bm.iter_cases(args, splits, spec, args.where, f"[{vname}] "):
                by_split[split].append(run_case(case, worker, spec, args))
        finally:
            worker.close()
        allr = [r for rs in by_split.values() for r in rs]
        table = dict(by_split)
        if len(by_split) > 1:
            table["total"] = allr
        print(f"\n=== {vname}: Trellis compile_json_schema (strict=True) on MaskBench, --walks {args.walks} ===")
        print(format_summary(table, args.markdown))
        tot = summarize(allr)
        st = Counter(r["status"] for r in allr)
        print(f"not compiled: {dict((k, v) for k, v in st.items() if k != 'ok')}")
        errs = Counter()
        ex = {}
        for r in allr:
            if r["status"] != "ok":
                key = (r.get("error") or r["status"]).splitlines()[0][:120] if (r.get("error") or "").strip() else r["status"]
                errs[key] += 1
                ex.setdefault(key, r["id"])
        for line in bm.most_common_lines(errs, ex, 15):
            print(line)
        kinds = Counter(f["kind"] for r in allr for f in r["failures"])
        print(f"failures by kind: {dict(kinds) or '{}'}")
        n = 0
        listed = [(r["id"], f) for r in allr for f in r["failures"] if f["kind"].startswith("UNSOUND")]
        listed += [(r["id"], f) for r in allr for f in r["failures"] if not f["kind"].startswith("UNSOUND")]
        for sid, f in listed[: args.show]:
            inst = f"#{f['instance']}" if "instance" in f else ""
            text = f.get("text", "")
            text = text if len(text) <= 300 else text[:300] + f"... ({len(text)} chars)"
            print(f"  {sid}{inst}: {f['kind']}" + (f" [{f['detail']}]" if f.get("detail") else "") + (f": {text}" if text else ""))
            n += 1
        if len(listed) > n:
            print(f"  ... {len(listed) - n} more (see --json)")
        if tot.get("invalid_accepted") or tot.get("walks_invalid") or tot.get("walks_stuck") or tot.get("walks_inconsistent"):
            rc = 1
        report["vocabs"][vname] = {"summary": {s: summarize(rs) for s, rs in table.items()}, "results": allr,
                                   "restarts": worker.restarts}
        gc.collect()
    print(f"\nloadavg {os.getloadavg()}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, default=str)
    return rc


if __name__ == "__main__":
    sys.exit(main())
