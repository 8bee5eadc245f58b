"""Regular languages combined as automata and written back as regexes: the
strings several regexes all match and others none (:func:`product`), and a
regex for an automaton (:func:`to_regex`, state elimination). The grammar's
terminals are regexes, and lookaheads (the other way to say "and" and "not")
cost seconds to determinise where a product takes milliseconds."""

from __future__ import annotations

import bisect

from constrain.automata.byte_dfa import minimize_char_dfa
from constrain.automata.char_dfa import CharDFA, build_char_dfa
from constrain.automata.charset import CharSet
from constrain.automata.json_encoding import class_re
from constrain.automata.regex_syntax import parse_regex
from constrain.errors import GrammarTooComplexError

#: states of an automaton built or combined here
_MAX_STATES = 4096
#: characters of a regex written from an automaton (state elimination can
#: grow it quickly), and the states it may have
_MAX_REGEX = 200_000
_MAX_ELIMINATED = 64


def regex_dfa(regex: str, deadline=None) -> CharDFA:
    """The minimal character automaton of ``regex`` (Python ``re`` syntax).

    Raises :class:`GrammarTooComplexError` past :data:`_MAX_STATES` states or
    the ``deadline``, and the regex errors of
    :func:`~constrain.automata.regex_syntax.parse_regex`."""
    return minimize_char_dfa(build_char_dfa(parse_regex(regex), max_states=_MAX_STATES,
                                            deadline=deadline, pattern=regex))


def intersect(regexes: list[str], deadline=None) -> str | None:
    """A regex for the strings every one of ``regexes`` matches (``None``:
    none)."""
    return to_regex(product([regex_dfa(r, deadline) for r in regexes], []))


def _common_atoms(dfas: list[CharDFA]):
    """The coarsest partition of the characters the ``dfas`` read that refines
    each one's atoms: ``(charsets, maps)``, with ``maps[k][a]`` the atom of
    ``dfas[k]`` holding the common atom ``a`` (-1: none)."""
    cuts = set()
    owner = []
    for d in dfas:
        spans = sorted((lo, hi, i) for i, cs in enumerate(d.atoms) for lo, hi in cs.intervals)
        for lo, hi, _ in spans:
            cuts.update((lo, hi + 1))
        owner.append(([lo for lo, _, _ in spans], spans))
    bounds = sorted(cuts)
    groups: dict[tuple, list] = {}
    for lo, nxt in zip(bounds, bounds[1:]):
        sig = []
        for starts, spans in owner:
            x = bisect.bisect_right(starts, lo) - 1
            sig.append(spans[x][2] if x >= 0 and spans[x][1] >= lo else -1)
        if any(k >= 0 for k in sig):
            groups.setdefault(tuple(sig), []).append((lo, nxt - 1))
    sigs = list(groups)
    return [CharSet(groups[g]) for g in sigs], [[g[k] for g in sigs] for k in range(len(dfas))]


def product(musts: list[CharDFA], nots: list[CharDFA], probe: bool = False) -> CharDFA | None:
    """The minimal automaton of the strings every DFA of ``musts`` accepts and
    none of ``nots`` (``musts`` not empty). ``probe``: only whether there is
    such a string -- ``None`` as soon as one is found, else the (empty) DFA.

    Raises :class:`GrammarTooComplexError` past :data:`_MAX_STATES` states."""
    dfas = musts + nots
    atoms, maps = _common_atoms(dfas)
    k_must = len(musts)
    start = tuple(0 for _ in dfas)
    index = {start: 0}
    rows: list[dict] = []
    accepting: list[bool] = []
    queue = [start]
    while len(rows) < len(queue):
        qs = queue[len(rows)]
        accepting.append(all(d.accepting[q] for d, q in zip(musts, qs))
                         and not any(q >= 0 and d.accepting[q] for d, q in zip(nots, qs[k_must:])))
        if probe and accepting[-1]:
            return None
        row = {}
        for a in range(len(atoms)):
            nxt = []
            for k, (d, q) in enumerate(zip(dfas, qs)):
                m = maps[k][a]
                r = -1 if q < 0 or m < 0 else int(d.table[q, m])
                if r < 0 and k < k_must:
                    break
                nxt.append(r)
            else:
                t = tuple(nxt)
                j = index.get(t)
                if j is None:
                    if len(queue) >= _MAX_STATES:
                        raise GrammarTooComplexError(
                            f"a product of regexes passes {_MAX_STATES} states")
                    j = index[t] = len(queue)
                    queue.append(t)
                row[a] = j
        rows.append(row)
    return minimize_char_dfa(CharDFA.from_rows(atoms, rows, accepting))


def _single(a: str) -> bool:
    """Whether ``a`` is one character or class, which a quantifier may follow."""
    if a.startswith("[") and a.endswith("]") and a.count("]") == 1 + a.count("\\]"):
        return True
    return len(a) == 1 or (len(a) == 2 and a[0] == "\\")


def _render(alts: list, star: bool = False) -> str:
    """The regex of the alternatives ``alts`` ("" is the empty string), as an
    operand of a concatenation, or (``star``) repeated."""
    rest = list(dict.fromkeys(a for a in alts if a))
    if not rest:
        return ""
    if len(rest) == 1:
        body, atomic = rest[0], _single(rest[0])
    else:
        body, atomic = "(?:" + "|".join(rest) + ")", True
    if star:  # (|x)* is x*
        return (body if atomic else "(?:" + body + ")") + "*"
    if "" in alts:
        return (body if atomic else "(?:" + body + ")") + "?"
    return body


def to_regex(dfa: CharDFA) -> str | None:
    """A regex (Python ``re`` syntax, surviving Lark's escaping) for the
    language of ``dfa`` (``None``: empty), by state elimination.

    Raises :class:`GrammarTooComplexError` past :data:`_MAX_ELIMINATED`
    states, :data:`_MAX_REGEX` characters or the regex parser's limits."""
    n = dfa.table.shape[0]
    if not dfa.accepting.any():
        return None
    if n > _MAX_ELIMINATED:
        raise GrammarTooComplexError(f"an automaton of {n} states written as a regex "
                                     f"(at most {_MAX_ELIMINATED})")
    src, dst = n, n + 1
    # (i, j) -> the alternatives of the paths from i to j
    edges: dict[tuple, list] = {}
    for q in range(n):
        by_target: dict[int, list] = {}
        for a, r in enumerate(dfa.table[q].tolist()):
            if r >= 0:
                by_target.setdefault(r, []).extend(dfa.atoms[a].intervals)
        for r, ivs in by_target.items():
            edges[q, r] = [class_re(ivs)]
        if dfa.accepting[q]:
            edges[q, dst] = [""]
    edges[src, 0] = [""]
    alive = set(range(n))
    size = 0
    while alive:
        # the state with the fewest paths through it goes first
        def cost(k):
            ins = sum(1 for (i, j) in edges if j == k and i != k)
            outs = sum(1 for (i, j) in edges if i == k and j != k)
            return ins * outs
        k = min(alive, key=cost)
        alive.discard(k)
        loop = edges.pop((k, k), None)
        mid = "" if loop is None else _render(loop, star=True)
        ins = [(i, _render(x)) for (i, j), x in edges.items() if j == k]
        outs = [(j, _render(x)) for (i, j), x in edges.items() if i == k]
        for i, _ in ins:
            del edges[i, k]
        for j, _ in outs:
            del edges[k, j]
        for i, x in ins:
            for j, y in outs:
                path = x + mid + y
                size += len(path)
                edges.setdefault((i, j), []).append(path)
        if size > _MAX_REGEX:
            raise GrammarTooComplexError(
                f"a regex written from an automaton passes {_MAX_REGEX} characters")
    out = edges.get((src, dst))
    if out is None:
        return None
    out = _render(out)
    # the parser's limits (groups nest one level per optional state of a chain)
    # raise RegexTooLargeError, a GrammarTooComplexError
    parse_regex(out)
    return out
