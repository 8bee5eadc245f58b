"""Regexes for JSON numbers within bounds, built digit by digit.

Every regex here matches canonical JSON number text only (RFC 8259: no leading
zeros, no ``+`` sign, no ``-0``), so the value of a matched text is unambiguous and
the bound checks are exact decisions on the decimal text.

Used by :mod:`constrain.frontends.json_schema.compiler` for ``minimum``/``maximum``/``exclusive*`` and
integer ``multipleOf``.
"""

from __future__ import annotations

import math
from decimal import Decimal
from fractions import Fraction

import numpy as np

from constrain.frontends.json_schema.caches import table

__all__ = ["int_range_regex", "decimal_range_regex", "nat_multiple_regex",
           "float_multiple_regex", "FLOAT_MULTIPLE_VALUES"]


def _alt(parts: list[str]) -> str | None:
    """``(?:a|b|...)``, or the single part, or ``None`` when there is none."""
    parts = [p for p in parts if p is not None]
    if not parts:
        return None
    if len(parts) == 1:
        return parts[0]
    return "(?:" + "|".join(parts) + ")"


def _digit_class(lo: int, hi: int) -> str:
    if lo == hi:
        return str(lo)
    if lo == 0 and hi == 9:
        return r"[0-9]"
    return f"[{lo}-{hi}]"


def _rep_digits(n: int) -> str:
    if n == 0:
        return ""
    if n == 1:
        return r"[0-9]"
    return r"[0-9]{%d}" % n


def _same_length(lo: str, hi: str) -> str:
    """Digit strings of ``len(lo)`` between ``lo`` and ``hi`` (inclusive, lo <= hi)."""
    if not lo:
        return ""
    if lo[0] == hi[0]:
        return lo[0] + _same_length(lo[1:], hi[1:])
    rest = len(lo) - 1
    a, b = int(lo[0]), int(hi[0])
    parts = []
    # fold an edge digit into the middle class when its tail spans everything
    low_full = set(lo[1:]) <= {"0"}
    high_full = set(hi[1:]) <= {"9"}
    mid_lo = a if low_full else a + 1
    mid_hi = b if high_full else b - 1
    if not low_full:
        parts.append(lo[0] + _same_length(lo[1:], "9" * rest))
    if mid_lo <= mid_hi:
        parts.append(_digit_class(mid_lo, mid_hi) + _rep_digits(rest))
    if not high_full:
        parts.append(hi[0] + _same_length("0" * rest, hi[1:]))
    return _alt(parts)


def _nat_range(lo: int, hi: int | None) -> str | None:
    """Canonical naturals in ``[lo, hi]`` (``hi=None``: unbounded)."""
    if lo < 0:
        raise ValueError("lo must be >= 0")
    if hi is not None and hi < lo:
        return None
    parts = []
    if lo == 0:
        parts.append("0")
        lo = 1
        if hi is not None and hi < 1:
            return "0"
    length = len(str(lo))
    while True:
        top = 10 ** length - 1
        if hi is not None and hi <= top:
            parts.append(_same_length(str(lo), str(hi)))
            break
        if hi is None and lo == 10 ** (length - 1):
            parts.append(r"[1-9][0-9]{%d,}" % (length - 1) if length > 1 else r"[1-9][0-9]*")
            break
        parts.append(_same_length(str(lo), str(top)))
        lo = top + 1
        length += 1
    return _alt(parts)


def int_range_regex(lo: int | None, hi: int | None) -> str | None:
    """Canonical JSON integers ``n`` with ``lo <= n <= hi`` (``None``: unbounded).

    Returns ``None`` when the range is empty. ``-0`` is never matched.
    """
    if lo is not None and hi is not None and lo > hi:
        return None
    parts = []
    # non-negative part
    if hi is None or hi >= 0:
        parts.append(_nat_range(max(lo, 0) if lo is not None else 0, hi))
    # negative part: magnitudes in [max(-hi, 1), -lo]
    if lo is None or lo < 0:
        mlo = max(-hi, 1) if hi is not None else 1
        mhi = -lo if lo is not None else None
        neg = _nat_range(mlo, mhi)
        if neg is not None:
            parts.append("-" + neg)
    return _alt(parts)


# -- decimals ---------------------------------------------------------------------

def _split(d: Decimal) -> tuple[int, str]:
    """A non-negative decimal as (integer part, fraction digits without trailing
    zeros)."""
    sign, digits, exp = d.normalize().as_tuple() if d != 0 else (0, (0,), 0)
    text = "".join(map(str, digits))
    if exp >= 0:
        return int(text + "0" * exp), ""
    point = len(text) + exp
    if point <= 0:
        return 0, ("0" * -point + text).rstrip("0")
    return int(text[:point]), text[point:].rstrip("0")


def _fraction_digits(a: str | None, sa: bool, b: str | None, sb: bool) -> str | None:
    """Non-empty digit strings ``D`` whose value ``0.D`` lies between ``0.a`` and
    ``0.b`` (``None``: no bound; ``sa``/``sb``: strict). ``a`` and ``b`` carry no
    trailing zeros."""
    return _fraction_from(a, sa, b, sb, 0, a is not None, b is not None, {})


def _fraction_from(a, sa, b, sb, i: int, tl: bool, tu: bool, memo: dict) -> str | None:
    """:func:`_fraction_digits` from digit ``i`` on; ``tl`` / ``tu``: the digits
    so far equal ``a[:i]`` / ``b[:i]`` (the bound is still tight). Memoised in
    ``memo`` by ``(i, tl, tu)`` (a module-level function and a dict: a nested
    recursive function under ``lru_cache`` was a reference cycle per call)."""
    key = (i, tl, tu)
    if key in memo:
        return memo[key]
    out = memo[key] = _fraction_step(a, sa, b, sb, i, tl, tu, memo)
    return out


def _fraction_step(a, sa, b, sb, i: int, tl: bool, tu: bool, memo: dict) -> str | None:
    if tl and i >= len(a) and not sa:
        tl = False  # a ends here: any continuation is >= a
    if not tl and not tu:
        return r"[0-9]*"
    if tu and i >= len(b):
        # b continues with zeros only: so must D, and then D == b
        return None if (sb or tl) else ("0*" if i > 0 else "0+")  # D is non-empty
    if tl and i >= len(a) and not tu:
        return r"[0-9]*[1-9][0-9]*"  # strictly above a, which ends here
    parts = []
    lo_d = int(a[i]) if tl and i < len(a) else 0
    hi_d = int(b[i]) if tu and i < len(b) else 9
    free = []
    for d in range(lo_d, hi_d + 1):
        ntl, ntu = tl and d == lo_d, tu and d == hi_d
        if ntl or ntu:
            sub = _fraction_from(a, sa, b, sb, i + 1, ntl, ntu, memo)
            if sub is not None:
                parts.append(str(d) + sub)
        else:
            free.append(d)
    if free:
        # free digits form one contiguous run (the edges are lo_d and hi_d)
        parts.append(_digit_class(free[0], free[-1]) + r"[0-9]*")
    # stopping here: the value is the prefix padded with zeros, which is below
    # a tight lower bound (a has a non-zero digit ahead, or equality is strict)
    # and below a tight upper bound (b has a non-zero digit ahead)
    if i > 0 and not tl:
        return "(?:" + "|".join(parts) + ")?" if parts else ""
    return _alt(parts)


def _fraction_part(a, sa, b, sb, *, required: bool) -> str | None:
    """The optional (``required``: mandatory) ``.D`` part of a number whose
    fractional value must lie between ``0.a`` and ``0.b``."""
    digits = _fraction_digits(a, sa, b, sb)
    parts = []
    if digits is not None:
        parts.append(r"\." + (digits if digits != r"[0-9]*" else r"[0-9]+"))
    if not required:
        zero_ok = (a is None or (a == "" and not sa)) and (b is None or b != "" or not sb)
        if zero_ok:
            if not parts:
                return ""
            return "(?:" + "|".join(parts) + ")?"
    return _alt(parts)


def _magnitude(lo: Decimal | None, slo: bool, hi: Decimal | None, shi: bool,
               *, required: bool) -> str | None:
    """Non-negative decimal texts ``I`` / ``I.D`` (``required``: ``I.D`` only) with
    value in the range; ``lo=None`` means 0 inclusive."""
    if lo is None:
        lo, slo = Decimal(0), False
    if hi is not None and (lo > hi or (lo == hi and (slo or shi))):
        return None
    li, lf = _split(lo)
    parts = []

    def join(int_re, frac_re):
        if int_re is None or frac_re is None:
            return None
        return int_re + frac_re

    if hi is None:
        parts.append(join(str(li), _fraction_part(lf, slo, None, False, required=required)))
        parts.append(join(_nat_range(li + 1, None), r"\.[0-9]+" if required else r"(?:\.[0-9]+)?"))
    else:
        hi_i, hf = _split(hi)
        if li == hi_i:
            parts.append(join(str(li), _fraction_part(lf, slo, hf, shi, required=required)))
        else:
            parts.append(join(str(li), _fraction_part(lf, slo, None, False, required=required)))
            if hi_i - 1 >= li + 1:
                parts.append(join(_nat_range(li + 1, hi_i - 1),
                                  r"\.[0-9]+" if required else r"(?:\.[0-9]+)?"))
            parts.append(join(str(hi_i), _fraction_part("", False, hf, shi, required=required)))
    return _alt(parts)


def decimal_range_regex(lo: Decimal | None, lo_strict: bool, hi: Decimal | None,
                        hi_strict: bool, *, fraction_required: bool = False) -> str | None:
    """Canonical JSON numbers without exponent (``-?(0|[1-9][0-9]*)(\\.[0-9]+)?``) whose
    exact decimal value lies in the range (``None``: unbounded; ``*_strict``:
    exclusive). ``fraction_required`` keeps only texts with a ``.``. Negative zero
    (``-0``, ``-0.0``) is never matched. ``None`` when nothing matches."""
    parts = []
    if hi is None or hi > 0 or (hi == 0 and not hi_strict):
        if lo is None or lo < 0:
            mlo, mslo = Decimal(0), False
        else:
            mlo, mslo = lo, lo_strict
        parts.append(_magnitude(mlo, mslo, hi, hi_strict, required=fraction_required))
    if lo is None or lo < 0:
        # -m in range  <=>  m in [-hi, -lo], with m > 0 (no negative zero)
        if hi is None or hi >= 0:
            mlo, mslo = Decimal(0), True
        else:
            mlo, mslo = -hi, hi_strict
        neg = _magnitude(mlo, mslo, -lo if lo is not None else None, lo_strict,
                         required=fraction_required)
        if neg is not None:
            parts.append("-" + neg)
    return _alt(parts)


def nat_multiple_regex(m: int) -> str | None:
    """Canonical positive naturals divisible by ``m``, when divisibility is decided
    by the last few digits (``m = 2^a 5^b`` with at most 1,000 suffixes); else
    ``None``."""
    a = b = 0
    r = m
    while r % 2 == 0:
        r //= 2
        a += 1
    while r % 5 == 0:
        r //= 5
        b += 1
    if r != 1:
        return None
    k = max(a, b, 1)
    if 10 ** k // m > 1000:
        return None
    small = [str(v) for v in range(m, 10 ** k, m)]
    suffixes = [str(v).zfill(k) for v in range(0, 10 ** k, m)]
    parts = []
    if small:
        parts.append(_trie_alt(small))
    parts.append(r"[1-9][0-9]*" + _trie_alt(suffixes))
    return _alt(parts)


def _trie_alt(words: list[str]) -> str:
    """An alternation of digit strings, factored by common prefixes."""
    if len(words) == 1:
        return words[0]
    groups: dict[str, list[str]] = {}
    ends = False
    for w in words:
        if not w:
            ends = True
            continue
        groups.setdefault(w[0], []).append(w[1:])
    parts = [c + _trie_alt(rest) if rest != [""] else c for c, rest in groups.items()]
    body = parts[0] if len(parts) == 1 else "(?:" + "|".join(parts) + ")"
    return f"(?:{body})?" if ends else body


def integer_bounds(lo, lo_excl: bool, hi, hi_excl: bool) -> tuple[int | None, int | None]:
    """The smallest and largest integers satisfying the (int or float) bounds,
    computed exactly."""
    ilo = ihi = None
    if lo is not None:
        if isinstance(lo, float) and math.isinf(lo):
            ilo = None if lo < 0 else None
        else:
            f = Fraction(lo)
            ilo = math.floor(f) + 1 if lo_excl else math.ceil(f)
    if hi is not None:
        if not (isinstance(hi, float) and math.isinf(hi)):
            f = Fraction(hi)
            ihi = math.ceil(f) - 1 if hi_excl else math.floor(f)
    return ilo, ihi


# -- multipleOf in floating point ---------------------------------------------------

#: how many decimal texts ``float_multiple_regex`` decides one by one (per sign)
FLOAT_MULTIPLE_VALUES = 10_000_000


def multiple_digits(m: float) -> int | None:
    """The number of fraction digits of the shortest decimal text of ``m`` (at most
    6), or ``None`` when it has more or an exponent."""
    text = repr(m)
    if "e" in text or "E" in text or "." not in text:
        return None
    d = len(text.split(".")[1].rstrip("0"))
    return d if d <= 6 else None


# at most FLOAT_MULTIPLE_VALUES bytes (10 MB) each: the translating compiler's
# tables, bounded in bytes (see caches.table)
@table
def _float_multiples(ms: tuple, digits: int) -> np.ndarray:
    """``ok[k]``: whether ``k / 10**digits``, as a float, passes ``jsonschema``'s
    ``multipleOf: m`` test for every ``m`` in ``ms`` (``q = x / m``; valid iff
    ``int(q) == q``).

    ``k / 10**digits`` in float64 is correctly rounded, hence equal to the float a
    JSON parser reads from the text, and the kernel divides as Python does (IEEE,
    no fast-math)."""
    from constrain.frontends.json_schema.number_kernels import float_multiples

    scale = 10 ** digits
    return float_multiples(np.asarray(ms, dtype=np.float64), scale,
                           (FLOAT_MULTIPLE_VALUES // scale) * scale)


#: at most this many runs of integer parts with one set of fractions, and this many
#: (distinct set, fraction) pairs, in one ``float_multiple_regex``
_MAX_RUNS = 256
_MAX_FRACTIONS = 20_000


@table
def _float_multiple_cap(ms: tuple, digits: int) -> tuple[int, np.ndarray]:
    """The largest cap (a power-of-ten share of the table) whose regex stays small
    (``m`` like ``0.3`` changes its set of fractions with every integer part), and
    the first row of each run of equal rows below it."""
    scale = 10 ** digits
    ok = _float_multiples(ms, digits)
    cap = len(ok) // scale
    starts = _run_starts(ok.reshape(cap, scale))
    while cap > 1:
        rows = ok[:cap * scale].reshape(cap, scale)
        if len(starts) <= _MAX_RUNS and \
                len(np.unique(rows[starts], axis=0)) * scale <= _MAX_FRACTIONS:
            break
        cap //= 10
        starts = starts[starts < cap]
    return cap, starts


def _run_starts(rows: np.ndarray) -> np.ndarray:
    """The first row of each run of equal rows."""
    from constrain.frontends.json_schema.number_kernels import run_starts

    return run_starts(np.ascontiguousarray(rows))


def _digit_suffixes(words: list[str]) -> str:
    """A prefix-factored alternation of equal-length digit strings whose last digit
    becomes a character class."""
    if len(words[0]) == 1:
        digits = sorted(int(w) for w in words)
        runs, start = [], digits[0]
        for a, b in zip(digits, digits[1:] + [None]):
            if b != a + 1:
                runs.append(_digit_class(start, a) if a - start != 1 else f"{start}{a}")
                start = b
        body = "".join(r.strip("[]") for r in runs)
        return body if len(digits) == 1 else f"[{body}]"
    groups: dict[str, list[str]] = {}
    for w in words:
        groups.setdefault(w[0], []).append(w[1:])
    by_tail: dict[str, list[str]] = {}
    for c, rest in groups.items():
        by_tail.setdefault(_digit_suffixes(rest), []).append(c)
    parts = [_digit_suffixes(cs) + tail for tail, cs in by_tail.items()]
    return _alt(parts)


@table
def float_multiple_regex(ms: tuple, lo, lo_strict: bool, hi, hi_strict: bool,
                         *, integers: bool, fractions: bool = True) -> tuple[str | None, int]:
    """Canonical JSON number texts with at most ``max(multiple_digits(m))`` fraction
    digits that ``jsonschema`` accepts under ``multipleOf: m`` for every float ``m``
    in ``ms`` and within the bounds (``None``: none; ``*_strict``: exclusive), for
    magnitudes below a cap.

    ``jsonschema`` divides in floating point, so whether ``0.07`` is a multiple of
    ``0.01`` (it is not: ``0.07 / 0.01 == 7.000000000000001``) depends on rounding,
    not on digits. Each candidate up to ``FLOAT_MULTIPLE_VALUES`` per sign is decided
    as ``jsonschema`` decides it; the decisions are constant over long runs of
    integer parts, which keeps the regex small. Where they are not (``0.3``), the
    cap shrinks by tenfold steps until the regex is small. Texts with a fraction are
    emitted when ``fractions``, integer texts when ``integers``. Returns the regex
    (``None`` when empty) and the cap: the integer part of every matched text is
    below it.
    """
    each = [multiple_digits(m) for m in ms]
    if not ms or None in each:
        raise ValueError(f"a multipleOf in {ms!r} has no short decimal text")
    digits = max(each)
    ms = tuple(sorted(set(ms)))
    scale = 10 ** digits
    cap, starts_all = _float_multiple_cap(ms, digits)
    rows_all = _float_multiples(ms, digits)[:cap * scale].reshape(cap, scale)
    ends_all = np.concatenate((starts_all[1:], [cap])) - 1
    ok_len = cap * scale
    parts = []
    for sign in (1, -1):
        # allowed k (value sign * k / scale) within the bounds, exactly
        kmin, kmax = 0, ok_len - 1
        for bound, strict, is_lo in ((lo, lo_strict, True), (hi, hi_strict, False)):
            if bound is None:
                continue
            b = Fraction(bound) * scale * sign
            if is_lo == (sign == 1):  # a lower bound on sign * k
                kmin = max(kmin, math.floor(b) + 1 if strict else math.ceil(b))
            else:
                kmax = min(kmax, math.ceil(b) - 1 if strict else math.floor(b))
        if kmin > kmax:
            continue
        # the unbounded runs of equal rows, clipped to the rows the bounds touch;
        # the (at most two) rows a bound cuts through are masked on their own
        rmin, rmax = kmin // scale, kmax // scale
        spans_rows = []  # (first row, last row, row pattern)
        for a, b in zip(starts_all.tolist(), ends_all.tolist()):
            a, b = max(a, rmin), min(b, rmax)
            if a > b:
                continue
            spans_rows.append((a, b, rows_all[a]))
        for r in {rmin, rmax, 0 if sign == -1 else rmin}:
            if not rmin <= r <= rmax:
                continue
            row = rows_all[r].copy()
            lo_k, hi_k = r * scale, r * scale + scale - 1
            if kmin > lo_k:
                row[:kmin - lo_k] = False
            if kmax < hi_k:
                row[kmax - lo_k + 1:] = False
            if sign == -1 and r == 0:
                row[0] = False  # no -0
            cut = []
            for a, b, pat in spans_rows:
                if a <= r <= b:
                    cut += [(a, r - 1, pat)] if a < r else []
                    cut.append((r, r, row))
                    cut += [(r + 1, b, pat)] if r < b else []
                else:
                    cut.append((a, b, pat))
            spans_rows = cut
        by_row: dict[bytes, list[tuple[int, int]]] = {}
        row_of = {}
        for a, b, pat in spans_rows:
            if not pat.any():
                continue
            key = pat.tobytes()
            spans = by_row.setdefault(key, [])
            if spans and spans[-1][1] == a - 1:  # a cut row equal to its neighbours
                spans[-1] = (spans[-1][0], b)
            else:
                spans.append((a, b))
            row_of[key] = pat
        alts = []
        for key, spans in by_row.items():
            row = row_of[key]
            ints = _alt([_nat_range(a, b) for a, b in spans])
            fracs = []
            for length in range(1, digits + 1):
                step = 10 ** (digits - length)
                fracs += [str(f).zfill(length) for f in range(10 ** length) if row[f * step]]
            by_len: dict[int, list[str]] = {}
            for f in fracs:
                by_len.setdefault(len(f), []).append(f)
            tail = _alt([_digit_suffixes(ws) for ws in by_len.values()])
            if fractions:
                alts.append(f"{ints}\\.{tail}")
            if integers and row[0]:
                alts.append(ints)
        body = _alt(alts)
        if body is not None:
            parts.append(body if sign == 1 else f"-(?:{body})")
    return _alt(parts), cap

