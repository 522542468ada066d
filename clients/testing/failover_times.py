#!/usr/bin/env python3
"""How long a cluster's keys go ungranted when their owner dies.

    python3 failover_times.py [--trials 20] [--binary PATH] [--etcd-ttl 2] [--max-ttl 2s]

On a cluster of three nodes (clients/testing/cluster.py), each trial picks
a node, a key it owns, and ends the node: `kill -9` (SIGKILL) or SIGTERM.
From that instant the other nodes are asked to HOLD the key (following
MOVED, asking again after CLUSTERDOWN or INUSE) until one grants it; the
time to that grant is the trial's. Then the node is started again and the
map left to settle. Prints p50 and max of each kind, in milliseconds, and
one JSON line with every trial.

After `kill -9` nothing may grant sooner than etcd ttl + max ttl after the
node's last keepalive; after SIGTERM the node hands its partitions over
and, since none of their keys is held, the next owner grants at once:
every moment past those is waste.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import sys
import time
from pathlib import Path
from typing import Dict, List, Optional

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cluster import Cluster, RespError, _kill, command  # noqa: E402

LOCK = "failover"


def grant_elsewhere(c: Cluster, dead: int, key: str, limit: float) -> Optional[float]:
    """Asks the live nodes for `key` until one grants it: the monotonic
    time of the grant's answer, or None past `limit`."""
    live = [n.addr for n in c.nodes if n.index != dead and n.alive()]
    addr = live[0]
    while time.monotonic() < limit:
        try:
            reply: object = command(addr, "HOLD", LOCK, key, "WAIT", 100, "TTL", 2000, timeout=2)
        except (OSError, RespError) as e:
            reply = e
        if isinstance(reply, list):
            return time.monotonic()  # its connection closed: the key let go
        text = str(reply)
        if text.startswith("MOVED"):
            addr = text.split()[2]
            continue
        if addr not in live:
            addr = live[0]
        time.sleep(0.005)
    return None


def trial(c: Cluster, i: int, sig: int) -> float:
    node = c.nodes[i]
    key = c.key_on(i, prefix=f"t{time.monotonic_ns()}-")
    started = time.monotonic()
    if sig == signal.SIGKILL:
        _kill(node.proc)
    else:
        assert node.proc is not None
        os.kill(node.proc.pid, sig)
        node.proc.wait(timeout=30)
    granted = grant_elsewhere(c, i, key, started + 60)
    if granted is None:
        raise TimeoutError(f"key {key} of node {i} not granted within 60 s")
    c.start(i)
    return (granted - started) * 1000


def report(name: str, ms: List[float]) -> str:
    return (
        f"{name}: p50 {statistics.median(ms):.0f} ms, max {max(ms):.0f} ms, "
        f"min {min(ms):.0f} ms over {len(ms)} trials"
    )


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--trials", type=int, default=20)
    p.add_argument("--binary", default=None)
    p.add_argument("--etcd-ttl", type=float, default=2)
    p.add_argument("--max-ttl", default="2s")
    args = p.parse_args()
    times: Dict[str, List[float]] = {"kill -9": [], "SIGTERM": []}
    with Cluster(3, 8, args.etcd_ttl, args.binary, max_ttl=args.max_ttl) as c:
        for n in range(args.trials):
            times["kill -9"].append(trial(c, n % 3, signal.SIGKILL))
            times["SIGTERM"].append(trial(c, n % 3, signal.SIGTERM))
    for name, ms in times.items():
        print(report(name, ms))
    print(json.dumps({k: [round(v) for v in ms] for k, ms in times.items()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
