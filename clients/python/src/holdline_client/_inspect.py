"""What `INSPECT lock key` answers: one key's state on the server, read
without taking part in it (for operators and tests, not for deciding who
holds: the answer is old the moment it arrives)."""

from dataclasses import dataclass
from typing import Any, Dict, Optional, Tuple

from ._errors import Invalid
from ._resp import Reply


@dataclass(frozen=True)
class KeyHolder:
    """A lease holding a key and its connection, as the server knows them."""

    id: int
    """The server's id of the connection (as `CLIENT LIST` shows it)."""
    name: Optional[str]
    """The connection's name (`CLIENT SETNAME`), or None."""
    addr: str
    """The connection's `host:port`, as the server sees it."""
    lease: int
    """The lease's id on that connection."""
    fence: int = 0
    """The lease's fence (a server before permits does not say: the key's)."""
    permits: int = 1
    """How many of the key's permits the lease holds."""
    note: str = ""
    """The lease's note (`hold(..., note=)`, `NOTE`); empty when it has none."""


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
    """Who holds it (the oldest grant of those holding it); None when nobody does."""
    holders: int = 0
    """How many leases hold the key (more than one only with permits)."""
    permits_held: int = 0
    """How many of the key's permits those leases hold in all."""
    holder_list: Tuple[KeyHolder, ...] = ()
    """Every lease holding the key, oldest grant first."""


def key_state(reply: Reply) -> Optional[KeyState]:
    """`INSPECT`'s answer as a `KeyState`: None for null (no state kept for
    the key); `Invalid` for anything that is not the server's map."""
    if reply is None:
        return None
    fields = _fields(reply)
    try:
        fence = int(fields["fence"])
        found = fields.get("holder")
        holder = None if found is None else _holder(_fields(found), fence)
        # A server before permits says neither count nor list: its one holder.
        listed = fields.get("holder_list")
        if listed is None:
            holder_list: Tuple[KeyHolder, ...] = () if holder is None else (holder,)
        else:
            holder_list = tuple(_holder(_fields(each), fence) for each in listed)
        holders = int(fields.get("holders", len(holder_list)))
        return KeyState(
            held=bool(fields["held"]),
            fence=fence,
            held_for_ms=_ms(fields.get("held_for_ms")),
            lease_left_ms=_ms(fields.get("lease_left_ms")),
            waiters=int(fields["waiters"]),
            holder=holder,
            holders=holders,
            permits_held=int(fields.get("permits_held", holders)),
            holder_list=holder_list,
        )
    except (KeyError, TypeError, ValueError, Invalid):
        raise Invalid(f"store: INSPECT answered {reply!r}: invalid") from None


def _holder(fields: Dict[str, Any], fence: int) -> KeyHolder:
    """One holder's map; `fence` (the key's) stands in for a server that
    does not give the holder's own."""
    name = fields.get("name")
    return KeyHolder(
        id=int(fields["id"]),
        name=None if name is None else _text(name),
        addr=_text(fields["addr"]),
        lease=int(fields["lease"]),
        fence=int(fields.get("fence", fence)),
        permits=int(fields.get("permits", 1)),
        note=_text(fields.get("note", b"")),
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
