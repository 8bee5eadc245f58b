"""The ``format`` values that are enforced, as regexes over JSON string content.

Each regex accepts only strings that ``jsonschema``'s format checker (with its
format extras installed) accepts; every one uses only characters that need no
JSON escaping. Formats not listed are annotations and are not enforced.
"""

from __future__ import annotations

import json
import re

# February 29 only in leap years (Gregorian rule), as jsonschema's checker decides;
# no year 0000 (date.fromisoformat and rfc3339_validator refuse it, and models
# write it as a placeholder)
_YEAR = r"(?:[1-9][0-9]{3}|0[1-9][0-9]{2}|00[1-9][0-9]|000[1-9])"
_DATE = (rf"(?:{_YEAR}-(?:(?:0[13578]|1[02])-(?:0[1-9]|[12][0-9]|3[01])"
         r"|(?:0[469]|11)-(?:0[1-9]|[12][0-9]|30)|02-(?:0[1-9]|1[0-9]|2[0-8]))"
         r"|(?:[0-9]{2}(?:0[48]|[2468][048]|[13579][26])|(?:0[48]|[2468][048]|[13579][26])00)-02-29)")
# RFC 3339 full-time: the offset is required (as jsonschema's format checker, with
# its format extras installed, requires it); no leap second (the checker refuses
# 60): an enforced format must never let through what the checker rejects
# fractional seconds: at most 9 digits (nanoseconds); unbounded, a sampled
# model wrote digits until max_new_tokens ran out
_TIME = (r"(?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](?:\.[0-9]{1,9})?"
         r"(?:[zZ]|[+\-](?:[01][0-9]|2[0-3]):[0-5][0-9])")
_OCTET = r"(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])"
_IPV4 = rf"{_OCTET}(?:\.{_OCTET}){{3}}"
_H16 = r"[0-9a-fA-F]{1,4}"
_LS32 = rf"(?:{_H16}:{_H16}|{_IPV4})"
_IPV6 = "(?:" + "|".join([
    rf"(?:{_H16}:){{6}}{_LS32}",
    rf"::(?:{_H16}:){{5}}{_LS32}",
    rf"(?:{_H16})?::(?:{_H16}:){{4}}{_LS32}",
    rf"(?:(?:{_H16}:){{0,1}}{_H16})?::(?:{_H16}:){{3}}{_LS32}",
    rf"(?:(?:{_H16}:){{0,2}}{_H16})?::(?:{_H16}:){{2}}{_LS32}",
    rf"(?:(?:{_H16}:){{0,3}}{_H16})?::{_H16}:{_LS32}",
    rf"(?:(?:{_H16}:){{0,4}}{_H16})?::{_LS32}",
    rf"(?:(?:{_H16}:){{0,5}}{_H16})?::{_H16}",
    rf"(?:(?:{_H16}:){{0,6}}{_H16})?::",
]) + ")"
_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9\-]{0,61}[A-Za-z0-9])?"
_SHORT_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9\-]{0,28}[A-Za-z0-9])?"
# a hostname is at most 253 characters (jsonschema's checker enforces it); a regex
# cannot count across labels cheaply, so: a first label of up to 63 characters and
# up to six more of up to 30 (at most 249) — exact below those sizes, never longer
_HOSTNAME = rf"{_LABEL}(?:\.{_SHORT_LABEL}){{0,6}}"
_EMAIL_DOMAIN = rf"{_LABEL}(?:\.{_LABEL})*"
_EMAIL = r"[A-Za-z0-9!#$%&'*+\-/=?^_`{|}~]+(?:\.[A-Za-z0-9!#$%&'*+\-/=?^_`{|}~]+)*@" + _EMAIL_DOMAIN
# RFC 3986 URI and URI-reference, exactly (checked against rfc3986-validator, which
# jsonschema's format checker uses, on 600k random strings)
_UNRESERVED = r"[A-Za-z0-9\-._~]"
_PCT = r"%[0-9A-Fa-f]{2}"
_SUBDELIM = r"[!$&'()*+,;=]"
_PCHAR = rf"(?:{_UNRESERVED}|{_PCT}|{_SUBDELIM}|[:@])"
_AUTHORITY = (rf"(?:(?:{_UNRESERVED}|{_PCT}|{_SUBDELIM}|:)*@)?"
              rf"(?:\[(?:{_IPV6}|v[0-9A-Fa-f]+\.(?:{_UNRESERVED}|{_SUBDELIM}|:)+)\]"
              rf"|(?:{_UNRESERVED}|{_PCT}|{_SUBDELIM})*)(?::[0-9]*)?")
_PATH_ABEMPTY = rf"(?:/{_PCHAR}*)*"
_PATH_ABSOLUTE = rf"/(?:{_PCHAR}+(?:/{_PCHAR}*)*)?"
_QUERY_FRAGMENT = rf"(?:\?(?:{_PCHAR}|[/?])*)?(?:#(?:{_PCHAR}|[/?])*)?"
_URI = (rf"[A-Za-z][A-Za-z0-9+\-.]*:(?://{_AUTHORITY}{_PATH_ABEMPTY}|{_PATH_ABSOLUTE}"
        rf"|{_PCHAR}+(?:/{_PCHAR}*)*|){_QUERY_FRAGMENT}")
_URI_REFERENCE = (rf"(?:{_URI}|(?://{_AUTHORITY}{_PATH_ABEMPTY}|{_PATH_ABSOLUTE}"
                  rf"|(?:{_UNRESERVED}|{_PCT}|{_SUBDELIM}|@)+(?:/{_PCHAR}*)*|){_QUERY_FRAGMENT})")

#: content regexes of the formats enforced; every one uses only characters that
#: need no JSON escaping. Formats not listed are annotations and are not enforced.
FORMATS = {
    "date-time": rf"{_DATE}[Tt]{_TIME}",
    "date": _DATE,
    "time": _TIME,
    "email": _EMAIL,
    "uri": _URI,
    "uri-reference": _URI_REFERENCE,
    "uuid": r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}",
    "ipv4": _IPV4,
    "ipv6": _IPV6,
    "hostname": _HOSTNAME,
}


def format_admits(name: str, value) -> bool:
    """Whether the enforced format ``name`` (a key of :data:`FORMATS`) admits
    ``value``: a non-string always (a format asserts on strings only), a
    string when its JSON content matches the format's regex."""
    if not isinstance(value, str):
        return True
    return re.fullmatch(FORMATS[name], json.dumps(value, ensure_ascii=False)[1:-1]) is not None
