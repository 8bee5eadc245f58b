"""Additional members' keys under ``patternProperties``: key space partitioned by
which patterns a key matches.

A member's value must satisfy the schema of *every* pattern its key matches
(``re.search``), and ``additionalProperties`` only when it matches none. So the
keys are split into regions, one per set ``S`` of patterns: the keys matching
every pattern of ``S`` and none of the others, less the declared names. A
region's key regex is the first pattern of ``S`` with lookaheads for the rest:
``(?=P")`` for another pattern of ``S``, ``(?!Q")`` for a pattern ``Q`` outside
it (``"`` closes the key, so a lookahead spans exactly the key's content),
``(?!(?:a|b)")`` for the declared names ``a``, ``b`` whose patterns are ``S``.
The engine's automata decide lookaheads exactly (``docs/regex.md``).

Sound: a pattern of ``S`` is the subset translation of its regex (every key it
admits matches), a pattern outside ``S`` the superset one (every key that
matches is cut out), so a region's keys match exactly ``S``. Regions are
refined one pattern at a time and the empty ones dropped (anchored literal
prefixes that differ, a pattern matching every key, else the automaton of the
region's regex), so their number is that of the non-empty ones: at most
:data:`MAX_REGIONS`, else the schema is refused.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from constrain.automata.char_dfa import build_char_dfa
from constrain.automata.regex_syntax import parse_regex
from constrain.errors import GrammarTooComplexError, RegexError
from constrain.automata.json_encoding import CANON_ANY, encodable, json_str, lit
from constrain.frontends.json_schema.exclusions import exclusion_terminal
from constrain.frontends.json_schema.patterns import (PatternUnsupported, matches_everything,
                                                      pattern_class_star, patterns_disjoint,
                                                      translate_pattern)

if TYPE_CHECKING:
    from constrain.frontends.json_schema.translation import Translation

#: the most regions (non-empty sets of patterns matched together) a schema's
#: patternProperties may split additional keys into
MAX_REGIONS = 64
#: regions kept without deciding whether they are empty while refining (each
#: decision builds an automaton)
_UNCHECKED = 8
#: states of a region's automaton built to decide whether it is empty (past
#: it, the region is kept: the grammar compile decides)
_EMPTINESS_STATES = 4096


def _search(pattern: str, text: str) -> bool:
    try:
        return re.search(pattern, text) is not None
    except re.error:
        return True


class KeyRegions:
    """The key regexes of additional members under ``patterns`` (``(pattern,
    pointer)`` pairs, distinct patterns), each with the set of patterns its keys
    match. Translations are made once per pattern and side."""

    def __init__(self, t: Translation, patterns: list):
        self.t = t
        self.patterns = [p for p, _ in patterns]
        self.where = [w for _, w in patterns]
        self._under: dict[int, str | None] = {}
        self._over: dict[int, str | None] = {}
        #: translations that failed: pattern index -> reason (reported only
        #: where a region that is allowed needs them)
        self._failed: dict[tuple, str] = {}

    def _translated(self, i: int, over: bool) -> str | None:
        cache = self._over if over else self._under
        if i not in cache:
            try:
                cache[i] = translate_pattern(self.patterns[i], over=over)
            except (PatternUnsupported, re.error) as e:
                self._failed[i, over] = str(e)
                cache[i] = None
        return cache[i]

    def _negatives(self, matched: frozenset) -> list[int]:
        """The patterns a region's keys must not match: those outside it that
        no pattern of it excludes by its prefix."""
        pats = self.patterns
        return [j for j in range(len(pats)) if j not in matched
                and not any(patterns_disjoint(pats[j], pats[i]) for i in matched)]

    def _content(self, matched: frozenset, names=()) -> str | None:
        """The region's key content regex (``None``: a translation failed or no
        key matches the first pattern)."""
        pos = sorted(matched)
        parts = []
        for i in pos[1:]:
            c = self._translated(i, False)
            if c is None:
                return None
            parts.append("(?=" + c + '")')
        for j in self._negatives(matched):
            c = self._translated(j, True)
            if c is None:
                return None
            parts.append("(?!" + c + '")')
        names = [lit(json_str(d)[1:-1]) for d in names if encodable(d)]
        if names:
            parts.append("(?!(?:" + "|".join(names) + ')")')
        body = self._translated(pos[0], False) if pos else CANON_ANY + "*"
        if body is None:
            return None
        return "".join(parts) + body

    def _empty(self, matched: frozenset) -> bool:
        """Whether no key is in the region (``False`` when unsure)."""
        if len(matched) <= 1 and not self._negatives(matched):
            return False  # one pattern alone: its translation says (None: empty)
        content = self._content(matched)
        if content is None:
            return False
        try:
            dfa = build_char_dfa(parse_regex(content + '"'), max_states=_EMPTINESS_STATES,
                                 deadline=self.t.budget.deadline, pattern=content)
        except (GrammarTooComplexError, RegexError):
            return False
        return not dfa.accepting.any()

    def regions(self, allowed) -> list[frozenset]:
        """The sets of pattern indices that some key matches exactly (up to the
        translations' precision) and that ``allowed`` (a predicate on a set)
        keeps, refined one pattern at a time."""
        pats = self.patterns
        regions = [frozenset()]
        for i, p in enumerate(pats):
            everything = matches_everything(p)
            nxt = []
            for s in regions:
                if not any(patterns_disjoint(p, pats[j]) for j in s):
                    nxt.append(s | {i})
                if not everything:
                    nxt.append(s)
            if len(nxt) > _UNCHECKED:
                # a region only splits: an empty one stays empty, so dropping it
                # now keeps the count that of the non-empty regions so far
                nxt = [s for s in nxt if not self._empty(s)]
            regions = nxt
            self.t.budget.tick(self.where[i])
            if len(regions) > MAX_REGIONS:
                raise GrammarTooComplexError(
                    f"patternProperties split keys into more than {MAX_REGIONS} sets of "
                    f"patterns matched together at {self.where[i]}")
        return [s for s in regions if allowed(s) and not self._empty(s)]

    def key(self, matched: frozenset, declared) -> str | None:
        """The key terminal (with the colon) of the region ``matched``, less the
        ``declared`` names (``None``: no key, or a translation failed, which
        has been reported)."""
        t = self.t
        g = t.grammar
        pats = self.patterns
        names = [d for d in declared
                 if frozenset(j for j in range(len(pats)) if _search(pats[j], d)) == matched]
        negatives = self._negatives(matched)
        if len(matched) == 1 and not negatives:
            (i,) = matched
            star = pattern_class_star(pats[i]) if names else None
            if names and matches_everything(pats[i]):
                return exclusion_terminal(g, names, g.key_colon(), "KEY")
            if star is not None:
                return exclusion_terminal(g, names, g.key_colon(), "KEY", star[0], star[1])
        content = self._content(matched, names)
        if content is None:
            for i in sorted(matched):
                if (i, False) in self._failed:
                    t.diag.unsupported(self.where[i], f"pattern {pats[i]!r}: {self._failed[i, False]}")
                    return None
            for j in negatives:
                if (j, True) in self._failed:
                    t.diag.unsupported(self.where[j], f"patternProperties {pats[j]!r}: keys that "
                                                      f"do not match it: {self._failed[j, True]}")
                    return None
            return None  # no key matches the first pattern
        return g.terminal('"' + content + '"' + g.key_colon(), "KEY")
