"""
Strict scalar parsers for header values: numbers, HTTP-dates, ISO 8601 dates, Go durations.

Each returns ``None`` for anything it does not accept; none of them raises on any ``str``.
"""

from __future__ import annotations

import calendar
import functools
import math
import re

__all__ = ["declared_length", "parse_date", "parse_go_duration", "parse_number"]

_NUMBER = re.compile(r"[0-9]+(?:\.[0-9]+)?", re.ASCII)
_MONTHS = {m.lower(): i for i, m in enumerate(calendar.month_abbr) if m}
_ZONE = r"(?:\s+(GMT|UTC|UT|Z|[+-][0-9]{4}))?"
_IMF = re.compile(
    r"(?:[A-Za-z]{3,9},?\s*)?([0-9]{1,2})\s+([A-Za-z]{3})\s+([0-9]{4})\s+"
    r"([0-9]{2}):([0-9]{2}):([0-9]{2})" + _ZONE,
    re.ASCII,
)
_RFC850 = re.compile(
    r"(?:[A-Za-z]{3,9},\s*)?([0-9]{1,2})-([A-Za-z]{3})-([0-9]{2}|[0-9]{4})\s+"
    r"([0-9]{2}):([0-9]{2}):([0-9]{2})" + _ZONE,
    re.ASCII,
)
_ASCTIME = re.compile(
    r"(?:[A-Za-z]{3}\s+)?([A-Za-z]{3})\s+([0-9]{1,2})\s+([0-9]{2}):([0-9]{2}):([0-9]{2})\s+"
    r"([0-9]{4})",
    re.ASCII,
)
_ISO = re.compile(
    r"([0-9]{4})-([0-9]{2})-([0-9]{2})[Tt ]([0-9]{2}):([0-9]{2})(?::([0-9]{2})(\.[0-9]{1,9})?)?"
    r"\s*(Z|z|[+-][0-9]{2}:?[0-9]{2})?",
    re.ASCII,
)
_GO_PART = re.compile(r"([0-9]+(?:\.[0-9]+)?)(h|ms|m|s|us|µs|μs|ns)", re.ASCII)
_GO_UNITS = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "μs": 1e-6}
_GO_UNITS["ns"] = 1e-9


def declared_length(value: str) -> int | None:
    """
    A ``Content-Length`` value as bytes, or ``None`` when absent or not plain ASCII digits.

    Longer than any real body (18 digits: an exabyte) is ``None`` too: ``int()`` of thousands
    of digits is slow, and refused past 4,300.
    """
    if value.isascii() and value.isdigit() and len(value) <= 18:
        return int(value)
    return None


def parse_number(value: str) -> float | None:
    """
    Return ``value`` as a non-negative finite float if it is ``[0-9]+(.[0-9]+)?``, else ``None``.

    Signs, exponents, underscores, non-ASCII digits, ``NaN``/``inf``, hex and trailing text are
    all rejected (bare ``float()`` accepts several of them).
    """
    if value.isascii() and value.isdigit() and len(value) <= 300:
        return float(value)  # the common case: plain ASCII digits (finite: < 1e300)
    text = value.strip(" \t")
    if len(text) > 400 or not _NUMBER.fullmatch(text):
        return None
    result = float(text)
    return result if math.isfinite(result) else None


def _zone_offset(zone: str | None) -> int | None:
    """Seconds east of UTC for a zone string; a missing zone is GMT (never local time)."""
    if zone is None or zone in ("GMT", "UTC", "UT", "Z", "z"):
        return 0
    sign = 1 if zone[0] == "+" else -1
    digits = zone[1:].replace(":", "")
    hours, minutes = int(digits[:2]), int(digits[2:])
    if hours > 23 or minutes > 59:
        return None
    return sign * (hours * 3600 + minutes * 60)


#: The last year a date may name (``datetime``'s; a two-digit year read relative to a clock
#: far ahead may name a later one).
_MAX_YEAR = 9999


def _epoch(
    year: int, month: int, day: int, hh: int, mm: int, ss: float, offset: int | None
) -> float | None:
    if offset is None or not 1 <= year <= _MAX_YEAR or not 1 <= month <= 12:
        return None
    if not 0 <= hh <= 23 or not 0 <= mm <= 59:
        return None
    if not 0 <= ss < 61 or not 1 <= day <= calendar.monthrange(year, month)[1]:
        return None
    return calendar.timegm((year, month, day, hh, mm, 0, 0, 0, 0)) + min(ss, 59.999) - offset


def _two_digit_year(yy: int, now: float) -> int:
    """RFC 9110: a two-digit year more than 50 years ahead is in the past century."""
    this_year = int(1970 + now // 31_556_952)
    year = this_year - this_year % 100 + yy
    if year > this_year + 50:
        year -= 100
    return year


@functools.lru_cache(maxsize=256)
def _imf(text: str) -> tuple[bool, float | None]:
    """Whether ``text`` is an IMF-fixdate (nearly every ``Date``: cached), and its time."""
    m = _IMF.fullmatch(text)
    if m is None:
        return False, None
    day, mon, year, hh, mi, ss, zone = m.groups()
    month = _MONTHS.get(mon.lower())
    when = _epoch(int(year), month or 0, int(day), int(hh), int(mi), int(ss), _zone_offset(zone))
    return True, when


def parse_http_date(value: str, now: float) -> float | None:
    """Parse an HTTP-date (IMF-fixdate, rfc850-date or asctime) to epoch seconds."""
    text = value.strip(" \t")
    if len(text) > 64:
        return None
    imf, when = _imf(text)
    if imf:
        return when
    if m := _RFC850.fullmatch(text):
        day, mon, year, hh, mi, ss, zone = m.groups()
        y = int(year) if len(year) == 4 else _two_digit_year(int(year), now)
        month = _MONTHS.get(mon.lower())
        return _epoch(y, month or 0, int(day), int(hh), int(mi), int(ss), _zone_offset(zone))
    if m := _ASCTIME.fullmatch(text):
        mon, day, hh, mi, ss, year = m.groups()
        month = _MONTHS.get(mon.lower())
        return _epoch(int(year), month or 0, int(day), int(hh), int(mi), int(ss), 0)
    return None


def parse_iso_date(value: str) -> float | None:
    """Parse an RFC 3339 / ISO 8601 date-time (seconds optional, zone optional = UTC)."""
    text = value.strip(" \t")
    m = _ISO.fullmatch(text) if len(text) <= 64 else None
    if not m:
        return None
    year, mon, day, hh, mi, ss, frac, zone = m.groups()
    seconds = int(ss or 0) + (float(frac) if frac else 0.0)
    return _epoch(int(year), int(mon), int(day), int(hh), int(mi), seconds, _zone_offset(zone))


def parse_date(value: str, now: float) -> float | None:
    """Parse any date form servers use in timing headers (HTTP-date or ISO 8601)."""
    result = parse_http_date(value, now)
    return parse_iso_date(value) if result is None else result


def parse_go_duration(value: str) -> float | None:
    """Parse a Go duration string (``1s``, ``6m0s``, ``12ms``, ``1h2m3.5s``) to seconds."""
    text = value.strip(" \t")
    if not text or len(text) > 64:
        return None
    if text == "0":
        return 0.0
    pos = 0
    total = 0.0
    for m in _GO_PART.finditer(text):
        if m.start() != pos:
            return None
        total += float(m.group(1)) * _GO_UNITS[m.group(2)]
        pos = m.end()
    return total if pos == len(text) and math.isfinite(total) else None
