"""MaskBench benchmark: JSON Schema coverage, compile time and per-token mask time,
Trellis side by side with xgrammar and llguidance.

    python tests/benchmarks/bench_maskbench.py [--data DIR] [--vocab smollm2|o200k|all]
        [--splits A,B] [--limit N] [--engines trellis,xgrammar,llguidance] [--timeout S]
        [--json OUT] [--markdown]

Data: MaskBench (``{"id","split","schema","tests":[{"valid","data"}]}`` per gzipped
JSON line, one file per split; default ``../shared/data/maskbench`` from the
repository root). Per schema and engine, on one thread, in a worker process (so
that a hang or a memory blow-up is cut off and recorded, not fatal):

* coverage: the schema compiles without error within ``--timeout`` seconds (and
  ``--max-mem`` GiB of resident memory);
* compile time (p50 / p99 / max over the schemas the engine compiled);
* mask time: every instance that ``jsonschema`` itself finds valid is serialized
  compactly with object properties in the schema's ``properties`` order
  (:func:`serialize`), tokenized with the vocabulary's real tokenizer and walked:
  before every token and once after the last one the mask fill is timed (each
  instance once, no repeats; later instances of a schema revisit some of the
  states of those before), then the engine advances with the token. Per-token
  p50 / p99 / max over all timed fills, and how many valid instances the engine
  accepted whole (EOS allowed at the end);
* three regimes, which rank engines differently: the first valid instance's
  walk right after the compile is the *first walk* (its advance calls timed
  too); the *request* is the compile plus every fill of that walk (a new
  schema per request, as in tool calling); after the other instances, that
  instance is walked again: the *warm* fills, every state seen before. Per
  split over the schemas that every engine compiled and whose first instance
  each accepted: request p50 over the schemas, first-walk fill p50 / p99, warm
  p50, advance p50; their geometric mean over the splits (a pooled percentile
  lets the long instances decide alone), the pooled figures, and Trellis's
  ratios to its peers (reports written before have no warm pass: the regime
  table is skipped).

See tests/benchmarks/README.md for the methodology.
"""

from __future__ import annotations

import maskbench_peers  # first: through bench_regex, one thread everywhere before any engine is loaded
from maskbench_peers import ENGINES, SHORT, load_vocab, make_engines

import argparse  # noqa: E402
import gc  # noqa: E402
import gzip  # noqa: E402
import json  # noqa: E402
import multiprocessing  # noqa: E402
import os  # noqa: E402
import random  # noqa: E402
import re  # noqa: E402
import signal  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
import traceback  # noqa: E402
from collections import Counter  # noqa: E402
from dataclasses import dataclass, field  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

import harness  # noqa: E402
from bench_regex import prepare_engines, vocab_names  # noqa: E402
from harness import fmt, log  # noqa: E402

DEFAULT_DATA = harness.ROOT.parent / "shared" / "data" / "maskbench"
SPLITS = (
    "Glaiveai2K", "Github_trivial", "Github_easy", "Github_medium", "Github_hard", "Github_ultra", "Snowplow",
    "Kubernetes", "WashingtonPost", "JsonSchemaStore", "BFCL", "JME", "Handwritten", "Synthesized", "MCPspec",
)


# ----------------------------------------------------------------------------------
# Data
# ----------------------------------------------------------------------------------


def available_splits(data_dir: Path) -> list[str]:
    have = {p.name[: -len(".jsonl.gz")] for p in data_dir.glob("*.jsonl.gz")}
    return [s for s in SPLITS if s in have] + sorted(have - set(SPLITS))


def load_split(data_dir: Path, split: str, limit: int = 0, seed: int = 0, where: str | None = None) -> list[dict]:
    """The schemas of one split; with ``where``, only those whose schema's JSON text
    matches that regex (``re.search``); with ``limit``, a deterministic sample of
    that many (``random.Random(f"{seed}:{split}")``), in file order."""
    with gzip.open(data_dir / f"{split}.jsonl.gz", "rt", encoding="utf-8") as f:
        recs = [json.loads(line) for line in f if line.strip()]
    if where:
        rx = re.compile(where)
        recs = [r for r in recs if rx.search(json.dumps(r["schema"]))]
    if limit and limit < len(recs):
        keep = sorted(random.Random(f"{seed}:{split}").sample(range(len(recs)), limit))
        recs = [recs[i] for i in keep]
    return recs


def make_validator(schema, formats: bool = True):
    """A jsonschema validator for ``schema``, checking every format jsonschema knows
    (``FormatChecker()``, whatever the draft; "time" only for draft 3): the draft its
    ``$schema`` names; without one, Draft 7 when some ``items`` is an array (the
    pre-2020 tuple form), Draft 2020-12 otherwise."""
    import jsonschema
    from jsonschema import validators

    if isinstance(schema, dict) and "$schema" in schema:
        cls = validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    elif _has_items_array(schema):
        cls = jsonschema.Draft7Validator
    else:
        cls = jsonschema.Draft202012Validator
    if not formats:
        return cls(schema)
    checker = jsonschema.FormatChecker()
    if cls is not jsonschema.Draft3Validator:
        # FormatChecker() checks "time" as draft 3 does (HH:MM:SS, strptime);
        # later drafts mean RFC 3339 full-time (12:00:00.5-13:42), which only
        # rfc3339-validator checks: valid times were reported as unsound outputs
        checker.checkers.pop("time", None)
    return cls(schema, format_checker=checker)


def _has_items_array(node, depth=0) -> bool:
    if depth > 100:
        return False
    if isinstance(node, dict):
        if isinstance(node.get("items"), list):
            return True
        return any(_has_items_array(v, depth + 1) for v in node.values())
    if isinstance(node, list):
        return any(_has_items_array(v, depth + 1) for v in node)
    return False


def _resolve(schema, root, limit: int = 64):
    """Follow local ``$ref`` (``#`` JSON pointers) from ``schema``; other references
    are left as they are."""
    seen = 0
    while isinstance(schema, dict) and isinstance(schema.get("$ref"), str) and seen < limit:
        ref = schema["$ref"]
        if not ref.startswith("#"):
            return schema
        node = root
        try:
            for part in ref[1:].split("/")[1:] if ref != "#" else []:
                part = part.replace("~1", "/").replace("~0", "~")
                from urllib.parse import unquote

                part = unquote(part)
                node = node[int(part)] if isinstance(node, list) else node[part]
        except (KeyError, IndexError, ValueError, TypeError):
            return schema
        schema = node
        seen += 1
    return schema


def _branch_valid(validator, branch, data) -> bool:
    if validator is None:
        return False
    try:
        return bool(validator.evolve(schema=branch).is_valid(data))
    except Exception:
        return False


def _object_props(schema, root, data: dict, depth=0, validator=None) -> tuple[dict, list]:
    """(property name -> subschema in schema order, [(pattern, subschema)]) for an
    object: ``properties`` of the schema, then of its ``allOf`` members, then of
    the first ``anyOf``/``oneOf`` branch that ``data`` validates against (with the
    root schema's validator), else the branch whose properties cover most of
    ``data``'s keys."""
    schema = _resolve(schema, root)
    props: dict = {}
    patterns: list = []
    if not isinstance(schema, dict) or depth > 32:
        return props, patterns
    for k, v in (schema.get("properties") or {}).items() if isinstance(schema.get("properties"), dict) else ():
        props.setdefault(k, v)
    if isinstance(schema.get("patternProperties"), dict):
        patterns.extend(schema["patternProperties"].items())
    for sub in schema.get("allOf") or () if isinstance(schema.get("allOf"), list) else ():
        p2, pat2 = _object_props(sub, root, data, depth + 1, validator)
        for k, v in p2.items():
            props.setdefault(k, v)
        patterns.extend(pat2)
    for key in ("anyOf", "oneOf"):
        branches = schema.get(key)
        if not isinstance(branches, list) or not branches:
            continue
        best, best_score = None, (-1, -1)
        for b in branches:
            p2, pat2 = _object_props(b, root, data, depth + 1, validator)
            score = (_branch_valid(validator, b, data), sum(1 for k in data if k in p2))
            if score > best_score:
                best, best_score = (p2, pat2), score
        if best:
            for k, v in best[0].items():
                props.setdefault(k, v)
            patterns.extend(best[1])
    return props, patterns


def order_value(data, schema, root, depth: int = 0, validator=None):
    """``data`` with object keys reordered: the schema's ``properties`` order first
    (recursively, where the schema gives the property's subschema), then the other
    keys in their original order. ``validator`` (the root schema's) picks the
    ``anyOf``/``oneOf`` branch an object belongs to."""
    if depth > 200:
        return data
    schema = _resolve(schema, root)
    if isinstance(data, dict):
        props, patterns = _object_props(schema, root, data, 0, validator)
        keys = [k for k in props if k in data] + [k for k in data if k not in props]
        out = {}
        addl = schema.get("additionalProperties") if isinstance(schema, dict) else None
        for k in keys:
            sub = props.get(k)
            if sub is None:
                for pat, s in patterns:
                    try:
                        if re.search(pat, k):
                            sub = s
                            break
                    except re.error:
                        pass
            if sub is None and isinstance(addl, dict):
                sub = addl
            out[k] = order_value(data[k], sub, root, depth + 1, validator) if sub is not None else data[k]
        return out
    if isinstance(data, list):
        s = schema if isinstance(schema, dict) else {}
        prefix, rest = [], None
        if isinstance(s.get("prefixItems"), list):
            prefix, rest = s["prefixItems"], s.get("items")
        elif isinstance(s.get("items"), list):
            prefix, rest = s["items"], s.get("additionalItems")
        else:
            rest = s.get("items")
            if rest is None:
                for sub in s.get("allOf") or () if isinstance(s.get("allOf"), list) else ():
                    sub = _resolve(sub, root)
                    if isinstance(sub, dict) and isinstance(sub.get("items"), dict):
                        rest = sub["items"]
                        break
        out = []
        for i, x in enumerate(data):
            sub = prefix[i] if i < len(prefix) else rest
            out.append(order_value(x, sub, root, depth + 1, validator) if isinstance(sub, dict) else x)
        return out
    return data


def serialize(data, schema, validator=None) -> str:
    """Compact JSON (``separators=(",", ":")``, ``ensure_ascii=False``), object
    properties in schema order."""
    return json.dumps(order_value(data, schema, schema, 0, validator), separators=(",", ":"), ensure_ascii=False)


def formats_used(node, depth=0, out=None) -> set:
    """Every string value of a ``format`` keyword in the schema."""
    out = set() if out is None else out
    if depth > 200:
        return out
    if isinstance(node, dict):
        if isinstance(node.get("format"), str):
            out.add(node["format"])
        for v in node.values():
            formats_used(v, depth + 1, out)
    elif isinstance(node, list):
        for v in node:
            formats_used(v, depth + 1, out)
    return out


@dataclass
class Instance:
    index: int  # position in the record's "tests"
    text: str
    ids: list
    label: bool  # the dataset's "valid"


@dataclass
class SchemaCase:
    id: str
    split: str
    schema: object
    valid: list = field(default_factory=list)  # Instance, jsonschema-valid
    invalid: list = field(default_factory=list)  # Instance, jsonschema-invalid
    unknown: int = 0  # jsonschema could not decide (bad schema, unresolvable $ref...)
    label_disagree: int = 0  # dataset label != jsonschema
    untokenizable: int = 0  # the tokenizer's ids do not spell the text back
    validator_error: str = ""
    unchecked_formats: list = field(default_factory=list)  # formats the schema uses that jsonschema does not check


def prepare_case(rec: dict, spec) -> SchemaCase:
    case = SchemaCase(rec["id"], rec["split"], rec["schema"])
    try:
        validator = make_validator(rec["schema"])
        checked = set(validator.format_checker.checkers)
        case.unchecked_formats = sorted(formats_used(rec["schema"]) - checked)
    except Exception as e:
        case.validator_error = f"{type(e).__name__}: {str(e)[:200]}"
        validator = None
    for i, t in enumerate(rec.get("tests") or ()):
        data = t.get("data")
        if validator is None:
            case.unknown += 1
            continue
        try:
            ok = bool(validator.is_valid(data))
        except Exception as e:
            case.unknown += 1
            case.validator_error = case.validator_error or f"{type(e).__name__}: {str(e)[:200]}"
            continue
        if ok != bool(t.get("valid")):
            case.label_disagree += 1
        try:
            text = serialize(data, rec["schema"], validator)
        except (TypeError, ValueError, RecursionError):
            case.unknown += 1
            continue
        ids = [int(x) for x in spec.encode(text)]
        if b"".join(spec.tokens[x] or b"\0" for x in ids) != text.encode("utf-8"):
            case.untokenizable += 1
            continue
        (case.valid if ok else case.invalid).append(Instance(i, text, ids, bool(t.get("valid"))))
    return case


# ----------------------------------------------------------------------------------
# Worker processes: one per engine, forked after the vocabulary objects are built;
# the parent cuts a job off at its deadline or memory limit and records it.
# ----------------------------------------------------------------------------------


def _worker_main(engine, job, conn) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    harness.torch_one_thread()
    try:
        engine.warm_up()
    except Exception:
        traceback.print_exc()
    conn.send(("ready",))
    while True:
        try:
            payload = conn.recv()
        except EOFError:
            return
        if payload is None:
            return
        try:
            job(engine, payload, conn.send)
        except Exception as e:  # the job reports engine errors itself; this is a harness bug
            conn.send(("job_error", f"{type(e).__name__}: {e}", traceback.format_exc()))


def _rss_bytes(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _cpu_seconds(pid: int) -> float:
    """CPU time (user + system, every thread) a process has used so far."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / _TICK
    except (OSError, IndexError, ValueError):
        return 0.0


class Worker:
    """A forked process holding one prepared engine, running ``job(engine,
    payload, send)`` for each payload; restarted (with its warm-up) after it was
    killed. Deadlines are in CPU seconds of the worker (a loaded machine does not
    make a job time out), with a wall-clock backstop of ``wall_factor`` times
    the CPU limit."""

    wall_factor = 10.0

    def __init__(self, engine, job, max_mem_bytes: int, ready_timeout: float = 600.0):
        self.engine = engine
        self.job = job
        self.max_mem = max_mem_bytes
        self.ready_timeout = ready_timeout
        self.proc = None
        self.conn = None
        self.restarts = 0
        self.peak_rss = 0

    def _start(self):
        ctx = multiprocessing.get_context("fork")
        parent, child = ctx.Pipe()
        self.proc = ctx.Process(target=_worker_main, args=(self.engine, self.job, child), daemon=True)
        self.proc.start()
        child.close()
        self.conn = parent
        msg = self._recv(self.ready_timeout, cpu=False)
        if msg[0] != "ready":
            raise RuntimeError(f"{self.engine.name} worker did not start: {msg}")

    def _kill(self):
        if self.proc is not None and self.proc.is_alive():
            os.kill(self.proc.pid, signal.SIGKILL)
        if self.proc is not None:
            self.proc.join(5)
        if self.conn is not None:
            self.conn.close()
        self.proc = self.conn = None
        self.restarts += 1

    def _recv(self, timeout: float, cpu: bool = True):
        """The next message, or a failure once the worker has used ``timeout`` CPU
        seconds (``cpu``; else wall seconds) since the call."""
        wall_limit = timeout * (self.wall_factor if cpu else 1.0)
        deadline = time.monotonic() + wall_limit
        cpu0 = _cpu_seconds(self.proc.pid) if cpu else 0.0
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                self._kill()
                return ("timeout", f"{wall_limit:.0f} s wall clock" if cpu else f"{timeout:.0f} s")
            if cpu:
                used = _cpu_seconds(self.proc.pid) - cpu0
                if used > timeout:
                    self._kill()
                    return ("timeout", f"{timeout:.0f} s CPU")
            try:
                if self.conn.poll(min(0.25, left)):
                    return self.conn.recv()
            except (EOFError, OSError):
                code = self.proc.exitcode if self.proc else None
                self._kill()
                return ("crash", f"worker died (exit code {code})")
            if not self.proc.is_alive():
                code = self.proc.exitcode
                self._kill()
                return ("crash", f"worker died (exit code {code})")
            rss = _rss_bytes(self.proc.pid)
            self.peak_rss = max(self.peak_rss, rss)
            if rss > self.max_mem:
                self._kill()
                return ("oom", f"resident memory {rss / 2**30:.1f} GiB > {self.max_mem / 2**30:.1f} GiB")

    def run(self, payload, timeouts: list[float], final=("compile_error", "job_error")) -> list:
        """Send ``payload``; read one message per entry of ``timeouts`` (each with
        its own deadline). Stops early at a message whose kind is in ``final`` or at a
        failure (``timeout``/``crash``/``oom``, after which the worker is gone)."""
        if self.proc is None:
            self._start()
        self.conn.send(payload)
        out = []
        for t in timeouts:
            msg = self._recv(t)
            out.append(msg)
            if msg[0] in final or msg[0] in ("timeout", "crash", "oom"):
                break
        return out

    def close(self):
        if self.proc is not None and self.proc.is_alive():
            try:
                self.conn.send(None)
                self.proc.join(5)
            except (OSError, BrokenPipeError):
                pass
        if self.proc is not None and self.proc.is_alive():
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.join(5)
        self.proc = None


class StderrCapture:
    """Collects what native code writes to file descriptor 2 inside the ``with``
    block (xgrammar logs the schema features it approximates or ignores there)."""

    def __init__(self):
        import tempfile

        self.file = tempfile.TemporaryFile()
        self.text = ""

    def __enter__(self):
        sys.stderr.flush()
        self.file.seek(0)
        self.file.truncate()
        self.saved = os.dup(2)
        os.dup2(self.file.fileno(), 2)
        return self

    def __exit__(self, *exc):
        sys.stderr.flush()
        os.dup2(self.saved, 2)
        os.close(self.saved)
        self.file.seek(0)
        self.text = self.file.read().decode("utf-8", "replace")
        return False


_CAPTURE = None


def compile_warnings(eng, handle, captured: str) -> list[str]:
    """Warnings of one compile: native stderr lines (their ``Warning: ...`` part) and
    the engine's own (llguidance ``get_grammar_warnings``)."""
    out = []
    for line in captured.splitlines():
        if "Warning" in line or "warning" in line:
            out.append(line[line.find("Warning"):] if "Warning" in line else line.strip())
    getw = getattr(eng, "grammar_warnings", None)
    if getw is not None:
        try:
            out.extend(getw(handle))
        except Exception:
            pass
    return out


def bench_job(eng, payload, send) -> None:
    """In the worker: compile (timed, gc off), report; walk every instance in
    order, then the first one again, and report. The first instance's walk is
    the first walk after the compile (its advance calls timed too); the walk
    again over it is the warm pass, every state seen before."""
    global _CAPTURE
    schema, seqs = payload
    if _CAPTURE is None:
        _CAPTURE = StderrCapture()
    gc.collect()
    gc.disable()
    try:
        with _CAPTURE:
            g, ns, cpu = eng.compile_timed(schema)
    except Exception as e:
        gc.enable()
        send(("compile_error", f"{type(e).__name__}: {e}"))
        return
    gc.enable()
    send(("compiled", ns, cpu, compile_warnings(eng, g, _CAPTURE.text)))
    mask = eng.new_mask()
    out = []
    gc.collect()
    gc.disable()
    try:
        for k, ids in enumerate(seqs):
            out.append(_walk_result(eng, g, ids, mask, timed_advance=k == 0))
        warm = _walk_result(eng, g, seqs[0], mask, timed_advance=False) if seqs else None
    finally:
        gc.enable()
    send(("walked", out, warm))


def _walk_result(eng, g, ids, mask, timed_advance: bool) -> tuple:
    """One walk of ``ids`` as the worker reports it: ``(refused_at, eos_ok,
    inconsistent, fill wall ns, fill CPU ns, error, advance wall ns, advance CPU ns)``
    (the advance lists empty unless ``timed_advance``)."""
    mns: list = []
    mcpu: list = []
    ans: list = []
    acpu: list = []
    adv = (ans, acpu) if timed_advance else (None, None)
    try:
        refused, eos_ok, bad = eng.walk(g, ids, mask, mns, mcpu, *adv)
        return refused, bool(eos_ok), bad, mns, mcpu, None, ans, acpu
    except Exception as e:
        return None, False, 0, mns, mcpu, f"{type(e).__name__}: {e}", ans, acpu


# ----------------------------------------------------------------------------------
# Running
# ----------------------------------------------------------------------------------


def _to_us(ns: list, overhead: int) -> list:
    """Timed nanoseconds as microseconds (3 decimals), the timer's own cost subtracted."""
    return [round(float(x), 3) for x in np.maximum(np.asarray(ns, dtype=np.float64) - overhead, 0.0) / 1e3]


def run_case(case: SchemaCase, workers: dict, args, overhead: int, cpu_overhead: int, spec) -> dict:
    res = {
        "id": case.id, "split": case.split, "schema_bytes": len(json.dumps(case.schema, separators=(",", ":"))),
        "valid": len(case.valid), "invalid": len(case.invalid),
        "unknown": case.unknown, "label_disagree": case.label_disagree, "untokenizable": case.untokenizable,
        "validator_error": case.validator_error, "unchecked_formats": case.unchecked_formats, "engines": {},
    }
    seqs = [inst.ids for inst in case.valid]
    for name, w in workers.items():
        r: dict = {}
        msgs = w.run((case.schema, seqs), [args.timeout, args.walk_timeout])
        kind = msgs[0][0]
        if kind == "compiled":
            r["status"] = "ok"
            r["compile_ms"] = msgs[0][1] / 1e6
            r["compile_cpu_ms"] = msgs[0][2] / 1e6
            if msgs[0][3]:
                r["warnings"] = sorted(set(msgs[0][3]))
        elif kind == "compile_error":
            r["status"] = "error"
            r["error"] = msgs[0][1]
        elif kind in ("timeout", "crash", "oom"):
            r["status"] = kind
            r["error"] = f"compile: {kind}: {msgs[0][1]}"
        else:
            r["status"] = "harness_error"
            r["error"] = str(msgs[0][1:])
        if r["status"] == "ok":
            if len(msgs) < 2:
                r["walk_error"] = "no walk result"
            elif msgs[1][0] == "walked":
                insts = []
                for inst, (refused, eos_ok, bad, mns, mcpu, err, ans, acpu) in zip(case.valid, msgs[1][1]):
                    d = {
                        "index": inst.index, "tokens": len(inst.ids), "accepted": refused is None and eos_ok and not err,
                        "refused_at": refused, "eos_ok": eos_ok, "inconsistent": bad, "error": err,
                        "mask_us": _to_us(mns, overhead), "mask_cpu_us": _to_us(mcpu, cpu_overhead),
                    }
                    if ans:
                        d["advance_us"] = _to_us(ans, overhead)
                        d["advance_cpu_us"] = _to_us(acpu, cpu_overhead)
                    if refused is not None:
                        before = b"".join(spec.tokens[t] for t in inst.ids[:refused])
                        d["refused_after"] = before[-80:].decode("utf-8", "replace")
                        d["refused_token"] = repr(spec.tokens[inst.ids[refused]])
                    insts.append(d)
                r["instances"] = insts
                if msgs[1][2] is not None:
                    refused, eos_ok, _, mns, mcpu, err, _, _ = msgs[1][2]
                    r["warm"] = {"accepted": refused is None and eos_ok and not err, "error": err,
                                 "mask_us": _to_us(mns, overhead), "mask_cpu_us": _to_us(mcpu, cpu_overhead)}
            else:
                r["walk_error"] = f"{msgs[1][0]}: {msgs[1][1]}"
                r["instances"] = []
        res["engines"][name] = r
    return res


def pct(a, q):
    return float(np.percentile(a, q)) if len(a) else None


#: which clock the tables use ("wall" or "cpu"), set from --clock
CLOCK = "wall"
#: a fill whose wall time exceeds its CPU time by this much was preempted
PREEMPT_US = 1000.0


def _keys(clock: str | None = None):
    return ("compile_ms", "mask_us") if (clock or CLOCK) == "wall" else ("compile_cpu_ms", "mask_cpu_us")


def split_stats(results: list, engine: str) -> dict:
    n = len(results)
    statuses = Counter()
    comp = []
    mask = []
    acc = valid = refused = inconsistent = walk_err = warned = preempted = 0
    ck, mk = _keys()
    for r in results:
        e = r["engines"].get(engine)
        if e is None:
            continue
        statuses[e["status"]] += 1
        if e["status"] != "ok":
            continue
        comp.append(e[ck])
        warned += bool(e.get("warnings"))
        valid += r["valid"]
        if e.get("walk_error"):
            walk_err += 1
        for inst in e.get("instances", ()):
            mask.extend(inst[mk])
            if inst.get("mask_cpu_us"):
                w = np.asarray(inst["mask_us"])
                c = np.asarray(inst["mask_cpu_us"])
                preempted += int(np.count_nonzero(w - c > PREEMPT_US))
            acc += inst["accepted"]
            refused += inst["refused_at"] is not None
            inconsistent += inst["inconsistent"]
    return {
        "schemas": n, "compiled": statuses.get("ok", 0), "statuses": dict(statuses),
        "compile_ms": {"p50": pct(comp, 50), "p99": pct(comp, 99), "max": max(comp) if comp else None},
        "mask_us": {"p50": pct(mask, 50), "p99": pct(mask, 99), "max": max(mask) if mask else None, "n": len(mask)},
        "accepted": acc, "valid": valid, "refused": refused, "inconsistent": inconsistent, "walk_errors": walk_err,
        "compiled_with_warnings": warned, "preempted_fills": preempted,
    }


def common_ratios(results: list, a: str, b: str) -> dict:
    """Trellis (a) vs a peer (b) on the same work: compile p50 over the schemas both
    compiled; mask p50 / p99 over the fills of the instances both accepted."""
    ca, cb, ma, mb = [], [], [], []
    ck, mk = _keys()
    for r in results:
        ea, eb = r["engines"].get(a), r["engines"].get(b)
        if not ea or not eb or ea["status"] != "ok" or eb["status"] != "ok":
            continue
        ca.append(ea[ck])
        cb.append(eb[ck])
        for ia, ib in zip(ea.get("instances", ()), eb.get("instances", ())):
            if ia["accepted"] and ib["accepted"]:
                ma.extend(ia[mk])
                mb.extend(ib[mk])

    def ratio(x, y):
        return x / y if x is not None and y else None

    return {
        "schemas": len(ca), "fills": len(ma),
        "compile_p50": ratio(pct(ca, 50), pct(cb, 50)),
        "mask_p50": ratio(pct(ma, 50), pct(mb, 50)),
        "mask_p99": ratio(pct(ma, 99), pct(mb, 99)),
    }


#: the figures of a regime table row, per engine
REGIME_KEYS = ("request_p50_ms", "first_p50_us", "first_p99_us", "warm_p50_us", "advance_p50_us")


def has_regimes(results: list) -> bool:
    """Whether the results hold the warm pass (reports written before the regimes
    were measured do not)."""
    return any("warm" in e for r in results for e in r["engines"].values())


def regime_common(results: list, engines: list) -> list:
    """The results that every engine of ``engines`` compiled and whose first valid
    instance each accepted, on its first walk and on the warm pass."""
    def ok(e):
        return (e is not None and e["status"] == "ok" and bool(e.get("instances")) and e["instances"][0]["accepted"]
                and bool((e.get("warm") or {}).get("accepted")))

    return [r for r in results if all(ok(r["engines"].get(e)) for e in engines)]


def regime_figures(results: list, engine: str, clock: str | None = None) -> dict:
    """One engine's regimes over ``results`` (each with a first walk and a warm
    pass): request ms p50 over the schemas (compile + the sum of the first walk's
    fills), p50 / p99 over the first walks' fills, p50 over the warm fills and
    over the first walks' advance calls."""
    ck, mk = _keys(clock)
    ak = "advance_us" if mk == "mask_us" else "advance_cpu_us"
    req, first, warm, adv = [], [], [], []
    for r in results:
        e = r["engines"][engine]
        walk = e["instances"][0]
        req.append(e[ck] + sum(walk[mk]) / 1e3)
        first.extend(walk[mk])
        warm.extend(e["warm"][mk])
        adv.extend(walk.get(ak, ()))
    return {"schemas": len(req), "request_p50_ms": pct(req, 50), "first_p50_us": pct(first, 50),
            "first_p99_us": pct(first, 99), "warm_p50_us": pct(warm, 50), "advance_p50_us": pct(adv, 50)}


def regime_summary(by_split: dict, engines: list, clock: str | None = None) -> dict:
    """The three regimes per split (``by_split``: split -> results, no total) over
    the schemas all ``engines`` share (:func:`regime_common`), their geometric mean
    over the splits that have such schemas, the pooled figures over all of them,
    and Trellis's ratios to its peers (``None`` where an engine is missing)."""
    common = {split: regime_common(rs, engines) for split, rs in by_split.items()}
    splits = {split: {e: regime_figures(rs, e, clock) for e in engines} for split, rs in common.items() if rs}
    geo = {e: {k: harness.geomean(splits[sp][e][k] for sp in splits) for k in REGIME_KEYS} for e in engines}
    pooled = {e: regime_figures([r for rs in common.values() for r in rs], e, clock) for e in engines}

    def ratio(x, y):
        return x / y if x is not None and y else None

    def geo_ratio(k, peer):
        return ratio(geo["trellis"][k], geo[peer][k]) if "trellis" in geo and peer in geo else None

    ratios = {"first_p50_vs_xgrammar": geo_ratio("first_p50_us", "xgrammar"),
              "first_p50_vs_xgrammar_worst": None, "request_vs_faster_peer": None,
              "pooled_first_p99_vs_llguidance": None, "warm_p50_vs_xgrammar": geo_ratio("warm_p50_us", "xgrammar")}
    if "trellis" in engines and "xgrammar" in engines and splits:
        per = {sp: ratio(f["trellis"]["first_p50_us"], f["xgrammar"]["first_p50_us"]) for sp, f in splits.items()}
        per = {sp: x for sp, x in per.items() if x is not None}
        if per:
            worst = max(per, key=per.get)
            ratios["first_p50_vs_xgrammar_worst"] = [worst, per[worst]]
    peers = [e for e in engines if e != "trellis" and geo[e]["request_p50_ms"] is not None]
    if "trellis" in engines and peers:
        faster = min(peers, key=lambda e: geo[e]["request_p50_ms"])
        ratios["request_vs_faster_peer"] = [faster, geo_ratio("request_p50_ms", faster)]
    if "trellis" in engines and "llguidance" in engines:
        ratios["pooled_first_p99_vs_llguidance"] = ratio(pooled["trellis"]["first_p99_us"],
                                                          pooled["llguidance"]["first_p99_us"])
    return {"engines": list(engines), "clock": clock or CLOCK, "schemas": {sp: len(rs) for sp, rs in common.items()},
            "splits": splits, "geomean": geo, "pooled": pooled, "ratios": ratios}


# ----------------------------------------------------------------------------------
# Reporting
# ----------------------------------------------------------------------------------


def _r(x) -> str:
    return "-" if x is None else f"{x:.2f}"


def _table(header: list, rows: list, markdown: bool) -> str:
    if markdown:
        out = ["| " + " | ".join(header) + " |", "|" + "|".join(" --- " for _ in header) + "|"]
        out += ["| " + " | ".join(r) + " |" for r in rows]
        return "\n".join(out)
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(header)]
    line = lambda cells: " | ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths)))
    out = [line(header), "-+-".join("-" * w for w in widths)]
    out += [line(r) for r in rows]
    return "\n".join(out)


def format_main(by_split: dict, engines: list, markdown: bool) -> str:
    tag = "/".join(SHORT[e] for e in engines)
    header = ["split", "schemas", f"compiled {tag}", f"compile p50 ms {tag}", f"compile p99 ms {tag}",
              f"compile max ms {tag}", f"mask p50 µs {tag}", f"mask p99 µs {tag}", f"mask max µs {tag}",
              f"accepted/valid {tag}"]
    rows = []
    for split, results in by_split.items():
        st = {e: split_stats(results, e) for e in engines}
        j = lambda f: " / ".join(f(st[e]) for e in engines)
        rows.append([
            split, str(len(results)),
            j(lambda s: str(s["compiled"])),
            j(lambda s: fmt(s["compile_ms"]["p50"])), j(lambda s: fmt(s["compile_ms"]["p99"])),
            j(lambda s: fmt(s["compile_ms"]["max"])),
            j(lambda s: fmt(s["mask_us"]["p50"])), j(lambda s: fmt(s["mask_us"]["p99"])),
            j(lambda s: fmt(s["mask_us"]["max"])),
            j(lambda s: f"{s['accepted']}/{s['valid']}"),
        ])
    return _table(header, rows, markdown)


def format_ratios(by_split: dict, markdown: bool) -> str:
    header = ["split", "T/L compile p50 (schemas)", "T/X mask p50 (fills)", "T/L mask p99 (fills)"]
    rows = []
    for split, results in by_split.items():
        rl = common_ratios(results, "trellis", "llguidance")
        rx = common_ratios(results, "trellis", "xgrammar")
        rows.append([
            split,
            f"{_r(rl['compile_p50'])} ({rl['schemas']})",
            f"{_r(rx['mask_p50'])} ({rx['fills']})",
            f"{_r(rl['mask_p99'])} ({rl['fills']})",
        ])
    return _table(header, rows, markdown)


def format_regimes(summary: dict, markdown: bool) -> str:
    """The regime table of :func:`regime_summary` (rows: splits, geomean, pooled;
    cells ``T / X / L``), then Trellis's ratios to its peers, one line each."""
    engines = summary["engines"]
    tag = "/".join(SHORT[e] for e in engines)
    header = ["split", "schemas", f"request p50 ms {tag}", f"first-walk p50 µs {tag}", f"first-walk p99 µs {tag}",
              f"warm p50 µs {tag}", f"advance p50 µs {tag}"]
    geo_schemas = sum(summary["schemas"][sp] for sp in summary["splits"])
    rows_in = [(sp, n, summary["splits"].get(sp)) for sp, n in summary["schemas"].items()]
    rows_in.append((f"geomean ({len(summary['splits'])} splits)", geo_schemas, summary["geomean"]))
    rows_in.append(("pooled", geo_schemas, summary["pooled"]))
    rows = [[name, str(n)] + [" / ".join(fmt(f[e][k]) for e in engines) if f else "-" for k in REGIME_KEYS]
            for name, n, f in rows_in]
    out = [_table(header, rows, markdown)]
    r = summary["ratios"]
    lines = []
    if r["first_p50_vs_xgrammar"] is not None:
        worst = r["first_p50_vs_xgrammar_worst"]
        lines.append(f"first-walk p50 Trellis / XGrammar: {_r(r['first_p50_vs_xgrammar'])} on the geomean (bar <= 1)"
                     + (f", worst split {worst[0]} {_r(worst[1])} (bar <= 2)" if worst else ""))
    if r["request_vs_faster_peer"] is not None:
        peer, x = r["request_vs_faster_peer"]
        lines.append(f"request Trellis / the faster peer's on the geomean ({peer}): {_r(x)} (bar <= 0.5)")
    if r["pooled_first_p99_vs_llguidance"] is not None:
        lines.append(f"pooled first-walk p99 Trellis / llguidance: {_r(r['pooled_first_p99_vs_llguidance'])} (bar <= 1)")
    if r["warm_p50_vs_xgrammar"] is not None:
        lines.append(f"warm p50 Trellis / XGrammar on the geomean: {_r(r['warm_p50_vs_xgrammar'])}")
    if lines:
        out.append("\n".join(("* " if markdown else "  ") + x for x in lines))
    return "\n\n".join(out)


def _all(by_split: dict) -> list:
    return [r for s, rs in by_split.items() if s != "total" for r in rs]


def format_status(by_split: dict, engines: list, markdown: bool) -> str:
    header = ["engine", "compiled", "with warnings", "error", "timeout", "oom", "crash", "valid refused", "mask/advance disagree",
              "walk errors", "preempted fills"]
    rows = []
    allr = _all(by_split)
    for e in engines:
        s = split_stats(allr, e)
        st = s["statuses"]
        rows.append([e, str(st.get("ok", 0)), str(s["compiled_with_warnings"]), str(st.get("error", 0) + st.get("harness_error", 0)),
                     str(st.get("timeout", 0)), str(st.get("oom", 0)), str(st.get("crash", 0)),
                     str(s["valid"] - s["accepted"]), str(s["inconsistent"]), str(s["walk_errors"]),
                     f"{s['preempted_fills']}/{s['mask_us']['n']}"])
    return _table(header, rows, markdown)


def most_common_lines(counts: Counter, example: dict, show: int) -> list[str]:
    """The ``show`` most common keys of ``counts``, one line each: the count, the
    key and an example schema id."""
    return [f"    {c:5d}  {k}  (e.g. {example[k]})" for k, c in counts.most_common(show)]


def format_findings(by_split: dict, engines: list, show: int) -> str:
    out = []
    allr = _all(by_split)
    for e in engines:
        errs = Counter()
        example = {}
        for r in allr:
            x = r["engines"].get(e)
            if x and x["status"] != "ok":
                key = re.sub(r"\d+", "N", (x.get("error") or x["status"]).splitlines()[0] if (x.get("error") or "").strip() else x["status"])[:110]
                errs[key] += 1
                example.setdefault(key, r["id"])
        if errs:
            out.append(f"{e}: {sum(errs.values())} schemas not compiled; most common errors:")
            out += most_common_lines(errs, example, show)
        warns = Counter()
        for r in allr:
            x = r["engines"].get(e)
            for w in (x or {}).get("warnings", ()):
                k = re.sub(r"\d+", "N", w)[:110]
                warns[k] += 1
                example.setdefault(k, r["id"])
        if warns:
            out.append(f"{e}: compiled with warnings (schemas per warning):")
            out += most_common_lines(warns, example, show)
        n = 0
        for r in allr:
            x = r["engines"].get(e)
            if not x or x["status"] != "ok":
                continue
            for inst in x.get("instances", ()):
                if inst["accepted"]:
                    continue
                if n < show:
                    if inst["error"]:
                        why = f"error {inst['error']}"
                    elif inst["refused_at"] is not None:
                        why = (f"refused token {inst['refused_at']} of {inst['tokens']}, "
                               f"{inst.get('refused_token')} after ...{inst.get('refused_after')!r}")
                    else:
                        why = "EOS not allowed at the end"
                    if r.get("unchecked_formats"):
                        why += f" (formats jsonschema does not check here: {', '.join(r['unchecked_formats'])})"
                    out.append(f"{e}: valid instance {r['id']}#{inst['index']} not accepted: {why}")
                n += 1
        if n > show:
            out.append(f"{e}: ... {n - show} more valid instances not accepted (see --json)")
    return "\n".join(out) if out else "(none)"


def data_summary(by_split: dict) -> str:
    allr = _all(by_split)
    tot = Counter()
    for r in allr:
        for k in ("valid", "invalid", "unknown", "label_disagree", "untokenizable"):
            tot[k] += r[k]
    return (f"{len(allr)} schemas; instances by jsonschema: {tot['valid']} valid (walked), {tot['invalid']} invalid, "
            f"{tot['unknown']} undecided; {tot['label_disagree']} where the dataset's label differs from jsonschema; "
            f"{tot['untokenizable']} whose tokens do not spell the text back (skipped); "
            f"{sum(1 for r in allr if r.get('unchecked_formats'))} schemas use a format jsonschema does not check "
            f"here (valid/invalid may be wrong for them)")


# ----------------------------------------------------------------------------------
# Main
# ----------------------------------------------------------------------------------


def add_common_args(ap) -> None:
    ap.add_argument("--data", default=str(DEFAULT_DATA), help="MaskBench folder (*.jsonl.gz)")
    ap.add_argument("--vocab", choices=["smollm2", "o200k", "all"], default="smollm2")
    ap.add_argument("--splits", default="", help="comma-separated split names (default: all)")
    ap.add_argument("--limit", type=int, default=0, help="schemas per split, a deterministic sample (0: all)")
    ap.add_argument("--seed", type=int, default=0, help="sampling seed")
    ap.add_argument("--timeout", type=float, default=30.0,
                    help="CPU seconds per schema compile (wall-clock backstop: 10x)")
    ap.add_argument("--max-mem", type=float, default=6.0, help="GiB of resident memory per engine worker")
    ap.add_argument("--json", default="", help="write all results here")


def iter_cases(args, splits: list, spec, where: str | None = None, label: str = ""):
    """``(split, SchemaCase)`` for every schema of ``splits`` that ``args`` select
    (``--data``, ``--limit``, ``--seed``; ``where`` as in :func:`load_split`), each
    prepared for ``spec`` just before it is yielded; progress goes to the log
    (``label`` before each split's line)."""
    t_start = time.monotonic()
    for split in splits:
        recs = load_split(Path(args.data), split, args.limit, args.seed, where)
        log(f"  {label}{split}: {len(recs)} schemas")
        for k, rec in enumerate(recs):
            yield split, prepare_case(rec, spec)
            if (k + 1) % 25 == 0:
                log(f"    {k + 1}/{len(recs)} ({time.monotonic() - t_start:.0f} s)")


def selected_splits(args) -> list[str]:
    have = available_splits(Path(args.data))
    if not have:
        raise SystemExit(f"no *.jsonl.gz in {args.data}")
    if not args.splits:
        return have
    want = [s.strip() for s in args.splits.split(",") if s.strip()]
    bad = [s for s in want if s not in have]
    if bad:
        raise SystemExit(f"unknown split(s) {bad}; have {have}")
    return want


def group_by_split(results: list) -> dict:
    """Split name -> its results, in the order the splits first appear."""
    by_split: dict = {}
    for r in results:
        by_split.setdefault(r["split"], []).append(r)
    return by_split


def print_vocab_report(vname: str, vres: dict, live: list, skipped: dict, args) -> None:
    by_split = group_by_split(vres["results"])
    by_split_t = dict(by_split)
    if len(by_split) > 1:
        by_split_t["total"] = [r for rs in by_split.values() for r in rs]
    md = args.markdown
    h = "### " if md else "=== "
    print(f"\n{h}{vname}: {vres['size']} ids; engines {', '.join(f'{SHORT[e]} = {e}' for e in live)}"
          + (f"; trellis n/a ({skipped['trellis']})" if "trellis" in skipped else "")
          + f"; times: {'wall clock' if CLOCK == 'wall' else 'process CPU'}" + (" ===" if not md else ""))
    print(data_summary(by_split))
    print("vocabulary build ms (not in compile time): "
          + ", ".join(f"{n} {ms:.1f}" for n, ms in vres["prepare_ms"].items()))
    for n, notes in vres.get("notes", {}).items():
        print(f"  {n}: " + ", ".join(f"{k} {v:.1f}" for k, v in notes.items()))
    if vres.get("worker_peak_rss_mib"):
        print("worker peak resident MiB (sampled every 0.25 s): "
              + ", ".join(f"{n} {m:.0f}" for n, m in vres["worker_peak_rss_mib"].items())
              + "; workers killed: " + ", ".join(f"{n} {k}" for n, k in vres.get("worker_restarts", {}).items()))
    print()
    print(format_main(by_split_t, live, md))
    print()
    print(format_status(by_split_t, live, md))
    if "trellis" in live and len(live) > 1:
        print("\nTrellis vs peers on common work (the bar: each ratio <= 1): compile p50 over the schemas both "
              "compiled; mask p50/p99 over the fills of the valid instances both accepted")
        print(format_ratios(by_split_t, md))
    print()
    if has_regimes(vres["results"]):
        print(f"Regimes, over the schemas that {'/'.join(SHORT[e] for e in live)} all compiled and whose first valid "
              "instance each accepted: request = compile + every fill of the first walk (the first valid instance "
              "walked right after the compile), p50 over schemas; first-walk and warm (that instance walked "
              "again) fills, and the first walk's advance calls: p50 / p99 over the split's fills; geomean: "
              "geometric mean over the splits of each figure; pooled: all those schemas together")
        print(format_regimes(regime_summary(by_split, live), md))
    else:
        print("regimes: not in this report (written before the warm pass was recorded); regime table skipped")
    print("\nfindings:")
    print(format_findings(by_split_t, live, args.show))


def write_plots(report: dict, args) -> None:
    """The ``--plot DIR`` pictures of ``report``'s first vocabulary, on the tables'
    clock (``--clock``)."""
    if not args.plot:
        return
    import plots

    out = Path(args.plot)
    for fn, name in ((plots.maskbench_mask_time, "maskbench_mask_time.png"),
                     (plots.maskbench_compile_vs_size, "maskbench_compile_vs_size.png")):
        log(f"wrote {fn(report, out / name, clock=args.clock)}")


def main(argv=None) -> int:
    global CLOCK
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_common_args(ap)
    ap.add_argument("--engines", default=",".join(ENGINES), help="comma-separated subset of " + ",".join(ENGINES))
    ap.add_argument("--walk-timeout", type=float, default=120.0, help="CPU seconds for all walks of one schema")
    ap.add_argument("--markdown", action="store_true", help="print the tables as markdown")
    ap.add_argument("--show", type=int, default=10, help="findings listed per engine")
    ap.add_argument("--clock", choices=["wall", "cpu"], default="wall",
                    help="times in the tables: wall clock (default) or process CPU time (immune to preemption "
                         "on a loaded machine); --json keeps both")
    ap.add_argument("--from-json", default="", help="print the tables of an earlier --json run, run nothing")
    ap.add_argument("--plot", default="", metavar="DIR",
                    help="also write maskbench_mask_time.png (mask time per split per engine) and "
                         "maskbench_compile_vs_size.png (compile time against schema size) into DIR "
                         "(needs the plots extra: matplotlib); works with --from-json")
    ap.add_argument("--xgrammar-strict", action="store_true",
                    help="xgrammar strict_mode=True (its default: no properties beyond those listed); "
                         "off by default, for JSON Schema semantics")
    ap.add_argument("--no-gc-flush", action="store_true", help="no gc.collect() right before each timed compile")
    ap.add_argument("--trellis-keep-shared", action="store_true",
                    help="keep Trellis's caches shared across grammars (lexer-state walks, terminal automata, "
                         "lexer products) between schemas (by default they are dropped before each compile, "
                         "so every schema starts cold as for the peers)")
    ap.add_argument("--trellis-bitmask", choices=["numpy", "torch"], default="numpy",
                    help="bitmask Trellis fills: a numpy int32 array (default: the same kind the harness gives "
                         "llguidance) or a torch tensor (constrain.allocate_bitmask's default; the first fill "
                         "of each fresh tensor pays torch's .numpy() on cold caches)")
    args = ap.parse_args(argv)
    CLOCK = args.clock
    maskbench_peers.TrellisJSON.backend = args.trellis_bitmask
    maskbench_peers.TrellisJSON.clear_shared = not args.trellis_keep_shared
    if args.from_json:
        with open(args.from_json) as f:
            report = json.load(f)
        for vname, vres in report["vocabs"].items():
            live = [n for n in ENGINES if n in vres["prepare_ms"]]
            print_vocab_report(vname, vres, live, report.get("skipped", {}), args)
        print("\nenvironment: " + json.dumps(report.get("environment")))
        print("engine options: " + json.dumps(report.get("options")))
        write_plots(report, args)
        return 0
    harness.GC_FLUSH = not args.no_gc_flush
    maskbench_peers.XGrammarJSON.strict_mode = args.xgrammar_strict
    harness.torch_one_thread()

    splits = selected_splits(args)
    wanted = [e.strip() for e in args.engines.split(",") if e.strip()]
    engines, skipped = make_engines(wanted)
    if "trellis" in wanted and "trellis" in skipped:
        log("trellis: n/a (" + skipped["trellis"] + ")")
    overhead = harness.timer_overhead_ns()
    cpu_overhead = harness.cpu_timer_overhead_ns()
    env = harness.environment(engines)
    report = {"environment": env, "timer_overhead_ns": overhead, "cpu_timer_overhead_ns": cpu_overhead,
              "args": vars(args), "skipped": skipped,
              "options": {n: e.options() for n, e in engines.items()}, "vocabs": {}}
    log(f"timer overhead {overhead} ns wall, {cpu_overhead} ns CPU (subtracted); engines: "
        f"{', '.join(engines) or 'none'}; splits: {len(splits)}")

    for vname in vocab_names(args.vocab):
        spec = load_vocab(vname)
        log(f"[{vname}] {spec.size} ids, EOS {spec.eos_id}, {int(spec.text_ids.sum())} text tokens")
        vres: dict = {"size": spec.size, "prepare_ms": {}, "notes": {}}
        workers = {n: Worker(eng, bench_job, int(args.max_mem * 2**30))
                   for n, eng in prepare_engines(engines, spec, vres, "notes").items()}
        live = [n for n in ENGINES if n in workers]
        results = []
        try:
            for _, case in iter_cases(args, splits, spec):
                results.append(run_case(case, workers, args, overhead, cpu_overhead, spec))
        finally:
            for w in workers.values():
                w.close()
        vres["results"] = results
        vres["worker_restarts"] = {n: w.restarts for n, w in workers.items()}
        vres["worker_peak_rss_mib"] = {n: w.peak_rss / 2**20 for n, w in workers.items()}
        vres["regimes"] = {clock: regime_summary(group_by_split(results), live, clock) for clock in ("wall", "cpu")}
        report["vocabs"][vname] = vres
        print_vocab_report(vname, vres, live, skipped, args)
        del spec
        gc.collect()

    env["loadavg_end"] = [round(x, 2) for x in os.getloadavg()]
    print("\nenvironment: " + json.dumps(env))
    print("engine options: " + json.dumps(report["options"]))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, default=str)
        log(f"wrote {args.json}")
    write_plots(report, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
