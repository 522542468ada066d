"""`Lock.inspect(key)`: the server's `INSPECT` passed through as a
`KeyState`, None for a key the server keeps nothing for."""

import asyncio
from typing import Optional

import pytest
from conftest import Server, until

import holdline_client
from holdline_client._inspect import key_state


async def until_waiting(
    lock: holdline_client.Lock, key: str, count: int
) -> holdline_client.KeyState:
    """Waits until INSPECT says `count` wait on `key`; answers that state."""
    state: Optional[holdline_client.KeyState] = None

    async def reached() -> bool:
        nonlocal state
        state = await lock.inspect(key)
        return state is not None and state.waiters == count

    await until(reached, f"{count} waiting on {key}")
    assert state is not None
    return state


async def test_inspect_tells_the_holder_the_fence_and_the_line(
    store: holdline_client.Store,
) -> None:
    lock = store.lock("inspected", ttl="2s")
    assert await lock.inspect("k") is None
    async with lock.hold("k") as lease:
        state = await lock.inspect("k")
        assert state is not None
        assert state.held and state.fence == lease.fence and state.waiters == 0
        assert state.held_for_ms is not None and state.held_for_ms >= 0
        assert state.lease_left_ms is not None and 0 < state.lease_left_ms <= 2000
        assert state.holder is not None and state.holder.lease == lease.id
        assert state.holder.addr.startswith("127.0.0.1:")
        waiter = asyncio.create_task(lock.hold("k", wait="10s").__aenter__())
        try:
            # Another lock handle (another ttl) looks at the same key.
            waiting = await until_waiting(store.lock("inspected"), "k", 1)
            assert waiting.holder == state.holder
        finally:
            waiter.cancel()
            with pytest.raises(asyncio.CancelledError):
                await waiter
        # The cancelled waiter's connection closes on its own time: let
        # the server see it leave the line before the release, or the key
        # may go to it (a later fence) on its way out.
        await until_waiting(store.lock("inspected"), "k", 0)
    after = await lock.inspect(9)
    assert after is None
    released = await lock.inspect("k")
    assert released is not None
    assert not released.held and released.holder is None
    assert released.held_for_ms is None and released.lease_left_ms is None
    assert released.fence == lease.fence


def test_the_blocking_flavour_inspects_too(server: Server) -> None:
    with holdline_client.connect_sync(server.address) as store:
        lock = store.lock("inspected")
        assert lock.inspect("k") is None
        with lock.hold("k") as lease:
            state = lock.inspect("k")
            assert state is not None and state.held and state.fence == lease.fence


def test_an_answer_that_is_not_inspects_map_is_invalid() -> None:
    assert key_state(None) is None
    flat = [b"held", False, b"fence", 3, b"waiters", 0, b"held_for_ms", None]
    assert key_state(flat) == holdline_client.KeyState(False, 3, None, None, 0, None)
    for bad in [b"OK", 7, {b"held": True}, [b"held"]]:
        with pytest.raises(holdline_client.Invalid):
            key_state(bad)
