"""The server's edges as the client meets them: a token, and a full line."""

import asyncio
import resource
from pathlib import Path
from typing import Iterator, List

import pytest
from conftest import Server, until_waiters
from texts import assert_text

import holdline_client


@pytest.fixture
def token_server(tmp_path: Path) -> Iterator[Server]:
    token = tmp_path / "token"
    token.write_text("s3cret\n")
    with Server("--token-file", str(token)) as srv:
        yield srv


async def test_a_token_is_presented_and_checked_at_connect(token_server: Server) -> None:
    async with holdline_client.connect(token_server.address, token="s3cret") as store:
        async with store.lock("t").hold("k") as lease:
            assert lease is not None
    with pytest.raises(holdline_client.Invalid) as caught:
        await holdline_client.connect(token_server.address, token="wrong")
    assert_text(caught.value, "token_refused")
    assert caught.value.kind == "invalid"
    with pytest.raises(holdline_client.Invalid) as caught:
        await holdline_client.connect(token_server.address)
    assert_text(caught.value, "token_missing")
    # In the address, as a Redis URL's password; a token given apart wins.
    async with holdline_client.connect(f"redis://:s3cret@{token_server.address}") as store:
        assert (await store.stats("t"))["grants"] == 1
    async with holdline_client.connect(f"redis://:wrong@{token_server.address}", token="s3cret"):
        pass
    with pytest.raises(holdline_client.Invalid) as caught:
        await holdline_client.connect(f"redis://:s3cret@{token_server.address}", token="wrong")
    assert_text(caught.value, "token_refused")


WAITERS = 10_000

RAW_HOLD = b"*5\r\n$4\r\nHOLD\r\n$8\r\ninvoices\r\n$1\r\n7\r\n$4\r\nWAIT\r\n$6\r\n600000\r\n"
"""`HOLD invoices 7 WAIT 600000` in RESP: what each raw waiter sends."""


def _room_for_connections(needed: int) -> bool:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft >= needed:
        return True
    if hard != resource.RLIM_INFINITY and hard < needed:
        return False
    resource.setrlimit(resource.RLIMIT_NOFILE, (needed, hard))
    return True


async def test_the_line_holds_ten_thousand_waiters_then_fails_limit() -> None:
    # The waiters are raw RESP connections (one HOLD each; a connection
    # carries out one command at a time), the server inherits our raised
    # file limit, and it is told to accept them all.
    if not _room_for_connections(WAITERS + 500):
        pytest.skip(f"the file limit is below {WAITERS + 500}")
    writers: List[asyncio.StreamWriter] = []
    with Server("--max-connections", str(WAITERS + 100)) as srv:
        try:
            store = await holdline_client.connect(srv.address)
            invoices = store.lock("invoices")
            async with invoices.hold(7):
                for _ in range(WAITERS):
                    _, writer = await asyncio.open_connection("127.0.0.1", srv.port)
                    writer.write(RAW_HOLD)
                    writers.append(writer)
                await until_waiters(store, "invoices", WAITERS, timeout=60)

                async def one_more() -> None:
                    async with invoices.hold(7, wait="60s"):
                        pass

                with pytest.raises(holdline_client.Limit) as caught:
                    await asyncio.wait_for(asyncio.create_task(one_more()), 30)
                assert str(caught.value) == (
                    'lock invoices: key "7": 10000 waiters already stand in line: limit'
                )
                assert caught.value.kind == "limit"
            await store.close()
        finally:
            for writer in writers:
                writer.close()
