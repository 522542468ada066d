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

import asyncio
import threading
from types import TracebackType
from typing import Any, Awaitable, Dict, Optional, Type, TypeVar, Union

from ._durations import Duration, to_ms
from ._lock import Hold, Key, Lease, Lock, key_text
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

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join()
        self.loop.close()


def connect_sync(
    address: str = DEFAULT_ADDRESS,
    *,
    token: Optional[str] = None,
    connect_timeout: Duration = "10s",
    max_idle: int = 16,
) -> "SyncStore":
    """`connect`, blocking: a store whose holds are `with` blocks."""
    runner = _LoopThread()
    try:
        store = runner.run(
            connect(address, token=token, connect_timeout=connect_timeout, max_idle=max_idle)
        )
    except BaseException:
        runner.stop()
        raise
    return SyncStore(store, runner)


class SyncStore:
    """A connected store for threads; open locks on it with `lock`."""

    def __init__(self, store: Store, runner: _LoopThread) -> None:
        self._store = store
        self._runner = runner
        self.address = store.address

    @property
    def closed(self) -> bool:
        return self._store.closed

    def lock(
        self, name: str, *, ttl: Duration = "10s", max_hold: Optional[Duration] = None
    ) -> "SyncLock":
        """The lock `name`, as `Store.lock` opens it."""
        return SyncLock(self, self._store.lock(name, ttl=ttl, max_hold=max_hold))

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
        self._runner.run(self._store.close())
        self._runner.stop()

    def __enter__(self) -> "SyncStore":
        return self

    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        self.close()


class SyncLock:
    """A lock of a `SyncStore`: `hold` and `try_hold` as `with` blocks."""

    def __init__(self, store: SyncStore, lock: Lock) -> None:
        self.store = store
        self.name = lock.name
        self._lock = lock

    def hold(self, key: Key, *, wait: Optional[Duration] = None) -> "SyncHold":
        """`Lock.hold`, blocking: waits in line up to `wait` (default 10 s)."""
        text = key_text(key)
        wait_ms = 10_000 if wait is None else to_ms(wait, "wait", self.name, text)
        return SyncHold(self.store, Hold(self._lock, text, wait_ms))

    def try_hold(self, key: Key) -> "SyncHold":
        """`Lock.try_hold`, blocking: the lease is None when the key is held."""
        return SyncHold(self.store, Hold(self._lock, key_text(key), None))


class SyncLease:
    """A lease for threads: `signal` is a `threading.Event`."""

    __slots__ = ("_lease", "signal")

    def __init__(self, lease: Lease) -> None:
        self._lease = lease
        self.signal = threading.Event()
        """Set the moment the lease is lost."""
        lease._on_loss.append(lambda _error: self.signal.set())
        if lease.lost:
            self.signal.set()

    @property
    def lock(self) -> str:
        return self._lease.lock

    @property
    def key(self) -> str:
        return self._lease.key

    @property
    def fence(self) -> int:
        return self._lease.fence

    @property
    def id(self) -> int:
        return self._lease.id

    @property
    def lost(self) -> bool:
        return self._lease.lost

    @property
    def error(self) -> Any:
        return self._lease.error

    def check(self) -> None:
        """Raises `Lost` once the lease is lost."""
        self._lease.check()

    def __repr__(self) -> str:
        return repr(self._lease).replace("<Lease", "<SyncLease", 1)


class SyncHold:
    """`with lock.hold(key) as lease:`; see `Hold`."""

    def __init__(self, store: SyncStore, hold: Hold) -> None:
        self._runner = store._runner
        self._hold = hold
        self._task: "Optional[asyncio.Task[Optional[SyncLease]]]" = None
        self._abandoned = False

    async def _enter(self) -> Optional[SyncLease]:
        self._task = asyncio.current_task()
        if self._abandoned:
            return None
        lease = await self._hold.__aenter__()
        # Built on the loop thread, so no loss can slip between the lease's
        # grant and the hook that sets the threading.Event.
        return None if lease is None else SyncLease(lease)

    def _abandon(self) -> None:
        """On the loop thread: the caller stopped waiting for `_enter`."""
        self._abandoned = True
        task = self._task
        if task is None:
            return  # not started: `_enter` will see the flag
        if not task.done():
            task.cancel()  # Hold leaves the line by closing its connection
        elif not task.cancelled() and task.exception() is None and task.result() is not None:
            asyncio.ensure_future(self._let_go())

    async def _let_go(self) -> None:
        try:
            await self._hold.__aexit__(None, None, None)
        except Exception:
            pass

    def __enter__(self) -> Optional[SyncLease]:
        # The holder is the thread that enters (the loop thread's tasks only
        # carry out its commands): a hold it makes inside is `Invalid`.
        self._hold._owner = threading.current_thread()
        future = asyncio.run_coroutine_threadsafe(self._enter(), self._runner.loop)
        try:
            return future.result()
        except BaseException:
            # Interrupted here, or the hold's own error: either way the loop
            # thread makes sure nothing stays held or in line.
            self._runner.loop.call_soon_threadsafe(self._abandon)
            raise

    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> bool:
        return self._runner.run(self._hold.__aexit__(exc_type, exc, tb))
