"""
Pacing: per-origin state that keeps clients ahead of the server's limits.

- :mod:`.pacer`: :class:`Pacer`, the public face;
- :mod:`.state`: the origin's state and every rule that moves it (pure functions);
- :mod:`.store`: the store seam (a tracker per key, atomic operations) and the in-memory store;
- :mod:`.gcra`: the one token bucket (GCRA) used by the pacer, ``@paced`` and the demo server;
- :mod:`.budget`: retry budgets as counts; :mod:`.keys`: origin keys and the LRU map.
"""
