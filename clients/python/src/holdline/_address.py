"""Where a server listens, read from the forms every holdline client
accepts: `host`, `host:port`, `[ipv6]` or `[ipv6]:port` (port 7380 when
none is given), `redis://[:token@]host[:port]`, whose password is the
token, and `rediss://`, the same over TLS. Anything else is `Invalid` at
once, naming the address.

Several nodes of a cluster are several such addresses, in one string
separated by commas or as a list.
"""

import re
from typing import List, NamedTuple, Optional, Sequence, Union
from urllib.parse import unquote

from ._errors import Invalid, show_key
from ._texts import DEFAULT_PORT, text


class Address(NamedTuple):
    """A server's host and port, the token its URL carried, if any, and
    whether the URL asked for TLS (`rediss://`)."""

    host: str
    port: int
    token: Optional[str] = None
    tls: bool = False

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
    userinfo, at, hostpart = rest.rpartition("@")
    if at:
        # Only the password form `:token`: the server knows one user.
        if not userinfo.startswith(":") or len(userinfo) < 2:
            raise bad_address(address)
        try:
            token = unquote(userinfo[1:], errors="strict")
        except UnicodeDecodeError:
            raise bad_address(address) from None
    else:
        hostpart = rest
    host, port, _, _ = _host_port(hostpart, address)
    return Address(host, port, token, scheme == "rediss")


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


def bad_address(address: str) -> Invalid:
    return Invalid(text("bad_address", address=show_key(address)))
