"""What a serving engine's request asks for, as a Trellis constraint: the
request specs and the compiled-constraint cache that Trellis's engine
integrations share (vLLM's two routes, :mod:`constrain.engines.vllm`; SGLang's
backend, :mod:`constrain.engines.sglang`).

A request spec is a dict with exactly one constraint key::

    {"json_schema": {...} | "<JSON text>"}   # optional: "whitespace", "strict"
    {"json_object": true}                    # any JSON object
    {"regex": "<Python re pattern>"}         # full match
    {"grammar": "<Lark text>"}               # optional: "start"
    {"choice": ["yes", "no", ...]}           # exactly one of the strings
    {"structural_tag": {...} | "<JSON text>"}  # optional: "whitespace", "strict"

:func:`parse_spec` checks its shape (a :class:`SpecError` names the key);
:class:`ConstraintSource` compiles it over one model's vocabulary, keeping the
compiled constraints of recent specs (an LRU bounded in entries), so that the
many requests of a server that share a schema compile it once. This module
imports no engine.
"""

from __future__ import annotations

import json
import os
import re
import threading
from collections import OrderedDict
from concurrent.futures import Future
from dataclasses import dataclass, field

from constrain.cache import check_budget, held_bytes
from constrain.compiler import DEFAULT_CACHE_BYTES, Compiler
from constrain.errors import ConstraintError, SchemaError, SchemaTooComplexError
from constrain.frontends.json_schema.document import read_json_text
from constrain.limits import Limits
from constrain.protocol import Constraint
from constrain.vocab.vocabulary import Vocabulary

#: the key of a request's extra arguments that holds its Trellis spec (vLLM:
#: ``extra_args`` offline, ``vllm_xargs`` over REST)
EXTRA_ARGS_KEY = "trellis"
#: the constraint keys of a spec, one of which it must have
KINDS = ("json_schema", "json_object", "regex", "grammar", "choice", "structural_tag")
#: the optional keys each kind takes beside its own
_OPTIONS = {"json_schema": {"whitespace", "strict"}, "json_object": {"whitespace"},
            "regex": set(), "grammar": {"start"}, "choice": set(),
            "structural_tag": {"whitespace", "strict"}}
#: environment variables read by every process of an engine (the front end
#: that validates requests and the workers that mask logits see the same),
#: whichever engine: vLLM, SGLang
LIMITS_ENV = "TRELLIS_LIMITS"
CACHE_BYTES_ENV = "TRELLIS_CACHE_BYTES"
#: their first names, from when vLLM was the one engine: read where the names
#: above are unset, so that deployments configured so keep their budgets
LEGACY_ENV = {LIMITS_ENV: "TRELLIS_VLLM_LIMITS", CACHE_BYTES_ENV: "TRELLIS_VLLM_CACHE_BYTES"}
#: compiled constraints kept per vocabulary (the compiler's own caches, bounded
#: in bytes, hold what compiles share; this holds whole constraints)
DEFAULT_CACHE_ENTRIES = 256
#: the bytes those constraints may hold in all (their mask caches grow as
#: requests use them: see ConstraintSource)
DEFAULT_CONSTRAINT_BYTES = 1 << 30
#: the most recently asked-for constraints a compile measures again (~1.5 us
#: each)
_REMEASURED = 16


class SpecError(ConstraintError):
    """A request's Trellis spec is malformed: not a dict, no or several
    constraint keys, an unknown option, a value of the wrong type. The message
    names the key."""


@dataclass(frozen=True)
class Spec:
    """One constraint request, normalised: ``kind`` (one of :data:`KINDS`),
    ``source`` (the pattern, the Lark text, or JSON text for schemas and
    choices) and ``options`` (sorted ``(name, value)`` pairs). Equal specs
    compile to the same constraint: it is the cache key."""

    kind: str
    source: str
    options: tuple = ()
    _hash: int = field(init=False, repr=False, compare=False)

    def __post_init__(self):
        # the cache's look-ups hash a spec several times a compile; the
        # generated hash hashed its fields each time (~0.3 us, ~30 us of a
        # compile's cache work)
        object.__setattr__(self, "_hash", hash((self.kind, self.source, self.options)))

    def __hash__(self) -> int:
        return self._hash

    def __reduce__(self):
        # string hashes differ between processes: another process hashes anew
        return (Spec, (self.kind, self.source, self.options))

    def describe(self) -> str:
        """A short description for error messages and logs."""
        text = self.source if len(self.source) <= 60 else self.source[:57] + "..."
        return f"{self.kind} {text!r}"


def parse_spec(obj) -> Spec:
    """Check and normalise a request's Trellis spec (see the module docstring);
    raises :class:`SpecError` naming the offending key, or
    :class:`~constrain.SchemaError` for a schema that is not valid JSON."""
    if isinstance(obj, Spec):
        return obj
    if not isinstance(obj, dict):
        raise SpecError(f"the {EXTRA_ARGS_KEY!r} spec must be a dict with one of the keys "
                        f"{', '.join(KINDS)}, not {type(obj).__name__}")
    kinds = [k for k in KINDS if k in obj]
    if len(kinds) != 1:
        which = "none" if not kinds else " and ".join(repr(k) for k in kinds)
        raise SpecError(f"the {EXTRA_ARGS_KEY!r} spec must have exactly one of the keys "
                        f"{', '.join(KINDS)}; it has {which}")
    kind = kinds[0]
    unknown = sorted(set(obj) - {kind} - _OPTIONS[kind])
    if unknown:
        allowed = ", ".join(sorted(_OPTIONS[kind])) or "none"
        raise SpecError(f"unknown key {unknown[0]!r} in a {kind!r} spec (its options: {allowed})")
    options = tuple(sorted((k, _check_option(kind, k, obj[k])) for k in obj if k != kind))
    value = obj[kind]
    if kind in ("json_schema", "structural_tag"):
        source = _schema_text(value, kind)
    elif kind == "json_object":
        if value is not True:
            raise SpecError(f"'json_object' must be true, not {value!r}")
        source = '{"type": "object"}'
    elif kind == "choice":
        source = json.dumps(_check_choices(value), ensure_ascii=False)
    else:
        if not isinstance(value, str):
            raise SpecError(f"{kind!r} must be a string, not {type(value).__name__}")
        source = value
    return Spec(kind, source, options)


def _check_option(kind: str, name: str, value):
    if name == "whitespace" and value not in ("compact", "flexible"):
        raise SpecError(f"'whitespace' of a {kind!r} spec must be 'compact' or 'flexible', "
                        f"not {value!r}")
    if name == "strict" and not isinstance(value, bool):
        raise SpecError(f"'strict' of a {kind!r} spec must be true or false, not {value!r}")
    if name == "start" and (not isinstance(value, str) or not value):
        raise SpecError(f"'start' of a {kind!r} spec must be a rule name, not {value!r}")
    return value


def _schema_text(value, kind: str = "json_schema") -> str:
    """A schema or structural tag (dict, bool or JSON text) as JSON text, key
    order kept (it is the order of the generated properties)."""
    what = "JSON schema" if kind == "json_schema" else "structural tag"
    if isinstance(value, (str, bytes, bytearray)):
        value = read_json_text(value, what)
    if not isinstance(value, (dict, bool)):
        raise SpecError(f"{kind!r} must be a JSON object, a boolean or its JSON text, not "
                        f"{type(value).__name__}")
    try:
        return json.dumps(value, ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise SpecError(f"{kind!r} is not JSON data: {exc}") from None
    except RecursionError:  # json.dumps, past ~1,000 levels
        raise SchemaTooComplexError(f"the {what} nests too deeply to compile", "") from None


def _check_choices(value) -> list[str]:
    if not isinstance(value, (list, tuple)) or not value:
        raise SpecError(f"'choice' must be a non-empty list of strings, not {value!r}")
    for i, c in enumerate(value):
        if not isinstance(c, str):
            raise SpecError(f"'choice' item {i} must be a string, not {type(c).__name__}")
    return list(value)


def choice_regex(choices) -> str:
    """The regex whose language is exactly ``choices`` (a list of strings): an
    alternation of the escaped strings, longest first (the order does not
    change the language of a full match; it keeps shared prefixes apart in
    the source only for readability)."""
    items = _check_choices(list(choices) if isinstance(choices, tuple) else choices)
    return "|".join(re.escape(c) for c in sorted(set(items), key=lambda c: (-len(c), c)))


def limits_from_env(environ=None) -> tuple[Limits | None, int]:
    """The budgets of :data:`LIMITS_ENV` (JSON: fields of
    :class:`~constrain.Limits`) and :data:`CACHE_BYTES_ENV` (an integer), or
    ``(None, DEFAULT_CACHE_BYTES)`` where unset. Where one of them is unset,
    its first name (:data:`LEGACY_ENV`: ``TRELLIS_VLLM_LIMITS``,
    ``TRELLIS_VLLM_CACHE_BYTES``) is read instead. A malformed value raises
    :class:`~constrain.ConstraintError` naming the variable it came from."""
    environ = os.environ if environ is None else environ
    limits = None
    name, text = _env_value(environ, LIMITS_ENV)
    if text:
        try:
            fields = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ConstraintError(f"${name} is not JSON: {exc.msg}") from None
        if not isinstance(fields, dict):
            raise ConstraintError(f"${name} must be a JSON object of constrain.Limits fields")
        try:
            limits = Limits(**fields)
        except TypeError as exc:
            raise ConstraintError(f"${name}: {exc}") from None
    cache_bytes = DEFAULT_CACHE_BYTES
    name, text = _env_value(environ, CACHE_BYTES_ENV)
    if text:
        try:
            cache_bytes = int(text)
        except ValueError:
            raise ConstraintError(f"${name} must be an integer, not {text!r}") from None
    return limits, cache_bytes


def _env_value(environ, name: str) -> tuple[str, str | None]:
    """``(variable, value)`` of ``name``, or of its first name where ``name``
    is unset or empty."""
    text = environ.get(name)
    if text:
        return name, text
    legacy = LEGACY_ENV[name]
    return legacy, environ.get(legacy)


class _Entry:
    """A spec's place in a :class:`ConstraintSource`: the compile's future,
    then its constraint (``None`` while in flight), the bytes charged to it,
    and whether the source still keeps it."""

    __slots__ = ("future", "constraint", "charged", "kept")

    def __init__(self):
        self.future = Future()
        self.constraint = None
        self.charged = 0
        self.kept = True


class ConstraintSource:
    """Compiles specs over one model's vocabulary and keeps the compiled
    constraints of the most recently used distinct specs, at most
    ``max_entries`` of them holding at most ``max_bytes`` in all; safe to
    share between threads (two threads asking for the same spec at once wait
    for one compile). Errors are not kept: a spec that failed is compiled
    again when asked again.

    A constraint's mask caches grow as requests decode with it (each within
    its own ``mask_cache_bytes``), so each is charged what it holds
    (:func:`~constrain.cache.held_bytes`), measured again whenever a spec is
    compiled for the 16 most recently asked for (those requests are decoding
    with; the others keep their last charge); then the least recently used
    go until the total is within ``max_bytes``. A constraint larger than
    that alone is returned, not kept. A hit measures nothing (its cost stays
    a look-up).

    Args:
        vocab: the model's vocabulary (ids up to the model's vocab size).
        limits: the budgets of every compile (default :class:`~constrain.Limits`).
        cache_bytes: the :class:`~constrain.Compiler`'s caches, in all.
        max_entries: compiled constraints kept.
        max_bytes: the bytes the compiled constraints kept may hold, in all.
        json_whitespace: the JSON style of specs that do not say
            (``"compact"``: no whitespace; ``"flexible"``: a little around
            punctuation).
    """

    def __init__(self, vocab: Vocabulary, *, limits: Limits | None = None,
                 cache_bytes: int = DEFAULT_CACHE_BYTES, max_entries: int = DEFAULT_CACHE_ENTRIES,
                 max_bytes: int = DEFAULT_CONSTRAINT_BYTES, json_whitespace: str = "compact"):
        if json_whitespace not in ("compact", "flexible"):
            raise ConstraintError(f"json_whitespace must be 'compact' or 'flexible', "
                                  f"not {json_whitespace!r}")
        self.vocab = vocab
        self.compiler = Compiler(vocab, limits=limits, cache_bytes=cache_bytes)
        self.max_entries = check_budget("max_entries", max_entries)
        self.max_bytes = check_budget("max_bytes", max_bytes)
        self.json_whitespace = json_whitespace
        self._lock = threading.Lock()
        self._entries: OrderedDict[Spec, _Entry] = OrderedDict()
        self._bytes = 0

    def compile(self, spec) -> Constraint:
        """The compiled constraint of ``spec`` (a :class:`Spec` or a raw spec
        dict), from the cache or compiled now. Raises the compile's
        :class:`~constrain.ConstraintError` (its message names the place)."""
        spec = parse_spec(spec)
        with self._lock:
            entry = self._entries.get(spec)
            if entry is not None:
                self._entries.move_to_end(spec)
                owner = False
            else:
                entry = self._entries[spec] = _Entry()
                owner = True
                self._evict()
        if not owner:
            return entry.future.result()
        try:
            constraint = self._compile(spec)
        except BaseException as exc:
            with self._lock:
                if self._entries.get(spec) is entry:
                    del self._entries[spec]
            entry.future.set_exception(exc)
            raise
        entry.future.set_result(constraint)
        with self._lock:
            entry.constraint = constraint
            # the constraints requests are decoding with are the most recently
            # asked for: those are measured again (older ones keep their last
            # charge), at most _REMEASURED of them
            recent = []
            for other in reversed(self._entries.values()):
                if other.constraint is not None:
                    recent.append(other)
                    if len(recent) == _REMEASURED:
                        break
        self._charge(recent)
        return constraint

    def _charge(self, entries) -> None:
        """Charge each of ``entries`` what its constraint holds now (measured
        without the lock), then evict to the bounds."""
        sizes = [held_bytes(entry.constraint) for entry in entries]
        with self._lock:
            for entry, size in zip(entries, sizes):
                if entry.kept:
                    self._bytes += size - entry.charged
                    entry.charged = size
            self._evict()

    def _evict(self) -> None:
        # the lock is held: the least recently used entries go until both
        # bounds hold (an in-flight compile counts as an entry of no bytes)
        entries = self._entries
        while len(entries) > self.max_entries or (self._bytes > self.max_bytes and entries):
            _, entry = entries.popitem(last=False)
            entry.kept = False
            self._bytes -= entry.charged

    @property
    def bytes(self) -> int:
        """The bytes charged to the compiled constraints kept, as last
        measured."""
        return self._bytes

    def _compile(self, spec: Spec) -> Constraint:
        options = dict(spec.options)
        c = self.compiler
        if spec.kind in ("json_schema", "json_object"):
            options.setdefault("whitespace", self.json_whitespace)
            return c.compile_json_schema(json.loads(spec.source), **options)
        if spec.kind == "regex":
            return c.compile_regex(spec.source)
        if spec.kind == "grammar":
            return c.compile_grammar(spec.source, **options)
        if spec.kind == "structural_tag":
            from constrain.frontends.structural_tag import compile_structural_tag

            options.setdefault("whitespace", self.json_whitespace)
            return compile_structural_tag(json.loads(spec.source), c.vocab, compiler=c, **options)
        return c.compile_regex(choice_regex(json.loads(spec.source)))

    def clear(self) -> None:
        """Forget every compiled constraint and empty the compiler's caches
        (an engine's cache flush); compiles in flight finish for their callers."""
        with self._lock:
            for entry in self._entries.values():
                entry.kept = False
            self._entries.clear()
            self._bytes = 0
        self.compiler.clear()

    def __len__(self) -> int:
        return len(self._entries)


__all__ = ["EXTRA_ARGS_KEY", "KINDS", "LIMITS_ENV", "CACHE_BYTES_ENV", "LEGACY_ENV",
           "DEFAULT_CACHE_ENTRIES", "DEFAULT_CONSTRAINT_BYTES", "Spec", "SpecError", "parse_spec",
           "choice_regex", "limits_from_env", "ConstraintSource"]
