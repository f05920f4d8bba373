"""
The Redis store: a fleet of processes sharing one pacer's state (see :mod:`.store`).

- :mod:`.store`: :class:`~.store.RedisStore` and the design of the store;
- :mod:`.tracker`: one key's copy and its round trips (the store's cell: its ``update`` and
  ``read`` as generators of round trips);
- :mod:`.link`: round trips, health and the fleet's clock;
- :mod:`.keyspace`: a key's name, its expiry, and the successes a write carries;
- :mod:`.scripts`: the two Lua scripts and how a round trip runs them (the only code here
  that sends Redis a command, with :mod:`.link`);
- :mod:`.clients`: how its clients are made (a server, a cluster, Sentinel);
- :mod:`.nodes`: the health of each node of a cluster.

Loaded only for a shared storage (``Pacer(storage="redis://...")``, or ``redis+cluster://``,
``redis+sentinel://``); needs the ``redis`` extra.
"""
