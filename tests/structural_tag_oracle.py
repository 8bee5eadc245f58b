"""An independent checker of structural-tag semantics, for tests: whether a text
is in a structural tag's language, by backtracking over the format tree (the
set of end offsets each format can reach from an offset), written from
XGrammar's documentation of the format, not from Trellis's translation.

JSON Schema contents are checked with ``jsonschema`` on compact JSON (no
whitespace outside strings; object keys in the order the schema declares
them, as Trellis's compact JSON is written); grammar contents are not
supported here.
"""

from __future__ import annotations

import json
import re

import jsonschema


class StructuralTagOracle:
    """``oracle(text)``: whether ``text`` is in the language of ``fmt`` (a
    format object, or ``{"type": "structural_tag", "format": ...}``)."""

    def __init__(self, spec):
        self.fmt = spec["format"] if spec.get("type") == "structural_tag" else spec

    def __call__(self, text: str) -> bool:
        self.s = text
        self.memo = {}
        return len(text) in self.ends(self.fmt, 0, ())

    # -- the formats ------------------------------------------------------------------

    def ends(self, f: dict, i: int, stops: tuple) -> frozenset:
        key = (id(f), i, stops)
        hit = self.memo.get(key)
        if hit is None:
            self.memo[key] = frozenset()  # a left-recursive call reaches nothing new
            hit = self.memo[key] = frozenset(getattr(self, "_" + f["type"])(f, i, stops))
        return hit

    def _seq(self, fs, i, stops) -> set:
        cur = {i}
        for f in fs:
            cur = {j for k in cur for j in self.ends(f, k, stops)}
        return cur

    def _const_string(self, f, i, stops):
        v = f["value"]
        return {i + len(v)} if self.s.startswith(v, i) else set()

    def _regex(self, f, i, stops):
        return {j for j in range(i, len(self.s) + 1) if re.fullmatch(f["pattern"], self.s[i:j])}

    def _json_schema(self, f, i, stops):
        out = set()
        for j in range(i + 1, len(self.s) + 1):
            try:
                value = json.loads(self.s[i:j])
            except ValueError:
                continue
            if _compact(self.s[i:j]) and _ordered(value, f["json_schema"]) and \
                    jsonschema.Draft202012Validator(f["json_schema"]).is_valid(value):
                out.add(j)
        return out

    def _free(self, i, avoid, max_chars=None):
        """Ends of free text from ``i`` that contains none of ``avoid``."""
        out = set()
        for j in range(i, len(self.s) + 1):
            if max_chars is not None and j - i > max_chars:
                break
            if any(a and a in self.s[i:j] for a in avoid):
                break
            out.add(j)
        return out

    def _any_text(self, f, i, stops):
        return self._free(i, list(f.get("excludes", [])) + list(stops), f.get("max_chars"))

    def _sequence(self, f, i, stops):
        return self._seq(f["elements"], i, stops)

    def _or(self, f, i, stops):
        return {j for e in f["elements"] for j in self.ends(e, i, stops)}

    def _optional(self, f, i, stops):
        return {i} | self.ends(f["content"], i, stops)

    def _repeat_ends(self, body, i, stops, lo, hi):
        out, cur, n = set(), {i}, 0
        seen = set()
        while cur and (hi is None or n <= hi):
            if n >= lo:
                out |= cur
            cur = {j for k in cur for j in self.ends(body, k, stops)}
            n += 1
            if hi is None:  # unbounded: stop once no new offset appears
                cur -= seen
                seen |= cur
        return out

    def _star(self, f, i, stops):
        return self._repeat_ends(f["content"], i, stops, 0, None)

    def _plus(self, f, i, stops):
        return self._repeat_ends(f["content"], i, stops, 1, None)

    def _repeat(self, f, i, stops):
        hi = None if f["max"] == -1 else f["max"]
        return self._repeat_ends(f["content"], i, stops, f["min"], hi)

    def _tag(self, f, i, stops):
        begin, end = f["begin"], f["end"]
        ends = [end] if isinstance(end, str) else list(end)
        if not self.s.startswith(begin, i):
            return set()
        inner = tuple(e for e in ends if e)
        out = set()
        for k in self.ends(f["content"], i + len(begin), inner):
            out |= {k + len(e) for e in ends if self.s.startswith(e, k)}
        return out

    def _dispatched(self, i, stops, units, free_avoid, at_least_one, stop_after_first):
        """Free text with dispatched units: ``units(k)`` gives the ends of one
        unit from ``k``."""
        def free(k):
            return self._free(k, free_avoid)

        def after_units(starts):  # (unit free)* from each start
            out, cur, seen = set(), set(starts), set()
            while cur:
                out |= cur
                nxt = {m for k in cur for j in units(k) for m in free(j)}
                cur = nxt - seen
                seen |= nxt
            return out

        if at_least_one and stop_after_first:
            return units(i)
        if stop_after_first:
            f0 = free(i)
            return f0 | {j for k in f0 for j in units(k)}
        if at_least_one:
            return after_units({m for j in units(i) for m in free(j)})
        return after_units(free(i))

    def _triggered_tags(self, f, i, stops):
        def units(k):
            return {j for t in f["tags"] for j in self._tag(t, k, stops)}

        avoid = list(f["triggers"]) + list(f.get("excludes", [])) + list(stops)
        return self._dispatched(i, stops, units, avoid, f.get("at_least_one", False),
                                f.get("stop_after_first", False))

    def _dispatch(self, f, i, stops):
        def units(k):
            return {j for p, g in f["rules"] if self.s.startswith(p, k)
                    for j in self.ends(g, k + len(p), stops)}

        avoid = [p for p, _ in f["rules"]] + list(f.get("excludes", [])) + list(stops)
        return self._dispatched(i, stops, units, avoid, False, not f.get("loop", True))

    def _tags_with_separator(self, f, i, stops):
        def unit(k):
            return {j for t in f["tags"] for j in self._tag(t, k, stops)}

        out = set() if f.get("at_least_one", False) else {i}
        first = unit(i)
        out |= first
        if f.get("stop_after_first", False):
            return out
        sep, cur, seen = f["separator"], first, set(first)
        while cur:
            nxt = {j for k in cur if self.s.startswith(sep, k) for j in unit(k + len(sep))}
            cur = nxt - seen
            seen |= nxt
            out |= nxt
        return out


def _compact(text: str) -> bool:
    """No whitespace outside JSON strings."""
    return not re.search(r"\s", re.sub(r'"(?:[^"\\]|\\.)*"', '""', text))


def _ordered(value, schema) -> bool:
    """Object keys in the order the schema's ``properties`` declare them."""
    if isinstance(value, dict):
        props = list(schema.get("properties", {}))
        seen = [props.index(k) for k in value if k in props]
        if seen != sorted(seen):
            return False
        return all(_ordered(v, schema.get("properties", {}).get(k, {})) for k, v in value.items())
    if isinstance(value, list):
        return all(_ordered(v, schema.get("items", {})) for v in value)
    return True
