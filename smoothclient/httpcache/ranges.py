"""
Range requests answered from a stored complete response (RFC 9110 section 14), sans I/O.

A stored 200 holds every byte of its representation, so a request for one range of it is
answered with a 206 of those bytes, as the origin would (RFC 9111 section 3.4 lets a cache
do so).  Anything this module does not read (several ranges, another unit, a range past the
end, an ``If-Range`` that does not hold) is answered with the whole response, which a server
may always send instead (RFC 9110 section 14.2).  Bad input is never an error.
"""

from __future__ import annotations

import dataclasses

from .entry import Entry
from .rules import Headers, header, http_date

__all__ = ["byte_range", "if_range_holds", "partial", "same_representation"]


def byte_range(value: str, size: int) -> tuple[int, int] | None:
    """
    The one byte range ``value`` (a ``Range`` field) asks of ``size`` bytes: (first, last).

    ``bytes=a-b``, ``bytes=a-`` and ``bytes=-n`` (the last ``n``), ``last`` clipped to the
    end.  ``None``: not one satisfiable byte range (several, another unit, not a range,
    past the end, or nothing to take from).
    """
    unit, eq, spec = value.strip().partition("=")
    if not eq or unit.strip().lower() != "bytes" or "," in spec or size <= 0:
        return None
    start, dash, end = spec.strip().partition("-")
    start, end = start.strip(), end.strip()
    if not dash or not _digits(start, end):
        return None
    if not start:  # a suffix: the last n bytes
        if not end or int(end) == 0:
            return None
        return max(0, size - int(end)), size - 1
    first = int(start)
    last = size - 1 if not end else min(int(end), size - 1)
    if first >= size or first > last:
        return None
    return first, last


def _digits(*parts: str) -> bool:
    return all(part.isdigit() and part.isascii() for part in parts if part)


def if_range_holds(stored: Headers, request: Headers) -> bool:
    """
    Whether a request's ``If-Range`` (if any) names the stored response (RFC 9110 13.1.5).

    An entity-tag: the stored ``ETag`` is the same strong tag (a weak one never matches).  A
    date: the stored ``Last-Modified`` is that date and a strong validator (its ``Date`` at
    least a second later).  Anything else never holds: the whole response is the answer.
    """
    pairs, asked = list(stored), list(request)
    value = header(asked, "if-range")
    if value is None:
        return True
    value = value.strip()
    if value.startswith(('"', "W/")):
        etag = header(pairs, "etag")
        return not value.startswith("W/") and etag is not None and etag.strip() == value
    since = http_date(value)
    modified = http_date(header(pairs, "last-modified"))
    date = http_date(header(pairs, "date"))
    if since is None or modified is None or date is None:
        return False
    return since == modified and date - modified >= 1.0


def partial(entry: Entry, request: Headers) -> Entry | None:
    """
    ``entry`` (a stored 200) as the 206 a request's ``Range`` asks for; ``None``: the whole.

    Its ``Content-Range`` says which bytes of how many, its ``Content-Length`` how many are
    sent; every other field is the stored response's.  A response that says it takes no
    ranges (``Accept-Ranges: none``) is answered whole.
    """
    pairs = list(request)
    value = header(pairs, "range")
    if value is None or entry.status != 200 or not if_range_holds(entry.headers, pairs):
        return None
    accepts = header(entry.headers, "accept-ranges")
    if accepts is not None and accepts.strip().lower() == "none":
        return None
    span = byte_range(value, len(entry.body))
    if span is None:
        return None
    first, last = span
    headers = [
        (k, v) for k, v in entry.headers if k.lower() not in ("content-length", "content-range")
    ]
    headers.append(("Content-Range", f"bytes {first}-{last}/{len(entry.body)}"))
    headers.append(("Content-Length", str(last - first + 1)))
    return dataclasses.replace(
        entry, status=206, headers=tuple(headers), body=entry.body[first : last + 1]
    )


def same_representation(stored: Headers, response: Headers) -> bool | None:
    """
    Whether a 206 is a part of the stored response (``None``: it cannot tell).

    RFC 9111 section 3.4: both carry the same strong ``ETag``; else, without ``ETag`` on
    either side, the same ``Last-Modified``.  A different validator says the stored response
    is not the current one.
    """
    pairs, answer = list(stored), list(response)
    mine, theirs = header(pairs, "etag"), header(answer, "etag")
    if mine is not None and theirs is not None:
        mine, theirs = mine.strip(), theirs.strip()
        if mine.startswith("W/") or theirs.startswith("W/"):
            return None if mine == theirs else False
        return mine == theirs
    if mine is not None or theirs is not None:
        return None
    modified = http_date(header(pairs, "last-modified"))
    confirmed = http_date(header(answer, "last-modified"))
    if modified is None or confirmed is None:
        return None
    return modified == confirmed
