"""Connecting as a user (`holdline serve --users`): the user in the address
and as `user=`, the `HELLO 3 AUTH USER TOKEN` said, bad names refused with
the shared texts, and `NOPERM` (a lock the user may not name) raised as
`NoPerm`, an `Invalid` with the server's line; against a scripted server,
then a real one."""

from pathlib import Path
from typing import Iterator, List, Optional, Tuple

import pytest
from conftest import Scripted, Server
from texts import assert_text

import holdline_client
from holdline_client._address import Address, parse_address
from holdline_client._errors import from_reply, show_key

NOPERM = 'NOPERM user team-b may not use lock "payments"'


def test_a_url_names_its_user_before_the_token() -> None:
    assert parse_address("redis://alice:s3cret@h:1") == Address("h", 1, "s3cret", False, "alice")
    assert parse_address("rediss://alice:s3cret@h") == Address("h", 7380, "s3cret", True, "alice")
    assert parse_address("redis://:s3cret@h").user is None
    assert parse_address("redis://default:s3cret@h").user == "default"
    assert parse_address("redis://alice:tok:en@h").token == "tok:en"
    assert parse_address("redis://team-b.ops_1:t@h").user == "team-b.ops_1"
    # `:` and `@` in a name: escaped, or `@` as it is (the last `@` ends it).
    assert parse_address("redis://a%3Ab%40c:t@h").user == "a:b@c"
    assert parse_address("redis://a@b:t@h").user == "a@b"
    assert parse_address(f"redis://{'u' * 64}:t@h").user == "u" * 64


@pytest.mark.parametrize(
    "bad",
    [
        "redis://alice@h",
        "redis://alice:@h",
        "rediss://alice@h",
        "redis://al ice:t@h",
        "redis://al%20ice:t@h",
        "redis://al%C3%A9:t@h",
        "redis://é:t@h",
        f"redis://{'u' * 65}:t@h",
    ],
)
def test_a_bad_user_in_a_url_is_a_bad_address(bad: str) -> None:
    with pytest.raises(holdline_client.Invalid) as caught:
        holdline_client.connect(bad)  # not even awaited: it fails at the call
    assert_text(caught.value, "bad_address", address=show_key(bad))


@pytest.mark.parametrize("bad", ["", "al ice", "a/b", "é", "u" * 65])
def test_a_bad_user_option_is_refused_naming_it(bad: str) -> None:
    with pytest.raises(holdline_client.Invalid) as caught:
        holdline_client.connect("h:1", user=bad, token="t")
    assert_text(caught.value, "bad_user", user=show_key(bad))
    assert caught.value.kind == "invalid"


def test_a_user_needs_a_token() -> None:
    with pytest.raises(holdline_client.Invalid) as caught:
        holdline_client.connect("redis://h:1", user="alice")
    assert_text(caught.value, "user_without_token", user='"alice"')


def test_the_options_win_over_the_urls() -> None:
    def auth(
        address: str, user: Optional[str] = None, token: Optional[str] = None
    ) -> Optional[Tuple[str, str]]:
        return holdline_client.connect(address, user=user, token=token)._router.dial.auth

    url = "redis://alice:from-url@h"
    assert auth(url) == ("alice", "from-url")
    assert auth(url, user="bob") == ("bob", "from-url")
    assert auth(url, token="given") == ("alice", "given")
    assert auth(url, user="bob", token="given") == ("bob", "given")
    assert auth("redis://:t@h", user="bob") == ("bob", "t")
    assert auth("h:1", user="bob", token="t") == ("bob", "t")
    assert auth("h:1", token="t") == ("default", "t")
    assert auth("h:1") is None


async def _grant_or_noperm(command: List[bytes]) -> Optional[bytes]:
    """A server whose user may not name the lock `payments`."""
    if len(command) > 1 and command[1] == b"payments":
        return b"-" + NOPERM.encode() + b"\r\n"
    name = command[0].upper()
    if name in (b"HOLD", b"TRYHOLD"):
        return b"*2\r\n:1\r\n:5\r\n"
    return b"+OK\r\n"


def _hellos(server: Scripted) -> List[List[bytes]]:
    hellos = [c for c in server.commands if c[0].upper() == b"HELLO"]
    server.commands.clear()
    return hellos


@pytest.mark.parametrize(
    ("address", "user", "token", "hello"),
    [
        ("redis://alice:tok@{}", None, None, b"HELLO 3 AUTH alice tok"),
        ("redis://:tok@{}", None, None, b"HELLO 3 AUTH default tok"),
        ("redis://default:tok@{}", None, None, b"HELLO 3 AUTH default tok"),
        ("{}", None, "tok", b"HELLO 3 AUTH default tok"),
        ("{}", "bob", "t2", b"HELLO 3 AUTH bob t2"),
        ("redis://alice:tok@{}", "bob", None, b"HELLO 3 AUTH bob tok"),
        ("redis://alice:tok@{}", None, "t2", b"HELLO 3 AUTH alice t2"),
        ("redis://:tok@{}", "team-b.ops:1@x", None, b"HELLO 3 AUTH team-b.ops:1@x tok"),
        ("{}", None, None, b"HELLO 3"),
    ],
)
async def test_hello_says_the_user_and_the_token(
    address: str, user: Optional[str], token: Optional[str], hello: bytes
) -> None:
    async with Scripted(_grant_or_noperm) as server:
        where = address.format(server.address)
        async with holdline_client.connect(where, user=user, token=token) as store:
            lock = store.lock("team-a.jobs")
            # Two connections at once: each says the same.
            async with lock.hold("k"), lock.hold("k2"):
                pass
        hellos = _hellos(server)
    assert len(hellos) >= 2
    assert all(b" ".join(h) == hello for h in hellos), hellos


async def test_noperm_is_invalid_with_the_servers_text_from_any_command() -> None:
    def check(caught: "pytest.ExceptionInfo[holdline_client.Invalid]") -> None:
        err = caught.value
        assert isinstance(err, holdline_client.NoPerm) and isinstance(err, holdline_client.Invalid)
        assert err.kind == "invalid"
        assert str(err) == NOPERM

    async with Scripted(_grant_or_noperm) as server:
        async with holdline_client.connect(f"redis://team-b:tok@{server.address}") as store:
            payments = store.lock("payments")
            with pytest.raises(holdline_client.Invalid) as caught:
                async with payments.hold("k"):
                    pass
            check(caught)
            with pytest.raises(holdline_client.Invalid) as caught:
                async with payments.try_hold("k"):
                    pass
            check(caught)
            with pytest.raises(holdline_client.Invalid) as caught:
                await payments.inspect("k")
            check(caught)
            with pytest.raises(holdline_client.Invalid) as caught:
                await store.stats("payments")
            check(caught)
            with pytest.raises(holdline_client.Invalid) as caught:
                await store.put("payments", "k", 5, "row", "v")
            check(caught)
            # The connection is fine: a lock the user may use is granted.
            async with store.lock("team-a.jobs").hold("k") as lease:
                assert lease.fence == 5
    # Only the first word counts; other refusals are plain `Invalid`.
    assert type(from_reply("ERR unknown command 'NOPE'")) is holdline_client.Invalid
    assert type(from_reply("NOPERMS x")) is holdline_client.Invalid
    assert type(from_reply(NOPERM)) is holdline_client.NoPerm
    assert "NoPerm" in holdline_client.__all__


USERS = "alice alice-token-0123456789 locks=team-a.*\nroot root-token-0123456789 admin\n"


@pytest.fixture
def users_server(tmp_path: Path) -> Iterator[Server]:
    users = tmp_path / "users"
    users.write_text(USERS)
    with Server("--users", str(users)) as srv:
        yield srv


async def test_a_real_server_with_users_checks_each_users_locks(users_server: Server) -> None:
    where = users_server.address
    async with holdline_client.connect(f"redis://alice:alice-token-0123456789@{where}") as alice:
        async with alice.lock("team-a.jobs").hold("k") as lease:
            assert lease.fence >= 1
        with pytest.raises(holdline_client.NoPerm) as caught:
            async with alice.lock("payments").hold("k"):
                pass
        assert caught.value.kind == "invalid"
        assert str(caught.value) == 'NOPERM user alice may not use lock "payments"'
    # The options, and an admin, who may use any lock.
    async with holdline_client.connect(where, user="root", token="root-token-0123456789") as root:
        async with root.lock("payments").hold("k") as lease:
            assert lease.fence >= 1
    for url in [
        f"redis://alice:wrong-token-0123456789@{where}",
        f"redis://mallory:alice-token-0123456789@{where}",
    ]:
        with pytest.raises(holdline_client.Invalid) as refused:
            await holdline_client.connect(url)
        assert_text(refused.value, "token_refused")
