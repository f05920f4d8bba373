"""
A scan of header names (hints/fields.py) takes an access whose names are a one-shot iterator:
known names are passed over once, and names not all known are asked for again and listed.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from smoothclient.hints import FieldAccess
from smoothclient.hints.fields import KnownNames


def _once(headers: Any) -> Iterator[object]:
    return iter([name for name, _ in headers])


ONE_SHOT = FieldAccess(_once, lambda headers: list(headers))


def test_unknown_names_are_listed_and_learned() -> None:
    known = KnownNames()
    plain = [("server", "x"), ("date", "Sun, 22 Nov 2026 20:00:00 GMT")]
    quota = [("server", "x"), ("ratelimit", '"d";r=5;t=1')]
    assert known.scan(plain, ONE_SHOT) is False  # learned: none is a hint's
    assert known.scan(plain, ONE_SHOT) is False  # known: one pass
    assert known.scan(quota, ONE_SHOT) is True  # one unknown name: listed, learned
    assert known.scan(quota, ONE_SHOT) is True  # known to carry one
    assert known.scan(plain, ONE_SHOT) is False
