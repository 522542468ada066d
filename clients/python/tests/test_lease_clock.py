"""The lease's clock against a scripted server that answers as told: a
grant that arrives too late to be trusted on its own, and an answer that
arrives after the lease's time ran out."""

import asyncio
import time
from typing import List, Optional

import pytest
from conftest import Scripted, hold_in_background, until_waiters
from texts import assert_text

import holdline_client
from holdline_client._wire import DROPPED

GRANT = b"*2\r\n:1\r\n:5\r\n"


def late_granter(renew: Optional[bytes], delay: float) -> "Scripted":
    """Grants every HOLD after `delay` seconds; answers RENEW with `renew`
    (None: nothing), PING and RELEASE as a server does."""

    async def handler(command: List[bytes]) -> Optional[bytes]:
        name = command[0]
        if name == b"HOLD":
            await asyncio.sleep(delay)
            return GRANT
        if name == b"RENEW":
            return renew
        if name == b"PING":
            return b"+PONG\r\n"
        return b"+OK\r\n"

    return Scripted(handler)


async def test_a_grant_later_than_the_ttl_is_held_once_a_renewal_confirms_it() -> None:
    # The grant comes 0.6 s after the HOLD was sent, past its 300 ms ttl:
    # the server may have granted it at once and ended it since. A RENEW
    # answered OK shows it still holds the lease.
    async with (
        late_granter(b"+OK\r\n", 0.6) as server,
        holdline_client.connect(server.address) as store,
    ):
        async with store.lock("late", ttl="300ms").hold("k", wait="5s") as lease:
            assert not lease.lost and lease.fence == 5
            await asyncio.sleep(0.6)  # two ttls: renewals answered in time keep it
            assert not lease.lost
        names = [command[0] for command in server.commands]
        granted = names.index(b"HOLD")
        assert b"RENEW" in names[granted + 1 :]


async def test_a_late_grant_whose_renewal_answers_lost_is_lost_before_the_block() -> None:
    lost = b'-LOST lock late: key "k": the lease was lost: it ran out (ttl 300ms)\r\n'
    entered: List[bool] = []
    async with late_granter(lost, 0.6) as server, holdline_client.connect(server.address) as store:
        with pytest.raises(holdline_client.Lost) as caught:
            async with store.lock("late", ttl="300ms").hold("k", wait="5s"):
                entered.append(True)
    assert entered == []
    assert str(caught.value) == 'lock late: key "k": the lease was lost: it ran out (ttl 300ms)'


async def test_a_late_grant_whose_renewal_is_never_answered_is_lost_silent() -> None:
    async with late_granter(None, 0.6) as server, holdline_client.connect(server.address) as store:
        with pytest.raises(holdline_client.Lost) as caught:
            async with store.lock("late", ttl="300ms").hold("k", wait="5s"):
                pytest.fail("entered a hold the server never confirmed")
    assert_text(caught.value, "lost_silent", lock="late", key='"k"', ttl="300ms")


async def test_an_answer_handled_after_the_deadline_does_not_renew_the_lease(
    store: holdline_client.Store,
) -> None:
    with pytest.raises(holdline_client.Lost) as caught:
        async with store.lock("stall", ttl="1s").hold("k") as lease:
            await answer_after_the_deadline(lease, 1.0)
    assert_text(caught.value, "lost_silent", lock="stall", key='"k"', ttl="1s")


async def answer_after_the_deadline(lease: holdline_client.Lease, ttl: float) -> None:
    """A PING is answered (by a real server, in its own process) while this
    loop is stalled past the lease's deadline: when the answer is handled,
    the server might have given the key away (it renews only a lease it
    still holds), so the answer must not count, though it was sent well
    within a ttl of its arrival."""
    lease._stop_renewing()  # only the PING below talks
    await asyncio.sleep(ttl / 5)
    ping = lease._link.send("PING")
    deadline = lease._deadline
    # Past the deadline, yet before the PING's own send + ttl - margin.
    time.sleep(max(0.0, deadline + ttl / 20 - time.monotonic()))  # noqa: ASYNC251
    assert time.monotonic() < ping.sent_at + ttl * 0.9
    # Handled after the stall (before the lease's timer: the event loop runs
    # I/O first), the answer finds the lease's time gone: the lease is lost
    # and its connection closed first.
    assert await ping.future is DROPPED
    assert lease.lost


async def test_a_hold_that_waited_past_its_ttl_is_renewed_like_any_other(
    store: holdline_client.Store,
) -> None:
    # B's HOLD waits in line 1.2 s behind A's (ttl 800 ms): its grant
    # arrives past its first deadline, so a RENEW confirms it; from then on
    # the answers to its renewals keep it for as long as they come in time,
    # and one that comes too late still moves nothing.
    lock = store.lock("waited", ttl="800ms")
    a = await hold_in_background(lock, "k")

    async def release_once_b_waited() -> None:
        await until_waiters(store, "waited", 1)
        await asyncio.sleep(1.2)  # B's HOLD was sent before this: its grant is late
        await a.release()

    releaser = asyncio.create_task(release_once_b_waited())
    with pytest.raises(holdline_client.Lost) as caught:
        async with lock.hold("k", wait="10s") as lease:
            assert a.let_go.is_set()
            await asyncio.sleep(3 * 0.8)  # three ttls, on renewals alone
            assert not lease.lost
            await answer_after_the_deadline(lease, 0.8)
    await asyncio.wait_for(releaser, 10)
    assert_text(caught.value, "lost_silent", lock="waited", key='"k"', ttl="800ms")
