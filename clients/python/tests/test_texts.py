"""Every text this client writes itself, checked against the table every
holdline client shares (`clients/texts.json`): the copy in the package is
the table byte for byte, and each text is provoked for real and compared.

The provocations use a scripted stand-in server where a real one will not
misbehave on cue (answer nothing, hang up); `test_network.py` shows the
same texts through a frozen proxy in front of a real server.
"""

import asyncio
import tempfile
import tracemalloc
from pathlib import Path
from typing import Awaitable, Callable, Dict, List, Optional

import pytest
from certs import Ca
from conftest import (
    HANG_UP,
    PATIENCE,
    Listening,
    Scripted,
    Server,
    never_answer,
    refused_address,
)
from fake_cluster import FakeCluster, FakeNode
from test_handover import moves_on_renew
from texts import RULES, TEXTS, assert_text

import holdline_client
from holdline_client import _texts
from holdline_client._cluster import slot
from holdline_client._resp import MAX_REPLY_BYTES


def test_the_packages_texts_are_the_table_byte_for_byte() -> None:
    assert _texts.TEXTS == TEXTS


def test_the_packages_rules_are_the_tables() -> None:
    assert _texts.DEFAULT_PORT == RULES["default_port"] == 7380
    assert _texts.CONNECT_TIMEOUT_MS == RULES["connect_timeout_ms"]
    assert MAX_REPLY_BYTES == RULES["max_reply_bytes"]
    assert "max(10ms, ttl / 10)" in RULES["lost_margin"]
    assert [_texts.lost_margin_ms(ms) for ms in (50, 100, 2000)] == [10, 10, 200]
    assert "wait + max(ttl, 1s)" in RULES["wait_grace"]
    assert [_texts.wait_grace_ms(ms) for ms in (300, 1000, 2000)] == [1000, 1000, 2000]
    assert [_texts.show_ms(ms) for ms in (0, 300, 1000, 1500, 60_000, 90_000)] == [
        "0s",
        "300ms",
        "1s",
        "1500ms",
        "1m",
        "90s",
    ]


async def provoke_bad_address(server: Server) -> None:
    for bad in ["ftp://h", "rediss://h:1/0", "h:port", "::1", "a b", "redis://user@h"]:
        with pytest.raises(holdline_client.Invalid) as caught:
            await holdline_client.connect(bad)
        assert_text(caught.value, "bad_address", address=f'"{bad}"')
    with pytest.raises(holdline_client.Invalid) as caught:
        holdline_client.connect('a"\n')  # shown as the core shows a key
    assert_text(caught.value, "bad_address", address='"a\\"\\n"')


async def provoke_bad_user(server: Server) -> None:
    for bad, shown in [("a b", '"a b"'), ("", '""'), ("é", '"é"'), ('a"', '"a\\""')]:
        with pytest.raises(holdline_client.Invalid) as caught:
            await holdline_client.connect(server.address, user=bad, token="t")
        assert_text(caught.value, "bad_user", user=shown)


async def provoke_user_without_token(server: Server) -> None:
    with pytest.raises(holdline_client.Invalid) as caught:
        await holdline_client.connect(server.address, user="alice")
    assert_text(caught.value, "user_without_token", user='"alice"')


async def provoke_cannot_connect(server: Server) -> None:
    with refused_address() as dead, pytest.raises(holdline_client.Closed) as caught:
        await holdline_client.connect(dead)
    assert_text(caught.value, "cannot_connect", hostport=dead)


async def provoke_connect_silent(server: Server) -> None:
    async with Scripted(never_answer, hello=False) as silent:
        with pytest.raises(holdline_client.Closed) as caught:
            await holdline_client.connect(silent.address, connect_timeout="300ms")
    assert_text(caught.value, "connect_silent", hostport=silent.address, timeout="300ms")
    assert caught.value.kind == "closed"


async def provoke_token_missing(server: Server) -> None:
    async def noauth(command: List[bytes]) -> Optional[bytes]:
        return b"-NOAUTH HELLO must be called with the client already authenticated\r\n"

    async with Scripted(noauth, hello=False) as strict:
        with pytest.raises(holdline_client.Invalid) as caught:
            await holdline_client.connect(strict.address)
    assert_text(caught.value, "token_missing")


async def provoke_token_refused(server: Server) -> None:
    async def wrongpass(command: List[bytes]) -> Optional[bytes]:
        assert command[2:] == [b"AUTH", b"default", b"nope"]
        return b"-WRONGPASS invalid username-password pair or user is disabled.\r\n"

    async with Scripted(wrongpass, hello=False) as strict:
        with pytest.raises(holdline_client.Invalid) as caught:
            await holdline_client.connect(strict.address, token="nope")
    assert_text(caught.value, "token_refused")


async def provoke_connect_refused(server: Server) -> None:
    # A real server at its connection limit: Redis's words, then the close.
    with Server("--max-connections", "1") as full:
        async with holdline_client.connect(full.address):
            with pytest.raises(holdline_client.Closed) as caught:
                await holdline_client.connect(full.address)
    assert_text(caught.value, "connect_refused", hostport=full.address)
    assert caught.value.kind == "closed"
    assert "(ERR max number of clients reached)" in str(caught.value)

    async def busy(command: List[bytes]) -> Optional[bytes]:
        return b"-BUSY try again later\r\n"

    async with Scripted(busy, hello=False) as other:
        with pytest.raises(holdline_client.Closed) as caught:
            await holdline_client.connect(other.address)
    assert_text(caught.value, "connect_refused", hostport=other.address)
    assert "(BUSY try again later)" in str(caught.value)

    # Said before the client says anything, then closed: still the server's words.
    async def refuse(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"-ERR max number of clients reached\r\n")
        await writer.drain()
        writer.close()

    eager = await asyncio.start_server(refuse, "127.0.0.1", 0)
    address = f"127.0.0.1:{eager.sockets[0].getsockname()[1]}"
    try:
        for _ in range(5):  # the refusal may arrive before or after HELLO is sent
            with pytest.raises(holdline_client.Closed) as caught:
                await holdline_client.connect(address)
            assert_text(caught.value, "connect_refused", hostport=address)
    finally:
        eager.close()


async def provoke_tls_failed(server: Server) -> None:
    with tempfile.TemporaryDirectory() as folder:
        with Server(*Ca(Path(folder)).leaf().serve_flags()) as tls:
            with pytest.raises(holdline_client.Closed) as caught:
                await holdline_client.connect(tls.address, ssl=Ca(Path(folder), "other").trusting())
    assert_text(caught.value, "tls_failed", hostport=tls.address)
    assert caught.value.kind == "closed"


async def hang_up(command: List[bytes]) -> Optional[bytes]:
    return HANG_UP


async def provoke_connection_closed(server: Server) -> None:
    async with Scripted(hang_up) as rude, holdline_client.connect(rude.address) as store:
        with pytest.raises(holdline_client.Closed) as caught:
            await store.get("row")
    assert_text(caught.value, "connection_closed")


async def provoke_connection_closed_key(server: Server) -> None:
    async with Scripted(hang_up) as rude, holdline_client.connect(rude.address) as store:
        with pytest.raises(holdline_client.Closed) as caught:
            async with store.lock("invoices").hold(7):
                pass
    assert_text(caught.value, "connection_closed_key", lock="invoices", key='"7"')


def grant_then(later: Optional[bytes]) -> Callable[[List[bytes]], Awaitable[Optional[bytes]]]:
    """A handler that grants every HOLD (lease 1, fence 1) and answers
    everything else with `later` (None: nothing)."""

    async def handler(command: List[bytes]) -> Optional[bytes]:
        if command[0] == b"HOLD":
            return b"*2\r\n:1\r\n:1\r\n"
        return later

    return handler


async def provoke_lost_connection(server: Server) -> None:
    async with holdline_client.connect(server.address) as store:
        with pytest.raises(holdline_client.Lost) as caught:
            async with store.lock("drop").hold("k") as lease:
                server.stop()
                await asyncio.wait_for(lease.signal.wait(), 10)
    assert_text(caught.value, "lost_connection", lock="drop", key='"k"')


async def provoke_lost_silent(server: Server) -> None:
    async with Scripted(grant_then(None)) as mute, holdline_client.connect(mute.address) as store:
        with pytest.raises(holdline_client.Lost) as caught:
            async with store.lock("mute", ttl="300ms").hold("k") as lease:
                await asyncio.wait_for(lease.signal.wait(), 10)
    assert_text(caught.value, "lost_silent", lock="mute", key='"k"', ttl="300ms")


async def provoke_wait_silent(server: Server) -> None:
    async with Scripted(never_answer) as mute, holdline_client.connect(mute.address) as store:
        with pytest.raises(holdline_client.Closed) as caught:
            async with store.lock("mute", ttl="200ms").hold("k", wait="100ms"):
                pass
        assert_text(caught.value, "wait_silent", lock="mute", key='"k"', wait="100ms", ttl="1s")
        with pytest.raises(holdline_client.Closed) as caught:
            async with store.lock("mute", ttl="1500ms").try_hold("k"):
                pass
        assert_text(caught.value, "wait_silent", lock="mute", key='"k"', wait="0s", ttl="1500ms")


async def provoke_moved_loop(server: Server) -> None:
    # Two nodes that each say the other serves the key.
    async with (
        FakeCluster(2) as cluster,
        holdline_client.connect(cluster.nodes[0].address) as store,
    ):

        def elsewhere(node: FakeNode, command: List[bytes]) -> Optional[bytes]:
            other = cluster.nodes[1 - node.index].address.encode()
            return b"-MOVED %d %s\r\n" % (slot(command[2]), other)

        for node in cluster.nodes:
            node.override = lambda n, c: elsewhere(n, c) if c[0] == b"HOLD" else None
        with pytest.raises(holdline_client.Closed) as caught:
            async with store.lock("invoices").hold(7):
                pass
    assert_text(caught.value, "moved_loop", lock="invoices", key='"7"')
    assert caught.value.kind == "closed"


async def provoke_slot_unserved(server: Server) -> None:
    async with FakeCluster() as cluster, holdline_client.connect(cluster.nodes[0].address) as store:
        cluster.owners[slot("7")] = None  # nobody serves it, ever
        with pytest.raises(holdline_client.Closed) as caught:
            async with store.lock("invoices").try_hold(7):
                pass
        tries = sum(len(n.sent(b"TRYHOLD")) for n in cluster.nodes)
    assert_text(caught.value, "slot_unserved", lock="invoices", key='"7"', slot=str(slot("7")))
    assert tries == RULES["cluster_down_tries"]


REDIS_HELLO3 = (
    b"%7\r\n$6\r\nserver\r\n$5\r\nredis\r\n$7\r\nversion\r\n$6\r\n7.0.15\r\n"
    b"$5\r\nproto\r\n:3\r\n$2\r\nid\r\n:5\r\n$4\r\nmode\r\n$10\r\nstandalone\r\n"
    b"$4\r\nrole\r\n$6\r\nmaster\r\n$7\r\nmodules\r\n*0\r\n"
)
"""What Redis 7.0.15 answers `HELLO 3`."""

REDIS_HELLO2 = b"*14" + REDIS_HELLO3[2:].replace(b":3\r\n", b":2\r\n")
"""The same in RESP2's form: a flat array of fields and values."""

HTTP_400 = b"HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain\r\nConnection: close\r\n\r\n"

RANDOM = b"\x9f\x00\xffz\x07\xc3\xa9Q\x01\xfe\x80\x11\x22"
"""Fixed "random" bytes: no RESP type first, no line end, not all UTF-8."""


class Impostor(Listening):
    """A server that is not holdline: it answers its first read with
    `answer` (closes at once, unread, when `answer` is empty), then sends a
    byte every 10 ms while `trickle`, and keeps the connection open."""

    def __init__(self, answer: bytes, trickle: bool = False) -> None:
        super().__init__()
        self._answer = answer
        self._trickle = trickle
        self._tasks: List["asyncio.Task[None]"] = []

    async def __aexit__(self, *exc: object) -> None:
        await super().__aexit__()
        for task in self._tasks:
            task.cancel()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.append(task)
        try:
            if not self._answer:
                return
            await reader.read(65536)
            writer.write(self._answer)
            while True:
                await asyncio.sleep(0.01)
                if self._trickle:
                    writer.write(b"a")
                    await writer.drain()
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            writer.close()


async def connect_error(
    impostor: Impostor, max_reply_bytes: int = 64 << 20
) -> holdline_client.Error:
    """Connects to `impostor`: the error, which must come within 2 s."""
    started = asyncio.get_running_loop().time()
    with pytest.raises(holdline_client.Error) as caught:
        await asyncio.wait_for(
            holdline_client.connect(impostor.address, max_reply_bytes=max_reply_bytes), 5
        )
    assert asyncio.get_running_loop().time() - started < 2
    return caught.value


async def provoke_not_holdline(server: Server) -> None:
    for answer in (REDIS_HELLO3, REDIS_HELLO2):
        async with Impostor(answer) as redis:
            error = await connect_error(redis)
        assert isinstance(error, holdline_client.Invalid)
        assert_text(error, "not_holdline", hostport=redis.address, server="redis 7.0.15")


async def provoke_not_holdline_unnamed(server: Server) -> None:
    async with Impostor(b"%1\r\n$5\r\nproto\r\n:3\r\n") as other:
        error = await connect_error(other)
    assert isinstance(error, holdline_client.Invalid)
    assert_text(error, "not_holdline_unnamed", hostport=other.address)


async def provoke_not_resp(server: Server) -> None:
    async with Impostor(HTTP_400) as http:
        error = await connect_error(http)
    assert isinstance(error, holdline_client.Closed)
    assert_text(error, "not_resp", hostport=http.address, bytes='"HTTP/1.1 4"')
    async with Impostor(RANDOM, trickle=True) as noise:
        error = await connect_error(noise)
    assert isinstance(error, holdline_client.Closed)
    # The first 10 bytes, each that is not UTF-8 as U+FFFD, shown as a key.
    shown = '"\ufffd\\0\ufffdz\\u{7}éQ\\u{1}\ufffd"'
    assert_text(error, "not_resp", hostport=noise.address, bytes=shown)


async def provoke_reply_too_large(server: Server) -> None:
    tracemalloc.start()
    try:
        async with Impostor(b"$999999999999\r\n", trickle=True) as huge:
            error = await connect_error(huge)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 8 << 20, f"{peak} bytes at the peak"
    assert isinstance(error, holdline_client.Closed)
    assert_text(
        error, "reply_too_large", hostport=huge.address, size="999999999999", limit="67108864"
    )
    async with Impostor(b"*2\r\n$2000\r\n", trickle=True) as big:
        error = await connect_error(big, max_reply_bytes=1024)
    assert_text(error, "reply_too_large", hostport=big.address, size="2000", limit="1024")


async def provoke_proclaim_ended(server: Server) -> None:
    async with holdline_client.connect(server.address) as store:
        election = store.lock("services").election("texts")
        async with election.campaign("a") as lead:
            await lead.resign()
            with pytest.raises(holdline_client.Invalid) as caught:
                await lead.proclaim("after")
    assert_text(caught.value, "proclaim_ended", lock="services", key='"texts"')


async def provoke_reattach_failed(server: Server) -> None:
    # A hand-over moves the lease to node 1, which has nothing under its secret.
    async with FakeCluster(handover=True) as cluster:
        key = cluster.key_on(0)
        moves_on_renew(cluster, key, cluster.nodes[1])
        lost = b'-LOST lock texts: key "k": the lease was lost: nothing was handed over\r\n'

        def refuse(node: FakeNode, command: List[bytes]) -> Optional[bytes]:
            return lost if command[0].upper() == b"REATTACH" else None

        cluster.nodes[1].override = refuse
        async with holdline_client.connect(cluster.nodes[0].address) as store:
            with pytest.raises(holdline_client.Lost) as caught:
                async with store.lock("texts", ttl="300ms").hold(key) as lease:
                    await asyncio.wait_for(lease.signal.wait(), PATIENCE)
    assert_text(caught.value, "reattach_failed", lock="texts", key=f'"{key}"')


async def test_a_server_that_closes_at_once_fails_connect_closed() -> None:
    async with Impostor(b"") as rude:
        error = await connect_error(rude)
    assert isinstance(error, holdline_client.Closed)
    assert_text(error, "connection_closed")


PROVOKE: Dict[str, Callable[[Server], Awaitable[None]]] = {
    "bad_address": provoke_bad_address,
    "bad_user": provoke_bad_user,
    "user_without_token": provoke_user_without_token,
    "cannot_connect": provoke_cannot_connect,
    "connect_silent": provoke_connect_silent,
    "token_missing": provoke_token_missing,
    "token_refused": provoke_token_refused,
    "connect_refused": provoke_connect_refused,
    "tls_failed": provoke_tls_failed,
    "connection_closed": provoke_connection_closed,
    "connection_closed_key": provoke_connection_closed_key,
    "lost_connection": provoke_lost_connection,
    "lost_silent": provoke_lost_silent,
    "wait_silent": provoke_wait_silent,
    "moved_loop": provoke_moved_loop,
    "slot_unserved": provoke_slot_unserved,
    "not_holdline": provoke_not_holdline,
    "not_holdline_unnamed": provoke_not_holdline_unnamed,
    "not_resp": provoke_not_resp,
    "reply_too_large": provoke_reply_too_large,
    "proclaim_ended": provoke_proclaim_ended,
    "reattach_failed": provoke_reattach_failed,
}


@pytest.mark.parametrize("name", sorted(TEXTS))
async def test_each_text_of_the_table_is_what_the_client_says(name: str, server: Server) -> None:
    provoke = PROVOKE.get(name)
    assert provoke is not None, f"no test provokes the table's text {name}"
    await provoke(server)
