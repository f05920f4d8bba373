"""
How the Redis store's clients are made (:func:`clients_for`): from a URL or a ready client.

- A URL (``redis://``, ``rediss://``, ``unix://``) gives a sync client (one connection pool
  for every thread); each event loop gets an asyncio client made like it.  A ready
  ``redis.Redis`` serves sync steps as it is; a ready ``redis.asyncio.Redis`` serves its own
  loop as it is, and sync steps get a client made from its connection settings.
- A Redis Cluster alike: a ``redis+cluster://host:port,host:port`` URL (the ``limits``
  library's), or a ready ``redis.cluster.RedisCluster`` or its asyncio twin.
- A master that Redis Sentinel names: ``redis+sentinel://host:port/service``, or a client
  from ``Sentinel.master_for`` (each loop's asyncio client asks the same Sentinels).

Every client made here is bounded by the store's timeout and never retries inside redis-py:
the store decides what a failure means.  Nothing here talks to Redis but a cluster's sync
client, made when first used (:class:`Lazy`), inside a round trip of :mod:`.link`.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import Any

__all__ = [
    "ASYNC_CONNECTIONS",
    "CLUSTER_SCHEMES",
    "SENTINEL_SCHEMES",
    "Lazy",
    "MakeAsync",
    "async_like",
    "clients_for",
    "parse_nodes_url",
    "sync_like",
]

#: Makes a new ``redis.asyncio`` client (for an event loop).
MakeAsync = Callable[[], Any]

#: Connections each event loop's ``redis.asyncio`` client keeps at most (tasks beyond wait).
ASYNC_CONNECTIONS = 64

#: The URL schemes of a Redis Cluster (the ``limits`` library's): ``host:port`` of some nodes,
#: comma-separated, e.g. ``redis+cluster://10.0.0.1:7000,10.0.0.2:7000``.
CLUSTER_SCHEMES = ("redis+cluster://", "rediss+cluster://")
#: The URL schemes of a master found by Redis Sentinel (the ``limits`` library's): ``host:port``
#: of some Sentinels, then the service, e.g. ``redis+sentinel://10.0.0.1:26379/mymaster``.
SENTINEL_SCHEMES = ("redis+sentinel://", "rediss+sentinel://")


class Lazy:
    """
    A sync client made when first used, not before.

    A cluster client asks its nodes for the slots when it is made, and a pacer is made
    whether Redis is up or not: a failure to make it is a failed step.
    """

    def __init__(self, make: Callable[[], Any]) -> None:
        self._make = make
        self._client: Any = None
        self._lock = threading.Lock()

    def get(self) -> Any:
        """The client (made now if not yet; raises what making it raises)."""
        if self._client is None:
            with self._lock:
                if self._client is None:
                    self._client = self._make()
        return self._client

    @property
    def made(self) -> Any:
        """The client if made yet, else ``None`` (nothing asked)."""
        return self._client

    def __getattr__(self, name: str) -> Any:
        return getattr(self.get(), name)

    def forked(self) -> None:
        """In a child just forked: a fresh lock."""
        self._lock = threading.Lock()


#: What makes a sync client and an asyncio client alike: where to connect and as whom.
_PORTABLE = ("host", "port", "db", "username", "password", "path", "client_name")


def _portable(pool: Any, timeout: float) -> tuple[str, dict[str, Any]]:
    """A pool's connection class name and the settings a client of the other kind can take."""
    kwargs = pool.connection_kwargs
    given = {k: v for k, v in kwargs.items() if k in _PORTABLE or k.startswith("ssl_")}
    given.update(socket_timeout=timeout, socket_connect_timeout=timeout)
    return pool.connection_class.__name__, given


def async_like(client: Any, timeout: float) -> Any:
    """A new ``redis.asyncio`` client to where the sync ``client`` connects (never retrying)."""
    sentinel = _sentinel_of(client.connection_pool)
    if sentinel is not None:  # the master Sentinel names, not an address of the pool's
        return _sentinel_master(*sentinel, max(1.0, 10 * timeout), aio=True)
    import redis.asyncio
    import redis.asyncio.connection
    from redis.asyncio.retry import Retry
    from redis.backoff import NoBackoff

    # the store's own bound (_within: one more turn of the loop before it cancels) is the one
    # that counts; redis-py's, as tight, expired on a starved loop with the connection made
    # or the reply read ("Timeout connecting to server" at a herd's start)
    name, kwargs = _portable(client.connection_pool, max(1.0, 10 * timeout))
    cls = getattr(redis.asyncio.connection, name, redis.asyncio.connection.Connection)
    # a task that finds every connection taken waits for one (within the step's bound),
    # rather than failing at once: a busy pool is load, not an outage
    pool = redis.asyncio.BlockingConnectionPool(
        connection_class=cls,
        retry=Retry(NoBackoff(), 0),
        max_connections=ASYNC_CONNECTIONS,
        timeout=max(1.0, 10 * timeout),
        **kwargs,
    )
    return redis.asyncio.Redis(connection_pool=pool)


def sync_like(client: Any, timeout: float) -> Any:
    """A new sync ``redis.Redis`` client to where the asyncio ``client`` connects."""
    sentinel = _sentinel_of(client.connection_pool)
    if sentinel is not None:
        return _sentinel_master(*sentinel, timeout, aio=False)
    import redis
    import redis.connection
    from redis.backoff import NoBackoff
    from redis.retry import Retry

    name, kwargs = _portable(client.connection_pool, timeout)
    cls = getattr(redis.connection, name, redis.connection.Connection)
    pool = redis.ConnectionPool(connection_class=cls, retry=Retry(NoBackoff(), 0), **kwargs)
    client = redis.Redis(connection_pool=pool)
    client.auto_close_connection_pool = True  # its pool is its own: closed with it
    return client


def _cluster_kwargs(kwargs: dict[str, Any]) -> dict[str, Any]:
    """What of a cluster client's connection settings a client of the other kind can take."""
    portable = ("username", "password", "client_name", "ssl")
    return {k: v for k, v in kwargs.items() if k in portable or k.startswith("ssl_")}


def _cluster_nodes(client: Any) -> list[tuple[str, int]]:
    """``(host, port)`` of the nodes a cluster client knows (else the ones it started from)."""
    known = [(n.host, int(n.port)) for n in client.get_nodes()]
    if not known:
        starts = client.nodes_manager.startup_nodes
        known = [(n.host, int(n.port)) for n in getattr(starts, "values", lambda: starts)()]
    return known


def _sync_cluster(nodes: list[tuple[str, int]], kwargs: dict[str, Any], timeout: float) -> Any:
    """A sync ``RedisCluster`` on ``nodes`` (its calls bounded, never retried in redis-py)."""
    from redis.backoff import NoBackoff
    from redis.cluster import ClusterNode, RedisCluster
    from redis.retry import Retry

    return RedisCluster(
        startup_nodes=[ClusterNode(host, port) for host, port in nodes],  # type: ignore[no-untyped-call]
        retry=Retry(NoBackoff(), 0),
        require_full_coverage=False,  # a master away costs its slots' steps, not the table
        socket_timeout=timeout,
        socket_connect_timeout=timeout,
        **kwargs,
    )


def _async_cluster(nodes: list[tuple[str, int]], kwargs: dict[str, Any], timeout: float) -> Any:
    """A ``redis.asyncio`` ``RedisCluster`` on ``nodes`` (it connects when first asked)."""
    from redis.asyncio.cluster import ClusterNode, RedisCluster
    from redis.asyncio.retry import Retry
    from redis.backoff import NoBackoff

    # the store's own bound (_within) is the one that counts, as for async_like
    bound = max(1.0, 10 * timeout)
    return RedisCluster(
        startup_nodes=[ClusterNode(host, port) for host, port in nodes],
        retry=Retry(NoBackoff(), 0),
        require_full_coverage=False,
        socket_timeout=bound,
        socket_connect_timeout=bound,
        **kwargs,
    )


def parse_nodes_url(url: str) -> tuple[list[tuple[str, int]], dict[str, Any], str]:
    """
    The nodes, connection settings and path of a ``redis+cluster://`` or ``redis+sentinel://``.

    ``redis+cluster://[[user]:password@]host:port[,host:port...]``, and
    ``redis+sentinel://[[user]:password@]host:port[,host:port...]/service``: the ``limits``
    library's forms; ``rediss+`` connects with TLS.  ``ValueError`` for a node without a port.
    """
    from urllib.parse import unquote

    scheme, _, rest = url.partition("://")
    netloc, _, path = rest.split("?", 1)[0].partition("/")
    userinfo, _, hosts = netloc.rpartition("@")
    kwargs: dict[str, Any] = {}
    if userinfo:
        user, has_password, password = userinfo.partition(":")
        if user:
            kwargs["username"] = unquote(user)
        if has_password:
            kwargs["password"] = unquote(password)
    if scheme.startswith("rediss"):
        kwargs["ssl"] = True
    nodes = []
    for node in filter(None, hosts.split(",")):
        host, _, port = node.rpartition(":")
        if not host or not port.isdigit():
            msg = f"a {scheme}:// URL names its nodes as host:port, not {node!r} in {url!r}"
            raise ValueError(msg)
        nodes.append((host.strip("[]"), int(port)))
    if not nodes:
        msg = f"a {scheme}:// URL names at least one node (host:port), not {url!r}"
        raise ValueError(msg)
    return nodes, kwargs, unquote(path.strip("/"))


def _sentinel_master(
    nodes: list[tuple[str, int]], service: str, kwargs: dict[str, Any], bound: float, aio: bool
) -> Any:
    """A client of the master that the Sentinels at ``nodes`` name for ``service``."""
    from redis.backoff import NoBackoff

    if aio:
        from redis.asyncio.retry import Retry
        from redis.asyncio.sentinel import Sentinel
    else:
        from redis.retry import Retry  # type: ignore[assignment]
        from redis.sentinel import Sentinel  # type: ignore[assignment]
    timeouts: dict[str, Any] = {"socket_timeout": bound, "socket_connect_timeout": bound}
    sentinels = Sentinel(nodes, sentinel_kwargs=dict(timeouts))  # type: ignore[no-untyped-call]
    return sentinels.master_for(service, retry=Retry(NoBackoff(), 0), **timeouts, **kwargs)


def _sentinel_of(pool: Any) -> tuple[list[tuple[str, int]], str, dict[str, Any]] | None:
    """The Sentinels, service and settings behind a client's pool, if Sentinel manages it."""
    manager = getattr(pool, "sentinel_manager", None)
    if manager is None:
        return None
    nodes = []
    for sentinel in manager.sentinels:
        given = sentinel.connection_pool.connection_kwargs
        nodes.append((given["host"], int(given["port"])))
    settings = {
        k: v
        for k, v in pool.connection_kwargs.items()
        if k in ("username", "password", "db", "client_name") or k.startswith("ssl_")
    }
    return nodes, pool.service_name, settings


def _cluster_clients(storage: Any, timeout: float) -> tuple[Any, MakeAsync, Any]:
    """:func:`clients_for` a Redis Cluster: a ``redis+cluster://`` URL or a cluster client."""
    from redis.cluster import RedisCluster

    if isinstance(storage, str):
        nodes, kwargs, _ = parse_nodes_url(storage)
    else:
        nodes, kwargs = _cluster_nodes(storage), _cluster_kwargs(storage.get_connection_kwargs())
    make = functools.partial(_async_cluster, nodes, kwargs, timeout)
    if isinstance(storage, RedisCluster):  # a ready sync client: used as it is
        return storage, make, None
    client = Lazy(functools.partial(_sync_cluster, nodes, kwargs, timeout))
    return client, make, None if isinstance(storage, str) else storage


def clients_for(storage: object, timeout: float) -> tuple[Any, MakeAsync, Any]:
    """
    The sync client for ``storage``, how to make an asyncio one, and the asyncio one given.

    ``storage``: a URL; a ready ``redis.Redis`` (used as it is by sync steps; each loop gets
    an asyncio client to the same server); or a ready ``redis.asyncio.Redis`` (used as it is
    on the first loop that runs a step; sync steps, other loops and the clock get clients to
    the same server, made from its connection settings: host, port or path, db, credentials,
    TLS files).  A Redis Cluster alike: a ``redis+cluster://`` URL (:data:`CLUSTER_SCHEMES`),
    a ready ``redis.cluster.RedisCluster`` or ``redis.asyncio.cluster.RedisCluster``.  Redis
    Sentinel: a ``redis+sentinel://`` URL (:data:`SENTINEL_SCHEMES`), or a client from
    ``Sentinel.master_for`` (sync or asyncio).  Every
    call of a client made here is bounded by ``timeout`` and never retried inside redis-py:
    the store decides what a failure means (fall back, back off).
    """
    try:
        import redis
        import redis.asyncio
        from redis.backoff import NoBackoff
        from redis.retry import Retry
    except ImportError as exc:  # pragma: no cover - the extra is part of the test setup
        msg = "a Redis storage needs redis-py: pip install 'smoothclient[redis]'"
        raise ImportError(msg) from exc
    from redis.asyncio.cluster import RedisCluster as AsyncCluster
    from redis.cluster import RedisCluster

    cluster = isinstance(storage, str) and storage.startswith(CLUSTER_SCHEMES)
    if cluster or isinstance(storage, RedisCluster | AsyncCluster):
        return _cluster_clients(storage, timeout)
    given = None
    if isinstance(storage, str) and storage.startswith(SENTINEL_SCHEMES):
        nodes, kwargs, service = parse_nodes_url(storage)
        if not service:
            msg = (
                f"a redis+sentinel:// URL names its service after the nodes: /name, not {storage!r}"
            )
            raise ValueError(msg)
        client = _sentinel_master(nodes, service, kwargs, timeout, aio=False)
    elif isinstance(storage, str):
        client = redis.Redis.from_url(
            storage,
            socket_timeout=timeout,
            socket_connect_timeout=timeout,
            retry=Retry(NoBackoff(), 0),
        )
    elif isinstance(storage, redis.Redis):
        client = storage
    elif isinstance(storage, redis.asyncio.Redis):
        client, given = sync_like(storage, timeout), storage
    else:
        msg = (
            "storage must be 'memory://', a redis://, rediss://, unix://, redis+cluster:// or "
            "redis+sentinel:// URL, or a redis.cluster.RedisCluster (or its asyncio twin), "
            f"redis.Redis or redis.asyncio.Redis client, not {type(storage).__name__}"
        )
        raise TypeError(msg)
    return client, functools.partial(async_like, client, timeout), given
