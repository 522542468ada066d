"""A planned hand-over on a real cluster: etcd and three `holdline serve`
nodes (clients/testing/cluster.py: 8 partitions, etcd ttl 2 s, max ttl
2 s). A node that gets SIGTERM hands its partitions, with their leases and
lines, to the next owners and exits; a holder follows its lease there and
keeps it (its function runs on, its signal stays clear, its fence is the
same, the new owner renews it), and a waiter keeps its place in line.

The nodes get `HOLDLINE_DRAIN_TIMEOUT=100ms` from the environment (the
harness passes no flags of its own), so a node hands over at once rather
than draining for the default 30 s first. Each test ends one node: the
first node 0, the second node 1."""

import asyncio
import os
import signal
import time
from pathlib import Path
from typing import Iterator, List

import pytest
from cluster import Cluster, command
from conftest import PATIENCE, server_binary, until

import holdline_client

TTL = "2s"


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    if not Path("/usr/bin/etcd").is_file():
        if os.environ.get("HOLDLINE_REQUIRE_TOOLS"):
            pytest.fail("no /usr/bin/etcd (Debian's etcd-server) for the cluster tests")
        pytest.skip("no /usr/bin/etcd (Debian's etcd-server)")
    binary = str(server_binary())
    with pytest.MonkeyPatch.context() as env:
        env.setenv("HOLDLINE_DRAIN_TIMEOUT", "100ms")  # the nodes inherit it
        c = Cluster(nodes=3, partitions=8, etcd_ttl=2, binary=binary, max_ttl=TTL)
        c.start_all()
    try:
        hello = command(c.nodes[0].addr, "HELLO", "3")
        if not (isinstance(hello, dict) and hello.get("handover") == 1):
            pytest.skip(f"the server at {binary} cannot hand leases over (HELLO: {hello!r})")
        yield c
    finally:
        c.close()


async def sigterm(c: Cluster, i: int, *stores: holdline_client.Store) -> None:
    """SIGTERM node i (it hands its partitions over), waits for it to exit
    and for the others to serve every slot, and has `stores` fetch the map
    again (a command sent to the node gone would fail `Closed` once)."""
    proc = c.nodes[i].proc
    assert proc is not None
    proc.send_signal(signal.SIGTERM)
    status = await asyncio.to_thread(proc.wait, 15)
    assert status == 0, f"node {i} exited {status}"
    await asyncio.to_thread(c.wait_covered)
    for store in stores:
        await store._router.refresh()


async def test_a_holder_keeps_its_lease_through_a_planned_hand_over(cluster: Cluster) -> None:
    key = cluster.key_on(0, "handover-")
    every = ",".join(n.addr for n in cluster.nodes)
    async with holdline_client.connect(every) as mine, holdline_client.connect(every) as theirs:
        lock, other = mine.lock("handover", ttl=TTL), theirs.lock("handover", ttl=TTL)
        inside = asyncio.Event()
        seen: List[int] = []
        tries: List[bool] = []

        async def work() -> None:
            async with lock.hold(key) as lease:
                seen.append(lease.fence)
                inside.set()
                ends = time.monotonic() + 3.0  # the function: ~3 s
                while time.monotonic() < ends:
                    await asyncio.sleep(0.1)
                    lease.check()
                    assert not lease.signal.is_set()
                # More than a ttl after the hand-over: only renewals on the new
                # owner can keep the key held now.
                async with other.try_hold(key) as theirs_now:
                    tries.append(theirs_now is None)
                assert not lease.lost and not lease.signal.is_set()
                seen.append(lease.fence)

        task = asyncio.create_task(work())
        await asyncio.wait_for(inside.wait(), PATIENCE)
        await asyncio.sleep(0.3)
        await sigterm(cluster, 0, theirs)
        assert cluster.owner(key) != 0
        async with other.try_hold(key) as during:
            assert during is None, "the key was given to another client during the hold"
        await asyncio.wait_for(task, PATIENCE)  # the hold answers success, not Lost
        assert tries == [True], "the key was free near the end of the hold: not renewed"
        assert len(seen) == 2 and seen[0] == seen[1], seen  # the fence is unchanged
        async with other.try_hold(key) as after:  # free at once after the hold
            assert after is not None, "the key was not free after the hold returned"
            assert after.fence > seen[0]


async def test_a_waiter_keeps_its_place_through_a_planned_hand_over(cluster: Cluster) -> None:
    live = [n.index for n in cluster.nodes if n.alive()]
    assert 1 in live, live
    key = cluster.key_on(1, "handover-line-")
    every = ",".join(cluster.nodes[i].addr for i in live)
    stores = [await holdline_client.connect(every) for _ in range(3)]
    try:
        holder, waiter, late = (s.lock("handover", ttl=TTL) for s in stores)
        granted: List[str] = []
        let_go = asyncio.Event()
        inside = asyncio.Event()

        async def hold(lock: holdline_client.Lock, who: str) -> int:
            async with lock.hold(key, wait="20s") as lease:
                granted.append(who)
                if who == "holder":
                    inside.set()
                    await let_go.wait()
                    lease.check()
                return lease.fence

        first = asyncio.create_task(hold(holder, "holder"))
        await asyncio.wait_for(inside.wait(), PATIENCE)
        second = asyncio.create_task(hold(waiter, "waiter"))

        async def waiting(count: int) -> bool:
            state = await late.inspect(key)
            return state is not None and state.waiters == count

        await until(lambda: waiting(1), "the waiter in line")
        await sigterm(cluster, 1, *stores)
        assert cluster.owner(key) != 1
        await until(lambda: waiting(1), "the waiter in line on the new owner")
        third = asyncio.create_task(hold(late, "late"))
        await until(lambda: waiting(2), "the late waiter in line behind it")
        let_go.set()
        fences = await asyncio.wait_for(asyncio.gather(first, second, third), PATIENCE)
        assert granted == ["holder", "waiter", "late"], granted
        assert fences[0] < fences[1] < fences[2], fences
    finally:
        for store in stores:
            await store.aclose()
