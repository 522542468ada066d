#!/usr/bin/env python3
"""The clock nemesis aimed: does a node whose clock runs slow let two
clients believe they hold one key?

    python3 clock_split.py [--clock-rate 0.5] [--trials 5] [--isolate-after 2.1]
                           [--binary PATH]

On the nemesis suite's cluster (nemesis.py: three etcd members, three
nodes, node 0's clock at the given rate), each trial: client A holds a key
of node 0 with a 2 s ttl, looking at its lease every 20 ms; node 0 is cut
off from etcd; `--isolate-after` seconds later (2.1) it is cut off from
its clients too (so, if it has not stopped by then, the
`lost` push it sends when it stops never arrives, and A judges by its own
clock alone); meanwhile client B asks the other nodes for the key until
one grants it. The trial says how long A still believed after B's grant
(negative: it had stopped believing first). The cluster's argument allows
a node's clock to run 20% slow; past that it promises nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
import time
from pathlib import Path
from typing import List, Optional

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "python" / "src"))
import cluster as fixture  # noqa: E402
import holdline_client  # noqa: E402
import nemesis  # noqa: E402


def key_of_node_0(world: nemesis.World, trial: int) -> str:
    front = world.fronts[0].addr
    ranges = fixture.cluster_slots(world.nodes[1].addr)
    for i in range(100000):
        key = f"split-{trial}-{i}"
        s = fixture.slot(key)
        if any(first <= s <= last and where == front for first, last, where in ranges):
            return key
    raise RuntimeError("node 0 owns no slot")


def grant_elsewhere(world: nemesis.World, key: str, limit: float) -> Optional[float]:
    """HOLD at nodes 1 and 2 (never node 0: it is cut off) until granted."""
    others = {world.fronts[i].addr: world.nodes[i].addr for i in (1, 2)}
    addr = world.nodes[1].addr
    while time.monotonic() < limit:
        try:
            reply: object = fixture.command(addr, "HOLD", "split", key, "WAIT", 100, "TTL", 2000)
        except OSError as e:
            reply = e
        if isinstance(reply, list):
            return time.monotonic()
        text = str(reply)
        if text.startswith("MOVED") and text.split()[2] in others:
            addr = others[text.split()[2]]
        time.sleep(0.005)
    return None


async def trial(world: nemesis.World, n: int, isolate_after: float) -> float:
    """One trial: how long A believed after B's grant (seconds)."""
    key = key_of_node_0(world, n)
    addrs = world.addresses()
    loop = asyncio.get_running_loop()
    believed = 0.0
    async with holdline_client.connect(addrs) as store:
        lock = store.lock("split", ttl="2000ms")
        try:
            async with lock.hold(key, wait="5s") as lease:
                await asyncio.sleep(0.5)
                for proxy in world.proxies[0]:
                    nemesis.stop(proxy.proc, signal.SIGSTOP)
                cut = time.monotonic()
                b = loop.run_in_executor(None, grant_elsewhere, world, key, cut + 20)
                while time.monotonic() < cut + 8:
                    if time.monotonic() >= cut + isolate_after:
                        nemesis.stop(world.fronts[0].proc, signal.SIGSTOP)
                    looked = time.monotonic()
                    if lease.lost:
                        break
                    believed = looked
                    await asyncio.sleep(0.02)
        except holdline_client.Lost:
            pass  # it was: what counts is when A stopped believing
        granted = await b
    for proxy in world.proxies[0] + [world.fronts[0]]:
        nemesis.stop(proxy.proc, signal.SIGCONT)
    if granted is None:
        raise RuntimeError("B was never granted the key")
    a_until, b_at = believed - cut, granted - cut
    print(f"  after the cut: A believed until {a_until:.2f}s, B granted at {b_at:.2f}s")
    return believed - granted


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--clock-rate", type=float, default=0.5)
    p.add_argument("--trials", type=int, default=5)
    p.add_argument("--binary", default=None)
    p.add_argument("--isolate-after", type=float, default=2.1)
    args = p.parse_args()
    world_args = argparse.Namespace(
        binary=args.binary, keep="", clock_rate=args.clock_rate, clients=0,
        keys=1, never_looks=False, seconds=0,
    )  # fmt: skip
    world = nemesis.World(world_args)
    overlaps: List[float] = []
    try:
        world.start()
        for n in range(args.trials):
            overlap = asyncio.run(trial(world, n, args.isolate_after))
            overlaps.append(overlap)
            print(f"clock {args.clock_rate}x trial {n}: A believed {overlap * 1000:+.0f} ms "
                  "after B's grant", flush=True)  # fmt: skip
            world._await(world.covered, "every slot served again")
            time.sleep(3)
    finally:
        world.close()
    both = sum(1 for o in overlaps if o > 0)
    print(f"clock {args.clock_rate}x: two believers in {both} of {len(overlaps)} trials")
    return 0


if __name__ == "__main__":
    sys.exit(main())
