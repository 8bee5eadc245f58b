"""Run the official JSON-Schema-Test-Suite (draft 2020-12, vendored in
``tests/data/json_schema_suite``) through :func:`constrain.compile_json_schema`.

Each test group's schema is compiled; each of its instances is serialised
compactly with its keys in the grammar's order (:func:`constrain.order_instance`)
and walked byte by byte through the compiled constraint (``advance_bytes``, then
``is_accepting``). The suite's own ``valid`` flag is the oracle. An invalid
instance that is accepted is an unsound case; a valid one that is refused, or a
group that does not compile, is incompleteness.

``run_suite`` returns one :class:`GroupResult` per group; ``keyword_table``
groups them by file (the files are named after keywords).
"""

from __future__ import annotations

import json
import signal
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from constrain import compile_json_schema, order_instance
from constrain.errors import ConstraintError
from byte_vocab import accepts

SUITE_DIR = Path(__file__).parent / "data" / "json_schema_suite" / "draft2020-12"
REMOTES_DIR = SUITE_DIR.parent / "remotes"
#: the URI the suite serves its remote documents at
REMOTES_URI = "http://localhost:1234/"


def remotes() -> dict:
    """The suite's remote documents by URI (as its test server would serve them)."""
    out = {}
    for path in sorted(REMOTES_DIR.rglob("*.json")):
        rel = path.relative_to(REMOTES_DIR).as_posix()
        out[REMOTES_URI + rel] = json.loads(path.read_text(encoding="utf-8"))
    return out


@dataclass
class GroupResult:
    """What happened to one test group."""

    file: str
    description: str
    compiled: bool
    #: why it was refused: the error's class and message (``None`` if compiled)
    refusal: str | None = None
    #: the JSON pointer the refusal names
    pointer: str | None = None
    valid_total: int = 0
    valid_accepted: int = 0
    invalid_total: int = 0
    invalid_accepted: int = 0
    #: descriptions of the instances that came out wrong: ("valid refused" |
    #: "invalid accepted", test description, serialised instance)
    wrong: list = field(default_factory=list)
    seconds: float = 0.0


class _Timeout(Exception):
    pass


def _alarm(signum, frame):
    raise _Timeout()


def _canonical_numbers(value):
    """``value`` with integral floats as ints: JSON has one number type, so
    ``1.0`` and ``1`` are the same instance, and the grammar writes the form
    without a fraction (see docs/json_schema.md)."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, list):
        return [_canonical_numbers(v) for v in value]
    if isinstance(value, dict):
        return {k: _canonical_numbers(v) for k, v in value.items()}
    return value


def serialise(schema, instance, resources=None) -> str:
    """The instance as a model would write it under ``schema``: compact, keys in
    the grammar's order, non-ASCII characters unescaped, integral numbers
    without a fraction."""
    return json.dumps(order_instance(schema, _canonical_numbers(instance), resources=resources),
                      separators=(",", ":"), ensure_ascii=False)


def load_groups(files=None):
    """``(file stem, group)`` for every group of the suite (or of ``files``)."""
    paths = sorted(SUITE_DIR.glob("*.json"))
    for path in paths:
        if files and path.stem not in files:
            continue
        for group in json.loads(path.read_text(encoding="utf-8")):
            yield path.stem, group


def run_group(stem: str, group: dict, vocab, timeout: float = 60.0, resources=None,
              **options) -> GroupResult:
    """Compile one group's schema (``$ref`` into ``resources``, the suite's
    remote documents by default) and check each of its instances."""
    if resources is None:
        resources = remotes()
    res = GroupResult(stem, group["description"], compiled=False)
    schema = group["schema"]
    t0 = time.perf_counter()
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, timeout)
    try:
        try:
            constraint = compile_json_schema(schema, vocab, resources=resources, **options)
        except ConstraintError as e:
            res.refusal = f"{type(e).__name__}: {e}"
            res.pointer = getattr(e, "pointer", None)
            return res
        res.compiled = True
        for test in group["tests"]:
            text = serialise(schema, test["data"], resources)
            ok = accepts(constraint, text)
            if test["valid"]:
                res.valid_total += 1
                res.valid_accepted += ok
                if not ok:
                    res.wrong.append(("valid refused", test["description"], text))
            else:
                res.invalid_total += 1
                res.invalid_accepted += ok
                if ok:
                    res.wrong.append(("invalid accepted", test["description"], text))
    except _Timeout:
        res.refusal = f"timeout after {timeout:g} s"
        res.compiled = False
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
        res.seconds = time.perf_counter() - t0
    return res


def run_suite(vocab, files=None, timeout: float = 60.0, **options) -> list[GroupResult]:
    """Every group of the suite (or of ``files``, stems of the suite's files)."""
    docs = remotes()
    return [run_group(stem, group, vocab, timeout, docs, **options)
            for stem, group in load_groups(files)]


def totals(results) -> dict:
    """The suite's headline counts."""
    t = Counter()
    for r in results:
        t["groups"] += 1
        t["compiled"] += r.compiled
        t["valid_total"] += r.valid_total
        t["valid_accepted"] += r.valid_accepted
        t["invalid_total"] += r.invalid_total
        t["invalid_accepted"] += r.invalid_accepted
    return dict(t)


def keyword_table(results) -> list[tuple]:
    """Rows ``(file, groups, compiled, valid accepted, valid, invalid accepted,
    invalid)`` per suite file, sorted by file name."""
    rows: dict = {}
    for r in results:
        row = rows.setdefault(r.file, [0, 0, 0, 0, 0, 0])
        row[0] += 1
        row[1] += r.compiled
        row[2] += r.valid_accepted
        row[3] += r.valid_total
        row[4] += r.invalid_accepted
        row[5] += r.invalid_total
    return [(f, *v) for f, v in sorted(rows.items())]
