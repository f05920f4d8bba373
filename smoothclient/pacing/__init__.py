"""
Pacing: per-origin state that keeps clients ahead of the server's limits.

- :mod:`.pacer`: :class:`Pacer`, the public face;
- :mod:`.state`: the origin's state and every rule that moves it (pure functions);
- :mod:`.store`: the store seam (a tracker per key, atomic operations) and the in-memory store;
- :mod:`.gcra`: the one token bucket (GCRA) used by the pacer, ``@paced`` and the demo server;
- :mod:`.budget`: retry budgets as counts; :mod:`.keys`: origin keys and the LRU map.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import namespace

if TYPE_CHECKING:
    from .pacer import Pacer
    from .presets import GITHUB_SCOPES
    from .scopes import ScopeRequest, ScopeRule, ScopeRules

#: The names of this namespace (lazy: each loads its module on first use).
NAMES: dict[str, str] = {
    "GITHUB_SCOPES": "presets",
    "Pacer": "pacer",
    "ScopeRequest": "scopes",
    "ScopeRule": "scopes",
    "ScopeRules": "scopes",
}
__all__ = ["GITHUB_SCOPES", "Pacer", "ScopeRequest", "ScopeRule", "ScopeRules"]


__getattr__ = namespace(__name__, NAMES, globals())
