"""Elections, with etcd's shape, made of a hold with a note and an observer.

```python
election = store.lock("services", ttl="5s").election("billing")
async with election.campaign("10.0.0.5:8080") as lead:
    while not lead.lost:
        await serve_as_leader(fence=lead.fence)
await election.leader()                # Leader(note, fence, ...) or None
async for leader in election.observe():  # the present one first, then each change
    ...
```

A campaign is a HOLD of key ELECTION in the lock, with the candidate's
note, taking all of the key's permits. It waits as long as it takes: the
HOLD is sent again with a long wait each time the wait passes (`in use`),
until the task is cancelled (which closes the connection, taking it out
of the line). The leadership is the lease: its fence, its loss signal
under every rule of the client's leases (the clock, the server's push, a
dropped connection), `proclaim` is `NOTE`, `resign` (or leaving the block)
is `RELEASE`.

`leader` is `INSPECT`. `observe` has a connection of its own that sends
`OBSERVE lock key` and reads the pushes: the present state first (`held`
or `free`), then every change. A PING every third of the ttl keeps watch
on that connection; when it drops, stays silent for max(ttl, 1s), or the
server says `closed` (its store or partition closed; a cluster then
answers `MOVED`, followed as for any command), the observer connects
again, observes again and yields the present state again.
"""

import asyncio
import time
from dataclasses import dataclass
from typing import AsyncGenerator, Generic, List, Optional, Protocol, Tuple, Type, TypeVar, Union

from ._blocks import AsyncBlock
from ._cluster import Router
from ._durations import Duration
from ._errors import Closed, InUse, Invalid, Lost
from ._inspect import KeyState
from ._lease import Lease
from ._pool import Pool
from ._resp import Reply, RespError
from ._texts import key_text, wait_grace_ms
from ._wire import DROPPED, Link, result


class _Hold(Protocol):
    """What a campaign needs of a lock's hold (`_lock.Hold`, a layer above)."""

    _link: Optional[Link]
    _owner: Optional[object]

    async def __aenter__(self) -> Lease: ...

    async def _leave(self, exc_type: Optional[Type[BaseException]]) -> None: ...


class _Lock(Protocol):
    """What an election needs of its lock (`_lock.Lock`, a layer above)."""

    name: str
    ttl_ms: int
    _router: Router

    def hold(
        self,
        key: Union[str, int],
        *,
        wait: Optional[Duration] = None,
        permits: Optional[int] = None,
        exclusive: bool = False,
        note: Optional[str] = None,
    ) -> _Hold: ...

    async def inspect(self, key: Union[str, int]) -> Optional[KeyState]: ...


CAMPAIGN_WAIT_MS = 60_000
"""The wait of each HOLD a campaign sends; past it the HOLD is sent again."""

RETRY_FIRST_S = 0.1
"""An observer's first pause before connecting again (after a failure, or
an observation over within `RETRY_MOST_S`); it doubles each time."""

RETRY_MOST_S = 1.0
"""The longest pause of an observer between tries to connect again."""

_ENDS = (b"released", b"expired", b"revoked", b"disconnected")
_HOLDS = (b"held", b"granted")


@dataclass(frozen=True)
class Leader:
    """The leader of an election, as the server knows it."""

    note: str
    """The leader's note: what it campaigned with, or proclaimed since."""
    fence: int
    """Its lease's fence: greater than every earlier leader's."""
    held_for: Optional[float] = None
    """Seconds it has led, as `leader()` found it; None where the server
    did not say (the items of `observe`)."""
    holder_id: int = 0
    """The server's id of the leader's connection (as `CLIENT LIST` shows it)."""


class _LeaseLooks(Protocol):
    """What a leadership reads of its lease: `Lease`, or the blocking
    flavour's `SyncLease` (a layer above)."""

    @property
    def key(self) -> str: ...

    @property
    def fence(self) -> int: ...

    @property
    def lost(self) -> bool: ...

    @property
    def error(self) -> Optional[Lost]: ...

    def check(self) -> None: ...


L = TypeVar("L", bound=_LeaseLooks)


class LeadsUnder(Generic[L]):
    """What `Leadership` and its blocking twin `SyncLeadership` share: the
    looks of being the leader, each the lease's it leads under."""

    def __init__(self, lease: L) -> None:
        self.lease = lease
        """The lease it leads under."""

    @property
    def election(self) -> str:
        """The election's name (the lock's key)."""
        return self.lease.key

    @property
    def fence(self) -> int:
        """The leadership's fence: pass it to what the leader writes."""
        return self.lease.fence

    @property
    def lost(self) -> bool:
        """True once the leadership is lost (read from the clock first)."""
        return self.lease.lost

    @property
    def error(self) -> Optional[Lost]:
        """The `Lost` error once lost, with the reason in its text."""
        return self.lease.error

    def check(self) -> None:
        """Raises `Lost` once the leadership is lost."""
        self.lease.check()


class Leadership(LeadsUnder[Lease]):
    """Being the leader: the lease of a campaign that won. `fence`, `note`,
    `lost`, `signal` (set the moment it is lost), `error`, `check()`;
    `proclaim(note)` and `resign()`."""

    def __init__(self, campaign: "Campaign", lease: Lease, note: str) -> None:
        super().__init__(lease)
        self._campaign = campaign
        self.note = note
        """The note the server shows for it (the campaign's, or the last proclaimed)."""

    @property
    def signal(self) -> asyncio.Event:
        """Set the moment the leadership is lost, under the lease's rules."""
        return self.lease.signal

    async def proclaim(self, note: str) -> None:
        """Replaces the leader's note (`NOTE`): observers are told at once.
        `Lost` when the leadership is lost (or was, as the server answers);
        `Invalid` for a note the server refuses, or after `resign` (`lock L:
        key "K": proclaimed after the leadership ended: invalid`)."""
        if not isinstance(note, str):
            raise TypeError(f"a note is a str, not {type(note).__name__}")
        self.lease.check()
        link = self._campaign._link()
        if link is None:
            lock, key = self.lease.lock, self.lease.key
            raise Invalid(key_text("proclaim_ended", lock, key))
        try:
            await link.call("NOTE", self.lease.id, note)
        except Lost as err:
            self.lease._mark_lost(err)
            raise
        except Closed:
            self.lease.check()  # a dropped connection lost the lease first
            raise
        self.note = note

    async def resign(self) -> None:
        """Lets the leadership go now (`RELEASE`); the next campaigner is
        elected. `Lost` if it was lost before (as leaving the block says).
        Leaving the block after it does nothing more. Idempotent."""
        await self._campaign._leave(None)

    def __repr__(self) -> str:
        state = "lost" if self.lease._looks_lost(time.monotonic()) else "leading"
        return f"<Leadership {self.lease.lock}/{self.election} fence={self.fence} {state}>"


class Campaign(AsyncBlock):
    """`async with election.campaign(note) as lead:` waits until elected
    (as long as it takes), then leads for the block; leaving it resigns.
    Leaving it after the leadership was lost raises `Lost`, unless the
    block raised its own error."""

    def __init__(self, election: "Election", note: str, owner: Optional[object] = None) -> None:
        self._election = election
        self._note = note
        self._owner = owner  # who campaigns: the task (None), or a thread (blocking flavour)
        self._hold: Optional[_Hold] = None
        self._done = False
        self._entered = False

    async def __aenter__(self) -> Leadership:
        if self._entered:
            raise RuntimeError("a campaign is entered once; call election.campaign() again")
        self._entered = True
        lock, name = self._election.lock, self._election.name
        while True:
            wait = f"{CAMPAIGN_WAIT_MS}ms"
            hold = lock.hold(name, wait=wait, exclusive=True, note=self._note)
            hold._owner = self._owner
            try:
                lease = await hold.__aenter__()
            except InUse:
                continue  # the wait passed: line up again
            self._hold = hold
            return Leadership(self, lease, self._note)

    async def _leave(self, exc_type: Optional[Type[BaseException]]) -> None:
        """Leaving the block, or resigning before: the hold's release, once."""
        if self._done or self._hold is None:
            return
        self._done = True
        await self._hold._leave(exc_type)

    def _link(self) -> Optional[Link]:
        if self._done or self._hold is None:
            return None
        return self._hold._link


class Election:
    """An election: `lock.election(name)`. Campaign in it, ask who leads,
    or observe who leads as it changes."""

    def __init__(self, lock: _Lock, name: str) -> None:
        self.lock = lock
        """The lock the election's key is in (its ttl is the leaders')."""
        self.name = name
        """The election's name: the key held by its leader."""

    def campaign(self, note: str) -> Campaign:
        """Campaigns with `note` (1 to 1,024 bytes of UTF-8, no control
        characters: the candidate's address, say): `async with` it waits
        until elected, as long as it takes, and leads for the block. A note
        the server refuses fails `Invalid`; a connection that fails, `Closed`."""
        if not isinstance(note, str):
            raise TypeError(f"a note is a str, not {type(note).__name__}")
        return Campaign(self, note)

    async def leader(self) -> Optional[Leader]:
        """The leader now (`INSPECT`), None when nobody leads. Old the
        moment it arrives: for looking on, not for deciding who leads."""
        state = await self.lock.inspect(self.name)
        if state is None or not state.held or not state.holder_list:
            return None
        holder = state.holder_list[0]
        held_for = None if state.held_for_ms is None else state.held_for_ms / 1000
        return Leader(holder.note, holder.fence, held_for, holder.id)

    async def observe(self) -> AsyncGenerator[Optional[Leader], None]:
        """`async for leader in election.observe():` the leader now (None
        when nobody leads), then every change: a `Leader` when one is
        elected or proclaims, None when the leader's lease ends. On a
        dropped or silent connection, or the server's `closed`, it connects
        again and yields the present state again. It ends `Closed` when the
        store closes, and with the server's error for one that is not the
        connection's (`Invalid`: a server without OBSERVE, a lock the user
        may not use; `Limit`: the connection observes 1,000 keys)."""
        lock = self.lock
        router = lock._router
        pause = RETRY_FIRST_S
        while True:
            if router.closed:
                raise router.closed_error(lock.name, self.name)
            watch = _Watch(lock.name, self.name, lock.ttl_ms)
            try:
                await watch.start(self)
            except Closed:
                watch.close()
                if router.closed:
                    raise
                await asyncio.sleep(pause)
                pause = min(pause * 2, RETRY_MOST_S)
                continue
            except BaseException:
                watch.close()
                raise
            began = time.monotonic()
            try:
                current: Optional[int] = None
                while True:
                    items = await watch.next()
                    if items is None:
                        break  # the connection is gone, silent, or observing ended
                    event, fence, holder_id, note = items
                    if event in _HOLDS:
                        current = fence
                        yield Leader(note, fence, None, holder_id)
                    elif event == b"free":
                        current = None
                        yield None
                    elif event in _ENDS and fence == current:
                        current = None
                        yield None
            finally:
                watch.close()
            if time.monotonic() - began < RETRY_MOST_S:
                # Over as soon as it began: a server that keeps ending it is
                # asked again after a pause, not in a tight loop.
                await asyncio.sleep(pause)
                pause = min(pause * 2, RETRY_MOST_S)
            else:
                pause = RETRY_FIRST_S


_Item = Tuple[bytes, int, int, str]
"""An observe push's event, fence, holder id and note."""


class _Watch:
    """One OBSERVE on a connection of its own: its pushes queued, a PING
    every third of the ttl, and the end (a drop, silence, `closed`)."""

    def __init__(self, lock: str, key: str, ttl_ms: int) -> None:
        self._lock = lock
        self._key = key
        self._ttl_ms = ttl_ms
        self._queue: "asyncio.Queue[Optional[_Item]]" = asyncio.Queue()
        self._link: Optional[Link] = None
        self._pool: Optional[Pool] = None
        self._ping: Optional[asyncio.TimerHandle] = None
        self._pings: List[float] = []  # send times of the PINGs not answered yet

    async def start(self, election: Election) -> None:
        """Connects to the node serving the key and observes it there,
        following `MOVED` and `CLUSTERDOWN`."""
        route = election.lock._router.route(self._lock, self._key)
        while True:
            pool = route.pool()
            link = await pool.open_kept()
            self._pool = pool
            self._link = link
            link.on_push = self._pushed
            link.on_drop = self._dropped
            reply = await link.send("OBSERVE", self._lock, self._key).future
            if reply is DROPPED:
                raise Closed(key_text("connection_closed_key", self._lock, self._key))
            if isinstance(reply, RespError) and await route.again(reply):
                link.on_push = link.on_drop = None  # not this watch's end: ask there
                self.close()
                continue
            result(reply)
            break
        self._arm()

    async def next(self) -> Optional[_Item]:
        """The next push's (event, fence, holder id, note); None once over."""
        return await self._queue.get()

    def _pushed(self, items: List[Reply]) -> None:
        if len(items) != 8 or items[0] != b"observe":
            return
        if _text(items[1]) != self._lock or _text(items[2]) != self._key:
            return
        event, fence, holder, note = items[3], items[4], items[6], items[7]
        if not (isinstance(event, bytes) and isinstance(fence, int)):
            return
        holder_id = holder if isinstance(holder, int) else 0
        if event == b"closed":
            self.close()
            return
        self._queue.put_nowait((event, fence, holder_id, _text(note)))

    def _dropped(self) -> None:
        self._queue.put_nowait(None)

    def _arm(self) -> None:
        interval = self._ttl_ms / 3000
        self._ping = asyncio.get_running_loop().call_later(interval, self._beat)

    def _beat(self) -> None:
        link = self._link
        if link is None or link.dropped:
            return
        now = time.monotonic()
        if self._pings and now - self._pings[0] > wait_grace_ms(self._ttl_ms) / 1000:
            self.close()  # silent: connect again
            return
        try:
            pending = link.send("PING", on_reply=self._answered)
        except Closed:
            return
        self._pings.append(pending.sent_at)
        self._arm()

    def _answered(self, reply: Reply, sent_at: float, now: float) -> None:
        if self._pings:
            self._pings.pop(0)

    def close(self) -> None:
        if self._ping is not None:
            self._ping.cancel()
            self._ping = None
        link, self._link = self._link, None
        if link is not None:
            link.close()
            pool = self._pool
            if pool is not None:
                pool.checkin(link)


def _text(value: Reply) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return "" if value is None else str(value)
