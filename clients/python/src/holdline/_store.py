"""A connected store: the address, the pool of connections, and what is not a hold.

`connect` opens one connection at once, so a wrong address or token fails
there rather than at the first hold. Holds take connections from the pool
and give them back when done (one connection per hold in flight, see
`_lock`); `put`, `get` and `stats` borrow one for a single command.
"""

import asyncio
from types import TracebackType
from typing import Any, Dict, List, Optional, Set, Tuple, Type, Union

from ._durations import Duration, to_ms
from ._errors import Closed, Invalid, text_for
from ._lock import Key, Lock, check_name, key_text
from ._wire import Link

DEFAULT_ADDRESS = "127.0.0.1:7380"


def parse_address(address: str) -> Tuple[str, int]:
    """`host:port`, `[v6]:port`, or a bare host (port 7380)."""
    text = address.strip()
    if text.startswith("["):
        host, sep, rest = text[1:].partition("]")
        port = rest[1:] if rest.startswith(":") else ""
        if not sep or (rest and not rest.startswith(":")):
            raise _bad_address(address)
    elif text.count(":") == 1:
        host, _, port = text.partition(":")
    else:
        host, port = text, ""
    if not host:
        raise _bad_address(address)
    if not port:
        return host, 7380
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise _bad_address(address)
    return host, int(port)


def _bad_address(address: str) -> Invalid:
    return Invalid(text_for(None, None, f"{address!r} is not an address (host:port)", "invalid"))


async def connect(
    address: str = DEFAULT_ADDRESS,
    *,
    token: Optional[str] = None,
    connect_timeout: Duration = "10s",
    max_idle: int = 16,
) -> "Store":
    """Connects to `holdline serve` at `address` (`host:port`).

    `token` authenticates when the server was started with `--token-file`.
    Up to `max_idle` connections are kept open between holds."""
    host, port = parse_address(address)
    timeout = to_ms(connect_timeout, "connect_timeout") / 1000
    store = Store(host, port, token, timeout, max_idle)
    link = await Link.open(host, port, token, timeout)
    try:
        # HELLO 3 without AUTH is allowed before authenticating; PING is not.
        # A server that wants a token says so here (`NOAUTH ...`: Invalid),
        # not at the first hold.
        await link.call("PING")
    except BaseException:
        await link.close()
        raise
    store._checkin(link)
    return store


class Store:
    """A store reached over a connection; open locks on it with `lock`."""

    def __init__(
        self, host: str, port: int, token: Optional[str], connect_timeout: float, max_idle: int
    ) -> None:
        self.address = f"{host}:{port}"
        self._host = host
        self._port = port
        self._token = token
        self._connect_timeout = connect_timeout
        self._max_idle = max_idle
        self._idle: List[Link] = []
        self._links: Set[Link] = set()
        self._closed = False
        # (lock, key, owner) for every hold in progress: see `Hold`.
        self._holding: Set[Tuple[str, str, object]] = set()

    @property
    def closed(self) -> bool:
        return self._closed

    def lock(
        self, name: str, *, ttl: Duration = "10s", max_hold: Optional[Duration] = None
    ) -> Lock:
        """The lock `name`: `ttl` (default 10 s) is how long a lease outlives
        its connection's last word; `max_hold` (default off) bounds a lease
        from its grant, however it is renewed. A bad name or duration raises
        `Invalid` here."""
        return Lock(self, name, ttl, max_hold)

    async def _checkout(self, lock: Optional[str] = None, key: Optional[str] = None) -> Link:
        if self._closed:
            raise Closed(text_for(lock, key, "the store is closed", "closed"))
        while self._idle:
            link = self._idle.pop()
            if not link.dropped:
                return link
        link = await Link.open(self._host, self._port, self._token, self._connect_timeout)
        if self._closed:  # closed while this one was connecting
            await link.close()
            raise Closed(text_for(lock, key, "the store is closed", "closed"))
        self._links.add(link)
        return link

    def _checkin(self, link: Link) -> None:
        """Takes a connection back; keeps it for the next hold if it is whole
        and holds nothing, else closes it."""
        self._links.add(link)
        if self._closed or link.dropped or link.holds_leases or len(self._idle) >= self._max_idle:
            self._links.discard(link)
            if not link.dropped:
                asyncio.ensure_future(link.close())
            return
        if link not in self._idle:
            self._idle.append(link)

    async def _one_command(self, *args: Union[str, int, bytes]) -> Any:
        link = await self._checkout()
        try:
            return await link.call(*args)
        finally:
            self._checkin(link)

    async def put(
        self, lock: str, key: Key, fence: int, row: str, value: Union[str, bytes]
    ) -> None:
        """Writes `value` to `row` only while `lock`'s `key` is held under
        `fence` and no later fence has written the row: `Lost` otherwise.
        This is how a holder that stalled past its lease is refused."""
        check_name(lock)
        await self._one_command("PUT", lock, key_text(key), int(fence), row, value)

    async def get(self, row: str) -> Optional[bytes]:
        """The row's value, or None."""
        value = await self._one_command("GET", row)
        return None if value is None else bytes(value)

    async def stats(self, lock: str) -> Dict[str, int]:
        """The lock's counters: live_keys, held_keys, waiters, grants,
        timeouts, revocations, expirations."""
        check_name(lock)
        reply = await self._one_command("STATS", lock)
        if isinstance(reply, dict):
            pairs = list(reply.items())
        else:
            pairs = list(zip(reply[::2], reply[1::2]))
        return {_text(name): int(value) for name, value in pairs}

    async def close(self) -> None:
        """Closes every connection: held keys go to the next in line (their
        leases lost), waiting holds fail `Closed`, later calls fail `Closed`.
        Idempotent."""
        self._closed = True
        links, self._links = list(self._links), set()
        self._idle.clear()
        await asyncio.gather(*(link.close() for link in links))

    async def __aenter__(self) -> "Store":
        return self

    async def __aexit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        await self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return f"<holdline.Store {self.address} {state}>"


def _text(value: Union[str, bytes]) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
