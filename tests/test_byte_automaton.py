"""The UTF-8 expansion's shortcut for "any non-ASCII character" builds exactly the
automaton the general construction builds."""

from __future__ import annotations

import numpy as np
import pytest

import constrain.automata.byte_dfa as ba
from constrain.regular.regex import regex_byte_dfa

PATTERNS = [
    r'"(?:[^"\\\x00-\x1f]|\\["\\/bfnrt]|\\u[0-9a-fA-F]{4}){0,20}"',
    r".{0,5}x", r"[^a]+", r"(?s).", r"[^\x00-\x7f]{2,3}", r"a[\u0080-\U0010ffff]b",
    r'[^"]{3,7}"', r"[^b-z]*", r'(?:[^"]|"[^"]){0,40}',
]


@pytest.mark.parametrize("pattern", PATTERNS)
def test_any_multibyte_shortcut_is_exact(pattern, monkeypatch):
    alphabet = np.ones(256, dtype=np.bool_)
    fast = regex_byte_dfa(pattern, alphabet)

    def general(b, state, t):  # the same set of code points, split so the shortcut is not taken
        ba._multibyte(b, state, [(0x80, 0x7FF, t), (0x800, 0xD7FF, t), (0xE000, 0x10FFFF, t)])

    monkeypatch.setattr(ba, "_any_multibyte", general)
    slow = regex_byte_dfa(pattern, alphabet)
    assert np.array_equal(fast.transitions, slow.transitions)
    assert np.array_equal(fast.accepting, slow.accepting)


@pytest.mark.parametrize("pattern", [
    "true|false", r'"IAB1"|"IAB1\-1"|"IAB1\-2"|"IAB2"', r"a\|b|c", "abc|ab|a", "é|€x|😀",
    r'"a\"b"|"\\\\"', "x|x|y",
])
def test_literal_alternation_terminal_equals_regex(pattern):
    """A terminal that is an alternation of literals is built as the trie of its
    strings; it accepts what the regex accepts, also over an alphabet missing a
    byte some alternatives need."""
    from automata_testing import same_language
    from constrain.cfg.ir import Terminal
    from constrain.cfg.lexer import _regex_alternatives, terminal_dfa

    assert _regex_alternatives(pattern) is not None
    for alphabet in (np.ones(256, dtype=np.bool_), np.arange(256) != ord("1")):
        fast = terminal_dfa(Terminal("T", pattern), alphabet, max_states=1000, deadline=None)
        assert same_language(fast, regex_byte_dfa(pattern, alphabet))


def test_literal_alternation_edge_cases():
    from constrain.cfg.lexer import _regex_alternatives

    assert _regex_alternatives("abc") is None and _regex_alternatives("a|b*") is None
    assert _regex_alternatives("a|(b)") is None and _regex_alternatives(r"a\|b") is None
    assert _regex_alternatives("a|") == ["a", ""]


def _coreachable_from_start(dfa) -> bool:
    """Whether every state reachable from the start can still reach acceptance."""
    seen, todo = {1}, [1]
    while todo:
        s = todo.pop()
        for t in set(dfa.transitions[s].tolist()) - {0} - seen:
            seen.add(t)
            todo.append(t)
    live = {s for s in range(dfa.num_states) if dfa.accepting[s]}
    changed = True
    while changed:
        changed = False
        for s in seen - live:
            if set(dfa.transitions[s].tolist()) & live:
                live.add(s)
                changed = True
    return seen <= live


@pytest.mark.parametrize("base, prefixes, same_as, good, bad", [
    # every string excluded: the product is empty (its terminal unusable)
    (r'"[ab]+"', [b'"a', b'"b'], None, [], [b'"a"', b'"ab"']),
    # the trie node '"a' is dead (both its ways on are excluded): trimmed
    (r'"(?:a[bc]|d)"', [b'"ab', b'"ac'], r'"d"', [b'"d"'], [b'"ab"', b'"ac"']),
    (r'"[a-z]*":', [b'"ab":', b'"cb":'], None, [b'"":', b'"a":', b'"abc":', b'"cc":'],
     [b'"ab":', b'"cb":']),
])
@pytest.mark.parametrize("in_place", [False, True])
def test_minus_prefixes_trims_dead_trie_nodes(base, prefixes, same_as, good, bad, in_place):
    # in_place: the product TerminalAutomata writes into its stacked table
    # (exclusion_product), unused trie rows left zero
    from automata_testing import same_language
    from constrain.cfg.terminal_kernels import exclusion_product
    alphabet = np.ones(256, dtype=np.bool_)
    dfa = regex_byte_dfa(base, alphabet)
    if in_place:
        n = dfa.transitions.shape[0]
        m = 1 + sum(len(p) - 1 for p in prefixes)
        t = np.zeros((m + n, 256), np.int32)
        acc = np.zeros(m + n, np.bool_)
        t[m:], acc[m:] = dfa.transitions, dfa.accepting
        starts = np.cumsum([0] + [len(p) for p in prefixes]).astype(np.int64)
        data = np.frombuffer(b"".join(prefixes), np.uint8)
        assert exclusion_product(t, acc, m, data, starts, alphabet) == bool(good)
        out = ba.ByteDFA(t, acc)
    else:
        out = ba.minus_prefixes(dfa, prefixes)
    if not good:
        assert not out.transitions.any() and not out.accepting.any()  # empty: unusable
    else:
        assert _coreachable_from_start(out)
    if same_as is not None:
        assert same_language(out, regex_byte_dfa(same_as, alphabet))
    for text in good:
        assert out.matches(text), text
    for text in bad:
        assert not out.matches(text), text


_CLASSES = [r"\w", r"\W", r"\d", ".", r"[^x]", r"[α-ωa]", r"[\u00e0-\u00ff]", "é", "a",
            r"[\u4e00-\u9fff]", r"\s", r"[\U00010000-\U0010ffff]"]


def _random_patterns(seed: int, count: int) -> list[str]:
    import random

    rng = random.Random(seed)
    out = []
    for _ in range(count):
        parts = []
        for _ in range(rng.randint(1, 4)):
            atom = rng.choice(_CLASSES)
            if rng.random() < 0.5:
                atom = f"(?:{atom}|{rng.choice(_CLASSES)})"
            parts.append(atom + rng.choice(["", "*", "+", "?", "{1,3}", "{2}", "{0,6}"]))
        out.append("".join(parts))
    return out


@pytest.mark.parametrize("pattern", [
    r"\w{1,40}", r"\w{3}(?:\w|\W){2}", r"(?:\w{2}|[α-ω]\w)+", r"(?:\w\w|é\w)*x",
    r"\w{2,4}(?:\w\w)?z|[α-ω]{3}\w", r"(?:[^a]\w|\w[^b]){1,6}", r"(?:\w{1,3}[α-ω]){2}\w",
] + _random_patterns(7, 120))
def test_shared_shapes_expand_as_multibyte_does(pattern, monkeypatch):
    """The UTF-8 expansion copies one template per shape of spans (a counted
    class: ``\\w{1,500}``'s 500 states of ~310 byte states each, 8.4 s in
    Python before); the byte table, unminimised, numbering included, is the one
    :func:`_multibyte` alone writes for every state."""
    from constrain.regular import regex as R

    char = R.minimize_char_dfa(R.build_char_dfa(R.parse_regex(pattern), max_states=100_000))
    monkeypatch.setattr(ba, "_SHAPES_FROM", 0)  # (small automata are made directly)
    ba._TEMPLATES.clear()
    fast = ba.char_dfa_to_bytes(char)
    # again, from the templates the first expansion left (the process's cache)
    assert len(ba._TEMPLATES) or not any(len(a.intervals) and a.intervals[-1][1] >= 0x80
                                         for a in char.atoms)
    warm = ba.char_dfa_to_bytes(char)
    monkeypatch.setattr(ba._Shapes, "expand", lambda self, b, state, spans: ba._multibyte(b, state, spans))
    slow = ba.char_dfa_to_bytes(char)
    for got in (fast, warm):
        assert np.array_equal(got.transitions, slow.transitions)
        assert np.array_equal(got.accepting, slow.accepting)


def test_utf8_templates_are_shared_bounded_and_cleared():
    """A class expanded once is copied from the process's templates by later
    patterns (``\\w`` made directly cost ~8 ms a pattern), the templates are
    read-only, charged their rows, and ``clear_caches`` empties them."""
    import constrain
    from constrain.regular import regex as R

    def expand(pattern):
        char = R.minimize_char_dfa(R.build_char_dfa(R.parse_regex(pattern), max_states=100_000))
        return ba.char_dfa_to_bytes(char)

    constrain.clear_caches()
    assert len(ba._TEMPLATES) == 0
    first = expand(r"\w+")
    assert len(ba._TEMPLATES) == 1
    (rows, keys), = [ba._TEMPLATES.get(k) for k in list(ba._TEMPLATES._items)]
    assert not rows.flags.writeable and isinstance(keys, tuple) and len(keys) == rows.shape[0] - 1
    assert ba._TEMPLATES.stats().bytes >= rows.nbytes
    hits = ba._TEMPLATES.stats().hits
    again = expand(r"\w+")
    assert ba._TEMPLATES.stats().hits == hits + 1 and len(ba._TEMPLATES) == 1
    assert np.array_equal(first.transitions, again.transitions)
    # a pattern with the class in another place: the same shape
    other = expand(r"a\w*z")
    assert len(ba._TEMPLATES) == 1 and other.matches("aéz".encode()) and not other.matches(b"a-z")
    constrain.clear_caches()
    assert len(ba._TEMPLATES) == 0


def test_utf8_templates_under_threads():
    """Threads expanding classes at once, the templates' cache evicting all the
    while (room for one), get the tables one thread alone gets."""
    from concurrent.futures import ThreadPoolExecutor
    from constrain.regular import regex as R

    patterns = [r"\w{2}", r"\d+x", r"[^\s]\w", r"(?:\w|é){1,3}", r"\W\d", r"[α-ω]+\w"]
    chars = [R.minimize_char_dfa(R.build_char_dfa(R.parse_regex(p), max_states=100_000))
             for p in patterns]
    want = [ba.char_dfa_to_bytes(c).transitions for c in chars]
    small = ba.BoundedCache("utf-8 templates (test)", 1 << 30, max_entries=1, sizeof=ba._template_bytes)
    saved = ba._TEMPLATES
    ba._TEMPLATES = small
    try:
        with ThreadPoolExecutor(8) as pool:
            got = list(pool.map(lambda i: ba.char_dfa_to_bytes(chars[i % len(chars)]).transitions,
                                range(96)))
    finally:
        ba._TEMPLATES = saved
    for i, t in enumerate(got):
        assert np.array_equal(t, want[i % len(chars)])


def _reference_classes(trans, accepting, live):
    """Moore's refinement, in Python, to its fixpoint: the coarsest equivalence."""
    n, k = trans.shape
    cls = [0 if not live[s] else (2 if accepting[s] else 1) for s in range(n)]
    while True:
        signatures: dict = {}
        new = [signatures.setdefault((cls[s],) + tuple(cls[trans[s, c]] for c in range(k)),
                                     len(signatures)) for s in range(n)]
        if len(signatures) == len(set(cls)):
            return cls
        cls = new


def _blocks(cls) -> list:
    out: dict = {}
    for s, c in enumerate(cls):
        out.setdefault(int(c), []).append(s)
    return sorted(out.values())


def test_hopcroft_classes_are_the_coarsest_equivalence():
    """``coarsest_classes`` (Hopcroft) against Moore's refinement run to its end,
    on 1,500 random DFAs with dead transitions and dead states: the same blocks,
    and every state that cannot accept in class 0."""
    import random

    from constrain.automata.liveness import coreachable_dense
    from constrain.automata.minimize_kernels import coarsest_classes

    rng = random.Random(5)
    for _ in range(1500):
        n, k = rng.randint(1, 40), rng.randint(1, 5)
        trans = np.zeros((n + 1, k), np.int32)
        for s in range(1, n + 1):
            for c in range(k):
                trans[s, c] = 0 if rng.random() < 0.3 else rng.randint(1, n)
        accepting = np.zeros(n + 1, np.bool_)
        accepting[1:] = [rng.random() < 0.3 for _ in range(n)]
        live = coreachable_dense(trans, accepting)
        got = coarsest_classes(trans, accepting, live)
        assert _blocks(got) == _blocks(_reference_classes(trans, accepting, live))
        assert all(got[s] == 0 for s in range(n + 1) if not live[s])


def test_deep_automata_are_minimised():
    """Moore's refinement needs a round per symbol of the longest string that
    tells two states apart, and gave up after 256: two copies of a 600-byte
    chain stayed two (and ``\\w{1,500}`` spent 28 s finding out). Hopcroft's
    merges them."""
    n = 2 + 2 * 600
    trans = np.zeros((n, 256), np.int32)
    trans[1, ord("a")], trans[1, ord("b")] = 2, 602
    for i in range(599):
        trans[2 + i, ord("x")] = 3 + i
        trans[602 + i, ord("x")] = 603 + i
    accepting = np.zeros(n, np.bool_)
    accepting[601] = accepting[1201] = True
    dfa = ba.trim_and_minimize(ba.ByteDFA(trans, accepting))
    assert dfa.transitions.shape[0] == 2 + 600  # dead, start, one chain
    assert dfa.matches(b"a" + b"x" * 599) and dfa.matches(b"b" + b"x" * 599)
    assert not dfa.matches(b"a" + b"x" * 598)


def test_charset_partitions_are_shared_bounded_by_bytes_and_cleared():
    """The atoms of a pattern's classes are kept for later patterns with the
    same classes, charged ~100 bytes an interval (an entry bound alone let 256
    long patterns' partitions hold hundreds of MB), never past the byte bound,
    and ``clear_caches`` empties them."""
    import constrain
    from constrain.automata import char_dfa
    from constrain.automata.charset import SRE_CATEGORY_SIGN, CharSet, sre_category
    from constrain.cache import BoundedCache

    word = next(sre_category(k, False) for k in SRE_CATEGORY_SIGN if str(k) == "CATEGORY_WORD")
    classes = (word, CharSet([(0x61, 0x7A)]), CharSet([(0x30, 0x39), (0xE9, 0xE9)]))
    constrain.clear_caches()
    assert len(char_dfa._PARTITIONS) == 0
    atoms, masks = char_dfa._partition_distinct(classes)
    # atoms: disjoint, their union is the classes' union, each class the union of its atoms
    covered = sorted(iv for a in atoms for iv in a.intervals)
    assert all(b[0] > a[1] for a, b in zip(covered, covered[1:]))
    for cs, m in zip(classes, masks):
        assert CharSet(iv for i, a in enumerate(atoms) if m >> i & 1 for iv in a.intervals) == cs
    stats = char_dfa._PARTITIONS.stats()
    assert len(char_dfa._PARTITIONS) == 1 and stats.bytes >= 100 * len(word.intervals)
    assert char_dfa._partition_distinct(classes) is char_dfa._partition_distinct(classes)
    assert char_dfa._PARTITIONS.stats().hits == stats.hits + 2
    constrain.clear_caches()
    assert len(char_dfa._PARTITIONS) == 0

    # a bound smaller than one partition: returned, not kept
    saved = char_dfa._PARTITIONS
    char_dfa._PARTITIONS = BoundedCache("charset partitions (test)", 1000, max_entries=256,
                                        sizeof=char_dfa._partition_bytes)
    try:
        assert char_dfa._partition_distinct(classes) == (atoms, masks)
        assert len(char_dfa._PARTITIONS) == 0 and char_dfa._PARTITIONS.stats().bytes == 0
        small = (CharSet([(0x61, 0x62)]), CharSet([(0x62, 0x63)]))
        char_dfa._partition_distinct(small)
        assert len(char_dfa._PARTITIONS) == 1
    finally:
        char_dfa._PARTITIONS = saved


def test_charset_partitions_under_threads():
    """Threads partitioning class tuples at once, the partitions' cache evicting
    all the while (room for one), get what one thread alone gets."""
    from concurrent.futures import ThreadPoolExecutor

    from constrain.automata import char_dfa
    from constrain.automata.charset import CharSet
    from constrain.cache import BoundedCache

    tuples = [tuple(CharSet([(lo + 7 * k, lo + 7 * k + 40)]) for k in range(n))
              for lo, n in ((0x61, 2), (0x3B1, 3), (0x400, 4), (0x4E00, 5), (0x30, 6), (0xE9, 2))]
    want = [char_dfa._atoms(t) for t in tuples]
    saved = char_dfa._PARTITIONS
    char_dfa._PARTITIONS = BoundedCache("charset partitions (test)", 1 << 30, max_entries=1,
                                        sizeof=char_dfa._partition_bytes)
    try:
        with ThreadPoolExecutor(8) as pool:
            got = list(pool.map(lambda i: char_dfa._partition_distinct(tuples[i % len(tuples)]),
                                range(192)))
    finally:
        char_dfa._PARTITIONS = saved
    for i, g in enumerate(got):
        assert g == want[i % len(tuples)]
