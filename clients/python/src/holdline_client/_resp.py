"""RESP, the Redis serialisation protocol that `holdline serve` speaks:
commands go out as arrays of bulk strings, replies come in through a
decoder that is fed bytes as they arrive and hands over whole frames only.

Only what holdline's server sends needs decoding, but every RESP3 type is
understood, so that nothing a server adds can desynchronise the stream.
Strings arrive as `bytes`, integers as `int`, nulls as `None`, maps as
`dict`, sets as `list`; an error reply is a `RespError` value (never
raised here) and a push (`>`) a `Push`, so the reader can tell it from a
reply.
"""

import re
from typing import Any, Dict, List, Sequence, Union

Arg = Union[str, int, bytes]
"""One argument of a command: text, a whole number, or raw bytes."""

Reply = Any
"""A decoded reply: bytes, int, float, bool, None, RespError, list or dict."""

MAX_REPLY_BYTES = 64 * 1024 * 1024
"""The largest reply a connection takes unless `connect(max_reply_bytes=)`
says otherwise: a header announcing more fails the stream at once."""

_MAX_DEPTH = 32

_TYPES = b"+-:$*_,#!=(%~>|"
"""The first byte of every RESP2 and RESP3 frame."""

_LENGTH = re.compile(rb"-?[0-9]+")


class RespError:
    """An error reply: `-WORD text`, or a RESP3 bulk error."""

    __slots__ = ("line",)

    def __init__(self, line: str) -> None:
        self.line = line

    @property
    def word(self) -> str:
        """The first word, such as `INUSE` or `NOAUTH`."""
        return self.line.partition(" ")[0]

    @property
    def text(self) -> str:
        """What follows the first word and its space."""
        return self.line.partition(" ")[2]

    def __repr__(self) -> str:
        return f"RespError({self.line!r})"


class Push:
    """A RESP3 push frame: a message the server sends unasked."""

    __slots__ = ("items",)

    def __init__(self, items: List[Reply]) -> None:
        self.items = items

    def __repr__(self) -> str:
        return f"Push({self.items!r})"


class ProtocolFault(Exception):
    """A frame the decoder cannot make sense of: the stream is unusable."""


class NotResp(ProtocolFault):
    """Bytes that are not RESP; `head` holds the first of them (up to 10)."""

    def __init__(self, head: bytes) -> None:
        super().__init__(f"not RESP: {head!r}")
        self.head = head


class TooLarge(ProtocolFault):
    """A header announcing `size` bytes, over the decoder's limit."""

    def __init__(self, size: int) -> None:
        super().__init__(f"a reply of {size} bytes")
        self.size = size


class _Incomplete(Exception):
    """The buffer ends inside a frame: wait for more bytes."""


def encode(args: Sequence[Arg]) -> bytes:
    """A command as a RESP array of bulk strings."""
    parts = [b"*%d\r\n" % len(args)]
    for arg in args:
        if isinstance(arg, bytes):
            data = arg
        elif isinstance(arg, str):
            data = arg.encode("utf-8")
        else:
            data = str(int(arg)).encode("ascii")
        parts.append(b"$%d\r\n%b\r\n" % (len(data), data))
    return b"".join(parts)


class Decoder:
    """Feed it bytes as they arrive; it answers every frame they complete,
    in order. A frame split across reads is decoded again from its start
    once more bytes come (holdline's frames are small).

    Bytes that are not RESP raise `NotResp` as soon as they are seen, a
    header announcing more than `max_reply` bytes (a string's length, or an
    aggregate's count times 3, the fewest its elements take) `TooLarge`
    before any of it is buffered."""

    def __init__(self, max_reply: int = MAX_REPLY_BYTES) -> None:
        self._buffer = bytearray()
        self._pos = 0
        self._start = 0
        """Where the element being read starts."""
        self.max_reply = max_reply

    def feed(self, data: bytes) -> List[Union[Reply, Push]]:
        """The whole frames `data` completes; raises `ProtocolFault` on a bad frame."""
        self._buffer += data
        frames: List[Union[Reply, Push]] = []
        while self._buffer:
            self._pos = 0
            try:
                frame = self._value(0)
            except _Incomplete:
                break
            except (NotResp, TooLarge):
                raise
            except ProtocolFault:
                raise self._garbled() from None
            del self._buffer[: self._pos]
            frames.append(frame)
        return frames

    def _line(self) -> bytes:
        end = self._buffer.find(b"\r\n", self._pos)
        if end < 0:
            if len(self._buffer) > self.max_reply:
                raise TooLarge(len(self._buffer))
            raise _Incomplete
        line = bytes(self._buffer[self._pos : end])
        self._pos = end + 2
        return line

    def _number(self, line: bytes, per_item: int) -> int:
        if _LENGTH.fullmatch(line) is None:
            raise self._garbled()
        value = int(line)
        if value * per_item > self.max_reply:
            raise TooLarge(value * per_item)
        return value

    def _garbled(self) -> NotResp:
        """The bytes of the element being read, from its type byte on."""
        return NotResp(bytes(self._buffer[self._start : self._start + 10]))

    def _bulk(self, length: int) -> bytes:
        end = self._pos + length
        if len(self._buffer) < end + 2:
            raise _Incomplete
        if self._buffer[end : end + 2] != b"\r\n":
            raise NotResp(bytes(self._buffer[end : end + 10]))
        data = bytes(self._buffer[self._pos : end])
        self._pos = end + 2
        return data

    def _items(self, count: int, depth: int) -> List[Reply]:
        items: List[Reply] = []
        for _ in range(count):
            item = self._value(depth + 1)
            if isinstance(item, Push):
                raise ProtocolFault("a push inside an aggregate")
            items.append(item)
        return items

    def _value(self, depth: int) -> Union[Reply, Push]:
        if depth > _MAX_DEPTH:
            raise ProtocolFault("frames nested too deep")
        if self._pos >= len(self._buffer):
            raise _Incomplete
        self._start = self._pos
        kind = bytes(self._buffer[self._pos : self._pos + 1])
        if kind not in _TYPES:
            # Told at once, before any line end arrives.
            raise NotResp(bytes(self._buffer[self._pos : self._pos + 10]))
        self._pos += 1
        line = self._line()
        if kind in (b"+", b"-", b":", b"(", b"_", b"#", b","):
            return _simple(kind, line)
        if kind in (b"$", b"!", b"="):
            length = self._number(line, 1)
            if length < 0:
                return None
            data = self._bulk(length)
            if kind == b"!":
                return RespError(data.decode("utf-8", errors="replace"))
            # A verbatim string starts with its three-letter format and a colon.
            return data[4:] if kind == b"=" else data
        if kind in (b"*", b"~", b">"):
            count = self._number(line, 3)
            if count < 0:
                return None
            items = self._items(count, depth)
            return Push(items) if kind == b">" else items
        if kind in (b"%", b"|"):
            flat = self._items(2 * self._number(line, 6), depth)
            if kind == b"|":
                # Attributes describe the value that follows; nothing here uses them.
                return self._value(depth)
            return _map(flat)
        raise ProtocolFault(f"unknown frame type {kind!r}")


def _simple(kind: bytes, line: bytes) -> Reply:
    """The value of a frame that is its first line only."""
    if kind == b"+":
        return line
    if kind == b"-":
        return RespError(line.decode("utf-8", errors="replace"))
    if kind == b"_":
        return None
    if kind == b"#":
        if line not in (b"t", b"f"):
            raise ProtocolFault(f"bad boolean {line!r}")
        return line == b"t"
    try:
        return float(line) if kind == b"," else int(line)
    except ValueError:
        raise ProtocolFault(f"bad number {line!r}") from None


def _map(flat: List[Reply]) -> Dict[Any, Reply]:
    mapping: Dict[Any, Reply] = {}
    for i in range(0, len(flat), 2):
        field = flat[i]
        if isinstance(field, (list, dict)):
            raise ProtocolFault("a map field that is an aggregate")
        mapping[field] = flat[i + 1]
    return mapping
