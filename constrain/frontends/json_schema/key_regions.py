"""Additional members' keys under ``patternProperties``: key space partitioned by
which patterns a key matches.

A member's value must satisfy the schema of *every* pattern its key matches
(``re.search``), and ``additionalProperties`` only when it matches none. So the
keys are split into regions, one per set ``S`` of patterns: the keys matching
every pattern of ``S`` and none of the others, less the declared names. A
region's key language is the product of the patterns' automata (over the
canonical encoding of the key's content), written back as a regex by state
elimination: the grammar's terminals are regexes, and lookaheads (the other
way to say "and not") cost seconds to determinise with several patterns.

Sound: a pattern of ``S`` is the subset translation of its regex (every key it
admits matches), a pattern outside ``S`` the superset one (every key that
matches is cut out), so a region's keys match exactly ``S``. Regions are
refined one pattern at a time and the empty ones dropped (anchored literal
prefixes that differ, a pattern matching every key, else the product's
automaton), so their number is that of the non-empty ones: at most
:data:`MAX_REGIONS`, else the schema is refused.

Declared names are cut out of a region's keys by an exclusion product on the
compile path (``GrammarIR.exclusions``), in the regex for grammar text. A
region whose regex would be too large is left out (its keys refused: the
strict side), except that it keeps the keys that do not start with the text
every match of each pattern outside it starts with (the keys matching no
pattern, on the compile path), or else that do not contain the text every
match of each such pattern contains.
"""

from __future__ import annotations

import re
import warnings
from typing import TYPE_CHECKING

from constrain.automata.char_dfa import CharDFA
from constrain.automata.json_encoding import CANON_ANY, encodable, json_str, lit
from constrain.errors import GrammarTooComplexError, RegexError, SchemaTooComplexError
from constrain.frontends.json_schema.exclusions import exclusion_terminal, minus_names
from constrain.frontends.json_schema.regex_product import product, regex_dfa, to_regex
from constrain.frontends.json_schema.patterns import (PatternUnsupported, matches_everything,
                                                      pattern_class_star, patterns_disjoint,
                                                      required_text, translate_pattern)

if TYPE_CHECKING:
    from constrain.frontends.json_schema.translation import Translation

#: the most regions (non-empty sets of patterns matched together) a schema's
#: patternProperties may split additional keys into
MAX_REGIONS = 64
#: regions kept without deciding whether they are empty while refining (each
#: decision builds a product automaton)
_UNCHECKED = 8


def search(pattern: str, text: str) -> bool:
    """``re.search`` as jsonschema runs it (an invalid pattern counts as a match,
    the cautious answer everywhere this is used)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return re.search(pattern, text) is not None
    except re.error:
        return True


class KeyRegions:
    """The key regexes of additional members under ``patterns`` (``(pattern,
    pointer)`` pairs, distinct patterns), each with the set of patterns its keys
    match. Automata are made once per pattern and side."""

    def __init__(self, t: Translation, patterns: list, names_regex: str | None = None):
        self.t = t
        #: the key contents ``propertyNames`` admits (``None``: any)
        self.names_regex = names_regex
        self.patterns = [p for p, _ in patterns]
        self.where = [w for _, w in patterns]
        #: translations and automata by (pattern, over), shared by the
        #: translation's objects (a schema repeats its patterns)
        self._memo = t.key_patterns
        self._emptiness: dict[tuple, bool] = {}

    def _dfa(self, regex: str) -> CharDFA:
        return regex_dfa(regex, self.t.budget.deadline)

    def _content(self, i: int, over: bool) -> tuple[str | None, str | None]:
        """``(content, failure)``: pattern ``i``'s subset (superset: ``over``)
        translation (``None``: the subset matches nothing, or it failed, and
        why)."""
        key = ("content", self.patterns[i], over)
        if key not in self._memo:
            try:
                self._memo[key] = translate_pattern(self.patterns[i], over=over), None
            except (PatternUnsupported, re.error) as e:
                self._memo[key] = None, str(e)
        return self._memo[key]

    def _pattern_dfa(self, i: int, over: bool) -> CharDFA | None:
        """The automaton of :meth:`_content` (``None`` where it is)."""
        key = ("dfa", self.patterns[i], over)
        if key not in self._memo:
            content, _ = self._content(i, over)
            try:
                self._memo[key] = None if content is None else self._dfa(content)
            except RegexError:
                self._memo[key] = None
        return self._memo[key]

    def _negatives(self, matched: frozenset, upto: int | None = None) -> list[int]:
        """The patterns a region's keys must not match: those outside it (among
        the first ``upto``; ``None``: all) that no pattern of it excludes by
        its prefix."""
        return [j for j in range(len(self.patterns) if upto is None else upto) if j not in matched
                and not any(self._disjoint(i, j) for i in matched)]

    def _disjoint(self, i: int, j: int) -> bool:
        """:func:`patterns_disjoint` of patterns ``i`` and ``j`` (memoised: it
        parses both)."""
        key = ("disjoint", self.patterns[i], self.patterns[j])
        if key not in self._memo:
            self._memo[key] = patterns_disjoint(self.patterns[i], self.patterns[j])
        return self._memo[key]

    def _product(self, matched: frozenset, names=(), probe: bool = False, upto: int | None = None):
        """The region's automaton (less the ``names``, canonical JSON string
        contents; over the first ``upto`` patterns), or ``None`` where a
        translation failed or matches nothing; ``probe``: ``True`` when some
        key is in the region, else as without."""
        negatives = self._negatives(matched, upto)
        key = ("product", tuple(self.patterns[i] for i in sorted(matched)),
               tuple(self.patterns[j] for j in negatives), tuple(names), self.names_regex, probe)
        if key not in self._memo:
            self._memo[key] = self._make_product(matched, negatives, names, probe)
        return self._memo[key]

    def _make_product(self, matched: frozenset, negatives, names, probe: bool, nots=None):
        """:meth:`_product`; ``nots``: the automata the keys must not match,
        in place of the ``negatives``' superset translations."""
        musts = [self._pattern_dfa(i, False) for i in sorted(matched)]
        nots = [self._pattern_dfa(j, True) for j in negatives] if nots is None else list(nots)
        if None in musts or None in nots:
            return None
        if self.names_regex is not None:
            key = ("names", self.names_regex)
            if key not in self._memo:
                self._memo[key] = self._dfa(self.names_regex)
            musts.append(self._memo[key])
        if not musts:
            musts = [self._any_key()]
        names = [lit(json_str(d)[1:-1]) for d in names if encodable(d)]
        if names:
            nots.append(self._dfa("(?:" + "|".join(names) + ")"))
        out = product(musts, nots, probe)
        return True if probe and out is None else out

    def _any_key(self) -> CharDFA:
        if "any" not in self._memo:
            self._memo["any"] = self._dfa(CANON_ANY + "*")
        return self._memo["any"]

    def _empty(self, matched: frozenset, upto: int | None = None) -> bool:
        """Whether no key is in the region (over the first ``upto`` patterns;
        ``False`` when unsure)."""
        if len(matched) <= 1 and not self._negatives(matched, upto) and self.names_regex is None:
            return False  # one pattern alone: its translation says (None: empty)
        key = (matched, upto)
        if key not in self._emptiness:
            try:
                dfa = self._product(matched, probe=True, upto=upto)
            except GrammarTooComplexError:
                dfa = None
            self._emptiness[key] = dfa is not None and dfa is not True
        return self._emptiness[key]

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
                if not any(self._disjoint(i, j) for j in s):
                    nxt.append(s | {i})
                if not everything:
                    nxt.append(s)
            if len(nxt) > _UNCHECKED:
                # a region only splits: an empty one stays empty, so dropping it
                # now keeps the count that of the non-empty regions so far
                nxt = [s for s in nxt if not self._empty(s, i + 1)]
            regions = nxt
            self.t.budget.tick(self.where[i])
            if len(regions) > MAX_REGIONS:
                raise SchemaTooComplexError(
                    f"patternProperties split keys into more than {MAX_REGIONS} sets of "
                    f"patterns matched together", self.where[i])
        return [s for s in regions if allowed(s) and not self._empty(s)]

    def key(self, matched: frozenset, declared) -> str | None:
        """The key terminal (with the colon) of the region ``matched``, less the
        ``declared`` names (``None``: no key, a translation failed, which has
        been reported, or the region's regex would be too large, and its keys
        are left out: the strict side)."""
        name = self._key(matched, declared)
        # the region's first pattern (or, for the keys matching none, the first
        # one they must not match): the terminal spells it
        first = min(matched) if matched else next(iter(self._negatives(matched)), None)
        if first is not None:
            self.t.grammar.note_pattern(name, self.where[first], self.patterns[first])
        return name

    def _key(self, matched: frozenset, declared) -> str | None:
        t = self.t
        g = t.grammar
        pats = self.patterns
        names = [d for d in declared
                 if frozenset(j for j in range(len(pats)) if search(pats[j], d)) == matched]
        negatives = self._negatives(matched)
        for i in sorted(matched):
            failure = self._content(i, False)[1]
            if failure is not None:
                t.diag.unsupported(self.where[i], f"pattern {pats[i]!r}: {failure}")
                return None
        for j in negatives:
            failure = self._content(j, True)[1]
            if failure is not None:
                t.diag.unsupported(self.where[j], f"patternProperties {pats[j]!r}: keys that "
                                                  f"do not match it: {failure}")
                return None
        single = len(matched) == 1 and not negatives and self.names_regex is None
        if single:
            (i,) = matched
            star = pattern_class_star(pats[i]) if names else None
            if names and matches_everything(pats[i]):
                return exclusion_terminal(g, names, g.key_colon(), "KEY")
            if star is not None:
                return exclusion_terminal(g, names, g.key_colon(), "KEY", star[0], star[1])
        # on the compile path the names are cut out of the key terminal by an
        # automaton product (GrammarIR.exclusions), in grammar text by the regex
        inline = names if g.exclusions is None else ()
        try:
            if single and not inline:
                content = self._content(i, False)[0]
            else:
                dfa = self._product(matched, inline)
                content = None if dfa is None else to_regex(dfa)
        except GrammarTooComplexError:
            if matched:
                where = self.where[min(matched)]
                which = "keys matching patternProperties " + ", ".join(
                    repr(pats[i]) for i in sorted(matched))
                if len(matched) < len(pats):
                    which += " and not the others"
            else:  # the keyword itself (each where is one of its members)
                where = self.where[0].rsplit("/", 1)[0]
                which = "keys matching none of the patternProperties"
            t.diag.narrow(where, f"{which}: left out in part or whole (their exact automaton "
                                 f"is too large)")
            return (self._outside_prefixes(matched, negatives, names)
                    or self._without_required_texts(matched, negatives, names, inline))
        return self._key_terminal(content, names, inline)

    def _key_terminal(self, content: str | None, names, inline) -> str | None:
        """The key terminal of the key contents ``content`` (``None``: none),
        less the ``names`` where ``inline`` has not cut them out already."""
        if content is None:
            return None
        g = self.t.grammar
        if names and not inline:
            return minus_names(g, '"' + content + '"' + g.key_colon(), names, "KEY")
        return g.terminal('"' + content + '"' + g.key_colon(), "KEY")

    def _without_required_texts(self, matched: frozenset, negatives, names,
                                inline) -> str | None:
        """The region's keys that contain none of the texts every match of
        each pattern outside it contains (:func:`required_text`), when the
        region's exact regex is too large: a subset (a key that contains such
        a text without matching its pattern is left out), whose product is
        small -- the automaton of "contains ``netdir_``" has 8 states where
        "matches ``netdir_(projects|work|scratch|share)``" has ~30, and their
        products with another pattern ~90, past what state elimination writes
        back (MaskBench Github_medium o83286 refused every key of its other
        patterns). ``None`` where a pattern has no such text, or the subset's
        regex is too large still."""
        nots = []
        for j in negatives:
            text = required_text(self.patterns[j])
            if text is None:
                return None
            key = ("contains", text)
            if key not in self._memo:
                self._memo[key] = self._dfa(f"{CANON_ANY}*{lit(json_str(text)[1:-1])}{CANON_ANY}*")
            nots.append(self._memo[key])
        try:
            dfa = self._make_product(matched, (), inline, False, nots)
            content = None if dfa is None else to_regex(dfa)
        except GrammarTooComplexError:
            return None
        return self._key_terminal(content, names, inline)

    def _outside_prefixes(self, matched: frozenset, negatives, names) -> str | None:
        """The keys matching no pattern, when their exact regex is too large: on
        the compile path, the keys that do not start with the text every string
        of each pattern's superset translation starts with (``^name_...``), less
        the ``names`` -- a subset (keys of such a pattern that would not
        match it are left out); ``None`` where a pattern has no such text."""
        g = self.t.grammar
        if matched or self.names_regex is not None or g.exclusions is None:
            return None
        starts = []
        for j in negatives:
            dfa = self._pattern_dfa(j, True)
            start = None if dfa is None else _forced_prefix(dfa)
            if not start:
                return None
            starts.append(('"' + start).encode("utf-8"))
        return minus_names(g, '"' + CANON_ANY + '*"' + g.key_colon(), names, "KEY", starts)


def _forced_prefix(dfa: CharDFA) -> str:
    """The text every string ``dfa`` accepts starts with: from the start, the
    characters read while a state is not accepting and has one way out, on one
    character."""
    out = []
    q, seen = 0, set()
    while q >= 0 and q not in seen and not dfa.accepting[q]:
        seen.add(q)
        ways = [(a, r) for a, r in enumerate(dfa.table[q].tolist()) if r >= 0]
        if len(ways) != 1:
            break
        (a, r), = ways
        ivs = dfa.atoms[a].intervals
        if len(ivs) != 1 or ivs[0][0] != ivs[0][1]:
            break
        out.append(chr(ivs[0][0]))
        q = r
    return "".join(out)
