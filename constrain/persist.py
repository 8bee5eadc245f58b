"""Compiled constraints that outlive the process: ``constraint.save(path)``,
:func:`load`, the on-disk cache of ``Compiler(cache_dir=...)``
(:class:`DiskCache`), and the pickling of constraints (which uses the same
bytes).

A file holds a snapshot of one compiled constraint: its automata, tables and
the masks computed so far, never code. Loading one reads a JSON header and raw
numpy arrays (fixed-size integer and bool dtypes only: nothing is unpickled,
nothing from the file is executed) and rebuilds the constraint around them, so
that it continues exactly where the saved one was: same masks, same states
(a state of the saved constraint is a state of the loaded one).

File format (version :data:`FORMAT_VERSION`), little-endian::

    magic    8 bytes  b"TRELLISC"
    format   uint32   FORMAT_VERSION
    length   uint32   bytes of the header
    header   JSON     {"trellis", "vocab", "vocab_size", "kind", "key", "meta",
                       "arrays": [[name, dtype, shape, offset], ...], "payload"}
    padding  to a multiple of 64 bytes
    payload  the arrays' bytes, each at a multiple of 64 from its start
    digest   32 bytes blake2b of everything before it

``trellis`` is :func:`trellis_version` (the package's version and a digest of
its source), ``vocab`` the vocabulary's :attr:`~constrain.Vocabulary.fingerprint`,
``kind`` ``"regex"`` (a :class:`~constrain.DFAConstraint`) or ``"grammar"``
(a :class:`~constrain.GrammarConstraint`), ``key`` the cache key of a
:class:`DiskCache` entry (else ``null``).

A file that is not one, truncated, corrupted, of another format or Trellis
version or for another vocabulary raises :class:`~constrain.errors.CacheFileError`
from :func:`load` (with its ``reason``); a :class:`DiskCache` ignores such an
entry and rebuilds it. The digest catches corruption, not tampering: a file is
as trusted as the code that wrote it (as numba's own cache files are).
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import json
import math
import os
import re
import shutil
import stat
import struct
import sys
import tempfile
import threading
import unicodedata
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from constrain.errors import CacheFileError, ConstraintError

MAGIC = b"TRELLISC"
#: the layout of the file and of its payload; raised whenever either changes
FORMAT_VERSION = 2
_PREFIX = struct.Struct("<8sII")
_DIGEST = 32
_ALIGN = 64
#: the dtypes a payload may hold: fixed-size integers and bools (no objects)
_DTYPES = frozenset({"|b1", "|u1", "|i1", "<i2", "<u2", "<i4", "<u4", "<i8", "<u8"})
#: the reasons of a CacheFileError
REASONS = ("missing", "truncated", "corrupt", "format", "version", "vocabulary", "key")


@functools.lru_cache(maxsize=1)
def trellis_version() -> str:
    """This Trellis, as a digest of its source files (``constrain/**/*.py``:
    their paths and bytes) and of the Python and Unicode versions it runs on
    (``\\w`` and case folding are read off this Python's ``re``), computed
    once per process (~2 ms): a file written by any other code -- another
    release, an edited checkout, another Python -- is never trusted, even
    under the same version number."""
    root = os.path.dirname(os.path.abspath(__file__))
    files = []
    for folder, subfolders, names in os.walk(root):
        subfolders[:] = [d for d in subfolders if d != "__pycache__"]
        files += [os.path.join(folder, n) for n in names if n.endswith(".py")]
    h = hashlib.blake2b(digest_size=10)
    # character classes and case folding come from this Python's re and its
    # Unicode tables: another Python builds other automata from the same source
    h.update(f"python {sys.version_info[0]}.{sys.version_info[1]} "
             f"unicode {unicodedata.unidata_version}\0".encode())
    for path in sorted(files):
        h.update(os.path.relpath(path, root).replace(os.sep, "/").encode())
        h.update(b"\0")
        with open(path, "rb") as f:
            h.update(f.read())
        h.update(b"\0")
    return f"src-{h.hexdigest()}"


@functools.lru_cache(maxsize=8)
def dependency_version(name: str) -> str:
    """The installed version of the distribution ``name`` (``lark``,
    ``jsonschema``), for cache keys: read from the ``name-X.Y.dist-info``
    folder next to the package (a directory listing; ``importlib.metadata``
    scans every path entry, ~15 ms), else from the metadata; ``""`` when it is
    not installed."""
    spec = importlib.util.find_spec(name)
    if spec is None or spec.origin is None:
        return ""
    site = Path(spec.origin).resolve().parent.parent
    prefix = name.replace("-", "_").lower() + "-"
    try:
        for entry in os.listdir(site):
            low = entry.lower()
            if low.startswith(prefix) and low.endswith(".dist-info"):
                return entry[len(prefix):-len(".dist-info")]
    except OSError:
        pass
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return ""


class Payload:
    """What a constraint saves: named numpy arrays and JSON values, in one
    namespace shared by the parts of the constraint (:meth:`part`).

    Writing: :meth:`put` an array (its first ``used`` rows only, the capacity
    noted: tables that grow keep their room), :meth:`set` a value. Reading:
    :meth:`get` an array (a fresh, writable copy at its capacity, checked to
    have the dtype and number of dimensions asked), :meth:`value` a value
    (checked to have the type asked). A missing or ill-typed entry raises
    :class:`~constrain.errors.CacheFileError` (``"corrupt"``)."""

    __slots__ = ("meta", "arrays", "prefix")

    def __init__(self, meta: dict | None = None, arrays: dict | None = None, prefix: str = ""):
        self.meta = {} if meta is None else meta
        self.arrays = {} if arrays is None else arrays
        self.prefix = prefix

    def part(self, name: str) -> "Payload":
        """The sub-namespace ``name`` (same storage)."""
        return Payload(self.meta, self.arrays, f"{self.prefix}{name}.")

    def put(self, name: str, array: np.ndarray, used: int | None = None, *,
            runs: bool = False) -> None:
        """Store ``array`` (with ``used``: its first ``used`` rows, and its
        length as the capacity to restore). ``runs``: as runs of equal values
        along each row, for transition tables (``[n, 256]``: a terminal's row
        is ~6 runs, ~36 bytes where the row is 1 kB; a JSON Schema's table of
        thousands of rows was most of its file)."""
        key = self.prefix + name
        part = array if used is None else array[:used]
        if part.dtype.byteorder == ">":
            part = part.astype(part.dtype.newbyteorder("<"))
        if part.dtype.str not in _DTYPES:
            raise TypeError(f"{key}: a payload holds no {part.dtype} array")
        # a copy, made while the caller holds the constraint's lock: kernels
        # write into these tables in place as other threads compute masks
        part = np.array(part, order="C")
        if used is not None:
            self.meta[key + "#cap"] = int(array.shape[0])
        if runs:
            # a run starts at every change along a row and at every row's start,
            # so that no run is longer than a row
            starts = np.ones(part.shape, dtype=np.bool_)
            np.not_equal(part[:, 1:], part[:, :-1], out=starts[:, 1:])
            first = np.flatnonzero(starts)
            self.arrays[key + "#runs"] = np.diff(first, append=part.size).astype(np.uint16)
            self.meta[key + "#shape"] = list(part.shape)
            part = part.reshape(-1)[first]
        self.arrays[key] = part

    def set(self, name: str, value) -> None:
        """Store the JSON value ``value``."""
        self.meta[self.prefix + name] = value

    def value(self, name: str, kind=int):
        """The value ``name``, checked to be a ``kind`` (a type or a tuple of
        them; a bool is no int)."""
        key = self.prefix + name
        try:
            v = self.meta[key]
        except KeyError:
            raise CacheFileError(f"the file has no {key!r}", "corrupt") from None
        if not isinstance(v, kind) or (isinstance(v, bool) and bool not in _types(kind)):
            raise CacheFileError(f"{key!r} is a {type(v).__name__}", "corrupt")
        return v

    def get(self, name: str, dtype, ndim: int = 1, *, fill=0, width: int | None = None) -> np.ndarray:
        """The array ``name``, writable, of ``dtype`` with ``ndim``
        dimensions (and ``width`` columns, when given): at its saved
        capacity, the rows past those saved set to ``fill`` (``None``: left
        uninitialised, for tables whose rows are written before they are
        read). Not a copy where it can be a view of the loaded bytes (each
        array is read once, by one owner)."""
        key = self.prefix + name
        a = self.arrays.get(key)
        dtype = np.dtype(dtype)
        if a is None:
            raise CacheFileError(f"the file has no array {key!r}", "corrupt")
        lengths = self.arrays.get(key + "#runs")
        if lengths is not None:
            shape = self.meta.get(key + "#shape")
            if a.ndim != 1 or lengths.dtype != np.uint16 or lengths.shape != a.shape \
                    or not isinstance(shape, list) or len(shape) != 2 \
                    or int(lengths.sum(dtype=np.int64)) != shape[0] * shape[1]:
                raise CacheFileError(f"the runs of {key!r} do not make its table", "corrupt")
            a = np.repeat(a, lengths).reshape(shape)
        if a.dtype != dtype or a.ndim != ndim or (width is not None and a.shape[1] != width):
            raise CacheFileError(f"the array {key!r} is {a.dtype}{list(a.shape)}, not "
                                 f"{dtype} of {ndim} dimensions", "corrupt")
        cap = self.meta.get(key + "#cap")
        if cap is None:
            # a view of the file's bytes, which the loader owns (a bytearray:
            # writable, as the kernels need)
            return a
        # tables grow by doubling (or to one call's need, which it then uses):
        # a capacity far past the rows used is no table's
        if not isinstance(cap, int) or isinstance(cap, bool) or \
                not a.shape[0] <= cap <= _MAX_CAP_FACTOR * a.shape[0] + _MAX_CAP_SLACK:
            raise CacheFileError(f"the capacity of {key!r} is {cap!r}", "corrupt")
        shape = (cap,) + a.shape[1:]
        out = np.empty(shape, dtype=dtype) if fill is None else np.full(shape, fill, dtype=dtype)
        out[:a.shape[0]] = a
        return out


#: the largest capacity :meth:`Payload.get` restores: this many times the rows
#: saved, plus this many
_MAX_CAP_FACTOR = 4
_MAX_CAP_SLACK = 1 << 16


def _types(kind) -> tuple:
    return kind if isinstance(kind, tuple) else (kind,)


# -- the file format --------------------------------------------------------------


def _kinds() -> dict:
    """What restores each kind of file: ``restore(payload, vocab, compiler)``."""
    # here, not at the top: the constraint modules use this one
    from constrain.cfg.grammar import GrammarConstraint
    from constrain.regular.regex import DFAConstraint

    return {"regex": DFAConstraint._restore, "grammar": GrammarConstraint._restore,
            "reasoning": _restore_reasoning}


def persist(constraint, payload: Payload) -> str:
    """Write ``constraint`` into ``payload``; returns its kind. A
    :class:`~constrain.ReasoningConstraint` is its markers, budget and inner
    constraint (its masks are computed again on first use)."""
    from constrain.runtime.reasoning import ReasoningConstraint

    if isinstance(constraint, ReasoningConstraint):
        payload.set("start", constraint.start)
        payload.set("end", constraint.end)
        payload.set("max_tokens", constraint.max_tokens)
        payload.set("inner", persist(constraint.inner, payload.part("inner")))
        return "reasoning"
    method = getattr(constraint, "_persist", None)
    if method is None:
        raise ConstraintError(f"a {type(constraint).__name__} cannot be saved (Trellis saves "
                              f"DFAConstraint, GrammarConstraint and ReasoningConstraint)")
    return method(payload)


def _restore_reasoning(payload: Payload, vocab, compiler):
    from constrain.runtime.reasoning import ReasoningConstraint

    restore = _kinds().get(payload.value("inner", str))
    if restore is None:
        raise CacheFileError("an unknown inner kind", "corrupt")
    inner = restore(payload.part("inner"), vocab, compiler)
    max_tokens = payload.value("max_tokens", (int, type(None)))
    return ReasoningConstraint(inner, payload.value("start", (str, type(None))),
                               payload.value("end", str), max_tokens)


def dumps(constraint, *, key: str | None = None) -> bytes:
    """The bytes of a file holding ``constraint`` (a
    :class:`~constrain.DFAConstraint`, :class:`~constrain.GrammarConstraint`
    or :class:`~constrain.ReasoningConstraint` of them) as it is now, masks
    computed so far included; ``key``: the cache key to record."""
    payload = Payload()
    kind = persist(constraint, payload)
    vocab = constraint.vocab
    arrays, parts, offset = [], [], 0
    for name, a in payload.arrays.items():
        pad = -offset % _ALIGN
        if pad:
            parts.append(bytes(pad))
            offset += pad
        arrays.append([name, a.dtype.str, list(a.shape), offset])
        parts.append(a.data)
        offset += a.nbytes
    header = json.dumps({"trellis": trellis_version(), "vocab": vocab.fingerprint,
                         "vocab_size": len(vocab), "kind": kind, "key": key,
                         "meta": payload.meta, "arrays": arrays, "payload": offset},
                        ensure_ascii=True, separators=(",", ":"), allow_nan=False).encode()
    head = _PREFIX.pack(MAGIC, FORMAT_VERSION, len(header)) + header
    head += bytes(-len(head) % _ALIGN)
    h = hashlib.blake2b(head, digest_size=_DIGEST)
    for p in parts:
        h.update(p)
    return b"".join([head, *parts, h.digest()])


def _read_header(data, where: str) -> tuple[dict, int]:
    """The header of the file ``data`` and where its payload starts; raises
    :class:`CacheFileError` for anything but a complete file of this format."""
    if len(data) < _PREFIX.size:
        if MAGIC.startswith(bytes(data[:8])):
            raise CacheFileError(f"{where} is truncated", "truncated")
        raise CacheFileError(f"{where} is not a Trellis constraint file", "corrupt")
    magic, fmt, n = _PREFIX.unpack_from(data)
    if magic != MAGIC:
        raise CacheFileError(f"{where} is not a Trellis constraint file", "corrupt")
    if fmt != FORMAT_VERSION:
        raise CacheFileError(f"{where} has format version {fmt}, this Trellis reads "
                             f"{FORMAT_VERSION}", "format")
    start = _PREFIX.size + n
    start += -start % _ALIGN
    if len(data) < start + _DIGEST:
        raise CacheFileError(f"{where} is truncated", "truncated")
    try:
        header = json.loads(bytes(data[_PREFIX.size:_PREFIX.size + n]))
    except (UnicodeDecodeError, ValueError):
        header = None
    if not isinstance(header, dict):
        raise CacheFileError(f"{where} has a corrupt header", "corrupt")
    size = header.get("payload")
    if not isinstance(size, int) or isinstance(size, bool) or size < 0:
        raise CacheFileError(f"{where} has a corrupt header", "corrupt")
    if len(data) < start + size + _DIGEST:
        raise CacheFileError(f"{where} is truncated", "truncated")
    if len(data) > start + size + _DIGEST:
        raise CacheFileError(f"{where} has {len(data) - start - size - _DIGEST} bytes too many",
                             "corrupt")
    return header, start


def _payload(data, header: dict, start: int, where: str) -> Payload:
    """The arrays and values of a checked file."""
    meta, entries = header.get("meta"), header.get("arrays")
    if not isinstance(meta, dict) or not isinstance(entries, list):
        raise CacheFileError(f"{where} has a corrupt header", "corrupt")
    buf = memoryview(data)
    end = start + header["payload"]
    arrays = {}
    try:
        for name, dtype, shape, offset in entries:
            if dtype not in _DTYPES or not isinstance(name, str) or not isinstance(offset, int) \
                    or not all(isinstance(s, int) and s >= 0 for s in shape):
                raise ValueError(name)
            dt = np.dtype(dtype)
            count = math.prod(shape)
            lo = start + offset
            if offset < 0 or lo + count * dt.itemsize > end:
                raise ValueError(name)
            a = np.frombuffer(buf, dtype=dt, count=count, offset=lo).reshape(shape)
            arrays[name] = a if dt.isnative else a.astype(dt.newbyteorder("="))
    except (TypeError, ValueError) as e:
        raise CacheFileError(f"{where} has a corrupt array entry {e}", "corrupt") from None
    return Payload(meta, arrays)


def loads(data, vocab, *, compiler=None, key: str | None = None, where: str = "the data"):
    """The constraint in the file bytes ``data`` over ``vocab`` (see
    :func:`load`); with ``key``, the file must be the cache entry of that key.

    Raises:
        CacheFileError: see :func:`load`.
    """
    from constrain.vocab.vocabulary import Vocabulary

    if not isinstance(vocab, Vocabulary):
        raise ConstraintError(f"vocab must be a constrain.Vocabulary, not {type(vocab).__name__}")
    if compiler is not None and compiler.vocab is not vocab and compiler.vocab != vocab:
        raise ConstraintError(f"the compiler is for the vocabulary {compiler.vocab.name}, "
                              f"not {vocab.name}")
    if not isinstance(data, bytearray):
        # the tables are views of these bytes, written as the constraint
        # grows: immutable bytes (dumps' own output) made read-only arrays,
        # which the kernels refused at the first mask
        data = bytearray(data)
    header, start = _read_header(data, where)
    body = memoryview(data)[:len(data) - _DIGEST]
    if hashlib.blake2b(body, digest_size=_DIGEST).digest() != bytes(data[len(data) - _DIGEST:]):
        raise CacheFileError(f"{where} is corrupt (its checksum does not match)", "corrupt")
    if header.get("trellis") != trellis_version():
        raise CacheFileError(f"{where} was written by Trellis {header.get('trellis')}, "
                             f"this is {trellis_version()}", "version")
    if header.get("vocab") != vocab.fingerprint or header.get("vocab_size") != len(vocab):
        raise CacheFileError(f"{where} is for another vocabulary (fingerprint "
                             f"{header.get('vocab')}, not {vocab.name}'s {vocab.fingerprint})",
                             "vocabulary")
    if key is not None and header.get("key") != key:
        raise CacheFileError(f"{where} is the cache entry of another key", "key")
    restore = _kinds().get(header.get("kind"))
    if restore is None:
        raise CacheFileError(f"{where} holds an unknown kind {header.get('kind')!r}", "corrupt")
    payload = _payload(data, header, start, where)
    try:
        return restore(payload, vocab, compiler)
    except CacheFileError as e:
        raise CacheFileError(f"{where}: {e.msg}", e.reason) from None
    except (ValueError, KeyError, IndexError, TypeError, MemoryError) as e:
        # a table inconsistent with another, or sized past reason (a checksum
        # cannot tell a bug that wrote it so): refused, never half-built
        raise CacheFileError(f"{where} holds inconsistent tables ({type(e).__name__}: {e})",
                             "corrupt") from None


def save(constraint, path) -> None:
    """Write ``constraint`` to ``path`` (atomically: a reader sees the old
    file or the new one, whole)."""
    write_atomic(Path(path), dumps(constraint))


def load(path, vocab, *, compiler=None):
    """The constraint saved at ``path`` (:meth:`Constraint.save
    <constrain.Constraint.save>`) over ``vocab``, which must be the
    vocabulary it was compiled for. A grammar uses the caches of ``compiler``
    (default: :func:`constrain.default_compiler` of ``vocab``).

    The loaded constraint behaves exactly as the saved one did: the same
    masks, the same states (those of the saved constraint included), the same
    budgets. Nothing in the file is executed.

    Raises:
        CacheFileError: the file is missing or unreadable (``reason``
            ``"missing"``), not a Trellis constraint file, truncated or corrupt
            (``"truncated"``, ``"corrupt"``), of another file format or Trellis
            version (``"format"``, ``"version"``) or for another vocabulary
            (``"vocabulary"``).
    """
    path = Path(path)
    return loads(_read_file(path), vocab, compiler=compiler, where=str(path))


def _read_file(path: Path) -> bytearray:
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            data = bytearray(size)
            got = f.readinto(data)
    except OSError as e:
        raise CacheFileError(f"cannot read {path}: {e.strerror or e}", "missing") from None
    if got != size:  # shrunk while read
        raise CacheFileError(f"{path} is truncated", "truncated")
    return data


def process_umask() -> int:
    """This process's umask, read without changing it: where Linux says it
    (``/proc/self/status``), else from the mode of a folder made with mode 0777
    (``os.umask``, the only other way, sets the umask: a file another thread
    made in between would get the wrong mode)."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    parent = tempfile.mkdtemp(prefix="trellis-umask-")  # 0700, whatever the umask
    try:
        probe = os.path.join(parent, "probe")
        os.mkdir(probe, 0o777)
        return 0o777 & ~stat.S_IMODE(os.stat(probe).st_mode)
    finally:
        shutil.rmtree(parent, ignore_errors=True)


def as_created(path, directory: bool = False, umask: int | None = None) -> None:
    """Give ``path`` (made by ``tempfile``, which makes files 0600 and folders
    0700 whatever the umask) the mode a plain ``open`` or ``mkdir`` would: a
    cache built by one user is then readable by the others the umask lets
    read it (a folder shared by two users never hit: each missed, rewrote and
    took the other's entries). ``umask``: :func:`process_umask`, when the
    caller read it already."""
    if umask is None:
        umask = process_umask()
    os.chmod(path, (0o777 if directory else 0o666) & ~umask)


def write_atomic(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file in the same folder,
    flushed to disk, then renamed over ``path`` (``os.replace``): readers
    (other threads, other processes) see the old file or the new one, never
    part of one. The file gets the mode the umask gives new files."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".trellis")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        as_created(tmp)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


# -- pickling ---------------------------------------------------------------------


def reduce_constraint(constraint, known: frozenset):
    """``constraint.__reduce__()``: its file bytes, its vocabulary (which
    pickles as its tokens) and the attributes others set on it (``known``: the
    constraint's own), such as ``output_type``."""
    extras = {k: v for k, v in vars(constraint).items() if k not in known}
    return _unpickle, (dumps(constraint), constraint.vocab, extras)


def _unpickle(data: bytes, vocab, extras: dict):
    constraint = loads(bytearray(data), vocab, where="the pickled constraint")
    vars(constraint).update(extras)
    return constraint


# -- the on-disk cache ------------------------------------------------------------


class Uncacheable(Exception):
    """A compile whose inputs have no canonical key (a schema holding a tuple,
    a non-string key): compiled, not cached."""


def canonical(value):
    """``value``, a JSON value of plain types only (``dict`` with ``str``
    keys, ``list``, ``str``, ``int``, ``float``, ``bool``, ``None``), else
    :class:`Uncacheable`: the JSON text of anything else (a tuple, an int
    key, a subclass) could stand for two inputs the compilers treat apart."""
    t = type(value)
    if t is dict:
        for k, v in value.items():
            if type(k) is not str:
                raise Uncacheable(f"a key {k!r}")
            canonical(v)
    elif t is list:
        for v in value:
            canonical(v)
    elif t not in (str, int, float, bool) and value is not None:
        raise Uncacheable(f"a {t.__name__}")
    return value


@dataclass(frozen=True)
class DiskCacheStats:
    """The counts of a :class:`DiskCache`: entries loaded (``hits``), compiles
    (``misses``), entries found but refused and rebuilt (``rejected``: corrupt,
    truncated, stale), files written, writes that failed (the compile's result
    is returned all the same) and compiles whose inputs have no key
    (``uncacheable``)."""

    hits: int = 0
    misses: int = 0
    rejected: int = 0
    writes: int = 0
    write_errors: int = 0
    uncacheable: int = 0


class DiskCache:
    """Compiled constraints in the folder ``directory``, one file per key
    (``<key>.trellis``), for :class:`~constrain.Compiler` (``cache_dir``).

    A key is the blake2b of the compile's inputs (the pattern, grammar text or
    schema as canonical JSON, the options and :class:`~constrain.Limits` that
    affect the result, lark's or jsonschema's version where they are used), the
    vocabulary's fingerprint, :func:`trellis_version` and
    :data:`FORMAT_VERSION`. An entry that cannot be loaded (corrupt,
    truncated, stale, another key's) is never trusted: the constraint is
    compiled again and the entry replaced.

    Safe for threads (one compile per key at a time in this process; others
    asking for it wait and load it) and for processes sharing the folder
    (entries are replaced atomically, so a reader loads a whole entry or
    none; two processes may both compile a missing key)."""

    def __init__(self, directory):
        self.directory = Path(directory)
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise ConstraintError(f"cannot create the cache folder {self.directory}: "
                                  f"{e.strerror or e}") from None
        self._lock = threading.Lock()
        self._inflight: dict = {}
        self._counts = dict.fromkeys(DiskCacheStats.__dataclass_fields__, 0)

    def __repr__(self) -> str:
        return f"DiskCache({str(self.directory)!r})"

    def key(self, kind: str, spec: dict, vocab) -> str:
        """The key of compiling ``spec`` (canonical JSON values) as ``kind``
        over ``vocab``; :class:`Uncacheable` when ``spec`` is not canonical."""
        text = json.dumps({"kind": kind, "spec": canonical(spec), "format": FORMAT_VERSION,
                           "trellis": trellis_version(), "vocab": vocab.fingerprint,
                           "vocab_size": len(vocab)},
                          ensure_ascii=True, separators=(",", ":"), allow_nan=True)
        return hashlib.blake2b(text.encode(), digest_size=20).hexdigest()

    def path(self, key: str) -> Path:
        """The file of ``key``."""
        return self.directory / f"{key}.trellis"

    def stats(self) -> DiskCacheStats:
        """The counts so far."""
        with self._lock:
            return DiskCacheStats(**self._counts)

    def _count(self, name: str) -> None:
        with self._lock:
            self._counts[name] += 1

    def get_or_compile(self, kind: str, spec, vocab, compiler, build):
        """The constraint that ``build()`` compiles: loaded from the entry of
        ``spec()`` (the key's inputs: see :meth:`key`), or built and written
        there. ``compiler``: the one a loaded grammar uses."""
        try:
            key = self.key(kind, spec(), vocab)
        except Uncacheable:
            self._count("uncacheable")
            return build()
        with self._lock:
            entry = self._inflight.get(key)
            if entry is None:
                entry = self._inflight[key] = [threading.Lock(), 0]
            entry[1] += 1
        try:
            with entry[0]:
                return self._get_or_compile(key, vocab, compiler, build)
        finally:
            with self._lock:
                entry[1] -= 1
                if not entry[1]:
                    del self._inflight[key]

    def _get_or_compile(self, key, vocab, compiler, build):
        path = self.path(key)
        try:
            data = _read_file(path)
        except CacheFileError:
            data = None  # no entry yet
        if data is not None:
            try:
                constraint = loads(data, vocab, compiler=compiler, key=key, where=str(path))
            except CacheFileError:
                self._count("rejected")
            else:
                self._count("hits")
                return constraint
        self._count("misses")
        constraint = build()
        constraint._prepare_for_cache()
        try:
            # the folder may have been deleted since (a clean-up): made again
            path.parent.mkdir(parents=True, exist_ok=True)
            write_atomic(path, dumps(constraint, key=key))
        except OSError:
            self._count("write_errors")
        else:
            self._count("writes")
        return constraint


# -- the inputs of a compile, as cache keys ----------------------------------------

_LARK_IMPORT = re.compile(r"^[ \t]*%import[ \t]+(\.*)([\w.]+)[ \t]*(\()?", re.M)


def limits_spec(limits) -> dict:
    """The fields of a :class:`~constrain.Limits` that a cached result
    depends on: all but ``time_budget`` (a compile that finished is the same
    whatever time it was given)."""
    return {f: getattr(limits, f) for f in limits.__dataclass_fields__ if f != "time_budget"}


def regex_spec(pattern, flags, limits) -> dict:
    """The key inputs of :meth:`constrain.Compiler.compile_regex`."""
    if type(pattern) is not str or isinstance(flags, bool) or not isinstance(flags, int):
        raise Uncacheable("not a str pattern and int flags")
    return {"pattern": pattern, "flags": int(flags), "limits": limits_spec(limits)}


def grammar_spec(source, start, fmt: str, limits) -> dict:
    """The key inputs of :meth:`constrain.Compiler.compile_grammar` (``fmt``:
    ``"lark"`` or ``"gbnf"``): the grammar text, and for a file its folder and
    the text of every file its Lark ``%import`` lines name there (``None`` for
    lark's own, which lark's version stands for)."""
    from constrain.frontends.lark import read_grammar_source

    if start is not None and type(start) is not str:
        raise Uncacheable("a start symbol that is no str")
    try:
        if fmt == "gbnf":
            path = source if isinstance(source, Path) else Path(source) \
                if isinstance(source, str) and "\n" not in source and source.endswith(".gbnf") \
                else None
            text = source if path is None else path.read_text(encoding="utf-8")
            directory = None
        else:
            text, directory = read_grammar_source(source)
    except (ConstraintError, OSError, UnicodeDecodeError):
        raise Uncacheable("an unreadable grammar") from None
    if type(text) is not str:
        raise Uncacheable("a grammar that is no text")
    imports: dict = {}
    if directory is not None:
        root = Path(directory).resolve()
        _lark_imports(text, root, root, imports, 0)
        directory = str(root)
    return {"text": text, "format": fmt, "start": start, "directory": directory,
            "imports": imports, "lark": dependency_version("lark") if fmt == "lark" else "",
            "limits": limits_spec(limits)}


def _lark_imports(text: str, here: Path, root: Path, out: dict, depth: int) -> None:
    if depth > 32:
        raise Uncacheable("imports nested too deeply")
    for m in _LARK_IMPORT.finditer(text):
        dots, name, group = m.groups()
        parts = name.split(".")
        if not group:  # %import module.SYMBOL
            parts = parts[:-1]
        if not parts:
            continue
        folder = here if dots else root
        for _ in range(len(dots) - 1):
            folder = folder.parent
        path = folder.joinpath(*parts[:-1], parts[-1] + ".lark")
        if str(path) in out:
            continue
        try:
            body = path.read_text(encoding="utf-8") if path.is_file() else None
        except (OSError, UnicodeDecodeError):
            raise Uncacheable("an unreadable import") from None
        out[str(path)] = body
        if body is not None:
            _lark_imports(body, path.parent, root, out, depth + 1)


def schema_spec(schema, options: dict, limits) -> dict:
    """The key inputs of :meth:`constrain.Compiler.compile_json_schema`:
    the schema as JSON (a Pydantic model as its schema), the translation's
    options, the other documents (``resources``) in URI order."""
    from constrain.frontends.json_schema.compiler import _SCHEMA_OPTIONS
    from constrain.frontends.json_schema.document import load_schema

    unknown = set(options) - set(_SCHEMA_OPTIONS)
    if unknown:
        raise Uncacheable(f"unknown options {sorted(unknown)}")
    options = dict(options)
    resources = options.pop("resources", None)
    try:
        doc = load_schema(schema)
        if resources is not None:
            if not hasattr(resources, "items"):
                raise Uncacheable("resources that are no mapping")
            resources = sorted([uri, load_schema(s)] for uri, s in resources.items())
    except (ConstraintError, TypeError):
        raise Uncacheable("a schema that does not load") from None
    return {"schema": doc, "options": options, "resources": resources,
            "jsonschema": dependency_version("jsonschema"), "limits": limits_spec(limits)}


__all__ = ["load", "save", "dumps", "loads", "DiskCache", "DiskCacheStats", "Payload",
           "trellis_version", "FORMAT_VERSION", "CacheFileError", "regex_spec", "grammar_spec",
           "schema_spec"]
