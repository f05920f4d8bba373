"""
Validation (RFC 9111 section 4.3), sans I/O.

The validators a revalidation sends, how a 304 updates what is stored, and a caller's own
conditional requests answered from the store.  Pure functions of headers, like :mod:`.rules`
(whose readers of fields they use); bad server input is never an error.
"""

from __future__ import annotations

from .rules import MAX_DIRECTIVES, Headers, header, http_date, split_list

__all__ = [
    "caller_conditional",
    "conditional_headers",
    "merge_304",
    "not_modified",
    "not_modified_headers",
    "validated_by_304",
]

#: Headers a 304 never replaces in the stored response (RFC 9111 section 3.2): those that
#: describe the stored body (its framing, coding, digest and range) and its validator (a 304
#: says the stored response is the one selected: its ETag is the one that matched).
_KEPT_ON_304 = frozenset(
    {
        "content-length",
        "content-encoding",
        "transfer-encoding",
        "content-md5",
        "content-range",
        "etag",
    }
)


def conditional_headers(stored: Headers) -> dict[str, str]:
    """The validators to send when revalidating a stored response (RFC 9111 section 4.3.1)."""
    pairs = list(stored)
    found: dict[str, str] = {}
    etag = header(pairs, "etag")
    if etag:
        found["If-None-Match"] = etag
    modified = header(pairs, "last-modified")
    if modified and http_date(modified) is not None:
        found["If-Modified-Since"] = modified
    return found


def merge_304(stored: Headers, fresh: Headers) -> list[tuple[str, str]]:
    """
    The stored headers updated by a 304's (RFC 9111 section 4.3.4).

    Every field the 304 carries replaces the stored one of that name, except those that
    describe the stored body (``Content-Length``, ``Content-Encoding``, ``Transfer-Encoding``,
    ``Content-MD5``, ``Content-Range``) and its ``ETag``.  The stored ``Date`` and ``Age`` go
    whether or not the 304 has its own: they dated the old response, and the age starts again
    from this one.
    """
    new = [(k, v) for k, v in fresh if k.lower() not in _KEPT_ON_304]
    replaced = {k.lower() for k, _ in new} | {"date", "age"}
    return [(k, v) for k, v in stored if k.lower() not in replaced] + new


#: The stored fields a 304 answering from the store carries (RFC 9110 section 15.4.5): those a
#: 304 must repeat from the 200, ``Last-Modified`` to guide a cache below, and ``Age``.
_ON_NOT_MODIFIED = frozenset(
    {
        "cache-control",
        "content-location",
        "date",
        "etag",
        "expires",
        "vary",
        "last-modified",
        "age",
    }
)


def caller_conditional(request: Headers) -> bool:
    """
    Whether a request carries its caller's own validators (RFC 9111 section 4.3.2).

    An ``If-None-Match``, or an ``If-Modified-Since`` that is a date (one that is not is
    ignored, RFC 9110 section 13.1.3), and no ``Range`` (a range request is left as it was).
    """
    pairs = list(request)
    if header(pairs, "range") is not None:
        return False
    tags = header(pairs, "if-none-match")
    if tags is not None and tags.strip():
        return True
    return http_date(header(pairs, "if-modified-since")) is not None


def _entity_tags(value: str) -> list[str]:
    """The members of an entity-tag list (commas inside quotes kept), stripped."""
    return [part.strip() for part in split_list(value)][:MAX_DIRECTIVES]


def _opaque(tag: str) -> str:
    """An entity-tag without its weakness flag (what a weak comparison compares)."""
    return tag[2:] if tag.startswith("W/") else tag


def not_modified(stored: Headers, request: Headers) -> bool:
    """
    Whether the caller's validators select the stored response (RFC 9111 section 4.3.2).

    ``If-None-Match``: ``*``, or one of its entity-tags weakly equal to the stored ``ETag``
    (the same opaque tag, either side weak or not).  Else ``If-Modified-Since``: the stored
    ``Last-Modified`` (or, without one, its ``Date``) is not later than it.  True means the
    caller holds what is stored: the answer is a 304.
    """
    pairs, asked = list(stored), list(request)
    tags = header(asked, "if-none-match")
    if tags is not None and tags.strip():
        members = _entity_tags(tags)
        if "*" in members:
            return True
        etag = header(pairs, "etag")
        if etag is None:
            return False
        mine = _opaque(etag.strip())
        return any(_opaque(tag) == mine for tag in members)
    since = http_date(header(asked, "if-modified-since"))
    if since is None:
        return False
    modified = http_date(header(pairs, "last-modified"))
    if modified is None:
        modified = http_date(header(pairs, "date"))
    return modified is not None and modified <= since


def not_modified_headers(stored: Headers) -> list[tuple[str, str]]:
    """The fields of a 304 made from a stored response (RFC 9110 section 15.4.5)."""
    return [(k, v) for k, v in stored if k.lower() in _ON_NOT_MODIFIED]


def validated_by_304(stored: Headers, response: Headers, request: Headers) -> bool:
    """
    Whether a 304 to the caller's own conditional ``request`` is about the stored response.

    RFC 9111 section 4.3.4: the 304's ``ETag`` names it (a strong one the same strong tag, a
    weak one weakly equal); else its ``Last-Modified`` is the stored one; a 304 with neither
    says which copy it confirms only when the request named the stored one alone: every
    entity-tag of its ``If-None-Match`` weakly equal to the stored ``ETag``, or (without
    ``If-None-Match``) its ``If-Modified-Since`` the stored ``Last-Modified``.  A 304 for
    a copy the caller holds and the cache does not leaves the stored response as it was.
    """
    pairs, answer, asked = list(stored), list(response), list(request)
    etag = header(pairs, "etag")
    mine = None if etag is None else etag.strip()
    theirs = header(answer, "etag")
    if theirs is not None:
        theirs = theirs.strip()
        if mine is None:
            return False
        if theirs.startswith("W/"):
            return _opaque(theirs) == _opaque(mine)
        return theirs == mine
    modified = http_date(header(pairs, "last-modified"))
    confirmed = http_date(header(answer, "last-modified"))
    if confirmed is not None:
        return modified == confirmed
    tags = header(asked, "if-none-match")
    if tags is not None and tags.strip():
        members = _entity_tags(tags)
        return (
            mine is not None
            and bool(members)
            and all(tag != "*" and _opaque(tag) == _opaque(mine) for tag in members)
        )
    since = http_date(header(asked, "if-modified-since"))
    return since is not None and since == modified
