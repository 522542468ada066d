"""Connecting: the address forms, the ways to hold a store open and close
it, and the small things a new user meets first."""

import asyncio
import socket
from typing import Iterator, List

import pytest
from conftest import Scripted, Server, never_answer
from texts import assert_text

import holdline_client
from holdline_client._address import Address, parse_address
from holdline_client._cluster import Router


def test_the_address_forms() -> None:
    assert parse_address("127.0.0.1:7380") == Address("127.0.0.1", 7380)
    assert parse_address("localhost") == Address("localhost", 7380)
    assert parse_address("db-1.example.com:9000") == Address("db-1.example.com", 9000)
    assert parse_address("[::1]:9000") == Address("::1", 9000)
    assert parse_address("[::1]") == Address("::1", 7380)
    assert parse_address("[fe80::1%eth0]:1") == Address("fe80::1%eth0", 1)
    assert parse_address("redis://127.0.0.1:27400") == Address("127.0.0.1", 27400)
    assert parse_address("redis://h") == Address("h", 7380)
    assert parse_address("redis://:s3cret@h:1") == Address("h", 1, "s3cret")
    assert parse_address("redis://:a%40b%3Ac@[::1]:2") == Address("::1", 2, "a@b:c")
    assert parse_address("rediss://h") == Address("h", 7380, None, True)
    assert parse_address("rediss://:s3cret@[::1]:1") == Address("::1", 1, "s3cret", True)
    assert not parse_address("redis://h").tls and not parse_address("h:1").tls
    assert parse_address("[::1]:9000").hostport == "[::1]:9000"
    assert parse_address("redis://h").hostport == "h:7380"


@pytest.mark.parametrize(
    "bad",
    [
        "",
        ":7380",
        "host:port",
        "host:0",
        "host:70000",
        "[::1",
        "::1",
        "[h]:1",
        " host",
        "host:1 ",
        "h/x",
        "redis://",
        "redis://h:1/0",
        "redis://user@h",
        "redis://user:@h",
        "redis://@h",
        "redis://:@h",
        "redis://:%ff@h",
        "rediss://",
        "rediss://user@h",
        "rediss://us er:pw@h",
        "redis+tls://h",
        "http://h:1",
        "unix:///tmp/s",
    ],
)
def test_anything_else_is_invalid_at_once_naming_the_address(bad: str) -> None:
    with pytest.raises(holdline_client.Invalid) as caught:
        holdline_client.connect(bad)  # not even awaited: it fails at the call
    assert caught.value.kind == "invalid"
    assert_text(caught.value, "bad_address", address=holdline_client._errors.show_key(bad))


async def test_a_redis_url_connects_to_its_own_port(server: Server) -> None:
    # The form `redis://host:port` once dialled port 7380 whatever it said.
    async with holdline_client.connect(f"redis://{server.address}") as store:
        assert store.address == server.address
        async with store.lock("url").hold("k") as lease:
            assert lease.fence >= 1


@pytest.fixture
def ipv6_server() -> Iterator[Server]:
    try:
        with socket.socket(socket.AF_INET6) as probe:
            probe.bind(("::1", 0))
    except OSError:
        pytest.skip("no IPv6 loopback here")
    with Server(listen="[::1]:0") as srv:
        yield srv


async def test_an_ipv6_address_in_brackets(ipv6_server: Server) -> None:
    port = ipv6_server.address.rsplit(":", 1)[1]
    async with holdline_client.connect(f"[::1]:{port}") as store:
        assert store.address == f"[::1]:{port}"
        async with store.lock("v6").hold("k") as lease:
            assert lease is not None


async def test_connect_is_awaited_or_entered_and_the_store_closes_both_ways(
    server: Server,
) -> None:
    async with await holdline_client.connect(server.address) as store:
        assert not store.closed
    assert store.closed
    async with holdline_client.connect(server.address) as entered:
        assert not entered.closed
    assert entered.closed
    plain = await holdline_client.connect(server.address)
    await plain.aclose()
    assert plain.closed and repr(plain) == f"<holdline_client.Store {server.address} closed>"
    await plain.aclose()  # idempotent
    again = await holdline_client.connect(server.address)
    await again.close()  # the older name
    assert again.closed


async def test_the_connect_timeout_is_ten_seconds_unless_given() -> None:
    connecting = holdline_client.connect("127.0.0.1:1")
    router: Router = connecting._router
    assert router.dial.connect_timeout_ms == 10_000
    given = holdline_client.connect("127.0.0.1:1", connect_timeout="250ms")._router
    assert given.dial.connect_timeout_ms == 250


async def test_a_server_that_never_answers_hello_fails_closed_in_its_time() -> None:
    async with Scripted(never_answer, hello=False) as silent:
        started = asyncio.get_running_loop().time()
        with pytest.raises(holdline_client.Closed) as caught:
            await holdline_client.connect(silent.address, connect_timeout="500ms")
        took = asyncio.get_running_loop().time() - started
    assert_text(caught.value, "connect_silent", hostport=silent.address, timeout="500ms")
    assert 0.45 <= took < 10


async def test_ttl_none_is_the_default_ttl(store: holdline_client.Store) -> None:
    assert store.lock("t", ttl=None).ttl_ms == 10_000
    assert store.lock("t").ttl_ms == 10_000
    assert store.lock("t", ttl=None, max_hold=None).max_hold_ms is None


async def test_a_leases_repr_says_held_then_released(store: holdline_client.Store) -> None:
    async with store.lock("r").hold("k") as lease:
        assert repr(lease).endswith(" held>")
    assert repr(lease) == f"<Lease lock=r key='k' fence={lease.fence} released>"
    assert not lease.lost
    lost_ones: List[holdline_client.Lease] = []
    with pytest.raises(holdline_client.Lost):
        async with store.lock("r", max_hold="50ms").hold("m") as lease:
            lost_ones.append(lease)
            await asyncio.wait_for(lease.signal.wait(), 10)
    assert repr(lost_ones[0]).endswith(" lost>")
