"""A planned hand-over, on scripted nodes (`FakeCluster(handover=True)`):
the secret goes only to a node that says `handover` in its `HELLO`, a
lease told it moved (the `moved` push, `MOVED` to its RENEW or RELEASE)
re-attaches where it was sent, following `MOVED` and waiting out
`CLUSTERDOWN`, and keeps its fence and its signal; one that cannot in
time, or is answered `LOST`, is lost (`reattach_failed`); a waiting HOLD
answered `MOVED` re-attaches and keeps waiting. The real cluster's
hand-over is in test_cluster.py."""

import asyncio
import re
import time
from typing import List, Optional

import pytest
from conftest import refused_address, until
from fake_cluster import SILENT, FakeCluster, FakeNode, bulk
from texts import assert_text

import holdline_client
from holdline_client._cluster import SLOTS, slot


def moved_push(lease: int, slot_of_key: int, where: str) -> bytes:
    """`["moved", lease, slot, "host:port"]` as a RESP3 push."""
    return (
        b">4\r\n" + bulk(b"moved") + b":%d\r\n:%d\r\n" % (lease, slot_of_key) + bulk(where.encode())
    )


def grant(lease: int, fence: int) -> bytes:
    return b"*2\r\n:%d\r\n:%d\r\n" % (lease, fence)


def secret_of(command: List[bytes]) -> bytes:
    return command[command.index(b"SECRET") + 1]


def names(node: FakeNode) -> List[bytes]:
    """The names of the commands `node` received, HELLO, CLUSTER and PING left out."""
    skip = (b"HELLO", b"CLUSTER", b"PING")
    return [c[0].upper() for c in node.server.commands if c[0].upper() not in skip]


async def test_a_hold_sends_a_secret_only_to_a_node_that_can_hand_over() -> None:
    for handover in (False, True):
        async with FakeCluster(handover=handover) as cluster:
            key = cluster.key_on(0)
            async with holdline_client.connect(cluster.nodes[0].address) as store:
                lock = store.lock("ho")
                for _ in range(2):
                    async with lock.hold(key):
                        pass
                async with lock.try_hold(key) as lease:
                    assert lease is not None
            node = cluster.nodes[0]
            holds = node.sent(b"HOLD") + node.sent(b"TRYHOLD")
            assert len(holds) == 3
            sent = [secret_of(c) for c in holds if b"SECRET" in c]
            if not handover:
                assert sent == []  # a server without `handover` never sees the option
                continue
            assert len(sent) == 3 and len(set(sent)) == 3, sent  # new for each hold
            assert all(re.fullmatch(rb"[0-9a-f]{32}", s) for s in sent), sent


def moves_on_renew(cluster: FakeCluster, key: str, to: FakeNode, also_ok: bool = True) -> None:
    """Node 0 pushes `moved` (to `to`) before its answer to the first
    RENEW, and answers `MOVED` to the lease's RENEW and RELEASE after."""
    s = slot(key)
    pushed: List[bool] = []

    def old(node: FakeNode, command: List[bytes]) -> Optional[bytes]:
        name = command[0].upper()
        if name == b"RENEW" and not pushed:
            pushed.append(True)
            push = moved_push(int(command[1]), s, to.address)
            return push + (
                b"+OK\r\n" if also_ok else b"-MOVED %d %s\r\n" % (s, to.address.encode())
            )
        if name in (b"RENEW", b"RELEASE"):
            return b"-MOVED %d %s\r\n" % (s, to.address.encode())
        return None

    cluster.nodes[0].override = old


async def test_a_lease_follows_its_partition_and_keeps_its_fence_and_signal() -> None:
    async with FakeCluster(handover=True) as cluster:
        key = cluster.key_on(0)
        new = cluster.nodes[1]
        moves_on_renew(cluster, key, new)

        def answer(node: FakeNode, command: List[bytes]) -> Optional[bytes]:
            return grant(900, cluster.fence) if command[0].upper() == b"REATTACH" else None

        new.override = answer
        async with holdline_client.connect(cluster.nodes[0].address) as store:
            lock = store.lock("ho", ttl="300ms")
            async with lock.hold(key) as lease:
                fence = lease.fence
                await until(lambda: lease.id == 900, "the lease re-attached on node 1")
                await asyncio.sleep(0.6)  # twice its ttl: renewed on node 1 meanwhile
                assert not lease.lost and not lease.signal.is_set()
                assert lease.fence == fence
        secret = secret_of(cluster.nodes[0].sent(b"HOLD")[0])
        assert new.sent(b"REATTACH") == [[b"REATTACH", b"ho", key.encode(), secret]]
        renews = new.sent(b"RENEW")
        assert len(renews) >= 2 and all(c == [b"RENEW", b"900"] for c in renews), renews
        assert new.sent(b"RELEASE") == [[b"RELEASE", b"900"]]
        assert cluster.nodes[0].sent(b"RELEASE") == []
        assert not lease.lost


async def test_reattach_follows_moved_and_waits_out_clusterdown() -> None:
    async with FakeCluster(handover=True) as cluster:
        key = cluster.key_on(0)
        s = slot(key)
        first, last = cluster.nodes[1], cluster.nodes[2]
        moves_on_renew(cluster, key, first, also_ok=False)
        asked: List[float] = []

        def down_then_moved(node: FakeNode, command: List[bytes]) -> Optional[bytes]:
            if command[0].upper() != b"REATTACH":
                return None
            asked.append(time.monotonic())
            if len(asked) == 1:
                return b"-CLUSTERDOWN the partition is between owners\r\n"
            return b"-MOVED %d %s\r\n" % (s, last.address.encode())

        def granted(node: FakeNode, command: List[bytes]) -> Optional[bytes]:
            return grant(901, cluster.fence) if command[0].upper() == b"REATTACH" else None

        first.override, last.override = down_then_moved, granted
        async with holdline_client.connect(cluster.nodes[0].address) as store:
            lock = store.lock("ho", ttl="1s")
            async with lock.hold(key) as lease:
                await until(lambda: lease.id == 901, "the lease re-attached on node 2")
                assert not lease.signal.is_set()
        assert len(asked) == 2 and asked[1] - asked[0] >= 0.09, asked  # ~100 ms apart
        assert len(last.sent(b"REATTACH")) == 1
        assert last.sent(b"RELEASE") == [[b"RELEASE", b"901"]]


async def test_a_release_answered_moved_is_sent_where_the_lease_reattached() -> None:
    async with FakeCluster(handover=True) as cluster:
        key = cluster.key_on(0)
        s = slot(key)
        new = cluster.nodes[1]

        def old(node: FakeNode, command: List[bytes]) -> Optional[bytes]:
            if command[0].upper() == b"RELEASE":
                return b"-MOVED %d %s\r\n" % (s, new.address.encode())
            return None

        def answer(node: FakeNode, command: List[bytes]) -> Optional[bytes]:
            return grant(902, cluster.fence) if command[0].upper() == b"REATTACH" else None

        cluster.nodes[0].override, new.override = old, answer
        async with holdline_client.connect(cluster.nodes[0].address) as store:
            async with store.lock("ho").hold(key) as lease:
                pass
        assert not lease.lost and not lease.signal.is_set()
        assert new.sent(b"RELEASE") == [[b"RELEASE", b"902"]]


async def test_a_lease_that_cannot_reattach_is_lost() -> None:
    lost_line = b'-LOST lock ho: key "k": the lease was lost: nothing was handed over\r\n'
    for answer in (lost_line, SILENT):
        async with FakeCluster(handover=True) as cluster:
            key = cluster.key_on(0)
            new = cluster.nodes[1]
            moves_on_renew(cluster, key, new)

            def refuse(
                node: FakeNode, command: List[bytes], reattached: bytes = answer
            ) -> Optional[bytes]:
                return reattached if command[0].upper() == b"REATTACH" else None

            new.override = refuse
            async with holdline_client.connect(cluster.nodes[0].address) as store:
                lock = store.lock("ho", ttl="300ms")
                started = time.monotonic()
                try:
                    async with lock.hold(key) as lease:
                        await asyncio.wait_for(lease.signal.wait(), 2)
                except holdline_client.Lost as err:
                    error: Optional[BaseException] = err
                else:
                    error = None
                # The old node's OK after its push counted for nothing: the
                # lease ran out within its ttl of the last RENEW before.
                assert time.monotonic() - started < 1.0
            assert lease.lost and lease.error is not None
            assert_text(lease.error, "reattach_failed", lock="ho", key=f'"{key}"')
            assert error is not None
            assert_text(error, "reattach_failed", lock="ho", key=f'"{key}"')


async def test_a_waiting_hold_answered_moved_reattaches_and_keeps_waiting() -> None:
    async with FakeCluster(handover=True) as cluster:
        key = cluster.key_on(0)
        s = slot(key)
        new = cluster.nodes[1]
        waited = asyncio.Event()

        async def handed_over(node: FakeNode, command: List[bytes]) -> Optional[bytes]:
            if command[0].upper() != b"HOLD":
                return None
            await asyncio.sleep(0.2)  # waits in line, then handed over
            return b"-MOVED %d %s\r\n" % (s, new.address.encode())

        async def granted(node: FakeNode, command: List[bytes]) -> Optional[bytes]:
            if command[0].upper() != b"REATTACH":
                return None
            await asyncio.sleep(0.2)  # waits on in its place, then granted
            waited.set()
            return grant(950, 7)

        cluster.nodes[0].override, new.override = handed_over, granted
        async with holdline_client.connect(cluster.nodes[0].address) as store:
            async with store.lock("ho").hold(key, wait="5s") as lease:
                assert waited.is_set()
                assert lease.id == 950 and lease.fence == 7
        secret = secret_of(cluster.nodes[0].sent(b"HOLD")[0])
        assert new.sent(b"REATTACH") == [[b"REATTACH", b"ho", key.encode(), secret]]
        assert names(new) == [b"REATTACH", b"RELEASE"]  # no HOLD again: it kept its place
        assert new.sent(b"RELEASE") == [[b"RELEASE", b"950"]]


async def test_a_stale_maps_moved_to_a_hold_with_a_secret_ends_in_a_hold_there() -> None:
    async with FakeCluster(handover=True) as cluster:
        key = cluster.key_on(1)
        cluster.answered = [0] * SLOTS  # the client's map: every slot on node 0
        new = cluster.nodes[1]
        lost = b'-LOST lock ho: key "k": the lease was lost: nothing was handed over\r\n'

        def answer(node: FakeNode, command: List[bytes]) -> Optional[bytes]:
            return lost if command[0].upper() == b"REATTACH" else None

        new.override = answer
        async with holdline_client.connect(cluster.nodes[0].address) as store:
            async with store.lock("ho").hold(key) as lease:
                assert not lease.lost
        assert names(cluster.nodes[0]) == [b"HOLD"]
        assert names(new) == [b"REATTACH", b"HOLD", b"RELEASE"]


@pytest.mark.parametrize("waiting", [False, True])
async def test_reattach_sent_to_a_node_gone_goes_back_to_the_node_named(waiting: bool) -> None:
    """The new owner, its map not updated yet, answers `MOVED` naming the
    old owner, which is gone: the REATTACH (a lease's, or a waiter's)
    goes back to the node the hand-over named, after a pause, and is
    granted there."""
    with refused_address() as gone:
        async with FakeCluster(handover=True) as cluster:
            key = cluster.key_on(0)
            s = slot(key)
            new = cluster.nodes[1]
            asked: List[float] = []

            def back_then_granted(node: FakeNode, command: List[bytes]) -> Optional[bytes]:
                if command[0].upper() != b"REATTACH":
                    return None
                asked.append(time.monotonic())
                if len(asked) == 1:
                    return b"-MOVED %d %s\r\n" % (s, gone.encode())
                return grant(960, 5)

            def handed_over(node: FakeNode, command: List[bytes]) -> Optional[bytes]:
                if command[0].upper() == b"HOLD":
                    return b"-MOVED %d %s\r\n" % (s, new.address.encode())
                return None

            new.override = back_then_granted
            if waiting:
                cluster.nodes[0].override = handed_over
            else:
                moves_on_renew(cluster, key, new)
            async with holdline_client.connect(cluster.nodes[0].address) as store:
                async with store.lock("ho", ttl="1s").hold(key) as lease:
                    await until(lambda: lease.id == 960, "re-attached on node 1")
                    assert not lease.signal.is_set()
            assert len(asked) == 2 and asked[1] - asked[0] >= 0.09, asked
            assert new.sent(b"RELEASE") == [[b"RELEASE", b"960"]]
