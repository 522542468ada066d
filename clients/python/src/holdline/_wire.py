"""One connection to `holdline serve`, read by a task of its own.

redis-py's asyncio `Connection` does the socket, `HELLO 3` (with `AUTH`
when there is a token) and command packing. What it cannot do is deliver a
RESP3 push that arrives while nobody is reading: its parser handles pushes
only in the middle of reading some command's reply. A lease's loss must be
seen the moment the server sends it, so a `Link` reads its connection
without pause from one reader task: each reply goes to the oldest waiting
command (the server answers in order), each push to the lease it names,
and end of file to every lease and command of the link at once.

The reader parses with `_Parser`, a redis-py RESP3 parser whose grammar is
our own: it hands pushes back as `Push` instead of passing them to
redis-py's handlers (whose calling convention changed between redis-py 5
and 8), and turns every error reply into a plain `ResponseError` with its
text whole (redis-py would map some first words to its own exception
classes, some of them connection errors).
"""

import asyncio
from collections import deque
from typing import Any, Callable, Deque, Dict, List, Optional, Union

from redis._parsers import _AsyncRESP3Parser
from redis.asyncio.connection import Connection
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import InvalidResponse, RedisError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from ._errors import Closed, from_reply, text_for


class Push(list):  # type: ignore[type-arg]
    """A RESP3 push (`>`), told apart from a reply that is an array."""


class _Parser(_AsyncRESP3Parser):
    """RESP3 with pushes returned as `Push` and errors kept whole."""

    async def _read_response(
        self, disable_decoding: bool = False, push_request: Optional[bool] = False
    ) -> Any:
        if not self._stream:
            raise RedisConnectionError("the connection is closed")
        raw = await self._readline()
        kind, rest = raw[:1], raw[1:]
        if kind == b"+":
            return rest
        if kind == b"-":
            return ResponseError(rest.decode("utf-8", errors="replace"))
        if kind == b"!":
            blob = await self._read(int(rest))
            return ResponseError(blob.decode("utf-8", errors="replace"))
        if kind in (b":", b"("):
            return int(rest)
        if kind == b"$":
            length = int(rest)
            return None if length < 0 else await self._read(length)
        if kind == b"_":
            return None
        if kind in (b"*", b"~", b">"):
            count = int(rest)
            if count < 0:
                return None
            items = [await self._read_response() for _ in range(count)]
            return Push(items) if kind == b">" else items
        if kind == b"%":
            mapping = {}
            for _ in range(int(rest)):
                field = await self._read_response()
                mapping[field] = await self._read_response()
            return mapping
        if kind == b"|":
            # Attributes annotate the reply that follows; nothing here uses them.
            for _ in range(2 * int(rest)):
                await self._read_response()
            return await self._read_response()
        if kind == b",":
            return float(rest)
        if kind == b"#":
            return rest == b"t"
        if kind == b"=":
            return (await self._read(int(rest)))[4:]
        raise InvalidResponse(f"Protocol Error: {raw!r}")


LossHandler = Callable[[Optional[str]], None]
"""Told a lease's loss: the server's text, or None when the connection dropped."""


class Link:
    """One connection: commands answered in order, pushes the moment they come.

    A link never reconnects: a new socket would hold none of the old one's
    leases, so a dropped link stays dropped and its leases are lost."""

    def __init__(self, conn: Connection, address: str) -> None:
        self._conn = conn
        self.address = address
        self._replies: Deque["asyncio.Future[Any]"] = deque()
        self._losses: Dict[int, LossHandler] = {}
        # Losses pushed before their lease was watched: the push can be read
        # before the task that got the grant runs again.
        self._early_losses: Dict[int, str] = {}
        self._dropped = False
        self._reader = asyncio.ensure_future(self._read_loop())

    @classmethod
    async def open(
        cls, host: str, port: int, token: Optional[str], connect_timeout: Optional[float]
    ) -> "Link":
        """Connects, says `HELLO 3` (and `AUTH` with the token), starts reading."""
        address = f"{host}:{port}"
        conn = Connection(
            host=host,
            port=port,
            password=token,
            protocol=3,
            parser_class=_Parser,
            # No read timeout: a HOLD may wait as long as its WAIT says, and a
            # write with a timeout would go through a task of its own, which
            # could reorder two commands written from two tasks.
            socket_timeout=None,
            socket_connect_timeout=connect_timeout,
            socket_keepalive=True,
        )
        try:
            await conn.connect()  # type: ignore[no-untyped-call]
        except ResponseError as err:
            # A refused HELLO: WRONGPASS for a wrong token, or an error from a
            # server that is not holdline's.
            await conn.disconnect(nowait=True)
            raise from_reply(str(err)) from None
        except (RedisError, OSError) as err:
            raise Closed(
                text_for(None, None, f"cannot connect to {address} ({err})", "closed")
            ) from None
        return cls(conn, address)

    @property
    def dropped(self) -> bool:
        """True once the connection is gone (closed by either side)."""
        return self._dropped

    @property
    def holds_leases(self) -> bool:
        """True while some lease of this link is watched."""
        return bool(self._losses)

    def watch(self, lease_id: int, on_loss: LossHandler) -> None:
        """Tells `on_loss` when lease `lease_id` of this link is lost (at
        once when it already was, or when the link is already gone)."""
        if self._dropped:
            on_loss(None)
        elif lease_id in self._early_losses:
            on_loss(self._early_losses.pop(lease_id))
        else:
            self._losses[lease_id] = on_loss

    def unwatch(self, lease_id: int) -> None:
        self._losses.pop(lease_id, None)
        self._early_losses.pop(lease_id, None)

    async def send(self, *args: Union[str, int, bytes]) -> "asyncio.Future[Any]":
        """Writes a command; answers the future of its reply without waiting for it.

        Every write runs in a task of its own, created here: tasks start in
        the order they were created, so commands reach the server in call
        order, the order their futures stand in `_replies`. The task also
        keeps a cancelled caller from cutting a write in half (redis-py
        closes the socket when that happens)."""
        if self._dropped:
            raise self.closed_error()
        reply = asyncio.get_running_loop().create_future()
        # A caller may stop waiting (cancelled, or a renewal nobody awaits):
        # its error reply is then nobody's to log.
        reply.add_done_callback(_retrieve)
        self._replies.append(reply)
        write = asyncio.ensure_future(self._write(self._conn.pack_command(*args)))
        write.add_done_callback(self._written)
        await asyncio.shield(write)
        return reply

    async def _write(self, packed: List[bytes]) -> None:
        # Checked in the same step as the write: redis-py would reconnect a
        # closed connection, and a new socket holds none of our leases.
        if self._dropped or not self._conn.is_connected:
            raise self.closed_error()
        await self._conn.send_packed_command(packed, check_health=False)

    def _written(self, write: "asyncio.Future[None]") -> None:
        if write.cancelled() or write.exception() is not None:
            self._drop()

    async def call(self, *args: Union[str, int, bytes]) -> Any:
        """Sends a command and answers its reply; an error reply raises."""
        try:
            reply = await self.send(*args)
        except (RedisError, OSError, Closed):
            raise self.closed_error() from None
        return await reply

    def closed_error(self) -> Closed:
        return Closed(text_for(None, None, "the connection to the server closed", "closed"))

    async def _read_loop(self) -> None:
        try:
            while True:
                try:
                    reply = await self._conn.read_response(
                        push_request=True, disconnect_on_error=False
                    )
                except ResponseError as err:
                    reply = err
                if isinstance(reply, Push):
                    self._pushed(reply)
                    continue
                if not self._replies:
                    break  # a reply nobody asked for: the stream is not ours to trust
                waiting = self._replies.popleft()
                if waiting.done():
                    continue  # its caller was cancelled; the reply keeps the order
                if isinstance(reply, ResponseError):
                    waiting.set_exception(from_reply(str(reply)))
                else:
                    waiting.set_result(reply)
        except asyncio.CancelledError:
            pass
        except (RedisError, OSError, ValueError):
            pass  # end of file, a reset, or a frame we cannot read: the link is gone
        finally:
            self._drop()

    def _pushed(self, push: List[Any]) -> None:
        if len(push) >= 3 and push[0] in (b"lost", "lost") and isinstance(push[1], int):
            text = (
                push[2].decode("utf-8", errors="replace")
                if isinstance(push[2], bytes)
                else str(push[2])
            )
            on_loss = self._losses.pop(push[1], None)
            if on_loss is not None:
                on_loss(text)
            else:
                self._early_losses[push[1]] = text

    def _drop(self) -> None:
        """The connection is gone: fail every waiting command, tell every lease."""
        if self._dropped:
            return
        self._dropped = True
        error = self.closed_error()
        while self._replies:
            waiting = self._replies.popleft()
            if not waiting.done():
                waiting.set_exception(error)
        losses, self._losses = self._losses, {}
        for on_loss in losses.values():
            on_loss(None)
        if self._reader is not asyncio.current_task():
            self._reader.cancel()
        asyncio.ensure_future(self._disconnect())

    async def _disconnect(self) -> None:
        try:
            await self._conn.disconnect(nowait=True)
        except (RedisError, RedisTimeoutError, OSError):
            pass

    async def close(self) -> None:
        """Closes the connection: the server lets its keys go and takes its
        waiting HOLDs out of their lines."""
        self._drop()
        await self._disconnect()
        # wait() rather than await: the reader ends cancelled, and that must
        # not read as this caller being cancelled.
        await asyncio.wait([self._reader])


def _retrieve(reply: "asyncio.Future[Any]") -> None:
    if not reply.cancelled():
        reply.exception()
