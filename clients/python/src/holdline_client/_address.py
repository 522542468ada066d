"""Where a server listens, read from the forms every holdline client
accepts: `host`, `host:port`, `[ipv6]` or `[ipv6]:port` (port 7380 when
none is given), `redis://[[user]:token@]host[:port]`, whose user name is
the user to connect as (`default` when none is given) and whose password
is its token, and `rediss://`, the same over TLS. Anything else is
`Invalid` at once, naming the address.

Several nodes of a cluster are several such addresses, in one string
separated by commas or as a list.
"""

import re
from typing import List, NamedTuple, Optional, Sequence, Tuple, Union
from urllib.parse import unquote

from ._errors import Invalid, show_key
from ._texts import DEFAULT_PORT, text


class Address(NamedTuple):
    """A server's host and port, the token its URL carried, if any,
    whether the URL asked for TLS (`rediss://`), and the user its URL
    named, if any (None: `default`)."""

    host: str
    port: int
    token: Optional[str] = None
    tls: bool = False
    user: Optional[str] = None

    @property
    def hostport(self) -> str:
        """`host:port`, an IPv6 host in brackets: how texts show a dialled address."""
        if ":" in self.host:
            return f"[{self.host}]:{self.port}"
        return f"{self.host}:{self.port}"


# A host name or IPv4 address; an IPv6 address with an optional zone.
_HOST = re.compile(r"[A-Za-z0-9._-]+")
_IPV6 = re.compile(r"[0-9A-Fa-f:.]*:[0-9A-Fa-f:.]*(?:%[A-Za-z0-9._-]+)?")
_HOST_PORT = re.compile(r"(?:\[([^\]]*)\]|([^:\[\]]*))(?::([0-9]{1,5}))?")
# A user name: 1 to 64 ASCII letters, digits or `_-.:@`.
_USER = re.compile(r"[A-Za-z0-9_.:@-]{1,64}")


def is_user_name(name: object) -> bool:
    """Whether `name` is a user name: 1 to 64 ASCII letters, digits or `_-.:@`."""
    return isinstance(name, str) and _USER.fullmatch(name) is not None


def parse_address(address: str) -> Address:
    """The address in one of the accepted forms; `Invalid` (bad_address) otherwise."""
    if not isinstance(address, str):
        raise bad_address(str(address))
    if "://" not in address:
        return _host_port(address)
    scheme, _, rest = address.partition("://")
    if scheme not in ("redis", "rediss"):
        raise bad_address(address)
    token: Optional[str] = None
    user: Optional[str] = None
    userinfo, at, hostpart = rest.rpartition("@")
    if at:
        # `user:token`, or `:token` (the user `default`); a bare user name
        # would be a user without a password, which holdline has not.
        name, colon, password = userinfo.partition(":")
        if not colon or not password:
            raise bad_address(address)
        try:
            token = unquote(password, errors="strict")
            user = unquote(name, errors="strict") or None
        except UnicodeDecodeError:
            raise bad_address(address) from None
        if user is not None and not is_user_name(user):
            raise bad_address(address)
    else:
        hostpart = rest
    where = _host_port(hostpart, address)
    return Address(where.host, where.port, token, scheme == "rediss", user)


Addresses = Union[str, Sequence[str]]
"""One address, several in one string separated by commas, or a list of them."""


def parse_addresses(addresses: Addresses) -> List[Address]:
    """Each address of `addresses`, in order; `Invalid` (bad_address, naming
    the address at fault) when one is not in an accepted form or none is
    given."""
    if isinstance(addresses, str):
        parts = addresses.split(",")
    elif isinstance(addresses, (list, tuple)):
        parts = list(addresses)
    else:
        raise bad_address(str(addresses))
    if not parts:
        raise bad_address("")
    return [parse_address(part) for part in parts]


def _host_port(part: str, address: Optional[str] = None) -> Address:
    whole = part if address is None else address
    match = _HOST_PORT.fullmatch(part)
    if match is None:
        raise bad_address(whole)
    v6, name, port_text = match.groups()
    if v6 is not None:
        if _IPV6.fullmatch(v6) is None:
            raise bad_address(whole)
        host = v6
    elif name is None or _HOST.fullmatch(name) is None:
        raise bad_address(whole)
    else:
        host = name
    port = DEFAULT_PORT if port_text is None else int(port_text)
    if not 0 < port < 65536:
        raise bad_address(whole)
    return Address(host, port)


Auth = Tuple[str, str]
"""The user and token a connection says in `HELLO 3 AUTH USER TOKEN`."""


def resolve_auth(first: Address, user: Optional[str], token: Optional[str]) -> Optional[Auth]:
    """The user and token to say: each the option's when given, else the
    first address's; the user `default` when neither names one. `Invalid`
    for a user name outside the rule (bad_user) or a user without a token
    (user_without_token); None when there is no token."""
    if user is not None and not is_user_name(user):
        raise Invalid(text("bad_user", user=show_key(str(user))))
    token = token if token is not None else first.token
    name = user if user is not None else first.user
    if token is None:
        if name is not None:
            raise Invalid(text("user_without_token", user=show_key(name)))
        return None
    return (name or "default", token)


def bad_address(address: str) -> Invalid:
    return Invalid(text("bad_address", address=show_key(address)))


def parse_node(hostport: str) -> Optional[Address]:
    """`host:port` (an IPv6 host bare or in brackets) as an address; None
    when it is not of that form."""
    host, colon, port = hostport.rpartition(":")
    if not (colon and host and port.isdigit() and 0 < int(port) < 65536):
        return None
    return Address(host.strip("[]"), int(port))
