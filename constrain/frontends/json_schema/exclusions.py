"""Any JSON string but a given set of names: the key terminal of additional members
(and of strings under ``not: {enum}``), as a regex for grammar text or as an
automaton product for the ``GrammarIR``."""

from __future__ import annotations

from constrain.frontends.json_schema.caches import deviation_class, encoded_char, exclusion_id
from constrain.automata.json_encoding import CANON_ANY, NEEDS_ESCAPE, encoded_class, iv_intersect, iv_norm, json_bytes
from constrain.frontends.json_schema.rules import GrammarBuilder

#: name sets whose trie has more nodes than this are not excluded (then no extra
#: member is allowed, which is sound)
MAX_TRIE = 20000


def exclusion_terminal(g: GrammarBuilder, names, tail: str, kind: str, alphabet=None,
                       min_len: int = 0) -> str | None:
    """The terminal of ``"s"`` + ``tail`` for every JSON string ``s`` over
    ``alphabet`` (code-point intervals; default all), canonically encoded, of at
    least ``min_len`` (0 or 1) characters and not in ``names``; ``None`` when
    there is no such string or the set is too large to exclude (then nothing
    is allowed, which is sound).

    For grammar text (``g.exclusions is None``) the set difference is a regex
    (:func:`not_in_set`). On the compile path the terminal is the plain string
    regex less the prefixes ``"name"``, built as an automaton product
    (byte_automaton.minus_prefixes): ~0.2 ms where compiling the regex took 1-3 ms
    on a typical object schema, and 10-45 ms with hundreds of names."""
    if g.exclusions is None:
        content = not_in_set(names, alphabet, min_len)
        return None if content is None else g.terminal('"' + content + '"' + tail, kind)
    any_char = CANON_ANY if alphabet is None else encoded_class(alphabet)
    if any_char is None:
        return None
    if sum(map(len, names)) > MAX_TRIE and _trie_size(names) > MAX_TRIE:
        return None
    return minus_names(g, '"' + any_char + ("+" if min_len else "*") + '"' + tail, names, kind)


def minus_names(g: GrammarBuilder, base: str, names, kind: str, starts=()) -> str:
    """On the compile path (``g.exclusions`` is a dict): the terminal of the
    regex ``base`` (a JSON string and what follows it) less the strings that
    start with one of ``names`` as a JSON string, or with one of the byte
    strings ``starts``: an automaton product."""
    prefixes = tuple(sorted({p for p in map(json_bytes, names) if p is not None} | set(starts)))
    if not prefixes:
        return g.terminal(base, kind)
    # matches nothing as a regex: see GrammarIR.exclusions
    name = g.terminal(r"[^\x00-\U0010ffff]trellis_exclusion_" + exclusion_id(base, prefixes), kind)
    g.exclusions[name] = (base, prefixes)
    return name


def _trie_size(names) -> int:
    """Number of nodes in the trie of ``names`` (without the root)."""
    return len({n[:i] for n in names for i in range(1, len(n) + 1)})


def _group(alts, optional=False) -> str | None:
    if not alts:
        return "" if optional else None
    body = alts[0] if len(alts) == 1 and not optional else "(?:" + "|".join(alts) + ")"
    return body + "?" if optional else body


def _trie(names) -> tuple[dict, int]:
    """The trie of ``names`` (a name ends where a node has the key ``None``) and
    its number of nodes."""
    trie: dict = {}
    count = 0
    for name in names:
        node = trie
        for c in name:
            if c not in node:
                node[c] = {}
                count += 1
            node = node[c]
        node[None] = {}
    return trie, count


def not_in_set(names, alphabet=None, min_len: int = 0) -> str | None:
    """A regex for the canonical encodings of every string not in ``names``
    (``alphabet``: only strings over these code-point intervals, which must hold
    every name; at least ``min_len`` (0 or 1) characters); ``None`` when the set
    is too large to exclude (then no extra key is allowed, which is sound).

    A string not in the set either spells a trie path that ends at no name
    (``exact``), or leaves the trie with a character that no name continues with
    and then goes on freely (``deviate`` + any*). The free tail is written once,
    not once per trie node, and so are the escaped characters a deviation may
    start with when no name contains one: the regex was ~6x longer, and parsing
    it was most of the compile time of a typical object schema."""
    if alphabet is None:
        alphabet = [(0, 0x10FFFF)]
    any_char = encoded_class(alphabet)
    if any_char is None:
        return None
    trie, count = _trie(names)
    if count > MAX_TRIE:
        return None
    if not trie:
        return any_char + ("+" if min_len else "*")
    escaped = iv_intersect(iv_norm(alphabet), NEEDS_ESCAPE)
    # deviations by an escaped character are the same at every node unless some
    # name has such a character (then each node's deviations are written in full)
    plain_names = not any(iv_intersect([(ord(c), ord(c)) for c in set("".join(names))], NEEDS_ESCAPE))
    esc_dev = encoded_class(escaped) if escaped and plain_names else None

    def exact(node, root=False) -> str | None:
        alts = []
        for c in node:
            if c is not None:
                sub = exact(node[c])
                if sub is not None:
                    alts.append(encoded_char(c) + sub)
        ends_here = None not in node and not (root and min_len > 0)
        if not alts:
            return "" if ends_here else None
        return _group(alts, optional=ends_here)

    akey = tuple(map(tuple, iv_norm(alphabet)))

    def deviate(node) -> str | None:
        kids = tuple(sorted(ord(c) for c in node if c is not None))
        other = deviation_class(akey, kids, esc_dev is not None)
        alts = [other] if other else []
        for c in node:
            if c is not None:
                sub = deviate(node[c])
                if sub is not None:
                    alts.append(encoded_char(c) + sub)
        return _group(alts)

    def paths(node) -> str:
        alts = [encoded_char(c) + paths(node[c]) for c in node if c is not None]
        return _group(alts, optional=True)

    dev = deviate(trie)
    if esc_dev is not None:
        dev = "(?:" + "|".join(x for x in (dev, paths(trie) + esc_dev) if x) + ")"
    free = dev + any_char + "*" if dev else None
    e = exact(trie, root=True)
    if free is None:
        return e
    if e is None:
        return free
    if e == "":  # only the empty string besides the free part
        return "(?:" + free + ")?"
    return "(?:" + e + "|" + free + ")"
