"""A lock's holds: `hold` and `try_hold` as `async with` blocks, each
taking one of a key's permits, `permits=m`, or all (`exclusive=True`).

Each hold takes a connection of its own from the store's pool for as long
as it waits and holds. While its HOLD waits, the connection sends `PING`
every third of the ttl (the server keeps reading during a wait, and every
command read renews the connection's leases; the replies come only once
the HOLD is answered). Once granted, the lease renews itself (`_lease`).

A waiting hold whose connection answers nothing for its wait plus the ttl
(at least 1 s more) gives up `Closed` and closes the connection, which
takes the HOLD out of the server's line: nothing is granted to it later.

To a node that can hand leases over (`handover` in its `HELLO`), HOLD and
TRYHOLD carry the hold's secret (`SECRET s`, new for each hold); its lease
then follows a planned hand-over (`_follow`). A waiting HOLD answered
`MOVED` with a secret was handed over with its place in line: it sends
`REATTACH` to that node and goes on waiting there, within the same wait
(a node that answers `LOST`, nothing handed over under the secret, was
only a stale map's choice: the HOLD is sent there again).
"""

import asyncio
import re
import time
from typing import Awaitable, List, Optional, Tuple, Type, TypeVar, Union

from ._address import Address
from ._blocks import AsyncBlock
from ._cluster import Route, Router, parse_moved
from ._durations import Duration, to_ms
from ._election import Election
from ._errors import Closed, Error, Invalid, Lost, from_reply, show_key, text_for
from ._follow import new_secret, reattach
from ._inspect import KeyState, key_state
from ._lease import Lease
from ._pool import Holding, Pool
from ._resp import Arg, Reply, RespError
from ._texts import CLUSTER_DOWN_PAUSE_MS, show_ms, wait_grace_ms
from ._texts import key_text as client_text
from ._wire import DROPPED, Link, Pending, result

Key = Union[str, int]
"""A key: text, or an integer (key 9 and key "9" are the same key)."""

DEFAULT_TTL_MS = 10_000
DEFAULT_WAIT_MS = 10_000

T = TypeVar("T")


def key_text(key: Key) -> str:
    """The key as the server sees it: a number is its decimal text."""
    if isinstance(key, str):
        return key
    if isinstance(key, int) and not isinstance(key, bool):
        return str(int(key))
    raise TypeError(f"a key is a str or an int, not {type(key).__name__}")


class _Pinger:
    """Sends `PING` on a link every `interval` seconds, never awaiting it."""

    def __init__(self, link: Link, interval: float) -> None:
        self._link = link
        self._interval = interval
        self._loop = asyncio.get_running_loop()
        self._handle = self._loop.call_later(interval, self._ping)

    def _ping(self) -> None:
        if self._link.dropped:
            return
        try:
            self._link.send("PING")
        except Closed:
            return
        self._handle = self._loop.call_later(self._interval, self._ping)

    def stop(self) -> None:
        self._handle.cancel()


class HoldBase(AsyncBlock):
    """What `hold` and `try_hold` share: the block's entry (wait in line or
    try) and its exit (release; `Lost` if the lease was lost meanwhile)."""

    def __init__(
        self,
        lock: "Lock",
        key: str,
        wait_ms: Optional[int],
        owner: Optional[object] = None,
        *,
        take: Optional[int] = 1,
        note: Optional[str] = None,
    ) -> None:
        self._lock = lock
        self._key = key
        self._wait_ms = wait_ms  # None: try, never wait
        self._take = take  # the permits this hold takes; None: all of them (exclusive)
        self._note = note  # the lease's note (`NOTE text`); None: none
        # Who holds: the task (async) or the thread (blocking flavour). A hold
        # of a key its owner already holds would wait for itself: `Invalid`.
        self._owner = owner
        self._holding: Optional[Holding] = None
        self._pool: Optional[Pool] = None  # the pool of the node asked last
        self._link: Optional[Link] = None
        self._lease: Optional[Lease] = None
        self._entered = False
        self._wait_ends = 0.0  # the wait's end (monotonic), from the hold's call
        self._give_up_at = 0.0  # the wait's end plus max(ttl, 1s)
        self._sends = 0  # HOLDs sent so far: the first carries the whole wait
        self._secret: Optional[str] = None  # sent to nodes that can hand over
        self._secret_sent = False  # the last HOLD or TRYHOLD carried it
        self._reattach_to: Optional[Address] = None  # a waiting HOLD handed over there
        self._hold_at: Optional[Address] = None  # the next HOLD's node, when not the map's
        self._handed_to: Optional[Address] = None  # the node the hand-over's MOVED named

    async def _enter(self) -> Optional[Lease]:
        if self._entered:
            raise RuntimeError("a hold is entered once; call lock.hold(key) again")
        self._entered = True
        lock, router = self._lock, self._lock._router
        owner = self._owner if self._owner is not None else asyncio.current_task()
        holding = (lock.name, self._key, owner)
        if holding in router.holding:
            if self._wait_ms is None:
                return None  # as in process: a try of a key its caller holds
            what = "hold inside a hold of the same key"
            raise Invalid(text_for(lock.name, self._key, what, "invalid"))
        pool, link, reply = await self._routed()
        lease = self._lease
        if lease is None:
            if reply is None and self._wait_ms is None:
                pool.checkin(link)
                return None  # TRYHOLD of a held key
            self._abandon(link)
            what = f"the server answered {reply!r} to a hold"
            raise Invalid(text_for(lock.name, self._key, what, "invalid"))
        if not lease.lost:
            try:
                await lease._settled_wait()
            except BaseException:
                self._abandon(link)
                raise
        if lease.lost:
            await self._let_go(lease, link)
            assert lease.error is not None
            raise lease.error
        self._holding = holding
        router.holding.add(holding)
        return lease

    async def _routed(self) -> Tuple[Pool, Link, Reply]:
        """Sends the hold to the node serving its key, again where a
        cluster's node says (`MOVED`, `CLUSTERDOWN`), and answers the reply
        of the last one sent: a grant, or a `TRYHOLD`'s null. An error
        raises, the connection given back. The wait runs from here, not
        from each send, and the hold as a whole gives up `Closed` at the
        wait plus max(ttl, 1s), whatever it is doing then (texts.json's
        rules wait_left and wait_grace)."""
        route = self._lock._router.route(self._lock.name, self._key)
        self._wait_ends = time.monotonic() + (self._wait_ms or 0) / 1000
        self._give_up_at = self._wait_ends + wait_grace_ms(self._lock.ttl_ms) / 1000
        while True:
            target, self._hold_at = self._reattach_to or self._hold_at, None
            if target is not None:
                pool = self._lock._router.pool_at(target)
                try:
                    link = await self._within(pool.checkout(self._lock.name, self._key))
                except Closed:
                    if not self._back_to_handed(target):
                        raise
                    await self._within(asyncio.sleep(CLUSTER_DOWN_PAUSE_MS / 1000))
                    continue
            else:
                pool, link = await self._within(route.checkout())
            self._pool, self._link = pool, link
            try:
                reply = await self._ask(link)
            except BaseException:
                # Cancelled while in line, or gave up: closing the connection is
                # how a HOLD leaves the line, and how a grant that raced the
                # cancel goes on to the next waiter.
                self._abandon(link)
                raise
            if reply is DROPPED:
                pool.checkin(link)
                raise self._closed_error() from None
            if not isinstance(reply, RespError):
                return pool, link, reply
            pool.checkin(link)
            if await self._handed_over(route, reply):
                continue
            if not await self._within(route.again(reply)):
                raise from_reply(reply.line)

    async def _handed_over(self, route: Route, reply: RespError) -> bool:
        """Whether the waiting hold goes on by `REATTACH` after `reply`.
        `MOVED` to a HOLD sent with a secret: the node handed it over (or a
        stale map sent it there: `REATTACH` answers `LOST` then, and the
        HOLD is sent again); to a REATTACH: that node's. `CLUSTERDOWN` to a
        REATTACH: the partition is between owners, sent again after 100 ms.
        `MOVED` and `CLUSTERDOWN` count toward their limits as for a HOLD.
        `LOST` to a REATTACH: nothing under the secret there."""
        reattaching = self._reattach_to is not None
        if reply.word == "MOVED" and (reattaching or (self._secret_sent and self._wait_ms)):
            moved = parse_moved(reply.text)
            if moved is None or not await self._within(route.again(reply)):
                return False
            if not reattaching:
                self._handed_to = moved[1]
            self._reattach_to = moved[1]
            return True
        if not reattaching:
            return False
        if reply.word == "CLUSTERDOWN":
            return await self._within(route.again(reply))
        if reply.word == "LOST":
            # Nothing waits there: HOLD again there, with the wait left.
            self._hold_at, self._reattach_to = self._reattach_to, None
            return True
        return False

    def _back_to_handed(self, target: Address) -> bool:
        """After a REATTACH's connection to `target` failed: whether to send
        it again to the node the hand-over named, `target` being another a
        `MOVED` sent it to (the old owner, gone, named by a map not yet
        updated)."""
        if self._reattach_to is None or self._handed_to in (None, target):
            return False
        self._reattach_to = self._handed_to
        return True

    async def _within(self, step: Awaitable[T]) -> T:
        """`step`'s result, or `Closed` (wait_silent) once the hold's time
        is up."""
        left = self._give_up_at - time.monotonic()
        try:
            return await asyncio.wait_for(step, max(0.0, left))
        except asyncio.TimeoutError:
            raise self._silent() from None

    def _wait_arg(self) -> int:
        """`WAIT`'s argument for the `HOLD` sent now: the whole wait the
        first time, then the wait left, in whole milliseconds."""
        wait_ms = self._wait_ms or 0
        if self._sends > 0:
            wait_ms = max(0, int((self._wait_ends - time.monotonic()) * 1000))
        self._sends += 1
        return wait_ms

    def _silent(self) -> Closed:
        lock = self._lock
        return Closed(
            client_text(
                "wait_silent",
                lock.name,
                self._key,
                wait=show_ms(self._wait_ms or 0),
                ttl=show_ms(wait_grace_ms(lock.ttl_ms)),
            )
        )

    async def _ask(self, link: Link) -> Reply:
        """Sends HOLD (with the wait left) or TRYHOLD and answers its reply;
        gives up `Closed` when the hold's time is up first."""
        lock = self._lock
        if self._reattach_to is not None:
            assert self._secret is not None
            pending = link.send(
                "REATTACH", lock.name, self._key, self._secret, on_reply=self._granted
            )
            return await self._reply(link, pending)
        options: List[Arg] = ["TTL", lock.ttl_ms]
        if lock.max_hold_ms is not None:
            options += ["MAXHOLD", lock.max_hold_ms]
        options += self._permit_args()
        if self._note is not None:
            options += ["NOTE", self._note]
        self._secret_sent = link.handover
        if link.handover:
            if self._secret is None:
                self._secret = new_secret()
            options += ["SECRET", self._secret]
        if self._wait_ms is None:
            pending = link.send("TRYHOLD", lock.name, self._key, *options, on_reply=self._granted)
        else:
            pending = link.send(
                "HOLD",
                lock.name,
                self._key,
                "WAIT",
                self._wait_arg(),
                *options,
                on_reply=self._granted,
            )
        return await self._reply(link, pending)

    async def _reply(self, link: Link, pending: Pending) -> Reply:
        """The reply of a HOLD, TRYHOLD or REATTACH sent on `link`, the
        connection pinged meanwhile; `Closed` when the hold's time is up first."""
        pinger = _Pinger(link, self._lock.ttl_ms / 3000)
        try:
            timeout = self._give_up_at - time.monotonic()
            await asyncio.wait([pending.future], timeout=max(0.0, timeout))
        finally:
            pinger.stop()
        if not pending.future.done():
            raise self._silent()
        return pending.future.result()

    def _permit_args(self) -> List[Arg]:
        """`PERMITS n` and `TAKE m|ALL`, each only when it is not 1, so that
        a plain lock's holds read as before (servers before permits)."""
        count = self._lock.permits
        args: List[Arg] = [] if count == 1 else ["PERMITS", count]
        if self._take is None:
            args += [] if count == 1 else ["TAKE", "ALL"]
        elif self._take != 1:
            args += ["TAKE", self._take]
        return args

    def _granted(self, reply: Reply, sent_at: float, now: float) -> None:
        """Makes the lease as the grant is handled, so that the answers
        behind it (the PINGs of the wait) already count for its clock."""
        if not (isinstance(reply, list) and len(reply) == 2):
            return
        lease_id, fence = reply
        if not (isinstance(lease_id, int) and isinstance(fence, int)):
            return
        lock, link = self._lock, self._link
        assert link is not None
        self._lease = Lease(
            lock.name,
            self._key,
            fence,
            lease_id,
            lock.ttl_ms,
            link,
            (sent_at, now),
            lock._router.is_closed,
            lock.permits if self._take is None else self._take,
            self._follow if self._secret_sent or self._reattach_to is not None else None,
        )

    async def _follow(
        self, where: Address, until: float
    ) -> Optional[Tuple[Link, int, float, float]]:
        """Re-attaches the lease at `where` (its `Follow`): the hold's
        connection is the new one from then on, the old one given back."""
        assert self._secret is not None
        lock = self._lock
        attached = await reattach(lock._router, lock.name, self._key, self._secret, where, until)
        if attached is None:
            return None
        pool, link, lease_id, sent_at, now = attached
        old_pool, old_link = self._pool, self._link
        self._pool, self._link = pool, link
        if old_pool is not None and old_link is not None:
            old_pool.checkin(old_link)
        return link, lease_id, sent_at, now

    def _abandon(self, link: Link) -> None:
        link.close()
        if self._lease is not None:
            self._lease._end()
        assert self._pool is not None
        self._pool.checkin(link)

    def _closed_error(self) -> Closed:
        lock = self._lock
        if lock._router.closed:
            return lock._router.closed_error(lock.name, self._key)
        return Closed(client_text("connection_closed_key", lock.name, self._key))

    async def _leave(self, exc_type: Optional[Type[BaseException]]) -> None:
        lease, link = self._lease, self._link
        if lease is None or link is None or self._holding is None:
            return
        try:
            await self._let_go(lease, link)
        finally:
            self._lock._router.holding.discard(self._holding)
        if lease.lost and exc_type is None:
            assert lease.error is not None
            raise lease.error

    async def _let_go(self, lease: Lease, link: Link) -> None:
        """Releases the key (the server forgets a lost lease on its RELEASE
        too) and gives the connection back. A lease that moved is released
        where it re-attached (`MOVED` to the RELEASE: once it did)."""
        lease._stop_renewing()
        try:
            for _ in range(2):
                await lease._moved_wait()
                link = self._link if self._link is not None else link
                if link.dropped:
                    break
                reply = await link.send("RELEASE", lease.id).future
                if isinstance(reply, RespError) and reply.word == "MOVED" and not lease.lost:
                    lease._moved(reply.text.partition(" ")[2])
                    continue
                result(reply)
                break
        except Lost as err:
            lease._mark_lost(err)
        except Error:
            pass  # the connection closed: the lease was told by its drop
        except BaseException:
            # Cancelled during the release: closing lets the key go as surely.
            link.close()
            raise
        finally:
            lease._end()
            assert self._pool is not None
            self._pool.checkin(self._link if self._link is not None else link)


class Hold(HoldBase):
    """`async with lock.hold(key) as lease:` waits in the key's line up to
    the hold's wait, then holds the key for the block (`InUse` past the
    wait). Leaving the block releases the key; leaving it after the lease
    was lost raises `Lost`, unless the block raised its own error."""

    async def __aenter__(self) -> Lease:
        lease = await self._enter()
        assert lease is not None  # a waiting hold answers a lease or raises
        return lease


class TryHold(HoldBase):
    """`async with lock.try_hold(key) as lease:` holds the key for the block
    if it is free; the lease is None when it is held, and nothing waits."""

    async def __aenter__(self) -> Optional[Lease]:
        return await self._enter()


class Lock:
    """A named lock of a store: `store.lock("invoices", ttl="10s", max_hold="2m")`.

    `ttl` (default 10 s) is how long a lease outlives its connection's last
    command; `max_hold` (default off) bounds a lease from its grant.
    `permits` (default 1) is how many permits each key has: a hold takes
    one (or `permits=m`, or all with `exclusive=True`), and the leases of a
    key hold at most that many at once."""

    def __init__(
        self,
        router: Router,
        name: str,
        ttl: Optional[Duration] = None,
        max_hold: Optional[Duration] = None,
        permits: Optional[int] = None,
    ) -> None:
        check_name(name)
        if router.closed:
            raise router.closed_error(name)
        self._router = router
        self.name = name
        # A count out of range is the server's to refuse, with its own text.
        self.permits = 1 if permits is None else _count(permits, "permits")
        self.ttl_ms = DEFAULT_TTL_MS if ttl is None else to_ms(ttl, "ttl", name)
        if self.ttl_ms < 1:
            raise _invalid(name, "a ttl is at least 1ms")
        self.max_hold_ms: Optional[int] = None
        if max_hold is not None:
            self.max_hold_ms = to_ms(max_hold, "maxHold", name)
            if self.max_hold_ms < 1:
                raise _invalid(name, "a maxHold is at least 1ms")

    def _wait_ms(self, key: str, wait: Optional[Duration]) -> int:
        return DEFAULT_WAIT_MS if wait is None else to_ms(wait, "wait", self.name, key)

    def _take(self, permits: Optional[int], exclusive: bool) -> Optional[int]:
        """The permits a hold takes: None for all of them (exclusive)."""
        if exclusive and permits is not None:
            raise TypeError("a hold takes permits=m or exclusive=True, not both")
        if exclusive:
            return None
        # 0 or more than the lock's count is the server's to refuse.
        return 1 if permits is None else _count(permits, "permits")

    def hold(
        self,
        key: Key,
        *,
        wait: Optional[Duration] = None,
        permits: Optional[int] = None,
        exclusive: bool = False,
        note: Optional[str] = None,
    ) -> Hold:
        """Waits in the key's line up to `wait` (default 10 s; 0: not at all)
        and holds the key for the `async with` block. Past the wait: `InUse`.
        It takes one of the key's permits, `permits` of them, or all with
        `exclusive=True` (alone with the key). `note` (1 to 1,024 bytes of
        UTF-8, no control characters: an address, a job id) is shown
        wherever the holder is: `inspect`, `OBSERVE`, `HISTORY`; the server
        refuses a bad one `Invalid`."""
        text = key_text(key)
        take = self._take(permits, exclusive)
        return Hold(self, text, self._wait_ms(text, wait), take=take, note=_note(note))

    def try_hold(
        self,
        key: Key,
        *,
        permits: Optional[int] = None,
        exclusive: bool = False,
        note: Optional[str] = None,
    ) -> TryHold:
        """Holds the key for the block if its permits fit now and nobody
        waits; the lease is None otherwise, and nothing waits. `note` as
        for `hold`."""
        take = self._take(permits, exclusive)
        return TryHold(self, key_text(key), None, take=take, note=_note(note))

    def election(self, name: str) -> Election:
        """The election `name` of this lock: a hold of key `name` with the
        candidate's note, and an observer of that key (`Election`). Every
        process that campaigns in it opens the same lock (name and ttl)."""
        return Election(self, key_text(name))

    async def inspect(self, key: Key) -> Optional[KeyState]:
        """The key's state on the server (held, fence, times, waiters, who
        holds it); None when the server keeps nothing for it. For looking
        on: it holds nothing, and is old the moment it arrives."""
        text = key_text(key)
        reply = await self._router.call(text, "INSPECT", self.name, text, lock=self.name)
        return key_state(result(reply))

    def __repr__(self) -> str:
        permits = "" if self.permits == 1 else f" permits={self.permits}"
        return f"<Lock {self.name} ttl={self.ttl_ms}ms max_hold={self.max_hold_ms}{permits}>"


def _note(note: Optional[str]) -> Optional[str]:
    """`note` as sent: a str (the server judges its bytes), else `TypeError`."""
    if note is not None and not isinstance(note, str):
        raise TypeError(f"a note is a str, not {type(note).__name__}")
    return note


def _invalid(name: str, what: str) -> Invalid:
    return Invalid(text_for(name, None, what, "invalid"))


def _count(value: int, what: str) -> int:
    """`value` as a count of permits: an int (not a bool), else `TypeError`."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{what} is an int, not {type(value).__name__}")
    return int(value)


_NAME_RULE = 'a lock name is 1 to 128 ASCII letters, digits and "_-.:"'
_NAME = re.compile(r"[A-Za-z0-9_.:-]{1,128}")


def check_name(name: str) -> None:
    """`Invalid` unless `name` is 1 to 128 ASCII letters, digits and `_-.:`,
    with the core's text (the name shown quoted, as it may be odd)."""
    if not isinstance(name, str) or _NAME.fullmatch(name) is None:
        shown = show_key(name) if isinstance(name, str) else repr(name)
        raise Invalid(text_for(shown, None, _NAME_RULE, "invalid"))
