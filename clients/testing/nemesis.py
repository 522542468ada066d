#!/usr/bin/env python3
"""The cluster tested as Jepsen tests: three etcd members, three holdline
nodes whose etcd links run through freezable proxies, client processes
holding a handful of keys through the real Python client, and faults
injected at random, overlapping; then a checker (`nemesis_check.py`).

    python3 nemesis.py [--seconds 30] [--seed N] [--clients 4] [--keys 4]
                       [--faults all|LIST] [--clock-rate R] [--never-looks]
                       [--expect-violation] [--keep DIR] [--binary PATH]
                       [--rolling N] [--expect-handover]

The seed is printed first; the same seed replays the same faults at the
same moments (what the processes do in between is up to the machine).
Faults (`--faults` names a comma-separated subset):

  node-kill     SIGKILL a node; heal: start it again (its port)
  node-stop     SIGSTOP a node; heal: SIGCONT
  node-cut      freeze the proxies between a node and etcd (its clients
                still reach it); heal: thaw them
  node-isolate  freeze the proxy between a node and its clients (every
                client reaches a node through one, whose address the node
                advertises; the node still reaches etcd); heal: thaw it
  leader-kill   SIGKILL etcd's leader; heal: start it again, same data
  member-stop   SIGSTOP an etcd member; heal: SIGCONT
  client-stop   SIGSTOP a client while it holds (a GC pause, often past
                the lease's ttl); heal: SIGCONT

After the faults heal and the map is whole again, `--rolling N` (default
1; 0: none) makes N rolling restarts while the clients go on holding:
each node in turn gets SIGTERM (a planned hand-over of its partitions),
is awaited until it exits, and is started again on its port; the next
waits until every node serves a share again. Nodes run with
`--drain-timeout 1s`, so a node that drains before it leaves is gone in
a second. The checker counts the holds held when their node got SIGTERM
and how many of them were lost; `--expect-handover` makes each such loss
(and any `lost` of a hold begun in that phase) a violation, for servers
and clients that move leases across a planned hand-over.

`--clock-rate R` runs node 0 under libfaketime at R times real speed.
`--never-looks` runs the clients' mutant that never looks at its lease:
the checker must then fail. Exit status: 0 when the checker passes, 1 when
it finds a violation, 2 when the cluster could not be set up
(`--expect-violation` swaps 0 and 1).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Callable, Dict, List, Optional, Set, Tuple

sys.path.insert(0, str(Path(__file__).resolve().parent))
import cluster as fixture  # noqa: E402
import nemesis_check  # noqa: E402

HERE = Path(__file__).resolve().parent
FAULTS = [
    "node-kill",
    "node-stop",
    "node-cut",
    "node-isolate",
    "leader-kill",
    "member-stop",
    "client-stop",
]
ETCD_TTL_S = 2
MAX_TTL_MS = 2000
WAIT_MS = 3000
PARTITIONS = 8
DRAIN_TIMEOUT = "1s"
NS = 1_000_000_000

Fault = Tuple[str, Callable[[], None]]
"""A fault applied: what it did, and how to heal it."""


def say(text: str) -> None:
    print(f"nemesis: {text}", flush=True)


def stop(proc: Optional[subprocess.Popen[bytes]], sig: int) -> None:
    if proc is not None and proc.poll() is None:
        try:
            os.kill(proc.pid, sig)
        except ProcessLookupError:
            pass


class PortTaken(RuntimeError):
    """A process's log says a port it was given was taken meanwhile."""


def fake_clock(rate: float) -> Dict[str, str]:
    """The environment that runs a process's clocks (CLOCK_MONOTONIC among
    them) at `rate` times real speed: libfaketime preloaded into the process
    itself (not the `faketime` wrapper, whose child a signal would miss)."""
    libs = sorted(Path("/usr/lib").glob("*/faketime/libfaketimeMT.so.1"))
    if not libs:
        raise RuntimeError("no libfaketimeMT.so.1: apt-get install faketime")
    return {"LD_PRELOAD": str(libs[0]), "FAKETIME": f"+0 x{rate}"}


def quiet_port(taken: Set[int]) -> int:
    """A port free now in 20000-31999, not in `taken`."""
    rng = random.Random()
    for _ in range(1000):
        port = rng.randrange(20000, 32000)
        if port in taken:
            continue
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
        return port
    raise RuntimeError("no free port in 20000-31999")


class Member:
    """One etcd member: its ports stay its own across restarts."""

    def __init__(self, index: int, dir: Path) -> None:
        self.index = index
        self.name = f"m{index}"
        self.client = 0
        self.peer = 0
        self.data = dir / f"etcd-{index}"
        self.log = dir / f"etcd-{index}.log"
        self.mark = 0  # where the latest start's lines begin in its log
        self.proc: Optional[subprocess.Popen[bytes]] = None

    def pick_ports(self, taken: Set[int]) -> None:
        """Ports free a moment ago (etcd cannot bind port 0 and say where),
        none in `taken` (the other members'), below Linux's ephemeral range
        (32768-60999) so no outgoing connection takes one while the member
        is down between a kill and its restart. Another process may still
        bind one before etcd does: the first start is retried on others
        then (`World.start_etcd`)."""
        self.client = quiet_port(taken)
        taken.add(self.client)
        self.peer = quiet_port(taken)
        taken.add(self.peer)

    def port_taken(self) -> bool:
        """Whether its log says, since its latest start, that a port was
        taken (`bind: address already in use`)."""
        return fixture._port_taken(self.log, self.mark)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.client}"

    def start(self, initial: str, state: str) -> None:
        peer = f"http://127.0.0.1:{self.peer}"
        self.mark = self.log.stat().st_size if self.log.exists() else 0
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                [fixture.ETCD, "--name", self.name, "--data-dir", str(self.data),
                 "--listen-client-urls", self.url, "--advertise-client-urls", self.url,
                 "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
                 "--initial-cluster", initial, "--initial-cluster-state", state,
                 "--initial-cluster-token", "nemesis",
                 "--heartbeat-interval", "50", "--election-timeout", "500"],
                stdin=subprocess.DEVNULL, stdout=log, stderr=log,
            )  # fmt: skip

    def status(self) -> Optional[Tuple[int, int]]:
        """(its member id, the leader's id), or None when it does not answer."""
        request = urllib.request.Request(
            f"{self.url}/v3/maintenance/status", data=b"{}", method="POST"
        )
        try:
            with urllib.request.urlopen(request, timeout=1) as answer:
                status = json.load(answer)
            return int(status["header"]["member_id"]), int(status["leader"])
        except (OSError, ValueError, KeyError):
            return None


class Proxy:
    """A frozen_proxy.py: in front of one etcd member for one node, or in
    front of a node for its clients (`target` "-": told later, by `aim`)."""

    def __init__(self, target: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, str(HERE / "frozen_proxy.py"), target],
            stdout=subprocess.PIPE, stdin=subprocess.PIPE,
        )  # fmt: skip
        assert self.proc.stdout is not None
        self.port = int(self.proc.stdout.readline())

    def aim(self, target: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(f"{target}\n".encode())
        self.proc.stdin.close()

    @property
    def addr(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


class World:
    """Every process of one run, and the faults on them."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.binary = fixture.server_binary(args.binary)
        self.dir = Path(args.keep or tempfile.mkdtemp(prefix="holdline-nemesis-"))
        self.dir.mkdir(parents=True, exist_ok=True)
        self.members = [Member(i, self.dir) for i in range(3)]
        self.proxies: List[List[Proxy]] = []
        # Each node's clients reach it through one proxy, whose address
        # the node advertises: freezing it cuts the node from its clients.
        self.fronts = [Proxy("-") for _ in range(3)]
        self.nodes = [fixture.Node(i, 0, self.dir / f"node{i}.log") for i in range(3)]
        self.clients: List[subprocess.Popen[bytes]] = []
        self.pauses: List[Tuple[int, int, int]] = []  # client, from, until

    # ---------------------------------------------------------------- set-up

    def start(self) -> None:
        self.start_etcd()
        for _ in self.nodes:
            self.proxies.append([Proxy(f"127.0.0.1:{m.client}") for m in self.members])
        # A node's first start binds a port of its own choosing and says
        # which on its first line: no port is probed and freed first, so
        # none can be taken in between. Its clients' proxy is aimed there
        # (the node advertises the proxy, known before). A restart keeps
        # the port (`_restart_node`).
        for node in self.nodes:
            self.spawn_node(node)
        for node in self.nodes:
            self.await_node(node)
            self.fronts[node.index].aim(node.addr)
        self._await(self.covered, "every slot served")

    def start_etcd(self) -> None:
        """The three members, each on ports free a moment ago; when a
        member's log says one was taken before it bound it, all three
        again on others with fresh data (a new cluster names its peers'
        ports up front), as the etcd fixture does. Anything else is final."""
        for attempt in range(5):
            taken: Set[int] = set()
            for m in self.members:
                m.pick_ports(taken)
                shutil.rmtree(m.data, ignore_errors=True)
            initial = ",".join(f"{m.name}=http://127.0.0.1:{m.peer}" for m in self.members)
            for m in self.members:
                m.start(initial, "new")

            def up() -> bool:
                if any(m.port_taken() for m in self.members):
                    raise PortTaken()
                return all(m.status() for m in self.members)

            try:
                self._await(up, "etcd's three members")
                return
            except TimeoutError as e:
                # The set-up's failure says why, whether or not logs are kept.
                tails = "\n".join(f"{m.name}: {fixture._tail(m.log, 6)}" for m in self.members)
                raise TimeoutError(f"{e}\n{tails}") from None
            except PortTaken:
                if attempt == 4:
                    raise
                say("an etcd member's port was taken before it bound it; others")
                for m in self.members:
                    fixture._kill(m.proc)

    def spawn_node(self, node: fixture.Node, port: int = 0) -> None:
        """Starts `node` on `port` (0: one it binds itself and prints)."""
        etcd = ",".join(p.url for p in self.proxies[node.index])
        env = dict(os.environ)
        if node.index == 0 and self.args.clock_rate != 1.0:
            env.update(fake_clock(self.args.clock_rate))
        node.port = 0
        with open(node.log, "ab") as log:
            node.proc = subprocess.Popen(
                [str(self.binary), "serve", "--listen", f"127.0.0.1:{port}",
                 "--advertise", self.fronts[node.index].addr, "--etcd", etcd,
                 "--cluster", "nemesis",
                 "--partitions", str(PARTITIONS), "--etcd-ttl", f"{ETCD_TTL_S}s",
                 "--max-ttl", f"{MAX_TTL_MS}ms", "--drain-timeout", DRAIN_TIMEOUT],
                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=log, env=env,
            )  # fmt: skip

    def await_node(self, node: fixture.Node) -> None:
        # The cluster fixture's reader of the first line (a private helper
        # there, public in spirit: both are the tests' own).
        fixture.Cluster._await_listening(self, node)  # type: ignore[arg-type]

    def covered(self) -> bool:
        for node in self.nodes:
            if node.alive():
                try:
                    if fixture._covers_all(fixture.cluster_slots(node.addr)):
                        return True
                except (OSError, fixture.RespError):
                    pass
        return False

    def _await(self, ready: Callable[[], bool], what: str, seconds: float = 30) -> None:
        deadline = time.monotonic() + seconds
        while not ready():
            if time.monotonic() > deadline:
                raise TimeoutError(f"{what}: not within {seconds:g}s (logs in {self.dir})")
            time.sleep(0.1)

    def addresses(self) -> str:
        return ",".join(self.fronts[n.index].addr for n in self.nodes if n.alive())

    def start_clients(self, seed: int) -> None:
        """The clients, for the faults' `--seconds`; with a rolling restart
        after them, until the nemesis says stop (at most a generous cap)."""
        seconds = self.args.seconds
        extra: List[str] = []
        if self.args.rolling:
            seconds += 120 * self.args.rolling + 60
            extra = ["--stop-file", str(self.stop_file)]
        for i in range(self.args.clients):
            self.clients.append(self.client(i, seed + i, ["--seconds", str(seconds)] + extra))

    @property
    def stop_file(self) -> Path:
        return self.dir / "stop"

    def client(self, i: int, seed: int, extra: List[str]) -> subprocess.Popen[bytes]:
        mutant = ["--never-looks"] if self.args.never_looks else []
        return subprocess.Popen(
            [sys.executable, str(HERE / "nemesis_client.py"), "--nodes", self.addresses(),
             "--id", str(i), "--keys", str(self.args.keys), "--seed", str(seed),
             "--ttl-ms", str(MAX_TTL_MS), "--wait-ms", str(WAIT_MS),
             "--log", str(self.dir / f"client{i}.jsonl"),
             "--state", str(self.dir / f"client{i}.state")] + mutant + extra,
            stdin=subprocess.DEVNULL,
        )  # fmt: skip

    def close(self) -> None:
        for p in self.clients:
            fixture._kill(p)
        for node in self.nodes:
            fixture._kill(node.proc)
        for row in self.proxies + [self.fronts]:
            for proxy in row:
                fixture._kill(proxy.proc)
        for m in self.members:
            fixture._kill(m.proc)
        if not self.args.keep:
            shutil.rmtree(self.dir, ignore_errors=True)

    # ---------------------------------------------------------------- faults

    def leader(self) -> Optional[Member]:
        ids: Dict[int, Member] = {}
        leader = None
        for m in self.members:
            status = m.status()
            if status is not None:
                ids[status[0]] = m
                leader = status[1]
        return ids.get(leader) if leader is not None else None

    def holding_client(self, rng: random.Random) -> Optional[int]:
        holding = []
        for i, p in enumerate(self.clients):
            state = self.dir / f"client{i}.state"
            if p.poll() is None and state.exists() and state.read_bytes()[:1] == b"1":
                holding.append(i)
        return rng.choice(holding) if holding else None

    def inject(
        self, fault: str, rng: random.Random, busy: Callable[[str], bool]
    ) -> Optional[Fault]:
        """Applies `fault` to a target chosen by `rng`, unless a fault is on
        that target already (`busy`, asked before anything is done):
        (what, its heal)."""
        if fault == "client-stop":
            return self._stop_client(rng, busy)
        if fault in ("leader-kill", "member-stop"):
            return self._etcd_fault(fault, rng, busy)
        node = self.nodes[rng.randrange(len(self.nodes))]
        what = {
            "node-kill": f"node {node.index} killed",
            "node-stop": f"node {node.index} stopped",
            "node-isolate": f"node {node.index} cut off from its clients",
            "node-cut": f"node {node.index} cut off from etcd",
        }[fault]
        if busy(what):
            return None
        if fault == "node-kill":
            fixture._kill(node.proc)
            return what, lambda: self._restart_node(node)
        if fault == "node-stop":
            stop(node.proc, signal.SIGSTOP)
            return what, lambda: stop(node.proc, signal.SIGCONT)
        if fault == "node-isolate":
            front = self.fronts[node.index].proc
            stop(front, signal.SIGSTOP)
            return what, lambda: stop(front, signal.SIGCONT)
        for proxy in self.proxies[node.index]:
            stop(proxy.proc, signal.SIGSTOP)
        return what, lambda: self._thaw(node.index)

    def _stop_client(self, rng: random.Random, busy: Callable[[str], bool]) -> Optional[Fault]:
        i = self.holding_client(rng)
        if i is None or busy(f"client {i} stopped while holding"):
            return None
        stop(self.clients[i], signal.SIGSTOP)
        since = time.monotonic_ns()

        def heal() -> None:
            stop(self.clients[i], signal.SIGCONT)
            self.pauses.append((i, since, time.monotonic_ns()))

        return f"client {i} stopped while holding", heal

    def _etcd_fault(
        self, fault: str, rng: random.Random, busy: Callable[[str], bool]
    ) -> Optional[Fault]:
        if fault == "leader-kill":
            m = self.leader()
            if m is None or busy(f"etcd leader {m.name} killed"):
                return None
            fixture._kill(m.proc)
            return f"etcd leader {m.name} killed", lambda: self._restart_member(m)
        m = self.members[rng.randrange(3)]
        if busy(f"etcd member {m.name} stopped"):
            return None
        stop(m.proc, signal.SIGSTOP)
        return f"etcd member {m.name} stopped", lambda: stop(m.proc, signal.SIGCONT)

    def _restart_node(self, node: fixture.Node) -> None:
        """Starts a killed node again at its address, as a deployment would
        (clients know no other way to find it); on another port only if
        that one was taken meanwhile."""
        port = node.port
        self.spawn_node(node, port)
        try:
            self.await_node(node)
        except RuntimeError:
            # Elsewhere: its clients' proxy must lead there, and it must
            # advertise that proxy (the old one may lead to another node
            # now holding the old port).
            fixture._kill(self.fronts[node.index].proc)
            self.fronts[node.index] = Proxy("-")
            self.spawn_node(node)
            self.await_node(node)
            self.fronts[node.index].aim(node.addr)

    # ---------------------------------------------------------------- rolling

    def settled(self) -> bool:
        """Every node runs, and each live node's map covers every slot,
        agrees with the others' and gives every node a share."""
        if not all(n.alive() for n in self.nodes):
            return False
        try:
            maps = [fixture.cluster_slots(n.addr) for n in self.nodes]
        except (OSError, fixture.RespError):
            return False
        owners = {addr for _, _, addr in maps[0]}
        fronts = {self.fronts[n.index].addr for n in self.nodes}
        return all(m == maps[0] for m in maps) and fixture._covers_all(maps[0]) and owners == fronts

    def keys_of(self, node: fixture.Node) -> List[str]:
        """The clients' keys whose slots `node` serves now (as its own map says)."""
        try:
            ranges = fixture.cluster_slots(node.addr)
        except (OSError, fixture.RespError):
            return []
        front = self.fronts[node.index].addr
        keys = [f"k{i}" for i in range(self.args.keys)]
        return [
            k for k in keys if any(a <= fixture.slot(k) <= b and o == front for a, b, o in ranges)
        ]

    def held_keys(self) -> List[str]:
        """The keys the clients' bodies run on now (their state files)."""
        held = []
        for i in range(len(self.clients)):
            try:
                said = (self.dir / f"client{i}.state").read_bytes().decode(errors="replace")
            except OSError:
                continue
            if said[:1] == "1":
                held.append(said[1:].strip())
        return held

    def await_held(self, keys: List[str], seconds: float = 2.0) -> None:
        """Until a client holds one of `keys` (at most `seconds`), so a
        SIGTERM finds a hold to hand over."""
        until = time.monotonic() + seconds
        while keys and time.monotonic() < until:
            if set(keys) & set(self.held_keys()):
                return
            time.sleep(0.005)

    def rolling_restart(self, rounds: int) -> List[nemesis_check.Handover]:
        """Each node in turn: SIGTERM (once a client holds one of its
        keys, or 2 s passed), awaited until it exits, started
        again on its port, then until the map is settled again (and a
        second more, so the clients hold keys of the new map)."""
        handovers = []
        for _ in range(rounds):
            for node in self.nodes:
                keys = self.keys_of(node)
                self.await_held(keys)
                at = time.monotonic_ns()
                stop(node.proc, signal.SIGTERM)
                handovers.append(nemesis_check.Handover(node.index, at, keys))
                assert node.proc is not None
                try:
                    node.proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    raise TimeoutError(
                        f"node {node.index} did not exit within 30 s of its SIGTERM"
                    ) from None
                left = (time.monotonic_ns() - at) / 1e6
                say(f"rolling: node {node.index} (keys {','.join(keys) or '-'}) "
                    f"SIGTERM'd, exited {node.proc.returncode} after {left:.0f} ms")  # fmt: skip
                self._restart_node(node)
                self._await(self.settled, f"node {node.index} back with a share")
                time.sleep(1.0)
        return handovers

    def _restart_member(self, m: Member) -> None:
        initial = ",".join(f"{x.name}=http://127.0.0.1:{x.peer}" for x in self.members)
        m.start(initial, "existing")

    def _thaw(self, index: int) -> None:
        for proxy in self.proxies[index]:
            stop(proxy.proc, signal.SIGCONT)


def target_of(what: str) -> str:
    """What a fault's description acts on, one fault at a time each: a
    process (`node 0`), or one of a node's links (`node 0 cut off from
    etcd`), so a node may be cut from etcd and from its clients at once."""
    return what if " cut off " in what else " ".join(what.split()[:2])


def run_faults(world: World, rng: random.Random, faults: List[str], seconds: float) -> int:
    """Injects faults until `seconds` pass, overlapping (at most two at a
    time, one per target), then heals them all; answers how many."""
    active: List[Tuple[float, str, Callable[[], None]]] = []
    until = time.monotonic() + seconds
    injected = 0
    while time.monotonic() < until:
        time.sleep(rng.uniform(0.3, 1.5))
        for entry in [a for a in active if a[0] <= time.monotonic()]:
            active.remove(entry)
            entry[2]()
            say(f"healed: {entry[1]}")
        if len(active) >= 2:
            continue

        def busy(what: str) -> bool:
            return any(target_of(a[1]) == target_of(what) for a in active)

        applied = world.inject(rng.choice(faults), rng, busy)
        if applied is None:
            continue
        what, heal = applied
        injected += 1
        say(f"fault: {what}")
        active.append((time.monotonic() + rng.uniform(0.5, 4.0), what, heal))
    for _, what, heal in active:
        heal()
        say(f"healed: {what}")
    return injected


def verdict(
    world: World,
    healed: int,
    handovers: List[nemesis_check.Handover],
    phase: Tuple[int, int],
) -> nemesis_check.Verdict:
    records = nemesis_check.read_records(
        world.dir / f"client{i}.jsonl" for i in range(world.args.clients)
    )
    finals = nemesis_check.read_records([world.dir / "final.jsonl"])
    hold_bound = (WAIT_MS + MAX_TTL_MS) * 1_000_000 + 5 * NS
    recovery_bound = (ETCD_TTL_S * 1000 + MAX_TTL_MS) * 1_000_000 + 5 * NS
    return nemesis_check.check(
        records, finals, world.pauses, hold_bound, healed, recovery_bound,
        handovers, phase, world.args.expect_handover,
    )  # fmt: skip


def run(args: argparse.Namespace) -> int:
    seed = args.seed if args.seed is not None else random.randrange(1 << 32)
    say(f"seed {seed} (replay: --seed {seed}); {args.seconds:g}s, faults {','.join(args.faults)}")
    rng = random.Random(seed)
    world = World(args)
    try:
        try:
            world.start()
        except (TimeoutError, RuntimeError, OSError) as e:
            say(f"could not set the cluster up: {e}")
            return 2
        world.start_clients(seed)
        injected = run_faults(world, rng, args.faults, args.seconds)
        handovers: List[nemesis_check.Handover] = []
        phase = (0, -1)
        trouble = ""
        if args.rolling:
            began = time.monotonic()
            try:
                # The faults' aftermath first (etcd ttl + max ttl at most):
                # the rolling phase is a fault of its own.
                world._await(world.settled, "every node serving after the faults")
                time.sleep(ETCD_TTL_S + MAX_TTL_MS / 1000)
                phase = (time.monotonic_ns(), -1)
                handovers = world.rolling_restart(args.rolling)
            except (TimeoutError, RuntimeError) as e:
                trouble = f"rolling restart: {e}"
            phase = (phase[0], time.monotonic_ns())
            say(f"rolling restart: {time.monotonic() - began:.1f}s")
            world.stop_file.touch()
        healed = time.monotonic_ns()
        for p in world.clients:
            p.wait(timeout=WAIT_MS / 1000 + 30)
        final = world.client(99, seed, ["--final", "--wait-ms", "20000"])
        final_log = world.dir / "client99.jsonl"
        final.wait(timeout=len(range(args.keys)) * 25 + 10)
        os.replace(final_log, world.dir / "final.jsonl")
        v = verdict(world, healed, handovers, phase)
        if trouble:
            v.violations.append(trouble)
        say(f"{injected} faults; {v.summary()}")
        if args.keep:
            say(f"logs kept in {world.dir}")
    finally:
        world.close()
    failed = not v.ok
    if args.expect_violation:
        say("the checker caught it, as it must" if failed else "the checker missed the mutant")
        return 0 if failed else 1
    return 1 if failed else 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seconds", type=float, default=float(os.environ.get("NEMESIS_SECONDS", 30)))
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--clients", type=int, default=4)
    p.add_argument("--keys", type=int, default=4)
    p.add_argument("--faults", default="all")
    p.add_argument("--clock-rate", type=float, default=1.0)
    p.add_argument("--never-looks", action="store_true")
    p.add_argument("--expect-violation", action="store_true")
    p.add_argument("--keep", default="")
    p.add_argument("--binary", default=None)
    p.add_argument("--rolling", type=int, default=1, help="rolling restarts after the faults")
    p.add_argument(
        "--expect-handover",
        action="store_true",
        help="a hold held across a SIGTERM's hand-over must not be lost",
    )
    args = p.parse_args()
    args.faults = FAULTS if args.faults == "all" else args.faults.split(",")
    unknown = set(args.faults) - set(FAULTS)
    if unknown:
        p.error(f"unknown faults {sorted(unknown)}; known: {', '.join(FAULTS)}")
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
