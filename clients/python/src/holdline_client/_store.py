"""A connected store: `connect`, the locks opened on it, and what is not a hold.

`connect` opens one connection at once and says `HELLO 3` on it (with
`AUTH` given a token), so a wrong address or token fails there rather than
at the first hold. Its answer can be awaited (`store = await connect(...)`)
or entered (`async with connect(...) as store:`), and the store itself is
an async context manager that closes it on leaving.
"""

import ssl as _ssl
from typing import Any, Dict, Generator, List, Optional, Type, Union

from ._address import Addresses, parse_addresses, resolve_auth
from ._blocks import AsyncBlock
from ._cluster import Router
from ._durations import Duration, to_ms
from ._errors import Invalid, text_for
from ._lock import Key, Lock, check_name, key_text
from ._pool import Dial
from ._resp import MAX_REPLY_BYTES
from ._texts import CONNECT_TIMEOUT_MS, DEFAULT_PORT
from ._wire import result

DEFAULT_ADDRESS = f"127.0.0.1:{DEFAULT_PORT}"


def connect(
    address: Addresses = DEFAULT_ADDRESS,
    *,
    token: Optional[str] = None,
    user: Optional[str] = None,
    ssl: Optional[_ssl.SSLContext] = None,
    connect_timeout: Optional[Duration] = None,
    max_idle: int = 16,
    max_reply_bytes: int = MAX_REPLY_BYTES,
) -> "Connecting":
    """Connects to `holdline serve` at `address`: `host:port`, `host` (port
    7380), `[ipv6]:port`, `redis://[[user]:token@]host[:port]`, or `rediss://...`
    for TLS. The nodes of a cluster are several addresses, separated by
    commas in one string or as a list: the first that answers is asked for
    the cluster's slot map, and each key's commands go to the node that
    serves it (a single server answers no map, and gets every command).

    `token` authenticates when the server was started with `--token-file`
    or `--users`; given here, it wins over one in a `redis://:TOKEN@host`
    address. `user` is the user to connect as on a server started with
    `--users` (1 to 64 ASCII letters, digits or `_-.:@`; default: the
    address's `redis://USER:TOKEN@host`, else `default`); given here, it
    wins over the address's. A user needs a token: `HELLO 3 AUTH USER
    TOKEN` is said. A command naming a lock the user may not use raises
    `NoPerm` (an `Invalid`).
    `ssl` makes every connection TLS with that context, whatever the
    address's form; a `rediss://` address without it uses
    `ssl.create_default_context()` (the system's trusted CAs).
    `connect_timeout` (default 10 s) bounds the connection, the TLS
    handshake and the server's answer to `HELLO`: a server silent for that
    long fails `Closed` (`the server at HOST:PORT answered nothing for
    10s`). A server whose `HELLO` answer names another server (Redis)
    fails `Invalid`, one that sends what is not RESP `Closed`.
    `max_reply_bytes` (default 64 MiB) is the largest reply a connection
    takes: a reply announcing more fails its connection at once, unread
    (`Closed`, `announced a reply of N bytes, over the limit of LIMIT`).
    Up to `max_idle`
    connections are kept open between holds. A bad address or duration
    raises `Invalid` at once, as does a bad user name or a user without a
    token. With several addresses, the first one's user, token and TLS
    apply to every node."""
    seeds = parse_addresses(address)
    first = seeds[0]
    timeout_ms = CONNECT_TIMEOUT_MS
    if connect_timeout is not None:
        timeout_ms = max(1, to_ms(connect_timeout, "connect_timeout"))
    if ssl is None and first.tls:
        ssl = _ssl.create_default_context()
    auth = resolve_auth(first, user, token)
    if isinstance(max_reply_bytes, bool) or not isinstance(max_reply_bytes, int):
        raise TypeError(f"max_reply_bytes is an int, not {type(max_reply_bytes).__name__}")
    if max_reply_bytes < 1:
        what = f"max_reply_bytes {max_reply_bytes} is not positive"
        raise Invalid(text_for(None, None, what, "invalid"))
    return Connecting(Router(seeds, Dial(auth, ssl, timeout_ms, max_idle, max_reply_bytes)))


class Connecting(AsyncBlock):
    """What `connect` answers: await it for the store, or enter it with
    `async with` for a store closed on leaving the block."""

    def __init__(self, router: Router) -> None:
        self._router = router
        self._store: Optional[Store] = None

    async def _open(self) -> "Store":
        await self._router.connect()
        return Store(self._router)

    def __await__(self) -> Generator[Any, None, "Store"]:
        return self._open().__await__()

    async def __aenter__(self) -> "Store":
        self._store = await self._open()
        return self._store

    async def _leave(self, exc_type: Optional[Type[BaseException]]) -> None:
        if self._store is not None:
            await self._store.aclose()


class Store(AsyncBlock):
    """A store reached over a connection; open locks on it with `lock`."""

    def __init__(self, router: Router) -> None:
        self._router = router
        self.address = router.address.hostport
        """The `host:port` of the server it connected to (of its addresses,
        the first that answered)."""

    @property
    def closed(self) -> bool:
        return self._router.closed

    @property
    def nodes(self) -> List[str]:
        """The `host:port` of each node of the cluster's slot map as last
        learned; of the one server when it is not a cluster."""
        return self._router.nodes

    def lock(
        self,
        name: str,
        *,
        ttl: Optional[Duration] = None,
        max_hold: Optional[Duration] = None,
        permits: Optional[int] = None,
    ) -> Lock:
        """The lock `name`: `ttl` (default 10 s) is how long a lease outlives
        its connection's last word; `max_hold` (default off) bounds a lease
        from its grant, however it is renewed; `permits` (default 1, at most
        1,000,000) is how many holds of one permit a key admits at once. A
        bad name or duration raises `Invalid` here; a count the server
        refuses (0, or another than the lock's holders and waiters use)
        fails the holds `Invalid`."""
        return Lock(self._router, name, ttl, max_hold, permits)

    async def put(
        self, lock: str, key: Key, fence: int, row: str, value: Union[str, bytes]
    ) -> None:
        """Writes `value` to `row` only while `lock`'s `key` is held under
        `fence` and no later fence has written the row: `Lost` otherwise.
        This is how a holder that stalled past its lease is refused. On a
        cluster the row must hash to the key's slot: hash tags, key
        `{inv-7}` and row `{inv-7}:status`."""
        check_name(lock)
        text = key_text(key)
        args = ("PUT", lock, text, int(fence), row, value)
        result(await self._router.call(text, *args, lock=lock))

    async def get(self, row: str) -> Optional[bytes]:
        """The row's value, or None."""
        value = result(await self._router.call(row, "GET", row))
        return None if value is None else bytes(value)

    async def stats(self, lock: str) -> Dict[str, int]:
        """The lock's counters: live_keys, held_keys, waiters, grants,
        timeouts, revocations, expirations (on a cluster, the sums of every
        node's)."""
        check_name(lock)
        totals: Dict[str, int] = {}
        for reply in await self._router.everywhere("STATS", lock):
            reply = result(reply)
            if isinstance(reply, dict):
                pairs = list(reply.items())
            else:
                pairs = list(zip(reply[::2], reply[1::2], strict=True))
            for name, value in pairs:
                totals[_text(name)] = totals.get(_text(name), 0) + int(value)
        return totals

    async def aclose(self) -> None:
        """Closes every connection: held keys go to the next in line (their
        leases lost), waiting holds fail `Closed`, later calls fail `Closed`.
        Idempotent."""
        await self._router.close()

    async def close(self) -> None:
        """The same as `aclose`."""
        await self.aclose()

    async def __aenter__(self) -> "Store":
        return self

    async def _leave(self, exc_type: Optional[Type[BaseException]]) -> None:
        await self.aclose()

    def __repr__(self) -> str:
        state = "closed" if self.closed else "open"
        return f"<holdline_client.Store {self.address} {state}>"


def _text(value: Union[str, bytes]) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
