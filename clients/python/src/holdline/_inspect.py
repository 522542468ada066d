"""What `INSPECT lock key` answers: one key's state on the server, read
without taking part in it (for operators and tests, not for deciding who
holds: the answer is old the moment it arrives)."""

from dataclasses import dataclass
from typing import Any, Dict, Optional

from ._errors import Invalid
from ._resp import Reply


@dataclass(frozen=True)
class KeyHolder:
    """The connection holding a key, as the server knows it."""

    id: int
    """The server's id of the connection (as `CLIENT LIST` shows it)."""
    name: Optional[str]
    """The connection's name (`CLIENT SETNAME`), or None."""
    addr: str
    """The connection's `host:port`, as the server sees it."""
    lease: int
    """The lease's id on that connection."""


@dataclass(frozen=True)
class KeyState:
    """One key of a lock, as `Lock.inspect` finds it."""

    held: bool
    fence: int
    """The fence of the key's latest grant."""
    held_for_ms: Optional[int]
    """How long the current lease has been held; None when not held."""
    lease_left_ms: Optional[int]
    """How long the current lease lives unless renewed; None when not held."""
    waiters: int
    """How many holds wait in the key's line."""
    holder: Optional[KeyHolder]
    """Who holds it; None when nobody does."""


def key_state(reply: Reply) -> Optional[KeyState]:
    """`INSPECT`'s answer as a `KeyState`: None for null (no state kept for
    the key); `Invalid` for anything that is not the server's map."""
    if reply is None:
        return None
    fields = _fields(reply)
    try:
        holder = fields.get("holder")
        return KeyState(
            held=bool(fields["held"]),
            fence=int(fields["fence"]),
            held_for_ms=_ms(fields.get("held_for_ms")),
            lease_left_ms=_ms(fields.get("lease_left_ms")),
            waiters=int(fields["waiters"]),
            holder=None if holder is None else _holder(_fields(holder)),
        )
    except (KeyError, TypeError, ValueError):
        raise Invalid(f"store: INSPECT answered {reply!r}: invalid") from None


def _holder(fields: Dict[str, Any]) -> KeyHolder:
    name = fields.get("name")
    return KeyHolder(
        id=int(fields["id"]),
        name=None if name is None else _text(name),
        addr=_text(fields["addr"]),
        lease=int(fields["lease"]),
    )


def _fields(reply: Reply) -> Dict[str, Any]:
    """A map reply (RESP3), or its flat array form (RESP2), by field name."""
    if isinstance(reply, list) and len(reply) % 2 == 0:
        reply = dict(zip(reply[::2], reply[1::2], strict=True))
    if not isinstance(reply, dict):
        raise Invalid(f"store: INSPECT answered {reply!r}: invalid")
    return {_text(field): value for field, value in reply.items()}


def _ms(value: Reply) -> Optional[int]:
    return None if value is None else int(value)


def _text(value: Reply) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    return str(value)
