"""
Scope presets: what providers document about the quotas they keep apart, as plain data.

Each is a :class:`~smoothclient.pacing.scopes.ScopeRules`, read and extended like any tuple:

>>> from smoothclient import GITHUB_SCOPES, Pacer, ScopeRule, ScopeRules
>>> mine = ScopeRules((ScopeRule("notifications", "/notifications", host="api.github.com"),))
>>> pacer = Pacer(scope=mine + GITHUB_SCOPES)

The server's own names are learned anyway (``x-ratelimit-resource``); a preset binds a request
before any answer on its route, and names the limits a server never names (GitHub's secondary
limit on content-creating requests).
"""

from __future__ import annotations

from .scopes import ScopeRule, ScopeRules

__all__ = ["GITHUB_SCOPES"]

_WRITES = frozenset({"POST", "PATCH", "PUT", "DELETE"})

#: GitHub's REST and GraphQL API (docs.github.com, "Rate limits for the REST API"): code search
#: (10 a minute), the other searches (30 a minute), GraphQL points, and the secondary limit on
#: content-creating requests (80 a minute), apart from ``core``.
GITHUB_SCOPES = ScopeRules(
    (
        ScopeRule("code_search", "/search/code", frozenset({"GET"}), "api.github.com"),
        ScopeRule("search", "/search/", frozenset({"GET"}), "api.github.com"),
        ScopeRule("graphql", "/graphql", frozenset({"POST"}), "api.github.com"),
        ScopeRule("write", "/", _WRITES, "api.github.com"),
    )
)
