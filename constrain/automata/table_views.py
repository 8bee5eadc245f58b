"""A kernel's tables passed as one small array of descriptors.

numba's dispatcher unboxes every array argument on every call: ~45 ns an
array in a hot loop, ~110 ns on a first walk's cold caches, under the GIL. The
Earley step took 18 arrays: of its 3.5 us a call (MaskBench first walks,
in-process), 2.2 us was the dispatch, as an empty kernel with the same
arguments measured. A :class:`TableViews` holds an object's tables and one
int64 array of descriptors, a row ``(address, rows, columns)`` per table; a
kernel takes that array alone (~0.2 us to pass) and views each table through
the view of its dtype and dimension (``i32_1d``, ``u64_2d``... listed in
:data:`VIEWS`: a few instructions, no allocation).

What keeps this safe: :meth:`TableViews.bind` refuses an array of another
dtype, dimension or layout than its slot declares, and a read-only one (the
views are writable), so a view is never wider than its array. The views keep
the arrays they describe alive, and an owner has one descriptor array, rebound
in place by the one method that replaces its tables after a growth (where it
rebound its loose arguments before), so whoever holds the array reads the
current tables; a table replaced is released, so the owner rebinds only
between kernel calls, under the lock its kernels run under, as it grew its
tables before. Copies and pickles describe their own arrays
(:meth:`TableViews.__reduce__`).
"""

from __future__ import annotations

import numpy as np
from numba import carray, literal_unroll, from_dtype, njit, types
from numba.core.extending import intrinsic, overload
from numba.np.numpy_support import as_dtype

__all__ = ["TableLayout", "TableViews", "VIEWS"]

#: descriptor columns
ADDRESS, ROWS, COLUMNS = 0, 1, 2


def _pointer_intrinsic(dtype):
    """An intrinsic that reads an int64 as a pointer to ``dtype`` elements."""
    nb_type = from_dtype(np.dtype(dtype))

    @intrinsic
    def as_pointer(typingctx, address):
        sig = types.CPointer(nb_type)(types.int64)

        def codegen(context, builder, signature, args):
            return builder.inttoptr(args[0], context.get_value_type(types.CPointer(nb_type)))

        return sig, codegen

    return as_pointer


_p_i8 = _pointer_intrinsic(np.int8)
_p_i16 = _pointer_intrinsic(np.int16)
_p_u8 = _pointer_intrinsic(np.uint8)
_p_b1 = _pointer_intrinsic(np.bool_)
_p_i32 = _pointer_intrinsic(np.int32)
_p_u32 = _pointer_intrinsic(np.uint32)
_p_i64 = _pointer_intrinsic(np.int64)
_p_u64 = _pointer_intrinsic(np.uint64)


@njit(cache=True, nogil=True, inline="always")
def i8_1d(desc, i):
    """Slot ``i`` of ``desc`` as a one-dimensional int8 array."""
    return carray(_p_i8(desc[i, ADDRESS]), (desc[i, ROWS],))


@njit(cache=True, nogil=True, inline="always")
def i8_2d(desc, i):
    """Slot ``i`` of ``desc`` as a ``(rows, columns)`` int8 array."""
    return carray(_p_i8(desc[i, ADDRESS]), (desc[i, ROWS], desc[i, COLUMNS]))


@njit(cache=True, nogil=True, inline="always")
def i16_1d(desc, i):
    """Slot ``i`` of ``desc`` as a one-dimensional int16 array."""
    return carray(_p_i16(desc[i, ADDRESS]), (desc[i, ROWS],))


@njit(cache=True, nogil=True, inline="always")
def i16_2d(desc, i):
    """Slot ``i`` of ``desc`` as a ``(rows, columns)`` int16 array."""
    return carray(_p_i16(desc[i, ADDRESS]), (desc[i, ROWS], desc[i, COLUMNS]))


@njit(cache=True, nogil=True, inline="always")
def u8_1d(desc, i):
    """Slot ``i`` of ``desc`` as a one-dimensional uint8 array."""
    return carray(_p_u8(desc[i, ADDRESS]), (desc[i, ROWS],))


@njit(cache=True, nogil=True, inline="always")
def u8_2d(desc, i):
    """Slot ``i`` of ``desc`` as a ``(rows, columns)`` uint8 array."""
    return carray(_p_u8(desc[i, ADDRESS]), (desc[i, ROWS], desc[i, COLUMNS]))


@njit(cache=True, nogil=True, inline="always")
def b1_1d(desc, i):
    """Slot ``i`` of ``desc`` as a one-dimensional bool_ array."""
    return carray(_p_b1(desc[i, ADDRESS]), (desc[i, ROWS],))


@njit(cache=True, nogil=True, inline="always")
def b1_2d(desc, i):
    """Slot ``i`` of ``desc`` as a ``(rows, columns)`` bool_ array."""
    return carray(_p_b1(desc[i, ADDRESS]), (desc[i, ROWS], desc[i, COLUMNS]))


@njit(cache=True, nogil=True, inline="always")
def i32_1d(desc, i):
    """Slot ``i`` of ``desc`` as a one-dimensional int32 array."""
    return carray(_p_i32(desc[i, ADDRESS]), (desc[i, ROWS],))


@njit(cache=True, nogil=True, inline="always")
def i32_2d(desc, i):
    """Slot ``i`` of ``desc`` as a ``(rows, columns)`` int32 array."""
    return carray(_p_i32(desc[i, ADDRESS]), (desc[i, ROWS], desc[i, COLUMNS]))


@njit(cache=True, nogil=True, inline="always")
def u32_1d(desc, i):
    """Slot ``i`` of ``desc`` as a one-dimensional uint32 array."""
    return carray(_p_u32(desc[i, ADDRESS]), (desc[i, ROWS],))


@njit(cache=True, nogil=True, inline="always")
def u32_2d(desc, i):
    """Slot ``i`` of ``desc`` as a ``(rows, columns)`` uint32 array."""
    return carray(_p_u32(desc[i, ADDRESS]), (desc[i, ROWS], desc[i, COLUMNS]))


@njit(cache=True, nogil=True, inline="always")
def i64_1d(desc, i):
    """Slot ``i`` of ``desc`` as a one-dimensional int64 array."""
    return carray(_p_i64(desc[i, ADDRESS]), (desc[i, ROWS],))


@njit(cache=True, nogil=True, inline="always")
def i64_2d(desc, i):
    """Slot ``i`` of ``desc`` as a ``(rows, columns)`` int64 array."""
    return carray(_p_i64(desc[i, ADDRESS]), (desc[i, ROWS], desc[i, COLUMNS]))


@njit(cache=True, nogil=True, inline="always")
def u64_1d(desc, i):
    """Slot ``i`` of ``desc`` as a one-dimensional uint64 array."""
    return carray(_p_u64(desc[i, ADDRESS]), (desc[i, ROWS],))


@njit(cache=True, nogil=True, inline="always")
def u64_2d(desc, i):
    """Slot ``i`` of ``desc`` as a ``(rows, columns)`` uint64 array."""
    return carray(_p_u64(desc[i, ADDRESS]), (desc[i, ROWS], desc[i, COLUMNS]))


#: per dtype, the one- and two-dimensional views (what a slot's kernel calls)
VIEWS = {
    np.dtype(np.int8): (i8_1d, i8_2d),
    np.dtype(np.int16): (i16_1d, i16_2d),
    np.dtype(np.uint8): (u8_1d, u8_2d),
    np.dtype(np.bool_): (b1_1d, b1_2d),
    np.dtype(np.int32): (i32_1d, i32_2d),
    np.dtype(np.uint32): (u32_1d, u32_2d),
    np.dtype(np.int64): (i64_1d, i64_2d),
    np.dtype(np.uint64): (u64_1d, u64_2d),
}


#: a code per dtype a slot may have (what :func:`_describe` checks)
DTYPE_CODES = {np.dtype(d): k for k, d in enumerate(
    (np.int8, np.int16, np.uint8, np.bool_, np.int32, np.uint32, np.int64, np.uint64))}


def _code(a):
    """:data:`DTYPE_CODES` of ``a``'s dtype, -1 for another or a read-only
    array (in kernels: a constant of the array's type)."""
    return DTYPE_CODES.get(a.dtype, -1) if a.flags.writeable else -1


@overload(_code, jit_options={"cache": True})
def _code_of_type(a):
    # a read-only array is refused (-1): the kernels write through their views,
    # and numba's own read-only array type, which refused that, is gone in them
    k = DTYPE_CODES.get(np.dtype(as_dtype(a.dtype)), -1) if a.mutable else -1
    return lambda a: k


@njit(cache=True, nogil=True)
def _describe(desc, tables, codes):
    """Write each array of the tuple ``tables`` into its row of ``desc``
    (address, rows, columns) when it is what ``codes`` says its slot holds
    (dtype code, dimensions, itemsize) and C-contiguous; else the index of
    the first that is not (nothing after it written), or -1."""
    i = 0
    for a in literal_unroll(tables):
        rows = a.shape[0]
        cols = a.size // rows if rows else 0
        ok = _code(a) == codes[i, 0] and a.ndim == codes[i, 1] and a.itemsize == codes[i, 2]
        if ok and a.size > 1:
            ok = a.strides[-1] == a.itemsize and (a.ndim == 1 or rows <= 1
                                                  or a.strides[0] == cols * a.itemsize)
        if not ok:
            return i
        desc[i, ADDRESS] = a.ctypes.data
        desc[i, ROWS] = rows
        desc[i, COLUMNS] = cols if a.ndim == 2 else 1
        i += 1
    return -1


class TableLayout:
    """What the slots of a :class:`TableViews` hold: ``slots``, per table
    ``(np.dtype, ndim)``, and ``codes``, per slot the dtype code
    (:data:`DTYPE_CODES`), dimensions and itemsize that :func:`_describe`
    checks. Made once per kind of owner, at import (normalising the slots
    took ~25 us, more than binding them)."""

    __slots__ = ("slots", "codes")

    def __init__(self, slots):
        self.slots = tuple((np.dtype(d), int(n)) for d, n in slots)
        for d, n in self.slots:
            if d not in VIEWS or n not in (1, 2):
                raise TypeError(f"no kernel view of {n}-dimensional {d} arrays")
        codes = np.array([(DTYPE_CODES[d], n, d.itemsize) for d, n in self.slots],
                         dtype=np.int64).reshape(-1, 3)
        codes.flags.writeable = False
        self.codes = codes


class TableViews:
    """Tables behind one descriptor array (see the module docstring).

    Args:
        slots: a :class:`TableLayout`, or per table ``(dtype, ndim)``: what
            :meth:`bind` accepts there.

    ``desc`` is the ``(len(slots), 3)`` int64 array a kernel takes. Not
    thread-safe by itself: its owner binds under the lock its kernels run
    under."""

    __slots__ = ("slots", "desc", "tables", "_codes", "_fresh")

    def __init__(self, slots):
        layout = slots if slots.__class__ is TableLayout else TableLayout(slots)
        self.slots, self._codes = layout.slots, layout.codes
        self.desc = np.zeros((len(self.slots), 3), dtype=np.int64)
        self.tables: list = [None] * len(self.slots)
        # nothing bound yet (by bind or bind_all): no descriptor to keep
        self._fresh = True

    def bind(self, i: int, array: np.ndarray) -> None:
        """Describe ``array`` in slot ``i`` (and keep it alive): ``TypeError``
        unless it is a C-contiguous array of the slot's dtype and dimension."""
        dtype, ndim = self.slots[i]
        if array.__class__ is not np.ndarray or array.dtype != dtype or array.ndim != ndim \
                or not array.flags.c_contiguous or not array.flags.writeable:
            raise TypeError(f"slot {i} takes a writable C-contiguous {ndim}-dimensional {dtype} "
                            f"array, not {getattr(array, 'dtype', type(array))!s} of shape "
                            f"{getattr(array, 'shape', None)}")
        shape = array.shape
        self.desc[i] = (array.ctypes.data, shape[0], shape[1] if ndim == 2 else 1)
        self.tables[i] = array
        self._fresh = False

    def bind_all(self, arrays) -> None:
        """:meth:`bind` every slot, in order, in one kernel call
        (:func:`_describe`: ~0.1 us a table, where :meth:`bind` takes ~1.5,
        most of it ``ndarray.ctypes``; an owner binds tens of tables per
        compile). What the kernel refuses, :meth:`bind` says why."""
        arrays = tuple(arrays)
        if len(arrays) != len(self.slots):
            raise TypeError(f"{len(self.slots)} tables, not {len(arrays)}")
        for a in arrays:
            if a.__class__ is not np.ndarray:
                raise TypeError(f"tables are numpy arrays, not {type(a).__name__}")
        # a rebinding is described apart first: a refused table leaves the
        # descriptors as they were, naming only the tables still kept alive
        # (the first binding, once per compile for each owner, writes in
        # place: there is nothing to keep)
        first = self._fresh
        desc = self.desc if first else np.empty_like(self.desc)
        bad = _describe(desc, arrays, self._codes)
        if bad >= 0:
            if first:
                desc.fill(0)
            self.bind(bad, arrays[bad])  # raises
            raise AssertionError(f"slot {bad} refused and then taken")
        if not first:
            self.desc[:] = desc
        self.tables[:] = arrays
        self._fresh = False

    def __reduce__(self):
        # the addresses are this process's and these arrays': a copy describes its own
        return (_rebuilt, (self.slots, self.tables))


def _rebuilt(slots, tables) -> TableViews:
    views = TableViews(slots)
    if all(t is not None for t in tables):
        views.bind_all(tables)
    return views
