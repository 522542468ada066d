"""One node's connections: opened on demand, kept for reuse, closed together.

Holds take connections from the pool and give them back when done (one
connection per hold in flight: the server carries out one connection's
commands one at a time, so a HOLD waiting on a shared connection would
delay every other task's RELEASE behind it); `put`, `get` and `stats`
borrow one for a single command. A store has one pool per node it talks to.
"""

import asyncio
import ssl
from dataclasses import dataclass
from typing import Callable, List, Optional, Set, Tuple

from ._address import Address, Auth
from ._errors import Closed, text_for
from ._resp import MAX_REPLY_BYTES, Arg, Reply
from ._wire import Link, open_link

Holding = Tuple[str, str, object]
"""(lock, key, owner) of a hold in progress; the owner is a task or a thread."""


@dataclass(frozen=True)
class Dial:
    """How a store connects, the same for each of its nodes' pools."""

    auth: Optional[Auth]
    tls: Optional[ssl.SSLContext]
    """The TLS context every connection is made with; None: plain TCP."""
    connect_timeout_ms: int
    max_idle: int
    """How many connections a pool keeps open between holds."""
    max_reply: int = MAX_REPLY_BYTES


class Closes:
    """What a pool and a store's router share: closed once and for good
    (`_closed`), after which what is asked of them fails `closed_error`."""

    def __init__(self) -> None:
        self._closed = False

    @property
    def closed(self) -> bool:
        return self._closed

    def is_closed(self) -> bool:
        return self._closed

    def closed_error(self, lock: Optional[str] = None, key: Optional[str] = None) -> Closed:
        return Closed(text_for(lock, key, "the store is closed", "closed"))


class Pool(Closes):
    """The connections of a store to one node."""

    def __init__(self, address: Address, dial: Dial) -> None:
        super().__init__()
        self.address = address
        self.dial = dial
        self._idle: List[Link] = []
        self._links: Set[Link] = set()
        self.on_failure: Optional[Callable[[], None]] = None
        """Called when a connection of the pool fails: it could not be made,
        or the server's side ended it."""

    async def open(self) -> Link:
        """A new connection, said `HELLO` to."""
        try:
            dial = self.dial
            link = await open_link(
                self.address, dial.auth, dial.connect_timeout_ms, dial.tls, dial.max_reply
            )
        except Closed:
            self._failed()
            raise
        link.on_lost = self._failed
        return link

    async def open_kept(self) -> Link:
        """A new connection of one user's own (an observer's): never lent to
        a hold, closed with the pool. Close it, then give it back (`checkin`)."""
        if self._closed:
            raise self.closed_error()
        link = await self.open()
        if self._closed:
            link.close()
            raise self.closed_error()
        self._links.add(link)
        return link

    def _failed(self) -> None:
        if self.on_failure is not None and not self._closed:
            self.on_failure()

    async def checkout(self, lock: Optional[str] = None, key: Optional[str] = None) -> Link:
        """An idle connection, or a new one."""
        if self._closed:
            raise self.closed_error(lock, key)
        while self._idle:
            link = self._idle.pop()
            if not link.dropped:
                return link
            self._links.discard(link)
        link = await self.open()
        if self._closed:  # closed while this one was connecting
            link.close()
            raise self.closed_error(lock, key)
        self._links.add(link)
        return link

    def checkin(self, link: Link) -> None:
        """Takes a connection back; keeps it for the next hold if it is whole
        and holds nothing, else closes it."""
        if (
            self._closed
            or link.dropped
            or link.holds_leases
            or len(self._idle) >= self.dial.max_idle
        ):
            self._links.discard(link)
            link.close()
            return
        self._links.add(link)
        if link not in self._idle:
            self._idle.append(link)

    async def one_command(self, *args: Arg) -> Reply:
        """Sends one command on a pooled connection and answers its reply
        as sent (an error reply as a `RespError`, a drop as `DROPPED`)."""
        link = await self.checkout()
        try:
            return await link.send(*args).future
        except BaseException:
            link.close()  # cancelled: its answer must not reach the next command
            raise
        finally:
            self.checkin(link)

    async def close(self) -> None:
        """Closes every connection; later checkouts fail `Closed`. Idempotent."""
        self._closed = True
        links, self._links = list(self._links), set()
        self._idle.clear()
        for link in links:
            link.close()
        if links:
            await asyncio.gather(*(link.wait_closed() for link in links))
