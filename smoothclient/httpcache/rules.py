"""
The rules of a private HTTP cache (RFC 9111) and of its stale modes (RFC 5861), sans I/O.

Pure functions of headers, numbers and a clock reading: what may be stored, for how long it is
fresh, whether a stored response may answer a request, and what an unsafe method invalidates
(validation is in :mod:`.validation`).  docs/http-cache.md section 1
states each rule in the project's words.  Bad server input is never an error: a directive or a
date that does not parse is ignored (logged at debug level).
"""

from __future__ import annotations

import datetime
import email.utils
import logging
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from urllib.parse import urljoin, urlsplit, urlunsplit

__all__ = [
    "CACHEABLE_METHODS",
    "HEURISTIC_FRACTION",
    "HEURISTIC_STATUSES",
    "NEVER_STORED",
    "UNDERSTOOD_STATUSES",
    "Directives",
    "Freshness",
    "RequestRules",
    "cache_key",
    "directives",
    "freshness",
    "header",
    "http_date",
    "invalidated_urls",
    "request_rules",
    "split_list",
    "storable",
    "usable",
    "vary_names",
    "vary_values",
]

log = logging.getLogger("smoothclient.httpcache")

#: The methods whose responses are stored (HEAD and POST responses are not: see the docs).
CACHEABLE_METHODS = frozenset({"GET"})
#: Statuses a response may be stored for with no explicit freshness (RFC 9110 section 15.1,
#: RFC 9111 section 4.2.2).
HEURISTIC_STATUSES = frozenset({200, 203, 204, 300, 301, 308, 404, 405, 410, 414, 501})
#: The statuses whose caching rules this cache knows: a response with ``must-understand`` is
#: stored only with one of them (RFC 9111 section 5.2.2.3).  Any other final status is stored
#: only when its response says how long it is fresh (``max-age``, ``Expires``) or ``public``.
UNDERSTOOD_STATUSES = HEURISTIC_STATUSES | frozenset({302, 303, 307, 400, 403, 500, 502, 503, 504})
#: Statuses never stored as a response: partial content (a part, never the whole) and a 304
#: (it updates a stored response; it is none).
NEVER_STORED = frozenset({206, 304})
#: Methods that never change the target: the rest invalidate it (RFC 9111 section 4.4).
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS", "TRACE"})
#: The heuristic lifetime: this fraction of the time since ``Last-Modified``.
HEURISTIC_FRACTION = 0.1
#: delta-seconds beyond this are this (RFC 9111 section 1.2.2: 2^31).
MAX_SECONDS = 2**31
#: Directives read from one header are bounded (a hostile header costs nothing).
MAX_DIRECTIVES = 64
Headers = Iterable[tuple[str, str]]


def header(headers: Headers, name: str) -> str | None:
    """The values of field ``name`` (any case) joined by ``", "``; ``None`` when absent."""
    name = name.lower()
    found = [value for key, value in headers if key.lower() == name]
    return ", ".join(found) if found else None


def _seconds(value: str | None) -> int | None:
    """delta-seconds: digits only (a quoted number is tolerated), clamped; else ``None``."""
    if value is None:
        return None
    text = value.strip().strip('"')
    if not text.isdigit() or not text.isascii():
        return None
    return min(int(text), MAX_SECONDS)


def http_date(value: str | None) -> float | None:
    """An HTTP date as epoch seconds; ``None`` when absent or not a date."""
    if not value:
        return None
    try:
        parsed = email.utils.parsedate_to_datetime(value.strip())
    except (TypeError, ValueError, IndexError, OverflowError):
        log.debug("ignored an HTTP date that does not parse: %.40r", value)
        return None
    if parsed.tzinfo is None:  # RFC 850 / asctime dates are GMT
        parsed = parsed.replace(tzinfo=datetime.UTC)
    return parsed.timestamp()


@dataclass(frozen=True, slots=True)
class Directives:
    """The ``Cache-Control`` directives of one message: ``name -> argument`` (``None``: bare)."""

    items: Mapping[str, str | None]

    def __contains__(self, name: object) -> bool:
        """Whether directive ``name`` is present."""
        return name in self.items

    def seconds(self, name: str) -> int | None:
        """Directive ``name``'s argument as delta-seconds (``None``: absent or invalid)."""
        return _seconds(self.items.get(name))


def directives(value: str | None) -> Directives:
    """
    Parse a ``Cache-Control`` value (the first of a directive repeated wins).

    Commas inside quoted arguments are kept; names are lowercased; at most
    :data:`MAX_DIRECTIVES` are read.
    """
    found: dict[str, str | None] = {}
    if not value:
        return Directives(found)
    for part in split_list(value)[:MAX_DIRECTIVES]:
        name, eq, arg = part.partition("=")
        name = name.strip().lower()
        if name and name not in found:
            found[name] = arg.strip() if eq else None
    return Directives(found)


def split_list(value: str) -> list[str]:
    """Split at commas outside double quotes."""
    parts: list[str] = []
    current: list[str] = []
    quoted = False
    for char in value:
        if char == '"':
            quoted = not quoted
        if char == "," and not quoted:
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
    parts.append("".join(current))
    return [p for p in parts if p.strip()]


def _response_directives(headers: Headers) -> Directives:
    return directives(header(headers, "cache-control"))


@dataclass(frozen=True, slots=True)
class Freshness:
    """
    How long a response is fresh, how old it was when it arrived, and its stale allowances.

    ``born``: the clock reading at which the response's age was zero (RFC 9111 section 4.2.3),
    so its age at ``now`` is ``now - born``; ``lifetime``: its freshness lifetime (section
    4.2.1); ``revalidate``: must not be used without validation (``no-cache``); ``strict``:
    never used stale (``must-revalidate``, ``no-cache``); ``swr`` / ``sie``: the server's
    ``stale-while-revalidate`` / ``stale-if-error`` seconds (``None``: not given).
    """

    born: float
    lifetime: float
    revalidate: bool = False
    strict: bool = False
    swr: float | None = None
    sie: float | None = None

    def age(self, now: float) -> float:
        """The response's current age at ``now``."""
        return max(0.0, now - self.born)

    def fresh(self, now: float) -> bool:
        """Whether it is fresh at ``now`` (and may be used without validation)."""
        return not self.revalidate and self.age(now) < self.lifetime


def freshness(
    headers: Headers, request_time: float, response_time: float, *, status: int = 200
) -> Freshness:
    """
    The freshness of a response received at ``response_time``, requested at ``request_time``.

    Lifetime: ``max-age``, else ``Expires - Date``, else (statuses of
    :data:`HEURISTIC_STATUSES`, or any with ``public``) :data:`HEURISTIC_FRACTION` of
    ``Date - Last-Modified``, else 0.
    ``s-maxage`` is for shared caches and ignored.  Age: ``Age``, ``Date`` and the response's
    delay, as RFC 9111 section 4.2.3 corrects them; the ``Date`` counts whole seconds, so the
    age it proves is a second less than it reads.  An ``Age`` that cannot be read makes the
    response stale.
    """
    pairs = list(headers)
    cc = _response_directives(pairs)
    date = http_date(header(pairs, "date"))
    date_value = response_time if date is None else date
    # a Date has one-second resolution: the response may have been made up to a second after it
    apparent = max(0.0, response_time - date_value - 1.0)
    age_field = header(pairs, "age")
    age_value = _seconds(age_field)
    corrected = (age_value or 0) + max(0.0, response_time - request_time)
    born = response_time - max(apparent, corrected)
    lifetime = _lifetime(pairs, cc, date_value, status)
    if age_field is not None and age_value is None:
        # an Age that is not one number (junk, negative, "7200.0", two of them): how old the
        # response is cannot be told, so it is stale (validated before use), never younger
        # than it may be (ignored, "abc" or "7200, 0" made a two-hour-old response fresh)
        lifetime = 0.0
    return Freshness(
        born=born,
        lifetime=lifetime,
        revalidate="no-cache" in cc,
        strict="must-revalidate" in cc or "no-cache" in cc,
        swr=_allowance(cc, "stale-while-revalidate"),
        sie=_allowance(cc, "stale-if-error"),
    )


def _allowance(cc: Directives, name: str) -> float | None:
    value = cc.seconds(name)
    return None if value is None else float(value)


def _lifetime(headers: list[tuple[str, str]], cc: Directives, date: float, status: int) -> float:
    if "max-age" in cc:
        max_age = cc.seconds("max-age")
        return 0.0 if max_age is None else float(max_age)  # an invalid max-age: stale
    expires = header(headers, "expires")
    if expires is not None:
        when = http_date(expires)
        return 0.0 if when is None else max(0.0, when - date)  # "0" and junk: already expired
    modified = http_date(header(headers, "last-modified"))
    heuristic = status in HEURISTIC_STATUSES or "public" in cc  # RFC 9111 section 5.2.2.9
    if modified is not None and heuristic and modified <= date:
        return HEURISTIC_FRACTION * (date - modified)
    return 0.0


def storable(
    method: str, status: int, response: Headers, request_cc: Directives, *, lifetime: float
) -> bool:
    """
    Whether a response may be stored (RFC 9111 section 3, for a private cache).

    A GET; a final status (not 206 nor 304), one of :data:`HEURISTIC_STATUSES` or else with
    ``max-age``, ``Expires``, ``public`` or ``private`` saying it may be; neither side saying
    ``no-store`` (which ``must-understand`` overrides for a status this cache understands,
    RFC 9111 section 5.2.2.3, and with any other status forbids storing); and something to
    gain: freshness (explicit or heuristic), a validator to revalidate with, or a stale
    allowance.
    """
    if method not in CACHEABLE_METHODS or "no-store" in request_cc:
        return False
    if not 200 <= status <= 599 or status in NEVER_STORED:
        return False
    pairs = list(response)
    cc = _response_directives(pairs)
    if "must-understand" in cc:
        if status not in UNDERSTOOD_STATUSES:
            return False
    elif "no-store" in cc:
        return False
    explicit = "max-age" in cc or "public" in cc or "private" in cc or header(pairs, "expires")
    if status not in HEURISTIC_STATUSES and not explicit:
        return False
    if "*" in vary_names(pairs):
        return False  # never matches a later request (a "*" among other names too)
    return (
        lifetime > 0
        or header(pairs, "etag") is not None
        or header(pairs, "last-modified") is not None
        or "stale-if-error" in cc
        or "stale-while-revalidate" in cc
    )


@dataclass(frozen=True, slots=True)
class RequestRules:
    """
    What a request's own ``Cache-Control`` asks of the cache (RFC 9111 section 5.2.1).

    ``bypass``: ``no-store`` (neither used nor stored); ``revalidate``: ``no-cache`` (or
    ``Pragma: no-cache`` alone); ``max_age``, ``min_fresh``: limits on the stored response's
    age and remaining freshness; ``max_stale``: stale seconds accepted (``inf``: any);
    ``only_if_cached``: never go to the origin; ``sie``: the request's ``stale-if-error``.
    """

    bypass: bool = False
    revalidate: bool = False
    max_age: float | None = None
    min_fresh: float = 0.0
    max_stale: float = 0.0
    only_if_cached: bool = False
    sie: float | None = None


#: The rules of a request that asks nothing.
PLAIN = RequestRules()


def request_rules(headers: Headers) -> tuple[RequestRules, Directives]:
    """A request's rules, and its parsed directives."""
    pairs = list(headers)
    value = header(pairs, "cache-control")
    if value is None:
        pragma = header(pairs, "pragma")
        if pragma and "no-cache" in pragma.lower():
            return RequestRules(revalidate=True), Directives({})
        return PLAIN, Directives({})
    cc = directives(value)
    max_stale: float = 0.0
    if "max-stale" in cc:
        given = cc.seconds("max-stale")
        max_stale = math.inf if cc.items["max-stale"] is None else float(given or 0)
    max_age = cc.seconds("max-age")
    rules = RequestRules(
        bypass="no-store" in cc,
        revalidate="no-cache" in cc,
        max_age=None if max_age is None else float(max_age),
        min_fresh=float(cc.seconds("min-fresh") or 0),
        max_stale=max_stale,
        only_if_cached="only-if-cached" in cc,
        sie=_allowance(cc, "stale-if-error"),
    )
    return rules, cc


def usable(found: Freshness, rules: RequestRules, now: float) -> bool:
    """
    Whether a stored response may answer a request without validation now.

    Fresh (and fresh for ``min-fresh`` more seconds, and younger than the request's
    ``max-age``), or stale by no more than the request's ``max-stale`` unless the response is
    ``must-revalidate``.
    """
    if found.revalidate or rules.revalidate:
        return False
    age = found.age(now)
    if rules.max_age is not None and age > rules.max_age:
        return False
    left = found.lifetime - age
    if left > rules.min_fresh:
        return True
    if found.strict or rules.max_stale <= 0 or rules.min_fresh > 0:
        return False
    return -left <= rules.max_stale


def vary_names(headers: Headers) -> tuple[str, ...]:
    """The request fields a response varies on, lowercased and sorted (``Vary``)."""
    value = header(headers, "vary")
    if not value:
        return ()
    names = {part.strip().lower() for part in value.split(",") if part.strip()}
    return tuple(sorted(names))[:MAX_DIRECTIVES]


#: Request fields whose value is a list of members with parameters (RFC 9110 sections 5.6.1,
#: 5.6.6, 12.5): the whitespace around their commas and semicolons is no part of them.
_LIST_FIELDS = frozenset({"accept", "accept-charset", "accept-encoding", "accept-language"})
#: ... and those whose members are case-insensitive throughout: charsets, content codings,
#: language ranges, and the weight's ``q`` (RFC 9110 sections 8.3.2, 8.4.1, 8.5.1, 12.4.2).
_CASELESS_FIELDS = frozenset({"accept-charset", "accept-encoding", "accept-language"})


def vary_values(names: Iterable[str], request: Headers) -> tuple[str | None, ...]:
    """
    The request's values of the fields ``names``, in order, normalised (RFC 9111 section 4.1).

    Two values that differ only where the field's syntax says nothing does are the same
    value: the lines of a repeated field are joined by ``", "``; whitespace around a value
    and runs of it inside are one space (or none); a field of :data:`_LIST_FIELDS` loses the
    whitespace around its commas and semicolons and its empty members, and is lowercased
    where its syntax is case-insensitive (the whole member, or an ``Accept`` media range and
    its parameter names, never a parameter's value).  The order of members is kept:
    ``Accept-Language: en, de`` and ``de, en`` may mean different preferences.
    """
    pairs = list(request)
    return tuple(_normal(name, header(pairs, name)) for name in names)


def _normal(name: str, value: str | None) -> str | None:
    if value is None:
        return None
    if name in _LIST_FIELDS:
        return ",".join(_normal_member(name, member) for member in _members(value, ","))
    return " ".join(value.split())


def _normal_member(name: str, member: str) -> str:
    """One member of a list field: its parts stripped, lowercased where that means nothing."""
    parts = [" ".join(part.split()) for part in _members(member, ";")]
    if name in _CASELESS_FIELDS:
        return ";".join(part.lower() for part in parts)
    first, *parameters = parts or [""]
    named = []
    for parameter in parameters:
        key, eq, value = parameter.partition("=")
        named.append(key.lower() + eq + value)
    return ";".join([first.lower(), *named])


def _members(value: str, separator: str) -> list[str]:
    """
    ``value`` split at ``separator`` outside quoted strings, stripped, empty ones dropped.

    A backslash inside a quoted string escapes the next character (RFC 9110 section 5.6.4).
    """
    parts: list[str] = []
    current: list[str] = []
    quoted = escaped = False
    for char in value:
        if escaped:
            escaped = False
        elif quoted and char == "\\":
            escaped = True
        elif char == '"':
            quoted = not quoted
        elif char == separator and not quoted:
            parts.append("".join(current))
            current = []
            continue
        current.append(char)
    parts.append("".join(current))
    return [stripped for part in parts if (stripped := part.strip())]


def cache_key(method: str, url: str) -> str:
    """The primary key: the method and the URL without its fragment (scheme and host lowercased)."""
    parts = urlsplit(url)
    clean = urlunsplit(
        (parts.scheme.lower(), parts.netloc.lower(), parts.path or "/", parts.query, "")
    )
    return f"{method.upper()} {clean}"


def invalidated_urls(method: str, status: int, url: str, response: Headers) -> list[str]:
    """
    What an unsafe request invalidates when it succeeds or redirects (RFC 9111 section 4.4).

    Its target, and the ``Location`` and ``Content-Location`` of the response when they are of
    the same origin (resolved against the target).
    """
    if method.upper() in SAFE_METHODS or not 200 <= status < 400:
        return []
    pairs = list(response)
    target = urlsplit(url)
    found = [url]
    for name in ("location", "content-location"):
        value = header(pairs, name)
        if not value:
            continue
        joined = urljoin(url, value.strip())
        other = urlsplit(joined)
        if (other.scheme.lower(), other.netloc.lower()) == (
            target.scheme.lower(),
            target.netloc.lower(),
        ):
            found.append(joined)
    return found
