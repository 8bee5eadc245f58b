"""Hypothesis strategies for random regexes (Python ``re`` syntax) and strings
near their language, for testing the regex compiler against ``re`` itself."""

from __future__ import annotations

import re

from hypothesis import strategies as st

# Characters the generated regexes and strings draw from: ASCII, Latin-1, Greek,
# CJK, an emoji (4-byte UTF-8), and characters that need escaping.
ALPHABET = list("abcxyzAZ019 _-.\"\\\n") + ["é", "ß", "Ω", "ω", "中", "文", "😀", "ſ", "K"]

_LITERALS = ["a", "b", "c", "x", "z", "A", "0", "1", "9", " ", "-", "_", "é", "ß", "Ω", "中", "😀",
             r"\.", r"\"", r"\\", r"\n", r"\-"]
_CLASSES = [".", r"\d", r"\w", r"\s", r"\D", r"\W", "[a-c]", "[^a]", "[0-9]", "[a-z0-9_]",
            "[α-ω]", "[^\\W\\d]", "[é😀]", "[\u4e00-\u9fff]", "[ -~]", "[^\"\\\\]"]


def _atoms():
    return st.one_of(st.sampled_from(_LITERALS), st.sampled_from(_CLASSES))


def _quantified(inner):
    quant = st.sampled_from(["", "", "", "*", "+", "?", "{2}", "{0,2}", "{1,3}", "{2,}", "*?", "+?", "??", "{1,2}?"])
    return st.tuples(inner, quant).map(lambda p: _wrap(p[0], p[1]))


def _wrap(x: str, q: str) -> str:
    if not q:
        return x
    if len(x) == 1 or (x.startswith("\\") and len(x) == 2) or (x.startswith("[") and x.endswith("]") and x.count("[") == 1) or x in _CLASSES:
        return x + q
    return f"(?:{x}){q}"


def _regex_body():
    return st.recursive(
        _atoms(),
        lambda inner: st.one_of(
            _quantified(inner),
            st.lists(_quantified(inner), min_size=2, max_size=4).map("".join),
            st.lists(inner, min_size=2, max_size=3).map(lambda xs: "(" + "|".join(xs) + ")"),
        ),
        max_leaves=8,
    )


@st.composite
def regexes(draw, flags: bool = True) -> str:
    """A random regex, optionally with an inline flag group in front."""
    body = draw(_regex_body())
    prefix = draw(st.sampled_from(["", "", "", "(?i)", "(?s)", "(?a)"])) if flags else ""
    pattern = prefix + body
    re.compile(pattern)
    return pattern


@st.composite
def regex_and_string(draw, flags: bool = True):
    """A random regex and a string that matches it about half of the time: a
    matching string from hypothesis's own generator, or a mutation of one, or
    random text from :data:`ALPHABET`."""
    pattern = draw(regexes(flags))
    kind = draw(st.sampled_from(["match", "match", "mutate", "random"]))
    if kind == "random":
        return pattern, draw(st.text(st.sampled_from(ALPHABET), max_size=8))
    s = draw(st.from_regex(pattern, fullmatch=True))[:60]  # a cut string rarely matches: fine
    if kind == "mutate" and s:
        i = draw(st.integers(0, len(s) - 1))
        op = draw(st.sampled_from(["drop", "insert", "replace"]))
        c = draw(st.sampled_from(ALPHABET))
        s = s[:i] + s[i + 1:] if op == "drop" else s[:i] + c + s[i + (op == "replace"):]
    return pattern, s


class OracleTimeout(Exception):
    """``re`` backtracked for too long on a pathological (pattern, string)."""


def fullmatch_oracle(pattern: str, text: str, seconds: float = 0.5) -> bool:
    """``re.fullmatch`` as the oracle, with a time limit: Python's backtracking
    matcher is exponential on nested quantifiers (``(a+)+b`` on ``aaaa…``), and it
    checks for signals as it runs, so an alarm stops it. Raises
    :class:`OracleTimeout`; callers discard such examples."""
    import signal

    def on_alarm(signum, frame):
        raise OracleTimeout(pattern)

    old = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        return re.fullmatch(pattern, text) is not None
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
