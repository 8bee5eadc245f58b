"""Numbers and integers: one terminal for the values within the bounds and
``multipleOf`` of a conjunction (less the values of a ``not: {enum}``).

Integers never carry a fraction or an exponent, bounded numbers no exponent:
the strict side, where exactness would be costly."""

from __future__ import annotations

import math
import sys
from decimal import Decimal
from fractions import Fraction
from typing import TYPE_CHECKING

from constrain.automata.byte_dfa import minimize_char_dfa
from constrain.automata.char_dfa import CharDFA
from constrain.automata.charset import CharSet
from constrain.errors import GrammarTooComplexError, SchemaError
from constrain.automata.json_encoding import JSON_INTEGER, JSON_NUMBER
from constrain.frontends.json_schema.formats import FORMATS
from constrain.frontends.json_schema.regex_product import intersect, product, regex_dfa, to_regex
from constrain.frontends.json_schema.number_ranges import (
    _trie_alt,
    decimal_range_regex,
    float_multiple_regex,
    int_range_regex,
    integer_bounds,
    multiple_digits,
    nat_multiple_regex,
)

if TYPE_CHECKING:
    from constrain.frontends.json_schema.translation import Translation

_BOUND_KEYWORDS = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")


def num_bounds(doc, conj, quiet: bool = False):
    """``(lo, lo_exclusive, hi, hi_exclusive)`` from every node (tightest).

    Raises:
        SchemaError: a bound that is not a finite number (unless ``quiet``).
    """
    lo = hi = None
    lo_x = hi_x = False

    def tighter_lo(v, x):
        nonlocal lo, lo_x
        if lo is None or Fraction(v) > Fraction(lo) or (Fraction(v) == Fraction(lo) and x):
            lo, lo_x = v, x

    def tighter_hi(v, x):
        nonlocal hi, hi_x
        if hi is None or Fraction(v) < Fraction(hi) or (Fraction(v) == Fraction(hi) and x):
            hi, hi_x = v, x

    for p in conj:
        n = doc.node(p)
        if not isinstance(n, dict):
            continue
        for key in _BOUND_KEYWORDS:
            v = n.get(key)
            if v is None or isinstance(v, bool):
                continue
            if not isinstance(v, (int, float)) or (isinstance(v, float) and not math.isfinite(v)):
                if not quiet:
                    raise SchemaError(f"{key} must be a number", f"{p}/{key}")
                continue
            if key == "minimum":
                tighter_lo(v, n.get("exclusiveMinimum") is True)  # draft 4's boolean form
            elif key == "maximum":
                tighter_hi(v, n.get("exclusiveMaximum") is True)
            elif key == "exclusiveMinimum":
                tighter_lo(v, True)
            else:
                tighter_hi(v, True)
    return lo, lo_x, hi, hi_x


def _multiple_ofs(doc, conj):
    """``(mult, float_ms, float_cap, integral)``: the lcm of the integer
    ``multipleOf`` values; the others as ``(pointer, m, exact)``, ``exact`` when
    integer texts are exact up to ``float_cap``; ``integral``: an integer value
    (``1`` and ``1.0`` included) was among them, so only integers are multiples.

    jsonschema tests ``int(x / m) == x / m`` in floating point. For ``m`` within
    2^-54 (relative) of ``1/M`` and an integer ``x`` with ``|x*M| < 2^53``,
    ``x / m`` rounds to ``x*M`` exactly: integer texts in that range are valid.
    Beyond it the quotient is at least 2^52, where every float is an integer:
    valid too, as long as it is finite (``x*M`` below 10^307; past that
    jsonschema decides by exact fractions), so the cap is then the grammar's
    own (:data:`_MAX_BOUND`)."""
    mult = 1
    float_cap = None
    float_ms = []
    integral = False
    for p in conj:
        n = doc.node(p)
        if not isinstance(n, dict) or "multipleOf" not in n:
            continue
        m = n["multipleOf"]
        if isinstance(m, bool) or not isinstance(m, (int, float)) or m <= 0:
            raise SchemaError("multipleOf must be a positive number", f"{p}/multipleOf")
        if isinstance(m, float) and not m.is_integer():
            big_m = round(1 / m)
            exact = big_m >= 1 and abs(Fraction(m) - Fraction(1, big_m)) * big_m < Fraction(1, 2 ** 54)
            if exact:
                cap = _MAX_INT if big_m * _MAX_INT < 10 ** 307 else (2 ** 53 - 1) // big_m
                float_cap = cap if float_cap is None else min(float_cap, cap)
            float_ms.append((p, m, exact))
            continue
        integral = True
        mult = mult * int(m) // math.gcd(mult, int(m))
    return mult, float_ms, float_cap, integral


#: numbers are written below this magnitude (see number_symbol)
_MAX_BOUND = 1e30
_FLOAT_MAX = sys.float_info.max
_MAX_INT = 10 ** 30 - 1


def _bound_pointer(doc, conj, v) -> str:
    """The pointer of the bound keyword whose value is ``v``."""
    for p in conj:
        n = doc.node(p)
        if isinstance(n, dict):
            for key in _BOUND_KEYWORDS:
                if key in n and n[key] == v and not isinstance(n[key], bool):
                    return f"{p}/{key}"
    return ""


def _formats_on_numbers(t: Translation, conj) -> None:
    """Name the formats of the conjunction that would assert on numbers
    (OpenAPI's ``int32``, ``int64``, ``float``, ``double``...): none is
    enforced. String formats (``date``...) apply to strings only, so say
    nothing about numbers."""
    for p in conj:
        n = t.doc.node(p)
        f = n.get("format") if isinstance(n, dict) else None
        if isinstance(f, str) and f not in FORMATS:
            t.diag.format_not_enforced(f"{p}/format", f, "on a number, no format is enforced")


def number_symbol(t: Translation, conj, integer: bool, excluded=()) -> str | None:
    """One terminal for the numbers (``integer``: integers) within the bounds
    and ``multipleOf`` of the conjunction, less the ``excluded`` values."""
    doc, g = t.doc, t.grammar
    if t.options.formats == "assert":
        _formats_on_numbers(t, conj)
    lo, lo_x, hi, hi_x = num_bounds(doc, conj)
    # a bound's digits become a chain of automaton states each (a bound of
    # hundreds of digits took seconds and a gigabyte): a far bound is lowered to
    # the cap, leaving out only numbers beyond it (the strict side); a near
    # bound beyond the cap admits no number the grammar writes
    if hi is not None and hi >= _MAX_BOUND:
        hi, hi_x = _MAX_BOUND, True
    if lo is not None and lo <= -_MAX_BOUND:
        lo, lo_x = -_MAX_BOUND, True
    for v in (lo, hi):
        if v is not None and abs(v) > _MAX_BOUND:
            t.diag.unsupported(_bound_pointer(doc, conj, v),
                               f"a bound of magnitude {Decimal(v):.3g} (beyond {_MAX_BOUND:g})")
    bounds = lo, lo_x, hi, hi_x
    if excluded:
        return _number_excluding(t, conj, integer, excluded, bounds)
    mult, float_ms, float_cap, integral = _multiple_ofs(doc, conj)
    # a multiple of an integer is an integer: multipleOf 1 (or 1.0) is no
    # constraint only on integers (2.5 was accepted under it: unsound)
    integer = integer or integral
    ilo, ihi = integer_bounds(lo, lo_x, hi, hi_x)
    if float_cap is not None:
        ilo = -float_cap if ilo is None else max(ilo, -float_cap)
        ihi = float_cap if ihi is None else min(ihi, float_cap)
    if float_ms:
        # texts with a fraction (and integer texts where the argument of
        # _multiple_ofs does not hold) are decided value by value as jsonschema
        # decides them, up to a magnitude cap
        ms = tuple(m for _, m, _ in float_ms)
        exact = all(e for _, _, e in float_ms)
        if mult == 1 and all(multiple_digits(m) is not None for m in ms) \
                and (not exact or not integer):
            return _float_multiples(t, ms, exact, integer, bounds, ilo, ihi)
        for p, m, exact in float_ms:
            if not exact:
                t.diag.unsupported(f"{p}/multipleOf",
                                   "a non-integer multipleOf (jsonschema decides it in floating point)")
        # texts with a fraction are not decided by their digits: left out
        integer = True
    if float_cap is not None:
        lo = ilo if lo is None else lo
        hi = ihi if hi is None else hi
    if mult > 1:
        rx = _multiples(t, ilo, ihi, mult, conj)
        return None if rx is None else g.terminal(rx, "INT")
    parts = []
    if integer or lo is not None or hi is not None:
        rx = int_range_regex(ilo, ihi) if (lo is not None or hi is not None) else JSON_INTEGER
        if rx is not None:
            parts.append(rx)
    if integer:
        return g.terminal(parts[0], "INT") if parts else None
    if lo is None and hi is None:
        return g.terminal(JSON_NUMBER, "NUMBER")
    if any(isinstance(v, int) and abs(v) > 2 ** 53 for v in (lo, hi) if v is not None):
        # an integer bound a float cannot hold: only integer texts compare exactly
        return g.terminal("|".join(parts), "NUMBER") if parts else None
    frac = _fraction_range(lo, lo_x, hi, hi_x)
    if frac is not None:
        parts.append(frac)
    if not parts:
        return None
    return g.terminal("|".join(parts) if len(parts) > 1 else parts[0], "NUMBER")


#: numbers whose value is not integral: at most 9 integer digits and 6 fraction
#: digits, the last one non-zero, so the text's value is at least 10^-6 from an
#: integer and the float Python reads is within 2^-53 * 10^9 < 10^-6 of it
FRACTIONAL = r"-?(?:0|[1-9][0-9]{0,8})\.[0-9]{0,5}[1-9]"
_NUMERIC_KEYWORDS = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf")


def fractional_symbol(t: Translation, conj, excluded=()) -> str | None:
    """The terminal of ``not: {type: integer}`` among numbers: numbers with a
    non-integral value (:data:`FRACTIONAL`; stricter than the schema: no
    exponent, bounded digits), within the conjunction's numeric keywords and
    less the ``excluded`` numbers (the numbers' terminal, intersected)."""
    g = t.grammar
    if not excluded and not any(isinstance(n := t.doc.node(p), dict) and any(k in n for k in _NUMERIC_KEYWORDS)
                                for p in conj):
        return g.terminal(FRACTIONAL, "NUMBER")
    sym = number_symbol(t, conj, False, excluded)
    if sym is None:
        return None
    rx = intersect([g.terminal_defs[sym], FRACTIONAL], t.budget.deadline)
    return None if rx is None else g.terminal(rx, "NUMBER")


def _float_multiples(t: Translation, ms, exact: bool, integer: bool, bounds, ilo, ihi) -> str | None:
    """The terminal for non-integer ``multipleOf`` values ``ms`` within bounds."""
    lo, lo_x, hi, hi_x = bounds
    rx, _ = float_multiple_regex(ms, lo, lo_x, hi, hi_x, integers=not exact, fractions=not integer)
    parts = [rx] if rx is not None else []
    if exact:
        irx = int_range_regex(ilo, ihi)
        if irx is not None:
            # "N.0" reads as the same float as "N": as exact, and past the cap
            # it keeps amounts such as 150000.0
            if not integer:
                zeros = max(multiple_digits(m) for m in ms)
                irx = f"(?:{irx})(?:\\.0{{1,{zeros}}})?"
            parts.insert(0, irx)
    if not parts:
        return None
    return t.grammar.terminal("|".join(parts), "INT" if integer else "NUMBER")


def _fraction_range(lo, lo_x, hi, hi_x) -> str | None:
    """The texts with a fraction between the bounds (``None``: none)."""
    dlo, dlo_x = _decimal_bound(lo, lo_x, +1)
    dhi, dhi_x = _decimal_bound(hi, hi_x, -1)
    if dlo is not None and dhi is not None and dlo > dhi:
        return None
    return decimal_range_regex(dlo, dlo_x, dhi, dhi_x, fraction_required=True)


def _decimal_bound(v, exclusive: bool, direction: int):
    """A decimal bound for texts with a fraction (parsed by Python as floats): an
    inclusive bound ``d`` such that every decimal on the allowed side of ``d``
    parses to a float on the allowed side of ``v`` (rounding is monotone).
    ``direction`` is +1 for a lower bound, -1 for an upper one."""
    if v is None:
        return None, False
    if isinstance(v, int) and abs(v) > _FLOAT_MAX:
        # an integer past the floats (json reads any integer exactly): no float
        # equals it, and a text past 2^1024 reads as inf
        sign = 1 if v > 0 else -1
        if sign == -direction:  # the allowed side holds every finite float
            return Decimal(repr(sign * _FLOAT_MAX)), False
        return Decimal(sign * 2 ** 1024), False  # only texts read as inf
    if not exclusive:
        if isinstance(v, int):
            return Decimal(v), False
        return Decimal(repr(float(v))), False
    if v == 0:
        # below 1e-30 nothing is lost in practice, and no underflow to 0.0 occurs
        return Decimal("1e-30") * direction, False
    return Decimal(repr(math.nextafter(float(v), math.inf * direction))), False


def _multiple_of_pointer(doc, conj) -> str:
    return next((f"{p}/multipleOf" for p in conj
                 if isinstance(doc.node(p), dict) and "multipleOf" in doc.node(p)), "")


def _number_excluding(t: Translation, conj, integer: bool, excluded, bounds) -> str | None:
    """Numbers within bounds except some values: the range split around them
    (integers exactly; texts with a fraction stay clear of each point by one
    float step)."""
    where = _multiple_of_pointer(t.doc, conj)
    if where:
        t.diag.unsupported(where, "multipleOf together with not: {enum}")
    lo, lo_x, hi, hi_x = bounds
    points = sorted({Fraction(v) for v in excluded if not (isinstance(v, float) and not math.isfinite(v))})
    if len(points) > 200:
        t.diag.unsupported("", "not: {enum} with more than 200 numbers")
        points = []
    cuts = [(lo, lo_x)] + [(float(x) if x.denominator != 1 else int(x), True) for x in points]
    ends = [(float(x) if x.denominator != 1 else int(x), True) for x in points] + [(hi, hi_x)]
    parts = []
    for (a, ax), (b, bx) in zip(cuts, ends):
        if a is not None and b is not None and Fraction(a) > Fraction(b):
            continue
        if lo is not None and a is not None and Fraction(a) < Fraction(lo):
            continue
        if hi is not None and b is not None and Fraction(b) > Fraction(hi):
            continue
        ilo, ihi = integer_bounds(a, ax, b, bx)
        rx = JSON_INTEGER if a is None and b is None else int_range_regex(ilo, ihi)
        if rx is not None:
            parts.append(rx)
        if not integer:
            if a is None and b is None:
                parts.append(JSON_NUMBER)
                continue
            frac = _fraction_range(a, ax, b, bx)
            if frac is not None:
                parts.append(frac)
    if not parts:
        return None
    return t.grammar.terminal("|".join(parts), "NUMBER")


def _multiples(t: Translation, ilo, ihi, m: int, conj) -> str | None:
    """The integers in ``[ilo, ihi]`` that are multiples of ``m``: listed (a
    trie) when there are few, a regex of the multiples when ``m`` has one, else
    :meth:`~Diagnostics.unsupported` (and the plain range)."""
    if ilo is not None and ihi is not None and (ihi - ilo) // m <= 2000:
        first = -(-ilo // m) * m
        vals = list(range(first, ihi + 1, m))
        if not vals:
            return None
        pos = [str(v) for v in vals if v >= 0]
        neg = [str(-v) for v in vals if v < 0]
        parts = []
        if pos:
            parts.append(_trie_alt(pos))
        if neg:
            parts.append("-" + _trie_alt(neg) if len(neg) == 1 else "-(?:" + _trie_alt(neg) + ")")
        return "|".join(parts)
    nat = nat_multiple_regex(m)
    if nat is not None and ihi is None and (ilo is None or ilo <= m):
        parts = [nat]
        if ilo is None or ilo <= 0:
            parts.append("0")
        if ilo is None:
            parts.append("-" + f"(?:{nat})")
        return "|".join(parts)
    if m <= _MAX_MODULUS:
        # the integer texts whose value is 0 mod m (an automaton reading the
        # digits with the remainder so far), within the bounds: a product
        try:
            dfas = [_remainder_dfa(m)]
            if ilo is not None or ihi is not None:
                rx = int_range_regex(ilo, ihi)
                if rx is None:
                    return None
                dfas.append(regex_dfa(rx, t.budget.deadline))
            return to_regex(product(dfas, []))
        except GrammarTooComplexError:
            pass  # a regex too large: refused below
    t.diag.unsupported(_multiple_of_pointer(t.doc, conj), f"multipleOf {m} with these bounds")
    return int_range_regex(ilo, ihi) if (ilo is not None or ihi is not None) else JSON_INTEGER


#: moduli up to this are written as the automaton of their remainders (the
#: regex of a remainder automaton grows fast: 36 KB for 7, past 200 KB for 9)
_MAX_MODULUS = 1000
_DIGIT_ATOMS = [CharSet.of(ord("-"))] + [CharSet.of(ord(str(d))) for d in range(10)]


def _remainder_dfa(m: int) -> CharDFA:
    """The minimal automaton of the JSON integer texts (no ``-0``) whose value
    is a multiple of ``m``: after the sign, the state is the remainder mod
    ``m`` of the digits so far."""
    # states: 0 start, 1 after "-", 2 the integer 0, 3 + r remainder r; atom
    # 0 is "-", atom 1 + d the digit d
    first = {1 + d: 3 + d % m for d in range(1, 10)}
    rows = [{0: 1, 1: 2, **first}, dict(first), {}]
    rows += [{1 + d: 3 + (10 * r + d) % m for d in range(10)} for r in range(m)]
    accepting = [False, False, True] + [r == 0 for r in range(m)]
    return minimize_char_dfa(CharDFA.from_rows(_DIGIT_ATOMS, rows, accepting))
