"""
Server hints: ``Retry-After``, rate-limit headers and JSON error bodies, read with care.

:func:`read_hints` turns any response's headers into :class:`Hints` following the rules of
docs/headers.md (R1-R16): strict number grammar, all three HTTP-date forms, millisecond companions,
epoch-vs-delta resets by magnitude, the ``Date`` header as clock reference, RFC 9651 parsing of
the IETF ``RateLimit`` / ``RateLimit-Policy`` fields (drafts -01 to -10), the ``X-RateLimit-*``
family and the common vendor variants, and the binding quota (the one closest to exhaustion).

One module per header family; a new family is a module with an extractor (``Ctx`` ->
quotas) listed with its field-name prefixes in ``read.EXTRACTORS`` and ``fields.QUOTA_PREFIXES``.
"""

from __future__ import annotations

from .body import BODY_LIMIT, read_body_hints, wants_body, with_body_hints
from .fields import GENERIC, FieldAccess
from .model import Hints, Quota, ResetFormat
from .read import has_hints, read_fields, read_hints

__all__ = [
    "BODY_LIMIT",
    "GENERIC",
    "FieldAccess",
    "Hints",
    "Quota",
    "ResetFormat",
    "has_hints",
    "read_body_hints",
    "read_fields",
    "read_hints",
    "wants_body",
    "with_body_hints",
]
