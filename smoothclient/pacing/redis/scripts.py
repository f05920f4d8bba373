"""
The store's two Lua scripts (save, read) and how a round trip runs them (for :mod:`.link`).

Each touches one key, so one hash slot of a cluster.  A script runs by ``EVALSHA``, and by
``EVAL`` when the node has not the script yet (a restart, ``SCRIPT FLUSH``): both name the
key, so they go where the key lives (``SCRIPT LOAD`` would go to every master of a cluster,
and fail with any one of them away).  On a cluster, a script goes straight to the master of
its key's slot (:class:`ClusterScript`, :class:`AsyncClusterScript`).
"""

from __future__ import annotations

import hashlib
from typing import Any

from .keyspace import COHORT_TTL, MAX_COUNT

__all__ = [
    "LOST",
    "MOVED",
    "READ",
    "SAVE",
    "AsyncClusterScript",
    "AsyncScript",
    "ClusterScript",
    "Script",
    "named",
]

#: A cluster's node says a key's slot is served elsewhere (moved, or moving).
MOVED = frozenset({"MovedError", "AskError"})
#: A node did not answer: the cluster's table of slots may be out of date.
LOST = frozenset({"ConnectionError", "TimeoutError"})

# KEYS[1]: the state's key.  SAVE's ARGV: the version the caller read, the state, the
# caller's name in the cohort, the expiry in ms, and the caller's counts ("[waiting, in flight,
# when]") if the state is written, and if it is not.  The state is written only if nobody wrote
# since (else the reply holds the current version and state); the caller's counts are written
# either way, into the cohort as it stands (they are its own, and no other process writes
# them: a write that lost to another's must not leave the fleet counting requests long
# answered).  What the key holds is input: a key of another type is replaced (it is in
# smoothclient's own namespace), a version that is not a whole number >= 0 reads as 0, so the
# next write takes the key over (a version of 1.5 read back as 1 made every write lose, for
# ever), and a cohort's entries that are not three numbers in range are dropped, as are those
# written more than COHORT_TTL ago (a process that ended) or ahead.
_VERSION = """
local kind = redis.call('TYPE', KEYS[1])['ok']
if kind ~= 'hash' and kind ~= 'none' then
  if ARGV[2] then redis.call('DEL', KEYS[1]) end
  kind = 'none'
end
local v = 0
if kind == 'hash' then
  v = tonumber(redis.call('HGET', KEYS[1], 'v') or '0')
  if v == nil or v < 0 or v ~= math.floor(v) or v > 2^52 then v = 0 end
end
"""
_COHORT = """
local function cohort(now, mine)
  local all = {}
  local ok, entries = pcall(cjson.decode, redis.call('HGET', KEYS[1], 'c') or '{}')
  if ok and type(entries) == 'table' then
    for who, e in pairs(entries) do
      if type(who) == 'string' and who ~= ARGV[3] and type(e) == 'table' and #e == 3 then
        local w, f, at = e[1], e[2], e[3]
        if type(w) == 'number' and type(f) == 'number' and type(at) == 'number'
            and w >= 0 and w <= @MOST@ and f >= 0 and f <= @MOST@
            and at > now - @TTL@ and at <= now + @TTL@ then
          all[who] = {w, f, at}
        end
      end
    end
  end
  local fine, entry = pcall(cjson.decode, mine)
  if fine and type(entry) == 'table' then all[ARGV[3]] = entry end
  return cjson.encode(all)
end
""".replace("@MOST@", str(MAX_COUNT)).replace("@TTL@", str(int(COHORT_TTL)))
SAVE = (
    _VERSION
    + _COHORT
    + """
local t = redis.call('TIME')
local now = tonumber(t[1])
if v ~= tonumber(ARGV[1]) then
  local c = cohort(now, ARGV[6])
  redis.call('HSET', KEYS[1], 'c', c)
  if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[4]) then
    redis.call('PEXPIRE', KEYS[1], ARGV[4])
  end
  return {0, v, redis.call('HGET', KEYS[1], 's') or '', c, t[1], t[2]}
end
v = v + 1
local c = cohort(now, ARGV[5])
redis.call('HSET', KEYS[1], 'v', v, 's', ARGV[2], 'c', c)
redis.call('PEXPIRE', KEYS[1], ARGV[4])
return {1, v, '', c, t[1], t[2]}
"""
)
READ = (
    _VERSION
    + """
local t = redis.call('TIME')
if kind == 'none' then return {0, '', '', t[1], t[2]} end
local cur = redis.call('HMGET', KEYS[1], 's', 'c')
return {v, cur[1] or '', cur[2] or '', t[1], t[2]}
"""
)


def no_script(exc: BaseException) -> bool:
    """Whether ``exc`` says the server has not the script (``NOSCRIPT``)."""
    return named(exc, frozenset({"NoScriptError"}))


def named(exc: BaseException, names: frozenset[str]) -> bool:
    """Whether ``exc`` is of a class named in ``names`` (redis-py's, imported only if used)."""
    return any(cls.__name__ in names for cls in type(exc).__mro__)


class Script:
    """
    One Lua script on a sync client: ``EVALSHA``, else ``EVAL`` (which caches it on the node).

    Both name the script's keys, so a cluster client sends them to the node owning their slot.
    """

    #: Whether its client answered yet (an asyncio client's first trip connects and makes
    #: the connection's handshake: see :meth:`~.link.Link.send_async`).
    answered = False

    def __init__(self, client: Any, text: str) -> None:
        self.client, self.text = client, text
        self.sha = hashlib.sha1(text.encode()).hexdigest()  # how Redis names a script

    def __call__(self, keys: list[Any], args: list[Any]) -> Any:
        return self.run(self.client, keys, args)

    def run(self, client: Any, keys: list[Any], args: list[Any]) -> Any:
        """The script's reply from ``client``."""
        try:
            return client.evalsha(self.sha, len(keys), *keys, *args)
        except Exception as exc:
            if not no_script(exc):
                raise
            return client.eval(self.text, len(keys), *keys, *args)


class ClusterScript(Script):
    """
    One script on a sync ``RedisCluster``: sent straight to the master of its key's slot.

    redis-py's cluster client, told ``CLUSTERDOWN``, sleeps 0.25 s before it raises: a sync
    step waited five times the store's timeout.  Here the node's own client answers at once.
    A redirection (a slot moved) goes through the cluster client, which follows it and mends
    its table of slots; after a node failed, the table is read again before the next try.
    """

    stale = False

    def __call__(self, keys: list[Any], args: list[Any]) -> Any:
        cluster = self.client
        if self.stale:
            cluster.nodes_manager.initialize()
            self.stale = False
        try:
            node = cluster.get_node_from_key(keys[0]).redis_connection
        except Exception:  # a slot no master serves (a table read while one was away)
            self.stale = True
            raise
        if node is None:  # pragma: no cover - redis-py makes every node's client with its table
            return self.run(cluster, keys, args)
        try:
            return self.run(node, keys, args)
        except Exception as exc:
            if named(exc, MOVED):
                return self.run(cluster, keys, args)
            if named(exc, LOST):
                self.stale = True
            raise


class AsyncScript(Script):
    """:class:`Script` on a ``redis.asyncio`` client (plain or cluster)."""

    async def __call__(self, keys: list[Any], args: list[Any]) -> Any:
        try:
            return await self.client.evalsha(self.sha, len(keys), *keys, *args)
        except Exception as exc:
            if not no_script(exc):
                raise
            return await self.client.eval(self.text, len(keys), *keys, *args)


class AsyncClusterScript(AsyncScript):
    """
    :class:`ClusterScript` on a cluster's ``redis.asyncio`` client: to the slot's master.

    Its own failures are that node's (the cluster client, sent a command after another node
    failed, reads the table again first, and a failure there was laid on the wrong node).
    """

    stale = False

    async def __call__(self, keys: list[Any], args: list[Any]) -> Any:
        cluster = self.client
        if self.stale:
            await cluster.nodes_manager.initialize()
            self.stale = False
        try:
            node = cluster.get_node_from_key(keys[0])
        except Exception:  # no table yet: the cluster client reads it, then runs the script
            return await super().__call__(keys, args)
        try:
            return await self._on(node, keys, args)
        except Exception as exc:
            if named(exc, MOVED):
                return await super().__call__(keys, args)
            if named(exc, LOST):
                self.stale = True
            raise

    async def _on(self, node: Any, keys: list[Any], args: list[Any]) -> Any:
        try:
            return await node.execute_command("EVALSHA", self.sha, len(keys), *keys, *args)
        except Exception as exc:
            if not no_script(exc):
                raise
            return await node.execute_command("EVAL", self.text, len(keys), *keys, *args)
