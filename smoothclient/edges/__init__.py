"""
The edges: where smoothclient meets a client library, sends, sleeps and closes responses.

- :mod:`.flow`: one logical call as a generator of actions (no I/O), driven sync or async;
- :mod:`.lane`: the hot path (a first attempt that needs no waiting skips the flow);
- :mod:`.base`: :class:`~.base.EdgeCore`, the one shape of a call every edge runs;
- :mod:`.httpx_transport`, :mod:`.requests_adapter`: the edges themselves;
- :mod:`.httpx_deadline`, :mod:`.watchdog`: a sync attempt cut at the deadline (httpx: each
  network wait ends with it; requests: a thread shuts its socket).

A new edge is a module here built on ``EdgeCore``, added to the edge contract tests.
"""
