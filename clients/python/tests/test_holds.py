"""Holds against a real `holdline serve`: the usage example, FIFO, try,
release on every exit, renewal, cancellation, and independence of holds."""

import asyncio
import time
from types import SimpleNamespace
from typing import Any, List, TypeVar

import pytest
from conftest import Server, hold_in_background, hold_once, refused_address, until_waiters
from texts import assert_text

import holdline_client


async def test_the_usage_example_holds_waits_and_tries(store: holdline_client.Store) -> None:
    charged: List[Any] = []
    said: List[str] = []
    used: List[int] = []
    invoice = SimpleNamespace(id=9)

    async def charge(invoice: Any, fence: int) -> None:
        charged.append((invoice.id, fence))

    async def work(lease: holdline_client.Lease) -> int:
        return lease.fence

    def say(text: str) -> None:
        said.append(text)

    def use(value: int) -> None:
        used.append(value)

    invoices = store.lock("invoices", ttl="10s", max_hold="2m")

    async with invoices.hold(invoice.id) as lease:
        await charge(invoice, fence=lease.fence)
    async with invoices.hold(invoice.id, wait="30s") as lease:
        await work(lease)

    async with invoices.try_hold(invoice.id) as maybe:
        if maybe is None:
            say("someone is charging it already")
        else:
            use(await work(maybe))

    assert said == []
    assert len(charged) == 1 and used and used[0] > charged[0][1]

    async def another_task_tries() -> None:
        async with invoices.try_hold(invoice.id) as lease:
            if lease is None:
                say("someone is charging it already")
            else:
                use(await work(lease))

    async with invoices.hold(invoice.id) as lease:
        assert lease.key == "9" and not lease.lost and not lease.signal.is_set()
        await asyncio.create_task(another_task_tries())
    assert said == ["someone is charging it already"]


async def test_fences_grow_and_key_9_is_key_text_9(store: holdline_client.Store) -> None:
    lock = store.lock("fences")
    fences = []
    keys: List[holdline_client.Key] = [9, "9", 9]
    for key in keys:
        async with lock.hold(key) as lease:
            assert lease.key == "9"
            fences.append(lease.fence)
    assert fences == sorted(fences) and len(set(fences)) == 3


Note = TypeVar("Note")


async def _hold_noting(lock: holdline_client.Lock, notes: List[Note], note: Note) -> None:
    """Waits in the line of key "k" and notes `note` while it holds it:
    the notes come in the order of the grants."""
    async with lock.hold("k", wait="30s"):
        notes.append(note)


async def test_fifo_across_tasks(store: holdline_client.Store) -> None:
    lock = store.lock("fifo")
    order: List[int] = []
    tasks = []
    async with lock.hold("k"):
        for i in range(12):
            tasks.append(asyncio.create_task(_hold_noting(lock, order, i)))
            # The next one starts only once this one stands in the server's line.
            await until_waiters(store, "fifo", i + 1)
    await asyncio.gather(*tasks)
    assert order == list(range(12))


async def test_leaving_the_block_by_exception_releases_and_propagates_it_unchanged(
    store: holdline_client.Store,
) -> None:
    lock = store.lock("raise")

    class Mine(Exception):
        pass

    mine = Mine("boom")
    with pytest.raises(Mine) as caught:
        async with lock.hold("k"):
            raise mine
    assert caught.value is mine
    async with lock.try_hold("k") as lease:
        assert lease is not None  # let go
    for _ in range(2):
        with pytest.raises(Mine):
            async with lock.try_hold("k") as lease:
                assert lease is not None
                raise Mine()
    async with lock.hold("k", wait=0) as lease:
        assert lease is not None


async def test_hold_waits_up_to_wait_then_fails_in_use_with_the_cores_text(
    store: holdline_client.Store,
) -> None:
    invoices = store.lock("invoices")
    holder = await hold_in_background(invoices, 9)
    started = time.monotonic()
    with pytest.raises(holdline_client.InUse) as caught:
        async with invoices.hold(9, wait="300ms"):
            pytest.fail("granted while held")
    assert time.monotonic() - started >= 0.25
    assert str(caught.value) == 'lock invoices: key "9": held past the hold\'s wait: in use'
    assert caught.value.kind == "in use"
    with pytest.raises(holdline_client.InUse):
        async with invoices.hold(9, wait=0):
            pass
    await holder.release()
    stats = await store.stats("invoices")
    assert stats["timeouts"] == 2


async def test_leases_are_renewed_while_held_and_while_waiting(
    store: holdline_client.Store,
) -> None:
    # Two and a half ttls held, and as long in line: only renewal keeps them.
    # (A 1 s ttl leaves a busy machine 0.5 s of slack between renewals.)
    lock = store.lock("renew", ttl="1s")
    first = await hold_in_background(lock, "k")

    async def second() -> None:
        async with lock.hold("k", wait="10s") as lease:
            await asyncio.sleep(2.5)
            assert not lease.lost and not lease.signal.is_set()

    waiting = asyncio.create_task(second())
    await asyncio.sleep(2.5)  # the second waits in line, renewing
    assert not first.lease.lost
    await first.release()
    await waiting


async def test_a_stalled_loop_loses_the_lease_at_its_ttl(store: holdline_client.Store) -> None:
    lock = store.lock("stall", ttl="300ms")
    with pytest.raises(holdline_client.Lost) as caught:
        async with lock.hold("t") as lease:
            time.sleep(1.0)  # noqa: ASYNC251 - a stall on purpose: no renewal goes out
            await asyncio.wait_for(lease.signal.wait(), 5)
            assert lease.lost
    # The first look after the stall answers from the clock.
    assert_text(caught.value, "lost_silent", lock="stall", key='"t"', ttl="300ms")
    assert caught.value.kind == "lost"
    assert (await store.stats("stall"))["expirations"] == 1


async def test_a_stalled_holders_old_fence_is_refused(store: holdline_client.Store) -> None:
    lock = store.lock("fenced", ttl="300ms")

    async def fresh_holder(stale_fence: int) -> None:
        async with lock.hold("k", wait="5s") as fresh:
            assert fresh.fence > stale_fence
            await store.put("fenced", "k", fresh.fence, "row", b"fresh")
            with pytest.raises(holdline_client.Lost):
                await store.put("fenced", "k", stale_fence, "row", b"stale")

    with pytest.raises(holdline_client.Lost):
        async with lock.hold("k") as stale:
            time.sleep(1.0)  # noqa: ASYNC251 - a stall on purpose: the lease runs out
            await asyncio.wait_for(stale.signal.wait(), 5)
            # Another task: this one's hold of "k" is still running.
            await asyncio.create_task(fresh_holder(stale.fence))
            with pytest.raises(holdline_client.Lost):
                await store.put("fenced", "k", stale.fence, "row", b"stale")
    assert await store.get("row") == b"fresh"
    assert await store.get("no such row") is None


async def test_max_hold_revokes_and_hands_the_key_on(store: holdline_client.Store) -> None:
    # A ttl far beyond the test: only the push can tell the loss in time.
    invoices = store.lock("invoices", ttl="60s", max_hold="500ms")
    handed_on = asyncio.Event()
    fences: List[int] = []

    async def next_in_line() -> None:
        async with invoices.hold("m", wait="10s") as lease:
            fences.append(lease.fence)
            handed_on.set()

    with pytest.raises(holdline_client.Lost) as caught:
        async with invoices.hold("m") as lease:
            fences.append(lease.fence)
            task = asyncio.create_task(next_in_line())
            await asyncio.wait_for(lease.signal.wait(), 5)
            assert lease.lost and isinstance(lease.error, holdline_client.Lost)
            with pytest.raises(holdline_client.Lost):
                lease.check()
            # The next in line gets the key while this block still runs.
            await asyncio.wait_for(handed_on.wait(), 5)
    await task
    assert str(caught.value) == (
        'lock invoices: key "m": the lease was lost: it was revoked at its maxHold'
    )
    assert fences[1] > fences[0]
    assert (await store.stats("invoices"))["revocations"] == 1


async def test_a_lost_lease_lets_the_blocks_own_exception_through(
    store: holdline_client.Store,
) -> None:
    lock = store.lock("lostraise", max_hold="100ms")
    with pytest.raises(KeyError):
        async with lock.hold("k") as lease:
            await asyncio.wait_for(lease.signal.wait(), 5)
            raise KeyError("mine")


async def test_hold_inside_a_hold_of_the_same_key_is_invalid_at_once(
    store: holdline_client.Store,
) -> None:
    invoices = store.lock("invoices")
    async with invoices.hold(7):
        started = time.monotonic()
        with pytest.raises(holdline_client.Invalid) as caught:
            async with invoices.hold(7, wait="10s"):
                pass
        assert time.monotonic() - started < 5
        assert str(caught.value) == (
            'lock invoices: key "7": hold inside a hold of the same key: invalid'
        )
        async with invoices.try_hold(7) as inner:
            assert inner is None
        async with invoices.hold(8) as other:
            assert other is not None  # another key is another line


async def test_a_bad_key_is_invalid_with_the_servers_text(store: holdline_client.Store) -> None:
    invoices = store.lock("invoices")
    with pytest.raises(holdline_client.Invalid) as caught:
        async with invoices.hold(""):
            pass
    assert str(caught.value) == 'lock invoices: key "": the key is empty: invalid'
    with pytest.raises(holdline_client.Invalid) as caught:
        async with invoices.try_hold("a\nb"):
            pass
    assert str(caught.value) == (
        'lock invoices: key "a\\nb": the key holds a control character: invalid'
    )
    async with invoices.hold("ok") as lease:  # the connections are still fine
        assert lease is not None


async def test_a_cancelled_wait_leaves_the_line(store: holdline_client.Store) -> None:
    lock = store.lock("cancel")
    got: List[str] = []
    first = await hold_in_background(lock, "k")
    with pytest.raises(asyncio.TimeoutError):
        await asyncio.wait_for(_hold_noting(lock, got, "cancelled"), 0.5)
    await until_waiters(store, "cancel", 0)
    later = asyncio.create_task(_hold_noting(lock, got, "later"))
    await until_waiters(store, "cancel", 1)
    await first.release()
    await asyncio.wait_for(later, 5)
    assert got == ["later"]


async def test_a_waiting_hold_never_delays_another_holds_release(
    store: holdline_client.Store,
) -> None:
    lock = store.lock("independent")
    b = await hold_in_background(lock, "b")
    async with lock.hold("a"):
        waiter = asyncio.create_task(hold_once(lock, "b", "20s"))
        await until_waiters(store, "independent", 1)
        started = time.monotonic()
    assert time.monotonic() - started < 5  # released while "b"'s wait goes on
    async with lock.hold("a", wait=0):
        pass
    await b.release()
    await asyncio.wait_for(waiter, 10)


async def test_a_dropped_connection_sets_the_signal_and_loses_the_lease(
    server: Server,
) -> None:
    store = await holdline_client.connect(server.address)
    lock = store.lock("drop")
    with pytest.raises(holdline_client.Lost) as caught:
        async with lock.hold("k") as lease:
            server.stop()
            await asyncio.wait_for(lease.signal.wait(), 5)
    assert_text(caught.value, "lost_connection", lock="drop", key='"k"')
    with pytest.raises(holdline_client.Closed) as closed:
        async with lock.hold("k"):
            pass
    assert_text(closed.value, "cannot_connect", hostport=server.address)
    await store.aclose()


async def test_server_shutdown_fails_waiters_closed_and_holders_lost(server: Server) -> None:
    store = await holdline_client.connect(server.address)
    invoices = store.lock("invoices")
    held = asyncio.Event()
    outcomes: List[BaseException] = []

    async def holder() -> None:
        try:
            async with invoices.hold(7) as lease:
                held.set()
                await asyncio.wait_for(lease.signal.wait(), 10)
        except holdline_client.Error as err:
            outcomes.append(err)

    async def waiter() -> None:
        try:
            async with invoices.hold(7, wait="30s"):
                pass
        except holdline_client.Error as err:
            outcomes.append(err)

    tasks = [asyncio.create_task(holder())]
    await held.wait()
    tasks.append(asyncio.create_task(waiter()))
    await until_waiters(store, "invoices", 1)
    assert await asyncio.to_thread(server.terminate) == 0
    await asyncio.wait_for(asyncio.gather(*tasks), 10)
    texts = sorted(str(e) for e in outcomes)
    assert texts == [
        'lock invoices: key "7": the lease was lost: its store closed',
        'lock invoices: key "7": the store is closed: closed',
    ]
    assert {type(e) for e in outcomes} == {holdline_client.Lost, holdline_client.Closed}
    await store.close()


async def test_a_closed_store_fails_closed(store: holdline_client.Store) -> None:
    invoices = store.lock("invoices")
    await store.close()
    await store.close()  # idempotent
    with pytest.raises(holdline_client.Closed) as caught:
        async with invoices.hold(7):
            pass
    assert str(caught.value) == 'lock invoices: key "7": the store is closed: closed'
    assert caught.value.kind == "closed"
    with pytest.raises(holdline_client.Closed) as caught:
        store.lock("invoices")
    assert str(caught.value) == "lock invoices: the store is closed: closed"


async def test_closing_the_store_loses_its_leases(server: Server) -> None:
    store = await holdline_client.connect(server.address)
    lock = store.lock("closing")
    with pytest.raises(holdline_client.Lost) as caught:
        async with lock.hold("k") as lease:
            await store.close()
            assert lease.signal.is_set()
    assert str(caught.value) == 'lock closing: key "k": the lease was lost: its store closed'


async def test_connect_fails_closed_when_nothing_listens() -> None:
    with refused_address() as dead, pytest.raises(holdline_client.Closed) as caught:
        await holdline_client.connect(dead, connect_timeout="2s")
    assert_text(caught.value, "cannot_connect", hostport=dead)


async def test_the_longest_wait_a_client_takes_waits_until_the_key_is_let_go(
    store: holdline_client.Store,
) -> None:
    lock = store.lock("longest")
    held = await hold_in_background(lock, "l")
    longest = f"{(1 << 62) - 1}ms"  # the largest wait the client accepts
    waiting = asyncio.create_task(hold_once(lock, "l", wait=longest))
    await until_waiters(store, "longest", 1)
    await asyncio.sleep(0.3)
    assert not waiting.done(), "the wait has not ended"
    await held.release()
    assert await waiting > 0
