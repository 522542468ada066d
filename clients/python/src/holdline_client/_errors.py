"""Errors: one base class, five kinds, and the texts of holdline's core (the
Rust library the server runs), which every client reproduces.

The server sends an error as `-KIND text` (`-INUSE lock invoices: key "9":
held past the hold's wait: in use`); the client raises the class of that kind
with the text unchanged, so `str(err)` is the core's text byte for byte. The
few errors the client makes itself (a bad duration, a connection that
dropped) are written in the same shape: `lock NAME: key "KEY": WHAT: KIND`.
The classes are public under the package's names (`holdline_client.__all__`).
"""

import unicodedata
from typing import Dict, Optional, Type


class Error(Exception):
    """An error from holdline_client; `str(err)` is the core's text, `kind` its kind."""

    kind: str = "error"

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text

    def __str__(self) -> str:
        return self.text

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.text!r})"


class Invalid(Error, ValueError):
    """A bad lock name, key or duration, or a hold where it may not be called."""

    kind = "invalid"


class NoPerm(Invalid):
    """The server refused a command naming a lock that the connection's user
    may not use (`holdline serve --users`): kind `invalid`, `str(err)` the
    server's line as sent, `NOPERM user alice may not use lock "payments"`.
    Retrying will not help; connecting as another user may."""


class InUse(Error):
    """The wait passed with the key still held."""

    kind = "in use"


class Lost(Error):
    """The lease ran out, was revoked at maxHold, or its store or connection closed."""

    kind = "lost"


class Limit(Error):
    """The line of waiters for the key is full (10,000)."""

    kind = "limit"


class Closed(Error):
    """The store is closed, or the connection to it is gone."""

    kind = "closed"


_BY_WORD: Dict[str, Type[Error]] = {
    "INVALID": Invalid,
    "INUSE": InUse,
    "LOST": Lost,
    "LIMIT": Limit,
    "CLOSED": Closed,
}


def from_reply(message: str) -> Error:
    """The error for a RESP error reply (`KIND text`, without the `-`).

    The five kinds carry the core's text; any other reply (`ERR`, `NOAUTH`,
    `WRONGPASS`: a server too old or too strict for this client) is
    `Invalid` with the whole line, first word kept: retrying will not help.
    A `NOPERM` reply (a lock the connection's user may not use) is `NoPerm`,
    an `Invalid` too, with its whole line."""
    word, _, text = message.partition(" ")
    cls = _BY_WORD.get(word)
    if cls is None:
        return NoPerm(message) if word == "NOPERM" else Invalid(message)
    return cls(text)


# Keys longer than this many characters are cut in error texts, as the core does.
_KEY_SHOWN_CHARS = 64

_ESCAPES = {"\0": "\\0", "\t": "\\t", "\r": "\\r", "\n": "\\n", "\\": "\\\\", '"': '\\"'}


def _rust_debug(text: str) -> str:
    """`text` quoted and escaped as Rust's `{:?}` shows a str: quotes,
    backslashes and control characters (the texts the client writes itself;
    the server's arrive verbatim)."""
    out = ['"']
    for ch in text:
        escaped = _ESCAPES.get(ch)
        if escaped is not None:
            out.append(escaped)
        elif unicodedata.category(ch) == "Cc":
            out.append("\\u{%x}" % ord(ch))
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def show_key(key: str) -> str:
    """The key as the core's texts show it: quoted, escaped, cut at 64 chars."""
    if len(key) <= _KEY_SHOWN_CHARS:
        return _rust_debug(key)
    return _rust_debug(key[:_KEY_SHOWN_CHARS])[:-1] + '..."'


def text_for(lock: Optional[str], key: Optional[str], what: str, kind: str) -> str:
    """An error text in the core's shape; `lost` reads `the lease was lost: WHY`."""
    head = "store: " if lock is None else f"lock {lock}: "
    if key is not None:
        head += f"key {show_key(key)}: "
    if kind == "lost":
        return f"{head}the lease was lost: {what}"
    return f"{head}{what}: {kind}"
