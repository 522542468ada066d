"""The lease a hold runs under: its key, its fence, its loss signal, and
the clock that keeps it honest across a network.

The clock. The server keeps a lease at least a ttl past the last command
it read on the lease's connection, and an answer shows it read the
command after the command was sent. So a lease is held here until
`t + ttl - margin`, `t` being the send time of the last command answered
on its connection, the margin (max(10ms, ttl/10)) covering a late timer.
Past that the server may already have given the key to the next in line:
the lease is lost, whatever arrives later, its connection is closed (a
server that comes back then lets the key go at once), and the hold
answers `Lost` ("the server answered nothing for its ttl"). A timer fires
the loss on time; and since a stopped process runs no timer, `lost`,
`error`, `check()` and `signal` each read the clock first, so the first
look after a stall already answers lost.

Only an answer handled before the lease's time ran out moves `t`: the
server read that command while it still held the lease. A grant handled
too late to tell whether the lease outlived its trip home is held only
once a `RENEW` sent after it is answered `OK` in time.

A planned hand-over (`_follow`). Once told its lease moved (the `moved`
push, or `MOVED` to a RENEW or RELEASE), the lease stops counting answers
of its old connection and stops renewing there; a task sends `REATTACH`
to the node named, until the lease's deadline. Its answer `[lease, fence]`
moves the lease onto the new connection under the new id: `t` is the
REATTACH's send time (the deadline never moves back), the renewals go on
there, the signal stays clear and the fence is the same. No answer in
time, or `LOST`, loses the lease (`reattach_failed`).
"""

import asyncio
import math
import time
from typing import Awaitable, Callable, List, Optional, Tuple

from ._address import Address, parse_node
from ._errors import Closed, Lost, text_for
from ._resp import Reply, RespError
from ._texts import key_text, lost_margin_ms, show_ms
from ._wire import Link

Follow = Callable[[Address, float], Awaitable[Optional[Tuple[Link, int, float, float]]]]
"""Re-attaches a lease that moved to the node at the address, until the
deadline given (monotonic): its new connection, id there, the REATTACH's
send time and when its answer was handled; None when it could not."""

_HELD, _RELEASED = "held", "released"


class Lease:
    """The lease a hold runs under: `key`, `fence`, `permits`, `lost`, `signal`."""

    __slots__ = (
        "lock",
        "key",
        "fence",
        "id",
        "permits",
        "_ttl_ms",
        "_window",
        "_link",
        "_store_closed",
        "_loop",
        "_deadline",
        "_confirmed",
        "_state",
        "_error",
        "_signal",
        "_listeners",
        "_settled",
        "_timer",
        "_renewal",
        "_follow",
        "_moving",
    )

    def __init__(
        self,
        lock: str,
        key: str,
        fence: int,
        lease_id: int,
        ttl_ms: int,
        link: Link,
        granted: Tuple[float, float],
        store_closed: Callable[[], bool],
        permits: int = 1,
        follow: Optional[Follow] = None,
    ) -> None:
        """Made as the grant is handled: `granted` is (the HOLD's send time,
        the time its answer is handled). `follow` re-attaches it after a
        planned hand-over (a lease held with a secret); None: it cannot."""
        self.lock = lock
        """The lock's name."""
        self.key = key
        """The key as text."""
        self.fence = fence
        """The fencing token: greater than every earlier grant's of this key."""
        self.id = lease_id
        """The server's id of the lease (its connection's to renew and release)."""
        self.permits = permits
        """How many of the key's permits this lease holds (the lock's count
        for an exclusive hold; 1 for a lock of one permit)."""
        self._ttl_ms = ttl_ms
        self._window = (ttl_ms - lost_margin_ms(ttl_ms)) / 1000
        self._link = link
        self._store_closed = store_closed
        self._loop = asyncio.get_running_loop()
        self._state = _HELD
        self._error: Optional[Lost] = None
        self._signal = asyncio.Event()
        self._listeners: List[Callable[[Lost], None]] = []
        self._settled: "asyncio.Future[None]" = self._loop.create_future()
        self._timer: Optional[asyncio.TimerHandle] = None
        self._renewal: Optional[asyncio.TimerHandle] = None
        self._follow = follow
        self._moving: "Optional[asyncio.Task[None]]" = None
        sent_at, now = granted
        self._confirmed = now < sent_at + self._window
        self._deadline = sent_at + self._window if self._confirmed else math.inf
        if self._confirmed:
            self._settled.set_result(None)
        link.watch(lease_id, self)
        if not self._confirmed or now - sent_at > self._ttl_ms / 3000:
            self._renew()  # the proof is old: renew (or confirm) at once
        else:
            self._renewal = self._loop.call_later(self._ttl_ms / 3000, self._renew)
        self._arm()

    # What users look at: each reads the clock first.

    @property
    def lost(self) -> bool:
        """True once the lease is lost."""
        return self._look()

    @property
    def error(self) -> Optional[Lost]:
        """The `Lost` error once the lease is lost, with the reason in its text."""
        self._look()
        return self._error

    @property
    def signal(self) -> asyncio.Event:
        """Set the moment the lease is lost: the server's push, a `LOST`
        answer to a renewal, the connection dropping, or the clock."""
        self._look()
        return self._signal

    def check(self) -> None:
        """Raises `Lost` once the lease is lost; a cheap check inside long work."""
        if self._look():
            assert self._error is not None
            raise self._error

    def __repr__(self) -> str:
        if self._looks_lost(time.monotonic()):
            state = "lost"
        else:
            state = self._state
        permits = "" if self.permits == 1 else f" permits={self.permits}"
        return f"<Lease lock={self.lock} key={self.key!r} fence={self.fence}{permits} {state}>"

    # What the link tells (the `Watcher` side), then what the hold, the
    # blocking flavour and the tests use: internal, hence the underscores.

    def _answered(self, sent_at: float, now: float) -> None:
        if not self._look(now) and self._confirmed:
            self._deadline = max(self._deadline, sent_at + self._window)

    def _pushed_loss(self, text: str) -> None:
        if not self._look():
            self._lose(Lost(text))

    def _dropped(self) -> None:
        if self._state != _HELD or self._look():
            return
        if self._store_closed():
            why = text_for(self.lock, self.key, "its store closed", "lost")
        else:
            why = key_text("lost_connection", self.lock, self.key)
        self._lose(Lost(why))

    def _moved(self, where: str) -> None:
        """A hand-over moved the lease to the node at `where`: from now on
        the old connection's answers count for nothing, and a task follows
        the lease there."""
        if self._state != _HELD or self._moving is not None or self._look():
            return
        address = parse_node(where)
        if self._follow is None or address is None:
            self._lose(Lost(key_text("reattach_failed", self.lock, self.key)))
            return
        self._stop_renewing()
        self._link.unwatch(self.id)
        until = self._deadline if self._deadline != math.inf else time.monotonic() + self._window
        self._moving = self._loop.create_task(self._reattach(self._follow, address, until))

    async def _reattach(self, follow: Follow, where: Address, until: float) -> None:
        attached = None
        try:
            attached = await follow(where, until)
        except Exception:
            attached = None
        if self._error is not None or self._state != _HELD:
            if attached is not None:
                attached[0].close()  # lost or let go meanwhile: the new node lets it go
            return
        if attached is None:
            self._lose(Lost(key_text("reattach_failed", self.lock, self.key)))
            return
        link, lease_id, sent_at, now = attached
        if self._look(now):  # the answer came after the deadline: it moves nothing
            link.close()
            return
        self._link, self.id = link, lease_id
        floor = self._deadline if self._confirmed else -math.inf
        self._deadline = max(floor, sent_at + self._window)
        if not self._confirmed:
            self._confirmed = True
            self._settled.set_result(None)
        self._moving = None
        link.watch(lease_id, self)
        self._arm()
        if now - sent_at > self._ttl_ms / 3000:
            self._renew()
        else:
            self._renewal = self._loop.call_later(self._ttl_ms / 3000, self._renew)

    async def _moved_wait(self) -> None:
        """Returns once a move under way is over: re-attached, or lost."""
        moving = self._moving
        if moving is not None and moving is not asyncio.current_task():
            await asyncio.wait([moving])

    def _looks_lost(self, now: float) -> bool:
        """Whether the lease is lost, the clock included, without acting on
        it (safe from any thread)."""
        if self._error is not None:
            return True
        return self._state == _HELD and now >= self._deadline

    def _silent_error(self) -> Lost:
        """The error of a lease whose time ran out."""
        if self._moving is not None:
            return Lost(key_text("reattach_failed", self.lock, self.key))
        text = key_text("lost_silent", self.lock, self.key, ttl=show_ms(self._ttl_ms))
        return Lost(text)

    async def _settled_wait(self) -> None:
        """Returns once a late grant is confirmed by a renewal, or the lease is lost."""
        await self._settled

    def _stop_renewing(self) -> None:
        if self._renewal is not None:
            self._renewal.cancel()
            self._renewal = None

    def _end(self) -> None:
        """The hold let the key go (or gave up on it): the clock stops. (A
        release answered OK was read while the server still held the lease.)"""
        self._state = _RELEASED
        self._cancel_move()
        self._stop_renewing()
        self._disarm()
        self._link.unwatch(self.id)

    def _mark_lost(self, error: Lost) -> None:
        """Marks the lease lost with `error` unless it already is."""
        if not self._look():
            self._lose(error)

    # The clock and the renewals.

    def _look(self, now: Optional[float] = None) -> bool:
        """True once lost; loses the lease here when its time ran out."""
        if self._error is not None:
            return True
        if self._state != _HELD:
            return False
        if (time.monotonic() if now is None else now) < self._deadline:
            return False
        self._lose(self._silent_error())
        self._link.close()
        return True

    def _lose(self, error: Lost) -> None:
        if self._error is not None:
            return
        self._error = error
        self._cancel_move()
        self._stop_renewing()
        self._disarm()
        self._signal.set()
        if not self._settled.done():
            self._settled.set_result(None)
        for tell in self._listeners:
            tell(error)

    def _cancel_move(self) -> None:
        moving, self._moving = self._moving, None
        if moving is not None and moving is not asyncio.current_task():
            moving.cancel()

    def _renew(self) -> None:
        self._renewal = None
        if self._state != _HELD or self._moving is not None:
            return
        if self._look() or self._link.dropped:
            return
        link = self._link

        def renewed(reply: Reply, sent_at: float, now: float) -> None:
            if link is self._link:  # not a connection the lease moved away from
                self._renewed(reply, sent_at, now)

        try:
            pending = link.send("RENEW", self.id, on_reply=renewed)
        except Closed:
            return  # the link is going: its drop tells the lease
        if not self._confirmed and self._deadline == math.inf:
            # A late grant is held only if this RENEW is answered in time.
            self._deadline = pending.sent_at + self._window
            self._arm()
        self._renewal = self._loop.call_later(self._ttl_ms / 3000, self._renew)

    def _renewed(self, reply: Reply, sent_at: float, now: float) -> None:
        if self._error is not None or self._state != _HELD or self._moving is not None:
            return
        if isinstance(reply, RespError):
            if reply.word == "LOST":
                self._lose(Lost(reply.text))
            elif reply.word == "MOVED":
                self._moved(reply.text.partition(" ")[2])
            return
        # `answered` checked the clock already: the server held the lease
        # when it read this RENEW, and renewed it then.
        floor = self._deadline if self._confirmed else -math.inf
        self._deadline = max(floor, sent_at + self._window)
        if not self._confirmed:
            self._confirmed = True
            self._settled.set_result(None)

    def _arm(self) -> None:
        self._disarm()
        if self._state == _HELD and self._error is None and self._deadline != math.inf:
            delay = max(0.0, self._deadline - time.monotonic())
            self._timer = self._loop.call_later(delay, self._on_timer)

    def _disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _on_timer(self) -> None:
        self._timer = None
        if not self._look():
            self._arm()  # answers moved the deadline on
