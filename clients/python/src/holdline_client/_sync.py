"""The blocking flavour: `with invoices.hold(key) as lease:` on `connect_sync`.

It is the async client run on an event loop in a thread of its own, so the
work inside a `with` block may block as long as it likes: renewals and the
loss signal are served by that thread meanwhile. `lease.signal` is a
`threading.Event`.

A blocking call interrupted in the calling thread (KeyboardInterrupt while
in line) hands the abandoned hold to the loop thread, which cancels it
there (closing its connection, so it leaves the line) or, when the grant
came first, lets the key go.
"""

import abc
import asyncio
import ssl as _ssl
import threading
import time
from typing import (
    Any,
    Awaitable,
    Coroutine,
    Dict,
    Generic,
    Iterator,
    Optional,
    Type,
    TypeVar,
    Union,
)

from ._address import Addresses
from ._blocks import Block
from ._durations import Duration
from ._election import Campaign, Election, Leader, Leadership, LeadsUnder
from ._errors import Lost
from ._inspect import KeyState
from ._lease import Lease
from ._lock import HoldBase, Key, Lock
from ._resp import MAX_REPLY_BYTES
from ._store import DEFAULT_ADDRESS, Store, connect

T = TypeVar("T")


class _LoopThread:
    """An event loop running in a daemon thread."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, name="holdline", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def run(self, coro: Awaitable[T]) -> T:
        """Runs `coro` on the loop and blocks until it answers."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()  # type: ignore[arg-type]

    def run_or_cancel(self, coro: Coroutine[Any, Any, T]) -> T:
        """`run`, cancelling `coro` on the loop when the wait is interrupted
        here (KeyboardInterrupt)."""
        future = asyncio.run_coroutine_threadsafe(coro, self.loop)
        try:
            return future.result()
        except BaseException:
            future.cancel()
            raise

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join()
        self.loop.close()


def connect_sync(
    address: Addresses = DEFAULT_ADDRESS,
    *,
    token: Optional[str] = None,
    user: Optional[str] = None,
    ssl: Optional[_ssl.SSLContext] = None,
    connect_timeout: Optional[Duration] = None,
    max_idle: int = 16,
    max_reply_bytes: int = MAX_REPLY_BYTES,
) -> "SyncStore":
    """`connect`, blocking: a store whose holds are `with` blocks."""
    connecting = connect(
        address,
        token=token,
        user=user,
        ssl=ssl,
        connect_timeout=connect_timeout,
        max_idle=max_idle,
        max_reply_bytes=max_reply_bytes,
    )
    runner = _LoopThread()

    async def opened() -> Store:
        return await connecting

    try:
        store = runner.run(opened())
    except BaseException:
        runner.stop()
        raise
    return SyncStore(store, runner)


class SyncStore(Block):
    """A connected store for threads; open locks on it with `lock`."""

    def __init__(self, store: Store, runner: _LoopThread) -> None:
        self._store = store
        self._runner = runner
        self.address = store.address

    @property
    def closed(self) -> bool:
        return self._store.closed

    def lock(
        self,
        name: str,
        *,
        ttl: Optional[Duration] = None,
        max_hold: Optional[Duration] = None,
        permits: Optional[int] = None,
    ) -> "SyncLock":
        """The lock `name`, as `Store.lock` opens it."""
        lock = self._store.lock(name, ttl=ttl, max_hold=max_hold, permits=permits)
        return SyncLock(self, lock)

    def put(self, lock: str, key: Key, fence: int, row: str, value: Union[str, bytes]) -> None:
        """`Store.put`, blocking."""
        self._runner.run(self._store.put(lock, key, fence, row, value))

    def get(self, row: str) -> Optional[bytes]:
        """`Store.get`, blocking."""
        return self._runner.run(self._store.get(row))

    def stats(self, lock: str) -> Dict[str, int]:
        """`Store.stats`, blocking."""
        return self._runner.run(self._store.stats(lock))

    def close(self) -> None:
        """Closes every connection and stops the loop thread. Idempotent."""
        if self._runner.loop.is_closed():
            return
        self._runner.run(self._store.aclose())
        self._runner.stop()

    def __enter__(self) -> "SyncStore":
        return self

    def _leave(self, exc_type: Optional[Type[BaseException]]) -> None:
        self.close()


class SyncLock:
    """A lock of a `SyncStore`: `hold` and `try_hold` as `with` blocks."""

    def __init__(self, store: SyncStore, lock: Lock) -> None:
        self.store = store
        self.name = lock.name
        self.permits = lock.permits
        self._lock = lock

    def hold(
        self,
        key: Key,
        *,
        wait: Optional[Duration] = None,
        permits: Optional[int] = None,
        exclusive: bool = False,
        note: Optional[str] = None,
    ) -> "SyncHold":
        """`Lock.hold`, blocking: waits in line up to `wait` (default 10 s),
        taking one permit, `permits`, or all of them with `exclusive=True`;
        `note` as `Lock.hold` takes it."""
        hold = self._lock.hold(key, wait=wait, permits=permits, exclusive=exclusive, note=note)
        return SyncHold(self.store, hold)

    def try_hold(
        self,
        key: Key,
        *,
        permits: Optional[int] = None,
        exclusive: bool = False,
        note: Optional[str] = None,
    ) -> "SyncTryHold":
        """`Lock.try_hold`, blocking: the lease is None when its permits do
        not fit now or someone waits."""
        tried = self._lock.try_hold(key, permits=permits, exclusive=exclusive, note=note)
        return SyncTryHold(self.store, tried)

    def election(self, name: str) -> "SyncElection":
        """`Lock.election`, blocking: campaign in `with` blocks."""
        return SyncElection(self.store, self._lock.election(name))

    def inspect(self, key: Key) -> Optional[KeyState]:
        """`Lock.inspect`, blocking."""
        return self.store._runner.run(self._lock.inspect(key))


class SyncLease:
    """A lease for threads: `signal` is a `threading.Event`.

    Its looks (`lost`, `error`, `check()`, `signal`) read the clock from the
    calling thread without acting on the lease there; a lease whose time ran
    out is then lost on the loop thread, which owns it."""

    __slots__ = ("_lease", "_signal", "_loop", "lock", "key", "fence", "permits")

    def __init__(self, lease: Lease) -> None:
        self._lease = lease
        # What the lease is: `Lease`'s, fixed at its grant.
        self.lock = lease.lock
        self.key = lease.key
        self.fence = lease.fence
        self.permits = lease.permits
        """How many of the key's permits this lease holds."""
        self._loop = asyncio.get_running_loop()
        self._signal = threading.Event()
        lease._listeners.append(lambda _error: self._signal.set())
        if lease.lost:
            self._signal.set()

    @property
    def id(self) -> int:
        """The server's id of the lease: a new one once it followed a hand-over."""
        return self._lease.id

    def _look(self) -> bool:
        if not self._lease._looks_lost(time.monotonic()):
            return False
        self._signal.set()
        if self._lease._error is None and not self._loop.is_closed():
            # Lost by the clock: the loop thread, which owns the lease, marks
            # it and closes the connection.
            try:
                self._loop.call_soon_threadsafe(self._lease._look)
            except RuntimeError:
                pass  # the store closed meanwhile, and its loop with it
        return True

    @property
    def signal(self) -> threading.Event:
        """Set the moment the lease is lost."""
        self._look()
        return self._signal

    @property
    def lost(self) -> bool:
        """True once the lease is lost."""
        return self._look()

    @property
    def error(self) -> Optional[Lost]:
        """The `Lost` error once the lease is lost."""
        if not self._look():
            return None
        return self._lease._error or self._lease._silent_error()

    def check(self) -> None:
        """Raises `Lost` once the lease is lost."""
        error = self.error
        if error is not None:
            raise error

    def __repr__(self) -> str:
        return repr(self._lease).replace("<Lease", "<SyncLease", 1)


class _Entry(Block, Generic[T]):
    """A block entered from a thread and carried out on the loop thread:
    what the entering thread stops waiting for (interrupted, or failed) is
    let go there, so nothing stays held or in line."""

    def __init__(self, runner: _LoopThread) -> None:
        self._runner = runner
        self._task: "Optional[asyncio.Task[Optional[T]]]" = None
        self._abandoned = False

    @abc.abstractmethod
    async def _entered(self) -> Optional[T]:
        """On the loop thread: what the block is entered with."""

    @abc.abstractmethod
    async def _let_go(self) -> None:
        """On the loop thread: gives up what `_entered` got."""

    async def _enter_on_loop(self) -> Optional[T]:
        self._task = asyncio.current_task()
        if self._abandoned:
            return None
        return await self._entered()

    def _abandon(self) -> None:
        """On the loop thread: the caller stopped waiting for `_enter_on_loop`."""
        self._abandoned = True
        task = self._task
        if task is None:
            return  # not started: `_enter_on_loop` will see the flag
        if not task.done():
            task.cancel()  # it leaves the line by closing its connection
        elif not task.cancelled() and task.exception() is None and task.result() is not None:
            asyncio.ensure_future(self._letting_go())

    async def _letting_go(self) -> None:
        try:
            await self._let_go()
        except Exception:
            pass

    def _enter_from_thread(self) -> Optional[T]:
        future = asyncio.run_coroutine_threadsafe(self._enter_on_loop(), self._runner.loop)
        try:
            return future.result()
        except BaseException:
            # Interrupted here, or the entry's own error: either way the
            # loop thread makes sure nothing stays held or in line.
            self._runner.loop.call_soon_threadsafe(self._abandon)
            raise


class _SyncHoldBase(_Entry[SyncLease]):
    """What `SyncHold` and `SyncTryHold` share: a hold's block entered and
    left from a thread, carried out on the loop thread."""

    def __init__(self, store: SyncStore, hold: HoldBase) -> None:
        super().__init__(store._runner)
        self._hold = hold

    async def _entered(self) -> Optional[SyncLease]:
        lease = await self._hold._enter()
        # Built on the loop thread, so no loss can slip between the lease's
        # grant and the hook that sets the threading.Event.
        return None if lease is None else SyncLease(lease)

    async def _let_go(self) -> None:
        await self._hold._leave(None)

    def _enter(self) -> Optional[SyncLease]:
        # The holder is the thread that enters (the loop thread's tasks only
        # carry out its commands): a hold it makes inside is `Invalid`.
        self._hold._owner = threading.current_thread()
        return self._enter_from_thread()

    def _leave(self, exc_type: Optional[Type[BaseException]]) -> None:
        self._runner.run(self._hold._leave(exc_type))


class SyncHold(_SyncHoldBase):
    """`with lock.hold(key) as lease:`; see `Hold`."""

    def __enter__(self) -> SyncLease:
        lease = self._enter()
        assert lease is not None  # a waiting hold answers a lease or raises
        return lease


class SyncTryHold(_SyncHoldBase):
    """`with lock.try_hold(key) as lease:`; see `TryHold`."""

    def __enter__(self) -> Optional[SyncLease]:
        return self._enter()


class SyncElection:
    """An election of a `SyncLock`; see `Election`."""

    def __init__(self, store: SyncStore, election: Election) -> None:
        self._store = store
        self._election = election
        self.name = election.name
        """The election's name: the key held by its leader."""

    def campaign(self, note: str) -> "SyncCampaign":
        """`with election.campaign(note) as lead:` waits until elected (as
        long as it takes; KeyboardInterrupt leaves the line), then leads for
        the block; see `Election.campaign`."""
        if not isinstance(note, str):
            raise TypeError(f"a note is a str, not {type(note).__name__}")
        return SyncCampaign(self._store, Campaign(self._election, note))

    def leader(self) -> Optional[Leader]:
        """`Election.leader`, blocking: the leader now, None when nobody leads."""
        return self._store._runner.run(self._election.leader())

    def observe(self) -> "SyncObserver":
        """`for leader in election.observe():` the leader now (None when
        nobody leads), then every change; see `Election.observe`. Each item
        blocks until it comes; `close()` it (or use it as a `with` block)
        to stop observing before the store closes."""
        return SyncObserver(self._store._runner, self._election)


class SyncLeadership(LeadsUnder[SyncLease]):
    """Being the leader, for threads: `signal` is a `threading.Event`; see
    `Leadership`."""

    def __init__(self, runner: _LoopThread, lead: Leadership) -> None:
        super().__init__(SyncLease(lead.lease))
        self._runner = runner
        self._lead = lead

    @property
    def note(self) -> str:
        """The note the server shows for it."""
        return self._lead.note

    @property
    def signal(self) -> threading.Event:
        """Set the moment the leadership is lost."""
        return self.lease.signal

    def proclaim(self, note: str) -> None:
        """`Leadership.proclaim`, blocking."""
        self._runner.run(self._lead.proclaim(note))

    def resign(self) -> None:
        """`Leadership.resign`, blocking."""
        self._runner.run(self._lead.resign())

    def __repr__(self) -> str:
        return repr(self._lead).replace("<Leadership", "<SyncLeadership", 1)


class SyncCampaign(_Entry[SyncLeadership]):
    """`with election.campaign(note) as lead:`; see `Campaign`."""

    def __init__(self, store: SyncStore, campaign: Campaign) -> None:
        super().__init__(store._runner)
        self._campaign = campaign

    async def _entered(self) -> Optional[SyncLeadership]:
        lead = await self._campaign.__aenter__()
        return SyncLeadership(self._runner, lead)

    async def _let_go(self) -> None:
        await self._campaign._leave(None)

    def __enter__(self) -> SyncLeadership:
        self._campaign._owner = threading.current_thread()
        lead = self._enter_from_thread()
        assert lead is not None  # a campaign answers a leadership or raises
        return lead

    def _leave(self, exc_type: Optional[Type[BaseException]]) -> None:
        self._runner.run(self._campaign._leave(exc_type))


class SyncObserver(Block):
    """The leaders of `SyncElection.observe`, one blocking item at a time."""

    def __init__(self, runner: _LoopThread, election: Election) -> None:
        self._runner = runner
        self._leaders = election.observe()
        self._closed = False

    def __iter__(self) -> Iterator[Optional[Leader]]:
        return self

    def __next__(self) -> Optional[Leader]:
        if self._closed:
            raise StopIteration
        try:
            return self._runner.run_or_cancel(self._next())
        except StopAsyncIteration:
            raise StopIteration from None

    async def _next(self) -> Optional[Leader]:
        return await self._leaders.__anext__()

    def close(self) -> None:
        """Stops observing: its connection closes. Idempotent."""
        if self._closed:
            return
        self._closed = True
        if not self._runner.loop.is_closed():
            self._runner.run(self._leaders.aclose())

    def __enter__(self) -> "SyncObserver":
        return self

    def _leave(self, exc_type: Optional[Type[BaseException]]) -> None:
        self.close()
