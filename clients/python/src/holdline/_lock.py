"""A lock's holds: `hold` and `try_hold` as `async with` blocks, and the lease.

Each hold takes a connection of its own from the store's pool for as long as
it waits and holds: the server carries out one connection's commands one at
a time, so a HOLD waiting on a shared connection would delay every other
task's RELEASE behind it. While the hold lives, a renewal task sends a
command every third of the ttl (`PING` while the HOLD waits, since every
command read renews the connection's leases; `RENEW lease` once granted,
whose `LOST` answer is a second way to learn of a loss). Its replies are
not awaited: one sent during a wait is answered only once the HOLD ends.
"""

import asyncio
import re
from types import TracebackType
from typing import TYPE_CHECKING, Any, Callable, List, Optional, Tuple, Type, Union

from ._durations import Duration, to_ms
from ._errors import Closed, Error, Invalid, Lost, show_key, text_for
from ._wire import Link

if TYPE_CHECKING:
    from ._store import Store

Key = Union[str, int]
"""A key: text, or an integer (key 9 and key "9" are the same key)."""


def key_text(key: Key) -> str:
    """The key as the server sees it: a number is its decimal text."""
    if isinstance(key, str):
        return key
    if isinstance(key, int) and not isinstance(key, bool):
        return str(int(key))
    raise TypeError(f"a key is a str or an int, not {type(key).__name__}")


class Lease:
    """The lease a hold runs under: its key, its fence and its loss signal."""

    __slots__ = ("lock", "key", "fence", "id", "signal", "_error", "_on_loss")

    def __init__(self, lock: str, key: str, fence: int, lease_id: int) -> None:
        self.lock = lock
        """The lock's name."""
        self.key = key
        """The key as text."""
        self.fence = fence
        """The fencing token: greater than every earlier grant's of this key."""
        self.id = lease_id
        """The server's id of the lease (its connection's to renew and release)."""
        self.signal = asyncio.Event()
        """Set the moment the lease is lost: the server's push, a `LOST`
        answer to a renewal, or the connection dropping."""
        self._error: Optional[Lost] = None
        self._on_loss: List[Callable[[Lost], None]] = []

    @property
    def lost(self) -> bool:
        """True once the lease is lost."""
        return self._error is not None

    @property
    def error(self) -> Optional[Lost]:
        """The `Lost` error once the lease is lost, with the server's text."""
        return self._error

    def check(self) -> None:
        """Raises `Lost` once the lease is lost; a cheap check inside long work."""
        if self._error is not None:
            raise self._error

    def _lose(self, error: Lost) -> None:
        if self._error is not None:
            return
        self._error = error
        self.signal.set()
        for tell in self._on_loss:
            tell(error)

    def __repr__(self) -> str:
        state = "lost" if self.lost else "held"
        return f"<Lease lock={self.lock} key={self.key!r} fence={self.fence} {state}>"


class _Renewal:
    """Sends `command` every `interval` seconds on `link`, never awaiting the
    reply; a `LOST` reply goes to `on_lost`."""

    def __init__(self, link: Link, interval: float, command: List[Union[str, int]]) -> None:
        self._link = link
        self._interval = interval
        self.command = command
        self.on_lost: Optional[Callable[[Lost], None]] = None
        self._task = asyncio.ensure_future(self._run())

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self._interval)
            try:
                reply = await self._link.send(*self.command)
            except Closed:
                return  # the link is gone; its drop has told the lease
            reply.add_done_callback(self._answered)

    def _answered(self, reply: "asyncio.Future[Any]") -> None:
        if reply.cancelled():
            return
        error = reply.exception()
        if isinstance(error, Lost) and self.on_lost is not None:
            self.on_lost(error)

    def stop(self) -> None:
        self._task.cancel()


class Hold:
    """`async with lock.hold(key) as lease:` (or `try_hold`, whose lease is
    None when the key is held). Leaving the block releases the key; leaving
    it after the lease was lost raises `Lost`, unless the block raised."""

    def __init__(
        self, lock: "Lock", key: str, wait_ms: Optional[int], owner: Optional[object] = None
    ) -> None:
        self._lock = lock
        self._key = key
        self._wait_ms = wait_ms  # None: try, never wait
        # Who holds: the task (async) or the thread (blocking flavour). A hold
        # of a key its owner already holds would wait for itself: `Invalid`.
        self._owner = owner
        self._holding: Optional[Tuple[str, str, object]] = None
        self._link: Optional[Link] = None
        self._renewal: Optional[_Renewal] = None
        self._lease: Optional[Lease] = None
        self._entered = False

    async def __aenter__(self) -> Optional[Lease]:
        if self._entered:
            raise RuntimeError("a hold is entered once; call lock.hold(key) again")
        self._entered = True
        lock = self._lock
        owner = self._owner if self._owner is not None else asyncio.current_task()
        holding = (lock.name, self._key, owner)
        if holding in lock.store._holding:
            if self._wait_ms is None:
                return None  # as in process: a try of a key its caller holds
            what = "hold inside a hold of the same key"
            raise Invalid(text_for(lock.name, self._key, what, "invalid"))
        link = await lock.store._checkout(lock.name, self._key)
        self._link = link
        renewal = _Renewal(link, max(lock.ttl_ms / 3000, 0.001), ["PING"])
        limits: List[Union[str, int]] = ["TTL", lock.ttl_ms]
        if lock.max_hold_ms is not None:
            limits += ["MAXHOLD", lock.max_hold_ms]
        try:
            if self._wait_ms is None:
                reply = await link.call("TRYHOLD", lock.name, self._key, *limits)
            else:
                reply = await link.call(
                    "HOLD", lock.name, self._key, "WAIT", self._wait_ms, *limits
                )
        except Closed:
            renewal.stop()
            lock.store._checkin(link)
            if link.dropped:
                raise self._closed_error(link) from None
            raise  # the server's own: its store closed
        except Error:
            renewal.stop()
            lock.store._checkin(link)
            raise
        except BaseException:
            # Cancelled (or worse) while in line: closing the connection is
            # how a HOLD leaves the line, and how a grant that raced the
            # cancel goes on to the next waiter.
            renewal.stop()
            await _close_quietly(link)
            lock.store._checkin(link)
            raise
        if reply is None:
            renewal.stop()
            lock.store._checkin(link)
            return None
        lease_id, fence = int(reply[0]), int(reply[1])
        lease = Lease(lock.name, self._key, fence, lease_id)
        self._lease = lease
        self._holding = holding
        lock.store._holding.add(holding)
        renewal.command = ["RENEW", lease_id]
        renewal.on_lost = lease._lose
        self._renewal = renewal
        link.watch(lease_id, self._on_loss)
        return lease

    def _on_loss(self, text: Optional[str]) -> None:
        lease = self._lease
        if lease is None:
            return
        if text is None:
            closed = self._lock.store.closed
            why = "its store closed" if closed else "its connection to the server closed"
            text = text_for(lease.lock, lease.key, why, "lost")
        lease._lose(Lost(text))

    def _closed_error(self, link: Link) -> Closed:
        lock = self._lock
        if lock.store.closed:
            return Closed(text_for(lock.name, self._key, "the store is closed", "closed"))
        what = "the connection to the server closed"
        return Closed(text_for(lock.name, self._key, what, "closed"))

    async def __aexit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> bool:
        lease, link = self._lease, self._link
        if lease is None or link is None:
            return False
        if self._renewal is not None:
            self._renewal.stop()
        try:
            if not link.dropped:
                await link.call("RELEASE", lease.id)
        except Lost as err:
            lease._lose(err)
        except Closed:
            self._on_loss(None)  # the release could not be confirmed
        except BaseException:
            # Cancelled during the release: closing lets the key go as surely.
            await _close_quietly(link)
            raise
        finally:
            link.unwatch(lease.id)
            self._lock.store._checkin(link)
            if self._holding is not None:
                self._lock.store._holding.discard(self._holding)
        if lease.lost and exc_type is None:
            assert lease.error is not None
            raise lease.error
        return False


async def _close_quietly(link: Link) -> None:
    # Shielded: a second cancel must not leave the socket open.
    await asyncio.shield(link.close())


class Lock:
    """A named lock of a store: `store.lock("invoices", ttl="10s", max_hold="2m")`.

    `ttl` (default 10 s) is how long a lease outlives its connection's last
    command; `max_hold` (default off) bounds a lease from its grant."""

    def __init__(
        self, store: "Store", name: str, ttl: Duration = "10s", max_hold: Optional[Duration] = None
    ) -> None:
        check_name(name)
        if store.closed:
            raise Closed(text_for(name, None, "the store is closed", "closed"))
        self.store = store
        self.name = name
        self.ttl_ms = to_ms(ttl, "ttl", name)
        if self.ttl_ms < 1:
            raise _invalid(name, "a ttl is at least 1ms")
        self.max_hold_ms: Optional[int] = None
        if max_hold is not None:
            self.max_hold_ms = to_ms(max_hold, "maxHold", name)
            if self.max_hold_ms < 1:
                raise _invalid(name, "a maxHold is at least 1ms")

    def hold(self, key: Key, *, wait: Optional[Duration] = None) -> Hold:
        """Waits in the key's line up to `wait` (default 10 s; 0: not at all)
        and holds the key for the `async with` block. Past the wait: `InUse`."""
        text = key_text(key)
        wait_ms = 10_000 if wait is None else to_ms(wait, "wait", self.name, text)
        return Hold(self, text, wait_ms)

    def try_hold(self, key: Key) -> Hold:
        """Holds the key for the block if it is free; the lease is None when
        it is held, and nothing waits."""
        return Hold(self, key_text(key), None)

    def __repr__(self) -> str:
        return f"<Lock {self.name} ttl={self.ttl_ms}ms max_hold={self.max_hold_ms}>"


def _invalid(name: str, what: str) -> Invalid:
    return Invalid(text_for(name, None, what, "invalid"))


_NAME_RULE = 'a lock name is 1 to 128 ASCII letters, digits and "_-.:"'
_NAME = re.compile(r"[A-Za-z0-9_.:-]{1,128}")


def check_name(name: str) -> None:
    """`Invalid` unless `name` is 1 to 128 ASCII letters, digits and `_-.:`,
    with the core's text (the name shown quoted, as it may be odd)."""
    if not isinstance(name, str) or _NAME.fullmatch(name) is None:
        shown = show_key(name) if isinstance(name, str) else repr(name)
        raise Invalid(text_for(shown, None, _NAME_RULE, "invalid"))
