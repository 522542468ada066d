"""A real cluster: etcd and three `holdline serve` nodes started by
clients/testing/cluster.py (8 partitions, etcd ttl 2 s). Holds reach every
node from one address, the map learned at connect sends each hold straight
to its node, a ttl above the cluster's max ttl is refused, and a node
killed with SIGKILL loses its leases, closes its waiting holds, and its
keys are held again on their new owner under a greater fence once the
take-over's max ttl has passed; started again, it takes partitions back,
handed over with their leases, which their holders follow there and keep
(a node that cannot hand leases over loses them: granted once they could
no longer be believed).

Two clusters: `cluster` (the default max ttl, 10 s) for the tests that
kill no node, and `failover` (a max ttl of 2 s, so a killed node's keys
are granted again quickly; its locks ask a ttl of 2 s) for the two that
do, which run last, in that order."""

import asyncio
import os
import time
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Tuple

import pytest
from cluster import Cluster, RespError, command
from conftest import hold_once, server_binary, until
from test_election import clients_doing
from test_scripts import readme_snippets, run_script
from texts import assert_text

import holdline_client
from holdline_client._address import Address
from holdline_client._cluster import Router

ETCD_TTL = 2
MAX_TTL = 2
"""The failover cluster's max ttl (s): how long a partition taken over
without a hand-over grants nothing, and the most its locks may ask."""


def _cluster(max_ttl: str) -> Cluster:
    if not Path("/usr/bin/etcd").is_file():
        if os.environ.get("HOLDLINE_REQUIRE_TOOLS"):
            pytest.fail("no /usr/bin/etcd (Debian's etcd-server) for the cluster tests")
        pytest.skip("no /usr/bin/etcd (Debian's etcd-server)")
    binary = str(server_binary())
    return Cluster(nodes=3, partitions=8, etcd_ttl=ETCD_TTL, binary=binary, max_ttl=max_ttl)


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    with _cluster("10s") as c:
        yield c


@pytest.fixture(scope="module")
def failover() -> Iterator[Cluster]:
    with _cluster(f"{MAX_TTL}s") as c:
        yield c


def inspect(addr: str, lock: str, key: str) -> Optional[Dict[str, Any]]:
    """INSPECT on the node at `addr` over a plain connection of its own."""
    reply = command(addr, "INSPECT", lock, key)
    assert not isinstance(reply, RespError), f"{addr} answered {reply}"
    if reply is None:
        return None
    assert isinstance(reply, list)
    return {field.decode(): value for field, value in zip(reply[::2], reply[1::2], strict=True)}


def spread_keys(cluster: Cluster, prefix: str) -> List[str]:
    """One key for each node, each served by its node."""
    keys = [cluster.key_on(i, prefix) for i in range(len(cluster.nodes))]
    assert [cluster.owner(key) for key in keys] == list(range(len(cluster.nodes)))
    return keys


def _count_moves(router: Router) -> List[int]:
    """The slots of the MOVED answers the router follows from now on."""
    moves: List[int] = []
    follow = router.moved

    def moved(slot: int, where: Address) -> None:
        moves.append(slot)
        follow(slot, where)

    router.moved = moved  # type: ignore[method-assign, assignment]
    return moves


async def test_one_address_reaches_every_node_by_following_moved(cluster: Cluster) -> None:
    keys = spread_keys(cluster, "one-")
    async with holdline_client.connect(cluster.nodes[0].addr) as store:
        assert sorted(store.nodes) == sorted(n.addr for n in cluster.nodes)
        router = store._router
        assert router._slots is not None
        router._slots[:] = [cluster.nodes[0].addr] * len(router._slots)  # stale: all on node 0
        moves = _count_moves(router)
        lock = store.lock("spread")
        async with lock.hold(keys[0]), lock.hold(keys[1]), lock.hold(keys[2]):
            for i, key in enumerate(keys):
                state = inspect(cluster.nodes[i].addr, "spread", key)  # on its owner
                assert state is not None and state["held"] == 1, (i, state)
        # Node 0's key went straight, the first other one was redirected, and
        # the last one too unless the map fetched after that MOVED came first.
        assert 1 <= len(moves) <= 2, moves
        for i, key in enumerate(keys):
            state = inspect(cluster.nodes[i].addr, "spread", key)
            assert state is not None and state["held"] == 0


async def test_every_address_given_the_map_sends_each_hold_straight_to_its_node(
    cluster: Cluster,
) -> None:
    keys = spread_keys(cluster, "all-")
    async with holdline_client.connect(",".join(n.addr for n in cluster.nodes)) as store:
        router = store._router
        moves = _count_moves(router)
        for key in keys:
            async with store.lock("straight").try_hold(key) as lease:
                assert lease is not None
        assert moves == []
        for node in cluster.nodes:  # each node's pool kept the connection its hold used
            assert router.pool_at(node.addr)._idle, node.addr


async def test_put_and_get_go_to_the_keys_node_with_hash_tags(cluster: Cluster) -> None:
    key = "{" + cluster.key_on(2, "inv-") + "}"  # its slot: the tag's, node 2's
    row = f"{key}:status"  # the same tag: the same slot
    async with holdline_client.connect(cluster.nodes[0].addr) as store:
        async with store.lock("rows").hold(key) as lease:
            await store.put("rows", key, lease.fence, row, "paid")
            with pytest.raises(holdline_client.Invalid) as caught:
                await store.put("rows", key, lease.fence, "elsewhere", "x")
            assert str(caught.value).startswith("CROSSSLOT"), caught.value
        assert await store.get(row) == b"paid"
        assert command(cluster.nodes[2].addr, "GET", row) == b"paid"


def test_the_readmes_several_nodes_snippet_runs_against_the_cluster(cluster: Cluster) -> None:
    (snippet,) = [s for s in readme_snippets() if "127.0.0.1:7381" in s]
    given = "127.0.0.1:7380,127.0.0.1:7381,127.0.0.1:7382"
    assert given in snippet
    done = run_script(snippet.replace(given, ",".join(n.addr for n in cluster.nodes)))
    assert (done.returncode, done.stderr, done.stdout) == (0, "", "b'paid'\n")


async def test_a_ttl_above_the_clusters_max_ttl_is_refused(cluster: Cluster) -> None:
    key = cluster.key_on(1, "long-")
    async with holdline_client.connect(cluster.nodes[0].addr) as store:
        lock = store.lock("long", ttl="20s")
        want = f'lock long: key "{key}": ttl 20s is above the cluster\'s max ttl (10s): invalid'
        with pytest.raises(holdline_client.Invalid) as caught:
            async with lock.hold(key):
                pass
        assert str(caught.value) == want
        with pytest.raises(holdline_client.Invalid) as caught:
            async with lock.try_hold(key):
                pass
        assert str(caught.value) == want
        async with store.lock("long", ttl="10s").try_hold(key) as lease:  # the max itself
            assert lease is not None


async def test_an_election_and_its_observer_reach_the_keys_node(cluster: Cluster) -> None:
    name = cluster.key_on(2, "election-")
    async with holdline_client.connect(cluster.nodes[0].addr) as store:
        router = store._router
        assert router._slots is not None
        router._slots[:] = [cluster.nodes[0].addr] * len(router._slots)  # stale: all on node 0
        moves = _count_moves(router)
        election = store.lock("elections").election(name)
        leaders = election.observe()
        assert await asyncio.wait_for(leaders.__anext__(), 10) is None
        assert moves, "OBSERVE went to node 0 and was told MOVED"
        observing = await asyncio.to_thread(clients_doing, cluster.nodes[2].addr, "observe")
        assert len(observing) == 1
        async with election.campaign("10.0.0.7:8080") as lead:
            seen = await asyncio.wait_for(leaders.__anext__(), 10)
            assert seen is not None and (seen.note, seen.fence) == ("10.0.0.7:8080", lead.fence)
            leader = await election.leader()
            assert leader is not None and leader.fence == lead.fence
            state = inspect(cluster.nodes[2].addr, "elections", name)
            assert state is not None and state["held"] == 1
        assert await asyncio.wait_for(leaders.__anext__(), 10) is None
        await leaders.aclose()


async def test_a_killed_node_loses_its_leases_closes_its_waiters_and_its_keys_move(
    failover: Cluster,
) -> None:
    cluster, victim = failover, 1
    key = cluster.key_on(victim, "fail-")
    async with holdline_client.connect(cluster.nodes[0].addr) as store:
        lock = store.lock("failover", ttl=f"{MAX_TTL}s")
        with pytest.raises(holdline_client.Lost) as lost:
            async with lock.hold(key) as lease:
                first = lease.fence
                waiter = asyncio.ensure_future(hold_once(lock, key))
                await _until_waiting(cluster.nodes[victim].addr, key)
                killed = time.monotonic()
                cluster.kill(victim)
                await asyncio.wait_for(lease.signal.wait(), ETCD_TTL + 3)
                assert time.monotonic() - killed < ETCD_TTL + 3
                with pytest.raises(holdline_client.Closed) as closed:
                    await asyncio.wait_for(waiter, ETCD_TTL + 3)  # not a hang
        assert_text(lost.value, "lost_connection", lock="failover", key=f'"{key}"')
        assert_text(closed.value, "connection_closed_key", lock="failover", key=f'"{key}"')
        # Its new owner took the partition over without a hand-over: it
        # grants nothing for the max ttl after its claim.
        fence, took = await _hold_again(lock, key, killed + ETCD_TTL + MAX_TTL + 4)
        assert fence > first, (fence, first)
        print(f"held again on the new owner {took:.1f}s after the kill")
        cluster.wait_covered()  # partitions may still move between the two left
        assert cluster.owner(key) != victim


async def _until_waiting(addr: str, key: str) -> None:
    async def waiting() -> bool:
        state = await asyncio.to_thread(inspect, addr, "failover", key)
        return state is not None and state["waiters"] == 1

    await until(waiting, "the second hold standing in line")


async def _hold_again(lock: holdline_client.Lock, key: str, deadline: float) -> Tuple[int, float]:
    """Holds `key` as soon as a node grants it again, retrying while the
    hold fails closed (its node unreachable, or nobody serving the slot) or
    in use (the new owner's take-over wait outlasting the hold's)."""
    started = time.monotonic()
    while True:
        try:
            async with lock.hold(key, wait="500ms") as lease:
                return lease.fence, time.monotonic() - started
        except (holdline_client.Closed, holdline_client.InUse):
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.1)


def can_hand_over(addr: str) -> bool:
    """Whether the node at `addr` says `handover` in its `HELLO`."""
    hello = command(addr, "HELLO", "3")
    return isinstance(hello, dict) and hello.get("handover") == 1


async def test_a_node_that_comes_back_takes_partitions_and_their_leases_follow(
    failover: Cluster,
) -> None:
    """A node that can hand over passes the leases of the partitions it
    gives up to the node taking them (their holders re-attach there and
    keep them); one that cannot loses them (below)."""
    cluster = failover
    if not can_hand_over(cluster.nodes[0].addr):
        await _leases_lost_to_a_node_coming_back(cluster)
        return
    # Runs after the failover test (node 1 dead), or kills node 1 itself.
    if cluster.nodes[1].alive():
        cluster.kill(1)
    cluster.wait_covered()
    keys = [f"back-{n}" for n in range(24)]
    async with holdline_client.connect(cluster.nodes[0].addr) as store:
        lock = store.lock("back", ttl=f"{MAX_TTL}s")
        holds = [await _hold_retrying(lock, key) for key in keys]
        leases = [lease for _, lease in holds]
        fences = [lease.fence for lease in leases]
        await asyncio.to_thread(cluster.start, 1)  # back, and the partitions spread again
        moved = {key for key in keys if cluster.owner(key) == 1}
        assert moved and len(moved) < len(keys)
        followed = [lease for lease in leases if lease.key in moved]
        node1 = cluster.nodes[1].addr
        await until(
            lambda: all(lease._link.address.hostport == node1 for lease in followed),
            "every lease of node 1's partitions re-attached there",
        )
        await asyncio.sleep(MAX_TTL + 0.5)  # past their ttl: renewed on node 1 since
        assert [lease.fence for lease in leases] == fences
        assert not any(lease.lost or lease.signal.is_set() for lease in leases)
        for key in moved:
            state = inspect(node1, "back", key)
            assert state is not None and state["held"] == 1, (key, state)
        for hold, _ in holds:
            await hold.__aexit__(None, None, None)  # released where each lease is
        async with lock.try_hold(followed[0].key) as again:  # free at once
            assert again is not None and again.fence > followed[0].fence


async def _leases_lost_to_a_node_coming_back(cluster: Cluster) -> None:
    # Runs after the failover test (node 1 dead), or kills node 1 itself.
    if cluster.nodes[1].alive():
        cluster.kill(1)
    cluster.wait_covered()
    keys = [f"back-{n}" for n in range(24)]
    async with holdline_client.connect(cluster.nodes[0].addr) as store:
        lock = store.lock("back", ttl=f"{MAX_TTL}s")
        holds = [await _hold_retrying(lock, key) for key in keys]
        leases = [lease for _, lease in holds]
        await asyncio.to_thread(cluster.start, 1)  # back, and the partitions spread again
        moved = {key for key in keys if cluster.owner(key) == 1}
        assert moved and len(moved) < len(keys)
        gone = [lease for lease in leases if lease.key in moved]
        await asyncio.wait_for(asyncio.gather(*(lease.signal.wait() for lease in gone)), 5)
        assert all(not lease.lost for lease in leases if lease.key not in moved)
        assert str(gone[0].error).startswith(f'lock back: key "{gone[0].key}": the lease was lost')
        for hold, lease in holds:
            try:
                await hold.__aexit__(None, None, None)
            except holdline_client.Lost:
                assert lease.key in moved
        # On node 1 now, handed over: granted once the lost leases' holders
        # cannot believe any more (their ttl since last heard), at most.
        async with lock.hold(gone[0].key, wait=f"{MAX_TTL + 2}s") as again:
            assert again.fence > gone[0].fence
            state = inspect(cluster.nodes[1].addr, "back", gone[0].key)
            assert state is not None and state["held"] == 1


async def _hold_retrying(
    lock: holdline_client.Lock, key: str
) -> Tuple[holdline_client.Hold, holdline_client.Lease]:
    """A hold of `key` entered (left by the caller), tried again while it
    fails closed (the store's map still naming a dead node for the key) or
    in use (a partition just taken over, granting nothing for the max ttl)."""
    deadline = time.monotonic() + ETCD_TTL + MAX_TTL + 4
    while time.monotonic() < deadline:
        hold = lock.hold(key, wait="500ms")
        try:
            return hold, await hold.__aenter__()
        except (holdline_client.Closed, holdline_client.InUse):
            await asyncio.sleep(0.1)
    raise AssertionError(f"{key} never held")
