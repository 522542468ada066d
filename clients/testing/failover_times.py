#!/usr/bin/env python3
"""How long a cluster's keys go ungranted when their owner dies, and how
many leases a rolling restart ends.

    python3 failover_times.py [--trials 20] [--binary PATH] [--etcd-ttl 2] [--max-ttl 2s]
    python3 failover_times.py --rolling 3 [--holders 8]

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

`--rolling N` makes N rolling restarts instead: each node in turn gets
SIGTERM and is started again, while `--holders` connections hold keys it
owns (TTL 30 s, longer than a restart; the cluster's max ttl is then a
minute). It counts the holds that did not
survive (their connection closed, or RENEW answered other than OK once
the cluster settled) and, for a fresh key of the node, the longest time
from the signal to a grant elsewhere.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import statistics
import sys
import time
from pathlib import Path
from typing import Dict, List, Optional, Tuple

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cluster import Cluster, RespError, _kill, _read_reply, command  # noqa: E402

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


class Holder:
    """A connection holding one key, left open across the restart."""

    def __init__(self, addr: str, key: str) -> None:
        host, _, port = addr.rpartition(":")
        self.sock = socket.create_connection((host.strip("[]"), int(port)), timeout=5)
        self.file = self.sock.makefile("rb")
        reply = self.send("HOLD", LOCK, key, "WAIT", 5000, "TTL", 30000)
        if not isinstance(reply, list):
            raise RuntimeError(f"HOLD {key}: {reply!r}")
        self.lease = int(reply[0])

    def send(self, *args: object) -> object:
        parts = [str(a).encode() for a in args]
        frame = b"*%d\r\n" % len(parts) + b"".join(b"$%d\r\n%s\r\n" % (len(p), p) for p in parts)
        self.sock.sendall(frame)
        return _read_reply(self.file)

    def kept(self) -> bool:
        """Whether the lease is still this connection's: RENEW answers OK."""
        try:
            return self.send("RENEW", self.lease) == "OK"
        except (OSError, ConnectionError):
            return False
        finally:
            self.sock.close()


def rolling_restart(c: Cluster, holders: int) -> Tuple[int, int, float]:
    """One rolling restart: holds made, holds lost, and the longest time
    from a node's SIGTERM to a grant of one of its keys elsewhere (ms)."""
    made = lost = 0
    longest = 0.0
    for i, node in enumerate(c.nodes):
        held = [
            Holder(node.addr, c.key_on(i, prefix=f"r{time.monotonic_ns()}-{h}-"))
            for h in range(holders)
        ]
        fresh = c.key_on(i, prefix=f"f{time.monotonic_ns()}-")
        started = time.monotonic()
        assert node.proc is not None
        os.kill(node.proc.pid, signal.SIGTERM)
        granted = grant_elsewhere(c, i, fresh, started + 60)
        if granted is None:
            raise TimeoutError(f"key {fresh} of node {i} not granted within 60 s")
        longest = max(longest, (granted - started) * 1000)
        node.proc.wait(timeout=60)
        c.start(i)
        made += len(held)
        lost += sum(not h.kept() for h in held)
    return made, lost, longest


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
    p.add_argument("--rolling", type=int, default=0, help="rolling restarts to make instead")
    p.add_argument("--holders", type=int, default=8, help="holds on each node (--rolling)")
    args = p.parse_args()
    if args.rolling:
        # The holds' 30 s ttl must be allowed: a max ttl of a minute.
        with Cluster(3, 8, args.etcd_ttl, args.binary, max_ttl="60s") as c:
            runs = [rolling_restart(c, args.holders) for _ in range(args.rolling)]
        for n, (made, lost, longest) in enumerate(runs):
            print(
                f"rolling restart {n + 1}: {lost} of {made} holds lost, "
                f"longest from SIGTERM to a grant elsewhere {longest:.0f} ms"
            )
        print(json.dumps({"rolling": [list(r) for r in runs]}))
        return 0
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
