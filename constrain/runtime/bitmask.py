"""Token bitmasks: allocation, application to logits, conversion.

Layout (the one XGrammar and llguidance use): an int32 array of shape
``(batch, ceil(V/32))``; bit ``t % 32`` of word ``t // 32`` of a row is set iff token
``t`` is allowed. Works with numpy arrays and torch tensors (CPU or CUDA).
"""

from __future__ import annotations

import struct

import numpy as np

from constrain.automata.bits import bits_to_ids
from constrain.cache import BoundedCache, registry
from constrain.runtime.bitmask_kernels import apply_bitmask_rows
from constrain.errors import BitmaskError, ConstraintError, as_index


def bitmask_words(vocab_size: int) -> int:
    """Number of int32 words per row for a vocabulary of ``vocab_size`` tokens."""
    return (int(vocab_size) + 31) // 32


def _torch():
    try:
        import torch
    except ImportError:  # pragma: no cover - torch is an optional dependency
        return None
    return torch


def allocate_bitmask(batch: int, vocab_size: int, *, backend: str | None = None):
    """A bitmask of ``batch`` rows for ``vocab_size`` tokens, every token allowed
    (all bits set).

    Args:
        backend: ``"torch"`` (a CPU int32 tensor; move it to the GPU yourself or use
            :func:`apply_bitmask`, which does) or ``"numpy"``. Default: torch when it
            is installed, else numpy.
    """
    shape = (_count(batch, "batch", 0), bitmask_words(_count(vocab_size, "vocab_size", 1)))
    if backend is None:
        backend = "torch" if _torch() is not None else "numpy"
    if backend == "torch":
        torch = _torch()
        if torch is None:
            raise ConstraintError("backend='torch' needs torch installed")
        return torch.full(shape, -1, dtype=torch.int32)
    if backend == "numpy":
        return np.full(shape, -1, dtype=np.int32)
    raise ConstraintError(f"unknown bitmask backend {backend!r}; use 'torch' or 'numpy'")


def _count(value, name: str, least: int) -> int:
    """``value`` as an int of at least ``least``, else :class:`BitmaskError`
    (``int()`` took ``1.5`` for 1 and ``"2"`` for 2; a negative size made an
    empty bitmask or torch's own error)."""
    n = as_index(value, lambda: BitmaskError(f"{name} is a count, not {value!r}"))
    if n < least:
        raise BitmaskError(f"{name} must be at least {least}, not {n}")
    return n


def apply_bitmask(logits, bitmask) -> None:
    """Set the logits of disallowed tokens to ``-inf``, in place.

    Args:
        logits: float ``(batch, V)`` (or ``(V,)``) torch tensor (CPU or CUDA) or
            numpy array.
        bitmask: int32 ``(batch, W)`` (or ``(W,)``), numpy or torch, on any device.
            Tokens past ``32 * W`` (logits wider than the bitmask's vocabulary) are
            masked too.
    """
    _check_apply_bitmask(bitmask)
    if isinstance(logits, np.ndarray):
        bm = bitmask if isinstance(bitmask, np.ndarray) else bitmask.detach().cpu().numpy()
        _check_logits(logits.ndim, np.issubdtype(logits.dtype, np.floating), logits.dtype)
        if not logits.flags.writeable:
            raise ConstraintError("the logits are read-only: apply_bitmask masks them in place")
        lg = logits if logits.ndim == 2 else logits[None, :]
        bm = bm if bm.ndim == 2 else bm[None, :]
        _check_batch(lg.shape[0], bm.shape[0])
        if lg.dtype in (np.float32, np.float64):
            apply_bitmask_rows(lg, bm, lg.dtype.type(-np.inf))
        else:  # float16 and the like, which the kernel is not compiled for
            _apply_bits(lg, bm)
        return
    torch = _torch()
    if torch is None or not isinstance(logits, torch.Tensor):
        raise ConstraintError(f"logits must be a numpy array or torch tensor, not {type(logits).__name__}")
    _check_logits(logits.dim(), logits.is_floating_point(), logits.dtype)
    if isinstance(bitmask, np.ndarray):
        bitmask = torch.from_numpy(np.ascontiguousarray(bitmask))
    lg = logits if logits.dim() == 2 else logits.unsqueeze(0)
    bm = bitmask if bitmask.dim() == 2 else bitmask.unsqueeze(0)
    _check_batch(lg.shape[0], bm.shape[0])
    if lg.requires_grad and lg.is_leaf:
        raise ConstraintError("logits that are a leaf requiring grad cannot be masked in "
                              "place: mask them under torch.no_grad(), or a copy")
    if (lg.device.type == "cpu" and lg.dtype in (torch.float32, torch.float64)
            and lg.is_contiguous() and bm.device.type == "cpu" and not lg.requires_grad):
        # (numpy() refuses a tensor with autograd history: that one goes by
        # masked_fill_ below, which autograd records)
        apply_bitmask_rows(lg.numpy(), bm.numpy(), -np.inf)
        return
    v = lg.shape[-1]
    bm = bm.to(device=lg.device, dtype=torch.int32, non_blocking=True)
    shifts = torch.arange(32, device=lg.device, dtype=torch.int32)
    bits = ((bm.unsqueeze(-1) >> shifts) & 1).bool().reshape(bm.shape[0], -1)
    width = bits.shape[1]
    if width >= v:
        allowed = bits[:, :v]
    else:
        pad = torch.zeros((bits.shape[0], v - width), dtype=torch.bool, device=lg.device)
        allowed = torch.cat([bits, pad], dim=1)
    lg.masked_fill_(~allowed, float("-inf"))


def _check_apply_bitmask(bitmask) -> None:
    """A bitmask to apply is int32 (the layout's words: another integer type or
    a float one would be converted value by value, and its bits lost), with one
    row or a batch of them."""
    if isinstance(bitmask, np.ndarray):
        ok = bitmask.dtype == np.int32
        ndim = bitmask.ndim
    else:
        torch = _torch()
        if torch is None or not isinstance(bitmask, torch.Tensor):
            raise BitmaskError(f"a bitmask must be a numpy array or torch tensor, not "
                               f"{type(bitmask).__name__}")
        ok = bitmask.dtype == torch.int32
        ndim = bitmask.dim()
    if not ok:
        raise BitmaskError(f"a bitmask is int32 (allocate_bitmask makes one), not {bitmask.dtype}")
    if ndim not in (1, 2):
        raise BitmaskError(f"a bitmask has one row (W,) or a batch of them (batch, W), "
                           f"not {ndim} dimensions")


def _check_logits(ndim: int, floating: bool, dtype) -> None:
    """Logits to mask are one row ``(V,)`` or a batch ``(batch, V)`` of floats
    (-inf is a float; a 3-D tensor was read as rows of rows)."""
    if ndim not in (1, 2):
        raise ConstraintError(f"logits are one row (V,) or a batch of them (batch, V), "
                              f"not {ndim} dimensions")
    if not floating:
        raise ConstraintError(f"logits must be floating point, not {dtype}")


def _apply_bits(lg: np.ndarray, bm: np.ndarray) -> None:
    """:func:`apply_bitmask` of numpy logits in a dtype the kernel lacks."""
    v = lg.shape[1]
    allowed = np.unpackbits(np.ascontiguousarray(bm).view(np.uint8), axis=1,
                            bitorder="little")[:, :v].astype(np.bool_)
    if allowed.shape[1] < v:
        allowed = np.concatenate(
            [allowed, np.zeros((allowed.shape[0], v - allowed.shape[1]), np.bool_)], axis=1)
    lg[~allowed] = -np.inf


def _check_batch(n_logits: int, n_mask: int) -> None:
    if n_logits != n_mask:
        raise ConstraintError(f"logits have {n_logits} rows but the bitmask has {n_mask}")


def bitmask_to_ids(row, vocab_size: int) -> np.ndarray:
    """The ids of the set bits of one bitmask row (numpy or torch), below
    ``vocab_size``."""
    if not isinstance(row, np.ndarray):
        torch = _torch()
        if torch is None or not isinstance(row, torch.Tensor):
            raise BitmaskError(f"a bitmask row is a numpy array or torch tensor, not "
                               f"{type(row).__name__}")
        row = row.detach().cpu().numpy()
    if row.dtype != np.int32 or row.ndim != 1:
        raise BitmaskError(f"a bitmask row is one int32 row (W,), not {row.dtype} of shape "
                           f"{row.shape} (index the batch: bitmask[i])")
    return bits_to_ids(np.ascontiguousarray(row).view(np.uint32),
                       _count(vocab_size, "vocab_size", 0))


def _views_bytes(key, entry) -> int:
    # the bitmask's own memory, which the entry keeps alive
    return entry[0].nbytes if type(entry[0]) is np.ndarray else entry[0].numel() * 4


#: per bitmask used lately, by ``id``: its :class:`Target`. An entry holds its
#: bitmask, so that id cannot name another object while the entry exists, and a
#: hit is checked to be the same object, with the same storage and layout, all
#: the same (``tensor.set_(other)`` or ``tensor.data = other`` keep the object
#: and change its memory). A few entries: a serving loop fills the same one or
#: two bitmasks every step (and each constraint keeps the one it filled last),
#: and every entry keeps its bitmask alive.
_VIEWS = registry.register(BoundedCache("bitmask views", 1 << 30, max_entries=8,
                                        sizeof=_views_bytes))


class Target(tuple):
    """A bitmask checked to take masks: ``(bitmask, view, rows, ptr, layout)``.

    * ``view``: a numpy array sharing its memory (``None`` for a tensor on
      another device than the CPU);
    * ``rows``: one writable byte memoryview per row (``None`` likewise);
    * ``ptr``: a torch tensor's ``data_ptr()`` when checked (``None`` for a
      numpy array, whose memory cannot be swapped while a view of it exists):
      a constraint that caches the target compares it to the tensor's before
      each fill;
    * ``layout``: ``(rows, words per row)``.
    """

    __slots__ = ()

    @property
    def n_rows(self) -> int:
        """The bitmask's number of rows."""
        return self[4][0]

    @property
    def width(self) -> int:
        """The bitmask's int32 words per row."""
        return self[4][1]


def _layout_error(bitmask, why: str) -> BitmaskError:
    return BitmaskError(f"a bitmask must be a C-contiguous int32 array or tensor of shape "
                        f"(batch, ceil(V/32)) (allocate_bitmask makes one): {why}")


def _target(bitmask) -> Target:
    """The :data:`_VIEWS` entry of ``bitmask``, checked and made on first use
    (and again when its storage or layout changed)."""
    key = id(bitmask)
    hit = _VIEWS.get(key)
    if type(bitmask) is np.ndarray:
        if hit is not None and hit[0] is bitmask and hit[4] == bitmask.shape:
            return hit
        if bitmask.dtype != np.int32:
            raise _layout_error(bitmask, f"this one is {bitmask.dtype}")
        view, ptr, device = bitmask, None, "cpu"
        contiguous = bitmask.flags.c_contiguous
        writable = bitmask.flags.writeable
    else:
        torch = _torch()
        if torch is None or not isinstance(bitmask, torch.Tensor):
            raise BitmaskError(f"a bitmask must be a numpy array or torch tensor, not "
                               f"{type(bitmask).__name__}")
        if bitmask.layout != torch.strided:  # (a sparse one was torch's raw RuntimeError)
            raise BitmaskError(f"a bitmask is a dense tensor, not a {bitmask.layout} one")
        ptr = bitmask.data_ptr()
        if hit is not None and hit[0] is bitmask and hit[3] == ptr and \
                hit[4] == tuple(bitmask.shape) and bitmask.is_contiguous():
            return hit
        if bitmask.dtype != torch.int32:
            raise _layout_error(bitmask, f"this one is {bitmask.dtype}")
        device = bitmask.device.type
        contiguous = bitmask.is_contiguous()
        writable = True
        view = bitmask.numpy() if device == "cpu" else None
    shape = tuple(bitmask.shape)
    if len(shape) != 2:
        raise _layout_error(bitmask, f"this one has shape {shape}")
    if not contiguous:
        raise _layout_error(bitmask, "this one is not C-contiguous")
    if not writable:
        raise _layout_error(bitmask, "this one is read-only")
    rows = None
    if view is not None and view.size:
        # one memoryview sliced per row: the first fill of a new bitmask right
        # after a garbage collection (cold caches) costs ~60 us less than one
        # memoryview per numpy row
        flat = memoryview(view).cast("B")
        width = 4 * shape[1]
        rows = [flat[i * width:(i + 1) * width] for i in range(shape[0])]
    return _VIEWS.put(key, Target((bitmask, view, rows, ptr, shape)))


def check_bitmask(bitmask, words: int, row) -> tuple[Target, int]:
    """``(target, row)``: ``bitmask`` checked to take a mask of ``words`` int32
    words in row ``row`` (an index, ``0 <= row < batch``; numpy integers are
    fine), or :class:`~constrain.errors.BitmaskError` saying what is wrong.
    Wider rows are fine (the words past ``words`` are zeroed)."""
    target = _target(bitmask)
    n, width = target[4]
    if width < words:
        raise BitmaskError(f"the bitmask has {width} words per row but the vocabulary needs "
                           f"{words} (allocate it with allocate_bitmask(batch, len(vocab)))")
    r = as_index(row, lambda: BitmaskError(f"a bitmask row is an index, not {row!r}"))
    if not 0 <= r < n:
        raise BitmaskError(f"row {r} is outside the bitmask's {n} rows")
    return target, r


def write_row(target: Target, row: int, words: np.ndarray) -> None:
    """Write the uint32 ``words`` into row ``row`` of a checked bitmask and zero
    the rest of the row (a CPU bitmask of any width, or a tensor on another
    device)."""
    w = len(words)
    view = target[1]
    if view is not None:
        view[row, :w] = words.view(np.int32)
        view[row, w:] = 0
        return
    import torch

    dst = target[0][row]
    # a copy: cached rows are read-only, which torch.from_numpy refuses to wrap
    dst[:w].copy_(torch.from_numpy(words.view(np.int32).copy()), non_blocking=True)
    if dst.shape[0] > w:
        dst[w:].zero_()


# A row writer copies one precomputed mask row into a bitmask row. Copying a 25 KB
# o200k row with memoryview assignment reads 25 KB and writes 25 KB (~0.5 us);
# most grammar states allow few tokens, and for them ``struct.pack_into`` of a
# format like "460s24544x" zeroes the row (pack_into memsets its whole size
# first) and copies only the non-zero spans: 0.29-0.38 us on o200k. Below ~14 KB
# both buffers fit the L1 cache and the plain copy is faster (6 KB SmolLM2 row:
# copy 0.13 us, pack_into 0.18 us).
_PACK_MIN_BYTES = 14 * 1024
_MAX_SPANS = 8  # each span is one argument of the pack_into call
_SPAN_GAP = 64  # zero bytes between two non-zero spans worth a separate span
#: the struct format of a row with k spans, by k: zero bytes, span, ..., zero
#: bytes (``0x``, a span at either end, pads nothing)
_SPAN_FORMATS = tuple("%dx%ds" * k + "%dx" for k in range(_MAX_SPANS + 1))


def row_writer(row: memoryview):
    """How to write the byte row ``row`` into a bitmask row of the same length:
    ``(pack_into, spans)`` for a mostly-zero row (call ``pack_into(dst, 0, *spans)``),
    or ``row`` itself for a dense one (``dst[:] = row``)."""
    if len(row) < _PACK_MIN_BYTES:
        return row
    # few numpy steps (each costs ~10 us on a cold CPU cache: a first walk
    # makes one writer per state), and nonzero through a bool array, ~6x faster
    # than on uint8 (a 25 KB o200k row: 37 -> 6 us)
    nz = np.flatnonzero(np.frombuffer(row, dtype=np.uint8) != 0)
    if len(nz) == 0:
        return span_writer(row, [], [])
    first, last = int(nz[0]), int(nz[-1]) + 1
    breaks = np.flatnonzero(np.diff(nz) > _SPAN_GAP)
    if len(breaks) >= _MAX_SPANS:  # one span from the first non-zero byte to the last
        starts, ends = [first], [last]
    else:
        breaks = breaks.tolist()
        starts = [first] + [int(nz[i + 1]) for i in breaks]
        ends = [int(nz[i]) + 1 for i in breaks] + [last]
    if (sum(ends) - sum(starts)) * 2 > len(row):
        return row
    return span_writer(row, starts, ends)


def span_writer(row: memoryview, starts: list, ends: list):
    """:func:`row_writer`'s ``(pack_into, spans)`` for the byte row ``row``
    whose non-zero bytes lie in the spans ``[starts[i], ends[i])`` (ascending,
    at least 65 zero bytes apart; none: an all-zero row). For callers that
    know the spans (the regex walk kernel finds them as it writes the row)."""
    sizes = []
    at = 0
    for a, b in zip(starts, ends):
        sizes += (a - at, b - a)
        at = b
    sizes.append(len(row) - at)
    k = len(starts)
    fmt = _SPAN_FORMATS[k] if k < len(_SPAN_FORMATS) else "%dx%ds" * k + "%dx"
    st = struct.Struct(fmt % tuple(sizes))
    # the format's pads are the row's zero bytes, so unpacking the row gives
    # its spans in one call (a bytes() slice each and the format built piece
    # by piece: a new o200k state's writer 15-23 -> 10-11 us in first walks)
    return st.pack_into, st.unpack_from(row)
