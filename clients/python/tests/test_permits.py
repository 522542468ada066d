"""Permits against a real `holdline serve`: semaphores (a key held by up to
N leases at once) and read-write locks (readers take one permit, a writer
all of them), in one FIFO line with no overtaking; what goes on the wire,
the server's error texts, INSPECT's holders, and a dropped connection
giving its permits back."""

import asyncio
import signal
import threading
from typing import List, Optional, Union

import pytest
from conftest import (
    BackgroundHold,
    Holder,
    Scripted,
    Server,
    hold_in_background,
    hold_once,
    until_waiters,
)

import holdline_client
from holdline_client._inspect import key_state


async def held_state(lock: holdline_client.Lock, key: str) -> holdline_client.KeyState:
    """The key's state on the server, which must keep some."""
    state = await lock.inspect(key)
    assert state is not None
    return state


async def release_all(holds: List[BackgroundHold]) -> None:
    for hold in holds:
        await hold.release()


async def test_a_semaphore_of_three_admits_three_and_lines_up_the_fourth(
    store: holdline_client.Store,
) -> None:
    lock = store.lock("providers", permits=3)
    holds = [await hold_in_background(lock, "stripe") for _ in range(3)]
    fences = [hold.lease.fence for hold in holds]
    assert fences == sorted(fences) and len(set(fences)) == 3
    assert [hold.lease.permits for hold in holds] == [1, 1, 1]

    fourth = asyncio.create_task(hold_once(lock, "stripe"))
    await until_waiters(store, "providers", 1)
    state = await held_state(lock, "stripe")
    assert (state.holders, state.permits_held, state.waiters) == (3, 3, 1)
    assert not fourth.done()

    await holds[1].release()  # one leaves: the fourth fits
    fourth_fence = await asyncio.wait_for(fourth, 10)
    assert fourth_fence > max(fences)
    await release_all([holds[0], holds[2]])
    freed = await held_state(lock, "stripe")
    assert (freed.held, freed.holders, freed.permits_held) == (False, 0, 0)
    assert freed.fence == fourth_fence


async def test_a_hold_takes_the_permits_it_asks_for(store: holdline_client.Store) -> None:
    lock = store.lock("batches", permits=5)
    two = await hold_in_background(lock, "k", permits=2)
    three = await hold_in_background(lock, "k", permits=3)
    assert (two.lease.permits, three.lease.permits) == (2, 3)
    state = await held_state(lock, "k")
    assert (state.holders, state.permits_held) == (2, 5)
    waiting = BackgroundHold(lock, "k")  # one more does not fit
    await until_waiters(store, "batches", 1)
    await two.release()
    await waiting.granted()
    assert waiting.lease.permits == 1 and waiting.lease.fence > three.lease.fence
    await release_all([three, waiting])


async def test_readers_share_and_a_writer_waits_with_no_overtaking(
    store: holdline_client.Store,
) -> None:
    docs = store.lock("docs", permits=8)
    readers = [await hold_in_background(docs, "d") for _ in range(2)]
    writer = BackgroundHold(docs, "d", exclusive=True)
    await until_waiters(store, "docs", 1)
    # Readers arriving behind a waiting writer wait behind it, though they fit.
    late = []
    for count in (2, 3):
        late.append(BackgroundHold(docs, "d"))
        await until_waiters(store, "docs", count)
    second_writer = BackgroundHold(docs, "d", exclusive=True)
    await until_waiters(store, "docs", 4)
    last_reader = BackgroundHold(docs, "d")
    await until_waiters(store, "docs", 5)
    state = await held_state(docs, "d")
    assert (state.holders, state.permits_held, state.waiters) == (2, 2, 5)

    await readers[0].release()
    state = await held_state(docs, "d")  # the writer waits for every reader
    assert (state.holders, state.waiters) == (1, 5) and not writer.held

    await readers[1].release()
    await writer.granted()
    assert writer.lease.permits == 8
    assert writer.lease.fence > max(r.lease.fence for r in readers)
    state = await held_state(docs, "d")
    assert (state.holders, state.permits_held, state.waiters) == (1, 8, 4)
    assert not any(r.held for r in late)

    # The writer leaves: both readers at the head are granted together; the
    # second writer, then the reader behind it, still wait.
    await writer.release()
    for reader in late:
        await reader.granted()
    state = await held_state(docs, "d")
    assert (state.holders, state.permits_held, state.waiters) == (2, 2, 2)
    assert all(r.lease.fence > writer.lease.fence for r in late)
    assert not second_writer.held and not last_reader.held

    await release_all(late)
    await second_writer.granted()
    assert not last_reader.held
    await second_writer.release()
    await last_reader.granted()
    assert last_reader.lease.fence > second_writer.lease.fence
    await last_reader.release()


async def test_try_hold_holds_only_when_its_permits_fit_and_nobody_waits(
    store: holdline_client.Store,
) -> None:
    lock = store.lock("tries", permits=3)
    two = await hold_in_background(lock, "k", permits=2)
    async with lock.try_hold("k", exclusive=True) as lease:
        assert lease is None  # all three do not fit
    async with lock.try_hold("k", permits=2) as lease:
        assert lease is None
    async with lock.try_hold("k") as lease:
        assert lease is not None and lease.permits == 1  # the third permit
        assert await asyncio.wait_for(_try_one(lock), 10) is None  # all taken
    # One permit free again, but a writer waits: a try must not overtake it.
    writer = BackgroundHold(lock, "k", exclusive=True)
    await until_waiters(store, "tries", 1)
    async with lock.try_hold("k") as lease:
        assert lease is None
    await two.release()
    await writer.granted()
    await writer.release()
    async with lock.try_hold("k", exclusive=True) as lease:
        assert lease is not None and lease.permits == 3


async def _try_one(lock: holdline_client.Lock) -> Optional[int]:
    """A try from a task of its own (another holder): its fence, or None."""
    async with lock.try_hold("k") as lease:
        return None if lease is None else lease.fence


async def test_the_servers_error_texts_come_back_as_they_are(store: holdline_client.Store) -> None:
    docs = store.lock("docs", permits=1024)
    reader = await hold_in_background(docs, "x")
    # The lock is known to the server now (a key of it held): another count
    # is refused, on any key, for holds and tries alike.
    for other, count in [(store.lock("docs", permits=8), 8), (store.lock("docs"), 1)]:
        text = f"lock docs: opened with 1024 permits, not {count}: invalid"
        with pytest.raises(holdline_client.Invalid) as caught:
            async with other.hold("y"):
                pass
        assert (str(caught.value), caught.value.kind) == (text, "invalid")
        with pytest.raises(holdline_client.Invalid) as caught:
            async with other.try_hold("x"):
                pass
        assert str(caught.value) == text
    await reader.release()

    providers = store.lock("providers", permits=5)
    for asked in (6, 0):
        with pytest.raises(holdline_client.Invalid) as caught:
            async with providers.hold("stripe", permits=asked):
                pass
        asked_text = f'lock providers: key "stripe": {asked} permits asked of a lock of 5: invalid'
        assert str(caught.value) == asked_text
        with pytest.raises(holdline_client.Invalid) as caught:
            async with providers.try_hold("stripe", permits=asked):
                pass
        assert str(caught.value) == asked_text
    with pytest.raises(holdline_client.Invalid) as caught:
        async with store.lock("providers", permits=0).hold("stripe"):
            pass
    assert str(caught.value) == "lock providers: a lock has 1 to 1000000 permits, not 0: invalid"
    # The connections given back after the errors still serve.
    async with providers.hold("stripe", permits=5) as lease:
        assert lease.permits == 5


def test_permits_and_exclusive_together_is_a_type_error() -> None:
    router = holdline_client.connect("127.0.0.1:1")._router  # never connected: no server needed
    opened = holdline_client.Lock(router, "rw", permits=4)
    with pytest.raises(TypeError, match="permits=m or exclusive=True, not both"):
        opened.hold("k", permits=2, exclusive=True)
    with pytest.raises(TypeError, match="permits=m or exclusive=True, not both"):
        opened.try_hold("k", permits=1, exclusive=True)
    with pytest.raises(TypeError, match="permits is an int, not str"):
        opened.hold("k", permits="2")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="permits is an int, not bool"):
        holdline_client.Lock(router, "rw", permits=True)


async def test_inspect_lists_every_holder_with_its_fence_and_permits(
    store: holdline_client.Store,
) -> None:
    lock = store.lock("looked", permits=4)
    one = await hold_in_background(lock, "k")
    two = await hold_in_background(lock, "k", permits=2)
    writer = BackgroundHold(lock, "k", exclusive=True)
    await until_waiters(store, "looked", 1)
    state = await held_state(lock, "k")
    assert state.held and (state.holders, state.permits_held, state.waiters) == (2, 3, 1)
    leases = [one.lease, two.lease]
    assert [(h.lease, h.fence, h.permits) for h in state.holder_list] == [
        (lease.id, lease.fence, lease.permits) for lease in leases
    ]
    assert state.holder == state.holder_list[0]  # the oldest grant
    assert state.fence == two.lease.fence  # the highest among the holders
    assert all(h.addr.startswith("127.0.0.1:") for h in state.holder_list)
    assert state.holder_list[0].id != state.holder_list[1].id  # a connection each
    await release_all([one, two])
    await writer.granted()
    state = await held_state(lock, "k")
    assert (state.holders, state.permits_held, state.waiters) == (1, 4, 0)
    assert state.holder is not None and state.holder.permits == 4
    assert state.holder.fence == writer.lease.fence
    await writer.release()


def test_inspect_reads_resp2_and_servers_before_permits() -> None:
    holder = [b"id", 7, b"name", None, b"addr", b"127.0.0.1:5", b"lease", 3]
    listed = [*holder, b"fence", 12, b"permits", 2]
    flat = [b"held", True, b"fence", 12, b"waiters", 0, b"holder", listed]
    flat += [b"holders", 1, b"permits_held", 2, b"holder_list", [listed]]
    state = key_state(flat)
    assert state is not None and state.holder is not None
    assert state.holder_list == (state.holder,) and state.holder.permits == 2
    assert (state.holders, state.permits_held, state.holder.fence) == (1, 2, 12)
    # A server before permits: its one holder, of one permit, under the key's fence.
    old = key_state([b"held", True, b"fence", 9, b"waiters", 0, b"holder", holder])
    assert old is not None and old.holder == holdline_client.KeyHolder(
        7, None, "127.0.0.1:5", 3, 9, 1
    )
    assert (old.holders, old.permits_held, old.holder_list) == (1, 1, (old.holder,))
    with pytest.raises(holdline_client.Invalid):
        key_state([b"held", True, b"fence", 9, b"waiters", 0, b"holder_list", 5])


async def test_a_closed_store_gives_its_permits_back(
    server: Server, store: holdline_client.Store
) -> None:
    other = await holdline_client.connect(server.address)
    theirs = other.lock("pool", permits=3, ttl="60s")  # only closing frees them
    holds = [
        await hold_in_background(theirs, "k", permits=2),
        await hold_in_background(theirs, "k"),
    ]
    writer = BackgroundHold(store.lock("pool", permits=3), "k", exclusive=True)
    await until_waiters(store, "pool", 1)
    await other.aclose()
    await writer.granted()
    assert writer.lease.permits == 3
    for hold in holds:
        assert hold.lease.lost
        hold.let_go.set()
        with pytest.raises(holdline_client.Lost):
            await asyncio.wait_for(hold.task, 10)
    await writer.release()


async def test_a_killed_holder_process_gives_its_permits_back(
    server: Server, store: holdline_client.Store
) -> None:
    flags = ("--permits", "4", "--take", "3")
    with Holder(server.address, "killed", "k", "60s", *flags) as holder:
        first = await asyncio.to_thread(holder.read_line)
        assert first.startswith("held ")
        lock = store.lock("killed", permits=4)
        one = await hold_in_background(lock, "k")  # the fourth permit
        waiting = asyncio.create_task(hold_once(lock, "k"))  # needs one more
        await until_waiters(store, "killed", 1)
        state = await held_state(lock, "k")
        assert (state.holders, state.permits_held) == (2, 4)
        holder.send(signal.SIGKILL)
        fence = await asyncio.wait_for(waiting, 10)
        assert fence > one.lease.fence > int(first.split()[1])
        await one.release()


def test_the_blocking_flavour_takes_permits(server: Server) -> None:
    with holdline_client.connect_sync(server.address) as store:
        lock = store.lock("blocking", permits=3)
        assert lock.permits == 3
        tried: List[Optional[int]] = []

        def try_from_another_thread(exclusive: bool) -> None:
            with lock.try_hold("k", exclusive=exclusive) as lease:
                tried.append(None if lease is None else lease.permits)

        with lock.hold("k", permits=2) as lease:
            assert lease.permits == 2
            for exclusive in (True, False):
                thread = threading.Thread(target=try_from_another_thread, args=(exclusive,))
                thread.start()
                thread.join(10)
        assert tried == [None, 1]
        with lock.hold("k", exclusive=True) as lease:
            assert lease.permits == 3
            assert lock.inspect("k") is not None


async def test_permits_and_take_go_on_the_wire_only_when_not_one() -> None:
    async def grant(command: List[bytes]) -> Optional[bytes]:
        return b"*2\r\n:1\r\n:1\r\n" if command[0] in (b"HOLD", b"TRYHOLD") else b"+OK\r\n"

    async with Scripted(grant) as single, holdline_client.connect(single.address) as store:
        plain, five = store.lock("one"), store.lock("five", permits=5)
        holds: List[Union[holdline_client.Hold, holdline_client.TryHold]] = [
            plain.hold("k"),
            plain.hold("k", exclusive=True),  # all of one permit: the plain hold
            plain.hold("k", permits=2),
            five.hold("k"),
            five.hold("k", permits=1),
            five.hold("k", permits=2),
            five.hold("k", exclusive=True),
            five.try_hold("k", exclusive=True),
        ]
        for hold in holds:
            async with hold as lease:
                assert lease is not None
        sent = [c[3:] for c in single.commands if c[0] in (b"HOLD", b"TRYHOLD")]
    options = [[arg for arg in args if not arg.isdigit()] for args in sent]
    common = [b"WAIT", b"TTL"]
    assert options == [
        common,
        common,
        common + [b"TAKE"],
        common + [b"PERMITS"],
        common + [b"PERMITS"],
        common + [b"PERMITS", b"TAKE"],
        common + [b"PERMITS", b"TAKE", b"ALL"],
        [b"TTL", b"PERMITS", b"TAKE", b"ALL"],
    ]
    assert sent[2][-2:] == [b"TAKE", b"2"] and sent[3][-2:] == [b"PERMITS", b"5"]
