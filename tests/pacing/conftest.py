"""Fixtures of the pacing tests."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
import trio


@pytest.fixture
def wall_on_trio(monkeypatch: pytest.MonkeyPatch) -> Callable[..., None]:
    """
    ``wall_on_trio(base)``: ``time.time`` runs on trio's virtual clock from ``base``.

    Epoch resets (``X-RateLimit-Reset``) are then read on the virtual clock, whatever the
    load; outside a run the wall stands still at ``base``.
    """

    def patch(base: float = 1_700_000_000.0) -> None:
        def wall() -> float:
            try:
                return base + trio.current_time()
            except RuntimeError:  # outside the run
                return base

        monkeypatch.setattr(time, "time", wall)

    return patch
