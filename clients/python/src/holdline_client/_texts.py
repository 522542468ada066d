"""The texts this client writes itself, the same byte for byte in every
holdline client (Rust, Python, TypeScript, Go).

`TEXTS` is a copy of the table in the repository's `clients/texts.json`,
which this package cannot read at run time (it is not installed with it);
the tests compare the two. Placeholders are `str.format` fields: `{address}`
an address as the caller wrote it, shown as a key is shown; `{user}` a
user name, shown the same way; `{hostport}` the `host:port` dialled (an
IPv6 host in brackets); `{reason}` the platform's own words; `{lock}` a
lock name; `{key}` a key shown quoted; `{ttl}`, `{wait}`, `{timeout}`
durations as `show_ms` writes them; `{slot}` a slot number in decimal;
`{server}` the name and version a `HELLO` answer gave; `{bytes}` the first
bytes (at most 10) that are not RESP, shown as a key is shown; `{size}` and
`{limit}` byte counts in decimal.
"""

from typing import Dict

from ._errors import show_key

TEXTS: Dict[str, str] = {
    "bad_address": (
        "store: bad address {address}: expected host, host:port, [ipv6]:port "
        "or redis[s]://[[user]:token@]host[:port]: invalid"
    ),
    "bad_user": (
        "store: bad user name {user}: expected 1 to 64 ASCII letters, digits or _-.:@: invalid"
    ),
    "user_without_token": "store: the user {user} was given without a token: invalid",
    "cannot_connect": "store: cannot connect to {hostport} ({reason}): closed",
    "connect_silent": "store: the server at {hostport} answered nothing for {timeout}: closed",
    "not_holdline": "store: the server at {hostport} is {server}, not holdline: invalid",
    "not_holdline_unnamed": "store: the server at {hostport} is not holdline: invalid",
    "not_resp": (
        "store: the server at {hostport} answered with something that is not RESP ({bytes}): closed"
    ),
    "reply_too_large": (
        "store: the server at {hostport} announced a reply of {size} bytes, "
        "over the limit of {limit}: closed"
    ),
    "token_missing": "store: the server wants a token: invalid",
    "token_refused": "store: the server refused the token: invalid",
    "connect_refused": (
        "store: the server at {hostport} refused the connection ({reason}): closed"
    ),
    "tls_failed": "store: TLS with {hostport} failed ({reason}): closed",
    "connection_closed": "store: the connection to the server closed: closed",
    "connection_closed_key": (
        "lock {lock}: key {key}: the connection to the server closed: closed"
    ),
    "lost_connection": (
        "lock {lock}: key {key}: the lease was lost: its connection to the server closed"
    ),
    "lost_silent": (
        "lock {lock}: key {key}: the lease was lost: "
        "the server answered nothing for its ttl ({ttl})"
    ),
    "reattach_failed": (
        "lock {lock}: key {key}: the lease was lost: "
        "it could not follow its partition to another node"
    ),
    "wait_silent": (
        "lock {lock}: key {key}: the server answered nothing for the hold's wait plus its ttl "
        "({wait} + {ttl}): closed"
    ),
    "moved_loop": (
        "lock {lock}: key {key}: redirected 5 times without reaching the node that serves it: "
        "closed"
    ),
    "slot_unserved": (
        "lock {lock}: key {key}: no node serves its slot ({slot}) after 10 tries: closed"
    ),
    "proclaim_ended": "lock {lock}: key {key}: proclaimed after the leadership ended: invalid",
}

DEFAULT_PORT = 7380
"""The port `holdline serve` listens on unless told otherwise."""

CONNECT_TIMEOUT_MS = 10_000
"""How long `connect` waits for the connection and the answer to `HELLO`."""

LOST_MARGIN_FLOOR_MS = 10
"""The least margin a lease keeps before the server may give its key away."""

WAIT_GRACE_FLOOR_MS = 1_000
"""The least time a waiting hold allows past its wait for the server's answer."""

MAX_REDIRECTS = 5
"""How many `MOVED` answers one command follows; the next fails it `moved_loop`."""

CLUSTER_DOWN_TRIES = 10
"""How many `CLUSTERDOWN` answers one command takes; the last fails it `slot_unserved`."""

CLUSTER_DOWN_PAUSE_MS = 100
"""The pause after a `CLUSTERDOWN` answer (and a fresh slot map) before the command is resent."""


def text(name: str, **values: str) -> str:
    """The text `name` with its placeholders filled in (keys already shown)."""
    return TEXTS[name].format(**values)


def key_text(name: str, lock: str, key: str, **values: str) -> str:
    """A text about one key of a lock: the key is shown as the core shows it."""
    return TEXTS[name].format(lock=lock, key=show_key(key), **values)


def show_ms(ms: int) -> str:
    """A duration as the core writes it: `2m`, `10s`, `1500ms`, `0s`."""
    if ms != 0 and ms % 60_000 == 0:
        return f"{ms // 60_000}m"
    if ms % 1000 == 0:
        return f"{ms // 1000}s"
    return f"{ms}ms"


def lost_margin_ms(ttl_ms: int) -> float:
    """How long before `t + ttl` a lease is taken for lost: max(10ms, ttl/10)."""
    return max(float(LOST_MARGIN_FLOOR_MS), ttl_ms / 10)


def wait_grace_ms(ttl_ms: int) -> int:
    """What a waiting hold allows past its wait: max(ttl, 1s)."""
    return max(ttl_ms, WAIT_GRACE_FLOOR_MS)
