"""Leases that stay safe across a network: a real server behind
`clients/testing/frozen_proxy.py`, frozen with SIGSTOP while its sockets
stay open (what a stalled switch or a dead NAT entry does).

The bounds asserted are the rule's own, nothing tighter: a holder behind a
frozen link sees its loss at least 10 ms before anyone else is granted the
key, and within ttl + 0.5 s of the freeze; a waiter behind one gives up
`closed` within its wait + ttl + 1 s and keeps nothing.
"""

import asyncio
import signal
import time
from typing import List, Optional

import pytest
from conftest import Holder, Proxy, hold_in_background, until_waiters
from texts import assert_text

import holdline_client


async def test_a_holder_behind_a_frozen_link_is_lost_before_the_key_moves_on(
    proxy: Proxy, store: holdline_client.Store
) -> None:
    async with holdline_client.connect(proxy.address) as far:
        await lost_before_the_key_moves_on(proxy, far, store)


async def lost_before_the_key_moves_on(
    proxy: Proxy, far: holdline_client.Store, near: holdline_client.Store
) -> None:
    """A holds through `far` (behind the proxy), B waits through `near`;
    the proxy freezes: A's signal fires at least 10 ms before B's grant,
    within ttl + 0.5 s of the freeze, and A's hold raises `lost_silent`."""
    held = asyncio.Event()
    lost_at: List[float] = []

    async def holder() -> None:
        async with far.lock("frozen", ttl="2s").hold("k") as lease:
            assert lease is not None
            held.set()
            await lease.signal.wait()
            lost_at.append(time.monotonic())

    async def waiter() -> float:
        async with near.lock("frozen", ttl="2s").hold("k", wait="30s"):
            return time.monotonic()

    a = asyncio.create_task(holder())
    await asyncio.wait_for(held.wait(), 10)
    b = asyncio.create_task(waiter())
    await until_waiters(near, "frozen", 1)
    frozen_at = proxy.freeze()
    with pytest.raises(holdline_client.Lost) as caught:
        await asyncio.wait_for(a, 10)
    granted_at = await asyncio.wait_for(b, 10)
    assert lost_at, "the signal never fired"
    assert lost_at[0] <= granted_at - 0.010, "the key moved on before the holder knew"
    assert lost_at[0] - frozen_at <= 2.0 + 0.5
    assert caught.value.kind == "lost"
    assert_text(caught.value, "lost_silent", lock="frozen", key='"k"', ttl="2s")


async def test_a_waiter_behind_a_frozen_link_gives_up_closed_and_keeps_nothing(
    proxy: Proxy, store: holdline_client.Store
) -> None:
    lock = store.lock("frozen", ttl="2s")
    entered: List[bool] = []

    async with holdline_client.connect(proxy.address) as far:

        async def waiter() -> None:
            async with far.lock("frozen", ttl="2s").hold("k", wait="3s"):
                entered.append(True)

        first = await hold_in_background(lock, "k")
        started = time.monotonic()
        waiting = asyncio.create_task(waiter())
        await until_waiters(store, "frozen", 1)
        proxy.freeze()
        with pytest.raises(holdline_client.Closed) as caught:
            await asyncio.wait_for(waiting, 15)
        gave_up_after = time.monotonic() - started
        proxy.thaw()
        await first.release()
        # Another client gets the key: the abandoned HOLD kept nothing.
        async with lock.hold("k", wait="10s") as lease:
            assert lease is not None
    assert entered == []
    assert 3.0 <= gave_up_after <= 3.0 + 2.0 + 1.0
    assert caught.value.kind == "closed"
    assert_text(caught.value, "wait_silent", lock="frozen", key='"k"', wait="3s", ttl="2s")


async def test_a_stopped_holder_answers_lost_on_its_first_look(
    proxy: Proxy, store: holdline_client.Store
) -> None:
    # The holder's link is frozen too, so nothing reaches it when it wakes:
    # only its clock can tell it. Its first act on waking is to look
    # (see holder.py), before any timer or reply.
    with Holder(proxy.address, "stopped", "k", "1s", "look") as holder:
        assert (await asyncio.to_thread(holder.read_line)).startswith("held ")
        proxy.freeze()
        holder.send(signal.SIGSTOP)
        lock = store.lock("stopped")
        async with lock.hold("k", wait="20s") as lease:  # the server let it go after its ttl
            assert lease is not None
        holder.send(signal.SIGCONT)
        look = await asyncio.to_thread(holder.read_line)
        expected = 'lock stopped: key "k": the lease was lost: the server answered nothing'
        assert look.startswith(f"look True {expected}"), look
        assert_text(
            holdline_client.Lost(look[len("look True ") :]),
            "lost_silent",
            lock="stopped",
            key='"k"',
            ttl="1s",
        )
        proxy.thaw()
        assert (await asyncio.to_thread(holder.read_line)).startswith("signal lock stopped")
        exit_line: Optional[str] = await asyncio.to_thread(holder.read_line)
        assert exit_line == "exit " + look[len("look True ") :]


def test_a_blocking_holder_behind_a_frozen_link_sees_its_loss(proxy: Proxy) -> None:
    with holdline_client.connect_sync(proxy.address) as store:
        with pytest.raises(holdline_client.Lost) as caught:
            with store.lock("frozen", ttl="1s").hold("k") as lease:
                frozen_at = proxy.freeze()
                assert lease.signal.wait(10)
                assert time.monotonic() - frozen_at <= 1.0 + 0.5
                assert lease.lost
                with pytest.raises(holdline_client.Lost):
                    lease.check()
    assert_text(caught.value, "lost_silent", lock="frozen", key='"k"', ttl="1s")
