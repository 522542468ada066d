"""Elections (`lock.election(name)`) against a real `holdline serve`:
campaign, leader, proclaim, resign, observe; notes on holds; and the
election checker (clients/testing/election.py) run with the Python
campaigner, and shown to catch its mutant."""

import asyncio
import re
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple, Union

import election
import pytest
from conftest import PATIENCE, Proxy, Scripted, Server, server_binary, until, until_waiters
from fake_cluster import FakeCluster, FakeNode, bulk

import holdline_client
from holdline_client._cluster import slot
from holdline_client._resp import Decoder, Push, Reply, encode

ELECTION = Path(__file__).resolve().parents[2] / "testing" / "election.py"


def resp3(address: str, *command: str) -> Reply:
    """One command on a fresh RESP3 connection (after `HELLO 3`): its reply."""
    host, _, port = address.rpartition(":")
    with socket.create_connection((host, int(port)), timeout=PATIENCE) as sock:
        sock.sendall(encode(["HELLO", "3"]) + encode(list(command)))
        decoder = Decoder()
        replies: List[Reply] = []
        while len(replies) < 2:
            data = sock.recv(65536)
            if not data:
                raise ConnectionError("the server closed the connection")
            replies += [f for f in decoder.feed(data) if not isinstance(f, Push)]
        return replies[1]


def clients_doing(address: str, cmd: str) -> List[int]:
    """The ids of the connections (of CLIENT LIST) whose last command was `cmd`."""
    listing = resp3(address, "CLIENT", "LIST")
    assert isinstance(listing, bytes)
    ids = []
    for line in listing.decode().splitlines():
        fields = dict(part.split("=", 1) for part in line.split(" ") if "=" in part)
        if fields.get("cmd") == cmd:
            ids.append(int(fields["id"]))
    return ids


class Observed:
    """`election.observe()` read by a task of its own into a queue."""

    def __init__(self, election: holdline_client.Election) -> None:
        self.items: "asyncio.Queue[Optional[holdline_client.Leader]]" = asyncio.Queue()
        self._leaders = election.observe()
        self.task = asyncio.create_task(self._read())

    async def _read(self) -> None:
        async for leader in self._leaders:
            self.items.put_nowait(leader)

    async def next(self) -> Optional[holdline_client.Leader]:
        return await asyncio.wait_for(self.items.get(), PATIENCE)

    async def close(self) -> None:
        self.task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await self.task


async def test_campaign_leads_with_its_note_then_proclaims_and_resigns(
    store: holdline_client.Store,
) -> None:
    election = store.lock("services", ttl="2s").election("billing")
    assert await election.leader() is None
    async with election.campaign("10.0.0.5:8080") as lead:
        assert lead.note == "10.0.0.5:8080" and lead.election == "billing"
        assert not lead.lost and not lead.signal.is_set() and lead.error is None
        leader = await election.leader()
        assert leader is not None
        assert (leader.note, leader.fence) == ("10.0.0.5:8080", lead.fence)
        assert leader.held_for is not None and 0 <= leader.held_for < 2
        await lead.proclaim("10.0.0.6:8080")
        assert lead.note == "10.0.0.6:8080"
        again = await election.leader()
        assert again is not None and (again.note, again.fence) == ("10.0.0.6:8080", lead.fence)
        await lead.resign()
        assert await election.leader() is None
        await lead.resign()  # idempotent
        with pytest.raises(holdline_client.Invalid) as refused:
            await lead.proclaim("after")
        assert str(refused.value) == (
            'lock services: key "billing": proclaimed after the leadership ended: invalid'
        )
    assert await election.leader() is None


async def test_a_second_campaigner_waits_until_the_first_resigns(
    server: Server, store: holdline_client.Store
) -> None:
    election = store.lock("services", ttl="2s").election("billing")
    async with holdline_client.connect(server.address) as other:
        second = other.lock("services", ttl="2s").election("billing")
        async with election.campaign("first") as first:
            elected = asyncio.Event()
            fences: List[int] = []

            async def campaign() -> None:
                async with second.campaign("second") as lead:
                    fences.append(lead.fence)
                    elected.set()
                    await lead.resign()

            task = asyncio.create_task(campaign())
            await until_waiters(store, "services", 1)
            await asyncio.sleep(0.3)  # longer than a grant takes: it waits
            assert not elected.is_set()
            leader = await election.leader()
            assert leader is not None and leader.note == "first"
            await first.resign()
            await asyncio.wait_for(task, PATIENCE)
        assert fences and fences[0] > first.fence


async def test_a_cancelled_campaign_leaves_the_line(store: holdline_client.Store) -> None:
    election = store.lock("services", ttl="2s").election("billing")
    async with election.campaign("leader"):
        task = asyncio.create_task(election.campaign("waiter").__aenter__())
        await until_waiters(store, "services", 1)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await until_waiters(store, "services", 0)


async def test_observe_yields_the_present_leader_then_every_change(
    server: Server, store: holdline_client.Store
) -> None:
    election = store.lock("services", ttl="30s").election("billing")
    watching = Observed(election)
    try:
        assert await watching.next() is None  # nobody leads yet
        async with holdline_client.connect(server.address) as other:
            rival = other.lock("services", ttl="30s").election("billing")
            async with election.campaign("a") as a:
                first = await watching.next()
                assert first is not None and (first.note, first.fence) == ("a", a.fence)
                assert first.held_for is None and first.holder_id > 0
                await a.proclaim("a2")
                proclaimed = await watching.next()
                assert proclaimed is not None
                assert (proclaimed.note, proclaimed.fence) == ("a2", a.fence)
                task = asyncio.create_task(rival.campaign("b").__aenter__())
                await until_waiters(store, "services", 1)
            # a resigned: the end of its lease comes before b's grant.
            assert await watching.next() is None
            b = await asyncio.wait_for(task, PATIENCE)
            second = await watching.next()
            assert second is not None and (second.note, second.fence) == ("b", b.fence)
            assert second.fence > a.fence
            # A late observer is told the leader now, first.
            late = Observed(election)
            try:
                now = await late.next()
                assert now is not None and (now.note, now.fence) == ("b", b.fence)
            finally:
                await late.close()
        # `other` closed: b's connection went, and its lease with it.
        assert await watching.next() is None
        assert watching.items.empty()
    finally:
        await watching.close()


async def test_observe_survives_a_killed_connection(
    server: Server, store: holdline_client.Store
) -> None:
    election = store.lock("services", ttl="30s").election("billing")
    async with election.campaign("leader") as lead:
        watching = Observed(election)
        try:
            first = await watching.next()
            assert first is not None and first.fence == lead.fence
            observers = await asyncio.to_thread(clients_doing, server.address, "observe")
            assert len(observers) == 1
            killed = await asyncio.to_thread(
                resp3, server.address, "CLIENT", "KILL", "ID", str(observers[0])
            )
            assert killed == 1
            # It connects again, observes again, and says who leads again.
            again = await watching.next()
            assert again is not None and (again.note, again.fence) == ("leader", lead.fence)
            await until(
                lambda: len(clients_doing(server.address, "observe")) == 1,
                "the observer observing again",
            )
        finally:
            await watching.close()


async def test_observe_ends_closed_when_the_store_closes(server: Server) -> None:
    store = await holdline_client.connect(server.address)
    election = store.lock("services").election("billing")
    leaders = election.observe()
    assert await leaders.__anext__() is None
    reading = asyncio.ensure_future(leaders.__anext__())
    await asyncio.sleep(0.05)
    await store.aclose()
    with pytest.raises(holdline_client.Closed) as closed:
        await asyncio.wait_for(reading, PATIENCE)
    assert str(closed.value) == 'lock services: key "billing": the store is closed: closed'


async def test_leadership_is_lost_when_its_connection_freezes(
    server: Server, store: holdline_client.Store
) -> None:
    with Proxy(server.address) as proxy:
        async with holdline_client.connect(proxy.address) as cut:
            election = cut.lock("services", ttl="1s").election("billing")
            rival = store.lock("services", ttl="1s").election("billing")
            with pytest.raises(holdline_client.Lost) as lost:
                async with election.campaign("cut off") as lead:
                    task = asyncio.create_task(rival.campaign("next").__aenter__())
                    await until_waiters(store, "services", 1)
                    proxy.freeze()
                    await asyncio.wait_for(lead.signal.wait(), PATIENCE)
                    assert lead.lost
                    nxt = await asyncio.wait_for(task, PATIENCE)
                    assert nxt.fence > lead.fence
            assert str(lost.value) == (
                'lock services: key "billing": the lease was lost: '
                "the server answered nothing for its ttl (1s)"
            )
            proxy.thaw()
            await nxt.resign()


async def test_holds_carry_a_note(store: holdline_client.Store) -> None:
    lock = store.lock("noted")
    async with lock.hold("k", note="job 42") as lease:
        state = await lock.inspect("k")
        assert state is not None and state.holder is not None
        assert (state.holder.note, state.holder.fence) == ("job 42", lease.fence)
    async with lock.try_hold("k", note="job 43") as tried:
        assert tried is not None
        state = await lock.inspect("k")
        assert state is not None and state.holder is not None
        assert state.holder.note == "job 43"
    async with lock.hold("plain"):
        state = await lock.inspect("plain")
        assert state is not None and state.holder is not None and state.holder.note == ""
    with pytest.raises(holdline_client.Invalid) as refused:
        async with lock.hold("k", note="two\nlines"):
            pass
    assert str(refused.value) == (
        'lock noted: key "k": a note is 1 to 1024 bytes of UTF-8 without control characters: '
        "invalid"
    )
    with pytest.raises(TypeError):
        lock.hold("k", note=42)  # type: ignore[arg-type]


def run_checker(*args: str) -> subprocess.CompletedProcess[str]:
    binary = str(server_binary())
    return subprocess.run(
        [sys.executable, str(ELECTION), "--binary", binary, *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_election_checker_passes_the_python_campaigner() -> None:
    done = run_checker()
    assert done.returncode == 0, done.stdout + done.stderr
    last = done.stdout.strip().splitlines()[-1]
    assert last.endswith(": no violation"), done.stdout
    for fault in ("(a) proxy frozen while A leads", "SIGSTOPped", "SIGKILLed"):
        assert fault in done.stdout


def test_the_election_checker_catches_the_mutant() -> None:
    done = run_checker("--with-mutant")
    assert done.returncode == 1, done.stdout + done.stderr
    # In (a) the proxy froze while the mutant A led: it went on believing.
    overlap = r"\n  overlap: [BC] believed it led from \S+ \(fence \d+\) while A believed it led"
    assert re.search(overlap, done.stdout), done.stdout


def test_the_blocking_flavour_campaigns_and_observes(server: Server) -> None:
    with holdline_client.connect_sync(server.address) as store:
        election = store.lock("services", ttl="2s").election("billing")
        assert election.leader() is None
        with election.observe() as leaders:
            assert next(leaders) is None
            with election.campaign("10.0.0.5:8080") as lead:
                assert not lead.lost and not lead.signal.is_set() and lead.error is None
                lead.check()
                leader = election.leader()
                assert leader is not None and (leader.note, leader.fence) == (
                    "10.0.0.5:8080",
                    lead.fence,
                )
                seen = next(leaders)
                assert seen is not None and (seen.note, seen.fence) == ("10.0.0.5:8080", lead.fence)
                lead.proclaim("10.0.0.6:8080")
                assert lead.note == "10.0.0.6:8080"
                seen = next(leaders)
                assert seen is not None and (seen.note, seen.fence) == ("10.0.0.6:8080", lead.fence)
                lead.resign()
                assert next(leaders) is None
            with election.campaign("again") as again:
                assert again.fence > lead.fence
                seen = next(leaders)
                assert seen is not None and (seen.note, seen.fence) == ("again", again.fence)
        assert election.leader() is None
        with store.lock("noted").hold("k", note="job 7"):
            state = store.lock("noted").inspect("k")
            assert state is not None and state.holder is not None
            assert state.holder.note == "job 7"


# The checker's rules, on lines made up to break each one (times in seconds).

S = 1_000_000_000


def line(event: str, t: float, **fields: object) -> Dict[str, object]:
    return {"event": event, "t": int(t * S), **fields}


def campaigner(*events: Tuple[str, float, int]) -> List[Dict[str, object]]:
    """A campaigner's lines: ready, then (event, t, fence) each."""
    return [line("ready", 0, pid=1)] + [line(e, t, fence=f) for e, t, f in events]


def observer(*seen: Tuple[float, Optional[int]]) -> List[Dict[str, object]]:
    out = [line("ready", 0, pid=2)]
    for t, fence in seen:
        out.append(line("observed", t, fence=fence, note=None if fence is None else "x"))
    return out


def verdict(
    procs: Dict[str, List[Dict[str, object]]],
    faults: Sequence[Tuple[str, str, float]] = (),
    exits: Optional[Dict[str, Optional[int]]] = None,
    bad: Optional[Dict[str, List[str]]] = None,
) -> List[str]:
    timed = [(what, victim, int(t * S)) for what, victim, t in faults]
    v = election.judge(procs, bad or {}, exits or {}, timed, 2000, 100 * S, 0)
    return v.violations


def good() -> Dict[str, List[Dict[str, object]]]:
    return {
        "A": campaigner(("elected", 1, 5), ("leading", 1.5, 5), ("lost", 3.9, 5)),
        "B": campaigner(("elected", 4, 6), ("leading", 4.5, 6)),
        "O": observer((1.1, 5), (4.0, None), (4.05, 6), (4.5, 6)),
    }


def test_the_checker_passes_a_clean_history() -> None:
    assert verdict(good(), [("(a)", "A", 2.5)]) == []


def test_the_checker_finds_two_leaders_at_once() -> None:
    procs = good()
    procs["A"] = campaigner(("elected", 1, 5), ("leading", 4.0, 5))
    assert verdict(procs) == [
        "overlap: B believed it led from 4.000s (fence 6) while A believed it led until "
        "4.000s (fence 5)"
    ]


def test_the_checker_finds_a_fence_that_fell() -> None:
    procs = good()
    procs["B"] = campaigner(("elected", 4, 4), ("leading", 4.5, 4))
    procs["O"] = observer((1.1, 5), (4.05, 4))
    assert verdict(procs) == [
        "fences: B's fence 4 (from 4.000s) came after A's fence 5",
        "register: B wrote fence 4 at 4.000s, below fence 5 that A wrote before: refused",
        "register: B wrote fence 4 at 4.500s, below fence 5 that A wrote before: refused",
        "observer: fence 4 observed after fence 5",
    ]


def test_the_checker_finds_a_late_election_and_none() -> None:
    assert verdict(good(), [("(b) A SIGSTOPped", "A", 0.9)]) == [
        "(b) A SIGSTOPped: the next leader was elected 3.100s later, past ttl + 1s (3.000s)"
    ]
    assert verdict(good(), [("(c) B SIGKILLed", "B", 5)]) == [
        "(c) B SIGKILLed: nobody else was elected"
    ]


def test_the_checker_finds_an_observer_not_told() -> None:
    procs = good()
    procs["O"] = observer((1.1, 5), (5.2, 6))
    assert verdict(procs) == ["observer: fence 6 (B) observed 1.200s after its election, past 1s"]
    procs["O"] = observer((1.1, 5))
    assert verdict(procs) == ["observer: fence 6 (B) was never observed"]


def test_the_checker_finds_a_program_misbehaving() -> None:
    procs = good()
    procs["B"] = procs["B"][1:] + [line("campaigning", 5)]
    found = verdict(procs, exits={"A": 3}, bad={"O": ["Traceback (most recent call last):"]})
    assert found == [
        "A: exited by itself, status 3",
        "B: did not say ready first",
        "B: an unknown line {'event': 'campaigning', 't': 5000000000}",
        "O: a line that is not a JSON object: 'Traceback (most recent call last):'",
    ]


# Observe against scripted nodes: what a real server will not do on cue.


def push(*items: Union[bytes, int]) -> bytes:
    out = [b">%d\r\n" % len(items)]
    for item in items:
        out.append(b":%d\r\n" % item if isinstance(item, int) else bulk(item))
    return b"".join(out)


def observed_held(node: FakeNode, fence: int) -> bytes:
    note = b"node%d" % node.index
    return push(b"observe", b"services", b"billing", b"held", fence, 1, 5, note)


async def test_observe_follows_closed_then_moved_to_the_new_owner() -> None:
    async with FakeCluster(2) as cluster:
        key_slot = slot("billing")
        cluster.owners = [cluster.owners[key_slot]] * 16384  # one node serves all
        first = cluster.owners[key_slot]
        assert first is not None
        closing = asyncio.Event()

        def answer(node: FakeNode, command: List[bytes]) -> Optional[bytes]:
            name = command[0].upper()
            if name == b"OBSERVE":
                if cluster.owners[key_slot] != node.index:
                    other = cluster.nodes[1 - node.index].address.encode()
                    return b"-MOVED %d %s\r\n" % (key_slot, other)
                return b"+OK\r\n" + observed_held(node, 7 + node.index)
            if name == b"PING" and node.index == first and closing.is_set():
                closing.clear()
                closed = push(b"observe", b"services", b"billing", b"closed", 7, 1, 5, b"")
                return b"+PONG\r\n" + closed
            return None

        for node in cluster.nodes:
            node.override = answer
        async with holdline_client.connect(cluster.nodes[first].address) as store:
            election = store.lock("services", ttl="300ms").election("billing")
            leaders = election.observe()
            now = await asyncio.wait_for(leaders.__anext__(), PATIENCE)
            assert now == holdline_client.Leader(f"node{first}", 7 + first, None, 5)
            # The partition moves: the old owner says `closed`, then MOVED.
            cluster.owners = [1 - first] * 16384
            closing.set()
            moved = await asyncio.wait_for(leaders.__anext__(), PATIENCE)
            assert moved == holdline_client.Leader(f"node{1 - first}", 8 - first, None, 5)
            await leaders.aclose()
        assert len(cluster.nodes[first].sent(b"OBSERVE")) == 2  # then MOVED
        assert len(cluster.nodes[1 - first].sent(b"OBSERVE")) == 1


async def test_observe_connects_again_when_its_server_goes_silent() -> None:
    observes: List[int] = []

    async def handler(command: List[bytes]) -> Optional[bytes]:
        name = command[0].upper()
        if name == b"OBSERVE":
            observes.append(len(observes))
            fence = 10 + len(observes)
            held = push(b"observe", b"services", b"billing", b"held", fence, 1, 3, b"a")
            return b"+OK\r\n" + held
        return None  # PINGs: never answered

    async with Scripted(handler) as server, holdline_client.connect(server.address) as store:
        election = store.lock("services", ttl="300ms").election("billing")
        leaders = election.observe()
        first = await asyncio.wait_for(leaders.__anext__(), PATIENCE)
        assert first is not None and first.fence == 11
        began = time.monotonic()
        again = await asyncio.wait_for(leaders.__anext__(), PATIENCE)
        waited = time.monotonic() - began
        assert again is not None and again.fence == 12
        # A ping unanswered for max(ttl, 1s), noticed at the next ping (ttl/3).
        assert 0.9 <= waited <= 2.0, waited
        await leaders.aclose()
