"""One connection to `holdline serve`: commands answered in order, pushes
the moment they come, and the times a lease's clock needs.

A `Link` is an asyncio protocol: the event loop hands it bytes as they
arrive, with no task of its own, so a RESP3 push telling of a lost lease
is seen even while no command waits for a reply. Each reply goes to the
oldest command still waiting (the server answers in order), each push to
the lease it names (`lost`; `moved` by a planned hand-over), and the end
of the connection to every command and lease of the link at once.

For the leases held on it, a link tells each watcher when a command was
answered: the time it was sent (the server renews a connection's leases
when it reads a command, so an answer shows the server read it after that
time) and the time the answer is being handled (before anything else of
that answer happens, so that a lease whose time ran out is lost first).

A link never reconnects: a new socket would hold none of the old one's
leases, so a dropped link stays dropped and its leases are lost.
"""

import asyncio
import re
import ssl
import time
from collections import deque
from typing import Callable, Deque, Dict, List, Optional, Protocol, cast

from ._address import Address, Auth
from ._errors import Closed, Invalid, from_reply, show_key
from ._resp import (
    MAX_REPLY_BYTES,
    Arg,
    Decoder,
    NotResp,
    ProtocolFault,
    Push,
    Reply,
    RespError,
    TooLarge,
    encode,
)
from ._texts import show_ms, text


class _Dropped:
    """The reply of a command whose connection closed before it was answered."""

    def __repr__(self) -> str:
        return "DROPPED"


DROPPED = _Dropped()

ReplyHook = Callable[[Reply, float, float], None]
"""Told a command's reply as it is handled: (reply, sent_at, now)."""


class Watcher(Protocol):
    """A lease held on a link, told what happens on it."""

    def _answered(self, sent_at: float, now: float) -> None:
        """A command sent at `sent_at` is answered; `now` is the clock."""

    def _pushed_loss(self, text: str) -> None:
        """The server pushed the lease's loss, with the core's text."""

    def _dropped(self) -> None:
        """The connection is gone."""

    def _moved(self, where: str) -> None:
        """The lease moved to the node at `where` (`host:port`): a planned
        hand-over (the `moved` push, or `MOVED` to its RENEW or RELEASE)."""


class Pending:
    """A command sent and not answered yet."""

    __slots__ = ("future", "sent_at", "on_reply")

    def __init__(
        self, future: "asyncio.Future[Reply]", sent_at: float, on_reply: Optional[ReplyHook]
    ) -> None:
        self.future = future
        self.sent_at = sent_at
        self.on_reply = on_reply


class Link(asyncio.Protocol):
    """One connection: commands answered in order, pushes the moment they come."""

    def __init__(self, address: Address, max_reply: int = MAX_REPLY_BYTES) -> None:
        self.address = address
        self._transport: Optional[asyncio.Transport] = None
        self._decoder = Decoder(max_reply)
        self.fault: Optional[str] = None
        """Why the server's bytes were given up (`not_resp`, `reply_too_large`)."""
        self._pending: Deque[Pending] = deque()
        self._watchers: Dict[int, Watcher] = {}
        self._dropped = False
        self.unasked: Reply = None
        self.handover = False
        """True when the server's `HELLO` said `handover` = 1: it can hand
        leases over and take them (`SECRET`, `REATTACH`)."""
        self.lost_to: Optional[Exception] = None
        """What ended the connection, when the event loop said (a TLS alert)."""
        self.first_bytes = b""
        """The first two bytes heard (a TLS record starts 0x15 or 0x16, 0x03)."""
        self.on_lost: Optional[Callable[[], None]] = None
        """Called once the connection ended without this side closing it
        (the server closed it, reset, the network failed)."""
        self.on_push: Optional[Callable[[List[Reply]], None]] = None
        """Told every push that is not a lease's `lost` (an `observe` push),
        its items as decoded, the moment it is read."""
        self.on_drop: Optional[Callable[[], None]] = None
        """Called once when the connection ends, whichever side ended it."""
        self._gone: "asyncio.Future[None]" = asyncio.get_running_loop().create_future()

    # The event loop's side.

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        now = time.monotonic()
        if not self.first_bytes:
            self.first_bytes = data[:2]
        try:
            frames = self._decoder.feed(data)
        except ProtocolFault as fault:
            self.fault = self._fault_text(fault)
            self.close()
            return
        for frame in frames:
            if self._dropped:
                return
            if isinstance(frame, Push):
                self._pushed(frame.items)
            elif not self._pending:
                # A reply nobody asked for: the stream is not ours to trust.
                # (A server at its connection limit says so unasked, then
                # closes: kept for `open_link` to tell.)
                self.unasked = frame
                self.close()
            else:
                self._answer(self._pending.popleft(), frame, now)

    def _fault_text(self, fault: ProtocolFault) -> str:
        hostport = self.address.hostport
        if isinstance(fault, TooLarge):
            size, limit = str(fault.size), str(self._decoder.max_reply)
            return text("reply_too_large", hostport=hostport, size=size, limit=limit)
        head = fault.head if isinstance(fault, NotResp) else b""
        shown = show_key(head[:10].decode("utf-8", "replace"))
        return text("not_resp", hostport=hostport, bytes=shown)

    def _answer(self, pending: Pending, reply: Reply, now: float) -> None:
        # Leases first: one whose time ran out before this answer was in hand
        # is lost (and the link closed) before the answer can renew it.
        for watcher in list(self._watchers.values()):
            watcher._answered(pending.sent_at, now)
        if self._dropped:
            _settle(pending.future, DROPPED)
            return
        if pending.on_reply is not None:
            pending.on_reply(reply, pending.sent_at, now)
        _settle(pending.future, reply)

    def _pushed(self, items: List[Reply]) -> None:
        if len(items) >= 3 and items[0] == b"lost" and isinstance(items[1], int):
            watcher = self._watchers.get(items[1])
            if watcher is not None:
                note = items[2]
                shown = note.decode("utf-8", "replace") if isinstance(note, bytes) else str(note)
                watcher._pushed_loss(shown)
            return
        if len(items) >= 4 and items[0] == b"moved" and isinstance(items[1], int):
            # ["moved", lease, slot, "host:port"]: a hand-over moved the lease.
            watcher = self._watchers.get(items[1])
            where = items[3]
            if watcher is not None and isinstance(where, bytes):
                watcher._moved(where.decode("utf-8", "replace"))
            return
        if self.on_push is not None:
            self.on_push(items)

    def eof_received(self) -> Optional[bool]:
        return False  # close our side too

    def connection_lost(self, exc: Optional[Exception]) -> None:
        self.lost_to = exc
        cut = not self._dropped  # not closed by this side first
        self._drop()
        _settle(self._gone, None)
        if cut and self.on_lost is not None:
            self.on_lost()

    # The client's side.

    @property
    def dropped(self) -> bool:
        """True once the connection is gone (closed by either side)."""
        return self._dropped

    @property
    def writable(self) -> bool:
        """True while a command can be sent: connected, and not closing."""
        transport = self._transport
        return not self._dropped and transport is not None and not transport.is_closing()

    @property
    def holds_leases(self) -> bool:
        """True while some lease of this link is watched."""
        return bool(self._watchers)

    def watch(self, lease_id: int, watcher: Watcher) -> None:
        """Tells `watcher` what happens to lease `lease_id` of this link."""
        if self._dropped:
            watcher._dropped()
        else:
            self._watchers[lease_id] = watcher

    def unwatch(self, lease_id: int) -> None:
        self._watchers.pop(lease_id, None)

    def send(self, *args: Arg, on_reply: Optional[ReplyHook] = None) -> Pending:
        """Writes a command at once (calls are sent in call order) and answers
        its pending reply; `Closed` when the connection is gone.

        The future's result is the reply (an error reply as a `RespError`
        value), or `DROPPED`; it never holds an exception, so a reply that
        nobody awaits (a renewal's) is never reported as unhandled."""
        transport = self._transport
        if not self.writable or transport is None:
            raise closed_error()
        pending = Pending(asyncio.get_running_loop().create_future(), time.monotonic(), on_reply)
        self._pending.append(pending)
        transport.write(encode(args))
        return pending

    async def call(self, *args: Arg) -> Reply:
        """Sends a command and answers its reply; an error reply raises its kind."""
        return result(await self.send(*args).future)

    def close(self) -> None:
        """Closes the connection at once: the server lets its keys go and
        takes its waiting HOLDs out of their lines; every waiting command
        answers `DROPPED` and every watched lease is told."""
        if self._transport is not None:
            self._transport.abort()
        self._drop()

    async def wait_closed(self, timeout: float = 1.0) -> None:
        """Waits (a little) for the event loop to let the socket go."""
        await asyncio.wait([self._gone], timeout=timeout)

    def _drop(self) -> None:
        if self._dropped:
            return
        self._dropped = True
        while self._pending:
            _settle(self._pending.popleft().future, DROPPED)
        watchers, self._watchers = self._watchers, {}
        for watcher in watchers.values():
            watcher._dropped()
        if self.on_drop is not None:
            self.on_drop()


def result(reply: Reply) -> Reply:
    """A reply as a caller takes it: an error reply raises its kind, a
    dropped connection `Closed`."""
    if reply is DROPPED:
        raise closed_error()
    if isinstance(reply, RespError):
        raise from_reply(reply.line)
    return reply


def closed_error() -> Closed:
    return Closed(text("connection_closed"))


def _settle(future: "asyncio.Future[Reply]", value: Reply) -> None:
    if not future.done():
        future.set_result(value)


async def open_link(
    address: Address,
    auth: Optional[Auth],
    timeout_ms: int,
    tls: Optional[ssl.SSLContext],
    max_reply: int = MAX_REPLY_BYTES,
) -> Link:
    """Connects (over TLS given `tls`) and says `HELLO 3` (with `AUTH USER
    TOKEN` given a user and token), all within `timeout_ms`. A server that wants a
    token, or refuses the one given, fails here (`Invalid`), as does a TLS
    handshake (`Closed`), never at the first hold; so does a server that is
    not holdline (`not_holdline`, `Invalid`), one that sends what is not
    RESP (`not_resp`) and one announcing a reply over `max_reply` bytes
    (`reply_too_large`, both `Closed`)."""
    loop = asyncio.get_running_loop()
    deadline = time.monotonic() + timeout_ms / 1000
    silent = Closed(text("connect_silent", hostport=address.hostport, timeout=show_ms(timeout_ms)))
    try:
        _, link = await asyncio.wait_for(
            loop.create_connection(
                lambda: Link(address, max_reply), address.host, address.port, ssl=tls
            ),
            timeout_ms / 1000,
        )
    except asyncio.TimeoutError:
        raise silent from None
    except ssl.SSLError as err:
        raise tls_failed(address, err) from None
    except OSError as err:
        reason = err.strerror or str(err) or type(err).__name__
        raise Closed(text("cannot_connect", hostport=address.hostport, reason=reason)) from None
    try:
        hello: List[Arg] = ["HELLO", "3"]
        if auth is not None:
            hello += ["AUTH", auth[0], auth[1]]
        reply: Reply = DROPPED
        if link.writable:
            pending = link.send(*hello)
            await asyncio.wait([pending.future], timeout=max(0.0, deadline - time.monotonic()))
            if not pending.future.done():
                raise silent
            reply = pending.future.result()
        else:
            # Closing already (a TLS alert read with the handshake): the
            # event loop's word on why comes with the end of the connection.
            await link.wait_closed(max(0.0, deadline - time.monotonic()))
        if reply is DROPPED:
            reply = _why_dropped(link, address, tls)
        link.handover = _check_hello(reply, address)
    except BaseException:
        link.close()
        raise
    return link


def _why_dropped(link: Link, address: Address, tls: Optional[ssl.SSLContext]) -> Reply:
    """Why a connection closed before it answered `HELLO`: a refusal the
    server sent unasked (at its connection limit), a TLS alert, TLS heard on
    a plain connection; `DROPPED` when nothing tells."""
    if isinstance(link.unasked, RespError):
        return link.unasked
    if isinstance(link.lost_to, ssl.SSLError):
        # With TLS 1.3 a server that refuses this client's certificate (or
        # its lack of one) says so after the handshake, as an alert.
        raise tls_failed(address, link.lost_to)
    if tls is None and link.first_bytes in (b"\x15\x03", b"\x16\x03"):
        # A TLS server answers plain text with an alert record.
        reason = "the server speaks TLS: connect with rediss:// or ssl="
        raise Closed(text("tls_failed", hostport=address.hostport, reason=reason))
    if link.fault is not None:
        raise Closed(link.fault)
    return DROPPED


def tls_failed(address: Address, err: ssl.SSLError) -> Closed:
    """A TLS handshake that failed, in OpenSSL's words without its codes:
    `[SSL: CODE] words (_ssl.c:123)` says `words`."""
    words = _SSL_CODES.sub("", str(err)).strip() or err.reason or type(err).__name__
    return Closed(text("tls_failed", hostport=address.hostport, reason=words))


_SSL_CODES = re.compile(r"^\[[^\]]*\]|\(_ssl\.c:\d+\)$")


def _check_hello(reply: Reply, address: Address) -> bool:
    """`HELLO`'s answer: a map, or a refusal of the token or the connection.
    Answers whether the server can hand leases over (`handover` = 1)."""
    if isinstance(reply, RespError):
        if reply.word == "NOAUTH":
            raise Invalid(text("token_missing"))
        if reply.word == "WRONGPASS":
            raise Invalid(text("token_refused"))
        raise Closed(text("connect_refused", hostport=address.hostport, reason=reply.line))
    if reply is DROPPED:
        raise closed_error()
    return _check_server(reply, address).get(b"handover") == 1


def _check_server(reply: Reply, address: Address) -> Dict[Reply, Reply]:
    """`HELLO`'s answer (a map, or RESP2's flat array) names the server:
    another than holdline fails `not_holdline`, with its name and version.
    Answers the map's fields."""
    fields: Dict[Reply, Reply] = {}
    if isinstance(reply, dict):
        fields = reply
    elif isinstance(reply, list):
        pairs = range(0, len(reply) - 1, 2)
        fields = {reply[i]: reply[i + 1] for i in pairs if isinstance(reply[i], bytes)}
    server = _shown(fields.get(b"server"))
    if server == "holdline":
        return fields
    if server is None:
        raise Invalid(text("not_holdline_unnamed", hostport=address.hostport))
    version = _shown(fields.get(b"version"))
    named = server if version is None else f"{server} {version}"
    raise Invalid(text("not_holdline", hostport=address.hostport, server=named))


def _shown(value: Reply) -> Optional[str]:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else None
