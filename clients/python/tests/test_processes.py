"""Holders in processes of their own: killed, and stopped with SIGSTOP."""

import asyncio
import signal
import time

from conftest import Holder, Server, hold_once
from texts import assert_text

import holdline_client


async def test_a_killed_holders_key_goes_to_the_next_at_once(
    server: Server, store: holdline_client.Store
) -> None:
    # A ttl far longer than the test: only the closed connection can free it.
    with Holder(server.address, "killed", "k", "60s") as holder:
        first = await asyncio.to_thread(holder.read_line)
        assert first.startswith("held ")
        lock = store.lock("killed")
        waiting = asyncio.create_task(hold_once(lock, "k"))
        await asyncio.sleep(0.3)
        assert not waiting.done()
        started = time.monotonic()
        holder.send(signal.SIGKILL)
        fence = await asyncio.wait_for(waiting, 10)
        assert time.monotonic() - started < 10
        assert fence > int(first.split()[1])


async def test_a_stopped_holder_loses_its_lease_after_ttl_and_learns_it_on_waking(
    server: Server, store: holdline_client.Store
) -> None:
    with Holder(server.address, "stopped", "k", "1s") as holder:
        assert (await asyncio.to_thread(holder.read_line)).startswith("held ")
        holder.send(signal.SIGSTOP)
        stopped_at = time.monotonic()
        lock = store.lock("stopped")
        async with lock.hold("k", wait="20s") as lease:
            # Granted once the stopped holder's lease ran out, not before.
            assert time.monotonic() - stopped_at >= 0.5
            holder.send(signal.SIGCONT)
            # Its time ran out while it was stopped: its clock says so first,
            # whatever the server pushed meanwhile.
            signal_line = await asyncio.to_thread(holder.read_line)
            assert signal_line.startswith("signal ")
            text = signal_line[len("signal ") :]
            assert_text(
                holdline_client.Lost(text), "lost_silent", lock="stopped", key='"k"', ttl="1s"
            )
            assert await asyncio.to_thread(holder.read_line) == f"exit {text}"
            assert not lease.lost
