"""Several addresses and the slot map, against scripted nodes: where each
key's commands go, MOVED and CLUSTERDOWN followed within their limits, a
failed connection refreshing the map, a single server left as it is.
(test_cluster.py runs a real cluster of `holdline serve` nodes.)"""

import asyncio
import time
from typing import List, Optional

import pytest
from conftest import Handler, Scripted, Server, refused_address, until
from fake_cluster import SILENT, FakeCluster, FakeNode, hang_up_on
from texts import RULES, assert_text

import holdline_client
from holdline_client import _cluster, _texts
from holdline_client._address import Address, parse_addresses
from holdline_client._cluster import parse_moved, slot


def test_slots_are_redis_clusters() -> None:
    # The expected slots are CRC16-XMODEM worked out bit by bit, mod 16384.
    assert slot("123456789") == 0x31C3  # the CRC's check value, below 16384
    assert slot("foo") == 12182
    assert slot("{user1000}.following") == slot("{user1000}.followers") == slot("user1000")
    assert slot("user1000") == 3443
    assert slot("foo{}{bar}") == 8363  # an empty tag: the whole key ("bar" alone is 5061)
    assert slot("foo{{bar}}zap") == slot("{bar") == 4015
    assert slot("{inv-7}") == slot("{inv-7}:status") == slot("inv-7")
    assert slot("") == 0 and slot("é") == slot("é".encode())
    assert all(0 <= slot(f"k{n}") < 16384 for n in range(1000))


def test_the_routing_rules_are_the_tables() -> None:
    assert _texts.MAX_REDIRECTS == RULES["max_redirects"] == 5
    assert _texts.CLUSTER_DOWN_TRIES == RULES["cluster_down_tries"] == 10
    assert _texts.CLUSTER_DOWN_PAUSE_MS == RULES["cluster_down_pause_ms"] == 100
    assert _cluster.MAP_TIMEOUT_MS == RULES["map_refresh_node_timeout_ms"] == 2000


def test_several_addresses_in_one_string_or_a_list() -> None:
    a, b = Address("127.0.0.1", 7001), Address("h", 7380, "tok", True)
    assert parse_addresses("127.0.0.1:7001") == [a]
    assert parse_addresses("127.0.0.1:7001,rediss://:tok@h") == [a, b]
    assert parse_addresses(["127.0.0.1:7001", "rediss://:tok@h"]) == [a, b]
    assert parse_addresses(("127.0.0.1:7001",)) == [a]
    for bad, shown in [("a:1,,b:2", '""'), ("a:1,b:x", '"b:x"'), ("a:1, b:2", '" b:2"')]:
        with pytest.raises(holdline_client.Invalid) as caught:
            holdline_client.connect(bad)
        assert_text(caught.value, "bad_address", address=shown)
    with pytest.raises(holdline_client.Invalid) as caught:
        holdline_client.connect([])
    assert_text(caught.value, "bad_address", address='""')


def test_the_first_addresss_token_and_tls_apply_to_every_node() -> None:
    router = holdline_client.connect("rediss://:tok@h:1,h:2")._router
    assert router.dial.tls is not None and router.dial.auth == ("default", "tok")
    assert router.pool_at("h:2").dial is router.dial
    assert holdline_client.connect("h:1,rediss://:tok@h:2")._router.dial.tls is None


async def test_connect_takes_the_first_address_that_answers(server: Server) -> None:
    with refused_address() as dead0, refused_address() as dead1:
        async with holdline_client.connect([dead0, server.address, dead1]) as store:
            assert store.address == server.address
            assert store.nodes == [server.address] and not store._router.clustered  # single
            async with store.lock("first").hold("k") as lease:
                assert lease.fence >= 1
        with pytest.raises(holdline_client.Closed) as caught:
            await holdline_client.connect(f"{dead0},{dead1}")
    assert_text(caught.value, "cannot_connect", hostport=dead1)  # the last one tried


async def test_a_single_server_is_asked_for_a_map_once_and_gets_every_command() -> None:
    async def grant(command: List[bytes]) -> Optional[bytes]:
        return b"*2\r\n:1\r\n:1\r\n" if command[0] == b"HOLD" else b"+OK\r\n"

    async with Scripted(grant) as single, holdline_client.connect(single.address) as store:
        assert store.nodes == [single.address]
        assert not store._router.clustered
        for key in ("a", "b", "c"):
            async with store.lock("one").hold(key):
                pass
        names = [c[0] for c in single.commands]
    assert names == [b"HELLO", b"CLUSTER"] + [b"HOLD", b"RELEASE"] * 3
    assert single.commands[1] == [b"CLUSTER", b"SLOTS"]


async def test_the_map_learned_at_connect_sends_each_hold_to_its_node() -> None:
    async with FakeCluster() as cluster, holdline_client.connect(cluster.nodes[1].address) as store:
        assert store._router.clustered
        assert sorted(store.nodes) == sorted(n.address for n in cluster.nodes)
        keys = [cluster.key_on(i) for i in range(3)]
        for key in keys:
            async with store.lock("spread").hold(key):
                pass
        for i, node in enumerate(cluster.nodes):
            assert [c[2].decode() for c in node.sent(b"HOLD")] == [keys[i]]
            assert len(node.sent(b"RELEASE")) == 1
        assert {k.decode(): v for k, v in cluster.granted.items()} == {
            k: i for i, k in enumerate(keys)
        }


async def test_a_stale_map_is_corrected_by_moved_and_refreshed() -> None:
    async with FakeCluster() as cluster:
        cluster.answered = [0] * 16384  # node 0 says it serves everything
        async with holdline_client.connect(cluster.nodes[0].address) as store:
            assert store.nodes == [cluster.nodes[0].address]
            cluster.answered = None  # from now on the map is true
            key = cluster.key_on(2)
            async with store.lock("moved").hold(key) as lease:
                assert lease.fence >= 1
            assert len(cluster.nodes[0].sent(b"HOLD")) == 1  # answered MOVED
            assert len(cluster.nodes[2].sent(b"HOLD")) == 1  # granted
            await until(lambda: len(store.nodes) == 3, "the map refreshed", 5)
            async with store.lock("moved").hold(cluster.key_on(1)):
                pass
            assert len(cluster.nodes[1].sent(b"HOLD")) == 1
            assert len(cluster.nodes[0].sent(b"HOLD")) == 1  # no second detour


async def test_a_slot_missing_from_the_map_goes_to_a_known_node_which_redirects() -> None:
    async with FakeCluster() as cluster:
        key = cluster.key_on(1)
        cluster.answered = list(cluster.owners)
        cluster.answered[slot(key)] = None
        async with holdline_client.connect(cluster.nodes[0].address) as store:
            async with store.lock("gap").try_hold(key) as lease:
                assert lease is not None
            assert cluster.granted[key.encode()] == 1


async def test_redirects_past_five_fail_moved_loop() -> None:
    async with (
        FakeCluster(2) as cluster,
        holdline_client.connect(cluster.nodes[0].address) as store,
    ):
        key = cluster.key_on(1)

        def elsewhere(node: FakeNode, command: List[bytes]) -> Optional[bytes]:
            if command[0] != b"HOLD":
                return None
            other = cluster.nodes[1 - node.index].address.encode()
            return b"-MOVED %d %s\r\n" % (slot(key), other)

        for node in cluster.nodes:
            node.override = elsewhere
        with pytest.raises(holdline_client.Closed) as caught:
            async with store.lock("loop").hold(key):
                pass
        assert_text(caught.value, "moved_loop", lock="loop", key=f'"{key}"')
        sent = sum(len(n.sent(b"HOLD")) for n in cluster.nodes)
        assert sent == 1 + RULES["max_redirects"]


async def test_clusterdown_is_retried_after_a_fresh_map_then_served() -> None:
    async with FakeCluster() as cluster, holdline_client.connect(cluster.nodes[0].address) as store:
        key = cluster.key_on(2)
        cluster.owners[slot(key)] = None  # a failover under way: nobody serves it
        downs: List[float] = []

        def recover(node: FakeNode, command: List[bytes]) -> Optional[bytes]:
            if command[0] == b"HOLD" and cluster.owners[slot(key)] is None:
                downs.append(time.monotonic())
                if len(downs) == 3:
                    cluster.owners[slot(key)] = 2  # the new owner serves it
                return b"-CLUSTERDOWN Hash slot not served\r\n"
            return None

        for node in cluster.nodes:
            node.override = recover
        asked = sum(len(n.sent(b"CLUSTER")) for n in cluster.nodes)
        async with store.lock("down").hold(key) as lease:
            assert lease.fence >= 1
        assert cluster.granted[key.encode()] == 2
        assert len(downs) == 3
        pause = _texts.CLUSTER_DOWN_PAUSE_MS / 1000
        assert all(b - a >= pause for a, b in zip(downs, downs[1:], strict=False))
        # A map fetched after each CLUSTERDOWN, before the command was resent.
        assert sum(len(n.sent(b"CLUSTER")) for n in cluster.nodes) >= asked + 3


def _wait_of(hold: List[bytes]) -> int:
    return int(hold[hold.index(b"WAIT") + 1])


async def test_a_hold_sent_again_carries_the_wait_left() -> None:
    # texts.json's wait_left: the wait runs from the hold's call.
    pause_ms = RULES["cluster_down_pause_ms"]
    async with FakeCluster() as cluster, holdline_client.connect(cluster.nodes[0].address) as store:
        key = cluster.key_on(1)
        cluster.answered = list(cluster.owners)  # the map names node 1 throughout
        cluster.owners[slot(key)] = None
        waits: List[int] = []

        def down_twice(node: FakeNode, command: List[bytes]) -> Optional[bytes]:
            if command[0] == b"HOLD":
                waits.append(_wait_of(command))
                if len(waits) == 3:
                    cluster.owners[slot(key)] = 1  # served from the third HOLD on
            return None

        for node in cluster.nodes:
            node.override = down_twice
        async with store.lock("left").hold(key, wait="2s"):
            pass
        assert len(waits) == 3 and waits[0] <= 2000
        assert all(b <= a - pause_ms for a, b in zip(waits, waits[1:], strict=False)), waits


async def test_a_hold_of_a_slot_down_gives_up_at_its_wait_plus_its_grace() -> None:
    # texts.json's wait_grace: each CLUSTERDOWN answers 400 ms late, so ten
    # would take 5 s; the hold gives up at 600 ms + max(1s ttl, 1s) instead.
    async with FakeCluster() as cluster, holdline_client.connect(cluster.nodes[0].address) as store:
        key = cluster.key_on(1)
        cluster.owners[slot(key)] = None
        waits: List[int] = []
        for node in cluster.nodes:
            late = node._handle

            async def answer_late(command: List[bytes], late: Handler = late) -> Optional[bytes]:
                if command[0] == b"HOLD":
                    waits.append(_wait_of(command))
                    await asyncio.sleep(0.4)
                return await late(command)

            node.server._handler = answer_late
        started = time.monotonic()
        with pytest.raises(holdline_client.Closed) as caught:
            async with store.lock("late", ttl="1s").hold(key, wait="600ms"):
                pass
        took = time.monotonic() - started
        said = {"lock": "late", "key": f'"{key}"', "wait": "600ms", "ttl": "1s"}
        assert_text(caught.value, "wait_silent", **said)
        assert 1.55 <= took < 3.0, took
        assert waits[0] <= 600 and waits[-1] == 0, waits  # the last sent after the wait


async def test_a_node_silent_to_cluster_slots_is_given_up_and_asked_last() -> None:
    async with FakeCluster() as cluster:
        first = cluster.nodes[0]
        store = await holdline_client.connect(first.address, connect_timeout="300ms")
        key = cluster.key_on(2)
        cluster.owners[slot(key)] = None
        downs: List[bytes] = []

        def mute(node: FakeNode, command: List[bytes]) -> Optional[bytes]:
            if command[0] == b"CLUSTER":
                return SILENT  # stopped, as far as the map goes
            if command[0] == b"HOLD" and cluster.owners[slot(key)] is None:
                downs.append(command[2])
                if len(downs) == 2:
                    cluster.owners[slot(key)] = 2
            return None

        first.override = mute
        started = time.monotonic()
        async with store.lock("mute").hold(key):
            pass
        took = time.monotonic() - started
        await store.aclose()
        # Asked once at connect and once more, given up after 300 ms; then
        # node 1 first (node 0 is asked last now).
        assert len(first.sent(b"CLUSTER")) == 2
        assert len(cluster.nodes[1].sent(b"CLUSTER")) >= 2
        assert 0.3 + 2 * _texts.CLUSTER_DOWN_PAUSE_MS / 1000 <= took < 2


async def test_a_node_that_answers_nothing_first_in_the_map_holds_up_a_refresh_2s_at_most() -> None:
    # texts.json's map_refresh: a node has 2 s to answer CLUSTER SLOTS when
    # the map is fetched again, a new connection's HELLO included (the
    # connect timeout is 10 s here), and is asked last after that.
    given = RULES["map_refresh_node_timeout_ms"] / 1000
    pause = RULES["cluster_down_pause_ms"] / 1000
    async with FakeCluster() as cluster:
        first = cluster.nodes[0]
        # Node 0, first in the map, takes connections and answers nothing
        # (not even HELLO); the store connects through node 1, so it has no
        # connection to node 0 before the map is fetched again.
        first.server._hello = False
        first.override = lambda node, command: SILENT
        store = await holdline_client.connect(cluster.nodes[1].address)
        key = cluster.key_on(2)
        # Node 2 answers CLUSTERDOWN for the key, though the map names it.
        cluster.answered = list(cluster.owners)
        cluster.owners[slot(key)] = None
        downs: List[bytes] = []

        def down_twice(node: FakeNode, command: List[bytes]) -> Optional[bytes]:
            if command[0] == b"HOLD" and cluster.owners[slot(key)] is None:
                downs.append(command[2])
                if len(downs) == 3:
                    cluster.owners[slot(key)] = 2  # served from the third HOLD on
            return None

        cluster.nodes[2].override = down_twice
        started = time.monotonic()
        async with store.lock("frozen").hold(key):
            pass
        took = time.monotonic() - started
        await store.aclose()
        # One connection to node 0, given up after 2 s; the second fetch
        # asked node 1 first.
        assert len(first.sent(b"HELLO")) == 1 and not first.sent(b"CLUSTER")
        assert len(cluster.nodes[1].sent(b"CLUSTER")) == 3
        assert given + 2 * pause <= took < given + 1.5


async def test_a_dropped_connection_refreshes_the_map_and_the_next_hold_goes_to_the_new_owner() -> (
    None
):
    async with FakeCluster() as cluster, holdline_client.connect(cluster.nodes[0].address) as store:
        key = cluster.key_on(1)
        cluster.nodes[1].override = hang_up_on(b"HOLD")
        with pytest.raises(holdline_client.Closed) as caught:
            async with store.lock("cut").hold(key):
                pass
        assert_text(caught.value, "connection_closed_key", lock="cut", key=f'"{key}"')
        cluster.owners[slot(key)] = 2  # node 2 took the slot over
        asked = len(cluster.nodes[0].sent(b"CLUSTER"))
        await until(
            lambda: len(cluster.nodes[0].sent(b"CLUSTER")) > asked, "the map asked again", 5
        )
        await asyncio.sleep(0.05)  # the answer handled
        async with store.lock("cut").hold(key):
            pass
        assert len(cluster.nodes[2].sent(b"HOLD")) == 1
        assert len(cluster.nodes[1].sent(b"HOLD")) == 1


async def test_a_lease_after_redirects_starts_at_the_last_holds_send() -> None:
    # Node 0 takes 0.6 s to say MOVED, past the 300 ms ttl; node 1 grants at
    # once. Counted from the first HOLD, the grant would be late (held only
    # after a RENEW confirms it); counted from the HOLD granted, it is not.
    async with (
        FakeCluster(2) as cluster,
        holdline_client.connect(cluster.nodes[0].address) as store,
    ):
        key = cluster.key_on(1)
        router = store._router
        assert router._slots is not None
        router._slots[slot(key)] = cluster.nodes[0].address  # stale

        async def slow_moved(command: List[bytes]) -> Optional[bytes]:
            if command[0] == b"HOLD":
                await asyncio.sleep(0.6)
            return await FakeNode._handle(cluster.nodes[0], command)

        cluster.nodes[0].server._handler = slow_moved
        async with store.lock("clock", ttl="300ms").hold(key) as lease:
            assert lease._confirmed and not lease.lost
        names = [c[0] for c in cluster.nodes[1].server.commands]
        assert names[names.index(b"HOLD") + 1] == b"RELEASE"  # no RENEW needed first


async def test_put_get_inspect_and_stats_go_where_their_keys_are() -> None:
    async with FakeCluster() as cluster, holdline_client.connect(cluster.nodes[0].address) as store:
        key = cluster.key_on(2, "{inv-")
        await store.put("rows", key, 1, key + ":status", "paid")
        assert [c[2].decode() for c in cluster.nodes[2].sent(b"PUT")] == [key]
        assert await store.get(cluster.key_on(1)) == b"node1"
        assert await store.lock("rows").inspect(cluster.key_on(2)) is None
        assert len(cluster.nodes[2].sent(b"INSPECT")) == 1
        assert (await store.stats("rows"))["grants"] == 1 + 2 + 3  # each node's, summed


async def test_the_blocking_flavour_takes_several_addresses() -> None:
    with refused_address() as dead:
        async with FakeCluster() as cluster:
            addresses = [dead] + [n.address for n in cluster.nodes]
            key = cluster.key_on(2)

            def blocking() -> None:
                with holdline_client.connect_sync(addresses) as store:
                    with store.lock("sync").hold(key) as lease:
                        assert lease.fence >= 1

            await asyncio.to_thread(blocking)
            assert cluster.granted[key.encode()] == 2


def test_moved_is_read_as_redis_writes_it() -> None:
    assert parse_moved("12182 127.0.0.1:7002") == (12182, Address("127.0.0.1", 7002))
    assert parse_moved("1 ::1:7002") == (1, Address("::1", 7002))
    assert parse_moved("1 [::1]:7002") == (1, Address("::1", 7002))
    assert parse_moved("1 ::1:7002")[1].hostport == "[::1]:7002"  # type: ignore[index]
    for bad in ["", "x h:1", "16384 h:1", "1 h", "1 h:0", "1 h:x", "1 :1", "1 h:1 extra"]:
        assert parse_moved(bad) is None, bad
