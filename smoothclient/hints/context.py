"""
The per-response reading context that every header family shares.

One response's fields, the time reference absolute values are measured from (R8), how numeric
resets are interpreted (R6), and the rules for counts (R5, R9) and timings (R5), all of
docs/headers.md.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from .model import DAY, HORIZON, ResetFormat
from .numbers import parse_date, parse_http_date, parse_number

__all__ = ["DATE_RESOLUTION", "Ctx"]

#: ``Date`` has whole seconds: a difference within it (and a second of travel) is no skew.
DATE_RESOLUTION = 1.0

log = logging.getLogger("smoothclient.hints")


class Ctx:
    """Per-response parsing context: the time reference and the reset interpretation."""

    __slots__ = ("_ref", "fields", "names", "now", "per_call", "reset_format")

    def __init__(self, fields: dict[str, list[str]], now: float, reset_format: ResetFormat) -> None:
        """Read ``fields`` (lowercased name -> values) as received at ``now`` (epoch s)."""
        self.fields = fields
        self.names = tuple(fields)  # the key of the per-name-set caches
        self.now = now
        self.reset_format = reset_format
        self._ref: float | None = None
        #: what a call costs in the units of quotas not counted in requests (tokens), if known
        self.per_call: float | None = None

    @property
    def ref(self) -> float:
        """
        The reference for absolute times (docs/headers.md R8): the local clock, or the server's.

        ``Date`` has whole seconds: a server in step with us sends one 0-1 s behind our clock
        (plus the response's travel).  Re-basing on it then adds up to a second to every
        fractional epoch reset, so within :data:`DATE_RESOLUTION` of our clock the local
        clock is trusted; only a real skew (but less than a day) re-bases.
        """
        if self._ref is None:
            self._ref = self.now
            for raw in self.fields.get("date", ()):
                server = parse_http_date(raw, self.now)
                if server is None:
                    continue
                skew = self.now - server
                if not -DATE_RESOLUTION <= skew <= 2 * DATE_RESOLUTION and abs(skew) <= DAY:
                    self._ref = server
                break
        return self._ref

    def raw(self, name: str) -> list[str]:
        return self.fields.get(name, [])

    def members(self, name: str) -> list[str]:
        """Every comma-separated member of every line of a list-valued field."""
        return [m.strip(" \t") for line in self.raw(name) for m in line.split(",")]

    def count(self, name: str) -> float | None:
        """The smallest valid count of all values, legacy lists too (docs/headers.md R5, R9)."""
        lines = self.fields.get(name)
        if lines is None:
            return None
        if len(lines) == 1 and "," not in lines[0]:  # the common case: one plain value
            value = parse_number(lines[0])
            if value is None:
                log.debug("ignoring unusable %s: %r", name, lines)
            return value
        values = [parse_number(m) for m in self.members(name)]
        valid = [v for v in values if v is not None]
        if not valid and self.raw(name):
            log.debug("ignoring unusable %s: %r", name, self.raw(name))
        return min(valid) if valid else None

    def absolute(self, epoch: float) -> float | None:
        """docs/headers.md R6: an absolute time as seconds from now (just past: 0; far: None)."""
        delta = epoch - self.ref
        if delta < -DAY or delta > HORIZON:
            return None
        return max(0.0, delta)

    def delta(self, seconds: float) -> float | None:
        return seconds if 0 <= seconds <= HORIZON else None

    def seconds(self, value: str) -> float | None:
        """A delay in seconds (docs/headers.md R13: none beyond the horizon)."""
        number = parse_number(value)
        return None if number is None else self.delta(number)

    def reset(self, value: str) -> float | None:
        """docs/headers.md R6: a reset value of unknown kind (delta, epoch, epoch ms or a date)."""
        number = parse_number(value)
        if number is None:
            when = parse_date(value, self.now)
            return None if when is None else self.absolute(when)
        fmt = self.reset_format
        if fmt == "delta" or (fmt == "auto" and number < 1e9):
            return self.delta(number)
        if fmt == "delta-ms":
            return self.delta(number / 1000)
        if fmt == "epoch" or (fmt == "auto" and number < 1e12):
            return self.absolute(number)
        return self.absolute(number / 1000)

    def retry_after(self, value: str) -> float | None:
        """
        docs/headers.md R3: delay-seconds (a fraction allowed) or an HTTP-date (past: now).

        A valid delay beyond the horizon (docs/headers.md R13) reads as the horizon: "not for a
        long while", which a policy's ``max_retry_after`` answers at once, not a value to drop
        and retry past in a tenth of a second.
        """
        number = parse_number(value)
        if number is not None:
            found = self.reset(value)
            if found is None and HORIZON < number < 1e9:  # (larger: an epoch, read as one)
                return HORIZON
            return found
        when = parse_http_date(value, self.now)
        if when is None:
            return None
        return min(max(0.0, when - self.ref), HORIZON)

    def timing(self, name: str, parse: Callable[[str], float | None] | None = None) -> float | None:
        """docs/headers.md R5: the largest valid timing value among all values of a field."""
        lines = self.fields.get(name)
        if lines is None:
            return None
        parse = parse or self.reset
        if len(lines) == 1 and (single := parse(lines[0])) is not None:
            return single  # the common case: one valid value
        values: list[float] = []
        for line in lines:
            whole = parse(line)
            parts = [whole] if whole is not None else [parse(m) for m in line.split(",")]
            values.extend(v for v in parts if v is not None)
        if not values:
            log.debug("ignoring unusable %s: %r", name, lines)
        return max(values) if values else None
