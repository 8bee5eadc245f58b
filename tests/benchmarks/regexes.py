"""The regexes of the regex benchmark (``bench_regex.py``), with strings they match.

Each case is a regex written in the syntax subset that Trellis, outlines-core and
xgrammar all read the same way: explicit character classes (``[0-9]`` rather than
``\\d``, whose meaning is Unicode-wide in Rust's regex crate but ASCII in others),
no anchors, no lookaround, no backreferences; the whole string must match
(``re.fullmatch`` semantics). Negated classes (``[^"\\\\]``) match any Unicode code
point outside the class, encoded in UTF-8, in all three engines.

The example strings are the token sequences every engine walks: each is checked
with ``re.fullmatch`` when the benchmark starts, tokenized with the vocabulary's
real tokenizer, and the same token ids are fed to every engine. They are a mix of
short and long, ASCII and (where the regex allows it) non-ASCII text, so that some
tokens cross the regex's internal boundaries.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["RegexCase", "CASES", "WORDS", "by_name"]


#: 200 common English words (distinct, lower case) for the alternation regex.
#: Several are prefixes of others ("a"/"an"/"and"/"any", "in"/"into", "so"/"some",
#: "on"/"one"/"only") so the automaton has shared prefixes, like real enums.
WORDS: tuple[str, ...] = (
    "the", "of", "and", "a", "to", "in", "is", "you", "that", "it",
    "he", "was", "for", "on", "are", "as", "with", "his", "they", "at",
    "be", "this", "have", "from", "or", "one", "had", "by", "word", "but",
    "not", "what", "all", "were", "we", "when", "your", "can", "said", "there",
    "use", "an", "each", "which", "she", "do", "how", "their", "if", "will",
    "up", "other", "about", "out", "many", "then", "them", "these", "so", "some",
    "her", "would", "make", "like", "him", "into", "time", "has", "look", "two",
    "more", "write", "go", "see", "number", "no", "way", "could", "people", "my",
    "than", "first", "water", "been", "call", "who", "oil", "its", "now", "find",
    "long", "down", "day", "did", "get", "come", "made", "may", "part", "over",
    "new", "sound", "take", "only", "little", "work", "know", "place", "year", "live",
    "me", "back", "give", "most", "very", "after", "thing", "our", "just", "name",
    "good", "sentence", "man", "think", "say", "great", "where", "help", "through", "much",
    "before", "line", "right", "too", "mean", "old", "any", "same", "tell", "boy",
    "follow", "came", "want", "show", "also", "around", "form", "three", "small", "set",
    "put", "end", "does", "another", "well", "large", "must", "big", "even", "such",
    "because", "turn", "here", "why", "ask", "went", "men", "read", "need", "land",
    "different", "home", "us", "move", "try", "kind", "hand", "picture", "again", "change",
    "off", "play", "spell", "air", "away", "animal", "house", "point", "page", "letter",
    "mother", "answer", "found", "study", "still", "learn", "should", "america", "world", "high",
)
assert len(WORDS) == 200 and len(set(WORDS)) == 200, "WORDS must be 200 distinct words"


@dataclass(frozen=True)
class RegexCase:
    name: str
    pattern: str
    examples: tuple[str, ...]
    note: str = ""


_OCTET = r"(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])"
_URL_CHARS = r"a-zA-Z0-9._~%!$&'()*+,;=:@-"

CASES: tuple[RegexCase, ...] = (
    RegexCase(
        "email",
        r"[a-zA-Z0-9._%+-]+@[a-zA-Z0-9-]+(\.[a-zA-Z0-9-]+)*\.[a-zA-Z]{2,}",
        (
            "john.doe@example.com",
            "a+b@c.io",
            "first.last_99%tag@mail.sub-domain.example.co.uk",
            "Marie.Curie@Sorbonne.fr",
        ),
        "local part, one or more dotted domain labels, a TLD of 2+ letters",
    ),
    RegexCase(
        "iso_datetime",
        r"[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])"
        r"T([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\.[0-9]{1,9})?"
        r"(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])",
        (
            "2024-03-15T13:45:30Z",
            "1999-12-31T23:59:59.999+05:30",
            "2000-01-01T00:00:00-08:00",
            "2038-01-19T03:14:07.123456789Z",
        ),
        "ISO-8601 / RFC 3339 date-time with optional fraction and a zone",
    ),
    RegexCase(
        "us_phone",
        r"(\+1[ .-]?)?(\([2-9][0-9]{2}\)|[2-9][0-9]{2})[ .-]?[2-9][0-9]{2}[ .-]?[0-9]{4}",
        (
            "(415) 555-2671",
            "+1 212.555.0199",
            "650-253-0000",
            "8005551234",
        ),
        "NANP number, optional +1, optional parentheses and separators",
    ),
    RegexCase(
        "ipv4",
        rf"({_OCTET}\.){{3}}{_OCTET}",
        (
            "192.168.0.1",
            "255.255.255.255",
            "10.0.0.254",
            "8.8.4.4",
            "172.16.254.100",
        ),
        "dotted quad, each octet strictly 0-255 without leading zeros",
    ),
    RegexCase(
        "url",
        r"https?://([a-zA-Z0-9-]+\.)+[a-zA-Z]{2,}(:[0-9]{1,5})?"
        rf"(/[{_URL_CHARS}]*)*(\?[/?{_URL_CHARS}]*)?(#[/?{_URL_CHARS}]*)?",
        (
            "https://www.example.com",
            "http://localhost.dev:8080/api/v1/users?id=42&sort=name",
            "https://en.wikipedia.org/wiki/Regular_expression#Formal_language_theory",
            "https://github.com/dottxt-ai/outlines-core/blob/main/src/index.rs",
        ),
        "http(s) URL: host, optional port, path segments, query and fragment",
    ),
    RegexCase(
        "words200",
        "(" + "|".join(WORDS) + ")",
        ("the", "different", "america", "sentence", "an"),
        "alternation of the 200 words in WORDS (an enum-like choice)",
    ),
    RegexCase(
        "zip5",
        r"[0-9]{5}",
        ("94103", "10001", "00501", "99950"),
        "US ZIP code, exactly five digits",
    ),
    RegexCase(
        "json_string",
        r'"([^"\\\x00-\x1f]|\\["\\/bfnrt]|\\u[0-9a-fA-F]{4})*"',
        (
            '"hello world"',
            '""',
            '"She said \\"hi\\" and left.\\nNext line\\ttab \\u00e9\\\\"',
            '"Grüße aus Köln — 東京 🚀 ok"',
            '"path\\/to\\/file.json {\\"key\\": [1, 2, 3]}"',
        ),
        "a JSON string literal, escapes included, any non-control code point",
    ),
    RegexCase(
        "lower_3_40",
        r"[a-z]{3,40}",
        (
            "abc",
            "hello",
            "internationalization",
            "supercalifragilisticexpialidocious",
        ),
        "3 to 40 lower-case ASCII letters (a bounded repetition)",
    ),
)


def by_name(name: str) -> RegexCase:
    for case in CASES:
        if case.name == name:
            return case
    raise KeyError(name)
